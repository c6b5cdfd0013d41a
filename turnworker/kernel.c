#include <sys/types.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/util.h"
#include "kernel.h"

struct kernel {
	int			 in;
	int			 out;
	struct event		*ev_read;
	struct event		*ev_write;
	struct evbuffer		*rbuf;
	struct evbuffer		*wbuf;
	const struct kernel_ops	*ops;
	void			*arg;
	int			 dead;
	int			 dispatching;
	int			 freed;
};

static void	kernel_die(struct kernel *, const char *);

static void
kernel_destroy(struct kernel *k)
{
	event_free(k->ev_read);
	event_free(k->ev_write);
	evbuffer_free(k->rbuf);
	evbuffer_free(k->wbuf);
	if (k->in != -1)
		close(k->in);
	if (k->out != -1)
		close(k->out);
	free(k);
}

void
kernel_free(struct kernel *k)
{
	if (k == NULL)
		return;
	if (k->dispatching) {
		k->freed = 1;
		k->dead = 1;
		event_del(k->ev_read);
		event_del(k->ev_write);
		return;
	}
	kernel_destroy(k);
}

static void
kernel_die(struct kernel *k, const char *why)
{
	if (k->dead)
		return;
	k->dead = 1;
	event_del(k->ev_read);
	event_del(k->ev_write);
	k->ops->closed(k, why, k->arg);
}

static void
kernel_read(evutil_socket_t fd, short events, void *arg)
{
	struct kernel	*k = arg;
	json_error_t	 jerr;
	json_t		*ev;
	size_t		 len;
	char		*line;
	int		 n;

	(void)events;
	k->dispatching = 1;
	n = evbuffer_read(k->rbuf, fd, 65536);
	if (n == 0)
		kernel_die(k, "the kernel closed its output");
	else if (n == -1 && errno != EAGAIN && errno != EINTR)
		kernel_die(k, strerror(errno));
	while (!k->dead && (line = evbuffer_readln(k->rbuf, &len,
	    EVBUFFER_EOL_LF)) != NULL) {
		ev = json_loadb(line, len, 0, &jerr);
		free(line);
		if (ev == NULL || !json_is_object(ev)) {
			json_decref(ev);
			log_warnx("kernel: malformed event: %s", jerr.text);
			kernel_die(k, "the kernel sent a malformed event");
			break;
		}
		k->ops->event(k, ev, k->arg);
		json_decref(ev);
	}
	if (!k->dead && evbuffer_get_length(k->rbuf) > KERNEL_LINE_MAX)
		kernel_die(k, "the kernel sent an over-long line");
	k->dispatching = 0;
	if (k->freed)
		kernel_destroy(k);
}

static void
kernel_write(evutil_socket_t fd, short events, void *arg)
{
	struct kernel	*k = arg;

	(void)events;
	if (evbuffer_write(k->wbuf, fd) == -1 && errno != EAGAIN &&
	    errno != EINTR) {
		k->dispatching = 1;
		kernel_die(k, strerror(errno));
		k->dispatching = 0;
		if (k->freed)
			kernel_destroy(k);
		return;
	}
	if (evbuffer_get_length(k->wbuf) > 0)
		event_add(k->ev_write, NULL);
}

/* Take over the kernel's stdin (in) and stdout (out). */
struct kernel *
kernel_open(struct event_base *base, int in, int out,
    const struct kernel_ops *ops, void *arg)
{
	struct kernel	*k;

	k = xcalloc(1, sizeof(*k));
	k->in = in;
	k->out = out;
	k->ops = ops;
	k->arg = arg;
	if (fd_nonblock(in) == -1 || fd_nonblock(out) == -1)
		fatal("%s: fd_nonblock", __func__);
	fd_cloexec(in, 1);
	fd_cloexec(out, 1);
	if ((k->rbuf = evbuffer_new()) == NULL ||
	    (k->wbuf = evbuffer_new()) == NULL)
		fatalx("%s: evbuffer_new", __func__);
	k->ev_read = event_new(base, out, EV_READ | EV_PERSIST, kernel_read, k);
	k->ev_write = event_new(base, in, EV_WRITE, kernel_write, k);
	if (k->ev_read == NULL || k->ev_write == NULL)
		fatalx("%s: event_new", __func__);
	event_add(k->ev_read, NULL);
	return k;
}

/* Queue one request line; -1 when the kernel is gone. */
int
kernel_send(struct kernel *k, json_t *req)
{
	char	*s;

	if (k->dead)
		return -1;
	if ((s = json_dumps(req, JSON_COMPACT | JSON_ENSURE_ASCII)) == NULL)
		fatalx("%s: json_dumps", __func__);
	evbuffer_add(k->wbuf, s, strlen(s));
	evbuffer_add(k->wbuf, "\n", 1);
	free(s);
	event_add(k->ev_write, NULL);
	return 0;
}
