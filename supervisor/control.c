/*
 * The control socket, run/fleetd.sock: `fleet' asks for status, drain,
 * undrain, stop and reload here.  Only the user fleetd runs as may
 * connect.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/unistd.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/listener.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/chan.h"
#include "supervisor.h"

#define CTL_CONNS_MAX	32

struct ctl_conn {
	TAILQ_ENTRY(ctl_conn)	 entry;
	struct chan		*chan;
	int			 drain_wait;	/* waits for in-flight Turns */
	int			 stopping;	/* closes when fleetd exits */
	struct event		*ev_timeout;
};

static void	control_accept(int, void *);
static void	control_msg(struct chan *, struct msg *, void *);
static void	control_close(struct chan *, const char *, void *);
static void	control_conn_free(struct ctl_conn *);
static void	control_reply(struct ctl_conn *, int, const char *,
		    const char *);
static void	control_drain_timeout(evutil_socket_t, short, void *);

void
control_init(void)
{
	char	*path;

	xasprintf(&path, "%s/fleetd.sock", fleetd->rundir);
	if ((fleetd->ctl = listener_new(fleetd->base, path, control_accept,
	    NULL)) == NULL)
		fatal("control socket %s", path);
	free(path);
}

void
control_cleanup(void)
{
	struct ctl_conn	*c;

	while ((c = TAILQ_FIRST(&fleetd->ctls)) != NULL)
		control_conn_free(c);
	listener_free(fleetd->ctl);
	fleetd->ctl = NULL;
}

static void
control_accept(int fd, void *arg)
{
	struct ctl_conn	*c;

	(void)arg;
	if (fleetd->nctls >= CTL_CONNS_MAX) {
		log_warnx("control: too many connections");
		close(fd);
		return;
	}
	c = xcalloc(1, sizeof(*c));
	c->chan = chan_new(fleetd->base, fd, "control client", control_msg,
	    control_close, c);
	c->ev_timeout = evtimer_new(fleetd->base, control_drain_timeout, c);
	TAILQ_INSERT_TAIL(&fleetd->ctls, c, entry);
	fleetd->nctls++;
}

static void
control_conn_free(struct ctl_conn *c)
{
	TAILQ_REMOVE(&fleetd->ctls, c, entry);
	fleetd->nctls--;
	chan_free(c->chan);
	event_free(c->ev_timeout);
	free(c);
}

static void
control_close(struct chan *ch, const char *why, void *arg)
{
	(void)ch;
	(void)why;
	control_conn_free(arg);
}

static void
control_reply(struct ctl_conn *c, int ok, const char *message,
    const char *json)
{
	struct msg	 m;

	proto_msg_init(&m, MSG_CTL_REPLY);
	m.ctl_reply.ok = ok;
	m.ctl_reply.message = (char *)message;
	m.ctl_reply.json = (char *)json;
	chan_send(c->chan, &m);
}

char *
control_status_json(void)
{
	json_t		*root, *procs, *o;
	struct proc	*p;
	char		*s, last[64];
	int64_t		 now = now_ms();
	int		 active = 0, queued = 0;

	procs = json_array();
	TAILQ_FOREACH(p, &fleetd->procs, entry) {
		o = json_pack("{s:s, s:i, s:s, s:i}",
		    "role", child_role_name(p->role),
		    "instance", p->instance,
		    "state", proc_state_name(p->state),
		    "restarts", p->restarts);
		json_object_set_new(o, "pid", p->pid == -1 ? json_null() :
		    json_integer(p->pid));
		json_object_set_new(o, "uptime_s", p->pid == -1 ?
		    json_integer(0) :
		    json_integer((now - p->started_ms) / 1000));
		if (p->has_status) {
			if (WIFEXITED(p->last_status))
				snprintf(last, sizeof(last), "exit %d",
				    WEXITSTATUS(p->last_status));
			else
				snprintf(last, sizeof(last), "signal %d",
				    WTERMSIG(p->last_status));
			json_object_set_new(o, "last_exit", json_string(last));
		} else
			json_object_set_new(o, "last_exit", json_null());
		if (p->state == PS_BACKOFF)
			json_object_set_new(o, "backoff_s",
			    json_integer(p->backoff));
		json_array_append_new(procs, o);
		if (p->role == ROLE_GATEWAY) {
			active += p->turns_active;
			queued += p->turns_queued;
		}
	}
	root = json_pack("{s:s, s:i, s:s, s:I, s:s, s:s, s:s, s:s, s:o, "
	    "s:{s:i, s:i}}",
	    "state", fleetd_state_name(fleetd->state),
	    "pid", (int)getpid(),
	    "version", FLEET_VERSION,
	    "uptime_s", (json_int_t)((now - fleetd->started_ms) / 1000),
	    "url", fleetd->url,
	    "profile", fleetd->conf->profile,
	    "config", fleetd->conf->path,
	    "state_dir", fleetd->statedir,
	    "processes", procs,
	    "turns", "active", active, "queued", queued);
	if (root == NULL)
		fatalx("%s: json_pack", __func__);
	TAILQ_FOREACH(p, &fleetd->procs, entry) {
		json_t		*pl;
		json_error_t	 jerr;

		if (p->role == ROLE_LEASEMGR && p->pool_json != NULL &&
		    (pl = json_loads(p->pool_json, 0, &jerr)) != NULL)
			json_object_set_new(root, "pool", pl);
	}
	if ((s = json_dumps(root, JSON_COMPACT)) == NULL)
		fatalx("%s: json_dumps", __func__);
	json_decref(root);
	return s;
}

static void
control_drain_timeout(evutil_socket_t fd, short events, void *arg)
{
	struct ctl_conn	*c = arg;
	char		 buf[128];

	(void)fd;
	(void)events;
	c->drain_wait = 0;
	snprintf(buf, sizeof(buf), "timed out with %d Turn(s) in flight",
	    fleetd_turns_active());
	control_reply(c, 0, buf, NULL);
}

/* In-flight work changed: answer the `drain --wait' callers it frees. */
void
control_drained(void)
{
	struct ctl_conn	*c, *next;

	if (fleetd_turns_active() > 0 || fleetd->state != SV_DRAINING)
		return;
	for (c = TAILQ_FIRST(&fleetd->ctls); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (!c->drain_wait)
			continue;
		c->drain_wait = 0;
		evtimer_del(c->ev_timeout);
		control_reply(c, 1, "drained: no Turns in flight", NULL);
	}
}

static void
control_request(struct ctl_conn *c, struct msg_ctl_request *r)
{
	char	 buf[512], *json;
	int	 timeout;

	if (strcmp(r->cmd, "status") == 0) {
		json = control_status_json();
		control_reply(c, 1, fleetd_state_name(fleetd->state), json);
		free(json);
	} else if (strcmp(r->cmd, "drain") == 0) {
		if (fleetd->state != SV_READY && fleetd->state != SV_DRAINING) {
			snprintf(buf, sizeof(buf), "cannot drain while %s",
			    fleetd_state_name(fleetd->state));
			control_reply(c, 0, buf, NULL);
			return;
		}
		fleetd_drain(1);
		if (r->wait && fleetd_turns_active() == 0) {
			control_reply(c, 1, "drained: no Turns in flight",
			    NULL);
			return;
		}
		if (!r->wait) {
			snprintf(buf, sizeof(buf), "draining: %d Turn(s) in "
			    "flight", fleetd_turns_active());
			control_reply(c, 1, buf, NULL);
			return;
		}
		timeout = r->timeout > 0 ? r->timeout :
		    fleetd->conf->shutdown_timeout;
		c->drain_wait = 1;
		timer_add_ms(c->ev_timeout, (int64_t)(timeout) * 1000);
	} else if (strcmp(r->cmd, "undrain") == 0) {
		if (fleetd->state != SV_DRAINING) {
			snprintf(buf, sizeof(buf), "not draining (%s)",
			    fleetd_state_name(fleetd->state));
			control_reply(c, 0, buf, NULL);
			return;
		}
		fleetd_drain(0);
		control_reply(c, 1, "accepting Turns again", NULL);
	} else if (strcmp(r->cmd, "stop") == 0) {
		snprintf(buf, sizeof(buf), "stopping (pid %d)", (int)getpid());
		control_reply(c, 1, buf, NULL);
		c->stopping = 1;
		fleetd_stop(0, r->timeout);
	} else if (strcmp(r->cmd, "reload") == 0) {
		if (fleetd_reload(buf, sizeof(buf)) == -1)
			control_reply(c, 0, buf, NULL);
		else
			control_reply(c, 1, buf, NULL);
	} else {
		snprintf(buf, sizeof(buf), "unknown command '%s'", r->cmd);
		control_reply(c, 0, buf, NULL);
	}
}

static void
control_msg(struct chan *ch, struct msg *m, void *arg)
{
	struct ctl_conn	*c = arg;

	switch (m->type) {
	case MSG_CTL_REQUEST:
		control_request(c, &m->ctl_request);
		break;
	case MSG_HELLO:
	case MSG_READY:
	case MSG_STATE:
	case MSG_STOP:
	case MSG_RELOAD:
	case MSG_STATS:
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
		log_warnx("control: unexpected %s; dropping client",
		    proto_msg_name(m->type));
		(void)ch;
		control_conn_free(c);
		break;
	}
}
