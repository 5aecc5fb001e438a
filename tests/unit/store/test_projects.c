/* Unit tests: server/store/projects on SQLite (metadb): the name rule
 * (1 to 128 bytes of well-formed UTF-8, what PostgreSQL's text holds),
 * creation and lookups, a project another connection created found
 * through the database, ids matched without regard to case. */
#include "testutil.h"

#include <ctype.h>

#include "buf.h"
#include "jsonw.h"
#include "server/store/projects.h"

static void test_name_check(void **state)
{
	(void)state;
	const char *good[] = { "a", "default", "it's \"q\" ;--", "ünï ✓ 名前", "\xF0\x9F\x94\xA5",
			       "\xF4\x8F\xBF\xBF" /* U+10FFFF */ };
	const char *bad[] = { "", "\xFF", "\xC0\xAF" /* overlong '/' */, "\xC1\xBF",
			      "\xE0\x80\xAF" /* overlong */, "\xED\xA0\x80" /* a surrogate */,
			      "\xF4\x90\x80\x80" /* above U+10FFFF */, "\xF5\x80\x80\x80",
			      "cut\xE2\x9C", "\x80", "a\xC3", "\xF0\x9F\x94" };
	struct buf err = { 0 };
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		buf_reset(&err);
		assert_int_equal(projects_name_check(good[i], &err), 0);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		buf_reset(&err);
		if (projects_name_check(bad[i], &err) != -1)
			fail_msg("accepted bad name %zu", i);
		assert_non_null(strstr(err.data, "project:"));
	}
	char longest[130];
	memset(longest, 'x', 129);
	longest[129] = 0;
	assert_int_equal(projects_name_check(longest, &err), -1);
	longest[128] = 0;
	assert_int_equal(projects_name_check(longest, &err), 0);
	buf_free(&err);
}

static void test_two_connections(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct buf err = { 0 };
	struct projects *a = NULL, *b = NULL;
	assert_int_equal(projects_open(dir, &a, &err), 0);
	assert_int_equal(projects_open(dir, &b, &err), 0);
	char ida[37], idb[37];
	assert_int_equal(projects_by_name(a, "x 'y'", false, ida, &err), 1);
	assert_int_equal(projects_by_name(a, "x 'y'", true, ida, &err), 0);
	/* b never saw them made: found through the database, same ids; made
	 * through b again, a's row, not a second one. */
	assert_int_equal(projects_by_name(b, "x 'y'", false, idb, &err), 0);
	assert_string_equal(ida, idb);
	char idz[37], idz2[37];
	assert_int_equal(projects_by_name(a, "z", true, idz, &err), 0);
	assert_int_equal(projects_by_name(b, "z", true, idz2, &err), 0);
	assert_string_equal(idz, idz2);
	char idw[37];
	assert_int_equal(projects_by_name(a, "w", true, idw, &err), 0);
	assert_true(projects_exists(b, idw));
	char upper[37];
	for (int i = 0; i < 37; i++)
		upper[i] = (char)toupper((unsigned char)ida[i]);
	assert_true(projects_exists(a, upper));
	assert_true(projects_exists(a, DEFAULT_PROJECT_ID));
	assert_false(projects_exists(a, "00000000-0000-0000-0000-00000000dead"));
	assert_false(projects_exists(a, "not a uuid"));
	struct buf list = { 0 };
	struct jsonw w;
	jsonw_init(&w, &list);
	projects_list_json(a, NULL, NULL, &w);
	assert_int_equal(jsonw_finish(&w), 0);
	assert_non_null(strstr(list.data, "\"name\":\"default\""));
	assert_non_null(strstr(list.data, "\"name\":\"x 'y'\""));
	buf_free(&list);
	projects_close(a);
	projects_close(b);
	/* Reopened: the same projects (and schema_version says 1). */
	assert_int_equal(projects_open(dir, &a, &err), 0);
	assert_int_equal(projects_by_name(a, "x 'y'", false, idb, &err), 0);
	assert_string_equal(ida, idb);
	projects_close(a);
	buf_free(&err);
	rm_temp_dir(dir);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_name_check),
	cmocka_unit_test(test_two_connections))
