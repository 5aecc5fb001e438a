/* view.c - the embedded store's read interface (store.h, "reading"):
 * views over its parts, the segments they begin and the bookkeeping that
 * lets a query carry stack sums across parts of one stack tree; see
 * docs/internals/store.md. */
#include "store_int.h"

#include <stddef.h>
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

/* A part's dictionaries' name for carrying sums (0: none) and, for a
 * block so named, its nids node ids in them, below count; ends: the
 * in-memory part that folds the chain of its name, begun even when it
 * selects nothing. */
struct carry_name {
	uint64_t name;
	const uint32_t *ids;
	size_t nids, count;
	bool ends;
};

/* A begun part as a segment; pub first (the accessors cast back). */
struct emb_seg {
	struct store_segment pub;
	const struct part *p;
	struct store_series *series;
	size_t capseries;
};

struct emb_view {
	struct store_view base;
	struct store *s;
	struct sref **parts;
	struct lineage_snap *lin;
	struct emb_seg *segs;     /* by the view's index */
	size_t n;
	struct carry_name *names; /* per part, once store_view_carry() named them */
	size_t *order;            /* the part read at each position (NULL: the view's order) */
	struct buf scratch, acc;
	struct store_view_stats stats;
};


/* The view's index of the part read at position i. */
static size_t vi(const struct emb_view *v, size_t i)
{
	return v->order ? v->order[i] : i;
}

static struct store_view *emb_open(struct store *s, int64_t from_ms, int64_t to_ms,
				   const struct store_view_scope *scope)
{
	(void)scope; /* the parts of the range are pinned whatever the query selects */
	struct emb_view *v = xcalloc(1, sizeof(*v));
	v->base.ops = &store_embedded_read;
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
	v->segs = xcalloc(v->n + 1, sizeof(*v->segs));
	return &v->base;
}

static size_t emb_count(const struct store_view *bv)
{
	return ((const struct emb_view *)bv)->n;
}

/* The dictionaries' name (part.h dict_id) of part i (the view's index)
 * when it is in memory, 0 for a block. In-memory parts of one name are a
 * sealed head and the heads that started with copies of its
 * dictionaries, oldest first: each holds the ids of the one before it,
 * under the same meaning. */
static uint64_t dictionary(const struct emb_view *v, size_t i)
{
	const struct sref *r = v->parts[i];
	return r->blk ? 0 : r->part.dict_id; /* set before the part was listed */
}

/* For a block written by this process from a sealed head, or merged from
 * such blocks of one hour that is not yet closed: the head's dictionaries'
 * name (0 for any other part), the most nodes a source had (nnodes), and
 * the id there of each of the block's nids nodes (ids). Those ids mean the
 * same in every in-memory part of that name with at least nnodes nodes. */
static uint64_t lineage(const struct emb_view *v, size_t i, const uint32_t **ids, size_t *nids,
			size_t *nnodes)
{
	const struct lineage_snap *l = &v->lin[i];
	if (!l->ids)
		return 0;
	*ids = l->ids; /* the array lives as long as the part, which the view holds */
	*nids = l->nids;
	*nnodes = l->nnodes;
	return l->lineage;
}

/* The node count of in-memory part i (the view's index) now (it only
 * grows, so it has at least as many when begun). */
static size_t memory_part_nodes(struct emb_view *v, size_t i)
{
	struct sref *r = v->parts[i];
	if (r->blk)
		return 0;
	pthread_rwlock_rdlock(&r->rw);
	size_t n = r->part.nnodes;
	pthread_rwlock_unlock(&r->rw);
	return n;
}

/* The last in-memory part of the view with dictionaries d, or SIZE_MAX. */
static size_t last_in_memory(const struct emb_view *v, uint64_t d)
{
	for (size_t j = v->n; j-- > 0;)
		if (dictionary(v, j) == d)
			return j;
	return SIZE_MAX;
}

/* Names the parts for carrying and orders them so that the parts of each
 * name are read one after another. The view lists parts by generation,
 * which a block takes when it is written: a closed hour's block merged
 * after a block of the open hour was written, or after a head was sealed,
 * is listed between that part and the head. Requiring the part right
 * after a block to have its name left every block before such a part,
 * and the sealed heads, to fold alone. Here a block written from a sealed
 * head takes the head's name whenever the view holds an in-memory part
 * of that name with every id the block's stacks are given: the last one
 * (each holds the ids of the one before), which ends the chain and is
 * begun even when it selects nothing (the head right after a flush holds
 * no row yet). The parts of no name are read first, in the view's order,
 * then each name's blocks and its in-memory parts, each in the view's
 * order, so its end comes last. What a query adds up does not depend on
 * the order. */
static void emb_carry(struct store_view *bv)
{
	struct emb_view *v = (struct emb_view *)bv;
	size_t n = v->n;
	if (v->names)
		return;
	size_t m = n ? n : 1;
	v->names = xcalloc(m, sizeof(*v->names));
	size_t *order = xcalloc(m, sizeof(*order));
	size_t *end = xcalloc(m, sizeof(*end));             /* per named part: its chain's end */
	size_t *end_nodes = xcalloc(m, sizeof(*end_nodes)); /* per end: nodes + 1, 0 not yet */
	for (size_t i = 0; i < n; i++) {
		uint64_t d = dictionary(v, i);
		if (d) {
			v->names[i].name = d;
			end[i] = last_in_memory(v, d);
			continue;
		}
		const uint32_t *ids;
		size_t nids, nnodes;
		uint64_t l = lineage(v, i, &ids, &nids, &nnodes);
		size_t e = l && nnodes ? last_in_memory(v, l) : SIZE_MAX;
		if (e == SIZE_MAX)
			continue; /* no part in memory has its ids: it folds alone */
		if (!end_nodes[e])
			end_nodes[e] = memory_part_nodes(v, e) + 1;
		if (end_nodes[e] - 1 < nnodes)
			continue;
		v->names[i] = (struct carry_name){ l, ids, nids, nnodes, false };
		end[i] = e;
		v->names[e].ends = true;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!v->names[i].name)
			order[k++] = i;
	for (size_t e = 0; e < n; e++) {
		if (!v->names[e].name || end[e] != e)
			continue; /* not the end of a chain */
		for (int memory = 0; memory < 2; memory++) /* its blocks, then its parts in memory */
			for (size_t i = 0; i < n; i++)
				if (v->names[i].name && end[i] == e &&
				    (dictionary(v, i) != 0) == memory)
					order[k++] = i;
	}
	v->order = order;
	free_all(end, end_nodes);
}

static bool emb_same_ids(const struct store_view *bv, size_t i, size_t j)
{
	const struct emb_view *v = (const struct emb_view *)bv;
	i = vi(v, i);
	j = vi(v, j);
	if (v->names)
		return v->names[i].name && v->names[i].name == v->names[j].name;
	uint64_t d = dictionary(v, i);
	return d && d == dictionary(v, j);
}

/* Fills segment i (the view's index) from its part, begun. */
static const struct store_segment *fill_segment(struct emb_view *v, size_t i, const struct part *p)
{
	struct emb_seg *g = &v->segs[i];
	g->p = p;
	xgrow((void **)&g->series, &g->capseries, p->nseries + 1, sizeof(*g->series));
	for (size_t j = 0; j < p->nseries; j++) {
		const struct part_series *ps = &p->series[j];
		g->series[j] = (struct store_series){
			.project = ps->project, .labels = ps->labels, .kind = ps->kind,
			.hz = ps->hz, .min_ts = ps->min_ts, .max_ts = ps->max_ts, .total = ps->total,
			.nrows = ps->nrows, .minutes = ps->minutes,
			.nminutes = ps->nminutes
		};
	}
	const struct carry_name *c = v->names ? &v->names[i] : NULL;
	g->pub = (struct store_segment){
		.ops = &store_embedded_read, .min_ts = p->min_ts, .max_ts = p->max_ts,
		.series = g->series,
		.nseries = (uint32_t)p->nseries, .nlabels = (uint32_t)p->nlabels,
		.nframes = (uint32_t)p->nframes, .nnodes = (uint32_t)p->nnodes,
		.node_parent = p->node_parent, .node_frame = p->node_frame,
		.chain_end = c && c->ends
	};
	if (c && c->ids) {
		g->pub.stack_map = c->ids;
		g->pub.stack_nown = (uint32_t)MIN(c->nids, p->nnodes);
		g->pub.stack_count = c->count;
	} else {
		g->pub.stack_nown = (uint32_t)p->nnodes;
		g->pub.stack_count = p->nnodes;
	}
	return &g->pub;
}

static const struct store_segment *emb_begin(struct store_view *bv, size_t pos)
{
	struct emb_view *v = (struct emb_view *)bv;
	size_t i = vi(v, pos);
	struct sref *r = v->parts[i];
	if (!r->blk) {
		v->stats.parts++;
		pthread_rwlock_rdlock(&r->rw);
		return fill_segment(v, i, &r->part);
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
	return fill_segment(v, i, &r->part);
}

/* A series chunk that could not be read: logged, counted, skipped. */
/* What a block read answered (n, err freed here): a failure is logged and
 * its rows skipped; n items read are added to *count (NULL: not counted). */
static long block_answer(struct emb_view *v, long n, struct buf *err, uint64_t *count)
{
	if (n < 0) {
		log_error("store: %s; those rows are skipped", err->data);
		v->stats.chunks_skipped++;
	} else if (count) {
		*count += (uint64_t)n;
	}
	buf_free(err);
	return n;
}

/* The part begun at position pos and its series `series`. */
static const struct part_series *series_of(struct emb_view *v, size_t pos, uint32_t series,
					   struct sref **r)
{
	size_t i = vi(v, pos);
	*r = v->parts[i];
	return &v->segs[i].p->series[series];
}

static long emb_rows(struct store_view *bv, size_t pos, uint32_t series, int64_t since_ms,
		     const struct store_row **rows)
{
	struct emb_view *v = (struct emb_view *)bv;
	struct sref *r;
	const struct part_series *s = series_of(v, pos, series, &r);
	v->stats.series_read++;
	if (!r->blk) {
		*rows = s->rows;
		v->stats.rows_read += s->nrows;
		return (long)s->nrows;
	}
	struct buf err = { 0 };
	long n = block_rows(r->blk, &r->part, s, since_ms, &v->scratch, rows, &v->stats.bytes_read, &err);
	return block_answer(v, n, &err, &v->stats.rows_read);
}

static long emb_sums(struct store_view *bv, size_t pos, uint32_t series, int64_t from_ms,
		     int64_t to_ms, const uint32_t **stacks, const uint64_t **sums)
{
	struct emb_view *v = (struct emb_view *)bv;
	struct sref *r;
	const struct part_series *s = series_of(v, pos, series, &r);
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
	return block_answer(v, n, &err, &v->stats.stack_sums_read);
}

static int64_t emb_total(struct store_view *bv, size_t pos, uint32_t series, int64_t from_ms,
			 int64_t to_ms)
{
	struct emb_view *v = (struct emb_view *)bv;
	struct sref *r;
	const struct part_series *s = series_of(v, pos, series, &r);
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
	return block_answer(v, n, &err, NULL);
}

/* A part's rollup of (project, kind): the stack totals of all its series
 * together. A part inside the range gives the rollup itself; a block the
 * range cuts, the rollup's time slices inside the range and the rows of
 * the slices at its ends (block_rollup_sums). */
static long emb_rollup_sums(struct store_view *bv, size_t pos, uint32_t project, uint8_t kind,
			    int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
			    const uint64_t **sums, uint16_t *hz)
{
	struct emb_view *v = (struct emb_view *)bv;
	size_t i = vi(v, pos);
	struct sref *ref = v->parts[i];
	const struct part *p = v->segs[i].p;
	const struct part_rollup *found = NULL;
	for (size_t k = 0; k < p->nrollups; k++) {
		const struct part_rollup *r = &p->rollups[k];
		if (r->project != project || r->kind != kind)
			continue;
		if (found)
			return -1; /* two sample rates: the series know which is which */
		found = r;
	}
	if (!found)
		return -1;
	*hz = found->hz;
	if (p->min_ts >= from_ms && p->max_ts < to_ms) {
		*stacks = found->stacks;
		*sums = found->sums;
		return (long)found->n;
	}
	if (!ref->blk || !found->nslices)
		return -1;
	struct block_read_stats st = { 0 };
	struct buf err = { 0 };
	long n = block_rollup_sums(ref->blk, &ref->part, found, from_ms, to_ms, &v->scratch,
				   &v->acc, stacks, sums, &st, &err);
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

static void emb_end(struct store_view *bv, size_t pos)
{
	struct emb_view *v = (struct emb_view *)bv;
	size_t i = vi(v, pos);
	struct sref *r = v->parts[i];
	v->segs[i].p = NULL;
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

static const struct store_view_stats *emb_stats(const struct store_view *bv)
{
	return &((const struct emb_view *)bv)->stats;
}

static void emb_close(struct store_view *bv)
{
	struct emb_view *v = (struct emb_view *)bv;
	pthread_mutex_lock(&v->s->list_mu);
	for (size_t i = 0; i < v->n; i++)
		sref_put_locked(v->s, v->parts[i]);
	pthread_mutex_unlock(&v->s->list_mu);
	struct store *s = v->s;
	for (size_t i = 0; i < v->n; i++)
		free(v->segs[i].series);
	free_all(v->segs, v->parts, v->lin, v->names, v->order);
	buf_free(&v->scratch);
	buf_free(&v->acc);
	free(v);
	st_evict(s);
}

/* --- a begun part's dictionaries -------------------------------------------------------- */

static const struct part *seg_part(const struct store_segment *g)
{
	return ((const struct emb_seg *)g)->p;
}

static const char *emb_str(const struct store_segment *g, uint32_t id)
{
	return strtab_get(&seg_part(g)->lstr, id);
}

static uint32_t emb_find(const struct store_segment *g, const char *s, size_t len)
{
	return strtab_lookup(&seg_part(g)->lstr, s, len);
}

static size_t emb_label_pairs(const struct store_segment *g, uint32_t labels, const uint32_t **kv)
{
	return part_label_pairs(seg_part(g), labels, kv);
}

static int emb_frame(const struct store_segment *g, uint32_t frame, struct store_frame_info *out)
{
	const struct part *p = seg_part(g);
	if (frame >= p->nframes)
		return -1;
	const struct store_frame *f = &p->frames[frame];
	const struct store_file *sf = f->file && f->file <= p->nfiles ? &p->files[f->file - 1] : NULL;
	*out = (struct store_frame_info){
		.type = f->type, .address = f->address,
		.name = f->name ? strtab_get(&p->sstr, f->name) : NULL,
		.binary = f->binary ? strtab_get(&p->sstr, f->binary) : NULL,
		.file = sf, .file_name = sf ? strtab_get(&p->sstr, sf->name) : NULL
	};
	return 0;
}

static uint32_t emb_host_cpus(const struct store_segment *g, uint32_t name)
{
	const struct part *p = seg_part(g);
	for (size_t h = 0; h < p->nhosts; h++)
		if (p->hosts[h].name == name)
			return p->hosts[h].cpus;
	return 0;
}

const struct store_read_ops store_embedded_read = {
	.name = "embedded",
	.view_open = emb_open,
	.count = emb_count,
	.carry = emb_carry,
	.same_ids = emb_same_ids,
	.begin = emb_begin,
	.rows = emb_rows,
	.sums = emb_sums,
	.total = emb_total,
	.rollup_sums = emb_rollup_sums,
	.end = emb_end,
	.stats = emb_stats,
	.close = emb_close,
	.str = emb_str,
	.find = emb_find,
	.label_pairs = emb_label_pairs,
	.frame = emb_frame,
	.host_cpus = emb_host_cpus,
};
