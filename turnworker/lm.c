/*
 * OpenAI-compatible chat completions over libcurl's multi-socket API,
 * in the style of curl's hiperfifo.c: curl tells us which sockets and
 * which timeout to watch, libevent tells curl when they are ready.
 *
 * A call is a small state machine driven by one timer event of its own:
 * START (run an attempt on the next loop pass), RUNNING (an easy handle
 * is in the multi), WAIT (backing off before a retry), DONE (result
 * ready, on_done on the next loop pass) and DELIVER (inside on_done).
 * User callbacks never run inside curl_multi_* except on_delta, which
 * runs in curl's write callback; while curl is on the stack, lm_cancel
 * and lm_free only mark things, and the marks are acted on once
 * curl_multi_socket_action has returned.
 *
 * Timeouts: CURLOPT_CONNECTTIMEOUT for connecting, a timer of our own
 * for a stall (see stall_ev), and CURLOPT_TIMEOUT_MS set on each attempt
 * to what is left of timeout_s, so the whole call, retries and waits
 * included, is bounded by timeout_s.
 */
#include <sys/queue.h>
#include <sys/types.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <bsd/string.h>
#include <curl/curl.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/sse.h"
#include "lib/util.h"
#include "turnworker/lm.h"

#define LM_MAX_RESPONSE	(8 * 1024 * 1024)	/* answer text, plain body */
#define LM_MAX_LINE	(1024 * 1024)		/* SSE line and event */
#define LM_MAX_HEADERS	(64 * 1024)		/* response headers */
#define LM_MAX_ERRBODY	(64 * 1024)		/* kept of an error body */
#define LM_MAX_WAIT_MS	60000			/* Retry-After we honour */
#define LM_EXCERPT	300			/* provider message in detail */

enum body_mode {
	BODY_UNKNOWN,
	BODY_SSE,
	BODY_PLAIN
};

enum call_state {
	CALL_START,
	CALL_RUNNING,
	CALL_WAIT,
	CALL_DONE,
	CALL_DELIVER
};

struct buf {
	char		*p;
	size_t		 len;
	size_t		 cap;
};

struct lm_sock {
	TAILQ_ENTRY(lm_sock)	 s_entry;
	struct lm		*s_lm;
	struct event		*s_ev;
};

struct lm {
	struct event_base	*base;
	CURLM			*multi;
	struct event		*timer;
	char			*url;
	char			*key;
	struct curl_slist	*hdr_stream;
	struct curl_slist	*hdr_plain;
	int			 connect_ms;
	int			 timeout_ms;
	int			 stall_s;
	int			 max_attempts;
	size_t			 max_response;
	TAILQ_HEAD(, lm_call)	 calls;
	TAILQ_HEAD(, lm_sock)	 socks;
	int			 in_curl;	/* inside socket_action */
	int			 ncancelled;	/* marked while in_curl */
	int			 dying;		/* lm_free while in_curl */
};

struct lm_call {
	TAILQ_ENTRY(lm_call)	 c_entry;
	struct lm		*lm;
	CURL			*easy;
	struct event		*ev;
	struct event		*stall;
	enum call_state		 state;
	int			 cancelled;
	char			*body;
	size_t			 bodylen;
	int			 stream;
	void			(*on_delta)(const char *, size_t, void *);
	void			(*on_done)(struct lm_result *, void *);
	void			*arg;
	int64_t			 deadline;

	/* One attempt. */
	struct sse		 sse;
	struct buf		 raw;		/* a plain or error body */
	size_t			 hdrbytes;
	size_t			 bodybytes;	/* of a 2xx body */
	int			 status;
	int			 ctype_sse;
	int			 ctype_json;
	enum body_mode		 mode;
	int			 done_seen;	/* data: [DONE] */
	int			 at_eof;
	int			 connected;
	curl_off_t		 ulnow;
	double			 retry_ms;	/* from headers; < 0: none */
	int			 should_retry;	/* x-should-retry; -1: none */
	enum lm_error		 fail;		/* set to abort the transfer */
	char			 reqid[64];
	char			 errbuf[CURL_ERROR_SIZE];

	struct buf		 text;
	struct lm_result	 res;
};

static int		 lm_curl_ready;

static void		 lm_destroy(struct lm *);
static void		 lm_action(struct lm *, curl_socket_t, int);
static void		 lm_reap(struct lm *);
static void		 lm_check(struct lm *);
static int		 lm_sock_cb(CURL *, curl_socket_t, int, void *, void *);
static void		 lm_sock_ev(evutil_socket_t, short, void *);
static int		 lm_timer_cb(CURLM *, long, void *);
static void		 lm_timer_ev(evutil_socket_t, short, void *);
static struct curl_slist *lm_headers(const char *, int);
static void		 lm_headers_free(struct curl_slist *);

static char		*call_body(const struct lm_request *, size_t *);
static void		 call_ev(evutil_socket_t, short, void *);
static void		 call_free(struct lm_call *);
static void		 call_deliver(struct lm_call *);
static void		 call_finish(struct lm_call *, enum lm_error);
static void		 call_detail(struct lm_call *, const char *, ...)
			    __attribute__((format(printf, 2, 3)));
static int		 call_fail(struct lm_call *, enum lm_error,
			    const char *, ...)
			    __attribute__((format(printf, 3, 4)));

static void		 attempt_start(struct lm_call *);
static void		 attempt_reset(struct lm_call *);
static void		 attempt_end(struct lm_call *);
static void		 attempt_done(struct lm_call *, CURLcode);
static void		 attempt_ok(struct lm_call *);
static void		 attempt_status(struct lm_call *);
static void		 attempt_curl(struct lm_call *, CURLcode);
static void		 attempt_retry(struct lm_call *, enum lm_error, int);
static int64_t		 retry_wait_ms(struct lm_call *);

static void		 stall_ev(evutil_socket_t, short, void *);
static void		 stall_reset(struct lm_call *);
static int		 prereq_cb(void *, char *, char *, int, int);
static int		 xferinfo_cb(void *, curl_off_t, curl_off_t, curl_off_t,
			    curl_off_t);
static size_t		 header_cb(char *, size_t, size_t, void *);
static size_t		 write_cb(char *, size_t, size_t, void *);
static int		 sse_event(const char *, const char *, size_t, void *);
static int		 chunk_apply(struct lm_call *, json_t *);
static int		 content_add(struct lm_call *, json_t *);
static int		 text_add(struct lm_call *, const char *, size_t);
static void		 usage_parse(json_t *, struct lm_usage *);
static void		 body_parse(struct lm_call *);
static const char	*error_message(json_t *, char *, size_t);
static enum lm_error	 status_error(int);
static int		 status_retryable(int);
static int		 curl_retryable(CURLcode);

static void		 buf_add(struct buf *, const char *, size_t);
static void		 sanitize(char *, const char *);

struct lm *
lm_new(struct event_base *base, const struct lm_config *conf)
{
	struct lm	*lm;
	size_t		 n;

	if (!lm_curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			fatalx("%s: curl_global_init failed", __func__);
		lm_curl_ready = 1;
	}
	if (conf->base_url == NULL)
		fatalx("%s: no base_url", __func__);

	lm = xcalloc(1, sizeof(*lm));
	lm->base = base;
	TAILQ_INIT(&lm->calls);
	TAILQ_INIT(&lm->socks);
	n = strlen(conf->base_url);
	while (n > 0 && conf->base_url[n - 1] == '/')
		n--;
	if (xasprintf(&lm->url, "%.*s/chat/completions", (int)n,
	    conf->base_url) == -1)
		fatal("%s: asprintf", __func__);
	if (conf->api_key != NULL && conf->api_key[0] != '\0')
		lm->key = xstrdup(conf->api_key);
	lm->connect_ms = 1000 * (conf->connect_timeout_s > 0 ?
	    conf->connect_timeout_s : 10);
	lm->timeout_ms = 1000 * (conf->timeout_s > 0 ? conf->timeout_s : 300);
	lm->stall_s = conf->stall_timeout_s > 0 ? conf->stall_timeout_s : 60;
	lm->max_attempts = conf->max_attempts > 0 ? conf->max_attempts : 3;
	lm->max_response = conf->max_response > 0 ? conf->max_response :
	    LM_MAX_RESPONSE;
	lm->hdr_stream = lm_headers(lm->key, 1);
	lm->hdr_plain = lm_headers(lm->key, 0);

	if ((lm->timer = evtimer_new(base, lm_timer_ev, lm)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	if ((lm->multi = curl_multi_init()) == NULL)
		fatalx("%s: curl_multi_init", __func__);
	curl_multi_setopt(lm->multi, CURLMOPT_SOCKETFUNCTION, lm_sock_cb);
	curl_multi_setopt(lm->multi, CURLMOPT_SOCKETDATA, lm);
	curl_multi_setopt(lm->multi, CURLMOPT_TIMERFUNCTION, lm_timer_cb);
	curl_multi_setopt(lm->multi, CURLMOPT_TIMERDATA, lm);
	return (lm);
}

/* Cancel every call, with no callbacks, and free everything. */
void
lm_free(struct lm *lm)
{
	if (lm == NULL)
		return;
	if (lm->in_curl) {
		lm->dying = 1;
		return;
	}
	lm_destroy(lm);
}

static void
lm_destroy(struct lm *lm)
{
	struct lm_call	*call;
	struct lm_sock	*s;

	while ((call = TAILQ_FIRST(&lm->calls)) != NULL) {
		if (call->state == CALL_DELIVER) {
			/* call_deliver frees it once on_done returns. */
			TAILQ_REMOVE(&lm->calls, call, c_entry);
			call->lm = NULL;
			call->cancelled = 1;
		} else
			call_free(call);
	}
	TAILQ_FOREACH(s, &lm->socks, s_entry)
		event_del(s->s_ev);
	curl_multi_cleanup(lm->multi);
	while ((s = TAILQ_FIRST(&lm->socks)) != NULL) {
		TAILQ_REMOVE(&lm->socks, s, s_entry);
		event_free(s->s_ev);
		free(s);
	}
	event_free(lm->timer);
	lm_headers_free(lm->hdr_stream);
	lm_headers_free(lm->hdr_plain);
	if (lm->key != NULL) {
		explicit_bzero(lm->key, strlen(lm->key));
		free(lm->key);
	}
	free(lm->url);
	free(lm);
}

/*
 * Start a call.  It runs from the event loop; on_done is called exactly
 * once unless the call is cancelled, and the call is gone after it.
 */
struct lm_call *
lm_call(struct lm *lm, const struct lm_request *req)
{
	struct lm_call	*call;

	call = xcalloc(1, sizeof(*call));
	call->lm = lm;
	call->stream = req->stream != 0;
	call->on_delta = req->on_delta;
	call->on_done = req->on_done;
	call->arg = req->arg;
	call->deadline = now_ms() + lm->timeout_ms;
	sse_init(&call->sse, LM_MAX_LINE, sse_event, call);
	if ((call->ev = evtimer_new(lm->base, call_ev, call)) == NULL ||
	    (call->stall = evtimer_new(lm->base, stall_ev, call)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	TAILQ_INSERT_TAIL(&lm->calls, call, c_entry);

	if ((call->body = call_body(req, &call->bodylen)) == NULL) {
		call_detail(call, "request: messages is not a JSON array, "
		    "or no model");
		call_finish(call, LM_ERR_BAD_REQUEST);
	} else {
		call->state = CALL_START;
		timer_add_ms(call->ev, 0);
	}
	return (call);
}

/* Stop a call; its on_done is not called. */
void
lm_cancel(struct lm_call *call)
{
	struct lm	*lm = call->lm;

	if (call->state == CALL_DELIVER) {
		call->cancelled = 1;
		return;
	}
	if (call->cancelled)
		return;
	if (call->easy != NULL && lm->in_curl) {
		/* curl is on the stack: lm_reap finishes the job. */
		call->cancelled = 1;
		lm->ncancelled++;
		return;
	}
	call_free(call);
}

const char *
lm_error_message(enum lm_error e)
{
	if (e == LM_ERR_NOT_FOUND)
		return ("Provider endpoint not found; "
		    "check model and base URL");
	return ("Turn failed");
}

const char *
lm_error_name(enum lm_error e)
{
	switch (e) {
	case LM_OK:
		return ("ok");
	case LM_ERR_NOT_FOUND:
		return ("not_found");
	case LM_ERR_AUTH:
		return ("auth");
	case LM_ERR_BAD_REQUEST:
		return ("bad_request");
	case LM_ERR_RATE_LIMIT:
		return ("rate_limit");
	case LM_ERR_SERVER:
		return ("server");
	case LM_ERR_NETWORK:
		return ("network");
	case LM_ERR_CUT:
		return ("cut");
	case LM_ERR_TIMEOUT:
		return ("timeout");
	case LM_ERR_PROTOCOL:
		return ("protocol");
	case LM_ERR_CANCELLED:
		return ("cancelled");
	}
	return ("unknown");
}

/* The multi handle, the hiperfifo way. */

static void
lm_action(struct lm *lm, curl_socket_t fd, int what)
{
	int	 running;

	lm->in_curl++;
	curl_multi_socket_action(lm->multi, fd, what, &running);
	lm->in_curl--;
	if (lm->dying) {
		lm_destroy(lm);
		return;
	}
	if (lm->ncancelled > 0)
		lm_reap(lm);
	lm_check(lm);
}

static void
lm_reap(struct lm *lm)
{
	struct lm_call	*call, *next;

	for (call = TAILQ_FIRST(&lm->calls); call != NULL; call = next) {
		next = TAILQ_NEXT(call, c_entry);
		if (call->cancelled && call->state != CALL_DELIVER)
			call_free(call);
	}
	lm->ncancelled = 0;
}

static void
lm_check(struct lm *lm)
{
	struct lm_call	*call;
	CURLMsg		*msg;
	CURLcode	 rc;
	char		*p;
	int		 left;

	while ((msg = curl_multi_info_read(lm->multi, &left)) != NULL) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		rc = msg->data.result;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
		call = (struct lm_call *)p;
		attempt_end(call);
		attempt_done(call, rc);
	}
}

static int
lm_sock_cb(CURL *easy, curl_socket_t fd, int what, void *arg, void *sockp)
{
	struct lm	*lm = arg;
	struct lm_sock	*s = sockp;
	short		 kind;

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (s != NULL) {
			TAILQ_REMOVE(&lm->socks, s, s_entry);
			event_free(s->s_ev);
			free(s);
		}
		return (0);
	}
	if (s == NULL) {
		s = xcalloc(1, sizeof(*s));
		s->s_lm = lm;
		if ((s->s_ev = event_new(lm->base, -1, 0, NULL, NULL)) == NULL)
			fatalx("%s: event_new", __func__);
		TAILQ_INSERT_TAIL(&lm->socks, s, s_entry);
		curl_multi_assign(lm->multi, fd, s);
	}
	kind = EV_PERSIST;
	if (what & CURL_POLL_IN)
		kind |= EV_READ;
	if (what & CURL_POLL_OUT)
		kind |= EV_WRITE;
	event_del(s->s_ev);
	event_assign(s->s_ev, lm->base, fd, kind, lm_sock_ev, s);
	event_add(s->s_ev, NULL);
	return (0);
}

static void
lm_sock_ev(evutil_socket_t fd, short kind, void *arg)
{
	struct lm_sock	*s = arg;
	int		 what = 0;

	if (kind & EV_READ)
		what |= CURL_CSELECT_IN;
	if (kind & EV_WRITE)
		what |= CURL_CSELECT_OUT;
	lm_action(s->s_lm, fd, what);
}

static int
lm_timer_cb(CURLM *multi, long ms, void *arg)
{
	struct lm	*lm = arg;

	(void)multi;
	if (ms < 0)
		evtimer_del(lm->timer);
	else
		timer_add_ms(lm->timer, ms);
	return (0);
}

static void
lm_timer_ev(evutil_socket_t fd, short kind, void *arg)
{
	(void)fd;
	(void)kind;
	lm_action(arg, CURL_SOCKET_TIMEOUT, 0);
}

static struct curl_slist *
lm_headers(const char *key, int stream)
{
	struct curl_slist	*l = NULL, *n;
	char			*auth;

	l = curl_slist_append(l, "Content-Type: application/json");
	l = curl_slist_append(l, stream ? "Accept: text/event-stream" :
	    "Accept: application/json");
	l = curl_slist_append(l, "Expect:");
	if (l != NULL && key != NULL) {
		if (xasprintf(&auth, "Authorization: Bearer %s", key) == -1)
			fatal("%s: asprintf", __func__);
		n = curl_slist_append(l, auth);
		explicit_bzero(auth, strlen(auth));
		free(auth);
		l = n;
	}
	if (l == NULL)
		fatalx("%s: curl_slist_append", __func__);
	return (l);
}

static void
lm_headers_free(struct curl_slist *l)
{
	struct curl_slist	*n;

	for (n = l; n != NULL; n = n->next)
		explicit_bzero(n->data, strlen(n->data));
	curl_slist_free_all(l);
}

/* Calls. */

static char *
call_body(const struct lm_request *req, size_t *lenp)
{
	json_t		*o, *msgs;
	char		*s;

	if (req->model == NULL || req->messages == NULL)
		return (NULL);
	if ((msgs = json_loads(req->messages, 0, NULL)) == NULL)
		return (NULL);
	if (!json_is_array(msgs)) {
		json_decref(msgs);
		return (NULL);
	}
	o = json_pack("{s:s, s:o, s:b}", "model", req->model,
	    "messages", msgs, "stream", req->stream != 0);
	if (o == NULL)
		return (NULL);
	if (req->max_tokens > 0)
		json_object_set_new(o, "max_tokens",
		    json_integer(req->max_tokens));
	if (req->temperature >= 0)
		json_object_set_new(o, "temperature",
		    json_real(req->temperature));
	if (req->stream)
		json_object_set_new(o, "stream_options",
		    json_pack("{s:b}", "include_usage", 1));
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (s == NULL)
		fatalx("%s: json_dumps", __func__);
	*lenp = strlen(s);
	return (s);
}

static void
call_ev(evutil_socket_t fd, short kind, void *arg)
{
	struct lm_call	*call = arg;

	(void)fd;
	(void)kind;
	switch (call->state) {
	case CALL_START:
	case CALL_WAIT:
		attempt_start(call);
		break;
	case CALL_DONE:
		call_deliver(call);
		break;
	case CALL_RUNNING:
	case CALL_DELIVER:
		break;
	}
}

/* Unlink and free a call that is not being delivered. */
static void
call_free(struct lm_call *call)
{
	if (call->lm != NULL)
		TAILQ_REMOVE(&call->lm->calls, call, c_entry);
	attempt_end(call);
	event_free(call->ev);
	event_free(call->stall);
	sse_clear(&call->sse);
	free(call->raw.p);
	free(call->text.p);
	free(call->res.text);
	free(call->body);
	free(call);
}

static void
call_deliver(struct lm_call *call)
{
	call->state = CALL_DELIVER;
	/* A stream answered with a plain body still gets its text. */
	if (call->stream && call->mode == BODY_PLAIN &&
	    call->res.error == LM_OK && call->res.len > 0 &&
	    call->on_delta != NULL)
		call->on_delta(call->res.text, call->res.len, call->arg);
	if (!call->cancelled && call->on_done != NULL)
		call->on_done(&call->res, call->arg);
	call_free(call);
}

static void
call_finish(struct lm_call *call, enum lm_error e)
{
	call->res.error = e;
	if (call->text.p == NULL)
		call->text.p = xstrdup("");
	call->res.text = call->text.p;
	call->res.len = call->text.len;
	call->text.p = NULL;
	call->text.len = call->text.cap = 0;
	call->state = CALL_DONE;
	log_debug("lm: call %p: %s after %d attempt%s: %s", (void *)call,
	    lm_error_name(e), call->res.attempts,
	    call->res.attempts == 1 ? "" : "s", call->res.detail);
	timer_add_ms(call->ev, 0);
}

static void
call_detail(struct lm_call *call, const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	vsnprintf(call->res.detail, sizeof(call->res.detail), fmt, ap);
	va_end(ap);
	sanitize(call->res.detail, call->lm->key);
}

/* Abort the transfer from a curl callback; returns -1. */
static int
call_fail(struct lm_call *call, enum lm_error e, const char *fmt, ...)
{
	va_list	 ap;

	if (call->fail != LM_OK)
		return (-1);
	call->fail = e;
	va_start(ap, fmt);
	vsnprintf(call->res.detail, sizeof(call->res.detail), fmt, ap);
	va_end(ap);
	sanitize(call->res.detail, call->lm->key);
	return (-1);
}

/* Attempts. */

static void
attempt_start(struct lm_call *call)
{
	struct lm	*lm = call->lm;
	CURL		*e;
	int64_t		 left;

	attempt_reset(call);
	if ((left = call->deadline - now_ms()) <= 0) {
		call_detail(call, "timed out after %d s (whole call)",
		    lm->timeout_ms / 1000);
		call_finish(call, LM_ERR_TIMEOUT);
		return;
	}
	call->res.attempts++;
	if ((e = curl_easy_init()) == NULL)
		fatalx("%s: curl_easy_init", __func__);
	curl_easy_setopt(e, CURLOPT_URL, lm->url);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_PRIVATE, call);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
	    (curl_off_t)call->bodylen);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER,
	    call->stream ? lm->hdr_stream : lm->hdr_plain);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "fleet/" FLEET_VERSION);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, call);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)lm->connect_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)left);
	curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, prereq_cb);
	curl_easy_setopt(e, CURLOPT_PREREQDATA, call);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, call);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	call->easy = e;
	call->state = CALL_RUNNING;
	if (curl_multi_add_handle(lm->multi, e) != CURLM_OK)
		fatalx("%s: curl_multi_add_handle", __func__);
}

static void
attempt_reset(struct lm_call *call)
{
	sse_reset(&call->sse);
	call->raw.len = 0;
	call->hdrbytes = call->bodybytes = 0;
	call->status = 0;
	call->ctype_sse = call->ctype_json = 0;
	call->mode = BODY_UNKNOWN;
	call->done_seen = call->at_eof = call->connected = 0;
	call->ulnow = 0;
	call->retry_ms = -1;
	call->should_retry = -1;
	call->fail = LM_OK;
	call->reqid[0] = '\0';
	call->errbuf[0] = '\0';
	call->res.http_status = 0;
	call->res.detail[0] = '\0';
}

/* Take the easy handle out of the multi, keeping what we need of it. */
static void
attempt_end(struct lm_call *call)
{
	evtimer_del(call->stall);
	if (call->easy == NULL)
		return;
	curl_multi_remove_handle(call->lm->multi, call->easy);
	curl_easy_cleanup(call->easy);
	call->easy = NULL;
}

static void
attempt_done(struct lm_call *call, CURLcode rc)
{
	int	 ok2xx = call->status >= 200 && call->status <= 299;

	call->res.http_status = call->status;
	if (call->cancelled) {
		call_free(call);
		return;
	}
	if (call->fail != LM_OK)
		call_finish(call, call->fail);
	else if (call->status != 0 && !ok2xx)
		attempt_status(call);
	else if (rc == CURLE_OK)
		attempt_ok(call);
	else
		attempt_curl(call, rc);
}

/* A 2xx response ended cleanly. */
static void
attempt_ok(struct lm_call *call)
{
	if (call->mode == BODY_UNKNOWN)
		call->mode = call->stream ? BODY_SSE : BODY_PLAIN;
	if (call->mode == BODY_PLAIN) {
		body_parse(call);
		return;
	}
	call->at_eof = 1;
	sse_finish(&call->sse);
	if (call->fail != LM_OK)
		call_finish(call, call->fail);
	else if (!call->done_seen && call->res.finish_reason[0] == '\0') {
		call_detail(call, "stream ended after %zu bytes without a "
		    "finish_reason or [DONE]", call->bodybytes);
		call_finish(call, LM_ERR_CUT);
	} else
		call_finish(call, LM_OK);
}

/* An HTTP error status, whatever its body. */
static void
attempt_status(struct lm_call *call)
{
	json_t		*o;
	const char	*msg = NULL;
	char		 code[64];
	int		 retry;

	code[0] = '\0';
	if (call->raw.len > 0 &&
	    (o = json_loadb(call->raw.p, call->raw.len, 0, NULL)) != NULL) {
		msg = error_message(o, code, sizeof(code));
		call_detail(call, "HTTP %d%s%s%s%s: %.*s", call->status,
		    code[0] != '\0' ? " " : "", code,
		    call->reqid[0] != '\0' ? " request " : "", call->reqid,
		    LM_EXCERPT, msg != NULL ? msg : "(no message)");
		json_decref(o);
	} else
		call_detail(call, "HTTP %d%s%s: %.*s", call->status,
		    call->reqid[0] != '\0' ? " request " : "", call->reqid,
		    (int)(call->raw.len < LM_EXCERPT ? call->raw.len :
		    LM_EXCERPT), call->raw.len > 0 ? call->raw.p : "");
	retry = status_retryable(call->status);
	if (call->should_retry != -1)
		retry = call->should_retry;
	attempt_retry(call, status_error(call->status), retry);
}

/* curl failed before a clean end, with no status or in a 2xx body. */
static void
attempt_curl(struct lm_call *call, CURLcode rc)
{
	struct lm	*lm = call->lm;
	const char	*why;

	why = call->errbuf[0] != '\0' ? call->errbuf : curl_easy_strerror(rc);
	if (rc == CURLE_OPERATION_TIMEDOUT) {
		if (now_ms() >= call->deadline - 5) {
			call_detail(call, "timed out after %d s (whole call)",
			    lm->timeout_ms / 1000);
			call_finish(call, LM_ERR_TIMEOUT);
		} else if (!call->connected) {
			call_detail(call, "connect: %s", why);
			attempt_retry(call, LM_ERR_TIMEOUT, 1);
		} else {
			call_detail(call, "%s", why);
			call_finish(call, LM_ERR_TIMEOUT);
		}
		return;
	}
	if (call->bodybytes > 0) {
		call_detail(call, "stream cut after %zu bytes: %s",
		    call->bodybytes, why);
		call_finish(call, LM_ERR_CUT);
		return;
	}
	call_detail(call, "%s", why);
	attempt_retry(call, LM_ERR_NETWORK, curl_retryable(rc));
}

static void
attempt_retry(struct lm_call *call, enum lm_error e, int retry)
{
	int64_t		 wait;

	if (retry && call->res.attempts < call->lm->max_attempts) {
		wait = retry_wait_ms(call);
		if (now_ms() + wait < call->deadline) {
			log_debug("lm: call %p: attempt %d: %s (%s); retry in "
			    "%lld ms", (void *)call, call->res.attempts,
			    lm_error_name(e), call->res.detail,
			    (long long)wait);
			call->state = CALL_WAIT;
			timer_add_ms(call->ev, wait);
			return;
		}
	}
	call_finish(call, e);
}

/* Retry-After as asked for, else min(0.5 s * 2^n, 8 s) less jitter. */
static int64_t
retry_wait_ms(struct lm_call *call)
{
	double	 ms;
	int	 n = call->res.attempts - 1;

	if (call->retry_ms >= 0 && call->retry_ms <= LM_MAX_WAIT_MS) {
		ms = (int64_t)call->retry_ms;
		return (ms < call->retry_ms ? ms + 1 : ms);
	}
	ms = n >= 4 ? 8000 : 500.0 * (1 << n);
	ms *= 1 - (arc4random() / (double)UINT32_MAX) * 0.25;
	return ((int64_t)ms);
}

/*
 * No byte in either direction for stall_timeout_s once connected.  Our
 * own timer, as CURLOPT_LOW_SPEED_TIME averages over a window of several
 * seconds, in which the request body alone keeps a limit of 1 B/s met.
 */
static void
stall_ev(evutil_socket_t fd, short kind, void *arg)
{
	struct lm_call	*call = arg;

	(void)fd;
	(void)kind;
	if (call->state != CALL_RUNNING || call->easy == NULL)
		return;
	call_fail(call, LM_ERR_TIMEOUT, "stalled: no data for %d s%s",
	    call->lm->stall_s, call->bodybytes > 0 ? " in the stream" : "");
	attempt_end(call);
	attempt_done(call, CURLE_OPERATION_TIMEDOUT);
}

static void
stall_reset(struct lm_call *call)
{
	timer_add_ms(call->stall, (int64_t)call->lm->stall_s * 1000);
}

/* Callbacks from curl, which is on the stack. */

/* Connected; the request is about to be sent. */
static int
prereq_cb(void *arg, char *ip, char *lip, int port, int lport)
{
	struct lm_call	*call = arg;

	(void)ip;
	(void)lip;
	(void)port;
	(void)lport;
	call->connected = 1;
	stall_reset(call);
	return (CURL_PREREQFUNC_OK);
}

static int
xferinfo_cb(void *arg, curl_off_t dltotal, curl_off_t dlnow,
    curl_off_t ultotal, curl_off_t ulnow)
{
	struct lm_call	*call = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	if (call->cancelled || call->lm->dying)
		return (1);
	if (ulnow != call->ulnow) {
		call->ulnow = ulnow;
		stall_reset(call);
	}
	return (0);
}

static size_t
header_cb(char *p, size_t size, size_t nmemb, void *arg)
{
	struct lm_call	*call = arg;
	size_t		 n = size * nmemb, len = n, vlen;
	const char	*v;
	char		 tmp[64], *end;
	double		 d;

	if (call->cancelled || call->lm->dying)
		return (0);
	stall_reset(call);
	if ((call->hdrbytes += n) > LM_MAX_HEADERS) {
		call_fail(call, LM_ERR_PROTOCOL, "response headers over %d "
		    "bytes", LM_MAX_HEADERS);
		return (0);
	}
	while (len > 0 && (p[len - 1] == '\n' || p[len - 1] == '\r'))
		len--;
	if (len > 5 && strncmp(p, "HTTP/", 5) == 0) {
		/* A new response (after a 1xx): forget the last one. */
		call->status = 0;
		call->ctype_sse = call->ctype_json = 0;
		call->retry_ms = -1;
		call->should_retry = -1;
		call->reqid[0] = '\0';
		if ((v = memchr(p, ' ', len)) != NULL)
			call->status = (int)strtol(v + 1, NULL, 10);
		return (n);
	}
	if ((v = memchr(p, ':', len)) == NULL)
		return (n);
	vlen = len - (v + 1 - p);
	for (v++; vlen > 0 && (*v == ' ' || *v == '\t'); v++)
		vlen--;
	if (vlen >= sizeof(tmp))
		vlen = sizeof(tmp) - 1;
	memcpy(tmp, v, vlen);
	tmp[vlen] = '\0';

#define HDR(name)	(strncasecmp(p, name ":", sizeof(name)) == 0)
	if (HDR("content-type")) {
		call->ctype_sse = strcasestr(tmp, "text/event-stream") != NULL;
		call->ctype_json = strcasestr(tmp, "json") != NULL;
	} else if (HDR("retry-after-ms")) {
		d = strtod(tmp, &end);
		if (end != tmp && isfinite(d) && d >= 0)
			call->retry_ms = d;
	} else if (HDR("retry-after") && call->retry_ms < 0) {
		d = strtod(tmp, &end);
		if (end != tmp && *end == '\0' && isfinite(d) && d >= 0)
			call->retry_ms = d * 1000;
	} else if (HDR("x-should-retry")) {
		if (strcasecmp(tmp, "true") == 0)
			call->should_retry = 1;
		else if (strcasecmp(tmp, "false") == 0)
			call->should_retry = 0;
	} else if (HDR("x-request-id"))
		strlcpy(call->reqid, tmp, sizeof(call->reqid));
#undef HDR
	return (n);
}

static size_t
write_cb(char *p, size_t size, size_t nmemb, void *arg)
{
	struct lm_call	*call = arg;
	size_t		 n = size * nmemb, keep;
	long		 status;

	if (call->cancelled || call->lm->dying || call->fail != LM_OK)
		return (0);
	stall_reset(call);
	if (call->status == 0 && curl_easy_getinfo(call->easy,
	    CURLINFO_RESPONSE_CODE, &status) == CURLE_OK)
		call->status = (int)status;
	if (call->status < 200 || call->status > 299) {
		keep = LM_MAX_ERRBODY - call->raw.len;
		buf_add(&call->raw, p, n < keep ? n : keep);
		return (n);
	}
	if (call->mode == BODY_UNKNOWN)
		call->mode = call->ctype_sse ||
		    (call->stream && !call->ctype_json) ? BODY_SSE : BODY_PLAIN;
	call->bodybytes += n;
	if (call->mode == BODY_SSE) {
		if (sse_feed(&call->sse, p, n) == SSE_TOOLONG)
			call_fail(call, LM_ERR_PROTOCOL, "stream line or event "
			    "over %d bytes", LM_MAX_LINE);
		if (call->fail != LM_OK || call->cancelled || call->lm->dying)
			return (0);
		return (n);
	}
	if (n > call->lm->max_response - call->raw.len) {
		call_fail(call, LM_ERR_PROTOCOL, "response too large (over "
		    "%zu bytes)", call->lm->max_response);
		return (0);
	}
	buf_add(&call->raw, p, n);
	return (n);
}

static int
sse_event(const char *event, const char *data, size_t len, void *arg)
{
	struct lm_call	*call = arg;
	json_t		*o, *err;
	json_error_t	 je;
	const char	*msg;
	char		 code[64];
	int		 rc;

	if (call->done_seen || len == 0)
		return (0);
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
		call->done_seen = 1;
		return (0);
	}
	if ((o = json_loadb(data, len, 0, &je)) == NULL) {
		if (call->at_eof)
			return (call_fail(call, LM_ERR_CUT, "stream ended "
			    "inside an event"));
		return (call_fail(call, LM_ERR_PROTOCOL, "bad stream event: "
		    "%s", je.text));
	}
	err = json_object_get(o, "error");
	if (strcmp(event, "error") == 0 ||
	    (err != NULL && !json_is_null(err))) {
		code[0] = '\0';
		msg = error_message(o, code, sizeof(code));
		call_fail(call, LM_ERR_PROTOCOL, "error in stream%s%s: %.*s",
		    code[0] != '\0' ? " " : "", code, LM_EXCERPT,
		    msg != NULL ? msg : "(no message)");
		json_decref(o);
		return (-1);
	}
	rc = chunk_apply(call, o);
	json_decref(o);
	return (rc);
}

static int
chunk_apply(struct lm_call *call, json_t *o)
{
	json_t		*choice, *fr, *u;

	choice = json_array_get(json_object_get(o, "choices"), 0);
	if (content_add(call, json_object_get(json_object_get(choice,
	    "delta"), "content")) == -1)
		return (-1);
	if (json_is_string(fr = json_object_get(choice, "finish_reason")))
		strlcpy(call->res.finish_reason, json_string_value(fr),
		    sizeof(call->res.finish_reason));
	if (!json_is_object(u = json_object_get(o, "usage")))
		u = json_object_get(choice, "usage");
	usage_parse(u, &call->res.usage);
	return (0);
}

/* A content string, or an array of parts whose "text" we take. */
static int
content_add(struct lm_call *call, json_t *c)
{
	json_t	*part, *t;
	size_t	 i;

	if (json_is_string(c))
		return (text_add(call, json_string_value(c),
		    json_string_length(c)));
	json_array_foreach(c, i, part) {
		if (json_is_string(part))
			t = part;
		else
			t = json_object_get(part, "text");
		if (json_is_string(t) && text_add(call, json_string_value(t),
		    json_string_length(t)) == -1)
			return (-1);
	}
	return (0);
}

static int
text_add(struct lm_call *call, const char *s, size_t n)
{
	if (n == 0)
		return (0);
	if (n > call->lm->max_response - call->text.len)
		return (call_fail(call, LM_ERR_PROTOCOL, "response too large "
		    "(over %zu bytes)", call->lm->max_response));
	buf_add(&call->text, s, n);
	if (call->mode == BODY_SSE && call->on_delta != NULL) {
		call->on_delta(s, n, call->arg);
		if (call->cancelled || call->lm->dying)
			return (-1);
	}
	return (0);
}

/* Keep the last usage seen (Databricks repeats it in every chunk). */
static void
usage_parse(json_t *u, struct lm_usage *usage)
{
	if (!json_is_object(u))
		return;
	usage->prompt_tokens =
	    json_integer_value(json_object_get(u, "prompt_tokens"));
	usage->completion_tokens =
	    json_integer_value(json_object_get(u, "completion_tokens"));
	usage->total_tokens =
	    json_integer_value(json_object_get(u, "total_tokens"));
	if (usage->total_tokens == 0)
		usage->total_tokens = usage->prompt_tokens +
		    usage->completion_tokens;
}

/* A plain 2xx chat.completion body. */
static void
body_parse(struct lm_call *call)
{
	json_t		*o, *choice, *err, *fr;
	json_error_t	 je;
	const char	*msg;
	char		 code[64];

	if (call->raw.len == 0) {
		call_detail(call, "HTTP %d with an empty body", call->status);
		call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	if ((o = json_loadb(call->raw.p, call->raw.len, 0, &je)) == NULL) {
		call_detail(call, "HTTP %d: unparsable body: %s", call->status,
		    je.text);
		call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	if ((err = json_object_get(o, "error")) != NULL && !json_is_null(err)) {
		code[0] = '\0';
		msg = error_message(o, code, sizeof(code));
		call_detail(call, "HTTP %d with an error%s%s: %.*s",
		    call->status, code[0] != '\0' ? " " : "", code,
		    LM_EXCERPT, msg != NULL ? msg : "(no message)");
		json_decref(o);
		call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	choice = json_array_get(json_object_get(o, "choices"), 0);
	if (!json_is_object(choice)) {
		json_decref(o);
		call_detail(call, "HTTP %d: no choices in the body",
		    call->status);
		call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	content_add(call, json_object_get(json_object_get(choice, "message"),
	    "content"));
	if (json_is_string(fr = json_object_get(choice, "finish_reason")))
		strlcpy(call->res.finish_reason, json_string_value(fr),
		    sizeof(call->res.finish_reason));
	usage_parse(json_object_get(o, "usage"), &call->res.usage);
	json_decref(o);
	call_finish(call, call->fail);
}

/*
 * The message of an error body in any of the dialects: OpenAI, vLLM,
 * llama.cpp, Ollama and OpenRouter {"error":{"message","code"}}, old vLLM
 * {"object":"error","message"}, Databricks {"error_code","message"}, or
 * {"error":"text"}.  The code, if any, goes to code.
 */
static const char *
error_message(json_t *o, char *code, size_t codesz)
{
	json_t	*err, *m, *c;

	err = json_object_get(o, "error");
	if (json_is_string(err))
		return (json_string_value(err));
	if (!json_is_object(err))
		err = o;
	c = json_object_get(err, "code");
	if (c == NULL)
		c = json_object_get(o, "error_code");
	if (json_is_string(c))
		snprintf(code, codesz, "%s", json_string_value(c));
	else if (json_is_integer(c))
		snprintf(code, codesz, "%lld",
		    (long long)json_integer_value(c));
	m = json_object_get(err, "message");
	return (json_is_string(m) ? json_string_value(m) : NULL);
}

static enum lm_error
status_error(int status)
{
	if (status == 404)
		return (LM_ERR_NOT_FOUND);
	if (status == 401 || status == 403)
		return (LM_ERR_AUTH);
	if (status == 429)
		return (LM_ERR_RATE_LIMIT);
	if (status >= 500)
		return (LM_ERR_SERVER);
	if (status >= 400)
		return (LM_ERR_BAD_REQUEST);
	return (LM_ERR_PROTOCOL);
}

static int
status_retryable(int status)
{
	return (status == 408 || status == 429 || status >= 500);
}

/* Failures before any byte of an answer, so a retry cannot repeat one. */
static int
curl_retryable(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return (1);
	default:
		return (0);
	}
}

static void
buf_add(struct buf *b, const char *p, size_t n)
{
	size_t	 want;

	if (b->len + n + 1 > b->cap) {
		want = b->cap > 0 ? b->cap : 1024;
		while (want < b->len + n + 1)
			want *= 2;
		b->p = xreallocarray(b->p, want, 1);
		b->cap = want;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
}

/* Detail strings go to logs: one line, and never the key. */
static void
sanitize(char *s, const char *key)
{
	char	*p;
	size_t	 klen;

	for (p = s; *p != '\0'; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	if (key == NULL || (klen = strlen(key)) == 0)
		return;
	while ((p = strstr(s, key)) != NULL)
		memset(p, '*', klen);
}
