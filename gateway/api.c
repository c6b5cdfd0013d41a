/*
 * The /api/ router and what its routes share: ids, request bodies, query
 * strings, replies.  Every reply carries an x-request-id (the client's,
 * when it sent a sane one) for correlation.
 */
#include <sys/types.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <bsd/string.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <uuid.h>

#include "lib/log.h"
#include "lib/util.h"
#include "gateway.h"
#include "api.h"

#define API_SEGS_MAX		4
#define API_REQID_MAX		128

typedef void	(*api_handler)(struct evhttp_request *, const char *);

struct api_route {
	const char		*segs[API_SEGS_MAX];	/* "*": an id */
	enum evhttp_cmd_type	 method;
	api_handler		 fn;
};

static void	 api_turns_post(struct evhttp_request *, const char *);

static const struct api_route api_routes[] = {
	{ { "sessions" }, EVHTTP_REQ_GET, api_sessions_list },
	{ { "sessions" }, EVHTTP_REQ_POST, api_sessions_create },
	{ { "sessions", "*" }, EVHTTP_REQ_GET, api_sessions_get },
	{ { "sessions", "*" }, EVHTTP_REQ_PATCH, api_sessions_patch },
	{ { "sessions", "*", "turns" }, EVHTTP_REQ_GET, api_turns_list },
	{ { "sessions", "*", "turns" }, EVHTTP_REQ_POST, api_turns_post },
	{ { "attachments" }, EVHTTP_REQ_POST, api_attachments_upload },
	{ { "attachments", "*" }, EVHTTP_REQ_GET, api_attachments_get },
	{ { "runs", "*", "cancellation" }, EVHTTP_REQ_PUT, api_runs_cancel },
};

struct api_seg {
	const char	*s;
	size_t		 len;
};

static int	 api_split(const char *, struct api_seg *);
static int	 api_match(const struct api_route *, const struct api_seg *,
		    int, const struct api_seg **);
static void	 api_request_id(struct evhttp_request *);

static void
api_turns_post(struct evhttp_request *req, const char *id)
{
	turns_post(req, id);
}

/* Split the path after /api/ into segments; -1 for an empty one. */
static int
api_split(const char *path, struct api_seg *segs)
{
	const char	*s = path, *slash;
	int		 n = 0;

	for (;;) {
		if (n == API_SEGS_MAX)
			return (-1);
		slash = strchr(s, '/');
		segs[n].s = s;
		segs[n].len = slash ? (size_t)(slash - s) : strlen(s);
		if (segs[n++].len == 0)
			return (-1);
		if (slash == NULL)
			return (n);
		s = slash + 1;
	}
}

static int
api_match(const struct api_route *r, const struct api_seg *segs, int n,
    const struct api_seg **id)
{
	int	 i;

	*id = NULL;
	for (i = 0; i < n; i++) {
		if (i == API_SEGS_MAX || r->segs[i] == NULL)
			return (0);
		if (strcmp(r->segs[i], "*") == 0)
			*id = &segs[i];
		else if (strlen(r->segs[i]) != segs[i].len ||
		    memcmp(r->segs[i], segs[i].s, segs[i].len) != 0)
			return (0);
	}
	return (n == API_SEGS_MAX || r->segs[n] == NULL);
}

static void
api_request_id(struct evhttp_request *req)
{
	const char	*in;
	char		 id[API_UUID_LEN + 1];
	uuid_t		 u;
	size_t		 i, n;

	in = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "x-request-id");
	if (in != NULL && (n = strlen(in)) > 0 && n <= API_REQID_MAX) {
		for (i = 0; i < n; i++)
			if (!isalnum((unsigned char)in[i]) &&
			    strchr("-_.:", in[i]) == NULL)
				break;
		if (i == n) {
			evhttp_add_header(evhttp_request_get_output_headers(
			    req), "x-request-id", in);
			return;
		}
	}
	uuid_generate_random(u);
	uuid_unparse_lower(u, id);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "x-request-id", id);
}

void
api_route(struct evhttp_request *req, const char *path)
{
	struct api_seg		 segs[API_SEGS_MAX];
	const struct api_seg	*idseg;
	const struct api_route	*r;
	enum evhttp_cmd_type	 method = evhttp_request_get_command(req);
	char			 id[API_UUID_LEN + 1];
	size_t			 i;
	int			 n, known = 0;

	api_request_id(req);
	if ((n = api_split(path + strlen("/api/"), segs)) == -1) {
		http_error(req, 404, "not_found", "Not found");
		return;
	}
	for (i = 0; i < sizeof(api_routes) / sizeof(api_routes[0]); i++) {
		r = &api_routes[i];
		if (!api_match(r, segs, n, &idseg))
			continue;
		known = 1;
		if (r->method != method)
			continue;
		if (idseg == NULL) {
			r->fn(req, NULL);
			return;
		}
		if (api_uuid(idseg->s, idseg->len, id) == -1) {
			api_invalid(req);
			return;
		}
		r->fn(req, id);
		return;
	}
	if (known)
		http_error(req, 405, "http_405", "Method not allowed");
	else
		http_error(req, 404, "not_found", "Not found");
}

/* A UUID in its 8-4-4-4-12 form, any case, into out in lower case. */
int
api_uuid(const char *s, size_t len, char *out)
{
	size_t	 i;

	if (len != API_UUID_LEN)
		return (-1);
	for (i = 0; i < len; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return (-1);
		} else if (!isxdigit((unsigned char)s[i]))
			return (-1);
		out[i] = tolower((unsigned char)s[i]);
	}
	out[len] = '\0';
	return (0);
}

/* A copy of s without leading and trailing white space. */
char *
api_strip(const char *s)
{
	size_t	 n;

	while (*s != '\0' && isspace((unsigned char)*s))
		s++;
	n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		n--;
	return (xstrndup(s, n));
}

/*
 * The request body as a JSON object, or NULL when it is not one (or has
 * another content type).  An empty body is {} when empty_ok.
 */
json_t *
api_body_json(struct evhttp_request *req, int empty_ok)
{
	struct evbuffer	*buf = evhttp_request_get_input_buffer(req);
	const char	*ct;
	const char	*semi;
	json_error_t	 err;
	json_t		*j;
	size_t		 len = evbuffer_get_length(buf), n;

	ct = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Content-Type");
	if (ct != NULL) {
		n = (semi = strchr(ct, ';')) ? (size_t)(semi - ct) : strlen(ct);
		while (n > 0 && ct[n - 1] == ' ')
			n--;
		if (!(n == 16 && strncasecmp(ct, "application/json", n) == 0) &&
		    !(n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0))
			return (NULL);
	}
	if (len == 0)
		return (empty_ok ? json_object() : NULL);
	j = json_loadb((const char *)evbuffer_pullup(buf, -1), len, 0, &err);
	if (j != NULL && !json_is_object(j)) {
		json_decref(j);
		j = NULL;
	}
	return (j);
}

/* The query string into q (empty when there is none); -1 if malformed. */
int
api_query(struct evhttp_request *req, struct evkeyvalq *q)
{
	const char	*qs;

	TAILQ_INIT(q);
	qs = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
	if (qs == NULL || *qs == '\0')
		return (0);
	return (evhttp_parse_query_str(qs, q) == 0 ? 0 : -1);
}

/* An integer parameter in [min, max], def when absent; -1 if invalid. */
int
api_query_int(struct evkeyvalq *q, const char *key, long def, long min,
    long max, long *out)
{
	const char	*v = evhttp_find_header(q, key);
	const char	*s;
	char		*end;
	long		 n;

	if (v == NULL) {
		*out = def;
		return (0);
	}
	s = (*v == '-' || *v == '+') ? v + 1 : v;
	if (*s == '\0' || strspn(s, "0123456789") != strlen(s))
		return (-1);
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0 || *end != '\0' || n < min || n > max)
		return (-1);
	*out = n;
	return (0);
}

/* Send j (stolen) with status code. */
void
api_reply(struct evhttp_request *req, int code, json_t *j)
{
	char	*s;

	if (j == NULL || (s = json_dumps(j, JSON_COMPACT)) == NULL)
		fatalx("%s: json", __func__);
	http_json(req, code, s);
	free(s);
	json_decref(j);
}

void
api_invalid(struct evhttp_request *req)
{
	http_error(req, 422, "validation_error", "Request validation failed.");
}

void
api_db_error(struct evhttp_request *req, const struct db_err *e,
    const char *code, const char *message)
{
	log_warnx("%s: database: %s", evhttp_request_get_uri(req),
	    e != NULL ? e->msg : "unexpected result");
	http_error(req, 503, code, message);
}

/* A text column as a JSON string (null for SQL NULL). */
json_t *
api_col_str(PGresult *res, int row, int col)
{
	json_t	*j;

	if (PQgetisnull(res, row, col))
		return (json_null());
	if ((j = json_string(PQgetvalue(res, row, col))) == NULL) {
		log_warnx("%s: column %s is not UTF-8", __func__,
		    PQfname(res, col));
		return (json_null());
	}
	return (j);
}

json_t *
api_col_int(PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return (json_null());
	return (json_integer(strtoll(PQgetvalue(res, row, col), NULL, 10)));
}
