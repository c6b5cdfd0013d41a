/*
 * A turnworker runs one Turn at a time: claim, lease a sandbox, run the
 * RLM, commit, and stream chunks to the gateway.
 */
#ifndef FLEET_TURNWORKER_H
#define FLEET_TURNWORKER_H

#include <event2/event.h>

#include "lib/child.h"
#include "proto/proto.h"

struct db;
struct lm;
struct turn;

struct turnworker {
	struct event_base	*base;
	struct child_env	*env;
	struct child		*child;
	struct chan		*gateway;
	struct event		*ev_dial;
	int			 dial_ms;
	int			 ready;
	int			 stopping;
	char			*gwpath;
	struct db		*db;
	struct lm		*lm;		/* the root model */
	struct lm		*lm_sub;	/* the sub-model, own timeout */
	char			*lm_error;	/* why there is no lm */
	struct turn		*turn;
};

extern struct turnworker	*tw;

void	tw_send(struct msg *);
void	tw_turn_ended(void);

/* turn.c */
void	turn_begin(struct msg_turn *);
void	turn_cancel(int64_t);
void	turn_abandon(void);

#endif
