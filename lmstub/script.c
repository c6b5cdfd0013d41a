/*
 * The script: JSON Lines read and checked once, at startup, where any
 * problem is fatal; and the entry that answers a request.
 */

#include <sys/types.h>

#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "lmstub.h"

enum key_id {
	K_CONTENT, K_MATCH, K_MODEL, K_STATUS, K_RETRY_AFTER, K_DELAY_MS,
	K_INTERVAL_MS, K_CHUNK_CHARS, K_CUT_AFTER_CHARS, K_REPEAT,
	K_ERROR_TYPE, K_ERROR_CODE, K_HEADERS
};

static const struct {
	const char	*name;
	enum key_id	 id;
	const char	*what;
} script_keys[] = {
	{ "chunk_chars",	K_CHUNK_CHARS,	"an integer from 1 to 1048576" },
	{ "content",		K_CONTENT,	"a string" },
	{ "cut_after_chars",	K_CUT_AFTER_CHARS, "an integer from 0" },
	{ "delay_ms",		K_DELAY_MS,	"an integer from 0 to 600000" },
	{ "error_code",		K_ERROR_CODE,	"a string or null" },
	{ "error_type",		K_ERROR_TYPE,	"a string" },
	{ "headers",		K_HEADERS,	"an object of at most 32 "
	    "header names with one-line string values, not Connection, "
	    "Content-Length or Transfer-Encoding" },
	{ "interval_ms",	K_INTERVAL_MS,	"an integer from 0 to 60000" },
	{ "match",		K_MATCH,	"a string" },
	{ "model",		K_MODEL,	"a string" },
	{ "repeat",		K_REPEAT,	"true or false" },
	{ "retry_after",	K_RETRY_AFTER,	"a number from 0 to 86400" },
	{ "status",		K_STATUS,	"200 or an integer from 400 to 599" },
};
static void	 script_entry(const char *, size_t, json_t *, struct entry *);
static int	 script_header_ok(json_t *);
static int	 json_int_in(json_t *, long long, long long, long long *);

/* Read the whole script, one entry per non-blank, non-comment line. */
void
script_load(const char *path)
{
	FILE		*fp;
	char		*buf, *line, *end, *nl;
	size_t		 len = 0, cap = 64 * 1024, n, lineno = 0, i;
	json_error_t	 je;
	json_t		*obj, *seen;

	if ((fp = fopen(path, "r")) == NULL)
		err(2, "%s", path);
	if ((buf = malloc(cap)) == NULL)
		err(1, NULL);
	while ((n = fread(buf + len, 1, cap - len, fp)) > 0) {
		len += n;
		if (len < cap)
			continue;
		if (cap > MAX_SCRIPT)
			break;
		cap = cap * 2 > MAX_SCRIPT ? MAX_SCRIPT + 1 : cap * 2;
		if ((buf = realloc(buf, cap)) == NULL)
			err(1, NULL);
	}
	if (ferror(fp))
		err(2, "%s", path);
	fclose(fp);
	if (len > MAX_SCRIPT)
		errx(2, "%s: larger than %d bytes", path, MAX_SCRIPT);

	env.models = json_array();
	for (line = buf, end = buf + len; line < end; line = nl + 1) {
		if ((nl = memchr(line, '\n', end - line)) == NULL)
			nl = end;
		lineno++;
		n = nl - line;
		if (lineno == 1 && n >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) {
			line += 3;
			n -= 3;
		}
		for (i = 0; i < n && strchr(" \t\r", line[i]) != NULL; i++)
			;
		if (i == n || line[i] == '#')
			continue;
		if (env.nentries == MAX_ENTRIES)
			errx(2, "%s:%zu: more than %d entries", path, lineno,
			    MAX_ENTRIES);
		obj = json_loadb(line, n, JSON_REJECT_DUPLICATES |
		    JSON_ALLOW_NUL, &je);
		if (obj == NULL)
			errx(2, "%s:%zu: %s", path, lineno, je.text);
		if (!json_is_object(obj))
			errx(2, "%s:%zu: not a JSON object", path, lineno);
		if ((env.entries = reallocarray(env.entries, env.nentries + 1,
		    sizeof(*env.entries))) == NULL)
			err(1, NULL);
		script_entry(path, lineno, obj, &env.entries[env.nentries]);
		env.nentries++;
	}
	free(buf);

	seen = json_object();
	for (i = 0; i < env.nentries; i++) {
		const char *m = env.entries[i].e_model;

		if (m == NULL || json_object_get(seen, m) != NULL)
			continue;
		json_object_set_new(seen, m, json_true());
		json_array_append_new(env.models, json_string(m));
	}
	json_decref(seen);
	if (json_array_size(env.models) == 0)
		json_array_append_new(env.models, json_string("lmstub"));
}

/* Check one script object and fill in e; any problem is fatal. */
static void
script_entry(const char *path, size_t lineno, json_t *obj, struct entry *e)
{
	const char	*key;
	json_t		*v;
	long long	 n;
	size_t		 i;

	memset(e, 0, sizeof(*e));
	e->e_obj = obj;
	e->e_line = lineno;
	e->e_status = 200;
	e->e_retry_ms = -1;
	e->e_chunk = DEFAULT_CHUNK;
	e->e_cut = -1;

	json_object_foreach(obj, key, v) {
		for (i = 0; i < sizeof(script_keys) / sizeof(script_keys[0]);
		    i++)
			if (strcmp(key, script_keys[i].name) == 0)
				break;
		if (i == sizeof(script_keys) / sizeof(script_keys[0]))
			errx(2, "%s:%zu: unknown key \"%.64s\"", path, lineno,
			    key);

		switch (script_keys[i].id) {
		case K_CONTENT:
			if (!json_is_string(v))
				goto bad;
			e->e_content = json_string_value(v);
			e->e_contentlen = json_string_length(v);
			break;
		case K_MATCH:
			if (!json_is_string(v))
				goto bad;
			e->e_match = json_string_value(v);
			e->e_matchlen = json_string_length(v);
			break;
		case K_MODEL:
			if (!json_is_string(v))
				goto bad;
			e->e_model = json_string_value(v);
			e->e_modellen = json_string_length(v);
			break;
		case K_ERROR_TYPE:
			if (!json_is_string(v))
				goto bad;
			e->e_errtype = json_string_value(v);
			break;
		case K_ERROR_CODE:
			if (!json_is_string(v) && !json_is_null(v))
				goto bad;
			e->e_errcode = v;
			break;
		case K_HEADERS:
			if (!json_is_object(v) || !script_header_ok(v))
				goto bad;
			e->e_headers = v;
			break;
		case K_REPEAT:
			if (!json_is_boolean(v))
				goto bad;
			e->e_repeat = json_is_true(v);
			break;
		case K_RETRY_AFTER:
			if (!json_is_number(v) || json_number_value(v) < 0 ||
			    json_number_value(v) > 86400)
				goto bad;
			e->e_retry_ms = json_number_value(v) * 1000 + 0.5;
			break;
		case K_STATUS:
			if (!json_int_in(v, 200, 599, &n) ||
			    (n != 200 && n < 400))
				goto bad;
			e->e_status = n;
			break;
		case K_DELAY_MS:
			if (!json_int_in(v, 0, 600000, &e->e_delay_ms))
				goto bad;
			break;
		case K_INTERVAL_MS:
			if (!json_int_in(v, 0, 60000, &e->e_interval_ms))
				goto bad;
			break;
		case K_CHUNK_CHARS:
			if (!json_int_in(v, 1, 1048576, &e->e_chunk))
				goto bad;
			break;
		case K_CUT_AFTER_CHARS:
			if (!json_int_in(v, 0, MAX_SCRIPT, &e->e_cut))
				goto bad;
			break;
		}
		continue;
 bad:
		errx(2, "%s:%zu: \"%s\" must be %s", path, lineno, key,
		    script_keys[i].what);
	}
	if (e->e_status == 200 && e->e_content == NULL)
		errx(2, "%s:%zu: \"content\" is required", path, lineno);
}

/*
 * Extra headers must be tokens with short, single-line values; framing
 * headers stay under libevent's control.
 */
static int
script_header_ok(json_t *hdrs)
{
	static const char *reserved[] = {
		"connection", "content-length", "transfer-encoding"
	};
	const char	*name, *val;
	json_t		*v;
	size_t		 i;

	if (json_object_size(hdrs) > MAX_XHEADERS)
		return (0);
	json_object_foreach(hdrs, name, v) {
		if (!json_is_string(v) || *name == '\0' || strlen(name) > 64)
			return (0);
		if (strspn(name, "!#$%&'*+-.^_`|~0123456789"
		    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") !=
		    strlen(name))
			return (0);
		for (i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
			if (strcasecmp(name, reserved[i]) == 0)
				return (0);
		val = json_string_value(v);
		if (json_string_length(v) > MAX_XHDRLEN ||
		    strlen(val) != json_string_length(v) ||
		    strpbrk(val, "\r\n") != NULL)
			return (0);
	}
	return (1);
}

static int
json_int_in(json_t *v, long long lo, long long hi, long long *out)
{
	if (!json_is_integer(v))
		return (0);
	*out = json_integer_value(v);
	return (*out >= lo && *out <= hi);
}

struct entry *
script_find(json_t *model, const char *text, size_t tlen)
{
	struct entry	*e;
	size_t		 i;

	for (i = 0; i < env.nentries; i++) {
		e = &env.entries[i];
		if (e->e_used)
			continue;
		if (e->e_model != NULL &&
		    (e->e_modellen != json_string_length(model) ||
		    memcmp(e->e_model, json_string_value(model),
		    e->e_modellen) != 0))
			continue;
		if (e->e_match != NULL && e->e_matchlen > 0 &&
		    memmem(text, tlen, e->e_match, e->e_matchlen) == NULL)
			continue;
		return (e);
	}
	return (NULL);
}
