/* test_nvtx_ranges.c - gpu/nvtx_ranges.c: a thread's NVTX range stack
 * under hostile use (deep nesting, long and odd names, stray pops). */
#include "testutil.h"

#include <string.h>

#include "../../gpu/nvtx_ranges.h"

static void assert_name(const struct nvtx_ranges *r, unsigned i, const char *want)
{
	assert_true(i < nvtx_ranges_kept(r));
	assert_int_equal(r->len[i], strlen(want));
	assert_memory_equal(r->name[i], want, strlen(want));
}

static void test_push_pop_nest(void **state)
{
	(void)state;
	struct nvtx_ranges r = { 0 };
	assert_int_equal(nvtx_ranges_hash(&r), 0);
	assert_int_equal(nvtx_ranges_push(&r, "epoch"), 0);
	uint64_t h1 = nvtx_ranges_hash(&r);
	assert_int_equal(nvtx_ranges_push(&r, "train_step"), 1);
	assert_int_equal(nvtx_ranges_kept(&r), 2);
	assert_name(&r, 0, "epoch");
	assert_name(&r, 1, "train_step");
	uint64_t h2 = nvtx_ranges_hash(&r);
	assert_true(h1 && h2 && h1 != h2);
	assert_int_equal(nvtx_ranges_pop(&r), 1);
	assert_int_equal(nvtx_ranges_hash(&r), h1);
	/* the same depth, another name: another key */
	nvtx_ranges_push(&r, "eval_step");
	assert_true(nvtx_ranges_hash(&r) != h2);
	assert_int_equal(nvtx_ranges_pop(&r), 1);
	assert_int_equal(nvtx_ranges_pop(&r), 0);
	assert_int_equal(nvtx_ranges_pop(&r), -1); /* stray pop: ignored */
	assert_int_equal(r.depth, 0);
	assert_int_equal(nvtx_ranges_hash(&r), 0);
}

static void test_depth_limit(void **state)
{
	(void)state;
	struct nvtx_ranges r = { 0 };
	char name[16];
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		assert_int_equal(nvtx_ranges_push(&r, name), i);
	}
	assert_int_equal(r.depth, 1000);
	assert_int_equal(nvtx_ranges_kept(&r), NVTX_RANGES_DEPTH_MAX);
	assert_name(&r, 0, "r0"); /* the outermost ones are kept */
	assert_name(&r, NVTX_RANGES_DEPTH_MAX - 1, "r7");
	uint64_t h = nvtx_ranges_hash(&r);
	/* pops of the ranges not kept leave the kept path alone */
	for (int i = 0; i < 1000 - NVTX_RANGES_DEPTH_MAX; i++)
		nvtx_ranges_pop(&r);
	assert_int_equal(nvtx_ranges_kept(&r), NVTX_RANGES_DEPTH_MAX);
	assert_int_equal(nvtx_ranges_hash(&r), h);
	nvtx_ranges_pop(&r);
	assert_int_equal(nvtx_ranges_kept(&r), NVTX_RANGES_DEPTH_MAX - 1);
	/* the freed slot takes the next push */
	nvtx_ranges_push(&r, "again");
	assert_name(&r, NVTX_RANGES_DEPTH_MAX - 1, "again");
}

static void test_names_bounded_and_clean(void **state)
{
	(void)state;
	struct nvtx_ranges r = { 0 };
	char big[4096];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	nvtx_ranges_push(&r, big);
	assert_int_equal(r.len[0], NVTX_RANGES_NAME_MAX);
	nvtx_ranges_push(&r, NULL);
	assert_name(&r, 1, "[unnamed]");
	nvtx_ranges_push(&r, "");
	assert_name(&r, 2, "[unnamed]");
	nvtx_ranges_push(&r, "a\nb\xff");
	assert_name(&r, 3, "a?b?");
	nvtx_ranges_push_wide(&r, L"st\u00e9p");
	assert_name(&r, 4, "st?p");
	nvtx_ranges_push_wide(&r, NULL);
	assert_name(&r, 5, "[unnamed]");
	wchar_t wbig[300];
	for (int i = 0; i < 299; i++)
		wbig[i] = L'w';
	wbig[299] = 0;
	nvtx_ranges_push_wide(&r, wbig);
	assert_int_equal(r.len[6], NVTX_RANGES_NAME_MAX);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_push_pop_nest),
	cmocka_unit_test(test_depth_limit),
	cmocka_unit_test(test_names_bounded_and_clean))
