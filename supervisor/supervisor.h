/*
 * fleetd, the supervisor: it forks every child, restarts the ones that
 * die, holds the readiness barrier, and answers the control socket.
 */
#ifndef FLEET_SUPERVISOR_H
#define FLEET_SUPERVISOR_H

#include <sys/types.h>
#include <sys/queue.h>

#include <stdint.h>

#include <event2/event.h>

#include "lib/child.h"
#include "lib/config.h"

#define BACKOFF_MAX	30	/* seconds */
#define QUICK_DEATH_MS	1000

enum sv_state {
	SV_STARTING,
	SV_READY,
	SV_DRAINING,
	SV_STOPPING
};

enum proc_state {
	PS_STARTING,
	PS_READY,
	PS_BACKOFF,
	PS_STOPPING,
	PS_STOPPED,
	PS_FAILED
};

struct proc {
	TAILQ_ENTRY(proc)	 entry;
	enum child_role		 role;
	int			 instance;
	char			 name[32];
	pid_t			 pid;
	enum proc_state		 state;
	struct chan		*chan;
	int64_t			 started_ms;
	int64_t			 ready_ms;
	int			 restarts;
	int			 has_status;
	int			 last_status;
	int			 backoff;	/* seconds before the next start */
	struct event		*ev_restart;
	int			 retire;	/* do not restart: removed */
	int			 replace;	/* restart with the new config */
	int			 turns_active;
	int			 turns_queued;
	char			*pool_json;	/* the leasemgr's pool counters */
};
TAILQ_HEAD(proclist, proc);

struct ctl_conn;
TAILQ_HEAD(ctllist, ctl_conn);

struct fleetd {
	struct event_base	*base;
	struct fleet_config	*conf;
	char			*confpath;
	char			*profile;	/* from -p, or NULL */
	char			*statedir;
	char			*rundir;
	char			*logfile;
	int			 foreground;
	int			 allow_public;
	int			 port_override;	/* -P, or -1 */
	enum sv_state		 state;
	int64_t			 started_ms;
	int			 listenfd;
	char			 listen_name[300];
	char			 url[320];
	int			 readyfd;	/* fleet start waits on this */
	struct pidfh		*pfh;
	struct proclist		 procs;
	struct listener		*ctl;		/* run/fleetd.sock */
	struct ctllist		 ctls;
	int			 nctls;
	struct event		*ev_stop;	/* shutdown deadline */
	int			 stop_phase;
	int			 exit_code;
	char			*db_conninfo;
	int			 db_embedded;
	int			 rest_started;	/* children after postgres */
	char			 node_id[40];
};

extern struct fleetd	*fleetd;

/* fleetd.c */
void	fleetd_set_state(enum sv_state);
void	fleetd_ready_check(void);
void	fleetd_boot_failure(struct proc *, const char *);
void	fleetd_stop(int, int);
void	fleetd_stop_check(void);
int	fleetd_reload(char *, size_t);
void	fleetd_drain(int);
void	fleetd_spawn_rest(void);
int	fleetd_turns_active(void);
const char *fleetd_state_name(enum sv_state);

/* procs.c */
struct proc	*proc_add(enum child_role, int);
void		 proc_spawn(struct proc *);
void		 proc_reap(void);
void		 proc_send_all(struct msg *);
void		 proc_send_role(enum child_role, struct msg *);
void		 proc_signal_all(int, int);
int		 proc_alive_count(int);
int		 proc_alive_role(enum child_role);
void		 proc_cancel_backoff(void);
void		 proc_mark_replace(void);
void		 proc_set_workers(int);
void		 proc_replace_next(void);
const char	*proc_state_name(enum proc_state);
void		 proc_push_state(struct proc *);
void		 proc_set_ready(struct proc *);

/* postgres.c */
void	pg_prepare(void);
void	pg_exec(pid_t) __attribute__((noreturn));
void	pg_started(struct proc *);
void	pg_cleanup(void);

/* control.c */
void	control_init(void);
void	control_cleanup(void);
void	control_drained(void);
char	*control_status_json(void);

#endif
