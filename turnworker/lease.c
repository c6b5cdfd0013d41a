#include <sys/types.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/string.h>
#include <event2/event.h>

#include "lib/log.h"
#include "lib/util.h"
#include "proto/chan.h"
#include "lease.h"

struct lease_client {
	struct event_base	*base;
	struct chan		*chan;
	const struct lease_ops	*ops;
	void			*arg;
	struct event		*ev_renew;
	struct event		*ev_fail;	/* reports a connect failure */
	int64_t			 ttl_ms;
	int			 granted;
	int			 done;		/* refused or lost: no more calls */
	char			 id[40];
	char			 why[256];
};

static void
lease_renew(evutil_socket_t fd, short events, void *arg)
{
	struct lease_client	*lc = arg;
	struct msg		 m;

	(void)fd;
	(void)events;
	proto_msg_init(&m, MSG_RENEW);
	if (lc->chan != NULL && chan_send(lc->chan, &m) == 0)
		timer_add_ms(lc->ev_renew, lc->ttl_ms / 3);
}

static void
lease_msg(struct chan *ch, struct msg *m, void *arg)
{
	struct lease_client	*lc = arg;
	int			 kin, kout;

	switch (m->type) {
	case MSG_GRANT:
		if (lc->granted || lc->done)
			goto bad;
		lc->granted = 1;
		strlcpy(lc->id, m->grant.lease, sizeof(lc->id));
		lc->ttl_ms = m->grant.ttl_ms;
		kin = m->grant.kernel_in;
		kout = m->grant.kernel_out;
		m->grant.kernel_in = m->grant.kernel_out = -1;
		timer_add_ms(lc->ev_renew, lc->ttl_ms / 3);
		lc->ops->granted(lc, kin, kout, m->grant.boot_ms, lc->arg);
		break;
	case MSG_REFUSE:
		if (lc->granted || lc->done)
			goto bad;
		lc->done = 1;
		lc->ops->refused(lc, m->refuse.code, m->refuse.message,
		    lc->arg);
		break;
	case MSG_HELLO:
	case MSG_READY:
	case MSG_STATE:
	case MSG_STOP:
	case MSG_RELOAD:
	case MSG_STATS:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_WORKER_HELLO:
	case MSG_WORKER_BYE:
	case MSG_ACQUIRE:
	case MSG_RENEW:
	case MSG_TURN:
	case MSG_TURN_STARTED:
	case MSG_CHUNK:
	case MSG_TURN_END:
	case MSG_CANCEL:
	case MSG__COUNT:
		goto bad;
	}
	return;
bad:
	log_warnx("leasemgr: unexpected %s", proto_msg_name(m->type));
	chan_free(ch);
	lc->chan = NULL;
	if (!lc->done) {
		lc->done = 1;
		if (lc->granted)
			lc->ops->lost(lc, lc->arg);
		else
			lc->ops->refused(lc, "unavailable", "the lease "
			    "manager misbehaved", lc->arg);
	}
}

static void
lease_close(struct chan *ch, const char *why, void *arg)
{
	struct lease_client	*lc = arg;

	chan_free(ch);
	lc->chan = NULL;
	evtimer_del(lc->ev_renew);
	if (lc->done)
		return;
	lc->done = 1;
	if (lc->granted) {
		log_warnx("lease %s lost: %s", lc->id, why);
		lc->ops->lost(lc, lc->arg);
	} else
		lc->ops->refused(lc, "unavailable", "the lease manager closed "
		    "the connection", lc->arg);
}

static void
lease_connect_failed(evutil_socket_t fd, short events, void *arg)
{
	struct lease_client	*lc = arg;

	(void)fd;
	(void)events;
	lc->done = 1;
	lc->ops->refused(lc, "unavailable", lc->why, lc->arg);
}

/*
 * Ask for a sandbox with workspace's volume (a UUID, or "" for none)
 * for run, waiting up to deadline_ms.  Exactly one of granted or
 * refused follows, from the event loop; lost may follow a grant.
 */
struct lease_client *
lease_acquire(struct event_base *base, const char *rundir,
    const char *workspace, const char *run, int64_t deadline_ms,
    const struct lease_ops *ops, void *arg)
{
	struct lease_client	*lc;
	struct msg		 m;
	char			*path;
	int			 fd;

	lc = xcalloc(1, sizeof(*lc));
	lc->base = base;
	lc->ops = ops;
	lc->arg = arg;
	if ((lc->ev_renew = evtimer_new(base, lease_renew, lc)) == NULL ||
	    (lc->ev_fail = evtimer_new(base, lease_connect_failed, lc)) ==
	    NULL)
		fatalx("%s: evtimer_new", __func__);
	xasprintf(&path, "%s/leasemgr.sock", rundir);
	if ((fd = unix_connect(path)) == -1) {
		snprintf(lc->why, sizeof(lc->why), "cannot reach the lease "
		    "manager: %s", strerror(errno));
		free(path);
		timer_add_ms(lc->ev_fail, 0);
		return lc;
	}
	free(path);
	lc->chan = chan_new(base, fd, "leasemgr", lease_msg, lease_close, lc);
	proto_msg_init(&m, MSG_ACQUIRE);
	m.acquire.workspace = (char *)workspace;
	m.acquire.run = (char *)run;
	m.acquire.deadline_ms = deadline_ms;
	chan_send(lc->chan, &m);
	return lc;
}

/* End the lease: the manager destroys the sandbox.  No callback after. */
void
lease_release(struct lease_client *lc)
{
	if (lc == NULL)
		return;
	chan_free(lc->chan);
	event_free(lc->ev_renew);
	event_free(lc->ev_fail);
	free(lc);
}

const char *
lease_id(struct lease_client *lc)
{
	return lc->id;
}
