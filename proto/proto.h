/*
 * The message catalogue of fleet: every message that crosses a process
 * boundary, with its fields, and the framing that carries it.
 *
 * A frame is a 4-byte big-endian body length followed by a msgpack map.
 * The map holds "type" (the message name) and the message's fields, each
 * a scalar: string, binary, integer, boolean, or a descriptor passed
 * beside the frame with SCM_RIGHTS (encoded as true).  Anything nested
 * travels as a JSON document inside a string.  Every field is checked on
 * decode for presence, type and bounds; a frame that fails is an error
 * and the peer that sent it is dropped.
 */
#ifndef FLEET_PROTO_H
#define FLEET_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION		1
#define PROTO_FRAME_MAX		(16 * 1024 * 1024)
#define PROTO_FIELDS_MAX	32
#define PROTO_MSG_FDS_MAX	4
#define PROTO_FDQ_MAX		16

enum msg_type {
	/* fleetd <-> child (socketpair) */
	MSG_HELLO,
	MSG_READY,
	MSG_STATE,
	MSG_STOP,
	MSG_RELOAD,
	MSG_STATS,
	/* fleet <-> fleetd (run/fleetd.sock) */
	MSG_CTL_REQUEST,
	MSG_CTL_REPLY,
	/* turnworker <-> gateway (run/gateway.sock) */
	MSG_WORKER_HELLO,
	MSG_WORKER_BYE,		/* stopping: send no more Turns */
	/* turnworker <-> leasemgr (run/leasemgr.sock, one connection a lease) */
	MSG_ACQUIRE,
	MSG_GRANT,
	MSG_REFUSE,
	MSG_RENEW,
	/* gateway <-> turnworker: one Turn at a time */
	MSG_TURN,
	MSG_TURN_STARTED,
	MSG_CHUNK,
	MSG_TURN_END,
	MSG_CANCEL,
	MSG__COUNT
};

struct proto_bin {
	char	*data;
	size_t	 len;
};

/* A child introduces itself to fleetd. */
struct msg_hello {
	char	*role;
	int64_t	 instance;
	int64_t	 pid;
	int64_t	 version;
};

/* fleetd tells a child the service state. */
struct msg_state {
	char	*state;		/* starting, ready, draining, stopping */
};

/* A child reports its counters to fleetd, as a JSON object. */
struct msg_stats {
	char	*json;
};

struct msg_ctl_request {
	char	*cmd;		/* status, drain, undrain, stop, reload */
	int64_t	 timeout;	/* seconds, 0 for the configured default */
	int	 wait;
};

struct msg_ctl_reply {
	int	 ok;
	char	*message;
	char	*json;		/* optional */
};

struct msg_worker_hello {
	int64_t	 instance;
	int64_t	 pid;
	int64_t	 version;
};

/* Ask for a sandbox, waiting up to deadline_ms for a free slot. */
struct msg_acquire {
	char	*workspace;	/* uuid, or "" for no volume */
	char	*run;		/* uuid of the Run it serves, or "" */
	int64_t	 deadline_ms;
};

/* A lease: for the local backend, the kernel's stdin and stdout. */
struct msg_grant {
	char	*lease;		/* uuid */
	char	*backend;	/* "local" */
	int64_t	 ttl_ms;	/* renew before this runs out */
	int64_t	 boot_ms;	/* how long the kernel took to be ready */
	int	 kernel_in;
	int	 kernel_out;
};

struct msg_refuse {
	char	*code;		/* queue_full, deadline, unavailable, bad_request */
	char	*message;
};

/* A Turn for a worker to run. */
struct msg_turn {
	int64_t	 turn;		/* the gateway's id for it */
	char	*session;
	char	*idempotency_key;
	char	*request;	/* JSON: {"text", "attachment_ids"} */
};

/* The Run is claimed: the gateway can cancel or settle it. */
struct msg_turn_started {
	int64_t	 turn;
	char	*run;
	char	*owner;
};

/* One chunk of the UI message stream, already encoded as JSON. */
struct msg_chunk {
	int64_t	 turn;
	char	*json;
};

struct msg_turn_end {
	int64_t	 turn;
	char	*outcome;	/* completed, failed, cancelled, timeout */
};

struct msg_cancel {
	int64_t	 turn;
};

struct msg {
	enum msg_type	 type;
	union {
		struct msg_hello	hello;
		struct msg_state	state;
		struct msg_stats	stats;
		struct msg_ctl_request	ctl_request;
		struct msg_ctl_reply	ctl_reply;
		struct msg_worker_hello	worker_hello;
		struct msg_acquire	acquire;
		struct msg_grant	grant;
		struct msg_refuse	refuse;
		struct msg_turn		turn;
		struct msg_turn_started	turn_started;
		struct msg_chunk	chunk;
		struct msg_turn_end	turn_end;
		struct msg_cancel	cancel;
	};
};

/* Descriptors received beside frames, waiting for the message that owns them. */
struct proto_fdq {
	int	 fds[PROTO_FDQ_MAX];
	size_t	 n;
};

/* Incremental reader of frames from a stream socket. */
struct proto_reader {
	char		*buf;
	size_t		 off;		/* first unconsumed byte */
	size_t		 len;
	size_t		 cap;
	struct proto_fdq fdq;
};

const char	*proto_msg_name(enum msg_type);
void		 proto_msg_init(struct msg *, enum msg_type);
void		 proto_msg_clear(struct msg *);

int	proto_encode(const struct msg *, char **, size_t *, int *, size_t *,
	    char *, size_t);
int	proto_decode(const char *, size_t, struct proto_fdq *, struct msg *,
	    char *, size_t);
int	proto_mpcheck(const char *, size_t, char *, size_t);

void	proto_reader_init(struct proto_reader *);
void	proto_reader_free(struct proto_reader *);
ssize_t	proto_reader_fill(struct proto_reader *, int);
int	proto_reader_next(struct proto_reader *, struct msg *, char *, size_t);

int	proto_send(int, const struct msg *, char *, size_t);
int	proto_recv(int, struct proto_reader *, struct msg *, int, char *,
	    size_t);

void	proto_fdq_close(struct proto_fdq *);

#endif
