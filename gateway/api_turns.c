/*
 * GET /api/sessions/{id}/turns: committed history as UI messages.  A
 * user row becomes its text and selected attachments; an assistant row's
 * Committed Turn parts map one to one onto UI message parts.
 */
#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/util.h"
#include "gateway.h"
#include "api.h"

#define TURNS_LIMIT_DEFAULT	50
#define TURNS_LIMIT_MAX		200

struct turns_page {
	struct evhttp_request	*req;
	long			 limit;
};

/* A Committed Turn field renamed into a UI part's data. */
struct part_field {
	const char	*from;
	const char	*to;
	int		 required;
};

/* How one Committed Turn part type becomes a UI part. */
struct part_map {
	const char		*type;
	const char		*ui_type;	/* fields go under "data" */
	struct part_field	 fields[8];
};

static const struct part_map part_maps[] = {
	{ "step", "data-step", {
	    { "state", "state", 1 }, { "step", "step", 1 },
	    { "duration_ms", "durationMs", 0 } } },
	{ "code", "data-rlm-code", {
	    { "code", "code", 1 }, { "step", "step", 0 } } },
	{ "output", "data-rlm-output", {
	    { "output", "output", 1 }, { "step", "step", 0 } } },
	{ "usage", "data-usage", {
	    { "usage", "usage", 1 } } },
	{ "status", "data-status", {
	    { "phase", "phase", 1 }, { "status", "status", 1 },
	    { "message", "message", 0 } } },
	{ "attachment", "data-attachment", {
	    { "attachment_id", "attachmentId", 1 }, { "phase", "phase", 1 },
	    { "filename", "filename", 0 }, { "byte_size", "byteSize", 0 } } },
	{ "warning", "data-warning", {
	    { "message", "message", 1 }, { "code", "code", 0 } } },
	{ "artifact", "data-artifact", {
	    { "artifact_id", "artifactId", 1 }, { "kind", "kind", 1 },
	    { "title", "title", 0 }, { "media_type", "mediaType", 1 },
	    { "byte_size", "byteSize", 1 },
	    { "checksum_sha256", "checksumSha256", 1 } } },
	{ "skill", "data-skill", {
	    { "skill_id", "skillId", 1 }, { "name", "name", 1 },
	    { "phase", "phase", 1 }, { "version", "version", 0 },
	    { "trust", "trust", 0 }, { "affordances", "affordances", 0 } } },
	{ "structured_result", "data-structured-result", {
	    { "schema_id", "schemaId", 1 },
	    { "schema_version", "schemaVersion", 1 },
	    { "value", "value", 1 } } },
};

static json_t	*part_mapped(const struct part_map *, json_t *);
static json_t	*part_text(const char *, json_t *);
static json_t	*part_child_progress(json_t *);
static json_t	*part_tool_call(json_t *);
static json_t	*part_ui(json_t *);
static json_t	*turn_row(PGresult *, int);
static void	 turns_listed(PGresult *, const struct db_err *, void *);

static json_t *
part_mapped(const struct part_map *m, json_t *part)
{
	const struct part_field	*f;
	json_t			*data, *v;
	size_t			 i;

	data = json_object();
	for (i = 0; i < sizeof(m->fields) / sizeof(m->fields[0]); i++) {
		f = &m->fields[i];
		if (f->from == NULL)
			break;
		if ((v = json_object_get(part, f->from)) == NULL ||
		    json_is_null(v)) {
			if (f->required) {
				json_decref(data);
				return (NULL);
			}
			if (strcmp(f->to, "message") == 0)
				json_object_set_new(data, f->to, json_null());
			continue;
		}
		json_object_set(data, f->to, v);
	}
	return (json_pack("{s:s, s:o}", "type", m->ui_type, "data", data));
}

/* reasoning and text: {type, text, state:"done"}. */
static json_t *
part_text(const char *type, json_t *part)
{
	json_t	*t = json_object_get(part, "text");

	if (!json_is_string(t))
		return (NULL);
	return (json_pack("{s:s, s:O, s:s}", "type", type, "text", t,
	    "state", "done"));
}

/* Child progress keeps the reference's snake_case fields as they are. */
static json_t *
part_child_progress(json_t *part)
{
	json_t	*data;

	data = json_deep_copy(part);
	json_object_del(data, "type");
	return (json_pack("{s:s, s:o}", "type", "data-child-progress",
	    "data", data));
}

static json_t *
part_tool_call(json_t *part)
{
	json_t		*ui, *id, *name, *v;
	const char	*state;

	id = json_object_get(part, "tool_call_id");
	name = json_object_get(part, "tool_name");
	if (!json_is_string(id) || !json_is_string(name) ||
	    (state = json_string_value(json_object_get(part, "state"))) == NULL)
		return (NULL);
	ui = json_pack("{s:s, s:O, s:O, s:b}", "type", "dynamic-tool",
	    "toolName", name, "toolCallId", id, "providerExecuted", 1);
	v = json_object_get(part, "input");
	json_object_set_new(ui, "input", v ? json_incref(v) : json_null());
	if (strcmp(state, "completed") == 0) {
		json_object_set_new(ui, "state",
		    json_string("output-available"));
		v = json_object_get(part, "output");
		json_object_set_new(ui, "output", v ? json_incref(v) :
		    json_null());
	} else if (strcmp(state, "failed") == 0) {
		json_object_set_new(ui, "state", json_string("output-error"));
		v = json_object_get(part, "error");
		json_object_set_new(ui, "errorText", json_is_string(v) ?
		    json_incref(v) : json_string("Tool failed"));
	} else {
		json_decref(ui);
		return (NULL);
	}
	return (ui);
}

/* One Committed Turn part as a UI part; NULL to skip it. */
static json_t *
part_ui(json_t *part)
{
	const char	*type;
	size_t		 i;

	if (!json_is_object(part) ||
	    (type = json_string_value(json_object_get(part, "type"))) == NULL)
		return (NULL);
	if (strcmp(type, "reasoning") == 0)
		return (part_text("reasoning", part));
	if (strcmp(type, "text") == 0)
		return (part_text("text", part));
	if (strcmp(type, "child_progress") == 0)
		return (part_child_progress(part));
	if (strcmp(type, "tool_call") == 0)
		return (part_tool_call(part));
	for (i = 0; i < sizeof(part_maps) / sizeof(part_maps[0]); i++)
		if (strcmp(type, part_maps[i].type) == 0)
			return (part_mapped(&part_maps[i], part));
	return (NULL);
}

/* A user row: its text, then each selected attachment. */
json_t *
api_turn_user(const char *id, const char *session_id, long sequence,
    json_t *input)
{
	json_t		*parts, *ids, *a;
	const char	*text;
	size_t		 i;

	if ((text = json_string_value(json_object_get(input, "text"))) == NULL)
		text = "";
	parts = json_array();
	json_array_append_new(parts, json_pack("{s:s, s:s, s:s}",
	    "type", "text", "text", text, "state", "done"));
	ids = json_array();
	json_array_foreach(json_object_get(input, "attachment_ids"), i, a) {
		if (!json_is_string(a))
			continue;
		json_array_append(ids, a);
		json_array_append_new(parts, json_pack(
		    "{s:s, s:{s:O, s:s}}", "type", "data-attachment", "data",
		    "attachmentId", a, "phase", "selected"));
	}
	return (json_pack("{s:s, s:s, s:o, s:{s:i, s:s, s:I, s:o}}",
	    "id", id, "role", "user", "parts", parts, "metadata",
	    "schemaVersion", 1, "sessionId", session_id,
	    "sequence", (json_int_t)sequence, "attachmentIds", ids));
}

/* An assistant row: id and runId are the Run's. */
json_t *
api_turn_assistant(const char *run_id, const char *session_id,
    long sequence, json_t *committed)
{
	json_t	*parts, *ui, *p, *meta, *trace, *in;
	size_t	 i;

	parts = json_array();
	in = json_object_get(committed, "parts");
	json_array_foreach(in, i, p) {
		if ((ui = part_ui(p)) != NULL)
			json_array_append_new(parts, ui);
		else
			log_debug("run %s: committed part %zu skipped",
			    run_id, i);
	}
	meta = json_pack("{s:i, s:s, s:s, s:I}", "schemaVersion", 1,
	    "runId", run_id, "sessionId", session_id,
	    "sequence", (json_int_t)sequence);
	if (json_is_string(trace = json_object_get(committed, "trace_id")))
		json_object_set(meta, "traceId", trace);
	return (json_pack("{s:s, s:s, s:o, s:o}", "id", run_id,
	    "role", "assistant", "parts", parts, "metadata", meta));
}

/* Columns: session id, turn id, run id, sequence, role, input, committed. */
static json_t *
turn_row(PGresult *res, int row)
{
	const char	*sid = PQgetvalue(res, row, 0);
	const char	*role = PQgetvalue(res, row, 4);
	long		 seq = strtol(PQgetvalue(res, row, 3), NULL, 10);
	json_error_t	 err;
	json_t		*doc, *msg;

	if (strcmp(role, "user") == 0) {
		doc = json_loads(PQgetvalue(res, row, 5), 0, &err);
		msg = api_turn_user(PQgetvalue(res, row, 1), sid, seq, doc);
	} else {
		doc = json_loads(PQgetvalue(res, row, 6), 0, &err);
		msg = api_turn_assistant(PQgetvalue(res, row, 2), sid, seq,
		    doc);
	}
	json_decref(doc);
	return (msg);
}

static void
turns_listed(PGresult *res, const struct db_err *e, void *arg)
{
	struct turns_page	*pg = arg;
	json_t			*items, *next = NULL;
	int			 i, n;

	if (res == NULL) {
		api_db_error(pg->req, e, "service_unavailable",
		    "Service unavailable");
		free(pg);
		return;
	}
	if ((n = PQntuples(res)) == 0) {
		http_error(pg->req, 404, "session_not_found",
		    "Session not found");
		free(pg);
		return;
	}
	items = json_array();
	for (i = 0; i < n && i < pg->limit; i++) {
		if (PQgetisnull(res, i, 1))
			break;
		json_array_append_new(items, turn_row(res, i));
	}
	if (n > pg->limit)
		next = api_col_int(res, (int)pg->limit - 1, 3);
	api_reply(pg->req, 200, json_pack("{s:o, s:o}", "items", items,
	    "next_after_sequence", next ? next : json_null()));
	free(pg);
}

void
api_turns_list(struct evhttp_request *req, const char *id)
{
	struct evkeyvalq	 q;
	struct turns_page	*pg;
	const char		*p[4];
	char			 after[32], limit[32];
	long			 lim, aft;

	if (api_query(req, &q) == -1 ||
	    api_query_int(&q, "limit", TURNS_LIMIT_DEFAULT, 1,
	    TURNS_LIMIT_MAX, &lim) == -1 ||
	    api_query_int(&q, "after_sequence", 0, 0, INT32_MAX, &aft) == -1) {
		evhttp_clear_headers(&q);
		api_invalid(req);
		return;
	}
	evhttp_clear_headers(&q);
	pg = xcalloc(1, sizeof(*pg));
	pg->req = req;
	pg->limit = lim;
	snprintf(after, sizeof(after), "%ld", aft);
	snprintf(limit, sizeof(limit), "%ld", lim + 1);
	p[0] = id;
	p[1] = API_WORKSPACE_ID;
	p[2] = after;
	p[3] = limit;
	/* One row with NULL turn columns when the Session has none. */
	db_async_sql(gw->db,
	    "SELECT s.id, t.id, t.run_id, t.sequence, t.role, "
	    " t.user_input_json::text, t.committed_turn_json::text "
	    "FROM fleet_sessions s LEFT JOIN LATERAL (SELECT * FROM fleet_turns "
	    "  WHERE session_id = s.id AND sequence > $3::int "
	    "  ORDER BY sequence LIMIT $4::int) t ON true "
	    "WHERE s.id = $1 AND s.workspace_id = $2 ORDER BY t.sequence",
	    4, p, API_DB_TIMEOUT_MS, turns_listed, pg);
}
