/* store.c - see store.h; formats and recovery rules are described in
 * docs/internals/store.md. */
#include "store.h"

#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

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

int64_t st_mono_ms(void)
{
	return (int64_t)(now_mono_ns() / 1000000);
}

/* --- parts and references ------------------------------------------------------- */

struct sref *sref_new(void)
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

void sref_free(struct sref *r)
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
bool sref_put_locked(struct store *s, struct sref *r)
{
	if (--r->refs > 0)
		return false;
	if (r->loaded && r->blk)
		s->cache_used -= r->mem;
	sref_free(r);
	return true;
}

void sref_put(struct store *s, struct sref *r)
{
	pthread_mutex_lock(&s->list_mu);
	sref_put_locked(s, r);
	pthread_mutex_unlock(&s->list_mu);
}

struct sref *sref_from_block(struct block *b)
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
int sref_load_locked(struct store *s, struct sref *r)
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
void st_evict(struct store *s)
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

uint32_t st_agent_index(struct store *s, const char *instance, bool create)
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

void st_note_agent(struct store *s, const char *instance, uint64_t seq)
{
	uint32_t a = st_agent_index(s, instance, true);
	s->agent_seq[a] = MAX(s->agent_seq[a], seq);
}
