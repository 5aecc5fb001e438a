/* flamegraph.c - see flamegraph.h. */
#include "flamegraph.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "display.h"
#include "request.h"
#include "hmap.h"
#include "tree.h"
#include "jsonw.h"
#include "util.h"

static const char *const synthetic_names[SYN_COUNT] = {
	[SYN_DEPLOYMENT] = "deployment", [SYN_CONTAINER] = "container", [SYN_HOST] = "host",
	[SYN_EXECUTABLE] = "executable", [SYN_THREAD] = "thread",       [SYN_SCRIPT] = "script",
	[SYN_NAMESPACE] = "namespace",   [SYN_POD] = "pod",             [SYN_CLUSTER] = "cluster",
	[SYN_PROCESS] = "process",
};

static const char *const synthetic_attrs[SYN_COUNT] = {
	[SYN_DEPLOYMENT] = "k8s.deployment.name",
	[SYN_CONTAINER] = "container.name",
	[SYN_HOST] = "host.name",
	[SYN_EXECUTABLE] = "process.executable.name",
	[SYN_THREAD] = "thread.name",
	[SYN_SCRIPT] = "script.name",
	[SYN_NAMESPACE] = "k8s.namespace.name",
	[SYN_POD] = "k8s.pod.name",
	[SYN_CLUSTER] = "cluster.name",
	[SYN_PROCESS] = "process.pid",
};

int fg_synthetic_from_name(const char *name)
{
	for (int i = 0; i < SYN_COUNT; i++)
		if (strcmp(name, synthetic_names[i]) == 0)
			return i;
	return -1;
}

const char *fg_synthetic_attribute(enum fg_synthetic s)
{
	return synthetic_attrs[s];
}

const char *fg_synthetic_name(enum fg_synthetic s)
{
	return synthetic_names[s];
}

/* --- request parsing ----------------------------------------------------- */

int fg_request_parse(struct fg_request *r, const char *body, size_t len, struct buf *err)
{
	memset(r, 0, sizeof(*r));
	r->max_nodes = FG_DEFAULT_MAX_NODES;
	json_t *doc = req_load(body, len, err);
	if (!doc)
		return -1;
	int rc = -1;
	json_t *filter = json_object_get(doc, "filter");
	uint64_t buckets = 0, max_nodes = r->max_nodes;
	if (scope_parse(filter, "filter", &r->scope, err) < 0 ||
	    req_patterns(json_object_get(filter, "frame_mask"), "filter.frame_mask", FG_MAX_MASKS,
			 r->masks, &r->nmasks, err) < 0 ||
	    req_search(doc, &r->search, err) < 0 ||
	    req_count(doc, "num_samples", INT64_MAX, &r->num_samples, err) < 0 ||
	    req_count(doc, "num_stat_buckets", 10000, &buckets, err) < 0 ||
	    req_count(doc, "max_nodes", FG_LIMIT_MAX_NODES, &max_nodes, err) < 0 ||
	    req_bool(doc, "raw_names", &r->raw_names, err) < 0 ||
	    req_bool(doc, "verbose_names", &r->verbose_names, err) < 0)
		goto out;
	if (max_nodes < 2) {
		buf_printf(err, "max_nodes: expected 2 to %d (the root and an [other] node at least)",
			   FG_LIMIT_MAX_NODES);
		goto out;
	}
	r->num_stat_buckets = (uint32_t)buckets;
	r->max_nodes = (uint32_t)max_nodes;
	json_t *syn = json_object_get(doc, "synthetic_frames");
	if (syn && !json_is_null(syn)) {
		if (!json_is_array(syn) || json_array_size(syn) > FG_MAX_SYNTHETIC) {
			buf_printf(err, "synthetic_frames: expected an array of at most %d names",
				   FG_MAX_SYNTHETIC);
			goto out;
		}
		size_t i;
		json_t *v;
		json_array_foreach(syn, i, v)
		{
			int s = json_is_string(v) ? fg_synthetic_from_name(json_string_value(v)) : -1;
			if (s < 0) {
				buf_puts(err, "synthetic_frames: expected names among deployment, container, host, executable, thread, script, namespace, pod, cluster, process");
				goto out;
			}
			r->synthetic[r->nsynthetic++] = (enum fg_synthetic)s;
		}
	}
	rc = 0;
out:
	json_decref(doc);
	if (rc < 0)
		fg_request_free(r);
	return rc;
}

void fg_request_free(struct fg_request *r)
{
	scope_free(&r->scope);
	for (size_t i = 0; i < r->nmasks; i++)
		free(r->masks[i]);
	r->nmasks = 0;
	free(r->search);
	r->search = NULL;
}

/* --- the query ----------------------------------------------------------- */

struct fg {
	const struct fg_request *r;
	struct scan *scan;
	struct display *disp;
	struct otree tree;
	/* per part, indexed by the part's stack node id */
	uint64_t *self, *tot;
	uint32_t *out;
	uint8_t *match;
	uint8_t *smemo; /* search and time buckets: per part node, 0 unknown,
			   1 no matching frame on the way to the root, 2 one */
	size_t capsmemo;
	uint64_t *bits;
	size_t capself, captot, capout, capmatch, capbits;
	uint32_t *leaves;
	size_t nleaves, capleaves;
	size_t lo_word, hi_word; /* touched bit words: [lo, hi) */
	/* per part: label set -> output node of its synthetic group */
	uint32_t *group_of;
	size_t capgroup_of;
	struct { uint32_t group, series; } *sel;
	size_t nsel, capsel;
	/* answer */
	uint64_t total, sampled_from, distinct_stacks;
	uint64_t keep_threshold;
	struct hz_vote hz;
	uint64_t *buckets;
	/* memory bound: prune the tree once it has this many nodes */
	size_t prune_at, keep_after_prune;
	uint32_t other_key;
	uint32_t pruned;
};

/* --- one part ------------------------------------------------------------ */

static void grow_scratch(struct fg *q, size_t nnodes)
{
	size_t old = q->capself;
	xgrow((void **)&q->self, &q->capself, nnodes, sizeof(uint64_t));
	if (q->capself != old) /* new entries start zero; kept zero between groups */
		memset(q->self + old, 0, (q->capself - old) * sizeof(uint64_t));
	xgrow((void **)&q->tot, &q->captot, nnodes, sizeof(uint64_t));
	xgrow((void **)&q->out, &q->capout, nnodes, sizeof(uint32_t));
	xgrow((void **)&q->match, &q->capmatch, nnodes, 1);
	xgrow((void **)&q->smemo, &q->capsmemo, nnodes, 1);
	size_t words = (nnodes + 63) / 64;
	old = q->capbits;
	xgrow((void **)&q->bits, &q->capbits, words, sizeof(uint64_t));
	if (q->capbits != old)
		memset(q->bits + old, 0, (q->capbits - old) * sizeof(uint64_t));
}

static bool test_set(struct fg *q, uint32_t n)
{
	uint64_t m = 1ull << (n & 63);
	size_t w = n >> 6;
	if (q->bits[w] & m)
		return true;
	q->bits[w] |= m;
	q->lo_word = MIN(q->lo_word, w);
	q->hi_word = MAX(q->hi_word, w + 1);
	q->tot[n] = 0;
	return false;
}

static void add_leaf(struct fg *q, uint32_t stack, uint64_t value)
{
	if (!q->self[stack] && !(q->bits[stack >> 6] & (1ull << (stack & 63)))) {
		xgrow((void **)&q->leaves, &q->capleaves, q->nleaves + 1, sizeof(uint32_t));
		q->leaves[q->nleaves++] = stack;
	}
	q->self[stack] += value;
}

/* Whether stack node n of part p goes through a function matching the
 * search (memoized per node: the time buckets must count only what the
 * tree counts). */
static bool stack_matches(struct fg *q, const struct store_segment *p, uint32_t n)
{
	uint32_t path[64];
	uint32_t depth = 0, at = n;
	/* Climb to a known node (or the root), then fill in on the way down. */
	while (!q->smemo[at] && at != 0) {
		if (depth == ARRAY_SIZE(path)) {
			/* A deep stack: decide the upper part first. */
			(void)stack_matches(q, p, at);
			break;
		}
		path[depth++] = at;
		at = p->node_parent[at];
	}
	uint8_t m = at == 0 ? 1 : q->smemo[at];
	while (depth--) {
		uint32_t x = path[depth];
		if (m != 2) {
			uint32_t nr;
			const struct drun *run = display_frame(q->disp, p->node_frame[x], &nr);
			for (uint32_t j = 0; j < nr && m != 2; j++)
				if (display_get(q->disp, run[j].key)->matched)
					m = 2;
		}
		q->smemo[x] = m;
	}
	return m == 2;
}

/* Adds n stack totals (the stacks under the scan's ids; zeros passed
 * over) to the scratch tree; their sum. */
static uint64_t add_sums(struct fg *q, const struct scan_ids *ids, long n, const uint32_t *stacks,
			 const uint64_t *sums)
{
	uint64_t value = 0;
	for (long i = 0; i < n; i++) {
		if (!sums[i])
			continue;
		add_leaf(q, scan_id(ids, stacks[i]), sums[i]);
		value += sums[i];
	}
	return value;
}

/* Adds one selected series to the scratch tree: its stack totals when
 * neither sampling nor time buckets need its rows. */
static void add_series(struct fg *q, const struct store_segment *p, uint32_t series)
{
	const struct scope *sc = &q->r->scope;
	const struct store_series *ps = &p->series[series];
	const struct scan_ids ids = scan_stack_ids(q->scan);
	if (q->keep_threshold == UINT64_MAX && !q->buckets) {
		const uint32_t *stacks;
		const uint64_t *sums;
		long n = scan_sums(q->scan, series, &stacks, &sums);
		hz_vote_add(&q->hz, ps->hz, add_sums(q, &ids, n, stacks, sums));
		return;
	}
	const struct store_row *rows;
	long n = scan_rows(q->scan, series, &rows);
	if (n <= 0)
		return;
	bool inside = scan_series_inside(q->scan, ps);
	uint64_t matched = 0, value = 0;
	for (long i = 0; i < n; i++) {
		const struct store_row *row = &rows[i];
		if (!inside && !scan_in_range(sc, row->ts_ms))
			continue;
		/* Sampling keeps a row by a hash of its content: the same rows
		 * on every run of the same query. */
		if (q->keep_threshold != UINT64_MAX &&
		    hash_mix(hash_u64((uint64_t)row->ts_ms), (uint64_t)row->stack << 32 | ps->labels) >=
			    q->keep_threshold)
			continue;
		matched++;
		value += row->value;
		uint32_t stack = scan_id(&ids, row->stack);
		add_leaf(q, stack, row->value);
		if (q->buckets && (!q->r->search || stack_matches(q, p, stack))) {
			uint64_t span = (uint64_t)(sc->end_ms - sc->start_ms);
			uint64_t b = (uint64_t)(row->ts_ms - sc->start_ms) * q->r->num_stat_buckets / span;
			if (b < q->r->num_stat_buckets)
				q->buckets[b] += row->value;
		}
	}
	scan_count_matched(q->scan, matched);
	hz_vote_add(&q->hz, ps->hz, value);
}

/* A group with at least one leaf per this many part nodes is folded
 * over every node of the part rather than only the touched ones. */
#define DENSE_LEAVES 16

#define FOR_BITS_UP(q, n)                                                             \
	for (size_t w_ = (q)->lo_word; w_ < (q)->hi_word; w_++)                       \
		for (uint64_t b_ = (q)->bits[w_]; b_; b_ &= b_ - 1)                  \
			for (uint32_t n = (uint32_t)(w_ * 64 + (size_t)__builtin_ctzll(b_)), once_ = 1; \
			     once_; once_ = 0)

/* Folds the scratch tree of one group into the output tree under node
 * `group`, then clears the scratch. */
static void fold_group(struct fg *q, const struct store_segment *p, uint32_t group)
{
	/* No row of the group was kept (none in the time range, sampled out,
	 * or a damaged chunk): nothing to fold, and the scratch is clear. The
	 * code below assumes a touched root: without one, tot[0] is stale and
	 * the touched-word range [lo, hi) is empty-inverted (SIZE_MAX, 0). */
	if (!q->nleaves)
		return;
	/* Mark every touched node: the leaves and their ancestors. When the
	 * leaves are many (a whole part's rollup: every node is an ancestor
	 * of some leaf), every node is marked instead: the passes below then
	 * run over the arrays in order, and an untouched node adds zeros. */
	if (p->nnodes && q->nleaves * DENSE_LEAVES >= p->nnodes) {
		size_t words = (p->nnodes + 63) / 64;
		memset(q->bits, 0xff, words * sizeof(uint64_t));
		if (p->nnodes % 64)
			q->bits[words - 1] = (1ull << (p->nnodes % 64)) - 1;
		memset(q->tot, 0, p->nnodes * sizeof(uint64_t));
		q->lo_word = 0;
		q->hi_word = words;
	} else {
		for (size_t i = 0; i < q->nleaves; i++)
			for (uint32_t n = q->leaves[i];; n = p->node_parent[n]) {
				if (test_set(q, n) || n == 0)
					break;
			}
	}
	q->distinct_stacks += q->nleaves;
	/* Search: only stacks through a matching function count. */
	if (q->r->search) {
		FOR_BITS_UP(q, n)
		{
			uint8_t m = n ? q->match[p->node_parent[n]] : 0;
			if (!m && n) {
				uint32_t nr;
				const struct drun *run = display_frame(q->disp, p->node_frame[n], &nr);
				for (uint32_t j = 0; j < nr && !m; j++)
					m = display_get(q->disp, run[j].key)->matched;
			}
			q->match[n] = m;
		}
		for (size_t i = 0; i < q->nleaves; i++)
			if (!q->match[q->leaves[i]])
				q->self[q->leaves[i]] = 0;
	}
	/* Totals, children before parents: ids descend. */
	for (size_t w = q->hi_word; w-- > q->lo_word;) {
		uint64_t b = q->bits[w];
		while (b) {
			int hb = 63 - __builtin_clzll(b);
			b &= ~(1ull << hb);
			uint32_t n = (uint32_t)(w * 64 + (size_t)hb);
			q->tot[n] += q->self[n];
			if (n)
				q->tot[p->node_parent[n]] += q->tot[n];
		}
	}
	/* Map each touched node onto the output tree, parents first. */
	bool masking = display_has_masks(q->disp);
	q->out[0] = group;
	q->tree.nodes[group].self += q->self[0];
	FOR_BITS_UP(q, n)
	{
		if (n == 0)
			continue;
		uint64_t t = q->tot[n];
		uint32_t o = q->out[p->node_parent[n]];
		if (t) {
			uint32_t nr;
			const struct drun *run = display_frame(q->disp, p->node_frame[n], &nr);
			for (uint32_t j = 0; j < nr; j++) {
				if (masking && display_get(q->disp, run[j].key)->masked)
					continue;
				uint32_t c = otree_child(&q->tree, o, run[j].key);
				if (c == o)
					continue; /* an [other] node takes its whole subtree once */
				o = c;
				q->tree.nodes[o].total += t;
				otree_vote(&q->tree, o, run[j].line, t);
			}
			q->tree.nodes[o].self += q->self[n];
		}
		q->out[n] = o;
	}
	for (uint32_t g = group; g != UINT32_MAX; g = q->tree.nodes[g].parent)
		q->tree.nodes[g].total += q->tot[0];
	q->total += q->tot[0];
	/* Clear the scratch for the next group. */
	for (size_t i = 0; i < q->nleaves; i++)
		q->self[q->leaves[i]] = 0;
	memset(q->bits + q->lo_word, 0, (q->hi_word - q->lo_word) * sizeof(uint64_t));
	q->lo_word = SIZE_MAX;
	q->hi_word = 0;
	q->nleaves = 0;
}

/* The output node of the synthetic group of label set `labels`. */
static uint32_t group_node(struct fg *q, const struct store_segment *p, uint32_t labels)
{
	if (!q->r->nsynthetic)
		return 0;
	if (labels < p->nlabels && q->group_of[labels] != UINT32_MAX)
		return q->group_of[labels];
	uint32_t node = 0;
	for (size_t s = 0; s < q->r->nsynthetic; s++) {
		enum fg_synthetic syn = q->r->synthetic[s];
		const char *v = store_seg_label_value(p, labels, synthetic_attrs[syn]);
		char none[64];
		bool absent = !v || !*v;
		if (absent) {
			snprintf(none, sizeof(none), "[no %s]", synthetic_names[syn]);
			v = none;
		}
		uint32_t key = display_key(q->disp, DT_SYNTHETIC, v, "", NULL);
		if (absent)
			display_mark_absent(q->disp, key);
		node = otree_child(&q->tree, node, key);
	}
	if (labels < p->nlabels)
		q->group_of[labels] = node;
	return node;
}

/* Keeps the tree's memory bounded (otree_prune): the group nodes held
 * for the rest of the part are renamed with it. */
static void prune(struct fg *q, const struct store_segment *p)
{
	uint32_t *remap = otree_prune(&q->tree, q->keep_after_prune, q->other_key);
	for (size_t i = 0; i < q->nsel; i++)
		q->sel[i].group = remap[q->sel[i].group];
	for (size_t i = 0; q->r->nsynthetic && i < p->nlabels; i++)
		if (q->group_of[i] != UINT32_MAX)
			q->group_of[i] = remap[q->group_of[i]];
	free(remap);
	q->prune_at = MAX(q->prune_at, 2 * q->tree.n);
	q->pruned++;
}

static int cmp_sel(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Adds part p's rows to the scratch and, unless carry is set, folds them
 * into the output tree. With carry (no grouping, no time buckets) they
 * stay in the scratch for a later part with the same dictionaries to fold
 * (flamegraph_query). */
static void do_part(struct fg *q, const struct store_segment *p, bool carry)
{
	if (!carry)
		display_part(q->disp, p);
	/* Its stacks, under the ids of the part that will fold them. */
	const struct scan_ids ids = scan_stack_ids(q->scan);
	grow_scratch(q, ids.count + 1);
	if (q->buckets && q->r->search)
		memset(q->smemo, 0, p->nnodes + 1);
	/* No grouping, no sampling, no time buckets: the part's rollup, when
	 * the query may read it, holds everything in one list. */
	const uint32_t *stacks;
	const uint64_t *sums;
	uint16_t hz;
	long n;
	if (!q->r->nsynthetic && q->keep_threshold == UINT64_MAX && !q->buckets &&
	    (n = scan_rollup_sums(q->scan, &stacks, &sums, &hz)) >= 0) {
		hz_vote_add(&q->hz, hz, add_sums(q, &ids, n, stacks, sums));
		if (!carry)
			fold_group(q, p, 0);
		return;
	}
	xgrow((void **)&q->group_of, &q->capgroup_of, p->nlabels + 1, sizeof(uint32_t));
	memset(q->group_of, 0xff, (p->nlabels + 1) * sizeof(uint32_t));
	q->nsel = 0;
	for (uint32_t s = 0; s < p->nseries; s++) {
		if (!scan_selected(q->scan, s))
			continue;
		xgrow((void **)&q->sel, &q->capsel, q->nsel + 1, sizeof(*q->sel));
		q->sel[q->nsel].group = group_node(q, p, p->series[s].labels);
		q->sel[q->nsel++].series = s;
	}
	xqsort(q->sel, q->nsel, sizeof(*q->sel), cmp_sel);
	for (size_t i = 0; i < q->nsel;) {
		uint32_t g = q->sel[i].group;
		for (; i < q->nsel && q->sel[i].group == g; i++)
			add_series(q, p, q->sel[i].series);
		if (carry)
			continue; /* one group, 0: no grouping */
		fold_group(q, p, g);
		if (q->tree.n > q->prune_at)
			prune(q, p);
	}
	/* What earlier parts carried is folded here even when this part
	 * selects nothing itself (a head holding only other projects or
	 * executables): it has their dictionaries. Without grouping there
	 * is one group, 0; with grouping nothing is ever carried. */
	if (!carry && q->nleaves) {
		fold_group(q, p, 0);
		if (q->tree.n > q->prune_at)
			prune(q, p);
	}
}

/* Folds what earlier parts carried with the dictionaries of p, which hold
 * every id they used. */
static void fold_carried(struct fg *q, const struct store_segment *p)
{
	display_part(q->disp, p);
	fold_group(q, p, 0);
	if (q->tree.n > q->prune_at)
		prune(q, p);
}

static void fg_free(struct fg *q)
{
	scan_close(q->scan);
	display_free(q->disp);
	otree_free(&q->tree);
	free_all(q->self, q->tot, q->out, q->match, q->smemo, q->bits, q->leaves, q->group_of,
	         q->sel, q->buckets);
}

int flamegraph_query(struct store *st, struct symbols *sym, struct fetcher *fetch,
		     const struct fg_request *r, struct buf *out, struct buf *err)
{
	uint64_t t0 = now_mono_ns();
	struct fg q = { .r = r, .keep_threshold = UINT64_MAX, .lo_word = SIZE_MAX };
	struct display_opts o = { .raw_names = r->raw_names, .verbose_names = r->verbose_names,
				  .masks = (const char *const *)r->masks, .nmasks = r->nmasks,
				  .search = r->search };
	if (!(q.disp = display_new(sym, fetch, &o, "filter.frame_mask.patterns", err)) ||
	    !(q.scan = scan_open(st, &r->scope, err))) {
		fg_free(&q);
		return -1;
	}
	if (r->num_stat_buckets)
		q.buckets = xcalloc(r->num_stat_buckets, sizeof(uint64_t));
	otree_init(&q.tree, display_key(q.disp, DT_ROOT, "root", "", NULL));
	q.other_key = display_key(q.disp, DT_OTHER, "[other]", "", NULL);
	q.keep_after_prune = MAX((size_t)r->max_nodes * 2, (size_t)100000);
	q.prune_at = MAX(q.keep_after_prune * 2, (size_t)FG_PRUNE_AT);
	if (r->prune_at) {
		q.prune_at = r->prune_at;
		q.keep_after_prune = MAX(r->prune_at / 2, 1);
	}

	size_t nparts = scan_parts(q.scan);
	if (r->num_samples) {
		for (size_t i = 0; i < nparts; i++) {
			const struct store_segment *p = scan_begin(q.scan, i);
			if (!p)
				continue;
			for (uint32_t s = 0; s < p->nseries; s++) {
				int64_t v = scan_selected(q.scan, s) ? scan_series_total(q.scan, s) : 0;
				q.sampled_from += v > 0 ? (uint64_t)v : 0;
			}
			scan_end(q.scan, i);
		}
		if (q.sampled_from > r->num_samples)
			q.keep_threshold = (uint64_t)((double)UINT64_MAX *
						      ((double)r->num_samples / (double)q.sampled_from));
	}
	/* The sealed heads and the head hold copies of one stack tree
	 * (scan_shares_later): their rows are folded once, with the last one
	 * begun, which is kept begun (held) until then. */
	bool may_carry = !r->nsynthetic && !q.buckets;
	if (may_carry)
		scan_carry_blocks(q.scan);
	const struct store_segment *held = NULL;
	size_t held_i = 0;
	for (size_t i = 0; i < nparts; i++) {
		const struct store_segment *p = scan_begin(q.scan, i);
		if (!p)
			continue;
		if (held && !scan_same_dictionary(q.scan, held_i, i))
			fold_carried(&q, held);
		if (held)
			scan_end(q.scan, held_i); /* p, when it goes on, holds its ids */
		held = NULL;
		bool carry = may_carry && scan_shares_later(q.scan, i);
		do_part(&q, p, carry);
		if (carry) {
			held = p;
			held_i = i;
		} else {
			scan_end(q.scan, i);
		}
		if (display_check(q.disp, NULL) || scan_check(q.scan, NULL))
			break; /* a pattern reached a bound: the query fails below */
	}
	if (held) {
		fold_carried(&q, held);
		scan_end(q.scan, held_i);
	}
	int rc = display_check(q.disp, err);
	if (!rc)
		rc = scan_check(q.scan, err);
	if (rc) {
		fg_free(&q);
		return rc;
	}

	uint16_t hz = hz_vote_best(&q.hz);
	if (r->format != FG_FORMAT_JSON) {
		struct buf name = { 0 };
		buf_printf(&name, "ember %s flamegraph of project %s", event_kind_name(r->scope.kind),
			   r->scope.project_id);
		struct export_info info = { .kind = r->scope.kind, .hz = hz, .total = q.total,
					    .start_ms = r->scope.start_ms, .end_ms = r->scope.end_ms,
					    .name = name.data };
		rc = export_tree(r->format, &q.tree, q.disp, r->max_nodes, &info, out, err);
		buf_free(&name);
		fg_free(&q);
		return rc;
	}
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "unit", event_kind_unit(r->scope.kind));
	jsonw_kv_u64(&w, "sample_rate_hz", hz);
	jsonw_kv_u64(&w, "total", q.total);
	if (r->num_samples)
		jsonw_kv_u64(&w, "sampled_from", q.sampled_from);
	jsonw_key(&w, "root");
	size_t written = otree_write(&q.tree, q.disp, r->max_nodes, &w);
	if (q.buckets) {
		jsonw_key(&w, "stats");
		jsonw_begin_object(&w);
		jsonw_kv_i64(&w, "start_ts", r->scope.start_ms);
		jsonw_kv_double(&w, "bucket_ms",
				(double)(r->scope.end_ms - r->scope.start_ms) / r->num_stat_buckets);
		jsonw_key(&w, "values");
		jsonw_begin_array(&w);
		for (uint32_t i = 0; i < r->num_stat_buckets; i++)
			jsonw_u64(&w, q.buckets[i]);
		jsonw_end_array(&w);
		jsonw_end_object(&w);
	}
	jsonw_kv_u64(&w, "nodes", q.tree.n);
	jsonw_kv_u64(&w, "nodes_written", written);
	jsonw_kv_u64(&w, "distinct_stacks", q.distinct_stacks);
	jsonw_kv_u64(&w, "symbols_pending", display_pending(q.disp));
	if (q.pruned)
		jsonw_kv_u64(&w, "tree_pruned", q.pruned);
	jsonw_key(&w, "query_stats");
	scan_stats_json(q.scan, t0, &w);
	jsonw_end_object(&w);
	rc = jsonw_finish_answer(&w, err);
	fg_free(&q);
	return rc;
}
