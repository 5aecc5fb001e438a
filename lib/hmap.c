/* hmap.c - see hmap.h. */
#include "hmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util.h"

uint64_t hash_bytes(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

uint64_t hash_u64(uint64_t v)
{
	/* splitmix64 finaliser: cheap and well distributed. */
	v ^= v >> 30;
	v *= 0xbf58476d1ce4e5b9ull;
	v ^= v >> 27;
	v *= 0x94d049bb133111ebull;
	v ^= v >> 31;
	return v;
}

uint64_t hash_mix(uint64_t h, uint64_t v)
{
	return hash_u64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

static inline uint64_t slot_hash(const struct hmap_slot *s)
{
	return (uint64_t)s->hash_hi << 32 | s->hash_lo;
}

bool hmap_find(const struct hmap *m, uint64_t hash, hmap_eq_fn eq, const void *ctx,
	       uint32_t *idx_out)
{
	if (!m->slots)
		return false;
	for (size_t i = hash & m->mask;; i = (i + 1) & m->mask) {
		const struct hmap_slot *s = &m->slots[i];
		if (s->idx == 0)
			return false;
		if (slot_hash(s) == hash && eq(ctx, s->idx - 1)) {
			*idx_out = s->idx - 1;
			return true;
		}
	}
}

#define HMAP_PREFAULT_MIN ((size_t)1 << 18)

static void place(struct hmap_slot *slots, size_t mask, uint64_t hash, uint32_t v)
{
	size_t i = hash & mask;
	while (slots[i].idx)
		i = (i + 1) & mask;
	slots[i] = (struct hmap_slot){ v, (uint32_t)hash, (uint32_t)(hash >> 32) };
}

void hmap_insert(struct hmap *m, uint64_t hash, uint32_t idx)
{
	size_t cap = m->slots ? m->mask + 1 : 0;
	if ((m->count + 1) * 2 > cap) {
		size_t ncap = cap ? cap * 2 : 16;
		struct hmap_slot *ns = xcalloc(ncap, sizeof(*ns));
		/* Probes read slots before they are written: fault them in for
		 * writing now (util.h). Small tables lie in pages already in use. */
		if (ncap * sizeof(*ns) >= HMAP_PREFAULT_MIN)
			prefault_write(ns, ncap * sizeof(*ns));
		for (size_t i = 0; i < cap; i++)
			if (m->slots[i].idx)
				place(ns, ncap - 1, slot_hash(&m->slots[i]), m->slots[i].idx);
		free(m->slots);
		m->slots = ns;
		m->mask = ncap - 1;
	}
	place(m->slots, m->mask, hash, idx + 1);
	m->count++;
}

bool hmap_remove(struct hmap *m, uint64_t hash, hmap_eq_fn eq, const void *ctx)
{
	if (!m->slots)
		return false;
	size_t i = hash & m->mask;
	for (;; i = (i + 1) & m->mask) {
		const struct hmap_slot *s = &m->slots[i];
		if (s->idx == 0)
			return false;
		if (slot_hash(s) == hash && eq(ctx, s->idx - 1))
			break;
	}
	/* Backward-shift: move later entries of the probe run into the gap
	 * when their home slot is not between the gap and themselves. */
	size_t gap = i;
	for (size_t j = (i + 1) & m->mask; m->slots[j].idx; j = (j + 1) & m->mask) {
		size_t home = slot_hash(&m->slots[j]) & m->mask;
		bool movable = gap <= j ? (home <= gap || home > j) : (home <= gap && home > j);
		if (movable) {
			m->slots[gap] = m->slots[j];
			gap = j;
		}
	}
	m->slots[gap].idx = 0;
	m->count--;
	return true;
}

void hmap_clear(struct hmap *m)
{
	if (m->slots)
		memset(m->slots, 0, (m->mask + 1) * sizeof(*m->slots));
	m->count = 0;
}

void hmap_copy(struct hmap *dst, const struct hmap *src)
{
	*dst = *src;
	if (!src->slots)
		return;
	dst->slots = xmalloc((src->mask + 1) * sizeof(*src->slots));
	memcpy(dst->slots, src->slots, (src->mask + 1) * sizeof(*src->slots));
}

void hmap_free(struct hmap *m)
{
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

bool hmap_field_eq(const void *ctx, uint32_t idx)
{
	const struct hmap_field_key *k = ctx;
	const char *rec = (const char *)k->base + (size_t)idx * k->size;
	return memcmp(rec + k->off, k->want, k->width) == 0;
}

struct pair_key {
	const uint32_t *a, *b;
	uint32_t x, y;
};

static bool pair_eq(const void *ctx, uint32_t idx)
{
	const struct pair_key *k = ctx;
	return k->a[idx] == k->x && k->b[idx] == k->y;
}

uint32_t hmap_pair_intern(struct hmap *m, uint64_t h, uint32_t **a, uint32_t **b, size_t *n,
			  size_t *cap, uint32_t x, uint32_t y)
{
	struct pair_key k = { *a, *b, x, y };
	uint32_t idx;
	if (hmap_find(m, h, pair_eq, &k, &idx))
		return idx;
	xgrow2((void **)a, (void **)b, cap, *n + 1, sizeof(uint32_t), sizeof(uint32_t));
	idx = (uint32_t)(*n)++;
	(*a)[idx] = x;
	(*b)[idx] = y;
	hmap_insert(m, h, idx);
	return idx;
}

size_t hmap_bytes(const struct hmap *m)
{
	return m->slots ? (m->mask + 1) * sizeof(*m->slots) : 0;
}
