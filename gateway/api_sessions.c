/*
 * Sessions: create, read, list, patch.  Every statement is scoped to the
 * one local Workspace, so a foreign Session is as missing as an unknown
 * one.
 */
#include <sys/types.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/util.h"
#include "lib/utf8.h"
#include "gateway.h"
#include "api.h"

#define SESSION_TITLE_MAX	255
#define SESSION_TITLE_DEFAULT	"New Session"
#define SESSION_SEARCH_MAX	1024
#define SESSION_LIMIT_DEFAULT	20
#define SESSION_LIMIT_MAX	100

#define SESSION_COLS_OF(t) t "id, " t "title, " t "status, " \
			t "checkpoint_version, " API_TS(t "created_at") ", " \
			API_TS(t "updated_at")
#define SESSION_COLS	SESSION_COLS_OF("")

struct session_page {
	struct evhttp_request	*req;
	long			 limit;
	long			 offset;
};

static json_t	*session_json(PGresult *, int, int);
static char	*session_title(const char *);
static void	 session_one(PGresult *, const struct db_err *, void *);
static void	 session_created(PGresult *, const struct db_err *, void *);
static void	 session_listed(PGresult *, const struct db_err *, void *);
static char	*like_escape(const char *);

/* SessionDetailResponse from columns col.. of SESSION_COLS. */
static json_t *
session_json(PGresult *res, int row, int col)
{
	json_t	*j;

	j = json_object();
	json_object_set_new(j, "id", api_col_str(res, row, col));
	json_object_set_new(j, "title", api_col_str(res, row, col + 1));
	json_object_set_new(j, "status", api_col_str(res, row, col + 2));
	json_object_set_new(j, "checkpoint_version",
	    api_col_int(res, row, col + 3));
	json_object_set_new(j, "created_at", api_col_str(res, row, col + 4));
	json_object_set_new(j, "updated_at", api_col_str(res, row, col + 5));
	return (j);
}

/* Stripped, at most SESSION_TITLE_MAX characters; NULL when blank. */
static char *
session_title(const char *in)
{
	char	*t;

	t = api_strip(in);
	if (*t == '\0') {
		free(t);
		return (NULL);
	}
	t[utf8_prefix(t, strlen(t), SESSION_TITLE_MAX, NULL)] = '\0';
	return (t);
}

static void
session_one(PGresult *res, const struct db_err *e, void *arg)
{
	struct evhttp_request	*req = arg;

	if (res == NULL)
		api_db_error(req, e, "service_unavailable",
		    "Service unavailable");
	else if (PQntuples(res) == 0)
		http_error(req, 404, "session_not_found", "Session not found");
	else
		api_reply(req, 200, session_json(res, 0, 0));
}

static void
session_created(PGresult *res, const struct db_err *e, void *arg)
{
	struct evhttp_request	*req = arg;

	if (res == NULL || PQntuples(res) != 1) {
		api_db_error(req, res == NULL ? e : NULL, "service_unavailable",
		    "Service unavailable");
		return;
	}
	api_reply(req, 201, session_json(res, 0, 0));
}

void
api_sessions_create(struct evhttp_request *req, const char *unused)
{
	const char	*p[2];
	json_t		*body, *t;
	char		*title = NULL;

	(void)unused;
	if ((body = api_body_json(req, 1)) == NULL) {
		api_invalid(req);
		return;
	}
	t = json_object_get(body, "title");
	if (t != NULL && !json_is_null(t) && !json_is_string(t)) {
		json_decref(body);
		api_invalid(req);
		return;
	}
	if (json_is_string(t))
		title = session_title(json_string_value(t));
	p[0] = API_WORKSPACE_ID;
	p[1] = title ? title : SESSION_TITLE_DEFAULT;
	db_async_sql(gw->db,
	    "INSERT INTO fleet_sessions (id, workspace_id, title) "
	    "VALUES (gen_random_uuid(), $1, $2) RETURNING " SESSION_COLS,
	    2, p, API_DB_TIMEOUT_MS, session_created, req);
	free(title);
	json_decref(body);
}

void
api_sessions_get(struct evhttp_request *req, const char *id)
{
	const char	*p[2] = { id, API_WORKSPACE_ID };

	db_async_sql(gw->db,
	    "SELECT " SESSION_COLS " FROM fleet_sessions "
	    "WHERE id = $1 AND workspace_id = $2",
	    2, p, API_DB_TIMEOUT_MS, session_one, req);
}

void
api_sessions_patch(struct evhttp_request *req, const char *id)
{
	const char	*p[4], *status = NULL;
	json_t		*body, *t, *s;
	char		*title = NULL;

	if ((body = api_body_json(req, 0)) == NULL) {
		api_invalid(req);
		return;
	}
	t = json_object_get(body, "title");
	s = json_object_get(body, "status");
	if ((t != NULL && !json_is_null(t) && !json_is_string(t)) ||
	    (s != NULL && !json_is_null(s) && !json_is_string(s)))
		api_invalid(req);
	else if (!json_is_string(t) && !json_is_string(s))
		http_error(req, 422, "session_no_fields",
		    "At least one of title and status is required");
	else if (json_is_string(t) &&
	    (title = session_title(json_string_value(t))) == NULL)
		http_error(req, 422, "session_title_empty",
		    "Session title must not be empty");
	else if (json_is_string(s) &&
	    strcmp(status = json_string_value(s), "active") != 0 &&
	    strcmp(status, "archived") != 0)
		http_error(req, 422, "session_status_invalid",
		    "Session status must be active or archived");
	else {
		p[0] = id;
		p[1] = API_WORKSPACE_ID;
		p[2] = title;
		p[3] = status;
		db_async_sql(gw->db,
		    "UPDATE fleet_sessions SET title = coalesce($3, title), "
		    " status = coalesce($4, status), updated_at = now() "
		    "WHERE id = $1 AND workspace_id = $2 "
		    "RETURNING " SESSION_COLS,
		    4, p, API_DB_TIMEOUT_MS, session_one, req);
	}
	free(title);
	json_decref(body);
}

/* s with LIKE's wildcards and escape character escaped. */
static char *
like_escape(const char *s)
{
	char	*out, *o;

	o = out = xmalloc(strlen(s) * 2 + 1);
	for (; *s != '\0'; s++) {
		if (*s == '%' || *s == '_' || *s == '\\')
			*o++ = '\\';
		*o++ = *s;
	}
	*o = '\0';
	return (out);
}

static void
session_listed(PGresult *res, const struct db_err *e, void *arg)
{
	struct session_page	*pg = arg;
	json_t			*j, *items;
	long long		 total;
	int			 i, n;

	if (res == NULL || PQntuples(res) < 1) {
		api_db_error(pg->req, res == NULL ? e : NULL, "service_unavailable",
		    "Service unavailable");
		free(pg);
		return;
	}
	items = json_array();
	for (i = 0, n = PQntuples(res); i < n; i++)
		if (!PQgetisnull(res, i, 1))
			json_array_append_new(items, session_json(res, i, 1));
	total = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	j = json_pack("{s:o, s:I, s:I, s:I, s:b}", "items", items,
	    "total", (json_int_t)total, "offset", (json_int_t)pg->offset,
	    "limit", (json_int_t)pg->limit,
	    "has_more", pg->offset + (long long)json_array_size(items) < total);
	api_reply(pg->req, 200, j);
	free(pg);
}

void
api_sessions_list(struct evhttp_request *req, const char *unused)
{
	struct evkeyvalq	 q;
	struct session_page	*pg;
	const char		*status, *search, *p[5];
	char			 limit[32], offset[32], *pattern = NULL;
	long			 lim, off;

	(void)unused;
	if (api_query(req, &q) == -1 ||
	    api_query_int(&q, "limit", SESSION_LIMIT_DEFAULT, 1,
	    SESSION_LIMIT_MAX, &lim) == -1 ||
	    api_query_int(&q, "offset", 0, 0, INT32_MAX, &off) == -1)
		goto invalid;
	status = evhttp_find_header(&q, "status");
	if (status != NULL && strcmp(status, "active") != 0 &&
	    strcmp(status, "archived") != 0)
		goto invalid;
	search = evhttp_find_header(&q, "search");
	if (search != NULL && (strlen(search) > SESSION_SEARCH_MAX ||
	    !utf8_valid(search, strlen(search))))
		goto invalid;
	if (search != NULL && *search != '\0')
		pattern = like_escape(search);

	pg = xcalloc(1, sizeof(*pg));
	pg->req = req;
	pg->limit = lim;
	pg->offset = off;
	snprintf(limit, sizeof(limit), "%ld", lim);
	snprintf(offset, sizeof(offset), "%ld", off);
	p[0] = API_WORKSPACE_ID;
	p[1] = status;
	p[2] = pattern;
	p[3] = limit;
	p[4] = offset;
	db_async_sql(gw->db,
	    "WITH f AS (SELECT * FROM fleet_sessions WHERE workspace_id = $1 "
	    "  AND ($2::text IS NULL OR status = $2) "
	    "  AND ($3::text IS NULL OR title ILIKE '%' || $3 || '%')) "
	    "SELECT c.total, " SESSION_COLS_OF("p.") " "
	    "FROM (SELECT count(*) AS total FROM f) c "
	    "LEFT JOIN LATERAL (SELECT * FROM f "
	    "  ORDER BY updated_at DESC, created_at DESC, id "
	    "  LIMIT $4::int OFFSET $5::int) p ON true "
	    "ORDER BY p.updated_at DESC, p.created_at DESC, p.id",
	    5, p, API_DB_TIMEOUT_MS, session_listed, pg);
	free(pattern);
	evhttp_clear_headers(&q);
	return;
 invalid:
	evhttp_clear_headers(&q);
	api_invalid(req);
}
