/* block.h - block files: a part of the store written to disk, immutable,
 * compressed and checksummed (format: docs/internals/store.md).
 *
 *   header   "EMBRBLK1", version
 *   chunks   per series, zstd frames: its distinct stacks, their totals,
 *            then its rows sorted by (time, stack), one frame per time
 *            slice; per rollup, its stack totals by time slice
 *   sections one zstd frame per dictionary table (strings, files, frames,
 *            stack nodes, label sets, series with their chunk locations
 *            and minute totals, hosts) and the rollups: the stack totals
 *            of all series of one (project, kind, rate) together
 *   footer   section table with XXH64 sums, time range, counts, lineage,
 *            agent sequences
 *   trailer  footer length, XXH64 of the footer, "EMBREND1"
 *
 * A block is written once (block_writer_*), fsynced and renamed into
 * place, and never changed after: compaction writes a new block and
 * deletes the old ones. Reading verifies every checksum before it trusts a
 * byte, bounds every count by the bytes that hold it and every id by its
 * table, so a damaged file is reported, never followed.
 *
 * Ownership: struct block owns its file descriptor; the part a block is
 * loaded into belongs to the caller.
 */
#ifndef EMBER_SERVER_BLOCK_H
#define EMBER_SERVER_BLOCK_H

#include <stdint.h>

#include "buf.h"
#include "part.h"

#define BLOCK_MAX_SECTION (1ull << 30)
#define BLOCK_MAX_CHUNK (1ull << 30)
/* Blocks keep each series' rows, and each rollup's stack totals, by time
 * slice of this length (aligned to multiples of it), so that a range
 * that cuts a block reads the rollup slices inside it and only the rows
 * of the slices at its two ends (docs/internals/store.md). */
#define BLOCK_SLICE_MS 120000

struct block_agent {
	char *instance;
	uint64_t seq;
};

/* What the footer says. Lineage makes replacing files crash-safe: a block
 * names the blocks it was compacted from (sources) and the write-ahead
 * log files it was flushed from (wal_lo..wal_hi); at startup a block named
 * as a source by another is deleted, and a block whose log files still
 * exist is deleted and the logs replayed (docs/internals/store.md). */
struct block_info {
	uint64_t gen;          /* unique, increasing: the file's name */
	int64_t partition_ms;  /* start of the time partition (hour) */
	int64_t min_ts, max_ts;
	uint32_t granularity_ms;
	uint32_t slice_ms;     /* rows and rollups by time slice; 0 = none (version 3) */
	uint32_t level;        /* 0 = flushed from memory, 1+ = compacted */
	uint64_t rows, samples, nseries;
	uint64_t file_bytes;
	uint64_t wal_lo, wal_hi; /* log generations flushed into it; 0 = none */
	uint64_t *sources;       /* generations of the blocks it replaces */
	size_t nsources;
	struct block_agent *agents; /* highest batch sequence per agent */
	size_t nagents;
};

/* Lineage and identity of a block being written. */
struct block_meta {
	uint64_t gen;
	int64_t partition_ms;
	uint32_t level;
	uint64_t wal_lo, wal_hi;
	const uint64_t *sources;
	size_t nsources;
};

struct block;

/* Opens a block file and checks its footer. Returns 0 or -1 (err set). */
int block_open(const char *path, struct block **out, struct buf *err);
void block_close(struct block *b);
const struct block_info *block_info(const struct block *b);
const char *block_path(const struct block *b);
/* Reads every dictionary section into p (initialised here). Series come
 * with their chunk locations and minute totals, not their rows. */
int block_load(struct block *b, struct part *p, struct buf *err);
/* Decodes the rows of series s of the part loaded from b into *rows
 * (owned by scratch, valid until its next use): those of the slices that
 * hold rows at or after since_ms (INT64_MIN: all; older rows may come
 * with them). Adds the compressed bytes read to *bytes_read. Returns the
 * row count, or -1 (err set). */
long block_rows(struct block *b, const struct part *p, const struct part_series *s,
		int64_t since_ms, struct buf *scratch, const struct store_row **rows,
		uint64_t *bytes_read, struct buf *err);

/* The distinct stacks of series s with the sum of their rows in
 * [from_ms, to_ms) (only the stacks with a value): read from the series'
 * stack totals alone when the series lies inside the range, else from its
 * stack list and the rows of the slices that meet the range (counted in
 * *rows_read). Arrays owned by scratch. Returns the count
 * or -1 (err set). */
long block_sums(struct block *b, const struct part *p, const struct part_series *s,
		int64_t from_ms, int64_t to_ms, struct buf *scratch, const uint32_t **stacks,
		const uint64_t **sums, uint64_t *rows_read, uint64_t *bytes_read, struct buf *err);

/* The sum of the values of series s's rows in [from_ms, to_ms), reading
 * only the row frames of the slices that meet it (not its stack list).
 * -1 (err set) when they cannot be read. */
int64_t block_total(struct block *b, const struct part *p, const struct part_series *s,
		    int64_t from_ms, int64_t to_ms, struct buf *scratch, uint64_t *rows_read,
		    uint64_t *bytes_read, struct buf *err);

/* What a read cost, for the query statistics. */
struct block_read_stats {
	uint64_t series_read, rows_read, bytes_read, stack_sums_read, chunks_skipped;
};

/* The stack totals of rollup r's series (every series of its project,
 * kind and rate) in [from_ms, to_ms), ascending by stack, arrays owned by
 * scratch: the rollup's slices that lie inside the range, plus the rows in
 * the range of the slices it cuts (at most two: its ends). acc holds a
 * dense sum per stack node while they are added. -1 (err set) when the
 * rollup has no slices (a version 3 block) or a rollup slice is damaged:
 * the caller reads the series instead. A damaged series chunk is skipped
 * and counted, its message left in err, and the rest returned. */
long block_rollup_sums(struct block *b, const struct part *p, const struct part_rollup *r,
		       int64_t from_ms, int64_t to_ms, struct buf *scratch, struct buf *acc,
		       const uint32_t **stacks, const uint64_t **sums, struct block_read_stats *st,
		       struct buf *err);

/* --- writing ---------------------------------------------------------------- */

struct block_writer;

/* Starts a block at tmp_path (created; replaced if present). */
struct block_writer *block_writer_create(const char *tmp_path, struct buf *err);
/* Writes the rows of series `series` of dst: sorts them by (time, stack),
 * merges equal keys, writes its stack totals and one rows frame per time
 * slice, and records their locations (dst->slices), totals, time range and
 * minute totals in dst->series[series]. The rows are added to the rollup
 * of the series' project, kind and rate, whole and by slice; the slices'
 * sums wait in hash tables (about 12 bytes per distinct stack per slice)
 * until block_writer_finish. rows is reordered. */
int block_writer_chunk(struct block_writer *w, struct part *dst, uint32_t series,
		       struct store_row *rows, size_t n, struct buf *err);
/* Writes dst's dictionaries and the footer, fsyncs, renames the file to
 * final_path and fsyncs its directory. The writer is freed either way. */
int block_writer_finish(struct block_writer *w, struct part *dst,
			const struct block_meta *meta, const char *final_path, struct buf *err);
void block_writer_abort(struct block_writer *w);

#endif
