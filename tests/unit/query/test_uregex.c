/* Unit tests: the bounds on user regular expressions (server/query/uregex.c):
 * the match and heap limits of one match, the time budget of a matcher,
 * the message naming the pattern and the bound, and that honest patterns
 * are unaffected. */
#include "testutil.h"

#include <stdbool.h>

#include "server/query/uregex.h"
#include "util.h"

static struct uregex *compile(const char *pat, unsigned options)
{
	char msg[256];
	size_t off;
	struct uregex *re = uregex_compile(pat, strlen(pat), options, "search", msg, sizeof(msg), &off);
	if (!re)
		fail_msg("compile %s: %s at %zu", pat, msg, off);
	return re;
}

/* Into s: n letters 'a' then tail, the input "^(a+)+$" backtracks over. */
static void a_run(char *s, size_t n, const char *tail)
{
	memset(s, 'a', n);
	strcpy(s + n, tail);
}

/* The error of a matcher that stopped mentions needle. */
static void expect_matcher_error(struct uregex_matcher *m, const char *needle)
{
	struct buf err = { 0 };
	uregex_error(m, &err);
	if (!err.data || !strstr(err.data, needle))
		fail_msg("matcher error \"%s\" does not mention \"%s\"", err.data ? err.data : "", needle);
	buf_free(&err);
}

static void test_honest_patterns(void **state)
{
	(void)state;
	struct uregex_matcher *m = uregex_matcher_new(0);
	struct uregex *re = compile("^std::vector<.*>::push_back$", 0);
	const char *yes = "std::vector<int>::push_back", *no = "std::map<int>::find";
	for (int i = 0; i < 100000; i++) {
		assert_int_equal(uregex_match(m, re, yes, strlen(yes)), 1);
		assert_int_equal(uregex_match(m, re, no, strlen(no)), 0);
	}
	assert_false(uregex_failed(m));
	struct buf err = { 0 };
	uregex_error(m, &err);
	assert_null(err.data);
	uregex_free(re);
	/* UTF-8: a character is one; invalid bytes do not stop a match. */
	re = compile("^.b$", UREGEX_UTF);
	assert_int_equal(uregex_match(m, re, "\xc3\xa4" "b", 3), 1);
	uregex_free(re);
	re = compile("cd$", UREGEX_UTF);
	assert_int_equal(uregex_match(m, re, "ab\xff" "cd", 5), 1);
	uregex_free(re);
	char msg[256];
	size_t off;
	assert_null(uregex_compile("a(", 2, 0, "x", msg, sizeof(msg), &off));
	assert_non_null(strstr(msg, "missing closing parenthesis"));
	assert_int_equal(off, 2);
	uregex_matcher_free(m);
}

static void test_match_limit(void **state)
{
	(void)state;
	struct uregex_matcher *m = uregex_matcher_new(0);
	struct uregex *re = compile("^(a+)+$", 0);
	char s[64];
	a_run(s, 40, "!1");
	uint64_t t0 = now_mono_ns();
	assert_int_equal(uregex_match(m, re, s, strlen(s)), -1);
	/* With the JIT about 1 ms, without it about 15 ms: never seconds. */
	assert_true(now_mono_ns() - t0 < 1000000000ull);
	assert_true(uregex_failed(m));
	/* Every later match of the matcher fails at once, even an easy one. */
	assert_int_equal(uregex_match(m, re, "aaa", 3), -1);
	expect_matcher_error(m, "search: the pattern \"^(a+)+$\"");
	expect_matcher_error(m, "the match limit (1000000 steps)");
	expect_matcher_error(m, "aaaa");
	uregex_free(re);
	uregex_matcher_free(m);
	/* A pattern cannot raise the limit. */
	m = uregex_matcher_new(0);
	re = compile("(*LIMIT_MATCH=999999999)(*LIMIT_HEAP=999999999)^(a|aa)+$", 0);
	assert_int_equal(uregex_match(m, re, s, strlen(s)), -1);
	uregex_free(re);
	uregex_matcher_free(m);
}

static void test_time_budget(void **state)
{
	(void)state;
	/* Each match stays under the match limit (about 130 000 steps), but
	 * together they spend the budget: the matcher stops. */
	struct uregex_matcher *m = uregex_matcher_new(20);
	struct uregex *re = compile("^(a+)+$", 0);
	char s[64];
	a_run(s, 16, "!");
	uint64_t t0 = now_mono_ns();
	int rc = 0, n = 0;
	for (; n < 1000000 && (rc = uregex_match(m, re, s, strlen(s))) == 0; n++)
		;
	assert_int_equal(rc, -1);
	assert_true(n > 1);
	assert_true(now_mono_ns() - t0 < 2000000000ull);
	expect_matcher_error(m, "time budget for patterns (20 ms)");
	uregex_free(re);
	uregex_matcher_free(m);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_honest_patterns),
	cmocka_unit_test(test_match_limit),
	cmocka_unit_test(test_time_budget))
