/*
 * The turnworker's LM client against real HTTP: bin/fleet-lmstub for the
 * scripted cases, and a small evhttp server in this process for what the
 * stub cannot show (request headers, gateway dialects, mid-stream
 * errors).  The SSE line parser is tested on its own first.
 */
#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/string.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "lib/util.h"
#include "lib/utf8.h"
#include "turnworker/lm.h"
#include "lib/sse.h"
#include "tap.h"

#define CASE_MS		15000	/* a case that runs longer has failed */
#define KEY		"sk-test-0123456789abcdef"

struct stub {
	pid_t		 pid;
	char		 script[64];
	char		 log[64];
	char		 url[128];
};

struct got {
	int		 ndone;
	int		 sync;		/* on_done ran inside lm_call */
	enum lm_error	 error;
	char		*text;
	size_t		 len;
	struct lm_usage	 usage;
	char		 finish[32];
	int		 status;
	int		 attempts;
	char		 detail[512];
	char		*deltas;
	size_t		 deltalen;
	int		 ndeltas;
	int		 cancel_at;	/* lm_cancel in the nth delta */
	struct got	*victim;	/* of that lm_cancel; NULL: itself */
	int		 free_at;	/* lm_free in the nth delta */
	struct lm_call	*call;
	struct lm	*lm;
	struct lm	*free_on_done;
	int64_t		 t0;
	int64_t		 elapsed;
};

static struct event_base	*base;
static char			 stub_path[PATH_MAX];
static int			 pending;
static int			 timed_out;
static int			 in_lm_call;

/* The in-process server. */
static struct {
	struct evhttp	*http;
	int		 port;
	char		 url[128];
	int		 nreq;
	int		 has_auth;
	char		 auth[256];
	char		 accept[128];
	char		 ctype[128];
	int		 has_expect;
	char		 path[128];
	size_t		 bodylen;
	int		 status;
	const char	*out_ctype;
	const char	*out_body;
	const char	*out_hdr;	/* "name: value" or NULL */
} srv;

/* SSE parser. */

struct evlist {
	char		 buf[4096];
	size_t		 len;
	int		 n;
	int		 stop_at;
};

static int
ev_collect(const char *event, const char *data, size_t len, void *arg)
{
	struct evlist	*l = arg;

	l->n++;
	l->len += snprintf(l->buf + l->len, sizeof(l->buf) - l->len,
	    "[%s|%.*s]", event, (int)len, data);
	return (l->stop_at > 0 && l->n >= l->stop_at);
}

static void
sse_split(const char *in, size_t split, size_t step, struct evlist *l,
    int finish)
{
	struct sse	 s;
	size_t		 i, n = strlen(in), k;

	memset(l, 0, sizeof(*l));
	sse_init(&s, 1024, ev_collect, l);
	for (i = 0; i < n; i += k) {
		k = i < split ? split - i : step;
		if (k > n - i)
			k = n - i;
		sse_feed(&s, in + i, k);
	}
	if (finish)
		sse_finish(&s);
	sse_clear(&s);
}

static void
test_sse(void)
{
	static const char	*in =
	    "\xef\xbb\xbf: OPENROUTER PROCESSING\r\n\r\n"
	    "data: {\"a\":1}\r\n\r\n"
	    "data:{\"b\":2}\n\n"
	    "event: error\ndata: x\ndata:  y\n\n"
	    "id: 7\nretry: 10\n\n"
	    "data: one\rdata: two\r\r"
	    "{\"error\":\"raw\"}\n"
	    "error: {\"message\":\"old\"}\n"
	    "data: [DONE]\n\n";
	static const char	*want =
	    "[message|{\"a\":1}][message|{\"b\":2}][error|x\n y]"
	    "[message|one\ntwo][message|{\"error\":\"raw\"}]"
	    "[error|{\"message\":\"old\"}][message|[DONE]]";
	struct evlist		 l;
	struct sse		 s;
	char			 big[200];
	size_t			 i, n = strlen(in);
	int			 bad = 0;

	sse_split(in, n, n, &l, 0);
	is_str(l.buf, want, "sse: one piece");
	is_int(l.n, 7, "sse: seven events");
	sse_split(in, 0, 1, &l, 0);
	is_str(l.buf, want, "sse: byte by byte");
	for (i = 1; i < n; i++) {
		sse_split(in, i, n, &l, 0);
		if (strcmp(l.buf, want) != 0) {
			bad++;
			printf("# split at %zu: %s\n", i, l.buf);
		}
	}
	is_int(bad, 0, "sse: split at every byte");
	for (i = 2; i < 9; i++) {
		sse_split(in, 0, i, &l, 0);
		if (strcmp(l.buf, want) != 0)
			bad++;
	}
	is_int(bad, 0, "sse: pieces of 2 to 8 bytes");

	sse_split("data: a\n\ndata: [DONE]", 0, 3, &l, 0);
	is_str(l.buf, "[message|a]", "sse: unterminated event held back");
	sse_split("data: a\n\ndata: [DONE]", 0, 3, &l, 1);
	is_str(l.buf, "[message|a][message|[DONE]]",
	    "sse: finish dispatches it");
	sse_split("data: a\r", 0, 1, &l, 1);
	is_str(l.buf, "[message|a]", "sse: finish after a lone CR");

	memset(&l, 0, sizeof(l));
	sse_init(&s, 64, ev_collect, &l);
	memset(big, 'x', sizeof(big));
	is_int(sse_feed(&s, "data: ", 6), SSE_OK, "sse: start of a line");
	is_int(sse_feed(&s, big, 57), SSE_OK, "sse: line of 63 bytes");
	is_int(sse_feed(&s, big, 2), SSE_TOOLONG, "sse: 65 bytes too long");
	is_int(sse_feed(&s, "\n\n", 2), SSE_STOP, "sse: stays stopped");
	is_int(l.n, 0, "sse: nothing dispatched");
	sse_clear(&s);

	memset(&l, 0, sizeof(l));
	sse_init(&s, 16, ev_collect, &l);
	is_int(sse_feed(&s, "data: 0123456789\ndata: 0123456789\n", 34),
	    SSE_TOOLONG, "sse: event data over the limit");
	sse_clear(&s);

	memset(&l, 0, sizeof(l));
	l.stop_at = 1;
	sse_init(&s, 1024, ev_collect, &l);
	is_int(sse_feed(&s, "data: 1\n\ndata: 2\n\n", 18), SSE_STOP,
	    "sse: callback stops the parse");
	is_int(l.n, 1, "sse: no event after the stop");
	sse_clear(&s);
}

/* Helpers. */

static int
find_stub(void)
{
	char	 exe[PATH_MAX], *dir;
	ssize_t	 n;

	if (access("bin/fleet-lmstub", X_OK) == 0 &&
	    realpath("bin/fleet-lmstub", stub_path) != NULL)
		return (0);
	if ((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) <= 0)
		return (-1);
	exe[n] = '\0';
	dir = dirname(exe);
	snprintf(stub_path, sizeof(stub_path), "%s/../../../bin/fleet-lmstub",
	    dir);
	return (access(stub_path, X_OK));
}

static void
write_file(const char *path, const char *text)
{
	FILE	*fp;

	if ((fp = fopen(path, "w")) == NULL)
		abort();
	fputs(text, fp);
	fclose(fp);
}

/* Start fleet-lmstub on a script, which is freed. */
static int
stub_start(struct stub *st, char *script)
{
	struct pollfd	 pfd;
	char		 line[128];
	size_t		 len = 0;
	ssize_t		 n;
	int64_t		 end;
	int		 p[2], fd, port;

	memset(st, 0, sizeof(*st));
	strcpy(st->script, "/tmp/fleet-test-lm-script-XXXXXX");
	strcpy(st->log, "/tmp/fleet-test-lm-log-XXXXXX");
	if ((fd = mkstemp(st->script)) == -1)
		abort();
	close(fd);
	if ((fd = mkstemp(st->log)) == -1)
		abort();
	close(fd);
	write_file(st->script, script);
	free(script);
	if (pipe(p) == -1)
		abort();
	if ((st->pid = fork()) == -1)
		abort();
	if (st->pid == 0) {
		/* A crashed test must not leave a stub holding prove's pipe. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execl(stub_path, "fleet-lmstub", "--listen", "127.0.0.1:0",
		    "--script", st->script, "--log", st->log, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	pfd.fd = p[0];
	pfd.events = POLLIN;
	end = now_ms() + 5000;
	while (memchr(line, '\n', len) == NULL && len < sizeof(line) - 1) {
		if (now_ms() >= end ||
		    poll(&pfd, 1, (int)(end - now_ms())) <= 0)
			break;
		if ((n = read(p[0], line + len, sizeof(line) - 1 - len)) <= 0)
			break;
		len += n;
	}
	close(p[0]);
	line[len] = '\0';
	if (sscanf(line, "listening 127.0.0.1:%d", &port) != 1) {
		printf("# fleet-lmstub did not start: '%s'\n", line);
		kill(st->pid, SIGKILL);
		waitpid(st->pid, NULL, 0);
		st->pid = 0;
		return (-1);
	}
	snprintf(st->url, sizeof(st->url), "http://127.0.0.1:%d/v1", port);
	return (0);
}

static void
stub_stop(struct stub *st)
{
	if (st->pid > 0) {
		kill(st->pid, SIGTERM);
		waitpid(st->pid, NULL, 0);
	}
	unlink(st->script);
	unlink(st->log);
}

/* The stub's log, one JSON line per request. */
static char *
stub_log(struct stub *st, int *nlines)
{
	FILE	*fp;
	char	*text = NULL, *p;
	size_t	 cap = 0;
	ssize_t	 n;

	*nlines = 0;
	if ((fp = fopen(st->log, "r")) == NULL)
		return (xstrdup(""));
	n = getdelim(&text, &cap, '\0', fp);
	fclose(fp);
	if (n <= 0) {
		free(text);
		return (xstrdup(""));
	}
	for (p = text; (p = strchr(p, '\n')) != NULL; p++)
		(*nlines)++;
	return (text);
}

static int
stub_requests(struct stub *st)
{
	char	*text;
	int	 n;

	text = stub_log(st, &n);
	free(text);
	return (n);
}

static char *
entry(json_t *o)
{
	char	*s, *line;

	if (o == NULL)
		abort();
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (xasprintf(&line, "%s\n", s) == -1)
		abort();
	free(s);
	return (line);
}

/* Concatenate and free script lines; NULL ends the list. */
static char *
script(char *first, ...)
{
	va_list	 ap;
	char	*out = xstrdup(""), *s, *t;

	va_start(ap, first);
	for (s = first; s != NULL; s = va_arg(ap, char *)) {
		if (xasprintf(&t, "%s%s", out, s) == -1)
			abort();
		free(out);
		free(s);
		out = t;
	}
	va_end(ap);
	return (out);
}

static char *
messages(const char *user)
{
	json_t	*a;
	char	*s;

	a = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system",
	    "content", "You are terse.", "role", "user", "content", user);
	s = json_dumps(a, JSON_COMPACT);
	json_decref(a);
	return (s);
}

static void
on_delta(const char *p, size_t n, void *arg)
{
	struct got	*g = arg;

	g->deltas = xreallocarray(g->deltas, g->deltalen + n + 1, 1);
	memcpy(g->deltas + g->deltalen, p, n);
	g->deltalen += n;
	g->deltas[g->deltalen] = '\0';
	g->ndeltas++;
	if (g->ndeltas == g->cancel_at) {
		lm_cancel(g->victim != NULL ? g->victim->call : g->call);
		pending--;
	}
	if (g->ndeltas == g->free_at) {
		lm_free(g->lm);
		pending--;
	}
}

static void
on_done(struct lm_result *r, void *arg)
{
	struct got	*g = arg;

	g->ndone++;
	g->sync = in_lm_call;
	g->elapsed = now_ms() - g->t0;
	g->error = r->error;
	free(g->text);
	g->text = r->text;		/* ours now */
	r->text = NULL;
	g->len = r->len;
	g->usage = r->usage;
	strlcpy(g->finish, r->finish_reason, sizeof(g->finish));
	g->status = r->http_status;
	g->attempts = r->attempts;
	strlcpy(g->detail, r->detail, sizeof(g->detail));
	if (g->free_on_done != NULL)
		lm_free(g->free_on_done);
	pending--;
}

static void
got_clear(struct got *g)
{
	free(g->text);
	free(g->deltas);
	memset(g, 0, sizeof(*g));
}

static struct lm_call *
start(struct lm *lm, struct got *g, const char *model, const char *user,
    int stream)
{
	struct lm_request	 req;
	char			*m = messages(user);

	memset(&req, 0, sizeof(req));
	req.model = model;
	req.messages = m;
	req.max_tokens = 64;
	req.temperature = -1;
	req.stream = stream;
	req.on_delta = on_delta;
	req.on_done = on_done;
	req.arg = g;
	g->lm = lm;
	g->t0 = now_ms();
	pending++;
	in_lm_call = 1;
	g->call = lm_call(lm, &req);
	in_lm_call = 0;
	free(m);
	return (g->call);
}

static void
watchdog(evutil_socket_t fd, short kind, void *arg)
{
	(void)fd;
	(void)kind;
	(void)arg;
	timed_out = 1;
}

/* Run the loop until no on_done is pending; 0, or -1 on the watchdog. */
static int
run(void)
{
	struct event	*ev;

	timed_out = 0;
	ev = evtimer_new(base, watchdog, NULL);
	timer_add_ms(ev, CASE_MS);
	while (pending > 0 && !timed_out)
		event_base_loop(base, EVLOOP_ONCE);
	event_free(ev);
	if (timed_out)
		pending = 0;
	return (timed_out ? -1 : 0);
}

static struct lm *
lm_for(const char *url, const char *key, int attempts)
{
	struct lm_config	 c;

	memset(&c, 0, sizeof(c));
	c.base_url = url;
	c.api_key = key;
	c.max_attempts = attempts;
	return (lm_new(base, &c));
}

/* The answer in the long cases: 431 characters, some of them 2 bytes. */
static char *
long_answer(void)
{
	char	*s = xstrdup(""), *t;
	int	 i;

	for (i = 0; i < 20; i++) {
		if (xasprintf(&t, "%sLine %02d: caf\xc3\xa9 na\xc3\xafve.\n", s,
		    i) == -1)
			abort();
		free(s);
		s = t;
	}
	if (xasprintf(&t, "%sThe end.", s) == -1)
		abort();
	free(s);
	return (s = t);
}

/* Cases against fleet-lmstub. */

static void
test_stream(void)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g = { 0 };
	char		*ans = long_answer(), *log, *url;
	int		 n, want_p, want_c;

	if (stub_start(&st, script(entry(json_pack("{s:s, s:s, s:i}",
	    "match", "stream please", "content", ans, "chunk_chars", 7)),
	    NULL)) == -1) {
		ok(0, "stream: stub");
		free(ans);
		return;
	}
	if (xasprintf(&url, "%s/", st.url) == -1)
		abort();
	lm = lm_for(url, NULL, 0);
	start(lm, &g, "m", "stream please", 1);
	is_int(g.ndone, 0, "stream: no on_done before the loop runs");
	ok(run() == 0, "stream: finished");
	is_int(g.ndone, 1, "stream: on_done once");
	is_int(g.sync, 0, "stream: on_done not inside lm_call");
	is_int(g.error, LM_OK, "stream: ok (%s)", g.detail);
	is_str(g.text, ans, "stream: answer reassembled exactly");
	is_int(g.len, strlen(ans), "stream: length");
	is_str(g.deltas, ans, "stream: deltas in order make the answer");
	is_int(g.ndeltas, (utf8_chars(ans, strlen(ans)) + 6) / 7,
	    "stream: one delta per chunk");
	is_str(g.finish, "stop", "stream: finish_reason");
	want_p = (int)((strlen("You are terse.") + strlen("stream please") +
	    3) / 4);
	want_c = (int)((utf8_chars(ans, strlen(ans)) + 3) / 4);
	is_int(g.usage.prompt_tokens, want_p, "stream: prompt tokens");
	is_int(g.usage.completion_tokens, want_c, "stream: completion tokens");
	is_int(g.usage.total_tokens, want_p + want_c, "stream: total tokens");
	is_int(g.status, 200, "stream: status 200");
	is_int(g.attempts, 1, "stream: one attempt");
	log = stub_log(&st, &n);
	is_int(n, 1, "stream: one request");
	like(log, "\"path\":\"/v1/chat/completions\"",
	    "stream: trailing slash in base_url tolerated");
	like(log, "\"stream\":true", "stream: asks for a stream");
	like(log, "\"include_usage\":true", "stream: asks for usage");
	like(log, "\"max_tokens\":64", "stream: sends max_tokens");
	ok(strstr(log, "temperature") == NULL, "stream: temperature omitted");
	free(log);
	lm_free(lm);
	got_clear(&g);
	free(url);
	free(ans);
	stub_stop(&st);
}

static void
test_plain(void)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g = { 0 };
	char		*log;
	int		 n;

	if (stub_start(&st, script(entry(json_pack("{s:s, s:s}", "model",
	    "small", "content", "Plain answer.")), NULL)) == -1) {
		ok(0, "plain: stub");
		return;
	}
	lm = lm_for(st.url, KEY, 0);
	start(lm, &g, "small", "hi", 0);
	ok(run() == 0, "plain: finished");
	is_int(g.error, LM_OK, "plain: ok (%s)", g.detail);
	is_str(g.text, "Plain answer.", "plain: text");
	is_int(g.ndeltas, 0, "plain: no deltas");
	is_str(g.finish, "stop", "plain: finish_reason");
	is_int(g.usage.prompt_tokens, 4, "plain: prompt tokens");
	is_int(g.usage.completion_tokens, 4, "plain: completion tokens");
	is_int(g.usage.total_tokens, 8, "plain: total tokens");
	log = stub_log(&st, &n);
	like(log, "\"stream\":false", "plain: stream false");
	ok(strstr(log, "stream_options") == NULL, "plain: no stream_options");
	free(log);
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);
}

static void
test_status(int status, enum lm_error want, const char *what)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g = { 0 };

	if (stub_start(&st, script(entry(json_pack("{s:i, s:s}", "status",
	    status, "content", "The model `nope` does not exist")), NULL)) ==
	    -1) {
		ok(0, "%s: stub", what);
		return;
	}
	lm = lm_for(st.url, KEY, 3);
	start(lm, &g, "nope", "hi", 1);
	ok(run() == 0, "%s: finished", what);
	is_int(g.error, want, "%s: %s", what, lm_error_name(want));
	is_int(g.status, status, "%s: http_status", what);
	is_int(g.attempts, 1, "%s: not retried", what);
	is_int(stub_requests(&st), 1, "%s: one request", what);
	like(g.detail, "does not exist", "%s: provider message in detail",
	    what);
	ok(strstr(g.detail, KEY) == NULL, "%s: no key in detail", what);
	is_int(g.len, 0, "%s: no text", what);
	if (want == LM_ERR_NOT_FOUND)
		is_str(lm_error_message(g.error),
		    "Provider endpoint not found; check model and base URL",
		    "%s: public message", what);
	else
		is_str(lm_error_message(g.error), "Turn failed",
		    "%s: public message", what);
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);
}

static void
test_retry_after(void)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g = { 0 };

	/*
	 * retry_after 1.2 sends Retry-After: 2 and retry-after-ms: 1200; the
	 * backoff without them would be at most 500 ms.
	 */
	if (stub_start(&st, script(
	    entry(json_pack("{s:i, s:f}", "status", 429, "retry_after", 1.2)),
	    entry(json_pack("{s:s}", "content", "After the wait.")),
	    NULL)) == -1) {
		ok(0, "429: stub");
		return;
	}
	lm = lm_for(st.url, NULL, 3);
	start(lm, &g, "m", "hi", 1);
	ok(run() == 0, "429: finished");
	is_int(g.error, LM_OK, "429 then 200: ok (%s)", g.detail);
	is_str(g.text, "After the wait.", "429 then 200: text");
	is_int(g.attempts, 2, "429 then 200: attempts 2");
	is_int(stub_requests(&st), 2, "429 then 200: two requests");
	ok(g.elapsed >= 1200, "429: waited retry-after-ms (%lld ms)",
	    (long long)g.elapsed);
	ok(g.elapsed < 2000, "429: retry-after-ms preferred over Retry-After "
	    "(%lld ms)", (long long)g.elapsed);
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);
}

static void
test_backoff(void)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g = { 0 };

	if (stub_start(&st, script(
	    entry(json_pack("{s:i}", "status", 500)),
	    entry(json_pack("{s:s}", "content", "Backed off.")),
	    NULL)) == -1) {
		ok(0, "backoff: stub");
		return;
	}
	lm = lm_for(st.url, NULL, 3);
	start(lm, &g, "m", "hi", 0);
	ok(run() == 0, "backoff: finished");
	is_int(g.error, LM_OK, "500 then 200: ok (%s)", g.detail);
	is_int(g.attempts, 2, "500 then 200: attempts 2");
	ok(g.elapsed >= 375 && g.elapsed < 2000,
	    "500 then 200: waited 0.5 s less jitter (%lld ms)",
	    (long long)g.elapsed);
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);
}

static void
test_server_error(void)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g = { 0 };

	if (stub_start(&st, script(entry(json_pack("{s:i, s:f, s:b, s:s}",
	    "status", 503, "retry_after", 0.05, "repeat", 1,
	    "content", "Overloaded")), NULL)) == -1) {
		ok(0, "503: stub");
		return;
	}
	lm = lm_for(st.url, NULL, 3);
	start(lm, &g, "m", "hi", 1);
	ok(run() == 0, "503: finished");
	is_int(g.error, LM_ERR_SERVER, "503 x3: server");
	is_int(g.attempts, 3, "503 x3: attempts 3");
	is_int(g.status, 503, "503 x3: http_status");
	is_int(stub_requests(&st), 3, "503 x3: three requests");
	like(g.detail, "503", "503: status in detail");
	like(g.detail, "Overloaded", "503: message in detail");
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);

	if (stub_start(&st, script(entry(json_pack("{s:i, s:b, s:{s:s}}",
	    "status", 503, "repeat", 1, "headers", "x-should-retry",
	    "false")), NULL)) == -1) {
		ok(0, "x-should-retry: stub");
		return;
	}
	lm = lm_for(st.url, NULL, 3);
	start(lm, &g, "m", "hi", 1);
	ok(run() == 0, "x-should-retry: finished");
	is_int(g.error, LM_ERR_SERVER, "x-should-retry false: server");
	is_int(g.attempts, 1, "x-should-retry false: not retried");
	is_int(stub_requests(&st), 1, "x-should-retry false: one request");
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);
}

static void
test_cut(void)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g = { 0 };

	if (stub_start(&st, script(entry(json_pack("{s:s, s:i, s:i}",
	    "content", "0123456789abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"
	    "GHIJKLMNOPQRSTUVWXYZ", "chunk_chars", 10, "cut_after_chars", 30)),
	    entry(json_pack("{s:s}", "content", "Should not be asked for.")),
	    NULL)) == -1) {
		ok(0, "cut: stub");
		return;
	}
	lm = lm_for(st.url, NULL, 3);
	start(lm, &g, "m", "hi", 1);
	ok(run() == 0, "cut: finished");
	is_int(g.error, LM_ERR_CUT, "cut: LM_ERR_CUT (%s)", g.detail);
	is_str(g.text, "0123456789abcdefghijklmnopqrst", "cut: partial text");
	is_str(g.deltas, "0123456789abcdefghijklmnopqrst",
	    "cut: its deltas were delivered");
	is_int(g.attempts, 1, "cut: not retried");
	is_int(stub_requests(&st), 1, "cut: one request in the stub log");
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);
}

static void
test_concurrent(void)
{
	struct stub	 st;
	struct lm	*lm;
	struct got	 g[8];
	char		*lines[9], *s, q[32], want[64];
	int64_t		 t0, elapsed;
	int		 i, good = 0, delay = 600;

	memset(g, 0, sizeof(g));
	for (i = 0; i < 8; i++) {
		snprintf(q, sizeof(q), "question %d", i);
		snprintf(want, sizeof(want), "Answer number %d, in pieces.", i);
		lines[i] = entry(json_pack("{s:s, s:s, s:i, s:i}", "match", q,
		    "content", want, "delay_ms", delay, "chunk_chars", 4));
	}
	lines[8] = NULL;
	s = script(lines[0], lines[1], lines[2], lines[3], lines[4], lines[5],
	    lines[6], lines[7], NULL);
	if (stub_start(&st, s) == -1) {
		ok(0, "concurrent: stub");
		return;
	}
	lm = lm_for(st.url, NULL, 1);
	t0 = now_ms();
	for (i = 0; i < 8; i++) {
		snprintf(q, sizeof(q), "question %d", i);
		start(lm, &g[i], "m", q, 1);
	}
	ok(run() == 0, "concurrent: all finished");
	elapsed = now_ms() - t0;
	for (i = 0; i < 8; i++) {
		snprintf(want, sizeof(want), "Answer number %d, in pieces.", i);
		if (g[i].ndone == 1 && g[i].error == LM_OK &&
		    g[i].text != NULL && strcmp(g[i].text, want) == 0 &&
		    strcmp(g[i].deltas, want) == 0)
			good++;
		else
			printf("# call %d: %s '%s'\n", i,
			    lm_error_name(g[i].error), g[i].detail);
		got_clear(&g[i]);
	}
	is_int(good, 8, "concurrent: each call got its own answer");
	is_int(stub_requests(&st), 8, "concurrent: eight requests");
	ok(elapsed >= delay, "concurrent: took at least one delay (%lld ms)",
	    (long long)elapsed);
	ok(elapsed < 8 * delay / 2, "concurrent: overlapped, %lld ms against "
	    "%d ms of delays in sum", (long long)elapsed, 8 * delay);
	lm_free(lm);
	stub_stop(&st);
}

static void
cancel_cb(evutil_socket_t fd, short kind, void *arg)
{
	struct got	*g = arg;

	(void)fd;
	(void)kind;
	lm_cancel(g->call);
	pending--;
}

static void
test_cancel(void)
{
	struct stub	 st;
	struct lm	*lm, *lm2, *lm3;
	struct got	 a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 },
			 e = { 0 }, f = { 0 }, h = { 0 }, k = { 0 },
			 sentinel = { 0 };
	struct event	*ev;
	char		*text;
	int		 n;

	if (stub_start(&st, script(
	    entry(json_pack("{s:s, s:s, s:i}", "match", "slow", "content",
	    "Never seen.", "delay_ms", 300)),
	    entry(json_pack("{s:s, s:s, s:i, s:i, s:b}", "match", "drip",
	    "content", "abcdefghijklmnopqrstuvwxyz", "chunk_chars", 1,
	    "interval_ms", 40, "repeat", 1)),
	    entry(json_pack("{s:s, s:s, s:i, s:b}", "match", "held", "content",
	    "Never seen.", "delay_ms", 300, "repeat", 1)),
	    entry(json_pack("{s:s, s:s, s:i}", "match", "sentinel", "content",
	    "Sentinel.", "delay_ms", 1500)),
	    NULL)) == -1) {
		ok(0, "cancel: stub");
		return;
	}
	lm = lm_for(st.url, NULL, 1);
	lm2 = lm_for(st.url, NULL, 1);
	lm3 = lm_for(st.url, NULL, 1);

	/* a: in flight, cancelled from a timer at 100 ms. */
	start(lm, &a, "m", "slow", 1);
	ev = evtimer_new(base, cancel_cb, &a);
	timer_add_ms(ev, 100);
	/* b: cancelled before it started. */
	start(lm, &b, "m", "slow", 1);
	lm_cancel(b.call);
	pending--;
	/* c: cancelled by its own on_delta, at the third delta. */
	c.cancel_at = 3;
	start(lm, &c, "m", "drip", 1);
	/* k: cancelled by the on_delta of h, another call of the same lm. */
	start(lm, &k, "m", "held", 1);
	h.cancel_at = 1;
	h.victim = &k;
	start(lm, &h, "m", "drip", 1);
	/* d: its lm freed by its own on_delta, with e in flight on it. */
	d.free_at = 2;
	start(lm2, &d, "m", "drip", 1);
	start(lm2, &e, "m", "held", 1);
	pending--;
	/* f: on_done frees its lm, which still has e2 in flight. */
	f.free_on_done = lm3;
	start(lm3, &f, "m", "nonexistent", 1);	/* 500, fast */
	{
		static struct got	 e2;

		memset(&e2, 0, sizeof(e2));
		start(lm3, &e2, "m", "held", 1);
		pending--;
		start(lm, &sentinel, "m", "sentinel", 1);
		ok(run() == 0, "cancel: sentinel finished");
		is_int(e2.ndone, 0, "cancel: lm_free in on_done: no callback "
		    "for another call");
		got_clear(&e2);
	}
	is_int(sentinel.error, LM_OK, "cancel: sentinel ok");
	is_int(a.ndone, 0, "cancel in flight: no on_done");
	is_int(b.ndone, 0, "cancel before start: no on_done");
	is_int(c.ndone, 0, "cancel from on_delta: no on_done");
	is_int(c.ndeltas, 3, "cancel from on_delta: no delta after it");
	is_int(k.ndone, 0, "cancel from another call's on_delta: no on_done");
	is_int(h.ndone, 1, "cancel from on_delta: the canceller goes on");
	is_int(h.error, LM_OK, "cancel from on_delta: and succeeds");
	is_str(h.text, "abcdefghijklmnopqrstuvwxyz",
	    "cancel from on_delta: the canceller's whole answer");
	is_int(d.ndone, 0, "lm_free from on_delta: no on_done");
	is_int(d.ndeltas, 2, "lm_free from on_delta: no delta after it");
	is_int(e.ndone, 0, "lm_free from on_delta: other call silent");
	is_int(f.ndone, 1, "lm_free in on_done: the call itself completed");
	is_int(f.error, LM_ERR_SERVER, "lm_free in on_done: its result");
	text = stub_log(&st, &n);
	like(text, "slow", "cancel: the in-flight call reached the stub");
	free(text);
	event_free(ev);
	lm_free(lm);
	got_clear(&a);
	got_clear(&b);
	got_clear(&c);
	got_clear(&d);
	got_clear(&e);
	got_clear(&f);
	got_clear(&h);
	got_clear(&k);
	got_clear(&sentinel);
	stub_stop(&st);
}

static void
test_refused(void)
{
	struct sockaddr_in	 sin;
	socklen_t		 len = sizeof(sin);
	struct lm		*lm;
	struct got		 g = { 0 };
	char			 url[128];
	int			 fd;

	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) == -1)
		abort();
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    getsockname(fd, (struct sockaddr *)&sin, &len) == -1)
		abort();
	close(fd);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1",
	    ntohs(sin.sin_port));
	lm = lm_for(url, KEY, 3);
	start(lm, &g, "m", "hi", 1);
	ok(run() == 0, "refused: finished");
	is_int(g.error, LM_ERR_NETWORK, "refused: network (%s)", g.detail);
	is_int(g.attempts, 3, "refused: three attempts");
	is_int(g.status, 0, "refused: no status");
	ok(g.elapsed >= 375 + 750, "refused: backed off between attempts "
	    "(%lld ms)", (long long)g.elapsed);
	ok(strstr(g.detail, KEY) == NULL, "refused: no key in detail");
	lm_free(lm);
	got_clear(&g);
}

static void
test_timeouts(void)
{
	struct stub		 st;
	struct lm_config	 c;
	struct lm		*lm;
	struct got		 g = { 0 };

	if (stub_start(&st, script(
	    entry(json_pack("{s:s, s:s, s:i}", "match", "stall", "content",
	    "Too late.", "delay_ms", 5000)),
	    entry(json_pack("{s:s, s:s, s:i, s:i}", "match", "slowly",
	    "content", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz",
	    "chunk_chars", 1, "interval_ms", 100)),
	    entry(json_pack("{s:s, s:s, s:b}", "match", "big", "content",
	    "0123456789012345678901234567890123456789", "repeat", 1)),
	    NULL)) == -1) {
		ok(0, "timeouts: stub");
		return;
	}
	memset(&c, 0, sizeof(c));
	c.base_url = st.url;
	c.stall_timeout_s = 1;
	c.max_attempts = 3;
	lm = lm_new(base, &c);
	start(lm, &g, "m", "stall", 1);
	ok(run() == 0, "stall: finished");
	is_int(g.error, LM_ERR_TIMEOUT, "stall: timeout (%s)", g.detail);
	is_int(g.attempts, 1, "stall: not retried");
	ok(g.elapsed >= 1000 && g.elapsed < 4500, "stall: after about 1 s "
	    "(%lld ms)", (long long)g.elapsed);
	lm_free(lm);
	got_clear(&g);

	c.stall_timeout_s = 0;
	c.timeout_s = 1;
	lm = lm_new(base, &c);
	start(lm, &g, "m", "slowly", 1);
	ok(run() == 0, "total timeout: finished");
	is_int(g.error, LM_ERR_TIMEOUT, "total timeout: timeout (%s)",
	    g.detail);
	ok(g.len > 0 && g.len < 52, "total timeout: partial text kept (%zu)",
	    g.len);
	ok(g.elapsed >= 1000 && g.elapsed < 3000, "total timeout: after 1 s "
	    "(%lld ms)", (long long)g.elapsed);
	lm_free(lm);
	got_clear(&g);

	c.timeout_s = 0;
	c.max_response = 16;
	lm = lm_new(base, &c);
	start(lm, &g, "m", "big", 0);
	ok(run() == 0, "too large: finished");
	is_int(g.error, LM_ERR_PROTOCOL, "too large: protocol");
	like(g.detail, "too large", "too large: detail");
	got_clear(&g);
	start(lm, &g, "m", "big", 1);
	ok(run() == 0, "too large stream: finished");
	is_int(g.error, LM_ERR_PROTOCOL, "too large stream: protocol");
	like(g.detail, "too large", "too large stream: detail");
	ok(g.len <= 16, "too large stream: text bounded (%zu)", g.len);
	lm_free(lm);
	got_clear(&g);
	stub_stop(&st);
}

/* Cases against the in-process server. */

static void
srv_cb(struct evhttp_request *req, void *arg)
{
	struct evkeyvalq	*h;
	struct evbuffer		*out;
	const char		*v;
	char			 name[64];
	size_t			 n;

	(void)arg;
	srv.nreq++;
	h = evhttp_request_get_input_headers(req);
	srv.has_auth = (v = evhttp_find_header(h, "Authorization")) != NULL;
	strlcpy(srv.auth, v != NULL ? v : "", sizeof(srv.auth));
	v = evhttp_find_header(h, "Accept");
	strlcpy(srv.accept, v != NULL ? v : "", sizeof(srv.accept));
	v = evhttp_find_header(h, "Content-Type");
	strlcpy(srv.ctype, v != NULL ? v : "", sizeof(srv.ctype));
	srv.has_expect = evhttp_find_header(h, "Expect") != NULL;
	srv.bodylen = evbuffer_get_length(evhttp_request_get_input_buffer(req));
	strlcpy(srv.path, evhttp_request_get_uri(req), sizeof(srv.path));

	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", srv.out_ctype);
	if (srv.out_hdr != NULL) {
		n = strcspn(srv.out_hdr, ":");
		snprintf(name, sizeof(name), "%.*s", (int)n, srv.out_hdr);
		evhttp_add_header(h, name, srv.out_hdr + n + 2);
	}
	out = evbuffer_new();
	evbuffer_add(out, srv.out_body, strlen(srv.out_body));
	evhttp_send_reply(req, srv.status, "Whatever", out);
	evbuffer_free(out);
}

static int
srv_start(void)
{
	struct evhttp_bound_socket	*bs;
	struct sockaddr_in		 sin;
	socklen_t			 len = sizeof(sin);

	if ((srv.http = evhttp_new(base)) == NULL)
		return (-1);
	evhttp_set_gencb(srv.http, srv_cb, NULL);
	evhttp_set_max_body_size(srv.http, 8 * 1024 * 1024);
	if ((bs = evhttp_bind_socket_with_handle(srv.http, "127.0.0.1", 0)) ==
	    NULL)
		return (-1);
	if (getsockname(evhttp_bound_socket_get_fd(bs),
	    (struct sockaddr *)&sin, &len) == -1)
		return (-1);
	srv.port = ntohs(sin.sin_port);
	snprintf(srv.url, sizeof(srv.url), "http://127.0.0.1:%d/api/v1",
	    srv.port);
	return (0);
}

static void
srv_answer(int status, const char *ctype, const char *body, const char *hdr)
{
	srv.nreq = 0;
	srv.status = status;
	srv.out_ctype = ctype;
	srv.out_body = body;
	srv.out_hdr = hdr;
}

static void
srv_call(const char *key, int attempts, int stream, struct got *g)
{
	struct lm	*lm;

	memset(g, 0, sizeof(*g));
	lm = lm_for(srv.url, key, attempts);
	start(lm, g, "m", "hi", stream);
	if (run() == -1)
		ok(0, "in-process server: case timed out");
	lm_free(lm);
}

#define SSE	"text/event-stream"

static void
test_dialects(void)
{
	struct got	 g;
	char		*big;
	struct lm	*lm;
	struct lm_request req;

	if (srv_start() == -1) {
		ok(0, "in-process server starts");
		return;
	}

	srv_answer(200, SSE,
	    ": OPENROUTER PROCESSING\r\n\r\n"
	    "data:{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
	    "\"content\":\"\"}}],\"usage\":{\"prompt_tokens\":5,"
	    "\"completion_tokens\":0,\"total_tokens\":5}}\r\n\r\n"
	    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":"
	    "\"thinking\",\"content\":null}}]}\r\n\r\n"
	    "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":"
	    "\"hm\"}}]}\n\n"
	    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":["
	    "{\"type\":\"text\",\"text\":\"Hello\"},"
	    "{\"type\":\"text\",\"text\":\", \"}]}}],"
	    "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
	    "\"total_tokens\":7}}\n\n"
	    "data: {\"choices\":[],\"usage\":null}\n\n"
	    "data: {\"choices\":[{\"index\":0,\"delta\":"
	    "{\"content\":\"world\"},"
	    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,"
	    "\"completion_tokens\":3,\"total_tokens\":8}}\n\n", NULL);
	srv_call(KEY, 1, 1, &g);
	is_int(g.error, LM_OK, "dialects: ok (%s)", g.detail);
	is_str(g.text, "Hello, world", "dialects: content parts, no reasoning");
	is_int(g.ndeltas, 3, "dialects: three deltas");
	is_str(g.finish, "stop", "dialects: finish without [DONE] is complete");
	is_int(g.usage.total_tokens, 8, "dialects: last usage kept");
	is_int(g.usage.completion_tokens, 3, "dialects: completion tokens");
	is_str(srv.auth, "Bearer " KEY, "headers: Authorization: Bearer key");
	is_str(srv.accept, "text/event-stream", "headers: Accept for a stream");
	is_str(srv.ctype, "application/json", "headers: Content-Type");
	is_str(srv.path, "/api/v1/chat/completions", "headers: POST to the "
	    "base path");
	got_clear(&g);

	srv_call(NULL, 1, 0, &g);
	is_int(srv.has_auth, 0, "headers: no Authorization without a key");
	is_str(srv.accept, "application/json", "headers: Accept for plain");
	got_clear(&g);

	srv_answer(200, SSE,
	    "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"
	    ": keep-alive\n\n"
	    "data: {\"error\":{\"code\":502,\"message\":\"Upstream " KEY
	    " exploded\"},\"choices\":[{\"delta\":{},\"finish_reason\":"
	    "\"error\"}]}\n\n"
	    "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
	    NULL);
	srv_call(KEY, 3, 1, &g);
	is_int(g.error, LM_ERR_PROTOCOL, "mid-stream error: protocol");
	is_str(g.text, "Hel", "mid-stream error: text before it kept");
	like(g.detail, "Upstream", "mid-stream error: message in detail");
	like(g.detail, "502", "mid-stream error: code in detail");
	ok(strstr(g.detail, KEY) == NULL, "mid-stream error: key redacted "
	    "(%s)", g.detail);
	is_int(g.attempts, 1, "mid-stream error: not retried");
	is_int(srv.nreq, 1, "mid-stream error: one request");
	got_clear(&g);

	srv_answer(200, SSE,
	    "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"
	    "{\"error\":\"model runner crashed\"}\n", NULL);
	srv_call(NULL, 1, 1, &g);
	is_int(g.error, LM_ERR_PROTOCOL, "unframed error line: protocol");
	like(g.detail, "model runner crashed", "unframed error: message");
	got_clear(&g);

	srv_answer(200, SSE,
	    "data: {\"choices\":[{\"delta\":{\"content\":\"1\"}}]}\n\n"
	    "data: {\"choices\":[{\"delta\":{\"content\":\"2\"}}]}\n\n"
	    "data: {\"choices\":[{\"delta\":{\"content\":\"3\"},"
	    "\"finish_reason\":\"stop\"}]}\n\n", NULL);
	memset(&g, 0, sizeof(g));
	g.cancel_at = 1;
	lm = lm_for(srv.url, NULL, 1);
	start(lm, &g, "m", "hi", 1);
	ok(run() == 0, "cancel in on_delta, one read: finished");
	is_int(g.ndeltas, 1, "cancel in on_delta: no more deltas from the "
	    "same read");
	lm_free(lm);
	got_clear(&g);
	g.free_at = 1;
	g.lm = lm = lm_for(srv.url, NULL, 1);
	start(lm, &g, "m", "hi", 1);
	ok(run() == 0, "lm_free in on_delta, one read: finished");
	is_int(g.ndeltas, 1, "lm_free in on_delta: no more deltas from the "
	    "same read");
	is_int(g.ndone, 0, "lm_free in on_delta: no on_done");
	got_clear(&g);

	srv_answer(200, SSE,
	    "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
	    NULL);
	srv_call(NULL, 3, 1, &g);
	is_int(g.error, LM_ERR_CUT, "clean close, no finish, no [DONE]: cut");
	is_str(g.text, "Hel", "clean close: text kept");
	is_int(srv.nreq, 1, "clean close: not retried");
	got_clear(&g);

	srv_answer(200, SSE,
	    "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n"
	    "data: [DONE]\n\n"
	    "data: {\"choices\":[{\"delta\":{\"content\":\"junk\"}}]}\n\n",
	    NULL);
	srv_call(NULL, 1, 1, &g);
	is_int(g.error, LM_OK, "[DONE] without finish_reason: ok");
	is_str(g.text, "ok", "[DONE]: events after it ignored");
	got_clear(&g);

	srv_answer(200, SSE,
	    "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
	    "data: {not json}\n\n", NULL);
	srv_call(NULL, 1, 1, &g);
	is_int(g.error, LM_ERR_PROTOCOL, "bad JSON event: protocol");
	got_clear(&g);

	srv_answer(200, "application/json",
	    "{\"id\":\"x\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
	    "\"assistant\",\"content\":\"Whole.\"},"
	    "\"finish_reason\":\"length\"}],"
	    "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}", NULL);
	srv_call(NULL, 1, 1, &g);
	is_int(g.error, LM_OK, "stream answered with JSON: ok (%s)", g.detail);
	is_str(g.deltas, "Whole.", "stream answered with JSON: one delta");
	is_str(g.finish, "length", "plain: finish_reason length");
	is_int(g.usage.total_tokens, 5, "plain: total summed when absent");
	got_clear(&g);

	srv_answer(401, "application/json",
	    "{\"error\":{\"message\":\"Incorrect API key provided: " KEY "\","
	    "\"type\":\"invalid_request_error\",\"code\":\"invalid_api_key\"}}",
	    NULL);
	srv_call(KEY, 3, 1, &g);
	is_int(g.error, LM_ERR_AUTH, "401: auth");
	is_int(g.attempts, 1, "401: not retried");
	like(g.detail, "Incorrect API key", "401: message in detail");
	like(g.detail, "invalid_api_key", "401: code in detail");
	ok(strstr(g.detail, KEY) == NULL, "401: key never in detail (%s)",
	    g.detail);
	got_clear(&g);

	srv_answer(429, "application/json", "{\"error_code\":"
	    "\"REQUEST_LIMIT_EXCEEDED\",\"message\":\"Rate limit hit\"}",
	    "Retry-After: 0");
	srv_call(NULL, 2, 1, &g);
	is_int(g.error, LM_ERR_RATE_LIMIT, "Databricks 429: rate_limit");
	is_int(g.attempts, 2, "Databricks 429: retried to max_attempts");
	like(g.detail, "REQUEST_LIMIT_EXCEEDED", "Databricks 429: code");
	like(g.detail, "Rate limit hit", "Databricks 429: message");
	got_clear(&g);

	srv_answer(502, "text/html", "<html><body>Bad Gateway</body></html>",
	    "x-should-retry: false");
	srv_call(NULL, 3, 1, &g);
	is_int(g.error, LM_ERR_SERVER, "HTML 502: server");
	is_int(srv.nreq, 1, "HTML 502 with x-should-retry false: one request");
	like(g.detail, "Bad Gateway", "HTML 502: body excerpt in detail");
	got_clear(&g);

	srv_answer(400, "application/json", "{\"error\":{\"message\":"
	    "\"x\",\"code\":\"y\"}}", "x-should-retry: true");
	srv_call(NULL, 2, 1, &g);
	is_int(g.error, LM_ERR_BAD_REQUEST, "400 x-should-retry true: "
	    "bad_request");
	is_int(srv.nreq, 2, "400 x-should-retry true: retried");
	got_clear(&g);

	/* Over 1 MiB curl would send Expect: 100-continue on its own. */
	big = xmalloc(1200 * 1024);
	memset(big, 'a', 1200 * 1024 - 1);
	big[1200 * 1024 - 1] = '\0';
	srv_answer(200, SSE, "data: [DONE]\n\n", NULL);
	memset(&g, 0, sizeof(g));
	lm = lm_for(srv.url, NULL, 1);
	start(lm, &g, "m", big, 1);
	ok(run() == 0, "big request: finished");
	is_int(g.error, LM_OK, "big request: ok (%s)", g.detail);
	is_int(srv.has_expect, 0, "big request: no Expect header");
	ok(srv.bodylen > 1200 * 1024, "big request: whole body sent");
	got_clear(&g);
	free(big);

	memset(&req, 0, sizeof(req));
	req.model = "m";
	req.messages = "{\"not\": \"an array\"}";
	req.on_done = on_done;
	req.arg = &g;
	pending++;
	in_lm_call = 1;
	lm_call(lm, &req);
	in_lm_call = 0;
	is_int(g.ndone, 0, "bad messages: no synchronous on_done");
	ok(run() == 0, "bad messages: finished");
	is_int(g.error, LM_ERR_BAD_REQUEST, "bad messages: bad_request");
	is_int(g.sync, 0, "bad messages: on_done from the loop");
	is_int(g.attempts, 0, "bad messages: no attempt");
	got_clear(&g);
	lm_free(lm);

	evhttp_free(srv.http);
}

static void
test_names(void)
{
	is_str(lm_error_name(LM_ERR_NOT_FOUND), "not_found", "name not_found");
	is_str(lm_error_name(LM_ERR_RATE_LIMIT), "rate_limit",
	    "name rate_limit");
	is_str(lm_error_name(LM_ERR_CUT), "cut", "name cut");
	is_str(lm_error_message(LM_ERR_NOT_FOUND),
	    "Provider endpoint not found; check model and base URL",
	    "public message for not_found");
	is_str(lm_error_message(LM_ERR_SERVER), "Turn failed",
	    "public message otherwise");
}

int
main(void)
{
	struct event_config	*cfg;

	signal(SIGPIPE, SIG_IGN);
	if (find_stub() == -1) {
		printf("1..0 # SKIP bin/fleet-lmstub is not built\n");
		return (0);
	}
	/* Timers on the clock of now_ms, to compare waits with it. */
	if ((cfg = event_config_new()) == NULL ||
	    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) == -1 ||
	    (base = event_base_new_with_config(cfg)) == NULL)
		abort();
	event_config_free(cfg);

	test_sse();
	test_names();
	test_stream();
	test_plain();
	test_status(404, LM_ERR_NOT_FOUND, "404");
	test_status(401, LM_ERR_AUTH, "401");
	test_status(403, LM_ERR_AUTH, "403");
	test_status(400, LM_ERR_BAD_REQUEST, "400");
	test_status(422, LM_ERR_BAD_REQUEST, "422");
	test_retry_after();
	test_backoff();
	test_server_error();
	test_cut();
	test_concurrent();
	test_cancel();
	test_refused();
	test_timeouts();
	test_dialects();

	event_base_free(base);
	return (done_testing());
}
