/*
 * The latency of a sandbox lease: acquire to grant, through the real
 * lease manager of a running fleetd.  With sandbox_warm >= 1 and a
 * settle pause between leases (for the refill), grants come from warm
 * kernels; with sandbox_warm = 0 each one boots.
 *
 * usage: lease_bench -r rundir [-n count] [-s settle_ms] [-w workspace]
 */
#include <sys/types.h>

#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bsd/stdlib.h>
#include <event2/event.h>

#include "lib/log.h"
#include "lib/util.h"
#include "turnworker/lease.h"

struct result {
	int		 done;
	int		 ok;
	int64_t		 boot_ms;
	int		 kin;
	int		 kout;
};

static void
granted(struct lease_client *lc, int kin, int kout, int64_t boot, void *arg)
{
	struct result	*r = arg;

	(void)lc;
	r->done = r->ok = 1;
	r->boot_ms = boot;
	r->kin = kin;
	r->kout = kout;
}

static void
refused(struct lease_client *lc, const char *code, const char *msg, void *arg)
{
	struct result	*r = arg;

	(void)lc;
	warnx("refused: %s: %s", code, msg);
	r->done = 1;
}

static void
lost(struct lease_client *lc, void *arg)
{
	(void)lc;
	((struct result *)arg)->done = 1;
}

static const struct lease_ops ops = { granted, refused, lost };

static int
cmp(const void *a, const void *b)
{
	double	 x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char *argv[])
{
	struct event_base	*base;
	struct lease_client	*lc;
	struct result		 r;
	struct timespec		 settle;
	const char		*rundir = NULL, *ws =
				    "7793d159-223b-5feb-a99c-f7696debb478";
	const char		*errstr;
	double			*lat, *boot;
	int			 ch, n = 50, settle_ms = 100, i;
	int64_t			 t0;

	log_init(1, LOG_LEVEL_WARN);
	while ((ch = getopt(argc, argv, "n:r:s:w:")) != -1) {
		switch (ch) {
		case 'n':
			n = strtonum(optarg, 2, 100000, &errstr);
			if (errstr != NULL)
				errx(2, "count %s", errstr);
			break;
		case 'r':
			rundir = optarg;
			break;
		case 's':
			settle_ms = strtonum(optarg, 0, 60000, &errstr);
			if (errstr != NULL)
				errx(2, "settle %s", errstr);
			break;
		case 'w':
			ws = optarg;
			break;
		default:
			errx(2, "usage: lease_bench -r rundir [-n count] "
			    "[-s settle_ms] [-w workspace]");
		}
	}
	if (rundir == NULL)
		errx(2, "-r rundir is required");
	if ((base = event_base_new()) == NULL)
		errx(1, "event_base_new");
	lat = xcalloc(n, sizeof(*lat));
	boot = xcalloc(n, sizeof(*boot));
	settle.tv_sec = settle_ms / 1000;
	settle.tv_nsec = (settle_ms % 1000) * 1000000L;
	for (i = 0; i < n; i++) {
		memset(&r, 0, sizeof(r));
		t0 = now_us();
		lc = lease_acquire(base, rundir, ws, "", 60000, &ops, &r);
		while (!r.done)
			event_base_loop(base, EVLOOP_ONCE);
		if (!r.ok)
			errx(1, "lease %d failed", i);
		lat[i] = (now_us() - t0) / 1000.0;
		boot[i] = r.boot_ms;
		close(r.kin);
		close(r.kout);
		lease_release(lc);
		nanosleep(&settle, NULL);
	}
	qsort(lat, n, sizeof(*lat), cmp);
	qsort(boot, n, sizeof(*boot), cmp);
	printf("{\"n\":%d,\"acquire_ms_p50\":%.2f,\"acquire_ms_p99\":%.2f,"
	    "\"boot_ms_p50\":%.0f}\n", n, lat[n / 2], lat[(n * 99) / 100],
	    boot[n / 2]);
	event_base_free(base);
	free(lat);
	free(boot);
	return 0;
}
