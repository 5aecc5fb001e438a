/* benchutil.h - small helpers the benchmarks under bench/ share.
 *
 * bench_next: a xorshift64 generator, so every run of a benchmark draws
 * the same load from the same seed. bench_cpu_s: the process's CPU time
 * (user + system) in seconds. bench_rm_rf: removes a benchmark's
 * directory tree (what it wrote under /tmp), 0 or -1. bench_load_args:
 * the load of a batch benchmark from its command line.
 */
#ifndef EMBER_BENCH_BENCHUTIL_H
#define EMBER_BENCH_BENCHUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static inline uint64_t bench_next(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *state = x;
}

static inline double bench_cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static inline int bench_rm_rf(const char *dir)
{
	char cmd[1100];
	if (snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir) >= (int)sizeof(cmd) || strchr(dir, '\''))
		return -1;
	return system(cmd) == 0 ? 0 : -1;
}

/* Reads a batch benchmark's [BATCHES [SAMPLES [DISTINCT [PROCS]]]]
 * arguments, each defaulting to def[i]. Returns 0, or -1 with the usage
 * of name printed where one is below 1 or PROCS is above max_procs. */
static inline int bench_load_args(int argc, char **argv, const char *name, const long def[4],
				  long max_procs, long *batches, long *per_batch, long *distinct,
				  long *procs)
{
	long *v[4] = { batches, per_batch, distinct, procs };
	for (int i = 0; i < 4; i++)
		*v[i] = argc > i + 1 ? atol(argv[i + 1]) : def[i];
	if (*batches < 1 || *per_batch < 1 || *distinct < 1 || *procs < 1 || *procs > max_procs) {
		fprintf(stderr, "usage: %s [BATCHES [SAMPLES [DISTINCT [PROCS]]]]\n", name);
		return -1;
	}
	return 0;
}

#endif
