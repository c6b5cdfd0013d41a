/*
 * The lease manager owns every sandbox: the pool under its hard cap,
 * warm sandboxes, waiters, reaping, and the recovery of Runs whose claim
 * nobody heartbeats any more (their sandboxes are its to release).
 */
#ifndef FLEET_LEASEMGR_H
#define FLEET_LEASEMGR_H

#include <event2/event.h>

#include "lib/child.h"

struct db;

struct leasemgr {
	struct event_base	*base;
	struct child_env	*env;
	struct child		*child;
	struct db		*db;
	struct event		*ev_recover;
	int			 recovering;
	char			 recovery_owner[64];
};

extern struct leasemgr	*lm;

/* pool.c */
int	pool_init(char *, size_t);
void	pool_free(void);
void	pool_release_run(const char *);

/* recover.c */
void	recover_init(void);
void	recover_free(void);

#endif
