/*
 * The Run lifecycle in SQL: claim, heartbeat, commit, settle, and the
 * recovery of claims nobody heartbeats any more.  Every cross-process
 * rule is the database's: the partial unique indexes refuse a second
 * live Run per Session or per idempotency key, and each step is
 * conditional on the claim owner, so a claim taken over by recovery
 * cannot be committed by its former owner.
 */
#ifndef FLEET_STORE_H
#define FLEET_STORE_H

#include "db.h"

#define STORE_UUID_LEN	36

enum claim_result {
	CLAIM_OK,
	CLAIM_REPLAY,		/* key already completed: replay it */
	CLAIM_NO_SESSION,	/* "Session not found" */
	CLAIM_BUSY,		/* "A Turn is already running" */
	CLAIM_MISMATCH,		/* "Idempotency key input mismatch" */
	CLAIM_ERROR		/* "Turn is unavailable" */
};

struct claim {
	const char	*session_id;
	const char	*idempotency_key;
	const char	*fingerprint;	/* 64 hex digits */
	const char	*owner;
	char		 run_id[STORE_UUID_LEN + 1];	/* new, or replayed */
	int		 base_checkpoint;
};

struct commit {
	const char	*run_id;
	const char	*session_id;
	const char	*owner;
	int		 base_checkpoint;
	const char	*user_input_json;
	const char	*committed_json;
	int		 checkpoint;	/* out: the new checkpoint_version */
};

void	store_prepare(struct db *);
enum claim_result store_claim(struct db *, struct claim *, struct db_err *);
int	store_heartbeat(struct db *, const char *, const char *, int *,
	    struct db_err *);
int	store_commit(struct db *, struct commit *, struct db_err *);
int	store_settle(struct db *, const char *, const char *, const char *,
	    const char *, const char *, struct db_err *);
const char *store_claim_message(enum claim_result);

/* Recovery, as two statements for the asynchronous mode. */
extern const char	*store_sql_takeover;
extern const char	*store_sql_settle_recovered;

#endif
