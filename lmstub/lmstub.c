/*
 * fleet-lmstub: a scripted, OpenAI-compatible chat-completions server.
 *
 * Tests and demos point an OpenAI client at it instead of a real model.
 * Every answer comes from a JSON Lines script loaded at startup; each
 * request takes the first unconsumed entry whose match and model fit.
 * One process, one libevent loop, no threads.
 *
 * Here: the options, listening and signals.  script.c reads the script
 * and finds the entry for a request, serve.c answers requests.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>

#include <jansson.h>

#include "lmstub.h"

struct lmstub	 env;

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
static void	 listen_start(const char *, int);
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
	evhttp_set_gencb(env.http, serve_request, NULL);

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
