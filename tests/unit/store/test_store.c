/* Unit tests: the store: batch validation, durability and dedup, replay of several logs, compaction, damage, blocks. */
#include "server_fixture.h"

/* Builds the first n of sample_specs as batch seq at start and appends it. */
static void append_samples(struct store *s, size_t n, uint64_t seq, int64_t start)
{
	struct buf z = { 0 };
	make_batch(sample_specs, n, seq, start, &z);
	append(s, &z);
	buf_free(&z);
}

/* The path of the oldest write-ahead log file of the store in dir. */
static void first_wal(const char *dir, char *out, size_t n)
{
	char wdir[256];
	snprintf(wdir, sizeof(wdir), "%s/wal", dir);
	DIR *d = opendir(wdir);
	assert_non_null(d);
	char best[256] = "";
	struct dirent *e;
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".log") && (!best[0] || strcmp(e->d_name, best) < 0))
			snprintf(best, sizeof(best), "%s", e->d_name);
	closedir(d);
	assert_true(best[0] != 0);
	assert_true((size_t)snprintf(out, n, "%.255s/%.255s", wdir, best) < n);
}

static void test_batch_rejects(void **state)
{
	(void)state;
	struct buf z = { 0 }, err = { 0 }, raw = { 0 };
	make_batch(sample_specs, 5, 1, T0, &z);
	/* Valid as produced. */
	Ember__Ingest__V1__Batch *b = batch_decode(z.data, z.len, &err);
	assert_non_null(b);
	/* Each corruption of an index is refused with a message. */
	b->stacks[0]->frames[0] = 9999;
	assert_int_equal(batch_validate(b, &err), -1);
	assert_non_null(strstr(err.data, "stacks[0]"));
	b->stacks[0]->frames[0] = 0;
	b->samples[0]->kind = 42;
	buf_reset(&err);
	assert_int_equal(batch_validate(b, &err), -1);
	b->samples[0]->kind = 1;
	b->sample_rate_hz = 0;
	assert_int_equal(batch_validate(b, &err), -1);
	b->sample_rate_hz = 19;
	b->end_unix_ms = b->start_unix_ms - 1;
	assert_int_equal(batch_validate(b, &err), -1);
	b->end_unix_ms = b->start_unix_ms;
	b->resources[0]->n_attributes = 3;
	assert_int_equal(batch_validate(b, &err), -1);
	b->resources[0]->n_attributes = 6;
	assert_int_equal(batch_validate(b, &err), 0);
	/* Frame types: the GPU ones up to nvtx (19) pass, one past is refused. */
	Ember__Ingest__V1__FrameType type0 = b->frames[0]->type;
	b->frames[0]->type = EMBER__INGEST__V1__FRAME_TYPE__CUDA_MEMCPY;
	assert_int_equal(batch_validate(b, &err), 0);
	b->frames[0]->type = EMBER__INGEST__V1__FRAME_TYPE__NVTX;
	assert_int_equal(batch_validate(b, &err), 0);
	b->frames[0]->type = (Ember__Ingest__V1__FrameType)(EMBER__INGEST__V1__FRAME_TYPE__NVTX + 1);
	buf_reset(&err);
	assert_int_equal(batch_validate(b, &err), -1);
	assert_non_null(strstr(err.data, "unknown frame type 20"));
	b->frames[0]->type = type0;
	batch_decode_free(b);
	/* Not zstd; zstd of garbage; a decompression bomb. */
	buf_reset(&err);
	assert_null(batch_decode("hello", 5, &err));
	assert_non_null(strstr(err.data, "zstd"));
	assert_int_equal(zstd_compress_buf("\xff\xff\xff", 3, 1, &raw), 0);
	buf_reset(&err);
	assert_null(batch_decode(raw.data, raw.len, &err));
	assert_non_null(strstr(err.data, "protobuf"));
	buf_reset(&raw);
	char *zeros = calloc(1, BATCH_MAX_DECOMPRESSED + 1);
	assert_int_equal(zstd_compress_buf(zeros, BATCH_MAX_DECOMPRESSED + 1, 1, &raw), 0);
	free(zeros);
	buf_reset(&err);
	assert_null(batch_decode(raw.data, raw.len, &err));
	assert_non_null(strstr(err.data, "more than"));
	/* A 22-byte frame whose header states 200 MiB (a 1 KiB window, one raw
	 * block of "hello"): refused without reserving what it states. */
	static const unsigned char liar[] = { 0x28, 0xb5, 0x2f, 0xfd, 0xc0, 0x00,
					       0x00, 0x00, 0x80, 0x0c, 0x00, 0x00, 0x00, 0x00,
					       0x29, 0x00, 0x00, 'h', 'e', 'l', 'l', 'o' };
	assert_int_equal(ZSTD_getFrameContentSize(liar, sizeof(liar)), 200ull << 20);
	assert_false(zstd_can_expand(sizeof(liar), 200ull << 20));
	struct buf out = { 0 };
	assert_int_equal(zstd_decompress_bounded(liar, sizeof(liar), BATCH_MAX_DECOMPRESSED, &out), -1);
	assert_true(out.cap < (1u << 20));
	buf_free(&out);
	buf_free(&raw);
	buf_free(&z);
	buf_free(&err);
}

/* Every stored frame type has a name that parses back to it (the API's
 * frame_types); root, synthetic and unknown names do not. */
static void test_frame_type_names(void **state)
{
	(void)state;
	assert_int_equal(SFT_MAX, 19);
	for (int t = 1; t <= SFT_MAX; t++)
		assert_int_equal(frame_type_parse(frame_type_name((uint8_t)t)), t);
	assert_string_equal(frame_type_name(SFT_CUDA_MEMCPY), "cuda_memcpy");
	assert_string_equal(frame_type_name(SFT_CUDA_MEMSET), "cuda_memset");
	assert_string_equal(frame_type_name(SFT_CUDA_SYNC), "cuda_sync");
	assert_string_equal(frame_type_name(SFT_NVTX), "nvtx");
	assert_int_equal(frame_type_parse("cuda_kernel"), SFT_CUDA_KERNEL);
	assert_int_equal(frame_type_parse("root"), -1);
	assert_int_equal(frame_type_parse("synthetic"), -1);
	assert_int_equal(frame_type_parse("CUDA_KERNEL"), -1);
	assert_int_equal(frame_type_parse(""), -1);
}

static void test_store_durable_and_dedup(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct store *s;
	struct buf err = { 0 }, z1 = { 0 }, z2 = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	make_batch(sample_specs, 5, 1, T0, &z1);
	make_batch(sample_specs, 2, 2, T0 + 5000, &z2);
	append(s, &z1);
	append(s, &z2);
	assert_int_equal(total(s), 100 + 90);
	/* The same batch again (a retry after a lost answer) is a duplicate. */
	Ember__Ingest__V1__Batch *b = batch_decode(z1.data, z1.len, &err);
	assert_int_equal(batch_append(s, "00000000-0000-0000-0000-000000000000", b, z1.data, z1.len,
				      &err), STORE_DUPLICATE);
	batch_decode_free(b);
	assert_int_equal(total(s), 190);
	store_close(s);

	/* Reopened: everything acknowledged is back, duplicates still known. */
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 190);
	b = batch_decode(z2.data, z2.len, &err);
	assert_int_equal(batch_append(s, "00000000-0000-0000-0000-000000000000", b, z2.data, z2.len,
				      &err), STORE_DUPLICATE);
	batch_decode_free(b);
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.batches, 2);
	store_close(s);
	buf_free(&z1);
	buf_free(&z2);
	buf_free(&err);
	rm_temp_dir(dir);
}

/* The log files of the store in dir, sorted, each read whole. */
struct saved_logs {
	char names[8][64];
	char *data[8];
	size_t len[8], n;
};

static void save_logs(const char *dir, struct saved_logs *out)
{
	char wdir[256], path[600];
	snprintf(wdir, sizeof(wdir), "%s/wal", dir);
	DIR *d = opendir(wdir);
	assert_non_null(d);
	out->n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".log")) {
			assert_true(out->n < 8);
			snprintf(out->names[out->n++], 64, "%.63s", e->d_name);
		}
	closedir(d);
	qsort(out->names, out->n, 64, (int (*)(const void *, const void *))strcmp);
	for (size_t i = 0; i < out->n; i++) {
		snprintf(path, sizeof(path), "%s/%s", wdir, out->names[i]);
		assert_int_equal(read_file(path, 16 << 20, &out->data[i], &out->len[i]), 0);
	}
}

/* Frees what save_logs read. */
static void saved_logs_free(struct saved_logs *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->data[i]);
}

/* Opens the store in dir again (open_store), checks that it holds want in
 * all, and closes it. */
static void expect_reopened_total(const char *dir, uint64_t want)
{
	struct store *s;
	struct buf err = { 0 };
	if (open_store(dir, &s, &err) != 0)
		fail_msg("open_store %s: %s", dir, err.data ? err.data : "");
	assert_int_equal(total(s), want);
	store_close(s);
	buf_free(&err);
}

/* Puts back the saved logs from the from-th on, as they were. */
static void restore_logs(const char *dir, const struct saved_logs *l, size_t from)
{
	char path[600];
	for (size_t i = from; i < l->n; i++) {
		snprintf(path, sizeof(path), "%s/wal/%s", dir, l->names[i]);
		FILE *f = fopen(path, "wb");
		assert_non_null(f);
		if (l->len[i])
			assert_int_equal(fwrite(l->data[i], 1, l->len[i], f), l->len[i]);
		fclose(f);
	}
}

/* A head that replayed several logs after restarts covers all of them;
 * its flush deletes them lowest first. A crash part way through that
 * (simulated by putting back the logs after the first) must leave every
 * batch exactly once: the block kept, the rest of the logs not replayed.
 * A crash before the first deletion: the block dropped, all replayed. */
static void test_store_flush_of_several_logs(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct store *s;
	struct buf err = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	append_samples(s, 5, 1, T0);
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0);
	append_samples(s, 2, 2, T0 + 5000);
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 190);
	struct saved_logs logs;
	save_logs(dir, &logs);
	assert_true(logs.n >= 3); /* z1's, z2's, the one opened last */
	assert_int_equal(store_flush(s, &err), 0);
	store_close(s);

	/* The first log deleted, then the crash. */
	restore_logs(dir, &logs, 1);
	expect_reopened_total(dir, 190);
	expect_reopened_total(dir, 190); /* and stays so */

	/* The crash before the first deletion. */
	restore_logs(dir, &logs, 0);
	expect_reopened_total(dir, 190);
	expect_reopened_total(dir, 190);

	saved_logs_free(&logs);
	buf_free(&err);
	rm_temp_dir(dir);
}

/* Waits (up to 10 s) until the store's stats count field (flushes,
 * compactions) at n or more. */
#define WAIT_STAT(s, field, n) wait_stat(s, offsetof(struct store_stats, field), #field, n)
static void wait_stat(struct store *s, size_t off, const char *name, uint64_t n)
{
	struct store_stats st;
	uint64_t v = 0;
	for (int i = 0; i < 1000; i++) {
		store_get_stats(s, &st);
		memcpy(&v, (const char *)&st + off, sizeof(v));
		if (v >= n)
			return;
		usleep(10000);
	}
	fail_msg("%s: %llu of %llu after 10 s", name, (unsigned long long)v, (unsigned long long)n);
}

static void wait_flushes(struct store *s, uint64_t n)
{
	WAIT_STAT(s, flushes, n);
}

/* A store whose maintenance thread seals the head after every batch and
 * writes it as blocks, all into one log while nothing asks for another. */
static void config_seal_each_batch(struct store_config *cfg)
{
	store_config_default(cfg);
	ingest_codecs(cfg);
	cfg->time_window = false;
	cfg->retention_ms = INT64_MAX / 4;
	cfg->head_max_rows = 1;
}

/* Opens the store in dir as a crash left it, its log still there: the
 * log's blocks are dropped and the log replayed into the head, each of
 * the want samples counted once; then writes the head out. */
static struct store *reopen_replayed(const char *dir, struct store_config *cfg, uint64_t want)
{
	struct store *s;
	struct store_stats st;
	struct buf err = { 0 };
	cfg->background = false;
	cfg->head_max_rows = 1000; /* the replay keeps the rows in its head */
	assert_int_equal(store_open(dir, cfg, &s, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 0);
	assert_int_equal(total(s), want);
	assert_int_equal(store_flush(s, &err), 0);
	assert_int_equal(total(s), want);
	buf_free(&err);
	return s;
}

/* Opens the store in dir again: nothing to replay, the want samples all
 * in committed blocks. */
static void check_committed(const char *dir, uint64_t want)
{
	struct store *s;
	struct store_stats st;
	struct buf err = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0);
	assert_int_equal(total(s), want);
	store_close(s);
	buf_free(&err);
}

/* Heads share a log until it holds max_unflushed_rows rows (each agent
 * session writes its definitions into every new log again). The blocks of
 * a log that still exists are not committed: compaction and retention
 * leave them alone, and a crash drops them and replays the log, so every
 * batch comes back once. A flush that starts a new log commits them. */
static void test_store_shared_log(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct store_config cfg;
	config_seal_each_batch(&cfg);
	struct store *s;
	struct store_stats st;
	struct buf err = { 0 };
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	append_samples(s, 5, 1, T0);
	wait_flushes(s, 1);
	append_samples(s, 2, 2, T0 + 5000);
	wait_flushes(s, 2);
	struct saved_logs logs;
	save_logs(dir, &logs);
	assert_int_equal(logs.n, 1); /* both heads wrote to one log, still there */
	saved_logs_free(&logs);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 2);
	assert_int_equal(total(s), 190);
	assert_int_equal(store_compact(s, true, &err), 0);
	assert_int_equal(store_retention(s, INT64_MAX / 2, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.compactions, 0);
	assert_int_equal(st.retention_deleted, 0);
	assert_int_equal(total(s), 190);
	store_close(s); /* as a crash leaves it: the log is still there */

	s = reopen_replayed(dir, &cfg, 190);
	save_logs(dir, &logs);
	assert_int_equal(logs.n, 1); /* only the new current log */
	saved_logs_free(&logs);
	store_close(s);
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	store_get_stats(s, &st);
	assert_true(st.blocks >= 1);
	assert_int_equal(total(s), 190);
	assert_int_equal(store_retention(s, INT64_MAX / 2, &err), 0);
	assert_int_equal(total(s), 0); /* committed now: retention may take it */
	store_close(s);

	/* A log to which nothing more comes is closed a head's age after the
	 * last seal, so its blocks are committed without a new head. */
	cfg.background = true;
	cfg.head_max_rows = 1;
	cfg.head_max_age_ms = 200;
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	append_samples(s, 1, 3, T0 + 10000);
	wait_flushes(s, 1); /* in a new log: the start had a log to replay */
	append_samples(s, 1, 4, T0 + 15000);
	wait_flushes(s, 2); /* in the same log as the head after it */
	uint64_t t3 = total(s);
	assert_true(t3 > 0);
	save_logs(dir, &logs);
	assert_int_equal(logs.n, 1);
	char held[64];
	snprintf(held, sizeof(held), "%s", logs.names[0]);
	free(logs.data[0]);
	for (int i = 0; i < 1000; i++) {
		save_logs(dir, &logs);
		bool gone = logs.n == 1 && strcmp(logs.names[0], held) != 0;
		for (size_t j = 0; j < logs.n; j++)
			free(logs.data[j]);
		if (gone)
			break;
		assert_true(i < 999);
		usleep(10000);
	}
	store_close(s);
	check_committed(dir, t3); /* nothing replayed: the block is committed */

	buf_free(&err);
	rm_temp_dir(dir);
}

/* The blocks of a log that is still there are merged among themselves
 * (compact_after of them) into a block that names the same log: a crash
 * then drops it and replays the log, with nothing lost or counted twice;
 * once the log goes it is committed like any block. */
static void test_store_compacts_a_logs_blocks(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct store_config cfg;
	config_seal_each_batch(&cfg);
	cfg.compact_after = 3;
	struct store *s;
	struct store_stats st;
	struct buf err = { 0 };
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	uint64_t want = 0;
	for (uint64_t k = 0; k < 3; k++) {
		append_samples(s, 5 - k, k + 1, T0 + (int64_t)k * 5000);
		wait_flushes(s, k + 1);
		want += k == 0 ? 100 : k == 1 ? 99 : 95;
	}
	WAIT_STAT(s, compactions, 1);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 1);
	assert_int_equal(total(s), want);
	struct saved_logs logs;
	save_logs(dir, &logs);
	assert_int_equal(logs.n, 1); /* the log is still there: nothing is committed */
	saved_logs_free(&logs);
	assert_int_equal(store_retention(s, INT64_MAX / 2, &err), 0);
	assert_int_equal(total(s), want);
	store_close(s); /* as a crash leaves it */

	store_close(reopen_replayed(dir, &cfg, want)); /* the merged block went */
	check_committed(dir, want);
	buf_free(&err);
	rm_temp_dir(dir);
}

/* The ids in the heads' dictionaries that a merge of a log's blocks keeps
 * for a closed hour (its late rows fold with the heads while the log
 * stays) are forgotten once that block is the hour's only committed one
 * and the hour has settled: no merge would drop them, and the block stays
 * for days. Not while a view holds the block: it reads them as they were
 * when it was opened. */
static void test_store_forgets_a_closed_hours_ids(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct store_config cfg;
	config_seal_each_batch(&cfg);
	cfg.background = false; /* seals, flushes and merges as the test asks */
	cfg.head_max_rows = 1000;
	cfg.compact_after = 2;
	cfg.late_data_wait_ms = 0;
	struct store *s;
	struct store_stats st;
	struct buf err = { 0 };
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	/* Every row of the hour (2023: closed) comes late, from two heads
	 * sealed into one log, whose blocks are merged by its range. */
	for (uint64_t k = 0; k < 2; k++) {
		append_samples(s, 5 - k, k + 1, T0 + (int64_t)k * 5000);
		assert_int_equal(store_seal(s, false, &err), 0);
		assert_int_equal(store_write_sealed(s, &err), 0);
	}
	assert_int_equal(store_compact(s, false, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 1);
	assert_int_equal(st.compactions, 1);
	assert_int_equal(store_flush(s, &err), 0); /* the log goes: committed */
	store_get_stats(s, &st);
	uint64_t with_ids = st.memory_bytes;
	struct store_view *v = store_view_open(s, 0, INT64_MAX / 2);
	assert_int_equal(store_view_count(v), 2); /* the block and the head */
	assert_int_equal(store_compact(s, false, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.memory_bytes, with_ids); /* a view holds the block */
	store_view_carry(v); /* reads the block's ids as the view found them */
	for (size_t i = 0; i < 2; i++) {
		const struct store_segment *g = store_view_begin(v, i);
		assert_non_null(g);
		uint64_t sum = 0;
		for (uint32_t j = 0; g->stack_map && j < g->stack_nown; j++)
			sum += g->stack_map[j];
		assert_true(sum < UINT64_MAX);
		store_view_end(v, i);
	}
	store_view_close(v);
	assert_int_equal(store_compact(s, false, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.compactions, 1); /* nothing merged: the ids went */
	assert_true(st.memory_bytes < with_ids);
	assert_int_equal(total(s), 100 + 99);
	store_close(s);
	buf_free(&err);
	rm_temp_dir(dir);
}

static void test_store_torn_and_corrupt(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char wal[512];
	struct store *s;
	struct buf err = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	for (uint64_t seq = 1; seq <= 3; seq++) {
		append_samples(s, 1, seq, T0 + (int64_t)seq * 5000);
	}
	store_close(s);
	first_wal(dir, wal, sizeof(wal));
	off_t size = file_size(wal);
	off_t rec = size / 3;

	/* A torn tail (half a record, as a crash during write leaves it) is
	 * cut off; the whole records before it are kept. */
	int fd = open(wal, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, "EMBWxxxxxxx", 11), 11);
	close(fd);
	expect_reopened_total(dir, 180);
	assert_int_equal(file_size(wal), size);

	/* A flipped byte inside the second record: its checksum fails, it is
	 * skipped, and the first and third records are still served. */
	fd = open(wal, O_RDWR);
	char c;
	assert_int_equal(pread(fd, &c, 1, rec + rec / 2), 1);
	c ^= 0x5a;
	assert_int_equal(pwrite(fd, &c, 1, rec + rec / 2), 1);
	close(fd);
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 120);
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.wal_skipped_records, 1);
	/* And the store still takes new batches after the damage. */
	append_samples(s, 1, 4, T0 + 20000);
	assert_int_equal(total(s), 180);
	store_close(s);
	expect_reopened_total(dir, 180);
	buf_free(&err);
	rm_temp_dir(dir);
}

/* The names of the block files of the store in dir, sorted. */
static size_t list_blocks(const char *dir, const char *suffix, char names[][600], size_t max)
{
	char bdir[256];
	snprintf(bdir, sizeof(bdir), "%s/blocks", dir);
	DIR *d = opendir(bdir);
	assert_non_null(d);
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < max) {
		size_t l = strlen(e->d_name), sl = strlen(suffix);
		if (l > sl && strcmp(e->d_name + l - sl, suffix) == 0)
			snprintf(names[n++], 600, "%s/%s", bdir, e->d_name);
	}
	closedir(d);
	qsort(names, n, 600, (int (*)(const void *, const void *))strcmp);
	return n;
}

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	char c;
	assert_int_equal(pread(fd, &c, 1, at), 1);
	c ^= 0x5a;
	assert_int_equal(pwrite(fd, &c, 1, at), 1);
	close(fd);
}

static void test_store_blocks(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_store_symbols(dir, &sym);
	struct buf err = { 0 };
	/* Six batches half an hour apart: four hour partitions. */
	for (uint64_t k = 0; k < 6; k++) {
		append_samples(s, 5, k + 1, T0 + (int64_t)k * 1800000);
	}
	const char *all = "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},"
			  "\"synthetic_frames\":[\"thread\"]}";
	char *in_memory = fg_root(s, sym, all);
	assert_int_equal(total(s), 600);
	assert_int_equal(total_range(s, T0, T0 + 1800000), 100);

	/* Written as blocks: the same answers, nothing left in memory. */
	assert_int_equal(store_flush(s, &err), 0);
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0);
	size_t partitions = st.blocks;
	assert_true(partitions >= 3 && partitions <= 4);
	assert_int_equal(st.block_samples, 600);
	char *from_blocks = fg_root(s, sym, all);
	assert_string_equal(in_memory, from_blocks);
	assert_int_equal(total_range(s, T0, T0 + 1800000), 100);
	assert_int_equal(total_range(s, T0 + 1800000, T0 + 5400000), 200);

	/* A late batch for the first hour makes a second block there;
	 * compaction merges it back into one block per partition. */
	append_samples(s, 5, 7, T0 + 1000);
	assert_int_equal(store_flush(s, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, partitions + 1);
	assert_int_equal(store_compact(s, true, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, partitions);
	assert_int_equal(st.block_samples, 700);
	assert_int_equal(total(s), 700);
	char *compacted = fg_root(s, sym, all);
	json_t *d = run_query(s, sym, all);
	json_t *hot_a = child_named(child_named(child_named(child_named(json_object_get(d, "root"),
									  "main"), "main"), "run"), "hot_a");
	assert_int_equal(total_of(hot_a), 7 * 60);
	json_decref(d);

	/* Reopened: the blocks are read back, the logs are gone. */
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 700);
	char *reopened = fg_root(s, sym, all);
	assert_string_equal(compacted, reopened);
	store_close(s);

	/* Damage: a flipped byte in the first block's first chunk fails that
	 * chunk's checksum (its rows are skipped, the rest served); a flipped
	 * byte in the last block's footer sets the whole block aside. */
	char names[16][600];
	size_t nb = list_blocks(dir, ".blk", names, 16);
	assert_int_equal(nb, partitions);
	flip_byte(names[0], 20);
	flip_byte(names[nb - 1], file_size(names[nb - 1]) - 40);
	assert_int_equal(open_store(dir, &s, &err), 0);
	uint64_t left = total(s);
	assert_true(left < 700 - 100 && left > 0);
	store_get_stats(s, &st);
	assert_int_equal(st.corrupt_blocks, 1);
	assert_int_equal(st.blocks, partitions - 1);
	char aside[4][600];
	assert_int_equal(list_blocks(dir, ".corrupt", aside, 4), 1);
	/* And new batches are still taken. */
	append_samples(s, 5, 8, T0 + 2000);
	assert_int_equal(total(s), left + 100);

	/* Retention: partitions that ended before now - 14 days go. */
	assert_int_equal(store_flush(s, &err), 0);
	int64_t day = 24LL * 3600 * 1000;
	int64_t first_end = T0 - T0 % 3600000 + 3600000;
	assert_int_equal(store_retention(s, first_end + 14 * day - 1, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.retention_deleted, 0);
	assert_true(total_range(s, 0, first_end) > 0);
	assert_int_equal(store_retention(s, first_end + 14 * day, &err), 0);
	store_get_stats(s, &st);
	assert_true(st.retention_deleted >= 1);
	assert_int_equal(total_range(s, 0, first_end), 0);
	assert_true(total(s) > 0);
	store_close(s);

	free(in_memory);
	free(from_blocks);
	free(compacted);
	free(reopened);
	symbols_close(sym);
	buf_free(&err);
	rm_temp_dir(dir);
}

/* The head writer over a part: a frame by its text is the frame of its
 * interned strings, found without interning them again; label sets are
 * sorted with repeated keys dropped, and host.name's CPU count is noted. */
static void test_head_writer(void **state)
{
	(void)state;
	struct part p;
	part_init(&p, 1);
	struct store_head h = { &p };
	uint32_t name = store_head_string(&h, STORE_SYMBOL_STRINGS, "main", 4);
	uint32_t bin = store_head_string(&h, STORE_SYMBOL_STRINGS, "/bin/app", 8);
	struct store_frame f = { .type = SFT_NATIVE, .file = 0, .address = 0x40, .name = name,
				 .binary = bin };
	uint32_t id = store_head_frame(&h, &f);
	size_t nstr = p.sstr.count;
	struct store_frame_text ft = {
		.type = SFT_NATIVE, .address = 0x40, .name = "main", .name_len = 4,
		.binary = "/bin/app", .binary_len = 8, .binary_hash = hash_bytes("/bin/app", 8),
	};
	assert_int_equal(store_head_frame_text(&h, &ft), id);
	assert_int_equal(p.sstr.count, nstr);
	/* A new one by its text interns its strings: the same as by ids after. */
	ft.name = "work";
	uint32_t id2 = store_head_frame_text(&h, &ft);
	assert_int_not_equal(id2, id);
	assert_int_equal(p.sstr.count, nstr + 1);
	f.name = store_head_string(&h, STORE_SYMBOL_STRINGS, "work", 4);
	assert_int_equal(store_head_frame(&h, &f), id2);
	assert_int_equal(p.nframes, 2);

	uint32_t k1 = store_head_string(&h, STORE_LABEL_STRINGS, "service.name", 12);
	uint32_t v1 = store_head_string(&h, STORE_LABEL_STRINGS, "api", 3);
	uint32_t kh = store_head_string(&h, STORE_LABEL_STRINGS, "host.name", 9);
	uint32_t vh = store_head_string(&h, STORE_LABEL_STRINGS, "h1", 2);
	uint32_t v2 = store_head_string(&h, STORE_LABEL_STRINGS, "web", 3);
	uint32_t a[6] = { k1, v1, kh, vh, k1, v2 }, b[4] = { kh, vh, k1, v1 };
	uint32_t la = store_head_labels(&h, a, 3, 16);
	assert_int_equal(store_head_labels(&h, b, 2, 0), la);
	const uint32_t *kv;
	assert_int_equal(part_label_pairs(&p, la, &kv), 2);
	assert_int_equal(p.nhosts, 1);
	assert_int_equal(p.hosts[0].name, vh);
	assert_int_equal(p.hosts[0].cpus, 16);
	uint64_t d = store_head_dictionaries(&h);
	assert_int_not_equal(d, 0);
	part_free(&p);
}

/* A part's hosts and agents: one record per name, keeping the most CPUs
 * and the highest sequence number noted. */
static void test_part_hosts_and_agents(void **state)
{
	(void)state;
	struct part p;
	part_init(&p, 1);
	uint32_t h1 = strtab_intern_cstr(&p.lstr, "h1"), h2 = strtab_intern_cstr(&p.lstr, "h2");
	uint32_t a1 = strtab_intern_cstr(&p.lstr, "agent-1"), a2 = strtab_intern_cstr(&p.lstr, "agent-2");
	for (uint32_t i = 0; i < 100; i++) {
		part_note_host(&p, i % 2 ? h2 : h1, i % 2 ? 100 - i : i);
		part_note_agent(&p, i % 2 ? a1 : a2, i % 2 ? 1000 - i : 10 * i);
	}
	assert_int_equal(p.nhosts, 2);
	assert_int_equal(p.hosts[0].name, h1);
	assert_int_equal(p.hosts[0].cpus, 98);
	assert_int_equal(p.hosts[1].name, h2);
	assert_int_equal(p.hosts[1].cpus, 99);
	assert_int_equal(p.nagents, 2);
	assert_int_equal(part_agent_seq(&p, "agent-1"), 999);
	assert_int_equal(part_agent_seq(&p, "agent-2"), 980);
	assert_int_equal(part_agent_seq(&p, "agent-3"), 0);
	assert_int_equal(part_agent_seq(&p, "h1"), 0); /* a string, not an agent */
	part_free(&p);
}

/* --- codecs: a record type the store knows only through its codec ---------------- */

/* A probe record: one sample of value at ts on the stack main;work of
 * service "probe", from agent instance "probe-agent". The entry's index()
 * and the codec's replay() write it through the head writer alike. */
struct probe_rec {
	int64_t ts;
	uint64_t value, seq;
};

static int probe_replays_begun, probe_replays_ended;

static void probe_write(struct store_head *h, const char *project, const struct probe_rec *r)
{
	uint32_t proj = store_head_string(h, STORE_LABEL_STRINGS, project, strlen(project));
	uint32_t frames[2];
	const char *names[2] = { "main", "work" };
	for (int i = 0; i < 2; i++) {
		struct store_frame f = {
			.type = SFT_NATIVE, .address = 0x1000u + (uint64_t)i,
			.name = store_head_string(h, STORE_SYMBOL_STRINGS, names[i], strlen(names[i])),
		};
		frames[i] = store_head_frame(h, &f);
	}
	uint32_t stack = store_head_stack(h, frames, 2);
	/* Out of order and with a repeated key: the writer sorts and keeps the first. */
	uint32_t kv[6] = {
		store_head_string(h, STORE_LABEL_STRINGS, "service.name", 12),
		store_head_string(h, STORE_LABEL_STRINGS, "probe", 5),
		store_head_string(h, STORE_LABEL_STRINGS, "host.name", 9),
		store_head_string(h, STORE_LABEL_STRINGS, "h1", 2),
		store_head_string(h, STORE_LABEL_STRINGS, "service.name", 12),
		store_head_string(h, STORE_LABEL_STRINGS, "other", 5),
	};
	uint32_t labels = store_head_labels(h, kv, 3, 8);
	uint32_t series = store_head_series(h, proj, SEK_ON_CPU, 19, labels);
	store_head_rows(h, &series, r->ts, &stack, &r->value, 1);
	store_head_note_agent(h, "probe-agent", r->seq);
}

static int probe_record(void *ctx, uint64_t gen, struct buf *head, const void **body, size_t *blen,
			struct buf *err)
{
	(void)gen;
	(void)err;
	(void)head;
	*body = ctx;
	*blen = sizeof(struct probe_rec);
	return 0;
}

struct probe_entry {
	struct probe_rec r;
	const char *project;
};

static int probe_index(void *ctx, struct store_head *h, uint64_t gen)
{
	(void)gen;
	const struct probe_entry *p = ctx;
	probe_write(h, p->project, &p->r);
	return 0;
}

static void *probe_replay_begin(void)
{
	probe_replays_begun++;
	return &probe_replays_begun;
}

static int probe_replay(void *state, const char *project, const uint8_t *body, size_t len,
			struct store_head *h, uint32_t head_no, struct store_replayed *out)
{
	(void)head_no;
	assert_ptr_equal(state, &probe_replays_begun);
	struct probe_rec r;
	if (len != sizeof(r))
		return -1;
	memcpy(&r, body, sizeof(r));
	probe_write(h, project, &r);
	snprintf(out->agent_instance, sizeof(out->agent_instance), "probe-agent");
	out->sequence = r.seq;
	return 0;
}

static void probe_replay_end(void *state)
{
	assert_ptr_equal(state, &probe_replays_begun);
	probe_replays_ended++;
}

#define PROBE_TYPE 7
static const struct store_codec probe_codec = {
	.type = PROBE_TYPE, .name = "probe", .replay_begin = probe_replay_begin,
	.replay = probe_replay, .replay_end = probe_replay_end,
};

static int probe_append(struct store *s, uint8_t type, int64_t ts, uint64_t value, uint64_t seq,
			struct buf *err)
{
	struct probe_entry p = { { ts, value, seq }, PROJECT };
	struct store_entry e = {
		.project = PROJECT, .agent_instance = "probe-agent", .sequence = seq,
		.start_unix_ms = ts, .record_type = type, .record = probe_record,
		.index = probe_index, .ctx = &p,
	};
	return store_append_entry(s, &e, err);
}

/* The store replays a record type only through the codec registered for
 * it: what the entry's index() wrote comes back through the codec's
 * replay, duplicates included; a type without a codec is refused at
 * append, and a log holding one makes store_open fail and keeps the log. */
static void test_store_codecs(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	const struct store_codec *const probe_only[] = { &probe_codec };
	const struct store_codec *const twice[] = { &probe_codec, &probe_codec };
	struct store_config cfg;
	store_config_default(&cfg);
	cfg.background = false;
	cfg.time_window = false;
	cfg.codecs = probe_only;
	cfg.ncodecs = 1;
	struct store *s;
	struct buf err = { 0 };
	probe_replays_begun = probe_replays_ended = 0;
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	assert_int_equal(probe_replays_begun, 1); /* no log yet: begun and ended all the same */
	assert_int_equal(probe_replays_ended, 1);
	assert_int_equal(probe_append(s, PROBE_TYPE, T0, 30, 1, &err), STORE_OK);
	assert_int_equal(probe_append(s, PROBE_TYPE, T0 + 5000, 12, 2, &err), STORE_OK);
	assert_int_equal(probe_append(s, PROBE_TYPE, T0 + 5000, 12, 2, &err), STORE_DUPLICATE);
	/* A type no codec reads would not come back after a restart. */
	assert_int_equal(probe_append(s, PROBE_TYPE + 1, T0, 5, 3, &err), STORE_FAILED);
	assert_non_null(strstr(err.data, "no codec reads log records of type 8"));
	/* Version 1 batches have no codec here either. */
	struct buf z = { 0 };
	make_batch(sample_specs, 1, 4, T0, &z);
	Ember__Ingest__V1__Batch *b = batch_decode(z.data, z.len, &err);
	buf_reset(&err);
	assert_int_equal(batch_append(s, PROJECT, b, z.data, z.len, &err), STORE_FAILED);
	batch_decode_free(b);
	assert_int_equal(total(s), 42);
	store_close(s);

	/* Without the codec the log is not read: store_open fails and keeps it. */
	cfg.ncodecs = 0;
	buf_reset(&err);
	assert_int_equal(store_open(dir, &cfg, &s, &err), -1);
	assert_non_null(strstr(err.data, "records of type 7"));
	cfg.codecs = twice;
	cfg.ncodecs = 2;
	buf_reset(&err);
	assert_int_equal(store_open(dir, &cfg, &s, &err), -1);
	assert_non_null(strstr(err.data, "two codecs"));

	/* With it, both records come back through it, their agent sequence too. */
	cfg.codecs = probe_only;
	cfg.ncodecs = 1;
	probe_replays_begun = probe_replays_ended = 0;
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	assert_int_equal(probe_replays_begun, 1);
	assert_int_equal(probe_replays_ended, 1);
	assert_int_equal(total(s), 42);
	assert_int_equal(probe_append(s, PROBE_TYPE, T0 + 5000, 12, 2, &err), STORE_DUPLICATE);
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.batches, 2);
	assert_int_equal(st.wal_skipped_records, 0);
	/* Written as blocks, the rows and the agent's sequence stay. */
	assert_int_equal(store_flush(s, &err), 0);
	store_close(s);
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	assert_int_equal(total(s), 42);
	assert_int_equal(probe_append(s, PROBE_TYPE, T0, 30, 1, &err), STORE_DUPLICATE);
	store_close(s);
	buf_free(&z);
	buf_free(&err);
	rm_temp_dir(dir);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_batch_rejects),
	cmocka_unit_test(test_frame_type_names),
	cmocka_unit_test(test_store_durable_and_dedup),
	cmocka_unit_test(test_store_torn_and_corrupt),
	cmocka_unit_test(test_store_flush_of_several_logs),
	cmocka_unit_test(test_store_shared_log),
	cmocka_unit_test(test_store_compacts_a_logs_blocks),
	cmocka_unit_test(test_store_forgets_a_closed_hours_ids),
	cmocka_unit_test(test_store_blocks),
	cmocka_unit_test(test_head_writer),
	cmocka_unit_test(test_part_hosts_and_agents),
	cmocka_unit_test(test_store_codecs))
