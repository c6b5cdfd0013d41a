/*
 * Small helpers every process uses: allocation that never returns NULL,
 * clocks, descriptors, addresses and paths.
 */
#ifndef FLEET_UTIL_H
#define FLEET_UTIL_H

#include <sys/types.h>

#include <stddef.h>
#include <stdint.h>

#define FLEET_VERSION	"0.1.0"

void	*xmalloc(size_t);
void	*xcalloc(size_t, size_t);
void	*xreallocarray(void *, size_t, size_t);
char	*xstrdup(const char *);
char	*xstrndup(const char *, size_t);
int	 xasprintf(char **, const char *, ...)
	    __attribute__((format(printf, 2, 3)));

int64_t	 now_ms(void);
int64_t	 now_us(void);
int64_t	 wall_ms(void);

int	 fd_nonblock(int);
int	 fd_cloexec(int, int);

int	 hostport_parse(const char *, char *, size_t, int *);
int	 host_is_loopback(const char *);
int	 tcp_listen(const char *, int, int *, char *, size_t);

int	 mkdirs(const char *, mode_t);
int	 unix_listen(const char *, mode_t);
int	 unix_connect(const char *);

struct event;
void	 timer_add_ms(struct event *, int64_t);

struct evbuffer;
char	*buf_take(struct evbuffer *);

#endif
