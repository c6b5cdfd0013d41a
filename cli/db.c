/*
 * fleet db migrate | status: the schema of the configured database.
 */
#include <sys/types.h>

#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/config.h"
#include "lib/db.h"
#include "lib/migrate.h"
#include "lib/util.h"
#include "fleet.h"

static void
applied(const struct migration *m, void *arg)
{
	(void)arg;
	printf("applied %s\n", m->name);
	fflush(stdout);
}

int
cmd_db(struct cli *cli, int argc, char **argv)
{
	struct fleet_config	*conf;
	struct db		*db;
	struct db_err		 e;
	char			*errors, *conninfo;
	size_t			 i;
	int			 embedded, cur, n;

	if (argc != 2 || (strcmp(argv[1], "migrate") != 0 &&
	    strcmp(argv[1], "status") != 0))
		cmd_usage("db");
	if ((conf = config_load(cli->confpath, cli->profile, &errors)) ==
	    NULL) {
		fputs(errors, stderr);
		exit(2);
	}
	conninfo = config_db_conninfo(conf, cli->statedir, &embedded);
	db = db_new(conninfo, "fleet");
	if (db_connect(db, &e) == -1) {
		if (embedded)
			errx(1, "the embedded database in %s is not running: "
			    "it runs inside fleetd (fleet start), which "
			    "migrates it itself; or set %s", cli->statedir,
			    conf->database_url_env);
		errx(1, "%s", e.msg);
	}
	if (strcmp(argv[1], "status") == 0) {
		if (migrate_current(db, &cur, &e) == -1)
			errx(1, "%s", e.msg);
		printf("database %s: schema version %d, head %d\n",
		    db_describe(db), cur, migrate_head());
		for (i = 0; i < nmigrations; i++)
			if (migrations[i].version > cur)
				printf("pending %s\n", migrations[i].name);
		if (cur > migrate_head())
			printf("the database is newer than this fleet\n");
		db_free(db);
		return cur == migrate_head() ? 0 : 1;
	}
	if ((n = migrate_apply(db, applied, NULL, &e)) == -1)
		errx(1, "migrate: %s", e.msg);
	printf("database %s: schema version %d (head)%s\n", db_describe(db),
	    migrate_head(), n == 0 ? ", nothing to do" : "");
	db_free(db);
	free(conninfo);
	config_free(conf);
	return 0;
}
