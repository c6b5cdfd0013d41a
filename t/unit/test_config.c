/*
 * fleet.ini: defaults, values, and every error reported as FILE:LINE.
 */
#include <sys/types.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/config.h"
#include "tap.h"

static char	 path[] = "/tmp/fleet-test-config-XXXXXX";

static struct fleet_config *
load(const char *text, const char *profile, char **errors)
{
	FILE	*fp;

	if ((fp = fopen(path, "w")) == NULL)
		abort();
	fputs(text, fp);
	fclose(fp);
	return config_load(path, profile, errors);
}

static void
expect_error(const char *text, const char *profile, int line,
    const char *needle, const char *what)
{
	struct fleet_config	*c;
	char			*errors, want[512];

	c = load(text, profile, &errors);
	ok(c == NULL, "%s: rejected", what);
	if (line > 0)
		snprintf(want, sizeof(want), "%s:%d: %s", path, line, needle);
	else
		snprintf(want, sizeof(want), "%s", needle);
	like(errors, want, "%s: message", what);
	free(errors);
	config_free(c);
}

int
main(void)
{
	struct fleet_config	*c;
	char			*errors, longline[400];
	int			 fd;

	if ((fd = mkstemp(path)) == -1)
		abort();
	close(fd);

	c = load("[fleet]\ndefault_profile = dev\n[profile dev]\n", NULL,
	    &errors);
	if (!ok(c != NULL, "empty profile loads"))
		printf("# %s", errors);
	if (c != NULL) {
		is_str(c->profile, "dev", "default_profile selects it");
		is_str(c->listen_host, "127.0.0.1", "default listen host");
		is_int(c->listen_port, 8000, "default port");
		is_int(c->workers, 2, "default workers");
		is_int(c->shutdown_timeout, 30, "default shutdown_timeout");
		is_int(c->kill_timeout, 5, "default kill_timeout");
		is_int(c->log_level, LOG_LEVEL_INFO, "default log_level");
	}
	config_free(c);

	c = load("; comment\n# another\n[fleet]\ndefault_profile = a\n"
	    "[profile a]\nworkers = 7 ; inline comment\nlisten = [::1]:9000\n"
	    "log_level = debug\n[profile b]\nworkers = 1\n", "b", &errors);
	ok(c != NULL, "two profiles, -p picks the second");
	if (c != NULL) {
		is_str(c->profile, "b", "profile b");
		is_int(c->workers, 1, "b's workers");
	}
	config_free(c);
	c = load("[fleet]\ndefault_profile = a\n[profile a]\nworkers = 7 ; x\n"
	    "listen = [::1]:9000\nlog_level = debug\n", NULL, &errors);
	if (ok(c != NULL, "values parse")) {
		is_int(c->workers, 7, "workers with an inline comment");
		is_str(c->listen_host, "::1", "bracketed IPv6 host");
		is_int(c->listen_port, 9000, "its port");
		is_int(c->log_level, LOG_LEVEL_DEBUG, "log_level debug");
	}
	config_free(c);

	c = load("[profile default]\n", NULL, &errors);
	if (!ok(c != NULL, "no [fleet] section: profile 'default'"))
		printf("# %s", errors);
	config_free(c);

	expect_error("[fleet]\ndefault_profile = a\n[profile a]\n"
	    "wrokers = 3\n", NULL, 4, "unknown key 'wrokers' in [profile a]",
	    "misspelt key");
	expect_error("[fleet]\ndefault_profile = a\n[profile a]\n"
	    "workers = lots\n", NULL, 4, "workers: 'lots' is invalid",
	    "non-numeric value");
	expect_error("[profile default]\nworkers = 0\n", NULL, 2,
	    "workers: '0' is too small", "value below range");
	expect_error("[profile default]\nworkers = 65\n", NULL, 2,
	    "workers: '65' is too large", "value above range");
	expect_error("[profile default]\nheartbeat_seconds = 60\n", NULL, 2,
	    "heartbeat_seconds: '60' is too large",
	    "a heartbeat as long as the HTTP timeout");
	expect_error("[profile default]\nlisten = localhost\n", NULL, 2,
	    "listen: 'localhost' is not HOST:PORT", "listen without a port");
	expect_error("[profile default]\nlisten = 1.2.3.4:70000\n", NULL, 2,
	    "listen: '1.2.3.4:70000' is not HOST:PORT", "port out of range");
	expect_error("[profile default]\nlog_level = loud\n", NULL, 2,
	    "log_level: 'loud' is not one of warn, info, debug",
	    "bad log level");
	expect_error("[profile default]\n[nonsense]\nx = 1\n", NULL, 2,
	    "unknown section [nonsense]", "unknown section");
	expect_error("[fleet]\ncolour = blue\n[profile default]\n", NULL, 2,
	    "unknown key 'colour' in [fleet]", "unknown key in [fleet]");
	expect_error("[fleet]\ndefault_profile = prod\n[profile dev]\n",
	    NULL, 2, "default_profile 'prod' has no [profile prod] section",
	    "default profile missing");
	expect_error("[profile dev]\n", "prod", 0,
	    "no [profile prod] section", "-p names a missing profile");
	expect_error("[profile default]\nworkers = 2\nworkers = 3\n", NULL,
	    3, "duplicate key 'workers' in [profile default] (first at "
	    "line 2)", "duplicate key");
	expect_error("[fleet]\ndefault_profile = a\n[profile a]\n"
	    "[profile b]\nworkers = x\n", NULL, 5, "workers: 'x'",
	    "error in a profile not in use is still an error");
	expect_error("[profile default]\nthis line has no equals\n", NULL, 2,
	    "syntax error", "syntax error");
	memset(longline, 'a', sizeof(longline));
	memcpy(longline, "[profile default]\nworkers = ", 28);
	longline[sizeof(longline) - 2] = '\n';
	longline[sizeof(longline) - 1] = '\0';
	expect_error(longline, NULL, 2, "line longer than", "overlong line");
	expect_error("[profile default]\nkill_timeout = 1\nworkers = 0\n"
	    "log_level = x\n", NULL, 4, "log_level", "several errors, all "
	    "reported");

	c = config_load("/nonexistent/fleet.ini", NULL, &errors);
	ok(c == NULL, "missing file");
	like(errors, "/nonexistent/fleet.ini: No such file", "says so");
	free(errors);

	unlink(path);
	return done_testing();
}
