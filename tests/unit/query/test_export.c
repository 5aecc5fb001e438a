/* Unit tests: flamegraph exports (server/query/export.c). The folded format's
 * escaping keeps every name on its line and in its frame; a small tree
 * exported as folded stacks, speedscope and pprof holds exactly its
 * stacks and values (the pprof read back with the generated decoder:
 * stacks leaf first, functions and locations shared, sample types by
 * event kind); the node limit holds for every format. */
#include "testutil.h"
#include "displayfixture.h"

#include <jansson.h>

#include "buf.h"
#include "compress.h"
#include "pprof_profile.pb-c.h"
#include "server/query/display.h"
#include "server/query/export.h"
#include "server/store/store.h"
#include "server/query/tree.h"
#include "util.h"

static void folded(const char *name, const char *want)
{
	struct buf b = { 0 };
	export_folded_frame(&b, name);
	assert_string_equal(b.data ? b.data : "", want);
	buf_free(&b);
}

static void test_folded_escape(void **state)
{
	(void)state;
	folded("", "");
	folded("main", "main");
	folded("std::vector<int>::push_back(int const&)", "std::vector<int>::push_back(int const&)");
	folded("a;b", "a\\;b");
	folded("line\nbreak", "line\\nbreak");
	folded("cr\rhere", "cr\\rhere");
	folded("back\\slash", "back\\\\slash");
	folded("\\;", "\\\\\\;"); /* an escaped-looking name stays distinct */
	folded("tab\there", "tab\\x09here");
	folded("del\x7f", "del\\x7f");
	folded("spaces are kept 12", "spaces are kept 12");
	folded("caf\xc3\xa9", "caf\xc3\xa9"); /* UTF-8 as is */
	/* No output line can be split or joined by a name. */
	const char *nasty = "x;y\nz\r\\ 1";
	struct buf b = { 0 };
	export_folded_frame(&b, nasty);
	assert_null(strchr(b.data, '\n'));
	assert_null(strchr(b.data, '\r'));
	for (const char *p = b.data; (p = strchr(p, ';')); p++)
		assert_true(p > b.data && p[-1] == '\\');
	buf_free(&b);
}

static void test_format_names(void **state)
{
	(void)state;
	assert_int_equal(fg_format_parse("json"), FG_FORMAT_JSON);
	assert_int_equal(fg_format_parse("pprof"), FG_FORMAT_PPROF);
	assert_int_equal(fg_format_parse("folded"), FG_FORMAT_FOLDED);
	assert_int_equal(fg_format_parse("speedscope"), FG_FORMAT_SPEEDSCOPE);
	assert_int_equal(fg_format_parse("svg"), -1);
	assert_int_equal(fg_format_parse(""), -1);
	assert_int_equal(fg_format_parse("PPROF"), -1);
	assert_string_equal(fg_format_extension(FG_FORMAT_PPROF), "pb.gz");
}

/* root -> main -> {work -> leaf (40), work (self 10), "a;b" (5)}, main
 * self 3, root self 2 (a stack whose frames were all masked); work and
 * leaf in bin, leaf at line 12 of leaf.c. Total 60. */
struct fixture {
	struct display *d;
	struct otree t;
};

static void add(struct otree *t, const uint32_t *path, size_t n, uint64_t v)
{
	t->nodes[0].total += v;
	for (size_t i = 0; i < n; i++)
		t->nodes[path[i]].total += v;
	t->nodes[n ? path[n - 1] : 0].self += v;
}

static void make_tree(struct fixture *f)
{
	f->d = bare_display();
	otree_init(&f->t, display_key(f->d, DT_ROOT, "root", "", NULL));
	uint32_t main_ = otree_child(&f->t, 0, display_key(f->d, SFT_NATIVE, "main", "bin", NULL));
	uint32_t work = otree_child(&f->t, main_, display_key(f->d, SFT_NATIVE, "work", "bin", NULL));
	uint32_t leaf = otree_child(&f->t, work, display_key(f->d, SFT_KERNEL, "leaf", "vmlinux", "leaf.c"));
	f->t.nodes[leaf].line = 12;
	uint32_t semi = otree_child(&f->t, main_, display_key(f->d, SFT_NATIVE, "a;b", "bin", NULL));
	add(&f->t, (uint32_t[]){ main_, work, leaf }, 3, 40);
	add(&f->t, (uint32_t[]){ main_, work }, 2, 10);
	add(&f->t, (uint32_t[]){ main_, semi }, 2, 5);
	add(&f->t, (uint32_t[]){ main_ }, 1, 3);
	add(&f->t, NULL, 0, 2);
}

static void free_tree(struct fixture *f)
{
	otree_free(&f->t);
	display_free(f->d);
}

/* The tree as a fixture (cmocka setup/teardown). */
static int tree_setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	make_tree(f);
	*state = f;
	return 0;
}

static int tree_teardown(void **state)
{
	free_tree(*state);
	free(*state);
	return 0;
}

static int run(struct fixture *f, enum fg_format fmt, uint8_t kind, size_t max_nodes, struct buf *out)
{
	struct buf err = { 0 };
	struct export_info info = { .kind = kind, .hz = 20, .total = f->t.nodes[0].total,
				    .start_ms = 1000, .end_ms = 6000, .name = "test" };
	int rc = export_tree(fmt, &f->t, f->d, max_nodes, &info, out, &err);
	buf_free(&err);
	return rc;
}

static void test_folded_tree(void **state)
{
	struct fixture *f = *state;
	struct buf out = { 0 };
	assert_int_equal(run(f, FG_FORMAT_FOLDED, SEK_ON_CPU, 0, &out), 0);
	/* Children by total, largest first; one line per node with self. */
	assert_string_equal(out.data, "[no frames] 2\n"
				      "main 3\n"
				      "main;work 10\n"
				      "main;work;leaf 40\n"
				      "main;a\\;b 5\n");
	buf_reset(&out);
	/* Bounded: root, main and one [other] for work and a;b. */
	assert_int_equal(run(f, FG_FORMAT_FOLDED, SEK_ON_CPU, 4, &out), 0);
	assert_non_null(strstr(out.data, "main;[other] 55\n"));
	uint64_t sum = 0;
	for (char *line = strtok(out.data, "\n"); line; line = strtok(NULL, "\n"))
		sum += strtoull(strrchr(line, ' ') + 1, NULL, 10);
	assert_int_equal(sum, 60);
	buf_free(&out);
}

static void test_speedscope_tree(void **state)
{
	struct fixture *f = *state;
	struct buf out = { 0 };
	assert_int_equal(run(f, FG_FORMAT_SPEEDSCOPE, SEK_OFF_CPU, 0, &out), 0);
	json_error_t je;
	json_t *doc = json_loadb(out.data, out.len, 0, &je);
	assert_non_null(doc);
	assert_string_equal(json_string_value(json_object_get(doc, "$schema")),
			    "https://www.speedscope.app/file-format-schema.json");
	json_t *frames = json_object_get(json_object_get(doc, "shared"), "frames");
	assert_int_equal(json_array_size(frames), 4); /* main, work, leaf, a;b: each once */
	json_t *p = json_array_get(json_object_get(doc, "profiles"), 0);
	assert_string_equal(json_string_value(json_object_get(p, "type")), "sampled");
	assert_string_equal(json_string_value(json_object_get(p, "unit")), "nanoseconds");
	assert_int_equal(json_integer_value(json_object_get(p, "endValue")), 60);
	json_t *samples = json_object_get(p, "samples"), *weights = json_object_get(p, "weights");
	assert_int_equal(json_array_size(samples), 5);
	assert_int_equal(json_array_size(weights), 5);
	/* The leaf's sample: main, work, leaf, outermost first, with its file. */
	json_t *s = json_array_get(samples, 3);
	assert_int_equal(json_array_size(s), 3);
	json_t *leaf = json_array_get(frames, (size_t)json_integer_value(json_array_get(s, 2)));
	assert_string_equal(json_string_value(json_object_get(leaf, "name")), "leaf");
	assert_string_equal(json_string_value(json_object_get(leaf, "file")), "leaf.c");
	assert_int_equal(json_integer_value(json_array_get(weights, 3)), 40);
	assert_int_equal(json_array_size(json_array_get(samples, 0)), 0); /* the root's own */
	json_decref(doc);
	buf_free(&out);
}

static const char *str(const Perftools__Profiles__Profile *p, int64_t i)
{
	assert_true(i >= 0 && (size_t)i < p->n_string_table);
	return p->string_table[i];
}

static void test_pprof_tree(void **state)
{
	struct fixture *f = *state;
	struct buf out = { 0 }, raw = { 0 };
	assert_int_equal(run(f, FG_FORMAT_PPROF, SEK_ON_CPU, 0, &out), 0);
	assert_int_equal(gzip_decompress_bounded(out.data, out.len, 1 << 20, &raw), 0);
	Perftools__Profiles__Profile *p =
		perftools__profiles__profile__unpack(NULL, raw.len, (const uint8_t *)raw.data);
	assert_non_null(p);
	assert_string_equal(str(p, 0), "");
	assert_int_equal(p->n_sample_type, 2);
	assert_string_equal(str(p, p->sample_type[0]->type), "samples");
	assert_string_equal(str(p, p->sample_type[0]->unit), "count");
	assert_string_equal(str(p, p->sample_type[1]->type), "cpu");
	assert_string_equal(str(p, p->sample_type[1]->unit), "nanoseconds");
	assert_int_equal(p->period, 50000000);
	assert_int_equal(p->time_nanos, 1000000000);
	assert_int_equal(p->duration_nanos, 5000000000);
	assert_int_equal(p->n_function, 4);
	assert_int_equal(p->n_location, 4);
	assert_int_equal(p->n_mapping, 2); /* bin, vmlinux */
	assert_int_equal(p->n_sample, 5);
	uint64_t sum = 0;
	for (size_t i = 0; i < p->n_sample; i++) {
		assert_int_equal(p->sample[i]->n_value, 2);
		sum += (uint64_t)p->sample[i]->value[0];
		assert_int_equal(p->sample[i]->value[1], p->sample[i]->value[0] * 50000000);
	}
	assert_int_equal(sum, 60);
	/* The leaf's sample: leaf first, then work, then main. */
	const Perftools__Profiles__Sample *s = p->sample[3];
	assert_int_equal(s->value[0], 40);
	assert_int_equal(s->n_location_id, 3);
	const char *want[] = { "leaf", "work", "main" };
	for (size_t i = 0; i < 3; i++) {
		uint64_t id = s->location_id[i];
		assert_true(id >= 1 && id <= p->n_location);
		const Perftools__Profiles__Location *loc = p->location[id - 1];
		assert_int_equal(loc->id, id);
		assert_int_equal(loc->n_line, 1);
		const Perftools__Profiles__Function *fn = p->function[loc->line[0]->function_id - 1];
		assert_string_equal(str(p, fn->name), want[i]);
		if (i == 0) {
			assert_string_equal(str(p, fn->system_name), "kernel:leaf");
			assert_string_equal(str(p, fn->filename), "leaf.c");
			assert_int_equal(loc->line[0]->line, 12);
			assert_string_equal(str(p, p->mapping[loc->mapping_id - 1]->filename), "vmlinux");
		}
	}
	assert_int_equal(p->sample[0]->n_location_id, 0); /* the root's own value */
	perftools__profiles__profile__free_unpacked(p, NULL);
	/* off_cpu: one sample type, nanoseconds. */
	buf_reset(&out);
	buf_reset(&raw);
	assert_int_equal(run(f, FG_FORMAT_PPROF, SEK_OFF_CPU, 3, &out), 0);
	assert_int_equal(gzip_decompress_bounded(out.data, out.len, 1 << 20, &raw), 0);
	p = perftools__profiles__profile__unpack(NULL, raw.len, (const uint8_t *)raw.data);
	assert_non_null(p);
	assert_int_equal(p->n_sample_type, 1);
	assert_string_equal(str(p, p->sample_type[0]->type), "off_cpu");
	assert_string_equal(str(p, p->sample_type[0]->unit), "nanoseconds");
	sum = 0;
	for (size_t i = 0; i < p->n_sample; i++)
		sum += (uint64_t)p->sample[i]->value[0];
	assert_int_equal(sum, 60); /* bounded to 3 nodes, the total whole */
	assert_true(p->n_function <= 2);
	perftools__profiles__profile__free_unpacked(p, NULL);
	buf_free(&raw);
	buf_free(&out);
}

/* A recursion 3 000 deep with self value at every level: each stack
 * repeats the levels above it (4.5 M frames in all), so an export is far
 * larger than the tree; past max_bytes it is refused and out untouched. */
static void test_deep_stacks_bounded(void **state)
{
	(void)state;
	struct buf err = { 0 };
	struct display *d = bare_display();
	struct otree t;
	otree_init(&t, display_key(d, DT_ROOT, "root", "", NULL));
	uint32_t fn = display_key(d, SFT_NATIVE, "recurse", "bin", NULL);
	uint32_t n = 0;
	enum { DEPTH = 3000 };
	for (int i = 0; i < DEPTH; i++) {
		n = otree_child(&t, n, fn);
		t.nodes[n].self = 1;
	}
	for (uint32_t i = (uint32_t)t.n; i-- > 0;)
		t.nodes[i].total = t.nodes[i].self + (i + 1 < t.n ? t.nodes[i + 1].total : 0);
	const enum fg_format fmts[] = { FG_FORMAT_FOLDED, FG_FORMAT_SPEEDSCOPE, FG_FORMAT_PPROF };
	for (size_t i = 0; i < 3; i++) {
		struct buf out = { 0 };
		buf_puts(&out, "kept");
		struct export_info info = { .kind = SEK_ON_CPU, .total = DEPTH, .name = "deep",
					    .max_bytes = 1 << 20 };
		buf_reset(&err);
		assert_int_equal(export_tree(fmts[i], &t, d, 0, &info, &out, &err), -1);
		assert_string_equal(out.data, "kept");
		assert_non_null(strstr(err.data, "ask for fewer nodes (max_nodes"));
		/* The same within its bound: 300 levels. */
		buf_reset(&out);
		buf_reset(&err);
		assert_int_equal(export_tree(fmts[i], &t, d, 300, &info, &out, &err), 0);
		assert_true(out.len > 0);
		buf_free(&out);
	}
	otree_free(&t);
	display_free(d);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_folded_escape),
	cmocka_unit_test(test_format_names),
	cmocka_unit_test_setup_teardown(test_folded_tree, tree_setup, tree_teardown),
	cmocka_unit_test_setup_teardown(test_speedscope_tree, tree_setup, tree_teardown),
	cmocka_unit_test_setup_teardown(test_pprof_tree, tree_setup, tree_teardown),
	cmocka_unit_test(test_deep_stacks_bounded))
