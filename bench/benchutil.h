/* benchutil.h - small helpers the benchmarks under bench/ share.
 *
 * bench_next: a xorshift64 generator, so every run of a benchmark draws
 * the same load from the same seed. bench_cpu_s: the process's CPU time
 * (user + system) in seconds. bench_rm_rf: removes a benchmark's
 * directory tree (what it wrote under /tmp), 0 or -1.
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

#endif
