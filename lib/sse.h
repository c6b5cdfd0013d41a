/*
 * A bounded parser for text/event-stream bodies.  Bytes are fed as they
 * arrive, split anywhere; each complete event is handed to a callback.
 */
#ifndef FLEET_SSE_H
#define FLEET_SSE_H

#include <stddef.h>

enum sse_rc {
	SSE_OK,
	SSE_STOP,	/* the callback returned non-zero */
	SSE_TOOLONG	/* a line or an event's data exceeded the limit */
};

struct sse {
	int		(*cb)(const char *, const char *, size_t, void *);
	void		*arg;
	size_t		 max;		/* bytes per line and per event */
	char		*line;
	size_t		 linelen;
	size_t		 linecap;
	char		*data;
	size_t		 datalen;
	size_t		 datacap;
	int		 hasdata;
	int		 cr;		/* the last byte fed was a CR */
	int		 started;	/* the first line (maybe a BOM) is past */
	int		 stopped;
	char		 event[32];
};

void		 sse_init(struct sse *, size_t,
		    int (*)(const char *, const char *, size_t, void *), void *);
void		 sse_reset(struct sse *);
void		 sse_clear(struct sse *);
enum sse_rc	 sse_feed(struct sse *, const char *, size_t);
enum sse_rc	 sse_finish(struct sse *);

#endif
