/*
 * fleetd: parse and check the configuration, open the listener, fork
 * the children, then only supervise them.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/libutil.h>
#include <bsd/stdlib.h>
#include <bsd/string.h>
#include <bsd/unistd.h>
#include <event2/event.h>
#include <uuid.h>

#include "lib/db.h"
#include "lib/log.h"
#include "lib/migrate.h"
#include "lib/util.h"
#include "supervisor.h"

extern char	**environ;

struct fleetd	*fleetd;

static void	usage(void) __attribute__((noreturn));
static void	daemonize(void);
static void	ready_line(const char *, ...)
		    __attribute__((format(printf, 1, 2)));
static void	sd_notify(const char *);
static void	signal_cb(evutil_socket_t, short, void *);
static void	stop_timer_cb(evutil_socket_t, short, void *);
static void	stop_timer(int);
static void	open_listener(void);

static void
usage(void)
{
	fprintf(stderr, "usage: fleetd [-Dnv] [--allow-non-loopback-bind] "
	    "[-c file] [-d statedir]\n"
	    "              [-L logfile] [-P port] [-p profile] "
	    "[-R fd]\n");
	exit(2);
}

const char *
fleetd_state_name(enum sv_state s)
{
	switch (s) {
	case SV_STARTING:
		return "starting";
	case SV_READY:
		return "ready";
	case SV_DRAINING:
		return "draining";
	case SV_STOPPING:
		return "stopping";
	}
	return "unknown";
}

/* One line for `fleet start', which waits on the other end. */
static void
ready_line(const char *fmt, ...)
{
	va_list	 ap;
	char	 buf[1024];
	int	 n;

	if (fleetd->readyfd == -1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	if (write(fleetd->readyfd, buf, n) != n)
		log_debug("readiness pipe: short write");
}

/* The sd_notify(3) protocol, for systemd units of Type=notify. */
static void
sd_notify(const char *state)
{
	struct sockaddr_un	 sun;
	const char		*path;
	socklen_t		 len;
	int			 fd;

	if ((path = getenv("NOTIFY_SOCKET")) == NULL || *path == '\0')
		return;
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlcpy(sun.sun_path, path, sizeof(sun.sun_path)) >=
	    sizeof(sun.sun_path))
		return;
	if (sun.sun_path[0] == '@')
		sun.sun_path[0] = '\0';
	len = offsetof(struct sockaddr_un, sun_path) + strlen(path);
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL,
	    (struct sockaddr *)&sun, len) == -1)
		log_warn("sd_notify %s", state);
	close(fd);
}

void
fleetd_set_state(enum sv_state s)
{
	struct proc	*p;

	if (fleetd->state == s)
		return;
	log_info("state %s -> %s", fleetd_state_name(fleetd->state),
	    fleetd_state_name(s));
	fleetd->state = s;
	TAILQ_FOREACH(p, &fleetd->procs, entry)
		proc_push_state(p);
}

/* The readiness barrier: ready once every child has said so. */
void
fleetd_ready_check(void)
{
	struct proc	*p;

	if (fleetd->state != SV_STARTING)
		return;
	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->state != PS_READY)
			return;
	fleetd_set_state(SV_READY);
	if (pidfile_write(fleetd->pfh) == -1)
		log_warn("pidfile_write");
	sd_notify("READY=1");
	log_info("ready at %s (pid %d, %lld ms)", fleetd->url, (int)getpid(),
	    (long long)(now_ms() - fleetd->started_ms));
	ready_line("ready %s", fleetd->url);
	if (fleetd->readyfd != -1) {
		close(fleetd->readyfd);
		fleetd->readyfd = -1;
	}
}

/* A child died before fleetd was ready: tell whoever waits for us. */
void
fleetd_boot_failure(struct proc *p, const char *how)
{
	if (fleetd->state != SV_STARTING || fleetd->readyfd == -1)
		return;
	ready_line("fail 1 %s died during startup (%s); see %s", p->name, how,
	    fleetd->logfile ? fleetd->logfile : "the system log");
	close(fleetd->readyfd);
	fleetd->readyfd = -1;
}

int
fleetd_turns_active(void)
{
	struct proc	*p;
	int		 n = 0;

	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->role == ROLE_GATEWAY)
			n += p->turns_active + p->turns_queued;
	return n;
}

void
fleetd_drain(int on)
{
	if (on && fleetd->state == SV_READY) {
		log_info("draining");
		fleetd_set_state(SV_DRAINING);
	} else if (!on && fleetd->state == SV_DRAINING) {
		log_info("no longer draining");
		fleetd_set_state(SV_READY);
	}
}

static void
stop_timer(int seconds)
{
	evtimer_del(fleetd->ev_stop);
	timer_add_ms(fleetd->ev_stop, (int64_t)(seconds) * 1000);
}

/*
 * Graceful stop: the gateway stops taking Turns and each turnworker
 * finishes its Turn and exits (up to timeout seconds); then the other
 * children get SIGTERM and, kill_timeout seconds later, SIGKILL; the
 * embedded database goes last.
 */
void
fleetd_stop(int code, int timeout)
{
	struct msg	 m;

	if (fleetd->state == SV_STOPPING)
		return;
	fleetd->exit_code = code;
	log_info("stopping");
	sd_notify("STOPPING=1");
	fleetd_set_state(SV_STOPPING);
	proc_cancel_backoff();
	proto_msg_init(&m, MSG_STOP);
	proc_send_role(ROLE_TURNWORKER, &m);
	fleetd->stop_phase = 1;
	stop_timer(timeout > 0 ? timeout : fleetd->conf->shutdown_timeout);
	fleetd_stop_check();
}

void
fleetd_stop_check(void)
{
	if (fleetd->state != SV_STOPPING)
		return;
	switch (fleetd->stop_phase) {
	case 1:
		if (proc_alive_role(ROLE_TURNWORKER) > 0)
			return;
		fleetd->stop_phase = 2;
		proc_signal_all(SIGTERM, 0);
		stop_timer(fleetd->conf->kill_timeout);
		/* FALLTHROUGH */
	case 2:
	case 3:
		if (proc_alive_count(0) > 0)
			return;
		fleetd->stop_phase = 4;
		proc_signal_all(SIGINT, 1);
		stop_timer(fleetd->conf->kill_timeout * 2);
		/* FALLTHROUGH */
	case 4:
	case 5:
		if (proc_alive_count(1) > 0)
			return;
		fleetd->stop_phase = 6;
		evtimer_del(fleetd->ev_stop);
		event_base_loopexit(fleetd->base, NULL);
		break;
	}
}

static void
stop_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd;
	(void)events;
	(void)arg;
	switch (fleetd->stop_phase) {
	case 1:
		log_warnx("%d turnworker(s) still busy after the shutdown "
		    "timeout; terminating", proc_alive_role(ROLE_TURNWORKER));
		fleetd->stop_phase = 2;
		proc_signal_all(SIGTERM, 0);
		stop_timer(fleetd->conf->kill_timeout);
		break;
	case 2:
		log_warnx("%d process(es) ignored SIGTERM; killing them",
		    proc_alive_count(0));
		fleetd->stop_phase = 3;
		proc_signal_all(SIGKILL, 0);
		stop_timer(fleetd->conf->kill_timeout);
		break;
	case 4:
		log_warnx("postgres is slow to stop; asking it to quit now");
		fleetd->stop_phase = 5;
		proc_signal_all(SIGQUIT, 1);
		stop_timer(fleetd->conf->kill_timeout);
		break;
	case 5:
		proc_signal_all(SIGKILL, 1);
		stop_timer(fleetd->conf->kill_timeout);
		break;
	default:
		stop_timer(fleetd->conf->kill_timeout);
		break;
	}
	fleetd_stop_check();
}

/*
 * Re-read the configuration.  On error the running one stays and err
 * says why.  Turnworkers are replaced one at a time; the other children
 * re-read the file themselves.
 */
int
fleetd_reload(char *errbuf, size_t errsz)
{
	struct fleet_config	*conf, *old = fleetd->conf;
	struct msg		 m;
	char			*errors, *nl;

	if (fleetd->state == SV_STOPPING || fleetd->state == SV_STARTING) {
		snprintf(errbuf, errsz, "cannot reload while %s",
		    fleetd_state_name(fleetd->state));
		return -1;
	}
	sd_notify("RELOADING=1");
	if ((conf = config_load(fleetd->confpath, fleetd->profile,
	    &errors)) == NULL) {
		nl = errors;
		while (nl != NULL && *nl != '\0') {
			char *line = nl;

			if ((nl = strchr(line, '\n')) != NULL)
				*nl++ = '\0';
			log_warnx("reload: %s", line);
		}
		if ((nl = strchr(errors, '\n')) != NULL)
			*nl = '\0';
		snprintf(errbuf, errsz, "configuration not reloaded: %s",
		    errors);
		free(errors);
		sd_notify("READY=1");
		return -1;
	}
	if (strcmp(conf->listen_host, old->listen_host) != 0 ||
	    (fleetd->port_override == -1 &&
	    conf->listen_port != old->listen_port))
		log_warnx("reload: a new listen address takes effect only "
		    "after a restart");
	strlcpy(conf->listen_host, old->listen_host, sizeof(conf->listen_host));
	conf->listen_port = old->listen_port;
	config_free(old);
	fleetd->conf = conf;
	log_setlevel(conf->log_level);
	proc_set_workers(conf->workers);
	proc_mark_replace();
	proc_replace_next();
	proto_msg_init(&m, MSG_RELOAD);
	proc_send_role(ROLE_GATEWAY, &m);
	proc_send_role(ROLE_LEASEMGR, &m);
	log_info("configuration reloaded from %s (profile %s)",
	    conf->path, conf->profile);
	sd_notify("READY=1");
	snprintf(errbuf, errsz, "configuration reloaded (profile %s)",
	    conf->profile);
	return 0;
}

static void
signal_cb(evutil_socket_t sig, short events, void *arg)
{
	char	 buf[512];

	(void)events;
	(void)arg;
	switch (sig) {
	case SIGCHLD:
		proc_reap();
		break;
	case SIGTERM:
	case SIGINT:
		log_info("received %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
		fleetd_stop(0, 0);
		break;
	case SIGHUP:
		log_info("received SIGHUP");
		if (fleetd_reload(buf, sizeof(buf)) == -1)
			log_warnx("%s", buf);
		break;
	default:
		break;
	}
}

static void
daemonize(void)
{
	pid_t	 pid;
	int	 fd;

	switch (pid = fork()) {
	case -1:
		err(1, "fork");
	case 0:
		break;
	default:
		_exit(0);
	}
	if (setsid() == -1)
		err(1, "setsid");
	if (chdir("/") == -1)
		err(1, "chdir");
	if ((fd = open("/dev/null", O_RDWR)) == -1)
		err(1, "/dev/null");
	dup2(fd, STDIN_FILENO);
	dup2(fd, STDOUT_FILENO);
	if (fleetd->logfile == NULL)
		dup2(fd, STDERR_FILENO);
	if (fd > STDERR_FILENO)
		close(fd);
}

/* Children that wait for the embedded database start once it is set up. */
void
fleetd_spawn_rest(void)
{
	struct proc	*p;

	if (fleetd->rest_started || fleetd->state == SV_STOPPING)
		return;
	fleetd->rest_started = 1;
	TAILQ_FOREACH(p, &fleetd->procs, entry)
		if (p->role != ROLE_POSTGRES && p->pid == -1)
			proc_spawn(p);
}

/* This node's identity, made on first start: sandboxes are recorded under it. */
static void
node_id_load(void)
{
	char	*path, *tmp, buf[64];
	uuid_t	 u;
	FILE	*fp;

	xasprintf(&path, "%s/node-id", fleetd->statedir);
	if ((fp = fopen(path, "r")) != NULL) {
		if (fgets(buf, sizeof(buf), fp) != NULL) {
			buf[strcspn(buf, "\n")] = '\0';
			if (uuid_parse(buf, u) == 0) {
				uuid_unparse_lower(u, fleetd->node_id);
				fclose(fp);
				free(path);
				return;
			}
		}
		fclose(fp);
		errx(2, "%s: not a node id; remove it to make a new one", path);
	}
	uuid_generate(u);
	uuid_unparse_lower(u, fleetd->node_id);
	xasprintf(&tmp, "%s.tmp", path);
	if ((fp = fopen(tmp, "w")) == NULL ||
	    fprintf(fp, "%s\n", fleetd->node_id) < 0 || fclose(fp) == EOF ||
	    rename(tmp, path) == -1)
		err(1, "%s", path);
	free(tmp);
	free(path);
}

/*
 * An external database must be reachable and at the schema head this
 * binary requires; only the embedded one is migrated automatically.
 */
static void
check_external_db(void)
{
	struct db	*db;
	struct db_err	 e;
	char		 msg[1024];

	db = db_new(fleetd->db_conninfo, "fleetd");
	if (db_connect(db, &e) == -1)
		errx(1, "%s", e.msg);
	if (migrate_check(db, msg, sizeof(msg)) == -1)
		errx(2, "%s", msg);
	db_free(db);
}

static void
open_listener(void)
{
	struct fleet_config	*c = fleetd->conf;
	int			 port = c->listen_port, bound;

	if (fleetd->port_override != -1)
		port = fleetd->port_override;
	if (!host_is_loopback(c->listen_host) && !fleetd->allow_public)
		errx(2, "refusing to listen on %s: not a loopback address "
		    "(use --allow-non-loopback-bind to allow it)",
		    c->listen_host);
	fleetd->listenfd = tcp_listen(c->listen_host, port, &bound,
	    fleetd->listen_name, sizeof(fleetd->listen_name));
	if (fleetd->listenfd == -1)
		err(1, "cannot listen on %s port %d", c->listen_host, port);
	c->listen_port = bound;
	snprintf(fleetd->url, sizeof(fleetd->url), "http://%s",
	    fleetd->listen_name);
}

static char *
absolute(const char *path)
{
	char	*cwd, *abs;

	if (path[0] == '/')
		return xstrdup(path);
	if ((cwd = getcwd(NULL, 0)) == NULL)
		err(1, "getcwd");
	xasprintf(&abs, "%s/%s", cwd, path);
	free(cwd);
	return abs;
}

int
main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "allow-non-loopback-bind", no_argument, NULL, 'A' },
		{ NULL, 0, NULL, 0 }
	};
	struct event	*ev_sig[4];
	int		 sigs[4] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP };
	const char	*errstr;
	char		*errors, *confpath = NULL, *statedir = NULL, *path, *real;
	pid_t		 otherpid;
	int		 ch, checkonly = 0, verbose = 0, i, fd;

	setproctitle_init(argc, argv, environ);
	fleetd = xcalloc(1, sizeof(*fleetd));
	TAILQ_INIT(&fleetd->procs);
	TAILQ_INIT(&fleetd->ctls);
	fleetd->readyfd = -1;
	fleetd->listenfd = -1;
	fleetd->port_override = -1;

	while ((ch = getopt_long(argc, argv, "c:Dd:L:nP:p:R:v", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'A':
			fleetd->allow_public = 1;
			break;
		case 'c':
			confpath = optarg;
			break;
		case 'D':
			fleetd->foreground = 1;
			break;
		case 'd':
			statedir = optarg;
			break;
		case 'L':
			fleetd->logfile = absolute(optarg);
			break;
		case 'n':
			checkonly = 1;
			break;
		case 'P':
			fleetd->port_override = strtonum(optarg, 0, 65535,
			    &errstr);
			if (errstr != NULL)
				errx(2, "port %s is %s", optarg, errstr);
			break;
		case 'p':
			fleetd->profile = xstrdup(optarg);
			break;
		case 'R':
			fleetd->readyfd = strtonum(optarg, 3, INT_MAX, &errstr);
			if (errstr != NULL)
				errx(2, "readiness fd %s is %s", optarg, errstr);
			fd_cloexec(fleetd->readyfd, 1);
			break;
		case 'v':
			verbose = 1;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();

	path = confpath ? absolute(confpath) : config_default_path();
	if ((real = realpath(path, NULL)) != NULL) {
		free(path);
		path = real;
	}
	fleetd->confpath = path;
	if ((fleetd->conf = config_load(path, fleetd->profile, &errors)) ==
	    NULL) {
		fputs(errors, stderr);
		exit(2);
	}
	if (verbose)
		fleetd->conf->log_level = LOG_LEVEL_DEBUG;
	if (checkonly) {
		fprintf(stderr, "%s: configuration OK (profile %s)\n", path,
		    fleetd->conf->profile);
		exit(0);
	}

	fleetd->statedir = statedir ? absolute(statedir) : state_dir_default();
	if (fleetd->statedir == NULL)
		errx(2, "no state directory: set FLEET_HOME or use -d");
	xasprintf(&fleetd->rundir, "%s/run", fleetd->statedir);
	if (mkdirs(fleetd->rundir, 0700) == -1)
		err(1, "%s", fleetd->rundir);
	if (chmod(fleetd->rundir, 0700) == -1)
		err(1, "%s", fleetd->rundir);
	xasprintf(&path, "%s/fleetd.pid", fleetd->rundir);
	if ((fleetd->pfh = pidfile_open(path, 0600, &otherpid)) == NULL) {
		if (errno == EEXIST) {
			if (otherpid > 0)
				errx(1, "fleetd is already running (pid %d)",
				    (int)otherpid);
			errx(1, "fleetd is already starting in %s",
			    fleetd->statedir);
		}
		err(1, "%s", path);
	}
	free(path);
	node_id_load();
	fleetd->db_conninfo = config_db_conninfo(fleetd->conf, fleetd->statedir,
	    &fleetd->db_embedded);
	if (fleetd->db_embedded)
		pg_prepare();
	else
		check_external_db();
	open_listener();

	if (fleetd->logfile != NULL) {
		if ((fd = open(fleetd->logfile, O_WRONLY | O_APPEND | O_CREAT |
		    O_CLOEXEC, 0600)) == -1)
			err(1, "%s", fleetd->logfile);
		if (!fleetd->foreground)
			daemonize();
		dup2(fd, STDERR_FILENO);
		close(fd);
	} else if (!fleetd->foreground)
		daemonize();
	log_init(fleetd->foreground || fleetd->logfile != NULL,
	    fleetd->conf->log_level);
	log_procinit("fleetd");
	setproctitle("supervisor");
	fleetd->started_ms = now_ms();
	ready_line("pid %d", (int)getpid());
	log_info("starting (version %s, pid %d, config %s, profile %s, "
	    "state %s)", FLEET_VERSION, (int)getpid(), fleetd->conf->path,
	    fleetd->conf->profile, fleetd->statedir);

	signal(SIGPIPE, SIG_IGN);
	if ((fleetd->base = event_base_new()) == NULL)
		fatalx("event_base_new");
	for (i = 0; i < 4; i++) {
		ev_sig[i] = evsignal_new(fleetd->base, sigs[i], signal_cb,
		    NULL);
		if (ev_sig[i] == NULL || evsignal_add(ev_sig[i], NULL) == -1)
			fatalx("evsignal");
	}
	if ((fleetd->ev_stop = evtimer_new(fleetd->base, stop_timer_cb,
	    NULL)) == NULL)
		fatalx("evtimer_new");
	control_init();

	if (fleetd->db_embedded)
		proc_spawn(proc_add(ROLE_POSTGRES, 0));
	proc_add(ROLE_LEASEMGR, 0);
	proc_add(ROLE_GATEWAY, 0);
	for (i = 1; i <= fleetd->conf->workers; i++)
		proc_add(ROLE_TURNWORKER, i);
	if (!fleetd->db_embedded)
		fleetd_spawn_rest();

	event_base_dispatch(fleetd->base);

	pidfile_remove(fleetd->pfh);
	control_cleanup();
	pg_cleanup();
	close(fleetd->listenfd);
	log_info("stopped");
	exit(fleetd->exit_code);
}
