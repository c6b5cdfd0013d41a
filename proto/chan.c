#include <sys/types.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/string.h>
#include <event2/event.h>

#include "lib/log.h"
#include "lib/util.h"
#include "chan.h"

struct chan_out {
	TAILQ_ENTRY(chan_out)	 entry;
	char			*buf;
	size_t			 len;
	size_t			 off;
	int			 fds[PROTO_MSG_FDS_MAX];
	size_t			 nfds;
};

struct chan {
	int			 fd;
	char			 peer[64];
	struct event		*ev_read;
	struct event		*ev_write;
	struct event		*ev_die;	/* tells the owner it died */
	char			 why[128];
	struct proto_reader	 reader;
	TAILQ_HEAD(, chan_out)	 outq;
	size_t			 queued;
	chan_msg_cb		 on_msg;
	chan_close_cb		 on_close;
	void			*arg;
	int			 dispatching;
	int			 dead;
	int			 freed;
};

static void	chan_read(evutil_socket_t, short, void *);
static void	chan_write(evutil_socket_t, short, void *);
static void	chan_die(struct chan *, const char *);
static void	chan_die_cb(evutil_socket_t, short, void *);
static void	chan_destroy(struct chan *);
static void	out_free(struct chan_out *);

struct chan *
chan_new(struct event_base *base, int fd, const char *peer, chan_msg_cb on_msg,
    chan_close_cb on_close, void *arg)
{
	struct chan	*c;

	if (fd_nonblock(fd) == -1)
		fatal("%s: fd_nonblock", __func__);
	c = xcalloc(1, sizeof(*c));
	c->fd = fd;
	strlcpy(c->peer, peer, sizeof(c->peer));
	proto_reader_init(&c->reader);
	TAILQ_INIT(&c->outq);
	c->on_msg = on_msg;
	c->on_close = on_close;
	c->arg = arg;
	c->ev_read = event_new(base, fd, EV_READ | EV_PERSIST, chan_read, c);
	c->ev_write = event_new(base, fd, EV_WRITE, chan_write, c);
	c->ev_die = event_new(base, -1, 0, chan_die_cb, c);
	if (c->ev_read == NULL || c->ev_write == NULL || c->ev_die == NULL)
		fatalx("%s: event_new", __func__);
	event_add(c->ev_read, NULL);
	return c;
}

void
chan_set_peer(struct chan *c, const char *peer)
{
	strlcpy(c->peer, peer, sizeof(c->peer));
}

const char *
chan_peer(struct chan *c)
{
	return c->peer;
}

size_t
chan_queued(struct chan *c)
{
	return c->queued;
}

int
chan_fd(struct chan *c)
{
	return c->fd;
}

static void
out_free(struct chan_out *o)
{
	size_t	 i;

	for (i = 0; i < o->nfds; i++)
		close(o->fds[i]);
	free(o->buf);
	free(o);
}

static void
chan_destroy(struct chan *c)
{
	struct chan_out	*o;

	event_free(c->ev_read);
	event_free(c->ev_write);
	event_free(c->ev_die);
	while ((o = TAILQ_FIRST(&c->outq)) != NULL) {
		TAILQ_REMOVE(&c->outq, o, entry);
		out_free(o);
	}
	proto_reader_free(&c->reader);
	if (c->fd != -1)
		close(c->fd);
	free(c);
}

void
chan_free(struct chan *c)
{
	if (c == NULL)
		return;
	if (c->dispatching) {
		c->freed = 1;
		c->dead = 1;
		event_del(c->ev_read);
		event_del(c->ev_write);
		return;
	}
	chan_destroy(c);
}

static void
chan_die_cb(evutil_socket_t fd, short events, void *arg)
{
	struct chan	*c = arg;

	(void)fd;
	(void)events;
	c->dispatching = 1;
	c->on_close(c, c->why, c->arg);
	c->dispatching = 0;
	if (c->freed)
		chan_destroy(c);
}

/*
 * The channel is finished: its events stop now, and the owner hears of
 * it once, from the event loop, never from inside its own chan_send().
 */
static void
chan_die(struct chan *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = 1;
	strlcpy(c->why, why, sizeof(c->why));
	event_del(c->ev_read);
	event_del(c->ev_write);
	event_active(c->ev_die, 0, 0);
}

static int
chan_flush(struct chan *c)
{
	struct chan_out	*o;
	struct msghdr	 mh;
	struct iovec	 iov;
	struct cmsghdr	*cm;
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) * PROTO_MSG_FDS_MAX)];
	} cmsgbuf;
	ssize_t		 n;
	size_t		 i;

	while ((o = TAILQ_FIRST(&c->outq)) != NULL) {
		memset(&mh, 0, sizeof(mh));
		iov.iov_base = o->buf + o->off;
		iov.iov_len = o->len - o->off;
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		if (o->off == 0 && o->nfds > 0) {
			mh.msg_control = cmsgbuf.buf;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * o->nfds);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * o->nfds);
			memcpy(CMSG_DATA(cm), o->fds, sizeof(int) * o->nfds);
		}
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				event_add(c->ev_write, NULL);
				return 0;
			}
			return -1;
		}
		if (o->off == 0) {
			/* The descriptors went with the first byte. */
			for (i = 0; i < o->nfds; i++)
				close(o->fds[i]);
			o->nfds = 0;
		}
		o->off += n;
		c->queued -= n;
		if (o->off == o->len) {
			TAILQ_REMOVE(&c->outq, o, entry);
			out_free(o);
		}
	}
	return 0;
}

/*
 * Queue m for sending.  The channel takes ownership of the descriptors
 * in m (they are closed once sent, or when the channel dies) but not of
 * its other fields.  Returns -1 when the channel is dead or m does not
 * encode; the latter is a bug and is logged.  A failure to send is
 * reported to the owner later, from the event loop.
 */
int
chan_send(struct chan *c, struct msg *m)
{
	struct chan_out	*o;
	char		 err[256];

	o = xcalloc(1, sizeof(*o));
	if (proto_encode(m, &o->buf, &o->len, o->fds, &o->nfds, err,
	    sizeof(err)) == -1) {
		log_warnx("%s: %s", c->peer, err);
		free(o);
		return -1;
	}
	if (c->dead) {
		out_free(o);
		return -1;
	}
	if (c->queued + o->len > CHAN_OUT_MAX) {
		log_warnx("%s: peer is not reading (%zu bytes queued); "
		    "dropping it", c->peer, c->queued);
		out_free(o);
		chan_die(c, "peer not reading");
		return -1;
	}
	TAILQ_INSERT_TAIL(&c->outq, o, entry);
	c->queued += o->len;
	if (TAILQ_FIRST(&c->outq) == o && chan_flush(c) == -1) {
		chan_die(c, strerror(errno));
		return -1;
	}
	return 0;
}

static void
chan_write(evutil_socket_t fd, short events, void *arg)
{
	struct chan	*c = arg;

	(void)fd;
	(void)events;
	c->dispatching = 1;
	if (chan_flush(c) == -1)
		chan_die(c, strerror(errno));
	c->dispatching = 0;
	if (c->freed)
		chan_destroy(c);
}

static void
chan_read(evutil_socket_t fd, short events, void *arg)
{
	struct chan	*c = arg;
	struct msg	 m;
	char		 err[256];
	ssize_t		 n;
	int		 rc;

	(void)events;
	c->dispatching = 1;
	n = proto_reader_fill(&c->reader, fd);
	if (n == -1 && errno == EPROTO) {
		log_warnx("%s: too many descriptors; dropping peer", c->peer);
		chan_die(c, "protocol error");
	} else if (n == -1 && errno != EAGAIN)
		chan_die(c, strerror(errno));
	while (n > 0 && !c->dead) {
		rc = proto_reader_next(&c->reader, &m, err, sizeof(err));
		if (rc == 0)
			break;
		if (rc == -1) {
			log_warnx("%s: %s; dropping peer", c->peer, err);
			chan_die(c, "protocol error");
			break;
		}
		c->on_msg(c, &m, c->arg);
		proto_msg_clear(&m);
	}
	if (n == 0 && !c->dead) {
		if (c->reader.len > c->reader.off)
			log_warnx("%s: connection closed inside a frame",
			    c->peer);
		chan_die(c, "connection closed");
	}
	c->dispatching = 0;
	if (c->freed)
		chan_destroy(c);
}
