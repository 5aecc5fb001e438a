/* Unit tests: CEL filters as SQL over label_sets (server/query/cel_sql.c).
 * Answers compared with cel_eval on real ClickHouse servers in
 * tests/integration/test_clickhouse_celsql.py; here, the exact text and
 * the hostile literals under ASan. */

#include "testutil.h"

#include "server/query/cel.h"
#include "server/query/cel_sql.h"

static int sql_of(const char *src, struct buf *out, struct buf *err)
{
	struct cel_program *p = cel_compile(src, err);
	assert_non_null(p);
	int rc = cel_sql(p, "keys", "values", out, err);
	cel_free(p);
	return rc;
}

static void test_forms(void **state)
{
	(void)state;
	static const struct {
		const char *cel, *sql;
	} cases[] = {
		{ "host.name == \"a'b\"", "(values[indexOf(keys, 'host.name')] = 'a\\'b')" },
		{ "!(x != \"\\\\\")", "(NOT (values[indexOf(keys, 'x')] != '\\\\'))" },
		{ "x in []", "0" },
		{ "x in [\"b\", \"a\"]", "(values[indexOf(keys, 'x')] IN ('a', 'b'))" },
		{ "x.contains(\"\\n\") || true", "((position(values[indexOf(keys, 'x')], '\\x0a') > 0) OR 1)" },
		{ "k8s.pod.label[\"app\"].startsWith(y)",
		  "startsWith(values[indexOf(keys, 'k8s.pod.label[app]')], values[indexOf(keys, 'y')])" },
		{ "x.matches(\"^a$\")", "match(values[indexOf(keys, 'x')], '(?-s:^a(?:\\\\n?\\\\z))')" },
		{ "x.matches(\"[$]\")", "match(values[indexOf(keys, 'x')], '(?-s:[$])')" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct buf out = { 0 }, err = { 0 };
		assert_int_equal(sql_of(cases[i].cel, &out, &err), 0);
		assert_string_equal(out.data, cases[i].sql);
		buf_free(&out);
		buf_free(&err);
	}
}

static void test_numbers_false_when_not_numbers(void **state)
{
	(void)state;
	struct buf out = { 0 }, err = { 0 };
	assert_int_equal(sql_of("n > 3", &out, &err), 0);
	assert_non_null(strstr(out.data, "match(values[indexOf(keys, 'n')], '^[+-]?[0-9]+"));
	assert_non_null(strstr(out.data, "AND 1 AND"));
	assert_non_null(strstr(out.data, "> toFloat64(3)"));
	buf_free(&out);
	buf_free(&err);
}

static void test_hostile_literals(void **state)
{
	(void)state;
	/* the longest source: one literal of quotes and backslashes */
	struct buf src = { 0 }, out = { 0 }, err = { 0 };
	buf_puts(&src, "x == \"");
	while (src.len < CEL_MAX_SOURCE - 8)
		buf_puts(&src, "'\\\\");
	buf_puts(&src, "\"");
	assert_int_equal(sql_of(src.data, &out, &err), 0);
	/* every quote escaped: no unescaped ' between the literal's ends */
	const char *lit = strstr(out.data, "= '") + 3;
	const char *end = out.data + out.len - 2;
	assert_true(*end == '\'');
	for (const char *p = lit; p < end; p++) {
		if (*p == '\\') {
			p++;
			continue;
		}
		assert_true(*p != '\'');
	}
	buf_free(&src);
	buf_free(&out);
	buf_free(&err);
}

static void test_unsupported_named(void **state)
{
	(void)state;
	const char *forms[] = { "x.matches(\"(?=a)\")", "x.matches(\"(a)\\\\1\")", "x.matches(\"a*+\")",
				"x.matches(\"(?m)^a\")", "y == \"1\" && x.matches(\"\\\\K\")", NULL };
	for (int i = 0; forms[i]; i++) {
		struct buf out = { 0 }, err = { 0 };
		assert_int_equal(sql_of(forms[i], &out, &err), CEL_SQL_UNSUPPORTED);
		assert_int_equal(out.len, 0);
		assert_non_null(strstr(err.data, "no ClickHouse equivalent"));
		buf_free(&out);
		buf_free(&err);
	}
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_forms),
	cmocka_unit_test(test_numbers_false_when_not_numbers),
	cmocka_unit_test(test_hostile_literals),
	cmocka_unit_test(test_unsupported_named))
