/*
 * The sandbox pool.  sandbox_max slots, and never more live sandboxes
 * than slots, warm ones included.  A worker opens one connection to
 * run/leasemgr.sock per lease and sends acquire; it gets a grant (the
 * kernel's stdin and stdout, passed with SCM_RIGHTS) or a refusal.
 * When no slot is free it waits, first come first served, until its
 * deadline.  Closing the connection, for any reason, ends the lease:
 * the kernel is killed and reaped and the slot serves the next waiter.
 *
 * Warm kernels are booted ahead of demand for the workspace last asked
 * for, each with that workspace's volume at /workspace, and are only
 * ever granted to a lease for the same workspace; a warm kernel of
 * another workspace yields its slot when a waiter needs it.  Every
 * sandbox is recorded in fleet_sandboxes before it starts.
 */
#include <sys/types.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <dirent.h>
#include <limits.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/string.h>
#include <bsd/unistd.h>
#include <event2/event.h>
#include <uuid.h>

#include "lib/db.h"
#include "lib/listener.h"
#include "lib/log.h"
#include "lib/util.h"
#include "proto/chan.h"
#include "leasemgr.h"
#include "sandbox.h"

#define BOOT_TIMEOUT_MS		30000
#define UID_RANGES		32
#define UID_RANGE		1024	/* >= the largest sandbox_max */
#define HELLO_TIMEOUT_MS	10000
#define LEASES_MAX		4096
#define DB_TIMEOUT_MS		10000

enum slot_state {
	SLOT_FREE,
	SLOT_RECORDING,		/* its row is being written */
	SLOT_BOOTING,
	SLOT_WARM,
	SLOT_LEASED
};

enum lease_state {
	LEASE_NEW,		/* connected, no acquire yet */
	LEASE_WAITING,		/* queued for a slot */
	LEASE_BOOTING,		/* a slot boots for it */
	LEASE_GRANTED
};

struct lease;

struct slot {
	int			 index;
	enum slot_state		 state;
	struct sandbox		 sb;
	char			 id[40];	/* fleet_sandboxes.id */
	char			 workspace[40];	/* "" for no volume */
	struct lease		*lease;
	int64_t			 boot_start;
	int64_t			 boot_ms;
	struct event		*ev_out;	/* the ready line */
	struct event		*ev_boot;	/* boot deadline */
	char			 line[512];
	size_t			 linelen;
	int			 doomed;	/* destroy once its row exists */
};

struct lease {
	TAILQ_ENTRY(lease)	 entry;		/* in leases, or waiters */
	enum lease_state	 state;
	struct chan		*chan;
	char			 id[40];
	char			 workspace[40];
	char			 run[40];
	int64_t			 waited_ms;
	struct event		*ev_timer;	/* deadline, then ttl */
	struct slot		*slot;
	int			 queued;
};
TAILQ_HEAD(leaselist, lease);

struct pool {
	struct slot		*slots;
	int			 nslots;
	struct leaselist	 leases;	/* every connection */
	struct leaselist	 waiters;	/* FIFO */
	int			 nleases;
	int			 nwaiting;
	char			 warm_ws[40];
	char			*kernel;
	struct listener		*listener;	/* run/leasemgr.sock */
	int64_t			 created_total;
	int64_t			 failed_total;
	int			 stopping;
	uid_t			 uid_base;
	int			 uid_lock;
};

static struct pool	 pool;

static void	pool_kick(void);
static void	slot_boot(struct slot *, const char *, struct lease *);
static void	slot_destroy(struct slot *, const char *);
static void	lease_free(struct lease *);
static void	lease_refuse(struct lease *, const char *, const char *);
static void	lease_grant(struct lease *, struct slot *);
static void	lease_timer(evutil_socket_t, short, void *);
static void	pool_stats(void);

static void
new_uuid(char *buf)
{
	uuid_t	 u;

	uuid_generate(u);
	uuid_unparse_lower(u, buf);
}

static int
valid_uuid(const char *s)
{
	uuid_t	 u;

	return strlen(s) == 36 && uuid_parse(s, u) == 0;
}

static int
count_slots(enum slot_state state)
{
	int	 i, n = 0;

	for (i = 0; i < pool.nslots; i++)
		if (pool.slots[i].state == state)
			n++;
	return n;
}

static void
db_done(PGresult *res, const struct db_err *e, void *arg)
{
	(void)res;
	if (e != NULL)
		log_warnx("sandbox record: %s: %s", (const char *)arg, e->msg);
}

/* Tell fleetd what `fleet status' shows as pool. */
static void
pool_stats(void)
{
	struct msg	 m;
	char		 buf[512];

	snprintf(buf, sizeof(buf), "{\"pool\":{\"active\":%d,\"warm\":%d,"
	    "\"booting\":%d,\"waiting\":%d,\"max\":%d,\"created_total\":%lld,"
	    "\"failed_total\":%lld,\"uid_base\":%u}}", count_slots(SLOT_LEASED),
	    count_slots(SLOT_WARM), count_slots(SLOT_BOOTING) +
	    count_slots(SLOT_RECORDING), pool.nwaiting, pool.nslots,
	    (long long)pool.created_total, (long long)pool.failed_total,
	    (unsigned)pool.uid_base);
	proto_msg_init(&m, MSG_STATS);
	m.stats.json = buf;
	child_send(lm->child, &m);
}

static char *
volume_path(const char *workspace)
{
	char	*dir, *path;

	xasprintf(&dir, "%s/volumes", lm->env->statedir);
	if (mkdir(dir, 0711) == -1 && errno != EEXIST)
		log_warn("%s", dir);
	xasprintf(&path, "%s/%s", dir, workspace);
	free(dir);
	if (mkdir(path, 0700) == -1 && errno != EEXIST) {
		log_warn("%s", path);
		free(path);
		return NULL;
	}
	return path;
}

/* The ready line arrived, or the kernel died, or it never came. */
static void
slot_booted(struct slot *s, const char *failure)
{
	struct lease	*l = s->lease;
	const char	*p[3];
	char		 ref[32];

	if (s->ev_out != NULL)
		event_del(s->ev_out);
	evtimer_del(s->ev_boot);
	if (failure != NULL) {
		char	 why[1024] = "";
		ssize_t	 n;

		/* What bwrap or python said on the way down, if anything. */
		if (s->sb.err != -1) {
			fd_nonblock(s->sb.err);
			if ((n = read(s->sb.err, why, sizeof(why) - 1)) > 0) {
				why[n] = '\0';
				why[strcspn(why, "\n")] = '\0';
			} else
				why[0] = '\0';
		}
		log_warnx("sandbox %d: kernel did not start: %s%s%s", s->index,
		    failure, why[0] ? ": " : "", why);
		pool.failed_total++;
		slot_destroy(s, "boot failed");
		if (l != NULL) {
			l->slot = NULL;
			lease_refuse(l, "unavailable", "the sandbox failed to "
			    "start");
		}
		pool_kick();
		return;
	}
	s->boot_ms = now_ms() - s->boot_start;
	pool.created_total++;
	log_debug("sandbox %d ready in %lld ms (pid %d)", s->index,
	    (long long)s->boot_ms, (int)s->sb.pid);
	snprintf(ref, sizeof(ref), "pid:%d", (int)s->sb.pid);
	p[0] = s->id;
	p[1] = ref;
	db_async_sql(lm->db, "UPDATE fleet_sandboxes SET provider_ref = $2, "
	    "state = 'warm' WHERE id = $1", 2, p, DB_TIMEOUT_MS, db_done,
	    "update");
	if (l != NULL)
		lease_grant(l, s);
	else {
		s->state = SLOT_WARM;
		pool_kick();
	}
	pool_stats();
}

static void
slot_read(evutil_socket_t fd, short events, void *arg)
{
	struct slot	*s = arg;
	ssize_t		 n;
	char		 c;

	(void)events;
	/* One byte at a time: what follows the line is the worker's. */
	for (;;) {
		n = read(fd, &c, 1);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n <= 0) {
			slot_booted(s, n == 0 ? "it exited" : strerror(errno));
			return;
		}
		if (c == '\n')
			break;
		if (s->linelen + 1 >= sizeof(s->line)) {
			slot_booted(s, "its first line is too long");
			return;
		}
		s->line[s->linelen++] = c;
	}
	s->line[s->linelen] = '\0';
	if (strstr(s->line, "\"event\":\"ready\"") == NULL ||
	    strstr(s->line, "\"protocol\":1") == NULL) {
		slot_booted(s, "its first line is not ready for protocol 1");
		return;
	}
	/* The worker reads blocking or not as it likes. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	slot_booted(s, NULL);
}

static void
slot_boot_timeout(evutil_socket_t fd, short events, void *arg)
{
	(void)fd;
	(void)events;
	slot_booted(arg, "no ready line in time");
}

static void
slot_spawn(struct slot *s)
{
	struct sandbox_spec	 spec;
	const struct fleet_config *c = lm->env->conf;
	char			 err[512], *vol = NULL, capenv[64];
	const char		*env[2];

	/* Its row exists now: from here on it is a sandbox like any. */
	s->state = SLOT_BOOTING;
	if (s->doomed) {
		s->doomed = 0;
		slot_destroy(s, "no longer needed");
		pool_kick();
		return;
	}
	memset(&spec, 0, sizeof(spec));
	spec.kernel = pool.kernel;
	spec.python = "/usr/bin/python3";
	if (s->workspace[0] != '\0' &&
	    (vol = volume_path(s->workspace)) == NULL) {
		slot_booted(s, "no volume");
		return;
	}
	spec.volume = vol;
	spec.slot = s->index;
	spec.uid_base = pool.uid_base;
	spec.limits.cpu_seconds = c->sandbox_cpu_seconds;
	spec.limits.address_space = c->sandbox_memory;
	spec.limits.open_files = c->sandbox_open_files;
	spec.limits.file_size = c->sandbox_file_size;
	spec.limits.processes = c->sandbox_processes;
	spec.limits.tmp_size = c->sandbox_tmp_size;
	snprintf(capenv, sizeof(capenv), "FLEET_KERNEL_OUTPUT_CAP=%lld",
	    (long long)c->kernel_output_cap);
	env[0] = capenv;
	env[1] = NULL;
	spec.env = env;
	s->boot_start = now_ms();
	if (sandbox_local_spawn(&spec, &s->sb, err, sizeof(err)) == -1) {
		free(vol);
		slot_booted(s, err);
		return;
	}
	free(vol);
	fd_nonblock(s->sb.out);
	s->linelen = 0;
	s->ev_out = event_new(lm->base, s->sb.out, EV_READ | EV_PERSIST,
	    slot_read, s);
	if (s->ev_out == NULL)
		fatalx("%s: event_new", __func__);
	event_add(s->ev_out, NULL);
	timer_add_ms(s->ev_boot, BOOT_TIMEOUT_MS);
}

static void
slot_recorded(PGresult *res, const struct db_err *e, void *arg)
{
	struct slot	*s = arg;

	(void)res;
	if (e != NULL) {
		/* Unrecorded, it must not run: nothing could reap it later. */
		log_warnx("sandbox %d: cannot record it: %s", s->index, e->msg);
		pool.failed_total++;
		s->state = SLOT_FREE;
		s->doomed = 0;
		s->id[0] = '\0';
		if (s->lease != NULL) {
			struct lease *l = s->lease;

			s->lease = NULL;
			l->slot = NULL;
			lease_refuse(l, "unavailable", "sandboxes cannot be "
			    "recorded: the database is unavailable");
		}
		pool_stats();
		return;
	}
	slot_spawn(s);
}

/* Claim slot s for a kernel with workspace's volume, for l or warm. */
static void
slot_boot(struct slot *s, const char *workspace, struct lease *l)
{
	const char	*p[5];

	memset(&s->sb, 0, sizeof(s->sb));
	s->sb.pid = -1;
	s->sb.in = s->sb.out = s->sb.err = -1;
	s->doomed = 0;
	new_uuid(s->id);
	strlcpy(s->workspace, workspace, sizeof(s->workspace));
	s->lease = l;
	s->state = SLOT_RECORDING;
	if (l != NULL) {
		l->slot = s;
		l->state = LEASE_BOOTING;
	}
	p[0] = s->id;
	p[1] = lm->env->node_id;
	p[2] = workspace[0] ? workspace : NULL;
	p[3] = l != NULL && l->run[0] ? l->run : NULL;
	p[4] = lm->env->conf->sandbox_backend;
	db_async_sql(lm->db, "INSERT INTO fleet_sandboxes (id, node_id, "
	    "backend, state, workspace_id, run_id) VALUES ($1, $2, $5, "
	    "'creating', $3, $4)", 5, p, DB_TIMEOUT_MS, slot_recorded, s);
	pool_stats();
}

/* Kill the kernel and everything it started, and free the slot. */
static void
slot_destroy(struct slot *s, const char *why)
{
	const char	*p[1];

	if (s->state == SLOT_RECORDING) {
		/* Its row is on the way; finish when it lands. */
		s->doomed = 1;
		return;
	}
	if (s->ev_out != NULL) {
		event_free(s->ev_out);
		s->ev_out = NULL;
	}
	evtimer_del(s->ev_boot);
	if (s->sb.pid != -1 || s->sb.in != -1 || s->sb.out != -1)
		sandbox_local_destroy(&s->sb);
	log_debug("sandbox %d destroyed (%s)", s->index, why);
	if (s->id[0] != '\0') {
		p[0] = s->id;
		db_async_sql(lm->db, "DELETE FROM fleet_sandboxes WHERE id = $1",
		    1, p, DB_TIMEOUT_MS, db_done, "delete");
	}
	s->id[0] = '\0';
	s->lease = NULL;
	s->state = SLOT_FREE;
	pool_stats();
}

static void
lease_send(struct lease *l, struct msg *m)
{
	if (l->chan != NULL)
		chan_send(l->chan, m);
}

static void
lease_refuse(struct lease *l, const char *code, const char *message)
{
	struct msg	 m;

	if (l->queued) {
		TAILQ_REMOVE(&pool.waiters, l, entry);
		TAILQ_INSERT_TAIL(&pool.leases, l, entry);
		l->queued = 0;
		pool.nwaiting--;
	}
	log_debug("lease %s refused: %s", l->id, message);
	proto_msg_init(&m, MSG_REFUSE);
	m.refuse.code = (char *)code;
	m.refuse.message = (char *)message;
	lease_send(l, &m);
	/* The worker closes, or the timer closes it: it holds nothing. */
	l->state = LEASE_NEW;
	evtimer_del(l->ev_timer);
	timer_add_ms(l->ev_timer, HELLO_TIMEOUT_MS);
	pool_stats();
}

/* Record that the sandbox is leased, until when, and for which Run. */
static void
record_lease(struct lease *l, struct slot *s)
{
	const char	*p[3];
	char		 ttl[16];

	snprintf(ttl, sizeof(ttl), "%d", lm->env->conf->lease_ttl);
	p[0] = s->id;
	p[1] = ttl;
	p[2] = l->run[0] ? l->run : NULL;
	db_async_sql(lm->db, "UPDATE fleet_sandboxes SET state = 'leased', "
	    "leased_at = coalesce(leased_at, now()), expires_at = now() + "
	    "make_interval(secs => $2), run_id = coalesce($3, run_id) "
	    "WHERE id = $1", 3, p, DB_TIMEOUT_MS, db_done, "lease");
}

static void
lease_grant(struct lease *l, struct slot *s)
{
	struct msg	 m;

	s->state = SLOT_LEASED;
	s->lease = l;
	l->slot = s;
	l->state = LEASE_GRANTED;
	proto_msg_init(&m, MSG_GRANT);
	m.grant.lease = l->id;
	m.grant.backend = (char *)"local";
	m.grant.ttl_ms = (int64_t)lm->env->conf->lease_ttl * 1000;
	m.grant.boot_ms = s->boot_ms;
	/* The channel owns these now, and closes them once sent. */
	m.grant.kernel_in = s->sb.in;
	m.grant.kernel_out = s->sb.out;
	s->sb.in = s->sb.out = -1;
	if (s->ev_out != NULL) {
		event_free(s->ev_out);
		s->ev_out = NULL;
	}
	lease_send(l, &m);
	record_lease(l, s);
	evtimer_del(l->ev_timer);
	timer_add_ms(l->ev_timer, (int64_t)lm->env->conf->lease_ttl * 1000);
	log_debug("lease %s granted sandbox %d (run %s, waited %lld ms)",
	    l->id, s->index, l->run[0] ? l->run : "-",
	    (long long)(now_ms() - l->waited_ms));
	pool_stats();
}

/*
 * Serve waiters in order, then keep warm kernels topped up.  Nothing
 * here can exceed the cap: a sandbox exists only in a slot.
 */
static void
pool_kick(void)
{
	struct lease	*l;
	struct slot	*s, *free_slot, *warm, *other;
	int		 i, warm_n;

	if (pool.stopping)
		return;
	while ((l = TAILQ_FIRST(&pool.waiters)) != NULL) {
		free_slot = warm = other = NULL;
		for (i = 0; i < pool.nslots; i++) {
			s = &pool.slots[i];
			if (s->state == SLOT_FREE && free_slot == NULL)
				free_slot = s;
			else if (s->state == SLOT_WARM) {
				if (strcmp(s->workspace, l->workspace) == 0) {
					if (warm == NULL)
						warm = s;
				} else if (other == NULL)
					other = s;
			}
		}
		if (warm == NULL && free_slot == NULL && other != NULL) {
			/* A warm kernel of another workspace yields. */
			slot_destroy(other, "slot needed by a waiter");
			free_slot = other;
		}
		if (warm == NULL && free_slot == NULL)
			break;
		TAILQ_REMOVE(&pool.waiters, l, entry);
		TAILQ_INSERT_TAIL(&pool.leases, l, entry);
		l->queued = 0;
		pool.nwaiting--;
		evtimer_del(l->ev_timer);
		if (warm != NULL)
			lease_grant(l, warm);
		else
			slot_boot(free_slot, l->workspace, l);
	}
	if (TAILQ_FIRST(&pool.waiters) != NULL)
		return;
	warm_n = count_slots(SLOT_WARM);
	for (i = 0; i < pool.nslots; i++) {
		s = &pool.slots[i];
		if ((s->state == SLOT_BOOTING || s->state == SLOT_RECORDING) &&
		    s->lease == NULL)
			warm_n++;
	}
	for (i = 0; i < pool.nslots && warm_n < lm->env->conf->sandbox_warm;
	    i++) {
		s = &pool.slots[i];
		if (s->state != SLOT_FREE)
			continue;
		slot_boot(s, pool.warm_ws, NULL);
		warm_n++;
	}
}

static void
lease_acquire(struct lease *l, struct msg_acquire *a)
{
	if (l->state != LEASE_NEW || l->slot != NULL) {
		lease_refuse(l, "bad_request", "this connection already "
		    "holds or waits for a lease");
		return;
	}
	if ((a->workspace[0] != '\0' && !valid_uuid(a->workspace)) ||
	    (a->run[0] != '\0' && !valid_uuid(a->run))) {
		lease_refuse(l, "bad_request", "workspace and run must be "
		    "UUIDs or empty");
		return;
	}
	if (pool.stopping) {
		lease_refuse(l, "unavailable", "the lease manager is stopping");
		return;
	}
	if (pool.nwaiting >= lm->env->conf->sandbox_queue_max) {
		pool.failed_total++;
		lease_refuse(l, "queue_full", "every sandbox is busy and the "
		    "queue is full");
		return;
	}
	strlcpy(l->workspace, a->workspace, sizeof(l->workspace));
	strlcpy(l->run, a->run, sizeof(l->run));
	/* Warm kernels follow root Turns, not volume-less children. */
	if (a->workspace[0] != '\0')
		strlcpy(pool.warm_ws, a->workspace, sizeof(pool.warm_ws));
	new_uuid(l->id);
	l->waited_ms = now_ms();
	l->state = LEASE_WAITING;
	TAILQ_REMOVE(&pool.leases, l, entry);
	TAILQ_INSERT_TAIL(&pool.waiters, l, entry);
	l->queued = 1;
	pool.nwaiting++;
	evtimer_del(l->ev_timer);
	timer_add_ms(l->ev_timer, a->deadline_ms);
	pool_kick();
	pool_stats();
}

static void
lease_timer(evutil_socket_t fd, short events, void *arg)
{
	struct lease	*l = arg;

	(void)fd;
	(void)events;
	switch (l->state) {
	case LEASE_NEW:
		log_warnx("lease connection sent no acquire in time; closing");
		lease_free(l);
		break;
	case LEASE_WAITING:
		pool.failed_total++;
		lease_refuse(l, "deadline", "no sandbox became free before the "
		    "deadline");
		break;
	case LEASE_BOOTING:
		break;
	case LEASE_GRANTED:
		log_warnx("lease %s (run %s) was not renewed within %d s; "
		    "revoking it", l->id, l->run[0] ? l->run : "-",
		    lm->env->conf->lease_ttl);
		lease_free(l);
		break;
	}
}

static void
lease_msg(struct chan *ch, struct msg *m, void *arg)
{
	struct lease	*l = arg;

	switch (m->type) {
	case MSG_ACQUIRE:
		lease_acquire(l, &m->acquire);
		break;
	case MSG_RENEW:
		if (l->state == LEASE_GRANTED) {
			evtimer_del(l->ev_timer);
			timer_add_ms(l->ev_timer,
			    (int64_t)lm->env->conf->lease_ttl * 1000);
			record_lease(l, l->slot);
		}
		break;
	case MSG_HELLO:
	case MSG_READY:
	case MSG_STATE:
	case MSG_STOP:
	case MSG_RELOAD:
	case MSG_STATS:
	case MSG_CTL_REQUEST:
	case MSG_CTL_REPLY:
	case MSG_WORKER_HELLO:
	case MSG_WORKER_BYE:
	case MSG_GRANT:
	case MSG_REFUSE:
	case MSG_TURN:
	case MSG_TURN_STARTED:
	case MSG_CHUNK:
	case MSG_TURN_END:
	case MSG_CANCEL:
	case MSG__COUNT:
		log_warnx("%s: unexpected %s; dropping it", chan_peer(ch),
		    proto_msg_name(m->type));
		lease_free(l);
		break;
	}
}

/* The connection ended: so does the lease, and its sandbox with it. */
static void
lease_free(struct lease *l)
{
	struct slot	*s = l->slot;

	if (l->queued) {
		TAILQ_REMOVE(&pool.waiters, l, entry);
		pool.nwaiting--;
	} else
		TAILQ_REMOVE(&pool.leases, l, entry);
	pool.nleases--;
	if (s != NULL) {
		s->lease = NULL;
		slot_destroy(s, "lease ended");
	}
	chan_free(l->chan);
	event_free(l->ev_timer);
	free(l);
	pool_kick();
	pool_stats();
}

static void
lease_close(struct chan *ch, const char *why, void *arg)
{
	(void)ch;
	log_debug("lease connection closed (%s)", why);
	lease_free(arg);
}

static void
pool_accept(int fd, void *arg)
{
	struct lease	*l;

	(void)arg;
	if (pool.nleases >= LEASES_MAX) {
		log_warnx("leasemgr.sock: too many connections");
		close(fd);
		return;
	}
	l = xcalloc(1, sizeof(*l));
	l->state = LEASE_NEW;
	l->chan = chan_new(lm->base, fd, "lease client", lease_msg,
	    lease_close, l);
	if ((l->ev_timer = evtimer_new(lm->base, lease_timer, l)) == NULL)
		fatalx("%s: evtimer_new", __func__);
	timer_add_ms(l->ev_timer, HELLO_TIMEOUT_MS);
	TAILQ_INSERT_TAIL(&pool.leases, l, entry);
	pool.nleases++;
}

/*
 * As root, sandboxes run as uids base + slot.  Each lease manager on a
 * host holds a lock on one of UID_RANGES lock files for its life and
 * takes the range of uids that goes with it, so that two fleetd on one
 * host never share a uid (a uid is killed whole when a sandbox goes).
 */
static int
uid_range_claim(char *err, size_t errsz)
{
	const char	*dir = access("/run", W_OK) == 0 ? "/run/fleet" :
			    "/tmp/fleet-uid-ranges";
	char		 path[PATH_MAX];
	int		 k, fd;

	pool.uid_lock = -1;
	if (geteuid() != 0)
		return 0;
	if (mkdir(dir, 0700) == -1 && errno != EEXIST) {
		snprintf(err, errsz, "%s: %s", dir, strerror(errno));
		return -1;
	}
	for (k = 0; k < UID_RANGES; k++) {
		snprintf(path, sizeof(path), "%s/sandbox-uids.%d.lock", dir, k);
		if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) ==
		    -1) {
			snprintf(err, errsz, "%s: %s", path, strerror(errno));
			return -1;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			pool.uid_lock = fd;
			pool.uid_base = SANDBOX_UID_BASE + k * UID_RANGE;
			log_debug("sandbox uids %u to %u", pool.uid_base,
			    pool.uid_base + UID_RANGE - 1);
			return 0;
		}
		close(fd);
	}
	snprintf(err, errsz, "every one of the %d sandbox uid ranges is held "
	    "by another lease manager on this host", UID_RANGES);
	return -1;
}

/*
 * Kill every process whose real uid is in our range: whatever a lease
 * manager that held it before us left running (sandboxes die with their
 * keeper, so this is a second net).  Only meaningful as root.
 */
static void
sweep_uids(uid_t lo, uid_t hi)
{
	DIR		*d;
	struct dirent	*de;
	char		 path[300], line[256];
	FILE		*fp;
	long		 uid;
	int		 n = 0;

	if (geteuid() != 0 || (d = opendir("/proc")) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
		if ((fp = fopen(path, "r")) == NULL)
			continue;
		uid = -1;
		while (fgets(line, sizeof(line), fp) != NULL)
			if (sscanf(line, "Uid: %ld", &uid) == 1)
				break;
		fclose(fp);
		if (uid >= (long)lo && uid < (long)hi &&
		    kill(atoi(de->d_name), SIGKILL) == 0)
			n++;
	}
	closedir(d);
	if (n > 0)
		log_warnx("killed %d process(es) left from earlier sandboxes",
		    n);
}

/*
 * Whatever a previous incarnation of this node left behind: its rows
 * are deleted, and any process of a sandbox uid is killed.
 */
static void
pool_cleaned(PGresult *res, const struct db_err *e, void *arg)
{
	(void)arg;
	if (res == NULL) {
		log_warnx("sandbox records: %s", e->msg);
		return;
	}
	if (PQntuples(res) > 0)
		log_warnx("removed %d sandbox record(s) left by a previous "
		    "lease manager of this node", PQntuples(res));
}

int
pool_init(char *err, size_t errsz)
{
	const struct fleet_config *c = lm->env->conf;
	const char	*p[1];
	char		*path;
	int		 i;

	if (sandbox_local_probe(err, errsz) == -1)
		return -1;
	pool.kernel = config_kernel_path();
	if (access(pool.kernel, R_OK) == -1) {
		snprintf(err, errsz, "kernel %s: %s", pool.kernel,
		    strerror(errno));
		return -1;
	}
	TAILQ_INIT(&pool.leases);
	TAILQ_INIT(&pool.waiters);
	pool.nslots = c->sandbox_max;
	pool.slots = xcalloc(pool.nslots, sizeof(*pool.slots));
	for (i = 0; i < pool.nslots; i++) {
		pool.slots[i].index = i;
		pool.slots[i].state = SLOT_FREE;
		pool.slots[i].sb.pid = -1;
		pool.slots[i].sb.in = pool.slots[i].sb.out = -1;
		pool.slots[i].sb.err = -1;
		pool.slots[i].ev_boot = evtimer_new(lm->base,
		    slot_boot_timeout, &pool.slots[i]);
		if (pool.slots[i].ev_boot == NULL)
			fatalx("%s: evtimer_new", __func__);
	}
	/* The one local workspace, until someone asks for another. */
	strlcpy(pool.warm_ws, "7793d159-223b-5feb-a99c-f7696debb478",
	    sizeof(pool.warm_ws));

	if (uid_range_claim(err, errsz) == -1)
		return -1;
	sweep_uids(pool.uid_base, pool.uid_base + UID_RANGE);
	p[0] = lm->env->node_id;
	db_async_sql(lm->db, "DELETE FROM fleet_sandboxes WHERE node_id = $1 "
	    "RETURNING id", 1, p, DB_TIMEOUT_MS, pool_cleaned, NULL);

	xasprintf(&path, "%s/leasemgr.sock", lm->env->rundir);
	if ((pool.listener = listener_new(lm->base, path, pool_accept,
	    NULL)) == NULL) {
		snprintf(err, errsz, "%s: %s", path, strerror(errno));
		free(path);
		return -1;
	}
	free(path);
	pool_kick();
	pool_stats();
	return 0;
}

/* Stop: refuse waiters, end every lease, destroy every sandbox. */
void
pool_free(void)
{
	struct lease	*l;
	int		 i;

	pool.stopping = 1;
	while ((l = TAILQ_FIRST(&pool.waiters)) != NULL)
		lease_refuse(l, "unavailable", "the lease manager is stopping");
	while ((l = TAILQ_FIRST(&pool.leases)) != NULL)
		lease_free(l);
	for (i = 0; i < pool.nslots; i++) {
		pool.slots[i].doomed = 0;
		if (pool.slots[i].state == SLOT_RECORDING)
			pool.slots[i].state = SLOT_BOOTING;
		if (pool.slots[i].state != SLOT_FREE)
			slot_destroy(&pool.slots[i], "stopping");
		event_free(pool.slots[i].ev_boot);
	}
	free(pool.slots);
	listener_free(pool.listener);
	free(pool.kernel);
	if (pool.uid_lock != -1)
		close(pool.uid_lock);
}

/* Recovery: a stale Run's sandbox, if it is here, goes now. */
void
pool_release_run(const char *run)
{
	int	 i;

	for (i = 0; i < pool.nslots; i++) {
		struct slot *s = &pool.slots[i];

		if (s->lease != NULL && strcmp(s->lease->run, run) == 0) {
			log_warnx("recovery: destroying sandbox %d of run %s",
			    s->index, run);
			lease_free(s->lease);
			return;
		}
	}
}
