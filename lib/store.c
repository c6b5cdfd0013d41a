#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/string.h>

#include "db.h"
#include "store.h"
#include "util.h"

/*
 * Recovery takes over at most 100 claims whose heartbeat is older than
 * $2 seconds ($1 is the recovery owner), oldest first, skipping rows
 * another node is taking over.  A fresh claim is never touched.
 */
const char *store_sql_takeover =
    "UPDATE fleet_runs r SET claim_owner = $1, claim_heartbeat_at = now() "
    "FROM (SELECT id FROM fleet_runs "
    "      WHERE status IN ('running', 'settling') "
    "      AND claim_heartbeat_at < now() - make_interval(secs => $2) "
    "      ORDER BY claim_heartbeat_at LIMIT 100 "
    "      FOR UPDATE SKIP LOCKED) s "
    "WHERE r.id = s.id RETURNING r.id, r.session_id, r.status";

/* running becomes failed/stale_claim; settling becomes its intent. */
const char *store_sql_settle_recovered =
    "UPDATE fleet_runs SET "
    " status = CASE status WHEN 'running' THEN 'failed' "
    "   ELSE terminal_intent END, "
    " failure_code = CASE status WHEN 'running' THEN 'stale_claim' "
    "   ELSE failure_code END, "
    " failure_public_message = coalesce(failure_public_message, "
    "   'Turn failed'), "
    " claim_owner = NULL, claim_heartbeat_at = NULL, finished_at = now(), "
    " recovery_metadata_json = jsonb_build_object('recovered_by', $1::text, "
    "   'recovered_at', now()) "
    "WHERE claim_owner = $1 RETURNING id, status";

void
store_prepare(struct db *db)
{
	db_prepare(db, "claim_session",
	    "SELECT status, checkpoint_version FROM fleet_sessions "
	    "WHERE id = $1 FOR UPDATE");
	db_prepare(db, "claim_key",
	    "SELECT id, status, input_fingerprint FROM fleet_runs "
	    "WHERE session_id = $1 AND idempotency_key = $2 "
	    "AND status IN ('running', 'settling', 'completed')");
	db_prepare(db, "claim_busy",
	    "SELECT 1 FROM fleet_runs WHERE session_id = $1 "
	    "AND status IN ('running', 'settling')");
	db_prepare(db, "claim_insert",
	    "INSERT INTO fleet_runs (id, session_id, status, idempotency_key, "
	    " input_fingerprint, base_checkpoint_version, claim_owner, "
	    " claim_heartbeat_at) "
	    "VALUES (gen_random_uuid(), $1, 'running', $2, $3, $4, $5, now()) "
	    "RETURNING id");
	db_prepare(db, "heartbeat",
	    "UPDATE fleet_runs SET claim_heartbeat_at = now() "
	    "WHERE id = $1 AND claim_owner = $2 "
	    "AND status IN ('running', 'settling') "
	    "RETURNING cancel_requested_at IS NOT NULL");
	db_prepare(db, "commit_session",
	    "SELECT checkpoint_version FROM fleet_sessions WHERE id = $1 "
	    "FOR UPDATE");
	db_prepare(db, "commit_run",
	    "SELECT 1 FROM fleet_runs WHERE id = $1 AND session_id = $2 "
	    "AND claim_owner = $3 AND status = 'running' FOR UPDATE");
	db_prepare(db, "commit_turns",
	    "INSERT INTO fleet_turns (id, session_id, run_id, sequence, role, "
	    " user_input_json, committed_turn_json) "
	    "SELECT gen_random_uuid(), $1::uuid, $2::uuid, n + 1, 'user', "
	    " $3::jsonb, NULL::jsonb "
	    "  FROM (SELECT coalesce(max(sequence), 0) AS n FROM fleet_turns "
	    "        WHERE session_id = $1) m "
	    "UNION ALL "
	    "SELECT $2::uuid, $1::uuid, $2::uuid, n + 2, 'assistant', "
	    " NULL::jsonb, $4::jsonb "
	    "  FROM (SELECT coalesce(max(sequence), 0) AS n FROM fleet_turns "
	    "        WHERE session_id = $1) m");
	db_prepare(db, "commit_checkpoint",
	    "UPDATE fleet_sessions SET checkpoint_version = "
	    " checkpoint_version + 1, updated_at = now() WHERE id = $1 "
	    "RETURNING checkpoint_version");
	db_prepare(db, "commit_complete",
	    "UPDATE fleet_runs SET status = 'completed', "
	    " commit_checkpoint_version = $3, claim_owner = NULL, "
	    " claim_heartbeat_at = NULL, finished_at = now() "
	    "WHERE id = $1 AND claim_owner = $2 AND status = 'running'");
	db_prepare(db, "settle",
	    "UPDATE fleet_runs SET status = $3, failure_code = $4, "
	    " failure_public_message = $5, claim_owner = NULL, "
	    " claim_heartbeat_at = NULL, finished_at = now() "
	    "WHERE id = $1 AND claim_owner = $2 "
	    "AND status IN ('running', 'settling')");
}

const char *
store_claim_message(enum claim_result r)
{
	switch (r) {
	case CLAIM_OK:
	case CLAIM_REPLAY:
		return NULL;
	case CLAIM_NO_SESSION:
		return "Session not found";
	case CLAIM_BUSY:
		return "A Turn is already running";
	case CLAIM_MISMATCH:
		return "Idempotency key input mismatch";
	case CLAIM_ERROR:
		break;
	}
	return "Turn is unavailable";
}

static void
rollback(struct db *db, const struct db_err *e)
{
	if (!e->lost)
		db_cmd(db, "ROLLBACK", NULL);
}

/*
 * Begin a Run: one transaction with the Session row locked.  A key seen
 * before answers replay, busy or mismatch; another live Run in the
 * Session answers busy.  A race with another node ends on a unique
 * index and answers busy too.
 */
enum claim_result
store_claim(struct db *db, struct claim *c, struct db_err *e)
{
	const char		*p[5];
	PGresult		*res;
	enum claim_result	 r;
	char			 base[16];

	if (db_cmd(db, "BEGIN", e) == -1)
		return CLAIM_ERROR;
	p[0] = c->session_id;
	if ((res = db_exec(db, "claim_session", 1, p, e)) == NULL)
		goto fail;
	if (PQntuples(res) == 0 ||
	    strcmp(PQgetvalue(res, 0, 0), "active") != 0) {
		PQclear(res);
		r = CLAIM_NO_SESSION;
		goto out;
	}
	c->base_checkpoint = atoi(PQgetvalue(res, 0, 1));
	PQclear(res);

	p[1] = c->idempotency_key;
	if ((res = db_exec(db, "claim_key", 2, p, e)) == NULL)
		goto fail;
	if (PQntuples(res) > 0) {
		if (strcmp(PQgetvalue(res, 0, 2), c->fingerprint) != 0)
			r = CLAIM_MISMATCH;
		else if (strcmp(PQgetvalue(res, 0, 1), "completed") == 0) {
			strlcpy(c->run_id, PQgetvalue(res, 0, 0),
			    sizeof(c->run_id));
			r = CLAIM_REPLAY;
		} else
			r = CLAIM_BUSY;
		PQclear(res);
		goto out;
	}
	PQclear(res);

	if ((res = db_exec(db, "claim_busy", 1, p, e)) == NULL)
		goto fail;
	r = PQntuples(res) > 0 ? CLAIM_BUSY : CLAIM_OK;
	PQclear(res);
	if (r != CLAIM_OK)
		goto out;

	snprintf(base, sizeof(base), "%d", c->base_checkpoint);
	p[2] = c->fingerprint;
	p[3] = base;
	p[4] = c->owner;
	if ((res = db_exec(db, "claim_insert", 5, p, e)) == NULL) {
		if (strcmp(e->sqlstate, SQLSTATE_UNIQUE_VIOLATION) == 0) {
			rollback(db, e);
			return CLAIM_BUSY;
		}
		goto fail;
	}
	strlcpy(c->run_id, PQgetvalue(res, 0, 0), sizeof(c->run_id));
	PQclear(res);
	if (db_cmd(db, "COMMIT", e) == -1)
		return CLAIM_ERROR;
	return CLAIM_OK;
out:
	if (db_cmd(db, "COMMIT", e) == -1)
		return CLAIM_ERROR;
	return r;
fail:
	rollback(db, e);
	return CLAIM_ERROR;
}

/* The claim on run_id is no longer ours: not a database error. */
static int
claim_lost(const char *run_id, struct db_err *e)
{
	snprintf(e->msg, sizeof(e->msg), "claim on run %s lost", run_id);
	e->sqlstate[0] = '\0';
	e->lost = 0;
	return -1;
}

/*
 * 0 while the claim is ours, with *cancel set when a cancellation was
 * requested; -1 when lost (or on error, e says).
 */
int
store_heartbeat(struct db *db, const char *run_id, const char *owner,
    int *cancel, struct db_err *e)
{
	const char	*p[2] = { run_id, owner };
	PGresult	*res;
	int		 n;

	*cancel = 0;
	if ((res = db_exec(db, "heartbeat", 2, p, e)) == NULL)
		return -1;
	n = PQntuples(res);
	if (n > 0)
		*cancel = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return n == 0 ? claim_lost(run_id, e) : 0;
}

/*
 * The Turn Commit, in one transaction: the claim and the Session's
 * checkpoint are checked under row locks, the user and assistant turns
 * take the next two sequence numbers, the checkpoint moves on, and the
 * Run completes.  Anything off rolls the whole thing back.
 */
int
store_commit(struct db *db, struct commit *c, struct db_err *e)
{
	const char	*p[4];
	PGresult	*res;
	char		 cp[16];
	int		 n;

	if (db_cmd(db, "BEGIN", e) == -1)
		return -1;
	p[0] = c->session_id;
	if ((res = db_exec(db, "commit_session", 1, p, e)) == NULL)
		goto fail;
	n = PQntuples(res) ? atoi(PQgetvalue(res, 0, 0)) : -1;
	PQclear(res);
	if (n != c->base_checkpoint) {
		snprintf(e->msg, sizeof(e->msg), "session checkpoint moved "
		    "from %d to %d", c->base_checkpoint, n);
		goto conflict;
	}
	p[0] = c->run_id;
	p[1] = c->session_id;
	p[2] = c->owner;
	if ((res = db_exec(db, "commit_run", 3, p, e)) == NULL)
		goto fail;
	n = PQntuples(res);
	PQclear(res);
	if (n == 0) {
		claim_lost(c->run_id, e);
		goto fail;
	}
	p[0] = c->session_id;
	p[1] = c->run_id;
	p[2] = c->user_input_json;
	p[3] = c->committed_json;
	if ((res = db_exec(db, "commit_turns", 4, p, e)) == NULL)
		goto fail;
	PQclear(res);
	if ((res = db_exec(db, "commit_checkpoint", 1, p, e)) == NULL)
		goto fail;
	c->checkpoint = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	snprintf(cp, sizeof(cp), "%d", c->checkpoint);
	p[0] = c->run_id;
	p[1] = c->owner;
	p[2] = cp;
	if ((res = db_exec(db, "commit_complete", 3, p, e)) == NULL)
		goto fail;
	PQclear(res);
	if (db_cmd(db, "COMMIT", e) == -1)
		return -1;
	return 0;
conflict:
	e->sqlstate[0] = '\0';
	e->lost = 0;
fail:
	rollback(db, e);
	return -1;
}

/*
 * End a Run that will not commit: status is failed, cancelled or
 * timeout.  Returns 0, or -1 when the claim was no longer ours.
 */
int
store_settle(struct db *db, const char *run_id, const char *owner,
    const char *status, const char *code, const char *message,
    struct db_err *e)
{
	const char	*p[5] = { run_id, owner, status, code, message };
	PGresult	*res;
	int		 n;

	if ((res = db_exec(db, "settle", 5, p, e)) == NULL)
		return -1;
	n = atoi(PQcmdTuples(res));
	PQclear(res);
	return n == 0 ? claim_lost(run_id, e) : 0;
}
