/*
 * The gateway owns HTTP: routes, validation, the error envelope, and the
 * Turn streams it relays from the turnworkers.  It never runs LM calls
 * or code.
 */
#ifndef FLEET_GATEWAY_H
#define FLEET_GATEWAY_H

#include <sys/queue.h>

#include <event2/event.h>
#include <event2/http.h>

#include "lib/child.h"

#define GW_HEADERS_MAX		(16 * 1024)
#define GW_BODY_SLACK		(1024 * 1024)	/* multipart framing */
#define GW_HTTP_TIMEOUT		60
#define GW_WORKERS_MAX		256
#define GW_DB_CHECK_MS		2000

struct gwturn;

struct worker {
	TAILQ_ENTRY(worker)	 entry;
	struct chan		*chan;
	int			 instance;	/* 0 until it says hello */
	pid_t			 pid;
	struct gwturn		*turn;		/* the Turn it runs, or NULL */
	int			 leaving;	/* said bye: no more Turns */
};
TAILQ_HEAD(workerlist, worker);

struct gateway {
	struct event_base	*base;
	struct child_env	*env;
	struct child		*child;
	struct evhttp		*http;
	char			 state[16];	/* as fleetd says */
	struct workerlist	 workers;
	int			 nworkers;
	struct db		*db;
	struct listener		*listener;	/* run/gateway.sock */
};

extern struct gateway	*gw;

/* gateway.c */
void	gateway_stats(void);

/* http.c */
void	http_init(void);
void	http_free(void);
void	http_json(struct evhttp_request *, int, const char *);
void	http_error(struct evhttp_request *, int, const char *, const char *);

/* api.c: every /api/ route except the Turn stream */
void	api_route(struct evhttp_request *, const char *);

/* turns.c: POST /api/sessions/{id}/turns, the SSE Turn stream */
void	turns_init(void);
void	turns_free(void);
void	turns_post(struct evhttp_request *, const char *);
void	turns_cancel_run(const char *);
void	turns_worker_idle(struct worker *);
void	turns_worker_msg(struct worker *, struct msg *);
void	turns_worker_gone(struct worker *);
int	turns_active(void);
int	turns_queued(void);

/* workers.c */
void	workers_init(void);
void	workers_free(void);
int	workers_ready(void);

#endif
