/*
 * Reading frames from a stream socket, with the descriptors that travel
 * beside them, and blocking send and receive for simple clients.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"

#define READ_SHRINK	(1024 * 1024)
#define READ_CHUNK	65536

void
proto_reader_init(struct proto_reader *r)
{
	memset(r, 0, sizeof(*r));
}

void
proto_reader_free(struct proto_reader *r)
{
	free(r->buf);
	proto_fdq_close(&r->fdq);
	memset(r, 0, sizeof(*r));
}

void
proto_fdq_close(struct proto_fdq *q)
{
	size_t	 i;

	for (i = 0; i < q->n; i++)
		close(q->fds[i]);
	q->n = 0;
}

/*
 * Read what the socket has.  Returns the byte count, 0 at end of file,
 * or -1 with errno set (EAGAIN for a non-blocking socket with no data,
 * EPROTO when the peer sent more descriptors than we queue).
 */
ssize_t
proto_reader_fill(struct proto_reader *r, int fd)
{
	struct msghdr	 mh;
	struct iovec	 iov;
	struct cmsghdr	*cm;
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) * PROTO_FDQ_MAX)];
	} cmsgbuf;
	ssize_t		 n;
	size_t		 i, nfd, newcap;
	int		*fds, overflow = 0;
	char		*p;

	if (r->off > 0) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	/* A large frame is gone: give its room back. */
	if (r->len == 0 && r->cap > READ_SHRINK) {
		free(r->buf);
		r->buf = NULL;
		r->cap = 0;
	}
	if (r->cap - r->len < READ_CHUNK) {
		newcap = r->len + READ_CHUNK;
		if ((p = realloc(r->buf, newcap)) == NULL)
			return -1;
		r->buf = p;
		r->cap = newcap;
	}
	memset(&mh, 0, sizeof(mh));
	iov.iov_base = r->buf + r->len;
	iov.iov_len = r->cap - r->len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cmsgbuf.buf;
	mh.msg_controllen = sizeof(cmsgbuf.buf);
	do {
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	} while (n == -1 && errno == EINTR);
	if (n == -1)
		return -1;
	for (cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET ||
		    cm->cmsg_type != SCM_RIGHTS)
			continue;
		fds = (int *)CMSG_DATA(cm);
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < nfd; i++) {
			if (r->fdq.n < PROTO_FDQ_MAX)
				r->fdq.fds[r->fdq.n++] = fds[i];
			else {
				close(fds[i]);
				overflow = 1;
			}
		}
	}
	if (overflow || (mh.msg_flags & MSG_CTRUNC)) {
		errno = EPROTO;
		return -1;
	}
	r->len += n;
	return n;
}

/*
 * Take the next complete frame.  Returns 1 with m filled, 0 when more
 * bytes are needed, -1 on a protocol error (err says which).
 */
int
proto_reader_next(struct proto_reader *r, struct msg *m, char *err,
    size_t errsz)
{
	const unsigned char	*p = (const unsigned char *)r->buf + r->off;
	size_t			 avail = r->len - r->off;
	uint32_t		 n;
	int			 rc;

	if (avail < 4)
		return 0;
	n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
	if (n > PROTO_FRAME_MAX) {
		snprintf(err, errsz, "frame of %u bytes exceeds the limit of "
		    "%d", n, PROTO_FRAME_MAX);
		return -1;
	}
	if (n == 0) {
		snprintf(err, errsz, "empty frame");
		return -1;
	}
	if (avail - 4 < n) {
		/* Make room for the whole frame at once. */
		if (r->cap - r->off < (size_t)n + 4) {
			char *q = realloc(r->buf, r->off + (size_t)n + 4);

			if (q == NULL) {
				snprintf(err, errsz, "out of memory");
				return -1;
			}
			r->buf = q;
			r->cap = r->off + (size_t)n + 4;
		}
		return 0;
	}
	rc = proto_decode((const char *)p + 4, n, &r->fdq, m, err, errsz);
	r->off += 4 + n;
	if (r->off == r->len)
		r->off = r->len = 0;
	return rc == 0 ? 1 : -1;
}

static int
wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd	 pfd = { fd, events, 0 };
	struct timespec	 ts;
	int64_t		 now, left;
	int		 rc;

	for (;;) {
		left = -1;
		if (deadline >= 0) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
			left = deadline - now;
			if (left < 0)
				left = 0;
		}
		rc = poll(&pfd, 1, (int)left);
		if (rc == -1 && errno == EINTR)
			continue;
		if (rc == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		return rc == -1 ? -1 : 0;
	}
}

/*
 * Send one message on a blocking or non-blocking socket, waiting as long
 * as it takes.  Descriptors in the message stay owned by the caller.
 */
int
proto_send(int fd, const struct msg *m, char *err, size_t errsz)
{
	struct msghdr	 mh;
	struct iovec	 iov;
	struct cmsghdr	*cm;
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) * PROTO_MSG_FDS_MAX)];
	} cmsgbuf;
	char		*buf;
	size_t		 len, off = 0, nfds;
	int		 fds[PROTO_MSG_FDS_MAX];
	ssize_t		 n;

	if (proto_encode(m, &buf, &len, fds, &nfds, err, errsz) == -1)
		return -1;
	while (off < len) {
		memset(&mh, 0, sizeof(mh));
		iov.iov_base = buf + off;
		iov.iov_len = len - off;
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		if (off == 0 && nfds > 0) {
			mh.msg_control = cmsgbuf.buf;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
			memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
		}
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN) {
			if (wait_fd(fd, POLLOUT, -1) == 0)
				continue;
		}
		if (n == -1) {
			snprintf(err, errsz, "send: %s", strerror(errno));
			free(buf);
			return -1;
		}
		off += n;
	}
	free(buf);
	return 0;
}

/*
 * Wait up to timeout_ms (-1: forever) for one message.  Returns 1 with m
 * filled, 0 when the peer closed, -1 on error or timeout.
 */
int
proto_recv(int fd, struct proto_reader *r, struct msg *m, int timeout_ms,
    char *err, size_t errsz)
{
	struct timespec	 ts;
	int64_t		 deadline = -1;
	ssize_t		 n;
	int		 rc;

	if (timeout_ms >= 0) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		deadline = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 +
		    timeout_ms;
	}
	for (;;) {
		if ((rc = proto_reader_next(r, m, err, errsz)) != 0)
			return rc;
		if (wait_fd(fd, POLLIN, deadline) == -1) {
			snprintf(err, errsz, "%s", errno == ETIMEDOUT ?
			    "timed out" : strerror(errno));
			return -1;
		}
		n = proto_reader_fill(r, fd);
		if (n == -1 && errno == EAGAIN)
			continue;
		if (n == -1) {
			snprintf(err, errsz, "receive: %s", strerror(errno));
			return -1;
		}
		if (n == 0) {
			if (r->len > r->off)
				snprintf(err, errsz, "truncated frame at end "
				    "of stream");
			else
				snprintf(err, errsz, "connection closed");
			return r->len > r->off ? -1 : 0;
		}
	}
}
