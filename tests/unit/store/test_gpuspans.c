/* Unit tests: the GPU timeline's span store (server/store/gpuspans.c):
 * stacks and labels interned per chunk and read back through the chunk's
 * segment, chunks by minute, the retention, the bound on spans, projects
 * apart, the time range. */
#include "testutil.h"

#include "server/store/gpuspans.h"
#include "util.h"

#define T0 1700000000000LL
#define P1 "0b7a8f6e-1c2d-4e3f-8a9b-0c1d2e3f4a5b"
#define P2 "11111111-1111-4111-8111-111111111111"

static const char *const labels[] = { "process.pid", "42", "gpu.device.index", "0" };

/* A span at t ms (1 ms long) launched from main -> f<k> -> k_big. */
static void add(struct gpuspans *g, const char *project, int64_t t_ms, int k, int64_t now_ms)
{
	char f[16];
	snprintf(f, sizeof(f), "f%d", k);
	struct store_file file = { .build_id_len = 2, .build_id = { 1, 2 } };
	memset(file.id.b, 0x33, sizeof(file.id.b));
	struct store_frame_info frames[] = {
		{ .type = 2, .name = "main", .binary = "app" },
		{ .type = 2, .address = 0x1234, .file = &file, .file_name = "libx.so" },
		{ .type = 2, .name = f, .binary = "app" },
		{ .type = 12, .name = "k_big" },
	};
	struct gpuspan_in in = { .start_ns = t_ms * 1000000, .end_ns = t_ms * 1000000 + 1000000, .device = 0,
				 .stream = 7, .kind = 1, .frames = frames, .nframes = 4, .labels = labels,
				 .nlabels = 2 };
	gpuspans_add(g, project, &in, 1, now_ms);
}

struct seen {
	size_t chunks, spans;
	int64_t first_start;
	char leaf[16], second[16];
	uint64_t address;
	const char *pid;
};

static int look(void *ctx, const struct store_segment *seg, const struct gpuspan *spans, size_t n)
{
	struct seen *s = ctx;
	s->chunks++;
	s->spans += n;
	s->first_start = spans[0].start_ns;
	uint32_t fr[8];
	size_t depth = store_seg_stack(seg, spans[0].node, fr, 8);
	assert_int_equal(depth, 4);
	struct store_frame_info fi;
	assert_int_equal(store_seg_frame(seg, fr[3], &fi), 0);
	snprintf(s->leaf, sizeof(s->leaf), "%s", fi.name);
	assert_int_equal(store_seg_frame(seg, fr[1], &fi), 0);
	assert_null(fi.name);
	assert_non_null(fi.file);
	assert_int_equal(fi.file->build_id_len, 2);
	assert_string_equal(fi.file_name, "libx.so");
	s->address = fi.address;
	assert_int_equal(store_seg_frame(seg, fr[0], &fi), 0);
	snprintf(s->second, sizeof(s->second), "%s", fi.name);
	assert_int_equal(store_seg_frame(seg, 999, &fi), -1);
	const uint32_t *kv;
	assert_int_equal(store_seg_label_pairs(seg, spans[0].labels, &kv), 2);
	/* sorted by key id; the values as given */
	for (int i = 0; i < 2; i++)
		if (strcmp(store_seg_str(seg, kv[2 * i]), "process.pid") == 0)
			s->pid = store_seg_str(seg, kv[2 * i + 1]);
	return 0;
}

static void test_spans_chunks_and_bounds(void **state)
{
	(void)state;
	struct gpuspans *g = gpuspans_new(10 * 60000, 5);
	/* three spans within a minute: one chunk, one stack node chain */
	for (int i = 0; i < 3; i++)
		add(g, P1, T0 + i, 1, T0 + i);
	add(g, P2, T0, 2, T0);
	struct seen s = { 0 };
	assert_int_equal(gpuspans_read(g, P1, 0, INT64_MAX, T0, look, &s), 0);
	assert_int_equal(s.chunks, 1);
	assert_int_equal(s.spans, 3);
	assert_string_equal(s.leaf, "k_big");
	assert_string_equal(s.second, "main");
	assert_int_equal(s.address, 0x1234);
	assert_non_null(s.pid);
	assert_string_equal(s.pid, "42");
	/* a minute on: a new chunk */
	add(g, P1, T0 + 61000, 1, T0 + 61000);
	memset(&s, 0, sizeof(s));
	gpuspans_read(g, P1, 0, INT64_MAX, T0 + 61000, look, &s);
	assert_int_equal(s.chunks, 2);
	assert_int_equal(s.spans, 4);
	/* the range: only the second chunk's span ends after T0 + 60 s */
	memset(&s, 0, sizeof(s));
	gpuspans_read(g, P1, (T0 + 60000) * 1000000, INT64_MAX, T0 + 61000, look, &s);
	assert_int_equal(s.chunks, 1);
	assert_int_equal(s.first_start, (T0 + 61000) * 1000000);
	struct gpuspans_stats st;
	gpuspans_get_stats(g, &st);
	assert_int_equal(st.spans, 5);
	assert_int_equal(st.added, 5);
	/* over max_spans (5): the oldest chunk goes (P1's first, 3 spans) */
	add(g, P2, T0 + 62000, 2, T0 + 62000);
	gpuspans_get_stats(g, &st);
	assert_int_equal(st.evicted, 3);
	assert_int_equal(st.spans, 3);
	memset(&s, 0, sizeof(s));
	gpuspans_read(g, P1, 0, INT64_MAX, T0 + 62000, look, &s);
	assert_int_equal(s.spans, 1);
	/* past the retention everything goes */
	memset(&s, 0, sizeof(s));
	gpuspans_read(g, P2, 0, INT64_MAX, T0 + 62000 + 10 * 60000 + 1000, look, &s);
	assert_int_equal(s.spans, 0);
	gpuspans_get_stats(g, &st);
	assert_int_equal(st.spans, 0);
	assert_int_equal(st.chunks, 0);
	assert_int_equal(st.expired, 3);
	gpuspans_free(g);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_spans_chunks_and_bounds))
