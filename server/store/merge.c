/* merge.c - see merge.h. */
#include "merge.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Id maps from one source part into the new one; UINT32_MAX = not yet. */
struct src_map {
	const struct part *p;
	uint32_t *lstr, *sstr, *files, *frames, *nodes, *labels;
};

static uint32_t *unmapped(size_t n)
{
	uint32_t *m = xmalloc((n ? n : 1) * sizeof(uint32_t));
	memset(m, 0xff, (n ? n : 1) * sizeof(uint32_t));
	return m;
}

static void map_init(struct src_map *m, const struct part *p)
{
	m->p = p;
	m->lstr = unmapped(strtab_count(&p->lstr));
	m->sstr = unmapped(strtab_count(&p->sstr));
	m->files = unmapped(p->nfiles);
	m->frames = unmapped(p->nframes);
	m->nodes = unmapped(p->nnodes);
	m->nodes[0] = 0;
	m->labels = unmapped(p->nlabels);
}

static void map_free(struct src_map *m)
{
	free_all(m->lstr, m->sstr, m->files, m->frames, m->nodes, m->labels);
}

static uint32_t map_lstr(struct part *dst, struct src_map *m, uint32_t id)
{
	if (m->lstr[id] == UINT32_MAX)
		m->lstr[id] = strtab_intern(&dst->lstr, strtab_get(&m->p->lstr, id),
					    strtab_len(&m->p->lstr, id));
	return m->lstr[id];
}

static uint32_t map_sstr(struct part *dst, struct src_map *m, uint32_t id)
{
	if (m->sstr[id] == UINT32_MAX)
		m->sstr[id] = strtab_intern(&dst->sstr, strtab_get(&m->p->sstr, id),
					    strtab_len(&m->p->sstr, id));
	return m->sstr[id];
}

static uint32_t map_frame(struct part *dst, struct src_map *m, uint32_t id)
{
	if (m->frames[id] != UINT32_MAX)
		return m->frames[id];
	struct store_frame f = m->p->frames[id];
	if (f.file) {
		uint32_t fi = f.file - 1;
		if (m->files[fi] == UINT32_MAX) {
			struct store_file sf = m->p->files[fi];
			sf.name = map_sstr(dst, m, sf.name);
			m->files[fi] = part_file(dst, &sf);
		}
		f.file = m->files[fi] + 1;
	}
	f.name = map_sstr(dst, m, f.name);
	f.binary = map_sstr(dst, m, f.binary);
	return m->frames[id] = part_frame(dst, &f);
}

/* Maps a stack node: finds the nearest mapped ancestor, then interns the
 * nodes below it outermost first (no recursion: stacks can be deep). */
static uint32_t map_node(struct part *dst, struct src_map *m, uint32_t id, uint32_t **chain,
			 size_t *cap)
{
	if (m->nodes[id] != UINT32_MAX)
		return m->nodes[id];
	size_t n = 0;
	uint32_t at = id;
	while (m->nodes[at] == UINT32_MAX) {
		xgrow((void **)chain, cap, n + 1, sizeof(uint32_t));
		(*chain)[n++] = at;
		at = m->p->node_parent[at];
	}
	uint32_t node = m->nodes[at];
	while (n-- > 0) {
		uint32_t s = (*chain)[n];
		node = part_node(dst, node, map_frame(dst, m, m->p->node_frame[s]));
		m->nodes[s] = node;
	}
	return node;
}

static uint32_t map_labels(struct part *dst, struct src_map *m, uint32_t id)
{
	if (m->labels[id] != UINT32_MAX)
		return m->labels[id];
	const uint32_t *kv;
	size_t n = part_label_pairs(m->p, id, &kv);
	uint32_t *tmp = xmalloc((2 * n + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < 2 * n; i++)
		tmp[i] = map_lstr(dst, m, kv[i]);
	/* String ids differ between parts: sort again by the new key ids. */
	size_t pairs = part_canonical_labels(tmp, n);
	m->labels[id] = part_labels(dst, tmp, pairs);
	free(tmp);
	return m->labels[id];
}

struct pick {
	uint32_t dst_series;
	uint32_t src;
	uint32_t src_series;
};

static int cmp_pick(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;
	if (x->dst_series != y->dst_series)
		return x->dst_series < y->dst_series ? -1 : 1;
	return x->src < y->src ? -1 : x->src > y->src;
}

/* Whether an in-memory series has a row the target keeps: its time range
 * may span the target with none inside (rows an hour before and an hour
 * after, late data), and a series without rows is not written. A block's
 * series lie in one partition, the target's, so the range test is enough
 * for them. */
static bool rows_meet(const struct part_series *ps, const struct merge_target *t)
{
	if (ps->min_ts >= t->from_ms && ps->max_ts < t->to_ms)
		return true;
	for (size_t r = 0; r < ps->nrows; r++)
		if (ps->rows[r].ts_ms >= t->from_ms && ps->rows[r].ts_ms < t->to_ms)
			return true;
	return false;
}

/* Interns every stack the kept rows use before any row is written, then
 * numbers the new part's stack tree depth first (part_sort_nodes), so a
 * block's nodes are in the order queries walk them. A block source gives
 * its series' distinct stacks (block_sums) rather than its rows. A stack
 * this misses (its rows sum to zero) is interned when its rows are
 * written, after the others: correct, only out of order. */
static void intern_stacks(struct part *dst, struct src_map *maps, const struct merge_source *src,
			  size_t nsrc, const struct pick *picks, size_t npicks,
			  const struct merge_target *t,
			  uint32_t **chain, size_t *capchain, struct buf *scratch)
{
	for (size_t i = 0; i < npicks; i++) {
		struct src_map *m = &maps[picks[i].src];
		const struct part_series *ps = &m->p->series[picks[i].src_series];
		struct block *blk = src[picks[i].src].blk;
		if (!blk) {
			for (size_t r = 0; r < ps->nrows; r++)
				if (ps->rows[r].ts_ms >= t->from_ms && ps->rows[r].ts_ms < t->to_ms)
					map_node(dst, m, ps->rows[r].stack, chain, capchain);
			continue;
		}
		const uint32_t *stacks;
		const uint64_t *sums;
		uint64_t rows_read = 0, bytes_read = 0;
		struct buf err = { 0 };
		long n = block_sums(blk, m->p, ps, t->from_ms, t->to_ms, scratch, &stacks, &sums,
				    &rows_read, &bytes_read, &err);
		buf_free(&err);
		for (long k = 0; k < n; k++)
			map_node(dst, m, stacks[k], chain, capchain);
	}
	uint32_t *order = part_sort_nodes(dst);
	for (size_t i = 0; i < nsrc; i++)
		for (size_t j = 0; j < maps[i].p->nnodes; j++)
			if (maps[i].nodes[j] != UINT32_MAX)
				maps[i].nodes[j] = order[maps[i].nodes[j]];
	free(order);
}

int merge_write(const struct merge_source *src, size_t nsrc, const struct merge_target *t,
		struct part *out, bool *damaged, struct buf *err)
{
	struct part *dst = out;
	part_init(dst, t->granularity_ms);
	struct src_map *maps = xcalloc(nsrc ? nsrc : 1, sizeof(*maps));
	struct pick *picks = NULL;
	size_t npicks = 0, cappicks = 0;
	for (size_t i = 0; i < nsrc; i++) {
		const struct part *p = src[i].p;
		map_init(&maps[i], p);
		for (size_t s = 0; s < p->nseries; s++) {
			const struct part_series *ps = &p->series[s];
			if (!ps->nrows || ps->max_ts < t->from_ms || ps->min_ts >= t->to_ms ||
			    (!src[i].blk && !rows_meet(ps, t)))
				continue;
			uint32_t d = part_series_id(dst, map_lstr(dst, &maps[i], ps->project), ps->kind,
						    ps->hz, map_labels(dst, &maps[i], ps->labels));
			xgrow((void **)&picks, &cappicks, npicks + 1, sizeof(*picks));
			picks[npicks++] = (struct pick){ d, (uint32_t)i, (uint32_t)s };
		}
		for (size_t h = 0; h < p->nhosts; h++)
			part_note_host(dst, map_lstr(dst, &maps[i], p->hosts[h].name), p->hosts[h].cpus);
		for (size_t a = 0; a < p->nagents; a++)
			part_note_agent(dst, map_lstr(dst, &maps[i], p->agents[a].instance),
					p->agents[a].seq);
		/* A block's agent sequences are in its footer, not its part: a
		 * compaction that lost them let a batch retried after a restart
		 * be stored twice. */
		const struct block_info *bi = src[i].blk ? block_info(src[i].blk) : NULL;
		for (size_t a = 0; bi && a < bi->nagents; a++)
			part_note_agent(dst, strtab_intern_cstr(&dst->lstr, bi->agents[a].instance),
					bi->agents[a].seq);
	}
	xqsort(picks, npicks, sizeof(*picks), cmp_pick);

	int rc = -1;
	struct block_writer *w = block_writer_create(t->tmp_path, err);
	struct store_row *rows = NULL;
	size_t caprows = 0;
	uint32_t *chain = NULL;
	size_t capchain = 0;
	struct buf scratch = { 0 };
	if (!w)
		goto out;
	intern_stacks(dst, maps, src, nsrc, picks, npicks, t, &chain, &capchain, &scratch);
	for (size_t i = 0; i < npicks;) {
		uint32_t d = picks[i].dst_series;
		size_t n = 0;
		for (; i < npicks && picks[i].dst_series == d; i++) {
			struct src_map *m = &maps[picks[i].src];
			const struct part_series *ps = &m->p->series[picks[i].src_series];
			const struct store_row *in = ps->rows;
			long nin = (long)ps->nrows;
			struct merge_source s = src[picks[i].src];
			if (s.blk) {
				uint64_t bytes = 0;
				struct buf rerr = { 0 };
				nin = block_rows(s.blk, s.p, ps, INT64_MIN, &scratch, &in, &bytes, &rerr);
				if (nin < 0) {
					log_error("merge: %s; those rows are lost, the file is kept aside",
						  rerr.data);
					if (damaged)
						damaged[picks[i].src] = true;
					nin = 0;
				}
				buf_free(&rerr);
			}
			xgrow((void **)&rows, &caprows, n + (size_t)nin, sizeof(*rows));
			for (long r = 0; r < nin; r++) {
				if (in[r].ts_ms < t->from_ms || in[r].ts_ms >= t->to_ms)
					continue;
				rows[n++] = (struct store_row){
					.ts_ms = in[r].ts_ms,
					.value = in[r].value,
					.stack = map_node(dst, m, in[r].stack, &chain, &capchain),
				};
			}
		}
		if (block_writer_chunk(w, dst, d, rows, n, err) < 0) {
			block_writer_abort(w);
			goto out;
		}
	}
	if (block_writer_finish(w, dst, &t->meta, t->final_path, err) < 0)
		goto out;
	rc = 0;
	/* The new part is read-only from here: drop the interning indexes
	 * that only building needs. */
	hmap_free(&dst->file_index);
	hmap_free(&dst->frame_index);
	hmap_free(&dst->node_index);
	hmap_free(&dst->stack_index);
	free(dst->stack_keys);
	dst->stack_keys = NULL;
	dst->nstack_keys = dst->capstack_keys = 0;
	free(dst->frame_hi);
	dst->frame_hi = NULL;
	dst->capframe_hi = 0;
	hmap_free(&dst->label_index);
	hmap_free(&dst->series_index);
	if (t->out_ids) {
		uint32_t *ids = xcalloc(dst->nnodes ? dst->nnodes : 1, sizeof(uint32_t));
		for (size_t i = 0; i < nsrc; i++) {
			const uint32_t *in = t->src_ids ? t->src_ids[i] : NULL;
			size_t nin = in ? t->nsrc_ids[i] : SIZE_MAX;
			for (size_t j = 0; j < maps[i].p->nnodes; j++)
				if (maps[i].nodes[j] < dst->nnodes)
					ids[maps[i].nodes[j]] = !in ? (uint32_t)j : j < nin ? in[j] : 0;
		}
		*t->out_ids = ids;
	}
	dst->rows = dst->samples = 0;
	dst->min_ts = INT64_MAX;
	dst->max_ts = INT64_MIN;
	for (size_t s = 0; s < dst->nseries; s++) {
		const struct part_series *ps = &dst->series[s];
		dst->rows += ps->nrows;
		dst->samples += ps->total;
		if (ps->nrows) {
			dst->min_ts = MIN(dst->min_ts, ps->min_ts);
			dst->max_ts = MAX(dst->max_ts, ps->max_ts);
		}
	}
out:
	if (rc < 0)
		part_free(dst);
	for (size_t i = 0; i < nsrc; i++)
		map_free(&maps[i]);
	free_all(maps, picks, rows, chain);
	buf_free(&scratch);
	return rc;
}

uint32_t *merge_map_nodes(struct part *dst, const struct part *src)
{
	struct src_map m;
	map_init(&m, src);
	for (size_t j = 1; j < src->nnodes; j++)
		m.nodes[j] = part_node(dst, m.nodes[src->node_parent[j]],
				       map_frame(dst, &m, src->node_frame[j]));
	uint32_t *ids = m.nodes;
	m.nodes = NULL;
	map_free(&m);
	return ids;
}
