/* scan.c - see scan.h. */
#include "scan.h"
#include "cel_sql.h"

#include <stdlib.h>
#include <string.h>

#include "cel.h"
#include "jsonw.h"
#include "request.h"
#include "strtab.h"
#include "util.h"

static const struct {
	const char *name;
	uint8_t kind;
	const char *unit;
} event_kinds[] = {
	{ "on_cpu", SEK_ON_CPU, "samples" },
	{ "off_cpu", SEK_OFF_CPU, "nanoseconds" },
	{ "cuda", SEK_CUDA, "nanoseconds" },
	{ "alloc", SEK_ALLOC, "bytes" },
};

const char *event_kind_name(uint8_t kind)
{
	for (size_t i = 0; i < ARRAY_SIZE(event_kinds); i++)
		if (event_kinds[i].kind == kind)
			return event_kinds[i].name;
	return "on_cpu";
}

const char *event_kind_unit(uint8_t kind)
{
	for (size_t i = 0; i < ARRAY_SIZE(event_kinds); i++)
		if (event_kinds[i].kind == kind)
			return event_kinds[i].unit;
	return "samples";
}

const char *event_kind_rate_unit(uint8_t kind)
{
	switch (kind) {
	case SEK_ON_CPU:
		return "cores";
	case SEK_OFF_CPU:
		return "threads";
	case SEK_CUDA:
		return "gpus";
	default:
		return "bytes";
	}
}

bool event_kind_absolute_ok(uint8_t kind)
{
	return kind == SEK_ON_CPU;
}

void event_kind_mode_json(struct jsonw *w, uint8_t kind, bool absolute)
{
	bool abs_ok = absolute && event_kind_absolute_ok(kind);
	jsonw_kv_str(w, "cpu_mode", abs_ok ? "absolute" : "relative");
	jsonw_kv_str(w, "cores_unit", event_kind_rate_unit(kind));
	if (absolute && !abs_ok) {
		char note[128];
		snprintf(note, sizeof(note), "absolute CPU %% applies to on_cpu only; %s percentages are relative",
			 event_kind_name(kind));
		jsonw_kv_str(w, "cpu_mode_note", note);
	}
}

/* Year 3000 in Unix milliseconds: later times are typing mistakes. */
#define MAX_TS 32503680000000LL

static int get_ts(const json_t *v, const char *what, const char *field, int64_t *out,
		  struct buf *err)
{
	if (!json_is_integer(v)) {
		buf_printf(err, "%s.%s: expected an integer (Unix milliseconds)", what, field);
		return -1;
	}
	json_int_t x = json_integer_value(v);
	if (x < 0 || x > MAX_TS) {
		buf_printf(err, "%s.%s: expected 0 to %lld, got %lld", what, field, MAX_TS,
			   (long long)x);
		return -1;
	}
	*out = x;
	return 0;
}

int scope_parse(const json_t *filter, const char *what, struct scope *sc, struct buf *err)
{
	memset(sc, 0, sizeof(*sc));
	sc->kind = SEK_ON_CPU;
	sc->what = what;
	if (!json_is_object(filter)) {
		buf_printf(err, "%s: expected an object with start_ts and end_ts", what);
		return -1;
	}
	if (get_ts(json_object_get(filter, "start_ts"), what, "start_ts", &sc->start_ms, err) < 0 ||
	    get_ts(json_object_get(filter, "end_ts"), what, "end_ts", &sc->end_ms, err) < 0)
		return -1;
	if (sc->end_ms <= sc->start_ms) {
		buf_printf(err, "%s: end_ts must be after start_ts", what);
		return -1;
	}
	const json_t *kind = json_object_get(filter, "event_kind");
	if (kind && !json_is_null(kind)) {
		const char *k = json_string_value(kind);
		size_t i;
		for (i = 0; k && i < ARRAY_SIZE(event_kinds); i++)
			if (strcmp(k, event_kinds[i].name) == 0)
				break;
		if (!k || i == ARRAY_SIZE(event_kinds)) {
			buf_printf(err, "%s.event_kind: expected one of on_cpu, off_cpu, cuda, alloc",
				   what);
			return -1;
		}
		sc->kind = event_kinds[i].kind;
	}
	const json_t *q = json_object_get(filter, "query");
	if (q && !json_is_null(q)) {
		if (!json_is_string(q)) {
			buf_printf(err, "%s.query: expected a CEL string or null", what);
			return -1;
		}
		const char *qs = json_string_value(q);
		if (json_string_length(q) > CEL_MAX_SOURCE) {
			buf_printf(err, "%s.query: at most %d bytes", what, CEL_MAX_SOURCE);
			return -1;
		}
		if (qs[strspn(qs, " \t\r\n")])
			sc->query = xstrdup(qs);
	}
	return 0;
}

int scope_limit_parse(const char *body, size_t len, struct scope *sc, uint32_t *limit, uint32_t max,
		      bool *raw_names, struct buf *err)
{
	memset(sc, 0, sizeof(*sc));
	json_t *doc = req_load(body, len, err);
	if (!doc)
		return -1;
	uint64_t l = *limit;
	int rc = scope_parse(json_object_get(doc, "filter"), "filter", sc, err) < 0 ||
			 req_count(doc, "limit", max, &l, err) < 0 ||
			 req_bool(doc, "raw_names", raw_names, err) < 0
		 ? -1
		 : 0;
	*limit = (uint32_t)l;
	json_decref(doc);
	if (rc < 0)
		scope_free(sc);
	return rc;
}

void scope_free(struct scope *sc)
{
	free(sc->query);
	sc->query = NULL;
}

struct scan {
	struct store_view *view;
	const struct scope *sc;
	struct cel_program *cel;
	/* the segment begun */
	const struct store_segment *p;
	size_t cur;
	uint32_t project; /* its string id of the project, UINT32_MAX when absent */
	struct scan_ids ids; /* how its stacks are named */
	int8_t *label_ok; /* per label set: -1 not yet evaluated, 0 out, 1 in */
	size_t caplabel_ok;
	uint64_t series_selected, rows_matched, rollup_stacks;
};

/* The segment's id of the scope's project when it holds it and meets the
 * range (what scan_begin() asks), else UINT32_MAX. */
static uint32_t scope_project(const struct scan *s, const struct store_segment *p)
{
	if (p->max_ts < s->sc->start_ms || p->min_ts >= s->sc->end_ms)
		return UINT32_MAX;
	return store_seg_find(p, s->sc->project_id, strlen(s->sc->project_id));
}

void scan_carry_blocks(struct scan *s)
{
	store_view_carry(s->view);
}

struct scan *scan_open(struct store *st, const struct scope *sc, struct buf *err)
{
	struct cel_program *cel = NULL;
	if (sc->query) {
		struct buf e = { 0 };
		cel = cel_compile(sc->query, &e);
		if (!cel) {
			buf_printf(err, "%s.query: %s", sc->what ? sc->what : "filter", e.data);
			buf_free(&e);
			return NULL;
		}
	}
	struct scan *s = xcalloc(1, sizeof(*s));
	s->sc = sc;
	s->cel = cel;
	/* The filter as SQL lets a backend that speaks it (ClickHouse) read
	 * only the label sets it selects; the filter still runs here on what
	 * comes back, so a form cel_sql refuses just reads more. */
	struct buf label_sql = { 0 }, e = { 0 };
	struct store_view_scope scope = { .project = sc->project_id, .kind = sc->kind };
	if (cel && cel_sql(cel, "keys", "values", &label_sql, &e) == 0)
		scope.label_sql = label_sql.data;
	s->view = store_view_open_scoped(st, sc->start_ms, sc->end_ms, &scope);
	buf_free(&label_sql);
	buf_free(&e);
	return s;
}

int scan_check(const struct scan *s, struct buf *err)
{
	if (store_view_failed(s->view, NULL)) {
		if (err) {
			buf_puts(err, "the store could not be read, so the answer would be incomplete: ");
			store_view_failed(s->view, err);
		}
		return STORE_READ_RC;
	}
	return cel_check(s->cel, err);
}

void scan_close(struct scan *s)
{
	if (!s)
		return;
	store_view_close(s->view);
	cel_free(s->cel);
	free_all(s->label_ok, s);
}

size_t scan_parts(const struct scan *s)
{
	return store_view_count(s->view);
}

const struct scope *scan_scope(const struct scan *s)
{
	return s->sc;
}

const struct store_segment *scan_begin(struct scan *s, size_t i)
{
	const struct store_segment *p = store_view_begin(s->view, i);
	if (!p)
		return NULL;
	uint32_t project = scope_project(s, p);
	if (project == UINT32_MAX && !p->chain_end) {
		store_view_end(s->view, i);
		return NULL;
	}
	s->p = p;
	s->cur = i;
	s->project = project;
	s->ids = (struct scan_ids){ p->stack_map, p->stack_nown, p->stack_count };
	xgrow((void **)&s->label_ok, &s->caplabel_ok, p->nlabels + 1, 1);
	memset(s->label_ok, -1, p->nlabels + 1);
	return p;
}

void scan_end(struct scan *s, size_t i)
{
	store_view_end(s->view, i);
	if (s->cur == i)
		s->p = NULL;
}

bool scan_same_dictionary(const struct scan *s, size_t i, size_t j)
{
	return store_view_same_ids(s->view, i, j);
}

struct scan_ids scan_stack_ids(const struct scan *s)
{
	return s->ids;
}

bool scan_shares_later(const struct scan *s, size_t i)
{
	for (size_t j = i + 1; j < store_view_count(s->view); j++)
		if (scan_same_dictionary(s, i, j))
			return true;
	return false;
}

struct lookup_ctx {
	const struct store_segment *p;
	const uint32_t *kv;
	size_t n;
};

static const char *label_lookup(void *ctx, const char *name)
{
	const struct lookup_ctx *c = ctx;
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(store_seg_str(c->p, c->kv[2 * i]), name) == 0)
			return store_seg_str(c->p, c->kv[2 * i + 1]);
	return NULL;
}

bool scan_selected(struct scan *s, uint32_t series)
{
	const struct store_segment *p = s->p;
	if (series >= p->nseries)
		return false;
	const struct store_series *ps = &p->series[series];
	if (ps->project != s->project || ps->kind != s->sc->kind || ps->nrows == 0 ||
	    ps->max_ts < s->sc->start_ms || ps->min_ts >= s->sc->end_ms)
		return false;
	if (!s->cel)
		return true;
	if (ps->labels >= p->nlabels)
		return false;
	int8_t *ok = &s->label_ok[ps->labels];
	if (*ok < 0)
		*ok = scan_labels_match(s->cel, p, ps->labels) ? 1 : 0;
	return *ok == 1;
}

bool scan_labels_match(const struct cel_program *cel, const struct store_segment *p, uint32_t labels)
{
	struct lookup_ctx c = { p, NULL, 0 };
	c.n = store_seg_label_pairs(p, labels, &c.kv);
	return cel_eval(cel, label_lookup, &c);
}

bool scan_series_inside(const struct scan *s, const struct store_series *ps)
{
	return ps->min_ts >= s->sc->start_ms && ps->max_ts < s->sc->end_ms;
}

long scan_rows(struct scan *s, uint32_t series, const struct store_row **rows)
{
	return scan_rows_since(s, series, INT64_MIN, rows);
}

long scan_rows_since(struct scan *s, uint32_t series, int64_t since_ms,
		     const struct store_row **rows)
{
	s->series_selected++;
	return store_view_rows(s->view, s->cur, series, since_ms, rows);
}

long scan_sums(struct scan *s, uint32_t series, const uint32_t **stacks, const uint64_t **sums)
{
	s->series_selected++;
	return store_view_sums(s->view, s->cur, series, s->sc->start_ms,
			       s->sc->end_ms, stacks, sums);
}

long scan_rollup_sums(struct scan *s, const uint32_t **stacks, const uint64_t **sums,
		      uint16_t *hz)
{
	if (s->cel)
		return -1;
	long n = store_view_rollup_sums(s->view, s->cur, s->project, s->sc->kind, s->sc->start_ms,
					s->sc->end_ms, stacks, sums, hz);
	if (n >= 0)
		s->rollup_stacks += (uint64_t)n;
	return n;
}

void scan_count_matched(struct scan *s, uint64_t rows)
{
	s->rows_matched += rows;
}

int64_t scan_series_total(struct scan *s, uint32_t series)
{
	const struct store_series *ps = &s->p->series[series];
	if (scan_series_inside(s, ps)) {
		s->series_selected++;
		return (int64_t)ps->total;
	}
	/* Whole minutes of the range from the minute totals; rows only for
	 * the parts of minutes at its two ends. */
	int64_t from = s->sc->start_ms, to = s->sc->end_ms;
	int64_t lo = floor_to(from, 60000), hi = floor_to(to, 60000);
	if (lo < from)
		lo += 60000;
	s->series_selected++;
	if (lo >= hi)
		return store_view_total(s->view, s->cur, series, from, to);
	uint64_t sum = 0;
	for (size_t i = 0; i < ps->nminutes; i++)
		if (ps->minutes[i].minute_ms >= lo && ps->minutes[i].minute_ms < hi)
			sum += ps->minutes[i].value;
	int64_t edge[2] = { 0, 0 };
	if (from < lo && ps->min_ts < lo && ps->max_ts >= from)
		edge[0] = store_view_total(s->view, s->cur, series, from, lo);
	if (hi < to && ps->max_ts >= hi && ps->min_ts < to)
		edge[1] = store_view_total(s->view, s->cur, series, hi, to);
	if (edge[0] < 0 || edge[1] < 0)
		return -1;
	return (int64_t)(sum + (uint64_t)edge[0] + (uint64_t)edge[1]);
}

void scan_stats_json(const struct scan *s, uint64_t start_ns, struct jsonw *w)
{
	const struct store_view_stats *v = store_view_stats(s->view);
	jsonw_begin_object(w);
	jsonw_kv_u64(w, "parts", v->parts);
	jsonw_kv_u64(w, "parts_skipped", v->parts_skipped);
	jsonw_kv_u64(w, "series_read", s->series_selected);
	jsonw_kv_u64(w, "rows_read", v->rows_read);
	jsonw_kv_u64(w, "rows_matched", s->rows_matched);
	jsonw_kv_u64(w, "stack_sums_read", v->stack_sums_read);
	jsonw_kv_u64(w, "rollup_stacks_read", s->rollup_stacks);
	jsonw_kv_u64(w, "bytes_read", v->bytes_read);
	jsonw_kv_u64(w, "chunks_skipped", v->chunks_skipped);
	jsonw_kv_double(w, "time_ms", (double)(now_mono_ns() - start_ns) / 1e6);
	jsonw_end_object(w);
}

/* --- per-stack sums ---------------------------------------------------------- */

/* How many stacks ahead the sums are prefetched. */
#define SUMS_AHEAD 16

/* Adds n stacks' sums (stacks in the part's ids, mapped by ids) to ss,
 * with their hz, growing ss to the ids' count. */
static void add_sums(struct stack_sums *ss, const struct scan_ids *ids, const uint32_t *stacks,
		     const uint64_t *sums, long n, uint16_t hz)
{
	if (ss->cap < ids->count + 1) {
		size_t old = ss->cap;
		xgrow((void **)&ss->v, &ss->cap, ids->count + 1, sizeof(uint64_t));
		memset(ss->v + old, 0, (ss->cap - old) * sizeof(uint64_t));
	}
	if (n <= 0)
		return;
	uint64_t value = 0;
	for (long i = 0; i < n; i++) {
		/* A series' stacks are a few of the part's millions, ascending
		 * but far apart: each value waits for memory unless asked for
		 * ahead. */
		if (i + SUMS_AHEAD < n)
			prefetch(&ss->v[scan_id(ids, stacks[i + SUMS_AHEAD])]);
		if (!sums[i])
			continue;
		uint32_t stack = scan_id(ids, stacks[i]);
		if (!ss->v[stack]) {
			xgrow((void **)&ss->leaves, &ss->capleaves, ss->n + 1, sizeof(uint32_t));
			ss->leaves[ss->n++] = stack;
		}
		ss->v[stack] += sums[i];
		value += sums[i];
	}
	ss->total += value;
	hz_vote_add(&ss->hz, hz, value);
}

void stack_sums_add_series(struct stack_sums *ss, struct scan *scan, const struct store_segment *p,
			   uint32_t series)
{
	const struct scan_ids ids = scan->ids;
	const uint32_t *stacks;
	const uint64_t *sums;
	long n = scan_sums(scan, series, &stacks, &sums);
	add_sums(ss, &ids, stacks, sums, n, p->series[series].hz);
}

void stack_sums_add_part(struct stack_sums *ss, struct scan *scan, const struct store_segment *p)
{
	const uint32_t *stacks;
	const uint64_t *sums;
	uint16_t hz;
	long n = scan_rollup_sums(scan, &stacks, &sums, &hz);
	if (n >= 0) {
		const struct scan_ids ids = scan->ids;
		add_sums(ss, &ids, stacks, sums, n, hz);
		return;
	}
	for (uint32_t s = 0; s < p->nseries; s++)
		if (scan_selected(scan, s))
			stack_sums_add_series(ss, scan, p, s);
}

void stack_sums_order(struct stack_sums *ss, size_t nnodes)
{
	if (ss->n < 2)
		return;
	if (ss->n * 16 < nnodes) {
		xqsort(ss->leaves, ss->n, sizeof(uint32_t), cmp_u32);
		return;
	}
	/* Dense: one pass over the values finds them in order. */
	size_t n = 0;
	for (size_t i = 0; i < nnodes && i < ss->cap && n < ss->n; i++)
		if (ss->v[i])
			ss->leaves[n++] = (uint32_t)i;
}

void stack_sums_clear(struct stack_sums *ss)
{
	for (size_t i = 0; i < ss->n; i++)
		ss->v[ss->leaves[i]] = 0;
	ss->n = 0;
}

void stack_sums_free(struct stack_sums *ss)
{
	free_all(ss->v, ss->leaves);
	memset(ss, 0, sizeof(*ss));
}

void hz_vote_add(struct hz_vote *v, uint16_t hz, uint64_t value)
{
	for (int i = 0; i < 8; i++)
		if (v->hz[i] == hz || v->value[i] == 0) {
			v->hz[i] = hz;
			v->value[i] += value;
			return;
		}
}

uint16_t hz_vote_best(const struct hz_vote *v)
{
	uint16_t hz = 0;
	uint64_t best = 0;
	for (int i = 0; i < 8; i++)
		if (v->value[i] > best) {
			best = v->value[i];
			hz = v->hz[i];
		}
	return hz;
}

/* --- the unfiltered context ---------------------------------------------------- */

/* Rows carry the start of the interval they were sampled in; the data of
 * the last row reaches about one reporting interval further. */
#define ROW_SPAN_MS 10000

void scope_context_read(struct store *st, const struct scope *sc, struct scope_context *out)
{
	*out = (struct scope_context){ .min_ts = INT64_MAX, .max_ts = INT64_MIN };
	struct scope all = *sc;
	all.query = NULL;
	struct buf err = { 0 };
	struct scan *s = scan_open(st, &all, &err);
	buf_free(&err);
	if (!s)
		return;
	struct strtab hosts;
	strtab_init(&hosts);
	uint32_t *cpus = NULL;
	size_t capcpus = 0;
	for (size_t i = 0; i < scan_parts(s); i++) {
		const struct store_segment *p = scan_begin(s, i);
		if (!p)
			continue;
		uint32_t host_key = store_seg_find(p, "host.name", 9);
		for (uint32_t j = 0; j < p->nseries; j++) {
			if (!scan_selected(s, j))
				continue;
			const struct store_series *ps = &p->series[j];
			int64_t v = scan_series_total(s, j);
			if (v <= 0)
				continue;
			out->total += (uint64_t)v;
			out->min_ts = MIN(out->min_ts, MAX(ps->min_ts, sc->start_ms));
			out->max_ts = MAX(out->max_ts, MIN(ps->max_ts, sc->end_ms - 1));
			if (host_key == UINT32_MAX)
				continue;
			const uint32_t *kv;
			size_t n = store_seg_label_pairs(p, ps->labels, &kv);
			for (size_t k = 0; k < n; k++) {
				if (kv[2 * k] != host_key)
					continue;
				uint32_t name = kv[2 * k + 1];
				uint32_t c = store_seg_host_cpus(p, name);
				const char *hn = store_seg_str(p, name);
				uint32_t id = strtab_intern_cstr(&hosts, hn);
				if (id >= capcpus) {
					size_t old = capcpus;
					xgrow((void **)&cpus, &capcpus, id + 1, sizeof(uint32_t));
					memset(cpus + old, 0, (capcpus - old) * sizeof(uint32_t));
				}
				cpus[id] = MAX(cpus[id], c);
			}
		}
		scan_end(s, i);
	}
	for (uint32_t id = 1; id < strtab_count(&hosts); id++) {
		out->hosts++;
		out->host_cpus += cpus[id];
	}
	free(cpus);
	strtab_free(&hosts);
	scan_close(s);
	int64_t lo = sc->start_ms, hi = sc->end_ms;
	if (out->min_ts != INT64_MAX) {
		lo = MAX(lo, out->min_ts);
		hi = MIN(hi, out->max_ts + ROW_SPAN_MS);
	}
	out->seconds = MAX((double)(hi - lo) / 1000.0, 1.0);
}

double scope_cores(const struct scope_context *c, uint8_t kind, uint16_t hz, uint64_t value)
{
	double v = (double)value;
	if (kind == SEK_ON_CPU)
		v = hz ? v / hz : 0;
	else if (kind == SEK_OFF_CPU || kind == SEK_CUDA)
		v /= 1e9;
	else
		return 0; /* bytes are not time */
	return v / c->seconds;
}

void scope_context_json(struct jsonw *w, const struct scope_context *c, uint16_t hz)
{
	jsonw_kv_u64(w, "sample_rate_hz", hz);
	jsonw_kv_double(w, "seconds", c->seconds);
	jsonw_kv_u64(w, "all_total", c->total);
	jsonw_kv_u64(w, "hosts", c->hosts);
	jsonw_kv_u64(w, "host_cpus", c->host_cpus);
}
