/*
 * Schema migrations: sql/NNNN_name.sql, compiled into the binaries by
 * sql/embed.  Each applies in its own transaction under an advisory
 * lock, so any number of nodes may migrate at once.
 */
#ifndef FLEET_MIGRATE_H
#define FLEET_MIGRATE_H

#include <stddef.h>

struct db;
struct db_err;

struct migration {
	int		 version;
	const char	*name;
	const char	*sql;
};

extern const struct migration	migrations[];
extern const size_t		nmigrations;

int	migrate_head(void);
int	migrate_current(struct db *, int *, struct db_err *);
int	migrate_apply(struct db *, void (*)(const struct migration *, void *),
	    void *, struct db_err *);
int	migrate_check(struct db *, char *, size_t);

#endif
