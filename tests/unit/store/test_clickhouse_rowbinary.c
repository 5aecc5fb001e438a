/* Unit tests: the fleet store's RowBinary rows, SQL string literals, the
 * classification of ClickHouse's answers and the schema's statements
 * (server/store/clickhouse/). The inserts themselves run against real
 * servers in tests/integration/test_clickhouse_insert.py. */

#include "testutil.h"
#include <curl/curl.h>
#include <zlib.h>

#include "server/store/clickhouse/chttp.h"
#include "server/store/clickhouse/rowbinary.h"
#include "server/store/clickhouse/schema.h"

static void assert_bytes(const struct buf *b, const uint8_t *want, size_t n)
{
	assert_int_equal(b->len, n);
	assert_memory_equal(b->data, want, n);
}

/* One samples row, computed by hand from RowBinary's rules. */
static void test_sample_row_byte_exact(void **state)
{
	(void)state;
	struct ch_sample s = {
		.project = "p1", .kind = "on_cpu", .ts = 0x01020304u,
		.stack = 0x1122334455667788ull, .labels = 0x0102030405060708ull,
		.hz = 19, .value = 300, .batch = 42,
	};
	static const uint8_t want[] = {
		0x02, 'p', '1',                                  /* project */
		0x06, 'o', 'n', '_', 'c', 'p', 'u',              /* kind */
		0x04, 0x03, 0x02, 0x01,                          /* ts, DateTime LE */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,  /* stack */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  /* labels */
		0x13, 0x00, 0x00, 0x00,                          /* hz */
		0x2c, 0x01, 0, 0, 0, 0, 0, 0,                    /* value 300 */
		0x2a, 0, 0, 0, 0, 0, 0, 0,                       /* batch */
	};
	struct buf b = { 0 };
	ch_rb_sample(&b, &s);
	assert_bytes(&b, want, sizeof(want));
	buf_free(&b);
}

static void test_varint_and_long_string(void **state)
{
	(void)state;
	struct buf b = { 0 };
	ch_rb_varint(&b, 0);
	ch_rb_varint(&b, 127);
	ch_rb_varint(&b, 128);
	ch_rb_varint(&b, 300);
	ch_rb_varint(&b, UINT64_MAX);
	static const uint8_t want[] = { 0x00, 0x7f, 0x80, 0x01, 0xac, 0x02,
					0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
	assert_bytes(&b, want, sizeof(want));
	buf_reset(&b);
	char *big = malloc(200000);
	memset(big, 'x', 200000);
	ch_rb_string(&b, big, 200000);  /* 200000 = 0x30d40: c0 9a 0c */
	assert_int_equal(b.len, 3 + 200000);
	assert_memory_equal(b.data, "\xc0\x9a\x0c", 3);
	free(big);
	buf_free(&b);
}

/* A batch's label-set and stack rows, with the hashes the batch names. */
static void test_batch_rows(void **state)
{
	(void)state;
	struct ch_batch b;
	ch_batch_init(&b, "proj", "agent-1", 7);
	assert_true(b.id == ch_batch_id("agent-1", 7));
	assert_true(b.id != ch_batch_id("agent-1", 8) && b.id != ch_batch_id("agent-2", 7));
	const char *k[] = { "a" }, *v[] = { "xy" };
	uint64_t h = ch_batch_label_set(&b, k, v, 1);
	uint8_t want[8 + 7];
	for (int i = 0; i < 8; i++)
		want[i] = (uint8_t)(h >> (8 * i));
	memcpy(want + 8, "\x01\x01" "a" "\x01\x02" "xy", 7);
	assert_bytes(&b.label_sets, want, sizeof(want));
	/* the label hash depends on the split between key and value */
	const char *k2[] = { "ax" }, *v2[] = { "y" };
	assert_true(h != ch_labels_hash(k2, v2, 1));

	uint64_t frames[2] = { 5, 0x0100 };
	uint64_t sh = ch_batch_stack(&b, frames, 2);
	assert_true(sh == ch_stack_hash(frames, 2));
	uint8_t ws[8 + 1 + 16] = { 0 };
	for (int i = 0; i < 8; i++)
		ws[i] = (uint8_t)(sh >> (8 * i));
	ws[8] = 2;
	ws[9] = 5;
	ws[9 + 8 + 1] = 1;
	assert_bytes(&b.stacks, ws, sizeof(ws));

	struct ch_sample s = { .kind = "on_cpu", .ts = 100, .hz = 19, .value = 1 };
	assert_int_equal(ch_batch_sample(&b, &s), 0);
	s.ts = 90;
	assert_int_equal(ch_batch_sample(&b, &s), 0);
	assert_int_equal(b.ts_min, 90);
	assert_int_equal(b.ts_max, 100);
	assert_int_equal(b.n_samples, 2);
	/* the batch's project and id, whatever the caller's sample said */
	assert_memory_equal(b.samples.data, "\x04proj", 5);
	ch_batch_free(&b);
}

static void test_sql_string_hostile(void **state)
{
	(void)state;
	struct buf b = { 0 };
	ch_sql_string(&b, "a'b\\c\0d\n\xff", 9);
	assert_string_equal(b.data, "'a\\'b\\\\c\\x00d\\x0a\\xff'");
	buf_reset(&b);
	ch_sql_string(&b, "", 0);
	assert_string_equal(b.data, "''");
	buf_reset(&b);
	/* a quote at the end cannot close the literal early */
	ch_sql_string(&b, "x\\", 2);
	assert_string_equal(b.data, "'x\\\\'");
	buf_free(&b);
}

static void test_classify(void **state)
{
	(void)state;
	assert_int_equal(ch_classify(CURLE_OK, 200, "1\n"), CH_OK);
	assert_int_equal(ch_classify(CURLE_COULDNT_CONNECT, 0, NULL), CH_UNAVAILABLE);
	assert_int_equal(ch_classify(CURLE_OPERATION_TIMEDOUT, 0, NULL), CH_UNAVAILABLE);
	assert_int_equal(ch_classify(CURLE_OK, 503, ""), CH_UNAVAILABLE);
	assert_int_equal(ch_classify(CURLE_OK, 500, "Code: 279, e.displayText() = DB::Exception: "
					   "All connection tries failed"), CH_UNAVAILABLE);
	assert_int_equal(ch_classify(CURLE_OK, 500, "Code: 241, Memory limit"), CH_UNAVAILABLE);
	assert_int_equal(ch_classify(CURLE_OK, 400, "Code: 62, Syntax error"), CH_FAILED);
	assert_int_equal(ch_classify(CURLE_OK, 516, "Code: 516, Authentication failed"), CH_FAILED);
	assert_int_equal(ch_classify(CURLE_OK, 500, "no code at all"), CH_FAILED);
	/* a certificate that does not verify is not a ClickHouse that is down */
	assert_int_equal(ch_classify(CURLE_PEER_FAILED_VERIFICATION, 0, NULL), CH_FAILED);
	assert_int_equal(ch_classify(CURLE_SSL_CACERT_BADFILE, 0, NULL), CH_FAILED);
	assert_int_equal(ch_classify(CURLE_SSL_CONNECT_ERROR, 0, NULL), CH_UNAVAILABLE);
}

static void test_gzip_round_trip(void **state)
{
	(void)state;
	struct buf z = { 0 };
	const char text[] = "INSERT rows rows rows rows rows";
	assert_int_equal(ch_gzip(text, sizeof(text), &z), 0);
	assert_true(z.len > 10 && (uint8_t)z.data[0] == 0x1f && (uint8_t)z.data[1] == 0x8b);
	char back[64];
	z_stream s = { 0 };
	assert_int_equal(inflateInit2(&s, 15 + 16), Z_OK);
	s.next_in = (Bytef *)z.data;
	s.avail_in = (uInt)z.len;
	s.next_out = (Bytef *)back;
	s.avail_out = sizeof(back);
	assert_int_equal(inflate(&s, Z_FINISH), Z_STREAM_END);
	assert_int_equal(s.total_out, sizeof(text));
	assert_memory_equal(back, text, sizeof(text));
	inflateEnd(&s);
	buf_free(&z);
}

static void test_schema_statements(void **state)
{
	(void)state;
	struct ch_schema plain = { .database = "ember" }, sharded = { .database = "ember", .cluster = "c" };
	struct buf b = { 0 };
	assert_int_equal(ch_schema_statements(&plain, 0, &b), 1 + 10);
	assert_non_null(strstr(b.data + strlen(b.data) + 1, "ember.samples ("));
	buf_reset(&b);
	assert_int_equal(ch_schema_statements(&sharded, 0, &b), 1 + 20);
	buf_reset(&b);
	/* from version 1: the tables of versions 2 and 3 (local), frames.file
	 * on both frames tables, then the new Distributed tables */
	assert_int_equal(ch_schema_statements(&sharded, 1, &b), 10);
	const char *st = b.data;
	assert_string_equal(st, "CREATE TABLE IF NOT EXISTS ember.hosts_local (name String, "
				"cpus UInt32, seen DateTime) ENGINE = ReplacingMergeTree(cpus) ORDER BY name");
	st += strlen(st) + 1;
	assert_non_null(strstr(st, "ember.files_local (hash UInt64, id String"));
	st += strlen(st) + 1;
	assert_non_null(strstr(st, "ember.gpu_spans_local (project String, hour UInt32"));
	assert_non_null(strstr(st, "PARTITION BY hour"));
	st += strlen(st) + 1;
	assert_non_null(strstr(st, "ember.gpu_span_origins_local (hour UInt32, hash UInt64, data String)"));
	st += strlen(st) + 1;
	assert_string_equal(st, "ALTER TABLE ember.frames_local ADD COLUMN file UInt64");
	st += strlen(st) + 1;
	assert_string_equal(st, "ALTER TABLE ember.frames ADD COLUMN file UInt64");
	buf_reset(&b);
	assert_int_equal(ch_schema_statements(&plain, 1, &b), 5);
	buf_reset(&b);
	/* from version 2: the GPU span tables only */
	assert_int_equal(ch_schema_statements(&sharded, 2, &b), 4);
	assert_non_null(strstr(b.data, "ember.gpu_spans_local"));
	buf_reset(&b);
	assert_int_equal(ch_schema_statements(&plain, 2, &b), 2);
	buf_reset(&b);
	assert_int_equal(ch_schema_statements(&sharded, CH_SCHEMA_VERSION, &b), 0);
	assert_int_equal(ch_schema_drop_partition(&sharded, "2026-12-06", &b), 0);
	assert_string_equal(b.data, "ALTER TABLE ember.samples_local DROP PARTITION '2026-12-06'");
	buf_reset(&b);
	assert_int_equal(ch_schema_drop_partition(&plain, "2026-12-6'", &b), -1);
	assert_int_equal(ch_schema_drop_partition(&plain, "2026-13-01", &b), -1);
	assert_int_equal(ch_schema_drop_partition(&plain, "x", &b), -1);
	assert_int_equal(b.len, 0);
	ch_schema_ttl(&sharded, 14, &b);
	/* the text test_clickhouse_schema.py runs through a current ClickHouse */
	assert_string_equal(b.data, "ALTER TABLE ember.samples_local MODIFY TTL ts + INTERVAL 14 DAY");
	buf_reset(&b);
	assert_false(ch_version_has_ttl("18.16.1"));
	assert_false(ch_version_has_ttl("19.5.3"));
	assert_true(ch_version_has_ttl("19.6.2"));
	assert_true(ch_version_has_ttl("26.9.1.1"));
	buf_free(&b);
}

static void test_conn_options(void **state)
{
	(void)state;
	struct buf err = { 0 };
	struct ch_conn_opts o = { .urls = "http://a:8123/,http://b:8123" };
	struct ch_conn *c = ch_conn_new(&o, &err);
	assert_non_null(c);
	assert_int_equal(ch_conn_servers(c), 2);
	assert_string_equal(ch_conn_database(c), "ember");
	ch_conn_free(c);
	const char *bad[] = { "", "ftp://a", "http://a,file:///etc/passwd", NULL };
	for (int i = 0; bad[i]; i++) {
		o.urls = bad[i];
		assert_null(ch_conn_new(&o, &err));
	}
	o.urls = "http://a";
	o.database = "e'; DROP TABLE x";
	assert_null(ch_conn_new(&o, &err));
	o.database = NULL;
	o.password_file = "/nonexistent/pw";
	assert_null(ch_conn_new(&o, &err));
	buf_free(&err);
}

/* ch_query_ext refuses a table that breaks its bounds before it sends
 * anything (CH_FAILED); a good one goes out (here to a closed port on
 * loopback: CH_UNAVAILABLE). */
static void test_query_ext_bounds(void **state)
{
	(void)state;
	struct buf err = { 0 };
	struct ch_conn_opts o = { .urls = "http://127.0.0.1:1", .timeout_ms = 2000 };
	struct ch_conn *c = ch_conn_new(&o, &err);
	assert_non_null(c);
	const uint8_t ids[16] = { 1, 0, 0, 0, 0, 0, 0, 0, 2 };
	struct ch_ext_table t[2] = {
		{ .name = "ids", .structure = "h UInt64", .format = "RowBinary", .data = ids, .len = 16 },
		{ .name = "none", .structure = "h UInt64", .format = "RowBinary" },
	};
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1 FROM ids, none", t, 2, 0, NULL, NULL, &err),
			 CH_UNAVAILABLE);
	struct ch_ext_table bad = t[0];
	bad.name = "x&y=1";
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", &bad, 1, 0, NULL, NULL, &err), CH_FAILED);
	bad = t[0];
	bad.format = "Row Binary";
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", &bad, 1, 0, NULL, NULL, &err), CH_FAILED);
	bad = t[0];
	bad.structure = "";
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", &bad, 1, 0, NULL, NULL, &err), CH_FAILED);
	bad = t[0];
	bad.len = (size_t)CH_MAX_EXT_BYTES + 1;
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", &bad, 1, 0, NULL, NULL, &err), CH_FAILED);
	bad = t[0];
	bad.data = NULL;
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", &bad, 1, 0, NULL, NULL, &err), CH_FAILED);
	struct ch_ext_table twice[2] = { t[0], t[0] };
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", twice, 2, 0, NULL, NULL, &err), CH_FAILED);
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", t, 0, 0, NULL, NULL, &err), CH_FAILED);
	assert_int_equal(ch_query_ext(c, 0, "SELECT 1", t, CH_MAX_EXT_TABLES + 1, 0, NULL, NULL, &err),
			 CH_FAILED);
	char *long_sql = malloc(CH_MAX_EXT_QUERY + 2);
	assert_non_null(long_sql);
	memset(long_sql, ' ', CH_MAX_EXT_QUERY + 1);
	long_sql[CH_MAX_EXT_QUERY + 1] = 0;
	assert_int_equal(ch_query_ext(c, 0, long_sql, t, 1, 0, NULL, NULL, &err), CH_FAILED);
	free(long_sql);
	assert_int_equal(ch_query_ext(c, 1, "SELECT 1", t, 1, 0, NULL, NULL, &err), CH_FAILED);
	ch_conn_free(c);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_sample_row_byte_exact),
	cmocka_unit_test(test_varint_and_long_string),
	cmocka_unit_test(test_batch_rows),
	cmocka_unit_test(test_sql_string_hostile),
	cmocka_unit_test(test_classify),
	cmocka_unit_test(test_gzip_round_trip),
	cmocka_unit_test(test_schema_statements),
	cmocka_unit_test(test_conn_options),
	cmocka_unit_test(test_query_ext_bounds))
