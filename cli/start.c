/*
 * fleet start: run fleetd and wait until it is ready, or say why not.
 *
 * fleetd checks its configuration and opens its listener before it
 * daemonizes, so those errors reach our stderr and its exit status is
 * ours.  After that it reports on a pipe: "pid N", then "ready URL" or
 * "fail CODE MESSAGE".
 */
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/stdlib.h>
#include <bsd/string.h>

#include "lib/util.h"
#include "fleet.h"

#ifndef FLEET_SBINDIR
#define FLEET_SBINDIR	"/usr/local/sbin"
#endif

#define START_TIMEOUT	60

/* fleetd beside us (source tree), in ../sbin (install), or compiled in. */
static char *
fleetd_path(void)
{
	char	 exe[PATH_MAX], *slash, *path;
	ssize_t	 n;

	if ((path = getenv("FLEETD")) != NULL && *path != '\0')
		return xstrdup(path);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL) {
			*slash = '\0';
			xasprintf(&path, "%s/fleetd", exe);
			if (access(path, X_OK) == 0)
				return path;
			free(path);
			xasprintf(&path, "%s/../sbin/fleetd", exe);
			if (access(path, X_OK) == 0)
				return path;
			free(path);
		}
	}
	return xstrdup(FLEET_SBINDIR "/fleetd");
}

static void
already_running(struct cli *cli)
{
	struct msg	 reply;
	int		 fd;
	char		 *p;

	if ((fd = ctl_connect(cli)) == -1)
		return;
	if (ctl_request(fd, "status", 0, 0, 5000, &reply) == 0) {
		if (reply.ctl_reply.json != NULL &&
		    (p = strstr(reply.ctl_reply.json, "\"pid\":")) != NULL)
			errx(1, "fleetd is already running (pid %d, %s)",
			    atoi(p + 6), reply.ctl_reply.message);
		proto_msg_clear(&reply);
	}
	errx(1, "fleetd is already running in %s", cli->statedir);
}

/* Read one line from fd before deadline; returns its length, 0 at EOF. */
static int
read_line(int fd, char *buf, size_t len, int64_t deadline)
{
	struct pollfd	 pfd = { fd, POLLIN, 0 };
	size_t		 n = 0;
	ssize_t		 r;
	int		 rc;

	while (n < len - 1) {
		int64_t left = deadline - now_ms();

		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		rc = poll(&pfd, 1, (int)left);
		if (rc == -1 && errno == EINTR)
			continue;
		if (rc <= 0) {
			errno = rc == 0 ? ETIMEDOUT : errno;
			return -1;
		}
		if ((r = read(fd, buf + n, 1)) == -1) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return (int)n;
}

/* Startup failed after fleetd daemonized: do not leave it half up. */
static void
stop_fleetd(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	if (pid_wait_gone(pid, now_ms() + 30000) == -1) {
		kill(pid, SIGKILL);
		pid_wait_gone(pid, now_ms() + 5000);
	}
}

int
cmd_start(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "allow-non-loopback-bind", no_argument, NULL, 'A' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "port", required_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 }
	};
	const char	*errstr, *args[20];
	char		*fleetd, *logdir, *logfile, line[1100], fdarg[16];
	char		 portarg[16];
	int64_t		 deadline;
	pid_t		 child, daemon_pid = -1;
	int		 ch, nargs = 0, foreground = 0, allow = 0, port = -1;
	int		 timeout = START_TIMEOUT, p[2], status, n, code;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'A':
			allow = 1;
			break;
		case 'f':
			foreground = 1;
			break;
		case 'P':
			port = strtonum(optarg, 0, 65535, &errstr);
			if (errstr != NULL)
				errx(2, "port %s is %s", optarg, errstr);
			break;
		case 't':
			timeout = strtonum(optarg, 1, 86400, &errstr);
			if (errstr != NULL)
				errx(2, "timeout %s is %s", optarg, errstr);
			break;
		default:
			cmd_usage("start");
		}
	}
	if (optind != argc)
		cmd_usage("start");

	if (mkdirs(cli->statedir, 0700) == -1)
		err(1, "%s", cli->statedir);
	already_running(cli);
	fleetd = fleetd_path();

	args[nargs++] = "fleetd";
	args[nargs++] = "-c";
	args[nargs++] = cli->confpath;
	args[nargs++] = "-d";
	args[nargs++] = cli->statedir;
	if (cli->profile != NULL) {
		args[nargs++] = "-p";
		args[nargs++] = cli->profile;
	}
	if (port != -1) {
		snprintf(portarg, sizeof(portarg), "%d", port);
		args[nargs++] = "-P";
		args[nargs++] = portarg;
	}
	if (allow)
		args[nargs++] = "--allow-non-loopback-bind";
	if (foreground) {
		args[nargs++] = "-D";
		args[nargs] = NULL;
		execv(fleetd, (char **)args);
		err(1, "%s", fleetd);
	}

	xasprintf(&logdir, "%s/log", cli->statedir);
	if (mkdirs(logdir, 0700) == -1)
		err(1, "%s", logdir);
	xasprintf(&logfile, "%s/fleetd.log", logdir);
	if (pipe2(p, O_CLOEXEC) == -1)
		err(1, "pipe");
	snprintf(fdarg, sizeof(fdarg), "%d", p[1]);
	args[nargs++] = "-L";
	args[nargs++] = logfile;
	args[nargs++] = "-R";
	args[nargs++] = fdarg;
	args[nargs] = NULL;

	switch (child = fork()) {
	case -1:
		err(1, "fork");
	case 0:
		close(p[0]);
		if (fcntl(p[1], F_SETFD, 0) == -1)
			err(1, "fcntl");
		execv(fleetd, (char **)args);
		err(1, "%s", fleetd);
	}
	close(p[1]);

	deadline = now_ms() + (int64_t)timeout * 1000;
	for (;;) {
		n = read_line(p[0], line, sizeof(line), deadline);
		if (n == -1 && errno == ETIMEDOUT) {
			warnx("fleetd did not become ready within %d s; "
			    "stopping it (see %s)", timeout, logfile);
			stop_fleetd(daemon_pid);
			return 1;
		}
		if (n <= 0)
			break;
		if (strncmp(line, "pid ", 4) == 0)
			daemon_pid = strtonum(line + 4, 1, INT_MAX, &errstr);
		else if (strncmp(line, "ready ", 6) == 0) {
			printf("%s\n", line + 6);
			/* Our child only daemonized fleetd and is gone. */
			waitpid(child, &status, 0);
			return 0;
		} else if (strncmp(line, "fail ", 5) == 0) {
			code = atoi(line + 5);
			warnx("fleetd failed to start: %s",
			    strchr(line + 5, ' ') ? strchr(line + 5, ' ') + 1 :
			    line + 5);
			stop_fleetd(daemon_pid);
			return code > 0 ? code : 1;
		}
	}
	/* The pipe closed without a verdict: see how fleetd ended. */
	while (waitpid(child, &status, 0) == -1 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		errx(1, "fleetd was killed by signal %d", WTERMSIG(status));
	warnx("fleetd exited during startup; see %s", logfile);
	return 1;
}
