/* view.c - views: a consistent set of parts for one query; see store.h and docs/internals/store.md. */
#include "store_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

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
	st_evict(s);
}
