/* rowbinary.h - the fleet store's rows in ClickHouse's RowBinary format,
 * and the insert of one batch (docs/internals/clickhouse.md).
 *
 * RowBinary: each row is its columns in table order; integers and
 * DateTime (seconds, UInt32) little-endian, a String as its LEB128 length
 * then its bytes, an Array as its LEB128 count then its elements. The
 * column orders are the tables' in schema.h.
 *
 * Content hashes (XXH3 64, a different seed per table, so equal bytes in
 * two tables never name each other) make the dictionaries idempotent: a
 * string, frame, stack or label set sent twice is the same row twice,
 * which ReplacingMergeTree folds, and a batch may resend what an earlier
 * one sent.
 *
 * ch_insert_batch sends one batch: its dictionaries, then its samples in
 * one INSERT (one block of at most CH_MAX_BATCH_ROWS rows: one part on
 * one shard, so it is stored whole or not at all), then its row in
 * batches. A batch whose id batches (or samples) already holds is not
 * inserted again: the agent's retry after a lost answer counts once.
 * Bodies go gzip-compressed (the Content-Encoding ClickHouse 18.16 takes;
 * zstd came later). On a cluster the Distributed inserts are synchronous
 * (insert_distributed_sync), so an acknowledgement means the shard holds
 * the rows.
 */
#ifndef EMBER_STORE_CH_ROWBINARY_H
#define EMBER_STORE_CH_ROWBINARY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "chttp.h"

#define CH_MAX_BATCH_ROWS 1000000  /* below max_insert_block_size (1 048 576) */

/* Seeds of the content hashes, one per table. */
enum ch_hash_seed {
	CH_SEED_STRING = 1,
	CH_SEED_FRAME = 2,
	CH_SEED_STACK = 3,
	CH_SEED_LABELS = 4,
	CH_SEED_BATCH = 5,
	CH_SEED_FILE = 6,
};

struct ch_sample {
	const char *project;
	const char *kind;    /* "on_cpu", "off_cpu", "cuda", "alloc" */
	uint32_t ts;         /* seconds since 1970 (UTC) */
	uint64_t stack;      /* ch_stack_hash */
	uint64_t labels;     /* ch_labels_hash */
	uint32_t hz;
	uint64_t value;
	uint64_t batch;      /* ch_batch_id */
};

struct ch_frame {
	uint8_t type;
	uint64_t address;
	uint64_t function;   /* ch_string_hash of each */
	uint64_t binary;
	uint64_t build_id;
	uint64_t file;       /* ch_file_hash, 0: none (schema version 2) */
};

/* An executable or library (the embedded store's struct store_file). */
struct ch_file {
	const uint8_t *id;         /* FILE_ID_LEN bytes */
	const char *name;
	size_t name_len;
	const uint8_t *build_id;
	size_t build_id_len;
	const uint64_t *segs;      /* nsegs (offset, vaddr, size) triples */
	size_t nsegs;
};

/* RowBinary primitives (exposed for the unit test). */
void ch_rb_u8(struct buf *b, uint8_t v);
void ch_rb_u32(struct buf *b, uint32_t v);
void ch_rb_u64(struct buf *b, uint64_t v);
void ch_rb_varint(struct buf *b, uint64_t v);
void ch_rb_string(struct buf *b, const char *s, size_t n);

uint64_t ch_string_hash(const char *s, size_t n);
/* A frame without a file hashes as in schema version 1. */
uint64_t ch_frame_hash(const struct ch_frame *f);
uint64_t ch_file_hash(const struct ch_file *f);
uint64_t ch_stack_hash(const uint64_t *frames, size_t n);
/* keys and values sorted by key (the caller's order is kept). */
uint64_t ch_labels_hash(const char *const *keys, const char *const *values, size_t n);
uint64_t ch_batch_id(const char *agent, uint64_t sequence);

/* One batch's rows, each table's RowBinary body and row count. */
struct ch_batch {
	const char *project;
	const char *agent;
	uint64_t sequence;
	uint64_t id;                 /* ch_batch_id(agent, sequence) */
	uint32_t ts_min, ts_max;
	int unique;                  /* the id cannot have been stored (a random one):
				      * ch_insert_batch skips the dedup look-ups */
	struct buf samples, stacks, frames, strings, label_sets, files;
	size_t n_samples, n_stacks, n_frames, n_strings, n_label_sets, n_files;
};

void ch_batch_init(struct ch_batch *b, const char *project, const char *agent, uint64_t sequence);
void ch_batch_free(struct ch_batch *b);
/* Each returns the row's hash (the sample returns 0, or -1 over
 * CH_MAX_BATCH_ROWS). s->batch and s->project are taken from b. */
int ch_batch_sample(struct ch_batch *b, const struct ch_sample *s);
uint64_t ch_batch_string(struct ch_batch *b, const char *s, size_t n);
uint64_t ch_batch_frame(struct ch_batch *b, const struct ch_frame *f);
uint64_t ch_batch_file(struct ch_batch *b, const struct ch_file *f);
uint64_t ch_batch_stack(struct ch_batch *b, const uint64_t *frames, size_t n);
uint64_t ch_batch_label_set(struct ch_batch *b, const char *const *keys, const char *const *values,
			    size_t n);

/* The row of a sample alone (what ch_batch_sample appends). */
void ch_rb_sample(struct buf *out, const struct ch_sample *s);

enum ch_insert_result { CH_INSERTED, CH_DUPLICATE };

/* Sends b over c (server 0: with a cluster, the Distributed tables route
 * each row). CH_OK with *result set, CH_UNAVAILABLE (answer 503 with
 * Retry-After: nothing of the batch counts yet, a retry completes it) or
 * CH_FAILED, err saying why. */
enum ch_rc ch_insert_batch(struct ch_conn *c, struct ch_batch *b, enum ch_insert_result *result,
			   struct buf *err);
/* The same for n batches at once (a group of concurrent appends): the
 * dedup look-ups in one query each, each table's rows of every new batch
 * in one insert (on a cluster each shard gets its batches' rows in one
 * block, so each batch is still whole on one shard), then their batches
 * rows. result[i] for each; the return is the group's (on an error none
 * of them counts yet). At most CH_MAX_BATCH_ROWS samples in all. */
enum ch_rc ch_insert_batches(struct ch_conn *c, struct ch_batch *const *b, size_t n,
			     enum ch_insert_result *result, struct buf *err);

/* INSERT INTO database.table (columns) FORMAT RowBinary with body (rows
 * of those columns; nothing sent when empty), gzip-compressed, as a
 * synchronous Distributed insert: CH_OK means on the shard. */
enum ch_rc ch_insert_rows(struct ch_conn *c, const char *table, const char *columns,
			  const struct buf *body, struct buf *err);

/* SQL string literal of s[0..n) between single quotes, every byte that
 * is not printable ASCII, and \ and ', escaped (\\, \', \xHH): safe for
 * any bytes, NUL included. */
void ch_sql_string(struct buf *out, const char *s, size_t n);

#endif
