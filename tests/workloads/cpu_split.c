/* cpu_split - a workload with a known split of CPU time, for checking
 * that ember attributes time to the right functions.
 *
 * The main thread runs main -> run_workload -> run_cycle -> run_slot ->
 * {hot_a, hot_b, cold_c}, spending about 60% of its CPU time in hot_a, 30%
 * in hot_b and 10% in cold_c, in slots of 20-60 ms whose lengths are
 * drawn at random. A sampler ticks at a fixed period; slots much shorter
 * than it and of one fixed length alias with it (perf at 97 Hz on a
 * loaded host saw 56 % of hot_a where 60 % was spent), while slots several
 * periods long, of random length, are sampled in proportion to their
 * length whatever the phase. It measures the CPU time it actually spent in
 * each function and, at exit, prints it as JSON on stdout:
 *   {"hot_a": 0.601, "hot_b": 0.299, "cold_c": 0.099, "cpu_seconds": 10.0}
 * Built with clang, with frame pointers in every function (GCC 12 leaves
 * them out of leaf functions even with -fno-omit-frame-pointer) and
 * without inlining.
 *
 * usage: cpu_split SECONDS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile uint64_t sink;

/* The same arithmetic loop in each function, so equal iteration counts
 * take equal time; no calls inside, so the leaf is the function itself. */
#define SPIN(iters)                                                 \
	do {                                                        \
		uint64_t x = sink + 1;                              \
		for (uint64_t i = 0; i < (iters); i++)              \
			x = x * 6364136223846793005ull + 1442695040888963407ull; \
		sink = x;                                           \
	} while (0)

NOINLINE void hot_a(uint64_t iters) { SPIN(iters); }
NOINLINE void hot_b(uint64_t iters) { SPIN(iters); }
NOINLINE void cold_c(uint64_t iters) { SPIN(iters); }

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double spent[3];

NOINLINE void run_slot(int which, uint64_t iters)
{
	double t0 = thread_cpu();
	if (which == 0)
		hot_a(iters);
	else if (which == 1)
		hot_b(iters);
	else
		cold_c(iters);
	spent[which] += thread_cpu() - t0;
}

/* xorshift64: the slot lengths only need to be aperiodic, not secret. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Ten slots: six of hot_a, three of hot_b, one of cold_c, interleaved;
 * each from half to one and a half times the mean length. */
NOINLINE void run_cycle(uint64_t iters)
{
	static const int order[10] = { 0, 1, 0, 0, 1, 0, 2, 0, 1, 0 };
	for (int i = 0; i < 10; i++) {
		double scale = 0.5 + (double)(rng_next() >> 11) / 9007199254740992.0;
		run_slot(order[i], (uint64_t)((double)iters * scale) + 1);
	}
}

NOINLINE void run_workload(double seconds, uint64_t iters)
{
	double start = thread_cpu();
	while (thread_cpu() - start < seconds)
		run_cycle(iters);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10.0;
	if (seconds <= 0 || seconds > 86400) {
		fprintf(stderr, "usage: cpu_split SECONDS\n");
		return 2;
	}
	/* Calibrate: iterations for about 40 milliseconds of CPU (the mean
	 * slot), measured over 2 ms or more. */
	uint64_t iters = 1000;
	for (;;) {
		double t0 = thread_cpu();
		hot_a(iters);
		double dt = thread_cpu() - t0;
		if (dt > 0.002) {
			iters = (uint64_t)((double)iters * 0.040 / dt);
			break;
		}
		iters *= 2;
	}
	spent[0] = spent[1] = spent[2] = 0;
	double t0 = thread_cpu();
	run_workload(seconds, iters);
	double total = thread_cpu() - t0;
	printf("{\"hot_a\": %.4f, \"hot_b\": %.4f, \"cold_c\": %.4f, \"cpu_seconds\": %.3f}\n",
	       spent[0] / total, spent[1] / total, spent[2] / total, total);
	return 0;
}
