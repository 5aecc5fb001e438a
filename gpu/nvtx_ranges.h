/* nvtx_ranges.h - a thread's open NVTX ranges, bounded (libembercuda.so as
 * the NVTX injection library; docs/internals/gpu.md, "NVTX ranges").
 *
 * The program names its ranges (nvtxRangePushA/W/Ex, nvtxDomainRangePushEx)
 * and closes them (nvtxRangePop, nvtxDomainRangePop); whatever it passes is
 * untrusted: a name may be NULL, any length, any bytes, and pushes may nest
 * without end or pops come without pushes. One struct nvtx_ranges per
 * thread, touched only by that thread; no allocation, no locks.
 *
 * Limits: the NVTX_RANGES_DEPTH_MAX outermost ranges are kept; deeper
 * pushes are counted (so that their pops balance) but not kept. A name
 * keeps at most NVTX_RANGES_NAME_MAX bytes; bytes outside printable ASCII
 * (wide characters past 0x7e too) become '?'; a NULL or empty name is
 * "[unnamed]". A pop with no open range is ignored and returns -1.
 */
#ifndef EMBER_NVTX_RANGES_H
#define EMBER_NVTX_RANGES_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

#include "cuda_wire.h"

#define NVTX_RANGES_DEPTH_MAX CUDA_WIRE_NVTX_DEPTH_MAX
#define NVTX_RANGES_NAME_MAX CUDA_WIRE_NVTX_NAME_MAX

struct nvtx_ranges {
	uint32_t depth;                        /* open ranges, kept or not */
	uint8_t len[NVTX_RANGES_DEPTH_MAX];    /* bytes of each kept name */
	char name[NVTX_RANGES_DEPTH_MAX][NVTX_RANGES_NAME_MAX];
};

/* Opens a range named by a NUL-terminated byte string (may be NULL);
 * returns the depth before the push (nvtxRangePush's value). */
int nvtx_ranges_push(struct nvtx_ranges *r, const char *name);
/* The same with a wide string. */
int nvtx_ranges_push_wide(struct nvtx_ranges *r, const wchar_t *name);
/* Closes the innermost range: the depth after the pop, -1 when none open. */
int nvtx_ranges_pop(struct nvtx_ranges *r);
/* Ranges kept (at most NVTX_RANGES_DEPTH_MAX). */
unsigned nvtx_ranges_kept(const struct nvtx_ranges *r);
/* A hash of the kept path, 0 when no range is open: the library's
 * aggregation key includes it so that launches under different ranges
 * never share a stack. */
uint64_t nvtx_ranges_hash(const struct nvtx_ranges *r);

#endif
