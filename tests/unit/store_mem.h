/* store_mem.h - an in-memory double of the store's read interface
 * (server/store/store.h, "reading"), for tests only: never linked into
 * the product.
 *
 * It keeps samples as plain arrays, as a caller gives them (project,
 * event kind, rate, labels, time, stack of frames, value), and builds
 * what a view gives (one segment: strings, label sets, frames, a stack
 * tree, series with their rows and minute totals) from them when a view
 * is opened, without any of the embedded store's code (part.c, block.c):
 * queries that answer the same over it and over the embedded store prove
 * the interface does not leak the embedded store's shape
 * (tests/unit/query/test_backends.c).
 *
 * Its write side is a small test API (memstore_add, memstore_host), not
 * the store's: a second backend's writing is its own.
 *
 * Ownership: the memstore owns copies of everything added; a view owns
 * the segment it builds. Threading: one thread.
 */
#ifndef EMBER_TESTS_STORE_MEM_H
#define EMBER_TESTS_STORE_MEM_H

#include <stdlib.h>
#include <string.h>

#include "fileid.h"
#include "server/store/store.h"
#include "strtab.h"
#include "util.h"

/* A frame as a test gives it. */
struct mem_frame {
	uint8_t type;          /* enum store_frame_type */
	const char *name;      /* NULL: none */
	const char *binary;    /* NULL: none */
	const char *file_name; /* NULL: no executable */
	struct file_id file_id;
	uint64_t address;
};

/* A frame as the memstore keeps it: strings by id (0: none). */
struct mem_frame_rec {
	uint8_t type;
	uint32_t name, binary, file_name;
	struct store_file file; /* valid when file_name */
	uint64_t address;
};

struct mem_sample {
	uint32_t project;
	uint8_t kind;
	uint16_t hz;
	uint32_t *kv; /* key/value string ids as given */
	size_t npairs;
	int64_t ts_ms;
	uint32_t *frames; /* indexes in frames, outermost first */
	size_t depth;
	uint64_t value;
};

struct memstore {
	struct store_backend backend; /* first: a struct store's handle begins so */
	struct strtab strs;
	struct mem_frame_rec *frames;
	size_t nframes, capframes;
	struct mem_sample *samples;
	size_t nsamples, capsamples;
	uint32_t *hosts; /* (name id, cpus) pairs */
	size_t nhosts, caphosts;
};

/* --- the view: one segment built from the samples ------------------------------------ */

struct mem_seg {
	struct store_segment pub; /* first: the accessors cast back */
	struct memstore *m;
	uint32_t *label_kv, *label_off; /* set i = kv[off[i] .. off[i + 1]) */
	size_t nlabels, nkv;
	uint32_t *parent, *frame; /* the stack tree */
	size_t nnodes;
	struct store_series *series;
	size_t nseries;
	struct store_row **rows; /* per series, by time then stack */
	struct store_minute **minutes;
};

struct mem_view {
	struct store_view base; /* first */
	struct mem_seg seg;
	uint64_t *acc;   /* per node: a sum being built */
	uint32_t *stacks; /* the answer of a sums call */
	uint64_t *sums;
	struct store_view_stats stats;
};

static const struct store_read_ops mem_ops;

static uint32_t mem_node(struct mem_seg *g, uint32_t parent, uint32_t frame)
{
	for (size_t n = 1; n < g->nnodes; n++) /* a test's trees are small */
		if (g->parent[n] == parent && g->frame[n] == frame)
			return (uint32_t)n;
	g->parent = xrealloc(g->parent, (g->nnodes + 1) * sizeof(uint32_t));
	g->frame = xrealloc(g->frame, (g->nnodes + 1) * sizeof(uint32_t));
	g->parent[g->nnodes] = parent;
	g->frame[g->nnodes] = frame;
	return (uint32_t)g->nnodes++;
}

static uint32_t mem_labels(struct mem_seg *g, const struct mem_sample *s)
{
	/* Canonical: sorted by key id, a repeated key's first value kept. */
	uint32_t kv[64];
	size_t n = 0;
	for (size_t i = 0; i < s->npairs && n < 32; i++) {
		bool seen = false;
		for (size_t j = 0; j < n; j++)
			seen |= kv[2 * j] == s->kv[2 * i];
		if (seen)
			continue;
		size_t at = n++;
		while (at > 0 && kv[2 * (at - 1)] > s->kv[2 * i]) {
			kv[2 * at] = kv[2 * (at - 1)];
			kv[2 * at + 1] = kv[2 * (at - 1) + 1];
			at--;
		}
		kv[2 * at] = s->kv[2 * i];
		kv[2 * at + 1] = s->kv[2 * i + 1];
	}
	for (size_t l = 0; l < g->nlabels; l++) {
		size_t len = g->label_off[l + 1] - g->label_off[l];
		if (len == 2 * n && !memcmp(g->label_kv + g->label_off[l], kv, len * sizeof(uint32_t)))
			return (uint32_t)l;
	}
	g->label_kv = xrealloc(g->label_kv, (g->nkv + 2 * n + 1) * sizeof(uint32_t));
	memcpy(g->label_kv + g->nkv, kv, 2 * n * sizeof(uint32_t));
	g->nkv += 2 * n;
	g->label_off = xrealloc(g->label_off, (g->nlabels + 2) * sizeof(uint32_t));
	g->label_off[++g->nlabels] = (uint32_t)g->nkv;
	return (uint32_t)(g->nlabels - 1);
}

static int mem_cmp_row(const void *a, const void *b)
{
	const struct store_row *x = a, *y = b;
	if (x->ts_ms != y->ts_ms)
		return x->ts_ms < y->ts_ms ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static struct store_view *mem_open(struct store *st, int64_t from_ms, int64_t to_ms,
				   const struct store_view_scope *scope)
{
	(void)from_ms, (void)to_ms; /* rows outside the range may come: readers cut them */
	(void)scope;
	struct memstore *m = (struct memstore *)st;
	struct mem_view *v = xcalloc(1, sizeof(*v));
	v->base.ops = &mem_ops;
	struct mem_seg *g = &v->seg;
	g->m = m;
	g->label_off = xcalloc(1, sizeof(uint32_t));
	g->parent = xcalloc(1, sizeof(uint32_t)); /* node 0, the root */
	g->frame = xcalloc(1, sizeof(uint32_t));
	g->nnodes = 1;
	uint32_t *series_of = xcalloc(m->nsamples + 1, sizeof(uint32_t));
	uint32_t *stack_of = xcalloc(m->nsamples + 1, sizeof(uint32_t));
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	for (size_t i = 0; i < m->nsamples; i++) {
		const struct mem_sample *s = &m->samples[i];
		uint32_t node = 0;
		for (size_t d = 0; d < s->depth; d++)
			node = mem_node(g, node, s->frames[d]);
		stack_of[i] = node;
		uint32_t labels = mem_labels(g, s);
		size_t j;
		for (j = 0; j < g->nseries; j++) {
			const struct store_series *x = &g->series[j];
			if (x->project == s->project && x->kind == s->kind && x->hz == s->hz &&
			    x->labels == labels)
				break;
		}
		if (j == g->nseries) {
			g->series = xrealloc(g->series, (g->nseries + 1) * sizeof(*g->series));
			g->series[g->nseries++] = (struct store_series){
				.project = s->project, .labels = labels, .kind = s->kind, .hz = s->hz,
				.min_ts = INT64_MAX, .max_ts = INT64_MIN
			};
		}
		series_of[i] = (uint32_t)j;
		lo = MIN(lo, s->ts_ms);
		hi = MAX(hi, s->ts_ms);
	}
	g->rows = xcalloc(g->nseries + 1, sizeof(*g->rows));
	g->minutes = xcalloc(g->nseries + 1, sizeof(*g->minutes));
	for (size_t i = 0; i < m->nsamples; i++) {
		const struct mem_sample *s = &m->samples[i];
		struct store_series *x = &g->series[series_of[i]];
		struct store_row **rows = &g->rows[series_of[i]];
		*rows = xrealloc(*rows, (x->nrows + 1) * sizeof(**rows));
		(*rows)[x->nrows++] = (struct store_row){ s->ts_ms, s->value, stack_of[i], 0 };
		x->total += s->value;
		x->min_ts = MIN(x->min_ts, s->ts_ms);
		x->max_ts = MAX(x->max_ts, s->ts_ms);
	}
	for (size_t j = 0; j < g->nseries; j++) {
		struct store_series *x = &g->series[j];
		qsort(g->rows[j], x->nrows, sizeof(struct store_row), mem_cmp_row);
		for (size_t r = 0; r < x->nrows; r++) {
			int64_t minute = floor_to(g->rows[j][r].ts_ms, 60000);
			struct store_minute **mm = &g->minutes[j];
			if (!x->nminutes || (*mm)[x->nminutes - 1].minute_ms != minute) {
				*mm = xrealloc(*mm, (x->nminutes + 1) * sizeof(**mm));
				(*mm)[x->nminutes++] = (struct store_minute){ minute, 0 };
			}
			(*mm)[x->nminutes - 1].value += g->rows[j][r].value;
		}
		x->minutes = g->minutes[j];
	}
	free(series_of);
	free(stack_of);
	g->pub = (struct store_segment){
		.ops = &mem_ops, .min_ts = lo, .max_ts = hi, .series = g->series,
		.nseries = (uint32_t)g->nseries, .nlabels = (uint32_t)g->nlabels,
		.nframes = (uint32_t)m->nframes, .nnodes = (uint32_t)g->nnodes,
		.node_parent = g->parent, .node_frame = g->frame, .stack_map = NULL,
		.stack_nown = (uint32_t)g->nnodes, .stack_count = g->nnodes, .chain_end = false
	};
	v->acc = xcalloc(g->nnodes + 1, sizeof(uint64_t));
	v->stacks = xcalloc(g->nnodes + 1, sizeof(uint32_t));
	v->sums = xcalloc(g->nnodes + 1, sizeof(uint64_t));
	return &v->base;
}

static size_t mem_count(const struct store_view *v)
{
	(void)v;
	return 1;
}

static void mem_carry(struct store_view *v)
{
	(void)v; /* one segment: nothing to carry */
}

static bool mem_same_ids(const struct store_view *v, size_t i, size_t j)
{
	(void)v, (void)i, (void)j;
	return false;
}

static const struct store_segment *mem_begin(struct store_view *bv, size_t i)
{
	struct mem_view *v = (struct mem_view *)bv;
	(void)i;
	v->stats.parts++;
	return &v->seg.pub;
}

static long mem_rows(struct store_view *bv, size_t i, uint32_t series, int64_t since_ms,
		     const struct store_row **rows)
{
	struct mem_view *v = (struct mem_view *)bv;
	(void)i, (void)since_ms; /* all of them: older rows may come */
	v->stats.series_read++;
	v->stats.rows_read += v->seg.series[series].nrows;
	*rows = v->seg.rows[series];
	return (long)v->seg.series[series].nrows;
}

/* The stacks with a sum in acc, ascending, into stacks/sums; acc cleared. */
static long mem_collect(struct mem_view *v, const uint32_t **stacks, const uint64_t **sums)
{
	long n = 0;
	for (size_t k = 0; k < v->seg.nnodes; k++)
		if (v->acc[k]) {
			v->stacks[n] = (uint32_t)k;
			v->sums[n++] = v->acc[k];
			v->acc[k] = 0;
		}
	*stacks = v->stacks;
	*sums = v->sums;
	v->stats.stack_sums_read += (uint64_t)n;
	return n;
}

static void mem_add_series(struct mem_view *v, uint32_t series, int64_t from_ms, int64_t to_ms)
{
	const struct store_row *r = v->seg.rows[series];
	for (size_t k = 0; k < v->seg.series[series].nrows; k++)
		if (r[k].ts_ms >= from_ms && r[k].ts_ms < to_ms)
			v->acc[r[k].stack] += r[k].value;
	v->stats.series_read++;
	v->stats.rows_read += v->seg.series[series].nrows;
}

static long mem_sums(struct store_view *bv, size_t i, uint32_t series, int64_t from_ms,
		     int64_t to_ms, const uint32_t **stacks, const uint64_t **sums)
{
	struct mem_view *v = (struct mem_view *)bv;
	(void)i;
	mem_add_series(v, series, from_ms, to_ms);
	return mem_collect(v, stacks, sums);
}

static int64_t mem_total(struct store_view *bv, size_t i, uint32_t series, int64_t from_ms,
			 int64_t to_ms)
{
	struct mem_view *v = (struct mem_view *)bv;
	(void)i;
	uint64_t t = 0;
	const struct store_row *r = v->seg.rows[series];
	for (size_t k = 0; k < v->seg.series[series].nrows; k++)
		if (r[k].ts_ms >= from_ms && r[k].ts_ms < to_ms)
			t += r[k].value;
	v->stats.series_read++;
	return (int64_t)t;
}

static long mem_rollup_sums(struct store_view *bv, size_t i, uint32_t project, uint8_t kind,
			    int64_t from_ms, int64_t to_ms, const uint32_t **stacks,
			    const uint64_t **sums, uint16_t *hz)
{
	struct mem_view *v = (struct mem_view *)bv;
	(void)i;
	uint16_t rate = 0;
	for (size_t j = 0; j < v->seg.nseries; j++) {
		const struct store_series *x = &v->seg.series[j];
		if (x->project != project || x->kind != kind)
			continue;
		if (rate && rate != x->hz)
			return -1; /* two rates: the series know which is which */
		rate = x->hz;
	}
	if (!rate)
		return -1;
	for (size_t j = 0; j < v->seg.nseries; j++)
		if (v->seg.series[j].project == project && v->seg.series[j].kind == kind)
			mem_add_series(v, (uint32_t)j, from_ms, to_ms);
	*hz = rate;
	return mem_collect(v, stacks, sums);
}

static void mem_end(struct store_view *v, size_t i)
{
	(void)v, (void)i;
}

static const struct store_view_stats *mem_stats(const struct store_view *bv)
{
	return &((const struct mem_view *)bv)->stats;
}

static void mem_close(struct store_view *bv)
{
	struct mem_view *v = (struct mem_view *)bv;
	struct mem_seg *g = &v->seg;
	for (size_t j = 0; j < g->nseries; j++) {
		free(g->rows[j]);
		free(g->minutes[j]);
	}
	free(g->rows);
	free(g->minutes);
	free(g->series);
	free(g->label_kv);
	free(g->label_off);
	free(g->parent);
	free(g->frame);
	free(v->acc);
	free(v->stacks);
	free(v->sums);
	free(v);
}

static const struct mem_seg *mem_seg_of(const struct store_segment *g)
{
	return (const struct mem_seg *)g;
}

static const char *mem_str(const struct store_segment *g, uint32_t id)
{
	return strtab_get(&mem_seg_of(g)->m->strs, id);
}

static uint32_t mem_find(const struct store_segment *g, const char *s, size_t len)
{
	return strtab_lookup(&mem_seg_of(g)->m->strs, s, len);
}

static size_t mem_label_pairs(const struct store_segment *bg, uint32_t labels, const uint32_t **kv)
{
	const struct mem_seg *g = mem_seg_of(bg);
	if (labels >= g->nlabels) {
		*kv = NULL;
		return 0;
	}
	*kv = g->label_kv + g->label_off[labels];
	return (g->label_off[labels + 1] - g->label_off[labels]) / 2;
}

static int mem_frame(const struct store_segment *bg, uint32_t frame, struct store_frame_info *out)
{
	const struct memstore *m = mem_seg_of(bg)->m;
	if (frame >= m->nframes)
		return -1;
	const struct mem_frame_rec *f = &m->frames[frame];
	*out = (struct store_frame_info){
		.type = f->type, .address = f->address,
		.name = f->name ? strtab_get(&m->strs, f->name) : NULL,
		.binary = f->binary ? strtab_get(&m->strs, f->binary) : NULL,
		.file = f->file_name ? &f->file : NULL,
		.file_name = f->file_name ? strtab_get(&m->strs, f->file_name) : NULL
	};
	return 0;
}

static uint32_t mem_host_cpus(const struct store_segment *g, uint32_t name)
{
	const struct memstore *m = mem_seg_of(g)->m;
	for (size_t h = 0; h < m->nhosts; h++)
		if (m->hosts[2 * h] == name)
			return m->hosts[2 * h + 1];
	return 0;
}

static const struct store_read_ops mem_ops = {
	.name = "memory (tests)",
	.view_open = mem_open,
	.count = mem_count,
	.carry = mem_carry,
	.same_ids = mem_same_ids,
	.begin = mem_begin,
	.rows = mem_rows,
	.sums = mem_sums,
	.total = mem_total,
	.rollup_sums = mem_rollup_sums,
	.end = mem_end,
	.stats = mem_stats,
	.close = mem_close,
	.str = mem_str,
	.find = mem_find,
	.label_pairs = mem_label_pairs,
	.frame = mem_frame,
	.host_cpus = mem_host_cpus,
};

/* --- the test API --------------------------------------------------------------------- */

static __attribute__((unused)) struct memstore *memstore_new(void)
{
	struct memstore *m = xcalloc(1, sizeof(*m));
	m->backend.read = &mem_ops;
	strtab_init(&m->strs);
	return m;
}

/* The handle queries take (flamegraph_query and the rest). */
static __attribute__((unused)) struct store *memstore_store(struct memstore *m)
{
	return (struct store *)m;
}

static uint32_t mem_intern(struct memstore *m, const char *s)
{
	return s ? strtab_intern_cstr(&m->strs, s) : 0;
}

static uint32_t mem_frame_id(struct memstore *m, const struct mem_frame *f)
{
	struct mem_frame_rec r = { .type = f->type, .name = mem_intern(m, f->name),
				   .binary = mem_intern(m, f->binary),
				   .file_name = mem_intern(m, f->file_name), .address = f->address };
	if (f->file_name)
		r.file.id = f->file_id;
	for (size_t i = 0; i < m->nframes; i++) {
		const struct mem_frame_rec *x = &m->frames[i];
		if (x->type == r.type && x->name == r.name && x->binary == r.binary &&
		    x->file_name == r.file_name && x->address == r.address &&
		    (!r.file_name || !memcmp(&x->file.id, &r.file.id, sizeof(r.file.id))))
			return (uint32_t)i;
	}
	xgrow((void **)&m->frames, &m->capframes, m->nframes + 1, sizeof(*m->frames));
	m->frames[m->nframes] = r;
	return (uint32_t)m->nframes++;
}

/* Adds one sample: kv holds npairs key/value strings; frames outermost
 * first. */
static __attribute__((unused)) void memstore_add(struct memstore *m, const char *project,
						 uint8_t kind, uint16_t hz, const char *const *kv,
						 size_t npairs, int64_t ts_ms,
						 const struct mem_frame *frames, size_t depth,
						 uint64_t value)
{
	xgrow((void **)&m->samples, &m->capsamples, m->nsamples + 1, sizeof(*m->samples));
	struct mem_sample *s = &m->samples[m->nsamples++];
	*s = (struct mem_sample){ .project = mem_intern(m, project), .kind = kind, .hz = hz,
				  .npairs = npairs, .ts_ms = ts_ms, .depth = depth,
				  .value = value };
	s->kv = xcalloc(2 * npairs + 1, sizeof(uint32_t));
	for (size_t i = 0; i < 2 * npairs; i++)
		s->kv[i] = mem_intern(m, kv[i]);
	s->frames = xcalloc(depth + 1, sizeof(uint32_t));
	for (size_t d = 0; d < depth; d++)
		s->frames[d] = mem_frame_id(m, &frames[d]);
}

/* Host `name` has cpus logical CPUs (absolute CPU %). */
static __attribute__((unused)) void memstore_host(struct memstore *m, const char *name,
						  uint32_t cpus)
{
	uint32_t id = mem_intern(m, name);
	for (size_t h = 0; h < m->nhosts; h++)
		if (m->hosts[2 * h] == id) {
			m->hosts[2 * h + 1] = MAX(m->hosts[2 * h + 1], cpus);
			return;
		}
	xgrow((void **)&m->hosts, &m->caphosts, 2 * m->nhosts + 2, sizeof(uint32_t));
	m->hosts[2 * m->nhosts] = id;
	m->hosts[2 * m->nhosts++ + 1] = cpus;
}

static __attribute__((unused)) void memstore_free(struct memstore *m)
{
	for (size_t i = 0; i < m->nsamples; i++) {
		free(m->samples[i].kv);
		free(m->samples[i].frames);
	}
	free(m->samples);
	free(m->frames);
	free(m->hosts);
	strtab_free(&m->strs);
	free(m);
}

#endif
