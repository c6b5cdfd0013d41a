/*
 * Attachments: a multipart/form-data upload of one file field named
 * "attachment", stored with its SHA-256 in the database row, and its
 * metadata (never its bytes) read back.
 */
#include <sys/types.h>

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/string.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sha2.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/util.h"
#include "lib/utf8.h"
#include "gateway.h"
#include "api.h"

#define ATTACH_FIELD		"attachment"
#define ATTACH_DEFAULT_NAME	"upload.bin"
#define ATTACH_TYPE_MAX		255

#define ATTACH_COLS	"id, filename, content_type, byte_size, checksum_sha256"

struct upload {
	int		 seen;
	const char	*data;
	size_t		 len;
	char		*filename;
	char		*content_type;
};

static int	 upload_part(const struct mp_part *, void *);
static int	 upload_content_type(struct upload *);
static void	 upload_insert(struct evhttp_request *, struct upload *,
		    const char *);
static void	 attachment_reply(PGresult *, const struct db_err *, void *);
static void	 attachment_created(PGresult *, const struct db_err *, void *);
static json_t	*attachment_json(PGresult *);

static int
upload_part(const struct mp_part *p, void *arg)
{
	struct upload	*u = arg;

	if (strcmp(p->name, ATTACH_FIELD) != 0)
		return (0);
	if (u->seen++)
		return (1);
	u->data = p->data;
	u->len = p->len;
	if (p->filename != NULL)
		u->filename = xstrdup(p->filename);
	if (p->content_type != NULL && *p->content_type != '\0')
		u->content_type = xstrdup(p->content_type);
	return (0);
}

/*
 * The name a client gave, as stored: its last path component, without
 * control characters or surrounding white space, at most API_FILENAME_MAX
 * characters.  -1 when nothing usable is left.
 */
int
api_filename_sanitize(const char *in, char *out, size_t outsz)
{
	const char	*base, *s;
	char		*t;
	size_t		 n = 0;

	if (!utf8_valid(in, strlen(in)))
		return (-1);
	base = in;
	for (s = in; *s != '\0'; s++)
		if (*s == '/' || *s == '\\')
			base = s + 1;
	t = xmalloc(strlen(base) + 1);
	for (s = base; *s != '\0'; s++)
		if ((unsigned char)*s >= 0x20 && *s != 0x7f)
			t[n++] = *s;
	t[n] = '\0';
	s = api_strip(t);
	free(t);
	n = utf8_prefix(s, strlen(s), API_FILENAME_MAX, NULL);
	if (n == 0 || n >= outsz || strcmp(s, ".") == 0 ||
	    strcmp(s, "..") == 0) {
		free((char *)s);
		return (-1);
	}
	memcpy(out, s, n);
	out[n] = '\0';
	free((char *)s);
	return (0);
}

/* A part's Content-Type must fit its column and be printable ASCII. */
static int
upload_content_type(struct upload *u)
{
	const char	*s;

	if (u->content_type == NULL)
		return (0);
	if (strlen(u->content_type) > ATTACH_TYPE_MAX)
		return (-1);
	for (s = u->content_type; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return (-1);
	return (0);
}

void
api_attachments_upload(struct evhttp_request *req, const char *unused)
{
	struct evbuffer	*buf = evhttp_request_get_input_buffer(req);
	struct upload	 u;
	char		 boundary[MP_BOUNDARY_MAX + 1];
	char		 name[API_FILENAME_BUF];
	const char	*ct, *why = NULL;
	size_t		 len = evbuffer_get_length(buf);
	int		 rc;

	(void)unused;
	memset(&u, 0, sizeof(u));
	ct = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Content-Type");
	if (mp_boundary(ct, boundary, sizeof(boundary)) == -1)
		why = "not multipart/form-data";
	else if ((rc = mp_parse((const char *)evbuffer_pullup(buf, -1), len,
	    boundary, upload_part, &u, &why)) != 0)
		why = rc > 0 ? "more than one attachment part" : why;
	else if (!u.seen)
		why = "no attachment part";
	else if ((int64_t)u.len > gw->env->conf->max_upload_bytes) {
		http_error(req, 413, "request_too_large",
		    "Attachment is too large");
		goto done;
	} else if (u.filename == NULL || *u.filename == '\0')
		strlcpy(name, ATTACH_DEFAULT_NAME, sizeof(name));
	else if (api_filename_sanitize(u.filename, name, sizeof(name)) == -1)
		why = "bad filename";
	if (why == NULL && upload_content_type(&u) == -1)
		why = "bad content type";
	if (why != NULL) {
		log_debug("attachment upload refused: %s", why);
		http_error(req, 400, "attachment_invalid",
		    "Attachment upload is invalid");
		goto done;
	}
	upload_insert(req, &u, name);
 done:
	free(u.filename);
	free(u.content_type);
}

static void
upload_insert(struct evhttp_request *req, struct upload *u, const char *name)
{
	static const char	 hex[] = "0123456789abcdef";
	const unsigned char	*d = (const unsigned char *)u->data;
	const char		*p[6];
	char			 sha[SHA256_DIGEST_STRING_LENGTH];
	char			 size[32], *content;
	size_t			 i;

	SHA256Data(d, u->len, sha);
	snprintf(size, sizeof(size), "%zu", u->len);
	/* bytea in its text (hex) form: the async layer sends text. */
	content = xmalloc(2 + u->len * 2 + 1);
	content[0] = '\\';
	content[1] = 'x';
	for (i = 0; i < u->len; i++) {
		content[2 + i * 2] = hex[d[i] >> 4];
		content[2 + i * 2 + 1] = hex[d[i] & 0xf];
	}
	content[2 + u->len * 2] = '\0';
	p[0] = API_WORKSPACE_ID;
	p[1] = name;
	p[2] = u->content_type;
	p[3] = size;
	p[4] = sha;
	p[5] = content;
	db_async_sql(gw->db,
	    "INSERT INTO fleet_attachments (id, workspace_id, filename, "
	    " content_type, byte_size, checksum_sha256, content) "
	    "VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6::bytea) "
	    "RETURNING " ATTACH_COLS,
	    6, p, API_UPLOAD_TIMEOUT_MS, attachment_created, req);
	free(content);
}

static json_t *
attachment_json(PGresult *res)
{
	json_t	*j;

	j = json_object();
	json_object_set_new(j, "id", api_col_str(res, 0, 0));
	json_object_set_new(j, "filename", api_col_str(res, 0, 1));
	json_object_set_new(j, "content_type", api_col_str(res, 0, 2));
	json_object_set_new(j, "byte_size", api_col_int(res, 0, 3));
	json_object_set_new(j, "checksum_sha256", api_col_str(res, 0, 4));
	return (j);
}

static void
attachment_created(PGresult *res, const struct db_err *e, void *arg)
{
	struct evhttp_request	*req = arg;

	if (res == NULL || PQntuples(res) != 1) {
		api_db_error(req, res == NULL ? e : NULL, "attachment_unavailable",
		    "Attachment storage is unavailable");
		return;
	}
	api_reply(req, 201, attachment_json(res));
}

static void
attachment_reply(PGresult *res, const struct db_err *e, void *arg)
{
	struct evhttp_request	*req = arg;

	if (res == NULL)
		api_db_error(req, e, "attachment_unavailable",
		    "Attachment storage is unavailable");
	else if (PQntuples(res) == 0)
		http_error(req, 404, "attachment_not_found",
		    "Attachment not found");
	else
		api_reply(req, 200, attachment_json(res));
}

void
api_attachments_get(struct evhttp_request *req, const char *id)
{
	const char	*p[2] = { id, API_WORKSPACE_ID };

	db_async_sql(gw->db,
	    "SELECT " ATTACH_COLS " FROM fleet_attachments "
	    "WHERE id = $1 AND workspace_id = $2",
	    2, p, API_DB_TIMEOUT_MS, attachment_reply, req);
}
