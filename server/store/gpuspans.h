/* gpuspans.h - the GPU timeline's spans: single kernels, copies, sets and
 * syncs with their start and end (Unix nanoseconds), device, stream,
 * launch stack and the resource attributes of their process, kept per
 * project for the last minutes (docs/internals/store.md, "GPU spans").
 *
 * Spans are not samples: the store's rows are summed per (series, stack,
 * interval) and their times rounded to the block granularity, where a
 * timeline needs each activity with its own nanoseconds. Their GPU time is
 * in the cuda samples already; spans only draw it.
 *
 * Layout. Spans go into chunks, one project's spans of at most a minute
 * (GPUSPANS_CHUNK_MS) or GPUSPANS_CHUNK_SPANS spans. A chunk has its own
 * dictionaries -- strings, files, frames, a stack tree (node 0 the root, a
 * parent below its child) and label sets -- read through a struct
 * store_segment, so a query names its stacks with the flamegraph's own
 * symbolization (server/query/display.h). Only the segment's dictionary
 * accessors are set (str, find, label_pairs, frame, host_cpus): a chunk is
 * never part of a store view.
 *
 * Bounds. A chunk whose newest span ended more than retention_ms ago is
 * dropped, as are the oldest chunks (of any project) while more than
 * max_spans spans are kept. Spans live in memory only: a restarted server
 * starts with an empty timeline. (On the fleet store they are kept in
 * ClickHouse, server/store/clickhouse/chspans.h, and a query reads them
 * into a struct gpuspans of its own.)
 *
 * Threading: one mutex; gpuspans_read holds it while its callback runs
 * (a query reads the chunks in place), so the callback must not call
 * back into the store.
 */
#ifndef EMBER_SERVER_GPUSPANS_H
#define EMBER_SERVER_GPUSPANS_H

#include <stddef.h>
#include <stdint.h>

#include "server/store/store.h"

#define GPUSPANS_CHUNK_MS 60000
#define GPUSPANS_CHUNK_SPANS 65536
#define GPUSPANS_MAX_DEPTH 4096              /* frames kept of a launch stack, outermost first */
#define GPUSPANS_DEFAULT_RETENTION_MS (30 * 60000)
#define GPUSPANS_DEFAULT_MAX (4u << 20)      /* spans kept in all */

/* One span as a chunk keeps it. */
struct gpuspan {
	int64_t start_ns, end_ns;
	uint32_t node;   /* the launch stack: a node of the chunk's segment */
	uint32_t labels; /* its resource: a label set of the chunk's segment */
	uint32_t device, stream;
	uint8_t kind;    /* lib/cuda_wire.h enum cuda_wire_kind */
};

/* One span to add: its launch stack as frames (outermost first; names,
 * binaries, files copied) and its resource as key/value strings. */
struct gpuspan_in {
	int64_t start_ns, end_ns;
	uint32_t device, stream;
	uint8_t kind;
	const struct store_frame_info *frames;
	size_t nframes;
	const char *const *labels; /* 2 * nlabels strings: key, value */
	size_t nlabels;
};

struct gpuspans_stats {
	uint64_t spans;      /* kept now */
	uint64_t chunks;     /* kept now */
	uint64_t added;      /* ever */
	uint64_t expired;    /* dropped past the retention */
	uint64_t evicted;    /* dropped past max_spans */
};

struct gpuspans;

struct gpuspans *gpuspans_new(int64_t retention_ms, size_t max_spans);
void gpuspans_free(struct gpuspans *g);

/* Adds n spans of project (its UUID) at now_ms. */
void gpuspans_add(struct gpuspans *g, const char *project, const struct gpuspan_in *in, size_t n,
		  int64_t now_ms);

/* Calls fn for each chunk of project holding spans that overlap
 * [from_ns, to_ns), newest chunk first, with the chunk's segment and its
 * spans in the order they came; stops when fn returns nonzero and returns
 * that. Expired chunks are dropped first (now_ms). */
typedef int (*gpuspans_fn)(void *ctx, const struct store_segment *seg, const struct gpuspan *spans,
			   size_t n);
int gpuspans_read(struct gpuspans *g, const char *project, int64_t from_ns, int64_t to_ns,
		  int64_t now_ms, gpuspans_fn fn, void *ctx);

void gpuspans_get_stats(struct gpuspans *g, struct gpuspans_stats *out);

#endif
