/* symfile.c - see symfile.h. */
#include "symfile.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define HDR_LEN 32
#define SEG_LEN 24
#define SYM_LEN 16

static uint32_t ld32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t ld64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return le64toh(v);
}

static void st32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void st64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

int symfile_parse(const void *data, size_t len, struct symfile_view *out, const char **err)
{
	const uint8_t *p = data;
	if (len < HDR_LEN || memcmp(p, SYMFILE_MAGIC, 8) != 0) {
		*err = "not an ember symbol file (bad magic)";
		return -1;
	}
	uint32_t nseg = ld32(p + 8), nsym = ld32(p + 12), strtab_len = ld32(p + 16);
	if (ld32(p + 20) != 0 || ld64(p + 24) != 0) {
		*err = "unsupported symbol file flags";
		return -1;
	}
	if (nseg > SYMFILE_MAX_SEGMENTS) {
		*err = "too many segments";
		return -1;
	}
	if (nsym > SYMFILE_MAX_SYMBOLS) {
		*err = "too many symbols";
		return -1;
	}
	uint64_t need = (uint64_t)HDR_LEN + (uint64_t)nseg * SEG_LEN + (uint64_t)nsym * SYM_LEN +
			strtab_len;
	if (need != len) {
		*err = "symbol file size does not match its header";
		return -1;
	}
	const uint8_t *segs = p + HDR_LEN;
	const uint8_t *syms = segs + (size_t)nseg * SEG_LEN;
	const char *strtab = (const char *)(syms + (size_t)nsym * SYM_LEN);
	if (strtab_len > 0 && strtab[strtab_len - 1] != '\0') {
		*err = "string table is not NUL-terminated";
		return -1;
	}
	for (uint32_t i = 0; i < nseg; i++) {
		const uint8_t *s = segs + (size_t)i * SEG_LEN;
		uint64_t off = ld64(s), va = ld64(s + 8), sz = ld64(s + 16);
		if (off + sz < off || va + sz < va) {
			*err = "segment wraps around";
			return -1;
		}
	}
	uint64_t prev = 0;
	for (uint32_t i = 0; i < nsym; i++) {
		const uint8_t *s = syms + (size_t)i * SYM_LEN;
		uint64_t va = ld64(s);
		uint32_t name = ld32(s + 12);
		if (i > 0 && va <= prev) {
			*err = "symbols are not sorted by address";
			return -1;
		}
		if (name >= strtab_len) {
			*err = "symbol name outside the string table";
			return -1;
		}
		prev = va;
	}
	out->base = p;
	out->len = len;
	out->nseg = nseg;
	out->nsym = nsym;
	out->strtab_len = strtab_len;
	out->segs = segs;
	out->syms = syms;
	out->strtab = strtab;
	return 0;
}

uint32_t symfile_symbol_count(const struct symfile_view *v)
{
	return v->nsym;
}

const char *symfile_lookup(const struct symfile_view *v, uint64_t file_offset, uint64_t *func_off)
{
	uint64_t va = 0;
	bool mapped = false;
	for (uint32_t i = 0; i < v->nseg; i++) {
		const uint8_t *s = v->segs + (size_t)i * SEG_LEN;
		uint64_t off = ld64(s), sva = ld64(s + 8), sz = ld64(s + 16);
		if (file_offset >= off && file_offset - off < sz) {
			va = sva + (file_offset - off);
			mapped = true;
			break;
		}
	}
	if (!mapped || v->nsym == 0)
		return NULL;
	/* Largest symbol start <= va. */
	uint32_t lo = 0, hi = v->nsym;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (ld64(v->syms + (size_t)mid * SYM_LEN) <= va)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const uint8_t *s = v->syms + (size_t)(lo - 1) * SYM_LEN;
	uint64_t start = ld64(s);
	uint32_t size = ld32(s + 8);
	if (size != 0) {
		if (va - start >= size)
			return NULL;
	} else if (lo < v->nsym) {
		if (va >= ld64(v->syms + (size_t)lo * SYM_LEN))
			return NULL;
	}
	if (func_off)
		*func_off = va - start;
	return v->strtab + ld32(s + 12);
}

struct bsym {
	uint64_t vaddr;
	uint64_t size;
	uint32_t name_off; /* into the builder's name buffer */
	int rank;
};

struct symfile_builder {
	struct bsym *syms;
	size_t nsym, capsym;
	uint64_t (*segs)[3];
	size_t nseg, capseg;
	struct buf names;
};

struct symfile_builder *symfile_builder_new(void)
{
	return xcalloc(1, sizeof(struct symfile_builder));
}

void symfile_builder_free(struct symfile_builder *b)
{
	if (!b)
		return;
	free(b->syms);
	free(b->segs);
	buf_free(&b->names);
	free(b);
}

void symfile_add_segment(struct symfile_builder *b, uint64_t file_offset, uint64_t vaddr,
			 uint64_t size)
{
	xgrow((void **)&b->segs, &b->capseg, b->nseg + 1, sizeof(*b->segs));
	b->segs[b->nseg][0] = file_offset;
	b->segs[b->nseg][1] = vaddr;
	b->segs[b->nseg][2] = size;
	b->nseg++;
}

void symfile_add_symbol(struct symfile_builder *b, const char *name, uint64_t vaddr,
			uint64_t size, int rank)
{
	size_t n = strnlen(name, SYMFILE_MAX_NAME);
	if (n == 0)
		return;
	xgrow((void **)&b->syms, &b->capsym, b->nsym + 1, sizeof(*b->syms));
	struct bsym *s = &b->syms[b->nsym++];
	s->vaddr = vaddr;
	s->size = size;
	s->rank = rank;
	s->name_off = (uint32_t)b->names.len;
	buf_append(&b->names, name, n);
	buf_putc(&b->names, '\0');
}

size_t symfile_builder_symbols(const struct symfile_builder *b)
{
	return b->nsym;
}

static int cmp_bsym(const void *a, const void *b, void *ctx)
{
	const char *names = ctx;
	const struct bsym *x = a, *y = b;
	if (x->vaddr != y->vaddr)
		return x->vaddr < y->vaddr ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank > y->rank ? -1 : 1;
	/* Larger size first, then the name, for a deterministic choice. */
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return strcmp(names + x->name_off, names + y->name_off);
}

int symfile_finish(struct symfile_builder *b, struct buf *out)
{
	if (b->nseg > SYMFILE_MAX_SEGMENTS)
		return -1;
	if (b->nsym > 1)
		qsort_r(b->syms, b->nsym, sizeof(*b->syms), cmp_bsym, b->names.data);
	/* Keep the first (best) symbol per address. */
	size_t n = 0;
	for (size_t i = 0; i < b->nsym; i++)
		if (n == 0 || b->syms[n - 1].vaddr != b->syms[i].vaddr)
			b->syms[n++] = b->syms[i];
	if (n > SYMFILE_MAX_SYMBOLS)
		return -1;

	/* Strings: only the names of the symbols kept. */
	struct buf strtab = { 0 };
	uint32_t *name_off = xmalloc((n ? n : 1) * sizeof(uint32_t));
	for (size_t i = 0; i < n; i++) {
		name_off[i] = (uint32_t)strtab.len;
		buf_puts(&strtab, b->names.data + b->syms[i].name_off);
		buf_putc(&strtab, '\0');
	}
	if (strtab.len > UINT32_MAX) {
		free(name_off);
		buf_free(&strtab);
		return -1;
	}
	size_t total = HDR_LEN + b->nseg * SEG_LEN + n * SYM_LEN + strtab.len;
	buf_reserve(out, total);
	uint8_t *p = (uint8_t *)out->data + out->len;
	memset(p, 0, HDR_LEN);
	memcpy(p, SYMFILE_MAGIC, 8);
	st32(p + 8, (uint32_t)b->nseg);
	st32(p + 12, (uint32_t)n);
	st32(p + 16, (uint32_t)strtab.len);
	uint8_t *q = p + HDR_LEN;
	for (size_t i = 0; i < b->nseg; i++, q += SEG_LEN) {
		st64(q, b->segs[i][0]);
		st64(q + 8, b->segs[i][1]);
		st64(q + 16, b->segs[i][2]);
	}
	for (size_t i = 0; i < n; i++, q += SYM_LEN) {
		st64(q, b->syms[i].vaddr);
		st32(q + 8, b->syms[i].size > UINT32_MAX ? UINT32_MAX : (uint32_t)b->syms[i].size);
		st32(q + 12, name_off[i]);
	}
	if (strtab.len)
		memcpy(q, strtab.data, strtab.len);
	out->len += total;
	out->data[out->len] = '\0';
	free(name_off);
	buf_free(&strtab);
	return 0;
}
