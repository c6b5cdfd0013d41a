/*
 * What an attempt gets back: the response headers, then the body, an SSE
 * stream of chunks, a plain chat.completion or an error, and the text,
 * usage and finish_reason taken from it.  lm_header_cb and lm_write_cb are
 * called by curl, which is on the stack.
 */
#include <sys/types.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <bsd/string.h>
#include <curl/curl.h>
#include <jansson.h>

#include "lib/sse.h"
#include "lib/util.h"
#include "turnworker/lm.h"
#include "turnworker/lm_int.h"

static int		 chunk_apply(struct lm_call *, json_t *);
static int		 content_add(struct lm_call *, json_t *);
static int		 text_add(struct lm_call *, const char *, size_t);
static void		 usage_parse(json_t *, struct lm_usage *);

static void		 buf_add(struct buf *, const char *, size_t);

size_t
lm_header_cb(char *p, size_t size, size_t nmemb, void *arg)
{
	struct lm_call	*call = arg;
	size_t		 n = size * nmemb, len = n, vlen;
	const char	*v;
	char		 tmp[64], *end;
	double		 d;

	if (call->cancelled || call->lm->dying)
		return (0);
	lm_stall_reset(call);
	if ((call->hdrbytes += n) > LM_MAX_HEADERS) {
		lm_call_fail(call, LM_ERR_PROTOCOL, "response headers over %d "
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

size_t
lm_write_cb(char *p, size_t size, size_t nmemb, void *arg)
{
	struct lm_call	*call = arg;
	size_t		 n = size * nmemb, keep;
	long		 status;

	if (call->cancelled || call->lm->dying || call->fail != LM_OK)
		return (0);
	lm_stall_reset(call);
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
			lm_call_fail(call, LM_ERR_PROTOCOL, "stream line or event "
			    "over %d bytes", LM_MAX_LINE);
		if (call->fail != LM_OK || call->cancelled || call->lm->dying)
			return (0);
		return (n);
	}
	if (n > call->lm->max_response - call->raw.len) {
		lm_call_fail(call, LM_ERR_PROTOCOL, "response too large (over "
		    "%zu bytes)", call->lm->max_response);
		return (0);
	}
	buf_add(&call->raw, p, n);
	return (n);
}

int
lm_sse_event(const char *event, const char *data, size_t len, void *arg)
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
			return (lm_call_fail(call, LM_ERR_CUT, "stream ended "
			    "inside an event"));
		return (lm_call_fail(call, LM_ERR_PROTOCOL, "bad stream event: "
		    "%s", je.text));
	}
	err = json_object_get(o, "error");
	if (strcmp(event, "error") == 0 ||
	    (err != NULL && !json_is_null(err))) {
		code[0] = '\0';
		msg = lm_provider_message(o, code, sizeof(code));
		lm_call_fail(call, LM_ERR_PROTOCOL, "error in stream%s%s: %.*s",
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
		return (lm_call_fail(call, LM_ERR_PROTOCOL, "response too large "
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
void
lm_body_parse(struct lm_call *call)
{
	json_t		*o, *choice, *err, *fr;
	json_error_t	 je;
	const char	*msg;
	char		 code[64];

	if (call->raw.len == 0) {
		lm_call_detail(call, "HTTP %d with an empty body", call->status);
		lm_call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	if ((o = json_loadb(call->raw.p, call->raw.len, 0, &je)) == NULL) {
		lm_call_detail(call, "HTTP %d: unparsable body: %s", call->status,
		    je.text);
		lm_call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	if ((err = json_object_get(o, "error")) != NULL && !json_is_null(err)) {
		code[0] = '\0';
		msg = lm_provider_message(o, code, sizeof(code));
		lm_call_detail(call, "HTTP %d with an error%s%s: %.*s",
		    call->status, code[0] != '\0' ? " " : "", code,
		    LM_EXCERPT, msg != NULL ? msg : "(no message)");
		json_decref(o);
		lm_call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	choice = json_array_get(json_object_get(o, "choices"), 0);
	if (!json_is_object(choice)) {
		json_decref(o);
		lm_call_detail(call, "HTTP %d: no choices in the body",
		    call->status);
		lm_call_finish(call, LM_ERR_PROTOCOL);
		return;
	}
	content_add(call, json_object_get(json_object_get(choice, "message"),
	    "content"));
	if (json_is_string(fr = json_object_get(choice, "finish_reason")))
		strlcpy(call->res.finish_reason, json_string_value(fr),
		    sizeof(call->res.finish_reason));
	usage_parse(json_object_get(o, "usage"), &call->res.usage);
	json_decref(o);
	lm_call_finish(call, call->fail);
}

/*
 * The message of an error body in any of the dialects: OpenAI, vLLM,
 * llama.cpp, Ollama and OpenRouter {"error":{"message","code"}}, old vLLM
 * {"object":"error","message"}, Databricks {"error_code","message"}, or
 * {"error":"text"}.  The code, if any, goes to code.
 */
const char *
lm_provider_message(json_t *o, char *code, size_t codesz)
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
