/*
 * fleet-lmstub: what lmstub.c, script.c and serve.c share.  The limits,
 * the script's entries, the replies in flight and the process's state.
 */
#ifndef FLEET_LMSTUB_H
#define FLEET_LMSTUB_H

#include <sys/queue.h>

#include <stddef.h>
#include <stdio.h>
#include <time.h>

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

struct event;
struct event_base;
struct evhttp;
struct evhttp_request;

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

struct lmstub {
	struct event_base	*base;
	struct evhttp		*http;
	struct entry		*entries;
	size_t			 nentries;
	json_t			*models;
	FILE			*log;
	struct replies		 replies;
	size_t			 nreplies;
	unsigned long long	 seq;
};

extern struct lmstub	 env;

/* script.c */
void		 script_load(const char *);
struct entry	*script_find(json_t *, const char *, size_t);

/* serve.c */
void		 serve_request(struct evhttp_request *, void *);
void		 reply_free(struct reply *);

#endif
