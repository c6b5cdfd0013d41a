/*
 * fleet, the operator's command: start and stop fleetd, ask it for
 * status, drain it, reload it.
 */
#ifndef FLEET_CLI_H
#define FLEET_CLI_H

#include <sys/types.h>

#include <stdint.h>

#include "proto/proto.h"

#define EXIT_NOT_RUNNING	3

struct cli {
	char		*confpath;
	char		*statedir;
	char		*rundir;
	char		*profile;	/* -p, or NULL */
};

struct cli_cmd {
	const char	*name;
	int		(*exec)(struct cli *, int, char **);
	const char	*usage;
};

/* ctl.c */
int	ctl_connect(struct cli *);
int	ctl_request(int, const char *, int, int, int, struct msg *);
int	cmd_status(struct cli *, int, char **);
int	cmd_drain(struct cli *, int, char **);
int	cmd_undrain(struct cli *, int, char **);
int	cmd_stop(struct cli *, int, char **);
int	cmd_reload(struct cli *, int, char **);
int	pid_wait_gone(pid_t, int64_t);

/* db.c */
int	cmd_db(struct cli *, int, char **);

/* turn.c */
int	cmd_turn(struct cli *, int, char **);

/* start.c */
int	cmd_start(struct cli *, int, char **);

/* fleet.c */
void	cmd_usage(const char *) __attribute__((noreturn));

#endif
