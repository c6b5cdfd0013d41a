/*
 * leasetool: a lease manager client for the tests.  Acquires one lease
 * and reports, one JSON line each on stdout, what happened:
 *	{"event":"granted","ms":T,"boot_ms":B,"lease":ID}
 *	{"event":"refused","ms":T,"code":C,"message":M}
 *	{"event":"output","text":...}	(with -c: the kernel's events)
 *	{"event":"lost","ms":T}
 *	{"event":"released","ms":T}
 * T is milliseconds since the epoch.  With -H it holds the lease that
 * long; with -c it runs code in the kernel first; without either it
 * holds until its stdin closes.
 *
 * usage: leasetool -r rundir [-w workspace] [-R run] [-d deadline_ms]
 *	    [-H hold_ms] [-c code]
 */
#include <sys/types.h>

#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bsd/stdlib.h>
#include <event2/event.h>
#include <jansson.h>

#include "lib/log.h"
#include "lib/util.h"
#include "turnworker/lease.h"

static struct event_base	*base;
static struct lease_client	*lc;
static const char		*code;
static int64_t			 hold_ms = -1;
static int			 kin = -1, kout = -1, status = 0;

static void
emit(json_t *j)
{
	char	*s;

	json_object_set_new(j, "ms", json_integer(wall_ms()));
	s = json_dumps(j, JSON_COMPACT);
	printf("%s\n", s);
	fflush(stdout);
	free(s);
	json_decref(j);
}

static void
finish(void)
{
	lease_release(lc);
	lc = NULL;
	emit(json_pack("{s:s}", "event", "released"));
	event_base_loopexit(base, NULL);
}

static void
hold_done(evutil_socket_t fd, short events, void *arg)
{
	(void)fd;
	(void)events;
	(void)arg;
	finish();
}

static void
stdin_closed(evutil_socket_t fd, short events, void *arg)
{
	char	 buf[256];

	(void)events;
	(void)arg;
	if (read(fd, buf, sizeof(buf)) > 0)
		return;
	finish();
}

/* Run code in the kernel and relay its events until done. */
static void
run_code(void)
{
	char	*req, line[65536];
	FILE	*fp;
	json_t	*j;

	j = json_pack("{s:s, s:s, s:s}", "type", "execute", "id", "t1",
	    "code", code);
	req = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (dprintf(kin, "%s\n", req) < 0)
		err(1, "write to kernel");
	free(req);
	if ((fp = fdopen(kout, "r")) == NULL)
		err(1, "fdopen");
	kout = -1;
	while (fgets(line, sizeof(line), fp) != NULL) {
		line[strcspn(line, "\n")] = '\0';
		emit(json_pack("{s:s, s:s}", "event", "output", "text", line));
		if (strstr(line, "\"event\":\"done\"") != NULL)
			break;
	}
	fclose(fp);
}

static void
granted(struct lease_client *c, int in, int out, int64_t boot_ms, void *arg)
{
	struct event	*ev;

	(void)arg;
	kin = in;
	kout = out;
	emit(json_pack("{s:s, s:I, s:s}", "event", "granted", "boot_ms",
	    (json_int_t)boot_ms, "lease", lease_id(c)));
	if (code != NULL) {
		run_code();
		if (hold_ms < 0) {
			finish();
			return;
		}
	}
	if (hold_ms >= 0) {
		ev = evtimer_new(base, hold_done, NULL);
		timer_add_ms(ev, hold_ms);
	} else {
		ev = event_new(base, STDIN_FILENO, EV_READ | EV_PERSIST,
		    stdin_closed, NULL);
		event_add(ev, NULL);
	}
}

static void
refused(struct lease_client *c, const char *ecode, const char *message,
    void *arg)
{
	(void)c;
	(void)arg;
	emit(json_pack("{s:s, s:s, s:s}", "event", "refused", "code", ecode,
	    "message", message));
	status = 3;
	lease_release(lc);
	lc = NULL;
	event_base_loopexit(base, NULL);
}

static void
lost(struct lease_client *c, void *arg)
{
	(void)c;
	(void)arg;
	emit(json_pack("{s:s}", "event", "lost"));
	status = 4;
	lease_release(lc);
	lc = NULL;
	event_base_loopexit(base, NULL);
}

static const struct lease_ops ops = { granted, refused, lost };

int
main(int argc, char *argv[])
{
	const char	*rundir = NULL, *ws = "", *run = "", *errstr;
	int64_t		 deadline = 60000;
	int		 ch;

	log_init(1, LOG_LEVEL_WARN);
	while ((ch = getopt(argc, argv, "c:d:H:R:r:w:")) != -1) {
		switch (ch) {
		case 'c':
			code = optarg;
			break;
		case 'd':
			deadline = strtonum(optarg, 0, 3600000, &errstr);
			if (errstr != NULL)
				errx(2, "deadline %s", errstr);
			break;
		case 'H':
			hold_ms = strtonum(optarg, 0, 3600000, &errstr);
			if (errstr != NULL)
				errx(2, "hold %s", errstr);
			break;
		case 'R':
			run = optarg;
			break;
		case 'r':
			rundir = optarg;
			break;
		case 'w':
			ws = optarg;
			break;
		default:
			errx(2, "usage: leasetool -r rundir [-w workspace] "
			    "[-R run] [-d ms] [-H ms] [-c code]");
		}
	}
	if (rundir == NULL)
		errx(2, "-r rundir is required");
	if ((base = event_base_new()) == NULL)
		errx(1, "event_base_new");
	lc = lease_acquire(base, rundir, ws, run, deadline, &ops, NULL);
	event_base_dispatch(base);
	if (kin != -1)
		close(kin);
	if (kout != -1)
		close(kout);
	event_base_free(base);
	return status;
}
