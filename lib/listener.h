/*
 * A Unix stream socket that only the user we run as may use: listen,
 * accept with the peer's uid checked, hand each connection over, and
 * remove the socket file when done.
 */
#ifndef FLEET_LISTENER_H
#define FLEET_LISTENER_H

struct event_base;
struct listener;

/* An accepted connection from our own uid, non-blocking. */
typedef void	(*listener_cb)(int, void *);

struct listener	*listener_new(struct event_base *, const char *,
		    listener_cb, void *);
void		 listener_free(struct listener *);

#endif
