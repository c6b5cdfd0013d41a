/*
 * Commands that talk to a running fleetd over run/fleetd.sock.
 */
#include <sys/types.h>
#include <sys/pidfd.h>

#include <err.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bsd/stdlib.h>
#include <jansson.h>

#include "lib/util.h"
#include "fleet.h"

#define CTL_TIMEOUT_MS	10000

int
ctl_connect(struct cli *cli)
{
	char	*path;
	int	 fd;

	xasprintf(&path, "%s/fleetd.sock", cli->rundir);
	fd = unix_connect(path);
	free(path);
	return fd;
}

static int
ctl_connect_or_exit(struct cli *cli)
{
	int	 fd;

	if ((fd = ctl_connect(cli)) == -1) {
		if (errno == ENOENT || errno == ECONNREFUSED) {
			fprintf(stderr, "fleet: fleetd is not running "
			    "(state directory %s)\n", cli->statedir);
			exit(EXIT_NOT_RUNNING);
		}
		err(1, "%s/fleetd.sock", cli->rundir);
	}
	return fd;
}

/*
 * Send one request and wait up to timeout_ms for the reply, which the
 * caller must proto_msg_clear().  Returns 0, or -1 after a warning.
 */
int
ctl_request(int fd, const char *cmd, int timeout, int wait, int timeout_ms,
    struct msg *reply)
{
	struct proto_reader	 r;
	struct msg		 m;
	char			 errbuf[256];
	int			 rc;

	proto_msg_init(&m, MSG_CTL_REQUEST);
	m.ctl_request.cmd = (char *)cmd;
	m.ctl_request.timeout = timeout;
	m.ctl_request.wait = wait;
	if (proto_send(fd, &m, errbuf, sizeof(errbuf)) == -1) {
		warnx("%s", errbuf);
		return -1;
	}
	proto_reader_init(&r);
	rc = proto_recv(fd, &r, reply, timeout_ms, errbuf, sizeof(errbuf));
	proto_reader_free(&r);
	if (rc != 1) {
		warnx("no answer from fleetd: %s", rc == 0 ?
		    "connection closed" : errbuf);
		return -1;
	}
	if (reply->type != MSG_CTL_REPLY) {
		warnx("unexpected %s from fleetd", proto_msg_name(reply->type));
		proto_msg_clear(reply);
		return -1;
	}
	return 0;
}

static int
parse_timeout(const char *s)
{
	const char	*errstr;
	int		 v;

	v = strtonum(s, 1, 86400, &errstr);
	if (errstr != NULL)
		errx(2, "timeout %s is %s (1 to 86400 seconds)", s, errstr);
	return v;
}

static void
print_duration(char *buf, size_t len, long long s)
{
	if (s < 120)
		snprintf(buf, len, "%llds", s);
	else if (s < 7200)
		snprintf(buf, len, "%lldm%02llds", s / 60, s % 60);
	else if (s < 172800)
		snprintf(buf, len, "%lldh%02lldm", s / 3600, (s / 60) % 60);
	else
		snprintf(buf, len, "%lldd%02lldh", s / 86400, (s / 3600) % 24);
}

static void
print_status(const char *text)
{
	json_t		*j, *procs, *p, *v;
	json_error_t	 jerr;
	size_t		 i;
	char		 up[32], name[40], pid[16];

	if ((j = json_loads(text, 0, &jerr)) == NULL)
		errx(1, "malformed status from fleetd: %s", jerr.text);
	print_duration(up, sizeof(up),
	    json_integer_value(json_object_get(j, "uptime_s")));
	printf("fleetd %s: %s, pid %lld, up %s, %s\n",
	    json_string_value(json_object_get(j, "version")),
	    json_string_value(json_object_get(j, "state")),
	    json_integer_value(json_object_get(j, "pid")), up,
	    json_string_value(json_object_get(j, "url")));
	printf("profile %s, config %s\n",
	    json_string_value(json_object_get(j, "profile")),
	    json_string_value(json_object_get(j, "config")));
	if ((v = json_object_get(j, "turns")) != NULL)
		printf("turns: %lld active, %lld queued\n",
		    json_integer_value(json_object_get(v, "active")),
		    json_integer_value(json_object_get(v, "queued")));
	printf("\n%-14s %-8s %-9s %-8s %-8s %s\n", "ROLE", "PID", "STATE",
	    "UPTIME", "RESTARTS", "LAST EXIT");
	procs = json_object_get(j, "processes");
	json_array_foreach(procs, i, p) {
		const char *role = json_string_value(json_object_get(p, "role"));
		json_int_t inst = json_integer_value(json_object_get(p,
		    "instance"));

		if (inst > 0)
			snprintf(name, sizeof(name), "%s %lld", role, inst);
		else
			snprintf(name, sizeof(name), "%s", role);
		v = json_object_get(p, "pid");
		if (json_is_integer(v))
			snprintf(pid, sizeof(pid), "%lld",
			    json_integer_value(v));
		else
			snprintf(pid, sizeof(pid), "-");
		print_duration(up, sizeof(up),
		    json_integer_value(json_object_get(p, "uptime_s")));
		v = json_object_get(p, "last_exit");
		printf("%-14s %-8s %-9s %-8s %-8lld %s\n", name, pid,
		    json_string_value(json_object_get(p, "state")),
		    json_is_integer(json_object_get(p, "pid")) ? up : "-",
		    json_integer_value(json_object_get(p, "restarts")),
		    json_is_string(v) ? json_string_value(v) : "-");
	}
	json_decref(j);
}

int
cmd_status(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 }
	};
	struct msg	 reply;
	int		 ch, asjson = 0, fd;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			asjson = 1;
			break;
		default:
			cmd_usage("status");
		}
	}
	if (optind != argc)
		cmd_usage("status");
	fd = ctl_connect_or_exit(cli);
	if (ctl_request(fd, "status", 0, 0, CTL_TIMEOUT_MS, &reply) == -1)
		return 1;
	if (!reply.ctl_reply.ok || reply.ctl_reply.json == NULL)
		errx(1, "status: %s", reply.ctl_reply.message);
	if (asjson)
		printf("%s\n", reply.ctl_reply.json);
	else
		print_status(reply.ctl_reply.json);
	proto_msg_clear(&reply);
	close(fd);
	return 0;
}

static int
simple(struct cli *cli, const char *cmd, int timeout, int wait, int wait_ms)
{
	struct msg	 reply;
	int		 fd, ok;

	fd = ctl_connect_or_exit(cli);
	if (ctl_request(fd, cmd, timeout, wait, wait_ms, &reply) == -1)
		return 1;
	ok = reply.ctl_reply.ok;
	if (ok)
		printf("%s\n", reply.ctl_reply.message);
	else
		fprintf(stderr, "fleet: %s: %s\n", cmd,
		    reply.ctl_reply.message);
	proto_msg_clear(&reply);
	close(fd);
	return ok ? 0 : 1;
}

int
cmd_drain(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "wait", no_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 }
	};
	int	 ch, wait = 0, timeout = 0;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'w':
			wait = 1;
			break;
		case 't':
			timeout = parse_timeout(optarg);
			break;
		default:
			cmd_usage("drain");
		}
	}
	if (optind != argc)
		cmd_usage("drain");
	/* fleetd answers by its own deadline; leave it room. */
	return simple(cli, "drain", timeout, wait,
	    wait ? ((timeout ? timeout : 86400) + 10) * 1000 : CTL_TIMEOUT_MS);
}

int
cmd_undrain(struct cli *cli, int argc, char **argv)
{
	(void)argv;
	if (argc != 1)
		cmd_usage("undrain");
	return simple(cli, "undrain", 0, 0, CTL_TIMEOUT_MS);
}

int
cmd_reload(struct cli *cli, int argc, char **argv)
{
	(void)argv;
	if (argc != 1)
		cmd_usage("reload");
	return simple(cli, "reload", 0, 0, CTL_TIMEOUT_MS);
}

/*
 * Wait until pid has exited (a zombie counts: its parent may be slow to
 * reap it).  Returns 0, or -1 when deadline passes first.
 */
int
pid_wait_gone(pid_t pid, int64_t deadline)
{
	struct pollfd	 pfd;
	int		 fd, rc;

	if ((fd = pidfd_open(pid, 0)) == -1)
		return errno == ESRCH ? 0 : -1;
	pfd.fd = fd;
	pfd.events = POLLIN;
	do {
		int64_t left = deadline - now_ms();

		rc = poll(&pfd, 1, left < 0 ? 0 : (int)left);
	} while (rc == -1 && errno == EINTR);
	close(fd);
	return rc == 1 ? 0 : -1;
}

int
cmd_stop(struct cli *cli, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 }
	};
	struct proto_reader	 r;
	struct msg		 reply, m;
	char			 errbuf[256];
	int64_t			 deadline;
	pid_t			 pid = -1;
	int			 ch, fd, timeout = 0, rc;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 't':
			timeout = parse_timeout(optarg);
			break;
		default:
			cmd_usage("stop");
		}
	}
	if (optind != argc)
		cmd_usage("stop");
	fd = ctl_connect_or_exit(cli);
	if (ctl_request(fd, "stop", timeout, 0, CTL_TIMEOUT_MS, &reply) == -1)
		return 1;
	if (!reply.ctl_reply.ok)
		errx(1, "stop: %s", reply.ctl_reply.message);
	sscanf(reply.ctl_reply.message, "stopping (pid %d)", &pid);
	fprintf(stderr, "fleet: %s\n", reply.ctl_reply.message);
	proto_msg_clear(&reply);

	/*
	 * fleetd closes this connection as it exits.  Its own deadlines
	 * (shutdown, then kill) bound the wait; ours only guards a hang.
	 */
	if (timeout == 0)
		timeout = 600;
	deadline = now_ms() + (int64_t)(timeout + 120) * 1000;
	proto_reader_init(&r);
	rc = proto_recv(fd, &r, &m, (int)(deadline - now_ms()), errbuf,
	    sizeof(errbuf));
	proto_reader_free(&r);
	close(fd);
	if (rc == 1) {
		proto_msg_clear(&m);
		errx(1, "stop: unexpected message from fleetd");
	}
	if (rc == -1 && strcmp(errbuf, "connection closed") != 0)
		errx(1, "stop: fleetd did not stop: %s", errbuf);
	if (pid > 0 && pid_wait_gone(pid, deadline) == -1)
		errx(1, "stop: fleetd (pid %d) is still running", (int)pid);
	printf("fleetd stopped\n");
	return 0;
}
