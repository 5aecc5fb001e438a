/* recs_planted - a workload with one planted performance problem, for the
 * recommendations' integration test (tests/integration/test_recommendations.py).
 * Built once per problem, each binary named for it (so each is its own
 * application): -DPLANT_REGEX (a PCRE2 pattern compiled on every call),
 * -DPLANT_ZLIB (zlib level 9 on the hot path), -DPLANT_LOCK (four threads
 * convoying on one mutex), -DPLANT_WRITE (a write(2) per 16-byte record).
 *
 *   recs_x SECONDS [fixed]
 *
 * runs the planted code (or with "fixed", the same work done the way the
 * recommendation says) for SECONDS and prints
 * {"iterations": N, "cpu_s": S, "wall_s": W, "cpu_us_per_iteration": U}: the
 * truth the recommendation's savings are checked against; the lock convoy
 * adds "blocked_threads" (its workers asleep on average: neither running
 * nor runnable, from each thread's schedstat) and "asleep_threads" (every
 * thread's, the main thread's wait for the workers included). zlib and
 * PCRE2 are linked statically so that their internal functions
 * (deflate_slow, ...) have symbols. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifdef PLANT_REGEX
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif
#ifdef PLANT_ZLIB
#include <zlib.h>
#endif

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static volatile int stop;
static int fixed;
static volatile uint64_t sink;

#ifdef PLANT_REGEX
static const char *subjects[] = { "user1@example.com", "user2@example.org", "no address here",
				  "carol@test.com" };
#define PATTERN "^([a-z0-9._%+-]+)@([a-z0-9-]+(?:\\.[a-z0-9-]+)*)\\.(com|org|net|io)$"

__attribute__((noinline)) static int check_address(const pcre2_code *once, const char *s)
{
	int ec;
	PCRE2_SIZE off;
	const pcre2_code *re = once;
	pcre2_code *mine = NULL;
	if (!re) /* the planted problem: compiled on every call */
		re = mine = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS, &ec, &off, NULL);
	if (!re)
		abort();
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
	pcre2_match_data_free(md);
	pcre2_code_free(mine);
	return rc > 0;
}

static uint64_t run(double seconds)
{
	int ec;
	PCRE2_SIZE off;
	pcre2_code *once = fixed ? pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS, &ec, &off, NULL) : NULL;
	uint64_t n = 0;
	double end = now_s() + seconds;
	while (now_s() < end)
		for (int i = 0; i < 256; i++, n++)
			sink += (uint64_t)check_address(once, subjects[n % 4]);
	pcre2_code_free(once);
	return n;
}
#endif

#ifdef PLANT_ZLIB
static unsigned char text[64 * 1024], out[80 * 1024];

__attribute__((noinline)) static uLong save_record(int level)
{
	uLongf len = sizeof(out);
	if (compress2(out, &len, text, sizeof(text), level) != Z_OK)
		abort();
	return len;
}

static uint64_t run(double seconds)
{
	/* Text-like data: words from a small vocabulary with numbers. */
	static const char *words[] = { "status", "request", "latency", "ok", "error", "user", "id",
				       "region", "eu-west", "us-east", "GET", "POST", "/api/v1/items" };
	size_t at = 0;
	unsigned seed = 1;
	while (at < sizeof(text) - 32) {
		seed = seed * 1103515245 + 12345;
		at += (size_t)snprintf((char *)text + at, 32, "%s=%u ", words[(seed >> 16) % 13], (seed >> 8) % 1000);
	}
	uint64_t n = 0;
	double end = now_s() + seconds;
	while (now_s() < end) {
		sink += save_record(fixed ? 1 : 9);
		n++;
	}
	return n;
}
#endif

#ifdef PLANT_LOCK
#define THREADS 4
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shared_total;
static uint64_t counts[THREADS][8]; /* a cache line each */

__attribute__((noinline)) static void add_sample(int t, uint64_t v)
{
	if (fixed) {
		counts[t][0] += v;
		return;
	}
	pthread_mutex_lock(&mu); /* the planted problem: one lock for every thread */
	shared_total += v;
	for (int i = 0; i < 50; i++)
		sink += v * (uint64_t)i;
	pthread_mutex_unlock(&mu);
	counts[t][0]++;
}

static double thread_blocked[THREADS];
static double blocked_s, asleep_s; /* summed over the threads */

/* The seconds this thread has been asleep since t0: its wall time less its
 * time on a CPU and waiting for one (/proc/thread-self/schedstat). */
static double asleep_since(double t0)
{
	unsigned long long run = 0, wait = 0;
	FILE *f = fopen("/proc/thread-self/schedstat", "r");
	if (!f || fscanf(f, "%llu %llu", &run, &wait) != 2)
		abort();
	fclose(f);
	return now_s() - t0 - (double)(run + wait) / 1e9;
}

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg;
	double t0 = now_s();
	uint64_t n = 0;
	while (!stop) {
		add_sample(t, n++);
		if (fixed)
			for (int i = 0; i < 50; i++)
				sink += n * (uint64_t)i;
	}
	counts[t][1] = n;
	thread_blocked[t] = asleep_since(t0);
	return NULL;
}

static uint64_t run(double seconds)
{
	pthread_t th[THREADS];
	double t0 = now_s();
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
	usleep((useconds_t)(seconds * 1e6));
	stop = 1;
	asleep_s = asleep_since(t0);
	uint64_t n = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		n += counts[i][1];
		blocked_s += thread_blocked[i] > 0 ? thread_blocked[i] : 0;
	}
	asleep_s += blocked_s;
	return n;
}
#endif

#ifdef PLANT_WRITE
static char buffer[64 * 1024];
static size_t used;

__attribute__((noinline)) static void emit_record(int fd, const char *rec, size_t len)
{
	if (!fixed) { /* the planted problem: a system call per record */
		if (write(fd, rec, len) != (ssize_t)len)
			abort();
		return;
	}
	if (used + len > sizeof(buffer)) {
		if (write(fd, buffer, used) != (ssize_t)used)
			abort();
		used = 0;
	}
	memcpy(buffer + used, rec, len);
	used += len;
}

static uint64_t run(double seconds)
{
	int fd = open("/dev/null", O_WRONLY);
	if (fd < 0)
		abort();
	uint64_t n = 0;
	double end = now_s() + seconds;
	char rec[16] = "id=0000 ok=1\n";
	while (now_s() < end)
		for (int i = 0; i < 1024; i++, n++) {
			rec[3] = (char)('0' + n % 10);
			emit_record(fd, rec, 13);
		}
	close(fd);
	return n;
}
#endif

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	fixed = argc > 2 && strcmp(argv[2], "fixed") == 0;
	double w0 = now_s(), c0 = cpu_s();
	uint64_t n = run(seconds);
	double wall = now_s() - w0, cpu = cpu_s() - c0;
	printf("{\"iterations\": %llu, \"cpu_s\": %.4f, \"wall_s\": %.4f, \"cpu_us_per_iteration\": %.6f",
	       (unsigned long long)n, cpu, wall, n ? cpu * 1e6 / (double)n : 0.0);
#ifdef PLANT_LOCK
	printf(", \"blocked_threads\": %.4f, \"asleep_threads\": %.4f", blocked_s / wall, asleep_s / wall);
#endif
	printf("}\n");
	return 0;
}
