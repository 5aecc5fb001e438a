/* testutil.h - what every ember unit test includes: cmocka and helpers.
 * Unit tests are built with AddressSanitizer and UndefinedBehaviorSanitizer
 * and run by scripts/test.sh (TAP output). */
#ifndef EMBER_TESTUTIL_H
#define EMBER_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include <cmocka.h>

/* A fresh empty directory under /tmp; the caller removes it with rm_rf. */
static inline char *make_temp_dir(void)
{
	char tmpl[] = "/tmp/ember-test-XXXXXX";
	char *d = mkdtemp(tmpl);
	assert_non_null(d);
	return strdup(d);
}

static inline void rm_rf(const char *dir)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/* Removes a directory from make_temp_dir and frees its name. */
static inline void rm_temp_dir(char *dir)
{
	rm_rf(dir);
	free(dir);
}

static inline void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* The first line the shell command cmd writes, into line (n bytes);
 * false when it writes none. */
static inline bool command_line(const char *cmd, char *line, size_t n)
{
	FILE *f = popen(cmd, "r");
	if (!f)
		return false;
	bool got = fgets(line, (int)n, f) != NULL;
	pclose(f);
	return got;
}

/* The main of a unit test that needs no set-up of its own: runs the
 * cmocka_unit_test()s given as one group. */
#define UNIT_TEST_MAIN(...)                                             \
	int main(void)                                                  \
	{                                                               \
		const struct CMUnitTest tests[] = { __VA_ARGS__ };      \
		return cmocka_run_group_tests(tests, NULL, NULL);       \
	}

#endif
