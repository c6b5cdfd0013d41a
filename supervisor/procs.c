/*
 * The children table: forking, the channel to each child, readiness,
 * and what happens when one dies (restart, with a doubling backoff when
 * it dies young; never when it exits 2, a configuration error).
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/libutil.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/util.h"
#include "proto/chan.h"
#include "supervisor.h"

static void	proc_child(struct proc *, int) __attribute__((noreturn));
static void	proc_msg(struct chan *, struct msg *, void *);
static void	proc_close(struct chan *, const char *, void *);
static void	proc_exited(struct proc *, int);
static void	proc_restart_cb(evutil_socket_t, short, void *);
static void	proc_free(struct proc *);
static void	describe_status(int, char *, size_t);

static struct proc	*replacing;	/* worker being replaced on reload */

const char *
proc_state_name(enum proc_state s)
{
	switch (s) {
	case PS_STARTING:
		return "starting";
	case PS_READY:
		return "ready";
	case PS_BACKOFF:
		return "backoff";
	case PS_STOPPING:
		return "stopping";
	case PS_STOPPED:
		return "stopped";
	case PS_FAILED:
		return "failed";
	}
	return "unknown";
}

struct proc *
proc_add(enum child_role role, int instance)
{
	struct proc	*p;

	p = xcalloc(1, sizeof(*p));
	p->role = role;
	p->instance = instance;
	p->pid = -1;
	p->state = PS_STOPPED;
	if (role == ROLE_TURNWORKER)
		snprintf(p->name, sizeof(p->name), "turnworker %d", instance);
	else
		snprintf(p->name, sizeof(p->name), "%s", child_role_name(role));
	p->ev_restart = evtimer_new(fleetd->base, proc_restart_cb, p);
	if (p->ev_restart == NULL)
		fatalx("%s: evtimer_new", __func__);
	TAILQ_INSERT_TAIL(&fleetd->procs, p, entry);
	return p;
}

static void
proc_free(struct proc *p)
{
	TAILQ_REMOVE(&fleetd->procs, p, entry);
	if (replacing == p)
		replacing = NULL;
	chan_free(p->chan);
	event_free(p->ev_restart);
	free(p->pool_json);
	free(p);
}

void
proc_spawn(struct proc *p)
{
	int	 sp[2] = { -1, -1 };
	pid_t	 pid;

	/* postgres is exec'd and speaks no protocol of ours. */
	if (p->role != ROLE_POSTGRES &&
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == -1)
		fatal("%s: socketpair", __func__);
	switch (pid = fork()) {
	case -1:
		log_warn("%s: fork", p->name);
		if (sp[0] != -1) {
			close(sp[0]);
			close(sp[1]);
		}
		p->state = PS_BACKOFF;
		p->backoff = p->backoff ? p->backoff : 1;
		timer_add_ms(p->ev_restart, (int64_t)(p->backoff) * 1000);
		return;
	case 0:
		if (sp[0] != -1)
			close(sp[0]);
		proc_child(p, sp[1]);
	}
	p->pid = pid;
	p->state = PS_STARTING;
	p->started_ms = now_ms();
	p->ready_ms = 0;
	p->turns_active = p->turns_queued = 0;
	if (sp[0] != -1) {
		close(sp[1]);
		p->chan = chan_new(fleetd->base, sp[0], p->name, proc_msg,
		    proc_close, p);
	} else
		pg_started(p);
	log_debug("started %s, pid %d", p->name, (int)pid);
}

/*
 * In the new child: drop everything of the supervisor's (its event base,
 * signal handlers, control socket, pid file lock, other channels) and
 * run the role.  The channel lands on CHILD_CHAN_FD and the gateway's
 * listener on CHILD_LISTEN_FD; every other descriptor above 2 is closed.
 */
static void
proc_child(struct proc *p, int chanfd)
{
	struct child_env	 env;
	pid_t			 ppid = getppid();
	int			 a, b = -1, keep = CHILD_CHAN_FD;

	if (event_reinit(fleetd->base) == -1)
		_exit(1);
	event_base_free(fleetd->base);
	if (p->role == ROLE_POSTGRES) {
		closefrom(STDERR_FILENO + 1);
		pg_exec(ppid);
	}
	if ((a = fcntl(chanfd, F_DUPFD, 10)) == -1)
		_exit(1);
	if (p->role == ROLE_GATEWAY) {
		if ((b = fcntl(fleetd->listenfd, F_DUPFD, 10)) == -1)
			_exit(1);
		keep = CHILD_LISTEN_FD;
	}
	if (dup2(a, CHILD_CHAN_FD) == -1 ||
	    (b != -1 && dup2(b, CHILD_LISTEN_FD) == -1))
		_exit(1);
	closefrom(keep + 1);

	memset(&env, 0, sizeof(env));
	env.conf = fleetd->conf;
	env.statedir = fleetd->statedir;
	env.rundir = fleetd->rundir;
	env.db_conninfo = fleetd->db_conninfo;
	env.node_id = fleetd->node_id;
	env.ppid = ppid;
	env.role = p->role;
	env.instance = p->instance;
	env.listenfd = b != -1 ? CHILD_LISTEN_FD : -1;
	child_init(&env);
	switch (p->role) {
	case ROLE_GATEWAY:
		gateway_main(&env);
	case ROLE_LEASEMGR:
		leasemgr_main(&env);
	case ROLE_TURNWORKER:
		turnworker_main(&env);
	case ROLE_POSTGRES:
	case ROLE__COUNT:
		break;
	}
	fatalx("no entry point for %s", p->name);
}

static void
describe_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "signal %d%s", WTERMSIG(status),
		    WCOREDUMP(status) ? " (core dumped)" : "");
	else
		snprintf(buf, len, "status %d", status);
}

void
proc_reap(void)
{
	struct proc	*p;
	pid_t		 pid;
	int		 status;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		TAILQ_FOREACH(p, &fleetd->procs, entry)
			if (p->pid == pid)
				break;
		if (p == NULL) {
			log_debug("reaped unknown child %d", (int)pid);
			continue;
		}
		proc_exited(p, status);
	}
}

static void
proc_exited(struct proc *p, int status)
{
	char	 how[64];
	int64_t	 lived = now_ms() - p->started_ms;
	pid_t	 pid = p->pid;

	describe_status(status, how, sizeof(how));
	p->pid = -1;
	p->has_status = 1;
	p->last_status = status;
	p->turns_active = p->turns_queued = 0;
	chan_free(p->chan);
	p->chan = NULL;

	if (fleetd->state == SV_STOPPING || p->retire) {
		log_info("%s (pid %d) ended: %s", p->name, (int)pid, how);
		p->state = PS_STOPPED;
		if (p->retire && fleetd->state != SV_STOPPING)
			proc_free(p);
		fleetd_stop_check();
		return;
	}
	if (p->replace && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		log_info("%s (pid %d) stopped for reload; starting it again",
		    p->name, (int)pid);
		p->replace = 0;
		p->backoff = 0;
		proc_spawn(p);
		return;
	}
	log_warnx("%s (pid %d) died after %lld ms: %s", p->name, (int)pid,
	    (long long)lived, how);
	/* Its next start reads the new configuration anyway. */
	p->replace = 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
		p->state = PS_FAILED;
		log_warnx("%s exited with status 2 (configuration error); "
		    "not restarting it", p->name);
		fleetd_boot_failure(p, "exited with status 2 (configuration "
		    "error)");
		fleetd_stop(2, 0);
		return;
	}
	if (lived < QUICK_DEATH_MS)
		p->backoff = p->backoff == 0 ? 1 :
		    (p->backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : p->backoff * 2);
	else
		p->backoff = 0;
	p->restarts++;
	if (fleetd->state == SV_STARTING)
		fleetd_boot_failure(p, how);
	if (p->backoff == 0) {
		proc_spawn(p);
		return;
	}
	log_warnx("%s died within %d ms of its start; restarting it in %d s",
	    p->name, QUICK_DEATH_MS, p->backoff);
	p->state = PS_BACKOFF;
	timer_add_ms(p->ev_restart, (int64_t)(p->backoff) * 1000);
}

static void
proc_restart_cb(evutil_socket_t fd, short events, void *arg)
{
	struct proc	*p = arg;

	(void)fd;
	(void)events;
	if (fleetd->state == SV_STOPPING || p->state != PS_BACKOFF)
		return;
	proc_spawn(p);
}

/* Tell a child the service state (only the gateway acts on it). */
void
proc_push_state(struct proc *p)
{
	struct msg	 m;

	if (p->chan == NULL)
		return;
	proto_msg_init(&m, MSG_STATE);
	m.state.state = (char *)fleetd_state_name(fleetd->state);
	chan_send(p->chan, &m);
}

void
proc_set_ready(struct proc *p)
{
	p->state = PS_READY;
	p->ready_ms = now_ms();
	log_info("%s ready (pid %d, %lld ms)", p->name, (int)p->pid,
	    (long long)(p->ready_ms - p->started_ms));
	proc_push_state(p);
	if (p->role == ROLE_POSTGRES)
		fleetd_spawn_rest();
	fleetd_ready_check();
	proc_replace_next();
}

static void
proc_stats(struct proc *p, const char *text)
{
	json_t		*j, *pl = NULL;
	json_error_t	 jerr;
	json_int_t	 active = 0, queued = 0;

	if ((j = json_loads(text, 0, &jerr)) == NULL ||
	    json_unpack(j, "{s?I, s?I, s?o}", "turns_active", &active,
	    "turns_queued", &queued, "pool", &pl) == -1 || active < 0 ||
	    queued < 0 || (pl != NULL && !json_is_object(pl))) {
		log_warnx("%s: malformed stats", p->name);
		json_decref(j);
		return;
	}
	if (pl != NULL) {
		free(p->pool_json);
		p->pool_json = json_dumps(pl, JSON_COMPACT);
	}
	json_decref(j);
	p->turns_active = active > 1000000 ? 1000000 : active;
	p->turns_queued = queued > 1000000 ? 1000000 : queued;
	control_drained();
}

static void
proc_msg(struct chan *ch, struct msg *m, void *arg)
{
	struct proc	*p = arg;

	switch (m->type) {
	case MSG_HELLO:
		if (strcmp(m->hello.role, child_role_name(p->role)) != 0 ||
		    m->hello.pid != p->pid ||
		    m->hello.version != PROTO_VERSION) {
			log_warnx("%s: bad hello (role %s, pid %lld, version "
			    "%lld); killing it", p->name, m->hello.role,
			    (long long)m->hello.pid,
			    (long long)m->hello.version);
			kill(p->pid, SIGKILL);
			chan_free(ch);
			p->chan = NULL;
		}
		break;
	case MSG_READY:
		if (p->state == PS_STARTING)
			proc_set_ready(p);
		break;
	case MSG_STATS:
		proc_stats(p, m->stats.json);
		break;
	case MSG_STATE:
	case MSG_STOP:
	case MSG_RELOAD:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_WORKER_HELLO:
	case MSG_WORKER_BYE:
	case MSG_ACQUIRE:
	case MSG_GRANT:
	case MSG_REFUSE:
	case MSG_RENEW:
	case MSG_TURN:
	case MSG_TURN_STARTED:
	case MSG_CHUNK:
	case MSG_TURN_END:
	case MSG_CANCEL:
	case MSG__COUNT:
		log_warnx("%s: unexpected %s; dropping it", p->name,
		    proto_msg_name(m->type));
		if (p->pid != -1)
			kill(p->pid, SIGKILL);
		chan_free(ch);
		p->chan = NULL;
		break;
	}
}

static void
proc_close(struct chan *ch, const char *why, void *arg)
{
	struct proc	*p = arg;

	/* The child exits by itself when its channel closes. */
	log_debug("%s: channel closed (%s)", p->name, why);
	chan_free(ch);
	p->chan = NULL;
}

void
proc_send_all(struct msg *m)
{
	struct proc	*p;

	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->chan != NULL)
			chan_send(p->chan, m);
}

void
proc_send_role(enum child_role role, struct msg *m)
{
	struct proc	*p;

	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->role == role && p->chan != NULL)
			chan_send(p->chan, m);
}

void
proc_signal_all(int sig, int postgres)
{
	struct proc	*p;

	TAILQ_FOREACH(p, &fleetd->procs, entry) {
		if (p->pid == -1 || (p->role == ROLE_POSTGRES) != postgres)
			continue;
		kill(p->pid, sig);
		p->state = PS_STOPPING;
	}
}

int
proc_alive_count(int postgres)
{
	struct proc	*p;
	int		 n = 0;

	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->pid != -1 && (p->role == ROLE_POSTGRES) == postgres)
			n++;
	return n;
}

int
proc_alive_role(enum child_role role)
{
	struct proc	*p;
	int		 n = 0;

	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->pid != -1 && p->role == role)
			n++;
	return n;
}

/* Stop every process that is only waiting to be restarted. */
void
proc_cancel_backoff(void)
{
	struct proc	*p;

	TAILQ_FOREACH(p, &fleetd->procs, entry) {
		evtimer_del(p->ev_restart);
		if (p->pid == -1)
			p->state = PS_STOPPED;
	}
}

/* Grow or shrink the set of turnworkers to n. */
void
proc_set_workers(int n)
{
	struct proc	*p, *next;
	struct msg	 m;
	int		 have = 0, max = 0;

	TAILQ_FOREACH(p, &fleetd->procs, entry) {
		if (p->role != ROLE_TURNWORKER || p->retire)
			continue;
		have++;
		if (p->instance > max)
			max = p->instance;
	}
	while (have < n) {
		p = proc_add(ROLE_TURNWORKER, ++max);
		have++;
		proc_spawn(p);
	}
	for (p = TAILQ_LAST(&fleetd->procs, proclist); p != NULL && have > n;
	    p = next) {
		next = TAILQ_PREV(p, proclist, entry);
		if (p->role != ROLE_TURNWORKER || p->retire)
			continue;
		have--;
		p->retire = 1;
		p->replace = 0;
		if (p->pid == -1) {
			proc_free(p);
			continue;
		}
		log_info("retiring %s", p->name);
		p->state = PS_STOPPING;
		proto_msg_init(&m, MSG_STOP);
		if (p->chan != NULL)
			chan_send(p->chan, &m);
		else
			kill(p->pid, SIGTERM);
	}
}

/*
 * Rolling replacement after a reload: one turnworker at a time is asked
 * to finish its Turn and exit, is started again with the new
 * configuration, and must be ready before the next one goes.
 */
void
proc_replace_next(void)
{
	struct proc	*p;
	struct msg	 m;

	if (replacing != NULL) {
		if (replacing->state != PS_READY)
			return;
		replacing = NULL;
	}
	TAILQ_FOREACH(p, &fleetd->procs, entry) {
		if (!p->replace)
			continue;
		if (p->state != PS_READY || p->chan == NULL) {
			/* Its next start uses the new configuration anyway. */
			p->replace = 0;
			continue;
		}
		replacing = p;
		p->state = PS_STOPPING;
		proto_msg_init(&m, MSG_STOP);
		chan_send(p->chan, &m);
		return;
	}
}

void
proc_mark_replace(void)
{
	struct proc	*p;

	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->role == ROLE_TURNWORKER && !p->retire)
			p->replace = 1;
}
