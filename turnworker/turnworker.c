/*
 * A turnworker runs one Turn at a time.  It registers with the gateway
 * over run/gateway.sock, and comes back when the gateway restarts.
 */
#include <sys/types.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/child.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/chan.h"

#define DIAL_MIN_MS	50
#define DIAL_MAX_MS	1000

struct turnworker {
	struct event_base	*base;
	struct child_env	*env;
	struct child		*child;
	struct chan		*gateway;
	struct event		*ev_dial;
	int			 dial_ms;
	int			 ready;
	char			*gwpath;
};

static struct turnworker	*tw;

static void	tw_dial(evutil_socket_t, short, void *);

static void
tw_dial_later(void)
{
	timer_add_ms(tw->ev_dial, tw->dial_ms);
	tw->dial_ms = tw->dial_ms * 2 > DIAL_MAX_MS ? DIAL_MAX_MS :
	    tw->dial_ms * 2;
}

static void
tw_gateway_msg(struct chan *ch, struct msg *m, void *arg)
{
	(void)arg;
	switch (m->type) {
	case MSG_READY:
		/* The gateway has us on its list: now we can take Turns. */
		if (!tw->ready) {
			tw->ready = 1;
			child_ready(tw->child);
		}
		break;
	case MSG_HELLO:
	case MSG_STATE:
	case MSG_STOP:
	case MSG_RELOAD:
	case MSG_STATS:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_WORKER_HELLO:
	case MSG__COUNT:
		log_warnx("gateway: unexpected %s", proto_msg_name(m->type));
		chan_free(ch);
		tw->gateway = NULL;
		tw_dial_later();
		break;
	}
}

static void
tw_gateway_close(struct chan *ch, const char *why, void *arg)
{
	(void)arg;
	log_info("gateway connection lost (%s); reconnecting", why);
	chan_free(ch);
	tw->gateway = NULL;
	tw->dial_ms = DIAL_MIN_MS;
	tw_dial_later();
}

static void
tw_dial(evutil_socket_t fd, short events, void *arg)
{
	struct msg	 m;
	int		 s;

	(void)fd;
	(void)events;
	(void)arg;
	if ((s = unix_connect(tw->gwpath)) == -1) {
		log_debug("%s: %s", tw->gwpath, strerror(errno));
		tw_dial_later();
		return;
	}
	tw->dial_ms = DIAL_MIN_MS;
	tw->gateway = chan_new(tw->base, s, "gateway", tw_gateway_msg,
	    tw_gateway_close, NULL);
	proto_msg_init(&m, MSG_WORKER_HELLO);
	m.worker_hello.instance = tw->env->instance;
	m.worker_hello.pid = getpid();
	m.worker_hello.version = PROTO_VERSION;
	chan_send(tw->gateway, &m);
}

static void
tw_dispatch(struct msg *m, void *arg)
{
	(void)arg;
	switch (m->type) {
	case MSG_STATE:
		break;
	case MSG_STOP:
		/* No Turn in flight: leave now. */
		event_base_loopexit(tw->base, NULL);
		break;
	case MSG_RELOAD:
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

static const struct child_ops tw_ops = {
	tw_dispatch,
	NULL
};

void
turnworker_main(struct child_env *env)
{
	tw = xcalloc(1, sizeof(*tw));
	tw->env = env;
	if ((tw->base = event_base_new()) == NULL)
		fatalx("event_base_new");
	xasprintf(&tw->gwpath, "%s/gateway.sock", env->rundir);
	tw->child = child_start(env, tw->base, &tw_ops, NULL);
	if ((tw->ev_dial = evtimer_new(tw->base, tw_dial, NULL)) == NULL)
		fatalx("evtimer_new");
	tw->dial_ms = DIAL_MIN_MS;
	tw_dial(-1, 0, NULL);

	event_base_dispatch(tw->base);

	chan_free(tw->gateway);
	event_free(tw->ev_dial);
	child_free(tw->child);
	event_base_free(tw->base);
	free(tw->gwpath);
	free(tw);
	exit(0);
}
