/* kallsyms.c - see kallsyms.h. */
#include "kallsyms.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAX_SYMS (8u << 20)
#define MAX_LINE 1024
#define KALLSYMS_MAX_DISTANCE (1u << 20)

static int cmp_ksym(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

size_t kallsyms_parse(struct kallsyms *k, const char *text, size_t len)
{
	if (!k->names.count)
		strtab_init(&k->names);
	const char *p = text, *end = text + len;
	while (p < end && k->count < MAX_SYMS) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		const char *line = p;
		p = nl ? nl + 1 : end;
		if (le - line > MAX_LINE)
			continue;
		/* "<hex addr> <type> <name>[\t[module]]" */
		const char *sp = memchr(line, ' ', (size_t)(le - line));
		if (!sp || le - sp < 4 || sp[2] != ' ')
			continue;
		uint64_t addr;
		if (parse_hex_u64(line, (size_t)(sp - line), &addr) < 0 || addr == 0)
			continue;
		char type = sp[1];
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;
		const char *name = sp + 3;
		const char *name_end = name;
		while (name_end < le && *name_end != '\t' && *name_end != ' ')
			name_end++;
		if (name_end == name)
			continue;
		uint32_t module = 0;
		const char *m = memchr(name_end, '[', (size_t)(le - name_end));
		if (m) {
			const char *me = memchr(m, ']', (size_t)(le - m));
			if (me && me > m + 1)
				module = strtab_intern(&k->names, m + 1, (size_t)(me - m - 1));
		}
		xgrow((void **)&k->syms, &k->cap, k->count + 1, sizeof(*k->syms));
		k->syms[k->count].addr = addr;
		k->syms[k->count].name = strtab_intern(&k->names, name, (size_t)(name_end - name));
		k->syms[k->count].module = module;
		k->count++;
	}
	if (k->count > 1)
		qsort(k->syms, k->count, sizeof(*k->syms), cmp_ksym);
	return k->count;
}

int kallsyms_load(struct kallsyms *k, const char *path)
{
	char *text;
	size_t len;
	int rc = read_file(path, 256u << 20, &text, &len);
	if (rc < 0)
		return rc;
	kallsyms_parse(k, text, len);
	free(text);
	/* Loaded once: the interning index (3 MB for 120 000 symbols) and the
	 * array's spare room are not needed for lookups. */
	hmap_free(&k->names.index);
	if (k->count && k->count < k->cap) {
		k->syms = xrealloc(k->syms, k->count * sizeof(*k->syms));
		k->cap = k->count;
	}
	return 0;
}

const char *kallsyms_lookup(const struct kallsyms *k, uint64_t addr, const char **module)
{
	size_t lo = PARTITION_POINT(k->count, i, k->syms[i].addr <= addr);
	if (lo == 0)
		return NULL;
	const struct ksym *s = &k->syms[lo - 1];
	/* kallsyms has no sizes: an address far above the nearest symbol is
	 * in memory no symbol describes (a gap, or code loaded after the
	 * table was read); say unknown rather than name the wrong function. */
	if (addr - s->addr > KALLSYMS_MAX_DISTANCE)
		return NULL;
	if (module)
		*module = strtab_get(&k->names, s->module);
	return strtab_get(&k->names, s->name);
}

void kallsyms_free(struct kallsyms *k)
{
	free(k->syms);
	strtab_free(&k->names);
	memset(k, 0, sizeof(*k));
}

size_t kallsyms_bytes(const struct kallsyms *k)
{
	return k->cap * sizeof(*k->syms) + k->names.bytes.cap +
	       k->names.cap * (sizeof(*k->names.offsets) + sizeof(*k->names.lengths)) +
	       hmap_bytes(&k->names.index);
}
