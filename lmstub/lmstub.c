/*
 * fleet-lmstub: a scripted, OpenAI-compatible chat-completions server.
 *
 * Tests and demos point an OpenAI client at it instead of a real model.
 * Every answer comes from a JSON Lines script loaded at startup; each
 * request takes the first unconsumed entry whose match and model fit.
 * One process, one libevent loop, no threads.
 */

#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <jansson.h>

#define MAX_BODY	(64 * 1024 * 1024)	/* request body, bytes */
#define MAX_HEADERS	(64 * 1024)		/* request headers, bytes */
#define MAX_SCRIPT	(64 * 1024 * 1024)	/* script file, bytes */
#define MAX_ENTRIES	100000			/* script entries */
#define MAX_REPLIES	1024			/* answers in flight */
#define MAX_XHEADERS	32			/* "headers" per entry */
#define MAX_XHDRLEN	1024			/* one such header value */
#define HTTP_TIMEOUT	120			/* seconds, read and write */
#define EXCERPT_CHARS	60
#define DEFAULT_CHUNK	16

struct entry {
	json_t		*e_obj;		/* owns the strings below */
	size_t		 e_line;
	const char	*e_content;	/* NULL: absent */
	size_t		 e_contentlen;
	const char	*e_match;	/* NULL: any */
	size_t		 e_matchlen;
	const char	*e_model;	/* NULL: any */
	size_t		 e_modellen;
	const char	*e_errtype;
	json_t		*e_errcode;	/* borrowed; NULL: default */
	json_t		*e_headers;	/* borrowed; NULL: none */
	int		 e_status;
	long long	 e_retry_ms;	/* -1: no Retry-After */
	long long	 e_delay_ms;
	long long	 e_interval_ms;
	long long	 e_chunk;
	long long	 e_cut;		/* -1: never cut */
	int		 e_repeat;
	int		 e_used;
};

enum reply_state {
	R_DELAY,	/* waiting for delay_ms */
	R_STREAM,	/* sending content deltas */
	R_CUT		/* about to drop the connection */
};

struct reply {
	TAILQ_ENTRY(reply)	 r_next;
	struct evhttp_request	*r_req;
	struct event		*r_ev;
	struct entry		*r_script;
	json_t			*r_model;
	enum reply_state	 r_state;
	int			 r_stream;
	int			 r_usage;
	time_t			 r_created;
	unsigned long long	 r_seq;
	size_t			 r_off;		/* content bytes sent */
	long long		 r_chars;	/* content characters sent */
	long long		 r_ptokens;
	long long		 r_ctokens;
};

TAILQ_HEAD(replies, reply);

static struct {
	struct event_base	*base;
	struct evhttp		*http;
	struct entry		*entries;
	size_t			 nentries;
	json_t			*models;
	FILE			*log;
	struct replies		 replies;
	size_t			 nreplies;
	unsigned long long	 seq;
} env;

enum key_id {
	K_CONTENT, K_MATCH, K_MODEL, K_STATUS, K_RETRY_AFTER, K_DELAY_MS,
	K_INTERVAL_MS, K_CHUNK_CHARS, K_CUT_AFTER_CHARS, K_REPEAT,
	K_ERROR_TYPE, K_ERROR_CODE, K_HEADERS
};

static const struct {
	const char	*name;
	enum key_id	 id;
	const char	*what;
} script_keys[] = {
	{ "chunk_chars",	K_CHUNK_CHARS,	"an integer from 1 to 1048576" },
	{ "content",		K_CONTENT,	"a string" },
	{ "cut_after_chars",	K_CUT_AFTER_CHARS, "an integer from 0" },
	{ "delay_ms",		K_DELAY_MS,	"an integer from 0 to 600000" },
	{ "error_code",		K_ERROR_CODE,	"a string or null" },
	{ "error_type",		K_ERROR_TYPE,	"a string" },
	{ "headers",		K_HEADERS,	"an object of at most 32 "
	    "header names with one-line string values, not Connection, "
	    "Content-Length or Transfer-Encoding" },
	{ "interval_ms",	K_INTERVAL_MS,	"an integer from 0 to 60000" },
	{ "match",		K_MATCH,	"a string" },
	{ "model",		K_MODEL,	"a string" },
	{ "repeat",		K_REPEAT,	"true or false" },
	{ "retry_after",	K_RETRY_AFTER,	"a number from 0 to 86400" },
	{ "status",		K_STATUS,	"200 or an integer from 400 to 599" },
};

static const char usage_text[] =
"usage: fleet-lmstub --listen ADDRESS:PORT --script FILE [--log FILE]\n"
"                    [--allow-non-loopback]\n"
"       fleet-lmstub --help\n";

static const char help_text[] =
"\n"
"A scripted, OpenAI-compatible chat-completions server for tests.\n"
"\n"
"  --listen ADDRESS:PORT  numeric address (127.0.0.1, [::1]) or localhost;\n"
"                         PORT 0 picks a free port. Once listening, one line\n"
"                         \"listening ADDRESS:PORT\" is printed on stdout.\n"
"  --script FILE          the answers, JSON Lines (see below).\n"
"  --log FILE             append one JSON line per request:\n"
"                         {\"method\",\"path\",\"status\",\"entry\",\"body\"};\n"
"                         entry is the script line used or null, body the\n"
"                         request body as received (CR/LF removed) or null.\n"
"  --allow-non-loopback   permit a non-loopback ADDRESS.\n"
"  --help                 this text.\n"
"\n"
"Endpoints (any path prefix, e.g. /v1):\n"
"  POST .../chat/completions   \"stream\": true gives text/event-stream\n"
"                              chunks and data: [DONE]; with\n"
"                              stream_options.include_usage a last chunk\n"
"                              with empty choices carries usage.\n"
"  GET  .../models             the models named in the script.\n"
"A request needs \"model\" (string) and \"messages\" (non-empty array of\n"
"{role, content}), else 400. Bodies over 64 MiB get 413, unknown paths 404.\n"
"Tokens are estimated as characters/4, rounded up.\n"
"\n"
"Script: one JSON object per line; blank lines and lines starting with #\n"
"are ignored. A request takes the first unconsumed entry whose match and\n"
"model fit; if none does, it gets a 500 error. Keys:\n"
"  content          string, the answer (or the error message if status\n"
"                   is not 200); required when status is 200.\n"
"  match            string that must occur in the text of the last message.\n"
"  model            string that must equal the request's model.\n"
"  status           200 (default) or 400..599: answer an OpenAI error.\n"
"  error_type       the error's type (default by status).\n"
"  error_code       the error's code, string or null (default by status).\n"
"  retry_after      seconds (number): Retry-After and retry-after-ms headers.\n"
"  headers          object of extra response headers (string values).\n"
"  delay_ms         wait before the first byte (0..600000).\n"
"  chunk_chars      characters per streamed delta (1..1048576, default 16).\n"
"  interval_ms      pause between streamed chunks (0..60000, default 0).\n"
"  cut_after_chars  when streaming, close the connection after this many\n"
"                   content characters: no finish chunk, no [DONE].\n"
"  repeat           true: the entry is never consumed.\n"
"An unknown key or a wrong type stops the server at startup.\n"
"\n"
"Exit status: 0 after SIGTERM or SIGINT, 2 for a usage or script error,\n"
"1 for other failures (cannot listen, cannot open the log).\n";

static void	 usage(void) __attribute__((__noreturn__));
static void	 script_load(const char *);
static void	 script_entry(const char *, size_t, json_t *, struct entry *);
static int	 script_header_ok(json_t *);
static int	 json_int_in(json_t *, long long, long long, long long *);
static void	 listen_start(const char *, int);
static size_t	 utf8_prefix(const char *, size_t, long long, long long *);
static long long utf8_chars(const char *, size_t);
static long long tokens(long long);
static void	 http_cb(struct evhttp_request *, void *);
static int	 completions(struct evhttp_request *, json_t *,
		    struct entry **);
static const char *request_check(json_t *, char *, size_t);
static char	*last_text(json_t *, size_t *);
static long long prompt_chars(json_t *);
static struct entry *script_find(json_t *, const char *, size_t);
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
static void	 reply_free(struct reply *);
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
static void	 signal_cb(evutil_socket_t, short, void *);

static void
usage(void)
{
	fputs(usage_text, stderr);
	exit(2);
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "allow-non-loopback",	no_argument,		NULL, 'A' },
		{ "help",		no_argument,		NULL, 'h' },
		{ "listen",		required_argument,	NULL, 'l' },
		{ "log",		required_argument,	NULL, 'L' },
		{ "script",		required_argument,	NULL, 's' },
		{ NULL,			0,			NULL, 0 }
	};
	struct event	*sigint, *sigterm;
	struct reply	*r;
	const char	*laddr = NULL, *logfile = NULL, *script = NULL;
	int		 allow = 0, ch;
	size_t		 i;

	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'A':
			allow = 1;
			break;
		case 'h':
			fputs(usage_text, stdout);
			fputs(help_text, stdout);
			exit(0);
		case 'l':
			laddr = optarg;
			break;
		case 'L':
			logfile = optarg;
			break;
		case 's':
			script = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || laddr == NULL || script == NULL)
		usage();

	signal(SIGPIPE, SIG_IGN);
	TAILQ_INIT(&env.replies);
	script_load(script);
	if (logfile != NULL && (env.log = fopen(logfile, "a")) == NULL)
		err(1, "%s", logfile);

	if ((env.base = event_base_new()) == NULL)
		errx(1, "event_base_new failed");
	if ((env.http = evhttp_new(env.base)) == NULL)
		errx(1, "evhttp_new failed");
	evhttp_set_max_body_size(env.http, MAX_BODY);
	evhttp_set_max_headers_size(env.http, MAX_HEADERS);
	evhttp_set_timeout(env.http, HTTP_TIMEOUT);
	/* Read an oversized body out so the client gets to see the 413. */
	evhttp_set_flags(env.http, EVHTTP_SERVER_LINGERING_CLOSE);
	evhttp_set_gencb(env.http, http_cb, NULL);

	/* Before "listening": a test may signal as soon as it reads it. */
	sigint = evsignal_new(env.base, SIGINT, signal_cb, NULL);
	sigterm = evsignal_new(env.base, SIGTERM, signal_cb, NULL);
	if (sigint == NULL || sigterm == NULL ||
	    evsignal_add(sigint, NULL) == -1 || evsignal_add(sigterm, NULL) == -1)
		errx(1, "cannot install signal handlers");
	listen_start(laddr, allow);

	event_base_dispatch(env.base);

	/*
	 * Streams hold the connection's closecb; drop it so evhttp_free
	 * does not call back into freed replies.
	 */
	while ((r = TAILQ_FIRST(&env.replies)) != NULL) {
		struct evhttp_connection *evcon;

		evcon = evhttp_request_get_connection(r->r_req);
		if (r->r_state != R_DELAY && evcon != NULL)
			evhttp_connection_set_closecb(evcon, NULL, NULL);
		reply_free(r);
	}
	evhttp_free(env.http);
	event_free(sigint);
	event_free(sigterm);
	event_base_free(env.base);
	for (i = 0; i < env.nentries; i++)
		json_decref(env.entries[i].e_obj);
	free(env.entries);
	json_decref(env.models);
	if (env.log != NULL)
		fclose(env.log);
	return (0);
}

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)sig;
	(void)what;
	(void)arg;
	event_base_loopbreak(env.base);
}

/* Read the whole script, one entry per non-blank, non-comment line. */
static void
script_load(const char *path)
{
	FILE		*fp;
	char		*buf, *line, *end, *nl;
	size_t		 len = 0, cap = 64 * 1024, n, lineno = 0, i;
	json_error_t	 je;
	json_t		*obj, *seen;

	if ((fp = fopen(path, "r")) == NULL)
		err(2, "%s", path);
	if ((buf = malloc(cap)) == NULL)
		err(1, NULL);
	while ((n = fread(buf + len, 1, cap - len, fp)) > 0) {
		len += n;
		if (len < cap)
			continue;
		if (cap > MAX_SCRIPT)
			break;
		cap = cap * 2 > MAX_SCRIPT ? MAX_SCRIPT + 1 : cap * 2;
		if ((buf = realloc(buf, cap)) == NULL)
			err(1, NULL);
	}
	if (ferror(fp))
		err(2, "%s", path);
	fclose(fp);
	if (len > MAX_SCRIPT)
		errx(2, "%s: larger than %d bytes", path, MAX_SCRIPT);

	env.models = json_array();
	for (line = buf, end = buf + len; line < end; line = nl + 1) {
		if ((nl = memchr(line, '\n', end - line)) == NULL)
			nl = end;
		lineno++;
		n = nl - line;
		if (lineno == 1 && n >= 3 && memcmp(line, "\xef\xbb\xbf", 3) == 0) {
			line += 3;
			n -= 3;
		}
		for (i = 0; i < n && strchr(" \t\r", line[i]) != NULL; i++)
			;
		if (i == n || line[i] == '#')
			continue;
		if (env.nentries == MAX_ENTRIES)
			errx(2, "%s:%zu: more than %d entries", path, lineno,
			    MAX_ENTRIES);
		obj = json_loadb(line, n, JSON_REJECT_DUPLICATES |
		    JSON_ALLOW_NUL, &je);
		if (obj == NULL)
			errx(2, "%s:%zu: %s", path, lineno, je.text);
		if (!json_is_object(obj))
			errx(2, "%s:%zu: not a JSON object", path, lineno);
		if ((env.entries = reallocarray(env.entries, env.nentries + 1,
		    sizeof(*env.entries))) == NULL)
			err(1, NULL);
		script_entry(path, lineno, obj, &env.entries[env.nentries]);
		env.nentries++;
	}
	free(buf);

	seen = json_object();
	for (i = 0; i < env.nentries; i++) {
		const char *m = env.entries[i].e_model;

		if (m == NULL || json_object_get(seen, m) != NULL)
			continue;
		json_object_set_new(seen, m, json_true());
		json_array_append_new(env.models, json_string(m));
	}
	json_decref(seen);
	if (json_array_size(env.models) == 0)
		json_array_append_new(env.models, json_string("lmstub"));
}

/* Check one script object and fill in e; any problem is fatal. */
static void
script_entry(const char *path, size_t lineno, json_t *obj, struct entry *e)
{
	const char	*key;
	json_t		*v;
	long long	 n;
	size_t		 i;

	memset(e, 0, sizeof(*e));
	e->e_obj = obj;
	e->e_line = lineno;
	e->e_status = 200;
	e->e_retry_ms = -1;
	e->e_chunk = DEFAULT_CHUNK;
	e->e_cut = -1;

	json_object_foreach(obj, key, v) {
		for (i = 0; i < sizeof(script_keys) / sizeof(script_keys[0]);
		    i++)
			if (strcmp(key, script_keys[i].name) == 0)
				break;
		if (i == sizeof(script_keys) / sizeof(script_keys[0]))
			errx(2, "%s:%zu: unknown key \"%.64s\"", path, lineno,
			    key);

		switch (script_keys[i].id) {
		case K_CONTENT:
			if (!json_is_string(v))
				goto bad;
			e->e_content = json_string_value(v);
			e->e_contentlen = json_string_length(v);
			break;
		case K_MATCH:
			if (!json_is_string(v))
				goto bad;
			e->e_match = json_string_value(v);
			e->e_matchlen = json_string_length(v);
			break;
		case K_MODEL:
			if (!json_is_string(v))
				goto bad;
			e->e_model = json_string_value(v);
			e->e_modellen = json_string_length(v);
			break;
		case K_ERROR_TYPE:
			if (!json_is_string(v))
				goto bad;
			e->e_errtype = json_string_value(v);
			break;
		case K_ERROR_CODE:
			if (!json_is_string(v) && !json_is_null(v))
				goto bad;
			e->e_errcode = v;
			break;
		case K_HEADERS:
			if (!json_is_object(v) || !script_header_ok(v))
				goto bad;
			e->e_headers = v;
			break;
		case K_REPEAT:
			if (!json_is_boolean(v))
				goto bad;
			e->e_repeat = json_is_true(v);
			break;
		case K_RETRY_AFTER:
			if (!json_is_number(v) || json_number_value(v) < 0 ||
			    json_number_value(v) > 86400)
				goto bad;
			e->e_retry_ms = json_number_value(v) * 1000 + 0.5;
			break;
		case K_STATUS:
			if (!json_int_in(v, 200, 599, &n) ||
			    (n != 200 && n < 400))
				goto bad;
			e->e_status = n;
			break;
		case K_DELAY_MS:
			if (!json_int_in(v, 0, 600000, &e->e_delay_ms))
				goto bad;
			break;
		case K_INTERVAL_MS:
			if (!json_int_in(v, 0, 60000, &e->e_interval_ms))
				goto bad;
			break;
		case K_CHUNK_CHARS:
			if (!json_int_in(v, 1, 1048576, &e->e_chunk))
				goto bad;
			break;
		case K_CUT_AFTER_CHARS:
			if (!json_int_in(v, 0, MAX_SCRIPT, &e->e_cut))
				goto bad;
			break;
		}
		continue;
 bad:
		errx(2, "%s:%zu: \"%s\" must be %s", path, lineno, key,
		    script_keys[i].what);
	}
	if (e->e_status == 200 && e->e_content == NULL)
		errx(2, "%s:%zu: \"content\" is required", path, lineno);
}

/*
 * Extra headers must be tokens with short, single-line values; framing
 * headers stay under libevent's control.
 */
static int
script_header_ok(json_t *hdrs)
{
	static const char *reserved[] = {
		"connection", "content-length", "transfer-encoding"
	};
	const char	*name, *val;
	json_t		*v;
	size_t		 i;

	if (json_object_size(hdrs) > MAX_XHEADERS)
		return (0);
	json_object_foreach(hdrs, name, v) {
		if (!json_is_string(v) || *name == '\0' || strlen(name) > 64)
			return (0);
		if (strspn(name, "!#$%&'*+-.^_`|~0123456789"
		    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") !=
		    strlen(name))
			return (0);
		for (i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
			if (strcasecmp(name, reserved[i]) == 0)
				return (0);
		val = json_string_value(v);
		if (json_string_length(v) > MAX_XHDRLEN ||
		    strlen(val) != json_string_length(v) ||
		    strpbrk(val, "\r\n") != NULL)
			return (0);
	}
	return (1);
}

static int
json_int_in(json_t *v, long long lo, long long hi, long long *out)
{
	if (!json_is_integer(v))
		return (0);
	*out = json_integer_value(v);
	return (*out >= lo && *out <= hi);
}

/* Bind ADDRESS:PORT and announce the port actually bound. */
static void
listen_start(const char *spec, int allow)
{
	struct evhttp_bound_socket	*bound;
	struct sockaddr_storage		 ss;
	struct sockaddr_in		*sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6		*sin6 = (struct sockaddr_in6 *)&ss;
	struct in6_addr			 a6;
	struct in_addr			 a4;
	socklen_t			 sslen = sizeof(ss);
	const char			*colon, *ps;
	char				 host[INET6_ADDRSTRLEN + 2], *ep;
	size_t				 hlen;
	long				 port;
	int				 loop, one = 1;

	if ((colon = strrchr(spec, ':')) == NULL)
		errx(2, "--listen %s: expected ADDRESS:PORT", spec);
	ps = spec;
	hlen = colon - spec;
	if (hlen >= 2 && spec[0] == '[' && spec[hlen - 1] == ']') {
		ps++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen >= sizeof(host))
		errx(2, "--listen %s: bad address", spec);
	memcpy(host, ps, hlen);
	host[hlen] = '\0';
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");

	errno = 0;
	port = strtol(colon + 1, &ep, 10);
	if (colon[1] == '\0' || *ep != '\0' || errno != 0 || port < 0 ||
	    port > 65535)
		errx(2, "--listen %s: bad port", spec);

	if (inet_pton(AF_INET, host, &a4) == 1)
		loop = (ntohl(a4.s_addr) >> 24) == 127;
	else if (inet_pton(AF_INET6, host, &a6) == 1)
		loop = IN6_IS_ADDR_LOOPBACK(&a6);
	else
		errx(2, "--listen %s: not a numeric address", spec);
	if (!loop && !allow)
		errx(2, "--listen %s: not a loopback address "
		    "(use --allow-non-loopback)", spec);

	if ((bound = evhttp_bind_socket_with_handle(env.http, host,
	    port)) == NULL)
		err(1, "cannot listen on %s", spec);
	/*
	 * Accepted sockets inherit this: each streamed chunk goes out at
	 * once instead of waiting on the client's delayed ACK (40 ms).
	 */
	if (setsockopt(evhttp_bound_socket_get_fd(bound), IPPROTO_TCP,
	    TCP_NODELAY, &one, sizeof(one)) == -1)
		err(1, "TCP_NODELAY");
	if (getsockname(evhttp_bound_socket_get_fd(bound),
	    (struct sockaddr *)&ss, &sslen) == -1)
		err(1, "getsockname");
	if (ss.ss_family == AF_INET6)
		printf("listening [%s]:%u\n", inet_ntop(AF_INET6,
		    &sin6->sin6_addr, host, sizeof(host)),
		    ntohs(sin6->sin6_port));
	else
		printf("listening %s:%u\n", inet_ntop(AF_INET,
		    &sin->sin_addr, host, sizeof(host)),
		    ntohs(sin->sin_port));
	fflush(stdout);
}

/*
 * Byte length of the first nchars UTF-8 characters of s (at most len);
 * the number of characters actually counted goes to *got.
 */
static size_t
utf8_prefix(const char *s, size_t len, long long nchars, long long *got)
{
	size_t		i = 0;
	long long	n = 0;

	while (i < len && n < nchars) {
		i++;
		while (i < len && ((unsigned char)s[i] & 0xc0) == 0x80)
			i++;
		n++;
	}
	if (got != NULL)
		*got = n;
	return (i);
}

static long long
utf8_chars(const char *s, size_t len)
{
	long long	n;

	utf8_prefix(s, len, (long long)len, &n);
	return (n);
}

static long long
tokens(long long chars)
{
	return ((chars + 3) / 4);
}

static void
http_cb(struct evhttp_request *req, void *arg)
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
	long long	 n;

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
		xlen = utf8_prefix(text, tlen, EXCERPT_CHARS, &n);
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
		r->r_ctokens = tokens(utf8_chars(e->e_content,
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
			n += utf8_chars(json_string_value(content),
			    json_string_length(content));
		json_array_foreach(content, k, part)
			if ((t = json_object_get(part, "text")) != NULL &&
			    json_is_string(t))
				n += utf8_chars(json_string_value(t),
				    json_string_length(t));
	}
	return (n);
}

static struct entry *
script_find(json_t *model, const char *text, size_t tlen)
{
	struct entry	*e;
	size_t		 i;

	for (i = 0; i < env.nentries; i++) {
		e = &env.entries[i];
		if (e->e_used)
			continue;
		if (e->e_model != NULL &&
		    (e->e_modellen != json_string_length(model) ||
		    memcmp(e->e_model, json_string_value(model),
		    e->e_modellen) != 0))
			continue;
		if (e->e_match != NULL && e->e_matchlen > 0 &&
		    memmem(text, tlen, e->e_match, e->e_matchlen) == NULL)
			continue;
		return (e);
	}
	return (NULL);
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

static void
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
	size_t		 n;
	long long	 want = e->e_chunk, got;

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
	    want, &got);
	stream_send(r, chunk_new(r, json_pack("{s:i, s:{s:s%}, s:n, s:n}",
	    "index", 0, "delta", "content", e->e_content + r->r_off, n,
	    "logprobs", "finish_reason"), "chat.completion.chunk"), 1);
	r->r_off += n;
	r->r_chars += got;
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
