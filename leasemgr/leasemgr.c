/*
 * The lease manager owns every sandbox.  This is its skeleton: it joins
 * fleetd and reports ready; the pool and backends come with them.
 */
#include <sys/types.h>

#include <stdlib.h>

#include <event2/event.h>

#include "lib/child.h"
#include "lib/log.h"
#include "lib/util.h"

static void
leasemgr_dispatch(struct msg *m, void *arg)
{
	struct event_base	*base = arg;

	switch (m->type) {
	case MSG_STATE:
		break;
	case MSG_RELOAD:
		log_info("reload: nothing to change in the lease manager");
		break;
	case MSG_STOP:
		event_base_loopexit(base, NULL);
		break;
	case MSG_HELLO:
	case MSG_READY:
	case MSG_STATS:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_WORKER_HELLO:
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
	struct event_base	*base;
	struct child		*child;

	if ((base = event_base_new()) == NULL)
		fatalx("event_base_new");
	child = child_start(env, base, &leasemgr_ops, base);
	child_ready(child);
	event_base_dispatch(base);
	child_free(child);
	event_base_free(base);
	exit(0);
}
