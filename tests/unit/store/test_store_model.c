/* A property test of the whole ingest-store-query path against a
 * reference model (a plain list of every acknowledged sample).
 *
 * Random interleavings of: ember-protocol sessions (several agents,
 * starting, restarting, resyncing after the server forgot them, sending a
 * batch twice), version 1 batches, OTLP Profiles (JSON) requests,
 * metrics batches, seals, flushes, compactions, samples on both sides of
 * hour boundaries (late data included) and server restarts (everything
 * closed and opened again: the logs replay). After each query step the
 * answer of a real handler (flamegraph plain, filtered and grouped, top
 * functions, top entities, time series, events) over a range of
 * acknowledged samples must equal what the model says, exactly.
 *
 * Handlers are called in-process (struct http_req without a connection).
 * EMBER_MODEL_STEPS (default 2500) and EMBER_MODEL_SEED (default: a fixed
 * seed; "time" for a new one) choose the run; a failure prints the seed
 * and step, and the two answers. */
#include "testutil.h"
#include "server/ingest/codecs.h"
#include "server/auth/authz.h"

#include <jansson.h>
#include <time.h>

#include "agent/batch.h"
#include "agent/metricbatch.h"
#include "agent/session.h"
#include "server/http/handlers.h"
#include "server/metrics/metrics.h"
#include "server/store/projects.h"
#include "server/http/server.h"
#include "server/ingest/sessions.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"
#include "util.h"

/* An hour boundary: samples fall in three hours from here, at multiples
 * of the block resolution (10 s), so compaction never moves them. */
#define T0 1699999200000LL
#define SLOTS (3 * 360)
#define SLOT_MS 10000LL

#define NPROJ 2
#define NFRAMES 12
#define NSTACKS 24
#define MAXDEPTH 6
#define NEXE 4
#define NTHREAD 2
#define NAGENTS 3

static const char *const proj_names[NPROJ] = { "default", "model-b" };

struct msample {
	uint8_t proj, kind; /* kind: 1 on_cpu, 2 off_cpu */
	uint8_t stack, exe, thread;
	int64_t ts;
	uint64_t value;
};

struct model {
	struct msample *s;
	size_t n, cap;
};

struct agent {
	struct session sess;
	int incarnation;
	uint64_t seq;
	struct buf last; /* the last batch sent, for a resend */
	bool has_last;
};

struct world {
	char *dir;
	struct store_config cfg;
	struct server srv;
	char proj_id[NPROJ][37];
	uint8_t stacks[NSTACKS][MAXDEPTH];
	uint8_t depth[NSTACKS];
	struct agent agents[NAGENTS];
	struct model m;
	uint64_t rng;
	uint64_t seed;
	long step;
	uint64_t v1_seq;
	/* what the run did, to check it covered every path */
	bool soft; /* a mismatch is printed, not failed (the look around a failure) */
	unsigned long n_batches, n_v1, n_otlp, n_metrics, n_resync, n_dup, n_restart, n_seal,
		n_flush, n_compact, n_queries, n_adopted;
};

static uint64_t rnd(struct world *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

static unsigned pick(struct world *w, unsigned n)
{
	return (unsigned)(rnd(w) % n);
}

static void model_add(struct model *m, struct msample s)
{
	xgrow((void **)&m->s, &m->cap, m->n + 1, sizeof(*m->s));
	m->s[m->n++] = s;
}

static void fname(char *out, size_t n, unsigned f)
{
	snprintf(out, n, "fn_%u", f);
}

/* --- the server, opened and closed as a process would ------------------------- */

static void server_up(struct world *w)
{
	struct buf err = { 0 };
	memset(&w->srv, 0, sizeof(w->srv));
	if (store_open(w->dir, &w->cfg, &w->srv.store, &err) < 0 ||
	    symbols_open(w->dir, &w->srv.symbols, &err) < 0 ||
	    projects_open(w->dir, &w->srv.projects, &err) < 0 ||
	    metrics_open_dir(w->dir, 14 * 86400000LL, &w->srv.metrics, &err) < 0)
		fail_msg("seed %llu step %ld: opening the server: %s", (unsigned long long)w->seed,
			 w->step, err.data);
	w->srv.sessions = sessions_new(64u << 20, 64u << 20, 3600000);
	buf_free(&err);
}

static void server_down(struct world *w)
{
	sessions_free(w->srv.sessions);
	projects_close(w->srv.projects);
	metrics_close(w->srv.metrics);
	symbols_close(w->srv.symbols);
	store_close(w->srv.store);
}

/* Calls a handler as http.c would; returns the status, body in out. */
static int call(struct world *w, http_handler fn, const char *project_id, const void *body,
		size_t len, const char *const *headers, const char *const *args, struct buf *out)
{
	struct http_req req = { .method = "POST", .path = "/", .body = body, .body_len = len,
				.headers = headers, .args = args, .who = &principal_open };
	if (project_id) {
		req.params[0] = project_id;
		req.nparams = 1;
	}
	struct http_resp resp = { .status = 200 };
	fn(&w->srv, &req, &resp);
	buf_reset(out);
	if (resp.static_body)
		buf_append(out, resp.static_body, resp.static_len);
	else if (resp.body.len)
		buf_append(out, resp.body.data, resp.body.len);
	buf_free(&resp.body);
	return resp.status;
}

/* --- producers ------------------------------------------------------------------ */

/* A random batch's samples (1..8), drawn into out[]; returns how many. */
static size_t draw_samples(struct world *w, uint8_t proj, bool with_off_cpu, int64_t ts,
			   struct msample *out)
{
	size_t n = 1 + pick(w, 8);
	for (size_t i = 0; i < n; i++) {
		uint8_t kind = with_off_cpu && pick(w, 4) == 0 ? 2 : 1;
		out[i] = (struct msample){ .proj = proj, .kind = kind, .stack = (uint8_t)pick(w, NSTACKS),
					   .exe = (uint8_t)pick(w, NEXE), .thread = (uint8_t)pick(w, NTHREAD),
					   .ts = ts,
					   .value = kind == 1 ? 1 + pick(w, 20) : 1000 + pick(w, 1000000) };
	}
	return n;
}

static int64_t draw_ts(struct world *w)
{
	return T0 + (int64_t)pick(w, SLOTS) * SLOT_MS;
}

static void fill_batch(struct world *w, struct batch *b, const struct msample *s, size_t n)
{
	batch_init(b);
	for (size_t i = 0; i < n; i++) {
		uint32_t ids[MAXDEPTH];
		for (unsigned j = 0; j < w->depth[s[i].stack]; j++) {
			char f[16];
			fname(f, sizeof(f), w->stacks[s[i].stack][j]);
			struct bframe fr = { .type = FT_NATIVE, .name = batch_string(b, f, strlen(f)) };
			ids[j] = batch_frame(b, &fr);
		}
		char exe[16], th[16];
		snprintf(exe, sizeof(exe), "exe_%u", s[i].exe);
		snprintf(th, sizeof(th), "t%u", s[i].thread);
		uint32_t kv[] = {
			batch_string(b, "process.executable.name", 23), batch_string(b, exe, strlen(exe)),
			batch_string(b, "thread.name", 11), batch_string(b, th, strlen(th)),
			batch_string(b, "host.name", 9), batch_string(b, "model-host", 10),
		};
		batch_add(b, batch_stack(b, ids, w->depth[s[i].stack]), batch_resource(b, kv, 6),
			  s[i].kind, s[i].value);
	}
}

static const char *const zstd_headers[] = { "Content-Encoding", "zstd", NULL };

/* Posts the zstd body z to fn; fails the test (naming what) unless it
 * answers 200. The answer into out. */
static void post_zstd(struct world *w, http_handler fn, const struct buf *z, const char *what, struct buf *out)
{
	int status = call(w, fn, NULL, z->data, z->len, zstd_headers, NULL, out);
	if (status != 200)
		fail_msg("seed %llu step %ld: %s answered %d: %s", (unsigned long long)w->seed, w->step,
			 what, status, out->data);
}

static void agent_batch(struct world *w)
{
	unsigned ai = pick(w, NAGENTS);
	struct agent *a = &w->agents[ai];
	struct msample s[8];
	uint8_t proj = (uint8_t)(ai % NPROJ); /* an agent reports to one project */
	size_t n = draw_samples(w, proj, true, draw_ts(w), s);
	struct batch b;
	fill_batch(w, &b, s, n);
	char inst[32];
	snprintf(inst, sizeof(inst), "agent-%d-%d", (int)(a - w->agents), a->incarnation);
	a->seq++;
	struct batch_meta meta = { inst, a->seq, proj_names[proj], s[0].ts, s[0].ts + 5000, 19, 4 };
	struct buf out = { 0 };
	int status = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		buf_reset(&a->last);
		if (session_encode(&a->sess, &b, &meta, &a->last) < 0)
			fail_msg("seed %llu step %ld: session_encode", (unsigned long long)w->seed, w->step);
		status = call(w, handle_ingest_session_batch, NULL, a->last.data, a->last.len,
			      zstd_headers, NULL, &out);
		if (status != 409)
			break;
		/* The server forgot the session (a restart, an eviction): the
		 * agent starts a new one and sends the batch again. */
		w->n_resync++;
		session_reset(&a->sess);
	}
	if (status != 200)
		fail_msg("seed %llu step %ld: session batch answered %d: %s",
			 (unsigned long long)w->seed, w->step, status, out.data);
	a->has_last = true;
	for (size_t i = 0; i < n; i++)
		model_add(&w->m, s[i]);
	w->n_batches++;
	if (getenv("EMBER_MODEL_PARANOID"))
		fprintf(stderr, "# batch agent %d.%d seq %llu: %d %s\n", (int)(a - w->agents), a->incarnation, (unsigned long long)a->seq, status, out.data);
	batch_free(&b);
	buf_free(&out);
}

/* The agent sends its last batch again (its answer was lost): stored once. */
static void agent_resend(struct world *w)
{
	struct agent *a = &w->agents[pick(w, NAGENTS)];
	if (!a->has_last)
		return;
	struct buf out = { 0 };
	int status = call(w, handle_ingest_session_batch, NULL, a->last.data, a->last.len,
			  zstd_headers, NULL, &out);
	/* 409 when the server forgot the session since: the agent would
	 * start a new one, and its duplicate check still holds. */
	if (status != 200 && status != 409)
		fail_msg("seed %llu step %ld: a resent batch answered %d: %s",
			 (unsigned long long)w->seed, w->step, status, out.data);
	w->n_dup++;
	if (getenv("EMBER_MODEL_PARANOID"))
		fprintf(stderr, "# resend agent %d.%d seq %llu: %d %s\n", (int)(a - w->agents), a->incarnation, (unsigned long long)a->seq, status, out.data);
	buf_free(&out);
}

/* The agent process restarts: a new instance, a new session. */
static void agent_restart(struct world *w)
{
	struct agent *a = &w->agents[pick(w, NAGENTS)];
	a->incarnation++;
	a->seq = 0;
	a->has_last = false;
	session_reset(&a->sess);
}

/* Sends samples s[0..n) (one project, one time) as a version 1 batch of
 * sequence seq; returns whether the server called it a duplicate. */
static bool send_v1_as(struct world *w, const char *instance, const struct msample *s, size_t n,
		      uint64_t seq)
{
	struct batch b;
	fill_batch(w, &b, s, n);
	struct batch_meta meta = { instance, seq, proj_names[s[0].proj], s[0].ts,
				   s[0].ts + 5000, 19, 4 };
	struct buf z = { 0 }, out = { 0 };
	assert_int_equal(batch_encode(&b, &meta, &z), 0);
	post_zstd(w, handle_ingest_batch, &z, "v1 batch", &out);
	bool dup = strstr(out.data, "\"duplicate\":true") != NULL;
	batch_free(&b);
	buf_free(&z);
	buf_free(&out);
	return dup;
}

static bool send_v1(struct world *w, const struct msample *s, size_t n, uint64_t seq)
{
	return send_v1_as(w, "v1-agent", s, n, seq);
}

static void v1_batch(struct world *w)
{
	struct msample s[8];
	uint8_t proj = (uint8_t)pick(w, NPROJ);
	size_t n = draw_samples(w, proj, true, draw_ts(w), s);
	assert_false(send_v1(w, s, n, ++w->v1_seq));
	for (size_t i = 0; i < n; i++)
		model_add(&w->m, s[i]);
	w->n_v1++;
}

/* An OTLP/JSON request: one profile, the resource per executable. */
static void otlp_request(struct world *w)
{
	struct msample s[8];
	uint8_t proj = (uint8_t)pick(w, NPROJ);
	int64_t ts = draw_ts(w);
	size_t n = draw_samples(w, proj, false, ts, s);
	uint8_t exe = s[0].exe; /* one resource: one executable */
	for (size_t i = 0; i < n; i++)
		s[i].exe = exe;
	/* strings: 0 "", 1..NFRAMES names, then fixed ones */
	struct buf j = { 0 };
	buf_puts(&j, "{\"dictionary\":{\"stringTable\":[\"\"");
	for (unsigned f = 0; f < NFRAMES; f++)
		buf_printf(&j, ",\"fn_%u\"", f);
	const unsigned S_FT = NFRAMES + 1, S_NATIVE = NFRAMES + 2, S_THREAD = NFRAMES + 3,
		       S_SAMPLES = NFRAMES + 4, S_COUNT = NFRAMES + 5, S_CPU = NFRAMES + 6,
		       S_NS = NFRAMES + 7, S_T0 = NFRAMES + 8;
	buf_puts(&j, ",\"profile.frame.type\",\"native\",\"thread.name\",\"samples\",\"count\",\"cpu\",\"nanoseconds\"");
	for (unsigned t = 0; t < NTHREAD; t++)
		buf_printf(&j, ",\"t%u\"", t);
	buf_puts(&j, "],\"mappingTable\":[{}],\"linkTable\":[{}],\"functionTable\":[{}");
	for (unsigned f = 0; f < NFRAMES; f++)
		buf_printf(&j, ",{\"nameStrindex\":%u}", f + 1);
	/* attributes: 0 zero, 1 frame type, 2.. thread names */
	buf_printf(&j, "],\"attributeTable\":[{},{\"keyStrindex\":%u,\"value\":{\"stringValue\":\"native\"}}", S_FT);
	for (unsigned t = 0; t < NTHREAD; t++)
		buf_printf(&j, ",{\"keyStrindex\":%u,\"value\":{\"stringValue\":\"t%u\"}}", S_THREAD, t);
	(void)S_NATIVE;
	(void)S_T0;
	/* locations: 0 zero, 1 + f for frame f */
	buf_puts(&j, "],\"locationTable\":[{}");
	for (unsigned f = 0; f < NFRAMES; f++)
		buf_printf(&j, ",{\"lines\":[{\"functionIndex\":%u}],\"attributeIndices\":[1]}", f + 1);
	/* stacks: 0 zero, 1 + k for stack k, leaf first */
	buf_puts(&j, "],\"stackTable\":[{}");
	for (unsigned k = 0; k < NSTACKS; k++) {
		buf_puts(&j, ",{\"locationIndices\":[");
		for (unsigned d = w->depth[k]; d-- > 0;)
			buf_printf(&j, "%u%s", w->stacks[k][d] + 1, d ? "," : "");
		buf_puts(&j, "]}");
	}
	buf_printf(&j, "]},\"resourceProfiles\":[{\"resource\":{\"attributes\":["
		       "{\"key\":\"process.executable.name\",\"value\":{\"stringValue\":\"exe_%u\"}},"
		       "{\"key\":\"host.name\",\"value\":{\"stringValue\":\"model-host\"}}]},"
		       "\"scopeProfiles\":[{\"profiles\":[{\"sampleType\":{\"typeStrindex\":%u,\"unitStrindex\":%u},"
		       "\"periodType\":{\"typeStrindex\":%u,\"unitStrindex\":%u},\"period\":\"52631578\","
		       "\"timeUnixNano\":\"%lld000000\",\"durationNano\":\"5000000000\",\"samples\":[",
		   exe, S_SAMPLES, S_COUNT, S_CPU, S_NS, (long long)ts);
	for (size_t i = 0; i < n; i++)
		buf_printf(&j, "%s{\"stackIndex\":%u,\"values\":[\"%llu\"],\"attributeIndices\":[%u]}",
			   i ? "," : "", s[i].stack + 1u, (unsigned long long)s[i].value,
			   2u + s[i].thread);
	buf_puts(&j, "]}]}]}]}");
	const char *headers[] = { "Content-Type", "application/json", NULL };
	const char *args[] = { "project", proj_names[proj], NULL };
	struct buf out = { 0 };
	int status = call(w, handle_otlp_profiles, NULL, j.data, j.len, headers, args, &out);
	if (status != 200 || strstr(out.data ? out.data : "", "rejected"))
		fail_msg("seed %llu step %ld: OTLP answered %d: %s", (unsigned long long)w->seed,
			 w->step, status, out.data);
	for (size_t i = 0; i < n; i++)
		model_add(&w->m, s[i]);
	w->n_otlp++;
	buf_free(&j);
	buf_free(&out);
}

static void metrics_batch(struct world *w)
{
	struct metric_batch b;
	metric_batch_init(&b);
	uint32_t kv[2] = { metric_batch_str(&b, "host.name"), metric_batch_str(&b, "model-host") };
	uint32_t ls = metric_batch_labels(&b, kv, 2);
	int64_t now = now_unix_ms();
	assert_int_equal(metric_batch_add(&b, "host.cpu.user", "cores", ls, now - 1000, 1.5), 0);
	struct metric_batch_meta meta = { "model-metrics", (uint64_t)w->step + 1,
					  proj_names[pick(w, NPROJ)], now - 2000, now };
	struct buf z = { 0 }, out = { 0 };
	assert_int_equal(metric_batch_encode(&b, &meta, &z), 0);
	post_zstd(w, handle_ingest_metrics, &z, "metrics", &out);
	w->n_metrics++;
	metric_batch_free(&b);
	buf_free(&z);
	buf_free(&out);
}

/* --- canonical forms: sorted "key value..." lines -------------------------------- */

struct entry {
	char *key;
	uint64_t a, b;
};

struct entries {
	struct entry *e;
	size_t n, cap;
};

static void ent_add(struct entries *x, const char *key, uint64_t a, uint64_t b)
{
	xgrow((void **)&x->e, &x->cap, x->n + 1, sizeof(*x->e));
	x->e[x->n++] = (struct entry){ xstrdup(key), a, b };
}

static int cmp_entry(const void *p, const void *q)
{
	return strcmp(((const struct entry *)p)->key, ((const struct entry *)q)->key);
}

/* Sorted, equal keys summed, all-zero entries left out, as text. */
static char *ent_text(struct entries *x)
{
	xqsort(x->e, x->n, sizeof(*x->e), cmp_entry);
	struct buf t = { 0 };
	for (size_t i = 0; i < x->n;) {
		size_t k = i;
		uint64_t a = 0, b = 0;
		for (; k < x->n && strcmp(x->e[k].key, x->e[i].key) == 0; k++) {
			a += x->e[k].a;
			b += x->e[k].b;
		}
		if (a || b)
			buf_printf(&t, "%s %llu %llu\n", x->e[i].key, (unsigned long long)a,
				   (unsigned long long)b);
		i = k;
	}
	for (size_t i = 0; i < x->n; i++)
		free(x->e[i].key);
	free(x->e);
	x->e = NULL;
	x->n = x->cap = 0;
	if (!t.data)
		buf_puts(&t, "");
	return buf_steal(&t, NULL);
}

/* --- queries ---------------------------------------------------------------------- */

struct q {
	uint8_t proj, kind;
	int64_t from, to;
	int filter; /* 0 none, 1 exe == exe_1, 2 thread != t0 */
};

static bool q_selects(const struct q *q, const struct msample *s)
{
	if (s->proj != q->proj || s->kind != q->kind || s->ts < q->from || s->ts >= q->to)
		return false;
	if (q->filter == 1)
		return s->exe == 1;
	if (q->filter == 2)
		return s->thread != 0;
	return true;
}

/* The model's next sample from *i on that q selects (*i past it), or
 * NULL when none is left. */
static const struct msample *next_selected(const struct world *w, const struct q *q, size_t *i)
{
	for (; *i < w->m.n; (*i)++)
		if (q_selects(q, &w->m.s[*i]))
			return &w->m.s[(*i)++];
	return NULL;
}

static const char *const filters[] = { "null", "\"process.executable.name == \\\"exe_1\\\"\"",
				       "\"thread.name != 't0'\"" };

static void q_filter_json(const struct q *q, struct buf *b)
{
	buf_printf(b, "\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"event_kind\":\"%s\","
		      "\"frame_mask\":{\"patterns\":[]},\"query\":%s}",
		   (long long)q->from, (long long)q->to, q->kind == 1 ? "on_cpu" : "off_cpu",
		   filters[q->filter]);
}

static json_t *ask(struct world *w, http_handler fn, const struct q *q, const char *extra,
		   const char *what)
{
	struct buf body = { 0 }, out = { 0 };
	buf_putc(&body, '{');
	q_filter_json(q, &body);
	buf_puts(&body, extra);
	buf_putc(&body, '}');
	int status = call(w, fn, w->proj_id[q->proj], body.data, body.len, NULL, NULL, &out);
	if (status != 200)
		fail_msg("seed %llu step %ld: %s %s answered %d: %s", (unsigned long long)w->seed,
			 w->step, what, body.data, status, out.data);
	json_error_t je;
	json_t *doc = json_loadb(out.data, out.len, 0, &je);
	if (!doc)
		fail_msg("%s: not JSON: %s", what, je.text);
	buf_free(&body);
	buf_free(&out);
	w->n_queries++;
	return doc;
}

static void look_around(struct world *w, const struct q *q);

static void expect_same(struct world *w, const char *what, const struct q *q, char *want,
			char *got)
{
	if (strcmp(want, got) != 0) {
		fprintf(stderr, "--- model (%s)\n%s--- answer\n%s", what, want, got);
		if (w->soft) {
			fprintf(stderr, "(%s differs too)\n", what);
			free(want);
			free(got);
			return;
		}
		look_around(w, q);
		fail_msg("seed %llu step %ld: %s over [%lld, %lld) project %u kind %u filter %d differs from the model",
			 (unsigned long long)w->seed, w->step, what, (long long)q->from, (long long)q->to,
			 q->proj, q->kind, q->filter);
	}
	free(want);
	free(got);
}

static void path_of(const struct world *w, const struct msample *s, unsigned upto, struct buf *p)
{
	for (unsigned j = 0; j < upto; j++) {
		char f[16];
		fname(f, sizeof(f), w->stacks[s->stack][j]);
		buf_printf(p, "%s%s", j ? ";" : "", f);
	}
}

static void walk_tree(json_t *node, const char *prefix, struct entries *x)
{
	json_t *kids = json_object_get(node, "children");
	size_t i;
	json_t *c;
	json_array_foreach(kids, i, c)
	{
		struct buf p = { 0 };
		buf_printf(&p, "%s%s%s", prefix, *prefix ? ";" : "", json_string_value(json_object_get(c, "name")));
		ent_add(x, p.data, (uint64_t)json_integer_value(json_object_get(c, "total")),
			(uint64_t)json_integer_value(json_object_get(c, "self")));
		walk_tree(c, p.data, x);
		buf_free(&p);
	}
}

static void check_flamegraph(struct world *w, const struct q *q, bool grouped)
{
	struct entries want = { 0 }, got = { 0 };
	uint64_t total = 0;
	const struct msample *s;
	for (size_t i = 0; (s = next_selected(w, q, &i)) != NULL;) {
		total += s->value;
		char g[16] = "";
		if (grouped) {
			snprintf(g, sizeof(g), "exe_%u", s->exe);
			ent_add(&want, g, s->value, 0);
		}
		for (unsigned d = 1; d <= w->depth[s->stack]; d++) {
			struct buf p = { 0 };
			buf_puts(&p, g);
			if (grouped)
				buf_putc(&p, ';');
			path_of(w, s, d, &p);
			ent_add(&want, p.data, s->value, d == w->depth[s->stack] ? s->value : 0);
			buf_free(&p);
		}
	}
	json_t *doc = ask(w, handle_flamegraph, q,
			  grouped ? ",\"synthetic_frames\":[\"executable\"]" : ",\"synthetic_frames\":[]",
			  "flamegraph");
	json_t *root = json_object_get(doc, "root");
	walk_tree(root, "", &got);
	char t[64];
	snprintf(t, sizeof(t), "TOTAL %llu 0", (unsigned long long)json_integer_value(json_object_get(doc, "total")));
	ent_add(&got, t, 1, 0);
	snprintf(t, sizeof(t), "TOTAL %llu 0", (unsigned long long)total);
	ent_add(&want, t, 1, 0);
	json_decref(doc);
	expect_same(w, grouped ? "flamegraph by executable" : "flamegraph", q, ent_text(&want),
		    ent_text(&got));
}

static void check_functions(struct world *w, const struct q *q)
{
	struct entries want = { 0 }, got = { 0 };
	const struct msample *s;
	for (size_t i = 0; (s = next_selected(w, q, &i)) != NULL;) {
		unsigned d = w->depth[s->stack];
		for (unsigned j = 0; j < d; j++) {
			char f[16];
			fname(f, sizeof(f), w->stacks[s->stack][j]);
			ent_add(&want, f, j == d - 1 ? s->value : 0, s->value);
		}
	}
	json_t *doc = ask(w, handle_top_functions, q, ",\"limit\":1000", "top_functions");
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(doc, "functions"), i, f)
		ent_add(&got, json_string_value(json_object_get(f, "name")),
			(uint64_t)json_integer_value(json_object_get(f, "self")),
			(uint64_t)json_integer_value(json_object_get(f, "total")));
	json_decref(doc);
	expect_same(w, "top_functions", q, ent_text(&want), ent_text(&got));
}

/* An answer that lists each executable's total: top entities
 * ("entities") and the time series grouped by executable ("series"). */
static void check_by_executable(struct world *w, const struct q *q, http_handler fn,
				const char *extra, const char *list, const char *what)
{
	struct entries want = { 0 }, got = { 0 };
	const struct msample *s;
	for (size_t i = 0; (s = next_selected(w, q, &i)) != NULL;) {
		char e[16];
		snprintf(e, sizeof(e), "exe_%u", s->exe);
		ent_add(&want, e, s->value, 0);
	}
	json_t *doc = ask(w, fn, q, extra, what);
	size_t i;
	json_t *x;
	json_array_foreach(json_object_get(doc, list), i, x)
		ent_add(&got, json_string_value(json_object_get(x, "name")),
			(uint64_t)json_integer_value(json_object_get(x, "total")), 0);
	json_decref(doc);
	expect_same(w, what, q, ent_text(&want), ent_text(&got));
}

static void check_entities(struct world *w, const struct q *q)
{
	check_by_executable(w, q, handle_top_entities, ",\"entity\":\"executable\",\"limit\":100",
			    "entities", "top_entities");
}

static void check_timeseries(struct world *w, const struct q *q)
{
	check_by_executable(w, q, handle_timeseries,
			    ",\"group_by\":\"executable\",\"num_buckets\":12,\"limit\":100", "series",
			    "timeseries");
}

static void check_events(struct world *w, const struct q *q)
{
	struct entries want = { 0 }, got = { 0 };
	size_t rows = 0;
	const struct msample *s;
	for (size_t i = 0; (s = next_selected(w, q, &i)) != NULL;) {
		struct buf k = { 0 };
		buf_printf(&k, "%lld exe_%u t%u ", (long long)s->ts, s->exe, s->thread);
		path_of(w, s, w->depth[s->stack], &k);
		ent_add(&want, k.data, s->value, 0);
		buf_free(&k);
		rows++;
	}
	if (rows > 5000) { /* more than an answer lists */
		char *t = ent_text(&want);
		free(t);
		return;
	}
	json_t *doc = ask(w, handle_events, q, ",\"limit\":10000", "events");
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(doc, "events"), i, e)
	{
		json_t *labels = json_object_get(e, "labels");
		struct buf k = { 0 };
		buf_printf(&k, "%lld %s %s ", (long long)json_integer_value(json_object_get(e, "ts")),
			   json_string_value(json_object_get(labels, "process.executable.name")),
			   json_string_value(json_object_get(labels, "thread.name")));
		size_t j;
		json_t *f;
		json_array_foreach(json_object_get(e, "stack"), j, f)
			buf_printf(&k, "%s%s", j ? ";" : "", json_string_value(json_object_get(f, "name")));
		ent_add(&got, k.data, (uint64_t)json_integer_value(json_object_get(e, "value")), 0);
		buf_free(&k);
	}
	json_decref(doc);
	expect_same(w, "events", q, ent_text(&want), ent_text(&got));
}

/* After a failure: which other answers over the same scope differ. */
static void look_around(struct world *w, const struct q *q)
{
	w->soft = true;
	fprintf(stderr, "# the other answers over the same scope:\n");
	check_flamegraph(w, q, false);
	check_flamegraph(w, q, true);
	check_functions(w, q);
	check_entities(w, q);
	check_timeseries(w, q);
	check_events(w, q);
	w->soft = false;
}

static void query_step(struct world *w)
{
	struct q q = { .proj = (uint8_t)pick(w, NPROJ), .kind = pick(w, 4) ? 1 : 2,
		       .filter = (int)pick(w, 3) };
	if (pick(w, 2)) {
		q.from = T0 - 3600000;
		q.to = T0 + 4 * 3600000LL;
	} else {
		int64_t a = pick(w, SLOTS), b = pick(w, SLOTS);
		if (a > b) {
			int64_t t = a;
			a = b;
			b = t;
		}
		q.from = T0 + a * SLOT_MS;
		q.to = T0 + (b + 1) * SLOT_MS;
	}
	switch (pick(w, 7)) {
	case 0:
	case 1:
		check_flamegraph(w, &q, false);
		break;
	case 2:
		check_flamegraph(w, &q, true);
		break;
	case 3:
		check_functions(w, &q);
		break;
	case 4:
		check_entities(w, &q);
		break;
	case 5:
		check_timeseries(w, &q);
		break;
	default:
		check_events(w, &q);
		break;
	}
}

/* --- maintenance and restarts ---------------------------------------------------- */

static void maintenance_step(struct world *w)
{
	struct buf err = { 0 };
	int rc = 0;
	switch (pick(w, 6)) {
	case 0:
		rc = store_seal(w->srv.store, pick(w, 2), &err);
		w->n_seal++;
		break;
	case 5:
		w->n_adopted += store_adopt_live_blocks(w->srv.store);
		break;
	case 1:
		rc = store_write_sealed(w->srv.store, &err);
		w->n_flush++;
		break;
	case 2:
		rc = store_flush(w->srv.store, &err);
		w->n_flush++;
		break;
	default:
		rc = store_compact(w->srv.store, pick(w, 2), &err);
		w->n_compact++;
		break;
	}
	if (rc < 0)
		fail_msg("seed %llu step %ld: maintenance: %s", (unsigned long long)w->seed, w->step,
			 err.data);
	buf_free(&err);
}

static void restart(struct world *w)
{
	server_down(w);
	/* A start may keep the dictionaries for the next head, or not, and
	 * may have a cache too small for every block's dictionaries. */
	w->cfg.head_dict_bytes = pick(w, 2) ? 1ull << 30 : 0;
	w->cfg.cache_bytes = pick(w, 3) ? 1ull << 30 : 64u << 10;
	w->cfg.compact_after = 2 + pick(w, 3);
	server_up(w);
	w->n_restart++;
}

static void forget_sessions(struct world *w)
{
	sessions_free(w->srv.sessions);
	w->srv.sessions = sessions_new(64u << 20, 64u << 20, 3600000);
}

/* --- the run ---------------------------------------------------------------------- */

static void world_open(struct world *w)
{
	for (unsigned k = 0; k < NSTACKS; k++) {
		w->depth[k] = (uint8_t)(1 + pick(w, MAXDEPTH));
		/* distinct frames within a stack, the root shared by many */
		unsigned used = 0;
		for (unsigned j = 0; j < w->depth[k]; j++) {
			unsigned f;
			do
				f = j == 0 ? pick(w, 3) : pick(w, NFRAMES);
			while (used & (1u << f));
			used |= 1u << f;
			w->stacks[k][j] = (uint8_t)f;
		}
	}
	w->dir = make_temp_dir();
	store_config_default(&w->cfg);
	ingest_codecs(&w->cfg);
	w->cfg.background = false;
	w->cfg.time_window = false;
	w->cfg.late_data_wait_ms = 0;
	w->cfg.compact_after = 3;
	server_up(w);
	for (int a = 0; a < NAGENTS; a++)
		session_init(&w->agents[a].sess);
	struct buf err = { 0 };
	for (int p = 0; p < NPROJ; p++)
		assert_int_equal(projects_by_name(w->srv.projects, proj_names[p], true, w->proj_id[p],
						  &err), PROJECTS_FOUND);
	buf_free(&err);
}

static void world_close(struct world *w)
{
	server_down(w);
	for (int a = 0; a < NAGENTS; a++) {
		session_free(&w->agents[a].sess);
		buf_free(&w->agents[a].last);
	}
	free(w->m.s);
	rm_rf(w->dir);
	free(w->dir);
	free(w);
}

static struct world *world_new(uint64_t seed)
{
	struct world *w = xcalloc(1, sizeof(*w));
	w->seed = seed;
	w->rng = seed * 2654435761u + 1;
	return w;
}

/* A world of seed, its server started. */
static struct world *world_started(uint64_t seed)
{
	struct world *w = world_new(seed);
	world_open(w);
	return w;
}

static void check_all(struct world *w, uint8_t proj)
{
	struct q q = { proj, 1, T0 - 3600000, T0 + 4 * 3600000LL, 0 };
	check_flamegraph(w, &q, false);
	check_functions(w, &q);
	check_entities(w, &q);
	check_events(w, &q);
}

static void one_sample(struct world *w, int64_t ts, uint8_t exe, uint64_t value)
{
	struct msample s = { .proj = 0, .kind = 1, .stack = (uint8_t)(exe % NSTACKS), .exe = exe,
			     .ts = ts, .value = value };
	assert_false(send_v1(w, &s, 1, ++w->v1_seq));
	model_add(&w->m, s);
}

/* A series with rows an hour before and an hour after a partition that
 * others fill has no row there: it is not written into that hour's block
 * (it was, with no rows, and its reader set the whole block aside as
 * corrupt, losing the other series' rows). */
static void test_series_spanning_an_empty_hour(void **state)
{
	(void)state;
	struct world *w = world_started(7);
	one_sample(w, T0 + 1800000, 0, 5);
	one_sample(w, T0 + 2 * 3600000 + 1800000, 0, 7);
	one_sample(w, T0 + 3600000 + 1800000, 1, 11);
	struct buf err = { 0 };
	assert_int_equal(store_flush(w->srv.store, &err), 0);
	restart(w);
	check_all(w, 0);
	struct store_stats st;
	store_get_stats(w->srv.store, &st);
	assert_int_equal(st.corrupt_blocks, 0);
	assert_int_equal(st.blocks, 3);
	buf_free(&err);
	world_close(w);
}

/* A batch retried after its block was compacted and the server restarted
 * is a duplicate: compaction keeps the agents' sequences of its sources'
 * footers (it kept only those of parts still in memory, so a block read
 * from its file after a start lost them when compacted). */
static void test_retry_after_compaction_and_restart(void **state)
{
	(void)state;
	struct world *w = world_started(8);
	struct buf err = { 0 };
	struct msample first = { .proj = 0, .kind = 1, .stack = 1, .exe = 2, .ts = T0 + 60000,
				 .value = 3 };
	assert_false(send_v1_as(w, "agent-x", &first, 1, 1));
	model_add(&w->m, first);
	assert_int_equal(store_flush(w->srv.store, &err), 0);
	restart(w); /* the block is read from its file */
	one_sample(w, T0 + 120000, 2, 4); /* another agent, the same hour */
	assert_int_equal(store_flush(w->srv.store, &err), 0);
	assert_int_equal(store_compact(w->srv.store, true, &err), 0);
	restart(w);
	assert_true(send_v1_as(w, "agent-x", &first, 1, 1)); /* the retry: a duplicate */
	check_all(w, 0);
	buf_free(&err);
	world_close(w);
}

/* What a step of the model does, by a pick from 0 to 99: the first
 * whose bound is above it. */
static const struct {
	unsigned below;
	void (*run)(struct world *w);
} actions[] = {
	{ 30, agent_batch },	  { 36, v1_batch },	   { 48, otlp_request },
	{ 51, metrics_batch },	  { 54, agent_resend },	   { 56, agent_restart },
	{ 58, forget_sessions },  { 68, maintenance_step }, { 70, restart },
	{ 100, query_step },
};

static void test_model(void **state)
{
	(void)state;
	const char *steps_env = getenv("EMBER_MODEL_STEPS");
	const char *seed_env = getenv("EMBER_MODEL_SEED");
	long steps = steps_env ? atol(steps_env) : 2500;
	/* every answer checked after every step: finds the step that broke it */
	bool paranoid = getenv("EMBER_MODEL_PARANOID") != NULL;
	struct world *w = world_new(seed_env ? (strcmp(seed_env, "time") == 0
							? (uint64_t)time(NULL)
							: strtoull(seed_env, NULL, 10))
					     : 20261205);
	fprintf(stderr, "# test_store_model: seed %llu, %ld steps\n", (unsigned long long)w->seed,
		steps);
	world_open(w);
	for (w->step = 0; w->step < steps; w->step++) {
		unsigned r = pick(w, 100);
		size_t a = 0;
		while (r >= actions[a].below)
			a++;
		actions[a].run(w);
		if (paranoid) {
			fprintf(stderr, "# step %ld: %u\n", w->step, r);
			for (uint8_t p = 0; p < NPROJ; p++)
				for (uint8_t k = 1; k <= 2; k++) {
					struct q q = { p, k, T0 - 3600000, T0 + 4 * 3600000LL, 0 };
					check_entities(w, &q);
				}
		}
	}
	fprintf(stderr, "# %lu session batches (%lu resyncs, %lu resent), %lu v1, %lu OTLP, %lu metrics, "
			"%lu restarts, %lu seals, %lu flushes, %lu compactions, %lu blocks adopted, "
			"%lu queries, %zu samples\n",
		w->n_batches, w->n_resync, w->n_dup, w->n_v1, w->n_otlp, w->n_metrics, w->n_restart,
		w->n_seal, w->n_flush, w->n_compact, w->n_adopted, w->n_queries, w->m.n);
	/* Every path ran. */
	if (steps >= 1000) {
		assert_true(w->n_resync > 0 && w->n_dup > 0 && w->n_restart > 0 && w->n_compact > 0 &&
			    w->n_adopted > 0 &&
			    w->n_otlp > 0 && w->n_v1 > 0 && w->n_metrics > 0);
	}
	world_close(w);
}

/* After a start, the live hour's blocks read from their files fold each
 * alone; adopted into the head's dictionaries, they fold with the head
 * once: the same answer, each stack counted once (distinct_stacks). */
static void test_live_blocks_adopted_after_a_start(void **state)
{
	(void)state;
	struct world *w = world_started(9);
	struct buf err = { 0 };
	for (int round = 0; round < 4; round++) {
		for (uint8_t k = 0; k < NSTACKS; k++) {
			struct msample sm = { .proj = 0, .kind = 1, .stack = k, .exe = k % NEXE,
					      .ts = T0 + 60000 * (round + 1), .value = 1 + k };
			assert_false(send_v1(w, &sm, 1, ++w->v1_seq));
			model_add(&w->m, sm);
		}
		assert_int_equal(store_flush(w->srv.store, &err), 0);
	}
	restart(w);
	one_sample(w, T0 + 600000, 0, 1); /* the head meets the range */
	struct q q = { 0, 1, T0, T0 + 3600000, 0 };
	json_t *doc = ask(w, handle_flamegraph, &q, "", "flamegraph");
	json_int_t before = json_integer_value(json_object_get(doc, "distinct_stacks"));
	json_decref(doc);
	assert_int_equal(store_adopt_live_blocks(w->srv.store), 4);
	assert_int_equal(store_adopt_live_blocks(w->srv.store), 0); /* once */
	doc = ask(w, handle_flamegraph, &q, "", "flamegraph");
	json_int_t after = json_integer_value(json_object_get(doc, "distinct_stacks"));
	json_decref(doc);
	/* each stack once per block before, once in all after */
	assert_true(before >= 4 * (after - 1));
	assert_true(after <= NSTACKS + 1);
	check_all(w, 0);
	check_flamegraph(w, &q, false);
	/* And after the next seal and flush, and a compaction of the hour. */
	one_sample(w, T0 + 660000, 1, 2);
	assert_int_equal(store_flush(w->srv.store, &err), 0);
	one_sample(w, T0 + 720000, 2, 3);
	check_flamegraph(w, &q, false);
	assert_int_equal(store_compact(w->srv.store, true, &err), 0);
	check_all(w, 0);
	check_flamegraph(w, &q, false);
	buf_free(&err);
	world_close(w);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_series_spanning_an_empty_hour),
	cmocka_unit_test(test_retry_after_compaction_and_restart),
	cmocka_unit_test(test_live_blocks_adopted_after_a_start),
	cmocka_unit_test(test_model))
