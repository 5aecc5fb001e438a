/* Unit tests: queries over slices, heads folded once, block sums carried, off-CPU, top functions. */
#include "server_fixture.h"


/* --- off-CPU samples in every query ------------------------------------------ */

static json_t *answer_of(struct buf *out)
{
	json_error_t je;
	json_t *doc = json_loads(out->data, 0, &je);
	if (!doc)
		fail_msg("answer is not JSON: %s", je.text);
	buf_free(out);
	return doc;
}

static json_t *run_fn(struct store *s, struct symbols *sym, enum fn_query what, const char *body)
{
	struct fn_request r;
	struct buf err = { 0 }, out = { 0 };
	if (fn_request_parse(&r, what, body, strlen(body), &err) < 0)
		fail_msg("parse: %s", err.data);
	fn_request_set_project(&r, PROJECT);
	if (functions_query(s, sym, NULL, &r, &out, &err) < 0)
		fail_msg("query: %s", err.data);
	fn_request_free(&r);
	buf_free(&err);
	return answer_of(&out);
}

static json_t *run_ent(struct store *s, enum ent_query what, const char *body)
{
	struct ent_request r;
	struct buf err = { 0 }, out = { 0 };
	if (ent_request_parse(&r, what, body, strlen(body), &err) < 0)
		fail_msg("parse: %s", err.data);
	strcpy(r.scope.project_id, PROJECT);
	if (entities_query(s, &r, &out, &err) < 0)
		fail_msg("query: %s", err.data);
	ent_request_free(&r);
	buf_free(&err);
	return answer_of(&out);
}

static json_t *fn_named(json_t *list, const char *name)
{
	size_t i;
	json_t *f;
	json_array_foreach(list, i, f)
		if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0)
			return f;
	return NULL;
}

static const char *str_of(json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));
	return v ? v : "(absent)";
}

#define RANGE_ALL "\"start_ts\":946684800000,\"end_ts\":4102444800000"
#define OFF "{" RANGE_ALL ",\"event_kind\":\"off_cpu\",\"query\":null}"
#define ON "{" RANGE_ALL ",\"event_kind\":\"on_cpu\",\"query\":null}"

/* Functions with equal values are listed by name, whatever order their
 * stacks were stored or read in. */
static void test_functions_tie_order(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	static const struct spec ties[] = {
		{ { "zeta", NULL }, "app", "main", 10 },
		{ { "mid", NULL }, "app", "main", 10 },
		{ { "alpha", NULL }, "app", "main", 10 },
		{ { "big", NULL }, "app", "main", 11 },
	};
	make_batch(ties, 4, 1, T0, &z);
	append(s, &z);
	json_t *d = run_fn(s, sym, FN_TOP, "{\"filter\":" ON ",\"sort\":\"self\"}");
	json_t *fns = json_object_get(d, "functions");
	const char *want[] = { "big", "alpha", "mid", "zeta" };
	assert_int_equal(json_array_size(fns), 4);
	for (size_t i = 0; i < 4; i++)
		assert_string_equal(str_of(json_array_get(fns, i), "name"), want[i]);
	json_decref(d);
	buf_free(&z);
	buf_free(&err);
}

/* The answers' parts a block must give exactly as memory does. */
static char *dump_field(json_t *d, const char *field)
{
	char *text = json_dumps(json_object_get(d, field), JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(d);
	return text;
}

static char *events_text(struct store *s, struct symbols *sym, const char *body)
{
	struct ev_request er;
	struct buf out = { 0 }, err = { 0 };
	assert_int_equal(ev_request_parse(&er, body, strlen(body), &err), 0);
	strcpy(er.scope.project_id, PROJECT);
	assert_int_equal(events_query(s, sym, &er, &out, &err), 0);
	ev_request_free(&er);
	buf_free(&err);
	return dump_field(answer_of(&out), "events");
}

/* Ranges that cut blocks answer from blocks what they answered from
 * memory: unfiltered flamegraphs (rollup slices and the rows of the cut
 * ones), filtered ones (the series' slices that meet the range), a diff
 * of two cut halves, totals (minute totals and the rows of cut minutes)
 * and the newest events (newest slices first). 30 minutes of batches,
 * 20 s apart, whose stacks change over time. */
static void test_queries_over_slices(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_store_symbols(dir, &sym);
	struct buf err = { 0 }, z = { 0 };
	for (uint64_t k = 0; k < 90; k++) {
		buf_reset(&z);
		make_batch(sample_specs + k % 3, 5 - k % 3, k + 1, T0 + (int64_t)k * 20000, &z);
		append(s, &z);
	}
	const int64_t ranges[][2] = {
		{ T0 + 65432, T0 + 1234567 },	       { T0 + 119999, T0 + 120001 },
		{ T0 + 7 * 60000 + 13000, T0 + 25 * 60000 + 17000 }, { T0, T0 + 1800000 },
		{ T0 + 900000, T0 + 3600000 },	       { T0 + 61000, T0 + 119000 },
	};
	enum { NR = ARRAY_SIZE(ranges), NQ = 6 };
	char *mem[NR][NQ], *blk[NR][NQ];
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			assert_int_equal(store_flush(s, &err), 0);
			assert_int_equal(store_compact(s, true, &err), 0);
			struct store_stats st;
			store_get_stats(s, &st);
			assert_int_equal(st.unflushed_rows, 0);
		}
		for (size_t i = 0; i < NR; i++) {
			char f[160], g[200], body[512];
			long long a = ranges[i][0], b = ranges[i][1], mid = a + (b - a) / 2;
			snprintf(f, sizeof(f), "{\"start_ts\":%lld,\"end_ts\":%lld}", a, b);
			snprintf(g, sizeof(g), "{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"thread.name == \\\"main\\\"\"}", a, b);
			char **q = pass ? blk[i] : mem[i];
			snprintf(body, sizeof(body), "{\"filter\":%s}", f);
			q[0] = fg_root(s, sym, body);
			snprintf(body, sizeof(body), "{\"filter\":%s}", g);
			q[1] = fg_root(s, sym, body);
			snprintf(body, sizeof(body),
				 "{\"baseline\":{\"start_ts\":%lld,\"end_ts\":%lld},"
				 "\"comparison\":{\"start_ts\":%lld,\"end_ts\":%lld}}",
				 a, mid, mid, b);
			q[2] = dump_field(run_fn(s, sym, FN_DIFF, body), "functions");
			snprintf(body, sizeof(body), "{\"filter\":%s,\"limit\":7}", f);
			q[3] = events_text(s, sym, body);
			char t[64];
			snprintf(t, sizeof(t), "%llu", (unsigned long long)total_range(s, a, b));
			q[4] = strdup(t);
			snprintf(body, sizeof(body), "{\"filter\":%s,\"limit\":100}", g);
			q[5] = events_text(s, sym, body);
			/* Every event up to the limit, whichever window held it:
			 * rows of thread "main" in the range. */
			size_t want = 0;
			for (int k = 0; k < 90; k++)
				if (T0 + k * 20000 >= a && T0 + k * 20000 < b)
					for (int j = k % 3; j < 5; j++)
						want += strcmp(sample_specs[j].thread, "main") == 0;
			json_t *ev = json_loads(q[5], 0, NULL);
			assert_int_equal(json_array_size(ev), MIN(want, 100));
			json_decref(ev);
		}
	}
	for (size_t i = 0; i < NR; i++)
		for (int k = 0; k < NQ; k++) {
			if (strcmp(mem[i][k], blk[i][k]) != 0)
				print_message("range %zu query %d:\nmemory %s\nblocks %s\n", i, k,
					      mem[i][k], blk[i][k]);
			assert_string_equal(mem[i][k], blk[i][k]);
			free(mem[i][k]);
			free(blk[i][k]);
		}
	buf_free(&z);
	buf_free(&err);
	close_store_dir(dir, s, sym);
}

/* --- queries over heads and the blocks written from them ----------------- */

/* Rounds of rows for the tests below: each round's stacks include one the
 * round before lacked. */
static void append_round_seq(struct store *s, int64_t t0, uint64_t k, uint64_t seq)
{
	static const struct spec more[] = {
		{ { "main", "run", "hot_c", NULL }, "app", "main", 7 },
		{ { "main", "run", "hot_a", "memcpy", NULL }, "app", "worker", 3 },
		{ { "main", "idle_loop", "k:schedule", NULL }, "other", "main", 2 },
	};
	struct buf z = { 0 };
	make_batch(sample_specs, 5, seq, t0 + (int64_t)k * 5000, &z);
	append(s, &z);
	buf_reset(&z);
	make_batch(more, k + 1, seq + 1, t0 + (int64_t)k * 5000 + 1000, &z);
	append(s, &z);
	buf_free(&z);
}

static void append_round(struct store *s, int64_t t0, uint64_t k)
{
	append_round_seq(s, t0, k, 2 * k + 1);
}

#define WHOLE "\"start_ts\":1,\"end_ts\":4102444800000"
#define MAIN_THREAD "\"query\":\"thread.name == \\\"main\\\"\""

/* The answers of nb flamegraph bodies, top functions and a diff of two
 * threads, as JSON without query_stats (and without distinct_stacks for
 * the bodies whose bit is set in drop_distinct), into out[0 .. nb + 2).
 * The first body's distinct stacks and parts read go to *distinct and
 * *parts. */
static void query_answers(struct store *s, struct symbols *sym, const char *const *bodies,
			  size_t nb, uint32_t drop_distinct, char **out, json_int_t *distinct,
			  json_int_t *parts)
{
	for (size_t i = 0; i < nb; i++) {
		json_t *d = run_query(s, sym, bodies[i]);
		if (i == 0) {
			*distinct = json_integer_value(json_object_get(d, "distinct_stacks"));
			*parts = json_integer_value(
				json_object_get(json_object_get(d, "query_stats"), "parts"));
		}
		json_object_del(d, "query_stats");
		if (drop_distinct & (1u << i))
			json_object_del(d, "distinct_stacks");
		out[i] = json_dumps(d, JSON_SORT_KEYS | JSON_COMPACT);
		json_decref(d);
	}
	out[nb] = dump_field(run_fn(s, sym, FN_TOP, "{\"filter\":" ON "}"), "functions");
	out[nb + 1] = dump_field(run_fn(s, sym, FN_DIFF,
					"{\"baseline\":{" WHOLE "," MAIN_THREAD "},"
					"\"comparison\":{" WHOLE ","
					"\"query\":\"thread.name == \\\"worker\\\"\"}}"),
				 "functions");
}

/* Flushes and compacts all of s: nothing left unflushed, want_blocks
 * blocks. */
static void flush_compact(struct store *s, uint64_t want_blocks)
{
	struct buf err = { 0 };
	struct store_stats st;
	assert_int_equal(store_flush(s, &err), 0);
	assert_int_equal(store_compact(s, true, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0);
	assert_int_equal(st.blocks, want_blocks);
	buf_free(&err);
}

static void assert_same_answers(char **live, char **blocks, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(live[i], blocks[i]) != 0)
			print_message("query %zu:\nlive   %s\nblocks %s\n", i, live[i], blocks[i]);
		assert_string_equal(live[i], blocks[i]);
		free(live[i]);
		free(blocks[i]);
	}
}

/* The sealed heads and the head, whose dictionaries are copies of one
 * another, are folded once (scan_shares_later): three in-memory parts (two
 * heads sealed while blocks could not be written, and the head), each with
 * stacks the one before it lacks, answer as one block of the same rows
 * does, distinct stacks included (counted once, not once per part); a
 * filter, a search, top functions and a diff too. Grouped by thread, the
 * tree is the same (there each part folds its own groups, so its
 * distinct stacks are counted per part). */
static void test_queries_fold_heads_once(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_test_store(dir, 0, &sym);
	struct buf err = { 0 };
	char blocks[600], away[600];
	snprintf(blocks, sizeof(blocks), "%s/blocks", dir);
	snprintf(away, sizeof(away), "%s/blocks.away", dir);
	assert_int_equal(rename(blocks, away), 0);
	int fd = open(blocks, O_CREAT | O_WRONLY, 0644); /* a file: no block can be written */
	assert_true(fd >= 0);
	close(fd);
	for (uint64_t k = 0; k < 3; k++) {
		append_round(s, T0, k);
		if (k < 2) /* sealed, then the block fails: the part stays in memory */
			assert_int_equal(store_flush(s, &err), -1);
		buf_reset(&err);
	}
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 0);
	assert_int_equal(st.unflushed_rows, st.rows);
	const char *bodies[] = {
		"{\"filter\":{" WHOLE "}}",
		"{\"filter\":{" WHOLE "," MAIN_THREAD "}}",
		"{\"filter\":{" WHOLE "},\"search\":\"hot_\"}",
		"{\"filter\":{" WHOLE "},\"synthetic_frames\":[\"thread\"]}",
	};
	enum { NB = ARRAY_SIZE(bodies), NQ = NB + 2 };
	char *mem[NQ], *blk[NQ];
	json_int_t distinct[2], parts[2];
	/* grouped: each part folds its groups itself */
	query_answers(s, sym, bodies, NB, 1u << (NB - 1), mem, &distinct[0], &parts[0]);
	assert_int_equal(unlink(blocks), 0);
	assert_int_equal(rename(away, blocks), 0);
	flush_compact(s, 1);
	query_answers(s, sym, bodies, NB, 1u << (NB - 1), blk, &distinct[1], &parts[1]);
	assert_same_answers(mem, blk, NQ);
	buf_free(&err);
	close_store_dir(dir, s, sym);
}

/* Blocks written from sealed heads fold together with the head that has
 * the same dictionaries (scan_carry_blocks): two flushes leave two blocks
 * and a head, each with stacks the one before lacks, and every query
 * answers as the one compacted block of the same rows does, distinct
 * stacks included (counted once, not once per part). A range the head
 * does not meet folds the blocks alone; grouped, each part folds its
 * own. With compact, the two blocks are first merged into one, which
 * keeps their ids in the heads' dictionaries while its hour is open
 * (t0 now) and not once it is closed (t0 in 2023). */
static void carry_blocks(int64_t t0, bool compact)
{
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_test_store(dir, 2, &sym);
	struct buf err = { 0 };
	for (uint64_t k = 0; k < 3; k++) {
		append_round(s, t0, k);
		if (k < 2)
			assert_int_equal(store_flush(s, &err), 0);
	}
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 2);
	assert_true(st.unflushed_rows > 0);
	if (compact) {
		assert_int_equal(store_compact(s, true, &err), 0);
		store_get_stats(s, &st);
		assert_int_equal(st.blocks, 1);
	}
	char not_head[128];
	snprintf(not_head, sizeof(not_head), "{\"filter\":{\"start_ts\":1,\"end_ts\":%lld}}",
		 (long long)(t0 + 9000));
	const char *bodies[] = {
		"{\"filter\":{" WHOLE "}}",
		"{\"filter\":{" WHOLE "," MAIN_THREAD "}}",
		"{\"filter\":{" WHOLE "},\"search\":\"hot_\"}",
		"{\"filter\":{" WHOLE "},\"num_samples\":1000}",
		"{\"filter\":{" WHOLE "},\"synthetic_frames\":[\"thread\"]}",
		not_head,
	};
	enum { NB = ARRAY_SIZE(bodies), NQ = NB + 2 };
	char *live[NQ], *blk[NQ];
	json_int_t distinct[2], parts[2];
	/* Folded part by part (grouped, the range without the head, or a
	 * closed hour's block): stacks counted once per part. */
	uint32_t drop = compact && t0 == T0 ? ~0u : 3u << (NB - 2);
	query_answers(s, sym, bodies, NB, drop, live, &distinct[0], &parts[0]);
	flush_compact(s, 1);
	query_answers(s, sym, bodies, NB, drop, blk, &distinct[1], &parts[1]);
	assert_int_equal(parts[0], compact ? 2 : 3); /* the blocks and the head */
	/* A closed hour's compacted block folds alone: its stacks count apart. */
	if (compact && t0 == T0)
		assert_true(distinct[0] > distinct[1]);
	else
		assert_int_equal(distinct[0], distinct[1]);
	assert_same_answers(live, blk, NQ);
	buf_free(&err);
	close_store_dir(dir, s, sym);
}

static void test_queries_carry_blocks(void **state)
{
	(void)state;
	int64_t hour = now_unix_ms() / 3600000 * 3600000;
	carry_blocks(T0, false);
	carry_blocks(hour, false);
	carry_blocks(hour, true);
	carry_blocks(T0, true);
}

/* The separate folds of a stack tree a carrying query (flamegraph, top
 * functions) makes over [from, to), as store_bench counts them: every part
 * but those whose sums go on to a later one. */
static size_t carry_folds(struct store *s, int64_t from, int64_t to, size_t *nparts)
{
	struct scope sc = { .kind = SEK_ON_CPU, .start_ms = from, .end_ms = to };
	strcpy(sc.project_id, PROJECT);
	struct buf err = { 0 };
	struct scan *scan = scan_open(s, &sc, &err);
	assert_non_null(scan);
	scan_carry_blocks(scan);
	size_t f = 0;
	*nparts = scan_parts(scan);
	for (size_t i = 0; i < *nparts; i++)
		f += !scan_shares_later(scan, i);
	scan_close(scan);
	buf_free(&err);
	return f;
}

enum carry_case {
	BLOCK_BEFORE_CLOSED,  /* a block of the open hour, then a closed hour's, then the head */
	SEALED_BEFORE_CLOSED, /* a sealed head, then a closed hour's block, then the head */
	HEAD_EMPTY,           /* two blocks and the head that holds no row yet */
};

/* Blocks of the heads fold with them whatever else the view holds, and
 * wherever it lists them: the view lists parts by generation, so a
 * closed hour's block merged after a block of the open hour was written
 * (or after a head was sealed) sits between that part and the head, and
 * each then folded its own stack tree (store_bench: 5 folds where 2 were
 * due); and right after a flush the head holds no row, so the blocks had
 * no part to carry into and each folded alone. A whole-range flamegraph
 * folds each hour once (a closed hour's block keeps no ids in the heads'
 * dictionaries and folds alone): its distinct stacks are those of the
 * same rows compacted, and every answer is the same. */
static void carry_around(enum carry_case c)
{
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_test_store(dir, 0, &sym);
	struct buf err = { 0 };
	int64_t hour = now_unix_ms() / 3600000 * 3600000;
	size_t hours = c == HEAD_EMPTY ? 1 : 2;
	if (c != HEAD_EMPTY)
		for (uint64_t k = 0; k < 2; k++) { /* two blocks of a closed hour (2023) */
			struct buf z = { 0 };
			make_batch(sample_specs, 5, 1 + k, T0 + (int64_t)k * 5000, &z);
			append(s, &z);
			buf_free(&z);
			assert_int_equal(store_flush(s, &err), 0);
		}
	append_round_seq(s, hour, 0, 10);
	if (c == SEALED_BEFORE_CLOSED)
		assert_int_equal(store_seal(s, false, &err), 0);
	else
		assert_int_equal(store_flush(s, &err), 0);
	struct store_stats st;
	if (c != HEAD_EMPTY) {
		/* The closed hour's two blocks merge into one with a later
		 * generation than the open hour's part (which stays: one block
		 * of the store's granularity, or in memory). */
		assert_int_equal(store_compact(s, true, &err), 0);
		store_get_stats(s, &st);
		assert_int_equal(st.blocks, c == BLOCK_BEFORE_CLOSED ? 2 : 1);
	}
	append_round_seq(s, hour, 1, 12);
	if (c == HEAD_EMPTY)
		assert_int_equal(store_flush(s, &err), 0);
	store_get_stats(s, &st);
	if (c == HEAD_EMPTY)
		assert_int_equal(st.unflushed_rows, 0);
	else
		assert_true(st.head_rows > 0);
	size_t nparts;
	size_t folds = carry_folds(s, 1, 4102444800000LL, &nparts);
	assert_int_equal(nparts, 3);
	if (folds != hours)
		print_message("case %d: %zu folds of %zu parts\n", (int)c, folds, nparts);
	assert_int_equal(folds, hours);
	const char *bodies[] = {
		"{\"filter\":{" WHOLE "}}",
		"{\"filter\":{" WHOLE "," MAIN_THREAD "}}",
	};
	enum { NB = ARRAY_SIZE(bodies), NQ = NB + 2 };
	char *live[NQ], *blk[NQ];
	json_int_t distinct[2], parts[2];
	query_answers(s, sym, bodies, NB, 0, live, &distinct[0], &parts[0]);
	flush_compact(s, hours);
	query_answers(s, sym, bodies, NB, 0, blk, &distinct[1], &parts[1]);
	assert_int_equal(distinct[0], distinct[1]);
	assert_same_answers(live, blk, NQ);
	buf_free(&err);
	close_store_dir(dir, s, sym);
}

static void test_queries_carry_around_other_parts(void **state)
{
	(void)state;
	carry_around(BLOCK_BEFORE_CLOSED);
	carry_around(SEALED_BEFORE_CLOSED);
	carry_around(HEAD_EMPTY);
}

/* Late data: rows of an hour that closed arrive after it closed. The
 * closed hour is one committed block (merged at its close: no ids in the
 * heads' dictionaries); the late rows are flushed from heads into blocks
 * whose log stays (the head writes into it still), and those blocks are
 * merged by log range (compact_after 2). That merge keeps the heads' ids
 * as long as the log is there, so a whole-range query folds the closed
 * hour's block alone and the log range's block with the head (which
 * holds the open hour's rows): 2 folds, where a merge without ids made 3
 * (store_bench's late-data runs). Every round uses the stacks of round 1
 * or a subset of them, so the distinct stacks of 2 folds are those of
 * the same rows compacted (the closed hour's block and the open hour's),
 * and every answer is the same. */
static void test_queries_carry_late_data(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_test_store(dir, 2, &sym);
	struct buf err = { 0 };
	int64_t hour = now_unix_ms() / 3600000 * 3600000;
	uint64_t seq = 1;
	for (uint64_t k = 0; k < 2; k++, seq += 2) { /* the closed hour (2023), on time */
		append_round_seq(s, T0, k, seq);
		assert_int_equal(store_flush(s, &err), 0);
	}
	assert_int_equal(store_compact(s, true, &err), 0);
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 1);
	/* Its late rows, ten minutes on: two heads sealed into the same log
	 * and written, their blocks not committed (the log stays, the head
	 * writes into it), then merged by their log range. */
	for (uint64_t k = 0; k < 2; k++, seq += 2) {
		append_round_seq(s, T0 + 600000, 1, seq);
		assert_int_equal(store_seal(s, false, &err), 0);
		assert_int_equal(store_write_sealed(s, &err), 0);
	}
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 3);
	assert_int_equal(st.unflushed_rows, 0);
	assert_int_equal(store_compact(s, false, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 2); /* the committed block and the log range's */
	append_round_seq(s, hour, 1, seq); /* the open hour, in the head */
	store_get_stats(s, &st);
	assert_true(st.head_rows > 0);
	size_t nparts;
	size_t folds = carry_folds(s, 1, 4102444800000LL, &nparts);
	assert_int_equal(nparts, 3);
	if (folds != 2)
		print_message("late data: %zu folds of %zu parts\n", folds, nparts);
	assert_int_equal(folds, 2);
	const char *bodies[] = {
		"{\"filter\":{" WHOLE "}}",
		"{\"filter\":{" WHOLE "," MAIN_THREAD "}}",
		"{\"filter\":{" WHOLE "},\"search\":\"hot_\"}",
	};
	enum { NB = ARRAY_SIZE(bodies), NQ = NB + 2 };
	char *live[NQ], *blk[NQ];
	json_int_t distinct[2], parts[2];
	query_answers(s, sym, bodies, NB, 0, live, &distinct[0], &parts[0]);
	assert_int_equal(parts[0], 3);
	flush_compact(s, 2); /* one per hour */
	query_answers(s, sym, bodies, NB, 0, blk, &distinct[1], &parts[1]);
	assert_int_equal(distinct[0], distinct[1]);
	assert_same_answers(live, blk, NQ);
	buf_free(&err);
	close_store_dir(dir, s, sym);
}

static void test_offcpu_queries(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	/* On-CPU: 100 samples in hot_a/hot_b; off-CPU: 3 s waited in
	 * futex_wait and 1 s in read_wait, over one 5 s batch. */
	make_batch(sample_specs, 5, 1, T0, &z);
	append(s, &z);
	buf_free(&z);
	static const struct spec off_specs[] = {
		{ { "main", "lock_all", "futex_wait", NULL }, "app", "main", 3000000000ULL },
		{ { "main", "read_wait", NULL }, "other", "io", 1000000000ULL },
	};
	make_batch_kind(off_specs, 2, 2, T0, EK_OFF_CPU, &z);
	append(s, &z);
	buf_free(&z);

	/* top_functions: only the off-CPU functions, in nanoseconds, the
	 * "cores" fields are threads waiting; absolute falls back to relative
	 * and says so. */
	json_t *d = run_fn(s, sym, FN_TOP,
			   "{\"filter\":" OFF ",\"sort\":\"self\",\"cpu_mode\":\"absolute\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_string_equal(str_of(d, "cpu_mode"), "relative");
	assert_non_null(json_object_get(d, "cpu_mode_note"));
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 4000000000LL);
	json_t *fns = json_object_get(d, "functions");
	assert_null(fn_named(fns, "hot_a"));
	json_t *fw = fn_named(fns, "futex_wait");
	assert_non_null(fw);
	assert_int_equal(json_integer_value(json_object_get(fw, "self")), 3000000000LL);
	double secs = json_number_value(json_object_get(json_object_get(d, "scope"), "seconds"));
	assert_true(secs >= 1.0);
	assert_true(fabs(json_number_value(json_object_get(fw, "self_cores")) - 3.0 / secs) < 1e-9);
	assert_true(fabs(json_number_value(json_object_get(fw, "self_percent")) - 75.0) < 1e-9);
	json_decref(d);

	/* The same request for on_cpu: samples, cores, absolute kept. */
	d = run_fn(s, sym, FN_TOP, "{\"filter\":" ON ",\"cpu_mode\":\"absolute\"}");
	assert_string_equal(str_of(d, "unit"), "samples");
	assert_string_equal(str_of(d, "cores_unit"), "cores");
	assert_string_equal(str_of(d, "cpu_mode"), "absolute");
	assert_null(json_object_get(d, "cpu_mode_note"));
	assert_non_null(fn_named(json_object_get(d, "functions"), "hot_a"));
	assert_null(fn_named(json_object_get(d, "functions"), "futex_wait"));
	json_decref(d);

	/* sandwich and diff honour the kind. */
	d = run_fn(s, sym, FN_SANDWICH, "{\"filter\":" OFF ",\"function\":\"lock_all\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "function"), "total")),
			 3000000000LL);
	json_decref(d);
	d = run_fn(s, sym, FN_DIFF, "{\"baseline\":" OFF ",\"comparison\":" OFF "}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_non_null(fn_named(json_object_get(d, "functions"), "futex_wait"));
	assert_null(fn_named(json_object_get(d, "functions"), "hot_a"));
	json_decref(d);

	/* top_entities: threads waiting, relative only. */
	d = run_ent(s, ENT_TOP,
		    "{\"filter\":" OFF ",\"entity\":\"executable\",\"cpu_mode\":\"absolute\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_string_equal(str_of(d, "cpu_mode"), "relative");
	json_t *ents = json_object_get(d, "entities");
	json_t *app = fn_named(ents, "app");
	assert_int_equal(json_integer_value(json_object_get(app, "total")), 3000000000LL);
	assert_true(fabs(json_number_value(json_object_get(app, "percent")) - 75.0) < 1e-9);
	json_decref(d);

	/* labels: off-CPU totals. */
	d = run_ent(s, ENT_LABELS, "{\"filter\":" OFF ",\"name\":\"thread.name\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 4000000000LL);
	json_decref(d);

	/* timeseries: threads waiting per bucket; the sum over buckets of
	 * value * bucket seconds is the time waited. */
	d = run_ent(s, ENT_TIMESERIES, "{\"filter\":{\"start_ts\":1700000000000,\"end_ts\":1700000010000,"
				       "\"event_kind\":\"off_cpu\",\"query\":null},\"num_buckets\":10}");
	assert_string_equal(str_of(d, "unit"), "threads");
	assert_string_equal(str_of(d, "value_unit"), "nanoseconds");
	json_t *series = json_array_get(json_object_get(d, "series"), 0);
	assert_int_equal(json_integer_value(json_object_get(series, "total")), 4000000000LL);
	double waited = 0;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(series, "values"), i, v)
		waited += json_number_value(v) * 1.0;
	assert_true(fabs(waited - 4.0) < 1e-6);
	json_decref(d);

	/* events: nanoseconds, only off-CPU stacks. */
	struct ev_request er;
	struct buf out = { 0 };
	const char *eb = "{\"filter\":" OFF ",\"limit\":10}";
	assert_int_equal(ev_request_parse(&er, eb, strlen(eb), &err), 0);
	strcpy(er.scope.project_id, PROJECT);
	assert_int_equal(events_query(s, sym, &er, &out, &err), 0);
	ev_request_free(&er);
	d = answer_of(&out);
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_int_equal(json_array_size(json_object_get(d, "events")), 2);
	json_decref(d);

	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_queries_over_slices),
	cmocka_unit_test(test_queries_fold_heads_once),
	cmocka_unit_test(test_queries_carry_blocks),
	cmocka_unit_test(test_queries_carry_around_other_parts),
	cmocka_unit_test(test_queries_carry_late_data),
	WORLD_TEST(test_offcpu_queries),
	WORLD_TEST(test_functions_tie_order))
