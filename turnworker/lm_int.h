/*
 * Inside the LM client, whose API is lm.h: the state of an lm and of its
 * calls, and what lm.c, lm_curl.c and lm_parse.c use of one another.
 */
#ifndef FLEET_LM_INT_H
#define FLEET_LM_INT_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/sse.h"
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

/* lm.c */
void			 lm_destroy(struct lm *);
void			 lm_call_free(struct lm_call *);
void			 lm_call_finish(struct lm_call *, enum lm_error);
void			 lm_call_detail(struct lm_call *, const char *, ...)
			    __attribute__((format(printf, 2, 3)));
int			 lm_call_fail(struct lm_call *, enum lm_error,
			    const char *, ...)
			    __attribute__((format(printf, 3, 4)));
void			 lm_attempt_end(struct lm_call *);
void			 lm_attempt_done(struct lm_call *, CURLcode);

/* lm_curl.c */
int			 lm_sock_cb(CURL *, curl_socket_t, int, void *, void *);
int			 lm_timer_cb(CURLM *, long, void *);
void			 lm_timer_ev(evutil_socket_t, short, void *);
void			 lm_stall_ev(evutil_socket_t, short, void *);
void			 lm_stall_reset(struct lm_call *);
int			 lm_prereq_cb(void *, char *, char *, int, int);
int			 lm_xferinfo_cb(void *, curl_off_t, curl_off_t, curl_off_t,
			    curl_off_t);

/* lm_parse.c */
size_t			 lm_header_cb(char *, size_t, size_t, void *);
size_t			 lm_write_cb(char *, size_t, size_t, void *);
int			 lm_sse_event(const char *, const char *, size_t, void *);
void			 lm_body_parse(struct lm_call *);
const char		*lm_provider_message(json_t *, char *, size_t);

#endif
