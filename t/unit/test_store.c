/*
 * The Run lifecycle against a real PostgreSQL: claim, replay, busy,
 * mismatch, heartbeat, commit, a commit that lost its claim, settle.
 * Needs FLEET_TEST_DATABASE_URL (t/22-store.t provides one); skips
 * without it.
 */
#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/store.h"
#include "tap.h"

#define FP_A	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define FP_B	"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static char *
new_session(struct db *db)
{
	struct db_err	 e;
	PGresult	*res;
	char		*id;

	res = db_sql(db, "INSERT INTO fleet_sessions (id, workspace_id) "
	    "SELECT gen_random_uuid(), id FROM fleet_workspaces LIMIT 1 "
	    "RETURNING id", 0, NULL, &e);
	if (res == NULL) {
		printf("Bail out! %s\n", e.msg);
		exit(1);
	}
	id = strdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return id;
}

static char *
scalar(struct db *db, const char *sql, const char *arg)
{
	struct db_err	 e;
	PGresult	*res;
	const char	*p[1] = { arg };
	char		*v;

	if ((res = db_sql(db, sql, arg ? 1 : 0, p, &e)) == NULL)
		return strdup(e.msg);
	v = strdup(PQntuples(res) ? PQgetvalue(res, 0, 0) : "(none)");
	PQclear(res);
	return v;
}

int
main(void)
{
	const char	*url = getenv("FLEET_TEST_DATABASE_URL");
	struct db	*db;
	struct db_err	 e;
	struct claim	 c, c2;
	struct commit	 cm;
	char		*sid, *v, run1[STORE_UUID_LEN + 1];

	if (url == NULL) {
		printf("1..0 # SKIP FLEET_TEST_DATABASE_URL is not set\n");
		return 0;
	}
	log_init(1, LOG_LEVEL_WARN);
	db = db_new(url, "test_store");
	if (!ok(db_connect(db, &e) == 0, "connect (%s)", e.msg))
		return done_testing();
	store_prepare(db);
	sid = new_session(db);

	memset(&c, 0, sizeof(c));
	c.session_id = sid;
	c.idempotency_key = "k1";
	c.fingerprint = FP_A;
	c.owner = "worker-1";
	is_int(store_claim(db, &c, &e), CLAIM_OK, "claim a fresh session");
	is_int(c.base_checkpoint, 0, "base checkpoint 0");
	ok(strlen(c.run_id) == STORE_UUID_LEN, "run id %s", c.run_id);
	strcpy(run1, c.run_id);

	c2 = c;
	c2.idempotency_key = "k2";
	is_int(store_claim(db, &c2, &e), CLAIM_BUSY,
	    "second key while one runs: busy");
	is_str(store_claim_message(CLAIM_BUSY), "A Turn is already running",
	    "busy message");
	c2 = c;
	is_int(store_claim(db, &c2, &e), CLAIM_BUSY,
	    "same key while it runs: busy");
	c2.fingerprint = FP_B;
	is_int(store_claim(db, &c2, &e), CLAIM_MISMATCH,
	    "same key, other input: mismatch");
	c2.session_id = "00000000-0000-0000-0000-000000000000";
	is_int(store_claim(db, &c2, &e), CLAIM_NO_SESSION, "unknown session");

	{
		int cancel = -1;

		is_int(store_heartbeat(db, run1, "worker-1", &cancel, &e), 0,
		    "heartbeat");
		is_int(cancel, 0, "no cancellation requested");
		is_int(store_heartbeat(db, run1, "worker-2", &cancel, &e), -1,
		    "heartbeat by another owner fails");
		v = scalar(db, "UPDATE fleet_runs SET cancel_requested_at = "
		    "now() WHERE id = $1 RETURNING 1", run1);
		free(v);
		store_heartbeat(db, run1, "worker-1", &cancel, &e);
		is_int(cancel, 1, "heartbeat reports a requested cancel");
		v = scalar(db, "UPDATE fleet_runs SET cancel_requested_at = "
		    "NULL WHERE id = $1 RETURNING 1", run1);
		free(v);
	}

	memset(&cm, 0, sizeof(cm));
	cm.run_id = run1;
	cm.session_id = sid;
	cm.owner = "worker-2";
	cm.base_checkpoint = 0;
	cm.user_input_json = "{\"text\":\"hi\"}";
	cm.committed_json = "{\"schema_version\":1,\"parts\":[]}";
	is_int(store_commit(db, &cm, &e), -1, "commit by a non-owner fails");
	like(e.msg, "claim on run", "because the claim is not its own");
	cm.owner = "worker-1";
	is_int(store_commit(db, &cm, &e), 0, "commit by the owner (%s)", e.msg);
	is_int(cm.checkpoint, 1, "checkpoint moved to 1");
	v = scalar(db, "SELECT string_agg(role || sequence, ',' ORDER BY "
	    "sequence) FROM fleet_turns WHERE session_id = $1", sid);
	is_str(v, "user1,assistant2", "two turn rows with sequences 1, 2");
	free(v);
	v = scalar(db, "SELECT status || ':' || commit_checkpoint_version || "
	    "':' || (claim_owner IS NULL) FROM fleet_runs WHERE id = $1", run1);
	is_str(v, "completed:1:true", "run completed, claim cleared");
	free(v);
	is_int(store_commit(db, &cm, &e), -1, "a second commit fails");

	c2 = c;
	is_int(store_claim(db, &c2, &e), CLAIM_REPLAY,
	    "completed key with the same input: replay");
	is_str(c2.run_id, run1, "replay names the completed run");

	c2 = c;
	c2.idempotency_key = "k3";
	is_int(store_claim(db, &c2, &e), CLAIM_OK, "next turn claims");
	is_int(c2.base_checkpoint, 1, "on checkpoint 1");
	is_int(store_settle(db, c2.run_id, "worker-1", "cancelled",
	    "cancelled", "Turn cancelled", &e), 0, "settle as cancelled");
	is_int(store_settle(db, c2.run_id, "worker-1", "failed", "x", "y", &e),
	    -1, "settling twice fails");
	c2.idempotency_key = "k3";
	is_int(store_claim(db, &c2, &e), CLAIM_OK,
	    "a cancelled run frees its key");
	/* Another commit moved the checkpoint under this claim. */
	{
		const char *p[1] = { sid };
		PGresult *res = db_sql(db, "UPDATE fleet_sessions SET "
		    "checkpoint_version = checkpoint_version + 1 WHERE id = $1",
		    1, p, &e);

		PQclear(res);
	}
	cm.run_id = c2.run_id;
	cm.base_checkpoint = c2.base_checkpoint;
	is_int(store_commit(db, &cm, &e), -1,
	    "commit on a moved checkpoint fails");
	like(e.msg, "checkpoint moved", "and says why");
	v = scalar(db, "SELECT count(*) FROM fleet_turns WHERE session_id = $1",
	    sid);
	is_str(v, "2", "and wrote no turn rows");
	free(v);

	db_free(db);
	free(sid);
	return done_testing();
}
