/* varint.h - LEB128 variable-length integers, as protobuf writes them.
 *
 * Writers append to a struct buf. Readers work over a bounded cursor and
 * never read past its end: a truncated or overlong varint sets the
 * cursor's error flag and yields 0, so a decoder can read a whole record
 * and check the flag once.
 */
#ifndef EMBER_VARINT_H
#define EMBER_VARINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"

static inline void varint_put(struct buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;
	while (v >= 0x80) {
		tmp[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (uint8_t)v;
	buf_append(b, tmp, n);
}

static inline uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

struct cursor {
	const uint8_t *p, *end;
	bool bad;
};

static inline uint64_t varint_get(struct cursor *c)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (c->p >= c->end) {
			c->bad = true;
			return 0;
		}
		uint8_t byte = *c->p++;
		v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80))
			return v;
	}
	c->bad = true;
	return 0;
}

/* A varint that must be at most max; larger values mark the cursor bad. */
static inline uint64_t varint_get_max(struct cursor *c, uint64_t max)
{
	uint64_t v = varint_get(c);
	if (v > max) {
		c->bad = true;
		return 0;
	}
	return v;
}

static inline uint8_t cursor_u8(struct cursor *c)
{
	if (c->p >= c->end) {
		c->bad = true;
		return 0;
	}
	return *c->p++;
}

/* Copies n bytes out; marks the cursor bad when fewer remain. */
static inline bool cursor_bytes(struct cursor *c, void *out, size_t n)
{
	if ((size_t)(c->end - c->p) < n) {
		c->bad = true;
		return false;
	}
	memcpy(out, c->p, n);
	c->p += n;
	return true;
}

static inline size_t cursor_left(const struct cursor *c)
{
	return (size_t)(c->end - c->p);
}

#endif
