/*
 * One small layer over libpq for every process.  Blocking calls for the
 * processes that may wait (the supervisor at startup, the CLI, a
 * turnworker inside its Turn) and an asynchronous mode driven by a
 * libevent loop for those that may not (the gateway).  A lost connection
 * fails the call in progress and is re-established on the next one; it
 * is never a crash.  Connection strings and URLs are never logged whole:
 * db_describe() gives a form without the password.
 */
#ifndef FLEET_DB_H
#define FLEET_DB_H

#include <stddef.h>

#include <libpq-fe.h>

struct event_base;
struct db;

struct db_err {
	char	 msg[512];
	char	 sqlstate[6];	/* "" when the server sent none */
	int	 lost;		/* the connection is gone */
};

#define SQLSTATE_UNIQUE_VIOLATION	"23505"
#define SQLSTATE_CHECK_VIOLATION	"23514"
#define SQLSTATE_FK_VIOLATION		"23503"

typedef void	(*db_cb)(PGresult *, const struct db_err *, void *);

struct db	*db_new(const char *, const char *);
void		 db_free(struct db *);
const char	*db_describe(struct db *);
int		 db_connected(struct db *);

/* Blocking. */
int		 db_connect(struct db *, struct db_err *);
void		 db_prepare(struct db *, const char *, const char *);
PGresult	*db_exec(struct db *, const char *, int, const char *const *,
		    struct db_err *);
PGresult	*db_sql(struct db *, const char *, int, const char *const *,
		    struct db_err *);
int		 db_cmd(struct db *, const char *, struct db_err *);
void		 db_disconnect(struct db *);

/* Asynchronous, on an event base. */
void		 db_async_init(struct db *, struct event_base *);
void		 db_async_sql(struct db *, const char *, int,
		    const char *const *, int, db_cb, void *);
void		 db_async_cancel_all(struct db *);

void		 db_redact(const char *, char *, size_t);

#endif
