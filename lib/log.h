/*
 * Logging for fleetd and its children: one line per event, carrying the
 * process role and pid, to stderr (or a log file on stderr) or to syslog.
 */
#ifndef FLEET_LOG_H
#define FLEET_LOG_H

#include <stdarg.h>

enum log_level {
	LOG_LEVEL_WARN,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG
};

void	log_init(int, enum log_level);
void	log_procinit(const char *);
void	log_setlevel(enum log_level);
enum log_level log_getlevel(void);
int	log_parse_level(const char *, enum log_level *);
const char *log_level_name(enum log_level);

void	log_warn(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_warnx(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_info(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_debug(const char *, ...) __attribute__((format(printf, 1, 2)));
void	fatal(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));
void	fatalx(const char *, ...)
	    __attribute__((format(printf, 1, 2), noreturn));

#endif
