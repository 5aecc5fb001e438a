/* Unit tests: block files: node order, time slices, row order, the version 3 format. */
#include "server_fixture.h"

/* Depth-first node order: node i's parent is node i - 1 or one of its
 * ancestors, and parents come before children. */
static void assert_preorder(const struct part *p)
{
	for (size_t i = 1; i < p->nnodes; i++) {
		uint32_t parent = p->node_parent[i];
		assert_true(parent < i);
		uint32_t a = (uint32_t)i - 1;
		while (a != parent && a != 0)
			a = p->node_parent[a];
		assert_int_equal(a, parent);
	}
}

static const uint32_t sort_stacks[][4] = {
	{ 1, 2, 3, 0 }, { 4, 5, 0, 0 }, { 1, 2, 6, 0 }, { 4, 7, 8, 0 }, { 1, 9, 0, 0 }, { 4, 5, 10, 11 },
};

static size_t stack_depth(const uint32_t *f)
{
	size_t n = 0;
	while (n < 4 && f[n])
		n++;
	return n;
}

/* Stack i of sort_stacks as frame ids of p: frame k is "fk". */
static size_t sort_stack(struct part *p, size_t i, uint32_t *frames)
{
	size_t d = stack_depth(sort_stacks[i]);
	for (size_t j = 0; j < d; j++) {
		char name[16];
		snprintf(name, sizeof(name), "f%u", sort_stacks[i][j]);
		struct store_frame f = { .type = SFT_NATIVE,
					 .name = strtab_intern(&p->sstr, name, strlen(name)) };
		frames[j] = part_frame(p, &f);
	}
	return d;
}

static void test_part_sort_nodes(void **state)
{
	(void)state;
	struct part p;
	part_init(&p, 1);
	size_t ns = ARRAY_SIZE(sort_stacks);
	uint32_t leaf[ARRAY_SIZE(sort_stacks)];
	uint32_t frames[ARRAY_SIZE(sort_stacks)][4];
	size_t depth[ARRAY_SIZE(sort_stacks)];
	for (size_t i = 0; i < ns; i++) {
		depth[i] = sort_stack(&p, i, frames[i]);
		leaf[i] = part_stack_id(&p, frames[i], depth[i]);
	}
	/* First-use order interleaves the subtrees of 1 and 4. */
	assert_int_not_equal(p.node_parent[leaf[2]] + 1, leaf[2]);
	size_t nnodes = p.nnodes;
	uint32_t *map = part_sort_nodes(&p);
	assert_int_equal(p.nnodes, nnodes);
	assert_int_equal(map[0], 0);
	assert_preorder(&p);
	for (size_t i = 0; i < ns; i++) {
		uint32_t got[8];
		size_t d = depth[i];
		assert_int_equal(part_stack(&p, map[leaf[i]], got, 8), d);
		assert_memory_equal(got, frames[i], d * sizeof(uint32_t));
		/* The whole-stack index and the node index find the new ids. */
		assert_int_equal(part_stack_id(&p, frames[i], d), map[leaf[i]]);
		assert_int_equal(part_node(&p, p.node_parent[map[leaf[i]]], frames[i][d - 1]),
				 map[leaf[i]]);
	}
	assert_int_equal(p.nnodes, nnodes);

	/* A block written from this part: depth first, rows on the same stacks. */
	uint32_t proj = strtab_intern(&p.lstr, "p", 1);
	uint32_t series = part_series_id(&p, proj, SEK_ON_CPU, 19, part_labels(&p, NULL, 0));
	for (size_t i = ns; i-- > 0;) /* newest stacks first: another order again */
		part_add_row(&p, series, T0 + (int64_t)i, map[leaf[i]], i + 1);
	char *dir = make_temp_dir();
	char tmp[600], fin[600];
	snprintf(tmp, sizeof(tmp), "%s/b.tmp", dir);
	snprintf(fin, sizeof(fin), "%s/b.blk", dir);
	struct merge_source src = { &p, NULL };
	struct merge_target t = { T0, T0 + 3600000, 1, { .gen = 1, .partition_ms = T0 }, tmp, fin };
	struct part out;
	struct buf err = { 0 }, scratch = { 0 };
	assert_int_equal(merge_write(&src, 1, &t, &out, NULL, &err), 0);
	assert_int_equal(out.nnodes, nnodes);
	assert_preorder(&out);
	struct block *blk;
	assert_int_equal(block_open(fin, &blk, &err), 0);
	const struct store_row *rows;
	uint64_t bytes = 0;
	assert_int_equal(block_rows(blk, &out, &out.series[0], INT64_MIN, &scratch, &rows, &bytes, &err), (long)ns);
	for (size_t r = 0; r < ns; r++) {
		size_t i = (size_t)(rows[r].ts_ms - T0);
		uint32_t got[8];
		assert_int_equal(rows[r].value, i + 1);
		assert_int_equal(part_stack(&out, rows[r].stack, got, 8), depth[i]);
		for (size_t j = 0; j < depth[i]; j++) /* the same names, new ids */
			assert_string_equal(strtab_get(&out.sstr, out.frames[got[j]].name),
					    strtab_get(&p.sstr, p.frames[frames[i][j]].name));
	}
	block_close(blk);
	part_free(&out);
	part_free(&p);
	free(map);
	buf_free(&err);
	buf_free(&scratch);
	rm_temp_dir(dir);
}

/* --- blocks by time slice -------------------------------------------------- */

/* Stack totals as text, one "frames=sum" line per stack, sorted: comparable
 * across parts whose node ids differ. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *sums_text(const struct part *p, const uint32_t *stacks, const uint64_t *sums, long n)
{
	char **lines = calloc((size_t)n + 1, sizeof(char *));
	size_t nl = 0;
	for (long i = 0; i < n; i++) {
		if (!sums[i])
			continue;
		uint32_t frames[16];
		size_t d = part_stack(p, stacks[i], frames, 16);
		struct buf b = { 0 };
		for (size_t j = 0; j < d && j < 16; j++)
			buf_printf(&b, "%s;", strtab_get(&p->sstr, p->frames[frames[j]].name));
		buf_printf(&b, "=%llu", (unsigned long long)sums[i]);
		lines[nl++] = b.data;
	}
	qsort(lines, nl, sizeof(char *), cmp_str);
	struct buf out = { 0 };
	buf_puts(&out, "");
	for (size_t i = 0; i < nl; i++) {
		buf_printf(&out, "%s\n", lines[i]);
		free(lines[i]);
	}
	free(lines);
	return out.data;
}

/* What a block of the fixture at 10 s must answer for [from, to): the
 * in-memory rows, times rounded down to 10 s, of the series in mask. */
static char *expected_text(const struct part *mem, unsigned mask, int64_t from, int64_t to)
{
	uint64_t *v = calloc(mem->nnodes, sizeof(uint64_t));
	uint32_t *ids = calloc(mem->nnodes, sizeof(uint32_t));
	for (uint32_t s = 0; s < mem->nseries; s++) {
		if (!(mask & (1u << s)))
			continue;
		for (size_t r = 0; r < mem->series[s].nrows; r++) {
			const struct store_row *row = &mem->series[s].rows[r];
			int64_t t = row->ts_ms - row->ts_ms % 10000;
			if (t >= from && t < to)
				v[row->stack] += row->value;
		}
	}
	for (uint32_t i = 0; i < mem->nnodes; i++)
		ids[i] = i;
	char *text = sums_text(mem, ids, v, (long)mem->nnodes);
	free(v);
	free(ids);
	return text;
}

/* The ranges the slice tests ask: whole, halves, inside one slice, across
 * slice edges, outside, and pseudo-random ones. */
static size_t slice_ranges(int64_t (*r)[2], size_t max)
{
	const int64_t T = T_SLICE, M = 60000;
	int64_t fixed[][2] = {
		{ T, T + 60 * M },		{ T, T + 25 * M },
		{ T + 25 * M + 3000, T + 60 * M }, { T + 61000, T + 119000 },
		{ T + 119000, T + 121000 },	{ T + 7 * M + 13000, T + 31 * M + 17000 },
		{ T + 4 * M, T + 6 * M },	{ T - 60 * M, T },
		{ T + 49 * M + 50000, T + 90 * M }, { T + 3 * M + 1, T + 3 * M + 2 },
	};
	size_t n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(fixed) && n < max; i++, n++)
		r[n][0] = fixed[i][0], r[n][1] = fixed[i][1];
	uint64_t x = 0x2545F4914F6CDD1Dull;
	while (n < max) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int64_t a = T - 60000 + (int64_t)(x % 3200000), b = T - 60000 + (int64_t)((x >> 32) % 3200000);
		r[n][0] = MIN(a, b);
		r[n++][1] = MAX(a, b) + 1;
	}
	return n;
}

/* Every range answers per series (block_sums) what the rows say. */
static void check_series_sums(struct block *blk, const struct part *p, const struct part *mem,
			      int64_t from, int64_t to)
{
	struct buf scratch = { 0 }, err = { 0 };
	for (uint32_t s = 0; s < p->nseries; s++) {
		/* The block's series s is the fixture's series with its labels
		 * and kind: both parts number them in the same order. */
		const uint32_t *stacks;
		const uint64_t *sums;
		uint64_t rows_read = 0, bytes = 0;
		long n = block_sums(blk, p, &p->series[s], from, to, &scratch, &stacks, &sums,
				    &rows_read, &bytes, &err);
		assert_true(n >= 0);
		char *got = sums_text(p, stacks, sums, n), *want = expected_text(mem, 1u << s, from, to);
		if (strcmp(got, want) != 0)
			print_message("series %u [%lld, %lld):\ngot\n%swant\n%s", s, (long long)from,
				      (long long)to, got, want);
		assert_string_equal(got, want);
		free(got);
		free(want);
	}
	buf_free(&scratch);
	buf_free(&err);
}

/* Writes part mem as the block dir/b.blk (the hour from T_SLICE, 10 s
 * resolution) into *out and opens it. */
static struct block *write_test_block(struct part *mem, const char *dir, struct part *out)
{
	char tmp[600], fin[600];
	snprintf(tmp, sizeof(tmp), "%s/b.tmp", dir);
	snprintf(fin, sizeof(fin), "%s/b.blk", dir);
	struct merge_source src = { mem, NULL };
	struct merge_target t = { T_SLICE, T_SLICE + 3600000, 10000,
				  { .gen = 1, .partition_ms = T_SLICE, .level = 1 }, tmp, fin };
	struct buf err = { 0 };
	assert_int_equal(merge_write(&src, 1, &t, out, NULL, &err), 0);
	struct block *blk;
	assert_int_equal(block_open(fin, &blk, &err), 0);
	buf_free(&err);
	return blk;
}

/* A part written as a block and loaded back: the block, the part
 * merge_write made of it and the part block_load reads. */
struct written {
	char *dir;
	struct block *blk;
	struct part out, p;
};

static void written_open(struct written *w, struct part *mem)
{
	w->dir = make_temp_dir();
	w->blk = write_test_block(mem, w->dir, &w->out);
	struct buf err = { 0 };
	assert_int_equal(block_load(w->blk, &w->p, &err), 0);
	buf_free(&err);
}

/* Closes the block, frees the parts (mem too) and removes the directory. */
static void written_close(struct written *w, struct part *mem)
{
	block_close(w->blk);
	part_free(&w->p);
	part_free(&w->out);
	part_free(mem);
	rm_temp_dir(w->dir);
}

static void test_block_slices(void **state)
{
	(void)state;
	struct part mem;
	slice_fixture(&mem);
	struct written w;
	written_open(&w, &mem);
	struct buf err = { 0 }, scratch = { 0 }, acc = { 0 };
	assert_int_equal(block_info(w.blk)->slice_ms, BLOCK_SLICE_MS);
	/* 50 minutes of rows: 25 slices per series; two rollups (on_cpu at
	 * 19 Hz, off_cpu) sliced alike; the loaded part as the written one. */
	assert_int_equal(w.p.nseries, 3);
	assert_int_equal(w.p.nrollups, 2);
	for (uint32_t s = 0; s < 3; s++) {
		assert_int_equal(w.p.series[s].nslices, 25);
		assert_int_equal(w.out.series[s].nslices, 25);
		assert_memory_equal(w.p.slices + w.p.series[s].slice0, w.out.slices + w.out.series[s].slice0,
				    25 * sizeof(struct part_slice));
	}
	for (size_t r = 0; r < 2; r++)
		assert_int_equal(w.p.rollups[r].nslices, 25);
	const struct part_rollup *cpu = part_rollup_get(&w.p, w.p.series[0].project, SEK_ON_CPU, 19);
	const struct part_rollup *off = part_rollup_get(&w.p, w.p.series[0].project, SEK_OFF_CPU, 0);
	int64_t ranges[40][2];
	size_t nr = slice_ranges(ranges, 40);
	for (size_t i = 0; i < nr; i++) {
		int64_t from = ranges[i][0], to = ranges[i][1];
		check_series_sums(w.blk, &w.p, &mem, from, to);
		const struct part_rollup *rs[2] = { cpu, off };
		unsigned masks[2] = { 3, 4 };
		for (int k = 0; k < 2; k++) {
			const uint32_t *stacks;
			const uint64_t *sums;
			struct block_read_stats st = { 0 };
			long n = block_rollup_sums(w.blk, &w.p, rs[k], from, to, &scratch, &acc, &stacks,
						   &sums, &st, &err);
			assert_true(n >= 0);
			assert_int_equal(err.len, 0);
			for (long j = 1; j < n; j++)
				assert_true(stacks[j - 1] < stacks[j]);
			char *got = sums_text(&w.p, stacks, sums, n),
			     *want = expected_text(&mem, masks[k], from, to);
			if (strcmp(got, want) != 0)
				print_message("rollup %d [%lld, %lld):\ngot\n%swant\n%s", k,
					      (long long)from, (long long)to, got, want);
			assert_string_equal(got, want);
			free(got);
			free(want);
			/* Rows are read only for the two slices at the range's
			 * ends: 2 of 25 per series at most. */
			uint64_t most = 0;
			for (uint32_t s = 0; s < 3; s++) {
				if (!(masks[k] & (1u << s)))
					continue;
				const struct part_slice *sl = w.p.slices + w.p.series[s].slice0;
				uint64_t big[2] = { 0, 0 };
				for (uint32_t j = 0; j < w.p.series[s].nslices; j++)
					if (sl[j].n > big[0])
						big[1] = big[0], big[0] = sl[j].n;
					else if (sl[j].n > big[1])
						big[1] = sl[j].n;
				most += big[0] + big[1];
			}
			assert_true(st.rows_read <= most);
		}
	}
	buf_free(&err);
	buf_free(&scratch);
	buf_free(&acc);
	written_close(&w, &mem);
}

/* A block's rows come out in (time, stack) order with one row per pair
 * and the same sums, whether a series' rows went in in time order with
 * long runs of one time in no stack order (the radix sort, sort_rows) or
 * out of time order (qsort). */
static void test_block_row_order(void **state)
{
	(void)state;
	enum { TIMES = 12, PER = 300, STACKS = 60 };
	struct part mem;
	part_init(&mem, 1);
	uint32_t proj = strtab_intern(&mem.lstr, "proj", 4);
	uint32_t key = strtab_intern(&mem.lstr, "host.name", 9);
	uint32_t kv[2][2] = { { key, strtab_intern(&mem.lstr, "a", 1) },
			      { key, strtab_intern(&mem.lstr, "b", 1) } };
	uint32_t series[2] = { part_series_id(&mem, proj, SEK_ON_CPU, 19, part_labels(&mem, kv[0], 1)),
			       part_series_id(&mem, proj, SEK_ON_CPU, 19, part_labels(&mem, kv[1], 1)) };
	uint32_t leaf[STACKS];
	for (uint32_t i = 0; i < STACKS; i++) {
		char name[16];
		snprintf(name, sizeof(name), "g%u", (unsigned)i);
		struct store_frame f = { .type = SFT_NATIVE,
					 .name = strtab_intern(&mem.sstr, name, strlen(name)) };
		uint32_t fr = part_frame(&mem, &f);
		leaf[i] = part_stack_id(&mem, &fr, 1);
	}
	static uint64_t want[2][TIMES][STACKS];
	memset(want, 0, sizeof(want));
	uint64_t x = 88172645463325252ull;
	for (int t = 0; t < TIMES; t++)
		for (int r = 0; r < PER; r++)
			for (int sr = 0; sr < 2; sr++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				/* series 0 in time order; series 1 with time reversed */
				int tt = sr ? TIMES - 1 - t : t;
				uint32_t st = (uint32_t)(x >> 32) % STACKS;
				uint64_t v = 1 + (x >> 50) % 5;
				part_add_row(&mem, series[sr], T_SLICE + tt * 10000 + (int64_t)(x % 7), leaf[st], v);
				want[sr][tt][st] += v;
			}
	struct written w;
	written_open(&w, &mem);
	struct buf err = { 0 }, scratch = { 0 };
	assert_int_equal(w.p.nseries, 2);
	for (uint32_t s = 0; s < 2; s++) {
		const struct store_row *rows;
		uint64_t bytes = 0;
		long n = block_rows(w.blk, &w.p, &w.p.series[s], INT64_MIN, &scratch, &rows, &bytes, &err);
		assert_true(n > 0);
		/* which input series this is: by its host label */
		int sr = strcmp(strtab_get(&w.p.lstr, w.p.label_kv[w.p.label_off[w.p.series[s].labels] + 1]), "b") == 0;
		static uint64_t got[TIMES][STACKS];
		memset(got, 0, sizeof(got));
		for (long i = 0; i < n; i++) {
			if (i)
				assert_true(rows[i - 1].ts_ms < rows[i].ts_ms ||
					    (rows[i - 1].ts_ms == rows[i].ts_ms && rows[i - 1].stack < rows[i].stack));
			long t = (rows[i].ts_ms - T_SLICE) / 10000;
			assert_true(t >= 0 && t < TIMES);
			/* the block numbers its nodes anew: the stack by its frame's name */
			assert_true(rows[i].stack < w.p.nnodes);
			const char *nm = strtab_get(&w.p.sstr, w.p.frames[w.p.node_frame[rows[i].stack]].name);
			assert_true(nm[0] == 'g');
			uint32_t st = (uint32_t)atoi(nm + 1);
			assert_true(st < STACKS);
			got[t][st] += rows[i].value;
		}
		assert_memory_equal(got, want[sr], sizeof(got));
	}
	buf_free(&err);
	buf_free(&scratch);
	written_close(&w, &mem);
}

/* A block written before slices (version 3, tests/data/block-v3.blk, the
 * same fixture) still answers every range; its rollup has no slices, so
 * a range that cuts it reads the series. */
static void test_block_v3(void **state)
{
	(void)state;
	struct part mem, p;
	slice_fixture(&mem);
	struct buf err = { 0 }, scratch = { 0 }, acc = { 0 };
	struct block *blk;
	if (block_open("tests/data/block-v3.blk", &blk, &err) != 0)
		print_message("%s\n", err.data);
	assert_int_equal(block_info(blk)->slice_ms, 0);
	assert_int_equal(block_load(blk, &p, &err), 0);
	assert_int_equal(p.nseries, 3);
	assert_int_equal(p.samples, mem.samples);
	int64_t ranges[20][2];
	size_t nr = slice_ranges(ranges, 20);
	for (size_t i = 0; i < nr; i++)
		check_series_sums(blk, &p, &mem, ranges[i][0], ranges[i][1]);
	const uint32_t *stacks;
	const uint64_t *sums;
	struct block_read_stats st = { 0 };
	assert_int_equal(block_rollup_sums(blk, &p, &p.rollups[0], T_SLICE, T_SLICE + 60000, &scratch,
					   &acc, &stacks, &sums, &st, &err),
			 -1);
	const struct store_row *rows;
	uint64_t bytes = 0, total = 0;
	for (uint32_t s = 0; s < p.nseries; s++) {
		long n = block_rows(blk, &p, &p.series[s], INT64_MIN, &scratch, &rows, &bytes, &err);
		assert_int_equal(n, (long)p.series[s].nrows);
		for (long j = 0; j < n; j++)
			total += rows[j].value;
	}
	assert_int_equal(total, mem.samples);
	block_close(blk);
	part_free(&p);
	part_free(&mem);
	buf_free(&err);
	buf_free(&scratch);
	buf_free(&acc);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_part_sort_nodes),
	cmocka_unit_test(test_block_slices),
	cmocka_unit_test(test_block_row_order),
	cmocka_unit_test(test_block_v3))
