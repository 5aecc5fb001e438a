/* events.c - see events.h. */
#include "events.h"

#include <stdlib.h>
#include <string.h>

#include "display.h"
#include "jsonw.h"
#include "util.h"

int ev_request_parse(struct ev_request *r, const char *body, size_t len, struct buf *err)
{
	memset(r, 0, sizeof(*r));
	r->limit = EVENTS_DEFAULT_LIMIT;
	return scope_limit_parse(body, len, &r->scope, &r->limit, EVENTS_MAX_LIMIT, &r->raw_names, err);
}

void ev_request_free(struct ev_request *r)
{
	scope_free(&r->scope);
}

struct event {
	int64_t ts;
	uint64_t value;
	char *json; /* its JSON object, written while its part was read (NULL: a bug, see describe) */
};

static int cmp_events(const void *a, const void *b)
{
	const struct event *x = a, *y = b;
	if (x->ts != y->ts)
		return x->ts > y->ts ? -1 : 1;
	return x->value > y->value ? -1 : x->value < y->value;
}

struct cand {
	int64_t ts;
	uint64_t value;
	uint32_t series, stack;
};

/* The first window read of a part's newest rows: one block time slice. */
#define EVENTS_FIRST_WINDOW_MS 120000

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->ts != y->ts)
		return x->ts > y->ts ? -1 : 1;
	if (x->value != y->value)
		return x->value > y->value ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* Adds to c the rows of part p in the query's range, at or after since
 * and cutoff, cutting c back to the newest `limit` as they pile up.
 * Returns the rows it took. */
static uint64_t collect(struct scan *scan, const struct ev_request *r,
			const struct store_segment *p, int64_t since, int64_t cutoff,
			struct cand **c, size_t *nc, size_t *capc)
{
	uint64_t matched = 0;
	int64_t local = MAX(cutoff, since);
	for (uint32_t s = 0; s < p->nseries; s++) {
		if (!scan_selected(scan, s) || p->series[s].max_ts < local)
			continue;
		const struct store_row *rows;
		long n = scan_rows_since(scan, s, local, &rows);
		for (long j = 0; j < n; j++) {
			if (!scan_in_range(&r->scope, rows[j].ts_ms) || rows[j].ts_ms < local)
				continue;
			xgrow((void **)c, capc, *nc + 1, sizeof(**c));
			(*c)[(*nc)++] = (struct cand){ rows[j].ts_ms, rows[j].value, s,
						       rows[j].stack < p->nnodes ? rows[j].stack : 0 };
			matched++;
			if (*nc >= 4 * (size_t)r->limit + 64) {
				xqsort(*c, *nc, sizeof(**c), cmp_cand);
				*nc = r->limit;
				local = MAX(local, (*c)[*nc - 1].ts);
			}
		}
	}
	return matched;
}

/* The event's JSON object: time, value, labels and stack. */
static char *describe(struct display *d, const struct store_segment *p, const struct cand *c)
{
	struct buf b = { 0 };
	struct jsonw w;
	jsonw_init(&w, &b);
	jsonw_begin_object(&w);
	jsonw_kv_i64(&w, "ts", c->ts);
	jsonw_kv_u64(&w, "value", c->value);
	const struct store_series *ps = &p->series[c->series];
	jsonw_key(&w, "labels");
	jsonw_begin_object(&w);
	const uint32_t *kv;
	size_t n = store_seg_label_pairs(p, ps->labels, &kv);
	for (size_t i = 0; i < n; i++)
		jsonw_kv_str(&w, store_seg_str(p, kv[2 * i]), store_seg_str(p, kv[2 * i + 1]));
	jsonw_end_object(&w);
	jsonw_key(&w, "stack");
	jsonw_begin_array(&w);
	uint32_t *k = xmalloc(DISPLAY_MAX_DEPTH * sizeof(uint32_t));
	uint32_t *l = xmalloc(DISPLAY_MAX_DEPTH * sizeof(uint32_t));
	size_t depth = display_stack(d, c->stack, k, l, DISPLAY_MAX_DEPTH);
	for (size_t i = 0; i < depth; i++) {
		jsonw_begin_object(&w);
		display_frame_json(&w, d, k[i], l[i]);
		jsonw_end_object(&w);
	}
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	free_all(k, l);
	if (jsonw_finish(&w)) {
		/* A bug: the answer fails rather than splice bad JSON. */
		buf_free(&b);
		return NULL;
	}
	return b.data; /* the buf's bytes, NUL-terminated, now the caller's */
}

int events_query(struct store *st, struct symbols *sym, const struct ev_request *r,
		 struct buf *out, struct buf *err)
{
	uint64_t t0 = now_mono_ns();
	struct display_opts o = { .raw_names = r->raw_names };
	struct display *d = display_new(sym, NULL, &o, "", err);
	if (!d)
		return -1;
	struct scan *scan = scan_open(st, &r->scope, err);
	if (!scan) {
		display_free(d);
		return -1;
	}
	struct event *ev = NULL;
	size_t nev = 0, capev = 0;
	struct cand *c = NULL;
	size_t nc = 0, capc = 0;
	/* Newest parts first; once `limit` events are known, older rows and
	 * whole older series and parts are skipped, and candidates are cut back
	 * to `limit` as they pile up, so memory stays bounded by the limit.
	 * Within a part, the newest minutes are read first (a block's time
	 * slices): when they hold `limit` events, nothing older can be among
	 * the newest; else the window grows fourfold. */
	int64_t cutoff = INT64_MIN;
	for (size_t k = scan_parts(scan); k-- > 0;) {
		const struct store_segment *p = scan_begin(scan, k);
		if (!p)
			continue;
		if (p->max_ts < cutoff) {
			scan_end(scan, k);
			continue;
		}
		int64_t top = MIN(p->max_ts, r->scope.end_ms - 1), floor = MAX(cutoff, r->scope.start_ms);
		for (int64_t window = EVENTS_FIRST_WINDOW_MS;; window *= 4) {
			int64_t since = top - window > floor ? top - window : INT64_MIN;
			nc = 0;
			uint64_t matched = collect(scan, r, p, since, cutoff, &c, &nc, &capc);
			if (since == INT64_MIN || nc >= r->limit) {
				scan_count_matched(scan, matched); /* the last window's */
				break;
			}
		}
		/* The newest `limit` of this part are candidates. */
		xqsort(c, nc, sizeof(*c), cmp_cand);
		display_part(d, p);
		for (size_t j = 0; j < nc && j < r->limit; j++) {
			xgrow((void **)&ev, &capev, nev + 1, sizeof(*ev));
			ev[nev++] = (struct event){ c[j].ts, c[j].value, describe(d, p, &c[j]) };
		}
		scan_end(scan, k);
		xqsort(ev, nev, sizeof(*ev), cmp_events);
		while (nev > r->limit)
			free(ev[--nev].json);
		if (nev == r->limit)
			cutoff = ev[nev - 1].ts;
		if (scan_check(scan, NULL))
			break;
	}
	int rc = scan_check(scan, err);
	if (rc)
		goto out;
	xqsort(ev, nev, sizeof(*ev), cmp_events);
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "unit", event_kind_unit(r->scope.kind));
	jsonw_key(&w, "events");
	jsonw_begin_array(&w);
	bool bad = false;
	for (size_t i = 0; i < nev && i < r->limit; i++) {
		if (ev[i].json)
			jsonw_raw(&w, ev[i].json, strlen(ev[i].json));
		else
			bad = true;
	}
	jsonw_end_array(&w);
	jsonw_key(&w, "query_stats");
	scan_stats_json(scan, t0, &w);
	jsonw_end_object(&w);
	rc = jsonw_finish_answer(&w, err);
	if (!rc && bad) {
		buf_puts(err, "internal error: an event was not written as valid JSON");
		rc = JSONW_RC;
	}
out:
	for (size_t i = 0; i < nev; i++)
		free(ev[i].json);
	free_all(ev, c);
	scan_close(scan);
	display_free(d);
	return rc;
}
