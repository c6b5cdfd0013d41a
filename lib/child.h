/*
 * What every child of fleetd shares: the environment it is forked with,
 * the entry points of the roles, and the small runtime that ties a child
 * to fleetd (hello, ready, state, drain, stop, reload, stats, and exit
 * when fleetd goes away).
 */
#ifndef FLEET_CHILD_H
#define FLEET_CHILD_H

#include <sys/types.h>

#include <event2/event.h>

#include "config.h"
#include "proto/proto.h"

/* Descriptors a child finds at fixed numbers. */
#define CHILD_CHAN_FD	3
#define CHILD_LISTEN_FD	4

enum child_role {
	ROLE_POSTGRES,
	ROLE_LEASEMGR,
	ROLE_GATEWAY,
	ROLE_TURNWORKER,
	ROLE__COUNT
};

struct child_env {
	struct fleet_config	*conf;
	const char		*statedir;
	const char		*rundir;
	const char		*db_conninfo;
	const char		*node_id;
	pid_t			 ppid;
	enum child_role		 role;
	int			 instance;
	int			 listenfd;	/* gateway only, else -1 */
	char			 title[64];
};

struct child;

/* A role's hooks; any may be NULL. */
struct child_ops {
	void	(*dispatch)(struct msg *, void *);	/* role messages */
	void	(*shutdown)(void *);	/* end the loop; default loopexit */
};

const char	*child_role_name(enum child_role);

void		 child_init(struct child_env *);
struct child	*child_start(struct child_env *, struct event_base *,
		    const struct child_ops *, void *);
void		 child_ready(struct child *);
void		 child_send(struct child *, struct msg *);
void		 child_free(struct child *);

/* Role entry points; each runs in a freshly forked child and exits. */
void	gateway_main(struct child_env *) __attribute__((noreturn));
void	leasemgr_main(struct child_env *) __attribute__((noreturn));
void	turnworker_main(struct child_env *) __attribute__((noreturn));

#endif
