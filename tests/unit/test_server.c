/* Unit tests: batch validation, the store (durability, replay, blocks,
 * compaction, damage, retention), the flamegraph query and HTTP route
 * matching. The CEL filter has its own file (test_cel.c). */
#include "testutil.h"
#include "storeutil.h"
#include "slicefixture.h"

#include <dirent.h>
#include <math.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <zstd.h>

#include "agent/batch.h"
#include "compress.h"
#include "server/ingest/batch_decode.h"
#include "server/query/display.h"
#include "server/query/entities.h"
#include "server/query/events.h"
#include "server/query/flamegraph.h"
#include "server/query/functions.h"
#include "server/http/http.h"
#include "server/http/mcp.h"
#include "server/store/merge.h"
#include "server/metrics/metrics.h"
#include "server/store/projects.h"
#include "server/http/server.h"
#include "server/auth/authz.h"
#include "server/store/part.h"
#include "server/query/scan.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"
#include "server/query/tree.h"
#include "server/query/uregex.h"
#include "server/store/wal.h"
#include "symfile.h"
#include "util.h"

#define T0 1700000000000LL

/* Builds a batch: each stack is a list of names (outermost first);
 * "file:0x..." names a native frame of file id 0x11.. at that offset. */
struct spec {
	const char *frames[6];
	const char *exe;
	const char *thread;
	uint64_t value;
};

static void make_batch_kind(const struct spec *specs, size_t n, uint64_t seq, int64_t start,
			    enum event_kind kind, struct buf *out)
{
	struct batch b;
	batch_init(&b);
	struct file_id fid;
	memset(fid.b, 0x11, sizeof(fid.b));
	for (size_t i = 0; i < n; i++) {
		uint32_t ids[6];
		size_t depth = 0;
		for (; depth < 6 && specs[i].frames[depth]; depth++) {
			const char *name = specs[i].frames[depth];
			struct bframe f = { .type = FT_NATIVE };
			if (strncmp(name, "file:", 5) == 0) {
				f.file = batch_file(&b, 0, &fid, "libfoo.so", NULL, 0, NULL, 0);
				f.address = strtoull(name + 5, NULL, 16);
			} else if (strncmp(name, "k:", 2) == 0) {
				f.type = FT_KERNEL;
				f.name = batch_string(&b, name + 2, strlen(name + 2));
				f.binary = batch_string(&b, "vmlinux", 7);
			} else {
				f.name = batch_string(&b, name, strlen(name));
				f.binary = batch_string(&b, specs[i].exe, strlen(specs[i].exe));
			}
			ids[depth] = batch_frame(&b, &f);
		}
		uint32_t kv[] = {
			batch_string(&b, "process.executable.name", 23),
			batch_string(&b, specs[i].exe, strlen(specs[i].exe)),
			batch_string(&b, "thread.name", 11),
			batch_string(&b, specs[i].thread, strlen(specs[i].thread)),
			batch_string(&b, "host.name", 9),
			batch_string(&b, "h1", 2),
		};
		batch_add(&b, batch_stack(&b, ids, depth), batch_resource(&b, kv, 6), kind,
			  specs[i].value);
	}
	struct batch_meta meta = { "agent-1", seq, "default", start, start + 5000, 19 };
	assert_int_equal(batch_encode(&b, &meta, out), 0);
	batch_free(&b);
}

static void make_batch(const struct spec *specs, size_t n, uint64_t seq, int64_t start,
		       struct buf *out)
{
	make_batch_kind(specs, n, seq, start, EK_ON_CPU, out);
}

static const struct spec sample_specs[] = {
	{ { "main", "run", "hot_a", NULL }, "app", "main", 60 },
	{ { "main", "run", "hot_b", NULL }, "app", "main", 30 },
	{ { "main", "run", "hot_b", "k:do_syscall_64", NULL }, "app", "main", 5 },
	{ { "main", "file:0x1010", NULL }, "app", "worker", 4 },
	{ { "main", "idle_loop", NULL }, "other", "main", 1 },
};

static void append(struct store *s, const struct buf *z)
{
	struct buf err = { 0 };
	Ember__Ingest__V1__Batch *b = batch_decode(z->data, z->len, &err);
	if (!b)
		fail_msg("decode: %s", err.data);
	int rc = store_append(s, "00000000-0000-0000-0000-000000000000", b, z->data, z->len, &err);
	if (rc != 0)
		fail_msg("append returned %d: %s", rc, err.data);
	batch_decode_free(b);
	buf_free(&err);
}

static const char PROJECT[] = "00000000-0000-0000-0000-000000000000";

/* Sum of the on-CPU values of the test project in [from, to). */
static uint64_t total_range(struct store *s, int64_t from, int64_t to)
{
	return store_sum(s, PROJECT, from, to);
}

static uint64_t total(struct store *s)
{
	return total_range(s, 0, INT64_MAX / 2);
}

/* A store without its maintenance thread: the tests flush and compact. */
static int open_store(const char *dir, struct store **s, struct buf *err)
{
	struct store_config cfg;
	store_config_default(&cfg);
	cfg.background = false;
	cfg.time_window = false; /* fixed times, years ago */
	return store_open(dir, &cfg, s, err);
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
	assert_int_equal(store_append(s, "00000000-0000-0000-0000-000000000000", b, z1.data, z1.len,
				      &err), 1);
	batch_decode_free(b);
	assert_int_equal(total(s), 190);
	store_close(s);

	/* Reopened: everything acknowledged is back, duplicates still known. */
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 190);
	b = batch_decode(z2.data, z2.len, &err);
	assert_int_equal(store_append(s, "00000000-0000-0000-0000-000000000000", b, z2.data, z2.len,
				      &err), 1);
	batch_decode_free(b);
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.batches, 2);
	store_close(s);
	buf_free(&z1);
	buf_free(&z2);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
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
	struct buf err = { 0 }, z1 = { 0 }, z2 = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	make_batch(sample_specs, 5, 1, T0, &z1);
	append(s, &z1);
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0);
	make_batch(sample_specs, 2, 2, T0 + 5000, &z2);
	append(s, &z2);
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
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 190);
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0); /* and stays so */
	assert_int_equal(total(s), 190);
	store_close(s);

	/* The crash before the first deletion. */
	restore_logs(dir, &logs, 0);
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 190);
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 190);
	store_close(s);

	for (size_t i = 0; i < logs.n; i++)
		free(logs.data[i]);
	buf_free(&z1);
	buf_free(&z2);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

static void wait_flushes(struct store *s, uint64_t n)
{
	struct store_stats st;
	for (int i = 0; i < 1000; i++) {
		store_get_stats(s, &st);
		if (st.flushes >= n)
			return;
		usleep(10000);
	}
	fail_msg("no flush after 10 s (%llu of %llu)", (unsigned long long)st.flushes,
		 (unsigned long long)n);
}

/* A store whose maintenance thread seals the head after every batch and
 * writes it as blocks, all into one log while nothing asks for another. */
static void config_seal_each_batch(struct store_config *cfg)
{
	store_config_default(cfg);
	cfg->time_window = false;
	cfg->retention_ms = INT64_MAX / 4;
	cfg->head_max_rows = 1;
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
	struct buf err = { 0 }, z1 = { 0 }, z2 = { 0 };
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	make_batch(sample_specs, 5, 1, T0, &z1);
	append(s, &z1);
	wait_flushes(s, 1);
	make_batch(sample_specs, 2, 2, T0 + 5000, &z2);
	append(s, &z2);
	wait_flushes(s, 2);
	struct saved_logs logs;
	save_logs(dir, &logs);
	assert_int_equal(logs.n, 1); /* both heads wrote to one log, still there */
	for (size_t i = 0; i < logs.n; i++)
		free(logs.data[i]);
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

	cfg.background = false;
	cfg.head_max_rows = 1000; /* the replay keeps the rows in its head */
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 0); /* dropped: the log is replayed */
	assert_int_equal(total(s), 190);
	assert_int_equal(store_flush(s, &err), 0);
	save_logs(dir, &logs);
	assert_int_equal(logs.n, 1); /* only the new current log */
	for (size_t i = 0; i < logs.n; i++)
		free(logs.data[i]);
	assert_int_equal(total(s), 190);
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
	make_batch(sample_specs, 1, 3, T0 + 10000, &z1);
	append(s, &z1);
	wait_flushes(s, 1); /* in a new log: the start had a log to replay */
	make_batch(sample_specs, 1, 4, T0 + 15000, &z2);
	append(s, &z2);
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
	cfg.background = false;
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0); /* nothing replayed: the block is committed */
	assert_int_equal(total(s), t3);
	store_close(s);

	buf_free(&z1);
	buf_free(&z2);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
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
	struct buf err = { 0 }, z = { 0 };
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	uint64_t want = 0;
	for (uint64_t k = 0; k < 3; k++) {
		buf_reset(&z);
		make_batch(sample_specs, 5 - k, k + 1, T0 + (int64_t)k * 5000, &z);
		append(s, &z);
		wait_flushes(s, k + 1);
		want += k == 0 ? 100 : k == 1 ? 99 : 95;
	}
	for (int i = 0; i < 1000; i++) {
		store_get_stats(s, &st);
		if (st.compactions >= 1)
			break;
		assert_true(i < 999);
		usleep(10000);
	}
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 1);
	assert_int_equal(total(s), want);
	struct saved_logs logs;
	save_logs(dir, &logs);
	assert_int_equal(logs.n, 1); /* the log is still there: nothing is committed */
	for (size_t i = 0; i < logs.n; i++)
		free(logs.data[i]);
	assert_int_equal(store_retention(s, INT64_MAX / 2, &err), 0);
	assert_int_equal(total(s), want);
	store_close(s); /* as a crash leaves it */

	cfg.background = false;
	cfg.head_max_rows = 1000;
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 0); /* the merged block went; the log is replayed */
	assert_int_equal(total(s), want);
	assert_int_equal(store_flush(s, &err), 0);
	assert_int_equal(total(s), want);
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0);
	assert_int_equal(total(s), want);
	store_close(s);
	buf_free(&z);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

static off_t file_size(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

static void test_store_torn_and_corrupt(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char wal[512];
	struct store *s;
	struct buf err = { 0 }, z = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	for (uint64_t seq = 1; seq <= 3; seq++) {
		buf_reset(&z);
		make_batch(sample_specs, 1, seq, T0 + (int64_t)seq * 5000, &z);
		append(s, &z);
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
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 180);
	store_close(s);
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
	buf_reset(&z);
	make_batch(sample_specs, 1, 4, T0 + 20000, &z);
	append(s, &z);
	assert_int_equal(total(s), 180);
	store_close(s);
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(total(s), 180);
	store_close(s);
	buf_free(&z);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

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
	rm_rf(dir);
	free(dir);
}

/* Finds a child by name in the flamegraph JSON (via jansson). */
#include <jansson.h>

static json_t *child_named(json_t *node, const char *name)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(node, "children"), i, c)
	if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
		return c;
	return NULL;
}

static json_int_t total_of(json_t *n)
{
	return n ? json_integer_value(json_object_get(n, "total")) : -1;
}

/* The flamegraph answer to body; prune_at (0 = the default) as in
 * struct fg_request. */
static json_t *run_query_pruned(struct store *s, struct symbols *sym, const char *body,
				size_t prune_at)
{
	struct fg_request r;
	struct buf err = { 0 }, out = { 0 };
	if (fg_request_parse(&r, body, strlen(body), &err) < 0)
		fail_msg("parse: %s", err.data);
	strcpy(r.scope.project_id, PROJECT);
	r.prune_at = prune_at;
	if (flamegraph_query(s, sym, NULL, &r, &out, &err) < 0)
		fail_msg("query: %s", err.data);
	json_error_t je;
	json_t *doc = json_loads(out.data, 0, &je);
	if (!doc)
		fail_msg("answer is not JSON: %s", je.text);
	fg_request_free(&r);
	buf_free(&err);
	buf_free(&out);
	return doc;
}

static json_t *run_query(struct store *s, struct symbols *sym, const char *body)
{
	return run_query_pruned(s, sym, body, 0);
}

/* The fixture of the query tests: a store and symbols in a fresh
 * directory, closed and removed after the test (cmocka setup/teardown). */
struct world {
	char *dir;
	struct store *s;
	struct symbols *sym;
};

static int world_setup(void **state)
{
	struct world *w = xcalloc(1, sizeof(*w));
	struct buf err = { 0 };
	w->dir = make_temp_dir();
	if (open_store(w->dir, &w->s, &err) < 0 || symbols_open(w->dir, &w->sym, &err) < 0) {
		print_error("fixture: %s\n", err.data ? err.data : "?");
		if (w->s)
			store_close(w->s);
		rm_rf(w->dir);
		free(w->dir);
		free(w);
		buf_free(&err);
		return -1;
	}
	buf_free(&err);
	*state = w;
	return 0;
}

static int world_teardown(void **state)
{
	struct world *w = *state;
	symbols_close(w->sym);
	store_close(w->s);
	rm_rf(w->dir);
	free(w->dir);
	free(w);
	return 0;
}

/* "symbols_pending": frames without a name whose file an agent was just
 * told to upload count until the symbols arrive (or the expectation
 * lapses); the flamegraph and top functions answer it. */
static void test_symbols_pending(void **state)
{
	struct world *w = *state;
	struct buf err = { 0 }, z = { 0 }, sf = { 0 };
	make_batch(sample_specs, 5, 1, T0, &z);
	append(w->s, &z);
	const char *body = "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
			   "\"event_kind\":\"on_cpu\",\"query\":null},\"synthetic_frames\":[]}";
	json_t *d = run_query(w->s, w->sym, body);
	/* Unnamed, but nobody said symbols were coming. */
	assert_non_null(child_named(child_named(json_object_get(d, "root"), "main"), "libfoo.so+0x1010"));
	assert_int_equal(json_integer_value(json_object_get(d, "symbols_pending")), 0);
	json_decref(d);

	struct file_id fid;
	memset(fid.b, 0x11, sizeof(fid.b));
	int64_t now = now_unix_ms();
	symbols_expect(w->sym, &fid, now);
	assert_true(symbols_expected(w->sym, &fid, now + 1000));
	assert_false(symbols_expected(w->sym, &fid, now + SYMBOLS_EXPECT_MS)); /* lapsed */
	d = run_query(w->s, w->sym, body);
	assert_int_equal(json_integer_value(json_object_get(d, "symbols_pending")), 1);
	json_decref(d);
	/* top_functions says the same. */
	struct fn_request fr;
	const char *fbody = "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
			    "\"event_kind\":\"on_cpu\",\"query\":null}}";
	assert_int_equal(fn_request_parse(&fr, FN_TOP, fbody, strlen(fbody), &err), 0);
	strcpy(fr.scope.project_id, PROJECT);
	struct buf out = { 0 };
	assert_int_equal(functions_query(w->s, w->sym, NULL, &fr, &out, &err), 0);
	assert_non_null(strstr(out.data, "\"symbols_pending\":1,"));
	fn_request_free(&fr);
	buf_reset(&out);

	/* The upload arrives: named, nothing pending. */
	struct symfile_builder *b = symfile_builder_new();
	symfile_add_segment(b, 0x1000, 0x1000, 0x1000);
	uint32_t c = symfile_chain(b, "foo_compute", "src/foo.c", 12, 0);
	symfile_add_range(b, 0x1000, 0x1040, c, 100);
	assert_int_equal(symfile_finish(b, &sf), 0);
	symfile_builder_free(b);
	assert_int_equal(symbols_put(w->sym, &fid, NULL, 0, sf.data, sf.len, &err), 0);
	assert_false(symbols_expected(w->sym, &fid, now + 1000));
	d = run_query(w->s, w->sym, body);
	assert_non_null(child_named(child_named(json_object_get(d, "root"), "main"), "foo_compute"));
	assert_int_equal(json_integer_value(json_object_get(d, "symbols_pending")), 0);
	json_decref(d);
	buf_free(&out);
	buf_free(&sf);
	buf_free(&z);
	buf_free(&err);
}

static void test_flamegraph(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 }, sf = { 0 };
	make_batch(sample_specs, 5, 1, T0, &z);
	append(s, &z);

	/* Without symbols the native frame is named by binary and offset. */
	json_t *d = run_query(s, sym,
			      "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
			      "\"event_kind\":\"on_cpu\",\"frame_mask\":{\"patterns\":[]},\"query\":null},"
			      "\"num_samples\":null,\"num_stat_buckets\":null,\"synthetic_frames\":[]}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 100);
	assert_int_equal(json_integer_value(json_object_get(d, "sample_rate_hz")), 19);
	assert_string_equal(json_string_value(json_object_get(d, "unit")), "samples");
	json_t *root = json_object_get(d, "root");
	assert_string_equal(json_string_value(json_object_get(root, "frame_type")), "root");
	/* "main" of app and "main" of other are different frames (binaries
	 * differ); the larger comes first. */
	json_t *main_ = child_named(root, "main");
	assert_string_equal(json_string_value(json_object_get(main_, "binary")), "app");
	assert_int_equal(total_of(main_), 99);
	assert_int_equal(json_array_size(json_object_get(root, "children")), 2);
	json_t *run = child_named(main_, "run");
	assert_int_equal(total_of(run), 95);
	/* Children sorted by total, largest first. */
	json_t *first = json_array_get(json_object_get(run, "children"), 0);
	assert_string_equal(json_string_value(json_object_get(first, "name")), "hot_a");
	json_t *hot_b = child_named(run, "hot_b");
	assert_int_equal(total_of(hot_b), 35);
	assert_int_equal(json_integer_value(json_object_get(hot_b, "self")), 30);
	json_t *k = child_named(hot_b, "do_syscall_64");
	assert_string_equal(json_string_value(json_object_get(k, "frame_type")), "kernel");
	assert_non_null(child_named(main_, "libfoo.so+0x1010"));
	json_decref(d);

	/* Symbols arrive later: the same stored samples now have names, and
	 * the C++ function inlined at that address is a frame of its own. */
	struct symfile_builder *b = symfile_builder_new();
	symfile_add_segment(b, 0x1000, 0x1000, 0x1000);
	uint32_t outer = symfile_chain(b, "foo_compute", "src/foo.c", 12, 0);
	uint32_t inner = symfile_chain(b, "_ZN2ns6helperEv", "src/helper.h", 7, outer);
	symfile_add_range(b, 0x1000, 0x1040, inner, 100);
	symfile_set_flags(b, SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	assert_int_equal(symfile_finish(b, &sf), 0);
	symfile_builder_free(b);
	struct file_id fid;
	memset(fid.b, 0x11, sizeof(fid.b));
	assert_int_equal(symbols_put(sym, &fid, NULL, 0, sf.data, sf.len, &err), 0);

	/* From here on the samples are read from a block file. */
	assert_int_equal(store_flush(s, &err), 0);
	struct store_stats fst;
	store_get_stats(s, &fst);
	assert_int_equal(fst.blocks, 1);
	assert_int_equal(fst.unflushed_rows, 0);

	/* Synthetic frames group by executable then thread; a CEL filter and
	 * a frame mask apply. */
	d = run_query(s, sym,
		      "{\"filter\":{\"start_ts\":946684800000,\"end_ts\":4102444800000,"
		      "\"query\":\"process.executable.name == \\\"app\\\"\","
		      "\"frame_mask\":{\"patterns\":[\"^run$\"]}},"
		      "\"synthetic_frames\":[\"executable\",\"thread\",\"deployment\"]}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 99);
	root = json_object_get(d, "root");
	json_t *app = child_named(root, "app");
	assert_string_equal(json_string_value(json_object_get(app, "frame_type")), "synthetic");
	assert_null(child_named(root, "other"));
	json_t *worker = child_named(child_named(app, "worker"), "[no deployment]");
	assert_non_null(worker);
	json_t *named = child_named(child_named(worker, "main"), "foo_compute");
	assert_non_null(named);
	assert_string_equal(json_string_value(json_object_get(named, "binary")), "libfoo.so");
	assert_string_equal(json_string_value(json_object_get(named, "file")), "src/foo.c");
	assert_int_equal(json_integer_value(json_object_get(named, "line")), 12);
	json_t *inl = child_named(named, "ns::helper"); /* demangled */
	assert_non_null(inl);
	assert_string_equal(json_string_value(json_object_get(inl, "file")), "src/helper.h");
	assert_int_equal(json_integer_value(json_object_get(inl, "line")), 7);
	assert_int_equal(json_integer_value(json_object_get(inl, "self")), 4);
	json_t *mainthr = child_named(child_named(child_named(app, "main"), "[no deployment]"), "main");
	/* "run" is masked: its children hang from main directly. */
	assert_null(child_named(mainthr, "run"));
	assert_int_equal(total_of(child_named(mainthr, "hot_a")), 60);
	json_decref(d);

	/* A time range without data, and time buckets. */
	d = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":2}}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 0);
	json_decref(d);
	d = run_query(s, sym,
		      "{\"filter\":{\"start_ts\":1699999990000,\"end_ts\":1700000010000},\"num_stat_buckets\":4}");
	json_t *vals = json_object_get(json_object_get(d, "stats"), "values");
	assert_int_equal(json_array_size(vals), 4);
	assert_int_equal(json_integer_value(json_array_get(vals, 2)), 100);
	json_decref(d);
	/* With a search, the buckets count what the tree counts: the stacks
	 * through a matching function. */
	d = run_query(s, sym,
		      "{\"filter\":{\"start_ts\":1699999990000,\"end_ts\":1700000010000},\"num_stat_buckets\":4,"
		      "\"search\":\"^hot_a$\"}");
	vals = json_object_get(json_object_get(d, "stats"), "values");
	json_int_t sum = 0;
	for (size_t i = 0; i < json_array_size(vals); i++)
		sum += json_integer_value(json_array_get(vals, i));
	assert_true(json_integer_value(json_object_get(d, "total")) > 0);
	assert_true(json_integer_value(json_object_get(d, "total")) < 100);
	assert_int_equal(sum, json_integer_value(json_object_get(d, "total")));
	json_decref(d);
	/* num_samples: a deterministic subset, never more than the whole. */
	d = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},\"num_samples\":50}");
	assert_int_equal(json_integer_value(json_object_get(d, "sampled_from")), 100);
	assert_true(json_integer_value(json_object_get(d, "total")) <= 100);
	json_decref(d);

	buf_free(&z);
	buf_free(&sf);
	buf_free(&err);
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

/* The flamegraph's root, as canonical JSON text. */
static char *fg_root(struct store *s, struct symbols *sym, const char *body)
{
	json_t *d = run_query(s, sym, body);
	char *text = json_dumps(json_object_get(d, "root"), JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(d);
	return text;
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
	struct store *s;
	struct symbols *sym;
	struct buf err = { 0 }, z = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(symbols_open(dir, &sym, &err), 0);
	/* Six batches half an hour apart: four hour partitions. */
	for (uint64_t k = 0; k < 6; k++) {
		buf_reset(&z);
		make_batch(sample_specs, 5, k + 1, T0 + (int64_t)k * 1800000, &z);
		append(s, &z);
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
	buf_reset(&z);
	make_batch(sample_specs, 5, 7, T0 + 1000, &z);
	append(s, &z);
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
	buf_reset(&z);
	make_batch(sample_specs, 5, 8, T0 + 2000, &z);
	append(s, &z);
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
	buf_free(&z);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

/* Depth-first node order: node i's parent is node i - 1 or one of its
 * ancestors, and parents come before children. */
static void assert_preorder(const struct part *p)
{
	for (size_t i = 1; i < p->nnodes; i++) {
		uint32_t parent = p->node_parent[i];
		assert_true(parent < i);
		uint32_t a = (uint32_t)i - 1;
		while (a != parent && a != 0)
			a = p->node_parent[a];
		assert_int_equal(a, parent);
	}
}

static const uint32_t sort_stacks[][4] = {
	{ 1, 2, 3, 0 }, { 4, 5, 0, 0 }, { 1, 2, 6, 0 }, { 4, 7, 8, 0 }, { 1, 9, 0, 0 }, { 4, 5, 10, 11 },
};

static size_t stack_depth(const uint32_t *f)
{
	size_t n = 0;
	while (n < 4 && f[n])
		n++;
	return n;
}

/* Stack i of sort_stacks as frame ids of p: frame k is "fk". */
static size_t sort_stack(struct part *p, size_t i, uint32_t *frames)
{
	size_t d = stack_depth(sort_stacks[i]);
	for (size_t j = 0; j < d; j++) {
		char name[16];
		snprintf(name, sizeof(name), "f%u", sort_stacks[i][j]);
		struct store_frame f = { .type = SFT_NATIVE,
					 .name = strtab_intern(&p->sstr, name, strlen(name)) };
		frames[j] = part_frame(p, &f);
	}
	return d;
}

/* part_sort_nodes renumbers a tree built in first-use order depth first,
 * keeps every stack and its indexes; merge_write leaves blocks so. */
/* stack_sums_order gives every leaf once, in id order, whether it sorts
 * the list (few leaves) or collects them from the values (many). */
static void check_order(const uint32_t *in, size_t n, size_t nnodes)
{
	struct stack_sums ss = { 0 };
	ss.cap = nnodes;
	ss.v = calloc(nnodes, sizeof(uint64_t));
	ss.leaves = malloc(n * sizeof(uint32_t));
	ss.capleaves = n;
	for (size_t i = 0; i < n; i++) {
		ss.leaves[ss.n++] = in[i];
		ss.v[in[i]] = 10 + i;
	}
	stack_sums_order(&ss, nnodes);
	assert_int_equal(ss.n, n);
	for (size_t i = 1; i < n; i++)
		assert_true(ss.leaves[i - 1] < ss.leaves[i]);
	for (size_t i = 0; i < n; i++) {
		bool found = false;
		for (size_t j = 0; j < n; j++)
			found |= ss.leaves[j] == in[i];
		assert_true(found);
	}
	stack_sums_free(&ss);
}

/* Checks a written node: its total is its self plus its children's
 * totals; counts the nodes. */
static size_t check_node_sums(json_t *n)
{
	json_int_t self = json_integer_value(json_object_get(n, "self"));
	json_int_t total = json_integer_value(json_object_get(n, "total"));
	json_int_t sum = 0, prev = INT64_MAX;
	size_t count = 1, i;
	json_t *c;
	json_array_foreach(json_object_get(n, "children"), i, c) {
		json_int_t ct = json_integer_value(json_object_get(c, "total"));
		/* sorted, largest first, "[other]" included */
		assert_true(ct <= prev);
		prev = ct;
		sum += ct;
		count += check_node_sums(c);
	}
	assert_int_equal(total, self + sum);
	return count;
}

/* A wide synthetic tree written within node budgets: never more nodes than
 * the budget, the "[other]" nodes included; every parent's total its self
 * plus its children's, the children sorted largest first ("[other]" where
 * its total puts it); the root's total whole. */
static void test_otree_write_budget(void **state)
{
	(void)state;
	struct buf err = { 0 };
	struct display_opts dopts = { 0 };
	struct display *d = display_new(NULL, NULL, &dopts, "masks", &err);
	assert_non_null(d);
	uint32_t root_key = display_key(d, SFT_NATIVE, "root", "", NULL);
	struct otree t;
	otree_init(&t, root_key);
	/* 300 children of the root, each with 0..40 children and some
	 * grandchildren: about 20 000 nodes; values from a fixed LCG. */
	uint64_t x = 12345, total = 0;
	char name[64];
	for (int a = 0; a < 300; a++) {
		snprintf(name, sizeof(name), "f%d", a);
		uint32_t na = otree_child(&t, 0, display_key(d, SFT_NATIVE, name, "bin", NULL));
		int kids = (int)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 59) + a % 10;
		for (int b = 0; b < kids; b++) {
			snprintf(name, sizeof(name), "g%d", b);
			uint32_t nb = otree_child(&t, na, display_key(d, SFT_NATIVE, name, "bin", NULL));
			for (int c = 0; c < 1 + b % 5; c++) {
				snprintf(name, sizeof(name), "h%d", c);
				uint32_t nc = otree_child(&t, nb, display_key(d, SFT_NATIVE, name, "bin", NULL));
				uint64_t v = 1 + ((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 54);
				t.nodes[nc].self += v;
				t.nodes[nc].total += v;
				t.nodes[nb].total += v;
				t.nodes[na].total += v;
				t.nodes[0].total += v;
				total += v;
			}
			if (b % 3 == 0) { /* some self time in the middle */
				t.nodes[nb].self += 7;
				t.nodes[nb].total += 7;
				t.nodes[na].total += 7;
				t.nodes[0].total += 7;
				total += 7;
			}
		}
	}
	assert_true(t.n > 5000);
	const size_t budgets[] = { 2, 3, 10, 100, 1000, 4096, 8192, 1000000 };
	for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		struct buf out = { 0 };
		struct jsonw w;
		jsonw_init(&w, &out);
		size_t written = otree_write(&t, d, budgets[i], &w);
		assert_int_equal(jsonw_finish(&w), 0);
		json_error_t je;
		json_t *doc = json_loadb(out.data, out.len, 0, &je);
		assert_non_null(doc);
		assert_int_equal(json_integer_value(json_object_get(doc, "total")), total);
		size_t nodes = check_node_sums(doc);
		assert_int_equal(nodes, written);
		assert_true(nodes <= budgets[i]);
		/* The budget is used: within one [other] per level of the tree of
		 * what it could hold. */
		if (budgets[i] < t.n)
			assert_true(nodes + 4 >= budgets[i] || budgets[i] < 4);
		else
			assert_int_equal(nodes, t.n);
		json_decref(doc);
		buf_free(&out);
	}
	otree_free(&t);
	display_free(d);
	buf_free(&err);
}

/* Ties at the smallest total kept are decided by the written order
 * (total, then name), not by the order the tree was built in: the same
 * tree built in two orders is written the same within any budget. */
static void test_otree_write_ties(void **state)
{
	(void)state;
	struct buf err = { 0 };
	struct display_opts dopts = { 0 };
	struct display *d = display_new(NULL, NULL, &dopts, "masks", &err);
	assert_non_null(d);
	struct otree t[2];
	char name[32];
	for (int which = 0; which < 2; which++) {
		otree_init(&t[which], display_key(d, SFT_NATIVE, "root", "", NULL));
		for (int j = 0; j < 50; j++) {
			int a = which ? 49 - j : j;
			snprintf(name, sizeof(name), "f%02d", a);
			uint32_t na = otree_child(&t[which], 0, display_key(d, SFT_NATIVE, name, "b", NULL));
			for (int c = 0; c < 4; c++) {
				snprintf(name, sizeof(name), "g%d", which ? 3 - c : c);
				uint32_t nc = otree_child(&t[which], na, display_key(d, SFT_NATIVE, name, "b", NULL));
				t[which].nodes[nc].self = t[which].nodes[nc].total = 1;
				t[which].nodes[na].total++;
				t[which].nodes[0].total++;
			}
		}
	}
	for (size_t budget = 2; budget < 260; budget += 7) {
		struct buf out[2] = { { 0 } };
		struct jsonw jw[2];
		jsonw_init(&jw[0], &out[0]);
		jsonw_init(&jw[1], &out[1]);
		size_t w0 = otree_write(&t[0], d, budget, &jw[0]);
		size_t w1 = otree_write(&t[1], d, budget, &jw[1]);
		assert_int_equal(jsonw_finish(&jw[0]) | jsonw_finish(&jw[1]), 0);
		assert_int_equal(w0, w1);
		assert_true(w0 <= budget);
		assert_string_equal(out[0].data, out[1].data);
		buf_free(&out[0]);
		buf_free(&out[1]);
	}
	otree_free(&t[0]);
	otree_free(&t[1]);
	display_free(d);
	buf_free(&err);
}

/* A tree's children: each found as the same node, in a list of 16 or in
 * the index beyond, in any order; after a prune, kept children are found
 * and folded ones (and new ones) go to "[other]". */
static void test_otree_child(void **state)
{
	(void)state;
	struct otree t;
	otree_init(&t, 1000);
	enum { KIDS = 40 };
	uint32_t kid[KIDS];
	for (uint32_t k = 0; k < KIDS; k++) {
		kid[k] = otree_child(&t, 0, 10 + k);
		assert_int_equal(otree_child(&t, 0, 10 + k), kid[k]); /* the one found last */
		t.nodes[kid[k]].total = t.nodes[kid[k]].self = k + 1;
	}
	assert_int_equal(t.n, KIDS + 1);
	assert_true(t.nodes[0].indexed);
	/* In order, backwards, and scattered. */
	for (uint32_t k = 0; k < KIDS; k++)
		assert_int_equal(otree_child(&t, 0, 10 + k), kid[k]);
	for (uint32_t k = KIDS; k-- > 0;)
		assert_int_equal(otree_child(&t, 0, 10 + k), kid[k]);
	for (uint32_t k = 0; k < KIDS; k++)
		assert_int_equal(otree_child(&t, 0, 10 + (k * 7) % KIDS), kid[(k * 7) % KIDS]);
	/* A small list under one child: the same. */
	uint32_t g[5];
	for (uint32_t k = 0; k < 5; k++)
		g[k] = otree_child(&t, kid[3], 100 + k);
	for (uint32_t k = 5; k-- > 0;)
		assert_int_equal(otree_child(&t, kid[3], 100 + k), g[k]);
	assert_false(t.nodes[kid[3]].indexed);
	assert_int_equal(t.n, KIDS + 6);
	for (uint32_t k = 0; k < 5; k++)
		t.nodes[g[k]].total = 0;
	t.nodes[0].total = KIDS * (KIDS + 1) / 2;
	/* Pruned to the root and the 10 largest: the rest are one [other]. */
	free(otree_prune(&t, 11, 999));
	uint32_t other = otree_child(&t, 0, 10); /* the smallest: folded */
	assert_int_equal(t.nodes[other].key, 999);
	assert_int_equal(otree_child(&t, 0, 5000), other); /* new: into [other] too */
	for (uint32_t k = KIDS - 10; k < KIDS; k++) {
		uint32_t n = otree_child(&t, 0, 10 + k);
		assert_int_equal(t.nodes[n].key, 10 + k);
		assert_int_equal(t.nodes[n].total, k + 1);
		assert_int_equal(otree_child(&t, 0, 10 + k), n);
	}
	assert_int_equal(t.nodes[other].total, (KIDS - 10) * (KIDS - 9) / 2);
	otree_free(&t);
}

static void test_stack_sums_order(void **state)
{
	(void)state;
	const uint32_t sparse[] = { 500, 3, 999, 0, 42 };
	check_order(sparse, 5, 1000);
	const uint32_t dense[] = { 30, 2, 0, 17, 39 };
	check_order(dense, 5, 40);
	const uint32_t one[] = { 7 };
	check_order(one, 1, 8);
}

static void test_part_sort_nodes(void **state)
{
	(void)state;
	struct part p;
	part_init(&p, 1);
	size_t ns = ARRAY_SIZE(sort_stacks);
	uint32_t leaf[ARRAY_SIZE(sort_stacks)];
	uint32_t frames[ARRAY_SIZE(sort_stacks)][4];
	size_t depth[ARRAY_SIZE(sort_stacks)];
	for (size_t i = 0; i < ns; i++) {
		depth[i] = sort_stack(&p, i, frames[i]);
		leaf[i] = part_stack_id(&p, frames[i], depth[i]);
	}
	/* First-use order interleaves the subtrees of 1 and 4. */
	assert_int_not_equal(p.node_parent[leaf[2]] + 1, leaf[2]);
	size_t nnodes = p.nnodes;
	uint32_t *map = part_sort_nodes(&p);
	assert_int_equal(p.nnodes, nnodes);
	assert_int_equal(map[0], 0);
	assert_preorder(&p);
	for (size_t i = 0; i < ns; i++) {
		uint32_t got[8];
		size_t d = depth[i];
		assert_int_equal(part_stack(&p, map[leaf[i]], got, 8), d);
		assert_memory_equal(got, frames[i], d * sizeof(uint32_t));
		/* The whole-stack index and the node index find the new ids. */
		assert_int_equal(part_stack_id(&p, frames[i], d), map[leaf[i]]);
		assert_int_equal(part_node(&p, p.node_parent[map[leaf[i]]], frames[i][d - 1]),
				 map[leaf[i]]);
	}
	assert_int_equal(p.nnodes, nnodes);

	/* A block written from this part: depth first, rows on the same stacks. */
	uint32_t proj = strtab_intern(&p.lstr, "p", 1);
	uint32_t series = part_series_id(&p, proj, SEK_ON_CPU, 19, part_labels(&p, NULL, 0));
	for (size_t i = ns; i-- > 0;) /* newest stacks first: another order again */
		part_add_row(&p, series, T0 + (int64_t)i, map[leaf[i]], i + 1);
	char *dir = make_temp_dir();
	char tmp[600], fin[600];
	snprintf(tmp, sizeof(tmp), "%s/b.tmp", dir);
	snprintf(fin, sizeof(fin), "%s/b.blk", dir);
	struct merge_source src = { &p, NULL };
	struct merge_target t = { T0, T0 + 3600000, 1, { .gen = 1, .partition_ms = T0 }, tmp, fin };
	struct part out;
	struct buf err = { 0 }, scratch = { 0 };
	assert_int_equal(merge_write(&src, 1, &t, &out, NULL, &err), 0);
	assert_int_equal(out.nnodes, nnodes);
	assert_preorder(&out);
	struct block *blk;
	assert_int_equal(block_open(fin, &blk, &err), 0);
	const struct part_row *rows;
	uint64_t bytes = 0;
	assert_int_equal(block_rows(blk, &out, &out.series[0], INT64_MIN, &scratch, &rows, &bytes, &err), (long)ns);
	for (size_t r = 0; r < ns; r++) {
		size_t i = (size_t)(rows[r].ts_ms - T0);
		uint32_t got[8];
		assert_int_equal(rows[r].value, i + 1);
		assert_int_equal(part_stack(&out, rows[r].stack, got, 8), depth[i]);
		for (size_t j = 0; j < depth[i]; j++) /* the same names, new ids */
			assert_string_equal(strtab_get(&out.sstr, out.frames[got[j]].name),
					    strtab_get(&p.sstr, p.frames[frames[i][j]].name));
	}
	block_close(blk);
	part_free(&out);
	part_free(&p);
	free(map);
	buf_free(&err);
	buf_free(&scratch);
	rm_rf(dir);
	free(dir);
}

/* --- blocks by time slice -------------------------------------------------- */

/* Stack totals as text, one "frames=sum" line per stack, sorted: comparable
 * across parts whose node ids differ. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *sums_text(const struct part *p, const uint32_t *stacks, const uint64_t *sums, long n)
{
	char **lines = calloc((size_t)n + 1, sizeof(char *));
	size_t nl = 0;
	for (long i = 0; i < n; i++) {
		if (!sums[i])
			continue;
		uint32_t frames[16];
		size_t d = part_stack(p, stacks[i], frames, 16);
		struct buf b = { 0 };
		for (size_t j = 0; j < d && j < 16; j++)
			buf_printf(&b, "%s;", strtab_get(&p->sstr, p->frames[frames[j]].name));
		buf_printf(&b, "=%llu", (unsigned long long)sums[i]);
		lines[nl++] = b.data;
	}
	qsort(lines, nl, sizeof(char *), cmp_str);
	struct buf out = { 0 };
	buf_puts(&out, "");
	for (size_t i = 0; i < nl; i++) {
		buf_printf(&out, "%s\n", lines[i]);
		free(lines[i]);
	}
	free(lines);
	return out.data;
}

/* What a block of the fixture at 10 s must answer for [from, to): the
 * in-memory rows, times rounded down to 10 s, of the series in mask. */
static char *expected_text(const struct part *mem, unsigned mask, int64_t from, int64_t to)
{
	uint64_t *v = calloc(mem->nnodes, sizeof(uint64_t));
	uint32_t *ids = calloc(mem->nnodes, sizeof(uint32_t));
	for (uint32_t s = 0; s < mem->nseries; s++) {
		if (!(mask & (1u << s)))
			continue;
		for (size_t r = 0; r < mem->series[s].nrows; r++) {
			const struct part_row *row = &mem->series[s].rows[r];
			int64_t t = row->ts_ms - row->ts_ms % 10000;
			if (t >= from && t < to)
				v[row->stack] += row->value;
		}
	}
	for (uint32_t i = 0; i < mem->nnodes; i++)
		ids[i] = i;
	char *text = sums_text(mem, ids, v, (long)mem->nnodes);
	free(v);
	free(ids);
	return text;
}

/* The ranges the slice tests ask: whole, halves, inside one slice, across
 * slice edges, outside, and pseudo-random ones. */
static size_t slice_ranges(int64_t (*r)[2], size_t max)
{
	const int64_t T = T_SLICE, M = 60000;
	int64_t fixed[][2] = {
		{ T, T + 60 * M },		{ T, T + 25 * M },
		{ T + 25 * M + 3000, T + 60 * M }, { T + 61000, T + 119000 },
		{ T + 119000, T + 121000 },	{ T + 7 * M + 13000, T + 31 * M + 17000 },
		{ T + 4 * M, T + 6 * M },	{ T - 60 * M, T },
		{ T + 49 * M + 50000, T + 90 * M }, { T + 3 * M + 1, T + 3 * M + 2 },
	};
	size_t n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(fixed) && n < max; i++, n++)
		r[n][0] = fixed[i][0], r[n][1] = fixed[i][1];
	uint64_t x = 0x2545F4914F6CDD1Dull;
	while (n < max) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int64_t a = T - 60000 + (int64_t)(x % 3200000), b = T - 60000 + (int64_t)((x >> 32) % 3200000);
		r[n][0] = MIN(a, b);
		r[n++][1] = MAX(a, b) + 1;
	}
	return n;
}

/* Every range answers per series (block_sums) what the rows say. */
static void check_series_sums(struct block *blk, const struct part *p, const struct part *mem,
			      int64_t from, int64_t to)
{
	struct buf scratch = { 0 }, err = { 0 };
	for (uint32_t s = 0; s < p->nseries; s++) {
		/* The block's series s is the fixture's series with its labels
		 * and kind: both parts number them in the same order. */
		const uint32_t *stacks;
		const uint64_t *sums;
		uint64_t rows_read = 0, bytes = 0;
		long n = block_sums(blk, p, &p->series[s], from, to, &scratch, &stacks, &sums,
				    &rows_read, &bytes, &err);
		assert_true(n >= 0);
		char *got = sums_text(p, stacks, sums, n), *want = expected_text(mem, 1u << s, from, to);
		if (strcmp(got, want) != 0)
			print_message("series %u [%lld, %lld):\ngot\n%swant\n%s", s, (long long)from,
				      (long long)to, got, want);
		assert_string_equal(got, want);
		free(got);
		free(want);
	}
	buf_free(&scratch);
	buf_free(&err);
}

/* Writes part mem as the block dir/b.blk (the hour from T_SLICE, 10 s
 * resolution) into *out and opens it. */
static struct block *write_test_block(struct part *mem, const char *dir, struct part *out)
{
	char tmp[600], fin[600];
	snprintf(tmp, sizeof(tmp), "%s/b.tmp", dir);
	snprintf(fin, sizeof(fin), "%s/b.blk", dir);
	struct merge_source src = { mem, NULL };
	struct merge_target t = { T_SLICE, T_SLICE + 3600000, 10000,
				  { .gen = 1, .partition_ms = T_SLICE, .level = 1 }, tmp, fin };
	struct buf err = { 0 };
	assert_int_equal(merge_write(&src, 1, &t, out, NULL, &err), 0);
	struct block *blk;
	assert_int_equal(block_open(fin, &blk, &err), 0);
	buf_free(&err);
	return blk;
}

static void test_block_slices(void **state)
{
	(void)state;
	struct part mem;
	slice_fixture(&mem);
	char *dir = make_temp_dir();
	struct part out, p;
	struct buf err = { 0 }, scratch = { 0 }, acc = { 0 };
	struct block *blk = write_test_block(&mem, dir, &out);
	assert_int_equal(block_info(blk)->slice_ms, BLOCK_SLICE_MS);
	assert_int_equal(block_load(blk, &p, &err), 0);
	/* 50 minutes of rows: 25 slices per series; two rollups (on_cpu at
	 * 19 Hz, off_cpu) sliced alike; the loaded part as the written one. */
	assert_int_equal(p.nseries, 3);
	assert_int_equal(p.nrollups, 2);
	for (uint32_t s = 0; s < 3; s++) {
		assert_int_equal(p.series[s].nslices, 25);
		assert_int_equal(out.series[s].nslices, 25);
		assert_memory_equal(p.slices + p.series[s].slice0, out.slices + out.series[s].slice0,
				    25 * sizeof(struct part_slice));
	}
	for (size_t r = 0; r < 2; r++)
		assert_int_equal(p.rollups[r].nslices, 25);
	const struct part_rollup *cpu = part_rollup_get(&p, p.series[0].project, SEK_ON_CPU, 19);
	const struct part_rollup *off = part_rollup_get(&p, p.series[0].project, SEK_OFF_CPU, 0);
	int64_t ranges[40][2];
	size_t nr = slice_ranges(ranges, 40);
	for (size_t i = 0; i < nr; i++) {
		int64_t from = ranges[i][0], to = ranges[i][1];
		check_series_sums(blk, &p, &mem, from, to);
		const struct part_rollup *rs[2] = { cpu, off };
		unsigned masks[2] = { 3, 4 };
		for (int k = 0; k < 2; k++) {
			const uint32_t *stacks;
			const uint64_t *sums;
			struct block_read_stats st = { 0 };
			long n = block_rollup_sums(blk, &p, rs[k], from, to, &scratch, &acc, &stacks,
						   &sums, &st, &err);
			assert_true(n >= 0);
			assert_int_equal(err.len, 0);
			for (long j = 1; j < n; j++)
				assert_true(stacks[j - 1] < stacks[j]);
			char *got = sums_text(&p, stacks, sums, n),
			     *want = expected_text(&mem, masks[k], from, to);
			if (strcmp(got, want) != 0)
				print_message("rollup %d [%lld, %lld):\ngot\n%swant\n%s", k,
					      (long long)from, (long long)to, got, want);
			assert_string_equal(got, want);
			free(got);
			free(want);
			/* Rows are read only for the two slices at the range's
			 * ends: 2 of 25 per series at most. */
			uint64_t most = 0;
			for (uint32_t s = 0; s < 3; s++) {
				if (!(masks[k] & (1u << s)))
					continue;
				const struct part_slice *sl = p.slices + p.series[s].slice0;
				uint64_t big[2] = { 0, 0 };
				for (uint32_t j = 0; j < p.series[s].nslices; j++)
					if (sl[j].n > big[0])
						big[1] = big[0], big[0] = sl[j].n;
					else if (sl[j].n > big[1])
						big[1] = sl[j].n;
				most += big[0] + big[1];
			}
			assert_true(st.rows_read <= most);
		}
	}
	block_close(blk);
	part_free(&p);
	part_free(&out);
	part_free(&mem);
	buf_free(&err);
	buf_free(&scratch);
	buf_free(&acc);
	rm_rf(dir);
	free(dir);
}

/* A block's rows come out in (time, stack) order with one row per pair
 * and the same sums, whether a series' rows went in in time order with
 * long runs of one time in no stack order (the radix sort, sort_rows) or
 * out of time order (qsort). */
static void test_block_row_order(void **state)
{
	(void)state;
	enum { TIMES = 12, PER = 300, STACKS = 60 };
	struct part mem;
	part_init(&mem, 1);
	uint32_t proj = strtab_intern(&mem.lstr, "proj", 4);
	uint32_t key = strtab_intern(&mem.lstr, "host.name", 9);
	uint32_t kv[2][2] = { { key, strtab_intern(&mem.lstr, "a", 1) },
			      { key, strtab_intern(&mem.lstr, "b", 1) } };
	uint32_t series[2] = { part_series_id(&mem, proj, SEK_ON_CPU, 19, part_labels(&mem, kv[0], 1)),
			       part_series_id(&mem, proj, SEK_ON_CPU, 19, part_labels(&mem, kv[1], 1)) };
	uint32_t leaf[STACKS];
	for (uint32_t i = 0; i < STACKS; i++) {
		char name[16];
		snprintf(name, sizeof(name), "g%u", (unsigned)i);
		struct store_frame f = { .type = SFT_NATIVE,
					 .name = strtab_intern(&mem.sstr, name, strlen(name)) };
		uint32_t fr = part_frame(&mem, &f);
		leaf[i] = part_stack_id(&mem, &fr, 1);
	}
	static uint64_t want[2][TIMES][STACKS];
	memset(want, 0, sizeof(want));
	uint64_t x = 88172645463325252ull;
	for (int t = 0; t < TIMES; t++)
		for (int r = 0; r < PER; r++)
			for (int sr = 0; sr < 2; sr++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				/* series 0 in time order; series 1 with time reversed */
				int tt = sr ? TIMES - 1 - t : t;
				uint32_t st = (uint32_t)(x >> 32) % STACKS;
				uint64_t v = 1 + (x >> 50) % 5;
				part_add_row(&mem, series[sr], T_SLICE + tt * 10000 + (int64_t)(x % 7), leaf[st], v);
				want[sr][tt][st] += v;
			}
	char *dir = make_temp_dir();
	struct part out, p;
	struct buf err = { 0 }, scratch = { 0 };
	struct block *blk = write_test_block(&mem, dir, &out);
	assert_int_equal(block_load(blk, &p, &err), 0);
	assert_int_equal(p.nseries, 2);
	for (uint32_t s = 0; s < 2; s++) {
		const struct part_row *rows;
		uint64_t bytes = 0;
		long n = block_rows(blk, &p, &p.series[s], INT64_MIN, &scratch, &rows, &bytes, &err);
		assert_true(n > 0);
		/* which input series this is: by its host label */
		int sr = strcmp(strtab_get(&p.lstr, p.label_kv[p.label_off[p.series[s].labels] + 1]), "b") == 0;
		static uint64_t got[TIMES][STACKS];
		memset(got, 0, sizeof(got));
		for (long i = 0; i < n; i++) {
			if (i)
				assert_true(rows[i - 1].ts_ms < rows[i].ts_ms ||
					    (rows[i - 1].ts_ms == rows[i].ts_ms && rows[i - 1].stack < rows[i].stack));
			long t = (rows[i].ts_ms - T_SLICE) / 10000;
			assert_true(t >= 0 && t < TIMES);
			/* the block numbers its nodes anew: the stack by its frame's name */
			assert_true(rows[i].stack < p.nnodes);
			const char *nm = strtab_get(&p.sstr, p.frames[p.node_frame[rows[i].stack]].name);
			assert_true(nm[0] == 'g');
			uint32_t st = (uint32_t)atoi(nm + 1);
			assert_true(st < STACKS);
			got[t][st] += rows[i].value;
		}
		assert_memory_equal(got, want[sr], sizeof(got));
	}
	block_close(blk);
	part_free(&p);
	part_free(&out);
	part_free(&mem);
	buf_free(&err);
	buf_free(&scratch);
	rm_rf(dir);
	free(dir);
}

/* A block written before slices (version 3, tests/data/block-v3.blk, the
 * same fixture) still answers every range; its rollup has no slices, so
 * a range that cuts it reads the series. */
static void test_block_v3(void **state)
{
	(void)state;
	struct part mem, p;
	slice_fixture(&mem);
	struct buf err = { 0 }, scratch = { 0 }, acc = { 0 };
	struct block *blk;
	if (block_open("tests/data/block-v3.blk", &blk, &err) != 0)
		print_message("%s\n", err.data);
	assert_int_equal(block_info(blk)->slice_ms, 0);
	assert_int_equal(block_load(blk, &p, &err), 0);
	assert_int_equal(p.nseries, 3);
	assert_int_equal(p.samples, mem.samples);
	int64_t ranges[20][2];
	size_t nr = slice_ranges(ranges, 20);
	for (size_t i = 0; i < nr; i++)
		check_series_sums(blk, &p, &mem, ranges[i][0], ranges[i][1]);
	const uint32_t *stacks;
	const uint64_t *sums;
	struct block_read_stats st = { 0 };
	assert_int_equal(block_rollup_sums(blk, &p, &p.rollups[0], T_SLICE, T_SLICE + 60000, &scratch,
					   &acc, &stacks, &sums, &st, &err),
			 -1);
	const struct part_row *rows;
	uint64_t bytes = 0, total = 0;
	for (uint32_t s = 0; s < p.nseries; s++) {
		long n = block_rows(blk, &p, &p.series[s], INT64_MIN, &scratch, &rows, &bytes, &err);
		assert_int_equal(n, (long)p.series[s].nrows);
		for (long j = 0; j < n; j++)
			total += rows[j].value;
	}
	assert_int_equal(total, mem.samples);
	block_close(blk);
	part_free(&p);
	part_free(&mem);
	buf_free(&err);
	buf_free(&scratch);
	buf_free(&acc);
}

/* A tree pruned while it is built (memory bound) keeps every total exact:
 * the root's total, and every node it shows has the same total as in the
 * unpruned tree; the rest is in [other] nodes. */
static void check_pruned(json_t *full, json_t *pruned)
{
	if (total_of(full) != total_of(pruned)) {
		char *a = json_dumps(full, JSON_COMPACT), *b = json_dumps(pruned, JSON_COMPACT);
		print_message("full %s\npruned %s\n", a, b);
		free(a);
		free(b);
	}
	assert_int_equal(total_of(full), total_of(pruned));
	size_t i;
	json_t *c;
	json_int_t sum = 0;
	json_array_foreach(json_object_get(pruned, "children"), i, c)
	{
		sum += total_of(c);
		const char *name = json_string_value(json_object_get(c, "name"));
		if (strcmp(name, "[other]") == 0)
			continue;
		json_t *same = child_named(full, name);
		assert_non_null(same);
		check_pruned(same, c);
	}
	assert_true(sum <= total_of(pruned));
}

static void test_flamegraph_pruning(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	for (uint64_t k = 0; k < 4; k++) {
		buf_reset(&z);
		make_batch(sample_specs, 5, k + 1, T0 + (int64_t)k * 1800000, &z);
		append(s, &z);
	}
	assert_int_equal(store_flush(s, &err), 0);
	buf_reset(&z);
	make_batch(sample_specs, 5, 9, T0 + 1000, &z);
	append(s, &z); /* and some in memory */
	const char *body = "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},"
			   "\"synthetic_frames\":[\"thread\",\"executable\"]}";
	json_t *full = run_query_pruned(s, sym, body, 0);
	for (size_t at = 2; at <= 12; at += 2) {
		json_t *pruned = run_query_pruned(s, sym, body, at);
		assert_true(json_integer_value(json_object_get(pruned, "tree_pruned")) >= 1);
		check_pruned(json_object_get(full, "root"), json_object_get(pruned, "root"));
		json_decref(pruned);
	}
	json_decref(full);
	buf_free(&z);
	buf_free(&err);
}

/* A group folds either over the nodes its stacks touch (few leaves for
 * the part's size) or over every node of the part in order (many): both
 * must give the same tree. One part holds a big executable (64 distinct
 * stacks, about 140 nodes) and a small one (one stack): a query for the
 * small one folds sparsely, one for the big one densely. */
static void test_flamegraph_sparse_dense(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	static char names[3][64][16];
	struct spec specs[65];
	uint64_t big = 0, per_a[8] = { 0 };
	for (int i = 0; i < 64; i++) {
		snprintf(names[0][i], sizeof(names[0][i]), "a%d", i / 8);
		snprintf(names[1][i], sizeof(names[1][i]), "b%d", i);
		snprintf(names[2][i], sizeof(names[2][i]), "leaf%d", i);
		specs[i] = (struct spec){ { "main", names[0][i], names[1][i], names[2][i], NULL },
					  "big", "t", (uint64_t)(i + 1) };
		big += (uint64_t)(i + 1);
		per_a[i / 8] += (uint64_t)(i + 1);
	}
	specs[64] = (struct spec){ { "main", "s_run", "s_leaf", NULL }, "small", "t", 7 };
	make_batch(specs, 65, 1, T0, &z);
	append(s, &z);
	buf_free(&z);
	for (int flushed = 0; flushed < 2; flushed++) {
		json_t *doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
						 "\"query\":\"process.executable.name == \\\"small\\\"\"}}");
		json_t *root = json_object_get(doc, "root"), *m = child_named(root, "main");
		assert_int_equal(total_of(root), 7);
		assert_int_equal(json_array_size(json_object_get(root, "children")), 1);
		assert_int_equal(total_of(m), 7);
		assert_int_equal(json_array_size(json_object_get(m, "children")), 1);
		json_t *leaf = child_named(child_named(m, "s_run"), "s_leaf");
		assert_int_equal(total_of(leaf), 7);
		assert_int_equal(json_integer_value(json_object_get(leaf, "self")), 7);
		assert_int_equal(json_integer_value(json_object_get(doc, "distinct_stacks")), 1);
		json_decref(doc);

		doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
					"\"query\":\"process.executable.name == \\\"big\\\"\"}}");
		root = json_object_get(doc, "root");
		m = child_named(root, "main");
		assert_int_equal(total_of(root), (json_int_t)big);
		assert_int_equal(total_of(m), (json_int_t)big);
		assert_int_equal(json_array_size(json_object_get(m, "children")), 8);
		assert_null(child_named(m, "s_run"));
		for (int a = 0; a < 8; a++) {
			char an[16];
			snprintf(an, sizeof(an), "a%d", a);
			json_t *na = child_named(m, an);
			assert_int_equal(total_of(na), (json_int_t)per_a[a]);
			assert_int_equal(json_array_size(json_object_get(na, "children")), 8);
		}
		json_t *l9 = child_named(child_named(child_named(m, "a1"), "b9"), "leaf9");
		assert_int_equal(json_integer_value(json_object_get(l9, "self")), 10);
		json_decref(doc);

		/* Everything, and a search (dense, then only the stacks through
		 * s_leaf count). */
		doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000}}");
		root = json_object_get(doc, "root"); /* main of big, main of small */
		assert_int_equal(total_of(root), (json_int_t)big + 7);
		assert_int_equal(json_array_size(json_object_get(root, "children")), 2);
		assert_int_equal(total_of(child_named(root, "main")), (json_int_t)big);
		json_decref(doc);
		doc = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},"
					"\"search\":\"s_leaf\"}");
		assert_int_equal(total_of(json_object_get(doc, "root")), 7);
		json_decref(doc);
		assert_int_equal(store_flush(s, &err), 0); /* the same from a block */
	}
	buf_free(&z);
	buf_free(&err);
}

static void parse_error(const char *body, const char *needle)
{
	struct fg_request r;
	struct buf err = { 0 };
	assert_int_equal(fg_request_parse(&r, body, strlen(body), &err), -1);
	if (!strstr(err.data, needle))
		fail_msg("error for %s: \"%s\" lacks \"%s\"", body, err.data, needle);
	buf_free(&err);
}

static void test_flamegraph_request_errors(void **state)
{
	parse_error("not json", "not valid JSON");
	parse_error("[]", "JSON object");
	parse_error("{}", "filter");
	parse_error("{\"filter\":{\"start_ts\":5,\"end_ts\":5}}", "end_ts must be after");
	parse_error("{\"filter\":{\"start_ts\":\"5\",\"end_ts\":6}}", "start_ts");
	parse_error("{\"filter\":{\"start_ts\":-1,\"end_ts\":6}}", "start_ts");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"event_kind\":\"gpu\"}}", "event_kind");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"query\":5}}", "query");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6},\"synthetic_frames\":[\"planet\"]}",
		    "synthetic_frames");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6},\"num_samples\":0}", "num_samples");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"frame_mask\":{\"patterns\":[1]}}}",
		    "patterns");
	parse_error("{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"start_ts\":2}}", "duplicate");

	/* A bad regular expression or CEL query fails the query itself. */
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, out = { 0 };
	struct fg_request r;
	const char *bad_re = "{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"frame_mask\":{\"patterns\":[\"(\"]}}}";
	assert_int_equal(fg_request_parse(&r, bad_re, strlen(bad_re), &err), 0);
	assert_int_equal(flamegraph_query(s, sym, NULL, &r, &out, &err), -1);
	assert_non_null(strstr(err.data, "patterns[0]"));
	fg_request_free(&r);
	buf_reset(&err);
	const char *bad_cel = "{\"filter\":{\"start_ts\":1,\"end_ts\":6,\"query\":\"host.name ==\"}}";
	assert_int_equal(fg_request_parse(&r, bad_cel, strlen(bad_cel), &err), 0);
	assert_int_equal(flamegraph_query(s, sym, NULL, &r, &out, &err), -1);
	assert_non_null(strstr(err.data, "column"));
	fg_request_free(&r);
	buf_free(&err);
	buf_free(&out);
}

/* Catastrophic backtracking in a user pattern (search, frame mask, CEL
 * matches()) ends the query with UREGEX_RC (answered 422) naming the
 * pattern and the limit, quickly, instead of holding the thread. */
static void test_queries_bound_user_regex(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, out = { 0 }, z = { 0 };
	static char names[64][48];
	struct spec specs[64];
	for (int i = 0; i < 64; i++) {
		memset(names[i], 'a', 40);
		snprintf(names[i] + 40, 8, "!%d", i & 63);
		specs[i] = (struct spec){ { "main", names[i], NULL }, names[63 - i], "main", 1 };
	}
	make_batch(specs, 64, 1, T0, &z);
	append(s, &z);
	const char *bodies[] = {
		"{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},\"search\":\"^(a+)+$\"}",
		"{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
		"\"frame_mask\":{\"patterns\":[\"x\",\"^(a|aa)+$\"]}}}",
	};
	const char *what[] = { "search", "filter.frame_mask.patterns[1]" };
	uint64_t t0 = now_mono_ns();
	for (int i = 0; i < 2; i++) {
		struct fg_request r;
		assert_int_equal(fg_request_parse(&r, bodies[i], strlen(bodies[i]), &err), 0);
		strcpy(r.scope.project_id, PROJECT);
		buf_reset(&err);
		assert_int_equal(flamegraph_query(s, sym, NULL, &r, &out, &err), UREGEX_RC);
		assert_non_null(strstr(err.data, what[i]));
		assert_non_null(strstr(err.data, "match limit"));
		assert_non_null(strstr(err.data, i ? "^(a|aa)+$" : "^(a+)+$"));
		fg_request_free(&r);
		/* Top functions reads the same patterns. */
		struct fn_request fr;
		buf_reset(&err);
		assert_int_equal(fn_request_parse(&fr, FN_TOP, bodies[i], strlen(bodies[i]), &err), 0);
		fn_request_set_project(&fr, PROJECT);
		assert_int_equal(functions_query(s, sym, NULL, &fr, &out, &err), UREGEX_RC);
		assert_non_null(strstr(err.data, "match limit"));
		fn_request_free(&fr);
		buf_reset(&err);
	}
	/* A diff: each side is read on its own thread with its own matcher. */
	const char *diff = "{\"baseline\":{\"start_ts\":1,\"end_ts\":2},"
			   "\"comparison\":{\"start_ts\":1,\"end_ts\":4102444800000},"
			   "\"frame_mask\":{\"patterns\":[\"^(a+)+$\"]}}";
	struct fn_request dr;
	assert_int_equal(fn_request_parse(&dr, FN_DIFF, diff, strlen(diff), &err), 0);
	fn_request_set_project(&dr, PROJECT);
	assert_int_equal(functions_query(s, sym, NULL, &dr, &out, &err), UREGEX_RC);
	assert_non_null(strstr(err.data, "frame_mask.patterns[0]"));
	fn_request_free(&dr);
	buf_reset(&err);
	/* CEL's matches() over the executable name. */
	struct ent_request er;
	const char *cel = "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000,"
			  "\"query\":\"process.executable.name.matches('^(a+)+$') || true\"}}";
	assert_int_equal(ent_request_parse(&er, ENT_LABELS, cel, strlen(cel), &err), 0);
	strcpy(er.scope.project_id, PROJECT);
	assert_int_equal(entities_query(s, &er, &out, &err), UREGEX_RC);
	assert_non_null(strstr(err.data, "matches()"));
	ent_request_free(&er);
	/* Honest patterns still work. */
	json_t *d = run_query(s, sym, "{\"filter\":{\"start_ts\":1,\"end_ts\":4102444800000},"
				      "\"search\":\"^a+!1$\"}");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 1);
	json_decref(d);
	assert_true(now_mono_ns() - t0 < 5000000000ull);
	buf_free(&err);
	buf_free(&out);
	buf_free(&z);
}

static void test_route_match(void **state)
{
	(void)state;
	const char *p[HTTP_MAX_PARAMS];
	size_t l[HTTP_MAX_PARAMS], n;
	assert_true(http_match("/public/api/v1/project/{id}/flamegraph/json",
			       "/public/api/v1/project/abc/flamegraph/json", p, l, &n));
	assert_int_equal(n, 1);
	assert_int_equal(l[0], 3);
	assert_memory_equal(p[0], "abc", 3);
	assert_false(http_match("/public/api/v1/project/{id}/flamegraph/json",
				"/public/api/v1/project//flamegraph/json", p, l, &n));
	assert_false(http_match("/healthz", "/healthz/", p, l, &n));
	assert_false(http_match("/a/{x}", "/a/b/c", p, l, &n));
	assert_true(http_match("*", "/anything", p, l, &n));
}


/* --- off-CPU samples in every query ------------------------------------------ */

static json_t *answer_of(struct buf *out)
{
	json_error_t je;
	json_t *doc = json_loads(out->data, 0, &je);
	if (!doc)
		fail_msg("answer is not JSON: %s", je.text);
	buf_free(out);
	return doc;
}

static json_t *run_fn(struct store *s, struct symbols *sym, enum fn_query what, const char *body)
{
	struct fn_request r;
	struct buf err = { 0 }, out = { 0 };
	if (fn_request_parse(&r, what, body, strlen(body), &err) < 0)
		fail_msg("parse: %s", err.data);
	fn_request_set_project(&r, PROJECT);
	if (functions_query(s, sym, NULL, &r, &out, &err) < 0)
		fail_msg("query: %s", err.data);
	fn_request_free(&r);
	buf_free(&err);
	return answer_of(&out);
}

static json_t *run_ent(struct store *s, enum ent_query what, const char *body)
{
	struct ent_request r;
	struct buf err = { 0 }, out = { 0 };
	if (ent_request_parse(&r, what, body, strlen(body), &err) < 0)
		fail_msg("parse: %s", err.data);
	strcpy(r.scope.project_id, PROJECT);
	if (entities_query(s, &r, &out, &err) < 0)
		fail_msg("query: %s", err.data);
	ent_request_free(&r);
	buf_free(&err);
	return answer_of(&out);
}

static json_t *fn_named(json_t *list, const char *name)
{
	size_t i;
	json_t *f;
	json_array_foreach(list, i, f)
		if (strcmp(json_string_value(json_object_get(f, "name")), name) == 0)
			return f;
	return NULL;
}

static const char *str_of(json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));
	return v ? v : "(absent)";
}

#define RANGE_ALL "\"start_ts\":946684800000,\"end_ts\":4102444800000"
#define OFF "{" RANGE_ALL ",\"event_kind\":\"off_cpu\",\"query\":null}"
#define ON "{" RANGE_ALL ",\"event_kind\":\"on_cpu\",\"query\":null}"

/* Functions with equal values are listed by name, whatever order their
 * stacks were stored or read in. */
static void test_functions_tie_order(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	static const struct spec ties[] = {
		{ { "zeta", NULL }, "app", "main", 10 },
		{ { "mid", NULL }, "app", "main", 10 },
		{ { "alpha", NULL }, "app", "main", 10 },
		{ { "big", NULL }, "app", "main", 11 },
	};
	make_batch(ties, 4, 1, T0, &z);
	append(s, &z);
	json_t *d = run_fn(s, sym, FN_TOP, "{\"filter\":" ON ",\"sort\":\"self\"}");
	json_t *fns = json_object_get(d, "functions");
	const char *want[] = { "big", "alpha", "mid", "zeta" };
	assert_int_equal(json_array_size(fns), 4);
	for (size_t i = 0; i < 4; i++)
		assert_string_equal(str_of(json_array_get(fns, i), "name"), want[i]);
	json_decref(d);
	buf_free(&z);
	buf_free(&err);
}

/* The answers' parts a block must give exactly as memory does. */
static char *dump_field(json_t *d, const char *field)
{
	char *text = json_dumps(json_object_get(d, field), JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(d);
	return text;
}

static char *events_text(struct store *s, struct symbols *sym, const char *body)
{
	struct ev_request er;
	struct buf out = { 0 }, err = { 0 };
	assert_int_equal(ev_request_parse(&er, body, strlen(body), &err), 0);
	strcpy(er.scope.project_id, PROJECT);
	assert_int_equal(events_query(s, sym, &er, &out, &err), 0);
	ev_request_free(&er);
	buf_free(&err);
	return dump_field(answer_of(&out), "events");
}

/* Ranges that cut blocks answer from blocks what they answered from
 * memory: unfiltered flamegraphs (rollup slices and the rows of the cut
 * ones), filtered ones (the series' slices that meet the range), a diff
 * of two cut halves, totals (minute totals and the rows of cut minutes)
 * and the newest events (newest slices first). 30 minutes of batches,
 * 20 s apart, whose stacks change over time. */
static void test_queries_over_slices(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct store *s;
	struct symbols *sym;
	struct buf err = { 0 }, z = { 0 };
	assert_int_equal(open_store(dir, &s, &err), 0);
	assert_int_equal(symbols_open(dir, &sym, &err), 0);
	for (uint64_t k = 0; k < 90; k++) {
		buf_reset(&z);
		make_batch(sample_specs + k % 3, 5 - k % 3, k + 1, T0 + (int64_t)k * 20000, &z);
		append(s, &z);
	}
	const int64_t ranges[][2] = {
		{ T0 + 65432, T0 + 1234567 },	       { T0 + 119999, T0 + 120001 },
		{ T0 + 7 * 60000 + 13000, T0 + 25 * 60000 + 17000 }, { T0, T0 + 1800000 },
		{ T0 + 900000, T0 + 3600000 },	       { T0 + 61000, T0 + 119000 },
	};
	enum { NR = ARRAY_SIZE(ranges), NQ = 6 };
	char *mem[NR][NQ], *blk[NR][NQ];
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1) {
			assert_int_equal(store_flush(s, &err), 0);
			assert_int_equal(store_compact(s, true, &err), 0);
			struct store_stats st;
			store_get_stats(s, &st);
			assert_int_equal(st.unflushed_rows, 0);
		}
		for (size_t i = 0; i < NR; i++) {
			char f[160], g[200], body[512];
			long long a = ranges[i][0], b = ranges[i][1], mid = a + (b - a) / 2;
			snprintf(f, sizeof(f), "{\"start_ts\":%lld,\"end_ts\":%lld}", a, b);
			snprintf(g, sizeof(g), "{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"thread.name == \\\"main\\\"\"}", a, b);
			char **q = pass ? blk[i] : mem[i];
			snprintf(body, sizeof(body), "{\"filter\":%s}", f);
			q[0] = fg_root(s, sym, body);
			snprintf(body, sizeof(body), "{\"filter\":%s}", g);
			q[1] = fg_root(s, sym, body);
			snprintf(body, sizeof(body),
				 "{\"baseline\":{\"start_ts\":%lld,\"end_ts\":%lld},"
				 "\"comparison\":{\"start_ts\":%lld,\"end_ts\":%lld}}",
				 a, mid, mid, b);
			q[2] = dump_field(run_fn(s, sym, FN_DIFF, body), "functions");
			snprintf(body, sizeof(body), "{\"filter\":%s,\"limit\":7}", f);
			q[3] = events_text(s, sym, body);
			char t[64];
			snprintf(t, sizeof(t), "%llu", (unsigned long long)total_range(s, a, b));
			q[4] = strdup(t);
			snprintf(body, sizeof(body), "{\"filter\":%s,\"limit\":100}", g);
			q[5] = events_text(s, sym, body);
			/* Every event up to the limit, whichever window held it:
			 * rows of thread "main" in the range. */
			size_t want = 0;
			for (int k = 0; k < 90; k++)
				if (T0 + k * 20000 >= a && T0 + k * 20000 < b)
					for (int j = k % 3; j < 5; j++)
						want += strcmp(sample_specs[j].thread, "main") == 0;
			json_t *ev = json_loads(q[5], 0, NULL);
			assert_int_equal(json_array_size(ev), MIN(want, 100));
			json_decref(ev);
		}
	}
	for (size_t i = 0; i < NR; i++)
		for (int k = 0; k < NQ; k++) {
			if (strcmp(mem[i][k], blk[i][k]) != 0)
				print_message("range %zu query %d:\nmemory %s\nblocks %s\n", i, k,
					      mem[i][k], blk[i][k]);
			assert_string_equal(mem[i][k], blk[i][k]);
			free(mem[i][k]);
			free(blk[i][k]);
		}
	store_close(s);
	symbols_close(sym);
	buf_free(&z);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

/* --- queries over heads and the blocks written from them ----------------- */

/* Rounds of rows for the tests below: each round's stacks include one the
 * round before lacked. */
static void append_round_seq(struct store *s, int64_t t0, uint64_t k, uint64_t seq)
{
	static const struct spec more[] = {
		{ { "main", "run", "hot_c", NULL }, "app", "main", 7 },
		{ { "main", "run", "hot_a", "memcpy", NULL }, "app", "worker", 3 },
		{ { "main", "idle_loop", "k:schedule", NULL }, "other", "main", 2 },
	};
	struct buf z = { 0 };
	make_batch(sample_specs, 5, seq, t0 + (int64_t)k * 5000, &z);
	append(s, &z);
	buf_reset(&z);
	make_batch(more, k + 1, seq + 1, t0 + (int64_t)k * 5000 + 1000, &z);
	append(s, &z);
	buf_free(&z);
}

static void append_round(struct store *s, int64_t t0, uint64_t k)
{
	append_round_seq(s, t0, k, 2 * k + 1);
}

static struct store *open_test_store(const char *dir, uint32_t compact_after,
				     struct symbols **sym)
{
	struct store *s;
	struct buf err = { 0 };
	struct store_config cfg;
	store_config_default(&cfg);
	cfg.background = false;
	cfg.time_window = false;
	cfg.block_granularity_ms = 1; /* compacted rows keep their times, as memory does */
	if (compact_after)
		cfg.compact_after = compact_after;
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	assert_int_equal(symbols_open(dir, sym, &err), 0);
	buf_free(&err);
	return s;
}

#define WHOLE "\"start_ts\":1,\"end_ts\":4102444800000"
#define MAIN_THREAD "\"query\":\"thread.name == \\\"main\\\"\""

/* The answers of nb flamegraph bodies, top functions and a diff of two
 * threads, as JSON without query_stats (and without distinct_stacks for
 * the bodies whose bit is set in drop_distinct), into out[0 .. nb + 2).
 * The first body's distinct stacks and parts read go to *distinct and
 * *parts. */
static void query_answers(struct store *s, struct symbols *sym, const char *const *bodies,
			  size_t nb, uint32_t drop_distinct, char **out, json_int_t *distinct,
			  json_int_t *parts)
{
	for (size_t i = 0; i < nb; i++) {
		json_t *d = run_query(s, sym, bodies[i]);
		if (i == 0) {
			*distinct = json_integer_value(json_object_get(d, "distinct_stacks"));
			*parts = json_integer_value(
				json_object_get(json_object_get(d, "query_stats"), "parts"));
		}
		json_object_del(d, "query_stats");
		if (drop_distinct & (1u << i))
			json_object_del(d, "distinct_stacks");
		out[i] = json_dumps(d, JSON_SORT_KEYS | JSON_COMPACT);
		json_decref(d);
	}
	out[nb] = dump_field(run_fn(s, sym, FN_TOP, "{\"filter\":" ON "}"), "functions");
	out[nb + 1] = dump_field(run_fn(s, sym, FN_DIFF,
					"{\"baseline\":{" WHOLE "," MAIN_THREAD "},"
					"\"comparison\":{" WHOLE ","
					"\"query\":\"thread.name == \\\"worker\\\"\"}}"),
				 "functions");
}

static void assert_same_answers(char **live, char **blocks, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(live[i], blocks[i]) != 0)
			print_message("query %zu:\nlive   %s\nblocks %s\n", i, live[i], blocks[i]);
		assert_string_equal(live[i], blocks[i]);
		free(live[i]);
		free(blocks[i]);
	}
}

/* The sealed heads and the head, whose dictionaries are copies of one
 * another, are folded once (scan_shares_later): three in-memory parts (two
 * heads sealed while blocks could not be written, and the head), each with
 * stacks the one before it lacks, answer as one block of the same rows
 * does, distinct stacks included (counted once, not once per part); a
 * filter, a search, top functions and a diff too. Grouped by thread, the
 * tree is the same (there each part folds its own groups, so its
 * distinct stacks are counted per part). */
static void test_queries_fold_heads_once(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_test_store(dir, 0, &sym);
	struct buf err = { 0 };
	char blocks[600], away[600];
	snprintf(blocks, sizeof(blocks), "%s/blocks", dir);
	snprintf(away, sizeof(away), "%s/blocks.away", dir);
	assert_int_equal(rename(blocks, away), 0);
	int fd = open(blocks, O_CREAT | O_WRONLY, 0644); /* a file: no block can be written */
	assert_true(fd >= 0);
	close(fd);
	for (uint64_t k = 0; k < 3; k++) {
		append_round(s, T0, k);
		if (k < 2) /* sealed, then the block fails: the part stays in memory */
			assert_int_equal(store_flush(s, &err), -1);
		buf_reset(&err);
	}
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 0);
	assert_int_equal(st.unflushed_rows, st.rows);
	const char *bodies[] = {
		"{\"filter\":{" WHOLE "}}",
		"{\"filter\":{" WHOLE "," MAIN_THREAD "}}",
		"{\"filter\":{" WHOLE "},\"search\":\"hot_\"}",
		"{\"filter\":{" WHOLE "},\"synthetic_frames\":[\"thread\"]}",
	};
	enum { NB = ARRAY_SIZE(bodies), NQ = NB + 2 };
	char *mem[NQ], *blk[NQ];
	json_int_t distinct[2], parts[2];
	/* grouped: each part folds its groups itself */
	query_answers(s, sym, bodies, NB, 1u << (NB - 1), mem, &distinct[0], &parts[0]);
	assert_int_equal(unlink(blocks), 0);
	assert_int_equal(rename(away, blocks), 0);
	assert_int_equal(store_flush(s, &err), 0);
	assert_int_equal(store_compact(s, true, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0);
	assert_int_equal(st.blocks, 1);
	query_answers(s, sym, bodies, NB, 1u << (NB - 1), blk, &distinct[1], &parts[1]);
	assert_same_answers(mem, blk, NQ);
	store_close(s);
	symbols_close(sym);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

/* Blocks written from sealed heads fold together with the head that has
 * the same dictionaries (scan_carry_blocks): two flushes leave two blocks
 * and a head, each with stacks the one before lacks, and every query
 * answers as the one compacted block of the same rows does, distinct
 * stacks included (counted once, not once per part). A range the head
 * does not meet folds the blocks alone; grouped, each part folds its
 * own. With compact, the two blocks are first merged into one, which
 * keeps their ids in the heads' dictionaries while its hour is open
 * (t0 now) and not once it is closed (t0 in 2023). */
static void carry_blocks(int64_t t0, bool compact)
{
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_test_store(dir, 2, &sym);
	struct buf err = { 0 };
	for (uint64_t k = 0; k < 3; k++) {
		append_round(s, t0, k);
		if (k < 2)
			assert_int_equal(store_flush(s, &err), 0);
	}
	struct store_stats st;
	store_get_stats(s, &st);
	assert_int_equal(st.blocks, 2);
	assert_true(st.unflushed_rows > 0);
	if (compact) {
		assert_int_equal(store_compact(s, true, &err), 0);
		store_get_stats(s, &st);
		assert_int_equal(st.blocks, 1);
	}
	char not_head[128];
	snprintf(not_head, sizeof(not_head), "{\"filter\":{\"start_ts\":1,\"end_ts\":%lld}}",
		 (long long)(t0 + 9000));
	const char *bodies[] = {
		"{\"filter\":{" WHOLE "}}",
		"{\"filter\":{" WHOLE "," MAIN_THREAD "}}",
		"{\"filter\":{" WHOLE "},\"search\":\"hot_\"}",
		"{\"filter\":{" WHOLE "},\"num_samples\":1000}",
		"{\"filter\":{" WHOLE "},\"synthetic_frames\":[\"thread\"]}",
		not_head,
	};
	enum { NB = ARRAY_SIZE(bodies), NQ = NB + 2 };
	char *live[NQ], *blk[NQ];
	json_int_t distinct[2], parts[2];
	/* Folded part by part (grouped, the range without the head, or a
	 * closed hour's block): stacks counted once per part. */
	uint32_t drop = compact && t0 == T0 ? ~0u : 3u << (NB - 2);
	query_answers(s, sym, bodies, NB, drop, live, &distinct[0], &parts[0]);
	assert_int_equal(store_flush(s, &err), 0);
	assert_int_equal(store_compact(s, true, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0);
	assert_int_equal(st.blocks, 1);
	query_answers(s, sym, bodies, NB, drop, blk, &distinct[1], &parts[1]);
	assert_int_equal(parts[0], compact ? 2 : 3); /* the blocks and the head */
	/* A closed hour's compacted block folds alone: its stacks count apart. */
	if (compact && t0 == T0)
		assert_true(distinct[0] > distinct[1]);
	else
		assert_int_equal(distinct[0], distinct[1]);
	assert_same_answers(live, blk, NQ);
	store_close(s);
	symbols_close(sym);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

static void test_queries_carry_blocks(void **state)
{
	(void)state;
	int64_t hour = now_unix_ms() / 3600000 * 3600000;
	carry_blocks(T0, false);
	carry_blocks(hour, false);
	carry_blocks(hour, true);
	carry_blocks(T0, true);
}

/* The separate folds of a stack tree a carrying query (flamegraph, top
 * functions) makes over [from, to), as store_bench counts them: every part
 * but those whose sums go on to a later one. */
static size_t carry_folds(struct store *s, int64_t from, int64_t to, size_t *nparts)
{
	struct scope sc = { .kind = SEK_ON_CPU, .start_ms = from, .end_ms = to };
	strcpy(sc.project_id, PROJECT);
	struct buf err = { 0 };
	struct scan *scan = scan_open(s, &sc, &err);
	assert_non_null(scan);
	scan_carry_blocks(scan);
	size_t f = 0;
	*nparts = scan_parts(scan);
	for (size_t i = 0; i < *nparts; i++)
		f += !scan_shares_later(scan, i);
	scan_close(scan);
	buf_free(&err);
	return f;
}

enum carry_case {
	BLOCK_BEFORE_CLOSED,  /* a block of the open hour, then a closed hour's, then the head */
	SEALED_BEFORE_CLOSED, /* a sealed head, then a closed hour's block, then the head */
	HEAD_EMPTY,           /* two blocks and the head that holds no row yet */
};

/* Blocks of the heads fold with them whatever else the view holds, and
 * wherever it lists them: the view lists parts by generation, so a
 * closed hour's block merged after a block of the open hour was written
 * (or after a head was sealed) sits between that part and the head, and
 * each then folded its own stack tree (store_bench: 5 folds where 2 were
 * due); and right after a flush the head holds no row, so the blocks had
 * no part to carry into and each folded alone. A whole-range flamegraph
 * folds each hour once (a closed hour's block keeps no ids in the heads'
 * dictionaries and folds alone): its distinct stacks are those of the
 * same rows compacted, and every answer is the same. */
static void carry_around(enum carry_case c)
{
	char *dir = make_temp_dir();
	struct symbols *sym;
	struct store *s = open_test_store(dir, 0, &sym);
	struct buf err = { 0 };
	int64_t hour = now_unix_ms() / 3600000 * 3600000;
	size_t hours = c == HEAD_EMPTY ? 1 : 2;
	if (c != HEAD_EMPTY)
		for (uint64_t k = 0; k < 2; k++) { /* two blocks of a closed hour (2023) */
			struct buf z = { 0 };
			make_batch(sample_specs, 5, 1 + k, T0 + (int64_t)k * 5000, &z);
			append(s, &z);
			buf_free(&z);
			assert_int_equal(store_flush(s, &err), 0);
		}
	append_round_seq(s, hour, 0, 10);
	if (c == SEALED_BEFORE_CLOSED)
		assert_int_equal(store_seal(s, false, &err), 0);
	else
		assert_int_equal(store_flush(s, &err), 0);
	struct store_stats st;
	if (c != HEAD_EMPTY) {
		/* The closed hour's two blocks merge into one with a later
		 * generation than the open hour's part (which stays: one block
		 * of the store's granularity, or in memory). */
		assert_int_equal(store_compact(s, true, &err), 0);
		store_get_stats(s, &st);
		assert_int_equal(st.blocks, c == BLOCK_BEFORE_CLOSED ? 2 : 1);
	}
	append_round_seq(s, hour, 1, 12);
	if (c == HEAD_EMPTY)
		assert_int_equal(store_flush(s, &err), 0);
	store_get_stats(s, &st);
	if (c == HEAD_EMPTY)
		assert_int_equal(st.unflushed_rows, 0);
	else
		assert_true(st.head_rows > 0);
	size_t nparts;
	size_t folds = carry_folds(s, 1, 4102444800000LL, &nparts);
	assert_int_equal(nparts, 3);
	if (folds != hours)
		print_message("case %d: %zu folds of %zu parts\n", (int)c, folds, nparts);
	assert_int_equal(folds, hours);
	const char *bodies[] = {
		"{\"filter\":{" WHOLE "}}",
		"{\"filter\":{" WHOLE "," MAIN_THREAD "}}",
	};
	enum { NB = ARRAY_SIZE(bodies), NQ = NB + 2 };
	char *live[NQ], *blk[NQ];
	json_int_t distinct[2], parts[2];
	query_answers(s, sym, bodies, NB, 0, live, &distinct[0], &parts[0]);
	assert_int_equal(store_flush(s, &err), 0);
	assert_int_equal(store_compact(s, true, &err), 0);
	store_get_stats(s, &st);
	assert_int_equal(st.unflushed_rows, 0);
	assert_int_equal(st.blocks, hours);
	query_answers(s, sym, bodies, NB, 0, blk, &distinct[1], &parts[1]);
	assert_int_equal(distinct[0], distinct[1]);
	assert_same_answers(live, blk, NQ);
	store_close(s);
	symbols_close(sym);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

static void test_queries_carry_around_other_parts(void **state)
{
	(void)state;
	carry_around(BLOCK_BEFORE_CLOSED);
	carry_around(SEALED_BEFORE_CLOSED);
	carry_around(HEAD_EMPTY);
}

static void test_offcpu_queries(void **state)
{
	struct world *w = *state;
	struct store *s = w->s;
	struct symbols *sym = w->sym;
	struct buf err = { 0 }, z = { 0 };
	/* On-CPU: 100 samples in hot_a/hot_b; off-CPU: 3 s waited in
	 * futex_wait and 1 s in read_wait, over one 5 s batch. */
	make_batch(sample_specs, 5, 1, T0, &z);
	append(s, &z);
	buf_free(&z);
	static const struct spec off_specs[] = {
		{ { "main", "lock_all", "futex_wait", NULL }, "app", "main", 3000000000ULL },
		{ { "main", "read_wait", NULL }, "other", "io", 1000000000ULL },
	};
	make_batch_kind(off_specs, 2, 2, T0, EK_OFF_CPU, &z);
	append(s, &z);
	buf_free(&z);

	/* top_functions: only the off-CPU functions, in nanoseconds, the
	 * "cores" fields are threads waiting; absolute falls back to relative
	 * and says so. */
	json_t *d = run_fn(s, sym, FN_TOP,
			   "{\"filter\":" OFF ",\"sort\":\"self\",\"cpu_mode\":\"absolute\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_string_equal(str_of(d, "cpu_mode"), "relative");
	assert_non_null(json_object_get(d, "cpu_mode_note"));
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 4000000000LL);
	json_t *fns = json_object_get(d, "functions");
	assert_null(fn_named(fns, "hot_a"));
	json_t *fw = fn_named(fns, "futex_wait");
	assert_non_null(fw);
	assert_int_equal(json_integer_value(json_object_get(fw, "self")), 3000000000LL);
	double secs = json_number_value(json_object_get(json_object_get(d, "scope"), "seconds"));
	assert_true(secs >= 1.0);
	assert_true(fabs(json_number_value(json_object_get(fw, "self_cores")) - 3.0 / secs) < 1e-9);
	assert_true(fabs(json_number_value(json_object_get(fw, "self_percent")) - 75.0) < 1e-9);
	json_decref(d);

	/* The same request for on_cpu: samples, cores, absolute kept. */
	d = run_fn(s, sym, FN_TOP, "{\"filter\":" ON ",\"cpu_mode\":\"absolute\"}");
	assert_string_equal(str_of(d, "unit"), "samples");
	assert_string_equal(str_of(d, "cores_unit"), "cores");
	assert_string_equal(str_of(d, "cpu_mode"), "absolute");
	assert_null(json_object_get(d, "cpu_mode_note"));
	assert_non_null(fn_named(json_object_get(d, "functions"), "hot_a"));
	assert_null(fn_named(json_object_get(d, "functions"), "futex_wait"));
	json_decref(d);

	/* sandwich and diff honour the kind. */
	d = run_fn(s, sym, FN_SANDWICH, "{\"filter\":" OFF ",\"function\":\"lock_all\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "function"), "total")),
			 3000000000LL);
	json_decref(d);
	d = run_fn(s, sym, FN_DIFF, "{\"baseline\":" OFF ",\"comparison\":" OFF "}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_non_null(fn_named(json_object_get(d, "functions"), "futex_wait"));
	assert_null(fn_named(json_object_get(d, "functions"), "hot_a"));
	json_decref(d);

	/* top_entities: threads waiting, relative only. */
	d = run_ent(s, ENT_TOP,
		    "{\"filter\":" OFF ",\"entity\":\"executable\",\"cpu_mode\":\"absolute\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_string_equal(str_of(d, "cores_unit"), "threads");
	assert_string_equal(str_of(d, "cpu_mode"), "relative");
	json_t *ents = json_object_get(d, "entities");
	json_t *app = fn_named(ents, "app");
	assert_int_equal(json_integer_value(json_object_get(app, "total")), 3000000000LL);
	assert_true(fabs(json_number_value(json_object_get(app, "percent")) - 75.0) < 1e-9);
	json_decref(d);

	/* labels: off-CPU totals. */
	d = run_ent(s, ENT_LABELS, "{\"filter\":" OFF ",\"name\":\"thread.name\"}");
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_int_equal(json_integer_value(json_object_get(d, "total")), 4000000000LL);
	json_decref(d);

	/* timeseries: threads waiting per bucket; the sum over buckets of
	 * value * bucket seconds is the time waited. */
	d = run_ent(s, ENT_TIMESERIES, "{\"filter\":{\"start_ts\":1700000000000,\"end_ts\":1700000010000,"
				       "\"event_kind\":\"off_cpu\",\"query\":null},\"num_buckets\":10}");
	assert_string_equal(str_of(d, "unit"), "threads");
	assert_string_equal(str_of(d, "value_unit"), "nanoseconds");
	json_t *series = json_array_get(json_object_get(d, "series"), 0);
	assert_int_equal(json_integer_value(json_object_get(series, "total")), 4000000000LL);
	double waited = 0;
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(series, "values"), i, v)
		waited += json_number_value(v) * 1.0;
	assert_true(fabs(waited - 4.0) < 1e-6);
	json_decref(d);

	/* events: nanoseconds, only off-CPU stacks. */
	struct ev_request er;
	struct buf out = { 0 };
	const char *eb = "{\"filter\":" OFF ",\"limit\":10}";
	assert_int_equal(ev_request_parse(&er, eb, strlen(eb), &err), 0);
	strcpy(er.scope.project_id, PROJECT);
	assert_int_equal(events_query(s, sym, &er, &out, &err), 0);
	ev_request_free(&er);
	d = answer_of(&out);
	assert_string_equal(str_of(d, "unit"), "nanoseconds");
	assert_int_equal(json_array_size(json_object_get(d, "events")), 2);
	json_decref(d);

	buf_free(&err);
}

/* The MCP tools (server/http/mcp_tools.c) over a store, under the sanitizers:
 * every tool answers, its text is bounded and its numbers are the
 * queries'. (tests/integration/test_mcp.py drives them over HTTP.) */
static json_t *mcp_call(struct server *srv, const char *tool, const char *args_json)
{
	json_t *args = json_loads(args_json, 0, NULL);
	assert_non_null(args);
	json_t *res = NULL;
	struct buf err = { 0 };
	assert_int_equal(mcp_tool_call(srv, &principal_open, tool, args, &res, &err), 0);
	json_decref(args);
	buf_free(&err);
	json_t *text = json_object_get(json_array_get(json_object_get(res, "content"), 0), "text");
	if (json_is_true(json_object_get(res, "isError")))
		fail_msg("%s: %s", tool, json_string_value(text));
	assert_true(json_string_length(text) <= 8000);
	return res;
}

static void test_mcp_tools(void **state)
{
	struct world *w = *state;
	struct server srv = { .store = w->s, .symbols = w->sym };
	struct buf err = { 0 }, z = { 0 };
	assert_int_equal(projects_open(w->dir, &srv.projects, &err), 0);
	assert_int_equal(metrics_open(w->dir, 86400000, &srv.metrics, &err), 0);
	make_batch(sample_specs, 5, 1, T0, &z);
	append(w->s, &z);
	char window[128];
	snprintf(window, sizeof(window), "\"start\": %lld, \"end\": %lld", (long long)(T0 - 60000),
		 (long long)(T0 + 60000));
	static const char *const calls[][2] = {
		{ "list_projects", "" },
		{ "top_entities", ", \"entity\": \"threads\"" },
		{ "top_functions", ", \"limit\": 3" },
		{ "flamegraph", ", \"min_percent\": 0" },
		{ "flamegraph", ", \"min_percent\": 0, \"max_chars\": 500, \"group_by\": [\"thread\"]" },
		{ "sandwich", ", \"function\": \"run\"" },
		{ "diff", "" },
		{ "timeseries", ", \"group_by\": \"thread\", \"num_buckets\": 4" },
		{ "events", ", \"limit\": 3, \"max_frames\": 2" },
		{ "gpu_kernels", "" },
		{ "gpu_flamegraph", "" },
		{ "gpu_metrics", "" },
	};
	json_t *fg = NULL, *top = NULL;
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		char args[512];
		if (strcmp(calls[i][0], "list_projects") == 0)
			snprintf(args, sizeof(args), "{}");
		else
			snprintf(args, sizeof(args), "{%s%s}", window, calls[i][1]);
		json_t *res = mcp_call(&srv, calls[i][0], args);
		if (i == 3)
			fg = json_incref(res);
		if (i == 2)
			top = json_incref(res);
		json_decref(res);
	}
	/* The flamegraph: the numbers of the query; a chain on one line. */
	json_t *sc = json_object_get(fg, "structuredContent");
	assert_int_equal((int)json_number_value(json_object_get(sc, "total")), 100);
	const char *text = json_string_value(
		json_object_get(json_array_get(json_object_get(fg, "content"), 0), "text"));
	assert_non_null(strstr(text, "\n100.0% (self 0.0%) root\n 99.0% (self 0.0%) main [app]\n"
				     "  95.0% (self 0.0%) run [app]\n   60.0% (self 60.0%) hot_a [app]\n"));
	assert_non_null(strstr(text, "\n 1.0% (self 1.0%) main > idle_loop [other]\n"));
	json_t *f0 = json_array_get(json_object_get(json_object_get(top, "structuredContent"), "functions"), 0);
	assert_string_equal(json_string_value(json_object_get(f0, "name")), "hot_a");
	assert_int_equal((int)json_number_value(json_object_get(f0, "self")), 60);
	json_decref(fg);
	json_decref(top);
	metrics_close(srv.metrics);
	projects_close(srv.projects);
	buf_free(&z);
	buf_free(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_rejects),
		cmocka_unit_test(test_frame_type_names),
		cmocka_unit_test(test_store_durable_and_dedup),
		cmocka_unit_test(test_store_torn_and_corrupt),
		cmocka_unit_test(test_wal_written_ahead),
		cmocka_unit_test(test_store_flush_of_several_logs),
		cmocka_unit_test(test_store_shared_log),
		cmocka_unit_test(test_store_compacts_a_logs_blocks),
		cmocka_unit_test_setup_teardown(test_flamegraph, world_setup, world_teardown),
		cmocka_unit_test_setup_teardown(test_mcp_tools, world_setup, world_teardown),
		cmocka_unit_test_setup_teardown(test_symbols_pending, world_setup, world_teardown),
		cmocka_unit_test(test_store_blocks),
		cmocka_unit_test(test_part_sort_nodes),
		cmocka_unit_test(test_block_slices),
		cmocka_unit_test(test_block_row_order),
		cmocka_unit_test(test_block_v3),
		cmocka_unit_test(test_queries_over_slices),
		cmocka_unit_test(test_queries_fold_heads_once),
		cmocka_unit_test(test_queries_carry_blocks),
		cmocka_unit_test(test_queries_carry_around_other_parts),
		cmocka_unit_test(test_otree_child),
		cmocka_unit_test(test_otree_write_budget),
		cmocka_unit_test(test_otree_write_ties),
		cmocka_unit_test(test_stack_sums_order),
		cmocka_unit_test_setup_teardown(test_flamegraph_pruning, world_setup, world_teardown),
		cmocka_unit_test_setup_teardown(test_flamegraph_sparse_dense, world_setup, world_teardown),
		cmocka_unit_test_setup_teardown(test_flamegraph_request_errors, world_setup, world_teardown),
		cmocka_unit_test_setup_teardown(test_queries_bound_user_regex, world_setup, world_teardown),
		cmocka_unit_test(test_route_match),
		cmocka_unit_test_setup_teardown(test_offcpu_queries, world_setup, world_teardown),
		cmocka_unit_test_setup_teardown(test_functions_tie_order, world_setup, world_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
