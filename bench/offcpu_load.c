/* offcpu_load.c - the loads bench/offcpu_overhead.sh measures the off-CPU
 * sampler's cost with (docs/performance.md):
 *
 *   offcpu_load syscalls SECONDS   nanoseconds per getppid() system call
 *                                  (the system-call exit hook's cost)
 *   offcpu_load pingpong SECONDS   nanoseconds per round trip of one byte
 *                                  between two threads over two pipes: two
 *                                  context switches and four system calls
 *
 * Each prints one number. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2]; /* the two pipes: set before the thread starts */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *pong(void *arg)
{
	(void)arg;
	char c;
	while (read(ab[0], &c, 1) == 1 && c)
		if (write(ba[1], &c, 1) != 1)
			break;
	return NULL;
}

static int pingpong(double secs)
{
	pthread_t t;
	if (pipe(ab) || pipe(ba) || pthread_create(&t, NULL, pong, NULL))
		return 1;
	double t0 = now_s(), el = 0;
	long n = 0;
	char c = 1;
	for (;;) {
		if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
			return 1;
		if ((++n & 1023) == 0 && (el = now_s() - t0) >= secs)
			break;
	}
	c = 0;
	if (write(ab[1], &c, 1) != 1 || pthread_join(t, NULL))
		return 1;
	printf("%.0f\n", el * 1e9 / (double)n);
	return 0;
}

static int syscalls(double secs)
{
	double t0 = now_s(), el;
	long n = 0;
	do {
		for (int i = 0; i < 4096; i++)
			syscall(SYS_getppid);
		n += 4096;
	} while ((el = now_s() - t0) < secs);
	printf("%.1f\n", el * 1e9 / (double)n);
	return 0;
}

int main(int argc, char **argv)
{
	double secs = argc > 2 ? atof(argv[2]) : 2;
	if (argc > 1 && strcmp(argv[1], "syscalls") == 0 && secs > 0)
		return syscalls(secs);
	if (argc > 1 && strcmp(argv[1], "pingpong") == 0 && secs > 0)
		return pingpong(secs);
	fprintf(stderr, "usage: offcpu_load syscalls|pingpong SECONDS\n");
	return 2;
}
