/* functions.c - see functions.h. */
#include "functions.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "display.h"
#include "request.h"
#include "jsonw.h"
#include "tree.h"
#include "util.h"

#define SANDWICH_DEFAULT_NODES 2000
#define SANDWICH_PRUNE_AT 4000000

/* --- requests ---------------------------------------------------------------- */

/* "frame_types": ["cuda_kernel", "cuda_memcpy", ...]: a set of stored
 * frame types (display.h frame_type_parse) as bits 1 << type; absent,
 * null or [] is 0 (any type). */
static int frame_types_parse(const json_t *v, uint32_t *mask, struct buf *err)
{
	_Static_assert(SFT_MAX < 32, "frame type bits fit in 32 bits");
	*mask = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) > 32) {
		buf_puts(err, "frame_types: expected an array of at most 32 frame type names");
		return -1;
	}
	size_t i;
	const json_t *e;
	json_array_foreach(v, i, e) {
		int t = json_is_string(e) ? frame_type_parse(json_string_value(e)) : -1;
		if (t < 0) {
			buf_printf(err, "frame_types[%zu]: expected a frame type (native, kernel, cpython, "
				   "go, jvm, v8, ruby, php, perl, dotnet, cuda_launch, cuda_kernel, "
				   "cuda_sass, cuda_stall, cuda_memcpy, cuda_memset, cuda_sync, nvtx, error)", i);
			return -1;
		}
		*mask |= 1u << t;
	}
	return 0;
}

int fn_request_parse(struct fn_request *r, enum fn_query what, const char *body, size_t len,
		     struct buf *err)
{
	memset(r, 0, sizeof(*r));
	r->what = what;
	r->limit = FN_DEFAULT_LIMIT;
	r->max_nodes = SANDWICH_DEFAULT_NODES;
	json_t *doc = req_load(body, len, err);
	if (!doc)
		return -1;
	int rc = -1;
	if (what == FN_DIFF) {
		if (scope_parse(json_object_get(doc, "baseline"), "baseline", &r->baseline, err) < 0 ||
		    scope_parse(json_object_get(doc, "comparison"), "comparison", &r->scope, err) < 0)
			goto out;
		if (r->baseline.kind != r->scope.kind) {
			buf_puts(err, "baseline.event_kind and comparison.event_kind must be the same");
			goto out;
		}
		if (req_patterns(json_object_get(doc, "frame_mask"), "frame_mask", FN_MAX_MASKS,
				 r->masks, &r->nmasks, err) < 0)
			goto out;
	} else {
		const json_t *filter = json_object_get(doc, "filter");
		if (scope_parse(filter, "filter", &r->scope, err) < 0 ||
		    req_patterns(json_object_get(filter, "frame_mask"), "filter.frame_mask",
				 FN_MAX_MASKS, r->masks, &r->nmasks, err) < 0)
			goto out;
	}
	if (frame_types_parse(json_object_get(doc, "frame_types"), &r->frame_types, err) < 0)
		goto out;
	uint64_t limit = r->limit, max_nodes = r->max_nodes;
	if (req_search(doc, &r->search, err) < 0 ||
	    req_bool(doc, "raw_names", &r->raw_names, err) < 0 ||
	    req_bool(doc, "verbose_names", &r->verbose_names, err) < 0 ||
	    req_choice(doc, "sort", "self", "total", &r->sort_total, err) < 0 ||
	    req_choice(doc, "cpu_mode", "relative", "absolute", &r->absolute, err) < 0 ||
	    req_count(doc, "limit", FN_MAX_LIMIT, &limit, err) < 0 ||
	    req_count(doc, "max_nodes", 1000000, &max_nodes, err) < 0)
		goto out;
	if (max_nodes < 2) {
		buf_puts(err, "max_nodes: expected 2 to 1000000 (the root and an [other] node at least)");
		goto out;
	}
	r->limit = (uint32_t)limit;
	r->max_nodes = (uint32_t)max_nodes;
	if (what == FN_SANDWICH) {
		if (req_string(doc, "function", 4096, &r->function, err) < 0 ||
		    req_string(doc, "binary", 4096, &r->binary, err) < 0)
			goto out;
		if (!r->function || !*r->function) {
			buf_puts(err, "function: expected the name of the function to center on");
			goto out;
		}
	}
	rc = 0;
out:
	json_decref(doc);
	if (rc < 0)
		fn_request_free(r);
	return rc;
}

void fn_request_set_project(struct fn_request *r, const char *project_id)
{
	snprintf(r->scope.project_id, sizeof(r->scope.project_id), "%s", project_id);
	snprintf(r->baseline.project_id, sizeof(r->baseline.project_id), "%s", project_id);
}

void fn_request_free(struct fn_request *r)
{
	scope_free(&r->scope);
	scope_free(&r->baseline);
	for (size_t i = 0; i < r->nmasks; i++)
		free(r->masks[i]);
	r->nmasks = 0;
	free_all(r->search, r->function, r->binary);
	r->search = r->function = r->binary = NULL;
}

/* --- the per-function table ------------------------------------------------- */

struct fstat {
	uint64_t self, total;
};

struct ftab {
	struct fstat *v;
	size_t cap;
	uint64_t total;
	uint16_t hz;
	struct scope_context ctx;
};

/* What one pass over a scope needs, shared by the tables of a diff. */
struct fn_pass {
	struct display *d;
	uint32_t *stamp; /* per key: the stack it was last counted for */
	size_t capstamp;
	uint32_t stack_gen;
	uint32_t keys[DISPLAY_MAX_DEPTH], lines[DISPLAY_MAX_DEPTH];
	/* sandwich */
	int8_t *target; /* per key: -1 not yet known, 0 no, 1 the function */
	size_t captarget;
	const struct fn_request *r;
	struct otree callers, callees;
	uint32_t other_key;
	struct fstat center;
	int center_type; /* the function's frame type (enum of dkey.type), -1 = not seen */
};

static void grow_keys(struct fn_pass *f, struct ftab *t)
{
	size_t n = display_count(f->d);
	if (t && t->cap < n) {
		size_t old = t->cap;
		xgrow((void **)&t->v, &t->cap, n, sizeof(*t->v));
		memset(t->v + old, 0, (t->cap - old) * sizeof(*t->v));
	}
	if (f->capstamp < n) {
		size_t old = f->capstamp;
		xgrow((void **)&f->stamp, &f->capstamp, n, sizeof(uint32_t));
		memset(f->stamp + old, 0, (f->capstamp - old) * sizeof(uint32_t));
	}
	if (f->captarget < n) {
		size_t old = f->captarget;
		xgrow((void **)&f->target, &f->captarget, n, 1);
		memset(f->target + old, -1, f->captarget - old);
	}
}

static bool is_target(struct fn_pass *f, uint32_t key)
{
	if (f->target[key] < 0) {
		const struct dkey *k = display_get(f->d, key);
		f->target[key] = strcmp(display_str(f->d, k->name), f->r->function) == 0 &&
				 (!f->r->binary || strcmp(display_str(f->d, k->binary), f->r->binary) == 0);
		if (f->target[key] == 1 && f->center_type < 0)
			f->center_type = k->type;
	}
	return f->target[key] == 1;
}

/* One stack with value v: function totals, or the sandwich trees. */
static void add_stack(struct fn_pass *f, struct ftab *t, size_t n, uint64_t v)
{
	if (f->r->what == FN_SANDWICH) {
		size_t at = 0;
		while (at < n && !is_target(f, f->keys[at]))
			at++;
		if (at == n)
			return;
		f->center.total += v;
		if (at == n - 1)
			f->center.self += v;
		/* Callees from the outermost call of the function (recursion
		 * below it stays in the callee tree), callers upwards. */
		uint32_t node = 0;
		f->callees.nodes[0].total += v;
		for (size_t i = at + 1; i < n; i++) {
			uint32_t c = otree_child(&f->callees, node, f->keys[i]);
			if (c == node)
				break;
			node = c;
			f->callees.nodes[node].total += v;
			otree_vote(&f->callees, node, f->lines[i], v);
		}
		f->callees.nodes[node].self += v;
		node = 0;
		f->callers.nodes[0].total += v;
		for (size_t i = at; i-- > 0;) {
			uint32_t c = otree_child(&f->callers, node, f->keys[i]);
			if (c == node)
				break; /* an [other] node takes the rest once */
			node = c;
			f->callers.nodes[node].total += v;
			otree_vote(&f->callers, node, f->lines[i], v);
		}
		f->callers.nodes[node].self += v;
		/* Memory stays bounded whatever the function (tree.h). */
		struct otree *trees[2] = { &f->callers, &f->callees };
		for (int i = 0; i < 2; i++)
			if (trees[i]->n > SANDWICH_PRUNE_AT)
				free(otree_prune(trees[i], MAX((size_t)f->r->max_nodes * 2, (size_t)100000),
						 f->other_key));
		return;
	}
	if (!n)
		return;
	t->v[f->keys[n - 1]].self += v;
	if (++f->stack_gen == 0) { /* wrapped: forget every stamp */
		memset(f->stamp, 0, f->capstamp * sizeof(uint32_t));
		f->stack_gen = 1;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t k = f->keys[i];
		if (f->stamp[k] != f->stack_gen) {
			f->stamp[k] = f->stack_gen;
			t->v[k].total += v;
		}
	}
}

/* Adds the stacks summed in ss, named by part p's ids, to t, and clears
 * ss for the next part. */
static void add_sums(struct fn_pass *f, struct ftab *t, struct stack_sums *ss,
		     const struct store_segment *p)
{
	display_part(f->d, p);
	stack_sums_order(ss, p->nnodes + 1);
	for (size_t j = 0; j < ss->n; j++) {
		uint32_t leaf = ss->leaves[j];
		size_t n = display_stack(f->d, leaf, f->keys, f->lines, DISPLAY_MAX_DEPTH);
		grow_keys(f, t);
		add_stack(f, t, n, ss->v[leaf]);
	}
	stack_sums_clear(ss);
}

/* Reads one scope into t (or, for a sandwich, into the pass's trees). */
static int collect(struct fn_pass *f, struct store *st, const struct scope *sc, struct ftab *t,
		   uint64_t t0, struct buf *stats, struct buf *err)
{
	struct scan *scan = scan_open(st, sc, err);
	if (!scan)
		return -1;
	scan_carry_blocks(scan);
	struct stack_sums ss = { 0 };
	/* The sealed heads and the head hold copies of one stack tree
	 * (scan_shares_later): their sums are added up and walked once, with
	 * the last one begun, which is kept begun (held) until then. */
	const struct store_segment *held = NULL;
	size_t held_i = 0;
	for (size_t i = 0; i < scan_parts(scan); i++) {
		const struct store_segment *p = scan_begin(scan, i);
		if (!p)
			continue;
		if (held && !scan_same_dictionary(scan, held_i, i))
			add_sums(f, t, &ss, held);
		if (held)
			scan_end(scan, held_i); /* p, when it goes on, holds its ids */
		held = NULL;
		stack_sums_add_part(&ss, scan, p);
		if (scan_shares_later(scan, i)) {
			held = p;
			held_i = i;
			continue;
		}
		add_sums(f, t, &ss, p);
		scan_end(scan, i);
		if (display_check(f->d, NULL) || scan_check(scan, NULL))
			break; /* a pattern reached a bound: the query fails */
	}
	if (held) {
		add_sums(f, t, &ss, held);
		scan_end(scan, held_i);
	}
	int rc = display_check(f->d, err);
	if (!rc)
		rc = scan_check(scan, err);
	t->total = ss.total;
	t->hz = hz_vote_best(&ss.hz);
	stack_sums_free(&ss);
	scope_context_read(st, sc, &t->ctx);
	struct jsonw sw;
	jsonw_init(&sw, stats);
	scan_stats_json(scan, t0, &sw);
	if (!rc)
		rc = jsonw_finish_answer(&sw, err);
	scan_close(scan);
	return rc;
}

/* The comparison of a diff is read on its own thread, with its own
 * display, while the caller reads the baseline: the two scopes share
 * nothing but the store and the symbols, which serve concurrent queries
 * anyway. Its table is then moved into the baseline display's keys. */
struct side {
	struct fn_pass f;
	struct store *st;
	const struct scope *sc;
	struct ftab t;
	uint64_t t0;
	struct buf stats, err;
	int rc;
};

static void *collect_side(void *arg)
{
	struct side *x = arg;
	x->rc = collect(&x->f, x->st, x->sc, &x->t, x->t0, &x->stats, &x->err);
	return NULL;
}

/* Re-keys t, counted in display from, by the same functions' keys in to. */
static void rekey(struct ftab *t, const struct display *from, struct display *to)
{
	struct fstat *v = NULL;
	size_t cap = 0, nk = MIN(t->cap, display_count(from));
	for (uint32_t k = 0; k < nk; k++) {
		if (!t->v[k].total && !t->v[k].self)
			continue;
		const struct dkey *dk = display_get(from, k);
		uint32_t at = display_key(to, dk->type, display_str(from, dk->name),
					  display_str(from, dk->binary),
					  dk->file ? display_str(from, dk->file) : NULL);
		if (dk->unsymbolized)
			display_mark_unsymbolized(to, at, dk->address);
		if (cap <= at) {
			size_t old = cap;
			xgrow((void **)&v, &cap, (size_t)at + 1, sizeof(*v));
			memset(v + old, 0, (cap - old) * sizeof(*v));
		}
		v[at].self += t->v[k].self;
		v[at].total += t->v[k].total;
	}
	free(t->v);
	t->v = v;
	t->cap = cap;
}

/* --- answers ------------------------------------------------------------------- */

static double percent(const struct fn_request *r, const struct ftab *t, uint64_t v)
{
	if (r->absolute && r->scope.kind == SEK_ON_CPU) {
		if (!t->ctx.host_cpus)
			return NAN;
		return scope_cores(&t->ctx, r->scope.kind, t->hz, v) / (double)t->ctx.host_cpus * 100.0;
	}
	return t->ctx.total ? (double)v / (double)t->ctx.total * 100.0 : NAN;
}

static void put_values(struct jsonw *w, const struct fn_request *r, const struct ftab *t,
		       const struct fstat *v, const char *prefix)
{
	static const char *const names[] = { "self", "total", "self_cores", "total_cores",
					     "self_percent", "total_percent" };
	char name[6][64];
	for (size_t i = 0; i < 6; i++)
		snprintf(name[i], sizeof(name[i]), "%s%s", prefix, names[i]);
	jsonw_kv_u64(w, name[0], v->self);
	jsonw_kv_u64(w, name[1], v->total);
	jsonw_kv_double(w, name[2], scope_cores(&t->ctx, r->scope.kind, t->hz, v->self));
	jsonw_kv_double(w, name[3], scope_cores(&t->ctx, r->scope.kind, t->hz, v->total));
	jsonw_kv_double(w, name[4], percent(r, t, v->self));
	jsonw_kv_double(w, name[5], percent(r, t, v->total));
}

static void put_context(struct jsonw *w, const char *name, const struct ftab *t)
{
	jsonw_key(w, name);
	jsonw_begin_object(w);
	jsonw_kv_u64(w, "total", t->total);
	scope_context_json(w, &t->ctx, t->hz);
	jsonw_end_object(w);
}

struct sort_ctx {
	const struct display *d;
	const struct ftab *a, *b; /* b: the comparison of a diff, else NULL */
	bool by_total;
	uint8_t kind;
};

/* The change of key k in cores, comparison minus baseline. */
static double diff_of(const struct sort_ctx *c, uint32_t k)
{
	uint64_t x = c->by_total ? c->a->v[k].total : c->a->v[k].self;
	uint64_t y = c->by_total ? c->b->v[k].total : c->b->v[k].self;
	return scope_cores(&c->b->ctx, c->kind, c->b->hz, y) -
	       scope_cores(&c->a->ctx, c->kind, c->a->hz, x);
}

static int cmp_keys(const void *pa, const void *pb, void *ctx)
{
	const struct sort_ctx *c = ctx;
	uint32_t x = *(const uint32_t *)pa, y = *(const uint32_t *)pb;
	if (c->b) {
		/* A diff: the largest change in cores first, either way. */
		double dx = fabs(diff_of(c, x)), dy = fabs(diff_of(c, y));
		if (dx != dy)
			return dx > dy ? -1 : 1;
	} else {
		uint64_t vx = c->by_total ? c->a->v[x].total : c->a->v[x].self;
		uint64_t vy = c->by_total ? c->a->v[y].total : c->a->v[y].self;
		if (vx != vy)
			return vx > vy ? -1 : 1;
	}
	/* Ties by name and binary, not by the order keys were met in. */
	const struct dkey *kx = display_get(c->d, x), *ky = display_get(c->d, y);
	int by = strcmp(display_str(c->d, kx->name), display_str(c->d, ky->name));
	if (!by)
		by = strcmp(display_str(c->d, kx->binary), display_str(c->d, ky->binary));
	return by ? by : (x < y ? -1 : x > y);
}

/* The keys worth listing: real functions with a value, matching search,
 * of one of the types asked (types: bits 1 << SFT_x; 0 = any). */
static uint32_t *listed(const struct display *d, const struct ftab *a, const struct ftab *b,
			uint32_t types, size_t *n)
{
	size_t nk = display_count(d);
	uint32_t *keys = xmalloc((nk + 1) * sizeof(uint32_t));
	*n = 0;
	for (uint32_t k = 0; k < nk; k++) {
		const struct dkey *dk = display_get(d, k);
		if (dk->type == DT_ROOT || dk->type == DT_SYNTHETIC || dk->type == DT_OTHER ||
		    dk->masked)
			continue;
		if (types && (dk->type >= 32 || !(types & (1u << dk->type))))
			continue;
		bool has = (k < a->cap && a->v[k].total) || (b && k < b->cap && b->v[k].total);
		if (!has)
			continue;
		if (display_has_search(d) && !dk->matched)
			continue;
		keys[(*n)++] = k;
	}
	return keys;
}

/* The members every answer starts with. */
static void put_head(struct jsonw *w, const struct fn_request *r, const struct ftab *t)
{
	jsonw_kv_str(w, "unit", event_kind_unit(r->scope.kind));
	jsonw_kv_u64(w, "sample_rate_hz", t->hz);
	jsonw_kv_u64(w, "total", t->total);
}

static void write_top(struct fn_pass *f, const struct fn_request *r, struct ftab *t,
		      struct jsonw *w)
{
	size_t n;
	uint32_t *keys = listed(f->d, t, NULL, r->frame_types, &n);
	struct sort_ctx sc = { f->d, t, NULL, r->sort_total, r->scope.kind };
	qsort_r(keys, n, sizeof(uint32_t), cmp_keys, &sc);
	put_head(w, r, t);
	event_kind_mode_json(w, r->scope.kind, r->absolute);
	put_context(w, "scope", t);
	jsonw_kv_u64(w, "symbols_pending", display_pending(f->d));
	jsonw_kv_u64(w, "functions_total", n);
	jsonw_key(w, "functions");
	jsonw_begin_array(w);
	for (size_t i = 0; i < n && i < r->limit; i++) {
		jsonw_begin_object(w);
		display_frame_json(w, f->d, keys[i], 0);
		put_values(w, r, t, &t->v[keys[i]], "");
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	free(keys);
}

static void write_diff(struct fn_pass *f, const struct fn_request *r, struct ftab *base,
		       struct ftab *cmp, struct jsonw *w)
{
	/* Both tables cover every key. */
	size_t nk = display_count(f->d);
	struct ftab *tabs[2] = { base, cmp };
	for (int i = 0; i < 2; i++)
		if (tabs[i]->cap < nk) {
			size_t old = tabs[i]->cap;
			xgrow((void **)&tabs[i]->v, &tabs[i]->cap, nk, sizeof(struct fstat));
			memset(tabs[i]->v + old, 0, (tabs[i]->cap - old) * sizeof(struct fstat));
		}
	size_t n;
	uint32_t *keys = listed(f->d, base, cmp, r->frame_types, &n);
	/* The largest change in cores first, as scopes may differ in length
	 * and sample rate. */
	struct sort_ctx sc = { f->d, base, cmp, r->sort_total, r->scope.kind };
	qsort_r(keys, n, sizeof(uint32_t), cmp_keys, &sc);
	jsonw_kv_str(w, "unit", event_kind_unit(r->scope.kind));
	put_context(w, "baseline", base);
	put_context(w, "comparison", cmp);
	event_kind_mode_json(w, r->scope.kind, r->absolute);
	size_t added = 0, removed = 0;
	for (size_t i = 0; i < n; i++) {
		added += base->v[keys[i]].total == 0;
		removed += cmp->v[keys[i]].total == 0;
	}
	jsonw_kv_u64(w, "functions_total", n);
	jsonw_kv_u64(w, "functions_new", added);
	jsonw_kv_u64(w, "functions_removed", removed);
	jsonw_key(w, "functions");
	jsonw_begin_array(w);
	for (size_t i = 0; i < n && i < r->limit; i++) {
		uint32_t k = keys[i];
		jsonw_begin_object(w);
		display_frame_json(w, f->d, k, 0);
		const char *status = base->v[k].total == 0 ? "new"
				   : cmp->v[k].total == 0  ? "removed"
							   : "changed";
		jsonw_kv_str(w, "status", status);
		put_values(w, r, base, &base->v[k], "baseline_");
		put_values(w, r, cmp, &cmp->v[k], "comparison_");
		double bs = scope_cores(&base->ctx, r->scope.kind, base->hz, base->v[k].self);
		double bt = scope_cores(&base->ctx, r->scope.kind, base->hz, base->v[k].total);
		double cs = scope_cores(&cmp->ctx, r->scope.kind, cmp->hz, cmp->v[k].self);
		double ct = scope_cores(&cmp->ctx, r->scope.kind, cmp->hz, cmp->v[k].total);
		jsonw_kv_double(w, "self_cores_change", cs - bs);
		jsonw_kv_double(w, "total_cores_change", ct - bt);
		jsonw_kv_double(w, "self_change_percent", bs > 0 ? (cs - bs) / bs * 100.0 : NAN);
		jsonw_kv_double(w, "total_change_percent", bt > 0 ? (ct - bt) / bt * 100.0 : NAN);
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	free(keys);
}

static void write_sandwich(struct fn_pass *f, const struct fn_request *r, struct ftab *t,
			   struct jsonw *w)
{
	put_head(w, r, t);
	put_context(w, "scope", t);
	event_kind_mode_json(w, r->scope.kind, r->absolute);
	jsonw_key(w, "function");
	jsonw_begin_object(w);
	jsonw_kv_str(w, "name", r->function);
	if (r->binary)
		jsonw_kv_str(w, "binary", r->binary);
	if (f->center_type >= 0)
		jsonw_kv_str(w, "frame_type", frame_type_name((uint8_t)f->center_type));
	put_values(w, r, t, &f->center, "");
	jsonw_end_object(w);
	jsonw_key(w, "callers");
	f->callers.nodes[0].self = 0;
	otree_write(&f->callers, f->d, r->max_nodes, w);
	jsonw_key(w, "callees");
	otree_write(&f->callees, f->d, r->max_nodes, w);
}

int functions_query(struct store *st, struct symbols *sym, struct fetcher *fetch,
		    const struct fn_request *r, struct buf *out, struct buf *err)
{
	uint64_t t0 = now_mono_ns();
	struct display_opts o = { .raw_names = r->raw_names, .verbose_names = r->verbose_names,
				  .masks = (const char *const *)r->masks, .nmasks = r->nmasks,
				  .search = r->search };
	struct fn_pass f = { .r = r, .center_type = -1 };
	if (!(f.d = display_new(sym, fetch, &o,
				r->what == FN_DIFF ? "frame_mask.patterns" : "filter.frame_mask.patterns",
				err)))
		return -1;
	uint32_t center = display_key(f.d, DT_SYNTHETIC, r->function ? r->function : "", "", NULL);
	otree_init(&f.callers, center);
	otree_init(&f.callees, center);
	f.other_key = display_key(f.d, DT_OTHER, "[other]", "", NULL);
	struct ftab a = { 0 }, b = { 0 };
	struct buf stats_a = { 0 }, stats_b = { 0 };
	struct jsonw w;
	jsonw_init(&w, out);
	int rc = -1;
	if (r->what == FN_DIFF) {
		struct side cmp = { .f = { .r = r, .center_type = -1 }, .st = st, .sc = &r->scope,
				    .t0 = t0 };
		pthread_t th;
		bool threaded = false;
		if ((cmp.f.d = display_new(sym, fetch, &o, "frame_mask.patterns", err)))
			threaded = pthread_create(&th, NULL, collect_side, &cmp) == 0;
		int rca = collect(&f, st, &r->baseline, &a, t0, &stats_a, err);
		if (threaded)
			pthread_join(th, NULL);
		else if (cmp.f.d)
			collect_side(&cmp);
		else
			cmp.rc = -1; /* display_new wrote err */
		if (rca == 0 && cmp.rc < 0 && cmp.err.len)
			buf_append(err, cmp.err.data, cmp.err.len);
		if (rca == 0 && cmp.rc == 0) {
			rekey(&cmp.t, cmp.f.d, f.d);
			rca = display_check(f.d, err); /* rekey matched the patterns again */
		}
		b = cmp.t;
		stats_b = cmp.stats;
		buf_free(&cmp.err);
		free_all(cmp.f.stamp, cmp.f.target);
		display_free(cmp.f.d);
		if (rca < 0 || cmp.rc < 0) {
			rc = rca < 0 ? rca : cmp.rc;
			goto out;
		}
		jsonw_begin_object(&w);
		write_diff(&f, r, &a, &b, &w);
		jsonw_key(&w, "baseline_query_stats");
		jsonw_raw(&w, stats_a.data, stats_a.len);
		jsonw_key(&w, "query_stats");
		jsonw_raw(&w, stats_b.data, stats_b.len);
	} else {
		if ((rc = collect(&f, st, &r->scope, &a, t0, &stats_a, err)) < 0)
			goto out;
		jsonw_begin_object(&w);
		if (r->what == FN_TOP)
			write_top(&f, r, &a, &w);
		else
			write_sandwich(&f, r, &a, &w);
		jsonw_key(&w, "query_stats");
		jsonw_raw(&w, stats_a.data, stats_a.len);
	}
	jsonw_end_object(&w);
	rc = jsonw_finish_answer(&w, err);
out:
	free_all(a.v, b.v);
	buf_free(&stats_a);
	buf_free(&stats_b);
	otree_free(&f.callers);
	otree_free(&f.callees);
	free_all(f.stamp, f.target);
	display_free(f.d);
	return rc;
}
