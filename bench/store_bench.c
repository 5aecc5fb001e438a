/* store_bench - what the store and the query engine cost at fleet scale.
 *
 * Synthesizes what a fleet's agents send: HOSTS hosts x 16 cores sampled
 * at 19 Hz for SECONDS, one batch per host per 5 s (as ember-agent
 * reports), each host running 8 of 12 services with 4 threads each and
 * OpenTelemetry resource attributes (host, cluster, namespace,
 * deployment, pod, container, executable, thread). Each service has a
 * pool of distinct stacks (8 to 40 frames with shared entry paths, some
 * ending in kernel frames) drawn with a skew (the top 1% of stacks take
 * about a fifth of the samples), so the whole pool is seen over the hour.
 *
 * A generator thread builds and encodes the batches (agent work, not
 * counted); INGEST_THREADS threads decode and batch_append() them (the
 * server's ingest path: zstd + protobuf + validation + write-ahead log
 * with group commit + indexing) while the store's own thread writes
 * blocks and compacts, all with the default configuration. Right after
 * ingest, the flamegraph and top functions run over the hour as a user
 * would see it live (heads and blocks not yet compacted); then every
 * partition is compacted and all the queries run over the whole range.
 *
 * With EMBER_BENCH_PROTOCOL=2 the batches are those of protocol version 2
 * (each host an agent session, agent/session.c) and the ingest threads
 * run the server's version 2 path (session_batch_decode, sessions_ingest,
 * which logs each batch as received with the definitions it carries and
 * indexes it through the session's map to the head part);
 * each host's batches go to one ingest thread, in order.
 *
 * Reported: ingest samples/s per core of server CPU, bytes on disk per
 * sample after compaction, each query's time (first run and again), peak
 * memory. Usage:
 *   store_bench [HOSTS] [SECONDS] [DIR]     (defaults 100, 3600, /tmp/ember-store-bench)
 *   store_bench --queries [DIR [NAME]]      the queries again over a store built
 *                                           before (only those whose name has NAME)
 * EMBER_BENCH_SESSION_MIB sets the agent sessions' limit (ember-agent's:
 * 32 MiB), to see what starting sessions over costs the server.
 * EMBER_BENCH_COMPACT_AFTER=N merges a partition's blocks once N wait
 * (the store's compact_after; default 4).
 * EMBER_BENCH_HEAD_ROWS=N seals a head at N rows and holds at most 2N
 * unflushed (the store's head_max_rows and max_unflushed_rows: 8 M and
 * 16 M), so a log (3 x the unflushed limit) fills sooner: a short run
 * started ten or more minutes past the hour then writes the hour
 * before's rows, all late (the hour closed), through several logs, as
 * a run of a whole fleet's hour does.
 * With EMBER_BENCH_REPLAY=1 the store is closed after ingest as a crash
 * leaves it and opened again (the logs replayed), and that start timed.
 * EMBER_BENCH_LIVE_EVERY=N times a live flamegraph of the whole range every
 * N s while the hour goes in (the parts it reads, and the separate folds
 * it makes, are counted every second anyway).
 * With EMBER_BENCH_ANSWERS=DIR each query's answer is written to
 * DIR/<query name>.json, its query_stats empty (to compare two builds).
 * With EMBER_BENCH_CLICKHOUSE=URL[,URL...] the same batches go into the
 * fleet store instead (ch_store_open, after `ember-server migrate`;
 * EMBER_BENCH_CLICKHOUSE_DATABASE, default ember, and
 * EMBER_BENCH_CLICKHOUSE_CLUSTER name its database and cluster): ingest
 * as above, then the disk ClickHouse uses for the samples after its
 * merges (system.parts of every server, OPTIMIZE … FINAL first) and the
 * same queries; the embedded store's flush, compaction and reopen are
 * left out. bench/clickhouse_compare.py runs both on two shards. With
 * EMBER_BENCH_CLICKHOUSE_QUERIES=1 too, the ingest is skipped: the disk
 * and the queries over what an earlier run stored (its range read from
 * the samples).
 */
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "agent/batch.h"
#include "agent/session.h"
#include "bench/benchutil.h"
#include "server/ingest/codecs.h"
#include "server/ingest/batch_decode.h"
#include "server/query/entities.h"
#include "server/query/events.h"
#include "server/query/flamegraph.h"
#include "server/query/functions.h"
#include "server/ingest/sessions.h"
#include "server/store/clickhouse/chstore.h"
#include "server/store/clickhouse/chttp.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"
#include "util.h"

#define CORES 16
#define HZ 19
#define INTERVAL_S 5
#define SERVICES 12
#define PROCS_PER_HOST 8
#define THREADS_PER_PROC 4
#define STACKS_PER_SERVICE 21000
#define VOCAB 3000
#define ENTRIES 64
#define QUEUE 32
#define INGEST_THREADS 4

static const char *const service_names[SERVICES] = {
	"api-gateway", "checkout", "search", "inference-server", "postgres", "redis",
	"kafka", "envoy", "recommender", "payments", "trainer", "indexer",
};
static const char *const namespaces[4] = { "prod", "staging", "ml", "data" };

static const char PROJECT[] = "00000000-0000-0000-0000-000000000000";

/* EMBER_BENCH_PROTOCOL: 1 (default) or 2, read once in main. */
static int protocol = 1;

/* EMBER_BENCH_SESSION_MIB: the agent sessions' limit (ember-agent: 32 MiB). */
static size_t session_limit = 32u << 20;

/* --queries NAME: run only the queries whose name contains it. */
static const char *only;

static bool wanted(const char *what)
{
	return !only || strstr(what, only);
}

/* --- the workload -------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
	return (double)(splitmix(s) >> 11) / 9007199254740992.0;
}

/* Frames are numbered globally: service functions, then shared ones. */
#define SHARED_FRAMES 64
#define KERNEL_FRAMES 32
#define NFRAMES (SERVICES * VOCAB + SHARED_FRAMES + KERNEL_FRAMES)

struct stack {
	uint8_t depth;
	uint32_t frames[44];
};

struct workload {
	struct stack *stacks; /* SERVICES * STACKS_PER_SERVICE */
	char (*frame_names)[48];
	uint8_t *frame_kernel;
};

/* Each service's stacks are paths down a random call tree: every call
 * site has up to FANOUT callees, the first far more likely than the
 * rest, and a path stops with some probability after depth 8. Distinct
 * paths are collected until the pool is full, in the order found, so the
 * first found (the likeliest) are the hot ones. */
#define FANOUT 6
#define MAX_DEPTH 40

static void workload_init(struct workload *w)
{
	uint64_t rng = 42;
	w->frame_names = xcalloc(NFRAMES, sizeof(*w->frame_names));
	w->frame_kernel = xcalloc(NFRAMES, 1);
	for (int s = 0; s < SERVICES; s++)
		for (int v = 0; v < VOCAB; v++)
			snprintf(w->frame_names[s * VOCAB + v], 48, "%s::fn_%d", service_names[s], v);
	for (int i = 0; i < SHARED_FRAMES; i++)
		snprintf(w->frame_names[SERVICES * VOCAB + i], 48, "libc_fn_%d", i);
	for (int i = 0; i < KERNEL_FRAMES; i++) {
		snprintf(w->frame_names[SERVICES * VOCAB + SHARED_FRAMES + i], 48, "k_fn_%d", i);
		w->frame_kernel[SERVICES * VOCAB + SHARED_FRAMES + i] = 1;
	}
	/* Callee choice: P(k) proportional to 1 / (k + 1)^2. */
	double cdf[FANOUT], sum = 0;
	for (int k = 0; k < FANOUT; k++)
		sum += 1.0 / ((k + 1) * (k + 1));
	for (int k = 0, acc = 0; k < FANOUT; k++) {
		(void)acc;
		cdf[k] = (k ? cdf[k - 1] : 0) + 1.0 / ((k + 1) * (k + 1)) / sum;
	}
	w->stacks = xcalloc((size_t)SERVICES * STACKS_PER_SERVICE, sizeof(struct stack));
	size_t cap = 1 << 17;
	uint64_t *seen = xmalloc(cap * sizeof(uint64_t));
	for (int s = 0; s < SERVICES; s++) {
		memset(seen, 0, cap * sizeof(uint64_t));
		int n = 0;
		while (n < STACKS_PER_SERVICE) {
			struct stack st = { 0 };
			uint64_t site = 0x51ed27 + (uint64_t)s; /* the call path so far */
			for (int d = 0; d < MAX_DEPTH; d++) {
				if (d >= 8 && unit(&rng) < 0.07)
					break;
				double u = unit(&rng);
				int k = 0;
				while (k < FANOUT - 1 && u > cdf[k])
					k++;
				uint64_t x = site * 0x9e3779b97f4a7c15ull + (uint64_t)k + 1;
				site = splitmix(&x);
				/* The callee's function: a service function, now and then
				 * a library one. */
				uint32_t f = site % 16 == 0 && d > 4
						     ? (uint32_t)(SERVICES * VOCAB + site % SHARED_FRAMES)
						     : (uint32_t)(s * VOCAB + site % VOCAB);
				st.frames[st.depth++] = f;
				if (f >= SERVICES * VOCAB)
					break; /* libraries are leaves or go to the kernel */
			}
			if (site % 5 == 0) {
				int kd = 2 + (int)(site % 3);
				for (int k = 0; k < kd && st.depth < MAX_DEPTH; k++)
					st.frames[st.depth++] = (uint32_t)(SERVICES * VOCAB + SHARED_FRAMES +
									   (site >> (8 * k)) % KERNEL_FRAMES);
			}
			/* Distinct paths only (the site hash names the path). */
			size_t i = site & (cap - 1);
			while (seen[i] && seen[i] != site)
				i = (i + 1) & (cap - 1);
			if (seen[i])
				continue;
			seen[i] = site;
			w->stacks[(size_t)s * STACKS_PER_SERVICE + (size_t)n++] = st;
		}
	}
	free(seen);
}

static void workload_free(struct workload *w)
{
	free(w->stacks);
	free(w->frame_names);
	free(w->frame_kernel);
}

/* --- generating batches ---------------------------------------------------------- */

struct item {
	struct buf z;
	uint64_t samples;
};

struct queue {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct item items[QUEUE];
	size_t head, tail; /* tail - head items waiting */
	bool done;
};

struct gen {
	struct workload *w;
	struct queue *q; /* INGEST_THREADS queues: host h goes to h % INGEST_THREADS */
	int hosts;
	int seconds;
	int64_t start_ms;
	double cpu_s;
	uint64_t samples, batches, bytes;
	uint64_t stacks_seen;
	double encode_s;
	uint64_t session_resets;
	bool finished; /* set (atomically) once every batch is queued */
};

static double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *generate(void *arg)
{
	struct gen *g = arg;
	struct workload *w = g->w;
	struct batch b;
	batch_init(&b);
	uint32_t *frame_slot = xcalloc(NFRAMES, sizeof(uint32_t));
	uint32_t *frame_stamp = xcalloc(NFRAMES, sizeof(uint32_t));
	size_t nstacks = (size_t)SERVICES * STACKS_PER_SERVICE;
	uint32_t *stack_slot = xcalloc(nstacks, sizeof(uint32_t));
	uint32_t *stack_stamp = xcalloc(nstacks, sizeof(uint32_t));
	uint8_t *seen = xcalloc(nstacks, 1);
	uint32_t stamp = 0;
	uint64_t rng = 7;
	struct session *sessions = NULL;
	if (protocol == 2) {
		sessions = xcalloc((size_t)g->hosts, sizeof(*sessions));
		for (int h = 0; h < g->hosts; h++)
			session_init(&sessions[h]);
	}
	char name[96], inst[32];
	int rounds = g->seconds / INTERVAL_S;
	for (int round = 0; round < rounds; round++) {
		int64_t t = g->start_ms + (int64_t)round * INTERVAL_S * 1000;
		for (int h = 0; h < g->hosts; h++) {
			batch_reset(&b);
			stamp++;
			uint32_t res[PROCS_PER_HOST][THREADS_PER_PROC];
			int svc[PROCS_PER_HOST];
			char host[32];
			snprintf(host, sizeof(host), "node-%03d", h);
			for (int p = 0; p < PROCS_PER_HOST; p++) {
				svc[p] = (h + p * 5) % SERVICES;
				const char *sname = service_names[svc[p]];
				char pod[64], deploy[64], ns[16];
				snprintf(deploy, sizeof(deploy), "%s", sname);
				snprintf(pod, sizeof(pod), "%s-%05x-%d", sname, (unsigned)(h * 2654435761u) & 0xfffff, p);
				snprintf(ns, sizeof(ns), "%s", namespaces[svc[p] % 4]);
				char cluster[16];
				snprintf(cluster, sizeof(cluster), "cluster-%d", h % 4);
				for (int t2 = 0; t2 < THREADS_PER_PROC; t2++) {
					char thread[32];
					snprintf(thread, sizeof(thread), "%s-worker-%d", sname, t2);
#define S(x) batch_string(&b, x, strlen(x))
					uint32_t kv[] = {
						S("host.name"), S(host), S("cluster.name"), S(cluster),
						S("k8s.namespace.name"), S(ns), S("k8s.deployment.name"), S(deploy),
						S("k8s.pod.name"), S(pod), S("container.name"), S(sname),
						S("process.executable.name"), S(sname), S("thread.name"), S(thread),
					};
					res[p][t2] = batch_resource(&b, kv, ARRAY_SIZE(kv));
				}
			}
			uint32_t app_bin[SERVICES];
			for (int s = 0; s < SERVICES; s++)
				app_bin[s] = S(service_names[s]);
			uint32_t libc = S("libc.so.6"), vmlinux = S("vmlinux");
#undef S
			int samples = CORES * HZ * INTERVAL_S;
			for (int i = 0; i < samples; i++) {
				int p = (int)(splitmix(&rng) % PROCS_PER_HOST);
				int t2 = (int)(splitmix(&rng) % THREADS_PER_PROC);
				double u = unit(&rng);
				size_t si = (size_t)svc[p] * STACKS_PER_SERVICE +
					    (size_t)(u * u * u * STACKS_PER_SERVICE);
				if (stack_stamp[si] != stamp) {
					const struct stack *st = &w->stacks[si];
					uint32_t ids[44];
					for (int d = 0; d < st->depth; d++) {
						uint32_t f = st->frames[d];
						if (frame_stamp[f] != stamp) {
							bool kernel = w->frame_kernel[f];
							bool shared = f >= SERVICES * VOCAB;
							struct bframe bf = {
								.type = kernel ? FT_KERNEL : FT_NATIVE,
								.name = batch_string(&b, w->frame_names[f], strlen(w->frame_names[f])),
								.binary = kernel ? vmlinux : shared ? libc : app_bin[svc[p]],
							};
							frame_slot[f] = batch_frame(&b, &bf);
							frame_stamp[f] = stamp;
						}
						ids[d] = frame_slot[f];
					}
					stack_slot[si] = batch_stack(&b, ids, st->depth);
					stack_stamp[si] = stamp;
					if (!seen[si]) {
						seen[si] = 1;
						g->stacks_seen++;
					}
				}
				batch_add(&b, stack_slot[si], res[p][t2], EK_ON_CPU, 1);
			}
			snprintf(inst, sizeof(inst), "agent-%03d", h);
			snprintf(name, sizeof(name), "default");
			struct batch_meta meta = { inst, (uint64_t)round + 1, name, t,
						   t + INTERVAL_S * 1000, HZ, CORES };
			struct item it = { { 0 }, (uint64_t)samples };
			double e0 = thread_cpu_s();
			/* As ember-agent does: a new session past 32 MiB. */
			if (protocol == 2 && (session_memory(&sessions[h]) > session_limit ||
					      !session_fits(&sessions[h], &b))) {
				session_reset(&sessions[h]);
				g->session_resets++;
			}
			int rc = protocol == 2 ? session_encode(&sessions[h], &b, &meta, &it.z)
					       : batch_encode(&b, &meta, &it.z);
			g->encode_s += thread_cpu_s() - e0;
			if (rc < 0) {
				fprintf(stderr, "encode failed\n");
				exit(1);
			}
			g->samples += (uint64_t)samples;
			g->batches++;
			g->bytes += it.z.len;
			struct queue *q = &g->q[h % INGEST_THREADS];
			pthread_mutex_lock(&q->mu);
			while (q->tail - q->head == QUEUE)
				pthread_cond_wait(&q->cv, &q->mu);
			q->items[q->tail++ % QUEUE] = it;
			pthread_cond_broadcast(&q->cv);
			pthread_mutex_unlock(&q->mu);
		}
	}
	for (int i = 0; i < INGEST_THREADS; i++) {
		pthread_mutex_lock(&g->q[i].mu);
		g->q[i].done = true;
		pthread_cond_broadcast(&g->q[i].cv);
		pthread_mutex_unlock(&g->q[i].mu);
	}
	g->cpu_s = thread_cpu_s();
	__atomic_store_n(&g->finished, true, __ATOMIC_RELEASE);
	for (int h = 0; sessions && h < g->hosts; h++)
		session_free(&sessions[h]);
	free(sessions);
	batch_free(&b);
	free(frame_slot);
	free(frame_stamp);
	free(stack_slot);
	free(stack_stamp);
	free(seen);
	return NULL;
}

/* --- ingest ---------------------------------------------------------------------- */

struct ingester {
	struct queue *q;
	struct store *st;
	double cpu_s, decode_s;
	uint64_t busy_retries, page_faults;
	struct sessions *sessions;
	double session_s, append_s; /* version 2: sessions_ingest, of which storing */
};

/* batch_append (or store_append_entry of e), waiting while the store is
 * writing blocks, as an agent would. */
static int append_waiting(struct ingester *in, const Ember__Ingest__V1__Batch *d, const void *z,
			  size_t zlen, struct store_entry *e)
{
	struct buf err = { 0 };
	int rc;
	while ((rc = e ? store_append_entry(in->st, e, &err)
		       : batch_append(in->st, PROJECT, d, z, zlen, &err)) == STORE_BUSY) {
		in->busy_retries++;
		struct timespec ts = { 0, 20 * 1000000 };
		nanosleep(&ts, NULL);
		buf_reset(&err);
	}
	if (rc != STORE_OK)
		fprintf(stderr, "append: %d %s\n", rc, err.data);
	buf_free(&err);
	return rc;
}

/* Version 2: the server's path (server/http/ingest_api.c store_session). */
static int store_session(void *ctx, const char *project_name, struct store_entry *e)
{
	struct ingester *in = ctx;
	(void)project_name;
	e->project = PROJECT;
	double c0 = thread_cpu_s();
	int rc = append_waiting(in, NULL, NULL, 0, e);
	in->append_s += thread_cpu_s() - c0;
	return rc;
}

static void ingest_v2(struct ingester *in, const struct item *it)
{
	struct buf err = { 0 };
	double c0 = thread_cpu_s();
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(it->z.data, it->z.len, &err);
	in->decode_s += thread_cpu_s() - c0;
	c0 = thread_cpu_s();
	int rc = m ? sessions_ingest(in->sessions, m, it->z.data, it->z.len, now_unix_ms(),
				     store_session, in, &err)
		   : -1;
	in->session_s += thread_cpu_s() - c0;
	if (rc != 0) {
		fprintf(stderr, "version 2 ingest: %d %s\n", rc, err.data);
		exit(1);
	}
	session_batch_free(m);
	buf_free(&err);
}

static void *ingest(void *arg)
{
	struct ingester *in = arg;
	struct buf err = { 0 };
	for (;;) {
		struct queue *q = in->q;
		pthread_mutex_lock(&q->mu);
		while (q->tail == q->head && !q->done)
			pthread_cond_wait(&q->cv, &q->mu);
		if (q->tail == q->head) {
			pthread_mutex_unlock(&q->mu);
			break;
		}
		struct item it = q->items[q->head++ % QUEUE];
		pthread_cond_broadcast(&q->cv);
		pthread_mutex_unlock(&q->mu);
		if (protocol == 2) {
			ingest_v2(in, &it);
			buf_free(&it.z);
			continue;
		}
		double c0 = thread_cpu_s();
		Ember__Ingest__V1__Batch *d = batch_decode(it.z.data, it.z.len, &err);
		in->decode_s += thread_cpu_s() - c0;
		if (!d) {
			fprintf(stderr, "decode: %s\n", err.data);
			exit(1);
		}
		if (append_waiting(in, d, it.z.data, it.z.len, NULL) != 0)
			exit(1);
		batch_decode_free(d);
		buf_free(&it.z);
	}
	in->cpu_s = thread_cpu_s();
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) == 0)
		in->page_faults = (uint64_t)ru.ru_minflt + (uint64_t)ru.ru_majflt;
	buf_free(&err);
	return NULL;
}

/* --- queries --------------------------------------------------------------------- */

static double ms_since(uint64_t t0)
{
	return (double)(now_mono_ns() - t0) / 1e6;
}

static const char *json_field(const char *json, const char *name)
{
	char key[64];
	snprintf(key, sizeof(key), "\"%s\":", name);
	const char *p = strstr(json, key);
	return p ? p + strlen(key) : "?";
}

/* One query of the bench: parses body, runs it into out. 0 or -1 (err). */
struct bench_ctx {
	struct store *st;
	struct symbols *sym;
	int kind; /* enum fn_query / enum ent_query where it applies */
};

typedef int (*bench_query_fn)(const struct bench_ctx *c, const char *body, struct buf *out,
			      struct buf *err);

/* q_<name>: parses body into a struct <req> (parse: the call, r and body
 * in scope), scopes it to PROJECT, runs query into out, frees it. */
#define BENCH_QUERY(name, req, parse, scope, query)                                      \
	static int q_##name(const struct bench_ctx *c, const char *body, struct buf *out, \
			    struct buf *err)                                                \
	{                                                                                 \
		struct req r;                                                             \
		if (parse < 0)                                                            \
			return -1;                                                        \
		scope;                                                                    \
		int rc = query;                                                           \
		req##_free(&r);                                                           \
		return rc;                                                                \
	}

BENCH_QUERY(flamegraph, fg_request, fg_request_parse(&r, body, strlen(body), err),
	    strcpy(r.scope.project_id, PROJECT), flamegraph_query(c->st, c->sym, NULL, &r, out, err))
BENCH_QUERY(functions, fn_request,
	    fn_request_parse(&r, (enum fn_query)c->kind, body, strlen(body), err),
	    fn_request_set_project(&r, PROJECT), functions_query(c->st, c->sym, NULL, &r, out, err))
BENCH_QUERY(entities, ent_request,
	    ent_request_parse(&r, (enum ent_query)c->kind, body, strlen(body), err),
	    strcpy(r.scope.project_id, PROJECT), entities_query(c->st, &r, out, err))
BENCH_QUERY(events, ev_request, ev_request_parse(&r, body, strlen(body), err),
	    strcpy(r.scope.project_id, PROJECT), events_query(c->st, c->sym, &r, out, err))

/* Runs a query twice (the first run loads block dictionaries) and prints
 * both times and the start of the answer (flamegraphs: their sizes). */
/* EMBER_BENCH_ANSWERS=DIR: the answer, less its timings, to DIR/<what>.json. */
static void save_answer(const char *what, const struct buf *out)
{
	const char *dir = getenv("EMBER_BENCH_ANSWERS");
	if (!dir || !out->data)
		return;
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s.json", dir, what);
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "cannot write %s\n", path);
		return;
	}
	/* Every ..."query_stats":{...} object (flat) is written empty. */
	const char *at = out->data, *end = out->data + out->len;
	for (const char *q; (q = strstr(at, "query_stats\":{")) != NULL;) {
		q += strlen("query_stats\":{");
		fwrite(at, 1, (size_t)(q - at), f);
		const char *close = strchr(q, '}');
		at = close ? close : end;
	}
	fwrite(at, 1, (size_t)(end - at), f);
	fclose(f);
}

/* The body is printf(fmt, ...). */
static void __attribute__((format(printf, 4, 5)))
run(const struct bench_ctx *c, bench_query_fn fn, const char *what, const char *fmt, ...)
{
	if (!wanted(what))
		return;
	char body[2048];
	va_list ap;
	va_start(ap, fmt);
	int len = vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof(body)) {
		fprintf(stderr, "%s: body too long\n", what);
		exit(1);
	}
	/* Wall time, and the CPU time of this thread, which a busy machine
	 * inflates much less (the queries run on the calling thread). */
	double ms[2], cpu[2];
	struct buf out = { 0 }, err = { 0 };
	for (int rep = 0; rep < 2; rep++) {
		buf_reset(&out);
		uint64_t t0 = now_mono_ns(), c0 = now_thread_cpu_ns();
		if (fn(c, body, &out, &err) < 0) {
			fprintf(stderr, "%s: %s\n", what, err.data);
			exit(1);
		}
		ms[rep] = ms_since(t0);
		cpu[rep] = (double)(now_thread_cpu_ns() - c0) / 1e6;
	}
	save_answer(what, &out);
	if (fn == q_flamegraph)
		printf("  %-34s %8.1f ms first, %8.1f ms again (CPU %.0f, %.0f ms)   total %.20s nodes %.10s "
		       "written %.10s stacks %.10s, %zu KiB JSON\n",
		       what, ms[0], ms[1], cpu[0], cpu[1], json_field(out.data, "total"), json_field(out.data, "nodes"),
		       json_field(out.data, "nodes_written"), json_field(out.data, "distinct_stacks"),
		       out.len / 1024);
	else
		printf("  %-34s %8.1f ms first, %8.1f ms again (CPU %.0f, %.0f ms)   (%.200s...)\n", what,
		       ms[0], ms[1], cpu[0], cpu[1], out.data ? out.data : "");
	/* EMBER_BENCH_STATS=1: what each answer says it read. */
	for (const char *q = out.data; getenv("EMBER_BENCH_STATS") && q &&
	     (q = strstr(q, "\"query_stats\":{"));) {
		const char *e = strchr(q, '}');
		printf("    %.*s\n", e ? (int)(e - q + 1) : 80, q);
		q = e;
	}
	buf_free(&out);
	buf_free(&err);
}

static double rss_mib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	double v = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, field, strlen(field)) == 0)
			v = strtod(line + strlen(field), NULL) / 1024.0;
	if (f)
		fclose(f);
	return v;
}

static void run_queries(struct store *st, struct symbols *sym, int64_t start_ms, int64_t end_ms);
static void run_live_queries(struct store *st, struct symbols *sym, int64_t start_ms, int64_t end_ms);
struct gen;
static int clickhouse_disk(const struct ch_store_opts *o, const struct gen *g);
static int clickhouse_queries(const struct ch_store_opts *o, struct store *st, struct symbols *sym,
			      int seconds);

/* The range a run ingested, kept beside the store for --queries. */
static int range_file(const char *dir, int64_t *start_ms, int64_t *end_ms, bool write)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/bench-range", dir);
	FILE *f = fopen(path, write ? "w" : "r");
	if (!f)
		return -1;
	long long a = *start_ms, b = *end_ms;
	int rc = write ? (fprintf(f, "%lld %lld\n", a, b) > 0 ? 0 : -1)
		       : (fscanf(f, "%lld %lld", &a, &b) == 2 ? 0 : -1);
	fclose(f);
	*start_ms = a;
	*end_ms = b;
	return rc;
}

static int queries_only(const char *dir)
{
	struct store_config cfg;
	store_config_default(&cfg);
	ingest_codecs(&cfg);
	struct store *st;
	struct symbols *sym;
	struct buf err = { 0 };
	int64_t start_ms = 0, end_ms = 0;
	if (range_file(dir, &start_ms, &end_ms, false) < 0) {
		fprintf(stderr, "%s: no store built by store_bench\n", dir);
		return 1;
	}
	uint64_t t0 = now_mono_ns();
	if (store_open(dir, &cfg, &st, &err) < 0 || symbols_open(dir, &sym, &err) < 0) {
		fprintf(stderr, "%s\n", err.data);
		return 1;
	}
	printf("open: %.1f ms\n", ms_since(t0));
	run_queries(st, sym, start_ms, end_ms);
	store_close(st);
	symbols_close(sym);
	buf_free(&err);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--queries") == 0) {
		only = argc > 3 ? argv[3] : NULL;
		return queries_only(argc > 2 ? argv[2] : "/tmp/ember-store-bench");
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* a run that dies keeps what it printed */
	const char *sl = getenv("EMBER_BENCH_SESSION_MIB");
	if (sl && atoi(sl) > 0)
		session_limit = (size_t)atoi(sl) << 20;
	const char *pv = getenv("EMBER_BENCH_PROTOCOL");
	protocol = pv && strcmp(pv, "2") == 0 ? 2 : 1;
	int hosts = argc > 1 ? atoi(argv[1]) : 100;
	int seconds = argc > 2 ? atoi(argv[2]) : 3600;
	const char *dir = argc > 3 ? argv[3] : "/tmp/ember-store-bench";
	if (hosts < 1 || hosts > 10000 || seconds < INTERVAL_S) {
		fprintf(stderr, "usage: store_bench [HOSTS] [SECONDS] [DIR] | --queries [DIR]\n");
		return 2;
	}
	if (bench_rm_rf(dir) < 0)
		return 1;

	struct workload w;
	workload_init(&w);
	struct store_config cfg;
	store_config_default(&cfg);
	ingest_codecs(&cfg);
	const char *ca = getenv("EMBER_BENCH_COMPACT_AFTER");
	if (ca && atoi(ca) >= 2)
		cfg.compact_after = (uint32_t)atoi(ca);
	const char *hr = getenv("EMBER_BENCH_HEAD_ROWS");
	if (hr && atoll(hr) >= 1000) {
		cfg.head_max_rows = (uint64_t)atoll(hr);
		cfg.max_unflushed_rows = 2 * cfg.head_max_rows;
	}
	struct store *st;
	struct symbols *sym;
	struct buf err = { 0 };
	const char *chu = getenv("EMBER_BENCH_CLICKHOUSE");
	struct ch_store_opts cho = { .urls = chu, .database = getenv("EMBER_BENCH_CLICKHOUSE_DATABASE"),
				     .cluster = getenv("EMBER_BENCH_CLICKHOUSE_CLUSTER"),
				     .timeout_ms = 60000 };
	if ((mkdir(dir, 0755) < 0 && errno != EEXIST) ||
	    (chu ? ch_store_open(&cho, &cfg, &st, &err) : store_open(dir, &cfg, &st, &err)) < 0 ||
	    symbols_open(dir, &sym, &err) < 0) {
		fprintf(stderr, "%s\n", err.data[0] ? err.data : strerror(errno));
		return 1;
	}
	/* The simulated range ends at the last whole minute, so its partitions
	 * are live ones, and whole-minute queries cover whole series. */
	int64_t end_ms = now_unix_ms() / 60000 * 60000;
	int64_t start_ms = end_ms - (int64_t)seconds * 1000;
	if (chu && getenv("EMBER_BENCH_CLICKHOUSE_QUERIES"))
		return clickhouse_queries(&cho, st, sym, seconds);
	struct queue q[INGEST_THREADS];
	for (int i = 0; i < INGEST_THREADS; i++) {
		memset(&q[i], 0, sizeof(q[i]));
		pthread_mutex_init(&q[i].mu, NULL);
		pthread_cond_init(&q[i].cv, NULL);
	}
	/* Room for every host's session for the whole hour (about 80 MiB each
	 * with 1.3 M stack nodes): --session-memory sized for the fleet. */
	struct sessions *sessions = sessions_new(8ull << 30, SESSION_MAX_BYTES, 3600000);
	struct gen g = { .w = &w, .q = q, .hosts = hosts, .seconds = seconds, .start_ms = start_ms };
	struct ingester ins[INGEST_THREADS];
	pthread_t gt, it[INGEST_THREADS];
	double cpu0 = bench_cpu_s();
	uint64_t t0 = now_mono_ns();
	pthread_create(&gt, NULL, generate, &g);
	for (int i = 0; i < INGEST_THREADS; i++) {
		ins[i] = (struct ingester){ .q = &q[i], .st = st, .sessions = sessions };
		pthread_create(&it[i], NULL, ingest, &ins[i]);
	}
	/* Once a second while the hour goes in: how many parts a query of the
	 * whole range would read (heads, blocks of logs still there, blocks
	 * not yet compacted), which is what a live query's cost follows. */
	uint64_t probes = 0, parts_sum = 0, parts_max = 0;
	/* And how many separate folds of a stack tree it would make: the
	 * heads' chain once, every other part alone (heads_folds), and with
	 * the blocks written from the heads carried into their chain
	 * (scan_carry_blocks). EMBER_BENCH_LIVE_EVERY=N also times a live
	 * flamegraph of the whole range every N s. */
	uint64_t heads_folds = 0, folds = 0, folds_max = 0, live_runs = 0;
	/* Of those folds, the parts folded alone (blocks that keep no ids in
	 * an in-memory part's dictionaries, as a closed hour's), and how many
	 * probes made 1, 2, 3, 4 and 5 or more folds. */
	uint64_t alone = 0, alone_max = 0, chains_max = 0, fold_probes[6] = { 0 };
	double live_ms = 0, live_max = 0;
	const char *le = getenv("EMBER_BENCH_LIVE_EVERY");
	int live_every = le ? atoi(le) : 0;
	while (!__atomic_load_n(&g.finished, __ATOMIC_ACQUIRE)) {
		struct timespec second = { 1, 0 };
		nanosleep(&second, NULL);
		struct scope sc = { .kind = SEK_ON_CPU, .start_ms = start_ms, .end_ms = end_ms };
		strcpy(sc.project_id, PROJECT);
		struct scan *scan = scan_open(st, &sc, &err);
		if (!scan)
			continue;
		size_t n = scan_parts(scan);
		for (size_t i = 0; i < n; i++)
			heads_folds += !scan_shares_later(scan, i);
		scan_carry_blocks(scan);
		uint64_t f = 0, a = 0;
		for (size_t i = 0; i < n; i++) {
			f += !scan_shares_later(scan, i);
			a += !scan_same_dictionary(scan, i, i); /* named by no head */
		}
		scan_close(scan);
		alone += a;
		alone_max = MAX(alone_max, a);
		chains_max = MAX(chains_max, f - a); /* more than 1: heads of other dictionaries */
		fold_probes[MIN(f, (uint64_t)5)]++;
		probes++;
		parts_sum += n;
		parts_max = MAX(parts_max, (uint64_t)n);
		folds += f;
		folds_max = MAX(folds_max, f);
		if (live_every > 0 && probes % (uint64_t)live_every == 0) {
			char body[256];
			snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld}}",
				 (long long)start_ms, (long long)end_ms);
			struct bench_ctx fg = { st, sym, 0 };
			struct buf out = { 0 };
			uint64_t q0 = now_mono_ns();
			if (q_flamegraph(&fg, body, &out, &err) == 0) {
				double ms = ms_since(q0);
				live_ms += ms;
				live_max = MAX(live_max, ms);
				live_runs++;
			}
			buf_free(&out);
		}
	}
	pthread_join(gt, NULL);
	double ingest_cpu = 0, decode_cpu = 0, session_cpu = 0, append_cpu = 0;
	uint64_t busy = 0, faults = 0;
	for (int i = 0; i < INGEST_THREADS; i++) {
		pthread_join(it[i], NULL);
		faults += ins[i].page_faults;
		ingest_cpu += ins[i].cpu_s;
		decode_cpu += ins[i].decode_s;
		session_cpu += ins[i].session_s;
		append_cpu += ins[i].append_s;
		busy += ins[i].busy_retries;
	}
	double wall_s = ms_since(t0) / 1000.0;
	double server_cpu = bench_cpu_s() - cpu0 - g.cpu_s;
	struct store_stats ss;
	store_get_stats(st, &ss);
	printf("workload: %d hosts x %d cores x %d Hz x %d s = %llu samples in %llu batches; "
	       "%llu distinct stacks seen (pool %d), %d label sets\n",
	       hosts, CORES, HZ, seconds, (unsigned long long)g.samples,
	       (unsigned long long)g.batches, (unsigned long long)g.stacks_seen,
	       SERVICES * STACKS_PER_SERVICE, hosts * PROCS_PER_HOST * THREADS_PER_PROC);
	printf("wire (protocol version %d): %.2f bytes per sample (%.1f KiB per batch); generating took "
	       "%.1f s of CPU, of which encoding %.1f s = %.0f ns per sample\n",
	       protocol, (double)g.bytes / (double)g.samples, (double)g.bytes / (double)g.batches / 1024.0,
	       g.cpu_s, g.encode_s, g.encode_s * 1e9 / (double)g.samples);
	printf("ingest: %.1f s wall, %llu rows; ingest threads %.1f s CPU = %.2f M samples/s per core; "
	       "with the store's own thread (blocks, compaction) %.1f s CPU = %.2f M samples/s per core; "
	       "%llu busy answers; the ingest threads' page faults: %.1f per 1 000 samples\n",
	       wall_s, (unsigned long long)ss.rows, ingest_cpu, (double)g.samples / ingest_cpu / 1e6,
	       server_cpu, (double)g.samples / server_cpu / 1e6, (unsigned long long)busy,
	       (double)faults * 1000.0 / (double)g.samples);
	printf("  of which decoding (zstd + protobuf%s) %.1f s = %.2f M samples/s per core, "
	       "storing (%slog + group commit + indexing) %.1f s = %.2f M samples/s per core\n",
	       protocol == 2 ? "" : " + validation",
	       decode_cpu, (double)g.samples / decode_cpu / 1e6,
	       protocol == 2 ? "session: validation, definitions carried in the " : "",
	       ingest_cpu - decode_cpu, (double)g.samples / (ingest_cpu - decode_cpu) / 1e6);
	if (protocol == 2) {
		struct sessions_stats sst;
		sessions_get_stats(sessions, &sst);
		printf("  version 2: %llu agent sessions restarted at 32 MiB; server sessions: %zu held, "
		       "%.0f MiB, %llu forgotten (LRU)\n", (unsigned long long)g.session_resets, sst.count,
		       (double)sst.bytes / 1048576.0, (unsigned long long)sst.evicted);
	}
	if (protocol == 2)
		printf("  version 2: sessions_ingest %.1f s, of which storing (carried definitions, log, "
		       "group commit, indexing) %.1f s = %.0f ns per sample; the session itself "
		       "(validation, definitions) %.1f s = %.0f ns per sample\n",
		       session_cpu, append_cpu, append_cpu * 1e9 / (double)g.samples,
		       session_cpu - append_cpu, (session_cpu - append_cpu) * 1e9 / (double)g.samples);
	printf("parts a whole-range query read during ingest (once a second): mean %.1f, most %llu "
	       "(%llu probes)\n", probes ? (double)parts_sum / (double)probes : 0.0,
	       (unsigned long long)parts_max, (unsigned long long)probes);
	printf("  separate folds of a stack tree it would make: mean %.1f, most %llu (with only the "
	       "heads folded together: mean %.1f)\n", probes ? (double)folds / (double)probes : 0.0,
	       (unsigned long long)folds_max, probes ? (double)heads_folds / (double)probes : 0.0);
	printf("  of them parts folded alone (no ids in a head's dictionaries, as a closed hour's "
	       "block): mean %.1f, most %llu; chains of the heads' dictionaries folded: most %llu; "
	       "probes that made 1, 2, 3, 4, 5+ folds: %llu, %llu, %llu, %llu, %llu\n",
	       probes ? (double)alone / (double)probes : 0.0, (unsigned long long)alone_max,
	       (unsigned long long)chains_max, (unsigned long long)fold_probes[1],
	       (unsigned long long)fold_probes[2], (unsigned long long)fold_probes[3],
	       (unsigned long long)fold_probes[4], (unsigned long long)fold_probes[5]);
	if (live_runs)
		printf("  a live flamegraph of the whole range every %d s during ingest: mean %.0f ms, "
		       "most %.0f ms (%llu runs)\n", live_every, live_ms / (double)live_runs, live_max,
		       (unsigned long long)live_runs);
	printf("memory after ingest: RSS %.0f MiB, peak %.0f MiB; store %.0f MiB (%llu rows unflushed)\n",
	       rss_mib("VmRSS:"), rss_mib("VmHWM:"), (double)ss.memory_bytes / 1048576.0,
	       (unsigned long long)ss.unflushed_rows);

	/* What a user sees while ingest goes on: the hour read from the heads
	 * and the blocks not yet compacted (a log's blocks wait for it to
	 * go), with the store's thread still flushing and compacting. */
	printf("queries right after ingest, before the final flush and compaction:\n");
	run_live_queries(st, sym, start_ms, end_ms);

	/* EMBER_BENCH_REPLAY=1: the store closed as a crash leaves it (logs
	 * not yet written as blocks stay) and opened again, which replays
	 * them: how long a start after a crash takes, and what it holds. */
	if (getenv("EMBER_BENCH_REPLAY")) {
		store_close(st);
		/* No maintenance thread: it would adopt the live hour's blocks
		 * as it starts; the bench does that itself, between two runs
		 * of the live queries. */
		cfg.background = false;
		t0 = now_mono_ns();
		double r0 = bench_cpu_s();
		if (store_open(dir, &cfg, &st, &err) < 0) {
			fprintf(stderr, "%s\n", err.data);
			return 1;
		}
		store_get_stats(st, &ss);
		printf("start after a crash: %.1f s wall, %.1f s CPU, %llu rows replayed, %llu of them "
		       "left in memory (store %.0f MiB); RSS peak %.0f MiB\n",
		       ms_since(t0) / 1000.0, bench_cpu_s() - r0, (unsigned long long)ss.rows,
		       (unsigned long long)ss.unflushed_rows, (double)ss.memory_bytes / 1048576.0,
		       rss_mib("VmHWM:"));
		printf("queries right after the start (the live hour's blocks read from their files):\n");
		run_live_queries(st, sym, start_ms, end_ms);
		t0 = now_mono_ns();
		r0 = bench_cpu_s();
		size_t adopted = store_adopt_live_blocks(st);
		store_get_stats(st, &ss);
		printf("adopting %zu blocks of the live hour into the head's dictionaries: %.1f s wall, "
		       "%.1f s CPU; store %.0f MiB\n", adopted, ms_since(t0) / 1000.0,
		       bench_cpu_s() - r0, (double)ss.memory_bytes / 1048576.0);
		printf("queries after the adoption:\n");
		run_live_queries(st, sym, start_ms, end_ms);
	}

	if (chu) {
		int rc = clickhouse_disk(&cho, &g) < 0;
		run_queries(st, sym, start_ms, end_ms);
		store_close(st);
		sessions_free(sessions);
		symbols_close(sym);
		workload_free(&w);
		buf_free(&err);
		return rc;
	}
	t0 = now_mono_ns();
	double c0 = bench_cpu_s();
	if (store_flush(st, &err) < 0 || store_compact(st, true, &err) < 0) {
		fprintf(stderr, "%s\n", err.data);
		return 1;
	}
	store_get_stats(st, &ss);
	printf("final flush + compaction: %.1f s wall, %.1f s CPU\n", ms_since(t0) / 1000.0,
	       bench_cpu_s() - c0);
	printf("disk: %llu blocks, %.1f MiB, %llu rows = %.2f bytes per sample, %.2f bytes per row "
	       "(%.2f rows per sample)\n",
	       (unsigned long long)ss.blocks, (double)ss.block_bytes / 1048576.0,
	       (unsigned long long)ss.block_rows, (double)ss.block_bytes / (double)ss.block_samples,
	       (double)ss.block_bytes / (double)ss.block_rows,
	       (double)ss.block_rows / (double)ss.block_samples);

	range_file(dir, &start_ms, &end_ms, true);
	run_queries(st, sym, start_ms, end_ms);
	store_get_stats(st, &ss);
	printf("memory at the end: RSS %.0f MiB, peak %.0f MiB; store %.0f MiB (cache %.0f MiB)\n",
	       rss_mib("VmRSS:"), rss_mib("VmHWM:"), (double)ss.memory_bytes / 1048576.0,
	       (double)ss.cache_bytes / 1048576.0);
	t0 = now_mono_ns();
	store_close(st);
	if (store_open(dir, &cfg, &st, &err) < 0) {
		fprintf(stderr, "%s\n", err.data);
		return 1;
	}
	printf("reopen: %.1f ms\n", ms_since(t0));
	store_close(st);
	sessions_free(sessions);
	symbols_close(sym);
	workload_free(&w);
	buf_free(&err);
	return 0;
}

/* The fleet store's disk after the bench's batches: every server's active
 * parts of the samples (and of all ember's tables), merged first as a day
 * of background merges would. 0, or -1 (printed). */
static int clickhouse_disk(const struct ch_store_opts *o, const struct gen *g)
{
	struct buf err = { 0 }, sql = { 0 }, ans = { 0 };
	struct ch_conn_opts co = { .urls = o->urls, .database = o->database, .timeout_ms = 600000 };
	struct ch_conn *c = ch_conn_new(&co, &err);
	if (!c) {
		fprintf(stderr, "%s\n", err.data);
		return -1;
	}
	const char *db = ch_conn_database(c);
	bool cl = o->cluster && *o->cluster;
	uint64_t t0 = now_mono_ns();
	unsigned long long sbytes = 0, srows = 0, all = 0;
	int rc = 0;
	for (int i = 0; i < ch_conn_servers(c) && rc == 0; i++) {
		buf_reset(&sql);
		buf_printf(&sql, "OPTIMIZE TABLE %s.samples%s FINAL", db, cl ? "_local" : "");
		if (ch_query(c, i, sql.data, NULL, 0, 0, 0, NULL, NULL, &err) != CH_OK)
			rc = -1;
		buf_reset(&sql);
		buf_reset(&ans);
		buf_printf(&sql, "SELECT sumIf(bytes_on_disk, table = 'samples%s'), "
			   "sumIf(rows, table = 'samples%s'), sum(bytes_on_disk) FROM system.parts "
			   "WHERE database = '%s' AND active FORMAT TSV", cl ? "_local" : "",
			   cl ? "_local" : "", db);
		unsigned long long a = 0, b = 0, d = 0;
		if (rc == 0 && (ch_query(c, i, sql.data, NULL, 0, 0, 0, NULL, &ans, &err) != CH_OK ||
				sscanf(ans.data ? ans.data : "", "%llu %llu %llu", &a, &b, &d) != 3))
			rc = -1;
		sbytes += a;
		srows += b;
		all += d;
	}
	if (rc == 0)
		printf("clickhouse disk after OPTIMIZE FINAL (%.1f s) on %d servers: samples %.1f MiB, "
		       "%llu rows = %.2f bytes per sample, %.2f bytes per row; every ember table "
		       "%.1f MiB = %.2f bytes per sample\n",
		       ms_since(t0) / 1000.0, ch_conn_servers(c), (double)sbytes / 1048576.0, srows,
		       (double)sbytes / (double)g->samples, srows ? (double)sbytes / (double)srows : 0.0,
		       (double)all / 1048576.0, (double)all / (double)g->samples);
	else
		fprintf(stderr, "clickhouse disk: %s\n", err.data ? err.data : "an answer not understood");
	ch_conn_free(c);
	buf_free(&sql);
	buf_free(&ans);
	buf_free(&err);
	return rc;
}

/* EMBER_BENCH_CLICKHOUSE_QUERIES: the disk and the queries over the
 * samples an earlier run stored, whose range (whole minutes) is read from
 * them; seconds long, as that run's. */
static int clickhouse_queries(const struct ch_store_opts *o, struct store *st, struct symbols *sym,
			      int seconds)
{
	struct buf err = { 0 }, sql = { 0 }, ans = { 0 };
	struct ch_conn_opts co = { .urls = o->urls, .database = o->database, .timeout_ms = 600000 };
	struct ch_conn *c = ch_conn_new(&co, &err);
	unsigned long long max_s = 0, rows = 0, samples = 0;
	if (c) {
		buf_printf(&sql, "SELECT toUInt32(max(ts)), count(), sum(value) FROM %s.samples FORMAT TSV",
			   ch_conn_database(c));
		if (ch_query(c, 0, sql.data, NULL, 0, 0, 0, NULL, &ans, &err) != CH_OK ||
		    sscanf(ans.data ? ans.data : "", "%llu %llu %llu", &max_s, &rows, &samples) != 3)
			max_s = 0;
		ch_conn_free(c);
	}
	if (!max_s) {
		fprintf(stderr, "clickhouse: no samples to query: %s\n", err.data ? err.data : "");
		return 1;
	}
	int64_t end_ms = ((int64_t)max_s * 1000 / 60000 + 1) * 60000;
	int64_t start_ms = end_ms - (int64_t)seconds * 1000;
	printf("clickhouse: %llu samples in %llu rows stored by an earlier run\n", samples, rows);
	struct gen g = { .samples = samples };
	int rc = clickhouse_disk(o, &g) < 0;
	printf("queries over the whole hour, right after the rows' merges:\n");
	run_live_queries(st, sym, start_ms, end_ms);
	run_queries(st, sym, start_ms, end_ms);
	store_close(st);
	symbols_close(sym);
	buf_free(&sql);
	buf_free(&ans);
	buf_free(&err);
	return rc;
}

static void run_live_queries(struct store *st, struct symbols *sym, int64_t start_ms, int64_t end_ms)
{
	struct bench_ctx fg = { st, sym, 0 }, top = { st, sym, FN_TOP };
	run(&fg, q_flamegraph, "flamegraph (all), live",
	    "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld}}",
	    (long long)start_ms, (long long)end_ms);
	run(&top, q_functions, "top functions, live",
	    "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"limit\":100}",
	    (long long)start_ms, (long long)end_ms);
}

static void run_queries(struct store *st, struct symbols *sym, int64_t start_ms, int64_t end_ms)
{
	int seconds = (int)((end_ms - start_ms) / 1000);
	char all[256], first[256], second[256], cel[512];
	int64_t mid = start_ms + (end_ms - start_ms) / 2;
	snprintf(all, sizeof(all), "{\"start_ts\":%lld,\"end_ts\":%lld}", (long long)start_ms,
		 (long long)end_ms);
	snprintf(first, sizeof(first), "{\"start_ts\":%lld,\"end_ts\":%lld}", (long long)start_ms,
		 (long long)mid);
	snprintf(second, sizeof(second), "{\"start_ts\":%lld,\"end_ts\":%lld}", (long long)mid,
		 (long long)end_ms);
	snprintf(cel, sizeof(cel),
		 "{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"k8s.namespace.name == \\\"prod\\\" && "
		 "thread.name.startsWith(\\\"api-gateway\\\")\"}",
		 (long long)start_ms, (long long)end_ms);
	struct bench_ctx fg = { st, sym, 0 }, top = { st, sym, FN_TOP }, diff = { st, sym, FN_DIFF },
			 sand = { st, sym, FN_SANDWICH }, ent = { st, sym, ENT_TOP },
			 ts = { st, sym, ENT_TIMESERIES }, lab = { st, sym, ENT_LABELS };
	printf("queries over the whole range (%d s):\n", seconds);
	run(&fg, q_flamegraph, "flamegraph (all)", "{\"filter\":%s}", all);
	run(&fg, q_flamegraph, "flamegraph, CEL filter", "{\"filter\":%s}", cel);
	run(&fg, q_flamegraph, "flamegraph by host, executable",
	    "{\"filter\":%s,\"synthetic_frames\":[\"host\",\"executable\"]}", all);
	run(&top, q_functions, "top functions", "{\"filter\":%s,\"limit\":100}", all);
	char c0[512], c1[512];
	snprintf(c0, sizeof(c0), "{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"cluster.name == \\\"cluster-0\\\"\"}",
		 (long long)start_ms, (long long)end_ms);
	snprintf(c1, sizeof(c1), "{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"cluster.name == \\\"cluster-1\\\"\"}",
		 (long long)start_ms, (long long)end_ms);
	run(&diff, q_functions, "diff (two clusters, whole range)",
	    "{\"baseline\":%s,\"comparison\":%s,\"limit\":100}", c0, c1);
	run(&diff, q_functions, "diff (first vs second half)",
	    "{\"baseline\":%s,\"comparison\":%s,\"limit\":100}", first, second);
	/* The same off every minute and slice boundary: rows are read at
	 * each end of both ranges. */
	snprintf(first, sizeof(first), "{\"start_ts\":%lld,\"end_ts\":%lld}", (long long)start_ms + 13000,
		 (long long)mid + 37000);
	snprintf(second, sizeof(second), "{\"start_ts\":%lld,\"end_ts\":%lld}", (long long)mid + 37000,
		 (long long)end_ms - 11000);
	run(&diff, q_functions, "diff (halves, off the minute)",
	    "{\"baseline\":%s,\"comparison\":%s,\"limit\":100}", first, second);
	run(&sand, q_functions, "sandwich", "{\"filter\":%s,\"function\":\"checkout::fn_3\"}", all);
	run(&ent, q_entities, "top entities (pods)", "{\"filter\":%s,\"entity\":\"pod\"}", all);
	run(&ent, q_entities, "top entities (shared objects)",
	    "{\"filter\":%s,\"entity\":\"shared_object\"}", all);
	run(&ts, q_entities, "time series by host",
	    "{\"filter\":%s,\"group_by\":\"host\",\"num_buckets\":60}", all);
	run(&lab, q_entities, "label names", "{\"filter\":%s}", all);
	run(&fg, q_events, "raw events (newest 100)", "{\"filter\":%s,\"limit\":100}", all);
}
