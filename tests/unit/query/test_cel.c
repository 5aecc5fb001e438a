/* Unit tests: the CEL filter language (server/query/cel.c): comparisons, "in"
 * lists, matches() and the string functions in both call forms, the
 * limits, and error messages with their columns. */
#include "testutil.h"

#include <stdbool.h>
#include <time.h>

#include "server/query/cel.h"
#include "server/query/uregex.h"
#include "util.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif
#ifdef HAVE_ASAN
/* From the sanitizer runtime (<sanitizer/allocator_interface.h>, which not
 * every compiler installs). */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
					      void (*free_hook)(const volatile void *));
#endif

struct attrs {
	const char *kv[16];
};

static const char *lookup(void *ctx, const char *name)
{
	struct attrs *a = ctx;
	for (int i = 0; a->kv[i]; i += 2)
		if (strcmp(a->kv[i], name) == 0)
			return a->kv[i + 1];
	return NULL;
}

static struct attrs A = { { "host.name", "node-1", "host.arch", "amd64",
			    "process.executable.name", "python3", "thread.name", "gc-worker",
			    "k8s.pod.label[app]", "web", "host.matches", "m", "contains", "c",
			    NULL } };

static bool eval_in(const char *src, struct attrs *a)
{
	struct buf err = { 0 };
	struct cel_program *p = cel_compile(src, &err);
	if (!p)
		fail_msg("compile %s: %s", src, err.data);
	bool r = cel_eval(p, lookup, a);
	cel_free(p);
	buf_free(&err);
	return r;
}

/* Evaluates src, which must reach a bound: cel_check fails with a
 * message naming the pattern (needle) and the match limit. */
static bool eval_bounded(const char *src, struct attrs *a, const char *needle)
{
	struct buf err = { 0 };
	struct cel_program *p = cel_compile(src, &err);
	if (!p)
		fail_msg("compile %s: %s", src, err.data);
	assert_int_equal(cel_check(p, &err), 0);
	bool r = cel_eval(p, lookup, a);
	assert_int_equal(cel_check(p, &err), UREGEX_RC);
	if (!strstr(err.data, needle) || !strstr(err.data, "match limit"))
		fail_msg("error for %s: \"%s\" lacks \"%s\" or the limit", src, err.data, needle);
	cel_free(p);
	buf_free(&err);
	return r;
}

static bool eval(const char *src)
{
	return eval_in(src, &A);
}

/* The query fails to compile with a message containing needle. */
static void cel_error(const char *src, const char *needle)
{
	struct buf err = { 0 };
	struct cel_program *p = cel_compile(src, &err);
	if (p) {
		cel_free(p);
		fail_msg("%s compiled; expected an error with \"%s\"", src, needle);
	}
	if (!err.data || !strstr(err.data, needle))
		fail_msg("error for %s: \"%s\" lacks \"%s\"", src, err.data, needle);
	if (strncmp(err.data, "query: ", 7) != 0)
		fail_msg("error for %s: \"%s\" does not start with query:", src, err.data);
	buf_free(&err);
}

/* A query and what it evaluates to over A. */
struct eval_case {
	const char *src;
	bool want;
};

static void check_evals(const struct eval_case *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (eval(c[i].src) != c[i].want)
			fail_msg("%s: expected %s", c[i].src, c[i].want ? "true" : "false");
}

/* A query that fails to compile, and what its message contains. */
struct error_case {
	const char *src, *needle;
};

static void check_errors(const struct error_case *c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cel_error(c[i].src, c[i].needle);
}

static void test_basics(void **state)
{
	(void)state;
	{
		static const struct eval_case cases[] = {
			{ "host.name == \"node-1\"", true },
			{ "host.name == 'node-2'", false },
			{ "host.name == \"node-2\" || host.name == \"node-1\"", true },
			{ "host.name == \"node-1\" && process.executable.name == \"java\"", false },
			{ "!(host.name != \"node-1\")", true },
			{ "k8s.namespace.name != \"staging\"", true }, /* absent = "" */
			{ "k8s.namespace.name == ''", true },
			{ "k8s.pod.label[\"app\"] == \"web\"", true },
			{ "\"python3\" == process.executable.name", true },
			{ "\"a\" == 'a'", true },
			{ "host.name == host.name", true },
			{ "true", true },
			{ "false", false },
			{ "(host.name == \"x\" || (true && !false))", true },
			{ "thread.name == \"a\\\"b\" || true", true },
		};
		check_evals(cases, ARRAY_SIZE(cases));
	}
	struct attrs ws = { { "thread.name", "a\tb\nc\rd'\\", NULL } };
	assert_true(eval_in("thread.name == 'a\\tb\\nc\\rd\\'\\\\'", &ws));
	assert_true(eval_in("thread.name.contains(\"\\n\")", &ws));
	assert_true(eval("true == ''")); /* "true" before == is an (absent) attribute */
	assert_false(eval("false != \"\""));
	cel_free(NULL);
	/* Names that start like functions or keywords are still attributes. */
	{
		static const struct eval_case cases[] = {
			{ "host.matches == \"m\"", true },
			{ "contains == \"c\"", true },
			{ "host.name.matchesx == \"\"", true },
			{ "index == \"\" && inx == ''", true },
		};
		check_evals(cases, ARRAY_SIZE(cases));
	}
	{
		static const struct error_case cases[] = {
			{ "host.name ==", "column 13" },
			{ "host.name = \"x\"", "column 11: expected ==, !=" },
			{ "host.name == \"x", "column 16: unterminated" },
			{ "(host.name == \"x\"", "column 18: expected ')'" },
			{ "host.name == \"x\" junk", "column 18: unexpected text" },
			{ "", "column 1: expected an attribute or a string, found the end of the query" },
			{ "host.name == \"\\q\"", "column 16: unknown escape" },
			{ "host.name == \"a\nb\"", "newline" },
			{ "k8s.pod.label[app] == \"x\"", "column 15" },
		};
		check_errors(cases, ARRAY_SIZE(cases));
	}
}

static void test_in(void **state)
{
	(void)state;
	{
		static const struct eval_case cases[] = {
			{ "host.name in [\"node-2\", \"node-1\"]", true },
			{ "host.name in ['node-1']", true },
			{ "host.name in [\"node-2\", \"node-3\"]", false },
			{ "host.name in []", false },
			{ "host.name in [ ]", false },
			{ "host.name in [\"a\", \"node-1\",]", true }, /* a trailing comma */
			{ "host.name in [\"node-1\", \"node-1\"]", true },
			{ "host.name in[\"node-1\"]", true },
			{ "\"x\" in [\"y\", \"x\"]", true },
			{ "\"x\" in [\"y\"]", false },
			{ "k8s.namespace.name in [\"\", \"prod\"]", true }, /* absent = "" */
			{ "k8s.namespace.name in [\"prod\"]", false },
			{ "k8s.pod.label[\"app\"] in [\"api\", \"web\"]", true },
			/* Negation through unary ! and combinations. */
			{ "!(host.name in [\"node-1\"])", false },
			{ "!(host.name in [\"node-2\"])", true },
			{ "!!(host.name in [\"node-1\"])", true },
			{ "host.name in [\"node-1\"] && host.arch in [\"amd64\", \"arm64\"]", true },
			{ "host.name in [\"x\"] || process.executable.name in [\"python3\"]", true },
			{ "host.name in [\"x\"] || !(process.executable.name in [\"python3\"])", false },
		};
		check_evals(cases, ARRAY_SIZE(cases));
	}

	/* A long list: every member is found and nothing else. */
	struct buf src = { 0 };
	buf_puts(&src, "host.name in [");
	for (int i = 0; i < 500; i++)
		buf_printf(&src, "%s'%x'", i ? "," : "", i * 7);
	buf_puts(&src, "]");
	assert_true(src.len <= CEL_MAX_SOURCE);
	struct buf err = { 0 };
	struct cel_program *p = cel_compile(src.data, &err);
	if (!p)
		fail_msg("%s", err.data);
	for (int i = 0; i < 500 * 7 + 3; i++) {
		char v[16];
		snprintf(v, sizeof(v), "%x", i);
		struct attrs a = { { "host.name", v, NULL } };
		assert_int_equal(cel_eval(p, lookup, &a), i % 7 == 0 && i < 500 * 7);
	}
	cel_free(p);
	buf_free(&err);
	/* CEL_MAX_LIST strings compile; one more is named as too many. */
	buf_reset(&src);
	buf_puts(&src, "host.name in [");
	for (int i = 0; i < CEL_MAX_LIST; i++)
		buf_puts(&src, "'',");
	buf_puts(&src, "'node-1']");
	assert_true(src.len <= CEL_MAX_SOURCE);
	cel_error(src.data, "more than 1024 strings");
	char want[64];
	snprintf(want, sizeof(want), "column %zu: ", src.len - strlen("'node-1']") + 1);
	cel_error(src.data, want);
	src.len -= strlen("'node-1']");
	buf_puts(&src, "]");
	assert_false(eval(src.data));
	src.data[src.len - 2] = ']'; /* drop the trailing comma */
	src.data[--src.len] = '\0';
	assert_false(eval(src.data));
	buf_free(&src);

	{
		static const struct error_case cases[] = {
			{ "host.name in \"a\"", "column 14: expected '[' after in" },
			{ "host.name in", "column 13: expected '['" },
			{ "host.name in [host.arch]", "column 15: expected a string literal in the list" },
			{ "host.name in [\"a\" \"b\"]", "column 19: expected ',' or ']'" },
			{ "host.name in [\"a\",", "column 19: expected a string literal" },
			{ "host.name in [\"a\"", "column 18: expected ',' or ']'" },
			{ "host.name in [,]", "column 15: expected a string literal" },
			{ "host.name in [\"a\",,]", "column 19" },
			{ "host.name in [\"a\\q\"]", "column 18: unknown escape" },
			{ "host.name in [\"a\"] == \"b\"", "column 20: unexpected text" },
			{ "in [\"a\"]", "column 9: expected ==, !=" }, /* the attribute in["a"] */
		};
		check_errors(cases, ARRAY_SIZE(cases));
	}
}

static void test_matches(void **state)
{
	(void)state;
	/* Function and receiver forms; the search is not anchored. */
	{
		static const struct eval_case cases[] = {
			{ "matches(host.name, \"node\")", true },
			{ "matches(host.name, \"^node-[0-9]+$\")", true },
			{ "matches(host.name, 'de-1')", true },
			{ "matches(host.name, \"^de\")", false },
			{ "host.name.matches(\"^node-\\\\d$\")", true }, /* "\\d" in the query */
			{ "host.name.matches (\"1$\")", true },
			{ "host.name.matches(\"2$\")", false },
			{ "k8s.pod.label[\"app\"].matches(\"^w.b$\")", true },
			{ "\"abc\".matches(\"b\")", true },
			{ "matches(\"abc\", \"^a\")", true },
			{ "matches(k8s.namespace.name, \"^$\")", true }, /* absent = "" */
			{ "matches(k8s.namespace.name, \".\")", false },
			{ "matches(host.name, \"\")", true },
			{ "matches(process.executable.name, \"(?i)PYTHON\")", true },
			{ "!matches(host.name, \"^web\")", true },
			{ "!host.name.matches(\"node\")", false },
			{ "!(host.name.matches(\"x\") || thread.name.matches(\"^java\"))", true },
			{ "host.name in [\"node-1\"] && thread.name.matches(\"^gc-\") || false", true },
			{ "(matches(host.name, \"1\"))", true },
			{ " matches ( host.name ,\t'^n' ) ", true },
			/* A pattern cannot raise the match limit. */
			{ "matches(host.name, \"(*LIMIT_MATCH=99999999)node\")", true },
		};
		check_evals(cases, ARRAY_SIZE(cases));
	}
	/* Patterns are UTF-8; values that are not still match in their valid parts. */
	struct attrs u = { { "thread.name", "\xc3\xa4\xc3\xb6\xc3\xbc", "process.executable.name",
			     "ab\xff" "cd", NULL } };
	assert_true(eval_in("matches(thread.name, \"^...$\")", &u));
	assert_true(eval_in("matches(thread.name, \"\xc3\xb6\")", &u));
	assert_true(eval_in("matches(process.executable.name, \"^ab\")", &u));
	assert_true(eval_in("matches(process.executable.name, \"cd$\")", &u));
	cel_error("matches(thread.name, \"\xff\")", "column 22: bad regular expression");

	/* Catastrophic backtracking stops at the match limit, reads as false,
	 * and cel_check reports it (the query answers 422) naming the pattern
	 * and the limit. */
	struct attrs slow = { { "host.name", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", NULL } };
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_false(eval_bounded("matches(host.name, \"^(a+)+$\")", &slow, "^(a+)+$"));
	assert_true(eval_bounded("!matches(host.name, \"^(a|aa)+$\")", &slow, "^(a|aa)+$"));
	assert_false(eval_bounded("matches(host.name, \"(*LIMIT_MATCH=999999999)^(a+)+$\")", &slow,
				  "LIMIT_MATCH"));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 10);
	struct attrs fast = { { "host.name", "aaaa", NULL } };
	assert_true(eval_in("matches(host.name, \"^(a+)+$\")", &fast));

	/* A bad pattern names the column of its literal and PCRE2's message. */
	{
		static const struct error_case cases[] = {
			{ "matches(host.name, \"(\")", "column 20: bad regular expression: missing closing parenthesis" },
			{ "host.name.matches('[a')", "column 19: bad regular expression: missing terminating ]" },
			{ "host.name == \"x\" || host.name.matches(\"a{2,1}\")", "column 39: bad regular expression" },
			{ "matches(host.name, \"(\")", "at offset 1 of the pattern" },
			{ "matches(host.name, \"a\\\\C\")", "column 20: bad regular expression: using \\C is disabled" },
			{ "matches(host.name, host.arch)", "column 20: the pattern of matches() must be a string literal" },
			{ "host.name.matches(host.arch)", "column 19: the pattern of matches() must be a string literal" },
			{ "matches(host.name)", "column 18: expected ','" },
			{ "matches(host.name, \"a\"", "column 23: expected ')' after the argument of matches()" },
			{ "matches(host.name, \"a\", \"b\")", "column 23: expected ')'" },
			{ "host.name.matches(\"a\"", "column 22: expected ')'" },
			{ "host.name.matches(\"a\") == true", "column 24: unexpected text" },
			{ "matches(host.name, \"a", "column 22: unterminated string literal" },
			{ "matches(", "column 9: expected an attribute or a string, found the end" },
		};
		check_errors(cases, ARRAY_SIZE(cases));
	}

	/* Too many regular expressions: the one over the limit is named. */
	struct buf src = { 0 };
	for (int i = 0; i < CEL_MAX_REGEX; i++)
		buf_printf(&src, "%smatches(a, 'x%d')", i ? " || " : "", i);
	assert_false(eval(src.data));
	size_t col = src.len + 1 + strlen(" || matches(a, ");
	buf_puts(&src, " || matches(a, 'y')");
	char want[64];
	snprintf(want, sizeof(want), "column %zu: more than 32 regular expressions", col);
	cel_error(src.data, want);
	buf_free(&src);
}

static void test_string_functions(void **state)
{
	(void)state;
	{
		static const struct eval_case cases[] = {
			{ "startsWith(host.name, \"node\")", true },
			{ "host.name.startsWith(\"node-\")", true },
			{ "host.name.startsWith(\"node-1\")", true },
			{ "host.name.startsWith(\"node-12\")", false },
			{ "startsWith(host.name, \"ode\")", false },
			{ "startsWith(host.name, \"\")", true },
			{ "endsWith(host.name, \"-1\")", true },
			{ "host.name.endsWith(\"node-1\")", true },
			{ "host.name.endsWith(\"xnode-1\")", false },
			{ "endsWith(host.name, \"node\")", false },
			{ "contains(thread.name, \"-wo\")", true },
			{ "thread.name.contains(\"gc\")", true },
			{ "thread.name.contains(\"\")", true },
			{ "thread.name.contains(\"GC\")", false },
			{ "k8s.pod.label[\"app\"].contains(\"e\")", true },
			/* Attributes or strings on either side; absent attributes are "". */
			{ "\"node-1.example\".startsWith(host.name)", true },
			{ "startsWith(\"node-1.example\", host.name)", true },
			{ "host.name.endsWith(k8s.namespace.name)", true },
			{ "startsWith(k8s.namespace.name, \"\")", true },
			{ "contains(k8s.namespace.name, \"a\")", false },
			{ "host.name.contains(host.name)", true },
			{ "\"abc\".endsWith('bc')", true },
			/* Combined with everything else. */
			{ "!host.name.startsWith(\"web\") && (host.arch in [\"amd64\"] || false)", true },
		};
		check_evals(cases, ARRAY_SIZE(cases));
	}
	assert_true(eval("startsWith(host.name, 'n') && endsWith(host.name, '1') && "
			 "contains(host.name, '-') && matches(host.name, 'e')"));
	assert_false(eval("!(startsWith(host.name, 'n') || endsWith(host.name, 'x'))"));

	{
		static const struct error_case cases[] = {
			{ "size(host.name)", "column 1: unknown function 'size'" },
			{ "host.name == \"x\" && exists (a)", "column 21: unknown function 'exists'" },
			{ "host.name.size()", "column 11: unknown method 'size'" },
			{ "k8s.pod.label[\"a\"].bogus(\"x\")", "column 20: unknown method 'bogus'" },
			{ "host.name.", "column 11: expected a method name" },
			{ "host.name.startsWith", "column 21: expected ==, !=" },
			{ "\"a\".startsWith", "column 15: expected '(' after startsWith" },
			{ "\"a\".1x(\"b\")", "column 5: expected a method name" },
			{ "startsWith(host.name)", "column 21: expected ','" },
			{ "startsWith(host.name, )", "column 23: expected an attribute name, a string" },
			{ "endsWith(host.name, \"a\"", "column 24: expected ')' after the argument of endsWith()" },
			{ "host.name.contains(\"a\", \"b\")", "column 23: expected ')'" },
			{ "host.name.contains()", "column 20: expected an attribute name" },
			{ "host.name == startsWith(a, \"b\")", "column 14: a function call is a condition" },
			{ "startsWith(contains(a, \"b\"), \"c\")", "column 12: a function call is a condition" },
			{ "host.name.startsWith(\"a\").contains(\"b\")", "column 26: unexpected text" },
		};
		check_errors(cases, ARRAY_SIZE(cases));
	}
}

static void test_limits(void **state)
{
	(void)state;
	char *src = xmalloc(CEL_MAX_SOURCE + 2);
	/* Exactly the limit compiles; one byte more does not. */
	memset(src, ' ', CEL_MAX_SOURCE);
	memcpy(src, "true", 4);
	src[CEL_MAX_SOURCE] = '\0';
	assert_true(eval(src));
	src[CEL_MAX_SOURCE] = ' ';
	src[CEL_MAX_SOURCE + 1] = '\0';
	cel_error(src, "longer than 4096 bytes");
	free(src);

	char deep[400];
	memset(deep, '(', 200);
	strcpy(deep + 200, "true");
	cel_error(deep, "nested");
	char many[300];
	memset(many, '!', 100);
	strcpy(many + 100, "true");
	cel_error(many, "nested");
	memset(many, '!', 100);
	strcpy(many + 100, "(host.name in ['a'])");
	cel_error(many, "nested");
	/* Depth within the limit is fine. */
	char ok[200];
	memset(ok, '(', 30);
	strcpy(ok + 30, "host.name in ['node-1']");
	memset(ok + 30 + strlen("host.name in ['node-1']"), ')', 30);
	ok[60 + strlen("host.name in ['node-1']")] = '\0';
	assert_true(eval(ok));
}

#ifdef HAVE_ASAN
static volatile int counting;
static volatile long allocations;

static void on_malloc(const volatile void *ptr, size_t size)
{
	(void)ptr;
	(void)size;
	if (counting)
		allocations++;
}

static void on_free(const volatile void *ptr)
{
	(void)ptr;
}
#endif

/* Evaluation does not allocate (after the first match has sized PCRE2's
 * backtracking frames). */
static void test_eval_does_not_allocate(void **state)
{
	(void)state;
#ifdef HAVE_ASAN
	const char *src = "host.name in ['a', 'node-1'] && matches(thread.name, '^gc-(w|x)+o') && "
			  "host.name.startsWith('n') && !endsWith(host.arch, '64x') && "
			  "contains(k8s.pod.label[\"app\"], 'e') && host.name != 'b'";
	struct buf err = { 0 };
	struct cel_program *p = cel_compile(src, &err);
	if (!p)
		fail_msg("%s", err.data);
	assert_true(cel_eval(p, lookup, &A));
	assert_true(__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) != 0);
	counting = 1;
	bool all = true;
	for (int i = 0; i < 1000; i++)
		all = cel_eval(p, lookup, &A) && all;
	counting = 0;
	assert_true(all);
	assert_int_equal(allocations, 0);
	cel_free(p);
	buf_free(&err);
#else
	skip();
#endif
}

/* <, <=, >, >= and == / != with a number literal compare numerically;
 * a value that is not a number compares as false; a literal or a known
 * text attribute that cannot be a number is a type error at compile time. */
static void test_numeric(void **state)
{
	(void)state;
	struct attrs n = { { "process.pid", "4242", "host.name", "node-1", "k8s.pod.uid", "abc",
			     "weight", "-1.5e1", "big", "18446744073709551616", NULL } };
	assert_true(eval_in("process.pid > 100", &n));
	assert_true(eval_in("process.pid >= 4242", &n));
	assert_false(eval_in("process.pid > 4242", &n));
	assert_true(eval_in("process.pid <= 4242 && process.pid < 5000", &n));
	assert_false(eval_in("process.pid < 100", &n));
	assert_true(eval_in("100 < process.pid", &n));
	assert_true(eval_in("process.pid > \"999\"", &n)); /* a numeric string literal */
	assert_true(eval_in("process.pid == 4242 && process.pid != 7", &n));
	assert_true(eval_in("process.pid == 4242.0", &n));
	assert_false(eval_in("process.pid == \"4242.0\"", &n)); /* strings: bytes */
	assert_true(eval_in("weight < -10 && weight > -16", &n));
	assert_true(eval_in("big > 1e19", &n));
	assert_true(eval_in("1 < 2 && !(2 <= 1)", &n));
	/* Not a number at run time (text, or absent): every comparison is false. */
	assert_false(eval_in("k8s.pod.uid > 0", &n));
	assert_false(eval_in("k8s.pod.uid <= 0", &n));
	assert_false(eval_in("k8s.pod.uid != 0", &n));
	assert_false(eval_in("missing.attr >= 0", &n));
	assert_true(eval_in("!(missing.attr >= 0)", &n));
	assert_true(eval_in("true||process.pid>1", &n));
	/* Type errors known at compile time, with their column. */
	{
		static const struct error_case cases[] = {
			{ "process.pid > \"abc\"", "column 15: type error: > compares numbers, and \"abc\" is not a number" },
			{ "host.name >= 3", "column 1: type error: >= compares numbers, and host.name is a string attribute" },
			{ "process.executable.name == 1", "process.executable.name is a string attribute" },
			{ "startsWith(host.name, 5)", "column 23: type error: startsWith takes a string, not the number 5" },
			{ "5.contains(\"x\")", "column 1: a malformed number" },
			{ "7 in [\"7\"]", "expected ==, !=, <, <=, > or >= after the number" },
			{ "process.pid > 12abc", "column 15: a malformed number" },
			{ "process.pid > 1e999", "column 15: the number 1e999 is out of range" },
			{ "process.pid >", "column 14: expected an attribute or a string, found the end" },
			{ "process.pid < > 3", "column 15: expected an attribute name, a string or a number" },
		};
		check_errors(cases, ARRAY_SIZE(cases));
	}
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_basics),
	cmocka_unit_test(test_in),
	cmocka_unit_test(test_matches),
	cmocka_unit_test(test_string_functions),
	cmocka_unit_test(test_limits),
	cmocka_unit_test(test_numeric),
	cmocka_unit_test(test_eval_does_not_allocate))
