/*
 * The embedded PostgreSQL: when the profile names no database URL, or
 * the variable it names is unset, fleetd runs a private cluster as a
 * supervised child.  The cluster lives in statedir/pg/data, created by
 * initdb on first start (into a scratch directory renamed into place, so
 * an interrupted initdb leaves nothing half-made); it listens only on a
 * Unix socket in statedir/run/pg, a directory only its owner can enter,
 * with trust authentication.  PostgreSQL refuses to run as root, so when
 * fleetd is root the cluster runs as db_user (created if missing).
 */
#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/string.h>
#include <event2/event.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/migrate.h"
#include "lib/util.h"
#include "supervisor.h"

#define PG_POLL_MS	20

struct pg {
	char		*dir;		/* statedir/pg, the db user's */
	char		*datadir;	/* statedir/pg/data */
	char		*sockdir;	/* statedir/run/pg */
	int		 other_user;	/* run as uid/gid below */
	uid_t		 uid;
	gid_t		 gid;
	struct event	*ev_poll;
	int		 setup_failures;
};

static struct pg	 pg;

static void	pg_poll(evutil_socket_t, short, void *);

static int
rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (type == FTW_DP ? rmdir(path) : unlink(path)) == -1 &&
	    errno != ENOENT ? -1 : 0;
}

static int
rm_tree(const char *path)
{
	if (access(path, F_OK) == -1 && errno == ENOENT)
		return 0;
	return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int
owned_dir(const char *path, mode_t mode)
{
	if (mkdir(path, mode) == -1 && errno != EEXIST)
		return -1;
	if (pg.other_user && chown(path, pg.uid, pg.gid) == -1)
		return -1;
	return chmod(path, mode);
}

/*
 * Before fleetd daemonizes: settle who runs the cluster and make its
 * directories.  Errors are the operator's to fix: exit 2.
 */
void
pg_prepare(void)
{
	struct passwd	*pw;
	int		 status;
	pid_t		 pid;

	xasprintf(&pg.dir, "%s/pg", fleetd->statedir);
	xasprintf(&pg.datadir, "%s/data", pg.dir);
	xasprintf(&pg.sockdir, "%s/pg", fleetd->rundir);
	if (geteuid() == 0) {
		const char *user = fleetd->conf->db_user;

		if ((pw = getpwnam(user)) == NULL) {
			/* A system user of our own: no login, no home. */
			switch (pid = fork()) {
			case -1:
				err(1, "fork");
			case 0:
				execl("/usr/sbin/useradd", "useradd", "--system",
				    "--user-group", "--no-create-home",
				    "--home-dir", "/nonexistent", "--shell",
				    "/usr/sbin/nologin", user, (char *)NULL);
				err(1, "/usr/sbin/useradd");
			}
			if (waitpid(pid, &status, 0) == -1 ||
			    !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
			    (pw = getpwnam(user)) == NULL)
				errx(2, "cannot create the user %s that runs the "
				    "embedded database (set db_user, or "
				    "FLEET_DATABASE_URL)", user);
			fprintf(stderr, "fleetd: created system user %s for "
			    "the embedded database\n", user);
		}
		if (pw->pw_uid == 0)
			errx(2, "db_user %s is root; PostgreSQL refuses to run "
			    "as root", user);
		pg.other_user = 1;
		pg.uid = pw->pw_uid;
		pg.gid = pw->pw_gid;
		/* The db user must be able to pass through, not to list. */
		if (chmod(fleetd->statedir, 0711) == -1 ||
		    chmod(fleetd->rundir, 0711) == -1)
			err(1, "chmod %s", fleetd->statedir);
	}
	if (owned_dir(pg.dir, 0700) == -1)
		err(1, "%s", pg.dir);
	if (owned_dir(pg.sockdir, 0700) == -1)
		err(1, "%s", pg.sockdir);
}

static void
pg_initdb(void)
{
	char	*tmp, *initdb, *hba;
	FILE	*fp;
	int	 status, fd;
	pid_t	 pid;

	xasprintf(&tmp, "%s/data.init", pg.dir);
	xasprintf(&initdb, "%s/initdb", fleetd->conf->postgres_bindir);
	if (rm_tree(tmp) == -1)
		fatal("remove %s", tmp);
	log_info("creating the database cluster in %s", pg.datadir);
	switch (pid = fork()) {
	case -1:
		fatal("fork");
	case 0:
		if ((fd = open("/dev/null", O_WRONLY)) != -1)
			dup2(fd, STDOUT_FILENO);
		execl(initdb, "initdb", "-D", tmp, "-U", "fleet", "-A", "trust",
		    "-E", "UTF8", "--locale=C.UTF-8", (char *)NULL);
		fatal("%s", initdb);
	}
	if (waitpid(pid, &status, 0) == -1 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		fatalx("initdb failed (see above)");
	/* Local socket only, and the socket's directory is ours alone. */
	xasprintf(&hba, "%s/pg_hba.conf", tmp);
	if ((fp = fopen(hba, "w")) == NULL ||
	    fputs("local all all trust\n", fp) == EOF || fclose(fp) == EOF)
		fatal("%s", hba);
	if (rename(tmp, pg.datadir) == -1)
		fatal("rename %s to %s", tmp, pg.datadir);
	free(hba);
	free(tmp);
	free(initdb);
}

/* In the forked child: become the cluster's owner, create it, run it. */
void
pg_exec(pid_t ppid)
{
	char	*postgres, *version, sockopt[PATH_MAX + 32];
	char	 logopt[64];
	int	 syslog = fleetd->logfile == NULL && !fleetd->foreground;

	if (pg.other_user && (setgroups(0, NULL) == -1 ||
	    setresgid(pg.gid, pg.gid, pg.gid) == -1 ||
	    setresuid(pg.uid, pg.uid, pg.uid) == -1))
		fatal("cannot become %s", fleetd->conf->db_user);
	/* Set after the uid change, which clears it; kept across exec. */
	if (prctl(PR_SET_PDEATHSIG, SIGINT) == -1)
		fatal("prctl");
	if (getppid() != ppid)
		_exit(0);
	if (access(pg.dir, R_OK | W_OK | X_OK) == -1) {
		log_warn("the database user cannot use %s (is every directory "
		    "above it searchable by %s?)", pg.dir,
		    fleetd->conf->db_user);
		exit(2);
	}
	xasprintf(&version, "%s/PG_VERSION", pg.datadir);
	if (access(version, F_OK) == -1) {
		if (access(pg.datadir, F_OK) == 0) {
			log_warnx("%s exists but holds no database cluster; "
			    "move it away", pg.datadir);
			exit(2);
		}
		pg_initdb();
	}
	snprintf(sockopt, sizeof(sockopt), "unix_socket_directories=%s",
	    pg.sockdir);
	snprintf(logopt, sizeof(logopt), "log_destination=%s",
	    syslog ? "syslog" : "stderr");
	xasprintf(&postgres, "%s/postgres", fleetd->conf->postgres_bindir);
	execl(postgres, "postgres", "-D", pg.datadir,
	    "-c", "listen_addresses=",
	    "-c", sockopt,
	    "-c", "unix_socket_permissions=0700",
	    "-c", "port=5432",
	    "-c", logopt,
	    "-c", "syslog_ident=fleetd-postgres",
	    "-c", "log_line_prefix=%m postgres[%p]: ",
	    "-c", "logging_collector=off",
	    (char *)NULL);
	fatal("%s", postgres);
}

/* After fork, in fleetd: watch for the cluster to say it is ready. */
void
pg_started(struct proc *p)
{
	if (pg.ev_poll == NULL &&
	    (pg.ev_poll = evtimer_new(fleetd->base, pg_poll, p)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	timer_add_ms(pg.ev_poll, PG_POLL_MS);
}

static void
pg_migrated(const struct migration *m, void *arg)
{
	(void)arg;
	log_info("applied migration %s", m->name);
}

/*
 * Create the fleet database if needed and bring its schema to head.
 * Returns 0, -1 to retry later, -2 on a failure retrying won't fix.
 */
static int
pg_setup(void)
{
	struct db	*db;
	struct db_err	 e;
	PGresult	*res;
	char		*conninfo;
	int		 n, rc = -1;

	xasprintf(&conninfo, "host='%s' port=5432 dbname=postgres user=fleet",
	    pg.sockdir);
	db = db_new(conninfo, "fleetd");
	free(conninfo);
	res = db_sql(db, "SELECT 1 FROM pg_database WHERE datname = 'fleet'",
	    0, NULL, &e);
	if (res == NULL)
		goto out;
	n = PQntuples(res);
	PQclear(res);
	if (n == 0 && db_cmd(db, "CREATE DATABASE fleet", &e) == -1)
		goto out;
	db_free(db);

	db = db_new(fleetd->db_conninfo, "fleetd");
	if ((n = migrate_apply(db, pg_migrated, NULL, &e)) == -1) {
		rc = e.lost ? -1 : -2;
		goto out;
	}
	rc = 0;
out:
	if (rc != 0)
		log_warnx("embedded database setup: %s", e.msg);
	db_free(db);
	return rc;
}

/*
 * postmaster.pid line 8 says "ready" once the server accepts
 * connections (what pg_ctl -w waits for).
 */
static int
pg_pidfile_ready(pid_t pid)
{
	char	 path[PATH_MAX], line[128];
	FILE	*fp;
	int	 n = 0, ready = 0, filepid = -1;

	snprintf(path, sizeof(path), "%s/postmaster.pid", pg.datadir);
	if ((fp = fopen(path, "r")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), fp) != NULL) {
		n++;
		if (n == 1)
			filepid = atoi(line);
		else if (n == 8)
			ready = strncmp(line, "ready", 5) == 0;
	}
	fclose(fp);
	return ready && filepid == pid;
}

static void
pg_poll(evutil_socket_t fd, short events, void *arg)
{
	struct proc	*p = arg;
	int		 rc;

	(void)fd;
	(void)events;
	if (p->pid == -1 || p->state != PS_STARTING)
		return;
	if (!pg_pidfile_ready(p->pid)) {
		timer_add_ms(pg.ev_poll, PG_POLL_MS);
		return;
	}
	if ((rc = pg_setup()) == -2 || (rc == -1 &&
	    ++pg.setup_failures > 50)) {
		fleetd_boot_failure(p, "the database could not be set up");
		fleetd_stop(1, 0);
		return;
	}
	if (rc == -1) {
		timer_add_ms(pg.ev_poll, 100);
		return;
	}
	pg.setup_failures = 0;
	proc_set_ready(p);
}

void
pg_cleanup(void)
{
	if (pg.ev_poll != NULL)
		event_free(pg.ev_poll);
	pg.ev_poll = NULL;
}
