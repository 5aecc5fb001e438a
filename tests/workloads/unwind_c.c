/* unwind_c - a C workload built WITHOUT frame pointers (gcc -O2
 * -fomit-frame-pointer), for checking ember's DWARF-CFI unwinder.
 *
 *   unwind_c chain SECONDS      main -> stage_one -> stage_two -> stage_three
 *                               -> realigned -> {mix_a, mix_b}: functions with
 *                               stack frames of different sizes, one realigning
 *                               the stack, some calling through function
 *                               pointers
 *   unwind_c recurse DEPTH SECONDS
 *                               main -> descend x DEPTH -> spin: a recursion
 *                               DEPTH frames deep, busy at the bottom
 *   unwind_c signal SECONDS     main -> wait_for_signals, interrupted every
 *                               10 ms of CPU by SIGPROF, whose handler spins in
 *                               in_handler: stacks through the signal trampoline
 * Prints {"cpu_seconds": ...} at exit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile uint64_t sink;

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Uses a local array so the compiler must adjust the stack pointer: the
 * CFA is then SP plus a frame size that only the CFI knows. */
NOINLINE uint64_t mix_a(uint64_t seed, int n)
{
	uint64_t buf[37];
	for (int i = 0; i < 37; i++)
		buf[i] = seed * (uint64_t)(i + 1);
	uint64_t x = seed;
	for (int r = 0; r < n; r++)
		for (int i = 0; i < 37; i++)
			x = x * 6364136223846793005ull + buf[(i + r) % 37];
	return x;
}

NOINLINE uint64_t mix_b(uint64_t seed, int n)
{
	char text[200];
	memset(text, (int)(seed & 0x7f) | 1, sizeof(text));
	uint64_t h = 1469598103934665603ull;
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < sizeof(text); i++)
			h = (h ^ (uint64_t)text[i]) * 1099511628211ull;
	return h;
}

typedef uint64_t (*mixer)(uint64_t, int);

/* A 64-byte aligned local next to a variable-size one: GCC realigns the
 * stack through a DRAP register, and the CFA is the expression *(RBP - 8)
 * (as in numpy's AVX-512 sorts). */
NOINLINE uint64_t realigned(mixer m, uint64_t seed, int n)
{
	uint64_t buf[8] __attribute__((aligned(64)));
	uint64_t *dyn = __builtin_alloca((size_t)n * sizeof(uint64_t));
	for (int i = 0; i < 8; i++)
		buf[i] = seed + (uint64_t)i;
	for (int i = 0; i < n; i++)
		dyn[i] = seed ^ (uint64_t)i;
	__asm__ volatile("" : : "r"(buf), "r"(dyn) : "memory");
	return m(buf[seed & 7] ^ dyn[0], 400) ^ buf[(seed + 3) & 7];
}

NOINLINE uint64_t stage_three(mixer m, uint64_t seed)
{
	return realigned(m, seed, 16);
}

NOINLINE uint64_t stage_two(int which, uint64_t seed)
{
	mixer m = which ? mix_b : mix_a;
	uint64_t v = stage_three(m, seed);
	return v ^ (uint64_t)which;
}

NOINLINE uint64_t stage_one(uint64_t seed)
{
	uint64_t acc = 0;
	for (int i = 0; i < 4; i++)
		acc += stage_two(i & 1, seed + (uint64_t)i);
	return acc;
}

NOINLINE uint64_t spin(int n)
{
	uint64_t x = (uint64_t)n;
	for (int i = 0; i < 200000; i++)
		x = x * 2862933555777941757ull + 3037000493ull;
	return x;
}

/* A real recursion: the volatile local lives in each frame and is read
 * after the call, so the compiler can turn it neither into a loop nor into
 * a tail call. */
NOINLINE uint64_t descend(int depth, volatile int *stop)
{
	volatile uint64_t local[4];
	local[depth & 3] = (uint64_t)depth;
	if (depth <= 1) {
		uint64_t x = 0;
		while (!*stop)
			x += spin(depth);
		return x;
	}
	uint64_t r = descend(depth - 1, stop);
	return r ^ local[depth & 3];
}

static volatile int stop_flag;

static void alarm_after(double seconds)
{
	/* The recursion checks stop_flag; a timer thread would need pthreads, so
	 * the flag is set from a signal handler. */
	struct itimerspec its = { { 0, 0 }, { (time_t)seconds,
					      (long)((seconds - (double)(time_t)seconds) * 1e9) } };
	timer_t t;
	struct sigevent ev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM };
	if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &t) == 0)
		timer_settime(t, 0, &its, NULL);
}

static void on_alarm(int sig)
{
	(void)sig;
	stop_flag = 1;
}

NOINLINE uint64_t in_handler(void)
{
	uint64_t x = 0;
	for (int i = 0; i < 25; i++)
		x += spin(i);
	return x;
}

static void on_prof(int sig)
{
	(void)sig;
	sink += in_handler();
}

NOINLINE void wait_for_signals(double seconds, double t0)
{
	uint64_t x = 0;
	while (cpu_now() - t0 < seconds)
		for (int i = 0; i < 1000; i++)
			x = x * 3 + (uint64_t)i;
	sink += x;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: unwind_c chain SECONDS | unwind_c recurse DEPTH SECONDS\n");
		return 2;
	}
	double t0 = cpu_now();
	if (strcmp(argv[1], "chain") == 0) {
		double seconds = atof(argv[2]);
		uint64_t seed = 1;
		while (cpu_now() - t0 < seconds)
			sink += stage_one(seed++);
	} else if (strcmp(argv[1], "recurse") == 0 && argc >= 4) {
		int depth = atoi(argv[2]);
		signal(SIGALRM, on_alarm);
		alarm_after(atof(argv[3]));
		sink += descend(depth, &stop_flag);
	} else if (strcmp(argv[1], "signal") == 0) {
		struct sigaction sa = { .sa_handler = on_prof };
		sigaction(SIGPROF, &sa, NULL);
		struct itimerval it = { { 0, 10000 }, { 0, 10000 } };
		setitimer(ITIMER_PROF, &it, NULL);
		wait_for_signals(atof(argv[2]), t0);
	} else {
		fprintf(stderr, "unwind_c: unknown mode %s\n", argv[1]);
		return 2;
	}
	printf("{\"cpu_seconds\": %.3f}\n", cpu_now() - t0);
	return 0;
}
