/* maintain.c - sealing, flushing, compaction and retention; see store.h and docs/internals/store.md. */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "merge.h"
#include "util.h"

/* --- sealing, flushing, compaction, retention ------------------------------------------ */

/* Opens the next log as the current one (under mu, not sealing). */
static int rotate_log(struct store *s, struct buf *err)
{
	uint64_t gen = s->next_gen++;
	struct wal_file w;
	uint64_t skipped = 0;
	if (wal_open(s->wal_dir, gen, st_noop_record, NULL, &w, &skipped, err) < 0)
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
int st_seal(struct store *s, bool rotate, struct buf *err)
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
			st_swap_head(s, s->wal.gen);
			s->log_heads++;
		}
	} else if (rotate && (s->log_rows || s->head->wal_lo != s->wal.gen) &&
		   (rc = rotate_log(s, err)) == 0) {
		pthread_mutex_lock(&s->list_mu);
		s->head->wal_lo = s->head->wal_hi = s->wal.gen;
		pthread_mutex_unlock(&s->list_mu);
		s->log_heads = 1;
	}
	s->sealed_mono_ms = st_mono_ms();
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
void st_release_logs(struct store *s)
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
			st_sync_dir(s->wal_dir);
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

bool st_committed(const struct sref *r, uint64_t lowest)
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
	xqsort(s->parts, s->nparts, sizeof(*s->parts), st_cmp_sref_gen);
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
	st_block_file(s, meta->gen, ".tmp", &tmp);
	st_block_file(s, meta->gen, ".blk", &fin);
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
			r->written_mono_ms = st_mono_ms();
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
	free_all(ids, nids);
	return out;
}

/* Writes the oldest sealed in-memory part as blocks, one per partition,
 * then deletes its logs. Returns 1 done, 0 nothing to do, -1 failure (the
 * part stays in memory and in its logs). */
int st_flush_one(struct store *s, struct buf *err)
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
	xqsort(parts, np, sizeof(int64_t), st_cmp_i64);
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
			st_block_file(s, news[i]->gen, ".blk", &path);
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
	int rc = st_seal(s, rotate, err);
	while (rc == 0) {
		int f = st_flush_one(s, err);
		if (f <= 0) {
			rc = f;
			break;
		}
		st_release_logs(s);
	}
	if (rc == 0)
		st_release_logs(s);
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
	int rc = st_seal(s, rotate, err);
	pthread_mutex_unlock(&s->maint_mu);
	return rc;
}

int store_write_sealed(struct store *s, struct buf *err)
{
	pthread_mutex_lock(&s->maint_mu);
	int rc = 0, f;
	while ((f = st_flush_one(s, err)) > 0)
		st_release_logs(s);
	if (f < 0)
		rc = -1;
	else
		st_release_logs(s);
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
		return st_committed(r, lowest);
	const struct block_info *in = block_info(r->blk);
	return !st_committed(r, lowest) && in->wal_lo == g.lo && in->wal_hi == g.hi;
}

/* Forgets the ids in the heads' dictionaries that block r (a closed,
 * settled hour's only committed block) kept: no merge will drop them now,
 * and the block stays for days (a closed hour whose rows all came late,
 * in one log: the merge of that log's blocks kept them). It then folds
 * alone, the one fold its hour costs. Only while no view holds the block
 * (views read the ids as they were when opened); else at a later round.
 * The caller holds a reference and maint_mu. */
static void forget_ids(struct store *s, struct sref *r)
{
	pthread_mutex_lock(&s->list_mu);
	if (r->lineage_ids && r->refs == 2) { /* the list's and the caller's */
		free(r->lineage_ids);
		r->lineage_ids = NULL;
		r->lineage = 0;
		r->nlineage_ids = r->lineage_nnodes = 0;
		r->adopt_tried = true; /* a closed hour's block is not adopted either */
	}
	pthread_mutex_unlock(&s->list_mu);
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
	bool settled = !newest || st_mono_ms() - newest >= s->cfg.late_data_wait_ms;
	bool want = n >= 2 && (all || (closed && settled) || n >= s->cfg.compact_after);
	want |= n >= 1 && fresh && (all || (closed && settled));
	if (g.lo) /* a log's one-minute blocks, merged while the log stays */
		want = n >= 2 && n >= s->cfg.compact_after;
	int rc = 0;
	if (!want && !g.lo && n == 1 && closed && settled)
		forget_ids(s, srcs[0]);
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
		/* A closed hour's committed block keeps no ids in the heads'
		 * dictionaries: it stays for days, and so would they (4 bytes
		 * a node). A merge of a log's blocks (g.lo) keeps them even
		 * for a closed hour: those are late rows, flushed from the
		 * heads, and the block lasts only until its log goes and the
		 * hour is compacted again (late_data_wait later, or at
		 * compact_after blocks); without the ids a query folded it
		 * alone beside the hour's committed block: 3 folds where 2
		 * were due. */
		struct sref *out = write_block(s, ms, srcs, n, !closed || g.lo, partition,
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
				st_block_file(s, gens[i], ".blk", &path);
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
	free_all(ms, gens, damaged);
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
		if (!r->blk || r->broken || r->partition_ms != partition || st_committed(r, lowest))
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
		if (r->blk && r->partition_ms + STORE_PARTITION_MS <= cutoff && st_committed(r, lowest)) {
			r->refs++;
			xgrow((void **)&old, &cap, n + 1, sizeof(*old));
			old[n++] = r;
		}
	}
	pthread_mutex_unlock(&s->list_mu);
	struct buf path = { 0 };
	for (size_t i = 0; i < n; i++) {
		st_block_file(s, old[i]->gen, ".blk", &path);
		st_remove_file(path.data, "older than the retention");
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
		   (h->first_row_mono_ms && st_mono_ms() - h->first_row_mono_ms >= s->cfg.head_max_age_ms) ||
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
		    st_mono_ms() - s->sealed_mono_ms >= s->cfg.head_max_age_ms;
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
void st_warm_cache(struct store *s)
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

void *st_maintenance(void *arg)
{
	struct store *s = arg;
	int64_t last_retention = 0;
	st_warm_cache(s);
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
		int64_t now = st_mono_ms();
		if (now - last_retention >= 60000) {
			store_retention(s, now_unix_ms(), &err);
			last_retention = now;
		}
		st_evict(s);
		buf_free(&err);
	}
	return NULL;
}

void store_get_stats(struct store *s, struct store_stats *out)
{
	if (s->backend.write) {
		s->backend.write->stats(s, out);
		return;
	}
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
