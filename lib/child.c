#include <sys/types.h>
#include <sys/prctl.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/unistd.h>
#include <event2/event.h>

#include "proto/chan.h"
#include "child.h"
#include "log.h"
#include "util.h"

struct child {
	struct child_env	*env;
	struct event_base	*base;
	struct chan		*chan;
	const struct child_ops	*ops;
	void			*arg;
	struct event		*ev_term;
	struct event		*ev_int;
};

static const char *role_names[ROLE__COUNT] = {
	[ROLE_POSTGRES] = "postgres",
	[ROLE_LEASEMGR] = "leasemgr",
	[ROLE_GATEWAY] = "gateway",
	[ROLE_TURNWORKER] = "turnworker",
};

const char *
child_role_name(enum child_role role)
{
	if (role >= ROLE__COUNT)
		return "unknown";
	return role_names[role];
}

/*
 * First steps of a forked child: its title, its log prefix, and death
 * with its parent.
 */
void
child_init(struct child_env *env)
{
	if (env->instance > 0 && env->role == ROLE_TURNWORKER)
		snprintf(env->title, sizeof(env->title), "%s %d",
		    child_role_name(env->role), env->instance);
	else
		snprintf(env->title, sizeof(env->title), "%s",
		    child_role_name(env->role));
	setproctitle("%s", env->title);
	log_procinit(env->title);
	log_setlevel(env->conf->log_level);
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) == -1)
		fatal("prctl");
	/* The parent may have died before prctl took effect. */
	if (getppid() != env->ppid)
		exit(0);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGUSR1, SIG_IGN);
	signal(SIGCHLD, SIG_DFL);
}

static void
child_shutdown(struct child *c)
{
	if (c->ops->shutdown != NULL)
		c->ops->shutdown(c->arg);
	else
		event_base_loopexit(c->base, NULL);
}

static void
child_signal(evutil_socket_t sig, short events, void *arg)
{
	struct child	*c = arg;

	(void)events;
	log_debug("received signal %d", (int)sig);
	child_shutdown(c);
}

static void
child_chan_msg(struct chan *ch, struct msg *m, void *arg)
{
	struct child	*c = arg;

	(void)ch;
	switch (m->type) {
	case MSG_STATE:
	case MSG_RELOAD:
		if (c->ops->dispatch != NULL)
			c->ops->dispatch(m, c->arg);
		break;
	case MSG_STOP:
		if (c->ops->dispatch != NULL)
			c->ops->dispatch(m, c->arg);
		else
			child_shutdown(c);
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
child_chan_close(struct chan *ch, const char *why, void *arg)
{
	struct child	*c = arg;

	(void)ch;
	log_debug("fleetd channel closed (%s); exiting", why);
	chan_free(c->chan);
	c->chan = NULL;
	child_shutdown(c);
}

/*
 * Tie the child to fleetd over the channel at CHILD_CHAN_FD and say
 * hello.  The role calls child_ready() once it can serve.
 */
struct child *
child_start(struct child_env *env, struct event_base *base,
    const struct child_ops *ops, void *arg)
{
	struct child	*c;
	struct msg	 m;

	c = xcalloc(1, sizeof(*c));
	c->env = env;
	c->base = base;
	c->ops = ops;
	c->arg = arg;
	c->chan = chan_new(base, CHILD_CHAN_FD, "fleetd", child_chan_msg,
	    child_chan_close, c);
	c->ev_term = evsignal_new(base, SIGTERM, child_signal, c);
	c->ev_int = evsignal_new(base, SIGINT, child_signal, c);
	if (c->ev_term == NULL || c->ev_int == NULL)
		fatalx("%s: evsignal_new", __func__);
	evsignal_add(c->ev_term, NULL);
	evsignal_add(c->ev_int, NULL);

	proto_msg_init(&m, MSG_HELLO);
	m.hello.role = (char *)child_role_name(env->role);
	m.hello.instance = env->instance;
	m.hello.pid = getpid();
	m.hello.version = PROTO_VERSION;
	child_send(c, &m);
	return c;
}

void
child_ready(struct child *c)
{
	struct msg	 m;

	proto_msg_init(&m, MSG_READY);
	child_send(c, &m);
	log_debug("ready");
}

void
child_send(struct child *c, struct msg *m)
{
	if (c->chan != NULL)
		chan_send(c->chan, m);
}

void
child_free(struct child *c)
{
	if (c == NULL)
		return;
	chan_free(c->chan);
	event_free(c->ev_term);
	event_free(c->ev_int);
	free(c);
}
