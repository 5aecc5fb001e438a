/* store.h - the embedded profile store behind every query.
 *
 * Samples live in parts (server/store/part.h), each with its own dictionaries:
 *
 *   head     the part being built in memory; every acknowledged batch is
 *            first in a write-ahead log file (server/store/wal.h)
 *   sealed   former heads waiting to be written (still queryable)
 *   blocks   immutable files (server/store/block.h) in DATA/blocks, one time
 *            partition (an hour) each; compaction merges the blocks of a
 *            partition into one, with rows rounded to the block granularity
 *
 * store_append() acknowledges a batch only once its log record is on disk;
 * concurrent appends share one fdatasync (group commit). A background
 * thread seals the head (by row count or age), writes sealed parts as
 * blocks and then deletes their logs, compacts partitions and deletes
 * partitions older than the retention. Lineage in each block's footer
 * makes every replacement crash-safe (docs/internals/store.md).
 *
 * Readers take a view: the parts overlapping a time range, pinned until
 * the view is closed. A block's dictionaries are read on first use and
 * kept in a cache bounded by cache_bytes; a damaged block is logged,
 * renamed aside (*.corrupt) and skipped, and the rest is served.
 *
 * Threading: every function may be called from any thread.
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
	SFT_ERROR, SFT_CUDA_MEMCPY, SFT_CUDA_MEMSET, SFT_CUDA_SYNC, SFT_NVTX, SFT_MAX = SFT_NVTX
};

/* Event kinds, numbered as ember.ingest.v1.EventKind. */
enum store_event_kind { SEK_ON_CPU = 1, SEK_OFF_CPU, SEK_CUDA, SEK_ALLOC };

#define STORE_FILE_SEGMENTS 4
#define STORE_PARTITION_MS 3600000LL

struct store_file {
	struct file_id id;
	uint32_t name; /* symbol string id */
	uint8_t build_id[64];
	uint8_t build_id_len;
	uint8_t nsegs;
	uint64_t segs[STORE_FILE_SEGMENTS][3]; /* executable segments: offset, vaddr, size */
};

struct store_frame {
	uint8_t type;
	uint32_t file;  /* file index + 1, or 0 */
	uint64_t address;
	uint32_t name;   /* symbol string id, 0 = none */
	uint32_t binary; /* symbol string id, 0 = none */
};

struct store_config {
	int64_t retention_ms;          /* partitions older than this are deleted */
	uint32_t block_granularity_ms; /* time resolution of compacted rows */
	uint64_t head_max_rows;        /* seal the head at this many rows ... */
	int64_t head_max_age_ms;       /* ... or when its first row is this old */
	uint64_t max_unflushed_rows;   /* beyond this many rows in memory, refuse ingest */
	uint64_t cache_bytes;          /* block dictionaries kept in memory */
	uint64_t head_dict_bytes;      /* a new head starts with the sealed head's dictionaries
					* while they use at most this much (0: never) */
	uint32_t compact_after;        /* merge a partition once it has this many blocks */
	int64_t late_data_wait_ms;     /* a closed hour's new blocks wait this long for more
					* late data before the hour is compacted again */
	bool background;               /* run the maintenance thread */
	bool time_window;              /* refuse batches older than the retention or over a
					* day ahead (tests turn it off to store fixed times) */
};

void store_config_default(struct store_config *c);

struct store_stats {
	uint64_t batches, rows, samples;          /* stored since start, incl. replayed */
	uint64_t head_rows, unflushed_rows;       /* in memory, not yet in blocks */
	uint64_t blocks, block_bytes, block_rows, block_samples;
	uint64_t memory_bytes;                    /* head + sealed parts + cached dictionaries */
	uint64_t cache_bytes;
	uint64_t wal_bytes, wal_skipped_records;
	uint64_t flushes, compactions, retention_deleted, corrupt_blocks, refused_busy;
};

struct store;

int store_open(const char *dir, const struct store_config *cfg, struct store **out,
	       struct buf *err);
/* Stops the maintenance thread and closes. Data not yet in blocks stays in
 * the logs and is replayed by the next store_open(). */
void store_close(struct store *s);

/* Appends a batch that batch_decode() accepted; zbody is its encoded
 * form, which is what the log keeps. Returns 0 stored, 1 duplicate (the
 * same agent instance and sequence was stored before: nothing is done),
 * -1 failure (err set; nothing was acknowledged), -2 busy (too much data
 * waiting to be written: retry later), -3 refused (its time lies outside
 * what the store keeps: err says why; retrying will not help). */
int store_append(struct store *s, const char *project_id, const Ember__Ingest__V1__Batch *b,
		 const void *zbody, size_t zlen, struct buf *err);

/* A batch as the store appends it, whatever its wire format: the log
 * record it becomes and how it is added to the head part. store_append()
 * makes one of a version 1 batch; sessions.c makes one of a session
 * batch, whose record carries the session definitions it needs.
 *
 * record() is called under the store's commit lock, so gen is the log
 * generation the record lands in (a log may hold the records of several
 * heads in turn; index() gets the head's own number as gen): it
 * fills head (after the project prefix the store has written) and sets
 * *body and *blen to a piece written after it; 0, or -1 with err set. index()
 * is called once the record is durable, by whichever append leads the
 * group commit, with the head's writer lock held; phase 1 maps every
 * dictionary entry and may fail (a log record that does not resolve: -1),
 * rows are added only after it succeeded. failed() is called when record()
 * was called but the append was not stored (the record was cut off the
 * log). */
struct part;
struct store_entry {
	const char *project;        /* the project's id (UUID) */
	const char *agent_instance; /* "" or the agent instance, for duplicates */
	uint64_t sequence;
	int64_t start_unix_ms;
	uint8_t record_type;        /* 0: a version 1 batch, else STORE_RECORD_* */
	int (*record)(void *ctx, uint64_t gen, struct buf *head, const void **body, size_t *blen,
		      struct buf *err);
	int (*index)(void *ctx, struct part *head, uint64_t gen);
	void (*failed)(void *ctx);
	void *ctx;
};

/* Log record payloads: u8 n (1..255) and n bytes of project id, then a
 * version 1 batch as received; or u8 0, u8 type, u8 n, project id and the
 * type's own bytes. */
#define STORE_RECORD_SESSION 1 /* sessions.c: carried definitions, then the batch */

/* Appends e with the same results as store_append. */
int store_append_entry(struct store *s, const struct store_entry *e, struct buf *err);

/* Maintenance, normally done by the store's own thread. store_flush seals
 * the head and writes every sealed part; store_compact merges partitions
 * (all = every partition with more than one block or any uncompacted
 * block, regardless of age); store_retention deletes partitions that end
 * before now_ms - retention. Each returns 0 or -1 (err set). */
int store_flush(struct store *s, struct buf *err);
/* The two halves of store_flush, which the maintenance thread also does
 * apart (a head sealed by its age is written a moment later): seal the
 * head (in a new log when rotate), and write every sealed part. */
int store_seal(struct store *s, bool rotate, struct buf *err);
int store_write_sealed(struct store *s, struct buf *err);
int store_compact(struct store *s, bool all, struct buf *err);
int store_retention(struct store *s, int64_t now_ms, struct buf *err);

/* Interns the stack trees of the last hour's blocks (the two newest
 * partitions') that the head's
 * dictionaries do not name (those read from their files at a start) into
 * the head's, so queries fold them with the heads once; the maintenance
 * thread does it after a start. Returns how many blocks it adopted. */
size_t store_adopt_live_blocks(struct store *s);

void store_get_stats(struct store *s, struct store_stats *out);

/* --- reading ----------------------------------------------------------------- */

/* The read interface: what every query reads through (server/query/scan.h),
 * and the contract a second storage backend implements
 * (docs/internals/store.md, "The read interface"). It speaks ember's own
 * types, never a backend's structs:
 *
 *   store_view_open     pins what holds rows in [from_ms, to_ms): a list of
 *                       segments, each a self-contained set of series with
 *                       its own dictionaries (strings, label sets, frames,
 *                       a stack tree); the embedded store's parts
 *   store_view_begin(i) loads segment i: its series, the ids its stacks
 *                       are given under, accessors for its dictionaries
 *   store_view_rows/sums/total/rollup_sums
 *                       a begun segment's rows or per-stack sums
 *   store_view_end(i), store_view_close
 *
 * A stack is a node id of its segment's stack tree: node 0 is the root, a
 * node's parent has a lower id (one pass in id order visits parents first),
 * and each node names one frame. Segments whose stacks share one id space
 * (store_view_same_ids) may have their sums added up and walked once.
 *
 * A backend fills a struct store_read_ops; its handle (struct store) and
 * its views begin with it, so the functions below dispatch on them, and a
 * backend is chosen when its handle is made (store_open for the embedded
 * store; a test builds an in-memory one: tests/unit/store_mem.h).
 *
 * Lifetimes: a segment and what its accessors return stay valid until
 * store_view_end(i); rows and sums until the next call on the view.
 * Threading: one view is used by one thread. */

struct store_row {
	int64_t ts_ms;
	uint64_t value;
	uint32_t stack; /* a node id of the segment's stack tree */
	uint32_t pad;
};

struct store_minute {
	int64_t minute_ms; /* start of the minute */
	uint64_t value;
};

/* (project, event kind, sample rate, label set): the unit rows are grouped,
 * filtered and totalled by. */
struct store_series {
	uint32_t project; /* string id of the project's UUID */
	uint32_t labels;  /* label set id, below the segment's nlabels */
	uint8_t kind;     /* enum store_event_kind */
	uint16_t hz;      /* sample rate */
	int64_t min_ts, max_ts;
	uint64_t total, nrows;
	const struct store_minute *minutes; /* per-minute totals, by minute */
	size_t nminutes;
};

/* A stored frame as a reader sees it. */
struct store_frame_info {
	uint8_t type;        /* enum store_frame_type */
	uint64_t address;    /* native: in the file; interpreted: the line */
	const char *name;    /* the agent's symbol, NULL: none */
	const char *binary;  /* the agent's binary (interpreted: source file), NULL: none */
	const struct store_file *file; /* the executable, NULL: unknown (its name field
					* is the backend's: read file_name) */
	const char *file_name; /* the executable's name, NULL: unknown */
};

struct store_read_ops;

/* A begun segment. Arrays are the backend's, read-only. */
struct store_segment {
	const struct store_read_ops *ops;
	int64_t min_ts, max_ts;         /* of its rows (INT64_MAX / INT64_MIN: none) */
	const struct store_series *series;
	uint32_t nseries;
	uint32_t nlabels;               /* label set ids are below it */
	uint32_t nframes;               /* frame ids are below it */
	uint32_t nnodes;                /* the stack tree: node ids are below it */
	const uint32_t *node_parent;    /* by node: its parent (node 0: 0) */
	const uint32_t *node_frame;     /* by node: its frame */
	/* How the stacks the segment gives are named in the id space the
	 * query folds them in: stack x below stack_nown is map[x] (x when map
	 * is NULL), any other is 0; stack_count bounds every id given. A
	 * segment carried into a later one (store_view_carry) gives the
	 * later one's ids, and its node_parent/node_frame are read there. */
	const uint32_t *stack_map;
	uint32_t stack_nown;
	size_t stack_count;
	bool chain_end; /* folds what segments of its id space carried: begin it
			 * even when it selects nothing */
};

struct store_view_stats {
	uint64_t parts, parts_skipped, series_read, chunks_skipped, rows_read, bytes_read;
	uint64_t stack_sums_read; /* per-series stack totals used instead of rows */
};

/* What every backend's view begins with. */
struct store_view {
	const struct store_read_ops *ops;
};

/* What every backend's handle begins with: its reading operations. NULL
 * is the embedded store's own (store_open zero-fills the handle). */
struct store_backend {
	const struct store_read_ops *read;
};

/* A backend's reading half. Every function is required; the public
 * functions below document each. */
struct store_read_ops {
	const char *name;
	struct store_view *(*view_open)(struct store *s, int64_t from_ms, int64_t to_ms);
	size_t (*count)(const struct store_view *v);
	void (*carry)(struct store_view *v);
	bool (*same_ids)(const struct store_view *v, size_t i, size_t j);
	const struct store_segment *(*begin)(struct store_view *v, size_t i);
	long (*rows)(struct store_view *v, size_t i, uint32_t series, int64_t since_ms,
		     const struct store_row **rows);
	long (*sums)(struct store_view *v, size_t i, uint32_t series, int64_t from_ms,
		     int64_t to_ms, const uint32_t **stacks, const uint64_t **sums);
	int64_t (*total)(struct store_view *v, size_t i, uint32_t series, int64_t from_ms,
			 int64_t to_ms);
	long (*rollup_sums)(struct store_view *v, size_t i, uint32_t project, uint8_t kind,
			    int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
			    const uint64_t **sums, uint16_t *hz);
	void (*end)(struct store_view *v, size_t i);
	const struct store_view_stats *(*stats)(const struct store_view *v);
	void (*close)(struct store_view *v);
	/* a begun segment's dictionaries */
	const char *(*str)(const struct store_segment *g, uint32_t id);
	uint32_t (*find)(const struct store_segment *g, const char *s, size_t len);
	size_t (*label_pairs)(const struct store_segment *g, uint32_t labels, const uint32_t **kv);
	int (*frame)(const struct store_segment *g, uint32_t frame, struct store_frame_info *out);
	uint32_t (*host_cpus)(const struct store_segment *g, uint32_t name);
};

/* The embedded store's reading operations (view.c). */
extern const struct store_read_ops store_embedded_read;

/* The segments holding rows in [from_ms, to_ms), pinned, in the order a
 * query reads them. */
struct store_view *store_view_open(struct store *s, int64_t from_ms, int64_t to_ms);
static inline size_t store_view_count(const struct store_view *v)
{
	return v->ops->count(v);
}
/* For a query that adds up the sums of segments of one id space and walks
 * them once: names the segments (what store_view_same_ids says) and may
 * reorder them so that each id space's segments are read one after
 * another, the one that folds them (chain_end) last. Call while none is
 * begun, first. The embedded store gives its sealed heads and head (whose
 * dictionaries are copies of one another) one id space, and the blocks it
 * wrote from a sealed head that one too while a part in memory holds
 * every id they used (docs/internals/store.md, "Carrying sums"). */
static inline void store_view_carry(struct store_view *v)
{
	v->ops->carry(v);
}
/* Whether segments i and j give their stacks in one id space, so that
 * segment j's stack tree (which holds every id of i's when i < j) names
 * i's stacks. */
static inline bool store_view_same_ids(const struct store_view *v, size_t i, size_t j)
{
	return v->ops->same_ids(v, i, j);
}
/* Begins segment i: loaded, unchanged until store_view_end(i). NULL when
 * it cannot be read (damaged: logged, counted, skipped). Several may be
 * begun at once; one begun before may be ended after another began. */
static inline const struct store_segment *store_view_begin(struct store_view *v, size_t i)
{
	return v->ops->begin(v, i);
}
/* The rows of series `series` of segment i, at least those at or after
 * since_ms (INT64_MIN: all; older rows may come too); -1 when they cannot
 * be read (logged, counted). Valid until the next call. */
static inline long store_view_rows(struct store_view *v, size_t i, uint32_t series,
				   int64_t since_ms, const struct store_row **rows)
{
	return v->ops->rows(v, i, series, since_ms, rows);
}
/* The stacks of series `series` of segment i with the sum of their values
 * in [from_ms, to_ms). Stacks may repeat. -1 when they cannot be read
 * (logged, counted). Valid until the next call. */
static inline long store_view_sums(struct store_view *v, size_t i, uint32_t series,
				   int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
				   const uint64_t **sums)
{
	return v->ops->sums(v, i, series, from_ms, to_ms, stacks, sums);
}
/* The sum of series `series`'s values in [from_ms, to_ms) in segment i;
 * -1 when they cannot be read (logged, counted). */
static inline int64_t store_view_total(struct store_view *v, size_t i, uint32_t series,
				       int64_t from_ms, int64_t to_ms)
{
	return v->ops->total(v, i, series, from_ms, to_ms);
}
/* The stack totals, ascending, of every series of project (a string id of
 * segment i) and kind in [from_ms, to_ms), at one sample rate (*hz), read
 * in one list instead of series by series. -1 when the segment cannot
 * answer so (no such list, two rates, a damaged one: logged): read its
 * series instead. Valid until the next call. */
static inline long store_view_rollup_sums(struct store_view *v, size_t i, uint32_t project,
					  uint8_t kind, int64_t from_ms, int64_t to_ms,
					  const uint32_t **stacks, const uint64_t **sums,
					  uint16_t *hz)
{
	return v->ops->rollup_sums(v, i, project, kind, from_ms, to_ms, stacks, sums, hz);
}
static inline void store_view_end(struct store_view *v, size_t i)
{
	v->ops->end(v, i);
}
static inline const struct store_view_stats *store_view_stats(const struct store_view *v)
{
	return v->ops->stats(v);
}
void store_view_close(struct store_view *v);

/* A begun segment's dictionaries. Strings (label keys and values, project
 * ids, host names) by id: "" for an unknown id. */
static inline const char *store_seg_str(const struct store_segment *g, uint32_t id)
{
	return g->ops->str(g, id);
}
/* The id of a string, UINT32_MAX when the segment has none. */
static inline uint32_t store_seg_find(const struct store_segment *g, const char *s, size_t len)
{
	return g->ops->find(g, s, len);
}
/* The sorted (key, value) string-id pairs of label set `labels`. Returns
 * the pair count (0 for an unknown set). */
static inline size_t store_seg_label_pairs(const struct store_segment *g, uint32_t labels,
					   const uint32_t **kv)
{
	return g->ops->label_pairs(g, labels, kv);
}
/* Frame `frame` (below nframes): 0, or -1 for an unknown id. */
static inline int store_seg_frame(const struct store_segment *g, uint32_t frame,
				  struct store_frame_info *out)
{
	return g->ops->frame(g, frame, out);
}
/* The logical CPUs of host `name` (a string id), 0 when unknown. */
static inline uint32_t store_seg_host_cpus(const struct store_segment *g, uint32_t name)
{
	return g->ops->host_cpus(g, name);
}
/* The value of attribute key in label set labels, or NULL (read.c). */
const char *store_seg_label_value(const struct store_segment *g, uint32_t labels,
				  const char *key);
/* The frames of stack node `stack`, outermost first, into out (at most
 * max). Returns the depth (which may exceed max; only max are written). */
size_t store_seg_stack(const struct store_segment *g, uint32_t stack, uint32_t *out,
		       size_t max);

#endif
