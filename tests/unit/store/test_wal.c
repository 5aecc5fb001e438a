/* Unit tests: the write-ahead log is written ahead of every acknowledgement. */
#include "server_fixture.h"

/* --- log files written ahead ---------------------------------------------- */

struct wal_seen {
	int n;
	char last[64];
};

static int wal_count(void *ctx, const uint8_t *p, size_t len)
{
	struct wal_seen *w = ctx;
	w->n++;
	snprintf(w->last, sizeof(w->last), "%.*s", (int)MIN(len, 63u), (const char *)p);
	return 0;
}

/* Replays the log of generation 1 in dir into seen; returns its records'
 * bytes (the file's size after replay). */
static uint64_t wal_replay(const char *dir, struct wal_seen *seen, uint64_t *skipped)
{
	struct wal_file w;
	struct buf err = { 0 };
	memset(seen, 0, sizeof(*seen));
	*skipped = 0;
	assert_int_equal(wal_open(dir, 1, wal_count, seen, &w, skipped, &err), 0);
	uint64_t size = w.size;
	wal_close(&w);
	buf_free(&err);
	return size;
}

static void put_image(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

/* A log file grows ahead of its records in written zeros. As a crash
 * leaves it (zeros after the last record) it replays every record and
 * nothing is skipped; a record cut short inside the zeros is a torn
 * tail, truncated; a damaged record, or zeros followed by a record, are
 * still reported and skipped. */
static void test_wal_written_ahead(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char path[512];
	struct wal_file w;
	struct wal_seen seen;
	struct buf err = { 0 };
	uint64_t skipped = 0;
	const char *body = "a record's body, not ending in zeros";
	assert_int_equal(wal_open(dir, 1, wal_count, &seen, &w, &skipped, &err), 0);
	for (int i = 0; i < 3; i++) {
		char head[16];
		snprintf(head, sizeof(head), "r%d:", i);
		assert_int_equal(wal_append(&w, head, strlen(head), body, strlen(body)), 0);
	}
	uint64_t rec = w.size / 3, size = w.size;
	wal_path(dir, 1, &err);
	snprintf(path, sizeof(path), "%s", err.data);
	buf_reset(&err);
	assert_true(file_size(path) >= (off_t)(4u << 20)); /* a chunk of zeros ahead */
	char *img;
	size_t len;
	assert_int_equal(read_file(path, 16 << 20, &img, &len), 0);
	wal_close(&w);
	assert_int_equal(file_size(path), (off_t)size); /* a clean close cuts them off */

	/* As a crash leaves it. */
	put_image(path, img, len);
	assert_int_equal(wal_replay(dir, &seen, &skipped), size);
	assert_int_equal(seen.n, 3);
	assert_int_equal(skipped, 0);
	assert_string_equal(seen.last, "r2:a record's body, not ending in zeros");
	assert_int_equal(file_size(path), (off_t)size);

	/* A fourth record cut short: its header and the first half written,
	 * the rest still zeros. */
	memcpy(img + size, img + 2 * rec, rec / 2);
	put_image(path, img, len);
	assert_int_equal(wal_replay(dir, &seen, &skipped), size);
	assert_int_equal(seen.n, 3);
	assert_int_equal(skipped, 0);
	memset(img + size, 0, rec / 2);

	/* Damage in the last record (its end is not zeros): reported and
	 * skipped, kept in the file as a damaged record in the middle is;
	 * only the zeros after it are cut off. */
	img[2 * rec + rec / 2] ^= 0x5a;
	put_image(path, img, len);
	assert_int_equal(wal_replay(dir, &seen, &skipped), size);
	assert_int_equal(seen.n, 2);
	assert_int_equal(skipped, 1);
	img[2 * rec + rec / 2] ^= 0x5a;

	/* Zeros where a record should be, then a record: not the end. */
	memcpy(img + size + 64, img, rec);
	put_image(path, img, len);
	assert_int_equal(wal_replay(dir, &seen, &skipped), size + 64 + rec);
	assert_int_equal(seen.n, 4);
	assert_int_equal(skipped, 1);
	assert_string_equal(seen.last, "r0:a record's body, not ending in zeros");

	free(img);
	buf_free(&err);
	rm_temp_dir(dir);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_wal_written_ahead))
