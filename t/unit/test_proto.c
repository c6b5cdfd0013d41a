/*
 * The message catalogue and framing: round trips, and every way a frame
 * from another process can be wrong.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <msgpack.h>

#include "proto/proto.h"
#include "tap.h"

static char	 err[256];

/* Encode m and decode it back; returns 0 on success. */
static int
roundtrip(struct msg *in, struct msg *out)
{
	char	*buf;
	size_t	 len, nfds;
	int	 fds[PROTO_MSG_FDS_MAX], rc;

	if (proto_encode(in, &buf, &len, fds, &nfds, err, sizeof(err)) == -1)
		return -1;
	rc = proto_decode(buf + 4, len - 4, NULL, out, err, sizeof(err));
	free(buf);
	return rc;
}

/* A packer writing into sb, for hand-made bodies. */
struct raw {
	msgpack_sbuffer	 sb;
	msgpack_packer	 pk;
};

static void
raw_init(struct raw *r)
{
	msgpack_sbuffer_init(&r->sb);
	msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
}

static void
raw_str(struct raw *r, const char *s)
{
	msgpack_pack_str_with_body(&r->pk, s, strlen(s));
}

static int
raw_decode(struct raw *r, struct msg *m)
{
	int	 rc;

	rc = proto_decode(r->sb.data, r->sb.size, NULL, m, err, sizeof(err));
	msgpack_sbuffer_destroy(&r->sb);
	return rc;
}

static void
test_roundtrips(void)
{
	struct msg	 in, out;

	proto_msg_init(&in, MSG_HELLO);
	in.hello.role = "gateway";
	in.hello.instance = 3;
	in.hello.pid = 4242;
	in.hello.version = PROTO_VERSION;
	ok(roundtrip(&in, &out) == 0, "hello round trip (%s)", err);
	is_int(out.type, MSG_HELLO, "hello type");
	is_str(out.hello.role, "gateway", "hello role");
	is_int(out.hello.instance, 3, "hello instance");
	is_int(out.hello.pid, 4242, "hello pid");
	proto_msg_clear(&out);

	proto_msg_init(&in, MSG_READY);
	ok(roundtrip(&in, &out) == 0 && out.type == MSG_READY,
	    "ready round trip");
	proto_msg_clear(&out);

	proto_msg_init(&in, MSG_CTL_REQUEST);
	in.ctl_request.cmd = "drain";
	in.ctl_request.timeout = 86400;
	in.ctl_request.wait = 1;
	ok(roundtrip(&in, &out) == 0, "ctl_request round trip");
	is_str(out.ctl_request.cmd, "drain", "ctl_request cmd");
	is_int(out.ctl_request.timeout, 86400, "ctl_request timeout");
	is_int(out.ctl_request.wait, 1, "ctl_request wait");
	proto_msg_clear(&out);

	proto_msg_init(&in, MSG_CTL_REPLY);
	in.ctl_reply.ok = 0;
	in.ctl_reply.message = "";
	ok(roundtrip(&in, &out) == 0, "ctl_reply without optional json");
	ok(out.ctl_reply.json == NULL, "absent optional field stays NULL");
	is_str(out.ctl_reply.message, "", "empty string allowed");
	proto_msg_clear(&out);

	proto_msg_init(&in, MSG_STATS);
	in.stats.json = "{\"turns_active\":1}";
	ok(roundtrip(&in, &out) == 0, "stats round trip");
	is_str(out.stats.json, "{\"turns_active\":1}", "stats json");
	proto_msg_clear(&out);
}

static void
test_encode_rejects(void)
{
	struct msg	 in;
	char		*buf, *big;
	size_t		 len, nfds;
	int		 fds[PROTO_MSG_FDS_MAX];

	proto_msg_init(&in, MSG_HELLO);
	in.hello.pid = 1;
	ok(proto_encode(&in, &buf, &len, fds, &nfds, err, sizeof(err)) == -1,
	    "encode refuses a missing required field");
	like(err, "role missing", "and says which");

	in.hello.role = "gateway";
	in.hello.pid = 0;
	ok(proto_encode(&in, &buf, &len, fds, &nfds, err, sizeof(err)) == -1,
	    "encode refuses an out-of-range integer");

	big = malloc(PROTO_FRAME_MAX + 1);
	memset(big, 'x', PROTO_FRAME_MAX);
	big[PROTO_FRAME_MAX] = '\0';
	proto_msg_init(&in, MSG_CTL_REPLY);
	in.ctl_reply.message = "m";
	in.ctl_reply.json = big;
	ok(proto_encode(&in, &buf, &len, fds, &nfds, err, sizeof(err)) == -1,
	    "encode refuses an over-long string");
	free(big);
}

static void
test_decode_rejects(void)
{
	struct raw	 r;
	struct msg	 m;
	unsigned char	 hugemap[] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
	unsigned char	 hugearr[] = { 0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff,
			    0xff };
	unsigned char	 hugestr[] = { 0x81, 0xa1, 'x', 0xdb, 0x7f, 0xff, 0xff,
			    0xff, 'a' };

	ok(proto_decode((char *)hugemap, sizeof(hugemap), NULL, &m, err,
	    sizeof(err)) == -1, "map declaring 4G entries is refused");
	like(err, "declares", "before allocating (%s)", err);
	ok(proto_decode((char *)hugearr, sizeof(hugearr), NULL, &m, err,
	    sizeof(err)) == -1, "array value declaring 4G entries is refused");
	ok(proto_decode((char *)hugestr, sizeof(hugestr), NULL, &m, err,
	    sizeof(err)) == -1, "string longer than the frame is refused");
	like(err, "truncated", "as truncated (%s)", err);

	raw_init(&r);
	msgpack_pack_array(&r.pk, 1);
	raw_str(&r, "ready");
	ok(raw_decode(&r, &m) == -1, "body that is not a map");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 1);
	raw_str(&r, "type");
	raw_str(&r, "launch_missiles");
	ok(raw_decode(&r, &m) == -1, "unknown message type");
	like(err, "unknown message type", "says so (%s)", err);

	raw_init(&r);
	msgpack_pack_map(&r.pk, 1);
	raw_str(&r, "role");
	raw_str(&r, "gateway");
	ok(raw_decode(&r, &m) == -1, "message without a type");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 4);
	raw_str(&r, "type");
	raw_str(&r, "hello");
	raw_str(&r, "role");
	msgpack_pack_int(&r.pk, 7);
	raw_str(&r, "instance");
	msgpack_pack_int(&r.pk, 0);
	raw_str(&r, "pid");
	msgpack_pack_int(&r.pk, 1);
	ok(raw_decode(&r, &m) == -1, "string field sent as an integer");
	like(err, "role: wrong type", "names the field (%s)", err);

	raw_init(&r);
	msgpack_pack_map(&r.pk, 5);
	raw_str(&r, "type");
	raw_str(&r, "hello");
	raw_str(&r, "role");
	raw_str(&r, "gateway");
	raw_str(&r, "instance");
	raw_str(&r, "0");
	raw_str(&r, "pid");
	msgpack_pack_int(&r.pk, 1);
	raw_str(&r, "version");
	msgpack_pack_int(&r.pk, 1);
	ok(raw_decode(&r, &m) == -1, "integer field sent as a string");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 4);
	raw_str(&r, "type");
	raw_str(&r, "hello");
	raw_str(&r, "role");
	raw_str(&r, "gateway");
	raw_str(&r, "instance");
	msgpack_pack_int(&r.pk, 0);
	raw_str(&r, "pid");
	msgpack_pack_int(&r.pk, 1);
	ok(raw_decode(&r, &m) == -1, "missing required field");
	like(err, "version missing", "names it (%s)", err);

	raw_init(&r);
	msgpack_pack_map(&r.pk, 6);
	raw_str(&r, "type");
	raw_str(&r, "hello");
	raw_str(&r, "role");
	raw_str(&r, "gateway");
	raw_str(&r, "instance");
	msgpack_pack_int(&r.pk, 0);
	raw_str(&r, "pid");
	msgpack_pack_int(&r.pk, -5);
	raw_str(&r, "version");
	msgpack_pack_int(&r.pk, 1);
	raw_str(&r, "extra");
	msgpack_pack_true(&r.pk);
	ok(raw_decode(&r, &m) == -1, "unknown field");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 5);
	raw_str(&r, "type");
	raw_str(&r, "hello");
	raw_str(&r, "role");
	raw_str(&r, "gateway");
	raw_str(&r, "instance");
	msgpack_pack_int(&r.pk, 0);
	raw_str(&r, "pid");
	msgpack_pack_int(&r.pk, -5);
	raw_str(&r, "version");
	msgpack_pack_int(&r.pk, 1);
	ok(raw_decode(&r, &m) == -1, "negative pid out of range");
	like(err, "out of range", "says out of range (%s)", err);

	raw_init(&r);
	msgpack_pack_map(&r.pk, 3);
	raw_str(&r, "type");
	raw_str(&r, "ctl_reply");
	raw_str(&r, "ok");
	msgpack_pack_true(&r.pk);
	raw_str(&r, "ok");
	msgpack_pack_false(&r.pk);
	ok(raw_decode(&r, &m) == -1, "duplicate field");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 3);
	raw_str(&r, "type");
	raw_str(&r, "ctl_reply");
	raw_str(&r, "ok");
	msgpack_pack_true(&r.pk);
	raw_str(&r, "message");
	msgpack_pack_str_with_body(&r.pk, "a\0b", 3);
	ok(raw_decode(&r, &m) == -1, "string with an embedded NUL");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 1);
	raw_str(&r, "type");
	raw_str(&r, "ready");
	msgpack_pack_nil(&r.pk);
	ok(raw_decode(&r, &m) == -1, "bytes after the map");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 2);
	raw_str(&r, "type");
	raw_str(&r, "ready");
	msgpack_pack_int(&r.pk, 5);
	msgpack_pack_int(&r.pk, 5);
	ok(raw_decode(&r, &m) == -1, "non-string map key");

	raw_init(&r);
	msgpack_pack_map(&r.pk, 2);
	raw_str(&r, "type");
	raw_str(&r, "state");
	raw_str(&r, "state");
	msgpack_pack_double(&r.pk, 1.5);
	ok(raw_decode(&r, &m) == -1, "float value refused");
}

/* Feed the reader raw bytes through a socketpair. */
static int
feed(const void *bytes, size_t len, int close_after, struct msg *m)
{
	struct proto_reader	 r;
	int			 sp[2], rc;

	socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
	if (write(sp[0], bytes, len) != (ssize_t)len)
		return -2;
	if (close_after)
		close(sp[0]);
	proto_reader_init(&r);
	rc = proto_recv(sp[1], &r, m, 1000, err, sizeof(err));
	proto_reader_free(&r);
	if (!close_after)
		close(sp[0]);
	close(sp[1]);
	return rc;
}

static void
test_frames(void)
{
	struct msg	 in, out;
	char		*buf;
	size_t		 len, nfds;
	int		 fds[PROTO_MSG_FDS_MAX];
	unsigned char	 oversize[] = { 0x01, 0x00, 0x00, 0x01, 0x80 };
	unsigned char	 empty[] = { 0, 0, 0, 0 };

	proto_msg_init(&in, MSG_STATE);
	in.state.state = "ready";
	proto_encode(&in, &buf, &len, fds, &nfds, err, sizeof(err));
	is_int(feed(buf, len, 1, &out), 1, "complete frame is read");
	is_str(out.state.state, "ready", "with its field");
	proto_msg_clear(&out);
	is_int(feed(buf, len - 3, 1, &out), -1,
	    "truncated frame at end of stream is an error");
	like(err, "truncated", "says truncated (%s)", err);
	is_int(feed(buf, 2, 1, &out), -1, "truncated length header too");
	free(buf);

	is_int(feed(oversize, sizeof(oversize), 0, &out), -1,
	    "length above the cap is refused at once");
	like(err, "exceeds", "says it exceeds (%s)", err);
	is_int(feed(empty, sizeof(empty), 0, &out), -1, "empty frame refused");
	is_int(feed("", 0, 1, &out), 0, "clean end of stream");
}

static void
test_fd_passing(void)
{
	struct proto_reader	 r;
	struct msg		 in, out;
	struct stat		 a, b;
	int			 sp[2], rc;

	/*
	 * No message carries a descriptor yet; check the queue side: a
	 * descriptor arriving with a frame waits in the reader's queue.
	 */
	socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
	proto_msg_init(&in, MSG_READY);
	ok(proto_send(sp[0], &in, err, sizeof(err)) == 0, "send ready");
	proto_reader_init(&r);
	rc = proto_recv(sp[1], &r, &out, 1000, err, sizeof(err));
	is_int(rc, 1, "receive ready");
	is_int(r.fdq.n, 0, "no descriptors queued");

	/* Pass stdin by hand beside a frame. */
	{
		struct msghdr	 mh;
		struct iovec	 iov;
		struct cmsghdr	*cm;
		union {
			struct cmsghdr	hdr;
			char		buf[CMSG_SPACE(sizeof(int))];
		} cb;
		char		*buf;
		size_t		 len, nfds;
		int		 fds[PROTO_MSG_FDS_MAX], fd = 0;

		proto_encode(&in, &buf, &len, fds, &nfds, err, sizeof(err));
		memset(&mh, 0, sizeof(mh));
		iov.iov_base = buf;
		iov.iov_len = len;
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cb.buf;
		mh.msg_controllen = sizeof(cb.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
		ok(sendmsg(sp[0], &mh, 0) == (ssize_t)len, "sendmsg with fd");
		free(buf);
	}
	rc = proto_recv(sp[1], &r, &out, 1000, err, sizeof(err));
	is_int(rc, 1, "frame with a descriptor beside it");
	is_int(r.fdq.n, 1, "the descriptor waits in the queue");
	ok(fstat(r.fdq.fds[0], &a) == 0 && fstat(0, &b) == 0 &&
	    a.st_ino == b.st_ino && a.st_dev == b.st_dev,
	    "and it is the same file");
	proto_reader_free(&r);
	close(sp[0]);
	close(sp[1]);
}

/* Random bodies must never crash the decoder or leak. */
static void
test_garbage(void)
{
	struct msg	 m;
	unsigned char	 buf[64];
	unsigned int	 seed = 12345;
	int		 i, j, accepted = 0;

	for (i = 0; i < 20000; i++) {
		size_t len = 1 + rand_r(&seed) % sizeof(buf);

		for (j = 0; j < (int)len; j++)
			buf[j] = rand_r(&seed) & 0xff;
		if (i % 2)
			buf[0] = 0x80 | (rand_r(&seed) & 0x0f);
		if (proto_decode((char *)buf, len, NULL, &m, err,
		    sizeof(err)) == 0) {
			accepted++;
			proto_msg_clear(&m);
		}
	}
	ok(1, "20000 random bodies decoded without a crash (%d accepted)",
	    accepted);
}

int
main(void)
{
	test_roundtrips();
	test_encode_rejects();
	test_decode_rejects();
	test_frames();
	test_fd_passing();
	test_garbage();
	return done_testing();
}
