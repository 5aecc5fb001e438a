/* Unit tests: the agent's side of GPU profiling (agent/cuda.h): the strict
 * check of libembercuda.so's messages, the launch-stack table, the join of
 * GPU time with launch stacks (holding, falling back, never dropping), the
 * socket itself, and the samples collect_cuda() makes of it. */
#include "testutil.h"
#include "otlpfixture.h"
#include "procfixture.h"

#include <linux/types.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#include "agent/batch.h"
#include "agent/collect.h"
#include "agent/cuda.h"
#include "agent/cuda_wire_parse.h"
#include "agent/files.h"
#include "agent/kallsyms.h"
#include "agent/proc.h"
#include "agent/vdso.h"
#include "agent/otlp_export.h"
#include "server/ingest/otlp.h"
#include "compress.h"
#include "util.h"
#include "otlp_profiles.pb-c.h"
#include "oncpu_types.h"
#include "unwind_types.h"

/* --- building messages --------------------------------------------------- */

struct msg {
	uint8_t b[CUDA_WIRE_MAX_MSG + 64];
	size_t len;
	uint32_t count;
};

static void msg_start(struct msg *m)
{
	memset(m, 0, sizeof(*m));
	m->len = sizeof(struct cuda_wire_hdr);
}

static void msg_end(struct msg *m, uint16_t type)
{
	struct cuda_wire_hdr h = { CUDA_WIRE_MAGIC, CUDA_WIRE_VERSION, type, (uint32_t)m->len, m->count };
	memcpy(m->b, &h, sizeof(h));
}

/* Appends n bytes at p to m. */
static void msg_put(struct msg *m, const void *p, size_t n)
{
	memcpy(m->b + m->len, p, n);
	m->len += n;
}

/* Ends an entry: padded to 8 bytes, counted. */
static void msg_entry_end(struct msg *m)
{
	while (m->len % 8)
		m->b[m->len++] = 0;
	m->count++;
}

static void msg_agg(struct msg *m, uint64_t stack_id, uint64_t ns, uint16_t kind, const char *api,
		    const char *name)
{
	struct cuda_wire_agg a = { .stack_id = stack_id, .total_ns = ns, .count = 3, .tid = 11,
				   .kind = kind, .api_len = (uint16_t)strlen(api), .device = 0,
				   .stream = 7, .context = 2, .name_len = (uint16_t)strlen(name) };
	msg_put(m, &a, sizeof(a));
	msg_put(m, api, a.api_len);
	msg_put(m, name, a.name_len);
	msg_entry_end(m);
}

static void msg_hello(struct msg *m)
{
	msg_start(m);
	struct cuda_wire_hello h = { .pid = 1, .cupti_version = 18 };
	snprintf(h.lib_version, sizeof(h.lib_version), "0.1.0");
	msg_put(m, &h, sizeof(h));
	m->count = 1;
	msg_end(m, CUDA_WIRE_HELLO);
}

static void msg_device(struct msg *m)
{
	msg_start(m);
	struct cuda_wire_device d = { .index = 0 };
	for (int i = 0; i < 16; i++)
		d.uuid[i] = (uint8_t)(0xa0 + i);
	snprintf(d.name, sizeof(d.name), "NVIDIA H100 80GB HBM3");
	msg_put(m, &d, sizeof(d));
	m->count = 1;
	msg_end(m, CUDA_WIRE_DEVICE);
}

/* cuda_wire_check of the first len bytes of a message. */
static enum cuda_wire_reject check_len(const void *b, size_t len)
{
	uint16_t type;
	uint32_t count;
	return cuda_wire_check(b, len, &type, &count);
}

static enum cuda_wire_reject check(const struct msg *m)
{
	return check_len(m->b, m->len);
}

/* m passes cuda_wire_check as a message of want_type with want_count
 * entries. */
static void expect_valid(const struct msg *m, uint16_t want_type, uint32_t want_count)
{
	uint16_t type = 0;
	uint32_t count = 0;
	assert_int_equal(cuda_wire_check(m->b, m->len, &type, &count), CWR_OK);
	assert_int_equal(type, want_type);
	assert_int_equal(count, want_count);
}

/* A valid AGG of two entries: its first entry's struct is at offset 16. */
static void good_agg(struct msg *m)
{
	msg_start(m);
	msg_agg(m, 1001, 700000000, CUDA_WIRE_KIND_KERNEL, "cudaLaunchKernel", "_Z4gemmPf");
	msg_agg(m, 0, 5, CUDA_WIRE_KIND_MEMCPY, "cudaMemcpyAsync", "HtoD");
	msg_end(m, CUDA_WIRE_AGG);
}

/* Ends m as a message of type (its header written) and checks it. */
static enum cuda_wire_reject check_ended(struct msg *m, uint16_t type)
{
	msg_end(m, type);
	return check(m);
}

/* Writes n bytes of v at offset off of the first entry (just after the
 * header) and checks the message again. */
static enum cuda_wire_reject check_set(struct msg *m, size_t off, const void *v, size_t n)
{
	memcpy(m->b + sizeof(struct cuda_wire_hdr) + off, v, n);
	return check(m);
}

static enum cuda_wire_reject check_set16(struct msg *m, size_t off, uint16_t v)
{
	return check_set(m, off, &v, sizeof(v));
}

static enum cuda_wire_reject check_set64(struct msg *m, size_t off, uint64_t v)
{
	return check_set(m, off, &v, sizeof(v));
}

/* An AGG entry with an NVTX path of raw bytes (lib/cuda_wire.h). */
static void msg_agg_nvtx(struct msg *m, const char *name, const uint8_t *path, uint16_t path_len)
{
	const char *api = "cudaLaunchKernel";
	struct cuda_wire_agg a = { .stack_id = 77, .total_ns = 1000, .count = 1, .tid = 11,
				   .kind = CUDA_WIRE_KIND_KERNEL, .api_len = (uint16_t)strlen(api),
				   .name_len = (uint16_t)strlen(name), .nvtx_len = path_len };
	memcpy(m->b + m->len, &a, sizeof(a));
	m->len += sizeof(a);
	memcpy(m->b + m->len, api, a.api_len);
	m->len += a.api_len;
	memcpy(m->b + m->len, name, a.name_len);
	m->len += a.name_len;
	memcpy(m->b + m->len, path, path_len);
	m->len += path_len;
	while (m->len % 8)
		m->b[m->len++] = 0;
	m->count++;
}

/* The NVTX path both tests write: "epoch", then "train_step". */
static const uint8_t epoch_train_step[] = "\x05" "epoch" "\x0a" "train_step";

/* v's NVTX path is epoch_train_step: its two ranges, then no more. */
static void expect_epoch_train_step(const struct cuda_agg_view *v)
{
	static const char *const want[] = { "epoch", "train_step" };
	size_t roff = 0, rlen;
	const char *r;
	assert_int_equal(v->a.nvtx_len, sizeof(epoch_train_step) - 1);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		assert_true(cuda_wire_nvtx_next(v->nvtx, v->a.nvtx_len, &roff, &r, &rlen));
		assert_int_equal(rlen, strlen(want[i]));
		assert_memory_equal(r, want[i], rlen);
	}
	assert_false(cuda_wire_nvtx_next(v->nvtx, v->a.nvtx_len, &roff, &r, &rlen));
}

/* NVTX paths that are malformed, each refused as "nvtx" in an AGG entry
 * and in a PC entry. */
static const struct {
	const char *bytes;
	uint16_t len;
} bad_paths[] = {
	{ "\x06" "epoch", 6 },          /* a range's length past the path */
	{ "\x00", 1 },               /* an empty range */
	{ "\x41", 1 },               /* 65 bytes: longer than a name may be */
	{ "\x03" "a\nb", 4 },          /* a control byte */
	{ "\x02" "ab\x01", 4 },        /* the last range cut short */
	{ "\x01" "a\x01" "b\x01" "c\x01" "d\x01" "e\x01" "f\x01" "g\x01" "h\x01" "i", 18 }, /* 9 ranges */
};

/* NVTX paths: read back range by range; every malformed one refused as
 * "nvtx" (or "short" when it runs past the datagram). */
static void test_wire_nvtx(void **state)
{
	(void)state;
	struct msg m;
	const uint8_t *good = epoch_train_step;
	msg_start(&m);
	msg_agg_nvtx(&m, "_Z4stepv", good, sizeof(epoch_train_step) - 1);
	msg_agg(&m, 5, 10, CUDA_WIRE_KIND_KERNEL, "cuLaunchKernel", "k");
	assert_int_equal(check_ended(&m, CUDA_WIRE_AGG), CWR_OK);
	struct cuda_agg_view v;
	size_t off = 0;
	assert_true(cuda_wire_next_agg(m.b, m.len, &off, &v));
	expect_epoch_train_step(&v);
	assert_true(cuda_wire_next_agg(m.b, m.len, &off, &v)); /* the next entry, after the path */
	assert_null(v.nvtx);
	assert_int_equal(v.a.stack_id, 5);

	for (size_t i = 0; i < ARRAY_SIZE(bad_paths); i++) {
		msg_start(&m);
		msg_agg_nvtx(&m, "k", (const uint8_t *)bad_paths[i].bytes, bad_paths[i].len);
		assert_int_equal(check_ended(&m, CUDA_WIRE_AGG), CWR_NVTX);
	}
	/* eight ranges of 64 bytes: the most there is, accepted */
	uint8_t most[CUDA_WIRE_NVTX_BYTES_MAX];
	for (int i = 0; i < CUDA_WIRE_NVTX_DEPTH_MAX; i++) {
		most[i * 65] = 64;
		memset(most + i * 65 + 1, 'a' + i, 64);
	}
	msg_start(&m);
	msg_agg_nvtx(&m, "k", most, sizeof(most));
	assert_int_equal(check_ended(&m, CUDA_WIRE_AGG), CWR_OK);
	/* a path declared past the datagram's end */
	msg_start(&m);
	msg_agg_nvtx(&m, "k", good, sizeof(epoch_train_step) - 1);
	msg_end(&m, CUDA_WIRE_AGG);
	assert_int_equal(check_set16(&m, offsetof(struct cuda_wire_agg, nvtx_len), 200), CWR_SHORT);
}


/* A PC entry (lib/cuda_wire.h): a part of a kernel's time at one
 * instruction and stall reason. */
static void msg_pc_nvtx(struct msg *m, uint64_t stack_id, uint64_t ns, uint16_t kind, const char *name,
			const char *stall, uint64_t offset, const void *path, uint16_t path_len)
{
	const char *api = "cuLaunchKernel";
	struct cuda_wire_pc a = { .stack_id = stack_id, .total_ns = ns, .count = 3, .tid = 11,
				  .kind = kind, .api_len = (uint16_t)strlen(api), .stream = 7, .context = 2,
				  .name_len = (uint16_t)strlen(name), .stall_len = (uint16_t)strlen(stall),
				  .cubin_id = 0xc0b1, .pc_offset = offset, .nvtx_len = path_len };
	msg_put(m, &a, sizeof(a));
	msg_put(m, api, a.api_len);
	msg_put(m, name, a.name_len);
	msg_put(m, stall, a.stall_len);
	msg_put(m, path, path_len);
	msg_entry_end(m);
}

static void msg_pc(struct msg *m, uint64_t stack_id, uint64_t ns, uint16_t kind, const char *name,
		   const char *stall, uint64_t offset)
{
	msg_pc_nvtx(m, stack_id, ns, kind, name, stall, offset, "", 0);
}

#define LS "smsp__pcsamp_warps_issue_stalled_long_scoreboard"

static void good_pc(struct msg *m)
{
	msg_start(m);
	msg_pc(m, 0, 420000, CUDA_WIRE_KIND_KERNEL, "_Z4gemmPf", LS, 0x1a0);
	msg_pc(m, 0, 140000, CUDA_WIRE_KIND_GRAPH, "_Z4gemmPf", "smsp__pcsamp_warps_issue_stalled_selected", 0x200);
	msg_end(m, CUDA_WIRE_PC);
}

/* PC messages: accepted whole, or refused by reason (truncated, forged
 * lengths, oversized, wrong kind, unprintable reason, no samples, bytes
 * in the padding); read back with the reason and the instruction. */
static void test_wire_pc(void **state)
{
	(void)state;
	struct msg m;
	good_pc(&m);
	expect_valid(&m, CUDA_WIRE_PC, 2);
	size_t off = 0;
	struct cuda_agg_view v;
	assert_true(cuda_wire_next_pc(m.b, m.len, &off, &v));
	assert_int_equal(v.a.total_ns, 420000);
	assert_int_equal(v.a.kind, CUDA_WIRE_KIND_KERNEL);
	assert_int_equal(v.pc_offset, 0x1a0);
	assert_int_equal(v.cubin_id, 0xc0b1);
	assert_int_equal(v.stall_len, strlen(LS));
	assert_memory_equal(v.stall, LS, v.stall_len);
	assert_memory_equal(v.name, "_Z4gemmPf", v.a.name_len);
	assert_true(cuda_wire_next_pc(m.b, m.len, &off, &v));
	assert_int_equal(v.pc_offset, 0x200);
	assert_false(cuda_wire_next_pc(m.b, m.len, &off, &v));
	assert_int_equal(off, m.len);

	const size_t e0 = sizeof(struct cuda_wire_hdr);
	/* truncated: the last entry's strings cut */
	assert_int_equal(check_len(m.b, m.len - 24), CWR_LENGTH);
	struct cuda_wire_hdr h;
	memcpy(&h, m.b, sizeof(h));
	h.length = (uint32_t)(m.len - 24);
	memcpy(m.b, &h, sizeof(h));
	assert_int_equal(check_len(m.b, m.len - 24), CWR_SHORT);
	/* a forged stall length past the message, or over the limit, or 0 */
	const size_t stall_len = offsetof(struct cuda_wire_pc, stall_len);
	good_pc(&m);
	assert_int_equal(check_set16(&m, stall_len, 4000), CWR_STRING);
	assert_int_equal(check_set16(&m, stall_len, 0), CWR_STRING);
	/* within the limit: over the next entry's binary fields */
	assert_int_equal(check_set16(&m, stall_len, 120), CWR_STRING);
	good_pc(&m); /* the last entry's: past the message */
	assert_int_equal(check_set16(&m, 144 + stall_len, 120), CWR_SHORT);
	/* a copy has no instructions */
	good_pc(&m);
	assert_int_equal(check_set16(&m, offsetof(struct cuda_wire_pc, kind), CUDA_WIRE_KIND_MEMCPY), CWR_KIND);
	/* an unprintable reason */
	good_pc(&m);
	m.b[e0 + sizeof(struct cuda_wire_pc) + strlen("cuLaunchKernel") + strlen("_Z4gemmPf") + 3] = '\n';
	assert_int_equal(check(&m), CWR_STRING);
	/* no samples */
	good_pc(&m);
	assert_int_equal(check_set64(&m, offsetof(struct cuda_wire_pc, count), 0), CWR_VALUE);
	/* more entries declared than there are; padding not zero */
	good_pc(&m);
	memcpy(&h, m.b, sizeof(h));
	h.count = 3;
	memcpy(m.b, &h, sizeof(h));
	assert_int_equal(check(&m), CWR_COUNT);
	msg_start(&m);
	msg_pc(&m, 0, 5, CUDA_WIRE_KIND_KERNEL, "kk", "s", 0); /* 72 + 14 + 2 + 1: 7 bytes of padding */
	assert_int_equal(check_ended(&m, CUDA_WIRE_PC), CWR_OK);
	m.b[m.len - 1] = 1;
	assert_int_equal(check(&m), CWR_RESERVED);
	/* reserved words not zero */
	const uint32_t one32 = 1;
	good_pc(&m);
	assert_int_equal(check_set16(&m, offsetof(struct cuda_wire_pc, reserved16), 1), CWR_RESERVED);
	good_pc(&m);
	assert_int_equal(check_set(&m, offsetof(struct cuda_wire_pc, reserved), &one32, 4), CWR_RESERVED);

	/* The NVTX path of a PC entry: after the reason, read back range by
	 * range, the reason intact; a malformed, oversized or cut path is
	 * refused as an AGG entry's is. */
	const char *path = (const char *)epoch_train_step;
	const uint16_t path_len = sizeof(epoch_train_step) - 1;
	msg_start(&m);
	msg_pc_nvtx(&m, 77, 420000, CUDA_WIRE_KIND_KERNEL, "_Z4gemmPf", LS, 0x1a0, path, path_len);
	msg_pc(&m, 78, 5, CUDA_WIRE_KIND_KERNEL, "_Z4gemmPf", LS, 0x1c0);
	assert_int_equal(check_ended(&m, CUDA_WIRE_PC), CWR_OK);
	off = 0;
	assert_true(cuda_wire_next_pc(m.b, m.len, &off, &v));
	assert_int_equal(v.a.stack_id, 77);
	assert_memory_equal(v.nvtx, path, path_len);
	assert_int_equal(v.stall_len, strlen(LS));
	assert_memory_equal(v.stall, LS, v.stall_len);
	expect_epoch_train_step(&v);
	assert_true(cuda_wire_next_pc(m.b, m.len, &off, &v));
	assert_int_equal(v.a.stack_id, 78);
	assert_null(v.nvtx);
	assert_int_equal(v.a.nvtx_len, 0);
	assert_false(cuda_wire_next_pc(m.b, m.len, &off, &v));
	assert_int_equal(off, m.len);
	for (size_t i = 0; i < ARRAY_SIZE(bad_paths); i++) {
		msg_start(&m);
		msg_pc_nvtx(&m, 77, 5, CUDA_WIRE_KIND_KERNEL, "k", "s", 0, bad_paths[i].bytes, bad_paths[i].len);
		assert_int_equal(check_ended(&m, CUDA_WIRE_PC), CWR_NVTX);
	}
	msg_start(&m);
	msg_pc_nvtx(&m, 77, 5, CUDA_WIRE_KIND_KERNEL, "k", "s", 0, path, path_len);
	msg_end(&m, CUDA_WIRE_PC);
	const size_t nvtx_len = offsetof(struct cuda_wire_pc, nvtx_len);
	assert_int_equal(check_set16(&m, nvtx_len, CUDA_WIRE_NVTX_BYTES_MAX + 1), CWR_NVTX); /* over the limit */
	assert_int_equal(check_set16(&m, nvtx_len, 200), CWR_SHORT); /* past the datagram's end */

	/* STATS: the PC state in range, the reserved word zero */
	msg_start(&m);
	struct cuda_wire_stats st = { .pc_samples = 9, .pc_state = CUDA_WIRE_PC_REFUSED };
	memcpy(m.b + m.len, &st, sizeof(st));
	m.len += sizeof(st);
	m.count = 1;
	assert_int_equal(check_ended(&m, CUDA_WIRE_STATS), CWR_OK);
	st.pc_state = CUDA_WIRE_PC_STATE_MAX + 1;
	assert_int_equal(check_set(&m, 0, &st, sizeof(st)), CWR_VALUE);
	st.pc_state = 0;
	st.reserved = 1;
	assert_int_equal(check_set(&m, 0, &st, sizeof(st)), CWR_RESERVED);
}

static void test_wire_check(void **state)
{
	(void)state;
	struct msg m;
	size_t off = 0;
	struct cuda_agg_view v;
	msg_hello(&m);
	assert_int_equal(check(&m), CWR_OK);
	msg_device(&m);
	assert_int_equal(check(&m), CWR_OK);

	good_agg(&m);
	expect_valid(&m, CUDA_WIRE_AGG, 2);
	assert_true(cuda_wire_next_agg(m.b, m.len, &off, &v));
	assert_int_equal(v.a.stack_id, 1001);
	assert_int_equal(v.a.total_ns, 700000000);
	assert_memory_equal(v.api, "cudaLaunchKernel", 16);
	assert_memory_equal(v.name, "_Z4gemmPf", 9);
	assert_true(cuda_wire_next_agg(m.b, m.len, &off, &v));
	assert_memory_equal(v.name, "HtoD", 4);
	assert_false(cuda_wire_next_agg(m.b, m.len, &off, &v));

	/* Each corruption, its reason. */
	good_agg(&m);
	assert_int_equal(check_len(m.b, 8), CWR_SHORT);
	assert_int_equal(check_len(m.b, CUDA_WIRE_MAX_MSG + 1), CWR_OVERSIZE);
	m.b[0] ^= 1;
	assert_int_equal(check(&m), CWR_MAGIC);
	good_agg(&m);
	m.b[4] = CUDA_WIRE_VERSION + 1;
	assert_int_equal(check(&m), CWR_VERSION);
	good_agg(&m);
	assert_int_equal(check_ended(&m, 9), CWR_TYPE);
	good_agg(&m);
	assert_int_equal(check_ended(&m, 0), CWR_TYPE);
	/* the declared length is not the datagram's: longer, shorter, cut */
	good_agg(&m);
	assert_int_equal(check_len(m.b, m.len - 8), CWR_LENGTH);
	m.len += 8;
	assert_int_equal(check(&m), CWR_LENGTH);
	/* bytes after the last entry, with a length that says so */
	good_agg(&m);
	m.len += 8;
	assert_int_equal(check_ended(&m, CUDA_WIRE_AGG), CWR_LENGTH);
	/* counts: none, more than fit, more than there are */
	good_agg(&m);
	m.count = 0;
	assert_int_equal(check_ended(&m, CUDA_WIRE_AGG), CWR_COUNT);
	m.count = 100000;
	assert_int_equal(check_ended(&m, CUDA_WIRE_AGG), CWR_COUNT);
	m.count = 3;
	assert_int_equal(check_ended(&m, CUDA_WIRE_AGG), CWR_COUNT);
	/* kind */
	const size_t kind = offsetof(struct cuda_wire_agg, kind), api_len = offsetof(struct cuda_wire_agg, api_len),
		     name_len = offsetof(struct cuda_wire_agg, name_len);
	good_agg(&m);
	assert_int_equal(check_set16(&m, kind, 0), CWR_KIND);
	assert_int_equal(check_set16(&m, kind, CUDA_WIRE_KIND_MAX + 1), CWR_KIND);
	/* string lengths: 0, over the limits, past the end */
	good_agg(&m);
	assert_int_equal(check_set16(&m, api_len, 0), CWR_STRING);
	assert_int_equal(check_set16(&m, api_len, CUDA_WIRE_API_MAX + 1), CWR_STRING);
	good_agg(&m);
	assert_int_equal(check_set16(&m, name_len, CUDA_WIRE_NAME_MAX + 1), CWR_STRING);
	assert_int_equal(check_set16(&m, name_len, 900), CWR_SHORT);
	/* a control byte in a name */
	good_agg(&m);
	m.b[16 + sizeof(struct cuda_wire_agg) + 17] = '\n';
	assert_int_equal(check(&m), CWR_STRING);
	/* reserved and padding */
	good_agg(&m);
	assert_int_equal(check_set16(&m, offsetof(struct cuda_wire_agg, nvtx_len), CUDA_WIRE_NVTX_BYTES_MAX + 1),
			 CWR_NVTX);
	good_agg(&m);
	/* entry 1: 48 + 16 + 9 bytes = 73, padded to 80 */
	m.b[16 + 79] = 1;
	assert_int_equal(check(&m), CWR_RESERVED);
	/* values: no activities, more than a day of GPU time */
	good_agg(&m);
	assert_int_equal(check_set64(&m, offsetof(struct cuda_wire_agg, count), 0), CWR_VALUE);
	good_agg(&m);
	assert_int_equal(check_set64(&m, offsetof(struct cuda_wire_agg, total_ns), CUDA_WIRE_MAX_TOTAL_NS + 1),
			 CWR_VALUE);

	/* HELLO: count, size, flags, its version string */
	msg_hello(&m);
	m.count = 2;
	assert_int_equal(check_ended(&m, CUDA_WIRE_HELLO), CWR_COUNT);
	msg_hello(&m);
	m.len += 8;
	assert_int_equal(check_ended(&m, CUDA_WIRE_HELLO), CWR_LENGTH);
	msg_hello(&m);
	m.len -= 8;
	assert_int_equal(check_ended(&m, CUDA_WIRE_HELLO), CWR_SHORT);
	msg_hello(&m);
	m.b[16 + offsetof(struct cuda_wire_hello, flags)] = 1;
	assert_int_equal(check(&m), CWR_RESERVED);
	msg_hello(&m);
	memset(m.b + 16 + offsetof(struct cuda_wire_hello, lib_version), 'x', 32); /* no NUL */
	assert_int_equal(check(&m), CWR_STRING);
	msg_hello(&m);
	m.b[16 + offsetof(struct cuda_wire_hello, lib_version) + 20] = 'x'; /* after the NUL */
	assert_int_equal(check(&m), CWR_STRING);
	/* DEVICE: reserved, name */
	msg_device(&m);
	m.b[16 + offsetof(struct cuda_wire_device, reserved)] = 1;
	assert_int_equal(check(&m), CWR_RESERVED);
	msg_device(&m);
	m.b[16 + offsetof(struct cuda_wire_device, name)] = 1;
	assert_int_equal(check(&m), CWR_STRING);

	/* SPAN: the launch's API, name and NVTX path as an AGG entry's; end before start */
	msg_start(&m);
	struct cuda_wire_span s = { .start_ns = 10, .end_ns = 20, .kind = 1, .api_len = 2, .name_len = 3,
				    .nvtx_len = 3 };
	memcpy(m.b + m.len, &s, sizeof(s));
	memcpy(m.b + m.len + sizeof(s), "cuabc\x02xy", 8);
	m.len += sizeof(s) + 8;
	m.count = 1;
	assert_int_equal(check_ended(&m, CUDA_WIRE_SPAN), CWR_OK);
	m.b[16 + sizeof(s) + 5] = 3; /* a range longer than the path */
	assert_int_equal(check(&m), CWR_NVTX);
	s.nvtx_len = 9; /* a path past the message */
	assert_int_equal(check_set(&m, 0, &s, sizeof(s)), CWR_SHORT);
	s.nvtx_len = 3;
	memcpy(m.b + 16, &s, sizeof(s));
	m.b[16 + sizeof(s) + 5] = 2;
	m.b[16 + sizeof(s) + 6] = 1; /* not printable */
	assert_int_equal(check(&m), CWR_NVTX);
	m.b[16 + sizeof(s) + 6] = 'x';
	s.api_len = 0;
	assert_int_equal(check_set(&m, 0, &s, sizeof(s)), CWR_STRING);
	s.api_len = 2;
	s.end_ns = 5;
	assert_int_equal(check_set(&m, 0, &s, sizeof(s)), CWR_VALUE);

	for (int r = 0; r < CWR_MAX; r++)
		assert_string_not_equal(cuda_wire_reject_name((enum cuda_wire_reject)r), "unknown");
	char uuid[48];
	uint8_t raw[16] = { 0 };
	cuda_format_uuid(raw, uuid);
	assert_string_equal(uuid, "");
	for (int i = 0; i < 16; i++)
		raw[i] = (uint8_t)(0xa0 + i);
	cuda_format_uuid(raw, uuid);
	assert_string_equal(uuid, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
}

/* --- the join --------------------------------------------------------------- */

struct emitted {
	int n;
	uint64_t stack_id[64], ns[64];
	bool with_stack[64];
	char name[64][32], uuid[64][48];
};

static void on_emit(void *ctx, const struct cuda_work *w, const void *rec, size_t size)
{
	struct emitted *e = ctx;
	if (e->n >= 64) /* a flood: counted by the agent's stats */
		return;
	if (rec) {
		const struct oncpu_sample *s = rec;
		assert_int_equal(s->value, w->stack_id);
		assert_true(size >= ONCPU_HDR_SIZE);
	}
	e->stack_id[e->n] = w->stack_id;
	e->ns[e->n] = w->total_ns;
	e->with_stack[e->n] = rec != NULL;
	snprintf(e->name[e->n], sizeof(e->name[0]), "%s", w->name);
	snprintf(e->uuid[e->n], sizeof(e->uuid[0]), "%s", w->gpu_uuid);
	e->n++;
}

/* A cuda listening in a fresh temporary directory, emitting into e, with
 * its /proc at proc_root (NULL: that directory); cuda_env_close undoes it. */
struct cuda_env {
	char *dir;
	struct buf err;
	struct cuda *c;
};

static struct cuda *cuda_env_open(struct cuda_env *env, const char *proc_root, struct emitted *e)
{
	env->dir = make_temp_dir();
	memset(&env->err, 0, sizeof(env->err));
	env->c = cuda_open(env->dir, proc_root ? proc_root : env->dir, NULL, on_emit, e, &env->err);
	if (!env->c)
		fail_msg("cuda_open: %s", env->err.data ? env->err.data : "");
	return env->c;
}

static void cuda_env_close(struct cuda_env *env)
{
	cuda_close(env->c);
	buf_free(&env->err);
	rm_rf(env->dir);
	free(env->dir);
}

static void launch_rec(struct oncpu_sample *s, uint32_t pid, uint64_t stack_id)
{
	memset(s, 0, sizeof(*s));
	s->kind = ONCPU_KIND_CUDA_LAUNCH;
	s->value = stack_id;
	s->arg = CUDA_WIRE_KIND_KERNEL;
	s->pid = pid;
	s->tid = pid + 1;
	s->ustack_len = 1;
	s->frames[0] = 0x400100;
}

static void test_join(void **state)
{
	(void)state;
	struct emitted e = { 0 };
	struct cuda_env env;
	struct cuda *c = cuda_env_open(&env, NULL, &e);
	struct cuda_stats st;
	struct msg m;
	const uint64_t t0 = 1000000000000ull;

	/* Before HELLO, nothing is taken. */
	good_agg(&m);
	cuda_handle_message(c, 50, m.b, m.len, t0);
	cuda_get_stats(c, &st);
	assert_int_equal(st.rejected[CWR_ORDER], 1);
	assert_int_equal(st.entries, 0);
	msg_hello(&m);
	cuda_handle_message(c, 50, m.b, m.len, t0);
	cuda_handle_message(c, 50, m.b, m.len, t0); /* once */
	msg_device(&m);
	cuda_handle_message(c, 50, m.b, m.len, t0);
	cuda_get_stats(c, &st);
	assert_int_equal(st.rejected[CWR_ORDER], 2);
	assert_int_equal(st.processes, 1);
	assert_int_equal(st.messages, 2);

	/* stack 1001 unknown yet: held; stack 0: emitted at once, without. */
	good_agg(&m);
	cuda_handle_message(c, 50, m.b, m.len, t0);
	assert_int_equal(e.n, 1);
	assert_int_equal(e.stack_id[0], 0);
	assert_false(e.with_stack[0]);
	assert_string_equal(e.name[0], "HtoD");
	assert_string_equal(e.uuid[0], "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
	assert_int_equal(cuda_pending(c), 1);
	cuda_join(c, t0 + 1000000);
	assert_int_equal(e.n, 1);
	/* Its stack arrives (from another process first: not it). */
	struct oncpu_sample s;
	launch_rec(&s, 51, 1001);
	cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	cuda_join(c, t0 + 2000000);
	assert_int_equal(e.n, 1);
	launch_rec(&s, 50, 1001);
	cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	cuda_join(c, t0 + 3000000);
	assert_int_equal(e.n, 2);
	assert_true(e.with_stack[1]);
	assert_int_equal(e.ns[1], 700000000);
	assert_int_equal(cuda_pending(c), 0);

	/* Known stack: joined at once, and again later (stacks stay). */
	good_agg(&m);
	cuda_handle_message(c, 50, m.b, m.len, t0 + 4000000);
	assert_int_equal(e.n, 4);
	assert_true(e.with_stack[2] && e.stack_id[2] == 1001);
	assert_false(e.with_stack[3]);

	/* Unknown stack: held for CUDA_HOLD_NS, then emitted without one. */
	msg_start(&m);
	msg_agg(&m, 4242, 123, CUDA_WIRE_KIND_KERNEL, "cuLaunchKernel", "k");
	msg_end(&m, CUDA_WIRE_AGG);
	cuda_handle_message(c, 50, m.b, m.len, t0);
	cuda_join(c, t0 + CUDA_HOLD_NS - 1);
	assert_int_equal(e.n, 4);
	cuda_join(c, t0 + CUDA_HOLD_NS);
	assert_int_equal(e.n, 5);
	assert_false(e.with_stack[4]);
	assert_int_equal(e.ns[4], 123);
	cuda_get_stats(c, &st);
	assert_int_equal(st.entries, 5);
	assert_int_equal(st.joined, 2);
	assert_int_equal(st.not_sampled, 2);
	assert_int_equal(st.unknown_stack, 1);
	assert_int_equal(st.gpu_ns, 2 * 700000000ull + 2 * 5 + 123);
	assert_int_equal(st.not_sampled_ns, 2 * 5 + 123);

	/* A flood: past the connection's budget (two seconds' worth), AGGs
	 * are refused whole, and taken again as the budget refills. */
	msg_start(&m);
	for (int i = 0; i < 500; i++)
		msg_agg(&m, 0, 1, CUDA_WIRE_KIND_KERNEL, "a", "k");
	msg_end(&m, CUDA_WIRE_AGG);
	const uint64_t t1 = t0 + 10 * CUDA_HOLD_NS;
	e.n = 0;
	uint64_t entries_before = st.entries;
	int sent = 0;
	for (; sent < 2 * CUDA_MAX_ENTRIES_PER_CONN_SEC / 500 + 5; sent++) {
		cuda_handle_message(c, 50, m.b, m.len, t1);
		e.n = 0;
	}
	cuda_get_stats(c, &st);
	assert_int_equal(st.entries - entries_before, 2 * CUDA_MAX_ENTRIES_PER_CONN_SEC);
	assert_int_equal(st.rejected[CWR_RATE], 5);
	cuda_handle_message(c, 50, m.b, m.len, t1 + 1000000000ull / CUDA_MAX_ENTRIES_PER_CONN_SEC * 500);
	cuda_get_stats(c, &st);
	assert_int_equal(st.rejected[CWR_RATE], 5);
	assert_int_equal(st.entries - entries_before, 2 * CUDA_MAX_ENTRIES_PER_CONN_SEC + 500);
	e.n = 0;

	/* Malformed launch records are not kept. */
	launch_rec(&s, 50, 0);
	cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	launch_rec(&s, 50, 9);
	cuda_add_stack(c, &s, ONCPU_HDR_SIZE - 1);
	cuda_get_stats(c, &st);
	assert_int_equal(st.stacks_malformed, 2);
	cuda_env_close(&env);
}

/* Many connections flooding within their own budgets spend everyone's:
 * they are refused from then on, but a library that sends little still
 * gets its entries through (its fair share), and so does a flooder again
 * once everyone's budget has refilled. */
static void test_flood_leaves_a_library_its_share(void **state)
{
	(void)state;
	struct emitted e = { 0 };
	struct cuda_env env;
	struct cuda *c = cuda_env_open(&env, NULL, &e);
	const uint64_t t0 = 1000000000000ull;
	struct msg hello, flood, lib;
	msg_hello(&hello);
	msg_start(&flood);
	for (int i = 0; i < 500; i++)
		msg_agg(&flood, 0, 1, CUDA_WIRE_KIND_KERNEL, "a", "k");
	msg_end(&flood, CUDA_WIRE_AGG);
	msg_start(&lib);
	msg_agg(&lib, 0, 1000, CUDA_WIRE_KIND_KERNEL, "cuLaunchKernel", "gemm");
	msg_agg(&lib, 0, 10, CUDA_WIRE_KIND_MEMCPY, "cuMemcpyHtoDAsync", "HtoD");
	msg_end(&lib, CUDA_WIRE_AGG);

	cuda_handle_message(c, 200, hello.b, hello.len, t0);
	const int flooders = 8;
	for (int f = 0; f < flooders; f++)
		cuda_handle_message(c, 100 + f, hello.b, hello.len, t0);
	/* Each flooder sends its own budget's worth: more than everyone's. */
	for (int round = 0; round < 2 * CUDA_MAX_ENTRIES_PER_CONN_SEC / 500; round++) {
		for (int f = 0; f < flooders; f++) {
			cuda_handle_message(c, 100 + f, flood.b, flood.len, t0);
			e.n = 0;
		}
	}
	struct cuda_stats st;
	cuda_get_stats(c, &st);
	assert_true(st.rejected[CWR_RATE] > 0);
	/* everyone's budget (two seconds' worth), and little more */
	assert_true(st.entries >= 2 * CUDA_MAX_ENTRIES_PER_SEC);
	assert_true(st.entries <= 2 * CUDA_MAX_ENTRIES_PER_SEC + flooders * 500);
	/* The library, every second, while each flooder sends its own
	 * budget's worth (more than everyone's, all together). */
	for (int sec = 1; sec <= 5; sec++) {
		uint64_t t = t0 + (uint64_t)sec * 1000000000ull;
		for (int r = 0; r < CUDA_MAX_ENTRIES_PER_CONN_SEC / 500; r++)
			for (int f = 0; f < flooders; f++)
				cuda_handle_message(c, 100 + f, flood.b, flood.len, t);
		cuda_get_stats(c, &st);
		uint64_t rejected = st.rejected[CWR_RATE], entries = st.entries;
		e.n = 0;
		cuda_handle_message(c, 200, lib.b, lib.len, t);
		cuda_get_stats(c, &st);
		assert_int_equal(st.rejected[CWR_RATE], rejected);
		assert_int_equal(st.entries, entries + 2);
		assert_int_equal(e.n, 2);
		assert_int_equal(e.ns[0] + e.ns[1], 1010);
		/* the flood was refused in this second: everyone's budget holds */
		assert_true(rejected > 0);
	}
	uint64_t flooded = st.entries - 5 * 2;
	assert_true(flooded <= 7 * CUDA_MAX_ENTRIES_PER_SEC + flooders * 500);
	cuda_env_close(&env);
}

/* The launch stack test_join_awaited says is on its way (a raw one the
 * collector unwinds once its tables are in): pid and stack id, 0 = none.
 * Test-only state, read by the callback cuda_join calls. */
static int32_t awaited_pid;
static uint64_t awaited_id;

static bool on_awaited(void *ctx, int32_t pid, uint64_t stack_id)
{
	(void)ctx;
	return pid == awaited_pid && stack_id == awaited_id;
}

/* GPU time whose launch stack is on its way (awaited) waits past
 * CUDA_HOLD_NS for it, up to CUDA_RAW_HOLD_NS, and is joined with it
 * when it comes; one whose stack is not awaited goes at CUDA_HOLD_NS. */
static void test_join_awaited(void **state)
{
	(void)state;
	struct emitted e = { 0 };
	struct cuda_env env;
	struct cuda *c = cuda_env_open(&env, NULL, &e);
	cuda_set_awaited(c, on_awaited);
	struct msg m;
	const uint64_t t0 = 1000000000000ull;
	msg_hello(&m);
	cuda_handle_message(c, 60, m.b, m.len, t0);
	for (uint64_t id = 77; id <= 79; id++) {
		msg_start(&m);
		msg_agg(&m, id, 1000 + id, CUDA_WIRE_KIND_KERNEL, "cuLaunchKernel", "k");
		msg_end(&m, CUDA_WIRE_AGG);
		cuda_handle_message(c, 60, m.b, m.len, t0);
	}
	assert_int_equal(cuda_pending(c), 3);
	/* 77 is awaited: past the hold it waits; 78 and 79 are not: out. */
	awaited_pid = 60;
	awaited_id = 77;
	cuda_join(c, t0 + CUDA_HOLD_NS);
	assert_int_equal(e.n, 2);
	assert_false(e.with_stack[0] || e.with_stack[1]);
	assert_int_equal(cuda_pending(c), 1);
	/* Another process's stack of that id is not it. */
	struct oncpu_sample s;
	launch_rec(&s, 61, 77);
	cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	cuda_join(c, t0 + CUDA_HOLD_NS + 1000000000ull);
	assert_int_equal(e.n, 2);
	/* Its stack comes (unwound late): joined with it. */
	launch_rec(&s, 60, 77);
	cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	cuda_join(c, t0 + CUDA_HOLD_NS + 2000000000ull);
	assert_int_equal(e.n, 3);
	assert_true(e.with_stack[2]);
	assert_int_equal(e.stack_id[2], 77);
	assert_int_equal(e.ns[2], 1077);
	/* One awaited for ever goes, without its stack, at CUDA_RAW_HOLD_NS. */
	msg_start(&m);
	msg_agg(&m, 80, 5, CUDA_WIRE_KIND_KERNEL, "cuLaunchKernel", "k");
	msg_end(&m, CUDA_WIRE_AGG);
	cuda_handle_message(c, 60, m.b, m.len, t0);
	awaited_id = 80;
	cuda_join(c, t0 + CUDA_RAW_HOLD_NS - 1);
	assert_int_equal(e.n, 3);
	cuda_join(c, t0 + CUDA_RAW_HOLD_NS);
	assert_int_equal(e.n, 4);
	assert_false(e.with_stack[3]);
	struct cuda_stats st;
	cuda_get_stats(c, &st);
	assert_int_equal(st.joined, 1);
	assert_int_equal(st.unknown_stack, 3);
	assert_int_equal(st.gpu_ns, 1077 + 1078 + 1079 + 5);
	awaited_pid = 0;
	awaited_id = 0;
	cuda_env_close(&env);
}

/* Whether (pid, id)'s stack is kept: an AGG for it is joined at once. */
static bool kept(struct cuda *c, struct emitted *e, int32_t pid, uint64_t id)
{
	struct msg m;
	msg_start(&m);
	msg_agg(&m, id, 10, CUDA_WIRE_KIND_KERNEL, "a", "k");
	msg_end(&m, CUDA_WIRE_AGG);
	int before = e->n;
	cuda_handle_message(c, pid, m.b, m.len, 0);
	bool joined = e->n == before + 1 && e->with_stack[before];
	cuda_join(c, CUDA_HOLD_NS); /* what was held goes now, without */
	e->n = 0;
	return joined;
}

/* The table is bounded: the oldest stacks go first; one process keeps at
 * most its share, so a flood from one does not push the others out. */
static void test_stack_eviction(void **state)
{
	(void)state;
	struct emitted e = { 0 };
	struct cuda_env env;
	struct cuda *c = cuda_env_open(&env, NULL, &e);
	struct msg m;
	msg_hello(&m);
	for (int32_t pid = 1; pid <= 9; pid++)
		cuda_handle_message(c, pid, m.b, m.len, 0);
	struct oncpu_sample s;
	/* A quiet process first, then a flood from another. */
	for (uint64_t i = 1; i <= 10; i++) {
		launch_rec(&s, 8, i);
		cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	}
	for (uint64_t i = 1; i <= CUDA_MAX_STACKS_PER_PROC + 2; i++) {
		launch_rec(&s, 9, i);
		cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	}
	/* a repeat replaces, it does not add */
	cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
	struct cuda_stats st;
	cuda_get_stats(c, &st);
	assert_int_equal(st.stacks_evicted, 2);
	assert_false(kept(c, &e, 9, 1));
	assert_false(kept(c, &e, 9, 2));
	assert_true(kept(c, &e, 9, 3));
	assert_true(kept(c, &e, 9, CUDA_MAX_STACKS_PER_PROC + 2));
	for (uint64_t i = 1; i <= 10; i++)
		assert_true(kept(c, &e, 8, i));

	/* Past the table's size, the oldest of all go, whoever they are. */
	uint64_t per = CUDA_MAX_STACKS_PER_PROC - 1, total = 10 + CUDA_MAX_STACKS_PER_PROC;
	for (int32_t pid = 1; pid <= 4; pid++)
		for (uint64_t i = 1; i <= per; i++) {
			launch_rec(&s, (uint32_t)pid, i);
			cuda_add_stack(c, &s, ONCPU_HDR_SIZE + 8);
		}
	total += 4 * per;
	uint64_t over = total - CUDA_MAX_STACKS; /* the quiet ten, then the flood's oldest */
	cuda_get_stats(c, &st);
	assert_int_equal(st.stacks_evicted, 2 + over);
	assert_false(kept(c, &e, 8, 10));
	assert_false(kept(c, &e, 9, over - 10 + 2));
	assert_true(kept(c, &e, 9, over - 10 + 3));
	assert_true(kept(c, &e, 1, 1));
	assert_true(kept(c, &e, 4, per));
	cuda_env_close(&env);
}

/* The real socket: permissions, a stale socket, SO_PEERCRED, oversized
 * datagrams, a connection that closes. */
static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	assert_true(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static int hellos;
static int32_t hello_pid;
static void on_hello(void *ctx, int32_t pid, uint64_t start_ticks)
{
	(void)ctx;
	(void)start_ticks;
	hellos++;
	hello_pid = pid;
}

static void test_socket(void **state)
{
	(void)state;
	char *root = make_temp_dir();
	char dir[64], sock[96];
	snprintf(dir, sizeof(dir), "%s/profiler", root);
	snprintf(sock, sizeof(sock), "%s/agent.sock", dir);
	struct emitted e = { 0 };
	struct buf err = { 0 };

	/* A regular file where the socket goes: refused, left alone. */
	assert_int_equal(mkdir(dir, 0700), 0);
	write_text(sock, "x");
	assert_null(cuda_open(dir, "/proc", on_hello, on_emit, &e, &err));
	assert_non_null(strstr(err.data, "not a socket"));
	buf_reset(&err);
	unlink(sock);
	/* A stale socket (bound, never unlinked) is replaced. */
	int stale = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	assert_int_equal(bind(stale, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(stale);
	struct cuda *c = cuda_open(dir, "/proc", on_hello, on_emit, &e, &err);
	assert_non_null(c);
	struct stat st;
	assert_int_equal(stat(sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0666);
	/* A second agent does not take a live socket from the first. */
	assert_null(cuda_open(dir, "/proc", on_hello, on_emit, &e, &err));
	assert_non_null(strstr(err.data, "listens on"));
	buf_reset(&err);
	assert_int_equal(stat(sock, &st), 0);

	int fd = connect_to(sock);
	struct msg m;
	msg_hello(&m);
	assert_int_equal(send(fd, m.b, m.len, 0), (ssize_t)m.len);
	good_agg(&m);
	assert_int_equal(send(fd, m.b, m.len, 0), (ssize_t)m.len);
	/* longer than any message: seen as such, not as a cut one */
	static uint8_t big[CUDA_WIRE_MAX_MSG + 100];
	memcpy(big, m.b, m.len);
	assert_int_equal(send(fd, big, sizeof(big), 0), (ssize_t)sizeof(big));
	for (int i = 0; i < 50 && e.n < 1; i++) {
		cuda_serve(c, 1000);
		usleep(10000);
	}
	cuda_serve(c, 1000);
	struct cuda_stats s;
	cuda_get_stats(c, &s);
	assert_int_equal(s.connections, 2); /* the second agent's probe, closed since */
	assert_int_equal(s.connections_open, 1);
	assert_int_equal(hellos, 1);
	assert_int_equal(hello_pid, getpid()); /* the peer's pid, from the kernel */
	assert_int_equal(s.messages, 2);
	assert_int_equal(s.rejected[CWR_OVERSIZE], 1);
	assert_int_equal(e.n, 1); /* stack 0 at once; 1001 is held */
	close(fd);
	for (int i = 0; i < 50 && s.connections_open; i++) {
		cuda_serve(c, 2000);
		cuda_get_stats(c, &s);
		usleep(10000);
	}
	assert_int_equal(s.connections_open, 0);
	/* What is held survives the connection. */
	assert_int_equal(cuda_pending(c), 1);
	cuda_join(c, 1000 + CUDA_HOLD_NS);
	assert_int_equal(e.n, 2);
	cuda_close(c);
	assert_int_equal(access(sock, F_OK), -1); /* removed */
	buf_free(&err);
	rm_temp_dir(root);
}

/* The agent stops (cuda_stop): every datagram a library sent before is
 * read -- more than one cuda_serve takes from a connection, and those of a
 * connection not accepted yet -- and every send after it fails, so the
 * library knows to keep that time for the next agent. */
static void test_stop_reads_everything_sent(void **state)
{
	(void)state;
	struct emitted e = { 0 };
	struct cuda_env env;
	struct cuda *c = cuda_env_open(&env, "/proc", &e);
	char sock[96];
	snprintf(sock, sizeof(sock), "%s/agent.sock", env.dir);

	int fd = connect_to(sock);
	int big = 1 << 20;
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big)), 0);
	struct msg m;
	msg_hello(&m);
	assert_int_equal(send(fd, m.b, m.len, 0), (ssize_t)m.len);
	cuda_serve(c, 1000); /* accepted */
	const int n = CUDA_SERVE_BATCH + 44;
	msg_start(&m);
	msg_agg(&m, 0, 7, CUDA_WIRE_KIND_KERNEL, "cuLaunchKernel", "k");
	msg_end(&m, CUDA_WIRE_AGG);
	for (int i = 0; i < n; i++)
		assert_int_equal(send(fd, m.b, m.len, MSG_DONTWAIT), (ssize_t)m.len);
	/* a second library, connected but not accepted yet */
	int fd2 = connect_to(sock);
	struct msg h;
	msg_hello(&h);
	assert_int_equal(send(fd2, h.b, h.len, 0), (ssize_t)h.len);
	assert_int_equal(send(fd2, m.b, m.len, 0), (ssize_t)m.len);

	cuda_stop(c, 2000);
	struct cuda_stats s;
	cuda_get_stats(c, &s);
	assert_int_equal(s.gpu_ns, 7ull * (n + 1));
	assert_int_equal(s.entries, n + 1);
	assert_int_equal(s.connections_open, 0);
	assert_int_equal(s.processes, 2);
	/* After it: refused, and the sender sees it. */
	assert_int_equal(send(fd, m.b, m.len, MSG_DONTWAIT | MSG_NOSIGNAL), -1);
	assert_true(errno == EPIPE || errno == ECONNRESET);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	int fd3 = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	assert_int_equal(connect(fd3, (struct sockaddr *)&sa, sizeof(sa)), -1);
	assert_int_equal(errno, ECONNREFUSED);
	close(fd3);
	close(fd);
	close(fd2);
	cuda_env_close(&env);
}

/* --- collect_cuda: the samples ------------------------------------------ */

static void copy_self(const char *to)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "cp /proc/%d/exe '%s'", getpid(), to);
	assert_int_equal(system(cmd), 0);
}

static const char *attr(const struct batch *b, uint32_t res, const char *key)
{
	for (uint32_t i = b->res_off[res]; i < b->res_off[res + 1]; i += 2)
		if (strcmp(strtab_get(&b->strings, b->res_ids[i]), key) == 0)
			return strtab_get(&b->strings, b->res_ids[i + 1]);
	return NULL;
}

static uint32_t wanted[4];
static int nwanted;
static void want(void *ctx, uint32_t file)
{
	(void)ctx;
	if (nwanted < 4)
		wanted[nwanted++] = file;
}

static void test_collect_cuda(void **state)
{
	(void)state;
	char *root = make_temp_dir();
	char app[600], lib[600];
	snprintf(app, sizeof(app), "%s/trainer", root);
	snprintf(lib, sizeof(lib), "%s/libembercuda.so", root);
	copy_self(app);
	copy_self(lib);
	struct stat sa, sl;
	assert_int_equal(stat(app, &sa), 0);
	assert_int_equal(stat(lib, &sl), 0);
	fake_proc(root, 4242, "trainer", 'R', 500);
	fake_proc_link(root, 4242, "exe", app);
	fake_proc_link(root, 4242, "root", "/");
	char maps[2048];
	snprintf(maps, sizeof(maps),
		 "00400000-00500000 r-xp 00001000 %02x:%02x %llu %s\n"
		 "00800000-00900000 r-xp 00001000 %02x:%02x %llu %s\n",
		 major(sa.st_dev), minor(sa.st_dev), (unsigned long long)sa.st_ino, app,
		 major(sl.st_dev), minor(sl.st_dev), (unsigned long long)sl.st_ino, lib);
	fake_proc_file(root, 4242, "maps", maps);

	struct kallsyms k = { 0 };
	struct vdso v;
	vdso_load(&v);
	struct file_registry files;
	files_init(&files, root, NULL, NULL);
	struct proc_table procs;
	proc_table_init(&procs, &files, root);
	struct batch b;
	batch_init(&b);
	struct collector c = { .batch = &b, .procs = &procs, .files = &files, .ksyms = &k, .vdso = &v,
			       .host_name = "h", .host_arch = "amd64", .ns_per_tick = 10000000 };

	/* The launch: the marker and its caller in the library, then the
	 * program's launch_gemm, train_step and main; a library frame below
	 * the program's stays (only the top run goes). */
	struct oncpu_sample s;
	memset(&s, 0, sizeof(s));
	s.kind = ONCPU_KIND_CUDA_LAUNCH;
	s.value = 1001;
	s.pid = 4242;
	s.tid = 4243;
	s.proc_start_ns = 500ull * 10000000ull;
	memcpy(s.comm, "trainer", 8);
	s.unwind_mode = UWM_CFI;
	s.ustack_len = 5;
	s.frames[0] = 0x800100; /* ember_cuda_launch_marker */
	s.frames[1] = 0x800201; /* the library's callback */
	s.frames[2] = 0x400301; /* launch_gemm */
	s.frames[3] = 0x800401; /* a library frame in between: kept */
	s.frames[4] = 0x400501; /* main */
	size_t size = ONCPU_HDR_SIZE + 5 * sizeof(__u64);
	char api[] = "cudaLaunchKernel", name[] = "_Z4gemmPf", gpu[] = "NVIDIA H100";
	struct cuda_work w = { .pid = 4242, .start_ticks = 500, .stack_id = 1001,
			       .total_ns = 700000000, .count = 7, .device = 1, .stream = 7,
			       .context = 3, .kind = CUDA_WIRE_KIND_KERNEL, .api = api, .name = name };
	snprintf(w.gpu_name, sizeof(w.gpu_name), "%s", gpu);
	snprintf(w.gpu_uuid, sizeof(w.gpu_uuid), "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
	collect_cuda(&c, &w, &s, size, 1000);
	assert_int_equal(batch_samples(&b), 1);
	assert_int_equal(b.samples[0].kind, EK_CUDA);
	assert_int_equal(b.samples[0].value, 700000000);
	uint32_t st = b.samples[0].stack;
	uint32_t *ids = b.stack_ids + b.stack_off[st];
	assert_int_equal(b.stack_off[st + 1] - b.stack_off[st], 5);
	assert_int_equal(b.frames[ids[0]].address, 0x400500 - 0x400000 + 0x1000); /* main */
	assert_int_equal(b.frames[ids[1]].address, 0x800400 - 0x800000 + 0x1000); /* kept */
	assert_int_equal(b.frames[ids[2]].address, 0x400300 - 0x400000 + 0x1000); /* launch_gemm */
	assert_int_equal(b.frames[ids[3]].type, FT_CUDA_LAUNCH);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[3]].name), "cudaLaunchKernel");
	assert_int_equal(b.frames[ids[4]].type, FT_CUDA_KERNEL);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[4]].name), "_Z4gemmPf");
	uint32_t r = b.samples[0].resource;
	assert_string_equal(attr(&b, r, "gpu.device.index"), "1");
	assert_string_equal(attr(&b, r, "gpu.device.uuid"), "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
	assert_string_equal(attr(&b, r, "gpu.name"), "NVIDIA H100");
	assert_string_equal(attr(&b, r, "cuda.stream.id"), "7");
	assert_string_equal(attr(&b, r, "cuda.context.id"), "3");
	assert_string_equal(attr(&b, r, "process.executable.name"), "trainer");
	assert_string_equal(attr(&b, r, "process.pid"), "4242");
	assert_string_equal(attr(&b, r, "thread.name"), "trainer");

	/* Without a stack: one error frame, then the launch and the leaf; the
	 * leaf's type follows the kind; no uuid or name when unknown. */
	char copy[] = "HtoD", api2[] = "cudaMemcpyAsync";
	struct cuda_work w2 = { .pid = 4242, .start_ticks = 500, .total_ns = 50, .count = 1,
				.kind = CUDA_WIRE_KIND_MEMCPY, .api = api2, .name = copy };
	collect_cuda(&c, &w2, NULL, 0, 1100);
	assert_int_equal(batch_samples(&b), 2);

	/* NVTX ranges: one nvtx frame each, outermost first, between the
	 * CPU frames and the launch. */
	char nvtx_path[] = "\x05" "epoch" "\x0a" "train_step";
	struct cuda_work wn = w;
	wn.nvtx = nvtx_path;
	wn.nvtx_len = sizeof(nvtx_path) - 1;
	collect_cuda(&c, &wn, &s, size, 1200);
	assert_int_equal(batch_samples(&b), 3);
	st = b.samples[2].stack;
	ids = b.stack_ids + b.stack_off[st];
	assert_int_equal(b.stack_off[st + 1] - b.stack_off[st], 7);
	assert_int_equal(b.frames[ids[2]].address, 0x400300 - 0x400000 + 0x1000); /* launch_gemm */
	assert_int_equal(b.frames[ids[3]].type, FT_NVTX);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[3]].name), "epoch");
	assert_int_equal(b.frames[ids[4]].type, FT_NVTX);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[4]].name), "train_step");
	assert_int_equal(b.frames[ids[5]].type, FT_CUDA_LAUNCH);
	assert_int_equal(b.frames[ids[6]].type, FT_CUDA_KERNEL);

	/* A span: no sample (its time is the AGG entries'), a span under the
	 * very stack the sample with the same launch has, its resource too. */
	struct cuda_work ws = wn;
	ws.span = true;
	ws.count = 1;
	ws.start_ns = 1700000000000000000ull;
	ws.end_ns = ws.start_ns + 700000;
	ws.total_ns = 700000;
	collect_cuda(&c, &ws, &s, size, 1250);
	assert_int_equal(batch_samples(&b), 3);
	assert_int_equal(b.nspans, 1);
	assert_int_equal(b.spans[0].stack, b.samples[2].stack);
	assert_int_equal(b.spans[0].resource, b.samples[2].resource);
	assert_int_equal(b.spans[0].kind, CUDA_WIRE_KIND_KERNEL);
	assert_int_equal(b.spans[0].device, 1);
	assert_int_equal(b.spans[0].stream, 7);
	assert_int_equal(b.spans[0].start_ns, 1700000000000000000ull);
	assert_int_equal(b.spans[0].end_ns, 1700000000000700000ull);

	st = b.samples[1].stack;
	ids = b.stack_ids + b.stack_off[st];
	assert_int_equal(b.stack_off[st + 1] - b.stack_off[st], 3);
	assert_int_equal(b.frames[ids[0]].type, FT_ERROR);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[0]].name), "[launch not sampled]");
	assert_int_equal(b.frames[ids[1]].type, FT_CUDA_LAUNCH);
	assert_int_equal(b.frames[ids[2]].type, FT_CUDA_MEMCPY);
	r = b.samples[1].resource;
	assert_null(attr(&b, r, "gpu.device.uuid"));
	assert_null(attr(&b, r, "gpu.name"));
	assert_string_equal(attr(&b, r, "process.executable.name"), "trainer");
	const struct { uint16_t kind; uint8_t type; } leaf[] = {
		{ CUDA_WIRE_KIND_MEMSET, FT_CUDA_MEMSET }, { CUDA_WIRE_KIND_SYNC, FT_CUDA_SYNC },
		{ CUDA_WIRE_KIND_GRAPH, FT_CUDA_KERNEL },
	};
	for (size_t i = 0; i < 3; i++) {
		w2.kind = leaf[i].kind;
		collect_cuda(&c, &w2, NULL, 0, 1200);
		st = b.samples[b.nsamples - 1].stack;
		assert_int_equal(b.frames[b.stack_ids[b.stack_off[st + 1] - 1]].type, leaf[i].type);
	}
	/* A PC entry: the kernel, then the instruction (its function, the
	 * kernel, as its name; the cubin as its binary, the offset as its
	 * address), then the stall reason. */
	char kname[] = "_Z4gemmPf", api3[] = "cuLaunchKernel", stall[] = LS;
	struct cuda_work w3 = { .pid = 4242, .start_ticks = 500, .total_ns = 420, .count = 3,
				.kind = CUDA_WIRE_KIND_KERNEL, .api = api3, .name = kname, .stall = stall,
				.cubin_id = 0x5eed0000c0b1ull, .pc_offset = 0x1a0 };
	collect_cuda(&c, &w3, NULL, 0, 1210);
	st = b.samples[b.nsamples - 1].stack;
	ids = b.stack_ids + b.stack_off[st];
	assert_int_equal(b.stack_off[st + 1] - b.stack_off[st], 5);
	assert_int_equal(b.frames[ids[2]].type, FT_CUDA_KERNEL);
	assert_int_equal(b.frames[ids[3]].type, FT_CUDA_SASS);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[3]].name), "_Z4gemmPf");
	assert_int_equal(b.frames[ids[3]].address, 0x1a0);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[3]].binary), "cubin:00005eed0000c0b1");
	assert_int_equal(b.frames[ids[4]].type, FT_CUDA_STALL);
	assert_string_equal(strtab_get(&b.strings, b.frames[ids[4]].name), LS);
	assert_int_equal(b.samples[b.nsamples - 1].value, 420);

	/* A launch stack that stopped for want of a table (the program's
	 * file: its last frame) asks for that table as the record arrives. */
	c.want_table = want;
	s.unwind_error = UWE_NO_FP;
	collect_cuda_prepare(&c, &s, size, 1250);
	assert_int_equal(nwanted, 1);
	assert_string_equal(files_at(&files, wanted[0])->name, "trainer");
	s.unwind_error = UWE_NONE;
	collect_cuda_prepare(&c, &s, size, 1260);
	assert_int_equal(nwanted, 1);

	/* A launch record that lies about its length is not used: the time
	 * still counts, without the stack. */
	collect_cuda(&c, &w, &s, ONCPU_HDR_SIZE + 8, 1300);
	st = b.samples[b.nsamples - 1].stack;
	assert_string_equal(strtab_get(&b.strings, b.frames[b.stack_ids[b.stack_off[st]]].name),
			    "[launch not sampled]");
	assert_int_equal(c.stats.malformed, 1);
	assert_int_equal(c.stats.cuda_samples, 8);

	batch_free(&b);
	proc_table_free(&procs);
	files_free(&files);
	vdso_free(&v);
	rm_temp_dir(root);
}

static int maps_calls;
static uint64_t maps_exec;
static size_t maps_n;
static void on_maps(void *ctx, const struct proc *p)
{
	(void)ctx;
	maps_calls++;
	maps_exec = p->exec_id;
	maps_n = p->nmaps;
}

/* A process the CUDA hello tells of: its maps read again when it was known
 * already (the library came after its first sample), and an unknown exec
 * count taken from the first record that has one, without another read. */
static void test_proc_refresh(void **state)
{
	(void)state;
	char *root = make_temp_dir();
	fake_proc(root, 77, "python3", 'S', 500);
	fake_proc_file(root, 77, "maps", "00700000-00710000 r-xp 00000000 00:00 0\n");
	struct file_registry files;
	files_init(&files, root, NULL, NULL);
	struct proc_table procs;
	proc_table_init(&procs, &files, root);
	procs.on_maps = on_maps;

	struct proc *p = proc_table_get(&procs, 77, 500, 3, "python3", 1000);
	assert_int_equal(maps_calls, 1);
	assert_int_equal(p->nmaps, 1);
	fake_proc_file(root, 77, "maps", "00700000-00710000 r-xp 00000000 00:00 0\n"
					 "00800000-00810000 r-xp 00000000 00:00 0\n");
	proc_table_refresh(&procs, 77, 500, 2000);
	assert_int_equal(maps_calls, 2);
	assert_int_equal(maps_n, 2);
	assert_int_equal(maps_exec, 3); /* known: kept */

	/* First seen at its hello: exec count unknown until a record says. */
	fake_proc(root, 88, "trainer", 'S', 600);
	fake_proc_file(root, 88, "maps", "00700000-00710000 r-xp 00000000 00:00 0\n");
	proc_table_refresh(&procs, 88, 600, 3000);
	assert_int_equal(maps_calls, 3);
	assert_true(maps_exec == PROC_EXEC_UNKNOWN);
	p = proc_table_get(&procs, 88, 600, 5, "trainer", 4000);
	assert_int_equal(p->exec_id, 5);
	assert_int_equal(maps_calls, 4); /* described again, with its exec count */
	assert_int_equal(maps_exec, 5);
	p = proc_table_get(&procs, 88, 600, PROC_EXEC_UNKNOWN, "", 5000);
	assert_int_equal(p->exec_id, 5);
	assert_int_equal(maps_calls, 4);
	p = proc_table_get(&procs, 88, 600, 6, "trainer", 6000); /* an exec: read again */
	assert_int_equal(maps_calls, 5);
	assert_int_equal(maps_exec, 6);

	proc_table_free(&procs);
	files_free(&files);
	rm_temp_dir(root);
}

/* What the server made of the OTLP request: each sample's kind, value and
 * frame types (outermost first). */
struct seen_cuda {
	int n;
	int kind;
	uint64_t value;
	int types[8];
	size_t ntypes;
};

static int keep_cuda(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	struct seen_cuda *k = ctx;
	for (size_t i = 0; i < b->n_samples; i++) {
		k->n++;
		k->kind = b->samples[i]->kind;
		k->value = b->samples[i]->value;
		const Ember__Ingest__V1__Stack *st = b->stacks[b->samples[i]->stack];
		k->ntypes = st->n_frames < 8 ? st->n_frames : 8;
		for (size_t j = 0; j < k->ntypes; j++)
			k->types[j] = b->frames[st->frames[j]]->type;
	}
	return 0;
}

/* OTLP: GPU time is a profile of sample type cuda/nanoseconds, its frames
 * typed, and ember-server reads it back as CUDA with the same frame types
 * (the error frame included). */
static void test_otlp_cuda(void **state)
{
	(void)state;
	struct batch b;
	batch_init(&b);
	struct bframe f[3] = {
		{ .type = FT_ERROR, .name = batch_string(&b, "[launch not sampled]", 20) },
		{ .type = FT_CUDA_LAUNCH, .name = batch_string(&b, "cudaMemcpyAsync", 15) },
		{ .type = FT_CUDA_MEMCPY, .name = batch_string(&b, "HtoD", 4) },
	};
	uint32_t ids[3];
	for (int i = 0; i < 3; i++)
		ids[i] = batch_frame(&b, &f[i]);
	uint32_t st = batch_stack(&b, ids, 3);
	uint32_t kv[] = { batch_string(&b, "process.pid", 11), batch_string(&b, "7", 1),
			  batch_string(&b, "gpu.device.index", 16), batch_string(&b, "0", 1) };
	batch_add(&b, st, batch_resource(&b, kv, 4), EK_CUDA, 50000000);
	Ember__Otlp__ExportProfilesServiceRequest *req = otlp_roundtrip(&b);
	struct buf err = { 0 };
	const char *const *strs = (const char *const *)req->dictionary->string_table;
	const Ember__Otlp__ScopeProfiles *sp = req->resource_profiles[0]->scope_profiles[0];
	assert_int_equal(sp->n_profiles, 1);
	assert_string_equal(strs[sp->profiles[0]->sample_type->type_strindex], "cuda");
	assert_string_equal(strs[sp->profiles[0]->sample_type->unit_strindex], "nanoseconds");
	struct seen_cuda seen = { 0 };
	struct otlp_result ores = { 0 };
	assert_int_equal(otlp_convert(req, "p", 1700000000000LL, keep_cuda, &seen, &ores, &err), 0);
	assert_int_equal(ores.rejected_profiles, 0);
	assert_int_equal(seen.n, 1);
	assert_int_equal(seen.kind, EMBER__INGEST__V1__EVENT_KIND__CUDA);
	assert_int_equal(seen.value, 50000000);
	assert_int_equal(seen.ntypes, 3);
	assert_int_equal(seen.types[0], EMBER__INGEST__V1__FRAME_TYPE__ERROR);
	assert_int_equal(seen.types[1], EMBER__INGEST__V1__FRAME_TYPE__CUDA_LAUNCH);
	assert_int_equal(seen.types[2], EMBER__INGEST__V1__FRAME_TYPE__CUDA_MEMCPY);
	buf_free(&ores.message);
	ember__otlp__export_profiles_service_request__free_unpacked(req, NULL);
	batch_free(&b);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_wire_check),
	cmocka_unit_test(test_wire_pc),
	cmocka_unit_test(test_wire_nvtx),
	cmocka_unit_test(test_join),
	cmocka_unit_test(test_join_awaited),
	cmocka_unit_test(test_stack_eviction),
	cmocka_unit_test(test_flood_leaves_a_library_its_share),
	cmocka_unit_test(test_socket),
	cmocka_unit_test(test_stop_reads_everything_sent),
	cmocka_unit_test(test_collect_cuda),
	cmocka_unit_test(test_proc_refresh),
	cmocka_unit_test(test_otlp_cuda))
