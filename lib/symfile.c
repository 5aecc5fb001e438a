/* symfile.c - see symfile.h. */
#include "symfile.h"

#include <endian.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hmap.h"
#include "strtab.h"
#include "util.h"

#define HDR_LEN 48
#define SEG_LEN 24
#define ROW_LEN 8
#define CHAIN_LEN 16

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
		*err = "not an ember symbol file (bad magic or version)";
		return -1;
	}
	uint32_t nseg = ld32(p + 8), nrow = ld32(p + 12), nchain = ld32(p + 16);
	uint32_t strtab_len = ld32(p + 20), flags = ld32(p + 32);
	uint64_t vbase = ld64(p + 24);
	if (ld32(p + 36) != 0 || ld64(p + 40) != 0 || (flags & ~(SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES))) {
		*err = "unsupported symbol file flags";
		return -1;
	}
	if (nseg > SYMFILE_MAX_SEGMENTS || nrow > SYMFILE_MAX_ROWS || nchain > SYMFILE_MAX_ROWS) {
		*err = "too many segments, rows or frames";
		return -1;
	}
	uint64_t need = (uint64_t)HDR_LEN + (uint64_t)nseg * SEG_LEN + (uint64_t)nrow * ROW_LEN +
			(uint64_t)nchain * CHAIN_LEN + strtab_len;
	if (need != len) {
		*err = "symbol file size does not match its header";
		return -1;
	}
	const uint8_t *segs = p + HDR_LEN;
	const uint8_t *rows = segs + (size_t)nseg * SEG_LEN;
	const uint8_t *chains = rows + (size_t)nrow * ROW_LEN;
	const char *strtab = (const char *)(chains + (size_t)nchain * CHAIN_LEN);
	if (strtab_len == 0 || strtab[0] != '\0' || strtab[strtab_len - 1] != '\0') {
		*err = "string table must start and end with NUL";
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
	for (uint32_t i = 0; i < nrow; i++) {
		const uint8_t *r = rows + (size_t)i * ROW_LEN;
		if (i > 0 && ld32(r) <= ld32(r - ROW_LEN)) {
			*err = "rows are not sorted by address";
			return -1;
		}
		if (ld32(r + 4) > nchain) {
			*err = "row refers to a frame that does not exist";
			return -1;
		}
	}
	for (uint32_t i = 0; i < nchain; i++) {
		const uint8_t *c = chains + (size_t)i * CHAIN_LEN;
		uint32_t name = ld32(c), file = ld32(c + 4), parent = ld32(c + 12);
		if (name >= strtab_len || (file != SYMFILE_NO_FILE && file >= strtab_len)) {
			*err = "frame name or file outside the string table";
			return -1;
		}
		if (parent > i) { /* 1-based parent must come before this frame */
			*err = "frame refers to a caller defined after it";
			return -1;
		}
	}
	*out = (struct symfile_view){ p, len, nseg, nrow, nchain, strtab_len, flags, vbase,
				      segs, rows, chains, strtab };
	return 0;
}

int symfile_lookup(const struct symfile_view *v, uint64_t file_offset, struct sym_frame *out, int max)
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
	if (!mapped || v->nrow == 0 || va < v->vbase || va - v->vbase > UINT32_MAX)
		return 0;
	uint32_t rel = (uint32_t)(va - v->vbase);
	size_t lo = PARTITION_POINT(v->nrow, i, ld32(v->rows + i * ROW_LEN) <= rel);
	if (lo == 0)
		return 0;
	uint32_t chain = ld32(v->rows + (size_t)(lo - 1) * ROW_LEN + 4);
	int n = 0;
	while (chain && n < max && n < SYMFILE_MAX_DEPTH) {
		const uint8_t *c = v->chains + (size_t)(chain - 1) * CHAIN_LEN;
		uint32_t file = ld32(c + 4);
		out[n].name = v->strtab + ld32(c);
		out[n].file = file == SYMFILE_NO_FILE ? NULL : v->strtab + file;
		out[n].line = ld32(c + 8);
		n++;
		chain = ld32(c + 12);
	}
	return n;
}

/* --- building ------------------------------------------------------------ */

struct brange {
	uint64_t lo, hi;
	uint32_t chain;
	int rank;
};

struct bchain {
	uint32_t name, file, line, parent;
};

struct symfile_builder {
	struct brange *ranges;
	size_t nranges, capranges;
	uint64_t (*segs)[3];
	size_t nseg, capseg;
	struct strtab strings;
	struct bchain *chains;
	size_t nchains, capchains;
	struct hmap chain_index;
	/* The chain of each name alone (no file, line or parent), by string
	 * id, 0 = none yet: what ELF symbols make, one per function, found
	 * without the hash index (whose slots would double their memory). */
	uint32_t *name_chain;
	size_t cap_name_chain;
	uint32_t flags;
};

struct symfile_builder *symfile_builder_new(void)
{
	struct symfile_builder *b = xcalloc(1, sizeof(*b));
	strtab_init(&b->strings);
	return b;
}

void symfile_builder_free(struct symfile_builder *b)
{
	if (!b)
		return;
	free_all(b->ranges, b->segs);
	strtab_free(&b->strings);
	free(b->chains);
	hmap_free(&b->chain_index);
	free_all(b->name_chain, b);
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

struct chain_key {
	const struct symfile_builder *b;
	const struct bchain *c;
};

static bool eq_chain(const void *ctx, uint32_t idx)
{
	const struct chain_key *k = ctx;
	return memcmp(&k->b->chains[idx], k->c, sizeof(*k->c)) == 0;
}

uint32_t symfile_chain(struct symfile_builder *b, const char *name, const char *file,
		       uint32_t line, uint32_t parent)
{
	struct bchain c = {
		strtab_intern(&b->strings, name, strnlen(name, SYMFILE_MAX_NAME)),
		file ? strtab_intern(&b->strings, file, strnlen(file, SYMFILE_MAX_NAME)) : SYMFILE_NO_FILE,
		line,
		parent <= b->nchains ? parent : 0,
	};
	bool alone = c.file == SYMFILE_NO_FILE && c.line == 0 && c.parent == 0;
	if (alone && c.name < b->cap_name_chain && b->name_chain[c.name])
		return b->name_chain[c.name];
	uint64_t h = hash_bytes(&c, sizeof(c));
	struct chain_key k = { b, &c };
	uint32_t idx;
	if (!alone && hmap_find(&b->chain_index, h, eq_chain, &k, &idx))
		return idx + 1;
	xgrow((void **)&b->chains, &b->capchains, b->nchains + 1, sizeof(*b->chains));
	idx = (uint32_t)b->nchains++;
	b->chains[idx] = c;
	if (alone) {
		size_t cap = b->cap_name_chain;
		xgrow((void **)&b->name_chain, &b->cap_name_chain, (size_t)c.name + 1, sizeof(uint32_t));
		memset(b->name_chain + cap, 0, (b->cap_name_chain - cap) * sizeof(uint32_t));
		b->name_chain[c.name] = idx + 1;
	} else {
		hmap_insert(&b->chain_index, h, idx);
	}
	return idx + 1;
}

void symfile_add_range(struct symfile_builder *b, uint64_t lo, uint64_t hi, uint32_t chain,
		       int rank)
{
	if (hi <= lo || chain == 0 || chain > b->nchains)
		return;
	xgrow((void **)&b->ranges, &b->capranges, b->nranges + 1, sizeof(*b->ranges));
	b->ranges[b->nranges++] = (struct brange){ lo, hi, chain, rank };
}

void symfile_set_flags(struct symfile_builder *b, uint32_t flags)
{
	b->flags = flags;
}

size_t symfile_builder_ranges(const struct symfile_builder *b)
{
	return b->nranges;
}

static int cmp_range(const void *a, const void *b)
{
	const struct brange *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank > y->rank ? -1 : 1;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->hi < y->hi ? -1 : x->hi > y->hi; /* the tighter range first */
}

/* Merges the sorted, disjoint ranges `low` into the gaps of the sorted,
 * disjoint `high`; out (sorted, disjoint) holds at most nl + 2 nh ranges. */
static size_t merge_into_gaps(const struct brange *high, size_t nh, const struct brange *low,
			      size_t nl, struct brange *out)
{
	size_t n = 0, i = 0;
	for (size_t j = 0; j < nl; j++) {
		uint64_t lo = low[j].lo, hi = low[j].hi;
		while (lo < hi) {
			while (i < nh && high[i].hi <= lo)
				out[n++] = high[i++];
			if (i < nh && high[i].lo <= lo) {
				lo = high[i].hi; /* covered by a higher rank */
				continue;
			}
			uint64_t end = (i < nh && high[i].lo < hi) ? high[i].lo : hi;
			out[n++] = (struct brange){ lo, end, low[j].chain, low[j].rank };
			lo = end;
		}
	}
	while (i < nh)
		out[n++] = high[i++];
	return n;
}

/* The rows of the finished file (overlaps resolved) in *rowbuf. Frees the
 * ranges and the indexes only building needs. Returns 0, or -1 when limits
 * are exceeded. */
static int finish_rows(struct symfile_builder *b, uint8_t **rowbuf_out, size_t *nrow_out,
		       uint64_t *vbase_out)
{
	if (b->nseg > SYMFILE_MAX_SEGMENTS || b->nranges > SYMFILE_MAX_ROWS / 2)
		return -1;
	if (b->strings.bytes.len > UINT32_MAX || b->nchains > SYMFILE_MAX_ROWS)
		return -1;
	/* Interning is over: its indexes go before the rows are made. */
	hmap_free(&b->chain_index);
	hmap_free(&b->strings.index);
	free(b->name_chain);
	b->name_chain = NULL;
	b->cap_name_chain = 0;
	if (b->nranges)
		qsort(b->ranges, b->nranges, sizeof(*b->ranges), cmp_range);
	/* Per rank (highest first): clip overlaps inside the rank, then merge
	 * into the gaps of what higher ranks already cover. */
	struct brange *acc = NULL, *tmp = NULL;
	size_t nacc = 0;
	for (size_t i = 0; i < b->nranges;) {
		size_t j = i;
		size_t k = 0;
		while (j < b->nranges && b->ranges[j].rank == b->ranges[i].rank) {
			struct brange r = b->ranges[j++];
			if (k && r.lo < b->ranges[i + k - 1].hi)
				r.lo = b->ranges[i + k - 1].hi;
			if (r.hi > r.lo)
				b->ranges[i + k++] = r;
		}
		tmp = xrealloc(tmp, (2 * nacc + k + 1) * sizeof(*tmp));
		size_t n = merge_into_gaps(acc, nacc, b->ranges + i, k, tmp);
		struct brange *swap = acc;
		acc = tmp;
		tmp = swap;
		nacc = n;
		i = j;
	}
	free_all(tmp, b->ranges);
	b->ranges = NULL;
	b->nranges = b->capranges = 0;
	uint64_t vbase = nacc ? acc[0].lo : 0;
	if (nacc && acc[nacc - 1].hi - vbase > UINT32_MAX) {
		free(acc);
		return -1;
	}
	/* Rows: each range, and a gap row where the next range does not
	 * start right at its end. */
	size_t nrow = 0;
	uint8_t *rowbuf = xmalloc((2 * nacc + 1) * ROW_LEN);
	for (size_t i = 0; i < nacc; i++) {
		uint32_t addr = (uint32_t)(acc[i].lo - vbase);
		if (nrow && ld32(rowbuf + (nrow - 1) * ROW_LEN) == addr)
			nrow--; /* a gap row at exactly this address is replaced */
		if (!(nrow && ld32(rowbuf + (nrow - 1) * ROW_LEN + 4) == acc[i].chain)) {
			st32(rowbuf + nrow * ROW_LEN, addr);
			st32(rowbuf + nrow * ROW_LEN + 4, acc[i].chain);
			nrow++;
		}
		if (i + 1 == nacc || acc[i + 1].lo > acc[i].hi) {
			st32(rowbuf + nrow * ROW_LEN, (uint32_t)(acc[i].hi - vbase));
			st32(rowbuf + nrow * ROW_LEN + 4, 0);
			nrow++;
		}
	}
	free(acc);
	*rowbuf_out = rowbuf;
	*nrow_out = nrow;
	*vbase_out = vbase;
	return 0;
}

static size_t encoded_len(const struct symfile_builder *b, size_t nrow)
{
	return HDR_LEN + b->nseg * SEG_LEN + nrow * ROW_LEN + b->nchains * CHAIN_LEN +
	       b->strings.bytes.len;
}

/* Writes the file through sink: header, segments, rows, then the chains in
 * blocks and the strings, so no second copy of the file is ever made. */
static int emit(struct symfile_builder *b, const uint8_t *rowbuf, size_t nrow, uint64_t vbase,
		symfile_sink sink, void *ctx)
{
	size_t strtab_len = b->strings.bytes.len;
	uint8_t blk[HDR_LEN + SEG_LEN * SYMFILE_MAX_SEGMENTS];
	memset(blk, 0, HDR_LEN);
	memcpy(blk, SYMFILE_MAGIC, 8);
	st32(blk + 8, (uint32_t)b->nseg);
	st32(blk + 12, (uint32_t)nrow);
	st32(blk + 16, (uint32_t)b->nchains);
	st32(blk + 20, (uint32_t)strtab_len);
	st64(blk + 24, vbase);
	st32(blk + 32, b->flags);
	uint8_t *q = blk + HDR_LEN;
	for (size_t i = 0; i < b->nseg; i++, q += SEG_LEN) {
		st64(q, b->segs[i][0]);
		st64(q + 8, b->segs[i][1]);
		st64(q + 16, b->segs[i][2]);
	}
	if (sink(ctx, blk, (size_t)(q - blk)) < 0 || (nrow && sink(ctx, rowbuf, nrow * ROW_LEN) < 0))
		return -1;
	uint8_t cblk[CHAIN_LEN * 4096];
	size_t n = 0;
	for (size_t i = 0; i < b->nchains; i++) {
		q = cblk + n * CHAIN_LEN;
		st32(q, b->strings.offsets[b->chains[i].name]);
		st32(q + 4, b->chains[i].file == SYMFILE_NO_FILE ? SYMFILE_NO_FILE
								 : b->strings.offsets[b->chains[i].file]);
		st32(q + 8, b->chains[i].line);
		st32(q + 12, b->chains[i].parent);
		if (++n == 4096 || i + 1 == b->nchains) {
			if (sink(ctx, cblk, n * CHAIN_LEN) < 0)
				return -1;
			n = 0;
		}
	}
	return strtab_len ? sink(ctx, b->strings.bytes.data, strtab_len) : 0;
}

int symfile_finish_to(struct symfile_builder *b, symfile_sink sink, void *ctx, size_t *len)
{
	uint8_t *rowbuf;
	size_t nrow;
	uint64_t vbase;
	if (finish_rows(b, &rowbuf, &nrow, &vbase) < 0)
		return -1;
	int rc = emit(b, rowbuf, nrow, vbase, sink, ctx);
	if (len)
		*len = encoded_len(b, nrow);
	free(rowbuf);
	return rc;
}

static int buf_sink(void *ctx, const void *data, size_t n)
{
	buf_append(ctx, data, n);
	return 0;
}

int symfile_finish(struct symfile_builder *b, struct buf *out)
{
	uint8_t *rowbuf;
	size_t nrow;
	uint64_t vbase;
	if (finish_rows(b, &rowbuf, &nrow, &vbase) < 0)
		return -1;
	buf_reserve(out, encoded_len(b, nrow));
	int rc = emit(b, rowbuf, nrow, vbase, buf_sink, out);
	free(rowbuf);
	return rc;
}

size_t symfile_builder_bytes(const struct symfile_builder *b)
{
	return b->capranges * sizeof(*b->ranges) + b->capseg * sizeof(*b->segs) +
	       b->strings.bytes.cap + b->strings.cap * 2 * sizeof(uint32_t) +
	       hmap_bytes(&b->strings.index) + b->capchains * sizeof(*b->chains) +
	       hmap_bytes(&b->chain_index) + b->cap_name_chain * sizeof(uint32_t);
}
