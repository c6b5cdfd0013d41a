/*
 * A walk over a frame body before msgpack-c sees it.  msgpack-c allocates
 * for a map or array as soon as it reads the element count, so a few bytes
 * can ask it for gigabytes (msgpack-c issue 1013).  Our bodies are flat:
 * one map of at most PROTO_FIELDS_MAX string keys to scalars, filling the
 * body exactly.  Anything else is refused here.
 */
#include <sys/types.h>

#include <stdint.h>
#include <stdio.h>

#include "proto.h"

#define KEY_MAX	64

struct cursor {
	const unsigned char	*p;
	size_t			 left;
};

static int
take(struct cursor *c, size_t n, uint64_t *v)
{
	size_t	 i;

	if (c->left < n)
		return -1;
	*v = 0;
	for (i = 0; i < n; i++)
		*v = (*v << 8) | c->p[i];
	c->p += n;
	c->left -= n;
	return 0;
}

static int
skip(struct cursor *c, uint64_t n)
{
	if (n > c->left)
		return -1;
	c->p += n;
	c->left -= n;
	return 0;
}

/* Read a string header; return its length or -1. */
static int64_t
str_header(struct cursor *c)
{
	uint64_t	 b, n;

	if (take(c, 1, &b) == -1)
		return -1;
	if ((b & 0xe0) == 0xa0)
		return b & 0x1f;
	switch (b) {
	case 0xd9:
		if (take(c, 1, &n) == -1)
			return -1;
		return n;
	case 0xda:
		if (take(c, 2, &n) == -1)
			return -1;
		return n;
	case 0xdb:
		if (take(c, 4, &n) == -1)
			return -1;
		return n;
	}
	return -1;
}

static int
scalar(struct cursor *c, char *err, size_t errsz)
{
	uint64_t	 b, n;

	if (take(c, 1, &b) == -1)
		goto truncated;
	if (b <= 0x7f || b >= 0xe0)		/* fixint */
		return 0;
	if ((b & 0xe0) == 0xa0)			/* fixstr */
		n = b & 0x1f;
	else {
		switch (b) {
		case 0xc0: case 0xc2: case 0xc3:	/* nil, false, true */
			return 0;
		case 0xcc: case 0xd0:
			return skip(c, 1) == -1 ? -2 : 0;
		case 0xcd: case 0xd1:
			return skip(c, 2) == -1 ? -2 : 0;
		case 0xce: case 0xd2:
			return skip(c, 4) == -1 ? -2 : 0;
		case 0xcf: case 0xd3:
			return skip(c, 8) == -1 ? -2 : 0;
		case 0xc4: case 0xd9:			/* bin8, str8 */
			if (take(c, 1, &n) == -1)
				goto truncated;
			break;
		case 0xc5: case 0xda:			/* bin16, str16 */
			if (take(c, 2, &n) == -1)
				goto truncated;
			break;
		case 0xc6: case 0xdb:			/* bin32, str32 */
			if (take(c, 4, &n) == -1)
				goto truncated;
			break;
		default:
			snprintf(err, errsz, "unsupported msgpack value "
			    "0x%02x (only scalars are allowed)", (unsigned)b);
			return -1;
		}
	}
	if (skip(c, n) == -1)
		goto truncated;
	return 0;
truncated:
	return -2;
}

int
proto_mpcheck(const char *body, size_t len, char *err, size_t errsz)
{
	struct cursor	 c = { (const unsigned char *)body, len };
	uint64_t	 b, count, i;
	int64_t		 klen;
	int		 rc;

	if (take(&c, 1, &b) == -1) {
		snprintf(err, errsz, "empty frame");
		return -1;
	}
	if ((b & 0xf0) == 0x80)
		count = b & 0x0f;
	else if (b == 0xde) {
		if (take(&c, 2, &count) == -1)
			goto truncated;
	} else if (b == 0xdf) {
		if (take(&c, 4, &count) == -1)
			goto truncated;
	} else {
		snprintf(err, errsz, "frame body is not a map");
		return -1;
	}
	if (count > PROTO_FIELDS_MAX || count * 2 > c.left) {
		snprintf(err, errsz, "map declares %llu entries in %zu bytes "
		    "(limit %d)", (unsigned long long)count, c.left,
		    PROTO_FIELDS_MAX);
		return -1;
	}
	for (i = 0; i < count; i++) {
		if ((klen = str_header(&c)) == -1) {
			if (c.left == 0)
				goto truncated;
			snprintf(err, errsz, "map key is not a string");
			return -1;
		}
		if (klen > KEY_MAX) {
			snprintf(err, errsz, "map key of %lld bytes",
			    (long long)klen);
			return -1;
		}
		if (skip(&c, klen) == -1)
			goto truncated;
		if ((rc = scalar(&c, err, errsz)) == -2)
			goto truncated;
		if (rc == -1)
			return -1;
	}
	if (c.left != 0) {
		snprintf(err, errsz, "%zu bytes after the map", c.left);
		return -1;
	}
	return 0;
truncated:
	snprintf(err, errsz, "truncated frame body");
	return -1;
}
