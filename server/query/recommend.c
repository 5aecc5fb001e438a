/* recommend.c - see recommend.h. */
#include "recommend.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmap.h"
#include "patterns.h"
#include "sqldb.h"
#include "util.h"

#define CACHE_SLOTS 64

void recs_config_default(struct recs_config *c)
{
	c->cost_per_core_hour = 0.04;
	c->cost_per_gpu_hour = 2.50;
	c->window_ms = HT_DEFAULT_WINDOW_MS;
	c->min_share = HT_DEFAULT_MIN_SHARE;
	c->stale_ms = 60000;
}

struct cache_slot {
	char project[37];
	uint8_t kind;       /* SEK_x */
	int64_t computed_ms;
	json_t *recs;       /* array, without states */
};

struct recs {
	struct recs_config c;
	sqlite3 *db;
	pthread_mutex_t mu; /* guards cache */
	pthread_mutex_t db_mu; /* one state change at a time (its transaction on the one connection) */
	struct cache_slot cache[CACHE_SLOTS];
};

int recs_open(const char *dir, const struct recs_config *c, struct recs **out, struct buf *err)
{
	struct recs *r = xcalloc(1, sizeof(*r));
	r->c = *c;
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->db_mu, NULL);
	struct buf path = { 0 };
	buf_printf(&path, "%s/recs.db", dir);
	int rc = sqldb_open(path.data, &r->db, err);
	buf_free(&path);
	if (rc < 0 ||
	    sqldb_exec(r->db,
		       "CREATE TABLE IF NOT EXISTS rec_state (project TEXT NOT NULL, id TEXT NOT NULL, "
		       "state TEXT NOT NULL, updated_ms INTEGER NOT NULL, PRIMARY KEY (project, id));"
		       "CREATE TABLE IF NOT EXISTS rec_history (project TEXT NOT NULL, id TEXT NOT NULL, "
		       "at_ms INTEGER NOT NULL, actor TEXT NOT NULL, from_state TEXT NOT NULL, "
		       "to_state TEXT NOT NULL);",
		       err) < 0) {
		recs_close(r);
		return -1;
	}
	*out = r;
	return 0;
}

void recs_close(struct recs *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < CACHE_SLOTS; i++)
		json_decref(r->cache[i].recs);
	sqlite3_close(r->db);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->db_mu);
	free(r);
}

/* --- building ------------------------------------------------------------ */

static const char *type_name(uint8_t t)
{
	static const char *const names[] = {
		[SFT_KERNEL] = "kernel",           [SFT_NATIVE] = "native",
		[SFT_CPYTHON] = "cpython",         [SFT_GO] = "go",
		[SFT_JVM] = "jvm",                 [SFT_V8] = "v8",
		[SFT_RUBY] = "ruby",               [SFT_PHP] = "php",
		[SFT_PERL] = "perl",               [SFT_DOTNET] = "dotnet",
		[SFT_CUDA_LAUNCH] = "cuda_launch", [SFT_CUDA_KERNEL] = "cuda_kernel",
		[SFT_CUDA_SASS] = "cuda_sass",     [SFT_CUDA_STALL] = "cuda_stall",
		[SFT_ERROR] = "error",             [SFT_CUDA_MEMCPY] = "cuda_memcpy",
		[SFT_CUDA_MEMSET] = "cuda_memset", [SFT_CUDA_SYNC] = "cuda_sync",
		[SFT_NVTX] = "nvtx",
	};
	return t < ARRAY_SIZE(names) && names[t] ? names[t] : "unknown";
}

/* x to 6 significant digits: small averages (a minute of work in a 6 h
 * window) keep their precision, big ones lose noise. */
static double sig6(double x)
{
	if (x == 0 || !isfinite(x))
		return 0;
	double scale = pow(10, 5 - floor(log10(fabs(x))));
	return round(x * scale) / scale;
}

static json_t *frame_json(const struct ht_frame *f, const char *role)
{
	json_t *o = json_pack("{s:s, s:s, s:s}", "name", f->name, "type", type_name(f->type),
			      "binary", f->binary);
	if (f->file)
		json_object_set_new(o, "file", json_string(f->file));
	if (f->line)
		json_object_set_new(o, "line", json_integer(f->line));
	if (role)
		json_object_set_new(o, "role", json_string(role));
	return o;
}

static json_t *series_json(const double *v)
{
	json_t *a = json_array();
	for (size_t b = 0; b < HT_BUCKETS; b++)
		json_array_append_new(a, json_real(sig6(v[b])));
	return a;
}

/* Savings of `amount` (cores, GPUs or threads, averaged) for a kind. */
static json_t *savings_json(uint8_t kind, double amount, const struct recs_config *c)
{
	if (kind == SEK_CUDA)
		return json_pack("{s:f, s:f}", "gpu_seconds_per_hour", sig6(amount * 3600),
				 "annual_cost", round(amount * HOURS_PER_YEAR * c->cost_per_gpu_hour * 100) / 100);
	if (kind == SEK_OFF_CPU)
		return json_pack("{s:f, s:f, s:f}", "cores", 0.0, "blocked_threads", sig6(amount),
				 "annual_cost", 0.0);
	return json_pack("{s:f, s:f}", "cores", sig6(amount), "annual_cost",
			 round(amount * HOURS_PER_YEAR * c->cost_per_core_hour * 100) / 100);
}

static const char *unit_of(uint8_t kind)
{
	return kind == SEK_CUDA ? "gpus" : kind == SEK_OFF_CPU ? "threads" : "cores";
}

static const char *kind_word(uint8_t kind)
{
	return kind == SEK_CUDA ? "cuda" : kind == SEK_OFF_CPU ? "off_cpu" : "on_cpu";
}

/* The leaf-most frame worth naming: not kernel (for CPU work). */
static const struct ht_frame *leaf_of(const struct ht_trace *t)
{
	for (size_t i = t->nframes; i-- > 0;)
		if (t->frames[i].type != SFT_KERNEL)
			return &t->frames[i];
	return t->nframes ? &t->frames[t->nframes - 1] : NULL;
}

static void id_hex(uint64_t v, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)v);
}

struct finding {
	const struct pattern *p;
	double amount;     /* cores/GPUs/threads of the traces it claims */
	double share;
	size_t ntraces;
};

static int cmp_finding(const void *a, const void *b)
{
	const struct finding *x = a, *y = b;
	double sx = x->amount * x->p->removes, sy = y->amount * y->p->removes;
	return sx < sy ? 1 : sx > sy ? -1 : strcmp(x->p->id, y->p->id);
}

static void build_app(const struct ht_result *h, const struct ht_app *app, const char *project,
		      const struct recs_config *c, json_t *arr)
{
	uint8_t kind = h->kind;
	struct finding f[64];
	size_t nf = 0;
	json_t *evidence = json_array(), *traces = json_array(), *usage = json_array();
	struct pat_match *m = xcalloc(app->ntraces ? app->ntraces : 1, sizeof(*m));
	bool *matched = xcalloc(app->ntraces ? app->ntraces : 1, sizeof(bool));
	const struct pattern *alsov[HT_MAX_TRACES_PER_APP][8];
	size_t also[HT_MAX_TRACES_PER_APP] = { 0 };
	size_t ntr = MIN(app->ntraces, (size_t)HT_MAX_TRACES_PER_APP);
	/* Match every trace, and sum what each pattern claims. */
	for (size_t i = 0; i < ntr; i++) {
		const struct ht_trace *t = &app->traces[i];
		matched[i] = pat_match(kind, t, &m[i], alsov[i], ARRAY_SIZE(alsov[i]), &also[i]);
		if (!matched[i])
			continue;
		size_t k = 0;
		while (k < nf && f[k].p != m[i].p)
			k++;
		if (k == nf) {
			if (nf == ARRAY_SIZE(f)) {
				matched[i] = false;
				continue;
			}
			f[nf++] = (struct finding){ .p = m[i].p };
		}
		f[k].amount += t->cores;
		f[k].share += t->share;
		f[k].ntraces++;
	}
	/* A pattern speaks when the traces it claims hold its minimum share
	 * of the project's time together; else they stay unexplained. */
	size_t kept = 0;
	for (size_t k = 0; k < nf; k++) {
		if (f[k].share >= f[k].p->min_share) {
			f[kept++] = f[k];
			continue;
		}
		for (size_t i = 0; i < ntr; i++)
			if (matched[i] && m[i].p == f[k].p)
				matched[i] = false;
	}
	nf = kept;
	for (size_t i = 0; i < ntr; i++) {
		const struct ht_trace *t = &app->traces[i];
		char tid[17];
		id_hex(t->id, tid);
		const struct ht_frame *leaf = leaf_of(t);
		json_t *tj = json_pack("{s:s, s:f, s:f, s:s, s:o}", "id", tid,
				       "share", sig6(t->share), "cores", sig6(t->cores),
				       "leaf", leaf ? leaf->name : "", "frames", json_array());
		for (size_t k = 0; k < t->nframes; k++)
			json_array_append_new(json_object_get(tj, "frames"), frame_json(&t->frames[k], NULL));
		json_object_set_new(tj, "pattern", matched[i] ? json_string(m[i].p->id) : json_null());
		json_t *aj = json_array();
		for (size_t k = 0; k < also[i] && k < ARRAY_SIZE(alsov[i]); k++)
			json_array_append_new(aj, json_string(alsov[i][k]->id));
		json_object_set_new(tj, "also_matched", aj);
		json_array_append_new(traces, tj);
		json_array_append_new(usage, json_pack("{s:s, s:o}", "trace", tid, "series", series_json(t->series)));
		if (!matched[i])
			continue;
		/* Evidence: the frames the rule matched, with the trace's share. */
		json_t *fr = json_array();
		if (m[i].caller != SIZE_MAX)
			json_array_append_new(fr, frame_json(&t->frames[m[i].caller], "caller"));
		json_array_append_new(fr, frame_json(&t->frames[m[i].anchor], "anchor"));
		if (leaf && leaf != &t->frames[m[i].anchor])
			json_array_append_new(fr, frame_json(leaf, "leaf"));
		json_array_append_new(evidence, json_pack("{s:s, s:s, s:f, s:f, s:o}", "pattern", m[i].p->id,
							  "trace", tid, "share", sig6(t->share),
							  "cores", sig6(t->cores), "frames", fr));
	}
	if (!nf && kind == SEK_OFF_CPU) {
		/* Off-CPU time is only a recommendation when a pattern
		 * explains it (most waiting is idle, not a cost). */
		json_decref(evidence);
		json_decref(traces);
		json_decref(usage);
		free(m);
		free(matched);
		return;
	}
	qsort(f, nf, sizeof(*f), cmp_finding);
	json_t *actions = json_array();
	double total_saved = 0;
	for (size_t k = 0; k < nf; k++) {
		double saved = f[k].amount * f[k].p->removes;
		total_saved += saved;
		json_t *steps = json_array();
		for (size_t s = 0; s < PAT_MAX_ACTIONS && f[k].p->actions[s]; s++)
			json_array_append_new(steps, json_string(f[k].p->actions[s]));
		json_array_append_new(actions, json_pack("{s:i, s:s, s:s, s:s, s:s, s:o, s:f, s:f, s:o, s:i}",
			"rank", (json_int_t)k + 1, "pattern", f[k].p->id, "title", f[k].p->title,
			"category", f[k].p->category, "explanation", f[k].p->explanation, "steps", steps,
			"share", sig6(f[k].share), "removes", f[k].p->removes,
			"savings", savings_json(kind, saved, c), "hot_traces", (json_int_t)f[k].ntraces));
	}
	/* Hot traces no pattern explains: named for a user to look at. */
	json_t *lower = json_array();
	for (size_t i = 0; i < ntr; i++) {
		if (matched[i])
			continue;
		const struct ht_frame *leaf = leaf_of(&app->traces[i]);
		if (!leaf)
			continue;
		char where[512] = "";
		if (leaf->file)
			snprintf(where, sizeof(where), " (%s%s%u)", leaf->file, leaf->line ? ":" : "",
				 leaf->line);
		char line[1024];
		snprintf(line, sizeof(line), "No known pattern: %s%s uses %.1f%% of the project's %s time; "
			 "look at it in the flamegraph",
			 leaf->name, where, app->traces[i].share * 100, kind == SEK_CUDA ? "GPU" : "CPU");
		json_array_append_new(lower, json_string(line));
	}
	char title[600];
	const char *app_name = app->name;
	if (nf)
		snprintf(title, sizeof(title), "%s in %s", f[0].p->title, app_name);
	else {
		const struct ht_frame *leaf = app->ntraces ? leaf_of(&app->traces[0]) : NULL;
		snprintf(title, sizeof(title), "Hot code path in %s: %s", app_name, leaf ? leaf->name : "?");
	}
	const char *conf = !nf ? "low" : f[0].share >= 0.5 * app->share ? "high" : "medium";
	uint64_t idh = hash_bytes(project, strlen(project));
	idh = hash_mix(idh, hash_bytes(app_name, strlen(app_name)));
	idh = hash_mix(idh, kind);
	char id[17];
	id_hex(idh, id);
	json_t *ents = json_array();
	for (size_t e = 0; e < app->nentities; e++)
		json_array_append_new(ents, json_pack("{s:s, s:s, s:f}", "type", app->entities[e].type,
						       "value", app->entities[e].value, "cores",
						       sig6(app->entities[e].seconds / h->window_seconds)));
	char issue[1400];
	snprintf(issue, sizeof(issue), "%s: %zu hot trace%s of %s use %.2f %s on average (%.1f%% of the "
		 "project's %s time), peaking at %.2f.%s%s",
		 nf ? f[0].p->title : "Hot code paths", app->ntraces, app->ntraces == 1 ? "" : "s",
		 app_name, app->cores, unit_of(kind), app->share * 100,
		 kind == SEK_CUDA ? "GPU" : kind == SEK_OFF_CPU ? "off-CPU" : "CPU", app->peak,
		 nf ? " " : "", nf ? f[0].p->explanation : "");
	json_t *rec = json_pack(
		"{s:s, s:s, s:s, s:s, s:s, s:s, s:f, s:s, s:f, s:f, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o}",
		"id", id, "kind", kind == SEK_CUDA ? "cuda" : "cpu", "event_kind", kind_word(kind),
		"title", title, "application", app_name, "application_source", app->source,
		"peak", sig6(app->peak), "unit", unit_of(kind),
		"cores", sig6(app->cores), "share", sig6(app->share),
		"savings", savings_json(kind, total_saved, c), "actions", actions, "issue", issue,
		"evidence", evidence,
		"window", json_pack("{s:I, s:I, s:f}", "start_ms", (json_int_t)h->start_ms, "end_ms",
				    (json_int_t)h->end_ms, "bucket_seconds", h->bucket_seconds),
		"usage", json_pack("{s:o, s:o}", "total", series_json(app->series), "traces", usage),
		"entities", ents,
		"technical", json_pack("{s:s, s:o, s:o, s:s}", "confidence", conf, "lower_priority", lower,
				       "hot_traces", traces, "analyzer", "built-in"));
	json_array_append_new(arr, rec);
	free(m);
	free(matched);
}

void recs_build(const struct ht_result *h, const char *project, const struct recs_config *c,
		json_t *arr)
{
	for (size_t i = 0; i < h->napps; i++)
		build_app(h, &h->apps[i], project, c, arr);
}

/* --- answering ------------------------------------------------------------ */

/* The cached recommendations of (project, kind), computed when stale.
 * Returns a new reference, or NULL with err set. */
static json_t *cached(struct recs *r, struct store *st, struct symbols *sym, const char *project,
		      uint8_t kind, int64_t now_ms, struct buf *err)
{
	pthread_mutex_lock(&r->mu);
	struct cache_slot *slot = NULL, *oldest = &r->cache[0];
	for (size_t i = 0; i < CACHE_SLOTS; i++) {
		struct cache_slot *s = &r->cache[i];
		if (s->recs && s->kind == kind && strcmp(s->project, project) == 0) {
			slot = s;
			break;
		}
		if (!s->recs || (oldest->recs && s->computed_ms < oldest->computed_ms))
			oldest = s;
	}
	if (slot && now_ms - slot->computed_ms < r->c.stale_ms && now_ms >= slot->computed_ms) {
		json_t *a = json_deep_copy(slot->recs);
		pthread_mutex_unlock(&r->mu);
		return a;
	}
	pthread_mutex_unlock(&r->mu);
	/* Computed outside the lock: two requests may both compute; the
	 * later one's answer is kept. */
	struct ht_params p = { .kind = kind, .end_ms = now_ms, .window_ms = r->c.window_ms,
			       .min_share = r->c.min_share };
	snprintf(p.project_id, sizeof(p.project_id), "%s", project);
	struct ht_result h;
	if (hottraces_compute(st, sym, &p, &h, err) < 0)
		return NULL;
	json_t *arr = json_array();
	recs_build(&h, project, &r->c, arr);
	ht_result_free(&h);
	pthread_mutex_lock(&r->mu);
	if (!slot || slot->kind != kind || strcmp(slot->project, project) != 0)
		slot = oldest;
	json_decref(slot->recs);
	snprintf(slot->project, sizeof(slot->project), "%s", project);
	slot->kind = kind;
	slot->computed_ms = now_ms;
	slot->recs = json_deep_copy(arr);
	pthread_mutex_unlock(&r->mu);
	return arr;
}

static int cmp_peak(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	double px = json_real_value(json_object_get(x, "peak"));
	double py = json_real_value(json_object_get(y, "peak"));
	/* GPU recommendations first within equal... peaks of different
	 * units are compared as numbers (cores and GPUs). */
	return px < py ? 1 : px > py ? -1 :
	       strcmp(json_string_value(json_object_get(x, "id")), json_string_value(json_object_get(y, "id")));
}

static const char *state_of(struct recs *r, const char *project, const char *id)
{
	sqlite3_stmt *q = NULL;
	const char *state = "active";
	if (sqlite3_prepare_v2(r->db, "SELECT state FROM rec_state WHERE project = ?1 AND id = ?2", -1,
			       &q, NULL) != SQLITE_OK)
		return state;
	sqlite3_bind_text(q, 1, project, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(q) == SQLITE_ROW) {
		const char *s = (const char *)sqlite3_column_text(q, 0);
		if (s && strcmp(s, "dismissed") == 0)
			state = "dismissed";
	}
	sqlite3_finalize(q);
	return state;
}

int recs_query(struct recs *r, struct store *st, struct symbols *sym, const char *project,
	       const char *kind, int64_t now_ms, struct buf *out, struct buf *err)
{
	bool cpu = strcmp(kind, "cpu") == 0, cuda = strcmp(kind, "cuda") == 0, all = strcmp(kind, "all") == 0;
	if (!cpu && !cuda && !all) {
		buf_printf(err, "kind: expected cpu, cuda or all");
		return -1;
	}
	uint8_t kinds[3];
	size_t nk = 0;
	if (cpu || all) {
		kinds[nk++] = SEK_ON_CPU;
		kinds[nk++] = SEK_OFF_CPU;
	}
	if (cuda || all)
		kinds[nk++] = SEK_CUDA;
	json_t *list = json_array();
	for (size_t i = 0; i < nk; i++) {
		json_t *a = cached(r, st, sym, project, kinds[i], now_ms, err);
		if (!a) {
			json_decref(list);
			return -1;
		}
		json_array_extend(list, a);
		json_decref(a);
	}
	size_t n = json_array_size(list);
	json_t **v = xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = json_array_get(list, i);
	qsort(v, n, sizeof(*v), cmp_peak);
	json_t *sorted = json_array();
	for (size_t i = 0; i < n; i++) {
		json_object_set_new(v[i], "state",
				    json_string(state_of(r, project, json_string_value(json_object_get(v[i], "id")))));
		json_array_append(sorted, v[i]);
	}
	free(v);
	json_decref(list);
	json_t *doc = json_pack("{s:o, s:{s:f, s:f, s:I, s:f, s:I, s:s}}", "recommendations", sorted,
				"settings", "cost_per_core_hour", r->c.cost_per_core_hour,
				"cost_per_gpu_hour", r->c.cost_per_gpu_hour, "window_ms",
				(json_int_t)r->c.window_ms, "min_share", r->c.min_share, "step_ms",
				(json_int_t)r->c.stale_ms, "analyzer", "built-in");
	char *s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (!s) {
		buf_puts(err, "out of memory");
		return -1;
	}
	buf_puts(out, s);
	buf_puts(out, "\n");
	free(s);
	return 0;
}

int recs_set_state(struct recs *r, const char *project, const char *id, const char *state,
		   const char *actor, int64_t now_ms, struct buf *err)
{
	if (strcmp(state, "dismissed") != 0 && strcmp(state, "active") != 0) {
		buf_puts(err, "state: expected \"dismissed\" or \"active\"");
		return -1;
	}
	size_t len = strlen(id);
	bool hex = len == 16;
	for (size_t i = 0; hex && i < len; i++)
		hex = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
	if (!hex) {
		buf_puts(err, "recommendation id: expected 16 lower-case hex digits");
		return -1;
	}
	const char *from = state_of(r, project, id);
	sqlite3_stmt *q = NULL;
	pthread_mutex_lock(&r->db_mu);
	if (sqldb_exec(r->db, "BEGIN IMMEDIATE", err) < 0) {
		pthread_mutex_unlock(&r->db_mu);
		return -2;
	}
	int rc = -2;
	if (sqldb_prepare(r->db, "INSERT INTO rec_state (project, id, state, updated_ms) VALUES (?1, ?2, ?3, ?4) "
				 "ON CONFLICT (project, id) DO UPDATE SET state = ?3, updated_ms = ?4", &q, err) < 0)
		goto out;
	sqlite3_bind_text(q, 1, project, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 3, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 4, now_ms);
	if (sqlite3_step(q) != SQLITE_DONE) {
		sqldb_error(r->db, err);
		goto out;
	}
	sqlite3_finalize(q);
	q = NULL;
	if (sqldb_prepare(r->db, "INSERT INTO rec_history (project, id, at_ms, actor, from_state, to_state) "
				 "VALUES (?1, ?2, ?3, ?4, ?5, ?6)", &q, err) < 0)
		goto out;
	sqlite3_bind_text(q, 1, project, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 2, id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 3, now_ms);
	sqlite3_bind_text(q, 4, actor ? actor : "", -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 5, from, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 6, state, -1, SQLITE_STATIC);
	if (sqlite3_step(q) != SQLITE_DONE) {
		sqldb_error(r->db, err);
		goto out;
	}
	rc = 0;
out:
	sqlite3_finalize(q);
	struct buf ignored = { 0 };
	if (sqldb_exec(r->db, rc == 0 ? "COMMIT" : "ROLLBACK", rc == 0 ? err : &ignored) < 0 && rc == 0)
		rc = -2;
	buf_free(&ignored);
	pthread_mutex_unlock(&r->db_mu);
	return rc;
}
