/* cpulist.c - see cpulist.h. */
#include "cpulist.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Calls add(ctx, id) for each id of the list; -1 when malformed. */
static int walk(const char *s, void (*add)(void *, int), void *ctx, int max)
{
	int n = 0;
	const char *p = s;
	while (*p && *p != '\n') {
		char *end;
		errno = 0;
		long a = strtol(p, &end, 10);
		if (end == p || errno || a < 0 || a >= CPULIST_MAX_ID)
			return -1;
		long b = a;
		p = end;
		if (*p == '-') {
			p++;
			b = strtol(p, &end, 10);
			if (end == p || errno || b < a || b >= CPULIST_MAX_ID)
				return -1;
			p = end;
		}
		for (long c = a; c <= b; c++) {
			if (n >= max)
				return -1;
			add(ctx, (int)c);
			n++;
		}
		if (*p == ',')
			p++;
		else if (*p && *p != '\n')
			return -1;
	}
	return n;
}

struct ids {
	int *ids, n;
};

static void add_id(void *ctx, int id)
{
	struct ids *x = ctx;
	x->ids[x->n++] = id;
}

int parse_cpu_list(const char *s, int *ids, int max)
{
	struct ids x = { ids, 0 };
	return walk(s, add_id, &x, max);
}

static void add_bit(void *ctx, int id)
{
	cpuset_add(ctx, id);
}

int cpuset_parse(const char *s, struct cpuset *out)
{
	memset(out, 0, sizeof(*out));
	return walk(s, add_bit, out, CPULIST_MAX_ID);
}

bool cpuset_has(const struct cpuset *s, int id)
{
	return id >= 0 && id < CPULIST_MAX_ID && (s->bits[id / 64] >> (id % 64)) & 1;
}

void cpuset_add(struct cpuset *s, int id)
{
	if (id >= 0 && id < CPULIST_MAX_ID)
		s->bits[id / 64] |= 1ull << (id % 64);
}

int cpuset_common(const struct cpuset *a, const struct cpuset *b)
{
	int n = 0;
	for (size_t i = 0; i < CPULIST_MAX_ID / 64; i++)
		n += __builtin_popcountll(a->bits[i] & b->bits[i]);
	return n;
}

int cpuset_count(const struct cpuset *a)
{
	return cpuset_common(a, a);
}

void cpuset_format(const struct cpuset *s, struct buf *out)
{
	bool first = true;
	for (int id = 0; id < CPULIST_MAX_ID; id++) {
		if (!cpuset_has(s, id))
			continue;
		int last = id;
		while (last + 1 < CPULIST_MAX_ID && cpuset_has(s, last + 1))
			last++;
		buf_printf(out, "%s%d", first ? "" : ",", id);
		if (last > id)
			buf_printf(out, "-%d", last);
		first = false;
		id = last;
	}
}
