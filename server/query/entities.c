/* entities.c - see entities.h. */
#include "entities.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flamegraph.h"
#include "jsonw.h"
#include "request.h"
#include "strtab.h"
#include "util.h"

#define DEFAULT_LIMIT 20
#define DEFAULT_BUCKETS 60

/* --- requests ---------------------------------------------------------------- */

/* An entity or attribute name: "host", "shared_object" or an attribute
 * such as "k8s.pod.label[app]". */
static int parse_attribute(const json_t *doc, const char *field, bool required,
			   struct ent_request *r, struct buf *err)
{
	const json_t *v = json_object_get(doc, field);
	if (!v || json_is_null(v)) {
		if (required)
			buf_printf(err, "%s: expected an entity (host, namespace, deployment, pod, container, executable, thread, shared_object, ...) or an attribute name", field);
		return required ? -1 : 0;
	}
	const char *s = json_string_value(v);
	if (!s || !*s || json_string_length(v) > 256) {
		buf_printf(err, "%s: expected a name of at most 256 bytes", field);
		return -1;
	}
	if (strcmp(s, "shared_object") == 0) {
		if (r->what != ENT_TOP) {
			buf_printf(err, "%s: shared_object is an entity of top entities only", field);
			return -1;
		}
		r->shared_objects = true;
		return 0;
	}
	int syn = fg_synthetic_from_name(s);
	r->attribute = xstrdup(syn >= 0 ? fg_synthetic_attribute((enum fg_synthetic)syn) : s);
	return 0;
}

int ent_request_parse(struct ent_request *r, enum ent_query what, const char *body, size_t len,
		      struct buf *err)
{
	memset(r, 0, sizeof(*r));
	r->what = what;
	r->limit = DEFAULT_LIMIT;
	r->num_buckets = DEFAULT_BUCKETS;
	json_t *doc = req_load(body, len, err);
	if (!doc)
		return -1;
	int rc = -1;
	if (scope_parse(json_object_get(doc, "filter"), "filter", &r->scope, err) < 0)
		goto out;
	if (what == ENT_TOP && parse_attribute(doc, "entity", true, r, err) < 0)
		goto out;
	if (what == ENT_LABELS && parse_attribute(doc, "name", false, r, err) < 0)
		goto out;
	if (what == ENT_TIMESERIES && parse_attribute(doc, "group_by", false, r, err) < 0)
		goto out;
	uint64_t limit = r->limit, buckets = r->num_buckets;
	if (req_count(doc, "limit", ENT_MAX_LIMIT, &limit, err) < 0 ||
	    req_count(doc, "num_buckets", ENT_MAX_BUCKETS, &buckets, err) < 0 ||
	    req_choice(doc, "cpu_mode", "relative", "absolute", &r->absolute, err) < 0)
		goto out;
	r->limit = (uint32_t)limit;
	r->num_buckets = (uint32_t)buckets;
	rc = 0;
out:
	json_decref(doc);
	if (rc < 0)
		ent_request_free(r);
	return rc;
}

void ent_request_free(struct ent_request *r)
{
	scope_free(&r->scope);
	free(r->attribute);
	r->attribute = NULL;
}

/* --- groups ---------------------------------------------------------------------- */

struct group {
	uint64_t self, total;
	uint32_t cpus;     /* hosts: their logical CPUs */
	uint32_t nvalues;  /* label names: distinct values */
	uint32_t stamp;
	double *cores;     /* time series: per bucket */
};

struct groups {
	struct strtab names;
	struct group *g;
	size_t cap;
	struct hz_vote hz;
	uint32_t nbuckets;
};

static void groups_init(struct groups *gs, uint32_t nbuckets)
{
	memset(gs, 0, sizeof(*gs));
	strtab_init(&gs->names);
	gs->nbuckets = nbuckets;
}

static void groups_free(struct groups *gs)
{
	for (size_t i = 0; i < strtab_count(&gs->names) && i < gs->cap; i++)
		free(gs->g[i].cores);
	free(gs->g);
	strtab_free(&gs->names);
}

static struct group *group(struct groups *gs, const char *name, size_t len)
{
	uint32_t id = strtab_intern(&gs->names, name, len);
	if (id >= gs->cap) {
		size_t old = gs->cap;
		xgrow((void **)&gs->g, &gs->cap, id + 1, sizeof(*gs->g));
		memset(gs->g + old, 0, (gs->cap - old) * sizeof(*gs->g));
	}
	struct group *g = &gs->g[id];
	if (gs->nbuckets && !g->cores)
		g->cores = xcalloc(gs->nbuckets, sizeof(double));
	return g;
}

static const char *entity_label(const struct ent_request *r)
{
	if (r->shared_objects)
		return "shared_object";
	for (int i = 0; i < SYN_COUNT; i++)
		if (strcmp(fg_synthetic_attribute((enum fg_synthetic)i), r->attribute) == 0)
			return fg_synthetic_name((enum fg_synthetic)i);
	return r->attribute;
}

/* --- reading ---------------------------------------------------------------------- */

static uint32_t host_cpus(const struct store_segment *p, const char *host)
{
	uint32_t id = store_seg_find(p, host, strlen(host));
	return id == UINT32_MAX ? 0 : store_seg_host_cpus(p, id);
}

/* Top entities / labels: series totals into groups. */
/* Returns the sum of the selected series' values in the range. */
static uint64_t by_series(struct groups *gs, struct scan *scan, const struct store_segment *p,
			  const struct ent_request *r)
{
	uint64_t sum = 0;
	char none[300];
	for (uint32_t j = 0; j < p->nseries; j++) {
		if (!scan_selected(scan, j))
			continue;
		const struct store_series *ps = &p->series[j];
		int64_t v = scan_series_total(scan, j);
		if (v <= 0)
			continue;
		sum += (uint64_t)v;
		hz_vote_add(&gs->hz, ps->hz, (uint64_t)v);
		if (r->what == ENT_LABELS && !r->attribute) {
			const uint32_t *kv;
			size_t n = store_seg_label_pairs(p, ps->labels, &kv);
			for (size_t k = 0; k < n; k++) {
				const char *key = store_seg_str(p, kv[2 * k]);
				group(gs, key, strlen(key))->total += (uint64_t)v;
			}
			continue;
		}
		const char *val = store_seg_label_value(p, ps->labels, r->attribute);
		if (!val || !*val) {
			snprintf(none, sizeof(none), "[no %s]", entity_label(r));
			val = none;
		}
		struct group *g = group(gs, val, strlen(val));
		g->total += (uint64_t)v;
		g->self += (uint64_t)v;
		if (strcmp(r->attribute, "host.name") == 0 && val != none)
			g->cpus = MAX(g->cpus, host_cpus(p, val));
	}
	return sum;
}

/* Label names: how many distinct values each has. */
static void count_values(struct groups *gs, struct strtab *seen, const struct store_segment *p,
			 struct scan *scan)
{
	struct buf kv = { 0 };
	for (uint32_t j = 0; j < p->nseries; j++) {
		if (!scan_selected(scan, j))
			continue;
		const uint32_t *pairs;
		size_t n = store_seg_label_pairs(p, p->series[j].labels, &pairs);
		for (size_t k = 0; k < n; k++) {
			buf_reset(&kv);
			buf_puts(&kv, store_seg_str(p, pairs[2 * k]));
			buf_putc(&kv, '=');
			buf_puts(&kv, store_seg_str(p, pairs[2 * k + 1]));
			size_t before = strtab_count(seen);
			strtab_intern(seen, kv.data, kv.len);
			if (strtab_count(seen) != before) {
				const char *key = store_seg_str(p, pairs[2 * k]);
				group(gs, key, strlen(key))->nvalues++;
			}
		}
	}
	buf_free(&kv);
}

/* Shared objects: the binaries of each stack. */
static void by_binary(struct groups *gs, struct scan *scan, const struct store_segment *p,
		      struct stack_sums *ss, uint32_t *stamp_gen)
{
	stack_sums_add_part(ss, scan, p);
	uint32_t *frame_group = xmalloc((p->nframes + 1) * sizeof(uint32_t));
	for (size_t f = 0; f < p->nframes; f++) {
		struct store_frame_info fr;
		const char *name = NULL;
		if (store_seg_frame(p, (uint32_t)f, &fr) < 0)
			name = "[unknown]";
		else if (fr.type == SFT_KERNEL)
			name = "[kernel]";
		if (!name && fr.file)
			name = fr.file_name;
		if (!name && fr.binary)
			name = fr.binary;
		if (!name || !*name)
			name = "[unknown]";
		group(gs, name, strlen(name));
		frame_group[f] = strtab_lookup(&gs->names, name, strlen(name));
	}
	for (size_t i = 0; i < ss->n; i++) {
		uint32_t leaf = ss->leaves[i];
		uint64_t v = ss->v[leaf];
		if (++*stamp_gen == 0)
			*stamp_gen = 1;
		bool first = true;
		for (uint32_t n = leaf; n && n < p->nnodes; n = p->node_parent[n]) {
			uint32_t f = p->node_frame[n];
			if (f >= p->nframes)
				continue;
			struct group *g = &gs->g[frame_group[f]];
			if (first)
				g->self += v;
			first = false;
			if (g->stamp != *stamp_gen) {
				g->stamp = *stamp_gen;
				g->total += v;
			}
		}
	}
	hz_vote_add(&gs->hz, hz_vote_best(&ss->hz), ss->total);
	memset(&ss->hz, 0, sizeof(ss->hz));
	ss->total = 0;
	stack_sums_clear(ss);
	free(frame_group);
}

/* Time series: per bucket, in cores (values for allocations). */
static void by_time(struct groups *gs, struct scan *scan, const struct store_segment *p,
		    const struct ent_request *r)
{
	const struct scope *sc = &r->scope;
	double width = (double)(sc->end_ms - sc->start_ms) / r->num_buckets;
	int64_t iwidth = (sc->end_ms - sc->start_ms) / r->num_buckets;
	bool minutes_ok = (sc->end_ms - sc->start_ms) % r->num_buckets == 0 && iwidth % 60000 == 0 &&
			  sc->start_ms % 60000 == 0;
	char none[300];
	for (uint32_t j = 0; j < p->nseries; j++) {
		if (!scan_selected(scan, j))
			continue;
		const struct store_series *ps = &p->series[j];
		const char *val = r->attribute ? store_seg_label_value(p, ps->labels, r->attribute) : "all";
		if (!val || !*val) {
			snprintf(none, sizeof(none), "[no %s]", entity_label(r));
			val = none;
		}
		struct group *g = group(gs, val, strlen(val));
		/* One unit of value in cores for one bucket of this series. */
		double unit = 1.0;
		if (sc->kind == SEK_ON_CPU)
			unit = ps->hz ? 1.0 / ps->hz / (width / 1000.0) : 0;
		else if (sc->kind == SEK_OFF_CPU || sc->kind == SEK_CUDA)
			unit = 1e-9 / (width / 1000.0);
		uint64_t sum = 0;
		if (minutes_ok && scan_series_inside(scan, ps)) {
			for (size_t m = 0; m < ps->nminutes; m++) {
				int64_t b = (ps->minutes[m].minute_ms - sc->start_ms) / iwidth;
				if (b < 0 || b >= r->num_buckets)
					continue;
				g->cores[b] += (double)ps->minutes[m].value * unit;
				sum += ps->minutes[m].value;
			}
		} else {
			const struct store_row *rows;
			long n = scan_rows(scan, j, &rows);
			uint64_t matched = 0;
			for (long i = 0; i < n; i++) {
				if (!scan_in_range(sc, rows[i].ts_ms))
					continue;
				size_t b = (size_t)((double)(rows[i].ts_ms - sc->start_ms) / width);
				if (b >= r->num_buckets)
					b = r->num_buckets - 1;
				g->cores[b] += (double)rows[i].value * unit;
				sum += rows[i].value;
				matched++;
			}
			scan_count_matched(scan, matched);
		}
		g->total += sum;
		hz_vote_add(&gs->hz, ps->hz, sum);
	}
}

/* --- answers ----------------------------------------------------------------------- */

static int cmp_groups(const void *a, const void *b, void *ctx)
{
	const struct groups *gs = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	if (gs->g[x].total != gs->g[y].total)
		return gs->g[x].total > gs->g[y].total ? -1 : 1;
	return strcmp(strtab_get(&gs->names, x), strtab_get(&gs->names, y));
}

static uint32_t *ordered(const struct groups *gs, size_t *n)
{
	size_t count = strtab_count(&gs->names);
	uint32_t *ids = xmalloc((count + 1) * sizeof(uint32_t));
	*n = 0;
	for (uint32_t i = 1; i < count; i++)
		if (gs->g[i].total)
			ids[(*n)++] = i;
	qsort_r(ids, *n, sizeof(uint32_t), cmp_groups, (void *)gs);
	return ids;
}

static void write_top(const struct ent_request *r, struct groups *gs,
		      const struct scope_context *ctx, struct jsonw *w)
{
	uint16_t hz = hz_vote_best(&gs->hz);
	size_t n;
	uint32_t *ids = ordered(gs, &n);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += gs->g[ids[i]].self;
	jsonw_kv_str(w, "entity", entity_label(r));
	if (r->attribute)
		jsonw_kv_str(w, "attribute", r->attribute);
	jsonw_kv_str(w, "unit", event_kind_unit(r->scope.kind));
	event_kind_mode_json(w, r->scope.kind, r->absolute);
	jsonw_kv_u64(w, "total", total);
	jsonw_key(w, "scope");
	jsonw_begin_object(w);
	scope_context_json(w, ctx, hz);
	jsonw_end_object(w);
	jsonw_kv_u64(w, "entities_total", n);
	jsonw_key(w, "entities");
	jsonw_begin_array(w);
	for (size_t i = 0; i < n && i < r->limit; i++) {
		const struct group *g = &gs->g[ids[i]];
		jsonw_begin_object(w);
		jsonw_kv_str(w, "name", strtab_get(&gs->names, ids[i]));
		if (r->shared_objects)
			jsonw_kv_u64(w, "self", g->self);
		jsonw_kv_u64(w, "total", g->total);
		double cores = scope_cores(ctx, r->scope.kind, hz, g->total);
		jsonw_kv_double(w, "cores", cores);
		double pct;
		if (r->absolute && r->scope.kind == SEK_ON_CPU) {
			uint32_t cpus = g->cpus ? g->cpus : (uint32_t)ctx->host_cpus;
			pct = cpus ? cores / cpus * 100.0 : NAN;
		} else {
			pct = ctx->total ? (double)g->total / (double)ctx->total * 100.0 : NAN;
		}
		jsonw_kv_double(w, "percent", pct);
		if (g->cpus)
			jsonw_kv_u64(w, "cpus", g->cpus);
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	free(ids);
}

static void write_labels(const struct ent_request *r, struct groups *gs, uint64_t total,
			 struct jsonw *w)
{
	size_t n;
	uint32_t *ids = ordered(gs, &n);
	jsonw_kv_str(w, "unit", event_kind_unit(r->scope.kind));
	jsonw_kv_u64(w, "total", total);
	if (r->attribute)
		jsonw_kv_str(w, "name", r->attribute);
	jsonw_kv_u64(w, r->attribute ? "values_total" : "names_total", n);
	jsonw_key(w, r->attribute ? "values" : "names");
	jsonw_begin_array(w);
	for (size_t i = 0; i < n && i < r->limit; i++) {
		const struct group *g = &gs->g[ids[i]];
		jsonw_begin_object(w);
		jsonw_kv_str(w, r->attribute ? "value" : "name", strtab_get(&gs->names, ids[i]));
		jsonw_kv_u64(w, "total", g->total);
		jsonw_kv_double(w, "percent", total ? (double)g->total / (double)total * 100.0 : NAN);
		if (!r->attribute)
			jsonw_kv_u64(w, "values", g->nvalues);
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	free(ids);
}

static void write_series(struct jsonw *w, const char *name, const double *cores, uint32_t nb,
			 uint64_t total)
{
	jsonw_begin_object(w);
	jsonw_kv_str(w, "name", name);
	jsonw_kv_u64(w, "total", total);
	jsonw_key(w, "values");
	jsonw_begin_array(w);
	for (uint32_t b = 0; b < nb; b++)
		jsonw_double(w, cores[b]);
	jsonw_end_array(w);
	jsonw_end_object(w);
}

static void write_timeseries(const struct ent_request *r, struct groups *gs, struct jsonw *w)
{
	size_t n;
	uint32_t *ids = ordered(gs, &n);
	const struct scope *sc = &r->scope;
	/* Per bucket: cores busy (on_cpu), threads waiting (off_cpu), GPUs
	 * busy (cuda) on average, or bytes (alloc). */
	jsonw_kv_str(w, "unit", event_kind_rate_unit(sc->kind));
	jsonw_kv_str(w, "value_unit", event_kind_unit(sc->kind));
	jsonw_kv_i64(w, "start_ts", sc->start_ms);
	jsonw_kv_double(w, "bucket_ms", (double)(sc->end_ms - sc->start_ms) / r->num_buckets);
	if (r->attribute)
		jsonw_kv_str(w, "group_by", r->attribute);
	jsonw_kv_u64(w, "groups_total", n);
	jsonw_key(w, "series");
	jsonw_begin_array(w);
	double *other = xcalloc(r->num_buckets, sizeof(double));
	uint64_t other_total = 0;
	for (size_t i = 0; i < n; i++) {
		const struct group *g = &gs->g[ids[i]];
		if (i >= r->limit) {
			for (uint32_t b = 0; b < r->num_buckets; b++)
				other[b] += g->cores[b];
			other_total += g->total;
			continue;
		}
		write_series(w, strtab_get(&gs->names, ids[i]), g->cores, r->num_buckets, g->total);
	}
	if (other_total)
		write_series(w, "[other]", other, r->num_buckets, other_total);
	jsonw_end_array(w);
	free_all(other, ids);
}

int entities_query(struct store *st, const struct ent_request *r, struct buf *out,
		   struct buf *err)
{
	uint64_t t0 = now_mono_ns();
	struct scan *scan = scan_open(st, &r->scope, err);
	if (!scan)
		return -1;
	struct groups gs;
	groups_init(&gs, r->what == ENT_TIMESERIES ? r->num_buckets : 0);
	struct strtab seen;
	strtab_init(&seen);
	struct stack_sums ss = { 0 };
	uint32_t stamp_gen = 0;
	uint64_t total = 0;
	for (size_t i = 0; i < scan_parts(scan); i++) {
		const struct store_segment *p = scan_begin(scan, i);
		if (!p)
			continue;
		if (r->what == ENT_TIMESERIES) {
			by_time(&gs, scan, p, r);
		} else if (r->shared_objects) {
			by_binary(&gs, scan, p, &ss, &stamp_gen);
		} else {
			if (r->what == ENT_LABELS && !r->attribute)
				count_values(&gs, &seen, p, scan);
			/* The total of the selection: the label names' shares. */
			uint64_t sum = by_series(&gs, scan, p, r);
			if (r->what == ENT_LABELS && !r->attribute)
				total += sum;
		}
		scan_end(scan, i);
		if (scan_check(scan, NULL))
			break;
	}
	int rc = scan_check(scan, err);
	if (rc) {
		stack_sums_free(&ss);
		strtab_free(&seen);
		groups_free(&gs);
		scan_close(scan);
		return rc;
	}
	if (r->what == ENT_LABELS && r->attribute)
		for (size_t i = 1; i < strtab_count(&gs.names); i++)
			total += gs.g[i].total;
	struct scope_context ctx;
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	if (r->what == ENT_TOP) {
		scope_context_read(st, &r->scope, &ctx);
		write_top(r, &gs, &ctx, &w);
	} else if (r->what == ENT_LABELS) {
		write_labels(r, &gs, total, &w);
	} else {
		write_timeseries(r, &gs, &w);
	}
	jsonw_key(&w, "query_stats");
	scan_stats_json(scan, t0, &w);
	jsonw_end_object(&w);
	stack_sums_free(&ss);
	strtab_free(&seen);
	groups_free(&gs);
	scan_close(scan);
	return jsonw_finish_answer(&w, err);
}
