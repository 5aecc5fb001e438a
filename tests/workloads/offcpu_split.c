/* offcpu_split - a workload with a known split of off-CPU time, for
 * checking ember's off-CPU profiling (tests/integration/test_offcpu.py).
 *
 * A thread named "blocker" runs blocker -> run_blocking -> {sleep_a,
 * sleep_b} in a loop: sleep_a sleeps 30 ms in nanosleep, sleep_b waits
 * 10 ms on a condition variable nobody signals (a futex wait with a
 * timeout), so about 3/4 of its blocked time is in sleep_a. It measures
 * how long each call kept it off CPU (wall time minus its own CPU time)
 * and, at exit, prints on stdout as JSON, per function: the number of
 * waits, their total in seconds, and the sum of their squares (for the
 * test's statistics):
 *   {"sleep_a": {"waits": 250, "seconds": 7.6, "sq": 0.23}, "sleep_b": ...,
 *    "seconds": 10.0}
 * The main thread only waits for it (pthread_join). Built like cpu_split:
 * clang, frame pointers in every function, no inlining.
 *
 * usage: offcpu_split SECONDS
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

struct tally {
	long waits;
	double seconds, sq;
};

static struct tally tally_a, tally_b;
static double run_seconds;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static double clock_s(clockid_t id)
{
	struct timespec ts;
	if (clock_gettime(id, &ts) != 0) {
		perror("clock_gettime");
		exit(1);
	}
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Adds the off-CPU time of a call that started at (wall0, cpu0). */
static void account(struct tally *t, double wall0, double cpu0)
{
	double off = (clock_s(CLOCK_MONOTONIC) - wall0) - (clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0);
	if (off < 0)
		off = 0;
	t->waits++;
	t->seconds += off;
	t->sq += off * off;
}

NOINLINE void sleep_a(void)
{
	double w = clock_s(CLOCK_MONOTONIC), c = clock_s(CLOCK_THREAD_CPUTIME_ID);
	struct timespec ts = { 0, 30 * 1000 * 1000 };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	account(&tally_a, w, c);
}

NOINLINE void sleep_b(void)
{
	double w = clock_s(CLOCK_MONOTONIC), c = clock_s(CLOCK_THREAD_CPUTIME_ID);
	struct timespec until;
	if (clock_gettime(CLOCK_REALTIME, &until) != 0) {
		perror("clock_gettime");
		exit(1);
	}
	until.tv_nsec += 10 * 1000 * 1000;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&mu);
	int rc = 0;
	while (rc != ETIMEDOUT) /* nobody signals: only the timeout ends it */
		rc = pthread_cond_timedwait(&never, &mu, &until);
	pthread_mutex_unlock(&mu);
	account(&tally_b, w, c);
}

NOINLINE void run_blocking(double seconds)
{
	double end = clock_s(CLOCK_MONOTONIC) + seconds;
	while (clock_s(CLOCK_MONOTONIC) < end) {
		sleep_a();
		sleep_b();
	}
}

NOINLINE void *blocker(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "blocker");
	run_blocking(run_seconds);
	return NULL;
}

static void print_tally(const char *name, const struct tally *t)
{
	printf("\"%s\": {\"waits\": %ld, \"seconds\": %.6f, \"sq\": %.9f}", name, t->waits, t->seconds,
	       t->sq);
}

int main(int argc, char **argv)
{
	run_seconds = argc > 1 ? atof(argv[1]) : 10.0;
	if (!(run_seconds > 0 && run_seconds <= 3600)) {
		fprintf(stderr, "usage: offcpu_split SECONDS (0 < SECONDS <= 3600)\n");
		return 2;
	}
	pthread_t t;
	int rc = pthread_create(&t, NULL, blocker, NULL);
	if (rc != 0) {
		fprintf(stderr, "pthread_create: %d\n", rc);
		return 1;
	}
	pthread_join(t, NULL);
	printf("{");
	print_tally("sleep_a", &tally_a);
	printf(", ");
	print_tally("sleep_b", &tally_b);
	printf(", \"seconds\": %.3f}\n", run_seconds);
	return 0;
}
