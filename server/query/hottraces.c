/* hottraces.c - see hottraces.h. */
#include "hottraces.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "display.h"
#include "hmap.h"
#include "scan.h"
#include "strtab.h"
#include "util.h"

/* The entity attributes named per application, with their type names. */
static const struct {
	const char *type, *attr;
} entity_attrs[] = {
	{ "host", "host.name" },
	{ "cluster", "cluster.name" },
	{ "namespace", "k8s.namespace.name" },
	{ "deployment", "k8s.deployment.name" },
	{ "pod", "k8s.pod.name" },
	{ "container", "container.name" },
	{ "executable", "process.executable.name" },
	{ "script", "script.name" },
};
#define NATTRS (sizeof(entity_attrs) / sizeof(entity_attrs[0]))

const char *ht_app_of(const char *deployment, const char *container, const char *executable,
		      const char *script, char *buf, size_t len, const char **source)
{
	if (deployment && *deployment) {
		*source = "deployment";
		return deployment;
	}
	if (container && *container) {
		*source = "container";
		return container;
	}
	const char *exe = executable && *executable ? executable : "[unknown]";
	if (script && *script) {
		/* Every script of an interpreter is one executable
		 * (python3.11): the script tells the applications apart. */
		int n = snprintf(buf, len, "%s (%s)", script, exe);
		if (n > 0 && (size_t)n < len) {
			*source = "script";
			return buf;
		}
	}
	*source = "executable";
	return exe;
}

/* --- accumulation -------------------------------------------------------- */

/* A (application, frames) pair seen in the window. */
struct acc {
	uint32_t app, sig; /* ids in apps / sigs */
	double seconds;
	double series[HT_BUCKETS];
};

/* An application: its source and entity values (core-seconds by
 * "type\tvalue" id in ents). */
struct app_acc {
	const char *source;
	double seconds;
	double *ent;
	size_t capent;
};

struct ht {
	struct display *d;
	struct strtab apps, sigs, ents;
	struct app_acc *app;
	size_t capapp;
	uint32_t *sig_lines; /* per sig: offset into lines of its first stack's lines */
	size_t capsig;
	struct buf lines;    /* uint32 lines, per sig at sig_lines */
	struct acc *acc;
	size_t nacc, capacc;
	struct hmap index;   /* (app, sig) -> acc */
	uint32_t keys[DISPLAY_MAX_DEPTH], klines[DISPLAY_MAX_DEPTH];
	uint32_t *memo;      /* per stack node of the part: sig + 1 (0: not yet) */
	size_t capmemo;
	double total;
	int64_t min_ts, max_ts;
};

struct acc_key {
	const struct ht *h;
	uint32_t app, sig;
};

static bool acc_eq(const void *ctx, uint32_t idx)
{
	const struct acc_key *k = ctx;
	return k->h->acc[idx].app == k->app && k->h->acc[idx].sig == k->sig;
}

static struct acc *acc_get(struct ht *h, uint32_t app, uint32_t sig)
{
	uint64_t hash = hash_u64((uint64_t)app << 32 | sig);
	struct acc_key k = { h, app, sig };
	uint32_t idx;
	if (hmap_find(&h->index, hash, acc_eq, &k, &idx))
		return &h->acc[idx];
	xgrow((void **)&h->acc, &h->capacc, h->nacc + 1, sizeof(*h->acc));
	struct acc *a = &h->acc[h->nacc];
	memset(a, 0, sizeof(*a));
	a->app = app;
	a->sig = sig;
	hmap_insert(&h->index, hash, (uint32_t)h->nacc);
	h->nacc++;
	return a;
}

/* The signature of a stack node: its display keys as bytes, interned. */
static uint32_t sig_of(struct ht *h, uint32_t stack)
{
	if (stack < h->capmemo && h->memo[stack])
		return h->memo[stack] - 1;
	size_t n = display_stack(h->d, stack, h->keys, h->klines, DISPLAY_MAX_DEPTH);
	size_t before = strtab_count(&h->sigs);
	uint32_t sig = strtab_intern(&h->sigs, (const char *)h->keys, n * sizeof(uint32_t));
	if (strtab_count(&h->sigs) > before) {
		/* First seen: keep its lines (a later stack of the same
		 * functions may differ only in lines). */
		if (h->capsig <= sig)
			xgrow((void **)&h->sig_lines, &h->capsig, (size_t)sig + 1, sizeof(uint32_t));
		h->sig_lines[sig] = (uint32_t)(h->lines.len / sizeof(uint32_t));
		buf_append(&h->lines, h->klines, n * sizeof(uint32_t));
	}
	if (stack < h->capmemo)
		h->memo[stack] = sig + 1;
	return sig;
}

static uint32_t app_id(struct ht *h, const struct store_segment *p, uint32_t labels)
{
	const char *source;
	char buf[600];
	const char *name = ht_app_of(store_seg_label_value(p, labels, "k8s.deployment.name"),
				     store_seg_label_value(p, labels, "container.name"),
				     store_seg_label_value(p, labels, "process.executable.name"),
				     store_seg_label_value(p, labels, "script.name"), buf, sizeof(buf), &source);
	uint32_t id = strtab_intern_cstr(&h->apps, name);
	if (id >= h->capapp) {
		size_t old = h->capapp;
		xgrow((void **)&h->app, &h->capapp, (size_t)id + 1, sizeof(*h->app));
		memset(h->app + old, 0, (h->capapp - old) * sizeof(*h->app));
	}
	if (!h->app[id].source)
		h->app[id].source = source;
	return id;
}

static void add_entities(struct ht *h, uint32_t app, const struct store_segment *p, uint32_t labels,
			 double seconds)
{
	struct app_acc *a = &h->app[app];
	char key[600];
	for (size_t i = 0; i < NATTRS; i++) {
		const char *v = store_seg_label_value(p, labels, entity_attrs[i].attr);
		if (!v || !*v)
			continue;
		int n = snprintf(key, sizeof(key), "%zu\t%s", i, v);
		if (n < 0 || (size_t)n >= sizeof(key))
			continue; /* an over-long value is not named */
		uint32_t id = strtab_intern(&h->ents, key, (size_t)n);
		if (id >= a->capent) {
			size_t old = a->capent;
			xgrow((void **)&a->ent, &a->capent, (size_t)id + 1, sizeof(double));
			memset(a->ent + old, 0, (a->capent - old) * sizeof(double));
		}
		a->ent[id] += seconds;
	}
}

static void read_part(struct ht *h, struct scan *scan, const struct store_segment *p,
		      const struct scope *sc)
{
	display_part(h->d, p);
	const struct scan_ids ids = scan_stack_ids(scan);
	if (h->capmemo < ids.count + 1)
		xgrow((void **)&h->memo, &h->capmemo, ids.count + 1, sizeof(uint32_t));
	memset(h->memo, 0, h->capmemo * sizeof(uint32_t));
	double width = (double)(sc->end_ms - sc->start_ms) / HT_BUCKETS;
	for (uint32_t j = 0; j < p->nseries; j++) {
		if (!scan_selected(scan, j))
			continue;
		const struct store_series *ps = &p->series[j];
		double unit = sc->kind == SEK_ON_CPU ? (ps->hz ? 1.0 / ps->hz : 0) : 1e-9;
		if (unit == 0)
			continue;
		const struct store_row *rows;
		long n = scan_rows(scan, j, &rows);
		if (n <= 0)
			continue;
		uint32_t app = app_id(h, p, ps->labels);
		double sum = 0;
		uint64_t matched = 0;
		for (long i = 0; i < n; i++) {
			const struct store_row *row = &rows[i];
			if (!scan_in_range(sc, row->ts_ms) || !row->value)
				continue;
			matched++;
			double s = (double)row->value * unit;
			uint32_t sig = sig_of(h, scan_id(&ids, row->stack));
			struct acc *a = acc_get(h, app, sig);
			a->seconds += s;
			size_t b = (size_t)((double)(row->ts_ms - sc->start_ms) / width);
			a->series[b < HT_BUCKETS ? b : HT_BUCKETS - 1] += s;
			sum += s;
			h->min_ts = MIN(h->min_ts, row->ts_ms);
			h->max_ts = MAX(h->max_ts, row->ts_ms);
		}
		scan_count_matched(scan, matched);
		h->total += sum;
		h->app[app].seconds += sum;
		add_entities(h, app, p, ps->labels, sum);
	}
}

/* --- the result ----------------------------------------------------------- */

static int cmp_trace(const void *a, const void *b)
{
	double x = ((const struct ht_trace *)a)->seconds, y = ((const struct ht_trace *)b)->seconds;
	return x < y ? 1 : x > y ? -1 : 0;
}

static int cmp_app(const void *a, const void *b)
{
	const struct ht_app *x = a, *y = b;
	if (x->peak != y->peak)
		return x->peak < y->peak ? 1 : -1;
	return strcmp(x->name, y->name);
}

static int cmp_entity(const void *a, const void *b)
{
	const struct ht_entity *x = a, *y = b;
	int t = strcmp(x->type, y->type);
	if (t)
		return t;
	return x->seconds < y->seconds ? 1 : x->seconds > y->seconds ? -1 : strcmp(x->value, y->value);
}

static void trace_free(struct ht_trace *t)
{
	for (size_t f = 0; f < t->nframes; f++) {
		free_all(t->frames[f].name, t->frames[f].binary, t->frames[f].file);
	}
	free(t->frames);
}

static void app_free(struct ht_app *a)
{
	for (size_t t = 0; t < a->ntraces; t++)
		trace_free(&a->traces[t]);
	free(a->traces);
	for (size_t e = 0; e < a->nentities; e++)
		free(a->entities[e].value);
	free_all(a->entities, a->name);
}

static void make_trace(struct ht *h, const struct acc *a, const struct ht_result *r,
		       struct ht_trace *t)
{
	memset(t, 0, sizeof(*t));
	size_t n = strtab_len(&h->sigs, a->sig) / sizeof(uint32_t);
	const uint32_t *keys = (const uint32_t *)(const void *)strtab_get(&h->sigs, a->sig);
	/* An empty stack (every frame masked) is the empty string, id 0,
	 * never "first seen": it has no lines. */
	const uint32_t *lines = n ? (const uint32_t *)(const void *)(h->lines.data) + h->sig_lines[a->sig] : NULL;
	t->frames = xcalloc(n ? n : 1, sizeof(*t->frames));
	t->nframes = n;
	uint64_t id = hash_bytes(strtab_get(&h->apps, a->app), strtab_len(&h->apps, a->app));
	for (size_t i = 0; i < n; i++) {
		uint32_t key;
		memcpy(&key, &keys[i], sizeof(key)); /* the strtab aligns nothing */
		uint32_t line;
		memcpy(&line, &lines[i], sizeof(line));
		const struct dkey *k = display_get(h->d, key);
		struct ht_frame *f = &t->frames[i];
		f->type = k->type;
		f->name = xstrdup(display_str(h->d, k->name));
		f->binary = xstrdup(display_str(h->d, k->binary));
		f->file = k->file ? xstrdup(display_str(h->d, k->file)) : NULL;
		f->line = line;
		id = hash_mix(id, hash_bytes(f->name, strlen(f->name)));
		id = hash_mix(id, hash_bytes(f->binary, strlen(f->binary)) ^ f->type);
	}
	t->id = id;
	t->seconds = a->seconds;
	t->share = r->total_seconds > 0 ? a->seconds / r->total_seconds : 0;
	t->cores = a->seconds / r->window_seconds;
	for (size_t b = 0; b < HT_BUCKETS; b++)
		t->series[b] = a->series[b] / r->bucket_seconds;
}

static void finish(struct ht *h, const struct ht_params *p, struct ht_result *r)
{
	r->total_seconds = h->total;
	r->bucket_seconds = (double)(r->end_ms - r->start_ms) / 1000.0 / HT_BUCKETS;
	/* The window cut to the data it holds, from the first bucket with
	 * data to the end (a server that started an hour ago has an hour of
	 * data): averages over what was seen, and never above the peak
	 * bucket. */
	size_t b0 = 0;
	if (h->min_ts <= h->max_ts && r->bucket_seconds > 0)
		b0 = (size_t)MIN((double)(HT_BUCKETS - 1),
				 (double)(h->min_ts - r->start_ms) / 1000.0 / r->bucket_seconds);
	r->window_seconds = MAX(1.0, (double)(HT_BUCKETS - b0) * r->bucket_seconds);
	size_t napps = strtab_count(&h->apps);
	struct ht_app *apps = xcalloc(napps ? napps : 1, sizeof(*apps));
	size_t *cap = xcalloc(napps ? napps : 1, sizeof(size_t));
	for (size_t i = 0; i < h->nacc; i++) {
		const struct acc *a = &h->acc[i];
		if (h->total <= 0 || a->seconds / h->total < p->min_share)
			continue;
		struct ht_app *app = &apps[a->app];
		xgrow((void **)&app->traces, &cap[a->app], app->ntraces + 1, sizeof(*app->traces));
		make_trace(h, a, r, &app->traces[app->ntraces]);
		uint64_t tid = app->traces[app->ntraces].id;
		if (p->nsuppressed && bsearch(&tid, p->suppressed, p->nsuppressed, sizeof(tid), cmp_u64)) {
			trace_free(&app->traces[app->ntraces]);
			r->suppressed++;
			continue;
		}
		app->ntraces++;
	}
	free(cap);
	size_t kept = 0;
	for (size_t i = 0; i < napps; i++) {
		struct ht_app *app = &apps[i];
		if (!app->ntraces) {
			free(app->traces); /* every trace suppressed */
			continue;
		}
		qsort(app->traces, app->ntraces, sizeof(*app->traces), cmp_trace);
		while (app->ntraces > HT_MAX_TRACES_PER_APP)
			trace_free(&app->traces[--app->ntraces]);
		app->name = xstrdup(strtab_get(&h->apps, (uint32_t)i));
		app->source = h->app[i].source;
		for (size_t t = 0; t < app->ntraces; t++) {
			app->seconds += app->traces[t].seconds;
			for (size_t b = 0; b < HT_BUCKETS; b++)
				app->series[b] += app->traces[t].series[b];
		}
		app->share = h->total > 0 ? app->seconds / h->total : 0;
		app->cores = app->seconds / r->window_seconds;
		for (size_t b = 0; b < HT_BUCKETS; b++)
			app->peak = MAX(app->peak, app->series[b]);
		/* Entities. */
		const struct app_acc *aa = &h->app[i];
		size_t cape = 0;
		for (size_t e = 0; e < aa->capent && e < strtab_count(&h->ents); e++) {
			if (aa->ent[e] <= 0)
				continue;
			const char *key = strtab_get(&h->ents, (uint32_t)e);
			const char *tab = strchr(key, '\t');
			if (!tab)
				continue;
			xgrow((void **)&app->entities, &cape, app->nentities + 1, sizeof(*app->entities));
			struct ht_entity *en = &app->entities[app->nentities++];
			en->type = entity_attrs[strtoul(key, NULL, 10) % NATTRS].type;
			en->value = xstrdup(tab + 1);
			en->seconds = aa->ent[e];
		}
		qsort(app->entities, app->nentities, sizeof(*app->entities), cmp_entity);
		/* At most HT_MAX_ENTITIES per type. */
		size_t w = 0, run = 0;
		for (size_t e = 0; e < app->nentities; e++) {
			run = e && strcmp(app->entities[e].type, app->entities[e - 1].type) == 0 ? run + 1 : 0;
			if (run >= HT_MAX_ENTITIES) {
				free(app->entities[e].value);
				continue;
			}
			app->entities[w++] = app->entities[e];
		}
		app->nentities = w;
		apps[kept++] = *app;
	}
	qsort(apps, kept, sizeof(*apps), cmp_app);
	while (kept > HT_MAX_APPS)
		app_free(&apps[--kept]);
	r->apps = apps;
	r->napps = kept;
}

int hottraces_compute(struct store *st, struct symbols *sym, const struct ht_params *p,
		      struct ht_result *out, struct buf *err)
{
	memset(out, 0, sizeof(*out));
	struct scope sc = { .kind = p->kind };
	memcpy(sc.project_id, p->project_id, sizeof(sc.project_id));
	sc.end_ms = p->end_ms;
	sc.start_ms = p->end_ms - (p->window_ms > 0 ? p->window_ms : HT_DEFAULT_WINDOW_MS);
	out->kind = p->kind;
	out->start_ms = sc.start_ms;
	out->end_ms = sc.end_ms;
	struct display_opts o = { 0 };
	struct ht h = { .min_ts = INT64_MAX, .max_ts = INT64_MIN };
	h.d = display_new(sym, NULL, &o, "masks", err);
	if (!h.d)
		return -1;
	strtab_init(&h.apps);
	strtab_init(&h.sigs);
	strtab_init(&h.ents);
	int rc = -1;
	struct scan *scan = scan_open(st, &sc, err);
	if (scan) {
		for (size_t i = 0; i < scan_parts(scan); i++) {
			const struct store_segment *part = scan_begin(scan, i);
			if (!part)
				continue;
			read_part(&h, scan, part, &sc);
			scan_end(scan, i);
		}
		/* A pattern that reached its bounds, a store read that failed:
		 * no answer rather than a wrong one. */
		rc = scan_check(scan, err);
		scan_close(scan);
		if (rc == 0)
			finish(&h, p, out);
	}
	display_free(h.d);
	for (size_t i = 0; i < h.capapp; i++)
		free(h.app[i].ent);
	free(h.app);
	strtab_free(&h.apps);
	strtab_free(&h.sigs);
	strtab_free(&h.ents);
	free(h.sig_lines);
	buf_free(&h.lines);
	free(h.acc);
	hmap_free(&h.index);
	free(h.memo);
	return rc;
}

void ht_result_free(struct ht_result *r)
{
	for (size_t i = 0; i < r->napps; i++)
		app_free(&r->apps[i]);
	free(r->apps);
	memset(r, 0, sizeof(*r));
}
