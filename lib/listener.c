#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <bsd/unistd.h>
#include <event2/event.h>

#include "listener.h"
#include "log.h"
#include "util.h"

struct listener {
	int		 fd;
	char		*path;
	struct event	*ev;
	listener_cb	 cb;
	void		*arg;
};

static void
listener_accept(evutil_socket_t lfd, short events, void *arg)
{
	struct listener	*l = arg;
	uid_t		 uid;
	gid_t		 gid;
	int		 fd;

	(void)events;
	if ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) ==
	    -1) {
		if (errno != EAGAIN && errno != EINTR)
			log_warn("%s: accept", l->path);
		return;
	}
	if (getpeereid(fd, &uid, &gid) == -1 || uid != geteuid()) {
		log_warnx("%s: refused a connection from uid %d", l->path,
		    (int)uid);
		close(fd);
		return;
	}
	l->cb(fd, l->arg);
}

/* Listen on path (mode 0600); NULL with errno set when that fails. */
struct listener *
listener_new(struct event_base *base, const char *path, listener_cb cb,
    void *arg)
{
	struct listener	*l;
	int		 fd;

	if ((fd = unix_listen(path, 0600)) == -1)
		return NULL;
	l = xcalloc(1, sizeof(*l));
	l->fd = fd;
	l->path = xstrdup(path);
	l->cb = cb;
	l->arg = arg;
	if ((l->ev = event_new(base, fd, EV_READ | EV_PERSIST,
	    listener_accept, l)) == NULL)
		fatalx("%s: event_new", __func__);
	event_add(l->ev, NULL);
	return l;
}

void
listener_free(struct listener *l)
{
	if (l == NULL)
		return;
	event_free(l->ev);
	close(l->fd);
	unlink(l->path);
	free(l->path);
	free(l);
}
