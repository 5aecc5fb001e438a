/* gopclntab.c - see gopclntab.h. */
#include "gopclntab.h"

#include <stdbool.h>
#include <string.h>

#define MAX_FUNCS (4u << 20)

static uint64_t rd(const uint8_t *p, int size)
{
	uint64_t v = 0;
	memcpy(&v, p, (size_t)size); /* little-endian hosts */
	return v;
}

struct table {
	const uint8_t *data;
	size_t len;
	int ptr;
	uint64_t nfunc, text_start, funcname_off, pctab_off, pcln_off;
};

static int header(const uint8_t *data, size_t len, uint64_t text_vaddr, struct table *t)
{
	if (len < 8)
		return -1;
	uint32_t magic = (uint32_t)rd(data, 4);
	if ((magic != 0xfffffff0u && magic != 0xfffffff1u) || data[4] || data[5])
		return -1;
	int ptr = data[7];
	if ((ptr != 4 && ptr != 8) || len < 8 + 8 * (size_t)ptr)
		return -1;
	const uint8_t *h = data + 8;
	t->data = data;
	t->len = len;
	t->ptr = ptr;
	t->nfunc = rd(h, ptr);
	t->text_start = rd(h + 2 * ptr, ptr);
	t->funcname_off = rd(h + 3 * ptr, ptr);
	t->pctab_off = rd(h + 6 * ptr, ptr);
	t->pcln_off = rd(h + 7 * ptr, ptr);
	if (t->text_start == 0)
		t->text_start = text_vaddr;
	if (t->nfunc == 0 || t->nfunc > MAX_FUNCS || t->funcname_off >= len || t->pctab_off >= len ||
	    t->pcln_off >= len || (t->nfunc + 1) * 8 > len - t->pcln_off)
		return -1;
	return 0;
}

/* One function of the table: its entry and end offsets (from the text
 * start), _func record and name (nl bytes, not NUL-terminated). */
struct func {
	uint32_t entry, next;
	const uint8_t *rec;
	const char *name;
	size_t nl;
};

/* Function i, or -1 where its record or name is malformed. */
static int func_at(const struct table *t, uint64_t i, struct func *f)
{
	const uint8_t *functab = t->data + t->pcln_off;
	size_t functab_len = t->len - t->pcln_off;
	f->entry = (uint32_t)rd(functab + i * 8, 4);
	uint32_t funcoff = (uint32_t)rd(functab + i * 8 + 4, 4);
	f->next = (uint32_t)rd(functab + (i + 1) * 8, 4);
	if (f->next <= f->entry || functab_len < 24 || funcoff > functab_len - 24)
		return -1;
	f->rec = functab + funcoff;
	int32_t name_off = (int32_t)rd(f->rec + 4, 4);
	if (name_off < 0 || (uint64_t)name_off >= t->len - t->funcname_off)
		return -1;
	f->name = (const char *)t->data + t->funcname_off + name_off;
	size_t max = t->len - t->funcname_off - (size_t)name_off;
	f->nl = strnlen(f->name, max > 4096 ? 4096 : max);
	return f->nl == 0 || f->nl == max ? -1 : 0;
}

/* One varint of a pc-value table; 0 on a malformed one. */
static size_t uvarint(const uint8_t *p, const uint8_t *end, uint32_t *out)
{
	uint32_t v = 0;
	for (size_t i = 0; i < 5 && p + i < end; i++) {
		v |= (uint32_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*out = v;
			return i + 1;
		}
	}
	return 0;
}

/* Calls each(t, f, arg) for every well-formed function of the table at
 * data: the sum of what each returned, or -1 where the header is not a
 * Go 1.18+ pclntab's. */
static long each_func(const uint8_t *data, size_t len, uint64_t text_vaddr,
		      long (*each)(const struct table *t, const struct func *f, void *arg), void *arg)
{
	struct table t;
	if (header(data, len, text_vaddr, &t) < 0)
		return -1;
	long n = 0;
	for (uint64_t i = 0; i < t.nfunc; i++) {
		struct func f;
		if (func_at(&t, i, &f) == 0)
			n += each(&t, &f, arg);
	}
	return n;
}

/* The caller's callback and its context, for each_func. */
struct sp_arg {
	gopclntab_sp_fn fn;
	void *ctx;
};

/* Gives one function's SP deltas to the callback: how many ranges. */
static long func_sp_deltas(const struct table *t, const struct func *f, void *arg)
{
	const struct sp_arg *a = arg;
	const uint8_t *data = t->data, *end = t->data + t->len;
	uint32_t pcsp = (uint32_t)rd(f->rec + 16, 4);
	if (pcsp == 0 || pcsp >= t->len - t->pctab_off)
		return 0;
	/* The pc-value encoding of Go's runtime: pairs of (zig-zag value
	 * delta, pc delta) varints, starting from value -1 at the entry;
	 * a zero value delta after the first pair ends the table. */
	const uint8_t *p = data + t->pctab_off + pcsp;
	int64_t val = -1;
	uint64_t pc = f->entry;
	bool first = true;
	long n = 0;
	for (int steps = 0; steps < 1000000 && p < end; steps++) {
		uint32_t vd, pd;
		size_t a1 = uvarint(p, end, &vd);
		if (!a1 || (vd == 0 && !first))
			break;
		size_t b = uvarint(p + a1, end, &pd);
		if (!b)
			break;
		p += a1 + b;
		val += (int32_t)(-(vd & 1) ^ (vd >> 1));
		uint64_t npc = pc + pd * (uint64_t)data[6]; /* minLC: the pc quantum */
		if (npc > f->next || val < 0 || val > (1 << 30))
			break;
		if (npc > pc) {
			a->fn(a->ctx, t->text_start + pc, t->text_start + npc, (int32_t)val, f->name, f->nl);
			n++;
		}
		pc = npc;
		first = false;
	}
	return n;
}

long gopclntab_sp_deltas(const uint8_t *data, size_t len, uint64_t text_vaddr, gopclntab_sp_fn fn,
			 void *ctx)
{
	struct sp_arg a = { fn, ctx };
	return each_func(data, len, text_vaddr, func_sp_deltas, &a);
}

/* The caller's callback and its context, for each_func. */
struct fn_arg {
	gopclntab_fn fn;
	void *ctx;
};

static long func_name(const struct table *t, const struct func *f, void *arg)
{
	const struct fn_arg *a = arg;
	a->fn(a->ctx, t->text_start + f->entry, t->text_start + f->next, f->name, f->nl);
	return 1;
}

long gopclntab_functions(const uint8_t *data, size_t len, uint64_t text_vaddr, gopclntab_fn fn,
			 void *ctx)
{
	struct fn_arg a = { fn, ctx };
	return each_func(data, len, text_vaddr, func_name, &a);
}
