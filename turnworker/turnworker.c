/*
 * A turnworker runs one Turn at a time.  It registers with the gateway
 * over run/gateway.sock (and again when the gateway restarts), takes
 * Turns from it, and streams their chunks back.
 */
#include <sys/types.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/store.h"
#include "lib/util.h"
#include "proto/chan.h"
#include "lm.h"
#include "turnworker.h"

#define DIAL_MIN_MS	50
#define DIAL_MAX_MS	1000

struct turnworker	*tw;

static void	tw_dial(evutil_socket_t, short, void *);

static void
tw_dial_later(void)
{
	timer_add_ms(tw->ev_dial, tw->dial_ms);
	tw->dial_ms = tw->dial_ms * 2 > DIAL_MAX_MS ? DIAL_MAX_MS :
	    tw->dial_ms * 2;
}

void
tw_send(struct msg *m)
{
	if (tw->gateway != NULL)
		chan_send(tw->gateway, m);
}

/* A Turn ended: leave now if fleetd asked us to stop. */
void
tw_turn_ended(void)
{
	if (tw->stopping)
		event_base_loopexit(tw->base, NULL);
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
	case MSG_TURN:
		if (tw->turn != NULL) {
			log_warnx("gateway sent a Turn while one runs");
			chan_free(ch);
			tw->gateway = NULL;
			turn_abandon();
			tw_dial_later();
			break;
		}
		turn_begin(&m->turn);
		break;
	case MSG_CANCEL:
		turn_cancel(m->cancel.turn);
		break;
	case MSG_HELLO:
	case MSG_STATE:
	case MSG_STOP:
	case MSG_RELOAD:
	case MSG_STATS:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_WORKER_HELLO:
	case MSG_WORKER_BYE:
	case MSG_ACQUIRE:
	case MSG_GRANT:
	case MSG_REFUSE:
	case MSG_RENEW:
	case MSG_TURN_STARTED:
	case MSG_CHUNK:
	case MSG_TURN_END:
	case MSG__COUNT:
		log_warnx("gateway: unexpected %s", proto_msg_name(m->type));
		chan_free(ch);
		tw->gateway = NULL;
		turn_abandon();
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
	/* Nobody can read the stream of a Turn in flight: end it. */
	turn_abandon();
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
	struct msg	 bye;

	(void)arg;
	switch (m->type) {
	case MSG_STATE:
	case MSG_RELOAD:
		break;
	case MSG_STOP:
		/* Finish the Turn in flight, then leave; no new ones. */
		proto_msg_init(&bye, MSG_WORKER_BYE);
		tw_send(&bye);
		tw->stopping = 1;
		if (tw->turn == NULL)
			event_base_loopexit(tw->base, NULL);
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

static void
tw_shutdown(void *arg)
{
	(void)arg;
	turn_abandon();
	event_base_loopexit(tw->base, NULL);
}

static const struct child_ops tw_ops = {
	tw_dispatch,
	tw_shutdown
};

/* The LM client, when the profile's environment names a base URL. */
static void
tw_lm_init(void)
{
	const struct fleet_config	*c = tw->env->conf;
	struct lm_config		 lc;
	const char			*url;

	url = getenv(c->lm_base_url_env);
	if (url == NULL || *url == '\0') {
		xasprintf(&tw->lm_error, "%s is not set: no language model to "
		    "call", c->lm_base_url_env);
		log_warnx("%s", tw->lm_error);
		return;
	}
	memset(&lc, 0, sizeof(lc));
	lc.base_url = url;
	lc.api_key = getenv(c->lm_api_key_env);
	lc.connect_timeout_s = 10;
	lc.timeout_s = c->lm_timeout;
	lc.stall_timeout_s = c->lm_timeout;
	lc.max_attempts = c->lm_max_attempts;
	tw->lm = lm_new(tw->base, &lc);
	lc.timeout_s = c->sub_timeout;
	lc.stall_timeout_s = c->sub_timeout;
	tw->lm_sub = lm_new(tw->base, &lc);
}

void
turnworker_main(struct child_env *env)
{
	tw = xcalloc(1, sizeof(*tw));
	tw->env = env;
	if ((tw->base = event_base_new()) == NULL)
		fatalx("event_base_new");
	xasprintf(&tw->gwpath, "%s/gateway.sock", env->rundir);
	tw->child = child_start(env, tw->base, &tw_ops, NULL);
	tw->db = db_new(env->db_conninfo, "fleetd: turnworker");
	store_prepare(tw->db);
	tw_lm_init();
	if ((tw->ev_dial = evtimer_new(tw->base, tw_dial, NULL)) == NULL)
		fatalx("evtimer_new");
	tw->dial_ms = DIAL_MIN_MS;
	tw_dial(-1, 0, NULL);

	event_base_dispatch(tw->base);

	turn_abandon();
	chan_free(tw->gateway);
	event_free(tw->ev_dial);
	if (tw->lm != NULL) {
		lm_free(tw->lm);
		lm_free(tw->lm_sub);
	}
	db_free(tw->db);
	child_free(tw->child);
	event_base_free(tw->base);
	free(tw->gwpath);
	free(tw->lm_error);
	free(tw);
	exit(0);
}
