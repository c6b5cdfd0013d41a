#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/string.h>

#include "db.h"
#include "log.h"
#include "migrate.h"

/* Arbitrary, fixed: the advisory lock key all fleet migrators share. */
#define MIGRATE_LOCK	"7461736b6d6967"

static const char *version_table =
    "CREATE TABLE IF NOT EXISTS fleet_schema_migrations ("
    " version integer PRIMARY KEY,"
    " name text NOT NULL,"
    " applied_at timestamptz NOT NULL DEFAULT now())";

int
migrate_head(void)
{
	return nmigrations > 0 ? migrations[nmigrations - 1].version : 0;
}

/* The highest applied version, 0 on an empty database. */
int
migrate_current(struct db *db, int *version, struct db_err *e)
{
	PGresult	*res;

	res = db_sql(db, "SELECT to_regclass('fleet_schema_migrations') "
	    "IS NOT NULL", 0, NULL, e);
	if (res == NULL)
		return -1;
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0) {
		PQclear(res);
		*version = 0;
		return 0;
	}
	PQclear(res);
	res = db_sql(db, "SELECT coalesce(max(version), 0) FROM "
	    "fleet_schema_migrations", 0, NULL, e);
	if (res == NULL)
		return -1;
	*version = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

static int
apply_one(struct db *db, const struct migration *m, struct db_err *e)
{
	const char	*params[2];
	char		 v[16];
	PGresult	*res;
	int		 done;

	if (db_cmd(db, "BEGIN", e) == -1)
		return -1;
	if (db_cmd(db, "SELECT pg_advisory_xact_lock(x'" MIGRATE_LOCK
	    "'::bigint)", e) == -1 || db_cmd(db, version_table, e) == -1)
		goto fail;
	snprintf(v, sizeof(v), "%d", m->version);
	params[0] = v;
	res = db_sql(db, "SELECT 1 FROM fleet_schema_migrations WHERE "
	    "version = $1", 1, params, e);
	if (res == NULL)
		goto fail;
	done = PQntuples(res) > 0;
	PQclear(res);
	if (done) {
		/* Another migrator got here first. */
		db_cmd(db, "COMMIT", e);
		return 0;
	}
	if (db_cmd(db, m->sql, e) == -1)
		goto fail;
	params[1] = m->name;
	if ((res = db_sql(db, "INSERT INTO fleet_schema_migrations "
	    "(version, name) VALUES ($1, $2)", 2, params, e)) == NULL)
		goto fail;
	PQclear(res);
	if (db_cmd(db, "COMMIT", e) == -1)
		return -1;
	return 1;
fail:
	if (!e->lost)
		db_cmd(db, "ROLLBACK", NULL);
	return -1;
}

/*
 * Apply every migration above the current version, calling progress for
 * each one this call applied.  Returns the number applied, or -1.
 */
int
migrate_apply(struct db *db, void (*progress)(const struct migration *,
    void *), void *arg, struct db_err *e)
{
	size_t	 i;
	int	 cur, n = 0, rc;

	if (migrate_current(db, &cur, e) == -1)
		return -1;
	if (cur > migrate_head()) {
		snprintf(e->msg, sizeof(e->msg), "the database is at schema "
		    "version %d, newer than this fleet (%d)", cur,
		    migrate_head());
		e->sqlstate[0] = '\0';
		e->lost = 0;
		return -1;
	}
	for (i = 0; i < nmigrations; i++) {
		if (migrations[i].version <= cur)
			continue;
		if ((rc = apply_one(db, &migrations[i], e)) == -1) {
			char msg[sizeof(e->msg)];

			strlcpy(msg, migrations[i].name, sizeof(msg));
			strlcat(msg, ": ", sizeof(msg));
			strlcat(msg, e->msg, sizeof(msg));
			strlcpy(e->msg, msg, sizeof(e->msg));
			return -1;
		}
		if (rc == 1) {
			n++;
			if (progress != NULL)
				progress(&migrations[i], arg);
		}
	}
	return n;
}

/* 0 when the database is at the head this binary requires. */
int
migrate_check(struct db *db, char *msg, size_t len)
{
	struct db_err	 e;
	int		 cur;

	if (migrate_current(db, &cur, &e) == -1) {
		snprintf(msg, len, "%s", e.msg);
		return -1;
	}
	if (cur < migrate_head()) {
		snprintf(msg, len, "the database %s is at schema version %d "
		    "but this fleet needs %d: run `fleet db migrate'",
		    db_describe(db), cur, migrate_head());
		return -1;
	}
	if (cur > migrate_head()) {
		snprintf(msg, len, "the database %s is at schema version %d, "
		    "newer than this fleet (%d): upgrade fleet",
		    db_describe(db), cur, migrate_head());
		return -1;
	}
	return 0;
}
