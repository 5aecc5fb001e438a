/* Unit tests: lib/metadb on SQLite (always) and on PostgreSQL when
 * EMBER_TEST_PG_URL names one (tests/integration/test_metadata_pg.py runs
 * this binary against a real server). The same statements, the same
 * answers: placeholders, DDL words, hostile texts and blobs round-tripped
 * byte for byte, changes, transactions, errors. */
#include "testutil.h"

#include "buf.h"
#include "metadb.h"
#include "util.h"

/* Opens the database of the run: a fresh SQLite file, or the PostgreSQL
 * URL with its tables dropped first. */
static struct metadb *open_db(char **dir)
{
	const char *pg = getenv("EMBER_TEST_PG_URL");
	struct buf url = { 0 }, err = { 0 };
	*dir = NULL;
	if (pg && *pg) {
		buf_puts(&url, pg);
	} else {
		*dir = make_temp_dir();
		buf_printf(&url, "%s/meta.db", *dir);
	}
	struct metadb *db = NULL;
	int rc = metadb_open(url.data, NULL, &db, &err);
	if (rc < 0)
		fail_msg("open %s: %s", url.data, err.data);
	assert_int_equal(metadb_exec(db, "DROP TABLE IF EXISTS t; DROP TABLE IF EXISTS s", &err), 0);
	assert_int_equal(metadb_exec_ddl(db, "CREATE TABLE t (id {serial}, name TEXT NOT NULL UNIQUE,"
					     " n {int}, b {blob}, note TEXT)", &err), 0);
	buf_free(&url);
	buf_free(&err);
	return db;
}

static void close_db(struct metadb *db, char *dir)
{
	metadb_close(db);
	if (dir) {
		rm_temp_dir(dir);
	}
}

/* The database of a test (cmocka setup/teardown): open_db's, closed
 * (and its directory removed) after the test. */
struct dbfix {
	char *dir;
	struct metadb *db;
};

static int db_setup(void **state)
{
	struct dbfix *f = xcalloc(1, sizeof(*f));
	f->db = open_db(&f->dir);
	*state = f;
	return 0;
}

static int db_teardown(void **state)
{
	struct dbfix *f = *state;
	close_db(f->db, f->dir);
	free(f);
	return 0;
}

static void test_url_and_dialect(void **state)
{
	assert_true(metadb_url_is_postgres("postgres://u@h:5432/d"));
	assert_true(metadb_url_is_postgres("postgresql://h/d"));
	assert_false(metadb_url_is_postgres("/var/lib/ember/meta.db"));
	assert_false(metadb_url_is_postgres("postgres.db"));
	struct metadb *db = ((struct dbfix *)*state)->db;
	assert_int_equal(metadb_dialect(db), getenv("EMBER_TEST_PG_URL") ? METADB_POSTGRES : METADB_SQLITE);
	assert_false(metadb_unavailable(db));
}

static void test_roundtrip_hostile(void **state)
{
	struct metadb *db = ((struct dbfix *)*state)->db;
	struct buf err = { 0 };
	/* Quotes, a question mark and $1 in a value, a backslash, UTF-8, and a
	 * long text: all parameters, never SQL. */
	char *longtext = xmalloc(100001);
	for (int i = 0; i < 100000; i++)
		longtext[i] = (char)('a' + i % 26);
	longtext[100000] = 0;
	const char *names[] = { "it's \"quoted\" ?1 $1 ? \\ -- ;", "ünïcödé ✓", longtext, "" };
	const uint8_t blob[] = { 0, 1, 0, 0xff, '\\', 'x', 0 };
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		struct metadb_stmt *st;
		assert_int_equal(metadb_prepare(db, "INSERT INTO t(name, n, b, note) VALUES (?, ?, ?, ?)",
						&st, &err), 0);
		metadb_bind_text(st, 1, names[i]);
		metadb_bind_int64(st, 2, i == 0 ? INT64_MIN : i == 1 ? INT64_MAX : (int64_t)i);
		metadb_bind_blob(st, 3, blob, sizeof(blob));
		metadb_bind_text(st, 4, NULL);
		assert_int_equal(metadb_step(st, &err), 0);
		assert_int_equal(metadb_changes(st), 1);
		metadb_finalize(st);
	}
	/* ?N reuses a parameter; a '?' inside a literal is not one. */
	struct metadb_stmt *st;
	assert_int_equal(metadb_prepare(db, "SELECT id, name, n, b, note, '?' FROM t WHERE name = ?1 OR"
					    " (?2 = 1 AND name = ?1) ORDER BY id", &st, &err), 0);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		metadb_reset(st);
		metadb_bind_text(st, 1, names[i]);
		metadb_bind_int64(st, 2, 1);
		assert_int_equal(metadb_step(st, &err), 1);
		assert_int_equal(metadb_columns(st), 6);
		assert_string_equal(metadb_text(st, 1), names[i]);
		assert_int_equal(metadb_bytes(st, 1), strlen(names[i]));
		assert_int_equal(metadb_int64(st, 2), i == 0 ? INT64_MIN : i == 1 ? INT64_MAX : (int64_t)i);
		const void *b = metadb_blob(st, 3);
		assert_int_equal(metadb_bytes(st, 3), sizeof(blob));
		assert_memory_equal(b, blob, sizeof(blob));
		assert_true(metadb_is_null(st, 4));
		assert_string_equal(metadb_text(st, 4), "");
		assert_string_equal(metadb_text(st, 5), "?");
		assert_int_equal(metadb_step(st, &err), 0);
	}
	metadb_finalize(st);
	/* A text with a length stops at it (and at a NUL within it). */
	assert_int_equal(metadb_prepare(db, "SELECT ?", &st, &err), 0);
	metadb_bind_textn(st, 1, "abc\0def", 7);
	assert_int_equal(metadb_step(st, &err), 1);
	assert_string_equal(metadb_text(st, 0), "abc");
	metadb_finalize(st);
	/* Doubles come back exact, through a {real} column. */
	assert_int_equal(metadb_exec_ddl(db, "CREATE TABLE IF NOT EXISTS reals (v {real} NOT NULL)", &err), 0);
	const double reals[] = { 0.1, -2.5e-300, 1.7976931348623157e308, 1.0 / 3, 0 };
	for (size_t i = 0; i < ARRAY_SIZE(reals); i++) {
		assert_int_equal(metadb_prepare(db, "INSERT INTO reals (v) VALUES (?)", &st, &err), 0);
		metadb_bind_double(st, 1, reals[i]);
		assert_int_equal(metadb_step(st, &err), 0);
		metadb_finalize(st);
	}
	assert_int_equal(metadb_prepare(db, "SELECT v FROM reals", &st, &err), 0);
	for (size_t i = 0; i < ARRAY_SIZE(reals); i++) {
		assert_int_equal(metadb_step(st, &err), 1);
		bool found = false;
		for (size_t j = 0; j < ARRAY_SIZE(reals); j++)
			found |= metadb_double(st, 0) == reals[j];
		assert_true(found);
	}
	assert_int_equal(metadb_step(st, &err), 0);
	metadb_finalize(st);
	free(longtext);
	buf_free(&err);
}

static void test_conflicts_and_transactions(void **state)
{
	struct metadb *db = ((struct dbfix *)*state)->db;
	struct buf err = { 0 };
	struct metadb_stmt *st;
	const char *ins = "INSERT INTO t(name, n) VALUES (?, ?) ON CONFLICT DO NOTHING";
	for (int i = 0; i < 2; i++) {
		assert_int_equal(metadb_prepare(db, ins, &st, &err), 0);
		metadb_bind_text(st, 1, "a");
		metadb_bind_int64(st, 2, 1);
		assert_int_equal(metadb_step(st, &err), 0);
		assert_int_equal(metadb_changes(st), i == 0 ? 1 : 0);
		metadb_finalize(st);
	}
	/* Upsert. */
	assert_int_equal(metadb_prepare(db, "INSERT INTO t(name, n) VALUES (?, ?) ON CONFLICT(name)"
					    " DO UPDATE SET n = excluded.n", &st, &err), 0);
	metadb_bind_text(st, 1, "a");
	metadb_bind_int64(st, 2, 7);
	assert_int_equal(metadb_step(st, &err), 0);
	metadb_finalize(st);
	/* A rolled back transaction leaves nothing; a committed one stays. */
	assert_int_equal(metadb_begin(db, &err), 0);
	assert_int_equal(metadb_exec(db, "INSERT INTO t(name, n) VALUES ('gone', 1)", &err), 0);
	metadb_rollback(db);
	assert_int_equal(metadb_begin(db, &err), 0);
	assert_int_equal(metadb_exec(db, "INSERT INTO t(name, n) VALUES ('kept', 2)", &err), 0);
	assert_int_equal(metadb_commit(db, &err), 0);
	assert_int_equal(metadb_prepare(db, "SELECT name, n FROM t ORDER BY name", &st, &err), 0);
	assert_int_equal(metadb_step(st, &err), 1);
	assert_string_equal(metadb_text(st, 0), "a");
	assert_int_equal(metadb_int64(st, 1), 7);
	assert_int_equal(metadb_step(st, &err), 1);
	assert_string_equal(metadb_text(st, 0), "kept");
	assert_int_equal(metadb_step(st, &err), 0);
	metadb_finalize(st);
	/* A unique violation is an error, not "unavailable". */
	assert_int_equal(metadb_prepare(db, "INSERT INTO t(name) VALUES (?)", &st, &err), 0);
	metadb_bind_text(st, 1, "a");
	assert_int_equal(metadb_step(st, &err), -1);
	assert_false(metadb_unavailable(db));
	assert_non_null(strstr(err.data, metadb_name(db)));
	metadb_finalize(st);
	buf_reset(&err);
	/* A syntax error, a bad parameter number, an unterminated quote. */
	assert_int_equal(metadb_prepare(db, "SELECT ?0", &st, &err), -1);
	assert_int_equal(metadb_prepare(db, "SELECT 'x", &st, &err), -1);
	assert_int_equal(metadb_exec(db, "SELEC 1", &err), -1);
	/* The serial column counts up. */
	assert_int_equal(metadb_prepare(db, "SELECT max(id) FROM t", &st, &err), 0);
	assert_int_equal(metadb_step(st, &err), 1);
	assert_true(metadb_int64(st, 0) >= 2);
	metadb_finalize(st);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test_setup_teardown(test_url_and_dialect, db_setup, db_teardown),
	cmocka_unit_test_setup_teardown(test_roundtrip_hostile, db_setup, db_teardown),
	cmocka_unit_test_setup_teardown(test_conflicts_and_transactions, db_setup, db_teardown))
