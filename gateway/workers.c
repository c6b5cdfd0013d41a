/*
 * The turnworkers' side door: run/gateway.sock.  Each worker connects,
 * says hello, and is then a place to send Turns.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/unistd.h>
#include <event2/event.h>

#include "lib/listener.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/chan.h"
#include "gateway.h"

static void	workers_accept(int, void *);
static void	worker_msg(struct chan *, struct msg *, void *);
static void	worker_close(struct chan *, const char *, void *);
static void	worker_free(struct worker *);

void
workers_init(void)
{
	char	*path;

	TAILQ_INIT(&gw->workers);
	xasprintf(&path, "%s/gateway.sock", gw->env->rundir);
	if ((gw->listener = listener_new(gw->base, path, workers_accept,
	    NULL)) == NULL)
		fatal("%s", path);
	free(path);
}

void
workers_free(void)
{
	struct worker	*w;

	while ((w = TAILQ_FIRST(&gw->workers)) != NULL)
		worker_free(w);
	listener_free(gw->listener);
}

int
workers_ready(void)
{
	struct worker	*w;
	int		 n = 0;

	TAILQ_FOREACH(w, &gw->workers, entry)
		if (w->instance > 0)
			n++;
	return n;
}

static void
workers_accept(int fd, void *arg)
{
	struct worker	*w;

	(void)arg;
	if (gw->nworkers >= GW_WORKERS_MAX) {
		log_warnx("gateway.sock: too many connections");
		close(fd);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	w->chan = chan_new(gw->base, fd, "worker", worker_msg, worker_close, w);
	TAILQ_INSERT_TAIL(&gw->workers, w, entry);
	gw->nworkers++;
}

static void
worker_free(struct worker *w)
{
	if (w->instance > 0)
		turns_worker_gone(w);
	TAILQ_REMOVE(&gw->workers, w, entry);
	gw->nworkers--;
	chan_free(w->chan);
	free(w);
}

static void
worker_msg(struct chan *ch, struct msg *m, void *arg)
{
	struct worker	*w = arg;
	struct msg	 ack;
	char		 peer[64];

	switch (m->type) {
	case MSG_WORKER_HELLO:
		if (w->instance != 0 ||
		    m->worker_hello.version != PROTO_VERSION) {
			log_warnx("%s: unexpected hello; dropping it",
			    chan_peer(ch));
			worker_free(w);
			break;
		}
		w->instance = m->worker_hello.instance;
		w->pid = m->worker_hello.pid;
		snprintf(peer, sizeof(peer), "turnworker %d", w->instance);
		chan_set_peer(ch, peer);
		log_debug("%s registered (pid %d)", peer, (int)w->pid);
		proto_msg_init(&ack, MSG_READY);
		chan_send(ch, &ack);
		turns_worker_idle(w);
		break;
	case MSG_WORKER_BYE:
		/* It finishes the Turn it runs, if any, then exits. */
		log_debug("%s: leaving", chan_peer(ch));
		w->leaving = 1;
		break;
	case MSG_TURN_STARTED:
	case MSG_CHUNK:
	case MSG_TURN_END:
		if (w->instance == 0) {
			log_warnx("%s: %s before hello; dropping it",
			    chan_peer(ch), proto_msg_name(m->type));
			worker_free(w);
			break;
		}
		turns_worker_msg(w, m);
		break;
	case MSG_HELLO:
	case MSG_READY:
	case MSG_STATE:
	case MSG_STOP:
	case MSG_RELOAD:
	case MSG_STATS:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_ACQUIRE:
	case MSG_GRANT:
	case MSG_REFUSE:
	case MSG_RENEW:
	case MSG_TURN:
	case MSG_CANCEL:
	case MSG__COUNT:
		log_warnx("%s: unexpected %s; dropping it", chan_peer(ch),
		    proto_msg_name(m->type));
		worker_free(w);
		break;
	}
}

static void
worker_close(struct chan *ch, const char *why, void *arg)
{
	log_debug("%s: gone (%s)", chan_peer(ch), why);
	worker_free(arg);
}
