/* store.c - see store.h; formats and recovery rules are described in
 * docs/internals/store.md. */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/ingest/batch_decode.h"
#include "block.h"
#include "log.h"
#include "merge.h"
#include "part.h"
#include "server/ingest/sessions.h"
#include "strtab.h"
#include "util.h"
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
	 * that still has those dictionaries (store_view_lineage). Set before
	 * the block is listed, or once later (adopt_live_blocks) under
	 * maint_mu and list_mu; views read them as they were when opened.
	 * Not evicted with the dictionaries. */
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
};

void store_config_default(struct store_config *c)
{
	*c = (struct store_config){
		.retention_ms = 14LL * 24 * 3600 * 1000,
		.block_granularity_ms = 10000,
		/* Each head is a new log file, in which every agent session
		 * carries again the definitions its batches use: fewer, larger
		 * heads carry less per sample (half the unflushed limit, so a
		 * sealed head can be flushing while the next one fills). */
		.head_max_rows = 8000000,
		.head_max_age_ms = 60000,
		.max_unflushed_rows = 16000000,
		.cache_bytes = 1ull << 30,
		.head_dict_bytes = 256ull << 20,
		/* 4, not 8: a query of the live hour reads fewer parts (the
		 * hour of store_bench: 5.1 on average and 11 at most, against
		 * 7.0 and 14), for about 8 % more of the store's CPU per sample
		 * (docs/performance.md, "Compaction at 4 blocks"). */
		.compact_after = 4,
		.background = true,
		.time_window = true,
		.late_data_wait_ms = 5 * 60000,
	};
}

static int64_t mono_ms(void)
{
	return (int64_t)(now_mono_ns() / 1000000);
}

/* --- parts and references ------------------------------------------------------- */

static struct sref *sref_new(void)
{
	struct sref *r = xcalloc(1, sizeof(*r));
	/* Writer-preferring: the indexer, which the ingest requests of the
	 * live hour wait for, gets the lock once the queries reading the part
	 * now are done, rather than only when overlapping queries all happen
	 * to pause (with the default, reader-preferring kind, a stream of
	 * queries kept ingest waiting for all of it). No thread takes one
	 * part's read lock twice, which this kind does not allow. */
	pthread_rwlockattr_t attr;
	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&r->rw, &attr);
	pthread_rwlockattr_destroy(&attr);
	pthread_mutex_init(&r->mu, NULL);
	r->refs = 1;
	r->min_ts = INT64_MAX;
	r->max_ts = INT64_MIN;
	return r;
}

static void sref_free(struct sref *r)
{
	if (r->loaded)
		part_free(&r->part);
	block_close(r->blk);
	free(r->lineage_ids);
	pthread_rwlock_destroy(&r->rw);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

/* Drops one reference; list_mu held. Returns true when r was freed. */
static bool sref_put_locked(struct store *s, struct sref *r)
{
	if (--r->refs > 0)
		return false;
	if (r->loaded && r->blk)
		s->cache_used -= r->mem;
	sref_free(r);
	return true;
}

static void sref_put(struct store *s, struct sref *r)
{
	pthread_mutex_lock(&s->list_mu);
	sref_put_locked(s, r);
	pthread_mutex_unlock(&s->list_mu);
}

static struct sref *sref_from_block(struct block *b)
{
	struct sref *r = sref_new();
	const struct block_info *in = block_info(b);
	r->blk = b;
	r->gen = in->gen;
	r->partition_ms = in->partition_ms;
	r->min_ts = in->min_ts;
	r->max_ts = in->max_ts;
	return r;
}

/* Moves a damaged block aside so that it is kept for inspection but never
 * read again, here or after a restart. */
static void quarantine(struct store *s, struct sref *r, const char *why)
{
	struct buf to = { 0 };
	buf_printf(&to, "%s.corrupt", block_path(r->blk));
	if (rename(block_path(r->blk), to.data) < 0)
		log_error("cannot move %s aside: %s", block_path(r->blk), strerror(errno));
	log_error("store: %s; the block is skipped and kept as %s", why, to.data);
	buf_free(&to);
	const struct block_info *in = block_info(r->blk);
	pthread_mutex_lock(&s->list_mu);
	s->stats.corrupt_blocks++;
	s->stats.blocks--;
	s->stats.block_bytes -= in->file_bytes;
	s->stats.block_rows -= in->rows;
	s->stats.block_samples -= in->samples;
	pthread_mutex_unlock(&s->list_mu);
}

/* Loads a block's dictionaries unless loaded; r->mu held. */
static int sref_load_locked(struct store *s, struct sref *r)
{
	if (r->loaded)
		return 0;
	if (r->broken)
		return -1;
	struct buf err = { 0 };
	if (block_load(r->blk, &r->part, &err) < 0) {
		r->broken = true;
		quarantine(s, r, err.data);
		buf_free(&err);
		return -1;
	}
	r->loaded = true;
	r->mem = part_memory(&r->part);
	pthread_mutex_lock(&s->list_mu);
	s->cache_used += r->mem;
	pthread_mutex_unlock(&s->list_mu);
	return 0;
}

/* Frees loaded dictionaries of blocks nobody reads, least recently used
 * first, until the cache fits its budget. */
static void evict(struct store *s)
{
	for (;;) {
		pthread_mutex_lock(&s->list_mu);
		if (s->cache_used <= s->cfg.cache_bytes) {
			pthread_mutex_unlock(&s->list_mu);
			return;
		}
		struct sref *victim = NULL;
		for (size_t i = 0; i < s->nparts; i++) {
			struct sref *r = s->parts[i];
			if (r->blk && r->loaded && r->readers == 0 &&
			    (!victim || r->last_used < victim->last_used))
				victim = r;
		}
		if (victim)
			victim->refs++;
		pthread_mutex_unlock(&s->list_mu);
		if (!victim)
			return;
		pthread_mutex_lock(&victim->mu);
		bool freed = false;
		if (victim->loaded && victim->readers == 0) {
			part_free(&victim->part);
			victim->loaded = false;
			freed = true;
		}
		pthread_mutex_unlock(&victim->mu);
		pthread_mutex_lock(&s->list_mu);
		if (freed)
			s->cache_used -= victim->mem;
		sref_put_locked(s, victim);
		pthread_mutex_unlock(&s->list_mu);
		if (!freed)
			return;
	}
}

/* --- the agent sequence table (under mu) ------------------------------------------ */

static uint32_t agent_index(struct store *s, const char *instance, bool create)
{
	uint32_t id = create ? strtab_intern_cstr(&s->agent_names, instance)
			     : strtab_lookup(&s->agent_names, instance, strlen(instance));
	if (id == UINT32_MAX)
		return id;
	if (id >= s->cap_agent_seq) {
		size_t old = s->cap_agent_seq;
		xgrow((void **)&s->agent_seq, &s->cap_agent_seq, id + 1, sizeof(uint64_t));
		memset(s->agent_seq + old, 0, (s->cap_agent_seq - old) * sizeof(uint64_t));
	}
	return id;
}

static void note_agent(struct store *s, const char *instance, uint64_t seq)
{
	uint32_t a = agent_index(s, instance, true);
	s->agent_seq[a] = MAX(s->agent_seq[a], seq);
}

/* --- opening: blocks, lineage, log replay ----------------------------------------- */

static int parse_gen(const char *name, const char *suffix, uint64_t *gen)
{
	size_t n = strlen(name), sl = strlen(suffix);
	if (n <= sl || strcmp(name + n - sl, suffix) != 0 || n - sl > 20)
		return -1;
	char digits[24];
	memcpy(digits, name, n - sl);
	digits[n - sl] = '\0';
	return parse_u64(digits, gen);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_sref_gen(const void *a, const void *b)
{
	const struct sref *x = *(struct sref *const *)a, *y = *(struct sref *const *)b;
	return x->gen < y->gen ? -1 : x->gen > y->gen;
}

/* Lists names ending in suffix in dir as generations, sorted. */
static int list_gens(const char *dir, const char *suffix, uint64_t **out, size_t *n,
		     struct buf *err)
{
	DIR *d = opendir(dir);
	if (!d) {
		buf_printf(err, "cannot read %s: %s", dir, strerror(errno));
		return -1;
	}
	size_t cap = 0;
	*n = 0;
	*out = NULL;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		uint64_t g;
		if (parse_gen(e->d_name, suffix, &g) == 0) {
			xgrow((void **)out, &cap, *n + 1, sizeof(uint64_t));
			(*out)[(*n)++] = g;
		}
	}
	closedir(d);
	if (*n)
		xqsort(*out, *n, sizeof(uint64_t), cmp_u64);
	return 0;
}

static void block_file(const struct store *s, uint64_t gen, const char *suffix, struct buf *out)
{
	buf_reset(out);
	buf_printf(out, "%s/%016llu%s", s->blocks_dir, (unsigned long long)gen, suffix);
}

static void remove_file(const char *path, const char *why)
{
	if (unlink(path) < 0 && errno != ENOENT)
		log_error("cannot delete %s: %s", path, strerror(errno));
	else
		log_info("store: deleted %s (%s)", path, why);
}

/* Makes the creations and deletions of names in dir durable. */
static void sync_dir(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (fsync(dfd) < 0)
		log_warn("syncing %s: %s", dir, strerror(errno));
	close(dfd);
}

static bool gen_in(const uint64_t *set, size_t n, uint64_t g)
{
	return n && bsearch(&g, set, n, sizeof(uint64_t), cmp_u64) != NULL;
}

static int open_blocks(struct store *s, uint64_t *wals, size_t *nwals, struct buf *err)
{
	uint64_t *gens;
	size_t n;
	if (list_gens(s->blocks_dir, ".blk", &gens, &n, err) < 0)
		return -1;
	struct block **blks = xcalloc(n ? n : 1, sizeof(*blks));
	uint64_t *superseded = NULL;
	size_t nsup = 0, capsup = 0;
	struct buf path = { 0 };
	/* Unfinished writes: never referenced, deleted. */
	uint64_t *tmps;
	size_t ntmp;
	if (list_gens(s->blocks_dir, ".tmp", &tmps, &ntmp, err) < 0) {
		free(gens);
		free(blks);
		return -1;
	}
	for (size_t i = 0; i < ntmp; i++) {
		block_file(s, tmps[i], ".tmp", &path);
		remove_file(path.data, "an unfinished block write");
		s->next_gen = MAX(s->next_gen, tmps[i] + 1);
	}
	free(tmps);
	for (size_t i = 0; i < n; i++) {
		/* Numbers are never reused, even a damaged block's. */
		s->next_gen = MAX(s->next_gen, gens[i] + 1);
		block_file(s, gens[i], ".blk", &path);
		struct buf berr = { 0 };
		if (block_open(path.data, &blks[i], &berr) < 0) {
			log_error("store: %s; the block is skipped and kept as %s.corrupt", berr.data,
				  path.data);
			struct buf to = { 0 };
			buf_printf(&to, "%s.corrupt", path.data);
			if (rename(path.data, to.data) < 0)
				log_error("cannot move %s aside: %s", path.data, strerror(errno));
			buf_free(&to);
			s->stats.corrupt_blocks++;
			buf_free(&berr);
			continue;
		}
		const struct block_info *in = block_info(blks[i]);
		for (size_t k = 0; k < in->nsources; k++) {
			xgrow((void **)&superseded, &capsup, nsup + 1, sizeof(uint64_t));
			superseded[nsup++] = in->sources[k];
		}
		s->next_gen = MAX(s->next_gen, gens[i] + 1);
	}
	if (nsup)
		xqsort(superseded, nsup, sizeof(uint64_t), cmp_u64);
	for (size_t i = 0; i < n; i++) {
		if (!blks[i])
			continue;
		const struct block_info *in = block_info(blks[i]);
		bool replaced = gen_in(superseded, nsup, gens[i]);
		/* A flush deletes its logs lowest first, and that first
		 * deletion is its commit: while the lowest log exists the flush
		 * did not finish, the block goes and the logs are replayed.
		 * Once it is gone, logs of the block's range still here are
		 * the rest of a deletion a crash cut short: they are deleted,
		 * not replayed (their rows are in the block). No other part
		 * ever covers them: only a head that replayed logs at a start
		 * covers several, and its first seal starts a new log, so
		 * heads share only a log that is a whole range of each. */
		bool unfinished = in->wal_lo && gen_in(wals, *nwals, in->wal_lo);
		if (!replaced && !unfinished && in->gen == gens[i] && in->wal_lo) {
			size_t kept = 0;
			for (size_t w = 0; w < *nwals; w++) {
				if (wals[w] > in->wal_lo && wals[w] <= in->wal_hi) {
					wal_path(s->wal_dir, wals[w], &path);
					remove_file(path.data, "the rest of a flushed log range");
					continue;
				}
				wals[kept++] = wals[w];
			}
			*nwals = kept;
		}
		if (replaced || unfinished || in->gen != gens[i]) {
			block_close(blks[i]);
			block_file(s, gens[i], ".blk", &path);
			remove_file(path.data, replaced ? "replaced by a compacted block"
					       : unfinished ? "an unfinished flush; its log is replayed"
							    : "its name and footer disagree");
			continue;
		}
		for (size_t k = 0; k < in->nagents; k++)
			note_agent(s, in->agents[k].instance, in->agents[k].seq);
		xgrow((void **)&s->parts, &s->capparts, s->nparts + 1, sizeof(*s->parts));
		s->parts[s->nparts++] = sref_from_block(blks[i]);
		s->stats.blocks++;
		s->stats.block_bytes += in->file_bytes;
		s->stats.block_rows += in->rows;
		s->stats.block_samples += in->samples;
	}
	buf_free(&path);
	free(superseded);
	free(blks);
	free(gens);
	if (s->nparts)
		xqsort(s->parts, s->nparts, sizeof(*s->parts), cmp_sref_gen);
	return 0;
}

/* Seals the head: it joins the parts, and a new empty head covering log
 * `wal` takes its place, starting with the old one's dictionaries while
 * they use at most head_dict_bytes: what the agents send next is mostly
 * what they sent, so it is found in the copies rather than added again,
 * and the sessions' maps to its ids stay valid (same dict_id). Nothing
 * may be writing the head. Takes list_mu. Returns the sealed part. */
static struct sref *swap_head(struct store *s, uint64_t wal)
{
	struct sref *old = s->head, *n = sref_new();
	part_init(&n->part, 1);
	if (part_dict_memory(&old->part) <= s->cfg.head_dict_bytes)
		part_copy_dictionaries(&n->part, &old->part);
	n->loaded = true;
	n->gen = s->next_gen++;
	n->wal_lo = n->wal_hi = wal;
	pthread_mutex_lock(&s->list_mu);
	old->min_ts = old->part.min_ts;
	old->max_ts = old->part.max_ts;
	xgrow((void **)&s->parts, &s->capparts, s->nparts + 1, sizeof(*s->parts));
	s->parts[s->nparts++] = old;
	s->head = n;
	s->stats.head_rows = 0;
	pthread_mutex_unlock(&s->list_mu);
	return old;
}

struct replay_ctx {
	struct store *s;
	struct part *head;
	struct session_replay *sessions;
	uint64_t rows, samples; /* replayed, whether still in the head or written */
	uint32_t head_no;       /* the head's number in this replay, from 1 */
};

static int flush_one(struct store *s, struct buf *err);

/* At a start, before any other thread runs: the replay head becomes a
 * sealed part and is written as blocks at once, and a new head (swap_head,
 * as at a seal) replays on, so a log of many heads is
 * replayed holding one head in memory. Called when the head reaches
 * head_max_rows and before a head with rows goes on to the next log, so
 * a part written here holds rows of one log: its blocks name that log as
 * their range and are not committed while it exists (open_blocks: a
 * crash before it goes drops them and replays the log again). A write
 * that fails leaves the part in memory for the maintenance thread. */
static void replay_seal(struct replay_ctx *rc)
{
	struct store *s = rc->s;
	struct sref *old = swap_head(s, s->head->wal_hi);
	s->stats.unflushed_rows += old->part.rows;
	rc->head = &s->head->part;
	rc->head_no++; /* the sessions' series ids were the old head's */
	struct buf err = { 0 };
	if (flush_one(s, &err) < 0)
		log_error("store: writing replayed rows as a block failed (%s); they stay in memory "
			  "and are written later", err.data);
	buf_free(&err);
}

/* A log record (store.h: the record payloads). */
static int replay_record(void *ctx, const uint8_t *p, size_t len)
{
	struct replay_ctx *rc = ctx;
	uint8_t type = 0;
	if (len >= 2 && p[0] == 0) {
		type = p[1];
		p += 2;
		len -= 2;
	}
	if (len < 1 || p[0] == 0 || (size_t)p[0] + 1 > len)
		return -1;
	char project[256];
	memcpy(project, p + 1, p[0]);
	project[p[0]] = '\0';
	const uint8_t *body = p + 1 + p[0];
	size_t blen = len - 1 - p[0];
	if (type == STORE_RECORD_SESSION) {
		char agent[65];
		uint64_t seq;
		uint64_t rows = rc->head->rows, samples = rc->head->samples;
		if (session_replay_record(rc->sessions, project, body, blen, rc->head, rc->head_no, agent,
					  &seq) < 0)
			return -1;
		if (agent[0])
			note_agent(rc->s, agent, seq);
		rc->s->stats.batches++;
		rc->rows += rc->head->rows - rows;
		rc->samples += rc->head->samples - samples;
		if (rc->head->rows >= rc->s->cfg.head_max_rows)
			replay_seal(rc);
		return 0;
	}
	if (type != 0)
		return -1;
	struct buf err = { 0 };
	Ember__Ingest__V1__Batch *b = batch_decode(body, blen, &err);
	buf_free(&err);
	if (!b)
		return -1;
	uint64_t rows = rc->head->rows, samples = rc->head->samples;
	part_add_batch(rc->head, project, b);
	if (b->agent_instance[0])
		note_agent(rc->s, b->agent_instance, b->sequence);
	rc->s->stats.batches++;
	batch_decode_free(b);
	rc->rows += rc->head->rows - rows;
	rc->samples += rc->head->samples - samples;
	if (rc->head->rows >= rc->s->cfg.head_max_rows)
		replay_seal(rc);
	return 0;
}

static int noop_record(void *ctx, const uint8_t *p, size_t len)
{
	(void)ctx;
	(void)p;
	(void)len;
	return 0;
}

static void *maintenance(void *arg);

static int make_dir(const char *path, struct buf *err)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int store_open(const char *dir, const struct store_config *cfg, struct store **out,
	       struct buf *err)
{
	struct store *s = xcalloc(1, sizeof(*s));
	if (cfg)
		s->cfg = *cfg;
	else
		store_config_default(&s->cfg);
	if (!s->cfg.block_granularity_ms)
		s->cfg.block_granularity_ms = 1;
	s->dir = xstrdup(dir);
	struct buf p = { 0 };
	buf_printf(&p, "%s/blocks", dir);
	s->blocks_dir = buf_steal(&p, NULL);
	buf_printf(&p, "%s/wal", dir);
	s->wal_dir = buf_steal(&p, NULL);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_mutex_init(&s->list_mu, NULL);
	pthread_mutex_init(&s->maint_mu, NULL);
	pthread_mutex_init(&s->stop_mu, NULL);
	pthread_cond_init(&s->stop_cv, NULL);
	strtab_init(&s->agent_names);
	s->queue_tail = &s->queue;
	s->wal.fd = -1;
	s->next_gen = 1;
	if (make_dir(dir, err) < 0 || make_dir(s->blocks_dir, err) < 0 ||
	    make_dir(s->wal_dir, err) < 0) {
		store_close(s);
		return -1;
	}
	uint64_t t0 = now_mono_ns();
	/* The log of the first storage engine, replayed once as generation 1. */
	buf_printf(&p, "%s/samples.wal", dir);
	struct stat st;
	uint64_t *wals = NULL;
	size_t nwals = 0;
	if (stat(p.data, &st) == 0) {
		struct buf to = { 0 };
		if (list_gens(s->wal_dir, ".log", &wals, &nwals, err) < 0) {
			buf_free(&p);
			store_close(s);
			return -1;
		}
		wal_path(s->wal_dir, nwals ? wals[0] - 1 : 1, &to);
		if (!nwals || wals[0] > 1) {
			if (rename(p.data, to.data) < 0)
				log_error("cannot move %s to %s: %s", p.data, to.data, strerror(errno));
			else
				log_info("store: the old log %s is replayed as %s", p.data, to.data);
		}
		buf_free(&to);
		free(wals);
	}
	buf_free(&p);
	if (list_gens(s->wal_dir, ".log", &wals, &nwals, err) < 0 ||
	    open_blocks(s, wals, &nwals, err) < 0) {
		free(wals);
		store_close(s);
		return -1;
	}
	for (size_t i = 0; i < nwals; i++)
		s->next_gen = MAX(s->next_gen, wals[i] + 1);

	/* Every log left is replayed into the head, which then covers them. */
	s->head = sref_new();
	part_init(&s->head->part, 1);
	s->head->loaded = true;
	s->head->gen = s->next_gen++;
	struct replay_ctx rc = { s, &s->head->part, session_replay_new(), 0, 0, 1 };
	for (size_t i = 0; i < nwals; i++) {
		struct wal_file w;
		/* Rows of one log per written part (replay_seal); the head,
		 * empty here, covers this log. */
		if (s->head->part.rows)
			replay_seal(&rc);
		s->head->wal_lo = s->head->wal_hi = wals[i];
		if (wal_open(s->wal_dir, wals[i], replay_record, &rc, &w,
			     &s->stats.wal_skipped_records, err) < 0) {
			free(wals);
			session_replay_free(rc.sessions);
			store_close(s);
			return -1;
		}
		wal_close(&w);
	}
	s->logs = wals;
	s->nlogs = s->caplogs = nwals;
	s->rotate_next = nwals > 0;
	session_replay_free(rc.sessions);
	uint64_t gen = s->next_gen++;
	if (wal_open(s->wal_dir, gen, noop_record, NULL, &s->wal, &s->stats.wal_skipped_records,
		     err) < 0) {
		store_close(s);
		return -1;
	}
	xgrow((void **)&s->logs, &s->caplogs, s->nlogs + 1, sizeof(uint64_t));
	s->logs[s->nlogs++] = gen;
	s->log_heads = 1;
	s->wal_synced = s->wal.size;
	if (!s->head->wal_lo)
		s->head->wal_lo = gen;
	s->head->wal_hi = gen;
	s->head->min_ts = s->head->part.min_ts;
	s->head->max_ts = s->head->part.max_ts;
	if (s->head->part.rows)
		s->head->first_row_mono_ms = mono_ms();
	s->stats.rows = rc.rows;
	s->stats.samples = rc.samples;
	s->stats.head_rows = s->head->part.rows;
	s->stats.unflushed_rows += s->head->part.rows;
	log_info("store: %s opened in %.1f ms: %zu blocks (%llu rows), %llu rows replayed from logs "
		 "(%llu of them written as blocks while replaying)",
		 dir, (double)(now_mono_ns() - t0) / 1e6, s->nparts,
		 (unsigned long long)s->stats.block_rows, (unsigned long long)rc.rows,
		 (unsigned long long)(rc.rows - s->head->part.rows));
	if (s->cfg.background) {
		if (pthread_create(&s->thread, NULL, maintenance, s) != 0) {
			buf_puts(err, "cannot start the store's maintenance thread");
			store_close(s);
			return -1;
		}
		s->thread_started = true;
	}
	*out = s;
	return 0;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		pthread_mutex_lock(&s->stop_mu);
		s->stop = true;
		pthread_cond_signal(&s->stop_cv);
		pthread_mutex_unlock(&s->stop_mu);
		pthread_join(s->thread, NULL);
	}
	if (s->wal.path)
		wal_close(&s->wal);
	if (s->head)
		sref_put(s, s->head);
	for (size_t i = 0; i < s->nparts; i++)
		sref_put(s, s->parts[i]);
	free(s->parts);
	free(s->logs);
	strtab_free(&s->agent_names);
	free(s->agent_seq);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->list_mu);
	pthread_mutex_destroy(&s->maint_mu);
	pthread_mutex_destroy(&s->stop_mu);
	pthread_cond_destroy(&s->stop_cv);
	free(s->dir);
	free(s->blocks_dir);
	free(s->wal_dir);
	free(s);
}

/* --- appending: the log and group commit -------------------------------------------- */

static uint64_t unflushed_rows(struct store *s)
{
	pthread_mutex_lock(&s->list_mu);
	uint64_t n = s->stats.unflushed_rows;
	pthread_mutex_unlock(&s->list_mu);
	return n;
}

/* A version 1 batch: the record is the batch as received. */
struct v1_entry {
	const Ember__Ingest__V1__Batch *b;
	const char *project;
	const void *zbody;
	size_t zlen;
};

static int v1_record(void *ctx, uint64_t gen, struct buf *head, const void **body, size_t *blen,
		     struct buf *err)
{
	(void)gen;
	(void)head;
	(void)err;
	const struct v1_entry *v = ctx;
	*body = v->zbody;
	*blen = v->zlen;
	return 0;
}

static int v1_index(void *ctx, struct part *head, uint64_t gen)
{
	(void)gen;
	const struct v1_entry *v = ctx;
	part_add_batch(head, v->project, v->b);
	return 0;
}

int store_append(struct store *s, const char *project_id, const Ember__Ingest__V1__Batch *b,
		 const void *zbody, size_t zlen, struct buf *err)
{
	if (zlen > BATCH_MAX_COMPRESSED) {
		buf_puts(err, "invalid batch size");
		return -1;
	}
	struct v1_entry v = { b, project_id, zbody, zlen };
	struct store_entry e = {
		.project = project_id, .agent_instance = b->agent_instance, .sequence = b->sequence,
		.start_unix_ms = b->start_unix_ms, .record = v1_record, .index = v1_index, .ctx = &v,
	};
	return store_append_entry(s, &e, err);
}

/* Fails one append that will not be acknowledged (under s->mu): its agent
 * sequence is given back, and its entry is told when its record was made
 * (the record is not in the log, or is cut off it). */
static void fail_commit(struct store *s, struct commit *q)
{
	q->rc = -1;
	if (q->agent != UINT32_MAX && s->agent_seq[q->agent] == q->e->sequence)
		s->agent_seq[q->agent] = q->prev_seq;
	if (q->recorded && q->e->failed)
		q->e->failed(q->e->ctx);
}

int store_append_entry(struct store *s, const struct store_entry *e, struct buf *err)
{
	size_t plen = strlen(e->project);
	if (plen == 0 || plen > 255) {
		buf_puts(err, "invalid project id");
		return -1;
	}
	if (s->cfg.time_window) {
		int64_t now = now_unix_ms();
		if (e->start_unix_ms < now - s->cfg.retention_ms ||
		    e->start_unix_ms > now + 86400000) {
			buf_printf(err, "the batch's time (%lld ms) lies outside what this server keeps "
				   "(the last %lld days, up to a day ahead): check the agent's clock",
				   (long long)e->start_unix_ms, (long long)(s->cfg.retention_ms / 86400000));
			return -3;
		}
	}
	pthread_mutex_lock(&s->mu);
	while (s->sealing)
		pthread_cond_wait(&s->cv, &s->mu);
	if (unflushed_rows(s) > s->cfg.max_unflushed_rows) {
		pthread_mutex_unlock(&s->mu);
		pthread_mutex_lock(&s->list_mu);
		s->stats.refused_busy++;
		pthread_mutex_unlock(&s->list_mu);
		buf_puts(err, "the store is behind writing blocks (disk full or slow?): retry later");
		return -2;
	}
	struct commit c = { .e = e, .agent = UINT32_MAX };
	if (e->agent_instance && e->agent_instance[0]) {
		uint32_t a = agent_index(s, e->agent_instance, true);
		if (e->sequence <= s->agent_seq[a]) {
			pthread_mutex_unlock(&s->mu);
			return 1;
		}
		c.agent = a;
		c.prev_seq = s->agent_seq[a];
		s->agent_seq[a] = e->sequence;
	}
	/* The record's head: the project prefix, then what record() adds. */
	struct buf head = { 0 };
	const void *body = NULL;
	size_t blen = 0;
	if (e->record_type) {
		buf_putc(&head, 0);
		buf_putc(&head, (char)e->record_type);
	}
	buf_putc(&head, (char)plen);
	buf_append(&head, e->project, plen);
	c.recorded = true;
	if (e->record(e->ctx, s->wal.gen, &head, &body, &blen, err) < 0) {
		fail_commit(s, &c);
		pthread_mutex_unlock(&s->mu);
		buf_free(&head);
		return -1;
	}
	if (wal_append(&s->wal, head.data, head.len, body, blen) < 0) {
		buf_printf(err, "writing the log failed: %s", strerror(errno));
		fail_commit(s, &c);
		pthread_mutex_unlock(&s->mu);
		buf_free(&head);
		return -1;
	}
	buf_free(&head);
	*s->queue_tail = &c;
	s->queue_tail = &c.next;
	while (!c.done) {
		if (s->syncing) {
			pthread_cond_wait(&s->cv, &s->mu);
			continue;
		}
		/* Lead: sync everything written so far, then index it. */
		s->syncing = true;
		struct commit *batch = s->queue;
		s->queue = NULL;
		s->queue_tail = &s->queue;
		uint64_t target = s->wal.size;
		int fd = s->wal.fd;
		struct sref *hd = s->head;
		pthread_mutex_unlock(&s->mu);
		int rc = fdatasync(fd);
		int serr = errno;
		uint64_t rows = 0, samples = 0, n = 0;
		if (rc == 0) {
			pthread_rwlock_wrlock(&hd->rw);
			uint64_t r0 = hd->part.rows, s0 = hd->part.samples;
			for (struct commit *q = batch; q; q = q->next, n++)
				if (q->e->index(q->e->ctx, &hd->part, hd->gen) < 0)
					log_error("store: a batch of project %s could not be indexed",
						  q->e->project);
			rows = hd->part.rows - r0;
			samples = hd->part.samples - s0;
			pthread_rwlock_unlock(&hd->rw);
		}
		pthread_mutex_lock(&s->mu);
		if (rc == 0) {
			s->wal_synced = target;
			s->log_rows += rows;
		} else {
			/* Nothing after the last good sync is acknowledged: cut it
			 * off and fail every append written since, queued or not. */
			log_error("store: syncing the log failed: %s", strerror(serr));
			if (wal_truncate(&s->wal, s->wal_synced) < 0)
				log_error("cannot roll back the log: %s", strerror(errno));
			for (struct commit *q = s->queue; q; q = q->next) {
				fail_commit(s, q);
				q->done = true;
			}
			s->queue = NULL;
			s->queue_tail = &s->queue;
		}
		for (struct commit *q = batch; q; q = q->next) {
			if (rc == 0)
				q->rc = 0;
			else
				fail_commit(s, q);
		}
		/* Mark done last: a follower may return (and free its commit)
		 * as soon as it sees done. */
		for (struct commit *q = batch, *next; q; q = next) {
			next = q->next;
			q->done = true;
		}
		s->syncing = false;
		if (rc == 0) {
			pthread_mutex_lock(&s->list_mu);
			s->stats.batches += n;
			s->stats.rows += rows;
			s->stats.samples += samples;
			s->stats.head_rows += rows;
			s->stats.unflushed_rows += rows;
			if (!hd->first_row_mono_ms && rows)
				hd->first_row_mono_ms = mono_ms();
			pthread_mutex_unlock(&s->list_mu);
		}
		pthread_cond_broadcast(&s->cv);
	}
	int rc = c.rc;
	pthread_mutex_unlock(&s->mu);
	if (rc < 0)
		buf_puts(err, "syncing the log failed");
	return rc;
}

/* --- sealing, flushing, compaction, retention ------------------------------------------ */

/* Opens the next log as the current one (under mu, not sealing). */
static int rotate_log(struct store *s, struct buf *err)
{
	uint64_t gen = s->next_gen++;
	struct wal_file w;
	uint64_t skipped = 0;
	if (wal_open(s->wal_dir, gen, noop_record, NULL, &w, &skipped, err) < 0)
		return -1;
	wal_close(&s->wal);
	s->wal = w;
	s->wal_synced = 0;
	xgrow((void **)&s->logs, &s->caplogs, s->nlogs + 1, sizeof(uint64_t));
	s->logs[s->nlogs++] = gen;
	s->log_rows = s->log_heads = 0;
	s->rotate_next = false;
	return 0;
}

/* Makes the head a sealed part and starts a new head: in a new log when
 * rotate is set, the current one holds LOG_MAX_UNFLUSHED times
 * max_unflushed_rows rows or LOG_MAX_HEADS heads, or the head covers
 * several logs; else in the same log. With rotate and an
 * empty head, only the log is new, so every log before it can go once
 * what it holds is in blocks. */
static int seal(struct store *s, bool rotate, struct buf *err)
{
	pthread_mutex_lock(&s->mu);
	s->sealing = true;
	while (s->syncing || s->queue)
		pthread_cond_wait(&s->cv, &s->mu);
	rotate |= s->rotate_next || s->log_rows >= LOG_MAX_UNFLUSHED * s->cfg.max_unflushed_rows ||
		  s->log_heads >= LOG_MAX_HEADS;
	int rc = 0;
	if (s->head->part.rows) {
		if (!rotate || (rc = rotate_log(s, err)) == 0) {
			swap_head(s, s->wal.gen);
			s->log_heads++;
		}
	} else if (rotate && (s->log_rows || s->head->wal_lo != s->wal.gen) &&
		   (rc = rotate_log(s, err)) == 0) {
		pthread_mutex_lock(&s->list_mu);
		s->head->wal_lo = s->head->wal_hi = s->wal.gen;
		pthread_mutex_unlock(&s->list_mu);
		s->log_heads = 1;
	}
	s->sealed_mono_ms = mono_ms();
	s->sealing = false;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* Deletes the logs no in-memory part needs any more: those below the
 * current one and below every unflushed part's range, lowest first. The
 * first deletion of a log commits the blocks that name it as their
 * lowest (open_blocks) and is made durable before the next; one that
 * fails stops the rest (tried again after the next flush). Under
 * maint_mu. */
static void release_logs(struct store *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t needed = s->wal.gen;
	pthread_mutex_lock(&s->list_mu);
	if (s->head->wal_lo)
		needed = MIN(needed, s->head->wal_lo);
	for (size_t i = 0; i < s->nparts; i++)
		if (!s->parts[i]->blk && s->parts[i]->wal_lo)
			needed = MIN(needed, s->parts[i]->wal_lo);
	pthread_mutex_unlock(&s->list_mu);
	size_t n = 0;
	while (n < s->nlogs && s->logs[n] < needed)
		n++;
	uint64_t *dead = xmalloc((n + 1) * sizeof(uint64_t));
	memcpy(dead, s->logs, n * sizeof(uint64_t));
	pthread_mutex_unlock(&s->mu);
	struct buf path = { 0 };
	size_t done = 0;
	for (; done < n; done++) {
		wal_path(s->wal_dir, dead[done], &path);
		if (unlink(path.data) < 0 && errno != ENOENT) {
			log_error("cannot delete %s: %s", path.data, strerror(errno));
			break;
		}
		if (done == 0 || done + 1 == n)
			sync_dir(s->wal_dir);
	}
	buf_free(&path);
	free(dead);
	pthread_mutex_lock(&s->mu);
	memmove(s->logs, s->logs + done, (s->nlogs - done) * sizeof(uint64_t));
	s->nlogs -= done;
	pthread_mutex_unlock(&s->mu);
}

/* The lowest log that exists (UINT64_MAX: none). A block whose lowest log
 * is this or later is not committed yet (its log may be replayed): it is
 * kept out of compaction and retention. Under maint_mu, so no log goes
 * meanwhile. */
static uint64_t lowest_log(struct store *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t g = s->nlogs ? s->logs[0] : UINT64_MAX;
	pthread_mutex_unlock(&s->mu);
	return g;
}

static bool committed(const struct sref *r, uint64_t lowest)
{
	const struct block_info *in = block_info(r->blk);
	return !in->wal_lo || in->wal_lo < lowest;
}

/* Replaces the parts olds[0..nold) in the list by news[0..nnew). */
static void replace_parts(struct store *s, struct sref **olds, size_t nold, struct sref **news,
			  size_t nnew)
{
	pthread_mutex_lock(&s->list_mu);
	size_t j = 0;
	for (size_t i = 0; i < s->nparts; i++) {
		bool gone = false;
		for (size_t k = 0; k < nold && !gone; k++)
			gone = s->parts[i] == olds[k];
		if (!gone)
			s->parts[j++] = s->parts[i];
	}
	s->nparts = j;
	for (size_t k = 0; k < nnew; k++) {
		xgrow((void **)&s->parts, &s->capparts, s->nparts + 1, sizeof(*s->parts));
		s->parts[s->nparts++] = news[k];
		const struct block_info *in = block_info(news[k]->blk);
		s->stats.blocks++;
		s->stats.block_bytes += in->file_bytes;
		s->stats.block_rows += in->rows;
		s->stats.block_samples += in->samples;
		s->cache_used += news[k]->mem;
	}
	for (size_t k = 0; k < nold; k++) {
		struct sref *r = olds[k];
		r->retired = true;
		if (r->blk) {
			const struct block_info *in = block_info(r->blk);
			s->stats.blocks--;
			s->stats.block_bytes -= in->file_bytes;
			s->stats.block_rows -= in->rows;
			s->stats.block_samples -= in->samples;
		}
		sref_put_locked(s, r);
	}
	xqsort(s->parts, s->nparts, sizeof(*s->parts), cmp_sref_gen);
	pthread_mutex_unlock(&s->list_mu);
}

/* The dictionaries the nodes of every one of refs are named in as well
 * (sref.lineage), with each one's ids there: 0 when they differ or one has
 * none. */
static uint64_t common_lineage(struct sref *const *refs, size_t n, const uint32_t **ids,
			       size_t *nids, size_t *nnodes)
{
	uint64_t lineage = 0;
	*nnodes = 0;
	for (size_t i = 0; i < n; i++) {
		const struct sref *r = refs[i];
		uint64_t l = r->blk ? (r->lineage_ids ? r->lineage : 0) : r->part.dict_id;
		if (!l || (i && l != lineage))
			return 0;
		lineage = l;
		ids[i] = r->blk ? r->lineage_ids : NULL;
		nids[i] = r->blk ? r->nlineage_ids : r->part.nnodes;
		*nnodes = MAX(*nnodes, r->blk ? r->lineage_nnodes : r->part.nnodes);
	}
	return lineage;
}

/* Writes sources (all loaded and pinned; refs[i] holds src[i]) rows in
 * [from, to) as one block. With keep_ids, when the sources' nodes are all
 * named in one in-memory part's dictionaries (a sealed head, or blocks
 * written from its lineage), the block keeps its nodes' ids there, so that
 * queries can fold it together with the heads (scan_carry_blocks).
 * Returns the new part's reference, or NULL. */
static struct sref *write_block(struct store *s, struct merge_source *src,
				struct sref *const *refs, size_t nsrc, bool keep_ids, int64_t from,
				int64_t to, uint32_t granularity, const struct block_meta *meta,
				bool *damaged, struct buf *err)
{
	struct buf tmp = { 0 }, fin = { 0 };
	block_file(s, meta->gen, ".tmp", &tmp);
	block_file(s, meta->gen, ".blk", &fin);
	struct merge_target t = { from, to, granularity, *meta, tmp.data, fin.data, NULL, NULL, NULL };
	struct sref *r = sref_new();
	struct sref *out = NULL;
	const uint32_t **ids = xcalloc(nsrc ? nsrc : 1, sizeof(*ids));
	size_t *nids = xcalloc(nsrc ? nsrc : 1, sizeof(size_t)), lineage_nnodes = 0;
	uint64_t lineage = keep_ids ? common_lineage(refs, nsrc, ids, nids, &lineage_nnodes) : 0;
	if (lineage) {
		t.out_ids = &r->lineage_ids;
		t.src_ids = ids;
		t.nsrc_ids = nids;
	}
	if (merge_write(src, nsrc, &t, &r->part, damaged, err) == 0) {
		if (lineage) {
			r->lineage = lineage;
			r->nlineage_ids = r->part.nnodes;
			r->lineage_nnodes = lineage_nnodes;
		}
		r->loaded = true;
		r->mem = part_memory(&r->part);
		if (block_open(fin.data, &r->blk, err) == 0) {
			r->gen = meta->gen;
			r->written_mono_ms = mono_ms();
			r->partition_ms = meta->partition_ms;
			r->min_ts = block_info(r->blk)->min_ts;
			r->max_ts = block_info(r->blk)->max_ts;
			out = r;
		}
	}
	if (!out) {
		unlink(tmp.data);
		sref_free(r);
	}
	buf_free(&tmp);
	buf_free(&fin);
	free(ids);
	free(nids);
	return out;
}

/* Writes the oldest sealed in-memory part as blocks, one per partition,
 * then deletes its logs. Returns 1 done, 0 nothing to do, -1 failure (the
 * part stays in memory and in its logs). */
static int flush_one(struct store *s, struct buf *err)
{
	struct sref *r = NULL;
	pthread_mutex_lock(&s->list_mu);
	for (size_t i = 0; i < s->nparts && !r; i++)
		if (!s->parts[i]->blk)
			r = s->parts[i];
	if (r)
		r->refs++;
	pthread_mutex_unlock(&s->list_mu);
	if (!r)
		return 0;
	struct sref **news = NULL;
	size_t nnew = 0, cap = 0;
	int rc = 0;
	/* The partitions its rows fall in (not every hour between the first
	 * and the last: a part may hold rows years apart). */
	int64_t *parts = NULL;
	size_t np = 0, capp = 0;
	for (size_t i = 0; i < r->part.nseries; i++) {
		const struct part_series *ps = &r->part.series[i];
		for (size_t j = 0; j < ps->nrows; j++) {
			int64_t p = floor_to(ps->rows[j].ts_ms, STORE_PARTITION_MS);
			if (np && parts[np - 1] == p)
				continue;
			xgrow((void **)&parts, &capp, np + 1, sizeof(int64_t));
			parts[np++] = p;
		}
	}
	xqsort(parts, np, sizeof(int64_t), cmp_i64);
	size_t nd = 0;
	for (size_t i = 0; i < np; i++)
		if (!nd || parts[nd - 1] != parts[i])
			parts[nd++] = parts[i];
	for (size_t k = 0; k < nd && rc == 0; k++) {
		int64_t p = parts[k];
		pthread_mutex_lock(&s->mu);
		uint64_t gen = s->next_gen++;
		pthread_mutex_unlock(&s->mu);
		struct block_meta meta = { .gen = gen, .partition_ms = p, .level = 0,
					   .wal_lo = r->wal_lo, .wal_hi = r->wal_hi };
		struct merge_source src = { &r->part, NULL };
		struct sref *n = write_block(s, &src, &r, 1, true, p, p + STORE_PARTITION_MS, 1, &meta,
					     NULL, err);
		if (!n) {
			rc = -1;
			break;
		}
		xgrow((void **)&news, &cap, nnew + 1, sizeof(*news));
		news[nnew++] = n;
	}
	free(parts);
	if (rc < 0) {
		/* Blocks already written name these logs: they would be deleted
		 * at a restart; delete them now and try the whole part again. */
		struct buf path = { 0 };
		for (size_t i = 0; i < nnew; i++) {
			block_file(s, news[i]->gen, ".blk", &path);
			unlink(path.data);
			sref_free(news[i]);
		}
		buf_free(&path);
		free(news);
		sref_put(s, r);
		return -1;
	}
	replace_parts(s, &r, 1, news, nnew);
	pthread_mutex_lock(&s->list_mu);
	s->stats.unflushed_rows -= r->part.rows;
	pthread_mutex_unlock(&s->list_mu);
	/* Its logs go once no other part needs them (release_logs, called
	 * after each flush): their deletion is the commit. */
	pthread_mutex_lock(&s->list_mu);
	s->stats.flushes++;
	pthread_mutex_unlock(&s->list_mu);
	sref_put(s, r);
	free(news);
	return 1;
}

/* Seals the head and writes every sealed part as blocks, deleting the
 * logs that are then no longer needed after each. */
static int flush_all(struct store *s, bool rotate, struct buf *err)
{
	pthread_mutex_lock(&s->maint_mu);
	int rc = seal(s, rotate, err);
	while (rc == 0) {
		int f = flush_one(s, err);
		if (f <= 0) {
			rc = f;
			break;
		}
		release_logs(s);
	}
	if (rc == 0)
		release_logs(s);
	pthread_mutex_unlock(&s->maint_mu);
	return rc;
}

int store_flush(struct store *s, struct buf *err)
{
	return flush_all(s, true, err);
}

int store_seal(struct store *s, bool rotate, struct buf *err)
{
	pthread_mutex_lock(&s->maint_mu);
	int rc = seal(s, rotate, err);
	pthread_mutex_unlock(&s->maint_mu);
	return rc;
}

int store_write_sealed(struct store *s, struct buf *err)
{
	pthread_mutex_lock(&s->maint_mu);
	int rc = 0, f;
	while ((f = flush_one(s, err)) > 0)
		release_logs(s);
	if (f < 0)
		rc = -1;
	else
		release_logs(s);
	pthread_mutex_unlock(&s->maint_mu);
	return rc;
}

/* Pins and loads a block for a merge; false when it cannot be read. */
static bool pin_loaded(struct store *s, struct sref *r)
{
	pthread_mutex_lock(&r->mu);
	bool ok = sref_load_locked(s, r) == 0;
	if (ok)
		r->readers++;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static void unpin(struct sref *r)
{
	pthread_mutex_lock(&r->mu);
	r->readers--;
	pthread_mutex_unlock(&r->mu);
}

/* The log range of the uncommitted blocks a compaction merges (0, 0:
 * the committed blocks). */
struct log_range {
	uint64_t lo, hi;
};

/* Whether block r is one a compaction of range g takes. */
static bool in_group(const struct sref *r, uint64_t lowest, struct log_range g)
{
	if (!g.lo)
		return committed(r, lowest);
	const struct block_info *in = block_info(r->blk);
	return !committed(r, lowest) && in->wal_lo == g.lo && in->wal_hi == g.hi;
}

/* Merges blocks of one partition: the committed ones (g = {0, 0}), or the
 * uncommitted ones of log range g, which only their own kind joins: the
 * merged block names the same logs, so a crash before they go drops it
 * and replays them, as it would have dropped its sources, and once they
 * go it is committed as its sources would have been. Returns 1 merged, 0
 * nothing to do, -1 failure. */
static int compact_partition(struct store *s, int64_t partition, bool all, struct log_range g,
			     struct buf *err)
{
	int64_t now = now_unix_ms();
	bool closed = partition + STORE_PARTITION_MS + 10 * 60000 < now;
	struct sref **srcs = NULL;
	size_t n = 0, cap = 0;
	bool fresh = false;
	uint32_t level = 0;
	uint64_t lowest = lowest_log(s);
	pthread_mutex_lock(&s->list_mu);
	for (size_t i = 0; i < s->nparts; i++) {
		struct sref *r = s->parts[i];
		if (!r->blk || r->broken || r->partition_ms != partition || !in_group(r, lowest, g))
			continue;
		r->refs++;
		xgrow((void **)&srcs, &cap, n + 1, sizeof(*srcs));
		srcs[n++] = r;
		const struct block_info *in = block_info(r->blk);
		fresh |= in->granularity_ms != s->cfg.block_granularity_ms;
		level = MAX(level, in->level);
	}
	int64_t newest = 0;
	for (size_t i = 0; i < n; i++)
		newest = MAX(newest, srcs[i]->written_mono_ms);
	pthread_mutex_unlock(&s->list_mu);
	bool *damaged = NULL;
	/* Late data for a closed hour is gathered a few minutes before the
	 * hour's block is rewritten with it, not rewritten per flush. */
	bool settled = !newest || mono_ms() - newest >= s->cfg.late_data_wait_ms;
	bool want = n >= 2 && (all || (closed && settled) || n >= s->cfg.compact_after);
	want |= n >= 1 && fresh && (all || (closed && settled));
	if (g.lo) /* a log's one-minute blocks, merged while the log stays */
		want = n >= 2 && n >= s->cfg.compact_after;
	int rc = 0;
	if (!want)
		goto out;
	struct merge_source *ms = xcalloc(n, sizeof(*ms));
	uint64_t *gens = xcalloc(n, sizeof(uint64_t));
	size_t pinned = 0;
	for (; pinned < n; pinned++) {
		if (!pin_loaded(s, srcs[pinned]))
			break;
		ms[pinned] = (struct merge_source){ &srcs[pinned]->part, srcs[pinned]->blk };
		gens[pinned] = srcs[pinned]->gen;
	}
	if (pinned < n) {
		rc = -1; /* a damaged block: quarantined; the next round goes without it */
		buf_printf(err, "block %llu of partition %lld cannot be read",
			   (unsigned long long)srcs[pinned]->gen, (long long)partition);
	} else {
		pthread_mutex_lock(&s->mu);
		uint64_t gen = s->next_gen++;
		pthread_mutex_unlock(&s->mu);
		struct block_meta meta = { .gen = gen, .partition_ms = partition, .level = level + 1,
					   .wal_lo = g.lo, .wal_hi = g.hi, .sources = gens, .nsources = n };
		damaged = xcalloc(n, sizeof(bool));
		/* A closed hour's block keeps no ids in the heads' dictionaries:
		 * it stays for days, and so would they. */
		struct sref *out = write_block(s, ms, srcs, n, !closed, partition,
					       partition + STORE_PARTITION_MS,
					       s->cfg.block_granularity_ms, &meta, damaged, err);
		if (!out) {
			rc = -1;
		} else {
			replace_parts(s, srcs, n, &out, 1);
			/* The new block is in place and names its sources, so
			 * deleting them is safe whenever it happens; open views keep
			 * reading their open files. A source with a damaged chunk is
			 * kept aside instead, for inspection. */
			struct buf path = { 0 }, aside = { 0 };
			for (size_t i = 0; i < n; i++) {
				block_file(s, gens[i], ".blk", &path);
				if (damaged[i]) {
					buf_reset(&aside);
					buf_printf(&aside, "%s.corrupt", path.data);
					if (rename(path.data, aside.data) < 0)
						log_error("cannot move %s aside: %s", path.data, strerror(errno));
					pthread_mutex_lock(&s->list_mu);
					s->stats.corrupt_blocks++;
					pthread_mutex_unlock(&s->list_mu);
				} else if (unlink(path.data) < 0 && errno != ENOENT) {
					log_error("cannot delete %s: %s", path.data, strerror(errno));
				}
			}
			buf_free(&path);
			buf_free(&aside);
			pthread_mutex_lock(&s->list_mu);
			s->stats.compactions++;
			pthread_mutex_unlock(&s->list_mu);
			rc = 1;
		}
	}
	for (size_t i = 0; i < pinned; i++)
		unpin(srcs[i]);
	free(ms);
	free(gens);
	free(damaged);
out:
	for (size_t i = 0; i < n; i++)
		sref_put(s, srcs[i]);
	free(srcs);
	return rc;
}

/* The distinct log ranges of partition's uncommitted blocks, each once.
 * Under maint_mu. */
static struct log_range *uncommitted_ranges(struct store *s, int64_t partition, size_t *n)
{
	struct log_range *gs = NULL;
	size_t cap = 0;
	*n = 0;
	uint64_t lowest = lowest_log(s);
	pthread_mutex_lock(&s->list_mu);
	for (size_t i = 0; i < s->nparts; i++) {
		struct sref *r = s->parts[i];
		if (!r->blk || r->broken || r->partition_ms != partition || committed(r, lowest))
			continue;
		const struct block_info *in = block_info(r->blk);
		bool seen = false;
		for (size_t k = 0; k < *n && !seen; k++)
			seen = gs[k].lo == in->wal_lo && gs[k].hi == in->wal_hi;
		if (!seen) {
			xgrow((void **)&gs, &cap, *n + 1, sizeof(*gs));
			gs[(*n)++] = (struct log_range){ in->wal_lo, in->wal_hi };
		}
	}
	pthread_mutex_unlock(&s->list_mu);
	return gs;
}

static int64_t *partitions(struct store *s, size_t *n)
{
	int64_t *ps = NULL;
	size_t cap = 0;
	*n = 0;
	pthread_mutex_lock(&s->list_mu);
	for (size_t i = 0; i < s->nparts; i++) {
		if (!s->parts[i]->blk)
			continue;
		bool seen = false;
		for (size_t k = 0; k < *n && !seen; k++)
			seen = ps[k] == s->parts[i]->partition_ms;
		if (!seen) {
			xgrow((void **)&ps, &cap, *n + 1, sizeof(*ps));
			ps[(*n)++] = s->parts[i]->partition_ms;
		}
	}
	pthread_mutex_unlock(&s->list_mu);
	return ps;
}

int store_compact(struct store *s, bool all, struct buf *err)
{
	pthread_mutex_lock(&s->maint_mu);
	size_t n;
	int64_t *ps = partitions(s, &n);
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (compact_partition(s, ps[i], all, (struct log_range){ 0, 0 }, err) < 0)
			rc = -1;
		size_t ng;
		struct log_range *gs = uncommitted_ranges(s, ps[i], &ng);
		for (size_t k = 0; k < ng; k++)
			if (compact_partition(s, ps[i], all, gs[k], err) < 0)
				rc = -1;
		free(gs);
	}
	free(ps);
	pthread_mutex_unlock(&s->maint_mu);
	return rc;
}

int store_retention(struct store *s, int64_t now_ms, struct buf *err)
{
	(void)err;
	pthread_mutex_lock(&s->maint_mu);
	int64_t cutoff = now_ms - s->cfg.retention_ms;
	struct sref **old = NULL;
	size_t n = 0, cap = 0;
	uint64_t lowest = lowest_log(s);
	pthread_mutex_lock(&s->list_mu);
	for (size_t i = 0; i < s->nparts; i++) {
		struct sref *r = s->parts[i];
		if (r->blk && r->partition_ms + STORE_PARTITION_MS <= cutoff && committed(r, lowest)) {
			r->refs++;
			xgrow((void **)&old, &cap, n + 1, sizeof(*old));
			old[n++] = r;
		}
	}
	pthread_mutex_unlock(&s->list_mu);
	struct buf path = { 0 };
	for (size_t i = 0; i < n; i++) {
		block_file(s, old[i]->gen, ".blk", &path);
		remove_file(path.data, "older than the retention");
	}
	buf_free(&path);
	if (n) {
		replace_parts(s, old, n, NULL, 0);
		pthread_mutex_lock(&s->list_mu);
		s->stats.retention_deleted += n;
		for (size_t i = 0; i < n; i++)
			sref_put_locked(s, old[i]);
		pthread_mutex_unlock(&s->list_mu);
	}
	free(old);
	pthread_mutex_unlock(&s->maint_mu);
	return 0;
}

static bool head_due(struct store *s)
{
	pthread_mutex_lock(&s->list_mu);
	const struct sref *h = s->head;
	bool due = s->stats.head_rows >= s->cfg.head_max_rows ||
		   (h->first_row_mono_ms && mono_ms() - h->first_row_mono_ms >= s->cfg.head_max_age_ms) ||
		   s->stats.unflushed_rows > s->stats.head_rows; /* a sealed part is waiting */
	pthread_mutex_unlock(&s->list_mu);
	return due;
}

/* Whether the current log holds only flushed heads' rows and nothing
 * came for a head's age since: then it is closed, so that its blocks
 * are committed (and compacted) although no new head fills. */
static bool log_idle(struct store *s)
{
	pthread_mutex_lock(&s->mu);
	bool idle = s->log_rows && !s->syncing && !s->queue &&
		    mono_ms() - s->sealed_mono_ms >= s->cfg.head_max_age_ms;
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->list_mu);
	idle = idle && !s->stats.unflushed_rows;
	pthread_mutex_unlock(&s->list_mu);
	return idle;
}

/* Whether store_close() asked the maintenance thread to stop. */
static bool stopping(struct store *s)
{
	pthread_mutex_lock(&s->stop_mu);
	bool stop = s->stop;
	pthread_mutex_unlock(&s->stop_mu);
	return stop;
}

/* Reads the dictionaries of the newest blocks into the cache, up to half
 * of it, so the first queries after a start do not wait for them. Stops
 * early when the store is closing. */
static void warm_cache(struct store *s)
{
	for (;;) {
		struct sref *r = NULL;
		pthread_mutex_lock(&s->list_mu);
		bool room = s->cache_used < s->cfg.cache_bytes / 2;
		for (size_t i = s->nparts; room && i-- > 0 && !r;)
			if (s->parts[i]->blk && !s->parts[i]->broken &&
			    !s->parts[i]->warmed)
				r = s->parts[i];
		if (r) {
			r->refs++;
			r->warmed = true;
		}
		pthread_mutex_unlock(&s->list_mu);
		if (!r)
			return;
		if (pin_loaded(s, r))
			unpin(r);
		sref_put(s, r);
		if (stopping(s))
			return;
	}
}

/* Blocks of the live hour read from their files at a start know nothing
 * of the head's dictionaries, so a query folds each alone (a stack tree
 * of millions of nodes each): the live hour cost what its parts cost.
 * Each such block is adopted instead: its stack tree interned into the
 * head's dictionaries (what the agents send next is mostly in it
 * anyway), its nodes' ids there kept beside it as a flush keeps them
 * (sref.lineage_ids), so queries fold it with the heads once
 * (scan_carry_blocks). "The last hour" lies in the newest partition and
 * the one before it: their blocks are adopted; older hours' stay as they
 * are (each compacted into one). Returns how many blocks were adopted. */
size_t store_adopt_live_blocks(struct store *s)
{
	size_t adopted = 0;
	pthread_mutex_lock(&s->maint_mu);
	pthread_mutex_lock(&s->list_mu);
	int64_t live = INT64_MIN;
	for (size_t i = 0; i < s->nparts; i++)
		if (s->parts[i]->blk && !s->parts[i]->broken)
			live = MAX(live, s->parts[i]->partition_ms);
	pthread_mutex_unlock(&s->list_mu);
	for (;;) {
		struct sref *r = NULL;
		pthread_mutex_lock(&s->list_mu);
		for (size_t i = 0; i < s->nparts && !r; i++) {
			struct sref *b = s->parts[i];
			if (b->blk && !b->broken && !b->lineage_ids && !b->adopt_tried &&
			    b->partition_ms >= live - STORE_PARTITION_MS)
				r = b;
		}
		if (r) {
			r->refs++;
			r->adopt_tried = true;
		}
		pthread_mutex_unlock(&s->list_mu);
		if (!r)
			break;
		if (pin_loaded(s, r)) {
			/* The head does not change under maint_mu (seals take it);
			 * its writer lock keeps appends and readers out. */
			struct sref *h = s->head;
			size_t nids = r->part.nnodes;
			pthread_rwlock_wrlock(&h->rw);
			uint32_t *ids = merge_map_nodes(&h->part, &r->part);
			size_t hn = h->part.nnodes;
			uint64_t d = h->part.dict_id;
			pthread_rwlock_unlock(&h->rw);
			unpin(r);
			pthread_mutex_lock(&s->list_mu);
			r->lineage = d;
			r->lineage_ids = ids;
			r->nlineage_ids = nids;
			r->lineage_nnodes = hn;
			pthread_mutex_unlock(&s->list_mu);
			adopted++;
		}
		sref_put(s, r);
		if (stopping(s))
			break;
	}
	pthread_mutex_unlock(&s->maint_mu);
	return adopted;
}

static void *maintenance(void *arg)
{
	struct store *s = arg;
	int64_t last_retention = 0;
	warm_cache(s);
	store_adopt_live_blocks(s);
	for (;;) {
		pthread_mutex_lock(&s->stop_mu);
		if (!s->stop) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&s->stop_cv, &s->stop_mu, &ts);
		}
		bool stop = s->stop;
		pthread_mutex_unlock(&s->stop_mu);
		if (stop)
			break;
		struct buf err = { 0 };
		bool due = head_due(s);
		if (due || log_idle(s)) {
			if (flush_all(s, !due, &err) < 0)
				log_error("store: writing a block failed: %s (the data stays in the log; retrying)",
					  err.data);
			buf_reset(&err);
		}
		if (store_compact(s, false, &err) < 0)
			log_error("store: compaction failed: %s", err.data);
		buf_reset(&err);
		int64_t now = mono_ms();
		if (now - last_retention >= 60000) {
			store_retention(s, now_unix_ms(), &err);
			last_retention = now;
		}
		evict(s);
		buf_free(&err);
	}
	return NULL;
}

void store_get_stats(struct store *s, struct store_stats *out)
{
	pthread_mutex_lock(&s->list_mu);
	*out = s->stats;
	out->cache_bytes = s->cache_used;
	out->memory_bytes = s->cache_used;
	for (size_t i = 0; i < s->nparts; i++) {
		if (!s->parts[i]->blk) /* sealed: no longer written */
			out->memory_bytes += part_memory(&s->parts[i]->part);
		out->memory_bytes += s->parts[i]->nlineage_ids * sizeof(uint32_t);
	}
	pthread_mutex_unlock(&s->list_mu);
	/* Memory of the in-memory parts, measured under their own locks. */
	pthread_mutex_lock(&s->list_mu);
	struct sref *head = s->head;
	head->refs++;
	pthread_mutex_unlock(&s->list_mu);
	pthread_rwlock_rdlock(&head->rw);
	out->memory_bytes += part_memory(&head->part);
	pthread_rwlock_unlock(&head->rw);
	sref_put(s, head);
	pthread_mutex_lock(&s->mu);
	out->wal_bytes = s->wal.size;
	pthread_mutex_unlock(&s->mu);
}

/* --- views ---------------------------------------------------------------------------- */

/* A part's lineage as the view found it (a block may be adopted later). */
struct lineage_snap {
	uint64_t lineage;
	const uint32_t *ids;
	size_t nids, nnodes;
};

struct store_view {
	struct store *s;
	struct sref **parts;
	struct lineage_snap *lin;
	size_t n;
	struct buf scratch, acc;
	struct store_view_stats stats;
};

struct store_view *store_view_open(struct store *s, int64_t from_ms, int64_t to_ms)
{
	struct store_view *v = xcalloc(1, sizeof(*v));
	v->s = s;
	pthread_mutex_lock(&s->list_mu);
	v->parts = xcalloc(s->nparts + 1, sizeof(*v->parts));
	v->lin = xcalloc(s->nparts + 1, sizeof(*v->lin));
	for (size_t i = 0; i <= s->nparts; i++) {
		struct sref *r = i < s->nparts ? s->parts[i] : s->head;
		/* In-memory parts grow: their range is checked per series. */
		if (r->blk && (r->max_ts < from_ms || r->min_ts >= to_ms))
			continue;
		if (r->broken)
			continue;
		r->refs++;
		if (r->blk && r->lineage_ids)
			v->lin[v->n] = (struct lineage_snap){ r->lineage, r->lineage_ids,
							      r->nlineage_ids, r->lineage_nnodes };
		v->parts[v->n++] = r;
	}
	pthread_mutex_unlock(&s->list_mu);
	return v;
}

size_t store_view_count(const struct store_view *v)
{
	return v->n;
}

uint64_t store_view_dictionary(const struct store_view *v, size_t i)
{
	const struct sref *r = v->parts[i];
	return r->blk ? 0 : r->part.dict_id; /* set before the part was listed */
}

uint64_t store_view_lineage(const struct store_view *v, size_t i, const uint32_t **ids,
			    size_t *nids, size_t *nnodes)
{
	const struct lineage_snap *l = &v->lin[i];
	if (!l->ids)
		return 0;
	*ids = l->ids; /* the array lives as long as the part, which the view holds */
	*nids = l->nids;
	*nnodes = l->nnodes;
	return l->lineage;
}

const struct part *store_view_peek(struct store_view *v, size_t i)
{
	struct sref *r = v->parts[i];
	if (r->blk)
		return NULL;
	pthread_rwlock_rdlock(&r->rw);
	return &r->part;
}

const struct part *store_view_begin(struct store_view *v, size_t i)
{
	struct sref *r = v->parts[i];
	if (!r->blk) {
		v->stats.parts++;
		return store_view_peek(v, i);
	}
	pthread_mutex_lock(&r->mu);
	if (sref_load_locked(v->s, r) < 0) {
		pthread_mutex_unlock(&r->mu);
		v->stats.parts_skipped++;
		return NULL;
	}
	r->readers++;
	pthread_mutex_unlock(&r->mu);
	v->stats.parts++;
	return &r->part;
}

/* A series chunk that could not be read: logged, counted, skipped. */
static void chunk_skipped(struct store_view *v, const struct buf *err)
{
	log_error("store: %s; those rows are skipped", err->data);
	v->stats.chunks_skipped++;
}

long store_view_rows(struct store_view *v, size_t i, const struct part_series *s,
		     int64_t since_ms, const struct part_row **rows)
{
	struct sref *r = v->parts[i];
	v->stats.series_read++;
	if (!r->blk) {
		*rows = s->rows;
		v->stats.rows_read += s->nrows;
		return (long)s->nrows;
	}
	struct buf err = { 0 };
	long n = block_rows(r->blk, &r->part, s, since_ms, &v->scratch, rows, &v->stats.bytes_read, &err);
	if (n < 0)
		chunk_skipped(v, &err);
	else
		v->stats.rows_read += (uint64_t)n;
	buf_free(&err);
	return n;
}

long store_view_sums(struct store_view *v, size_t i, const struct part_series *s,
		     int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
		     const uint64_t **sums)
{
	struct sref *r = v->parts[i];
	v->stats.series_read++;
	if (!r->blk) {
		buf_reset(&v->scratch);
		buf_reserve(&v->scratch, s->nrows * (sizeof(uint32_t) + sizeof(uint64_t)) + 16);
		uint64_t *vals = (uint64_t *)v->scratch.data;
		uint32_t *ids = (uint32_t *)(vals + s->nrows);
		size_t n = 0;
		for (size_t j = 0; j < s->nrows; j++)
			if (s->rows[j].ts_ms >= from_ms && s->rows[j].ts_ms < to_ms) {
				ids[n] = s->rows[j].stack;
				vals[n++] = s->rows[j].value;
			}
		v->stats.rows_read += s->nrows;
		*stacks = ids;
		*sums = vals;
		return (long)n;
	}
	struct buf err = { 0 };
	long n = block_sums(r->blk, &r->part, s, from_ms, to_ms, &v->scratch, stacks, sums,
			    &v->stats.rows_read, &v->stats.bytes_read, &err);
	if (n < 0)
		chunk_skipped(v, &err);
	else
		v->stats.stack_sums_read += (uint64_t)n;
	buf_free(&err);
	return n;
}

int64_t store_view_total(struct store_view *v, size_t i, const struct part_series *s,
			 int64_t from_ms, int64_t to_ms)
{
	struct sref *r = v->parts[i];
	v->stats.series_read++;
	if (!r->blk) {
		uint64_t sum = 0;
		for (size_t j = 0; j < s->nrows; j++)
			if (s->rows[j].ts_ms >= from_ms && s->rows[j].ts_ms < to_ms)
				sum += s->rows[j].value;
		v->stats.rows_read += s->nrows;
		return (int64_t)sum;
	}
	struct buf err = { 0 };
	int64_t n = block_total(r->blk, &r->part, s, from_ms, to_ms, &v->scratch,
				&v->stats.rows_read, &v->stats.bytes_read, &err);
	if (n < 0)
		chunk_skipped(v, &err);
	buf_free(&err);
	return n;
}

long store_view_rollup_sums(struct store_view *v, size_t i, const struct part_rollup *r,
			    int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
			    const uint64_t **sums)
{
	struct sref *ref = v->parts[i];
	if (!ref->blk || !r->nslices)
		return -1;
	struct block_read_stats st = { 0 };
	struct buf err = { 0 };
	long n = block_rollup_sums(ref->blk, &ref->part, r, from_ms, to_ms, &v->scratch, &v->acc,
				   stacks, sums, &st, &err);
	if (err.len)
		log_error("store: %s; %s", err.data,
			  n < 0 ? "the query reads the series instead" : "those rows are skipped");
	buf_free(&err);
	v->stats.series_read += st.series_read;
	v->stats.rows_read += st.rows_read;
	v->stats.bytes_read += st.bytes_read;
	v->stats.stack_sums_read += st.stack_sums_read;
	v->stats.chunks_skipped += st.chunks_skipped;
	return n;
}

void store_view_end(struct store_view *v, size_t i)
{
	struct sref *r = v->parts[i];
	if (!r->blk) {
		pthread_rwlock_unlock(&r->rw);
		return;
	}
	pthread_mutex_lock(&v->s->list_mu);
	uint64_t tick = ++v->s->tick;
	pthread_mutex_unlock(&v->s->list_mu);
	pthread_mutex_lock(&r->mu);
	r->readers--;
	r->last_used = tick;
	pthread_mutex_unlock(&r->mu);
}

const struct store_view_stats *store_view_stats(const struct store_view *v)
{
	return &v->stats;
}

void store_view_close(struct store_view *v)
{
	if (!v)
		return;
	pthread_mutex_lock(&v->s->list_mu);
	for (size_t i = 0; i < v->n; i++)
		sref_put_locked(v->s, v->parts[i]);
	pthread_mutex_unlock(&v->s->list_mu);
	struct store *s = v->s;
	free(v->parts);
	free(v->lin);
	buf_free(&v->scratch);
	buf_free(&v->acc);
	free(v);
	evict(s);
}
