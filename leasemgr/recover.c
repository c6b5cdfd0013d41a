/*
 * Recovery of stale claims, at start and every heartbeat_seconds: Runs
 * whose claim heartbeat is older than stale_after are taken over (a
 * conditional update, so two nodes never both take one), their
 * sandboxes released, and they are settled: running becomes failed
 * (stale_claim), settling becomes its intent.  A claim that is still
 * heartbeating is never touched, whoever holds it.
 */
#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <uuid.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/store.h"
#include "lib/util.h"
#include "leasemgr.h"

#define RECOVER_TIMEOUT_MS	10000

static void	recover_run(evutil_socket_t, short, void *);

static void
recover_next(void)
{
	lm->recovering = 0;
	timer_add_ms(lm->ev_recover,
	    (int64_t)lm->env->conf->heartbeat_seconds * 1000);
}

static void
settled(PGresult *res, const struct db_err *e, void *arg)
{
	int	 i;

	(void)arg;
	if (res == NULL)
		log_warnx("recovery: settle: %s", e->msg);
	else
		for (i = 0; i < PQntuples(res); i++)
			log_warnx("recovery: run %s settled as %s",
			    PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
	recover_next();
}

static void
taken_over(PGresult *res, const struct db_err *e, void *arg)
{
	const char	*p[1];
	int		 i;

	(void)arg;
	if (res == NULL) {
		log_debug("recovery: %s", e->msg);
		recover_next();
		return;
	}
	if (PQntuples(res) == 0) {
		recover_next();
		return;
	}
	for (i = 0; i < PQntuples(res); i++) {
		log_warnx("recovery: taking over run %s of session %s (%s; "
		    "its claim has not been heartbeaten for %d s)",
		    PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
		    PQgetvalue(res, i, 2), lm->env->conf->stale_after);
		/* What the Run held here goes before it settles. */
		pool_release_run(PQgetvalue(res, i, 0));
	}
	p[0] = lm->recovery_owner;
	db_async_sql(lm->db, store_sql_settle_recovered, 1, p,
	    RECOVER_TIMEOUT_MS, settled, NULL);
}

static void
recover_run(evutil_socket_t fd, short events, void *arg)
{
	const char	*p[2];
	char		 stale[16];
	uuid_t		 u;
	char		 id[40];

	(void)fd;
	(void)events;
	(void)arg;
	if (lm->recovering)
		return;
	lm->recovering = 1;
	uuid_generate(u);
	uuid_unparse_lower(u, id);
	snprintf(lm->recovery_owner, sizeof(lm->recovery_owner),
	    "recovery:%s", id);
	snprintf(stale, sizeof(stale), "%d", lm->env->conf->stale_after);
	p[0] = lm->recovery_owner;
	p[1] = stale;
	db_async_sql(lm->db, store_sql_takeover, 2, p, RECOVER_TIMEOUT_MS,
	    taken_over, NULL);
}

void
recover_init(void)
{
	if ((lm->ev_recover = evtimer_new(lm->base, recover_run, NULL)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	recover_run(-1, 0, NULL);
}

void
recover_free(void)
{
	if (lm->ev_recover != NULL)
		event_free(lm->ev_recover);
}
