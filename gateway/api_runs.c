/*
 * PUT /api/runs/{id}/cancellation: record the request in the Run's row
 * (whoever runs it polls for it, on any node) and tell this node's
 * Turn streams, which interrupt the Run at once if one of our workers
 * has it.
 */
#include <sys/types.h>

#include <string.h>

#include <bsd/string.h>
#include <event2/http.h>
#include <jansson.h>

#include "lib/db.h"
#include "lib/log.h"
#include "gateway.h"
#include "api.h"

static void	 run_cancelled(PGresult *, const struct db_err *, void *);

/* Columns: run id, status, whether a cancel was already requested. */
static void
run_cancelled(PGresult *res, const struct db_err *e, void *arg)
{
	struct evhttp_request	*req = arg;
	const char		*state;
	char			 id[API_UUID_LEN + 1];

	if (res == NULL) {
		api_db_error(req, e, "service_unavailable",
		    "Service unavailable");
		return;
	}
	if (PQntuples(res) == 0) {
		http_error(req, 404, "run_not_found", "Run not found");
		return;
	}
	if (strcmp(PQgetvalue(res, 0, 1), "running") != 0)
		state = "already_terminal";
	else if (strcmp(PQgetvalue(res, 0, 2), "t") == 0)
		state = "already_requested";
	else
		state = "requested";
	strlcpy(id, PQgetvalue(res, 0, 0), sizeof(id));
	api_reply(req, 200, json_pack("{s:s, s:s}", "run_id", id,
	    "state", state));
	if (strcmp(state, "already_terminal") != 0)
		turns_cancel_run(id);
}

/*
 * One statement: lock the Run (in our Workspace), note whether a cancel
 * was already requested, and set cancel_requested_at if it is running.
 * settling counts as terminal: its outcome is already decided.
 */
void
api_runs_cancel(struct evhttp_request *req, const char *id)
{
	const char	*p[2] = { id, API_WORKSPACE_ID };

	db_async_sql(gw->db,
	    "WITH o AS (SELECT r.id, r.status, "
	    "  r.cancel_requested_at IS NOT NULL AS requested "
	    "  FROM fleet_runs r JOIN fleet_sessions s ON s.id = r.session_id "
	    "  WHERE r.id = $1 AND s.workspace_id = $2 FOR UPDATE OF r), "
	    "u AS (UPDATE fleet_runs r "
	    "  SET cancel_requested_at = coalesce(r.cancel_requested_at, now()) "
	    "  FROM o WHERE r.id = o.id AND o.status = 'running' "
	    "  RETURNING r.id) "
	    "SELECT o.id, o.status, o.requested FROM o",
	    2, p, API_DB_TIMEOUT_MS, run_cancelled, req);
}
