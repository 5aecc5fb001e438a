/* Unit tests: the flamegraph query: symbols pending, the ordered tree, pruning, sparse and dense answers, request errors, user regexes. */
#include "server_fixture.h"
#include "displayfixture.h"

/* "symbols_pending": frames without a name whose file an agent was just
 * told to upload count until the symbols arrive (or the expectation
 * lapses); the flamegraph and top functions answer it. */
static void test_symbols_pending(void **state)
{
	struct world *w = *state;
	struct buf err = { 0 }, z = { 0 }, sf = { 0 };
	make_batch(sample_specs, 5, 1, T0, &z);
	append(w->s, &z);
	const char *body = "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
			   "\"event_kind\":\"on_cpu\",\"query\":null},\"synthetic_frames\":[]}";
	json_t *d = run_query(w->s, w->sym, body);
	/* Unnamed, but nobody said symbols were coming. */
	assert_non_null(child_named(child_named(json_object_get(d, "root"), "main"), "libfoo.so+0x1010"));
	assert_int_equal(json_integer_value(json_object_get(d, "symbols_pending")), 0);
	json_decref(d);

	struct file_id fid;
	memset(fid.b, 0x11, sizeof(fid.b));
	int64_t now = now_unix_ms();
	symbols_expect(w->sym, &fid, now);
	assert_true(symbols_expected(w->sym, &fid, now + 1000));
	assert_false(symbols_expected(w->sym, &fid, now + SYMBOLS_EXPECT_MS)); /* lapsed */
	d = run_query(w->s, w->sym, body);
	assert_int_equal(json_integer_value(json_object_get(d, "symbols_pending")), 1);
	json_decref(d);
	/* top_functions says the same. */
	struct fn_request fr;
	const char *fbody = "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
			    "\"event_kind\":\"on_cpu\",\"query\":null}}";
	assert_int_equal(fn_request_parse(&fr, FN_TOP, fbody, strlen(fbody), &err), 0);
	strcpy(fr.scope.project_id, PROJECT);
	struct buf out = { 0 };
	assert_int_equal(functions_query(w->s, w->sym, NULL, &fr, &out, &err), 0);
	assert_non_null(strstr(out.data, "\"symbols_pending\":1,"));
	fn_request_free(&fr);
	buf_reset(&out);

	/* The upload arrives: named, nothing pending. */
	struct symfile_builder *b = symfile_builder_new();
	symfile_add_segment(b, 0x1000, 0x1000, 0x1000);
	uint32_t c = symfile_chain(b, "foo_compute", "src/foo.c", 12, 0);
	symfile_add_range(b, 0x1000, 0x1040, c, 100);
	assert_int_equal(symfile_finish(b, &sf), 0);
	symfile_builder_free(b);
	assert_int_equal(symbols_put(w->sym, &fid, NULL, 0, sf.data, sf.len, &err), 0);
	assert_false(symbols_expected(w->sym, &fid, now + 1000));
	d = run_query(w->s, w->sym, body);
	assert_non_null(child_named(child_named(json_object_get(d, "root"), "main"), "foo_compute"));
	assert_int_equal(json_integer_value(json_object_get(d, "symbols_pending")), 0);
	json_decref(d);
	buf_free(&out);
	buf_free(&sf);
	buf_free(&z);
	buf_free(&err);
}

static void test_flamegraph(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 }, sf = { 0 };
	make_batch(sample_specs, 5, 1, T0, &z);
	append(s, &z);

	/* Without symbols the native frame is named by binary and offset. */
	json_t *d = run_query(s, sym,
			      "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
			      "\"event_kind\":\"on_cpu\",\"frame_mask\":{\"patterns\":[]},\"query\":null},"
			      "\"num_samples\":null,\"num_stat_buckets\":null,\"synthetic_frames\":[]}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 100);
	assert_int_equal(json_integer_value(json_object_get(d, "sample_rate_hz")), 19);
	assert_string_equal(json_string_value(json_object_get(d, "unit")), "samples");
	json_t *root = json_object_get(d, "root");
	assert_string_equal(json_string_value(json_object_get(root, "frame_type")), "root");
	/* "main" of app and "main" of other are different frames (binaries
	 * differ); the larger comes first. */
	json_t *main_ = child_named(root, "main");
	assert_string_equal(json_string_value(json_object_get(main_, "binary")), "app");
	assert_int_equal(total_of(main_), 99);
	assert_int_equal(json_array_size(json_object_get(root, "children")), 2);
	json_t *run = child_named(main_, "run");
	assert_int_equal(total_of(run), 95);
	/* Children sorted by total, largest first. */
	json_t *first = json_array_get(json_object_get(run, "children"), 0);
	assert_string_equal(json_string_value(json_object_get(first, "name")), "hot_a");
	json_t *hot_b = child_named(run, "hot_b");
	assert_int_equal(total_of(hot_b), 35);
	assert_int_equal(json_integer_value(json_object_get(hot_b, "self")), 30);
	json_t *k = child_named(hot_b, "do_syscall_64");
	assert_string_equal(json_string_value(json_object_get(k, "frame_type")), "kernel");
	assert_non_null(child_named(main_, "libfoo.so+0x1010"));
	json_decref(d);

	/* Symbols arrive later: the same stored samples now have names, and
	 * the C++ function inlined at that address is a frame of its own. */
	struct symfile_builder *b = symfile_builder_new();
	symfile_add_segment(b, 0x1000, 0x1000, 0x1000);
	uint32_t outer = symfile_chain(b, "foo_compute", "src/foo.c", 12, 0);
	uint32_t inner = symfile_chain(b, "_ZN2ns6helperEv", "src/helper.h", 7, outer);
	symfile_add_range(b, 0x1000, 0x1040, inner, 100);
	symfile_set_flags(b, SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	assert_int_equal(symfile_finish(b, &sf), 0);
	symfile_builder_free(b);
	struct file_id fid;
	memset(fid.b, 0x11, sizeof(fid.b));
	assert_int_equal(symbols_put(sym, &fid, NULL, 0, sf.data, sf.len, &err), 0);

	/* From here on the samples are read from a block file. */
	assert_int_equal(store_flush(s, &err), 0);
	struct store_stats fst;
	store_get_stats(s, &fst);
	assert_int_equal(fst.blocks, 1);
	assert_int_equal(fst.unflushed_rows, 0);

	/* Synthetic frames group by executable then thread; a CEL filter and
	 * a frame mask apply. */
	d = run_query(s, sym,
		      "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
		      "\"query\":\"process.executable.name == \\\"app\\\"\","
		      "\"frame_mask\":{\"patterns\":[\"^run$\"]}},"
		      "\"synthetic_frames\":[\"executable\",\"thread\",\"deployment\"]}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 99);
	root = json_object_get(d, "root");
	json_t *app = child_named(root, "app");
	assert_string_equal(json_string_value(json_object_get(app, "frame_type")), "synthetic");
	assert_null(child_named(root, "other"));
	json_t *worker = child_named(child_named(app, "worker"), "[no deployment]");
	assert_non_null(worker);
	json_t *named = child_named(child_named(worker, "main"), "foo_compute");
	assert_non_null(named);
	assert_string_equal(json_string_value(json_object_get(named, "binary")), "libfoo.so");
	assert_string_equal(json_string_value(json_object_get(named, "file")), "src/foo.c");
	assert_int_equal(json_integer_value(json_object_get(named, "line")), 12);
	json_t *inl = child_named(named, "ns::helper"); /* demangled */
	assert_non_null(inl);
	assert_string_equal(json_string_value(json_object_get(inl, "file")), "src/helper.h");
	assert_int_equal(json_integer_value(json_object_get(inl, "line")), 7);
	assert_int_equal(json_integer_value(json_object_get(inl, "self")), 4);
	json_t *mainthr = child_named(child_named(child_named(app, "main"), "[no deployment]"), "main");
	/* "run" is masked: its children hang from main directly. */
	assert_null(child_named(mainthr, "run"));
	assert_int_equal(total_of(child_named(mainthr, "hot_a")), 60);
	json_decref(d);

	/* A time range without data, and time buckets. */
	d = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":2}}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 0);
	json_decref(d);
	d = run_query(s, sym,
		      "{\"filter\":{\"start_ts\":1699999990000,\"end_ts\":1700000010000},\"num_stat_buckets\":4}");
	json_t *vals = json_object_get(json_object_get(d, "stats"), "values");
	assert_int_equal(json_array_size(vals), 4);
	assert_int_equal(json_integer_value(json_array_get(vals, 2)), 100);
	json_decref(d);
	/* With a search, the buckets count what the tree counts: the stacks
	 * through a matching function. */
	d = run_query(s, sym,
		      "{\"filter\":{\"start_ts\":1699999990000,\"end_ts\":1700000010000},\"num_stat_buckets\":4,"
		      "\"search\":\"^hot_a$\"}");
	vals = json_object_get(json_object_get(d, "stats"), "values");
	json_int_t sum = 0;
	for (size_t i = 0; i < json_array_size(vals); i++)
		sum += json_integer_value(json_array_get(vals, i));
	assert_true(json_integer_value(json_object_get(d, "total")) > 0);
	assert_true(json_integer_value(json_object_get(d, "total")) < 100);
	assert_int_equal(sum, json_integer_value(json_object_get(d, "total")));
	json_decref(d);
	/* num_samples: a deterministic subset, never more than the whole. */
	d = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},\"num_samples\":50}");
	assert_int_equal(json_integer_value(json_object_get(d, "sampled_from")), 100);
	assert_true(json_integer_value(json_object_get(d, "total")) <= 100);
	json_decref(d);

	buf_free(&z);
	buf_free(&sf);
	buf_free(&err);
}

/* part_sort_nodes renumbers a tree built in first-use order depth first,
 * keeps every stack and its indexes; merge_write leaves blocks so. */
/* stack_sums_order gives every leaf once, in id order, whether it sorts
 * the list (few leaves) or collects them from the values (many). */
static void check_order(const uint32_t *in, size_t n, size_t nnodes)
{
	struct stack_sums ss = { 0 };
	ss.cap = nnodes;
	ss.v = calloc(nnodes, sizeof(uint64_t));
	ss.leaves = malloc(n * sizeof(uint32_t));
	ss.capleaves = n;
	for (size_t i = 0; i < n; i++) {
		ss.leaves[ss.n++] = in[i];
		ss.v[in[i]] = 10 + i;
	}
	stack_sums_order(&ss, nnodes);
	assert_int_equal(ss.n, n);
	for (size_t i = 1; i < n; i++)
		assert_true(ss.leaves[i - 1] < ss.leaves[i]);
	for (size_t i = 0; i < n; i++) {
		bool found = false;
		for (size_t j = 0; j < n; j++)
			found |= ss.leaves[j] == in[i];
		assert_true(found);
	}
	stack_sums_free(&ss);
}

/* Checks a written node: its total is its self plus its children's
 * totals; counts the nodes. */
static size_t check_node_sums(json_t *n)
{
	json_int_t self = json_integer_value(json_object_get(n, "self"));
	json_int_t total = json_integer_value(json_object_get(n, "total"));
	json_int_t sum = 0, prev = INT64_MAX;
	size_t count = 1, i;
	json_t *c;
	json_array_foreach(json_object_get(n, "children"), i, c) {
		json_int_t ct = json_integer_value(json_object_get(c, "total"));
		/* sorted, largest first, "[other]" included */
		assert_true(ct <= prev);
		prev = ct;
		sum += ct;
		count += check_node_sums(c);
	}
	assert_int_equal(total, self + sum);
	return count;
}

/* A wide synthetic tree written within node budgets: never more nodes than
 * the budget, the "[other]" nodes included; every parent's total its self
 * plus its children's, the children sorted largest first ("[other]" where
 * its total puts it); the root's total whole. */
static void test_otree_write_budget(void **state)
{
	(void)state;
	struct display *d = bare_display();
	uint32_t root_key = display_key(d, SFT_NATIVE, "root", "", NULL);
	struct otree t;
	otree_init(&t, root_key);
	/* 300 children of the root, each with 0..40 children and some
	 * grandchildren: about 20 000 nodes; values from a fixed LCG. */
	uint64_t x = 12345, total = 0;
	char name[64];
	for (int a = 0; a < 300; a++) {
		snprintf(name, sizeof(name), "f%d", a);
		uint32_t na = otree_child(&t, 0, display_key(d, SFT_NATIVE, name, "bin", NULL));
		int kids = (int)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 59) + a % 10;
		for (int b = 0; b < kids; b++) {
			snprintf(name, sizeof(name), "g%d", b);
			uint32_t nb = otree_child(&t, na, display_key(d, SFT_NATIVE, name, "bin", NULL));
			for (int c = 0; c < 1 + b % 5; c++) {
				snprintf(name, sizeof(name), "h%d", c);
				uint32_t nc = otree_child(&t, nb, display_key(d, SFT_NATIVE, name, "bin", NULL));
				uint64_t v = 1 + ((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 54);
				t.nodes[nc].self += v;
				t.nodes[nc].total += v;
				t.nodes[nb].total += v;
				t.nodes[na].total += v;
				t.nodes[0].total += v;
				total += v;
			}
			if (b % 3 == 0) { /* some self time in the middle */
				t.nodes[nb].self += 7;
				t.nodes[nb].total += 7;
				t.nodes[na].total += 7;
				t.nodes[0].total += 7;
				total += 7;
			}
		}
	}
	assert_true(t.n > 5000);
	const size_t budgets[] = { 2, 3, 10, 100, 1000, 4096, 8192, 1000000 };
	for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		struct buf out = { 0 };
		struct jsonw w;
		jsonw_init(&w, &out);
		size_t written = otree_write(&t, d, budgets[i], &w);
		assert_int_equal(jsonw_finish(&w), 0);
		json_error_t je;
		json_t *doc = json_loadb(out.data, out.len, 0, &je);
		assert_non_null(doc);
		assert_int_equal(json_integer_value(json_object_get(doc, "total")), total);
		size_t nodes = check_node_sums(doc);
		assert_int_equal(nodes, written);
		assert_true(nodes <= budgets[i]);
		/* The budget is used: within one [other] per level of the tree of
		 * what it could hold. */
		if (budgets[i] < t.n)
			assert_true(nodes + 4 >= budgets[i] || budgets[i] < 4);
		else
			assert_int_equal(nodes, t.n);
		json_decref(doc);
		buf_free(&out);
	}
	otree_free(&t);
	display_free(d);
}

/* Ties at the smallest total kept are decided by the written order
 * (total, then name), not by the order the tree was built in: the same
 * tree built in two orders is written the same within any budget. */
static void test_otree_write_ties(void **state)
{
	(void)state;
	struct display *d = bare_display();
	struct otree t[2];
	char name[32];
	for (int which = 0; which < 2; which++) {
		otree_init(&t[which], display_key(d, SFT_NATIVE, "root", "", NULL));
		for (int j = 0; j < 50; j++) {
			int a = which ? 49 - j : j;
			snprintf(name, sizeof(name), "f%02d", a);
			uint32_t na = otree_child(&t[which], 0, display_key(d, SFT_NATIVE, name, "b", NULL));
			for (int c = 0; c < 4; c++) {
				snprintf(name, sizeof(name), "g%d", which ? 3 - c : c);
				uint32_t nc = otree_child(&t[which], na, display_key(d, SFT_NATIVE, name, "b", NULL));
				t[which].nodes[nc].self = t[which].nodes[nc].total = 1;
				t[which].nodes[na].total++;
				t[which].nodes[0].total++;
			}
		}
	}
	for (size_t budget = 2; budget < 260; budget += 7) {
		struct buf out[2] = { { 0 } };
		struct jsonw jw[2];
		jsonw_init(&jw[0], &out[0]);
		jsonw_init(&jw[1], &out[1]);
		size_t w0 = otree_write(&t[0], d, budget, &jw[0]);
		size_t w1 = otree_write(&t[1], d, budget, &jw[1]);
		assert_int_equal(jsonw_finish(&jw[0]) | jsonw_finish(&jw[1]), 0);
		assert_int_equal(w0, w1);
		assert_true(w0 <= budget);
		assert_string_equal(out[0].data, out[1].data);
		buf_free(&out[0]);
		buf_free(&out[1]);
	}
	otree_free(&t[0]);
	otree_free(&t[1]);
	display_free(d);
}

/* A tree's children: each found as the same node, in a list of 16 or in
 * the index beyond, in any order; after a prune, kept children are found
 * and folded ones (and new ones) go to "[other]". */
static void test_otree_child(void **state)
{
	(void)state;
	struct otree t;
	otree_init(&t, 1000);
	enum { KIDS = 40 };
	uint32_t kid[KIDS];
	for (uint32_t k = 0; k < KIDS; k++) {
		kid[k] = otree_child(&t, 0, 10 + k);
		assert_int_equal(otree_child(&t, 0, 10 + k), kid[k]); /* the one found last */
		t.nodes[kid[k]].total = t.nodes[kid[k]].self = k + 1;
	}
	assert_int_equal(t.n, KIDS + 1);
	assert_true(t.nodes[0].indexed);
	/* In order, backwards, and scattered. */
	for (uint32_t k = 0; k < KIDS; k++)
		assert_int_equal(otree_child(&t, 0, 10 + k), kid[k]);
	for (uint32_t k = KIDS; k-- > 0;)
		assert_int_equal(otree_child(&t, 0, 10 + k), kid[k]);
	for (uint32_t k = 0; k < KIDS; k++)
		assert_int_equal(otree_child(&t, 0, 10 + (k * 7) % KIDS), kid[(k * 7) % KIDS]);
	/* A small list under one child: the same. */
	uint32_t g[5];
	for (uint32_t k = 0; k < 5; k++)
		g[k] = otree_child(&t, kid[3], 100 + k);
	for (uint32_t k = 5; k-- > 0;)
		assert_int_equal(otree_child(&t, kid[3], 100 + k), g[k]);
	assert_false(t.nodes[kid[3]].indexed);
	assert_int_equal(t.n, KIDS + 6);
	for (uint32_t k = 0; k < 5; k++)
		t.nodes[g[k]].total = 0;
	t.nodes[0].total = KIDS * (KIDS + 1) / 2;
	/* Pruned to the root and the 10 largest: the rest are one [other]. */
	free(otree_prune(&t, 11, 999));
	uint32_t other = otree_child(&t, 0, 10); /* the smallest: folded */
	assert_int_equal(t.nodes[other].key, 999);
	assert_int_equal(otree_child(&t, 0, 5000), other); /* new: into [other] too */
	for (uint32_t k = KIDS - 10; k < KIDS; k++) {
		uint32_t n = otree_child(&t, 0, 10 + k);
		assert_int_equal(t.nodes[n].key, 10 + k);
		assert_int_equal(t.nodes[n].total, k + 1);
		assert_int_equal(otree_child(&t, 0, 10 + k), n);
	}
	assert_int_equal(t.nodes[other].total, (KIDS - 10) * (KIDS - 9) / 2);
	otree_free(&t);
}

static void test_stack_sums_order(void **state)
{
	(void)state;
	const uint32_t sparse[] = { 500, 3, 999, 0, 42 };
	check_order(sparse, 5, 1000);
	const uint32_t dense[] = { 30, 2, 0, 17, 39 };
	check_order(dense, 5, 40);
	const uint32_t one[] = { 7 };
	check_order(one, 1, 8);
}

/* A tree pruned while it is built (memory bound) keeps every total exact:
 * the root's total, and every node it shows has the same total as in the
 * unpruned tree; the rest is in [other] nodes. */
static void check_pruned(json_t *full, json_t *pruned)
{
	if (total_of(full) != total_of(pruned)) {
		char *a = json_dumps(full, JSON_COMPACT), *b = json_dumps(pruned, JSON_COMPACT);
		print_message("full %s\npruned %s\n", a, b);
		free(a);
		free(b);
	}
	assert_int_equal(total_of(full), total_of(pruned));
	size_t i;
	json_t *c;
	json_int_t sum = 0;
	json_array_foreach(json_object_get(pruned, "children"), i, c)
	{
		sum += total_of(c);
		const char *name = json_string_value(json_object_get(c, "name"));
		if (strcmp(name, "[other]") == 0)
			continue;
		json_t *same = child_named(full, name);
		assert_non_null(same);
		check_pruned(same, c);
	}
	assert_true(sum <= total_of(pruned));
}

static void test_flamegraph_pruning(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	for (uint64_t k = 0; k < 4; k++) {
		buf_reset(&z);
		make_batch(sample_specs, 5, k + 1, T0 + (int64_t)k * 1800000, &z);
		append(s, &z);
	}
	assert_int_equal(store_flush(s, &err), 0);
	buf_reset(&z);
	make_batch(sample_specs, 5, 9, T0 + 1000, &z);
	append(s, &z); /* and some in memory */
	const char *body = "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},"
			   "\"synthetic_frames\":[\"thread\",\"executable\"]}";
	json_t *full = run_query_pruned(s, sym, body, 0);
	for (size_t at = 2; at <= 12; at += 2) {
		json_t *pruned = run_query_pruned(s, sym, body, at);
		assert_true(json_integer_value(json_object_get(pruned, "tree_pruned")) >= 1);
		check_pruned(json_object_get(full, "root"), json_object_get(pruned, "root"));
		json_decref(pruned);
	}
	json_decref(full);
	buf_free(&z);
	buf_free(&err);
}

/* A group folds either over the nodes its stacks touch (few leaves for
 * the part's size) or over every node of the part in order (many): both
 * must give the same tree. One part holds a big executable (64 distinct
 * stacks, about 140 nodes) and a small one (one stack): a query for the
 * small one folds sparsely, one for the big one densely. */
static void test_flamegraph_sparse_dense(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	static char names[3][64][16];
	struct spec specs[65];
	uint64_t big = 0, per_a[8] = { 0 };
	for (int i = 0; i < 64; i++) {
		snprintf(names[0][i], sizeof(names[0][i]), "a%d", i / 8);
		snprintf(names[1][i], sizeof(names[1][i]), "b%d", i);
		snprintf(names[2][i], sizeof(names[2][i]), "leaf%d", i);
		specs[i] = (struct spec){ { "main", names[0][i], names[1][i], names[2][i], NULL },
					  "big", "t", (uint64_t)(i + 1) };
		big += (uint64_t)(i + 1);
		per_a[i / 8] += (uint64_t)(i + 1);
	}
	specs[64] = (struct spec){ { "main", "s_run", "s_leaf", NULL }, "small", "t", 7 };
	make_batch(specs, 65, 1, T0, &z);
	append(s, &z);
	buf_free(&z);
	for (int flushed = 0; flushed < 2; flushed++) {
		json_t *doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
						 "\"query\":\"process.executable.name == \\\"small\\\"\"}}");
		json_t *root = json_object_get(doc, "root"), *m = child_named(root, "main");
		assert_int_equal(total_of(root), 7);
		assert_int_equal(json_array_size(json_object_get(root, "children")), 1);
		assert_int_equal(total_of(m), 7);
		assert_int_equal(json_array_size(json_object_get(m, "children")), 1);
		json_t *leaf = child_named(child_named(m, "s_run"), "s_leaf");
		assert_int_equal(total_of(leaf), 7);
		assert_int_equal(json_integer_value(json_object_get(leaf, "self")), 7);
		assert_int_equal(json_integer_value(json_object_get(doc, "distinct_stacks")), 1);
		json_decref(doc);

		doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
					"\"query\":\"process.executable.name == \\\"big\\\"\"}}");
		root = json_object_get(doc, "root");
		m = child_named(root, "main");
		assert_int_equal(total_of(root), (json_int_t)big);
		assert_int_equal(total_of(m), (json_int_t)big);
		assert_int_equal(json_array_size(json_object_get(m, "children")), 8);
		assert_null(child_named(m, "s_run"));
		for (int a = 0; a < 8; a++) {
			char an[16];
			snprintf(an, sizeof(an), "a%d", a);
			json_t *na = child_named(m, an);
			assert_int_equal(total_of(na), (json_int_t)per_a[a]);
			assert_int_equal(json_array_size(json_object_get(na, "children")), 8);
		}
		json_t *l9 = child_named(child_named(child_named(m, "a1"), "b9"), "leaf9");
		assert_int_equal(json_integer_value(json_object_get(l9, "self")), 10);
		json_decref(doc);

		/* Everything, and a search (dense, then only the stacks through
		 * s_leaf count). */
		doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000}}");
		root = json_object_get(doc, "root"); /* main of big, main of small */
		assert_int_equal(total_of(root), (json_int_t)big + 7);
		assert_int_equal(json_array_size(json_object_get(root, "children")), 2);
		assert_int_equal(total_of(child_named(root, "main")), (json_int_t)big);
		json_decref(doc);
		doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},"
					"\"search\":\"s_leaf\"}");
		assert_int_equal(total_of(json_object_get(doc, "root")), 7);
		json_decref(doc);
		assert_int_equal(store_flush(s, &err), 0); /* the same from a block */
	}
	buf_free(&z);
	buf_free(&err);
}

static void parse_error(const char *body, const char *needle)
{
	struct fg_request r;
	struct buf err = { 0 };
	assert_int_equal(fg_request_parse(&r, body, strlen(body), &err), -1);
	if (!strstr(err.data, needle))
		fail_msg("error for %s: \"%s\" lacks \"%s\"", body, err.data, needle);
	buf_free(&err);
}

static void test_flamegraph_request_errors(void **state)
{
	parse_error("not json", "not valid JSON");
	parse_error("[]", "JSON object");
	parse_error("{}", "filter");
	parse_error("{\"filter\":{\"start_ts\":5,\"end_ts\":5}}", "end_ts must be after");
	parse_error("{\"filter\":{\"start_ts\":\"5\",\"end_ts\":6}}", "start_ts");
	parse_error("{\"filter\":{\"start_ts\":-1,\"end_ts\":6}}", "start_ts");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"event_kind\":\"gpu\"}}", "event_kind");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"query\":5}}", "query");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6},\"synthetic_frames\":[\"planet\"]}",
		    "synthetic_frames");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6},\"num_samples\":0}", "num_samples");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"frame_mask\":{\"patterns\":[1]}}}",
		    "patterns");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"start_ts\":2}}", "duplicate");

	/* A bad regular expression or CEL query fails the query itself. */
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, out = { 0 };
	struct fg_request r;
	const char *bad_re = "{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"frame_mask\":{\"patterns\":[\"(\"]}}}";
	assert_int_equal(fg_request_parse(&r, bad_re, strlen(bad_re), &err), 0);
	assert_int_equal(flamegraph_query(s, sym, NULL, &r, &out, &err), -1);
	assert_non_null(strstr(err.data, "patterns[0]"));
	fg_request_free(&r);
	buf_reset(&err);
	const char *bad_cel = "{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"query\":\"host.name ==\"}}";
	assert_int_equal(fg_request_parse(&r, bad_cel, strlen(bad_cel), &err), 0);
	assert_int_equal(flamegraph_query(s, sym, NULL, &r, &out, &err), -1);
	assert_non_null(strstr(err.data, "column"));
	fg_request_free(&r);
	buf_free(&err);
	buf_free(&out);
}

/* Catastrophic backtracking in a user pattern (search, frame mask, CEL
 * matches()) ends the query with UREGEX_RC (answered 422) naming the
 * pattern and the limit, quickly, instead of holding the thread. */
static void test_queries_bound_user_regex(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, out = { 0 }, z = { 0 };
	static char names[64][48];
	struct spec specs[64];
	for (int i = 0; i < 64; i++) {
		memset(names[i], 'a', 40);
		snprintf(names[i] + 40, 8, "!%d", i & 63);
		specs[i] = (struct spec){ { "main", names[i], NULL }, names[63 - i], "main", 1 };
	}
	make_batch(specs, 64, 1, T0, &z);
	append(s, &z);
	const char *bodies[] = {
		"{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},\"search\":\"^(a+)+$\"}",
		"{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
		"\"frame_mask\":{\"patterns\":[\"x\",\"^(a|aa)+$\"]}}}",
	};
	const char *what[] = { "search", "filter.frame_mask.patterns[1]" };
	uint64_t t0 = now_mono_ns();
	for (int i = 0; i < 2; i++) {
		struct fg_request r;
		assert_int_equal(fg_request_parse(&r, bodies[i], strlen(bodies[i]), &err), 0);
		strcpy(r.scope.project_id, PROJECT);
		buf_reset(&err);
		assert_int_equal(flamegraph_query(s, sym, NULL, &r, &out, &err), UREGEX_RC);
		assert_non_null(strstr(err.data, what[i]));
		assert_non_null(strstr(err.data, "match limit"));
		assert_non_null(strstr(err.data, i ? "^(a|aa)+$" : "^(a+)+$"));
		fg_request_free(&r);
		/* Top functions reads the same patterns. */
		struct fn_request fr;
		buf_reset(&err);
		assert_int_equal(fn_request_parse(&fr, FN_TOP, bodies[i], strlen(bodies[i]), &err), 0);
		fn_request_set_project(&fr, PROJECT);
		assert_int_equal(functions_query(s, sym, NULL, &fr, &out, &err), UREGEX_RC);
		assert_non_null(strstr(err.data, "match limit"));
		fn_request_free(&fr);
		buf_reset(&err);
	}
	/* A diff: each side is read on its own thread with its own matcher. */
	const char *diff = "{\"baseline\":{\"start_ts\":1,\"end_ts\":2},"
			   "\"comparison\":{\"start_ts\":1,\"end_ts\":4102444800000},"
			   "\"frame_mask\":{\"patterns\":[\"^(a+)+$\"]}}";
	struct fn_request dr;
	assert_int_equal(fn_request_parse(&dr, FN_DIFF, diff, strlen(diff), &err), 0);
	fn_request_set_project(&dr, PROJECT);
	assert_int_equal(functions_query(s, sym, NULL, &dr, &out, &err), UREGEX_RC);
	assert_non_null(strstr(err.data, "frame_mask.patterns[0]"));
	fn_request_free(&dr);
	buf_reset(&err);
	/* CEL's matches() over the executable name. */
	struct ent_request er;
	const char *cel = "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
			  "\"query\":\"process.executable.name.matches('^(a+)+$') || true\"}}";
	assert_int_equal(ent_request_parse(&er, ENT_LABELS, cel, strlen(cel), &err), 0);
	strcpy(er.scope.project_id, PROJECT);
	assert_int_equal(entities_query(s, &er, &out, &err), UREGEX_RC);
	assert_non_null(strstr(err.data, "matches()"));
	ent_request_free(&er);
	/* Honest patterns still work. */
	json_t *d = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},"
				      "\"search\":\"^a+!1$\"}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 1);
	json_decref(d);
	assert_true(now_mono_ns() - t0 < 5000000000ull);
	buf_free(&err);
	buf_free(&out);
	buf_free(&z);
}

UNIT_TEST_MAIN(
	WORLD_TEST(test_flamegraph),
	WORLD_TEST(test_symbols_pending),
	cmocka_unit_test(test_otree_child),
	cmocka_unit_test(test_otree_write_budget),
	cmocka_unit_test(test_otree_write_ties),
	cmocka_unit_test(test_stack_sums_order),
	WORLD_TEST(test_flamegraph_pruning),
	WORLD_TEST(test_flamegraph_sparse_dense),
	WORLD_TEST(test_flamegraph_request_errors),
	WORLD_TEST(test_queries_bound_user_regex))
