/* Unit tests: lib/jsonw, the JSON writer - its output, and each misuse
 * of nesting recorded (and, in these strict builds, fatal). */
#include "testutil.h"

#include <sys/wait.h>

#include "buf.h"
#include "jsonw.h"
#include "util.h"

static void test_scalars(void **state)
{
	(void)state;
	struct buf b = { 0 };
	struct jsonw w;
	jsonw_init(&w, &b);
	jsonw_begin_array(&w);
	jsonw_str(&w, "a\"b\\c\n\x01");
	jsonw_str(&w, "caf\xc3\xa9");
	jsonw_strn(&w, "x\xff\xc3", 3); /* invalid UTF-8 is replaced */
	jsonw_str(&w, NULL);
	jsonw_double(&w, 0.5);
	jsonw_double(&w, 1.0 / 0.0);
	jsonw_u64(&w, 0);
	jsonw_u64(&w, UINT64_MAX);
	jsonw_i64(&w, INT64_MIN);
	jsonw_i64(&w, -7);
	jsonw_bool(&w, true);
	jsonw_bool(&w, false);
	jsonw_null(&w);
	jsonw_raw(&w, "{\"c\":1}", 7);
	jsonw_end_array(&w);
	assert_int_equal(jsonw_finish(&w), 0);
	assert_string_equal(b.data, "[\"a\\\"b\\\\c\\n\\u0001\",\"caf\xc3\xa9\",\"x\\ufffd\\ufffd\",\"\","
				    "0.5,null,0,18446744073709551615,-9223372036854775808,-7,"
				    "true,false,null,{\"c\":1}]");
	buf_free(&b);
}

static void test_nested(void **state)
{
	(void)state;
	struct buf b = { 0 };
	buf_puts(&b, "before:"); /* a writer appends */
	struct jsonw w;
	jsonw_init(&w, &b);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "name", "root");
	jsonw_kv_u64(&w, "total", 3);
	jsonw_key(&w, "children");
	jsonw_begin_array(&w);
	jsonw_begin_object(&w);
	jsonw_kv_i64(&w, "d", -1);
	jsonw_key(&w, "e");
	jsonw_begin_array(&w);
	jsonw_end_array(&w);
	jsonw_key(&w, "o");
	jsonw_begin_object(&w);
	jsonw_end_object(&w);
	jsonw_end_object(&w);
	jsonw_begin_array(&w);
	jsonw_begin_array(&w);
	jsonw_u64(&w, 1);
	jsonw_end_array(&w);
	jsonw_u64(&w, 2);
	jsonw_end_array(&w);
	jsonw_end_array(&w);
	jsonw_kv_bool(&w, "ok", true);
	jsonw_kv_double(&w, "r", 0.25);
	jsonw_key(&w, "k\"q");
	jsonw_null(&w);
	jsonw_end_object(&w);
	assert_int_equal(jsonw_finish(&w), 0);
	assert_null(w.misuse);
	assert_string_equal(b.data, "before:{\"name\":\"root\",\"total\":3,\"children\":[{\"d\":-1,\"e\":[],"
				    "\"o\":{}},[[1],2]],\"ok\":true,\"r\":0.25,\"k\\\"q\":null}");
	/* A top-level scalar is a document too. */
	buf_reset(&b);
	jsonw_init(&w, &b);
	jsonw_str(&w, "x");
	assert_int_equal(jsonw_finish(&w), 0);
	assert_string_equal(b.data, "\"x\"");
	/* As deep as JSONW_MAX_DEPTH is allowed. */
	buf_reset(&b);
	jsonw_init(&w, &b);
	for (int i = 0; i < JSONW_MAX_DEPTH; i++)
		jsonw_begin_array(&w);
	for (int i = 0; i < JSONW_MAX_DEPTH; i++)
		jsonw_end_array(&w);
	assert_int_equal(jsonw_finish(&w), 0);
	assert_int_equal(b.len, 2 * JSONW_MAX_DEPTH);
	/* Objects and arrays alternating deep down (a flamegraph's shape):
	 * each level's kind is remembered. */
	buf_reset(&b);
	jsonw_init(&w, &b);
	for (int i = 0; i < 1000; i++) {
		jsonw_begin_object(&w);
		jsonw_key(&w, "c");
		jsonw_begin_array(&w);
	}
	for (int i = 0; i < 1000; i++) {
		jsonw_end_array(&w);
		jsonw_end_object(&w);
	}
	assert_int_equal(jsonw_finish(&w), 0);
	assert_int_equal(b.len, 1000 * strlen("{\"c\":[]}"));
	buf_free(&b);
}

/* The misuses, each as the calls it makes: { } [ ] begin or end an
 * object or an array, 1 writes the number 1, D opens one array more than
 * JSONW_MAX_DEPTH and closes them, any other letter is a key of that name. */
static const char *const misuses[] = {
	"{1}",   /* a value without a key */
	"[k1]",  /* a key in an array */
	"k1",    /* a key at the top */
	"{ab1}", /* two keys */
	"{a}",   /* a key without a value */
	"[}",    /* the end of the other kind */
	"{]",
	"1]",    /* an end with nothing open */
	"{a[",   /* left open */
	"",      /* nothing written */
	"{}1",   /* two values at the top */
	"D",     /* too deep */
};

/* Makes the calls of a misuse; returns what jsonw_finish says. */
static int write_misuse(const char *calls, bool lenient, struct buf *b)
{
	struct jsonw w;
	jsonw_init(&w, b);
	w.lenient = lenient;
	for (const char *c = calls; *c; c++) {
		switch (*c) {
		case '{':
			jsonw_begin_object(&w);
			break;
		case '}':
			jsonw_end_object(&w);
			break;
		case '[':
			jsonw_begin_array(&w);
			break;
		case ']':
			jsonw_end_array(&w);
			break;
		case '1':
			jsonw_u64(&w, 1);
			break;
		case 'D':
			for (int i = 0; i <= JSONW_MAX_DEPTH; i++)
				jsonw_begin_array(&w);
			for (int i = 0; i <= JSONW_MAX_DEPTH; i++)
				jsonw_end_array(&w);
			break;
		default: {
			const char key[2] = { *c, '\0' };
			jsonw_key(&w, key);
			break;
		}
		}
	}
	int rc = jsonw_finish(&w);
	if (rc)
		assert_non_null(w.misuse);
	/* For an answer: the code the HTTP layer answers 500, and why. */
	struct buf err = { 0 };
	assert_int_equal(jsonw_finish_answer(&w, &err), rc ? JSONW_RC : 0);
	if (rc)
		assert_non_null(strstr(err.data, w.misuse));
	buf_free(&err);
	return rc;
}

/* Each misuse is recorded, sticky until jsonw_finish. */
static void test_misuse_flagged(void **state)
{
	(void)state;
	for (size_t c = 0; c < ARRAY_SIZE(misuses); c++) {
		struct buf b = { 0 };
		if (write_misuse(misuses[c], true, &b) != -1)
			fail_msg("misuse \"%s\" was not flagged (wrote %s)", misuses[c], b.data ? b.data : "");
		buf_free(&b);
	}
}

/* In a strict build (this one: EMBER_JSONW_STRICT) a misuse aborts where
 * it happens, so any query a unit test runs fails on a nesting bug. */
static void test_misuse_aborts_when_strict(void **state)
{
	(void)state;
	for (size_t c = 0; c < ARRAY_SIZE(misuses); c++) {
		fflush(NULL);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			/* Quiet: the abort's report is expected. */
			if (!freopen("/dev/null", "w", stderr))
				_exit(3);
			struct buf b = { 0 };
			write_misuse(misuses[c], false, &b);
			_exit(0);
		}
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
			fail_msg("misuse \"%s\" did not abort (status %d)", misuses[c], st);
	}
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_scalars),
	cmocka_unit_test(test_nested),
	cmocka_unit_test(test_misuse_flagged),
	cmocka_unit_test(test_misuse_aborts_when_strict))
