/* Unit tests: HTTP route matching. */
#include "server_fixture.h"

static void test_route_match(void **state)
{
	(void)state;
	const char *p[HTTP_MAX_PARAMS];
	size_t l[HTTP_MAX_PARAMS], n;
	assert_true(http_match("/public/api/v1/project/{id}/flamegraph/json",
			       "/public/api/v1/project/abc/flamegraph/json", p, l, &n));
	assert_int_equal(n, 1);
	assert_int_equal(l[0], 3);
	assert_memory_equal(p[0], "abc", 3);
	assert_false(http_match("/public/api/v1/project/{id}/flamegraph/json",
				"/public/api/v1/project//flamegraph/json", p, l, &n));
	assert_false(http_match("/healthz", "/healthz/", p, l, &n));
	assert_false(http_match("/a/{x}", "/a/b/c", p, l, &n));
	assert_true(http_match("*", "/anything", p, l, &n));
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_route_match))
