/* unwind_lib - a workload whose hot path runs inside a Debian shared
 * library built without frame pointers: libc's qsort calling back into this
 * program's comparison function. main -> sort_rounds -> qsort (libc) ->
 * msort/quicksort internals (libc) -> compare_records (here).
 * Built with gcc -O2 -fomit-frame-pointer. usage: unwind_lib SECONDS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct record {
	uint64_t key;
	char name[24];
};

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) int compare_records(const void *a, const void *b)
{
	const struct record *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return strcmp(x->name, y->name);
}

__attribute__((noinline)) void sort_rounds(struct record *r, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++) {
		*seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
		r[i].key = *seed >> 48;
		snprintf(r[i].name, sizeof(r[i].name), "r%llu", (unsigned long long)(*seed & 0xffff));
	}
	qsort(r, n, sizeof(*r), compare_records);
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	size_t n = 20000;
	struct record *r = malloc(n * sizeof(*r));
	uint64_t seed = 42;
	double t0 = cpu_now();
	while (cpu_now() - t0 < seconds)
		sort_rounds(r, n, &seed);
	printf("{\"cpu_seconds\": %.3f}\n", cpu_now() - t0);
	free(r);
	return 0;
}
