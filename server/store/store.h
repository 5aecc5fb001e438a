/* store.h - the embedded profile store behind every query, and the
 * interface a second storage backend implements (docs/internals/store.md,
 * "The interface").
 *
 * Samples live in parts (server/store/part.h, private to the store), each
 * with its own dictionaries:
 *
 *   head     the part being built in memory; every acknowledged batch is
 *            first in a write-ahead log file (server/store/wal.h)
 *   sealed   former heads waiting to be written (still queryable)
 *   blocks   immutable files (server/store/block.h) in DATA/blocks, one time
 *            partition (an hour) each; compaction merges the blocks of a
 *            partition into one, with rows rounded to the block granularity
 *
 * Writing: the contract. The store reads no wire format. Ingest hands it
 * an entry (struct store_entry) per batch: the log record the batch
 * becomes and an index() that writes the batch into the head through the
 * head writer (store_head_*: strings, files, frames, stacks, label sets,
 * series, rows, in ember's own types). At store_open the logs are read
 * back through the codec ingest registered for each record type (struct
 * store_codec, store_config.codecs), which writes through the same
 * writer. What every backend guarantees:
 *
 *   durable before acknowledged  store_append_entry() returns STORE_OK
 *            only once the record is on disk (and indexed: a query that
 *            starts after it sees the rows); anything it does not return
 *            STORE_OK for was not stored, and an acknowledged record comes
 *            back after a crash, through its codec
 *   duplicates  an entry with an agent instance is stored at most once
 *            per (instance, sequence): a sequence at or below the highest
 *            stored for that instance, before or after a restart, is
 *            STORE_DUPLICATE and nothing is done (entries without an
 *            instance are never duplicates)
 *   busy     STORE_BUSY when more than max_unflushed_rows wait to be
 *            written: nothing was stored, the agent retries later
 *   refused  STORE_REFUSED when the entry's time lies outside what the
 *            store keeps (time_window): retrying will not help
 *   codecs   an entry of a record type without a codec is refused
 *            (STORE_FAILED), and a log holding one fails store_open
 *
 * Here: concurrent appends share one fdatasync (group commit); the lead
 * of a commit calls every entry's index() in log order. A background
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
 * Threading: every function may be called from any thread. Appends run
 * in parallel up to the commit; an entry's record() runs under the commit
 * lock and its index() on the thread that leads the group commit, with
 * the head locked against readers (neither may call into the store).
 * Codecs replay in store_open's thread before it returns.
 */
#ifndef EMBER_SERVER_STORE_H
#define EMBER_SERVER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fileid.h"

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
	/* The codecs of the log's record types (struct store_codec), one per
	 * type: store_open replays the logs through them, and an append of a
	 * type without one is refused. ingest_codecs() (server/ingest/codecs.h)
	 * sets those of every type ember writes. */
	const struct store_codec *const *codecs;
	size_t ncodecs;
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


/* --- the head writer --------------------------------------------------------
 *
 * What a batch's index() (struct store_entry) and a codec's replay
 * (struct store_codec) write into: the head, the part being built. The
 * writer speaks ember's types: strings, store_file, store_frame, stacks of
 * frame ids, label sets of string ids, series, rows. Every id it returns
 * is the head's own and is valid only in calls on the same head, except
 * that ids of strings, files, frames, stacks and label sets stay valid in
 * any later head whose store_head_dictionaries() is the same (a new head
 * may start with the old one's dictionaries): a codec may cache them keyed
 * by that name. Series ids are a head's own (keyed by index()'s gen).
 *
 * These calls are the ingest hot path (one per new string, frame, stack
 * and resource, and one per batch for its rows); each is one hash lookup
 * when what it names is there already. They never fail: a bounded batch
 * (batch_decode.h limits) fits in memory. Only the store's index() and
 * replay calls hand a writer out, with the head locked for writing.
 */
struct store_head;

enum store_strings {
	STORE_LABEL_STRINGS,  /* attribute keys and values, project ids, agent instances */
	STORE_SYMBOL_STRINGS, /* function names, binaries, file names */
};

/* The id of string s[0..len) in table t, added when new ("" is 0). */
uint32_t store_head_string(struct store_head *h, enum store_strings t, const char *s, size_t len);
/* The name of the head's dictionaries (strings, files, frames, stacks,
 * label sets): equal for two heads only when the second started with the
 * first's and every id of the first means the same in it. Never 0. */
uint64_t store_head_dictionaries(const struct store_head *h);
/* A file (f->name: a symbol string id); a file seen before keeps what it
 * had and gains the build id and segments it lacked. */
uint32_t store_head_file(struct store_head *h, const struct store_file *f);
/* A frame (name, binary: symbol string ids; file: a file id + 1, or 0). */
uint32_t store_head_frame(struct store_head *h, const struct store_frame *f);
/* A frame by its text: found by the content of its strings before they
 * are interned, which happens only when it is new (a batch that names its
 * strings in its own table need not intern a known frame's). The same
 * frame as store_head_frame() of the interned strings. */
struct store_frame_text {
	uint8_t type;
	uint32_t file; /* a file id + 1, or 0 */
	uint64_t address;
	const char *name, *binary; /* "" for none */
	size_t name_len, binary_len;
	uint64_t binary_hash; /* hash_bytes(binary, binary_len) (hmap.h): the
			       * caller keeps it per string of its batch */
};
uint32_t store_head_frame_text(struct store_head *h, const struct store_frame_text *f);
/* The stack of frames[0..n) (frame ids, outermost first): its leaf; 0 for
 * n == 0. One lookup when the head has the stack. */
uint32_t store_head_stack(struct store_head *h, const uint32_t *frames, size_t n);
/* Stacks by a 128-bit hash (lo, hi) the caller computes from what their
 * frames are (not from the head's ids), kept beside store_head_stack's:
 * the stack noted for it, or UINT32_MAX; and noting one. */
uint32_t store_head_stack_by_hash(struct store_head *h, uint64_t lo, uint64_t hi);
void store_head_note_stack_hash(struct store_head *h, uint64_t lo, uint64_t hi, uint32_t stack);
/* The label set of npairs key/value pairs of label string ids in kv
 * (2 * npairs ids), which it sorts by key in place, dropping repeated keys
 * (the first wins). When host_cpus is not 0 and the set has host.name,
 * that host's logical CPU count is noted (absolute CPU mode). */
uint32_t store_head_labels(struct store_head *h, uint32_t *kv, size_t npairs, uint32_t host_cpus);
/* The series of (project: a label string id, kind: enum store_event_kind,
 * sample rate, label set). */
uint32_t store_head_series(struct store_head *h, uint32_t project, uint8_t kind, uint16_t hz,
			   uint32_t labels);
/* Adds the n rows (series[i], ts_ms, stacks[i], values[i]) of one batch. */
void store_head_rows(struct store_head *h, const uint32_t *series, int64_t ts_ms,
		     const uint32_t *stacks, const uint64_t *values, size_t n);
/* Notes that an agent instance's batch of sequence seq is in the head
 * (written into its blocks: duplicates are known after a restart). */
void store_head_note_agent(struct store_head *h, const char *instance, uint64_t seq);

/* A batch as the store appends it, whatever its wire format: the log
 * record it becomes and how it is added to the head part. batch_append()
 * (server/ingest/codecs.h) makes one of a version 1 batch; sessions.c
 * makes one of a session batch, whose record carries the session
 * definitions it needs.
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
struct store_entry {
	const char *project;        /* the project's id (UUID) */
	const char *agent_instance; /* "" or the agent instance, for duplicates */
	uint64_t sequence;
	int64_t start_unix_ms;
	uint8_t record_type;        /* enum store_record_type: a registered codec's */
	int (*record)(void *ctx, uint64_t gen, struct buf *head, const void **body, size_t *blen,
		      struct buf *err);
	int (*index)(void *ctx, struct store_head *head, uint64_t gen);
	void (*failed)(void *ctx);
	void *ctx;
};

/* Log record payloads: u8 n (1..255) and n bytes of project id, then a
 * version 1 batch as received (type 0); or u8 0, u8 type, u8 n, project id
 * and the type's own bytes. The numbers are given here so that no two
 * codecs share one; what a type's bytes hold is its codec's. */
enum store_record_type {
	STORE_RECORD_BATCH = 0,   /* a version 1 batch (server/ingest/codecs.c) */
	STORE_RECORD_SESSION = 1, /* carried definitions, then a session batch (sessions.c) */
};

/* Appends e: STORE_OK once its record is durable and indexed (see the
 * top of this file), STORE_DUPLICATE, or a failure (enum store_rc). A
 * record type without a registered codec is refused (STORE_FAILED): what
 * is acknowledged must replay. */
int store_append_entry(struct store *s, const struct store_entry *e, struct buf *err);
/* What every backend's append checks first: a project id of 1 to 255
 * bytes, a codec for the record type (codecs: by type, 256 of them), and
 * with cfg->time_window a time within the retention and at most a day
 * ahead. STORE_OK, STORE_FAILED or STORE_REFUSED (err says why). */
int store_entry_admit(const struct store_config *cfg, const struct store_codec *const *codecs,
		      const struct store_entry *e, struct buf *err);

/* --- codecs: reading the log back ----------------------------------------------
 *
 * The log holds records of a type; the codec of each type, registered in
 * store_config.codecs by the layer that writes them (ingest), turns one
 * logged record back into rows of the head when store_open replays the
 * logs, the way a server registers a connection type: the store itself
 * reads no wire format. A codec must replay every record its entries'
 * record() wrote (the acknowledged data is what it reads back) into the
 * same rows their index() added.
 *
 * Replay runs in store_open's thread, before any append, one record at a
 * time in log order. replay_begin (may be NULL) makes the codec's state
 * for one store_open, replay_end frees it. replay adds the samples of one
 * record (project: its project id; body: the type's bytes) to head, the
 * head numbered head_no in this replay (from 1; a new number for each
 * head it fills, as index() gets gen: series ids are a head's own), and
 * returns 0 with the batch's agent instance ("" for none) and sequence in
 * *out (the store's duplicate table), or -1 when the record does not
 * decode or refers to what no earlier record defined: it adds nothing,
 * and the record is logged and counted as skipped. A log record of a type
 * without a codec makes store_open fail (the logs are kept). */
#define STORE_AGENT_MAX 64 /* the longest agent instance */
struct store_replayed {
	char agent_instance[STORE_AGENT_MAX + 1];
	uint64_t sequence;
};
struct store_codec {
	uint8_t type;     /* enum store_record_type */
	const char *name; /* for messages */
	void *(*replay_begin)(void);
	int (*replay)(void *state, const char *project, const uint8_t *body, size_t len,
		      struct store_head *head, uint32_t head_no, struct store_replayed *out);
	void (*replay_end)(void *state);
};

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

/* A backend's writing half (besides the embedded store's, whose handle
 * leaves it NULL): store_append_entry, store_get_stats and store_close
 * dispatch on it. append keeps every guarantee listed at the top of this
 * file ("durable before acknowledged", duplicates, busy, refused,
 * codecs), its own way: the ClickHouse backend
 * (server/store/clickhouse/chstore.h) calls the entry's index() into a
 * head of its own and sends that head's rows, never calling record().
 * The maintenance calls (store_flush and the rest) are the embedded
 * store's alone. */
struct store_write_ops {
	const char *name;
	int (*append)(struct store *s, const struct store_entry *e, struct buf *err);
	void (*stats)(struct store *s, struct store_stats *out);
	void (*close)(struct store *s);
};

/* What every backend's handle begins with: its reading and writing
 * operations. NULL is the embedded store's own (store_open zero-fills
 * the handle; a test's in-memory double sets read alone). */
struct store_backend {
	const struct store_read_ops *read;
	const struct store_write_ops *write;
};

/* What a query will select of a view (store_view_open_scoped): a hint a
 * backend may use to read less; the query still selects series itself
 * (project, kind, CEL over the label sets), so a backend may give more
 * than the scope but never less. */
struct store_view_scope {
	const char *project;   /* the project's id; NULL: any */
	uint8_t kind;          /* enum store_event_kind; 0: any */
	/* NULL, or a ClickHouse SQL condition over the columns `keys` and
	 * `values` of a label set (server/query/cel_sql.h) that holds for
	 * every label set the query's filter selects */
	const char *label_sql;
};

/* A backend's reading half. Every function is required; the public
 * functions below document each. */
struct store_read_ops {
	const char *name;
	struct store_view *(*view_open)(struct store *s, int64_t from_ms, int64_t to_ms,
					const struct store_view_scope *scope);
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
	/* NULL, or whether a read of the view failed (store_view_failed);
	 * the one optional function: a backend whose reads cannot fail for
	 * a while (files on this machine) leaves it NULL. */
	int (*failed)(const struct store_view *v, struct buf *why);
};

/* The embedded store's reading operations (view.c). */
extern const struct store_read_ops store_embedded_read;

/* The segments holding rows in [from_ms, to_ms), pinned, in the order a
 * query reads them. */
struct store_view *store_view_open(struct store *s, int64_t from_ms, int64_t to_ms);
/* The same for a query that selects within scope (may be NULL: everything). */
struct store_view *store_view_open_scoped(struct store *s, int64_t from_ms, int64_t to_ms,
					  const struct store_view_scope *scope);
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
/* Whether a read of the view failed for a while (ClickHouse unreachable,
 * a shard down, a malformed answer): then a begin gave NULL or a read -1,
 * and an answer made from the rest would be wrong, not smaller. Returns
 * STORE_READ_RC with the first failure's message appended to why (may be
 * NULL), or 0.
 * The embedded store never fails this way: a damaged block is set aside
 * for good and the rest served (logged and counted). */
#define STORE_READ_RC (-8)
static inline int store_view_failed(const struct store_view *v, struct buf *why)
{
	return v && v->ops->failed ? v->ops->failed(v, why) : 0;
}

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
