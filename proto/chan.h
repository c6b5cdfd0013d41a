/*
 * A message channel on a Unix stream socket driven by a libevent loop.
 * The owner gets one callback per decoded message and one when the
 * channel dies (peer closed, I/O error, or a protocol violation, which
 * is logged and drops the peer).  After the close callback the owner
 * must chan_free() the channel; it may do so from inside either callback.
 */
#ifndef FLEET_CHAN_H
#define FLEET_CHAN_H

#include <event2/event.h>

#include "proto.h"

#define CHAN_OUT_MAX	(64 * 1024 * 1024)

struct chan;

typedef void	(*chan_msg_cb)(struct chan *, struct msg *, void *);
typedef void	(*chan_close_cb)(struct chan *, const char *, void *);

struct chan	*chan_new(struct event_base *, int, const char *, chan_msg_cb,
		    chan_close_cb, void *);
int		 chan_send(struct chan *, struct msg *);
void		 chan_free(struct chan *);
void		 chan_set_peer(struct chan *, const char *);
const char	*chan_peer(struct chan *);
size_t		 chan_queued(struct chan *);
int		 chan_fd(struct chan *);

#endif
