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

bool hmap_find(const struct hmap *m, uint64_t hash, hmap_eq_fn eq, const void *ctx,
	       uint32_t *idx_out)
{
	if (!m->mask && !m->idx)
		return false;
	for (size_t i = hash & m->mask;; i = (i + 1) & m->mask) {
		uint32_t v = m->idx[i];
		if (v == 0)
			return false;
		if (m->hashes[i] == hash && eq(ctx, v - 1)) {
			*idx_out = v - 1;
			return true;
		}
	}
}

static void place(uint64_t *hashes, uint32_t *idx, size_t mask, uint64_t hash, uint32_t v)
{
	size_t i = hash & mask;
	while (idx[i])
		i = (i + 1) & mask;
	hashes[i] = hash;
	idx[i] = v;
}

void hmap_insert(struct hmap *m, uint64_t hash, uint32_t idx)
{
	size_t cap = m->idx ? m->mask + 1 : 0;
	if ((m->count + 1) * 2 > cap) {
		size_t ncap = cap ? cap * 2 : 16;
		uint64_t *nh = xmalloc(ncap * sizeof(uint64_t));
		uint32_t *ni = xcalloc(ncap, sizeof(uint32_t));
		for (size_t i = 0; i < cap; i++)
			if (m->idx[i])
				place(nh, ni, ncap - 1, m->hashes[i], m->idx[i]);
		free(m->hashes);
		free(m->idx);
		m->hashes = nh;
		m->idx = ni;
		m->mask = ncap - 1;
	}
	place(m->hashes, m->idx, m->mask, hash, idx + 1);
	m->count++;
}

bool hmap_remove(struct hmap *m, uint64_t hash, hmap_eq_fn eq, const void *ctx)
{
	if (!m->idx)
		return false;
	size_t i = hash & m->mask;
	for (;; i = (i + 1) & m->mask) {
		uint32_t v = m->idx[i];
		if (v == 0)
			return false;
		if (m->hashes[i] == hash && eq(ctx, v - 1))
			break;
	}
	/* Backward-shift: move later entries of the probe run into the gap
	 * when their home slot is not between the gap and themselves. */
	size_t gap = i;
	for (size_t j = (i + 1) & m->mask; m->idx[j]; j = (j + 1) & m->mask) {
		size_t home = m->hashes[j] & m->mask;
		bool movable = gap <= j ? (home <= gap || home > j) : (home <= gap && home > j);
		if (movable) {
			m->hashes[gap] = m->hashes[j];
			m->idx[gap] = m->idx[j];
			gap = j;
		}
	}
	m->idx[gap] = 0;
	m->count--;
	return true;
}

void hmap_clear(struct hmap *m)
{
	if (m->idx)
		memset(m->idx, 0, (m->mask + 1) * sizeof(uint32_t));
	m->count = 0;
}

void hmap_copy(struct hmap *dst, const struct hmap *src)
{
	*dst = *src;
	if (!src->mask) {
		dst->hashes = NULL;
		dst->idx = NULL;
		return;
	}
	dst->hashes = xmalloc((src->mask + 1) * sizeof(uint64_t));
	dst->idx = xmalloc((src->mask + 1) * sizeof(uint32_t));
	memcpy(dst->hashes, src->hashes, (src->mask + 1) * sizeof(uint64_t));
	memcpy(dst->idx, src->idx, (src->mask + 1) * sizeof(uint32_t));
}

void hmap_free(struct hmap *m)
{
	free(m->hashes);
	free(m->idx);
	memset(m, 0, sizeof(*m));
}
