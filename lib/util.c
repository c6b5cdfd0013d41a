#include <sys/types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <bsd/stdlib.h>
#include <bsd/string.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "log.h"
#include "util.h"

void *
xmalloc(size_t size)
{
	void	*p;

	if (size == 0)
		fatalx("xmalloc: zero size");
	if ((p = malloc(size)) == NULL)
		fatal("xmalloc: allocating %zu bytes", size);
	return p;
}

void *
xcalloc(size_t nmemb, size_t size)
{
	void	*p;

	if (nmemb == 0 || size == 0)
		fatalx("xcalloc: zero size");
	if ((p = calloc(nmemb, size)) == NULL)
		fatal("xcalloc: allocating %zu * %zu bytes", nmemb, size);
	return p;
}

void *
xreallocarray(void *old, size_t nmemb, size_t size)
{
	void	*p;

	if (nmemb == 0 || size == 0)
		fatalx("xreallocarray: zero size");
	if ((p = reallocarray(old, nmemb, size)) == NULL)
		fatal("xreallocarray: allocating %zu * %zu bytes", nmemb, size);
	return p;
}

char *
xstrdup(const char *s)
{
	char	*p;

	if ((p = strdup(s)) == NULL)
		fatal("xstrdup");
	return p;
}

char *
xstrndup(const char *s, size_t n)
{
	char	*p;

	if ((p = strndup(s, n)) == NULL)
		fatal("xstrndup");
	return p;
}

int
xasprintf(char **ret, const char *fmt, ...)
{
	va_list	 ap;
	int	 n;

	va_start(ap, fmt);
	n = vasprintf(ret, fmt, ap);
	va_end(ap);
	if (n == -1)
		fatal("xasprintf");
	return n;
}

int64_t
now_ms(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
now_us(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
wall_ms(void)
{
	struct timespec	 ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
fd_nonblock(int fd)
{
	int	 flags;

	if ((flags = fcntl(fd, F_GETFL)) == -1)
		return -1;
	return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int
fd_cloexec(int fd, int on)
{
	int	 flags;

	if ((flags = fcntl(fd, F_GETFD)) == -1)
		return -1;
	if (on)
		flags |= FD_CLOEXEC;
	else
		flags &= ~FD_CLOEXEC;
	return fcntl(fd, F_SETFD, flags);
}

/*
 * Split "host:port", "[v6]:port" or ":port" (meaning 127.0.0.1).
 */
int
hostport_parse(const char *s, char *host, size_t hostsz, int *port)
{
	const char	*colon, *errstr, *h;
	size_t		 hlen;

	if ((colon = strrchr(s, ':')) == NULL)
		return -1;
	h = s;
	hlen = colon - s;
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	} else if (memchr(h, ':', hlen) != NULL)
		return -1;
	if (hlen == 0) {
		h = "127.0.0.1";
		hlen = strlen(h);
	}
	if (hlen >= hostsz)
		return -1;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = strtonum(colon + 1, 0, 65535, &errstr);
	if (errstr != NULL || colon[1] == '\0')
		return -1;
	return 0;
}

int
host_is_loopback(const char *host)
{
	struct in_addr	 in4;
	struct in6_addr	 in6;

	if (strcasecmp(host, "localhost") == 0)
		return 1;
	if (inet_pton(AF_INET, host, &in4) == 1)
		return (ntohl(in4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &in6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&in6);
	return 0;
}

/*
 * Open a listening TCP socket.  On success the bound port (useful when 0
 * was asked for) is stored in *bound and a printable "host:port" in name.
 */
int
tcp_listen(const char *host, int port, int *bound, char *name, size_t namesz)
{
	struct addrinfo		 hints, *res, *ai;
	struct sockaddr_storage	 ss;
	socklen_t		 sslen;
	char			 portstr[16], addr[INET6_ADDRSTRLEN];
	int			 fd = -1, on = 1, gai, saved = 0;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(portstr, sizeof(portstr), "%d", port);
	if ((gai = getaddrinfo(host, portstr, &hints, &res)) != 0) {
		errno = EADDRNOTAVAIL;
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
		    ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    ai->ai_protocol);
		if (fd == -1) {
			saved = errno;
			continue;
		}
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		/*
		 * Accepted sockets inherit it: a streamed chunk leaves at once
		 * rather than behind the client's delayed ACK.
		 */
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, 511) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd == -1) {
		errno = saved;
		return -1;
	}
	sslen = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == -1) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof(addr));
		*bound = ntohs(s6->sin6_port);
		snprintf(name, namesz, "[%s]:%d", addr, *bound);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof(addr));
		*bound = ntohs(s4->sin_port);
		snprintf(name, namesz, "%s:%d", addr, *bound);
	}
	return fd;
}

/*
 * mkdir -p with the given mode for every directory it creates.
 */
int
mkdirs(const char *path, mode_t mode)
{
	char	 buf[4096], *p;

	if (strlcpy(buf, path, sizeof(buf)) >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) == -1 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, mode) == -1 && errno != EEXIST)
		return -1;
	return 0;
}

static int
unix_addr(const char *path, struct sockaddr_un *sun)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (strlcpy(sun->sun_path, path, sizeof(sun->sun_path)) >=
	    sizeof(sun->sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/*
 * Listen on a Unix socket, replacing a stale one.  The caller knows no
 * live process owns path (a pid file lock or its supervisor says so).
 */
int
unix_listen(const char *path, mode_t mode)
{
	struct sockaddr_un	 sun;
	mode_t			 old;
	int			 fd, saved;

	if (unix_addr(path, &sun) == -1)
		return -1;
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
	    0)) == -1)
		return -1;
	if (unlink(path) == -1 && errno != ENOENT)
		goto fail;
	old = umask(0777 & ~mode);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		umask(old);
		goto fail;
	}
	umask(old);
	if (chmod(path, mode) == -1 || listen(fd, 128) == -1)
		goto fail;
	return fd;
fail:
	saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

int
unix_connect(const char *path)
{
	struct sockaddr_un	 sun;
	int			 fd, saved;

	if (unix_addr(path, &sun) == -1)
		return -1;
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

void
timer_add_ms(struct event *ev, int64_t ms)
{
	struct timeval	 tv;

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(ev, &tv);
}

/* Drain b into a new NUL-terminated string. */
char *
buf_take(struct evbuffer *b)
{
	size_t	 len = evbuffer_get_length(b);
	char	*s = xmalloc(len + 1);

	evbuffer_remove(b, s, len);
	s[len] = '\0';
	return s;
}
