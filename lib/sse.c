/*
 * Server-sent events, as the chat-completions gateways send them: lines
 * end in LF, CRLF or CR; "data:" lines (with or without the space) are
 * joined with LF and dispatched at a blank line; ":" lines are comments
 * (OpenRouter's keep-alives).  Two gateway quirks are tolerated: a bare
 * JSON line (Ollama's unframed errors) and an "error:" field (llama.cpp
 * before 2025-09) are each dispatched at once as an event of their own.
 */
#include <sys/types.h>

#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "lib/sse.h"

static int	sse_append(char **, size_t *, size_t *, const char *, size_t,
		    size_t);
static enum sse_rc sse_line(struct sse *);
static enum sse_rc sse_field(struct sse *, const char *, size_t);
static enum sse_rc sse_dispatch(struct sse *, const char *, const char *,
		    size_t);

void
sse_init(struct sse *s, size_t max,
    int (*cb)(const char *, const char *, size_t, void *), void *arg)
{
	memset(s, 0, sizeof(*s));
	s->max = max;
	s->cb = cb;
	s->arg = arg;
}

/* Forget any partial line or event, keeping the buffers. */
void
sse_reset(struct sse *s)
{
	s->linelen = s->datalen = 0;
	s->hasdata = s->cr = s->started = s->stopped = 0;
	s->event[0] = '\0';
}

void
sse_clear(struct sse *s)
{
	free(s->line);
	free(s->data);
	s->line = s->data = NULL;
	s->linecap = s->datacap = 0;
	sse_reset(s);
}

enum sse_rc
sse_feed(struct sse *s, const char *p, size_t n)
{
	enum sse_rc	 rc;
	size_t		 i = 0, start;

	if (s->stopped)
		return (SSE_STOP);
	while (i < n) {
		if (s->cr) {
			s->cr = 0;
			if (p[i] == '\n') {
				i++;
				continue;
			}
		}
		start = i;
		while (i < n && p[i] != '\r' && p[i] != '\n')
			i++;
		if (sse_append(&s->line, &s->linelen, &s->linecap, p + start,
		    i - start, s->max) == -1) {
			s->stopped = 1;
			return (SSE_TOOLONG);
		}
		if (i == n)
			break;
		s->cr = p[i++] == '\r';
		if ((rc = sse_line(s)) != SSE_OK) {
			s->stopped = 1;
			return (rc);
		}
	}
	return (SSE_OK);
}

/*
 * The body ended cleanly: take an unterminated last line, and dispatch
 * an event that lacks its blank line (the spec would drop it, but some
 * servers end with "data: [DONE]" and no blank line).
 */
enum sse_rc
sse_finish(struct sse *s)
{
	enum sse_rc	 rc;

	if (s->stopped)
		return (SSE_STOP);
	if (s->linelen > 0 && (rc = sse_line(s)) != SSE_OK)
		return (rc);
	if (s->hasdata)
		return (sse_dispatch(s, s->event[0] != '\0' ? s->event :
		    "message", s->data, s->datalen));
	return (SSE_OK);
}

static int
sse_append(char **buf, size_t *len, size_t *cap, const char *p, size_t n,
    size_t max)
{
	size_t	 want;

	if (n > max - *len)
		return (-1);
	if (*len + n + 1 > *cap) {
		want = *cap > 0 ? *cap : 256;
		while (want < *len + n + 1)
			want *= 2;
		*buf = xreallocarray(*buf, want, 1);
		*cap = want;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = '\0';
	return (0);
}

static enum sse_rc
sse_line(struct sse *s)
{
	const char	*p = s->line;
	size_t		 n = s->linelen;
	enum sse_rc	 rc;

	s->linelen = 0;
	if (!s->started) {
		s->started = 1;
		if (n >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) {
			p += 3;
			n -= 3;
		}
	}
	if (n == 0) {
		if (!s->hasdata) {
			s->event[0] = '\0';
			return (SSE_OK);
		}
		rc = sse_dispatch(s, s->event[0] != '\0' ? s->event :
		    "message", s->data, s->datalen);
		s->hasdata = 0;
		s->datalen = 0;
		s->event[0] = '\0';
		return (rc);
	}
	if (p[0] == ':')
		return (SSE_OK);
	if (p[0] == '{')
		return (sse_dispatch(s, "message", p, n));
	return (sse_field(s, p, n));
}

static enum sse_rc
sse_field(struct sse *s, const char *p, size_t n)
{
	const char	*colon, *v;
	size_t		 namelen, vlen;

	if ((colon = memchr(p, ':', n)) == NULL) {
		namelen = n;
		v = p + n;
	} else {
		namelen = colon - p;
		v = colon + 1;
		if (v < p + n && *v == ' ')
			v++;
	}
	vlen = p + n - v;

	if (namelen == 4 && memcmp(p, "data", 4) == 0) {
		if (s->hasdata && sse_append(&s->data, &s->datalen,
		    &s->datacap, "\n", 1, s->max) == -1)
			return (SSE_TOOLONG);
		if (sse_append(&s->data, &s->datalen, &s->datacap, v, vlen,
		    s->max) == -1)
			return (SSE_TOOLONG);
		s->hasdata = 1;
	} else if (namelen == 5 && memcmp(p, "event", 5) == 0) {
		if (vlen >= sizeof(s->event))
			vlen = sizeof(s->event) - 1;
		memcpy(s->event, v, vlen);
		s->event[vlen] = '\0';
	} else if (namelen == 5 && memcmp(p, "error", 5) == 0)
		return (sse_dispatch(s, "error", v, vlen));
	return (SSE_OK);
}

static enum sse_rc
sse_dispatch(struct sse *s, const char *event, const char *data, size_t len)
{
	return (s->cb(event, data, len, s->arg) != 0 ? SSE_STOP : SSE_OK);
}
