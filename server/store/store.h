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

/* What an append returns. A caller branches on the names; the values
 * keep every failure negative (rc < 0: not stored). */
enum store_rc {
	STORE_OK = 0,        /* stored: its log record is durable */
	STORE_DUPLICATE = 1, /* the same agent instance and sequence was stored
			      * before: nothing is done (answer as stored) */
	STORE_FAILED = -1,   /* not stored (err says why; nothing was acknowledged) */
	STORE_BUSY = -2,     /* too much data waiting to be written: retry later */
	STORE_REFUSED = -3,  /* its time lies outside what the store keeps (err says
			      * why): retrying will not help */
};

/* Appends a batch that batch_decode() accepted; zbody is its encoded
 * form, which is what the log keeps. Returns an enum store_rc. */
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

/* Appends e; returns an enum store_rc, as store_append. */
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

struct part_series;
struct part_rollup;
struct part_row;

struct store_view_stats {
	uint64_t parts, parts_skipped, series_read, chunks_skipped, rows_read, bytes_read;
	uint64_t stack_sums_read; /* per-series stack totals used instead of rows */
};

struct store_view;

/* The parts holding rows in [from_ms, to_ms), pinned. */
struct store_view *store_view_open(struct store *s, int64_t from_ms, int64_t to_ms);
size_t store_view_count(const struct store_view *v);
/* The dictionaries' name (part.h dict_id) of part i when it is in memory,
 * 0 for a block. In-memory parts of one name are a sealed head and the
 * heads that started with copies of its dictionaries, oldest first: each
 * holds the ids of the one before it, under the same meaning. */
uint64_t store_view_dictionary(const struct store_view *v, size_t i);
/* For a block written by this process from a sealed head, or merged from
 * such blocks of one hour that is not yet closed: the head's dictionaries'
 * name (0 for any other part), the most nodes a source had (nnodes), and
 * the id there of each of the block's nids nodes (ids). Those ids mean the
 * same in every in-memory part of that name with at least nnodes nodes. */
uint64_t store_view_lineage(const struct store_view *v, size_t i, const uint32_t **ids,
			    size_t *nids, size_t *nnodes);
/* Begins reading part i: its dictionaries are loaded and it cannot change
 * until store_view_end(). NULL when the part cannot be read (damaged:
 * logged, counted, skipped). */
const struct part *store_view_begin(struct store_view *v, size_t i);
/* The same for an in-memory part (NULL for a block), not counted as read:
 * a look before the query begins it. Ended by store_view_end(). */
const struct part *store_view_peek(struct store_view *v, size_t i);
/* The rows of series s of the part begun as i, at least those at or after
 * since_ms (INT64_MIN: all; a block gives the time slices that hold them,
 * so older rows may come too); -1 when they cannot be read (a damaged
 * chunk: logged and counted). Valid until the next call. */
long store_view_rows(struct store_view *v, size_t i, const struct part_series *s,
		     int64_t since_ms, const struct part_row **rows);
/* The stacks of series s of the part begun as i with the sum of their
 * values in [from_ms, to_ms): from the series' stored stack totals when
 * it lies inside the range (no rows read), else from its rows. Stacks of
 * an in-memory part may repeat. -1 when they cannot be read (logged,
 * counted). Valid until the next call. */
long store_view_sums(struct store_view *v, size_t i, const struct part_series *s,
		     int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
		     const uint64_t **sums);
/* The sum of series s's values in [from_ms, to_ms) in the part begun as
 * i: from the rows of the slices that meet the range only (a block), or
 * its rows in memory. -1 when they cannot be read (logged, counted). */
int64_t store_view_total(struct store_view *v, size_t i, const struct part_series *s,
			 int64_t from_ms, int64_t to_ms);
/* The stack totals, ascending, of every series of rollup r of the part
 * begun as i (a block) in [from_ms, to_ms), read from the rollup's time
 * slices and the rows of the slices the range cuts (block_rollup_sums).
 * -1 when the part cannot answer so (in memory, a block without slices,
 * a damaged rollup slice: logged): read its series instead. Valid until
 * the next call. */
long store_view_rollup_sums(struct store_view *v, size_t i, const struct part_rollup *r,
			    int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
			    const uint64_t **sums);
void store_view_end(struct store_view *v, size_t i);
const struct store_view_stats *store_view_stats(const struct store_view *v);
void store_view_close(struct store_view *v);

#endif
