/*
 * A strict multipart/form-data parser (RFC 7578, RFC 2046 §5.1) over a
 * body already in memory.  Delimiters are CRLF "--" boundary; header
 * lines end in CRLF, are not folded, and a part's header block is at most
 * MP_HEADERS_MAX bytes; every part needs a form-data Content-Disposition
 * with a name; nested multipart is refused.  Part data are not copied:
 * they point into the body.
 */
#include <sys/types.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <bsd/string.h>

#include "lib/util.h"
#include "api.h"

#define MP_PARAMS_MAX		8
#define MP_TOKEN_MAX		63

struct mp_param {
	char	 name[MP_TOKEN_MAX + 1];
	char	*value;
};

/* A header value: "type; name=value; name=\"value\"". */
struct mp_hval {
	char		 type[MP_TOKEN_MAX + 1];
	struct mp_param	 p[MP_PARAMS_MAX];
	int		 n;
};

static int	 is_tchar(int);
static int	 is_bchar(int);
static const char *skip_ows(const char *, const char *);
static const char *parse_token(const char *, const char *, char *, size_t);
static const char *parse_value(const char *, const char *, char **);
static int	 hval_parse(const char *, const char *, int, struct mp_hval *);
static void	 hval_free(struct mp_hval *);
static const char *hval_get(const struct mp_hval *, const char *);
static int	 part_headers(const char *, const char *, struct mp_part *,
		    const char **);
static int	 part_disposition(const char *, const char *,
		    struct mp_part *);
static int	 part_content_type(const char *, const char *,
		    struct mp_part *);
static void	 part_clear(struct mp_part *);

/* RFC 9110 tchar. */
static int
is_tchar(int c)
{
	return (isalnum(c) || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c)));
}

/* RFC 2046 bcharsnospace. */
static int
is_bchar(int c)
{
	return (isalnum(c) || (c != '\0' && strchr("'()+_,-./:=?", c)));
}

static const char *
skip_ows(const char *s, const char *end)
{
	while (s < end && (*s == ' ' || *s == '\t'))
		s++;
	return (s);
}

static const char *
parse_token(const char *s, const char *end, char *out, size_t outsz)
{
	size_t	 n = 0;

	while (s < end && is_tchar((unsigned char)*s)) {
		if (n + 1 >= outsz)
			return (NULL);
		out[n++] = *s++;
	}
	if (n == 0)
		return (NULL);
	out[n] = '\0';
	return (s);
}

/*
 * A token or a quoted-string.  In a quoted-string only \" and \\ are
 * escapes (as browsers and Python's unquote see them): a lone backslash
 * in a Windows path stays.
 */
static const char *
parse_value(const char *s, const char *end, char **out)
{
	char	*v;
	size_t	 n = 0;

	v = xmalloc(end - s + 1);
	if (s < end && *s == '"') {
		for (s++; s < end && *s != '"'; s++) {
			if (*s == '\\' && s + 1 < end &&
			    (s[1] == '"' || s[1] == '\\'))
				s++;
			v[n++] = *s;
		}
		if (s == end) {
			free(v);
			return (NULL);
		}
		s++;
	} else {
		while (s < end && is_tchar((unsigned char)*s))
			v[n++] = *s++;
		if (n == 0) {
			free(v);
			return (NULL);
		}
	}
	v[n] = '\0';
	*out = v;
	return (s);
}

/* Parse [s, end); with slash, the type is "type/subtype". */
static int
hval_parse(const char *s, const char *end, int slash, struct mp_hval *h)
{
	char	 sub[MP_TOKEN_MAX + 1];
	int	 i;

	memset(h, 0, sizeof(*h));
	s = skip_ows(s, end);
	if ((s = parse_token(s, end, h->type, sizeof(h->type))) == NULL)
		return (-1);
	if (slash) {
		if (s == end || *s++ != '/' ||
		    (s = parse_token(s, end, sub, sizeof(sub))) == NULL ||
		    strlcat(h->type, "/", sizeof(h->type)) >= sizeof(h->type) ||
		    strlcat(h->type, sub, sizeof(h->type)) >= sizeof(h->type))
			return (-1);
	}
	for (;;) {
		s = skip_ows(s, end);
		if (s == end)
			return (0);
		if (*s++ != ';' || h->n == MP_PARAMS_MAX)
			goto bad;
		s = skip_ows(s, end);
		if ((s = parse_token(s, end, h->p[h->n].name,
		    sizeof(h->p[h->n].name))) == NULL)
			goto bad;
		for (i = 0; i < h->n; i++)
			if (strcasecmp(h->p[i].name, h->p[h->n].name) == 0)
				goto bad;
		s = skip_ows(s, end);
		if (s == end || *s++ != '=')
			goto bad;
		s = skip_ows(s, end);
		if ((s = parse_value(s, end, &h->p[h->n].value)) == NULL)
			goto bad;
		h->n++;
	}
 bad:
	hval_free(h);
	return (-1);
}

static void
hval_free(struct mp_hval *h)
{
	int	 i;

	for (i = 0; i < h->n; i++)
		free(h->p[i].value);
	h->n = 0;
}

static const char *
hval_get(const struct mp_hval *h, const char *name)
{
	int	 i;

	for (i = 0; i < h->n; i++)
		if (strcasecmp(h->p[i].name, name) == 0)
			return (h->p[i].value);
	return (NULL);
}

/*
 * The boundary of a multipart/form-data Content-Type header value, into
 * out.  -1 when the type is another or the boundary is missing or not
 * RFC 2046's (1..70 bchars, not ending in a space).
 */
int
mp_boundary(const char *ctype, char *out, size_t outsz)
{
	struct mp_hval	 h;
	const char	*b;
	size_t		 i, n;
	int		 rc = -1;

	if (ctype == NULL || hval_parse(ctype, ctype + strlen(ctype), 1,
	    &h) == -1)
		return (-1);
	if (strcasecmp(h.type, "multipart/form-data") != 0 ||
	    (b = hval_get(&h, "boundary")) == NULL)
		goto done;
	n = strlen(b);
	if (n == 0 || n > MP_BOUNDARY_MAX || b[n - 1] == ' ' || n >= outsz)
		goto done;
	for (i = 0; i < n; i++)
		if (!is_bchar((unsigned char)b[i]) && b[i] != ' ')
			goto done;
	memcpy(out, b, n + 1);
	rc = 0;
 done:
	hval_free(&h);
	return (rc);
}

static int
part_disposition(const char *s, const char *end, struct mp_part *p)
{
	struct mp_hval	 h;
	const char	*v;
	int		 rc = -1;

	if (hval_parse(s, end, 0, &h) == -1)
		return (-1);
	if (strcasecmp(h.type, "form-data") != 0 ||
	    (v = hval_get(&h, "name")) == NULL ||
	    strlcpy(p->name, v, sizeof(p->name)) >= sizeof(p->name))
		goto done;
	if ((v = hval_get(&h, "filename")) != NULL)
		p->filename = xstrdup(v);
	rc = 0;
 done:
	hval_free(&h);
	return (rc);
}

static int
part_content_type(const char *s, const char *end, struct mp_part *p)
{
	struct mp_hval	 h;

	if (hval_parse(s, end, 1, &h) == -1)
		return (-1);
	hval_free(&h);
	if (strncasecmp(h.type, "multipart/", 10) == 0)
		return (-1);
	s = skip_ows(s, end);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	p->content_type = xstrndup(s, end - s);
	return (0);
}

/*
 * The header block at s, up to its empty line; *next is the first byte
 * of the part's data.
 */
static int
part_headers(const char *s, const char *end, struct mp_part *p,
    const char **next)
{
	const char	*start = s, *eol, *colon, *c;
	int		 seen_cd = 0, seen_ct = 0;

	if (end - s > MP_HEADERS_MAX + 2)
		end = s + MP_HEADERS_MAX + 2;
	for (;;) {
		if ((eol = memmem(s, end - s, "\r\n", 2)) == NULL)
			return (-1);
		if (eol == s)
			break;
		for (c = s; c < eol; c++)
			if (((unsigned char)*c < 0x20 && *c != '\t') ||
			    *c == 0x7f)
				return (-1);
		if ((colon = memchr(s, ':', eol - s)) == NULL || colon == s)
			return (-1);
		for (c = s; c < colon; c++)
			if (!is_tchar((unsigned char)*c))
				return (-1);
		if ((size_t)(colon - s) == 19 &&
		    strncasecmp(s, "Content-Disposition", 19) == 0) {
			if (seen_cd++ || part_disposition(colon + 1, eol,
			    p) == -1)
				return (-1);
		} else if ((size_t)(colon - s) == 12 &&
		    strncasecmp(s, "Content-Type", 12) == 0) {
			if (seen_ct++ || part_content_type(colon + 1, eol,
			    p) == -1)
				return (-1);
		}
		s = eol + 2;
	}
	if (!seen_cd || s - start > MP_HEADERS_MAX)
		return (-1);
	*next = s + 2;
	return (0);
}

static void
part_clear(struct mp_part *p)
{
	free(p->filename);
	free(p->content_type);
	memset(p, 0, sizeof(*p));
}

/*
 * Parse body, calling cb for each part in order.  0 when the body is
 * well formed to its close delimiter, -1 (and *errstr) when it is not,
 * or what cb returned when that was not 0 (which stops the parse).
 */
int
mp_parse(const char *body, size_t len, const char *boundary, mp_cb cb,
    void *arg, const char **errstr)
{
	struct mp_part	 part;
	char		 delim[2 + 2 + MP_BOUNDARY_MAX + 1];
	const char	*p, *end = body + len, *data, *q;
	size_t		 dlen;
	int		 nparts = 0, rc;

	memset(&part, 0, sizeof(part));
	if (snprintf(delim, sizeof(delim), "\r\n--%s", boundary) >=
	    (int)sizeof(delim) || boundary[0] == '\0') {
		*errstr = "bad boundary";
		return (-1);
	}
	dlen = strlen(delim);
	/* The first delimiter may open the body, or follow a preamble. */
	if (len >= dlen - 2 && memcmp(body, delim + 2, dlen - 2) == 0)
		p = body + dlen - 2;
	else if ((q = memmem(body, len, delim, dlen)) != NULL)
		p = q + dlen;
	else {
		*errstr = "no boundary delimiter";
		return (-1);
	}
	for (;;) {
		if (end - p >= 2 && p[0] == '-' && p[1] == '-')
			return (0);
		p = skip_ows(p, end);
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
			*errstr = "bad delimiter line";
			return (-1);
		}
		p += 2;
		if (++nparts > MP_PARTS_MAX) {
			*errstr = "too many parts";
			return (-1);
		}
		if (part_headers(p, end, &part, &data) == -1) {
			part_clear(&part);
			*errstr = "bad part headers";
			return (-1);
		}
		if ((q = memmem(data, end - data, delim, dlen)) == NULL) {
			part_clear(&part);
			*errstr = "unterminated part";
			return (-1);
		}
		part.data = data;
		part.len = q - data;
		rc = cb(&part, arg);
		part_clear(&part);
		if (rc != 0)
			return (rc);
		p = q + dlen;
	}
}
