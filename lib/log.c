/*
 * Log lines look like
 *	2026-11-29T13:35:13.123456Z fleetd[1234]: gateway: warning: text
 * and are written with one write(2) each, so that processes sharing one
 * log file (opened O_APPEND on stderr) never interleave inside a line.
 */
#include <sys/types.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <bsd/string.h>

#include "log.h"

#define LOG_LINE_MAX	8192

static int		 log_to_stderr = 1;
static enum log_level	 log_level = LOG_LEVEL_INFO;
static char		 log_role[64] = "fleetd";

static void	vlog(int, const char *, const char *, va_list)
		    __attribute__((format(printf, 3, 0)));

void
log_init(int to_stderr, enum log_level level)
{
	log_to_stderr = to_stderr;
	log_level = level;
	if (!to_stderr)
		openlog("fleetd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void
log_procinit(const char *role)
{
	strlcpy(log_role, role, sizeof(log_role));
	if (!log_to_stderr) {
		closelog();
		openlog("fleetd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	}
}

void
log_setlevel(enum log_level level)
{
	log_level = level;
}

enum log_level
log_getlevel(void)
{
	return log_level;
}

int
log_parse_level(const char *s, enum log_level *level)
{
	if (strcmp(s, "warn") == 0)
		*level = LOG_LEVEL_WARN;
	else if (strcmp(s, "info") == 0)
		*level = LOG_LEVEL_INFO;
	else if (strcmp(s, "debug") == 0)
		*level = LOG_LEVEL_DEBUG;
	else
		return -1;
	return 0;
}

const char *
log_level_name(enum log_level level)
{
	switch (level) {
	case LOG_LEVEL_WARN:
		return "warn";
	case LOG_LEVEL_INFO:
		return "info";
	case LOG_LEVEL_DEBUG:
		return "debug";
	}
	return "?";
}

static void
vlog(int pri, const char *errstr, const char *fmt, va_list ap)
{
	char		 msg[LOG_LINE_MAX], line[LOG_LINE_MAX + 256];
	const char	*tag;
	struct timespec	 ts;
	struct tm	 tm;
	int		 n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (errstr != NULL) {
		strlcat(msg, ": ", sizeof(msg));
		strlcat(msg, errstr, sizeof(msg));
	}
	if (!log_to_stderr) {
		syslog(pri, "%s: %s", log_role, msg);
		return;
	}
	switch (pri) {
	case LOG_CRIT:
		tag = "fatal: ";
		break;
	case LOG_WARNING:
		tag = "warning: ";
		break;
	case LOG_DEBUG:
		tag = "debug: ";
		break;
	default:
		tag = "";
		break;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
	    "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ fleetd[%ld]: %s: %s%s\n",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000, (long)getpid(),
	    log_role, tag, msg);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line)) {
		n = sizeof(line) - 1;
		line[n - 1] = '\n';
	}
	(void)write(STDERR_FILENO, line, n);
}

void
log_warn(const char *fmt, ...)
{
	va_list	 ap;
	int	 saved = errno;

	va_start(ap, fmt);
	vlog(LOG_WARNING, strerror(saved), fmt, ap);
	va_end(ap);
	errno = saved;
}

void
log_warnx(const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	vlog(LOG_WARNING, NULL, fmt, ap);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list	 ap;

	if (log_level < LOG_LEVEL_INFO)
		return;
	va_start(ap, fmt);
	vlog(LOG_INFO, NULL, fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list	 ap;

	if (log_level < LOG_LEVEL_DEBUG)
		return;
	va_start(ap, fmt);
	vlog(LOG_DEBUG, NULL, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list	 ap;
	int	 saved = errno;

	va_start(ap, fmt);
	vlog(LOG_CRIT, strerror(saved), fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, NULL, fmt, ap);
	va_end(ap);
	exit(1);
}
