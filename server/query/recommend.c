/* recommend.c - see recommend.h. */
#include "recommend.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "display.h"
#include "hmap.h"
#include "jsonw.h"
#include "log.h"
#include "patterns.h"
#include "metadb.h"
#include "util.h"

#define CACHE_SLOTS 64
#define NKINDS 3

static const uint8_t gen_kinds[NKINDS] = { SEK_ON_CPU, SEK_OFF_CPU, SEK_CUDA };

void recs_config_default(struct recs_config *c)
{
	c->cost_per_core_hour = 0.04;
	c->cost_per_gpu_hour = 2.50;
	c->window_ms = HT_DEFAULT_WINDOW_MS;
	c->min_share = HT_DEFAULT_MIN_SHARE;
	c->stale_ms = 60000;
}

/* The last generation of a project. */
struct cache_slot {
	char project[37];
	uint64_t seq;          /* generation number, from 1 */
	int64_t generated_ms;  /* 0: the slot is free */
	int64_t elapsed_ms;
	char trigger[16];      /* "schedule", "request", "regenerate", "refresh" or "suppress" */
	json_t *recs;          /* array of every kind, with status and generated_at, without states */
	struct ht_result ht[NKINDS]; /* its hot traces, analysed again by a regenerate */
};

struct recs {
	struct recs_config c;     /* in effect (flags overridden by rec_settings); under mu */
	struct recs_config flags; /* the flags' values: what a reset setting returns to */
	unsigned overridden;      /* bit per setting key stored in rec_settings; under mu */
	struct metadb *db;        /* recs.db, or the shared PostgreSQL of every replica */
	pthread_mutex_t mu; /* guards cache, c, overridden */
	pthread_mutex_t db_mu; /* guards db: one statement or transaction at a time on the one connection */
	pthread_mutex_t gen_mu; /* one generation at a time (bounded CPU) */
	struct cache_slot cache[CACHE_SLOTS];
	void (*listener)(void *ctx, const struct recs_event *ev);
	void *listener_ctx;
	recs_analyzer_fn analyzer; /* set before the thread starts, then read only */
	void *analyzer_ctx;
	/* The background thread (recs_start). */
	pthread_t thread;
	bool started, stop, kick; /* kick: start a pass now (settings changed) */
	pthread_cond_t wake; /* with mu: stop, or settings changed */
	struct store *st;
	struct symbols *sym;
	struct projects *pj;
};

static const char *const setting_keys[] = { "cost_per_core_hour", "cost_per_gpu_hour", "window_ms",
					    "min_share", "step_ms" };

static double setting_get(const struct recs_config *c, size_t k)
{
	switch (k) {
	case 0: return c->cost_per_core_hour;
	case 1: return c->cost_per_gpu_hour;
	case 2: return (double)c->window_ms;
	case 3: return c->min_share;
	default: return (double)c->stale_ms;
	}
}

static void setting_set(struct recs_config *c, size_t k, double v)
{
	switch (k) {
	case 0: c->cost_per_core_hour = v; break;
	case 1: c->cost_per_gpu_hour = v; break;
	case 2: c->window_ms = (int64_t)v; break;
	case 3: c->min_share = v; break;
	default: c->stale_ms = (int64_t)v; break;
	}
}

/* Whether v is a valid value of setting k; else a message in err. */
static bool setting_valid(size_t k, double v, struct buf *err)
{
	bool ok;
	switch (k) {
	case 0:
	case 1: ok = v >= 0 && v <= 1e6; break;
	case 2: ok = v >= 60000 && v <= RECS_MAX_WINDOW_MS && v == floor(v); break;
	case 3: ok = v >= 0 && v <= 1; break;
	default: ok = v >= RECS_MIN_STEP_MS && v <= RECS_MAX_STEP_MS && v == floor(v); break;
	}
	if (!ok) {
		static const char *const range[] = { "0 to 1000000", "0 to 1000000",
						     "60000 to 86400000 (whole milliseconds)",
						     "0 to 1 (a fraction: 0.005 is 0.5 %)",
						     "1000 to 86400000 (whole milliseconds)" };
		buf_printf(err, "%s: expected a number from %s", setting_keys[k], range[k]);
	}
	return ok;
}

static int history_add(struct recs *r, const char *project, const char *id, const char *action,
		       const char *actor, const char *from, const char *to, int64_t now_ms,
		       struct buf *err);

/* The tables. rec_history has no key: rows come back newest first by
 * their insertion (SQLite's rowid, PostgreSQL's hseq). */
static const char recs_ddl_sqlite[] =
	"CREATE TABLE IF NOT EXISTS rec_state (project TEXT NOT NULL, id TEXT NOT NULL, "
	"state TEXT NOT NULL, updated_ms INTEGER NOT NULL, PRIMARY KEY (project, id));"
	"CREATE TABLE IF NOT EXISTS rec_history (project TEXT NOT NULL, id TEXT NOT NULL, "
	"at_ms INTEGER NOT NULL, actor TEXT NOT NULL, from_state TEXT NOT NULL, "
	"to_state TEXT NOT NULL, action TEXT NOT NULL DEFAULT 'state');"
	"CREATE TABLE IF NOT EXISTS rec_generation (project TEXT NOT NULL, seq INTEGER NOT NULL, "
	"generated_ms INTEGER NOT NULL, trigger TEXT NOT NULL, elapsed_ms INTEGER NOT NULL, "
	"PRIMARY KEY (project, seq));"
	"CREATE TABLE IF NOT EXISTS rec_gen_item (project TEXT NOT NULL, seq INTEGER NOT NULL, "
	"id TEXT NOT NULL, kind TEXT NOT NULL, savings REAL NOT NULL, peak REAL NOT NULL, "
	"annual_cost REAL NOT NULL, status TEXT NOT NULL, PRIMARY KEY (project, seq, id));"
	"CREATE TABLE IF NOT EXISTS rec_suppressed (project TEXT NOT NULL, trace_id TEXT NOT NULL, "
	"application TEXT NOT NULL, leaf TEXT NOT NULL, actor TEXT NOT NULL, at_ms INTEGER NOT NULL, "
	"PRIMARY KEY (project, trace_id));"
	"CREATE TABLE IF NOT EXISTS rec_settings (key TEXT PRIMARY KEY, value REAL NOT NULL);";
static const char recs_ddl_pg[] =
	"CREATE TABLE IF NOT EXISTS rec_state (project TEXT NOT NULL, id TEXT NOT NULL, "
	"state TEXT NOT NULL, updated_ms BIGINT NOT NULL, PRIMARY KEY (project, id));"
	"CREATE TABLE IF NOT EXISTS rec_history (hseq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
	"project TEXT NOT NULL, id TEXT NOT NULL, at_ms BIGINT NOT NULL, actor TEXT NOT NULL, "
	"from_state TEXT NOT NULL, to_state TEXT NOT NULL, action TEXT NOT NULL DEFAULT 'state');"
	"CREATE TABLE IF NOT EXISTS rec_generation (project TEXT NOT NULL, seq BIGINT NOT NULL, "
	"generated_ms BIGINT NOT NULL, trigger TEXT NOT NULL, elapsed_ms BIGINT NOT NULL, "
	"PRIMARY KEY (project, seq));"
	"CREATE TABLE IF NOT EXISTS rec_gen_item (project TEXT NOT NULL, seq BIGINT NOT NULL, "
	"id TEXT NOT NULL, kind TEXT NOT NULL, savings DOUBLE PRECISION NOT NULL, "
	"peak DOUBLE PRECISION NOT NULL, annual_cost DOUBLE PRECISION NOT NULL, status TEXT NOT NULL, "
	"PRIMARY KEY (project, seq, id));"
	"CREATE TABLE IF NOT EXISTS rec_suppressed (project TEXT NOT NULL, trace_id TEXT NOT NULL, "
	"application TEXT NOT NULL, leaf TEXT NOT NULL, actor TEXT NOT NULL, at_ms BIGINT NOT NULL, "
	"PRIMARY KEY (project, trace_id));"
	"CREATE TABLE IF NOT EXISTS rec_settings (key TEXT PRIMARY KEY, value DOUBLE PRECISION NOT NULL);";

/* A recs.db made before rec_history had an action (every row a state
 * change) gets the column. */
static int add_history_action(struct metadb *db, struct buf *err)
{
	struct metadb_stmt *q = NULL;
	if (metadb_prepare(db, "SELECT 1 FROM pragma_table_info('rec_history') WHERE name = 'action'", &q, err) < 0)
		return -1;
	int has = metadb_step(q, err);
	metadb_finalize(q);
	if (has < 0)
		return -1;
	return has ? 0 : metadb_exec(db, "ALTER TABLE rec_history ADD COLUMN action TEXT NOT NULL DEFAULT 'state'", err);
}

/* The settings in effect: the flags, overridden by rec_settings (which
 * another replica may have changed). db_mu held. */
static int settings_load_locked(struct recs *r, struct buf *err)
{
	struct metadb_stmt *q = NULL;
	if (metadb_prepare(r->db, "SELECT key, value FROM rec_settings", &q, err) < 0)
		return -1;
	pthread_mutex_lock(&r->mu);
	struct recs_config c = r->flags;
	pthread_mutex_unlock(&r->mu);
	unsigned ov = 0;
	int rc;
	while ((rc = metadb_step(q, err)) == 1) {
		const char *k = metadb_text(q, 0);
		double v = metadb_double(q, 1);
		struct buf ignored = { 0 };
		for (size_t i = 0; i < ARRAY_SIZE(setting_keys); i++)
			if (strcmp(k, setting_keys[i]) == 0 && setting_valid(i, v, &ignored)) {
				setting_set(&c, i, v);
				ov |= 1u << i;
			}
		buf_free(&ignored);
	}
	metadb_finalize(q);
	if (rc < 0)
		return -1;
	pthread_mutex_lock(&r->mu);
	r->c = c;
	r->overridden = ov;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

static int settings_load(struct recs *r, struct buf *err)
{
	pthread_mutex_lock(&r->db_mu);
	int rc = settings_load_locked(r, err);
	pthread_mutex_unlock(&r->db_mu);
	return rc;
}

int recs_open(const char *url, const char *password, const struct recs_config *c, struct recs **out,
	      struct buf *err)
{
	*out = NULL;
	struct recs *r = xcalloc(1, sizeof(*r));
	r->c = *c;
	if (r->c.window_ms > RECS_MAX_WINDOW_MS)
		r->c.window_ms = RECS_MAX_WINDOW_MS;
	r->flags = r->c;
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->db_mu, NULL);
	pthread_mutex_init(&r->gen_mu, NULL);
	pthread_cond_init(&r->wake, NULL);
	bool pg = metadb_url_is_postgres(url);
	if (metadb_open_schema(url, password, "recommendations", 1, pg ? recs_ddl_pg : recs_ddl_sqlite, &r->db,
			       err) < 0 ||
	    (!pg && add_history_action(r->db, err) < 0) || settings_load(r, err) < 0) {
		recs_close(r);
		return -1;
	}
	*out = r;
	return 0;
}

bool recs_unavailable(struct recs *r)
{
	pthread_mutex_lock(&r->db_mu);
	bool u = metadb_unavailable(r->db);
	pthread_mutex_unlock(&r->db_mu);
	return u;
}

int recs_open_dir(const char *dir, const struct recs_config *c, struct recs **out, struct buf *err)
{
	struct buf path = { 0 };
	buf_printf(&path, "%s/recs.db", dir);
	int rc = recs_open(path.data, NULL, c, out, err);
	buf_free(&path);
	return rc;
}

static void slot_clear(struct cache_slot *s)
{
	json_decref(s->recs);
	for (size_t k = 0; k < NKINDS; k++)
		ht_result_free(&s->ht[k]);
	memset(s, 0, sizeof(*s));
}

void recs_close(struct recs *r)
{
	if (!r)
		return;
	if (r->started) {
		thread_stop_join(r->thread, &r->mu, &r->wake, &r->stop);
	}
	for (size_t i = 0; i < CACHE_SLOTS; i++)
		slot_clear(&r->cache[i]);
	metadb_close(r->db);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->db_mu);
	pthread_mutex_destroy(&r->gen_mu);
	pthread_cond_destroy(&r->wake);
	free(r);
}

void recs_set_listener(struct recs *r, void (*fn)(void *ctx, const struct recs_event *ev), void *ctx)
{
	r->listener = fn;
	r->listener_ctx = ctx;
}

void recs_set_analyzer(struct recs *r, recs_analyzer_fn fn, void *ctx)
{
	r->analyzer = fn;
	r->analyzer_ctx = ctx;
}

static const char *jstr(const json_t *o, const char *key);
static struct cache_slot *slot_find(struct recs *r, const char *project);

/* The analyzer's answers of a generation (gen_mu held): the previous
 * answer of an unchanged recommendation is kept, the others are asked
 * for (at most RECS_ANALYZER_MAX). */
static void analyze_extra(struct recs *r, const char *project, const char *trigger, json_t *arr)
{
	if (!r->analyzer || strcmp(trigger, "request") == 0)
		return;
	bool again = strcmp(trigger, "regenerate") == 0 || strcmp(trigger, "refresh") == 0;
	unsigned asked = 0;
	for (size_t i = 0; i < json_array_size(arr); i++) {
		json_t *rec = json_array_get(arr, i);
		json_t *prev = NULL;
		pthread_mutex_lock(&r->mu);
		struct cache_slot *old = slot_find(r, project);
		for (size_t j = 0; old && j < json_array_size(old->recs) && !prev; j++) {
			json_t *o = json_array_get(old->recs, j);
			if (strcmp(jstr(o, "id"), jstr(rec, "id")) == 0 && json_object_get(o, "llm"))
				prev = json_deep_copy(json_object_get(o, "llm"));
		}
		pthread_mutex_unlock(&r->mu);
		bool ok = prev && strcmp(jstr(prev, "status"), "ok") == 0;
		if (!again && ok && strcmp(jstr(rec, "status"), "unchanged") == 0) {
			json_object_set_new(rec, "llm", prev);
			continue;
		}
		if (asked >= RECS_ANALYZER_MAX) {
			if (prev)
				json_object_set_new(rec, "llm", prev);
			continue;
		}
		json_decref(prev);
		asked++;
		json_t *res = r->analyzer(r->analyzer_ctx, project, rec);
		if (res)
			json_object_set_new(rec, "llm", res);
	}
}

void recs_config_get(struct recs *r, struct recs_config *out)
{
	pthread_mutex_lock(&r->mu);
	*out = r->c;
	pthread_mutex_unlock(&r->mu);
}

/* --- building ------------------------------------------------------------ */

/* A stored frame type's name (display.h's), "unknown" for none. */
static const char *type_name(uint8_t t)
{
	return t >= 1 && t <= SFT_MAX ? frame_type_name(t) : "unknown";
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
		free_all(m, matched);
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
	free_all(m, matched);
}

void recs_build(const struct ht_result *h, const char *project, const struct recs_config *c,
		json_t *arr)
{
	for (size_t i = 0; i < h->napps; i++)
		build_app(h, &h->apps[i], project, c, arr);
}

/* --- generations ------------------------------------------------------------ */

static bool id_valid(const char *id)
{
	size_t len = strlen(id);
	bool hex = len == 16;
	for (size_t i = 0; hex && i < len; i++)
		hex = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
	return hex;
}

static const char *jstr(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

static double jnum(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

/* A recommendation's savings as one number, in its unit (cores, GPU
 * seconds per hour, blocked threads). */
static double rec_amount(const json_t *rec)
{
	const json_t *sv = json_object_get(rec, "savings");
	if (strcmp(jstr(rec, "kind"), "cuda") == 0)
		return jnum(sv, "gpu_seconds_per_hour");
	if (strcmp(jstr(rec, "event_kind"), "off_cpu") == 0)
		return jnum(sv, "blocked_threads");
	return jnum(sv, "cores");
}

/* "dismissed" or "active" (also when the database cannot say). */
static const char *state_of(struct recs *r, const char *project, const char *id)
{
	struct metadb_stmt *q = NULL;
	struct buf ignored = { 0 };
	const char *state = "active";
	pthread_mutex_lock(&r->db_mu);
	if (metadb_prepare(r->db, "SELECT state FROM rec_state WHERE project = ?1 AND id = ?2", &q, &ignored) == 0) {
		metadb_bind_text(q, 1, project);
		metadb_bind_text(q, 2, id);
		if (metadb_step(q, &ignored) == 1 && strcmp(metadb_text(q, 0), "dismissed") == 0)
			state = "dismissed";
	}
	metadb_finalize(q);
	pthread_mutex_unlock(&r->db_mu);
	buf_free(&ignored);
	return state;
}

/* The 16-hex-digit ids a query of one column, with the project as ?1,
 * answers (invalid ones skipped), sorted. */
static int load_ids(struct recs *r, const char *sql, const char *project, uint64_t **out, size_t *n,
		    struct buf *err)
{
	struct metadb_stmt *q = NULL;
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&r->db_mu);
	if (metadb_prepare(r->db, sql, &q, err) < 0) {
		pthread_mutex_unlock(&r->db_mu);
		return -1;
	}
	metadb_bind_text(q, 1, project);
	size_t cap = 0;
	int rc;
	while ((rc = metadb_step(q, err)) == 1) {
		const char *t = metadb_text(q, 0);
		if (!id_valid(t))
			continue;
		xgrow((void **)out, &cap, *n + 1, sizeof(**out));
		(*out)[(*n)++] = strtoull(t, NULL, 16);
	}
	metadb_finalize(q);
	pthread_mutex_unlock(&r->db_mu);
	if (rc < 0) {
		free(*out);
		*out = NULL;
		*n = 0;
		return -1;
	}
	if (*n)
		qsort(*out, *n, sizeof(**out), cmp_u64);
	return 0;
}

/* The suppressed trace ids of a project, sorted. */
static int load_suppressed(struct recs *r, const char *project, uint64_t **out, size_t *n,
			   struct buf *err)
{
	return load_ids(r, "SELECT trace_id FROM rec_suppressed WHERE project = ?1", project, out, n, err);
}

/* The ids of a project's dismissed recommendations, sorted: one query for
 * a whole list, where state_of is one per recommendation. When the
 * database cannot say, none (every recommendation "active", as state_of). */
static void load_dismissed(struct recs *r, const char *project, uint64_t **out, size_t *n)
{
	struct buf ignored = { 0 };
	(void)load_ids(r, "SELECT id FROM rec_state WHERE project = ?1 AND state = 'dismissed'", project,
		       out, n, &ignored);
	buf_free(&ignored);
}

static bool id_in(const uint64_t *ids, size_t n, const char *id)
{
	if (!id_valid(id))
		return false;
	uint64_t v = strtoull(id, NULL, 16);
	return n && bsearch(&v, ids, n, sizeof(*ids), cmp_u64) != NULL;
}

struct prev_item {
	char id[17];
	double savings, peak;
};

/* The previous generation of a project: its items and its number (0:
 * none). */
static int load_previous(struct recs *r, const char *project, struct prev_item **out, size_t *n,
			 uint64_t *seq, struct buf *err)
{
	struct metadb_stmt *q = NULL;
	*out = NULL;
	*n = 0;
	*seq = 0;
	pthread_mutex_lock(&r->db_mu);
	int rc = metadb_prepare(r->db, "SELECT MAX(seq) FROM rec_generation WHERE project = ?1", &q, err);
	if (rc == 0) {
		metadb_bind_text(q, 1, project);
		rc = metadb_step(q, err);
		if (rc == 1)
			*seq = (uint64_t)metadb_int64(q, 0);
	}
	metadb_finalize(q);
	q = NULL;
	if (rc >= 0 && *seq)
		rc = metadb_prepare(r->db, "SELECT id, savings, peak FROM rec_gen_item WHERE project = ?1 AND seq = ?2",
				    &q, err);
	if (rc >= 0 && q) {
		metadb_bind_text(q, 1, project);
		metadb_bind_int64(q, 2, (int64_t)*seq);
		size_t cap = 0;
		while ((rc = metadb_step(q, err)) == 1) {
			xgrow((void **)out, &cap, *n + 1, sizeof(**out));
			struct prev_item *p = &(*out)[(*n)++];
			snprintf(p->id, sizeof(p->id), "%s", metadb_text(q, 0));
			p->savings = metadb_double(q, 1);
			p->peak = metadb_double(q, 2);
		}
	}
	metadb_finalize(q);
	pthread_mutex_unlock(&r->db_mu);
	if (rc < 0) {
		free(*out);
		*out = NULL;
		*n = 0;
		return -1;
	}
	return 0;
}

/* "new", "worsened" or "unchanged" against the previous generation. */
static const char *status_of(const struct prev_item *prev, double savings, double peak)
{
	if (!prev)
		return "new";
	if (savings > prev->savings * (1 + RECS_WORSE_MARGIN) + 1e-9 ||
	    peak > prev->peak * (1 + RECS_WORSE_MARGIN) + 1e-9)
		return "worsened";
	return "unchanged";
}

/* Takes db_mu and begins a write transaction on the one connection.
 * Returns 0, or -1 with err and db_mu released. */
static int tx_begin(struct recs *r, struct buf *err)
{
	pthread_mutex_lock(&r->db_mu);
	if (metadb_begin(r->db, err) < 0) {
		pthread_mutex_unlock(&r->db_mu);
		return -1;
	}
	return 0;
}

/* Ends tx_begin's transaction: finalizes q, commits when rc is 0 (else
 * rolls back, err keeping the first failure's message) and releases
 * db_mu. Returns rc, or failed when the commit itself failed. */
static int tx_end(struct recs *r, struct metadb_stmt *q, int rc, int failed, struct buf *err)
{
	metadb_finalize(q);
	if (rc == 0) {
		if (metadb_commit(r->db, err) < 0)
			rc = failed;
	} else {
		metadb_rollback(r->db);
	}
	pthread_mutex_unlock(&r->db_mu);
	return rc;
}

/* tx_begin, then sql prepared as *q: 0, or -1 with the transaction rolled
 * back and err saying why. */
static int tx_prepare(struct recs *r, const char *sql, struct metadb_stmt **q, struct buf *err)
{
	*q = NULL;
	if (tx_begin(r, err) < 0)
		return -1;
	if (metadb_prepare(r->db, sql, q, err) < 0)
		return tx_end(r, NULL, -1, -1, err);
	return 0;
}

/* Binds q's parameters ?1, ?2, ... in order, one per character of types:
 * 't' a string (const char *, kept by the caller until the statement is
 * reset; NULL binds NULL), 'i' an int64_t, 'd' a double. */
static void bind_row(struct metadb_stmt *q, const char *types, ...)
{
	va_list ap;
	va_start(ap, types);
	for (int i = 1; *types; types++, i++) {
		switch (*types) {
		case 't':
			metadb_bind_text(q, i, va_arg(ap, const char *));
			break;
		case 'i':
			metadb_bind_int64(q, i, va_arg(ap, int64_t));
			break;
		case 'd':
			metadb_bind_double(q, i, va_arg(ap, double));
			break;
		}
	}
	va_end(ap);
}

/* Runs q to its end: 0, or -1 with the database's message in err. */
static int step_done(struct metadb_stmt *q, struct buf *err)
{
	if (metadb_step(q, err) != 0) {
		if (!err->len)
			buf_puts(err, "recommendations: a statement answered rows");
		return -1;
	}
	return 0;
}

/* Stores generation seq of a project, unless another replica sharing the
 * database stored that number first (*stored false: its generation, of
 * the same data, stands, and it told the listener). */
static int store_generation(struct recs *r, const char *project, uint64_t seq, int64_t now_ms,
			    const char *trigger, int64_t elapsed_ms, const json_t *arr, bool *stored,
			    struct buf *err)
{
	struct metadb_stmt *q;
	*stored = false;
	if (tx_prepare(r, "INSERT INTO rec_generation (project, seq, generated_ms, trigger, elapsed_ms) "
			  "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (project, seq) DO NOTHING", &q, err) < 0)
		return -1;
	int rc = -1;
	bind_row(q, "tiiti", project, (int64_t)seq, now_ms, trigger, elapsed_ms);
	if (step_done(q, err) < 0)
		goto out;
	if (metadb_changes(q) == 0) {
		rc = 0;
		goto out;
	}
	metadb_finalize(q);
	q = NULL;
	if (metadb_prepare(r->db, "INSERT INTO rec_gen_item (project, seq, id, kind, savings, peak, "
				  "annual_cost, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
				  "ON CONFLICT (project, seq, id) DO NOTHING", &q, err) < 0)
		goto out;
	for (size_t i = 0; i < json_array_size(arr); i++) {
		const json_t *rec = json_array_get(arr, i);
		metadb_reset(q);
		bind_row(q, "tittdddt", project, (int64_t)seq, jstr(rec, "id"), jstr(rec, "kind"), rec_amount(rec),
			 jnum(rec, "peak"), jnum(json_object_get(rec, "savings"), "annual_cost"), jstr(rec, "status"));
		if (step_done(q, err) < 0)
			goto out;
	}
	static const char *const drop[] = {
		"DELETE FROM rec_gen_item WHERE project = ?1 AND seq <= ?2",
		"DELETE FROM rec_generation WHERE project = ?1 AND seq <= ?2",
	};
	for (size_t i = 0; seq > RECS_KEEP_GENERATIONS && i < ARRAY_SIZE(drop); i++) {
		metadb_finalize(q);
		q = NULL;
		if (metadb_prepare(r->db, drop[i], &q, err) < 0)
			goto out;
		bind_row(q, "ti", project, (int64_t)(seq - RECS_KEEP_GENERATIONS));
		if (step_done(q, err) < 0)
			goto out;
	}
	*stored = true;
	rc = 0;
out:
	return tx_end(r, q, rc, -1, err);
}

/* The slot of a project (under mu), or NULL. */
static struct cache_slot *slot_find(struct recs *r, const char *project)
{
	for (size_t i = 0; i < CACHE_SLOTS; i++)
		if (r->cache[i].generated_ms && strcmp(r->cache[i].project, project) == 0)
			return &r->cache[i];
	return NULL;
}

/* A new generation of project; gen_mu held. With reuse, the hot traces
 * of the last generation are analysed again (read when there are none). */
static int generate_locked(struct recs *r, struct store *st, struct symbols *sym, const char *project,
			   bool reuse, const char *trigger, int64_t now_ms, struct buf *err)
{
	uint64_t t0 = now_mono_ns();
	struct recs_config cfg;
	recs_config_get(r, &cfg);
	if (cfg.window_ms > RECS_MAX_WINDOW_MS)
		cfg.window_ms = RECS_MAX_WINDOW_MS;
	pthread_mutex_lock(&r->mu);
	struct cache_slot *old = slot_find(r, project);
	pthread_mutex_unlock(&r->mu);
	/* The slot's hot traces are touched only with gen_mu held. */
	struct ht_result ht[NKINDS];
	bool fresh = !reuse || !old;
	if (fresh) {
		uint64_t *sup = NULL;
		size_t nsup = 0;
		if (load_suppressed(r, project, &sup, &nsup, err) < 0)
			return -1;
		for (size_t k = 0; k < NKINDS; k++) {
			struct ht_params p = { .kind = gen_kinds[k], .end_ms = now_ms, .window_ms = cfg.window_ms,
					       .min_share = cfg.min_share, .suppressed = sup, .nsuppressed = nsup };
			snprintf(p.project_id, sizeof(p.project_id), "%s", project);
			if (hottraces_compute(st, sym, &p, &ht[k], err) < 0) {
				for (size_t j = 0; j < k; j++)
					ht_result_free(&ht[j]);
				free(sup);
				return -1;
			}
		}
		free(sup);
	} else {
		memcpy(ht, old->ht, sizeof(ht));
	}
	json_t *arr = json_array();
	for (size_t k = 0; k < NKINDS; k++)
		recs_build(&ht[k], project, &cfg, arr);
	struct prev_item *prev = NULL;
	size_t nprev = 0;
	uint64_t seq = 0;
	if (load_previous(r, project, &prev, &nprev, &seq, err) < 0) {
		if (fresh)
			for (size_t k = 0; k < NKINDS; k++)
				ht_result_free(&ht[k]);
		json_decref(arr);
		return -1;
	}
	seq++;
	for (size_t i = 0; i < json_array_size(arr); i++) {
		json_t *rec = json_array_get(arr, i);
		const struct prev_item *pi = NULL;
		for (size_t j = 0; j < nprev && !pi; j++)
			if (strcmp(prev[j].id, jstr(rec, "id")) == 0)
				pi = &prev[j];
		json_object_set_new(rec, "status", json_string(status_of(pi, rec_amount(rec), jnum(rec, "peak"))));
		json_object_set_new(rec, "generated_at", json_integer(now_ms));
		if (pi)
			json_object_set_new(rec, "previous", json_pack("{s:f, s:f}", "savings", pi->savings,
								       "peak", pi->peak));
	}
	free(prev);
	analyze_extra(r, project, trigger, arr);
	int64_t elapsed_ms = (int64_t)((now_mono_ns() - t0) / 1000000);
	bool stored;
	if (store_generation(r, project, seq, now_ms, trigger, elapsed_ms, arr, &stored, err) < 0) {
		if (fresh)
			for (size_t k = 0; k < NKINDS; k++)
				ht_result_free(&ht[k]);
		json_decref(arr);
		return -1;
	}
	pthread_mutex_lock(&r->mu);
	struct cache_slot *slot = slot_find(r, project);
	if (!slot) {
		struct cache_slot *oldest = &r->cache[0];
		for (size_t i = 0; i < CACHE_SLOTS && !slot; i++) {
			if (!r->cache[i].generated_ms)
				slot = &r->cache[i];
			else if (r->cache[i].generated_ms < oldest->generated_ms)
				oldest = &r->cache[i];
		}
		if (!slot) {
			slot = oldest;
			slot_clear(slot);
		}
	}
	if (fresh) {
		for (size_t k = 0; k < NKINDS; k++) {
			ht_result_free(&slot->ht[k]);
			slot->ht[k] = ht[k];
		}
	}
	json_decref(slot->recs);
	slot->recs = json_incref(arr);
	snprintf(slot->project, sizeof(slot->project), "%s", project);
	slot->seq = seq;
	slot->generated_ms = now_ms > 0 ? now_ms : 1;
	slot->elapsed_ms = elapsed_ms;
	snprintf(slot->trigger, sizeof(slot->trigger), "%s", trigger);
	pthread_mutex_unlock(&r->mu);
	/* Tell the listener of what is new or worse (not what a user
	 * dismissed): the replica that stored the generation does. */
	uint64_t *dismissed = NULL;
	size_t ndismissed = 0;
	if (stored && r->listener)
		load_dismissed(r, project, &dismissed, &ndismissed);
	for (size_t i = 0; stored && r->listener && i < json_array_size(arr); i++) {
		const json_t *rec = json_array_get(arr, i);
		const char *status = jstr(rec, "status");
		if (strcmp(status, "unchanged") == 0 || id_in(dismissed, ndismissed, jstr(rec, "id")))
			continue;
		struct recs_event ev = {
			.project = project, .id = jstr(rec, "id"), .kind = jstr(rec, "kind"), .status = status,
			.title = jstr(rec, "title"), .application = jstr(rec, "application"),
			.unit = jstr(rec, "unit"), .savings = rec_amount(rec),
			.annual_cost = jnum(json_object_get(rec, "savings"), "annual_cost"),
			.peak = jnum(rec, "peak"),
		};
		r->listener(r->listener_ctx, &ev);
	}
	free(dismissed);
	json_decref(arr);
	return 0;
}

static int generate(struct recs *r, struct store *st, struct symbols *sym, const char *project, bool reuse,
		    bool if_missing, const char *trigger, int64_t now_ms, struct buf *err)
{
	pthread_mutex_lock(&r->gen_mu);
	int rc = 0;
	if (if_missing) {
		pthread_mutex_lock(&r->mu);
		bool have = slot_find(r, project) != NULL;
		pthread_mutex_unlock(&r->mu);
		if (have) {
			pthread_mutex_unlock(&r->gen_mu);
			return 0;
		}
	}
	rc = generate_locked(r, st, sym, project, reuse, trigger, now_ms, err);
	pthread_mutex_unlock(&r->gen_mu);
	return rc;
}

/* --- the background thread ------------------------------------------------------ */

struct idlist {
	char (*ids)[37];
	size_t n, cap;
};

static bool collect_id(const char *id, void *ctx)
{
	struct idlist *l = ctx;
	xgrow((void **)&l->ids, &l->cap, l->n + 1, sizeof(*l->ids));
	snprintf(l->ids[l->n++], 37, "%s", id);
	return false;
}

static void wait_ms(struct recs *r, int64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&r->mu);
	while (!r->stop && !r->kick && pthread_cond_timedwait(&r->wake, &r->mu, &ts) == 0)
		;
	r->kick = false;
	pthread_mutex_unlock(&r->mu);
}

static bool stopping(struct recs *r)
{
	pthread_mutex_lock(&r->mu);
	bool s = r->stop;
	pthread_mutex_unlock(&r->mu);
	return s;
}

static void *worker(void *arg)
{
	struct recs *r = arg;
	struct recs_config cfg;
	recs_config_get(r, &cfg);
	wait_ms(r, cfg.stale_ms);
	while (!stopping(r)) {
		uint64_t t0 = now_mono_ns();
		struct buf serr = { 0 };
		if (settings_load(r, &serr) < 0)
			log_warn("recommendations: reading the settings: %s", serr.data ? serr.data : "error");
		buf_free(&serr);
		struct idlist l = { 0 };
		struct buf scratch = { 0 };
		struct jsonw sw;
		jsonw_init(&sw, &scratch);
		projects_list_json(r->pj, collect_id, &l, &sw);
		buf_free(&scratch);
		for (size_t i = 0; i < l.n && !stopping(r); i++) {
			struct buf err = { 0 };
			if (generate(r, r->st, symbols_for_query(r->sym, l.ids[i]), l.ids[i], false, false,
				     "schedule", now_unix_ms(), &err) < 0)
				log_warn("recommendations of project %s: %s", l.ids[i], err.data ? err.data : "error");
			buf_free(&err);
		}
		free(l.ids);
		int64_t elapsed = (int64_t)((now_mono_ns() - t0) / 1000000);
		recs_config_get(r, &cfg);
		/* At most half a core: a pass that took T is followed by T
		 * of rest, whatever the step. */
		wait_ms(r, MAX(cfg.stale_ms - elapsed, elapsed));
	}
	return NULL;
}

int recs_start(struct recs *r, struct store *st, struct symbols *sym, struct projects *pj, struct buf *err)
{
	r->st = st;
	r->sym = sym;
	r->pj = pj;
	int e = pthread_create(&r->thread, NULL, worker, r);
	if (e) {
		buf_printf(err, "recommendations thread: %s", strerror(e));
		return -1;
	}
	pthread_setname_np(r->thread, "ember-recs");
	r->started = true;
	return 0;
}

/* --- answering ------------------------------------------------------------ */

static int cmp_peak(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	double px = json_real_value(json_object_get(x, "peak"));
	double py = json_real_value(json_object_get(y, "peak"));
	/* Peaks of different units are compared as numbers (cores and GPUs). */
	return px < py ? 1 : px > py ? -1 :
	       strcmp(json_string_value(json_object_get(x, "id")), json_string_value(json_object_get(y, "id")));
}

int recs_query(struct recs *r, struct store *st, struct symbols *sym, const char *project,
	       const char *kind, int64_t now_ms, struct buf *out, struct buf *err)
{
	bool cpu = strcmp(kind, "cpu") == 0, cuda = strcmp(kind, "cuda") == 0, all = strcmp(kind, "all") == 0;
	if (!cpu && !cuda && !all) {
		buf_printf(err, "kind: expected cpu, cuda or all");
		return -1;
	}
	/* The last generation; a project not analysed yet is analysed now. */
	if (generate(r, st, sym, project, false, true, "request", now_ms, err) < 0)
		return -1;
	pthread_mutex_lock(&r->mu);
	struct cache_slot *slot = slot_find(r, project);
	json_t *list = slot ? json_deep_copy(slot->recs) : json_array();
	json_t *gen = slot ? json_pack("{s:I, s:I, s:s, s:I, s:I}", "seq", (json_int_t)slot->seq, "generated_at",
				       (json_int_t)slot->generated_ms, "trigger", slot->trigger, "elapsed_ms",
				       (json_int_t)slot->elapsed_ms, "suppressed_traces",
				       (json_int_t)(slot->ht[0].suppressed + slot->ht[1].suppressed +
						    slot->ht[2].suppressed))
			   : json_null();
	struct recs_config c = r->c;
	pthread_mutex_unlock(&r->mu);
	size_t n = json_array_size(list);
	json_t **v = xcalloc(n ? n : 1, sizeof(*v));
	size_t nv = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *rec = json_array_get(list, i);
		bool is_cuda = strcmp(jstr(rec, "kind"), "cuda") == 0;
		if (all || (cuda && is_cuda) || (cpu && !is_cuda))
			v[nv++] = rec;
	}
	qsort(v, nv, sizeof(*v), cmp_peak);
	json_t *sorted = json_array();
	uint64_t *dismissed = NULL;
	size_t ndismissed = 0;
	if (nv)
		load_dismissed(r, project, &dismissed, &ndismissed);
	for (size_t i = 0; i < nv; i++) {
		bool d = id_in(dismissed, ndismissed, jstr(v[i], "id"));
		json_object_set_new(v[i], "state", json_string(d ? "dismissed" : "active"));
		json_array_append(sorted, v[i]);
	}
	free(dismissed);
	free(v);
	json_decref(list);
	json_t *doc = json_pack("{s:o, s:o, s:{s:f, s:f, s:I, s:f, s:I, s:s}}", "recommendations", sorted,
				"generation", gen, "settings", "cost_per_core_hour", c.cost_per_core_hour,
				"cost_per_gpu_hour", c.cost_per_gpu_hour, "window_ms", (json_int_t)c.window_ms,
				"min_share", c.min_share, "step_ms", (json_int_t)c.stale_ms, "analyzer",
				r->analyzer ? "built-in+llm" : "built-in");
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

/* --- lifecycle -------------------------------------------------------------- */

/* One row of rec_history; db_mu held, inside a transaction or not. */
static int history_add(struct recs *r, const char *project, const char *id, const char *action,
		       const char *actor, const char *from, const char *to, int64_t now_ms,
		       struct buf *err)
{
	struct metadb_stmt *q = NULL;
	if (metadb_prepare(r->db, "INSERT INTO rec_history (project, id, at_ms, actor, from_state, to_state, action) "
				  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", &q, err) < 0)
		return -1;
	bind_row(q, "ttitttt", project, id, now_ms, actor && *actor ? actor : "anonymous", from, to, action);
	int rc = step_done(q, err);
	metadb_finalize(q);
	return rc;
}

static int history_add_locked(struct recs *r, const char *project, const char *id, const char *action,
			      const char *actor, const char *from, const char *to, int64_t now_ms,
			      struct buf *err)
{
	pthread_mutex_lock(&r->db_mu);
	int rc = history_add(r, project, id, action, actor, from, to, now_ms, err);
	pthread_mutex_unlock(&r->db_mu);
	return rc;
}

int recs_set_state(struct recs *r, const char *project, const char *id, const char *state,
		   const char *actor, int64_t now_ms, struct buf *err)
{
	if (strcmp(state, "dismissed") != 0 && strcmp(state, "active") != 0) {
		buf_puts(err, "state: expected \"dismissed\" or \"active\"");
		return -1;
	}
	if (!id_valid(id)) {
		buf_puts(err, "recommendation id: expected 16 lower-case hex digits");
		return -1;
	}
	const char *from = state_of(r, project, id);
	struct metadb_stmt *q;
	if (tx_prepare(r, "INSERT INTO rec_state (project, id, state, updated_ms) VALUES (?1, ?2, ?3, ?4) "
			  "ON CONFLICT (project, id) DO UPDATE SET state = excluded.state, "
			  "updated_ms = excluded.updated_ms", &q, err) < 0)
		return -2;
	int rc = -2;
	bind_row(q, "ttti", project, id, state, now_ms);
	if (step_done(q, err) < 0)
		goto out;
	if (history_add(r, project, id, "state", actor, from, state, now_ms, err) < 0)
		goto out;
	rc = 0;
out:
	return tx_end(r, q, rc, -2, err);
}

int recs_regenerate(struct recs *r, struct store *st, struct symbols *sym, const char *project,
		    bool refresh, const char *actor, int64_t now_ms, struct buf *err)
{
	const char *what = refresh ? "refresh" : "regenerate";
	if (generate(r, st, sym, project, !refresh, false, what, now_ms, err) < 0)
		return -1;
	return history_add_locked(r, project, "", what, actor, "", "", now_ms, err);
}

/* The application and leaf of trace id in a project's last generation;
 * false when it has no such trace. */
static bool trace_find(struct recs *r, const char *project, uint64_t id, char *app, size_t applen,
		       char *leaf, size_t leaflen)
{
	bool found = false;
	pthread_mutex_lock(&r->mu);
	struct cache_slot *s = slot_find(r, project);
	for (size_t k = 0; s && k < NKINDS && !found; k++)
		for (size_t a = 0; a < s->ht[k].napps && !found; a++) {
			const struct ht_app *ap = &s->ht[k].apps[a];
			for (size_t t = 0; t < ap->ntraces && !found; t++) {
				if (ap->traces[t].id != id)
					continue;
				const struct ht_frame *lf = leaf_of(&ap->traces[t]);
				snprintf(app, applen, "%s", ap->name);
				snprintf(leaf, leaflen, "%s", lf ? lf->name : "");
				found = true;
			}
		}
	pthread_mutex_unlock(&r->mu);
	return found;
}

int recs_suppress(struct recs *r, struct store *st, struct symbols *sym, const char *project,
		  const char *trace_id, bool suppress, const char *actor, int64_t now_ms,
		  struct buf *err)
{
	if (!id_valid(trace_id)) {
		buf_puts(err, "trace id: expected 16 lower-case hex digits");
		return -1;
	}
	char app[256] = "", leaf[256] = "";
	if (suppress) {
		if (generate(r, st, sym, project, false, true, "request", now_ms, err) < 0)
			return -2;
		if (!trace_find(r, project, strtoull(trace_id, NULL, 16), app, sizeof(app), leaf, sizeof(leaf))) {
			buf_printf(err, "no hot trace %s in the last generation of project %s", trace_id, project);
			return -3;
		}
	}
	struct metadb_stmt *q;
	if (tx_prepare(r, suppress ? "INSERT INTO rec_suppressed (project, trace_id, application, leaf, actor, "
				     "at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (project, trace_id) DO "
				     "UPDATE SET application = excluded.application, leaf = excluded.leaf, "
				     "actor = excluded.actor, at_ms = excluded.at_ms"
				   : "DELETE FROM rec_suppressed WHERE project = ?1 AND trace_id = ?2",
		       &q, err) < 0)
		return -2;
	int rc = -2, changes = 0;
	if (suppress)
		bind_row(q, "ttttti", project, trace_id, app, leaf, actor && *actor ? actor : "anonymous", now_ms);
	else
		bind_row(q, "tt", project, trace_id);
	if (step_done(q, err) < 0)
		goto out;
	changes = (int)metadb_changes(q);
	if (!suppress && !changes) {
		buf_printf(err, "hot trace %s of project %s is not suppressed", trace_id, project);
		rc = -3;
		goto out;
	}
	if (history_add(r, project, trace_id, suppress ? "suppress" : "unsuppress", actor,
			suppress ? "active" : "suppressed", suppress ? "suppressed" : "active", now_ms, err) < 0)
		goto out;
	rc = 0;
out:
	rc = tx_end(r, q, rc, -2, err);
	if (rc < 0)
		return rc;
	/* The traces read again: the trace leaves (or comes back) now. */
	return generate(r, st, sym, project, false, false, "suppress", now_ms, err) < 0 ? -2 : 0;
}

/* Ends an answer written with w into out: its final newline, or -1 when
 * the writer saw a misuse (a bug, named in err). */
static int finish_json(struct jsonw *w, struct buf *out, struct buf *err)
{
	if (jsonw_finish(w) != 0) {
		buf_puts(err, "internal error: an answer was written wrongly");
		return -1;
	}
	buf_putc(out, '\n');
	return 0;
}

int recs_suppressed_json(struct recs *r, const char *project, struct buf *out, struct buf *err)
{
	struct metadb_stmt *q = NULL;
	pthread_mutex_lock(&r->db_mu);
	if (metadb_prepare(r->db, "SELECT trace_id, application, leaf, actor, at_ms FROM rec_suppressed "
				  "WHERE project = ?1 ORDER BY at_ms DESC, trace_id", &q, err) < 0) {
		pthread_mutex_unlock(&r->db_mu);
		return -1;
	}
	metadb_bind_text(q, 1, project);
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	jsonw_key(&w, "suppressed");
	jsonw_begin_array(&w);
	int rc;
	while ((rc = metadb_step(q, err)) == 1) {
		jsonw_begin_object(&w);
		jsonw_kv_str(&w, "trace_id", metadb_text(q, 0));
		jsonw_kv_str(&w, "application", metadb_text(q, 1));
		jsonw_kv_str(&w, "leaf", metadb_text(q, 2));
		jsonw_kv_str(&w, "actor", metadb_text(q, 3));
		jsonw_kv_i64(&w, "at", metadb_int64(q, 4));
		jsonw_end_object(&w);
	}
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	metadb_finalize(q);
	pthread_mutex_unlock(&r->db_mu);
	return rc < 0 ? -1 : finish_json(&w, out, err);
}

int recs_history_json(struct recs *r, const char *project, int limit, struct buf *out, struct buf *err)
{
	struct metadb_stmt *q = NULL;
	pthread_mutex_lock(&r->db_mu);
	if (metadb_prepare(r->db, metadb_dialect(r->db) == METADB_SQLITE
				  ? "SELECT at_ms, actor, action, id, from_state, to_state FROM rec_history WHERE "
				    "project = ?1 OR project = '' ORDER BY at_ms DESC, rowid DESC LIMIT ?2"
				  : "SELECT at_ms, actor, action, id, from_state, to_state FROM rec_history WHERE "
				    "project = ?1 OR project = '' ORDER BY at_ms DESC, hseq DESC LIMIT ?2",
			   &q, err) < 0) {
		pthread_mutex_unlock(&r->db_mu);
		return -1;
	}
	metadb_bind_text(q, 1, project);
	metadb_bind_int64(q, 2, limit < 1 ? 1 : limit > 1000 ? 1000 : limit);
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	jsonw_key(&w, "history");
	jsonw_begin_array(&w);
	static const char *const cols[] = { "at", "actor", "action", "id", "from", "to" };
	int rc;
	while ((rc = metadb_step(q, err)) == 1) {
		jsonw_begin_object(&w);
		jsonw_kv_i64(&w, cols[0], metadb_int64(q, 0));
		for (int c = 1; c < 6; c++)
			jsonw_kv_str(&w, cols[c], metadb_text(q, c));
		jsonw_end_object(&w);
	}
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	metadb_finalize(q);
	pthread_mutex_unlock(&r->db_mu);
	return rc < 0 ? -1 : finish_json(&w, out, err);
}

/* --- settings ---------------------------------------------------------------- */

static void settings_obj(struct jsonw *w, const struct recs_config *c)
{
	for (size_t k = 0; k < ARRAY_SIZE(setting_keys); k++) {
		if (k == 2 || k == 4)
			jsonw_kv_i64(w, setting_keys[k], (int64_t)setting_get(c, k));
		else
			jsonw_kv_double(w, setting_keys[k], setting_get(c, k));
	}
}

void recs_settings_json(struct recs *r, struct buf *out)
{
	/* As stored (another replica may have changed them); the last read
	 * when the database cannot answer. */
	struct buf ignored = { 0 };
	(void)settings_load(r, &ignored);
	buf_free(&ignored);
	pthread_mutex_lock(&r->mu);
	struct recs_config c = r->c, f = r->flags;
	unsigned ov = r->overridden;
	pthread_mutex_unlock(&r->mu);
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	settings_obj(&w, &c);
	jsonw_key(&w, "defaults");
	jsonw_begin_object(&w);
	settings_obj(&w, &f);
	jsonw_end_object(&w);
	jsonw_key(&w, "overridden");
	jsonw_begin_array(&w);
	for (size_t k = 0; k < ARRAY_SIZE(setting_keys); k++)
		if (ov & (1u << k))
			jsonw_str(&w, setting_keys[k]);
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	if (jsonw_finish(&w) == 0)
		buf_putc(out, '\n');
}

int recs_settings_put(struct recs *r, const json_t *doc, const char *actor, int64_t now_ms, struct buf *err)
{
	if (!json_is_object(doc)) {
		buf_puts(err, "expected a JSON object of settings");
		return -1;
	}
	const char *key;
	json_t *val;
	json_object_foreach((json_t *)doc, key, val) {
		size_t k = 0;
		while (k < ARRAY_SIZE(setting_keys) && strcmp(key, setting_keys[k]) != 0)
			k++;
		if (k == ARRAY_SIZE(setting_keys)) {
			buf_printf(err, "unknown setting \"%.64s\" (cost_per_core_hour, cost_per_gpu_hour, "
				   "window_ms, min_share, step_ms)", key);
			return -1;
		}
		if (!json_is_null(val) && (!json_is_number(val) || !setting_valid(k, json_number_value(val), err))) {
			if (!err->len)
				buf_printf(err, "%s: expected a number or null", key);
			return -1;
		}
	}
	if (tx_begin(r, err) < 0)
		return -2;
	int rc = -2;
	struct metadb_stmt *q = NULL;
	json_object_foreach((json_t *)doc, key, val) {
		metadb_finalize(q);
		q = NULL;
		if (metadb_prepare(r->db, json_is_null(val) ? "DELETE FROM rec_settings WHERE key = ?1"
							    : "INSERT INTO rec_settings (key, value) VALUES (?1, ?2) "
							      "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
				   &q, err) < 0)
			goto out;
		metadb_bind_text(q, 1, key);
		if (!json_is_null(val))
			metadb_bind_double(q, 2, json_number_value(val));
		if (step_done(q, err) < 0)
			goto out;
		char to[64];
		if (json_is_null(val))
			snprintf(to, sizeof(to), "default");
		else
			snprintf(to, sizeof(to), "%.17g", json_number_value(val));
		if (history_add(r, "", key, "settings", actor, "", to, now_ms, err) < 0)
			goto out;
	}
	rc = 0;
out:
	rc = tx_end(r, q, rc, -2, err);
	if (rc < 0 || settings_load(r, err) < 0)
		return -2;
	/* In effect at once here, the thread starts a pass with them;
	 * other replicas read them at their next pass. */
	pthread_mutex_lock(&r->mu);
	r->kick = true;
	pthread_cond_broadcast(&r->wake);
	pthread_mutex_unlock(&r->mu);
	return 0;
}
