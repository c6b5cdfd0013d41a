#include <sys/types.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/string.h>
#include <event2/event.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/util.h"
#include "gateway.h"

struct gateway	*gw;

static void
gateway_dispatch(struct msg *m, void *arg)
{
	(void)arg;
	switch (m->type) {
	case MSG_STATE:
		log_debug("service state %s", m->state.state);
		strlcpy(gw->state, m->state.state, sizeof(gw->state));
		break;
	case MSG_RELOAD:
		log_info("reload: nothing to change in the gateway");
		break;
	case MSG_STOP:
		event_base_loopexit(gw->base, NULL);
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

static const struct child_ops gateway_ops = {
	gateway_dispatch,
	NULL
};

/* Tell fleetd how much work is in flight (it waits on this to drain). */
void
gateway_stats(void)
{
	struct msg	 m;
	char		 buf[128];

	snprintf(buf, sizeof(buf), "{\"turns_active\":%d,\"turns_queued\":%d}",
	    turns_active(), turns_queued());
	proto_msg_init(&m, MSG_STATS);
	m.stats.json = buf;
	child_send(gw->child, &m);
}

void
gateway_main(struct child_env *env)
{
	gw = xcalloc(1, sizeof(*gw));
	gw->env = env;
	strlcpy(gw->state, "starting", sizeof(gw->state));
	if ((gw->base = event_base_new()) == NULL)
		fatalx("event_base_new");
	gw->child = child_start(env, gw->base, &gateway_ops, NULL);
	gw->db = db_new(env->db_conninfo, "fleetd: gateway");
	db_async_init(gw->db, gw->base);
	workers_init();
	turns_init();
	http_init();
	gateway_stats();
	child_ready(gw->child);

	event_base_dispatch(gw->base);

	http_free();
	turns_free();
	workers_free();
	db_free(gw->db);
	child_free(gw->child);
	event_base_free(gw->base);
	free(gw);
	exit(0);
}
