/*
 * fleet turn: post one Turn to the running fleetd and show it as it
 * streams: reasoning, code and output as they come, the answer last.
 * Ctrl-C cancels the Run; a second one leaves at once.
 */
#include <sys/types.h>

#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/string.h>
#include <curl/curl.h>
#include <jansson.h>
#include <uuid.h>

#include "lib/sse.h"
#include "lib/util.h"
#include "fleet.h"

#define ATTACHMENTS_MAX	16
#define EVENT_MAX	(16 * 1024 * 1024)

struct stream {
	struct sse	 sse;
	char		 run[40];
	char		*answer;
	char		*error;
	int		 terminal;	/* 0, or EXIT code */
	int		 quiet;
	int		 tty;
	int		 step;
	int		 in_reasoning;
};

static volatile sig_atomic_t	 interrupted;

static void
on_sigint(int sig)
{
	(void)sig;
	if (++interrupted > 1)
		_exit(130);
}

/* One request with a small JSON answer; returns the parsed body. */
static json_t *
request(const char *method, const char *url, const char *body,
    curl_mime *mime, long *status)
{
	CURL			*c;
	struct curl_slist	*h = NULL;
	FILE			*mem;
	char			*buf = NULL;
	size_t			 len = 0;
	json_error_t		 jerr;
	json_t			*j;
	CURLcode		 rc;

	if ((c = curl_easy_init()) == NULL ||
	    (mem = open_memstream(&buf, &len)) == NULL)
		errx(1, "out of memory");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, mem);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	if (mime != NULL)
		curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
	else if (body != NULL) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	}
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	rc = curl_easy_perform(c);
	fclose(mem);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (rc != CURLE_OK) {
		free(buf);
		errx(1, "%s: %s", url, curl_easy_strerror(rc));
	}
	j = json_loadb(buf ? buf : "", len, 0, &jerr);
	free(buf);
	return j;
}

static void
api_error(const char *what, long status, json_t *j)
{
	const char	*m = json_string_value(json_object_get(j, "message"));

	errx(1, "%s: HTTP %ld%s%s", what, status, m ? ": " : "", m ? m : "");
}

static char *
new_session(const char *base)
{
	json_t	*j;
	char	*url, *id;
	long	 status;

	xasprintf(&url, "%s/api/sessions", base);
	j = request("POST", url, "{}", NULL, &status);
	free(url);
	if (status != 201 || !json_is_string(json_object_get(j, "id")))
		api_error("create a session", status, j);
	id = xstrdup(json_string_value(json_object_get(j, "id")));
	json_decref(j);
	return id;
}

static char *
upload(CURL *c, const char *base, const char *path)
{
	curl_mime	*mime;
	curl_mimepart	*part;
	json_t		*j;
	char		*url, *id;
	long		 status;

	if (access(path, R_OK) == -1)
		err(1, "%s", path);
	mime = curl_mime_init(c);
	part = curl_mime_addpart(mime);
	curl_mime_name(part, "attachment");
	if (curl_mime_filedata(part, path) != CURLE_OK)
		errx(1, "%s: cannot attach", path);
	xasprintf(&url, "%s/api/attachments", base);
	j = request("POST", url, NULL, mime, &status);
	curl_mime_free(mime);
	free(url);
	if (status != 201 || !json_is_string(json_object_get(j, "id")))
		api_error(path, status, j);
	id = xstrdup(json_string_value(json_object_get(j, "id")));
	fprintf(stderr, "fleet: attached %s (%lld bytes)\n", path,
	    json_integer_value(json_object_get(j, "byte_size")));
	json_decref(j);
	return id;
}

static void
heading(struct stream *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
heading(struct stream *s, const char *fmt, ...)
{
	va_list	 ap;

	if (s->quiet)
		return;
	printf("\n%s── ", s->tty ? "\033[1m" : "");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("%s\n", s->tty ? "\033[0m" : "");
}

static void
show(struct stream *s, const char *text)
{
	if (s->quiet || text == NULL)
		return;
	fputs(text, stdout);
	if (*text != '\0' && text[strlen(text) - 1] != '\n')
		putchar('\n');
}

/* Render one chunk of the UI message stream. */
static int
on_event(const char *event, const char *data, size_t len, void *arg)
{
	struct stream	*s = arg;
	json_error_t	 jerr;
	json_t		*j, *d;
	const char	*type;

	(void)event;
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0)
		return 0;
	if ((j = json_loadb(data, len, 0, &jerr)) == NULL)
		return 0;
	type = json_string_value(json_object_get(j, "type"));
	d = json_object_get(j, "data");
	if (type == NULL)
		;
	else if (strcmp(type, "start") == 0)
		strlcpy(s->run, json_string_value(json_object_get(j,
		    "messageId")) ?: "", sizeof(s->run));
	else if (strcmp(type, "start-step") == 0)
		s->step++;
	else if (strcmp(type, "reasoning-start") == 0)
		heading(s, "step %d: reasoning", s->step);
	else if (strcmp(type, "reasoning-delta") == 0) {
		if (!s->quiet) {
			fputs(json_string_value(json_object_get(j, "delta")) ?:
			    "", stdout);
			fflush(stdout);
		}
	} else if (strcmp(type, "data-rlm-code") == 0) {
		heading(s, "step %d: code", s->step);
		show(s, json_string_value(json_object_get(d, "code")));
	} else if (strcmp(type, "data-rlm-output") == 0) {
		heading(s, "step %d: output", s->step);
		show(s, json_string_value(json_object_get(d, "output")));
	} else if (strcmp(type, "data-child-progress") == 0)
		heading(s, "child %s: %s", json_string_value(json_object_get(
		    d, "child_id")), json_string_value(json_object_get(d,
		    "state")));
	else if (strcmp(type, "data-status") == 0 &&
	    json_object_get(d, "phase") != NULL &&
	    strcmp(json_string_value(json_object_get(d, "phase")),
	    "replay") == 0)
		heading(s, "replay of a completed Turn");
	else if (strcmp(type, "text-delta") == 0) {
		free(s->answer);
		s->answer = xstrdup(json_string_value(json_object_get(j,
		    "delta")) ?: "");
	} else if (strcmp(type, "error") == 0) {
		free(s->error);
		s->error = xstrdup(json_string_value(json_object_get(j,
		    "errorText")) ?: "Turn failed");
	} else if (strcmp(type, "finish") == 0)
		s->terminal = strcmp(json_string_value(json_object_get(j,
		    "finishReason")) ?: "", "stop") == 0 ? 100 : 1;
	else if (strcmp(type, "abort") == 0)
		s->terminal = 130;
	fflush(stdout);
	json_decref(j);
	return 0;
}

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
	struct stream	*s = arg;

	if (sse_feed(&s->sse, p, size * n) != SSE_OK)
		return 0;
	return size * n;
}

/* Ctrl-C: ask fleetd to cancel the Run (or drop the stream before it). */
static int
on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	(void)arg;
	(void)a;
	(void)b;
	(void)c;
	(void)d;
	return 0;
}

static void
cancel_run(const char *base, const char *run)
{
	json_t	*j;
	char	*url;
	long	 status;

	xasprintf(&url, "%s/api/runs/%s/cancellation", base, run);
	j = request("PUT", url, NULL, NULL, &status);
	free(url);
	json_decref(j);
	fprintf(stderr, "\nfleet: cancellation requested (HTTP %ld)\n",
	    status);
}

static char *
base_url(struct cli *cli)
{
	struct msg	 reply;
	json_error_t	 jerr;
	json_t		*j;
	char		*url;
	int		 fd;

	if ((fd = ctl_connect(cli)) == -1) {
		fprintf(stderr, "fleet: fleetd is not running (state directory "
		    "%s)\n", cli->statedir);
		exit(EXIT_NOT_RUNNING);
	}
	if (ctl_request(fd, "status", 0, 0, 10000, &reply) == -1)
		exit(1);
	close(fd);
	if ((j = json_loads(reply.ctl_reply.json ?: "", 0, &jerr)) == NULL ||
	    !json_is_string(json_object_get(j, "url")))
		errx(1, "fleetd did not say its URL");
	url = xstrdup(json_string_value(json_object_get(j, "url")));
	json_decref(j);
	proto_msg_clear(&reply);
	return url;
}

int
cmd_turn(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 }
	};
	struct stream		 s;
	struct curl_slist	*h = NULL;
	CURLM			*multi;
	CURL			*c;
	json_t			*ids, *body;
	char			*base = NULL, *session = NULL, *key = NULL;
	char			*files[ATTACHMENTS_MAX], *url, *bodytext;
	char			 keybuf[40], hdr[200];
	uuid_t			 u;
	int			 ch, nfiles = 0, i, running, cancelled = 0;
	long			 status = 0;

	memset(&s, 0, sizeof(s));
	while ((ch = getopt_long(argc, argv, "a:k:qs:", longopts, NULL)) !=
	    -1) {
		switch (ch) {
		case 'a':
			if (nfiles == ATTACHMENTS_MAX)
				errx(2, "at most %d attachments",
				    ATTACHMENTS_MAX);
			files[nfiles++] = optarg;
			break;
		case 'k':
			key = optarg;
			break;
		case 'q':
			s.quiet = 1;
			break;
		case 's':
			session = xstrdup(optarg);
			break;
		case 'u':
			base = xstrdup(optarg);
			break;
		default:
			cmd_usage("turn");
		}
	}
	if (optind != argc - 1 || *argv[optind] == '\0')
		cmd_usage("turn");
	if (key != NULL && (strlen(key) < 1 || strlen(key) > 128))
		errx(2, "the idempotency key must be 1 to 128 characters");
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (base == NULL)
		base = base_url(cli);
	if (session == NULL) {
		session = new_session(base);
		fprintf(stderr, "fleet: session %s\n", session);
	}
	if ((c = curl_easy_init()) == NULL)
		errx(1, "out of memory");
	ids = json_array();
	for (i = 0; i < nfiles; i++) {
		char *id = upload(c, base, files[i]);

		json_array_append_new(ids, json_string(id));
		free(id);
	}
	if (key == NULL) {
		uuid_generate(u);
		uuid_unparse_lower(u, keybuf);
		key = keybuf;
	}
	body = json_pack("{s:s, s:o}", "text", argv[optind], "attachment_ids",
	    ids);
	bodytext = json_dumps(body, JSON_COMPACT);
	json_decref(body);

	s.tty = isatty(STDOUT_FILENO);
	sse_init(&s.sse, EVENT_MAX, on_event, &s);
	xasprintf(&url, "%s/api/sessions/%s/turns", base, session);
	snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", key);
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Accept: text/event-stream");
	h = curl_slist_append(h, hdr);
	h = curl_slist_append(h, "Expect:");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, bodytext);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);

	signal(SIGINT, on_sigint);
	multi = curl_multi_init();
	curl_multi_add_handle(multi, c);
	do {
		if (curl_multi_perform(multi, &running) != CURLM_OK)
			break;
		if (interrupted && !cancelled) {
			cancelled = 1;
			if (s.run[0] != '\0')
				cancel_run(base, s.run);
			else
				break;	/* before start: leaving cancels */
		}
		if (running)
			curl_multi_poll(multi, NULL, 0, 200, NULL);
	} while (running);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_multi_remove_handle(multi, c);
	curl_easy_cleanup(c);
	curl_multi_cleanup(multi);
	curl_slist_free_all(h);
	sse_finish(&s.sse);
	sse_clear(&s.sse);
	free(url);
	free(bodytext);

	if (cancelled && s.terminal != 100) {
		fprintf(stderr, "fleet: turn cancelled\n");
		return 130;
	}
	if (status != 200 && s.terminal == 0)
		errx(1, "the Turn was refused: HTTP %ld", status);
	switch (s.terminal) {
	case 100:
		if (!s.quiet)
			heading(&s, "answer");
		printf("%s\n", s.answer ? s.answer : "");
		return 0;
	case 130:
		fprintf(stderr, "fleet: turn cancelled\n");
		return 130;
	default:
		fprintf(stderr, "fleet: %s\n", s.error ? s.error :
		    "the stream ended without a result");
		return 1;
	}
}
