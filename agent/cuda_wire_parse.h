/* cuda_wire_parse.h - the strict check of one message libembercuda.so sent
 * ember-agent (lib/cuda_wire.h), and reading a checked one.
 *
 * Every byte is hostile: the sender is any process on the host that could
 * connect to the agent's socket. cuda_wire_check() accepts a datagram only
 * when all of it is as lib/cuda_wire.h says: magic, version, a known type,
 * the declared length equal to the datagram's, a count that fits the
 * datagram (exactly 1 for HELLO, DEVICE and STATS), each entry's kind (a
 * PC entry's: KERNEL or GRAPH) and
 * string lengths within their limits, strings of printable ASCII, zero
 * reserved fields and zero padding, NUL-padded fixed strings, no bytes
 * after the last entry. It returns why it refused (enum cuda_wire_reject),
 * for the agent's counters. The readers below work only on a message it
 * accepted; they do not check again.
 */
#ifndef EMBER_AGENT_CUDA_WIRE_PARSE_H
#define EMBER_AGENT_CUDA_WIRE_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_wire.h"

/* Why a message was refused. */
enum cuda_wire_reject {
	CWR_OK = 0,
	CWR_SHORT,    /* shorter than a header, or than its entries */
	CWR_OVERSIZE, /* longer than CUDA_WIRE_MAX_MSG */
	CWR_MAGIC,
	CWR_VERSION,
	CWR_TYPE,     /* unknown type */
	CWR_LENGTH,   /* declared length differs from the datagram's, or bytes left over */
	CWR_COUNT,    /* count 0, more than fits, or not 1 where one is due */
	CWR_KIND,     /* unknown enum cuda_wire_kind */
	CWR_STRING,   /* a string's length out of bounds, or not printable */
	CWR_RESERVED, /* a reserved field or padding byte not zero */
	CWR_VALUE,    /* a value out of range (time, count, span end before start) */
	CWR_ORDER,    /* valid, but not where it came: no HELLO first, or a second HELLO */
	CWR_RATE,     /* valid, but over the agent's budget of entries per second (cuda.h) */
	CWR_NVTX,     /* an AGG entry's NVTX path too long, too deep, cut short, or not printable */
	CWR_MAX
};

/* The counters' label of a reason ("short", "magic", ...). */
const char *cuda_wire_reject_name(enum cuda_wire_reject r);

/* Most GPU time one AGG entry may carry (a flush covers about a second;
 * this is a day), and the most activities. */
#define CUDA_WIRE_MAX_TOTAL_NS (86400ull * 1000000000ull)
#define CUDA_WIRE_MAX_COUNT (1ull << 40)

/* Checks the len bytes of one datagram (see above). On success fills
 * *type and *count from the header. */
enum cuda_wire_reject cuda_wire_check(const void *data, size_t len, uint16_t *type,
				      uint32_t *count);

/* An AGG entry of a checked message, its strings pointing into it (not
 * NUL-terminated). */
struct cuda_agg_view {
	struct cuda_wire_agg a;
	const char *api;
	const char *name;
	/* An AGG, SPAN or PC entry's NVTX path (lib/cuda_wire.h), a.nvtx_len bytes, checked;
	 * NULL when none. cuda_wire_nvtx_next walks its ranges. */
	const char *nvtx;
	/* A PC entry's (cuda_wire_next_pc): the stall reason (NULL for an
	 * AGG entry), its length, and the instruction. */
	const char *stall;
	uint16_t stall_len;
	uint64_t cubin_id, pc_offset;
	/* A SPAN entry's (cuda_wire_next_span): one activity, its times
	 * (CLOCK_REALTIME ns; a.total_ns is end - start, a.count 1). */
	bool span;
	uint64_t start_ns, end_ns;
};

/* The entry at *off (start with *off = 0) of a checked AGG message of len
 * bytes; advances *off. Returns false after the last. */
bool cuda_wire_next_agg(const void *msg, size_t len, size_t *off, struct cuda_agg_view *out);

/* The next range of a checked NVTX path of len bytes at *off (start with
 * *off = 0), outermost first: its name and length. false after the last. */
bool cuda_wire_nvtx_next(const char *path, size_t len, size_t *off, const char **name, size_t *name_len);

/* The same for a checked PC message: the AGG fields in out->a (count is
 * the PC samples), and the stall reason and instruction. */
bool cuda_wire_next_pc(const void *msg, size_t len, size_t *off, struct cuda_agg_view *out);

/* The same for a checked SPAN message: the launch in out->a (as an AGG
 * entry's, with total_ns = end - start and count 1), the API, name and
 * NVTX path, and the span's times. */
bool cuda_wire_next_span(const void *msg, size_t len, size_t *off, struct cuda_agg_view *out);

/* The single entry of a checked HELLO, DEVICE or STATS message. */
void cuda_wire_hello(const void *msg, struct cuda_wire_hello *out);
void cuda_wire_device(const void *msg, struct cuda_wire_device *out);
void cuda_wire_stats(const void *msg, struct cuda_wire_stats *out);

#endif
