/*
 * The language-model client of a turnworker: OpenAI-compatible
 * POST {base_url}/chat/completions over libcurl's multi-socket API,
 * driven by the worker's libevent loop.  Many calls may run at once
 * through one lm.
 *
 * The first lm_new() in a process initialises libcurl: call it after
 * fork, in the process that uses it, and never use an lm across fork.
 * Callbacks run from the event loop, never from within lm_call().
 * on_delta may call lm_call, lm_cancel (on any call) and lm_free; so may
 * on_done, and it may keep res->text by setting it to NULL (it is freed
 * otherwise).  A call is gone once on_done returns or lm_cancel is
 * called.  LM_ERR_CANCELLED is never delivered: a cancelled call gets no
 * callback.
 */
#ifndef FLEET_LM_H
#define FLEET_LM_H

#include <stddef.h>
#include <stdint.h>

struct event_base;

/* Zero or negative values take the defaults; strings are copied. */
struct lm_config {
	const char	*base_url;	/* "http://127.0.0.1:8080/v1" */
	const char	*api_key;	/* NULL or "": no Authorization */
	int		 connect_timeout_s;	/* 10 */
	int		 timeout_s;	/* 300, the whole call with retries */
	int		 stall_timeout_s;	/* 60, no byte once connected */
	int		 max_attempts;	/* 3, tries in all */
	size_t		 max_response;	/* 8 MiB of answer text or body */
};

enum lm_error {
	LM_OK,
	LM_ERR_NOT_FOUND,	/* 404: wrong model or base URL */
	LM_ERR_AUTH,		/* 401, 403 */
	LM_ERR_BAD_REQUEST,	/* 400, 413, 422, other 4xx */
	LM_ERR_RATE_LIMIT,	/* 429 after the last attempt */
	LM_ERR_SERVER,		/* 5xx after the last attempt */
	LM_ERR_NETWORK,		/* connect/DNS/reset before any byte */
	LM_ERR_CUT,		/* the stream stopped mid-way */
	LM_ERR_TIMEOUT,		/* connect, stall or whole call */
	LM_ERR_PROTOCOL,	/* bad body, too large, error in the stream */
	LM_ERR_CANCELLED
};

struct lm_usage {
	int64_t		 prompt_tokens;
	int64_t		 completion_tokens;
	int64_t		 total_tokens;
};

struct lm_result {
	enum lm_error	 error;
	char		*text;		/* never NULL; on error what arrived */
	size_t		 len;
	struct lm_usage	 usage;		/* the last usage seen */
	char		 finish_reason[32];
	int		 http_status;	/* of the last attempt; 0: none */
	int		 attempts;
	char		 detail[512];	/* for logs; never the key */
};

struct lm_request {
	const char	*model;
	const char	*messages;	/* JSON array text, copied */
	int		 max_tokens;	/* <= 0: omit */
	double		 temperature;	/* < 0: omit */
	int		 stream;	/* with stream_options.include_usage */
	void		(*on_delta)(const char *, size_t, void *);
	void		(*on_done)(struct lm_result *, void *);
	void		*arg;
};

struct lm;
struct lm_call;

struct lm	*lm_new(struct event_base *, const struct lm_config *);
void		 lm_free(struct lm *);
struct lm_call	*lm_call(struct lm *, const struct lm_request *);
void		 lm_cancel(struct lm_call *);
const char	*lm_error_message(enum lm_error);
const char	*lm_error_name(enum lm_error);

#endif
