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
 * for a stall (see lm_stall_ev), and CURLOPT_TIMEOUT_MS set on each attempt
 * to what is left of timeout_s, so the whole call, retries and waits
 * included, is bounded by timeout_s.
 *
 * lm.c has the API, the calls and their attempts; lm_curl.c the multi
 * handle's sockets and timers and the stall timer; lm_parse.c what an
 * attempt gets back.
 */
#include <sys/queue.h>
#include <sys/types.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/sse.h"
#include "lib/util.h"
#include "turnworker/lm.h"
#include "turnworker/lm_int.h"

static int		 lm_curl_ready;

static struct curl_slist *lm_headers(const char *, int);
static void		 lm_headers_free(struct curl_slist *);

static char		*call_body(const struct lm_request *, size_t *);
static void		 call_ev(evutil_socket_t, short, void *);
static void		 call_deliver(struct lm_call *);

static void		 attempt_start(struct lm_call *);
static void		 attempt_reset(struct lm_call *);
static void		 attempt_ok(struct lm_call *);
static void		 attempt_status(struct lm_call *);
static void		 attempt_curl(struct lm_call *, CURLcode);
static void		 attempt_retry(struct lm_call *, enum lm_error, int);
static int64_t		 retry_wait_ms(struct lm_call *);
static enum lm_error	 status_error(int);
static int		 status_retryable(int);
static int		 curl_retryable(CURLcode);

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

void
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
			lm_call_free(call);
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
	sse_init(&call->sse, LM_MAX_LINE, lm_sse_event, call);
	if ((call->ev = evtimer_new(lm->base, call_ev, call)) == NULL ||
	    (call->stall = evtimer_new(lm->base, lm_stall_ev, call)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	TAILQ_INSERT_TAIL(&lm->calls, call, c_entry);

	if ((call->body = call_body(req, &call->bodylen)) == NULL) {
		lm_call_detail(call, "request: messages is not a JSON array, "
		    "or no model");
		lm_call_finish(call, LM_ERR_BAD_REQUEST);
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
	lm_call_free(call);
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
void
lm_call_free(struct lm_call *call)
{
	if (call->lm != NULL)
		TAILQ_REMOVE(&call->lm->calls, call, c_entry);
	lm_attempt_end(call);
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
	lm_call_free(call);
}

void
lm_call_finish(struct lm_call *call, enum lm_error e)
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

void
lm_call_detail(struct lm_call *call, const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	vsnprintf(call->res.detail, sizeof(call->res.detail), fmt, ap);
	va_end(ap);
	sanitize(call->res.detail, call->lm->key);
}

/* Abort the transfer from a curl callback; returns -1. */
int
lm_call_fail(struct lm_call *call, enum lm_error e, const char *fmt, ...)
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
		lm_call_detail(call, "timed out after %d s (whole call)",
		    lm->timeout_ms / 1000);
		lm_call_finish(call, LM_ERR_TIMEOUT);
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
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, lm_header_cb);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, call);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, lm_write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)lm->connect_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)left);
	curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, lm_prereq_cb);
	curl_easy_setopt(e, CURLOPT_PREREQDATA, call);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, lm_xferinfo_cb);
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
void
lm_attempt_end(struct lm_call *call)
{
	evtimer_del(call->stall);
	if (call->easy == NULL)
		return;
	curl_multi_remove_handle(call->lm->multi, call->easy);
	curl_easy_cleanup(call->easy);
	call->easy = NULL;
}

void
lm_attempt_done(struct lm_call *call, CURLcode rc)
{
	int	 ok2xx = call->status >= 200 && call->status <= 299;

	call->res.http_status = call->status;
	if (call->cancelled) {
		lm_call_free(call);
		return;
	}
	if (call->fail != LM_OK)
		lm_call_finish(call, call->fail);
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
		lm_body_parse(call);
		return;
	}
	call->at_eof = 1;
	sse_finish(&call->sse);
	if (call->fail != LM_OK)
		lm_call_finish(call, call->fail);
	else if (!call->done_seen && call->res.finish_reason[0] == '\0') {
		lm_call_detail(call, "stream ended after %zu bytes without a "
		    "finish_reason or [DONE]", call->bodybytes);
		lm_call_finish(call, LM_ERR_CUT);
	} else
		lm_call_finish(call, LM_OK);
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
		msg = lm_provider_message(o, code, sizeof(code));
		lm_call_detail(call, "HTTP %d%s%s%s%s: %.*s", call->status,
		    code[0] != '\0' ? " " : "", code,
		    call->reqid[0] != '\0' ? " request " : "", call->reqid,
		    LM_EXCERPT, msg != NULL ? msg : "(no message)");
		json_decref(o);
	} else
		lm_call_detail(call, "HTTP %d%s%s: %.*s", call->status,
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
			lm_call_detail(call, "timed out after %d s (whole call)",
			    lm->timeout_ms / 1000);
			lm_call_finish(call, LM_ERR_TIMEOUT);
		} else if (!call->connected) {
			lm_call_detail(call, "connect: %s", why);
			attempt_retry(call, LM_ERR_TIMEOUT, 1);
		} else {
			lm_call_detail(call, "%s", why);
			lm_call_finish(call, LM_ERR_TIMEOUT);
		}
		return;
	}
	if (call->bodybytes > 0) {
		lm_call_detail(call, "stream cut after %zu bytes: %s",
		    call->bodybytes, why);
		lm_call_finish(call, LM_ERR_CUT);
		return;
	}
	lm_call_detail(call, "%s", why);
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
	lm_call_finish(call, e);
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
