/* Unit tests: the store's read interface (store.h, "reading") as the
 * contract of a backend. The same samples go into the embedded store,
 * through its real ingest path (batches decoded and appended), and into
 * an in-memory double of the interface (tests/unit/store_mem.h, built
 * without the embedded store's code); every query answers the same over
 * both: flamegraphs (filtered, searched, grouped, masked, sampled, with
 * time buckets), top functions, sandwich, diff, top entities, labels,
 * time series, events and hot traces, over heads, blocks and compacted
 * blocks. */
#include "server_fixture.h"
#include "store_mem.h"

#include "server/query/hottraces.h"

#define HZ 19
#define CPUS 8

/* A stack frame name as in server_fixture.h's specs, and two more forms:
 * "py:f" an interpreted frame f of /srv/app/job.py at line 42,
 * "cuda:k" a CUDA kernel k. */
static struct mem_frame mem_frame_of(const char *name, const char *exe)
{
	struct mem_frame f = { .type = SFT_NATIVE };
	if (strncmp(name, "file:", 5) == 0) {
		memset(f.file_id.b, 0x11, sizeof(f.file_id.b));
		f.file_name = "libfoo.so";
		f.address = strtoull(name + 5, NULL, 16);
	} else if (strncmp(name, "k:", 2) == 0) {
		f.type = SFT_KERNEL;
		f.name = name + 2;
		f.binary = "vmlinux";
	} else if (strncmp(name, "py:", 3) == 0) {
		f.type = SFT_CPYTHON;
		f.name = name + 3;
		f.binary = "/srv/app/job.py";
		f.address = 42;
	} else {
		f.name = name;
		f.binary = exe;
	}
	return f;
}

/* One batch of specs at start into both: the embedded store by its
 * ingest path, the double by its test API. */
static void load(struct store *s, struct memstore *m, const struct spec *specs, size_t n,
		 uint64_t seq, int64_t start, enum event_kind kind)
{
	struct batch b;
	batch_init(&b);
	for (size_t i = 0; i < n; i++) {
		uint32_t ids[6];
		struct mem_frame mf[6];
		size_t depth = 0;
		for (; depth < 6 && specs[i].frames[depth]; depth++) {
			struct mem_frame f = mem_frame_of(specs[i].frames[depth], specs[i].exe);
			mf[depth] = f;
			struct bframe bf = { .type = f.type, .address = f.address };
			if (f.file_name)
				bf.file = batch_file(&b, 0, &f.file_id, f.file_name, NULL, 0, NULL, 0);
			if (f.name)
				bf.name = batch_string(&b, f.name, strlen(f.name));
			if (f.binary)
				bf.binary = batch_string(&b, f.binary, strlen(f.binary));
			ids[depth] = batch_frame(&b, &bf);
		}
		const char *kv[] = { "process.executable.name", specs[i].exe, "thread.name",
				     specs[i].thread, "host.name", "h1" };
		uint32_t kvids[6];
		for (size_t k = 0; k < 6; k++)
			kvids[k] = batch_string(&b, kv[k], strlen(kv[k]));
		batch_add(&b, batch_stack(&b, ids, depth), batch_resource(&b, kvids, 6), kind,
			  specs[i].value);
		memstore_add(m, PROJECT, (uint8_t)kind, HZ, kv, 3, start, mf, depth, specs[i].value);
	}
	struct batch_meta meta = { "agent-1", seq, "default", start, start + 5000, HZ, CPUS };
	struct buf z = { 0 };
	assert_int_equal(batch_encode(&b, &meta, &z), 0);
	batch_free(&b);
	append(s, &z);
	buf_free(&z);
	memstore_host(m, "h1", CPUS);
}

static const struct spec round_specs[] = {
	{ { "main", "run", "hot_a", NULL }, "app", "main", 60 },
	{ { "main", "run", "hot_b", NULL }, "app", "main", 30 },
	{ { "main", "run", "hot_b", "k:do_syscall_64", NULL }, "app", "main", 5 },
	{ { "main", "file:0x1010", NULL }, "app", "worker", 4 },
	{ { "main", "file:0x2020", "hot_b", NULL }, "app", "worker", 6 },
	{ { "main", "idle_loop", NULL }, "other", "main", 1 },
	{ { "py:<module>", "py:train", "py:step", NULL }, "python3", "main", 9 },
	{ { "py:<module>", "py:train", "k:schedule", NULL }, "python3", "loader", 2 },
};

static const struct spec off_specs[] = {
	{ { "main", "lock_all", "futex_wait", NULL }, "app", "main", 3000000000ULL },
	{ { "main", "read_wait", NULL }, "other", "io", 1000000000ULL },
	{ { "main", "run", "k:schedule", NULL }, "app", "worker", 500000000ULL },
};

/* Round k: some of round_specs (more each round, so later heads hold
 * stacks earlier ones lack) and every third round off-CPU waits. */
static void load_round(struct store *s, struct memstore *m, uint64_t k)
{
	size_t n = MIN(3 + k, ARRAY_SIZE(round_specs));
	int64_t t = T0 + (int64_t)k * 20000;
	load(s, m, round_specs, n, 2 * k + 1, t, EK_ON_CPU);
	if (k % 3 == 0)
		load(s, m, off_specs, ARRAY_SIZE(off_specs), 2 * k + 2, t + 1000, EK_OFF_CPU);
}

#define ROUNDS 9
#define RANGE "\"start_ts\":1700000000000,\"end_ts\":1700000180000"
#define CUT "\"start_ts\":1700000030000,\"end_ts\":1700000150000"
#define OFFK ",\"event_kind\":\"off_cpu\""

enum qtype { Q_FG, Q_TOP, Q_SANDWICH, Q_DIFF, Q_ENT, Q_LABELS, Q_SERIES, Q_EVENTS, Q_HOT };

static const struct {
	enum qtype type;
	const char *body;
} queries[] = {
	{ Q_FG, "{\"filter\":{" RANGE "}}" },
	{ Q_FG, "{\"filter\":{" CUT "}}" },
	{ Q_FG, "{\"filter\":{" RANGE OFFK "}}" },
	{ Q_FG, "{\"filter\":{" RANGE ",\"query\":\"thread.name == \\\"main\\\"\"}}" },
	{ Q_FG, "{\"filter\":{" RANGE "},\"search\":\"hot_b\",\"num_stat_buckets\":12}" },
	{ Q_FG, "{\"filter\":{" CUT ",\"frame_mask\":{\"patterns\":[\"^run$\"]}},"
		"\"synthetic_frames\":[\"executable\",\"thread\"]}" },
	{ Q_FG, "{\"filter\":{" RANGE "},\"raw_names\":true,\"max_nodes\":4}" },
	{ Q_TOP, "{\"filter\":{" RANGE "},\"cpu_mode\":\"absolute\"}" },
	{ Q_TOP, "{\"filter\":{" CUT OFFK "},\"sort\":\"self\"}" },
	{ Q_SANDWICH, "{\"filter\":{" RANGE "},\"function\":\"hot_b\"}" },
	{ Q_DIFF, "{\"baseline\":{" RANGE ",\"query\":\"thread.name == \\\"main\\\"\"},"
		  "\"comparison\":{" RANGE ",\"query\":\"thread.name != \\\"main\\\"\"}}" },
	{ Q_DIFF, "{\"baseline\":{\"start_ts\":1700000000000,\"end_ts\":1700000090000},"
		  "\"comparison\":{\"start_ts\":1700000090000,\"end_ts\":1700000180000}}" },
	{ Q_ENT, "{\"filter\":{" RANGE "},\"entity\":\"executable\",\"cpu_mode\":\"absolute\"}" },
	{ Q_ENT, "{\"filter\":{" CUT "},\"entity\":\"shared_object\"}" },
	{ Q_ENT, "{\"filter\":{" RANGE OFFK "},\"entity\":\"thread\"}" },
	{ Q_LABELS, "{\"filter\":{" RANGE "},\"name\":\"thread.name\"}" },
	{ Q_SERIES, "{\"filter\":{" RANGE "},\"num_buckets\":18,\"group_by\":\"thread.name\"}" },
	{ Q_SERIES, "{\"filter\":{" CUT OFFK "},\"num_buckets\":7}" },
	{ Q_EVENTS, "{\"filter\":{" RANGE OFFK "},\"limit\":10}" },
	{ Q_EVENTS, "{\"filter\":{" CUT "},\"limit\":5}" },
	{ Q_HOT, "on_cpu" },
	{ Q_HOT, "off_cpu" },
};

/* x to 9 significant digits: seconds are sums of doubles, whose last
 * bits depend on the order rows come in (the answers of the API show 6). */
static double sig9(double x)
{
	char b[32];
	snprintf(b, sizeof(b), "%.9g", x);
	return strtod(b, NULL);
}

/* The hot traces (what recommendations are made of) of the whole range
 * as JSON. */
static json_t *hot_json(struct store *st, struct symbols *sym, uint8_t kind, struct buf *err)
{
	struct ht_params p = { .kind = kind, .end_ms = T0 + 180000, .window_ms = 180000 };
	strcpy(p.project_id, PROJECT);
	struct ht_result r;
	if (hottraces_compute(st, sym, &p, &r, err) < 0)
		return NULL;
	json_t *apps = json_array();
	for (size_t a = 0; a < r.napps; a++) {
		const struct ht_app *app = &r.apps[a];
		json_t *traces = json_array(), *ents = json_array();
		for (size_t t = 0; t < app->ntraces; t++) {
			json_t *frames = json_array();
			for (size_t f = 0; f < app->traces[t].nframes; f++) {
				const struct ht_frame *fr = &app->traces[t].frames[f];
				json_array_append_new(frames, json_pack("{s:i, s:s, s:s, s:s?, s:i}", "type",
									fr->type, "name", fr->name, "binary",
									fr->binary, "file", fr->file, "line",
									(json_int_t)fr->line));
			}
			json_array_append_new(traces, json_pack("{s:I, s:o, s:f, s:f}", "id",
								(json_int_t)app->traces[t].id, "frames",
								frames, "seconds", sig9(app->traces[t].seconds),
								"share", sig9(app->traces[t].share)));
		}
		for (size_t e = 0; e < app->nentities; e++)
			json_array_append_new(ents, json_pack("{s:s, s:s, s:f}", "type", app->entities[e].type,
							      "value", app->entities[e].value, "seconds",
							      sig9(app->entities[e].seconds)));
		json_array_append_new(apps, json_pack("{s:s, s:s, s:o, s:o, s:f, s:f}", "name", app->name,
						      "source", app->source, "traces", traces,
						      "entities", ents, "share", sig9(app->share), "peak",
						      sig9(app->peak)));
	}
	json_t *d = json_pack("{s:o, s:f, s:f}", "apps", apps, "total_seconds", sig9(r.total_seconds),
			      "window_seconds", sig9(r.window_seconds));
	ht_result_free(&r);
	return d;
}

/* Parses the body into a struct req (parse: the call, r in scope),
 * scopes it to PROJECT, runs query into rc, frees it. */
#define RUN_REQUEST(req, parse, scope, query)                         \
	do {                                                          \
		struct req r;                                         \
		if (parse < 0)                                        \
			fail_msg("query %zu: %s", q, err.data);       \
		scope;                                                \
		rc = query;                                           \
		req##_free(&r);                                       \
	} while (0)

/* The answer of query q over st, as canonical JSON text without what
 * tells how it was read (query_stats, distinct_stacks: the stacks folded,
 * counted per part that folds them). */
static char *answer(struct store *st, struct symbols *sym, size_t q)
{
	static const enum fn_query fn_of[] = { [Q_TOP] = FN_TOP, [Q_SANDWICH] = FN_SANDWICH,
					       [Q_DIFF] = FN_DIFF };
	static const enum ent_query ent_of[] = { [Q_ENT] = ENT_TOP, [Q_LABELS] = ENT_LABELS,
						 [Q_SERIES] = ENT_TIMESERIES };
	const char *body = queries[q].body;
	struct buf err = { 0 }, out = { 0 };
	int rc = -1;
	json_t *hot = NULL;
	switch (queries[q].type) {
	case Q_HOT:
		hot = hot_json(st, sym, strcmp(body, "on_cpu") == 0 ? SEK_ON_CPU : SEK_OFF_CPU, &err);
		if (hot) {
			char *text = json_dumps(hot, JSON_SORT_KEYS | JSON_COMPACT);
			buf_puts(&out, text);
			free(text);
			json_decref(hot);
			rc = 0;
		}
		break;
	case Q_FG:
		RUN_REQUEST(fg_request, fg_request_parse(&r, body, strlen(body), &err),
			    strcpy(r.scope.project_id, PROJECT), flamegraph_query(st, sym, NULL, &r, &out, &err));
		break;
	case Q_TOP:
	case Q_SANDWICH:
	case Q_DIFF:
		RUN_REQUEST(fn_request, fn_request_parse(&r, fn_of[queries[q].type], body, strlen(body), &err),
			    fn_request_set_project(&r, PROJECT), functions_query(st, sym, NULL, &r, &out, &err));
		break;
	case Q_ENT:
	case Q_LABELS:
	case Q_SERIES:
		RUN_REQUEST(ent_request, ent_request_parse(&r, ent_of[queries[q].type], body, strlen(body), &err),
			    strcpy(r.scope.project_id, PROJECT), entities_query(st, &r, &out, &err));
		break;
	case Q_EVENTS:
		RUN_REQUEST(ev_request, ev_request_parse(&r, body, strlen(body), &err),
			    strcpy(r.scope.project_id, PROJECT), events_query(st, sym, &r, &out, &err));
		break;
	}
	if (rc < 0)
		fail_msg("query %zu: %s", q, err.data);
	json_error_t je;
	json_t *d = json_loads(out.data, 0, &je);
	if (!d)
		fail_msg("query %zu: not JSON: %s", q, je.text);
	json_object_del(d, "query_stats");
	json_object_del(d, "baseline_query_stats");
	json_object_del(d, "comparison_query_stats");
	json_object_del(d, "distinct_stacks");
	char *text = json_dumps(d, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(d);
	buf_free(&err);
	buf_free(&out);
	return text;
}

/* A sampled flamegraph keeps a row by a hash of its time, stack id and
 * label set id: the same rows on every run over one store, but ids are
 * a backend's own, so two backends keep different rows. Both sample from
 * the same total and keep about num_samples of it. */
static void assert_sampled_alike(struct store *s, struct memstore *m, struct symbols *sym)
{
	const char *body = "{\"filter\":{" RANGE "},\"num_samples\":200}";
	json_t *a = run_query(s, sym, body), *b = run_query(memstore_store(m), sym, body);
	json_int_t from = json_integer_value(json_object_get(a, "sampled_from"));
	assert_true(from > 400);
	assert_int_equal(from, json_integer_value(json_object_get(b, "sampled_from")));
	for (int i = 0; i < 2; i++) {
		json_int_t t = json_integer_value(json_object_get(i ? b : a, "total"));
		assert_true(t > 0 && t < from);
	}
	json_decref(a);
	json_decref(b);
}

/* Every query answers the same over the two backends. */
static void assert_same(struct store *s, struct memstore *m, struct symbols *sym, const char *when)
{
	assert_sampled_alike(s, m, sym);
	for (size_t q = 0; q < ARRAY_SIZE(queries); q++) {
		char *a = answer(s, sym, q), *b = answer(memstore_store(m), sym, q);
		if (strcmp(a, b) != 0)
			fprintf(stderr, "%s, query %zu %s:\nembedded %s\nmemory   %s\n", when, q,
				      queries[q].body, a, b);
		assert_string_equal(a, b);
		if (getenv("EMBER_TEST_VERBOSE"))
			print_message("%s, query %zu: %s\n", when, q, a);
		free(a);
		free(b);
	}
}

/* The fixture: a world of the embedded store as open_test_store opens
 * it, and a memstore, both empty (cmocka setup/teardown). */
struct backends {
	struct world w;
	struct memstore *m;
};

static int backends_setup(void **state)
{
	struct backends *b = xcalloc(1, sizeof(*b));
	b->w.dir = make_temp_dir();
	b->w.s = open_test_store(b->w.dir, 0, &b->w.sym);
	b->m = memstore_new();
	*state = b;
	return 0;
}

static int backends_teardown(void **state)
{
	struct backends *b = *state;
	memstore_free(b->m);
	world_close(&b->w);
	free(b);
	return 0;
}

/* The same samples, the same answers: in the embedded store's head,
 * then across blocks written from sealed heads and a new head (carried
 * into it), then in one compacted block. */
static void test_backends_answer_alike(void **state)
{
	struct backends *fx = *state;
	struct store *s = fx->w.s;
	struct memstore *m = fx->m;
	struct symbols *sym = fx->w.sym;
	struct buf err = { 0 };
	for (uint64_t k = 0; k < 4; k++)
		load_round(s, m, k);
	assert_same(s, m, sym, "heads");
	assert_int_equal(store_flush(s, &err), 0);
	for (uint64_t k = 4; k < 7; k++)
		load_round(s, m, k);
	assert_int_equal(store_seal(s, false, &err), 0);
	for (uint64_t k = 7; k < ROUNDS; k++)
		load_round(s, m, k);
	assert_same(s, m, sym, "blocks, sealed head and head");
	assert_int_equal(store_flush(s, &err), 0);
	assert_int_equal(store_compact(s, true, &err), 0);
	assert_same(s, m, sym, "compacted");
	buf_free(&err);
}

/* The double is not a copy of the embedded store: an answer that
 * depends on what was loaded differs when one sample is left out of it. */
static void test_backends_differ_when_data_differs(void **state)
{
	struct backends *fx = *state;
	struct memstore *m = fx->m;
	load_round(fx->w.s, m, 0);
	struct mem_frame f = mem_frame_of("extra", "app");
	const char *kv[] = { "process.executable.name", "app", "thread.name", "main", "host.name",
			     "h1" };
	memstore_add(m, PROJECT, SEK_ON_CPU, HZ, kv, 3, T0, &f, 1, 1);
	for (size_t q = 0; q < ARRAY_SIZE(queries); q++) {
		if (q != 0 && !(queries[q].type == Q_TOP && strstr(queries[q].body, RANGE)))
			continue; /* the ones that read round 0's on-CPU rows */
		char *a = answer(fx->w.s, fx->w.sym, q), *b = answer(memstore_store(m), fx->w.sym, q);
		assert_string_not_equal(a, b);
		free(a);
		free(b);
	}
}

UNIT_TEST_MAIN(
	cmocka_unit_test_setup_teardown(test_backends_answer_alike, backends_setup, backends_teardown),
	cmocka_unit_test_setup_teardown(test_backends_differ_when_data_differs, backends_setup,
					backends_teardown))
