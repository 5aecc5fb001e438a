/* store_int.h - what only the store's own files share (store.c, open.c,
 * append.c, maintain.c, view.c): the store's structs and the functions
 * one file calls in another. Nothing outside server/store/ includes it.
 * Functions here are prefixed st_ (sref_ for part references). */
#ifndef EMBER_STORE_INT_H
#define EMBER_STORE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "block.h"
#include "part.h"
#include "store.h"
#include "strtab.h"
#include "wal.h"


/* One part the store knows: the head, a sealed in-memory part or a block. */
struct sref {
	struct part part;     /* the dictionaries (and, in memory, the rows) */
	bool loaded;          /* part is valid */
	struct block *blk;    /* NULL: an in-memory part */
	uint64_t gen;         /* blocks: the file's generation; in-memory parts: the
			       * head's own number (index() keys its caches by it) */
	uint64_t wal_lo, wal_hi; /* in-memory parts: the logs holding their batches */
	int64_t partition_ms, min_ts, max_ts;
	int refs;             /* the store's list + open views; under list_mu */
	int readers;          /* views between begin and end; under mu */
	bool broken, retired;
	bool warmed;          /* warm_cache has read it once; under list_mu */
	bool adopt_tried;     /* store_adopt_live_blocks looked at it; under list_mu */
	uint64_t last_used;
	size_t mem;           /* bytes of a loaded block's dictionaries */
	pthread_rwlock_t rw;  /* in-memory parts: the head's appends vs readers */
	pthread_mutex_t mu;   /* blocks: loading and eviction */
	int64_t first_row_mono_ms; /* head: when its first row came */
	int64_t written_mono_ms;   /* blocks written by this process: when (0 = earlier) */
	/* Blocks written from a sealed head (flush), or merged from such
	 * blocks while their hour is open: the head's dictionaries' name and
	 * node count, and each block node's id there (nlineage_ids of them),
	 * so a query may carry the block's stack sums into an in-memory part
	 * that still has those dictionaries (view.c, lineage()). Set before
	 * the block is listed, or once later (adopt_live_blocks) under
	 * maint_mu and list_mu; views read them as they were when opened.
	 * Not evicted with the dictionaries; dropped (forget_ids, under
	 * both locks, while no view holds the block) from a closed hour's
	 * only committed block. */
	uint64_t lineage;
	uint32_t *lineage_ids;
	size_t nlineage_ids, lineage_nnodes;
};

struct commit {
	const struct store_entry *e;
	bool recorded; /* e->record() was called */
	uint32_t agent;       /* index in the agent table, or UINT32_MAX */
	uint64_t prev_seq;
	int rc;
	bool done;
	struct commit *next;
};

/* The most heads one log file holds, and its most rows as a multiple of
 * max_unflushed_rows. Every agent session writes into each new log the
 * definitions its batches use, so longer logs carry less: 24 heads
 * (about 24 minutes with heads sealed every minute) carry a third of
 * what 8 did (docs/performance.md). The price: a log's blocks are
 * compacted only once it goes, so that many minutes stay in one-minute
 * blocks, and a start after a crash replays up to that much (a head at a
 * time, written as blocks as it goes: replay_seal). */
#define LOG_MAX_HEADS 24
#define LOG_MAX_UNFLUSHED 3

struct store {
	struct store_backend backend; /* first (store.h): read NULL, the embedded one's */
	char *dir, *blocks_dir, *wal_dir;
	struct store_config cfg;

	/* Commit: the log, the queue of appends waiting for a sync, the agent
	 * sequence table, sealing. All under mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct wal_file wal;
	uint64_t wal_synced;
	bool syncing, sealing;
	struct commit *queue, **queue_tail;
	struct strtab agent_names;
	uint64_t *agent_seq;
	size_t cap_agent_seq;
	uint64_t next_gen;
	/* The log files that exist, ascending (the current one last), and
	 * the rows appended to and heads sealed in the current one. A log
	 * outlives the heads that wrote to it until it holds
	 * LOG_MAX_UNFLUSHED x max_unflushed_rows rows or LOG_MAX_HEADS heads: every agent
	 * session writes into each new log the definitions its batches
	 * use, so fewer logs carry less; the blocks of a log are committed
	 * (and compacted) only once it goes. rotate_next: the head
	 * covers several logs (a start replayed some), so its next seal
	 * starts a new log (a log shared by heads is never part of a
	 * range: open_blocks). Only release_logs() removes entries, under
	 * maint_mu. */
	uint64_t *logs;
	size_t nlogs, caplogs;
	uint64_t log_rows, log_heads;
	int64_t sealed_mono_ms; /* the last seal */
	bool rotate_next;

	/* The parts. list_mu guards the array, refs and the head pointer. */
	pthread_mutex_t list_mu;
	struct sref *head;
	struct sref **parts; /* sealed parts and blocks, oldest first */
	size_t nparts, capparts;
	uint64_t cache_used, tick;

	/* Maintenance. */
	pthread_mutex_t maint_mu; /* one flush/compaction/retention at a time */
	pthread_t thread;
	bool thread_started, stop;
	pthread_mutex_t stop_mu;
	pthread_cond_t stop_cv;

	struct store_stats stats; /* counters under list_mu */

	/* The registered codecs by record type (store_config.codecs); set by
	 * store_open, read-only after. */
	const struct store_codec *codecs[256];
};


int64_t st_mono_ms(void);

/* Part references (store.c). */
struct sref *sref_new(void);
void sref_free(struct sref *r);
bool sref_put_locked(struct store *s, struct sref *r);
void sref_put(struct store *s, struct sref *r);
struct sref *sref_from_block(struct block *b);
int sref_load_locked(struct store *s, struct sref *r);
void st_evict(struct store *s);
uint32_t st_agent_index(struct store *s, const char *instance, bool create);
void st_note_agent(struct store *s, const char *instance, uint64_t seq);

/* Opening (open.c). */
int st_cmp_i64(const void *a, const void *b);
int st_cmp_sref_gen(const void *a, const void *b);
void st_block_file(const struct store *s, uint64_t gen, const char *suffix, struct buf *out);
void st_remove_file(const char *path, const char *why);
void st_sync_dir(const char *dir);
int st_open_blocks(struct store *s, uint64_t *wals, size_t *nwals, struct buf *err);
struct sref *st_swap_head(struct store *s, uint64_t wal);
int st_noop_record(void *ctx, const uint8_t *p, size_t len);

/* Appending (append.c). */
uint64_t st_unflushed_rows(struct store *s);

/* Maintenance (maintain.c). */
int st_seal(struct store *s, bool rotate, struct buf *err);
void st_release_logs(struct store *s);
bool st_committed(const struct sref *r, uint64_t lowest);
int st_flush_one(struct store *s, struct buf *err);
void st_warm_cache(struct store *s);
void *st_maintenance(void *arg);

#endif
