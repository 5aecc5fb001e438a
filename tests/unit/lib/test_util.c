/* Unit tests: lib/util, lib/buf, lib/hmap, lib/strtab, lib/sort. */
#include "testutil.h"

#include "buf.h"
#include "hmap.h"
#include "httpc.h"
#include "log.h"
#include "pidlock.h"
#include "sort.h"
#include "strtab.h"
#include "util.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static void test_duration(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		int64_t ms;
	} ok[] = { { "5s", 5000 }, { "250ms", 250 }, { "2m30s", 150000 }, { "1h", 3600000 }, { "0", 0 } };
	static const char *const refused[] = { "", "5", "5x", "-5s", "99999999999999999999h" };
	int64_t ms;
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		assert_int_equal(parse_duration_ms(ok[i].text, &ms), 0);
		assert_int_equal(ms, ok[i].ms);
	}
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		if (parse_duration_ms(refused[i], &ms) != -1)
			fail_msg("duration \"%s\" accepted", refused[i]);
}

/* Rounding down goes toward minus infinity, before 1970 too. */
static void test_floor(void **state)
{
	(void)state;
	assert_int_equal(floor_div(125, 60), 2);
	assert_int_equal(floor_div(120, 60), 2);
	assert_int_equal(floor_div(-1, 60000), -1);
	assert_int_equal(floor_div(-60000, 60000), -1);
	assert_int_equal(floor_div(-60001, 60000), -2);
	assert_int_equal(floor_to(125, 60), 120);
	assert_int_equal(floor_to(0, 7), 0);
	assert_int_equal(floor_to(-1, 10), -10);
	assert_int_equal(floor_to(1796353212345LL, 120000), 1796353200000LL);
}

/* A table keeps its entries as it grows from malloc'ed to mapped (1 MiB)
 * and on by mremap; asking for no more leaves it where it is. */
static void test_table_grow(void **state)
{
	(void)state;
	uint32_t *t = NULL;
	size_t cap = 0, n = 0;
	bool mapped = false;
	while (cap < (3u << 20)) {
		size_t c = cap ? cap + cap / 2 : 16;
		t = table_grow(t, cap, c, sizeof(uint32_t));
		cap = c;
		for (; n < cap; n++)
			t[n] = (uint32_t)(n * 2654435761u);
		for (size_t i = 0; i < n; i += 997)
			assert_int_equal(t[i], (uint32_t)(i * 2654435761u));
		assert_int_equal(t[n - 1], (uint32_t)((n - 1) * 2654435761u));
		mapped |= cap * sizeof(uint32_t) >= (1u << 20);
	}
	assert_true(mapped);
	assert_ptr_equal(table_grow(t, cap, cap - 1, sizeof(uint32_t)), t);
	table_free(t, cap, sizeof(uint32_t));
	uint8_t *small = table_grow(NULL, 0, 100, 1);
	memset(small, 7, 100);
	small = table_grow(small, 100, 200, 1);
	assert_int_equal(small[99], 7);
	table_free(small, 200, 1);
	table_free(NULL, 0, 8);
}

/* Minor page faults of this process so far. */
static long minor_faults(void)
{
	struct rusage ru;
	assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
	return ru.ru_minflt;
}

/* prefault_write keeps every byte and leaves the pages mapped for
 * writing: reading then writing them faults no more. A grown table's new
 * pages read as zeros. */
static void test_prefault_write(void **state)
{
	(void)state;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = 64 * pg;
	uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(m != MAP_FAILED);
	memset(m, 0x5a, 3 * pg + 5); /* some pages written, the rest never touched */
	volatile uint8_t sink = 0;
	for (size_t i = 0; i < len; i += pg)
		sink ^= m[i]; /* the untouched pages now map the zero page */
	(void)sink;
	prefault_write(m + 1, len - 2); /* inner whole pages only */
	long f0 = minor_faults();
	for (size_t i = pg; i < len - pg; i += pg)
		m[i] ^= 1;
	long faults = minor_faults() - f0;
	for (size_t i = pg; i < len - pg; i += pg)
		m[i] ^= 1;
	for (size_t i = 0; i < len; i++)
		assert_int_equal(m[i], i < 3 * pg + 5 ? 0x5a : 0);
#ifdef MADV_POPULATE_WRITE
	if (madvise(m, pg, MADV_POPULATE_WRITE) == 0) /* the kernel has it */
		assert_true(faults <= 2);
#endif
	(void)faults;
	munmap(m, len);

	uint64_t *t = NULL;
	size_t cap = 0;
	for (size_t c = 1u << 16; c <= (1u << 19); c *= 2) {
		t = table_grow_zero(t, cap, c, sizeof(uint64_t));
		for (size_t i = cap; i < c; i += 61)
			assert_true(t[i] == 0);
		for (size_t i = cap; i < c; i++)
			t[i] = i;
		cap = c;
	}
	for (size_t i = 0; i < cap; i += 7)
		assert_true(t[i] == i);
	table_free(t, cap, sizeof(uint64_t));
}

static int cmp_u32_ref(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The radix sort against qsort: short and long arrays, narrow and full
 * ranges (bytes the same everywhere are skipped), duplicates; it keeps the
 * order of equal high halves. */
static void test_radix_sorts(void **state)
{
	(void)state;
	uint64_t rng = 88172645463325252ull;
	const size_t sizes[] = { 0, 1, 2, 47, 48, 49, 300, 5000 };
	const uint32_t masks[] = { 0, 7, 0xffff, 0xffffff, 0xffffffff, 0xff00ff00 };
	for (size_t si = 0; si < ARRAY_SIZE(sizes); si++)
		for (size_t mi = 0; mi < ARRAY_SIZE(masks); mi++) {
			size_t n = sizes[si];
			uint32_t *want = xmalloc((n + 1) * 4);
			uint64_t *k = xmalloc((n + 1) * 8), *ktmp = xmalloc((n + 1) * 8);
			for (size_t i = 0; i < n; i++) {
				rng ^= rng << 13;
				rng ^= rng >> 7;
				rng ^= rng << 17;
				want[i] = (uint32_t)rng & masks[mi];
				k[i] = (uint64_t)want[i] << 32 | (uint32_t)i;
			}
			qsort(want, n, 4, cmp_u32_ref);
			sort_u64_by_high(k, n, ktmp);
			for (size_t i = 0; i < n; i++) {
				assert_int_equal(k[i] >> 32, want[i]);
				if (i && k[i] >> 32 == k[i - 1] >> 32)
					assert_true((uint32_t)k[i] > (uint32_t)k[i - 1]);
			}
			free(want);
			free(k);
			free(ktmp);
		}
}

static void test_numbers(void **state)
{
	(void)state;
	uint64_t v;
	bool b;
	assert_int_equal(parse_u64("19", &v), 0);
	assert_int_equal(v, 19);
	static const char *const refused[] = { "-1", "1a", "", "99999999999999999999999" };
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		if (parse_u64(refused[i], &v) != -1)
			fail_msg("number \"%s\" accepted", refused[i]);
	assert_int_equal(parse_bool("true", &b), 0);
	assert_true(b);
	assert_int_equal(parse_bool("0", &b), 0);
	assert_false(b);
	assert_int_equal(parse_bool("maybe", &b), -1);
}

static void test_hex_uuid(void **state)
{
	(void)state;
	uint8_t in[3] = { 0x00, 0xab, 0xff }, out[3];
	char hex[7];
	hex_encode(in, 3, hex);
	assert_string_equal(hex, "00abff");
	assert_int_equal(hex_decode("00ABff", 6, out, 3), 0);
	assert_memory_equal(in, out, 3);
	assert_int_equal(hex_decode("00abf", 5, out, 3), -1);
	uint64_t v;
	assert_int_equal(parse_hex_u64("ffffffff81000000", 16, &v), 0);
	assert_true(v == 0xffffffff81000000ull);
	assert_int_equal(parse_hex_u64("1A", 2, &v), 0);
	assert_int_equal(v, 26);
	assert_int_equal(parse_hex_u64("", 0, &v), -1);
	assert_int_equal(parse_hex_u64("12345678901234567", 17, &v), -1);
	assert_int_equal(parse_hex_u64("12 4", 4, &v), -1);
	assert_int_equal(hex_decode("00abzz", 6, out, 3), -1);
	char u[37];
	uuid_v4(u);
	assert_true(uuid_valid(u));
	assert_int_equal(u[14], '4');
	assert_true(uuid_valid("00000000-0000-0000-0000-000000000000"));
	assert_false(uuid_valid("00000000-0000-0000-0000-00000000000"));
	assert_false(uuid_valid("00000000x0000-0000-0000-000000000000"));
}

/* A copied table answers like the original and grows on its own. */
static void test_strtab_copy(void **state)
{
	(void)state;
	struct strtab a, b;
	strtab_init(&a);
	char name[32];
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		assert_int_equal(strtab_intern_cstr(&a, name), (uint32_t)i + 1);
	}
	strtab_copy(&b, &a);
	for (int i = 0; i < 1000; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		assert_int_equal(strtab_lookup(&b, name, strlen(name)), (uint32_t)i + 1);
		assert_string_equal(strtab_get(&b, (uint32_t)i + 1), name);
	}
	assert_int_equal(strtab_intern_cstr(&b, "new"), 1001);
	assert_int_equal(strtab_lookup(&a, "new", 3), UINT32_MAX);
	assert_int_equal(strtab_intern_cstr(&a, "other"), 1001);
	assert_string_equal(strtab_get(&b, 1001), "new");
	assert_int_equal(strtab_lookup(&b, "", 0), 0);
	strtab_free(&a);
	strtab_free(&b);
	struct hmap e = { 0 }, f;
	hmap_copy(&f, &e); /* an empty index copies to an empty one */
	assert_int_equal(f.count, 0);
	hmap_free(&f);
}

struct ints {
	uint64_t *v;
};

static bool eq_int(const void *ctx, uint32_t idx)
{
	const uint64_t *want = ((const uint64_t *const *)ctx)[0];
	const uint64_t *arr = ((const uint64_t *const *)ctx)[1];
	return arr[idx] == *want;
}

/* Every entry matches: only the stored hash tells entries apart. */
static bool eq_any(const void *ctx, uint32_t idx)
{
	(void)ctx;
	(void)idx;
	return true;
}

static void test_hmap_against_reference(void **state)
{
	(void)state;
	/* Insert, find and remove keys in a pattern that exercises probe runs
	 * wrapping around and backward-shift deletion, checked against a
	 * plain array. */
	enum { N = 5000 };
	uint64_t *vals = calloc(N, sizeof(uint64_t));
	bool *present = calloc(N, sizeof(bool));
	struct hmap m = { 0 };
	for (uint32_t i = 0; i < N; i++) {
		vals[i] = (uint64_t)i * 7919u;
		/* A weak hash forces collisions. */
		hmap_insert(&m, vals[i] % 97, i);
		present[i] = true;
	}
	for (uint32_t i = 0; i < N; i += 3) {
		const void *ctx[2] = { &vals[i], vals };
		assert_true(hmap_remove(&m, vals[i] % 97, eq_int, ctx));
		present[i] = false;
	}
	for (uint32_t i = 0; i < N; i++) {
		const void *ctx[2] = { &vals[i], vals };
		uint32_t idx;
		bool found = hmap_find(&m, vals[i] % 97, eq_int, ctx, &idx);
		assert_int_equal(found, present[i]);
		if (found)
			assert_int_equal(idx, i);
	}
	assert_int_equal(m.count, N - (N + 2) / 3);
	/* A copy finds the same entries; a cleared map finds none. */
	struct hmap c;
	hmap_copy(&c, &m);
	hmap_clear(&m);
	for (uint32_t i = 0; i < N; i++) {
		const void *ctx[2] = { &vals[i], vals };
		uint32_t idx;
		assert_false(hmap_find(&m, vals[i] % 97, eq_int, ctx, &idx));
		assert_int_equal(hmap_find(&c, vals[i] % 97, eq_int, ctx, &idx), present[i]);
	}
	assert_int_equal(hmap_bytes(&c), (c.mask + 1) * sizeof(struct hmap_slot));
	hmap_free(&c);
	hmap_free(&m);
	assert_int_equal(hmap_bytes(&m), 0);
	/* Hashes equal in their low 32 bits are still told apart. */
	struct hmap h = { 0 };
	hmap_insert(&h, 5 | 1ull << 40, 0);
	hmap_insert(&h, 5, 1);
	uint32_t idx;
	assert_true(hmap_find(&h, 5, eq_any, NULL, &idx));
	assert_int_equal(idx, 1);
	assert_true(hmap_find(&h, 5 | 1ull << 40, eq_any, NULL, &idx));
	assert_int_equal(idx, 0);
	hmap_free(&h);
	free(vals);
	free(present);
}

static void test_strtab(void **state)
{
	(void)state;
	struct strtab t;
	strtab_init(&t);
	assert_int_equal(strtab_intern_cstr(&t, ""), 0);
	uint32_t a = strtab_intern_cstr(&t, "alpha");
	uint32_t b = strtab_intern(&t, "beta\0x", 6);
	assert_int_equal(strtab_intern_cstr(&t, "alpha"), a);
	assert_int_not_equal(a, b);
	assert_string_equal(strtab_get(&t, a), "alpha");
	assert_int_equal(strtab_len(&t, b), 6);
	assert_int_equal(strtab_lookup(&t, "gamma", 5), UINT32_MAX);
	for (int i = 0; i < 10000; i++) {
		char s[32];
		snprintf(s, sizeof(s), "s%d", i);
		strtab_intern_cstr(&t, s);
	}
	assert_string_equal(strtab_get(&t, a), "alpha");
	assert_int_equal(strtab_count(&t), 10003);
	strtab_reset(&t);
	assert_int_equal(strtab_count(&t), 1);
	assert_int_equal(strtab_lookup(&t, "alpha", 5), UINT32_MAX);
	strtab_free(&t);
}

static void test_unnamed_file(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	int fd = unnamed_file(dir);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "spooled", 7), 7);
	char back[8] = { 0 };
	assert_int_equal(pread(fd, back, 7, 0), 7);
	assert_string_equal(back, "spooled");
	/* Nothing in the directory, open or closed. */
	DIR *d = opendir(dir);
	assert_non_null(d);
	int entries = 0;
	for (struct dirent *e; (e = readdir(d));)
		entries += e->d_name[0] != '.' || strncmp(e->d_name, ".ember-", 7) == 0;
	closedir(d);
	assert_int_equal(entries, 0);
	close(fd);
	assert_int_equal(unnamed_file("/nonexistent/dir"), -1);
	rm_temp_dir(dir);
}

static void test_read_file_limit(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char path[256];
	snprintf(path, sizeof(path), "%s/f", dir);
	write_text(path, "0123456789");
	char *data;
	size_t len;
	assert_int_equal(read_file(path, 100, &data, &len), 0);
	assert_int_equal(len, 10);
	free(data);
	assert_int_equal(read_file(path, 5, &data, &len), -EFBIG);
	rm_temp_dir(dir);
}


/* The log (at LOG_INFO, as text) written to a file instead of stderr
 * until captured_text gives it back (the caller frees it). */
struct captured {
	char path[32];
	int fd, saved;
};

static void capture_log(struct captured *c)
{
	snprintf(c->path, sizeof(c->path), "/tmp/ember-log-XXXXXX");
	c->fd = mkstemp(c->path);
	assert_true(c->fd >= 0);
	c->saved = dup(STDERR_FILENO);
	dup2(c->fd, STDERR_FILENO);
	log_init("test", LOG_INFO, false);
}

static char *captured_text(struct captured *c)
{
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	char *text;
	size_t len;
	assert_int_equal(read_file(c->path, 1 << 20, &text, &len), 0);
	unlink(c->path);
	close(c->fd);
	return text;
}

/* Rate limiting: one statement at most LOG_RATE_BURST times per window,
 * then a count of what was dropped; other statements are not affected. */
static void test_log_rate_limit(void **state)
{
	(void)state;
	struct captured cap;
	capture_log(&cap);
	log_set_rate_limit(300);
	for (int i = 0; i < 10; i++)
		log_warn("repeated %d", i);
	log_info("another statement");
	usleep(350 * 1000);
	log_warn("repeated %d", 10);
	/* A statement that stops repeating: its count is told by the next
	 * line of another one once its window has ended, or by a flush. */
	unsigned long long before = log_suppressed_total();
	for (int i = 0; i < 1000; i++)
		log_error("disk full %d", i);
	assert_int_equal(log_suppressed_total() - before, 997);
	usleep(350 * 1000);
	log_info("something else");
	for (int i = 0; i < 5; i++)
		log_error("still full %d", i);
	log_flush_suppressed();
	log_flush_suppressed(); /* nothing left to tell */
	log_set_rate_limit(0);
	for (int i = 0; i < 5; i++)
		log_info("unlimited");
	char *text = captured_text(&cap);
	assert_non_null(strstr(text, "repeated 2\n"));
	assert_null(strstr(text, "repeated 3"));
	assert_non_null(strstr(text, "another statement"));
	assert_non_null(strstr(text, "repeated 10 (7 more like this suppressed)"));
	int n = 0;
	for (const char *p = text; (p = strstr(p, "unlimited")); p++)
		n++;
	assert_int_equal(n, 5);
	const char *told = strstr(text, "997 more like \"disk full %d\" suppressed");
	assert_non_null(told);
	assert_true(told < strstr(text, "something else"));
	assert_non_null(strstr(text, "2 more like \"still full %d\" suppressed"));
	assert_null(strstr(text, "disk full 3"));
	n = 0;
	for (const char *p = text; (p = strchr(p, '\n')); p++)
		n++;
	assert_int_equal(n, 3 + 1 + 1 + 3 + 1 + 1 + 3 + 1 + 5); /* bounded: 19 lines for 1 021 */
	free(text);
	log_init("test", LOG_INFO, false);
}

/* One holder at a time; the second is told the first one's pid; the lock
 * goes with the descriptor. */
static void test_pidlock(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char path[512];
	snprintf(path, sizeof(path), "%s/lock", dir);
	struct buf err = { 0 };
	long holder = -1;
	write_text(path, "999999999999\n"); /* a stale pid from a crash */
	int fd = pidlock_take(path, &holder, &err);
	assert_true(fd >= 0);
	assert_int_equal(holder, 0);
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(read_file(path, 64, &text, &len), 0);
	assert_int_equal(strtol(text, NULL, 10), (long)getpid());
	free(text);
	/* A second open file, even in this process, is refused. */
	assert_int_equal(pidlock_take(path, &holder, &err), PIDLOCK_HELD);
	assert_int_equal(holder, (long)getpid());
	assert_null(err.data);
	pidlock_release(fd);
	fd = pidlock_take(path, &holder, &err);
	assert_true(fd >= 0);
	pidlock_release(fd);
	/* A directory that does not exist: a message. */
	snprintf(path, sizeof(path), "%s/none/lock", dir);
	assert_int_equal(pidlock_take(path, &holder, &err), PIDLOCK_FAILED);
	assert_non_null(strstr(err.data, "none/lock"));
	buf_free(&err);
	rm_temp_dir(dir);
}

static void library_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void library_line(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vlibrary(LOG_WARN, "lib", fmt, ap);
	va_end(ap);
}

/* A library's line: after its prefix, without its trailing newlines, rate
 * limited as one statement whatever its format. */
static void test_log_library(void **state)
{
	(void)state;
	struct captured cap;
	capture_log(&cap);
	log_set_rate_limit(60000);
	library_line("first %d\n\n", 1);
	library_line("second\n");
	library_line("third %s\n", "x");
	library_line("fourth\n");
	log_set_rate_limit(0);
	char *text = captured_text(&cap);
	assert_non_null(strstr(text, "lib: first 1\n"));
	assert_null(strstr(text, "first 1\n\n"));
	assert_non_null(strstr(text, "lib: second\n"));
	assert_non_null(strstr(text, "lib: third x\n"));
	assert_null(strstr(text, "fourth"));
	free(text);
}

/* The capped response sink: appends up to max bytes; a write that would
 * pass max is refused whole (libcurl then aborts) and marks over. */
static void test_http_sink(void **state)
{
	(void)state;
	struct buf b = { 0 };
	struct http_sink s = { &b, 8, false };
	char text[] = "abcdefghij";
	assert_int_equal(http_sink_write(text, 1, 5, &s), 5);
	assert_int_equal(http_sink_write(text + 5, 3, 1, &s), 3);
	assert_false(s.over);
	assert_int_equal(b.len, 8);
	assert_memory_equal(b.data, "abcdefgh", 8);
	assert_int_equal(http_sink_write(text, 1, 1, &s), 0);
	assert_true(s.over);
	assert_int_equal(b.len, 8);
	buf_free(&b);
}

/* pwrite_exact writes at an offset (a hole before it reads as zeros);
 * pread_exact reads it back, and past the end fails with EIO. */
static void test_pio_exact(void **state)
{
	(void)state;
	FILE *f = tmpfile();
	assert_non_null(f);
	int fd = fileno(f);
	assert_int_equal(pwrite_exact(fd, "hello", 5, 100), 0);
	char got[8] = { 1 };
	assert_int_equal(pread_exact(fd, got, 5, 100), 0);
	assert_memory_equal(got, "hello", 5);
	assert_int_equal(pread_exact(fd, got, 2, 0), 0);
	assert_int_equal(got[0], 0);
	assert_int_equal(got[1], 0);
	errno = 0;
	assert_int_equal(pread_exact(fd, got, 8, 100), -1);
	assert_int_equal(errno, EIO);
	fclose(f);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_duration),
	cmocka_unit_test(test_pidlock),
	cmocka_unit_test(test_log_rate_limit),
	cmocka_unit_test(test_numbers),
	cmocka_unit_test(test_floor),
	cmocka_unit_test(test_table_grow),
	cmocka_unit_test(test_prefault_write),
	cmocka_unit_test(test_radix_sorts),
	cmocka_unit_test(test_hex_uuid),
	cmocka_unit_test(test_strtab_copy),
	cmocka_unit_test(test_hmap_against_reference),
	cmocka_unit_test(test_strtab),
	cmocka_unit_test(test_read_file_limit),
	cmocka_unit_test(test_unnamed_file),
	cmocka_unit_test(test_http_sink),
	cmocka_unit_test(test_pio_exact),
	cmocka_unit_test(test_log_library))
