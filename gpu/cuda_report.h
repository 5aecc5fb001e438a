/* cuda_report.h - what libembercuda.so keeps between two reports to the
 * agent, and how it writes them as lib/cuda_wire.h messages.
 *
 * Pure code (no CUPTI, no sockets, no threads), so the unit tests drive it
 * directly. None of it is thread-safe: gpu/embercuda.c holds one mutex
 * around every call.
 *
 *   cuda_agg      GPU time summed by the wire's AGG key (stack id, thread,
 *                 kind, device, stream, context, API, name). Fixed capacity:
 *                 when full, further keys are summed into one "[other]"
 *                 entry per kind (stack id 0) and counted in `overflowed`,
 *                 so time is never lost, only its detail.
 *   cuda_spans    single activities with their CLOCK_REALTIME times, at most
 *                 `capacity` per report; later ones are counted, not kept.
 *   cuda_msg_*    packs entries into datagrams of at most CUDA_WIRE_MAX_MSG
 *                 bytes and hands each finished one to an emit callback.
 */
#ifndef EMBER_GPU_CUDA_REPORT_H
#define EMBER_GPU_CUDA_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_wire.h"

struct cuda_agg_key {
	uint64_t stack_id;
	uint32_t tid;
	uint16_t kind;       /* enum cuda_wire_kind */
	uint32_t device;
	uint32_t stream;
	uint32_t context;
	const char *api;     /* not copied: must live as long as the table (static names) */
	const char *name;    /* copied; cut to CUDA_WIRE_NAME_MAX bytes */
	size_t name_len;
	/* A part of a kernel's time attributed by PC sampling (a PC entry on
	 * the wire) when stall is not NULL; then cubin_id and pc_offset name
	 * the instruction. stall is not copied (the library's table of
	 * reason names lives as long as the process); at most
	 * CUDA_WIRE_STALL_MAX bytes. */
	const char *stall;
	size_t stall_len;
	/* The launch's NVTX path as the wire carries it (lib/cuda_wire.h),
	 * copied, part of the key (an AGG entry's, and a PC entry's, which
	 * keeps the path of the kernel entry it was split from);
	 * NULL or nvtx_len 0: none. At most CUDA_WIRE_NVTX_BYTES_MAX bytes,
	 * else refused. */
	const char *nvtx;
	size_t nvtx_len;
	uint64_t cubin_id, pc_offset;
};

struct cuda_agg;

/* A table of at most `capacity` keys (plus the overflow entries). NULL when
 * out of memory. */
struct cuda_agg *cuda_agg_new(unsigned capacity);
void cuda_agg_free(struct cuda_agg *agg);
/* Adds one activity of `ns` nanoseconds. Returns 0, 1 when the key did not
 * fit and went to the overflow entry, -1 when out of memory (nothing added). */
int cuda_agg_add(struct cuda_agg *agg, const struct cuda_agg_key *key, uint64_t ns);
unsigned cuda_agg_entries(const struct cuda_agg *agg);
uint64_t cuda_agg_overflowed(const struct cuda_agg *agg);
void cuda_agg_reset(struct cuda_agg *agg);

struct cuda_spans;
struct cuda_spans *cuda_spans_new(unsigned capacity);
void cuda_spans_free(struct cuda_spans *spans);
/* Keeps one span: its times (CLOCK_REALTIME ns) and its launch as the
 * AGG key names it (stack id, thread, kind, device, stream, context, API,
 * name cut to CUDA_WIRE_NAME_MAX, NVTX path; strings copied). Returns 0,
 * 1 when the report is full (counted), -1 for a key without API or name,
 * or out of memory. */
int cuda_spans_add(struct cuda_spans *spans, uint64_t start_ns, uint64_t end_ns, const struct cuda_agg_key *key);
unsigned cuda_spans_count(const struct cuda_spans *spans);
uint64_t cuda_spans_refused(const struct cuda_spans *spans);
void cuda_spans_reset(struct cuda_spans *spans);

/* --- PC samples ------------------------------------------------------------
 *
 *   cuda_pcs      PC samples summed by (kernel name, cubin, offset, stall
 *                 reason), at most `capacity` keys a report (further ones
 *                 are counted in `refused`, not kept).
 *   cuda_split    the exact integer split of a total in proportion to
 *                 weights.
 *   cuda_agg_apply_pcs   moves a report's table into another, each kernel
 *                 entry split over its name's samples.
 */
struct cuda_pcs;
struct cuda_pcs *cuda_pcs_new(unsigned capacity);
void cuda_pcs_free(struct cuda_pcs *pcs);
void cuda_pcs_reset(struct cuda_pcs *pcs);
/* Adds `samples` (> 0) samples of (name, cubin, offset, stall). stall is
 * kept as a pointer (static lifetime, as cuda_agg_key.stall); name is
 * copied, cut to CUDA_WIRE_NAME_MAX. Returns 0, 1 when the table was full
 * (counted), -1 on a bad argument or out of memory. */
int cuda_pcs_add(struct cuda_pcs *pcs, const char *name, size_t name_len, uint64_t cubin_id, uint64_t pc_offset,
		 const char *stall, uint64_t samples);
unsigned cuda_pcs_entries(const struct cuda_pcs *pcs);
uint64_t cuda_pcs_refused(const struct cuda_pcs *pcs);

/* Splits total into n parts proportional to weights (their sum > 0):
 * part i = floor(total * w_i / W), and the total's remainder goes one
 * unit each to the parts with the largest fractional remainders (the
 * lower index first among equal ones), so the parts sum to total exactly.
 * Exact in 128-bit arithmetic. O(n log n). Returns 0, or -1 when n is 0, every
 * weight is 0, or out of memory. */
int cuda_split(uint64_t total, const uint64_t *weights, size_t n, uint64_t *parts);

/* The (offset, stall) parts one kernel entry is split into, at most: the
 * busiest; the share of the name's other samples stays on the kernel.
 * Bounds the split's work (entries x parts) and output. */
#define CUDA_PC_PARTS_MAX 128

/* Adds every entry of src into dst. A KERNEL or GRAPH entry without a
 * stall key whose name has samples in pcs is split (cuda_split) over
 * them: one PC entry per (cubin, offset, stall) of the name's
 * CUDA_PC_PARTS_MAX busiest, count = its samples, with the entry's launch
 * (stack id, thread, API, NVTX path), and the share of the rest as a
 * plain kernel entry. The other entries go as they are (a
 * kernel without samples keeps its time on the kernel). Then the samples of names that took no kernel time in
 * src are added into `keep` (they wait for their kernel's time in the
 * next report; keep may be NULL: dropped), and pcs is reset. Returns 0,
 * or -1 when out of memory (the entries that could not be added are
 * lost, as cuda_agg_carry's). */
int cuda_agg_apply_pcs(struct cuda_agg *dst, const struct cuda_agg *src, struct cuda_pcs *pcs, struct cuda_pcs *keep);

/* Receives one finished datagram; returns 0, or -1 to stop encoding. */
typedef int (*cuda_emit_fn)(const void *msg, size_t len, void *ctx);

/* Single-entry messages (HELLO, DEVICE, STATS): writes header + body into
 * buf (CUDA_WIRE_MAX_MSG bytes) and returns the length. */
size_t cuda_msg_single(void *buf, enum cuda_wire_type type, const void *body, size_t body_len);
/* Every entry of the table as AGG messages (PC messages for the entries
 * with a stall key), of the spans as SPAN messages.
 * Returns the number of messages emitted, or -1 when emit refused one.
 * The entries go out in a fixed order of positions (the AGG ones, then
 * the PC ones, so that each type fills as few messages as it can): `from` is where
 * to start (0: the first), and *next (when not NULL) is set to the
 * position after the last entry of the last message emitted, so that a
 * second call from there, or cuda_agg_carry from there, goes on exactly
 * where emit refused (past the end when everything went out). */
int cuda_agg_encode(const struct cuda_agg *agg, cuda_emit_fn emit, void *ctx, unsigned from, unsigned *next);
/* Adds to dst every entry of src from position `from` on (what
 * cuda_agg_encode did not emit), time and count, by the same rules as
 * cuda_agg_add: the keys that do not fit go to dst's overflow entries.
 * Returns 0, or -1 when out of memory (those entries' time is lost). */
int cuda_agg_carry(struct cuda_agg *dst, const struct cuda_agg *src, unsigned from);
int cuda_spans_encode(const struct cuda_spans *spans, cuda_emit_fn emit, void *ctx);

#endif
