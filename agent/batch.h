/* batch.h - the agent's per-interval aggregation, which is also the batch
 * it sends.
 *
 * Samples are added as (stack, resource, kind, value); strings, files,
 * frames, stacks and resources are interned in per-batch tables, so equal
 * stacks are stored and sent once with a count. batch_encode() writes the
 * tables as one ember.ingest.v1.Batch protobuf, compressed with zstd
 * (docs/protocol.md). Timeline spans of GPU work (batch_add_span) ride
 * along, by stack and resource. batch_reset() empties the tables for the next
 * interval and keeps their memory.
 */
#ifndef EMBER_AGENT_BATCH_H
#define EMBER_AGENT_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "fileid.h"
#include "hmap.h"
#include "ingest.pb-c.h"
#include "strtab.h"

/* Values match ember.ingest.v1.FrameType / EventKind. */
enum frame_type {
	FT_KERNEL = 1, FT_NATIVE = 2, FT_CPYTHON = 3, FT_CUDA_LAUNCH = 11, FT_CUDA_KERNEL = 12,
	FT_CUDA_SASS = 13, FT_CUDA_STALL = 14, FT_ERROR = 15, FT_CUDA_MEMCPY = 16, FT_CUDA_MEMSET = 17, FT_CUDA_SYNC = 18,
	FT_NVTX = 19
};
enum event_kind { EK_ON_CPU = 1, EK_OFF_CPU = 2, EK_CUDA = 3 };

struct bframe {
	uint8_t type;
	uint32_t file; /* 1-based index in files; 0 = none */
	uint64_t address;
	uint32_t name;
	uint32_t binary;
};

struct bfile {
	struct file_id id;
	uint32_t name;
	uint8_t build_id[64];
	uint8_t build_id_len;
	uint8_t nsegs;
	uint64_t segs[4][3]; /* executable segments: offset, vaddr, size */
	uint32_t agent_index; /* registry index, to reset the lookup table */
};

struct bsample {
	uint32_t stack, resource;
	uint8_t kind;
	uint64_t value;
};

/* One GPU activity for the timeline (kept apart from the samples: its
 * time is in a cuda sample already). */
struct bspan {
	uint32_t stack, resource;
	uint8_t kind;   /* enum cuda_wire_kind */
	uint32_t device, stream;
	uint64_t start_ns, end_ns; /* CLOCK_REALTIME */
};

struct batch {
	struct strtab strings;
	struct bfile *files;
	size_t nfiles, capfiles;
	uint32_t *file_slot; /* registry index -> batch file index + 1 */
	size_t capslot;
	struct bframe *frames;
	size_t nframes, capframes;
	struct hmap frame_index;
	/* stacks and resources: runs of ids in one flat array each */
	uint32_t *stack_ids;
	size_t nstack_ids, capstack_ids;
	uint32_t *stack_off; /* stack i = stack_ids[stack_off[i] .. stack_off[i+1]) */
	size_t nstacks, capstacks;
	struct hmap stack_index;
	uint32_t *res_ids;
	size_t nres_ids, capres_ids;
	uint32_t *res_off;
	size_t nres, capres;
	struct hmap res_index;
	struct bsample *samples;
	size_t nsamples, capsamples;
	struct hmap sample_index;
	uint64_t total_value;
	struct bspan *spans; /* the interval's timeline spans (protocol version 2 only) */
	size_t nspans, capspans;
};

struct batch_meta {
	const char *agent_instance;
	uint64_t sequence;
	const char *project;
	int64_t start_unix_ms, end_unix_ms;
	uint32_t sample_rate_hz;
	uint32_t host_cpus; /* logical CPUs of the host, 0 = unknown */
};

/* Sets the header fields of msg, a Batch or a SessionBatch message (both
 * carry meta's fields under the same names), from meta; the strings are
 * borrowed. */
#define BATCH_META_TO_MSG(msg, meta)                                    \
	do {                                                            \
		(msg)->agent_instance = (char *)(meta)->agent_instance; \
		(msg)->sequence = (meta)->sequence;                     \
		(msg)->project = (char *)(meta)->project;               \
		(msg)->start_unix_ms = (meta)->start_unix_ms;           \
		(msg)->end_unix_ms = (meta)->end_unix_ms;               \
		(msg)->sample_rate_hz = (meta)->sample_rate_hz;         \
		(msg)->host_cpus = (meta)->host_cpus;                   \
	} while (0)

void batch_init(struct batch *b);
void batch_free(struct batch *b);
void batch_reset(struct batch *b);

uint32_t batch_string(struct batch *b, const char *s, size_t n);
/* Index (1-based) of the file with this registry index in the batch. */
uint32_t batch_file(struct batch *b, uint32_t agent_index, const struct file_id *id,
		    const char *name, const uint8_t *build_id, int build_id_len,
		    const uint64_t (*segs)[3], int nsegs);
uint32_t batch_frame(struct batch *b, const struct bframe *f);
/* frames: outermost caller first. */
uint32_t batch_stack(struct batch *b, const uint32_t *frames, size_t n);
/* kv: pairs of string ids (key, value), n = number of ids (even). */
uint32_t batch_resource(struct batch *b, const uint32_t *kv, size_t n);
/* Adds value to the row of (stack, resource, kind), made if new; returns
 * the row's index (stable until batch_reset). */
uint32_t batch_add(struct batch *b, uint32_t stack, uint32_t resource, uint8_t kind, uint64_t value);
/* Keeps one timeline span; at most BATCH_MAX_SPANS an interval, the rest
 * are dropped and counted (returns false). */
#define BATCH_MAX_SPANS 65536
bool batch_add_span(struct batch *b, const struct bspan *span);
/* Adds value to a row batch_add() returned. */
void batch_add_to_row(struct batch *b, uint32_t row, uint64_t value);
static inline size_t batch_samples(const struct batch *b) { return b->nsamples; }
/* Drops the lookup indexes of a finished batch (it is only read after
 * this: encoded, queued); batch_reset() makes it usable again. */
void batch_freeze(struct batch *b);
/* Bytes the batch holds. */
size_t batch_memory(const struct batch *b);

/* Fills out (pointing into f) with f as a protobuf File. */
void batch_file_message(const struct bfile *f, Ember__Ingest__V1__File *out);
/* Appends the zstd-compressed protobuf encoding of the batch to out.
 * Returns 0 or -1. */
int batch_encode(const struct batch *b, const struct batch_meta *meta, struct buf *out);

#endif
