#include <sys/types.h>

#include <stdlib.h>

#include <event2/event.h>

#include "lib/child.h"
#include "lib/db.h"
#include "lib/log.h"
#include "lib/util.h"
#include "leasemgr.h"

struct leasemgr	*lm;

static void
leasemgr_dispatch(struct msg *m, void *arg)
{
	(void)arg;
	switch (m->type) {
	case MSG_STATE:
		break;
	case MSG_RELOAD:
		log_info("reload: nothing to change in the lease manager");
		break;
	case MSG_STOP:
		event_base_loopexit(lm->base, NULL);
		break;
	case MSG_HELLO:
	case MSG_READY:
	case MSG_STATS:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_WORKER_HELLO:
	case MSG_WORKER_BYE:
	case MSG_ACQUIRE:
	case MSG_GRANT:
	case MSG_REFUSE:
	case MSG_RENEW:
	case MSG_TURN:
	case MSG_TURN_STARTED:
	case MSG_CHUNK:
	case MSG_TURN_END:
	case MSG_CANCEL:
	case MSG__COUNT:
		log_warnx("unexpected %s from fleetd", proto_msg_name(m->type));
		break;
	}
}

static const struct child_ops leasemgr_ops = {
	leasemgr_dispatch,
	NULL
};

void
leasemgr_main(struct child_env *env)
{
	char	 err[512];

	lm = xcalloc(1, sizeof(*lm));
	lm->env = env;
	if ((lm->base = event_base_new()) == NULL)
		fatalx("event_base_new");
	lm->child = child_start(env, lm->base, &leasemgr_ops, NULL);
	lm->db = db_new(env->db_conninfo, "fleetd: leasemgr");
	db_async_init(lm->db, lm->base);
	if (pool_init(err, sizeof(err)) == -1) {
		/* Never run code unsandboxed: this is the operator's to fix. */
		log_warnx("cannot run sandboxes: %s", err);
		exit(2);
	}
	recover_init();
	child_ready(lm->child);

	event_base_dispatch(lm->base);

	pool_free();
	recover_free();
	db_free(lm->db);
	child_free(lm->child);
	event_base_free(lm->base);
	free(lm);
	exit(0);
}
