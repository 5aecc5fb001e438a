/* store.h - the profile store behind every query.
 *
 * The store keeps samples as rows (time, project, event kind, stack,
 * label set, value) over deduplicated tables: strings, files, frames,
 * stacks (a parent-pointer prefix tree, so a stack is one node id) and
 * label sets (sorted key/value pairs). It is durable: store_append()
 * writes the batch to a checksummed write-ahead log and fsyncs it before
 * it returns, and store_open() replays the log, so an acknowledged batch
 * survives a crash. A torn or corrupt record is reported and skipped.
 *
 * This is the first engine; its contract (append durably, scan rows,
 * resolve ids) is what the query code relies on, and a later engine with
 * segments and compaction replaces the internals behind it.
 *
 * Threading: appends take the write lock; readers bracket their use of
 * scan and the accessors with store_read_lock/unlock. Pointers returned
 * by the accessors are valid until the read lock is released.
 */
#ifndef EMBER_SERVER_STORE_H
#define EMBER_SERVER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fileid.h"
#include "ingest.pb-c.h"

/* Frame types, numbered as ember.ingest.v1.FrameType. */
enum store_frame_type {
	SFT_KERNEL = 1, SFT_NATIVE, SFT_CPYTHON, SFT_GO, SFT_JVM, SFT_V8, SFT_RUBY, SFT_PHP,
	SFT_PERL, SFT_DOTNET, SFT_CUDA_LAUNCH, SFT_CUDA_KERNEL, SFT_CUDA_SASS, SFT_CUDA_STALL,
	SFT_ERROR, SFT_MAX = SFT_ERROR
};

/* Event kinds, numbered as ember.ingest.v1.EventKind. */
enum store_event_kind { SEK_ON_CPU = 1, SEK_OFF_CPU, SEK_CUDA, SEK_ALLOC };

#define STORE_FILE_SEGMENTS 4

struct store_file {
	struct file_id id;
	uint32_t name; /* string id */
	uint8_t build_id[64];
	uint8_t build_id_len;
	uint8_t nsegs;
	uint64_t segs[STORE_FILE_SEGMENTS][3]; /* executable segments: offset, vaddr, size */
};

struct store_frame {
	uint8_t type;
	uint32_t file;  /* store file index + 1, or 0 */
	uint64_t address;
	uint32_t name;   /* string id, 0 = none */
	uint32_t binary; /* string id, 0 = none */
};

struct store_row {
	int64_t ts_ms;
	uint32_t project; /* string id of the project's uuid */
	uint32_t stack;   /* stack node id; 0 = empty stack */
	uint32_t labels;  /* label set id */
	uint16_t hz;      /* sample rate of the batch */
	uint8_t kind;
	uint64_t value;
};

struct store_stats {
	uint64_t batches, rows, samples;
	uint64_t strings, files, frames, stack_nodes, label_sets;
	uint64_t wal_bytes, wal_skipped_records;
};

struct store;

/* Opens (creating) the store in dir and replays its log. */
int store_open(const char *dir, struct store **out, struct buf *err);
void store_close(struct store *s);

/* Appends a batch that batch_decode() accepted; zbody is its encoded
 * form, which is what the log keeps. Returns 0 stored, 1 duplicate (the
 * same agent instance and sequence was stored before: nothing is done),
 * -1 failure (err set; nothing was acknowledged). */
int store_append(struct store *s, const char *project_id, const Ember__Ingest__V1__Batch *b,
		 const void *zbody, size_t zlen, struct buf *err);

void store_read_lock(struct store *s);
void store_read_unlock(struct store *s);

typedef void (*store_row_fn)(void *ctx, const struct store_row *row);
/* Visits the rows of project (string id) and kind with start <= ts < end. */
void store_scan(struct store *s, uint32_t project, uint8_t kind, int64_t start_ms, int64_t end_ms,
		store_row_fn fn, void *ctx);
/* String id of a project uuid, or UINT32_MAX when the store has none. */
uint32_t store_project_id(struct store *s, const char *uuid);

const char *store_string(const struct store *s, uint32_t id);
const struct store_frame *store_frame(const struct store *s, uint32_t id);
size_t store_frame_count(const struct store *s);
const struct store_file *store_file(const struct store *s, uint32_t index);
/* Frames of stack node id, outermost first, into out (at most max).
 * Returns the depth (which may exceed max; only max are written). */
size_t store_stack(const struct store *s, uint32_t stack, uint32_t *out, size_t max);
/* The key/value string ids of a label set, as pairs. Returns the pair count. */
size_t store_labels(const struct store *s, uint32_t labels, const uint32_t **kv);
size_t store_label_set_count(const struct store *s);
void store_get_stats(struct store *s, struct store_stats *out);

#endif
