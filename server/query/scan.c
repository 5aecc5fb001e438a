/* scan.c - see scan.h. */
#include "scan.h"

#include <stdlib.h>
#include <string.h>

#include "cel.h"
#include "jsonw.h"
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

void scope_free(struct scope *sc)
{
	free(sc->query);
	sc->query = NULL;
}

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

struct scan {
	struct store_view *view;
	const struct scope *sc;
	struct cel_program *cel;
	/* the part begun */
	const struct part *p;
	size_t cur;
	uint32_t project; /* its lstr id of the project, UINT32_MAX when absent */
	struct scan_ids ids; /* how its stacks are named */
	/* per part of the view, once scan_carry_blocks() named them */
	struct carry_name *names;
	/* the view's part read at each position (NULL: the view's order) */
	size_t *order;
	int8_t *label_ok; /* per label set: -1 not yet evaluated, 0 out, 1 in */
	size_t caplabel_ok;
	uint64_t series_selected, rows_matched, rollup_stacks;
};

/* The view's index of the part read at position i. */
static size_t view_index(const struct scan *s, size_t i)
{
	return s->order ? s->order[i] : i;
}

/* The part's id of the scope's project when p holds it and meets the
 * range (what scan_begin() asks), else UINT32_MAX. */
static uint32_t scope_project(const struct scan *s, const struct part *p)
{
	if (p->max_ts < s->sc->start_ms || p->min_ts >= s->sc->end_ms)
		return UINT32_MAX;
	return strtab_lookup(&p->lstr, s->sc->project_id, strlen(s->sc->project_id));
}

/* The node count of in-memory part i of the view now (it only grows, so
 * it has at least as many when begun). */
static size_t memory_part_nodes(struct scan *s, size_t i)
{
	const struct part *p = store_view_peek(s->view, i);
	if (!p)
		return 0;
	size_t n = p->nnodes;
	store_view_end(s->view, i);
	return n;
}

/* The last in-memory part of the view with dictionaries d, or SIZE_MAX. */
static size_t last_in_memory(const struct scan *s, uint64_t d)
{
	for (size_t j = store_view_count(s->view); j-- > 0;)
		if (store_view_dictionary(s->view, j) == d)
			return j;
	return SIZE_MAX;
}

/* Names the parts for carrying (scan.h, scan_shares_later) and orders
 * them so that the parts of each name are read one after another. The
 * view lists parts by generation, which a block takes when it is
 * written: a closed hour's block merged after a block of the open hour
 * was written, or after a head was sealed, is listed between that part
 * and the head. Requiring the part right after a block to have its name
 * left every block before such a part, and the sealed heads, to fold
 * alone. Here a block written from a sealed head takes the head's name
 * whenever the view holds an in-memory part of that name with every id
 * the block's stacks are given: the last one (each holds the ids of the
 * one before), which ends the chain and is begun even when it selects
 * nothing (the head right after a flush holds no row yet). The parts of
 * no name are read first, in the view's order, then each name's blocks
 * and its in-memory parts, each in the view's order, so its end comes
 * last. What a query adds up does not depend on the order. */
void scan_carry_blocks(struct scan *s)
{
	size_t n = store_view_count(s->view);
	if (s->names)
		return;
	size_t m = n ? n : 1;
	s->names = xcalloc(m, sizeof(*s->names));
	s->order = xcalloc(m, sizeof(*s->order));
	size_t *end = xcalloc(m, sizeof(*end));             /* per named part: its chain's end */
	size_t *end_nodes = xcalloc(m, sizeof(*end_nodes)); /* per end: nodes + 1, 0 not yet */
	for (size_t i = 0; i < n; i++) {
		uint64_t d = store_view_dictionary(s->view, i);
		if (d) {
			s->names[i].name = d;
			end[i] = last_in_memory(s, d);
			continue;
		}
		const uint32_t *ids;
		size_t nids, nnodes;
		uint64_t l = store_view_lineage(s->view, i, &ids, &nids, &nnodes);
		size_t e = l && nnodes ? last_in_memory(s, l) : SIZE_MAX;
		if (e == SIZE_MAX)
			continue; /* no part in memory has its ids: it folds alone */
		if (!end_nodes[e])
			end_nodes[e] = memory_part_nodes(s, e) + 1;
		if (end_nodes[e] - 1 < nnodes)
			continue;
		s->names[i] = (struct carry_name){ l, ids, nids, nnodes, false };
		end[i] = e;
		s->names[e].ends = true;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!s->names[i].name)
			s->order[k++] = i;
	for (size_t e = 0; e < n; e++) {
		if (!s->names[e].name || end[e] != e)
			continue; /* not the end of a chain */
		for (int memory = 0; memory < 2; memory++) /* its blocks, then its parts in memory */
			for (size_t i = 0; i < n; i++)
				if (s->names[i].name && end[i] == e &&
				    (store_view_dictionary(s->view, i) != 0) == memory)
					s->order[k++] = i;
	}
	free(end);
	free(end_nodes);
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
	s->view = store_view_open(st, sc->start_ms, sc->end_ms);
	return s;
}

int scan_check(const struct scan *s, struct buf *err)
{
	return cel_check(s->cel, err);
}

void scan_close(struct scan *s)
{
	if (!s)
		return;
	store_view_close(s->view);
	cel_free(s->cel);
	free(s->label_ok);
	free(s->names);
	free(s->order);
	free(s);
}

size_t scan_parts(const struct scan *s)
{
	return store_view_count(s->view);
}

const struct scope *scan_scope(const struct scan *s)
{
	return s->sc;
}

const struct part *scan_begin(struct scan *s, size_t pos)
{
	size_t i = view_index(s, pos);
	const struct part *p = store_view_begin(s->view, i);
	if (!p)
		return NULL;
	uint32_t project = scope_project(s, p);
	const struct carry_name *c = s->names ? &s->names[i] : NULL;
	if (project == UINT32_MAX && !(c && c->ends)) {
		store_view_end(s->view, i);
		return NULL;
	}
	s->p = p;
	s->cur = i;
	s->project = project;
	if (c && c->ids)
		s->ids = (struct scan_ids){ c->ids, (uint32_t)MIN(c->nids, p->nnodes), c->count };
	else
		s->ids = (struct scan_ids){ NULL, (uint32_t)p->nnodes, p->nnodes };
	xgrow((void **)&s->label_ok, &s->caplabel_ok, p->nlabels + 1, 1);
	memset(s->label_ok, -1, p->nlabels + 1);
	return p;
}

void scan_end(struct scan *s, size_t pos)
{
	size_t i = view_index(s, pos);
	store_view_end(s->view, i);
	if (s->cur == i)
		s->p = NULL;
}

bool scan_same_dictionary(const struct scan *s, size_t i, size_t j)
{
	i = view_index(s, i);
	j = view_index(s, j);
	if (s->names)
		return s->names[i].name && s->names[i].name == s->names[j].name;
	uint64_t d = store_view_dictionary(s->view, i);
	return d && d == store_view_dictionary(s->view, j);
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
	const struct part *p;
	const uint32_t *kv;
	size_t n;
};

static const char *label_lookup(void *ctx, const char *name)
{
	const struct lookup_ctx *c = ctx;
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(strtab_get(&c->p->lstr, c->kv[2 * i]), name) == 0)
			return strtab_get(&c->p->lstr, c->kv[2 * i + 1]);
	return NULL;
}

bool scan_selected(struct scan *s, uint32_t series)
{
	const struct part *p = s->p;
	if (series >= p->nseries)
		return false;
	const struct part_series *ps = &p->series[series];
	if (ps->project != s->project || ps->kind != s->sc->kind || ps->nrows == 0 ||
	    ps->max_ts < s->sc->start_ms || ps->min_ts >= s->sc->end_ms)
		return false;
	if (!s->cel)
		return true;
	if (ps->labels >= p->nlabels)
		return false;
	int8_t *ok = &s->label_ok[ps->labels];
	if (*ok < 0) {
		struct lookup_ctx c = { p, NULL, 0 };
		c.n = part_label_pairs(p, ps->labels, &c.kv);
		*ok = cel_eval(s->cel, label_lookup, &c) ? 1 : 0;
	}
	return *ok == 1;
}

bool scan_series_inside(const struct scan *s, const struct part_series *ps)
{
	return ps->min_ts >= s->sc->start_ms && ps->max_ts < s->sc->end_ms;
}

long scan_rows(struct scan *s, uint32_t series, const struct part_row **rows)
{
	return scan_rows_since(s, series, INT64_MIN, rows);
}

long scan_rows_since(struct scan *s, uint32_t series, int64_t since_ms,
		     const struct part_row **rows)
{
	s->series_selected++;
	return store_view_rows(s->view, s->cur, &s->p->series[series], since_ms, rows);
}

long scan_sums(struct scan *s, uint32_t series, const uint32_t **stacks, const uint64_t **sums)
{
	s->series_selected++;
	return store_view_sums(s->view, s->cur, &s->p->series[series], s->sc->start_ms,
			       s->sc->end_ms, stacks, sums);
}

long scan_rollup_sums(struct scan *s, const uint32_t **stacks, const uint64_t **sums,
		      uint16_t *hz)
{
	const struct part *p = s->p;
	if (s->cel || !p->nrollups)
		return -1;
	const struct part_rollup *found = NULL;
	for (size_t i = 0; i < p->nrollups; i++) {
		const struct part_rollup *r = &p->rollups[i];
		if (r->project != s->project || r->kind != s->sc->kind)
			continue;
		if (found)
			return -1; /* two sample rates: the series know which is which */
		found = r;
	}
	if (!found)
		return -1;
	*hz = found->hz;
	long n;
	if (p->min_ts >= s->sc->start_ms && p->max_ts < s->sc->end_ms) {
		*stacks = found->stacks;
		*sums = found->sums;
		n = (long)found->n;
	} else {
		n = store_view_rollup_sums(s->view, s->cur, found, s->sc->start_ms, s->sc->end_ms,
					   stacks, sums);
	}
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
	const struct part_series *ps = &s->p->series[series];
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
		return store_view_total(s->view, s->cur, ps, from, to);
	uint64_t sum = 0;
	for (size_t i = 0; i < ps->nminutes; i++)
		if (ps->minutes[i].minute_ms >= lo && ps->minutes[i].minute_ms < hi)
			sum += ps->minutes[i].value;
	int64_t edge[2] = { 0, 0 };
	if (from < lo && ps->min_ts < lo && ps->max_ts >= from)
		edge[0] = store_view_total(s->view, s->cur, ps, from, lo);
	if (hi < to && ps->max_ts >= hi && ps->min_ts < to)
		edge[1] = store_view_total(s->view, s->cur, ps, hi, to);
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

void stack_sums_add_series(struct stack_sums *ss, struct scan *scan, const struct part *p,
			   uint32_t series)
{
	const struct scan_ids ids = scan->ids;
	if (ss->cap < ids.count + 1) {
		size_t old = ss->cap;
		xgrow((void **)&ss->v, &ss->cap, ids.count + 1, sizeof(uint64_t));
		memset(ss->v + old, 0, (ss->cap - old) * sizeof(uint64_t));
	}
	const uint32_t *stacks;
	const uint64_t *sums;
	long n = scan_sums(scan, series, &stacks, &sums);
	if (n <= 0)
		return;
	uint64_t value = 0;
	for (long i = 0; i < n; i++) {
		/* A series' stacks are a few of the part's millions, ascending
		 * but far apart: each value waits for memory unless asked for
		 * ahead. */
		if (i + SUMS_AHEAD < n)
			prefetch(&ss->v[scan_id(&ids, stacks[i + SUMS_AHEAD])]);
		if (!sums[i])
			continue;
		uint32_t stack = scan_id(&ids, stacks[i]);
		if (!ss->v[stack]) {
			xgrow((void **)&ss->leaves, &ss->capleaves, ss->n + 1, sizeof(uint32_t));
			ss->leaves[ss->n++] = stack;
		}
		ss->v[stack] += sums[i];
		value += sums[i];
	}
	ss->total += value;
	hz_vote_add(&ss->hz, p->series[series].hz, value);
}

void stack_sums_add_part(struct stack_sums *ss, struct scan *scan, const struct part *p)
{
	const uint32_t *stacks;
	const uint64_t *sums;
	uint16_t hz;
	long n = scan_rollup_sums(scan, &stacks, &sums, &hz);
	if (n >= 0) {
		const struct scan_ids ids = scan->ids;
		if (ss->cap < ids.count + 1) {
			size_t old = ss->cap;
			xgrow((void **)&ss->v, &ss->cap, ids.count + 1, sizeof(uint64_t));
			memset(ss->v + old, 0, (ss->cap - old) * sizeof(uint64_t));
		}
		uint64_t value = 0;
		for (long i = 0; i < n; i++) {
			if (!sums[i])
				continue;
			uint32_t stack = scan_id(&ids, stacks[i]);
			if (!ss->v[stack]) {
				xgrow((void **)&ss->leaves, &ss->capleaves, ss->n + 1, sizeof(uint32_t));
				ss->leaves[ss->n++] = stack;
			}
			ss->v[stack] += sums[i];
			value += sums[i];
		}
		ss->total += value;
		hz_vote_add(&ss->hz, hz, value);
		return;
	}
	for (uint32_t s = 0; s < p->nseries; s++)
		if (scan_selected(scan, s))
			stack_sums_add_series(ss, scan, p, s);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
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
	free(ss->v);
	free(ss->leaves);
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
		const struct part *p = scan_begin(s, i);
		if (!p)
			continue;
		uint32_t host_key = strtab_lookup(&p->lstr, "host.name", 9);
		for (uint32_t j = 0; j < p->nseries; j++) {
			if (!scan_selected(s, j))
				continue;
			const struct part_series *ps = &p->series[j];
			int64_t v = scan_series_total(s, j);
			if (v <= 0)
				continue;
			out->total += (uint64_t)v;
			out->min_ts = MIN(out->min_ts, MAX(ps->min_ts, sc->start_ms));
			out->max_ts = MAX(out->max_ts, MIN(ps->max_ts, sc->end_ms - 1));
			if (host_key == UINT32_MAX)
				continue;
			const uint32_t *kv;
			size_t n = part_label_pairs(p, ps->labels, &kv);
			for (size_t k = 0; k < n; k++) {
				if (kv[2 * k] != host_key)
					continue;
				uint32_t name = kv[2 * k + 1];
				uint32_t c = 0;
				for (size_t h = 0; h < p->nhosts; h++)
					if (p->hosts[h].name == name)
						c = p->hosts[h].cpus;
				const char *hn = strtab_get(&p->lstr, name);
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
