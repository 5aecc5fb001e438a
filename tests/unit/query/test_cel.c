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

static void test_basics(void **state)
{
	(void)state;
	assert_true(eval("host.name == \"node-1\""));
	assert_false(eval("host.name == 'node-2'"));
	assert_true(eval("host.name == \"node-2\" || host.name == \"node-1\""));
	assert_false(eval("host.name == \"node-1\" && process.executable.name == \"java\""));
	assert_true(eval("!(host.name != \"node-1\")"));
	assert_true(eval("k8s.namespace.name != \"staging\"")); /* absent = "" */
	assert_true(eval("k8s.namespace.name == ''"));
	assert_true(eval("k8s.pod.label[\"app\"] == \"web\""));
	assert_true(eval("\"python3\" == process.executable.name"));
	assert_true(eval("\"a\" == 'a'"));
	assert_true(eval("host.name == host.name"));
	assert_true(eval("true"));
	assert_false(eval("false"));
	assert_true(eval("(host.name == \"x\" || (true && !false))"));
	assert_true(eval("thread.name == \"a\\\"b\" || true"));
	struct attrs ws = { { "thread.name", "a\tb\nc\rd'\\", NULL } };
	assert_true(eval_in("thread.name == 'a\\tb\\nc\\rd\\'\\\\'", &ws));
	assert_true(eval_in("thread.name.contains(\"\\n\")", &ws));
	assert_true(eval("true == ''")); /* "true" before == is an (absent) attribute */
	assert_false(eval("false != \"\""));
	cel_free(NULL);
	/* Names that start like functions or keywords are still attributes. */
	assert_true(eval("host.matches == \"m\""));
	assert_true(eval("contains == \"c\""));
	assert_true(eval("host.name.matchesx == \"\""));
	assert_true(eval("index == \"\" && inx == ''"));
	cel_error("host.name ==", "column 13");
	cel_error("host.name = \"x\"", "column 11: expected ==, !=");
	cel_error("host.name == \"x", "column 16: unterminated");
	cel_error("(host.name == \"x\"", "column 18: expected ')'");
	cel_error("host.name == \"x\" junk", "column 18: unexpected text");
	cel_error("", "column 1: expected an attribute or a string, found the end of the query");
	cel_error("host.name == \"\\q\"", "column 16: unknown escape");
	cel_error("host.name == \"a\nb\"", "newline");
	cel_error("k8s.pod.label[app] == \"x\"", "column 15");
}

static void test_in(void **state)
{
	(void)state;
	assert_true(eval("host.name in [\"node-2\", \"node-1\"]"));
	assert_true(eval("host.name in ['node-1']"));
	assert_false(eval("host.name in [\"node-2\", \"node-3\"]"));
	assert_false(eval("host.name in []"));
	assert_false(eval("host.name in [ ]"));
	assert_true(eval("host.name in [\"a\", \"node-1\",]")); /* a trailing comma */
	assert_true(eval("host.name in [\"node-1\", \"node-1\"]"));
	assert_true(eval("host.name in[\"node-1\"]"));
	assert_true(eval("\"x\" in [\"y\", \"x\"]"));
	assert_false(eval("\"x\" in [\"y\"]"));
	assert_true(eval("k8s.namespace.name in [\"\", \"prod\"]")); /* absent = "" */
	assert_false(eval("k8s.namespace.name in [\"prod\"]"));
	assert_true(eval("k8s.pod.label[\"app\"] in [\"api\", \"web\"]"));
	/* Negation through unary ! and combinations. */
	assert_false(eval("!(host.name in [\"node-1\"])"));
	assert_true(eval("!(host.name in [\"node-2\"])"));
	assert_true(eval("!!(host.name in [\"node-1\"])"));
	assert_true(eval("host.name in [\"node-1\"] && host.arch in [\"amd64\", \"arm64\"]"));
	assert_true(eval("host.name in [\"x\"] || process.executable.name in [\"python3\"]"));
	assert_false(eval("host.name in [\"x\"] || !(process.executable.name in [\"python3\"])"));

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

	cel_error("host.name in \"a\"", "column 14: expected '[' after in");
	cel_error("host.name in", "column 13: expected '['");
	cel_error("host.name in [host.arch]", "column 15: expected a string literal in the list");
	cel_error("host.name in [\"a\" \"b\"]", "column 19: expected ',' or ']'");
	cel_error("host.name in [\"a\",", "column 19: expected a string literal");
	cel_error("host.name in [\"a\"", "column 18: expected ',' or ']'");
	cel_error("host.name in [,]", "column 15: expected a string literal");
	cel_error("host.name in [\"a\",,]", "column 19");
	cel_error("host.name in [\"a\\q\"]", "column 18: unknown escape");
	cel_error("host.name in [\"a\"] == \"b\"", "column 20: unexpected text");
	cel_error("in [\"a\"]", "column 9: expected ==, !="); /* the attribute in["a"] */
}

static void test_matches(void **state)
{
	(void)state;
	/* Function and receiver forms; the search is not anchored. */
	assert_true(eval("matches(host.name, \"node\")"));
	assert_true(eval("matches(host.name, \"^node-[0-9]+$\")"));
	assert_true(eval("matches(host.name, 'de-1')"));
	assert_false(eval("matches(host.name, \"^de\")"));
	assert_true(eval("host.name.matches(\"^node-\\\\d$\")")); /* "\\d" in the query */
	assert_true(eval("host.name.matches (\"1$\")"));
	assert_false(eval("host.name.matches(\"2$\")"));
	assert_true(eval("k8s.pod.label[\"app\"].matches(\"^w.b$\")"));
	assert_true(eval("\"abc\".matches(\"b\")"));
	assert_true(eval("matches(\"abc\", \"^a\")"));
	assert_true(eval("matches(k8s.namespace.name, \"^$\")")); /* absent = "" */
	assert_false(eval("matches(k8s.namespace.name, \".\")"));
	assert_true(eval("matches(host.name, \"\")"));
	assert_true(eval("matches(process.executable.name, \"(?i)PYTHON\")"));
	assert_true(eval("!matches(host.name, \"^web\")"));
	assert_false(eval("!host.name.matches(\"node\")"));
	assert_true(eval("!(host.name.matches(\"x\") || thread.name.matches(\"^java\"))"));
	assert_true(eval("host.name in [\"node-1\"] && thread.name.matches(\"^gc-\") || false"));
	assert_true(eval("(matches(host.name, \"1\"))"));
	assert_true(eval(" matches ( host.name ,\t'^n' ) "));
	/* A pattern cannot raise the match limit. */
	assert_true(eval("matches(host.name, \"(*LIMIT_MATCH=99999999)node\")"));
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
	cel_error("matches(host.name, \"(\")", "column 20: bad regular expression: missing closing parenthesis");
	cel_error("host.name.matches('[a')", "column 19: bad regular expression: missing terminating ]");
	cel_error("host.name == \"x\" || host.name.matches(\"a{2,1}\")", "column 39: bad regular expression");
	cel_error("matches(host.name, \"(\")", "at offset 1 of the pattern");
	cel_error("matches(host.name, \"a\\\\C\")", "column 20: bad regular expression: using \\C is disabled");
	cel_error("matches(host.name, host.arch)", "column 20: the pattern of matches() must be a string literal");
	cel_error("host.name.matches(host.arch)", "column 19: the pattern of matches() must be a string literal");
	cel_error("matches(host.name)", "column 18: expected ','");
	cel_error("matches(host.name, \"a\"", "column 23: expected ')' after the argument of matches()");
	cel_error("matches(host.name, \"a\", \"b\")", "column 23: expected ')'");
	cel_error("host.name.matches(\"a\"", "column 22: expected ')'");
	cel_error("host.name.matches(\"a\") == true", "column 24: unexpected text");
	cel_error("matches(host.name, \"a", "column 22: unterminated string literal");
	cel_error("matches(", "column 9: expected an attribute or a string, found the end");

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
	assert_true(eval("startsWith(host.name, \"node\")"));
	assert_true(eval("host.name.startsWith(\"node-\")"));
	assert_true(eval("host.name.startsWith(\"node-1\")"));
	assert_false(eval("host.name.startsWith(\"node-12\")"));
	assert_false(eval("startsWith(host.name, \"ode\")"));
	assert_true(eval("startsWith(host.name, \"\")"));
	assert_true(eval("endsWith(host.name, \"-1\")"));
	assert_true(eval("host.name.endsWith(\"node-1\")"));
	assert_false(eval("host.name.endsWith(\"xnode-1\")"));
	assert_false(eval("endsWith(host.name, \"node\")"));
	assert_true(eval("contains(thread.name, \"-wo\")"));
	assert_true(eval("thread.name.contains(\"gc\")"));
	assert_true(eval("thread.name.contains(\"\")"));
	assert_false(eval("thread.name.contains(\"GC\")"));
	assert_true(eval("k8s.pod.label[\"app\"].contains(\"e\")"));
	/* Attributes or strings on either side; absent attributes are "". */
	assert_true(eval("\"node-1.example\".startsWith(host.name)"));
	assert_true(eval("startsWith(\"node-1.example\", host.name)"));
	assert_true(eval("host.name.endsWith(k8s.namespace.name)"));
	assert_true(eval("startsWith(k8s.namespace.name, \"\")"));
	assert_false(eval("contains(k8s.namespace.name, \"a\")"));
	assert_true(eval("host.name.contains(host.name)"));
	assert_true(eval("\"abc\".endsWith('bc')"));
	/* Combined with everything else. */
	assert_true(eval("!host.name.startsWith(\"web\") && (host.arch in [\"amd64\"] || false)"));
	assert_true(eval("startsWith(host.name, 'n') && endsWith(host.name, '1') && "
			 "contains(host.name, '-') && matches(host.name, 'e')"));
	assert_false(eval("!(startsWith(host.name, 'n') || endsWith(host.name, 'x'))"));

	cel_error("size(host.name)", "column 1: unknown function 'size'");
	cel_error("host.name == \"x\" && exists (a)", "column 21: unknown function 'exists'");
	cel_error("host.name.size()", "column 11: unknown method 'size'");
	cel_error("k8s.pod.label[\"a\"].bogus(\"x\")", "column 20: unknown method 'bogus'");
	cel_error("host.name.", "column 11: expected a method name");
	cel_error("host.name.startsWith", "column 21: expected ==, !=");
	cel_error("\"a\".startsWith", "column 15: expected '(' after startsWith");
	cel_error("\"a\".1x(\"b\")", "column 5: expected a method name");
	cel_error("startsWith(host.name)", "column 21: expected ','");
	cel_error("startsWith(host.name, )", "column 23: expected an attribute name, a string");
	cel_error("endsWith(host.name, \"a\"", "column 24: expected ')' after the argument of endsWith()");
	cel_error("host.name.contains(\"a\", \"b\")", "column 23: expected ')'");
	cel_error("host.name.contains()", "column 20: expected an attribute name");
	cel_error("host.name == startsWith(a, \"b\")", "column 14: a function call is a condition");
	cel_error("startsWith(contains(a, \"b\"), \"c\")", "column 12: a function call is a condition");
	cel_error("host.name.startsWith(\"a\").contains(\"b\")", "column 26: unexpected text");
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
	cel_error("process.pid > \"abc\"", "column 15: type error: > compares numbers, and \"abc\" is not a number");
	cel_error("host.name >= 3", "column 1: type error: >= compares numbers, and host.name is a string attribute");
	cel_error("process.executable.name == 1", "process.executable.name is a string attribute");
	cel_error("startsWith(host.name, 5)", "column 23: type error: startsWith takes a string, not the number 5");
	cel_error("5.contains(\"x\")", "column 1: a malformed number");
	cel_error("7 in [\"7\"]", "expected ==, !=, <, <=, > or >= after the number");
	cel_error("process.pid > 12abc", "column 15: a malformed number");
	cel_error("process.pid > 1e999", "column 15: the number 1e999 is out of range");
	cel_error("process.pid >", "column 14: expected an attribute or a string, found the end");
	cel_error("process.pid < > 3", "column 15: expected an attribute name, a string or a number");
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_basics),
	cmocka_unit_test(test_in),
	cmocka_unit_test(test_matches),
	cmocka_unit_test(test_string_functions),
	cmocka_unit_test(test_limits),
	cmocka_unit_test(test_numeric),
	cmocka_unit_test(test_eval_does_not_allocate))
