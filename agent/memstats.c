/* memstats.c - see memstats.h. */
#include "memstats.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Process-wide by design (memstats.h): the gauges and the budget are shared
 * by the unwinder and symbol threads. The gauges are atomics; the budget
 * is under budget_mu. */
static int64_t gauges[MEM_NPARTS];
static pthread_mutex_t budget_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t budget_cond = PTHREAD_COND_INITIALIZER;
static uint64_t budget_used, budget_waits;

void memstats_add(enum mem_part p, int64_t delta)
{
	if ((unsigned)p < MEM_NPARTS)
		__atomic_add_fetch(&gauges[p], delta, __ATOMIC_RELAXED);
}

uint64_t memstats_get(enum mem_part p)
{
	if ((unsigned)p >= MEM_NPARTS)
		return 0;
	int64_t v = __atomic_load_n(&gauges[p], __ATOMIC_RELAXED);
	return v > 0 ? (uint64_t)v : 0;
}

uint64_t memstats_reserve(uint64_t bytes)
{
	if (bytes > MEMSTATS_BUDGET)
		bytes = MEMSTATS_BUDGET;
	if (bytes == 0)
		return 0;
	pthread_mutex_lock(&budget_mu);
	if (budget_used && budget_used + bytes > MEMSTATS_BUDGET) {
		budget_waits++;
		while (budget_used && budget_used + bytes > MEMSTATS_BUDGET)
			pthread_cond_wait(&budget_cond, &budget_mu);
	}
	budget_used += bytes;
	pthread_mutex_unlock(&budget_mu);
	return bytes;
}

void memstats_release(uint64_t reserved)
{
	if (reserved == 0)
		return;
	pthread_mutex_lock(&budget_mu);
	budget_used = budget_used >= reserved ? budget_used - reserved : 0;
	pthread_cond_broadcast(&budget_cond);
	pthread_mutex_unlock(&budget_mu);
}

uint64_t memstats_reserved(void)
{
	pthread_mutex_lock(&budget_mu);
	uint64_t v = budget_used;
	pthread_mutex_unlock(&budget_mu);
	return v;
}

uint64_t memstats_waits(void)
{
	pthread_mutex_lock(&budget_mu);
	uint64_t v = budget_waits;
	pthread_mutex_unlock(&budget_mu);
	return v;
}

void memstats_rss(uint64_t *rss, uint64_t *peak)
{
	*rss = *peak = 0;
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return;
	char line[256];
	unsigned long long kb;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
			*rss = (uint64_t)kb * 1024;
		else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
			*peak = (uint64_t)kb * 1024;
	}
	fclose(f);
}

void memstats_malloc_setup(void)
{
	(void)mallopt(M_MMAP_THRESHOLD, 256 * 1024);
	(void)mallopt(M_ARENA_MAX, 2);
}

void memstats_trim(void)
{
	(void)malloc_trim(0);
}
