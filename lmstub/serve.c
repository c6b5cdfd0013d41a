/*
 * The HTTP side: each request is checked and logged; a chat completion
 * is answered from its script entry, at once or after delay_ms, in one
 * piece or streamed as server-sent events.
 */

#include <sys/queue.h>
#include <sys/types.h>

#include <err.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <jansson.h>

#include "lib/utf8.h"
#include "lmstub.h"

static long long tokens(long long);
static int	 completions(struct evhttp_request *, json_t *,
		    struct entry **);
static const char *request_check(json_t *, char *, size_t);
static char	*last_text(json_t *, size_t *);
static long long prompt_chars(json_t *);
static int	 models(struct evhttp_request *);
static void	 log_request(struct evhttp_request *, const char *, int,
		    struct entry *, const char *, size_t);
static const char *method_name(struct evhttp_request *);
static const char *reason(int);
static void	 send_json(struct evhttp_request *, int, json_t *);
static void	 send_error(struct evhttp_request *, int, const char *,
		    json_t *, const char *, ...)
		    __attribute__((__format__(__printf__, 5, 6)));
static int	 reject(struct evhttp_request *, int, const char *, ...)
		    __attribute__((__format__(__printf__, 3, 4)));
static void	 set_headers(struct evhttp_request *, struct entry *,
		    const char *);
static struct reply *reply_new(struct evhttp_request *, struct entry *,
		    json_t *);
static void	 reply_timer_cb(evutil_socket_t, short, void *);
static void	 reply_begin(struct reply *);
static json_t	*reply_usage(struct reply *);
static json_t	*chunk_new(struct reply *, json_t *, const char *);
static void	 stream_send(struct reply *, json_t *, int);
static void	 stream_step(struct reply *);
static void	 stream_drain_cb(struct evhttp_connection *, void *);
static void	 stream_close_cb(struct evhttp_connection *, void *);
static void	 stream_finish(struct reply *);
static void	 stream_cut(struct reply *);

static long long
tokens(long long chars)
{
	return ((chars + 3) / 4);
}

void
serve_request(struct evhttp_request *req, void *arg)
{
	static const char	 sfx_chat[] = "/chat/completions";
	static const char	 sfx_models[] = "/models";
	enum evhttp_cmd_type	 cmd = evhttp_request_get_command(req);
	struct evbuffer		*in = evhttp_request_get_input_buffer(req);
	struct entry		*e = NULL;
	json_error_t		 je;
	json_t			*body = NULL;
	const char		*path, *raw = NULL;
	char			 id[64];
	size_t			 plen, len;
	int			 status;

	(void)arg;
	snprintf(id, sizeof(id), "req_lmstub_%llu", ++env.seq);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "x-request-id", id);
	path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	if (path == NULL)
		path = "";
	plen = strlen(path);
	if ((len = evbuffer_get_length(in)) > 0) {
		raw = (const char *)evbuffer_pullup(in, -1);
		body = json_loadb(raw, len, JSON_ALLOW_NUL, &je);
	}

	if (plen >= sizeof(sfx_chat) - 1 &&
	    strcmp(path + plen - (sizeof(sfx_chat) - 1), sfx_chat) == 0) {
		if (cmd != EVHTTP_REQ_POST) {
			evhttp_add_header(evhttp_request_get_output_headers(req),
			    "Allow", "POST");
			status = reject(req, 405, "method not allowed; use POST");
		} else if (len == 0)
			status = reject(req, 400, "the request has no body");
		else if (body == NULL)
			status = reject(req, 400, "could not parse the JSON body "
			    "of the request: %s (line %d, column %d)", je.text,
			    je.line, je.column);
		else
			status = completions(req, body, &e);
	} else if (plen >= sizeof(sfx_models) - 1 &&
	    strcmp(path + plen - (sizeof(sfx_models) - 1), sfx_models) == 0) {
		if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
			evhttp_add_header(evhttp_request_get_output_headers(req),
			    "Allow", "GET");
			status = reject(req, 405, "method not allowed; use GET");
		} else
			status = models(req);
	} else
		status = reject(req, 404, "Unknown request URL: %s %.200s",
		    method_name(req), path);

	log_request(req, path, status, e, body != NULL ? raw : NULL, len);
	json_decref(body);
}

/*
 * Validate a chat-completions request and pick its script entry.  The
 * answer is sent now or later by a reply; the HTTP status is returned.
 */
static int
completions(struct evhttp_request *req, json_t *body, struct entry **ep)
{
	struct entry	*e;
	struct reply	*r;
	json_t		*model, *msgs, *opts;
	const char	*why, *text;
	char		 buf[256], *tofree;
	size_t		 tlen;

	if ((why = request_check(body, buf, sizeof(buf))) != NULL)
		return (reject(req, 400, "%s", why));
	if (env.nreplies >= MAX_REPLIES) {
		send_error(req, 503, "server_error", NULL,
		    "too many requests in flight (%d)", MAX_REPLIES);
		return (503);
	}
	model = json_object_get(body, "model");
	msgs = json_object_get(body, "messages");
	tofree = last_text(msgs, &tlen);
	text = tofree != NULL ? tofree : "";

	if ((e = script_find(model, text, tlen)) == NULL) {
		size_t mlen, xlen;

		mlen = utf8_prefix(json_string_value(model),
		    json_string_length(model), EXCERPT_CHARS, NULL);
		xlen = utf8_prefix(text, tlen, EXCERPT_CHARS, NULL);
		send_error(req, 500, "server_error", NULL,
		    "fleet-lmstub: no script entry matched (model \"%.*s\", "
		    "last message \"%.*s%s\")", (int)mlen,
		    json_string_value(model), (int)xlen, text,
		    xlen < tlen ? "..." : "");
		free(tofree);
		return (500);
	}
	free(tofree);
	if (!e->e_repeat)
		e->e_used = 1;
	*ep = e;

	r = reply_new(req, e, model);
	r->r_stream = json_is_true(json_object_get(body, "stream"));
	opts = json_object_get(body, "stream_options");
	r->r_usage = r->r_stream &&
	    json_is_true(json_object_get(opts, "include_usage"));
	r->r_ptokens = tokens(prompt_chars(msgs));
	if (e->e_content != NULL)
		r->r_ctokens = tokens((long long)utf8_chars(e->e_content,
		    e->e_contentlen));

	if (e->e_delay_ms > 0) {
		struct timeval tv;

		tv.tv_sec = e->e_delay_ms / 1000;
		tv.tv_usec = (e->e_delay_ms % 1000) * 1000;
		evtimer_add(r->r_ev, &tv);
	} else
		reply_begin(r);
	return (e->e_status);
}

/* NULL if the request is acceptable, else a message (maybe in buf). */
static const char *
request_check(json_t *body, char *buf, size_t bufsz)
{
	json_t		*msgs, *m, *role, *content, *part, *v;
	size_t		 i, k;

	if (!json_is_object(body))
		return ("the request body must be a JSON object");
	if ((v = json_object_get(body, "model")) == NULL)
		return ("you must provide a model parameter");
	if (!json_is_string(v))
		return ("'model' must be a string");
	msgs = json_object_get(body, "messages");
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return ("'messages' must be a non-empty array");
	json_array_foreach(msgs, i, m) {
		if (!json_is_object(m)) {
			snprintf(buf, bufsz, "'messages.%zu' must be an object",
			    i);
			return (buf);
		}
		role = json_object_get(m, "role");
		if (!json_is_string(role)) {
			snprintf(buf, bufsz, "'messages.%zu.role' must be a "
			    "string", i);
			return (buf);
		}
		content = json_object_get(m, "content");
		if (json_is_string(content))
			continue;
		if ((content == NULL || json_is_null(content)) &&
		    strcmp(json_string_value(role), "assistant") == 0)
			continue;
		if (!json_is_array(content)) {
			snprintf(buf, bufsz, "'messages.%zu.content' must be a "
			    "string or an array of content parts", i);
			return (buf);
		}
		json_array_foreach(content, k, part) {
			v = json_object_get(part, "type");
			if (!json_is_string(v) || (strcmp(json_string_value(v),
			    "text") == 0 &&
			    !json_is_string(json_object_get(part, "text")))) {
				snprintf(buf, bufsz, "'messages.%zu.content.%zu'"
				    " is not a valid content part", i, k);
				return (buf);
			}
		}
	}
	v = json_object_get(body, "stream");
	if (v != NULL && !json_is_boolean(v) && !json_is_null(v))
		return ("'stream' must be a boolean");
	v = json_object_get(body, "stream_options");
	if (v != NULL && !json_is_object(v) && !json_is_null(v))
		return ("'stream_options' must be an object");
	v = json_object_get(v, "include_usage");
	if (v != NULL && !json_is_boolean(v) && !json_is_null(v))
		return ("'stream_options.include_usage' must be a boolean");
	return (NULL);
}

/*
 * The text of the last message: its string content, or its text parts
 * concatenated.  Returns a malloc'ed copy (NULL when there is no text).
 */
static char *
last_text(json_t *msgs, size_t *lenp)
{
	json_t	*content, *part, *t;
	char	*s;
	size_t	 i, len = 0;

	*lenp = 0;
	content = json_object_get(json_array_get(msgs,
	    json_array_size(msgs) - 1), "content");
	if (json_is_string(content)) {
		len = json_string_length(content);
		if ((s = malloc(len + 1)) == NULL)
			err(1, NULL);
		memcpy(s, json_string_value(content), len + 1);
		*lenp = len;
		return (s);
	}
	json_array_foreach(content, i, part)
		if ((t = json_object_get(part, "text")) != NULL &&
		    json_is_string(t))
			len += json_string_length(t);
	if (len == 0)
		return (NULL);
	if ((s = malloc(len + 1)) == NULL)
		err(1, NULL);
	json_array_foreach(content, i, part)
		if ((t = json_object_get(part, "text")) != NULL &&
		    json_is_string(t)) {
			memcpy(s + *lenp, json_string_value(t),
			    json_string_length(t));
			*lenp += json_string_length(t);
		}
	s[len] = '\0';
	return (s);
}

/* Characters of text in all messages, for the prompt token estimate. */
static long long
prompt_chars(json_t *msgs)
{
	json_t		*m, *content, *part, *t;
	size_t		 i, k;
	long long	 n = 0;

	json_array_foreach(msgs, i, m) {
		content = json_object_get(m, "content");
		if (json_is_string(content))
			n += (long long)utf8_chars(json_string_value(content),
			    json_string_length(content));
		json_array_foreach(content, k, part)
			if ((t = json_object_get(part, "text")) != NULL &&
			    json_is_string(t))
				n += (long long)utf8_chars(json_string_value(t),
				    json_string_length(t));
	}
	return (n);
}

static int
models(struct evhttp_request *req)
{
	json_t	*list, *data, *m;
	size_t	 i;

	data = json_array();
	json_array_foreach(env.models, i, m)
		json_array_append_new(data, json_pack("{s:O, s:s, s:i, s:s}",
		    "id", m, "object", "model", "created", 0,
		    "owned_by", "fleet-lmstub"));
	list = json_pack("{s:s, s:o}", "object", "list", "data", data);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	send_json(req, 200, list);
	json_decref(list);
	return (200);
}

/*
 * One JSON line per request.  The body is copied as received, minus CR
 * and LF, which in valid JSON can only be insignificant whitespace.
 */
static void
log_request(struct evhttp_request *req, const char *path, int status,
    struct entry *e, const char *body, size_t len)
{
	json_t	*o;
	char	*s;
	size_t	 i, slen;

	if (env.log == NULL)
		return;
	o = json_pack("{s:s, s:o?, s:i, s:o}", "method", method_name(req),
	    "path", json_string(path), "status", status,
	    "entry", e != NULL ? json_integer(e->e_line) : json_null());
	if (o == NULL || (s = json_dumps(o, JSON_COMPACT)) == NULL) {
		warnx("cannot format a log line");
		json_decref(o);
		return;
	}
	json_decref(o);
	slen = strlen(s);
	fwrite(s, 1, slen - 1, env.log);
	fputs(",\"body\":", env.log);
	if (body == NULL)
		fputs("null", env.log);
	for (i = 0; body != NULL && i < len; i++)
		if (body[i] != '\r' && body[i] != '\n')
			putc(body[i], env.log);
	fputs("}\n", env.log);
	if (fflush(env.log) == EOF)
		warn("log");
	free(s);
}

static const char *
method_name(struct evhttp_request *req)
{
	static const char *methods[] = {
		"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE",
		"CONNECT", "PATCH"
	};
	enum evhttp_cmd_type	 cmd = evhttp_request_get_command(req);
	size_t			 i;

	for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if ((int)cmd == 1 << i)
			return (methods[i]);
	return ("?");
}

/* Reason phrases libevent 2.1 lacks or gets wrong (429 is "Client Error"). */
static const char *
reason(int status)
{
	static const struct {
		int		 code;
		const char	*phrase;
	} phrases[] = {
		{ 408, "Request Timeout" },
		{ 409, "Conflict" },
		{ 413, "Content Too Large" },
		{ 422, "Unprocessable Content" },
		{ 429, "Too Many Requests" },
		{ 529, "Site Overloaded" },
	};
	size_t	 i;

	for (i = 0; i < sizeof(phrases) / sizeof(phrases[0]); i++)
		if (phrases[i].code == status)
			return (phrases[i].phrase);
	return (NULL);
}

static void
send_json(struct evhttp_request *req, int status, json_t *obj)
{
	struct evbuffer	*buf;
	char		*s;

	if ((buf = evbuffer_new()) == NULL ||
	    (s = json_dumps(obj, JSON_COMPACT)) == NULL)
		errx(1, "out of memory");
	evbuffer_add(buf, s, strlen(s));
	evbuffer_add(buf, "\n", 1);
	evhttp_send_reply(req, status, reason(status), buf);
	evbuffer_free(buf);
	free(s);
}

/* Answer an OpenAI-shaped error; code NULL means JSON null. */
static void
send_error(struct evhttp_request *req, int status, const char *type,
    json_t *code, const char *fmt, ...)
{
	json_t	*o, *msg;
	va_list	 ap;
	char	 buf[1024];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if ((msg = json_string(buf)) == NULL)
		msg = json_string("(message is not valid UTF-8)");
	o = json_pack("{s:{s:o, s:s, s:n, s:O?}}", "error", "message", msg,
	    "type", type, "param", "code", code);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "application/json");
	send_json(req, status, o);
	json_decref(o);
}

/* An invalid_request_error; returns status. */
static int
reject(struct evhttp_request *req, int status, const char *fmt, ...)
{
	va_list	 ap;
	char	 buf[512];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	send_error(req, status, "invalid_request_error", NULL, "%s", buf);
	return (status);
}

/* Script headers first, then ours where the script set none. */
static void
set_headers(struct evhttp_request *req, struct entry *e, const char *ctype)
{
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	const char		*name;
	json_t			*v;
	char			 buf[64];

	json_object_foreach(e->e_headers, name, v) {
		evhttp_remove_header(h, name);
		evhttp_add_header(h, name, json_string_value(v));
	}
	if (e->e_retry_ms >= 0) {
		if (evhttp_find_header(h, "Retry-After") == NULL) {
			snprintf(buf, sizeof(buf), "%lld",
			    (e->e_retry_ms + 999) / 1000);
			evhttp_add_header(h, "Retry-After", buf);
		}
		if (evhttp_find_header(h, "retry-after-ms") == NULL) {
			snprintf(buf, sizeof(buf), "%lld", e->e_retry_ms);
			evhttp_add_header(h, "retry-after-ms", buf);
		}
	}
	if (evhttp_find_header(h, "Content-Type") == NULL)
		evhttp_add_header(h, "Content-Type", ctype);
}

static struct reply *
reply_new(struct evhttp_request *req, struct entry *e, json_t *model)
{
	struct reply	*r;

	if ((r = calloc(1, sizeof(*r))) == NULL)
		err(1, NULL);
	if ((r->r_ev = evtimer_new(env.base, reply_timer_cb, r)) == NULL)
		errx(1, "evtimer_new failed");
	r->r_req = req;
	r->r_script = e;
	r->r_model = json_incref(model);
	r->r_state = R_DELAY;
	r->r_created = time(NULL);
	r->r_seq = env.seq;
	TAILQ_INSERT_TAIL(&env.replies, r, r_next);
	env.nreplies++;
	return (r);
}

void
reply_free(struct reply *r)
{
	TAILQ_REMOVE(&env.replies, r, r_next);
	env.nreplies--;
	event_free(r->r_ev);
	json_decref(r->r_model);
	free(r);
}

static void
reply_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct reply	*r = arg;

	(void)fd;
	(void)what;
	switch (r->r_state) {
	case R_DELAY:
		reply_begin(r);
		break;
	case R_STREAM:
		stream_step(r);
		break;
	case R_CUT:
		stream_cut(r);
		break;
	}
}

/* The first byte: an error, a whole completion or the stream head. */
static void
reply_begin(struct reply *r)
{
	struct entry	*e = r->r_script;
	json_t		*o, *code, *msg;
	char		 buf[64];

	if (e->e_status != 200) {
		code = e->e_errcode;
		if (code == NULL && e->e_status == 429)
			code = json_string("rate_limit_exceeded");
		else if (code == NULL && e->e_status == 401)
			code = json_string("invalid_api_key");
		else
			json_incref(code);
		if (e->e_content != NULL)
			msg = json_stringn(e->e_content, e->e_contentlen);
		else {
			snprintf(buf, sizeof(buf), "%s (scripted HTTP %d)",
			    e->e_status == 429 ? "Rate limit reached" :
			    "Scripted error", e->e_status);
			msg = json_string(buf);
		}
		o = json_pack("{s:{s:o, s:s, s:n, s:o?}}", "error",
		    "message", msg, "type", e->e_errtype != NULL ?
		    e->e_errtype : e->e_status == 429 ? "requests" :
		    e->e_status >= 500 ? "server_error" :
		    "invalid_request_error", "param", "code", code);
		set_headers(r->r_req, e, "application/json");
		send_json(r->r_req, e->e_status, o);
		json_decref(o);
		reply_free(r);
		return;
	}

	if (!r->r_stream) {
		o = chunk_new(r, json_pack("{s:i, s:{s:s, s:s%, s:n, s:[]}, "
		    "s:n, s:s}", "index", 0, "message", "role", "assistant",
		    "content", e->e_content, e->e_contentlen, "refusal",
		    "annotations", "logprobs", "finish_reason", "stop"),
		    "chat.completion");
		json_object_set_new(o, "usage", reply_usage(r));
		set_headers(r->r_req, e, "application/json");
		send_json(r->r_req, 200, o);
		json_decref(o);
		reply_free(r);
		return;
	}

	set_headers(r->r_req, e, "text/event-stream; charset=utf-8");
	evhttp_add_header(evhttp_request_get_output_headers(r->r_req),
	    "Cache-Control", "no-cache");
	evhttp_send_reply_start(r->r_req, 200, NULL);
	/*
	 * From here on a client that goes away is noticed: libevent detaches
	 * the request and frees the connection, calling stream_close_cb.
	 */
	evhttp_connection_set_closecb(evhttp_request_get_connection(r->r_req),
	    stream_close_cb, r);
	r->r_state = R_STREAM;
	stream_send(r, chunk_new(r, json_pack("{s:i, s:{s:s, s:s, s:n}, s:n, "
	    "s:n}", "index", 0, "delta", "role", "assistant", "content", "",
	    "refusal", "logprobs", "finish_reason"), "chat.completion.chunk"),
	    1);
}

static json_t *
reply_usage(struct reply *r)
{
	return (json_pack("{s:I, s:I, s:I, s:{s:i, s:i}, s:{s:i, s:i, s:i, "
	    "s:i}}", "prompt_tokens", (json_int_t)r->r_ptokens,
	    "completion_tokens", (json_int_t)r->r_ctokens,
	    "total_tokens", (json_int_t)(r->r_ptokens + r->r_ctokens),
	    "prompt_tokens_details", "cached_tokens", 0, "audio_tokens", 0,
	    "completion_tokens_details", "reasoning_tokens", 0, "audio_tokens",
	    0, "accepted_prediction_tokens", 0, "rejected_prediction_tokens",
	    0));
}

/* A completion or chunk around one choice (NULL: empty choices). */
static json_t *
chunk_new(struct reply *r, json_t *choice, const char *object)
{
	json_t	*o;
	char	 id[64];

	snprintf(id, sizeof(id), "chatcmpl-lmstub-%d-%llu", (int)getpid(),
	    r->r_seq);
	o = json_pack("{s:s, s:s, s:I, s:O, s:s, s:s, s:[o*]}", "id", id,
	    "object", object, "created", (json_int_t)r->r_created,
	    "model", r->r_model, "service_tier", "default",
	    "system_fingerprint", "fp_lmstub", "choices", choice);
	if (o == NULL)
		errx(1, "cannot build a completion");
	return (o);
}

/* Send one SSE event (consumes obj); drained is whether to call back. */
static void
stream_send(struct reply *r, json_t *obj, int drained)
{
	struct evbuffer	*buf;
	char		*s;

	if (r->r_usage && json_object_get(obj, "usage") == NULL)
		json_object_set_new(obj, "usage", json_null());
	if ((buf = evbuffer_new()) == NULL ||
	    (s = json_dumps(obj, JSON_COMPACT)) == NULL)
		errx(1, "out of memory");
	evbuffer_add_printf(buf, "data: %s\n\n", s);
	if (drained)
		evhttp_send_reply_chunk_with_cb(r->r_req, buf,
		    stream_drain_cb, r);
	else
		evhttp_send_reply_chunk(r->r_req, buf);
	evbuffer_free(buf);
	free(s);
	json_decref(obj);
}

/* The previous chunk reached the kernel: pause or send the next. */
static void
stream_drain_cb(struct evhttp_connection *evcon, void *arg)
{
	struct reply	*r = arg;
	struct timeval	 tv;

	(void)evcon;
	if (r->r_state != R_STREAM || evtimer_pending(r->r_ev, NULL))
		return;
	if (r->r_script->e_interval_ms > 0) {
		tv.tv_sec = r->r_script->e_interval_ms / 1000;
		tv.tv_usec = (r->r_script->e_interval_ms % 1000) * 1000;
		evtimer_add(r->r_ev, &tv);
	} else
		stream_step(r);
}

static void
stream_step(struct reply *r)
{
	struct entry	*e = r->r_script;
	struct timeval	 tv = { 0, 0 };
	size_t		 n, got;
	long long	 want = e->e_chunk;

	if (e->e_cut >= 0 && (r->r_chars >= e->e_cut ||
	    r->r_off == e->e_contentlen)) {
		/* Everything is flushed; drop it outside libevent's stack. */
		r->r_state = R_CUT;
		evtimer_add(r->r_ev, &tv);
		return;
	}
	if (r->r_off == e->e_contentlen) {
		stream_finish(r);
		return;
	}
	if (e->e_cut >= 0 && want > e->e_cut - r->r_chars)
		want = e->e_cut - r->r_chars;
	n = utf8_prefix(e->e_content + r->r_off, e->e_contentlen - r->r_off,
	    (size_t)want, &got);
	stream_send(r, chunk_new(r, json_pack("{s:i, s:{s:s%}, s:n, s:n}",
	    "index", 0, "delta", "content", e->e_content + r->r_off, n,
	    "logprobs", "finish_reason"), "chat.completion.chunk"), 1);
	r->r_off += n;
	r->r_chars += (long long)got;
}

static void
stream_finish(struct reply *r)
{
	struct evbuffer	*buf;
	json_t		*o;

	stream_send(r, chunk_new(r, json_pack("{s:i, s:{}, s:n, s:s}",
	    "index", 0, "delta", "logprobs", "finish_reason", "stop"),
	    "chat.completion.chunk"), 0);
	if (r->r_usage) {
		o = chunk_new(r, NULL, "chat.completion.chunk");
		json_object_set_new(o, "usage", reply_usage(r));
		stream_send(r, o, 0);
	}
	if ((buf = evbuffer_new()) == NULL)
		errx(1, "out of memory");
	evbuffer_add_printf(buf, "data: [DONE]\n\n");
	evhttp_send_reply_chunk(r->r_req, buf);
	evbuffer_free(buf);
	evhttp_connection_set_closecb(evhttp_request_get_connection(r->r_req),
	    NULL, NULL);
	evhttp_send_reply_end(r->r_req);
	reply_free(r);
}

/* cut_after_chars: close mid-response, leaving the chunked body open. */
static void
stream_cut(struct reply *r)
{
	struct evhttp_connection	*evcon;

	evcon = evhttp_request_get_connection(r->r_req);
	evhttp_connection_set_closecb(evcon, NULL, NULL);
	evhttp_connection_free(evcon);	/* frees the request too */
	reply_free(r);
}

static void
stream_close_cb(struct evhttp_connection *evcon, void *arg)
{
	struct reply	*r = arg;

	(void)evcon;
	/* A detached request is ours to free; an attached one is not. */
	if (evhttp_request_get_connection(r->r_req) == NULL)
		evhttp_send_reply_end(r->r_req);
	reply_free(r);
}
