/* util.c - see util.h. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n)
{
	fprintf(stderr, "ember: out of memory allocating %zu bytes\n", n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);
	if (!p)
		oom(count * size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

void free_each(void *const *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(p[i]);
}

void free_array(void *v, size_t n)
{
	void **p = v;
	for (size_t i = 0; i < n; i++)
		free(p[i]);
	free(p);
}

void free_secret(char *s)
{
	if (!s)
		return;
	explicit_bzero(s, strlen(s));
	free(s);
}

void xgrow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return;
	size_t c = *cap ? *cap : 8;
	while (c < need) {
		if (c > SIZE_MAX / 2)
			oom(SIZE_MAX);
		c *= 2;
	}
	if (elem && c > SIZE_MAX / elem)
		oom(SIZE_MAX);
	*p = xrealloc(*p, c * elem);
	*cap = c;
}

#define TABLE_MAP_MIN ((size_t)1 << 20)

static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (n + pg - 1) / pg * pg;
}

void xgrow2(void **p, void **q, size_t *cap, size_t need, size_t elem, size_t qelem)
{
	size_t old = *cap;
	xgrow(p, cap, need, elem);
	if (*cap != old)
		*q = xrealloc(*q, *cap * qelem);
}

void *table_grow(void *p, size_t n, size_t new_n, size_t elem)
{
	if (elem && new_n > (SIZE_MAX - (1u << 16)) / elem)
		oom(SIZE_MAX);
	size_t old = n * elem, want = new_n * elem;
	if (want < TABLE_MAP_MIN || want <= old)
		return old >= TABLE_MAP_MIN ? p : xrealloc(p, want);
	void *q;
	if (old >= TABLE_MAP_MIN) {
		q = mremap(p, page_round(old), page_round(want), MREMAP_MAYMOVE);
	} else {
		q = mmap(NULL, page_round(want), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
		if (q != MAP_FAILED && old)
			memcpy(q, p, old);
		if (q != MAP_FAILED)
			free(p);
	}
	if (q == MAP_FAILED)
		oom(want);
	prefault_write((char *)q + (old >= TABLE_MAP_MIN ? page_round(old) : 0),
		       page_round(want) - (old >= TABLE_MAP_MIN ? page_round(old) : 0));
	return q;
}

void prefault_write(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1);
	uintptr_t e = ((uintptr_t)p + len) & ~(pg - 1);
	/* Ignored on failure by design (util.h): EINVAL before Linux 5.14,
	 * ENOMEM when short of memory; the pages then fault in on use. */
	if (e > a)
		(void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
	(void)p;
	(void)len;
#endif
}

void *table_grow_zero(void *p, size_t n, size_t new_n, size_t elem)
{
	void *q = table_grow(p, n, new_n, elem);
	if (new_n <= n)
		return q;
	/* Mapped: the bytes past the old size were never handed out (a
	 * mapping's tail up to its page, pages added by mremap, or a new
	 * mapping past the copy), so they are still the kernel's zeros. */
	if (new_n * elem < TABLE_MAP_MIN)
		memset((char *)q + n * elem, 0, (new_n - n) * elem);
	return q;
}

void table_free(void *p, size_t n, size_t elem)
{
	if (p && n * elem >= TABLE_MAP_MIN)
		munmap(p, page_round(n * elem));
	else
		free(p);
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *d = xmalloc(n + 1);
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

int64_t now_unix_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t now_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
}

void timespec_add_ns(struct timespec *ts, uint64_t ns)
{
	ts->tv_sec += (time_t)(ns / 1000000000ull);
	ts->tv_nsec += (long)(ns % 1000000000ull);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

void thread_stop_join(pthread_t thread, pthread_mutex_t *mu, pthread_cond_t *cond, bool *stopping)
{
	pthread_mutex_lock(mu);
	*stopping = true;
	pthread_cond_broadcast(cond);
	pthread_mutex_unlock(mu);
	pthread_join(thread, NULL);
}

void deadline_in_ms(struct timespec *ts, uint64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	timespec_add_ns(ts, ms * 1000000ull);
}

uint64_t now_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int parse_hex_u64(const char *s, size_t n, uint64_t *out)
{
	if (n == 0 || n > 16)
		return -1;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		int d = hexval(s[i]);
		if (d < 0)
			return -1;
		v = v << 4 | (uint64_t)d;
	}
	*out = v;
	return 0;
}

int hex_decode(const char *in, size_t inlen, uint8_t *out, size_t n)
{
	if (inlen != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(in[2 * i]), lo = hexval(in[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int unnamed_file(const char *dir)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd;
	size_t n = strlen(dir) + sizeof("/.ember-XXXXXX");
	char *path = malloc(n);
	if (!path) {
		errno = ENOMEM;
		return -1;
	}
	snprintf(path, n, "%s/.ember-XXXXXX", dir);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd >= 0)
		unlink(path);
	int e = errno;
	free(path);
	errno = e;
	return fd;
}

enum io_op { IO_WRITE, IO_PREAD, IO_PWRITE };

/* write_exact, pread_exact and pwrite_exact: write (at the file's offset),
 * pread or pwrite (p is only read when writing) until n bytes, through
 * EINTR and short counts. */
static int io_exact(int fd, void *p, size_t n, uint64_t off, enum io_op op)
{
	size_t done = 0;
	while (done < n) {
		char *at = (char *)p + done;
		ssize_t r = op == IO_WRITE  ? write(fd, at, n - done)
			    : op == IO_PREAD ? pread(fd, at, n - done, (off_t)(off + done))
					     : pwrite(fd, at, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EIO;
			return -1;
		}
		done += (size_t)r;
	}
	return 0;
}

int fsync_dir_of(const char *path)
{
	char *copy = xstrdup(path);
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

int write_exact(int fd, const void *p, size_t n)
{
	return io_exact(fd, (void *)p, n, 0, IO_WRITE);
}

int pread_exact(int fd, void *p, size_t n, uint64_t off)
{
	return io_exact(fd, p, n, off, IO_PREAD);
}

int pwrite_exact(int fd, const void *p, size_t n, uint64_t off)
{
	return io_exact(fd, (void *)p, n, off, IO_PWRITE);
}

int read_file(const char *path, size_t max, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Read up to max + 1 bytes: getting the extra byte proves the file
	 * is larger than allowed. */
	size_t limit = max < SIZE_MAX - 1 ? max + 1 : max;
	size_t cap = MIN((size_t)4096, limit), n = 0;
	char *buf = xmalloc(cap + 1);
	for (;;) {
		if (n == cap) {
			if (cap >= limit)
				break;
			cap = cap > limit / 2 ? limit : cap * 2;
			buf = xrealloc(buf, cap + 1);
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = -errno;
			free(buf);
			close(fd);
			return e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (n > max) {
		free(buf);
		return -EFBIG;
	}
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return 0;
}

int parse_duration_ms(const char *s, int64_t *out_ms)
{
	if (!s || !*s)
		return -1;
	if (strcmp(s, "0") == 0) {
		*out_ms = 0;
		return 0;
	}
	int64_t total = 0;
	const char *p = s;
	while (*p) {
		if (*p < '0' || *p > '9')
			return -1;
		int64_t v = 0;
		while (*p >= '0' && *p <= '9') {
			if (v > INT64_MAX / 10 - 10)
				return -1;
			v = v * 10 + (*p++ - '0');
		}
		/* The units, "ms" before "m". */
		static const struct {
			const char *unit;
			int64_t ms;
		} units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "d", 86400000 } };
		int64_t mult = 0;
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && !mult; i++) {
			size_t n = strlen(units[i].unit);
			if (strncmp(p, units[i].unit, n) == 0) {
				mult = units[i].ms;
				p += n;
			}
		}
		if (!mult)
			return -1;
		if (v > (INT64_MAX - total) / mult)
			return -1;
		total += v * mult;
	}
	*out_ms = total;
	return 0;
}

int parse_u64(const char *s, uint64_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

int parse_bool(const char *s, bool *out)
{
	static const char *yes[] = { "1", "t", "true", "TRUE", "True", "yes", "on" };
	static const char *no[] = { "0", "f", "false", "FALSE", "False", "no", "off" };
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++)
		if (strcmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++)
		if (strcmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	return -1;
}

void uuid_v4(char out[37])
{
	uint8_t b[16];
	size_t got = 0;
	while (got < sizeof(b)) {
		ssize_t r = getrandom(b + got, sizeof(b) - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			/* getrandom cannot fail on Linux >= 3.17 once the pool is
			 * initialised; fall back to time-seeded bytes rather than
			 * crash. */
			uint64_t t = now_mono_ns();
			for (size_t i = got; i < sizeof(b); i++)
				b[i] = (uint8_t)(t >> ((i % 8) * 8));
			break;
		}
		got += (size_t)r;
	}
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	snprintf(out, 37,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
		 b[10], b[11], b[12], b[13], b[14], b[15]);
}

bool uuid_valid(const char *s)
{
	for (int i = 0; i < 36; i++) {
		char c = s[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return false;
		} else if (hexval(c) < 0) {
			return false;
		}
	}
	return s[36] == '\0';
}

int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}
