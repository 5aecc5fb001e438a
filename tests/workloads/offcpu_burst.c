/* offcpu_burst - many threads that block and wake all the time, so the
 * off-CPU sampler writes a flood of records: THREADS threads (default
 * 128), each sleeping SLEEP_US microseconds (default 500) in a loop for
 * SECONDS seconds. With -off-cpu-sampling-rate=1000 nearly every wait is
 * sampled, tens of thousands of records a second, enough to fill the
 * agent's ring buffer between two of its timed drains.
 * Prints {"waits": N}: the sleeps all threads made.
 * usage: offcpu_burst SECONDS [THREADS [SLEEP_US]] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THREADS 1024

static double seconds;      /* set before the threads start */
static long sleep_ns;       /* set before the threads start */
static atomic_long waits;   /* summed by every thread at its end */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *sleeper(void *arg)
{
	double end = *(const double *)arg;
	struct timespec d = { sleep_ns / 1000000000L, sleep_ns % 1000000000L };
	long n = 0;
	while (now_s() < end) {
		nanosleep(&d, NULL);
		n++;
	}
	atomic_fetch_add(&waits, n);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: offcpu_burst SECONDS [THREADS [SLEEP_US]]\n");
		return 2;
	}
	seconds = atof(argv[1]);
	long nthreads = argc > 2 ? atol(argv[2]) : 128;
	long sleep_us = argc > 3 ? atol(argv[3]) : 500;
	if (seconds <= 0 || nthreads < 1 || nthreads > MAX_THREADS || sleep_us < 1 ||
	    sleep_us > 1000000) {
		fprintf(stderr, "offcpu_burst: SECONDS > 0, 1 <= THREADS <= %d, 1 <= SLEEP_US <= 1000000\n",
			MAX_THREADS);
		return 2;
	}
	sleep_ns = sleep_us * 1000L;
	double end = now_s() + seconds;
	pthread_t t[MAX_THREADS];
	for (long i = 0; i < nthreads; i++)
		if (pthread_create(&t[i], NULL, sleeper, &end) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (long i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	printf("{\"waits\": %ld}\n", atomic_load(&waits));
	return 0;
}
