/*
 * The catalogue: one table row per message, one field row per field, and
 * the encoder and decoder that walk them.
 */
#include <sys/types.h>

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <msgpack.h>

#include "proto.h"

enum field_type {
	FT_STR,
	FT_BIN,
	FT_INT,
	FT_BOOL,
	FT_FD
};

struct field {
	const char	*name;
	enum field_type	 type;
	size_t		 off;
	int		 required;
	int64_t		 min;	/* value, or length for STR and BIN */
	int64_t		 max;
};

struct msgdef {
	const char		*name;
	const struct field	*fields;
	size_t			 nfields;
};

#define F(m, f)	offsetof(struct msg, m.f)
#define STRMAX	(PROTO_FRAME_MAX - 1024)

static const struct field hello_fields[] = {
	{ "role", FT_STR, F(hello, role), 1, 1, 32 },
	{ "instance", FT_INT, F(hello, instance), 1, 0, 1024 },
	{ "pid", FT_INT, F(hello, pid), 1, 1, INT32_MAX },
	{ "version", FT_INT, F(hello, version), 1, 0, INT32_MAX },
};
static const struct field state_fields[] = {
	{ "state", FT_STR, F(state, state), 1, 1, 32 },
};
static const struct field stats_fields[] = {
	{ "json", FT_STR, F(stats, json), 1, 2, 1024 * 1024 },
};
static const struct field ctl_request_fields[] = {
	{ "cmd", FT_STR, F(ctl_request, cmd), 1, 1, 32 },
	{ "timeout", FT_INT, F(ctl_request, timeout), 1, 0, 86400 },
	{ "wait", FT_BOOL, F(ctl_request, wait), 1, 0, 1 },
};
static const struct field ctl_reply_fields[] = {
	{ "ok", FT_BOOL, F(ctl_reply, ok), 1, 0, 1 },
	{ "message", FT_STR, F(ctl_reply, message), 1, 0, 64 * 1024 },
	{ "json", FT_STR, F(ctl_reply, json), 0, 2, 4 * 1024 * 1024 },
};
static const struct field worker_hello_fields[] = {
	{ "instance", FT_INT, F(worker_hello, instance), 1, 1, 1024 },
	{ "pid", FT_INT, F(worker_hello, pid), 1, 1, INT32_MAX },
	{ "version", FT_INT, F(worker_hello, version), 1, 0, INT32_MAX },
};

static const struct field acquire_fields[] = {
	{ "workspace", FT_STR, F(acquire, workspace), 1, 0, 36 },
	{ "run", FT_STR, F(acquire, run), 1, 0, 36 },
	{ "deadline_ms", FT_INT, F(acquire, deadline_ms), 1, 0, 3600000 },
};
static const struct field grant_fields[] = {
	{ "lease", FT_STR, F(grant, lease), 1, 36, 36 },
	{ "backend", FT_STR, F(grant, backend), 1, 1, 16 },
	{ "ttl_ms", FT_INT, F(grant, ttl_ms), 1, 1, 86400000 },
	{ "boot_ms", FT_INT, F(grant, boot_ms), 1, 0, 3600000 },
	{ "kernel_in", FT_FD, F(grant, kernel_in), 1, 0, 0 },
	{ "kernel_out", FT_FD, F(grant, kernel_out), 1, 0, 0 },
};
static const struct field refuse_fields[] = {
	{ "code", FT_STR, F(refuse, code), 1, 1, 32 },
	{ "message", FT_STR, F(refuse, message), 1, 0, 1024 },
};

static const struct field turn_fields[] = {
	{ "turn", FT_INT, F(turn, turn), 1, 1, INT64_MAX },
	{ "session", FT_STR, F(turn, session), 1, 36, 36 },
	{ "idempotency_key", FT_STR, F(turn, idempotency_key), 1, 1, 128 },
	{ "request", FT_STR, F(turn, request), 1, 2, 1024 * 1024 },
};
static const struct field turn_started_fields[] = {
	{ "turn", FT_INT, F(turn_started, turn), 1, 1, INT64_MAX },
	{ "run", FT_STR, F(turn_started, run), 1, 36, 36 },
	{ "owner", FT_STR, F(turn_started, owner), 1, 1, 128 },
};
static const struct field chunk_fields[] = {
	{ "turn", FT_INT, F(chunk, turn), 1, 1, INT64_MAX },
	{ "json", FT_STR, F(chunk, json), 1, 2, STRMAX },
};
static const struct field turn_end_fields[] = {
	{ "turn", FT_INT, F(turn_end, turn), 1, 1, INT64_MAX },
	{ "outcome", FT_STR, F(turn_end, outcome), 1, 1, 32 },
};
static const struct field cancel_fields[] = {
	{ "turn", FT_INT, F(cancel, turn), 1, 1, INT64_MAX },
};

#define DEF(n, f)	{ n, f, sizeof(f) / sizeof(f[0]) }
#define DEF0(n)		{ n, NULL, 0 }

static const struct msgdef msgdefs[MSG__COUNT] = {
	[MSG_HELLO] = DEF("hello", hello_fields),
	[MSG_READY] = DEF0("ready"),
	[MSG_STATE] = DEF("state", state_fields),
	[MSG_STOP] = DEF0("stop"),
	[MSG_RELOAD] = DEF0("reload"),
	[MSG_STATS] = DEF("stats", stats_fields),
	[MSG_CTL_REQUEST] = DEF("ctl_request", ctl_request_fields),
	[MSG_CTL_REPLY] = DEF("ctl_reply", ctl_reply_fields),
	[MSG_WORKER_HELLO] = DEF("worker_hello", worker_hello_fields),
	[MSG_WORKER_BYE] = DEF0("worker_bye"),
	[MSG_ACQUIRE] = DEF("acquire", acquire_fields),
	[MSG_GRANT] = DEF("grant", grant_fields),
	[MSG_REFUSE] = DEF("refuse", refuse_fields),
	[MSG_RENEW] = DEF0("renew"),
	[MSG_TURN] = DEF("turn", turn_fields),
	[MSG_TURN_STARTED] = DEF("turn_started", turn_started_fields),
	[MSG_CHUNK] = DEF("chunk", chunk_fields),
	[MSG_TURN_END] = DEF("turn_end", turn_end_fields),
	[MSG_CANCEL] = DEF("cancel", cancel_fields),
};

const char *
proto_msg_name(enum msg_type type)
{
	if (type >= MSG__COUNT)
		return "unknown";
	return msgdefs[type].name;
}

void
proto_msg_init(struct msg *m, enum msg_type type)
{
	const struct msgdef	*d = &msgdefs[type];
	size_t			 i;

	memset(m, 0, sizeof(*m));
	m->type = type;
	for (i = 0; i < d->nfields; i++)
		if (d->fields[i].type == FT_FD)
			*(int *)((char *)m + d->fields[i].off) = -1;
}

/*
 * Free what decoding allocated and close descriptors nobody claimed.  A
 * receiver that keeps a descriptor sets its field to -1 first.
 */
void
proto_msg_clear(struct msg *m)
{
	const struct msgdef	*d;
	const struct field	*f;
	char			*p;
	size_t			 i;

	if (m->type >= MSG__COUNT)
		return;
	d = &msgdefs[m->type];
	for (i = 0; i < d->nfields; i++) {
		f = &d->fields[i];
		p = (char *)m + f->off;
		switch (f->type) {
		case FT_STR:
			free(*(char **)p);
			*(char **)p = NULL;
			break;
		case FT_BIN:
			free(((struct proto_bin *)p)->data);
			((struct proto_bin *)p)->data = NULL;
			((struct proto_bin *)p)->len = 0;
			break;
		case FT_FD:
			if (*(int *)p != -1)
				close(*(int *)p);
			*(int *)p = -1;
			break;
		case FT_INT:
		case FT_BOOL:
			break;
		}
	}
}

static int
pack_str(msgpack_packer *pk, const char *s, size_t len)
{
	if (msgpack_pack_str(pk, len) != 0)
		return -1;
	return msgpack_pack_str_body(pk, s, len);
}

/*
 * Encode m as a complete frame (header included) into a new buffer; the
 * descriptors the message carries are returned in fds, in field order.
 */
int
proto_encode(const struct msg *m, char **out, size_t *outlen, int *fds,
    size_t *nfds, char *err, size_t errsz)
{
	const struct msgdef	*d;
	const struct field	*f;
	const char		*p;
	msgpack_sbuffer		 sb;
	msgpack_packer		 pk;
	size_t			 i, n, len, bodylen;
	int64_t			 v;
	int			 fd, rc = 0;

	*nfds = 0;
	if (m->type >= MSG__COUNT) {
		snprintf(err, errsz, "encode: unknown message type %d",
		    (int)m->type);
		return -1;
	}
	d = &msgdefs[m->type];
	n = 1;
	for (i = 0; i < d->nfields; i++) {
		f = &d->fields[i];
		p = (const char *)m + f->off;
		if ((f->type == FT_STR && *(char *const *)p == NULL) ||
		    (f->type == FT_BIN &&
		    ((const struct proto_bin *)p)->data == NULL)) {
			if (f->required) {
				snprintf(err, errsz, "encode %s: field %s "
				    "missing", d->name, f->name);
				return -1;
			}
			continue;
		}
		n++;
	}

	msgpack_sbuffer_init(&sb);
	/* Room for the length header, filled in at the end. */
	msgpack_sbuffer_write(&sb, "\0\0\0\0", 4);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	rc |= msgpack_pack_map(&pk, n);
	rc |= pack_str(&pk, "type", 4);
	rc |= pack_str(&pk, d->name, strlen(d->name));
	for (i = 0; i < d->nfields && rc == 0; i++) {
		f = &d->fields[i];
		p = (const char *)m + f->off;
		switch (f->type) {
		case FT_STR:
			if (*(char *const *)p == NULL)
				continue;
			len = strlen(*(char *const *)p);
			if ((int64_t)len < f->min || (int64_t)len > f->max) {
				snprintf(err, errsz, "encode %s: field %s: "
				    "length %zu out of range", d->name,
				    f->name, len);
				goto fail;
			}
			rc |= pack_str(&pk, f->name, strlen(f->name));
			rc |= pack_str(&pk, *(char *const *)p, len);
			break;
		case FT_BIN:
			if (((const struct proto_bin *)p)->data == NULL)
				continue;
			len = ((const struct proto_bin *)p)->len;
			if ((int64_t)len < f->min || (int64_t)len > f->max) {
				snprintf(err, errsz, "encode %s: field %s: "
				    "length %zu out of range", d->name,
				    f->name, len);
				goto fail;
			}
			rc |= pack_str(&pk, f->name, strlen(f->name));
			rc |= msgpack_pack_bin(&pk, len);
			rc |= msgpack_pack_bin_body(&pk,
			    ((const struct proto_bin *)p)->data, len);
			break;
		case FT_INT:
			v = *(const int64_t *)p;
			if (v < f->min || v > f->max) {
				snprintf(err, errsz, "encode %s: field %s: "
				    "value %lld out of range", d->name,
				    f->name, (long long)v);
				goto fail;
			}
			rc |= pack_str(&pk, f->name, strlen(f->name));
			rc |= msgpack_pack_int64(&pk, v);
			break;
		case FT_BOOL:
			rc |= pack_str(&pk, f->name, strlen(f->name));
			if (*(const int *)p)
				rc |= msgpack_pack_true(&pk);
			else
				rc |= msgpack_pack_false(&pk);
			break;
		case FT_FD:
			fd = *(const int *)p;
			if (fd == -1 && f->required) {
				snprintf(err, errsz, "encode %s: field %s "
				    "missing", d->name, f->name);
				goto fail;
			}
			rc |= pack_str(&pk, f->name, strlen(f->name));
			if (fd == -1)
				rc |= msgpack_pack_false(&pk);
			else {
				rc |= msgpack_pack_true(&pk);
				fds[(*nfds)++] = fd;
			}
			break;
		}
	}
	if (rc != 0) {
		snprintf(err, errsz, "encode %s: out of memory", d->name);
		goto fail;
	}
	bodylen = sb.size - 4;
	if (bodylen > PROTO_FRAME_MAX) {
		snprintf(err, errsz, "encode %s: frame of %zu bytes exceeds "
		    "%d", d->name, bodylen, PROTO_FRAME_MAX);
		goto fail;
	}
	sb.data[0] = (bodylen >> 24) & 0xff;
	sb.data[1] = (bodylen >> 16) & 0xff;
	sb.data[2] = (bodylen >> 8) & 0xff;
	sb.data[3] = bodylen & 0xff;
	*outlen = sb.size;
	*out = msgpack_sbuffer_release(&sb);
	msgpack_sbuffer_destroy(&sb);
	return 0;
fail:
	*nfds = 0;
	msgpack_sbuffer_destroy(&sb);
	return -1;
}

static const struct field *
find_field(const struct msgdef *d, const char *name, size_t len)
{
	size_t	 i;

	for (i = 0; i < d->nfields; i++)
		if (strlen(d->fields[i].name) == len &&
		    memcmp(d->fields[i].name, name, len) == 0)
			return &d->fields[i];
	return NULL;
}

static int
decode_field(const struct msgdef *d, const struct field *f,
    const msgpack_object *o, struct proto_fdq *fdq, struct msg *m,
    char *err, size_t errsz)
{
	char		*p = (char *)m + f->off;
	int64_t		 v;
	size_t		 len;

	switch (f->type) {
	case FT_STR:
		if (o->type != MSGPACK_OBJECT_STR)
			goto badtype;
		len = o->via.str.size;
		if ((int64_t)len < f->min || (int64_t)len > f->max) {
			snprintf(err, errsz, "%s: field %s: length %zu out of "
			    "range %lld..%lld", d->name, f->name, len,
			    (long long)f->min, (long long)f->max);
			return -1;
		}
		if (memchr(o->via.str.ptr, '\0', len) != NULL) {
			snprintf(err, errsz, "%s: field %s: contains NUL",
			    d->name, f->name);
			return -1;
		}
		if ((*(char **)p = malloc(len + 1)) == NULL) {
			snprintf(err, errsz, "%s: out of memory", d->name);
			return -1;
		}
		memcpy(*(char **)p, o->via.str.ptr, len);
		(*(char **)p)[len] = '\0';
		return 0;
	case FT_BIN:
		if (o->type != MSGPACK_OBJECT_BIN)
			goto badtype;
		len = o->via.bin.size;
		if ((int64_t)len < f->min || (int64_t)len > f->max) {
			snprintf(err, errsz, "%s: field %s: length %zu out of "
			    "range", d->name, f->name, len);
			return -1;
		}
		if ((((struct proto_bin *)p)->data = malloc(len + 1)) == NULL) {
			snprintf(err, errsz, "%s: out of memory", d->name);
			return -1;
		}
		memcpy(((struct proto_bin *)p)->data, o->via.bin.ptr, len);
		((struct proto_bin *)p)->data[len] = '\0';
		((struct proto_bin *)p)->len = len;
		return 0;
	case FT_INT:
		if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
			if (o->via.u64 > INT64_MAX)
				goto range;
			v = (int64_t)o->via.u64;
		} else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			v = o->via.i64;
		else
			goto badtype;
		if (v < f->min || v > f->max)
			goto range;
		*(int64_t *)p = v;
		return 0;
	case FT_BOOL:
		if (o->type != MSGPACK_OBJECT_BOOLEAN)
			goto badtype;
		*(int *)p = o->via.boolean ? 1 : 0;
		return 0;
	case FT_FD:
		if (o->type != MSGPACK_OBJECT_BOOLEAN)
			goto badtype;
		if (!o->via.boolean)
			return 0;
		if (fdq == NULL || fdq->n == 0) {
			snprintf(err, errsz, "%s: field %s: descriptor "
			    "missing", d->name, f->name);
			return -1;
		}
		*(int *)p = fdq->fds[0];
		memmove(fdq->fds, fdq->fds + 1, (fdq->n - 1) * sizeof(int));
		fdq->n--;
		return 0;
	}
badtype:
	snprintf(err, errsz, "%s: field %s: wrong type", d->name, f->name);
	return -1;
range:
	snprintf(err, errsz, "%s: field %s: value out of range %lld..%lld",
	    d->name, f->name, (long long)f->min, (long long)f->max);
	return -1;
}

/*
 * Decode one frame body into m.  On failure m holds nothing that needs
 * freeing and err says why.
 */
int
proto_decode(const char *body, size_t len, struct proto_fdq *fdq,
    struct msg *m, char *err, size_t errsz)
{
	const struct msgdef	*d = NULL;
	const struct field	*f;
	msgpack_unpacked	 up;
	msgpack_object		*map;
	msgpack_object_kv	*kv;
	size_t			 off = 0, i, t;
	uint64_t		 seen = 0;
	int			 rc;

	memset(m, 0, sizeof(*m));
	m->type = MSG__COUNT;
	if (proto_mpcheck(body, len, err, errsz) == -1)
		return -1;
	msgpack_unpacked_init(&up);
	rc = msgpack_unpack_next(&up, body, len, &off);
	if (rc != MSGPACK_UNPACK_SUCCESS || off != len) {
		snprintf(err, errsz, "malformed msgpack body");
		goto fail;
	}
	map = &up.data;
	for (i = 0; i < map->via.map.size; i++) {
		kv = &map->via.map.ptr[i];
		if (kv->key.via.str.size != 4 ||
		    memcmp(kv->key.via.str.ptr, "type", 4) != 0)
			continue;
		if (kv->val.type != MSGPACK_OBJECT_STR) {
			snprintf(err, errsz, "message type is not a string");
			goto fail;
		}
		for (t = 0; t < MSG__COUNT; t++)
			if (strlen(msgdefs[t].name) == kv->val.via.str.size &&
			    memcmp(msgdefs[t].name, kv->val.via.str.ptr,
			    kv->val.via.str.size) == 0)
				break;
		if (t == MSG__COUNT) {
			snprintf(err, errsz, "unknown message type '%.*s'",
			    (int)(kv->val.via.str.size > 32 ? 32 :
			    kv->val.via.str.size), kv->val.via.str.ptr);
			goto fail;
		}
		d = &msgdefs[t];
		proto_msg_init(m, t);
		break;
	}
	if (d == NULL) {
		snprintf(err, errsz, "message without a type");
		goto fail;
	}
	for (i = 0; i < map->via.map.size; i++) {
		kv = &map->via.map.ptr[i];
		if (kv->key.via.str.size == 4 &&
		    memcmp(kv->key.via.str.ptr, "type", 4) == 0)
			continue;
		f = find_field(d, kv->key.via.str.ptr, kv->key.via.str.size);
		if (f == NULL) {
			snprintf(err, errsz, "%s: unknown field '%.*s'",
			    d->name, (int)(kv->key.via.str.size > 32 ? 32 :
			    kv->key.via.str.size), kv->key.via.str.ptr);
			goto fail;
		}
		if (seen & (1ULL << (f - d->fields))) {
			snprintf(err, errsz, "%s: duplicate field %s",
			    d->name, f->name);
			goto fail;
		}
		seen |= 1ULL << (f - d->fields);
		if (decode_field(d, f, &kv->val, fdq, m, err, errsz) == -1)
			goto fail;
	}
	for (i = 0; i < d->nfields; i++) {
		if (d->fields[i].required && !(seen & (1ULL << i))) {
			snprintf(err, errsz, "%s: field %s missing", d->name,
			    d->fields[i].name);
			goto fail;
		}
	}
	msgpack_unpacked_destroy(&up);
	return 0;
fail:
	msgpack_unpacked_destroy(&up);
	proto_msg_clear(m);
	m->type = MSG__COUNT;
	return -1;
}
