/*
 * The cost of the Run lifecycle transactions (lib/store.c): a claim and
 * a commit, each timed over many runs, against a bare SELECT 1 round
 * trip on the same connection.  Usage: store_bench CONNINFO [N]
 */
#include <sys/types.h>

#include <stdio.h>
#include <err.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/store.h"
#include "lib/util.h"

static int
cmp(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
report(const char *what, double *v, int n, double base)
{
	qsort(v, n, sizeof(*v), cmp);
	printf("%-26s median %7.1f us  p90 %7.1f us  (n=%d)", what,
	    v[n / 2], v[n * 9 / 10], n);
	if (base > 0)
		printf("  %.1fx SELECT 1", v[n / 2] / base);
	printf("\n");
}

int
main(int argc, char *argv[])
{
	struct db	*db;
	struct db_err	 e;
	struct claim	 c;
	struct commit	 cm;
	PGresult	*res;
	double		*tsel, *tclaim, *tcommit, t0, base;
	char		 key[32], sid[STORE_UUID_LEN + 1];
	int		 i, n = argc > 2 ? atoi(argv[2]) : 1000;

	if (argc < 2 || n < 10)
		errx(2, "usage: store_bench conninfo [n >= 10]");
	log_init(1, LOG_LEVEL_WARN);
	db = db_new(argv[1], "store_bench");
	if (db_connect(db, &e) == -1)
		errx(1, "%s", e.msg);
	store_prepare(db);
	tsel = xcalloc(n, sizeof(double));
	tclaim = xcalloc(n, sizeof(double));
	tcommit = xcalloc(n, sizeof(double));
	db_prepare(db, "select1", "SELECT 1");

	res = db_sql(db, "INSERT INTO fleet_sessions (id, workspace_id) "
	    "SELECT gen_random_uuid(), id FROM fleet_workspaces LIMIT 1 "
	    "RETURNING id", 0, NULL, &e);
	if (res == NULL)
		errx(1, "%s", e.msg);
	snprintf(sid, sizeof(sid), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);

	for (i = 0; i < n; i++) {
		t0 = now_us();
		if ((res = db_exec(db, "select1", 0, NULL, &e)) == NULL)
			errx(1, "%s", e.msg);
		PQclear(res);
		tsel[i] = now_us() - t0;
	}
	/* One Session, Turn after Turn, as a conversation goes. */
	for (i = 0; i < n; i++) {
		memset(&c, 0, sizeof(c));
		snprintf(key, sizeof(key), "bench-%d", i);
		c.session_id = sid;
		c.idempotency_key = key;
		c.fingerprint = "dddddddddddddddddddddddddddddddd"
		    "dddddddddddddddddddddddddddddddd";
		c.owner = "bench";
		t0 = now_us();
		if (store_claim(db, &c, &e) != CLAIM_OK)
			errx(1, "claim: %s", e.msg);
		tclaim[i] = now_us() - t0;

		memset(&cm, 0, sizeof(cm));
		cm.run_id = c.run_id;
		cm.session_id = sid;
		cm.owner = "bench";
		cm.base_checkpoint = c.base_checkpoint;
		cm.user_input_json = "{\"text\":\"What is 6 times 7?\"}";
		cm.committed_json = "{\"schema_version\":1,\"parts\":"
		    "[{\"type\":\"text\",\"text\":\"42\"}]}";
		t0 = now_us();
		if (store_commit(db, &cm, &e) == -1)
			errx(1, "commit: %s", e.msg);
		tcommit[i] = now_us() - t0;
	}
	qsort(tsel, n, sizeof(double), cmp);
	base = tsel[n / 2];
	report("SELECT 1 (baseline)", tsel, n, 0);
	report("claim transaction", tclaim, n, base);
	report("commit transaction", tcommit, n, base);
	db_free(db);
	free(tsel);
	free(tclaim);
	free(tcommit);
	return 0;
}
