/* samplecache.c - see samplecache.h. */
#include "samplecache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct lookup {
	const struct sample_cache *sc;
	const uint64_t *key;
	size_t n;
};

static bool eq_key(const void *ctx, uint32_t idx)
{
	const struct lookup *l = ctx;
	const struct sample_cache_entry *e = &l->sc->entries[idx];
	return e->n == l->n && memcmp(l->sc->words + e->off, l->key, l->n * sizeof(uint64_t)) == 0;
}

const struct sample_cache_value *sample_cache_find(struct sample_cache *sc, const uint64_t *key,
						   size_t n, uint64_t hash)
{
	struct lookup l = { sc, key, n };
	uint32_t idx;
	if (sc->nentries && hmap_find(&sc->index, hash, eq_key, &l, &idx)) {
		sc->hits++;
		return &sc->entries[idx].v;
	}
	sc->misses++;
	return NULL;
}

void sample_cache_put(struct sample_cache *sc, const uint64_t *key, size_t n, uint64_t hash,
		      const struct sample_cache_value *v)
{
	if (sc->nentries >= SAMPLE_CACHE_MAX_ENTRIES || n > SAMPLE_CACHE_MAX_WORDS - sc->nwords)
		return;
	xgrow((void **)&sc->words, &sc->capwords, sc->nwords + n, sizeof(*sc->words));
	xgrow((void **)&sc->entries, &sc->capentries, sc->nentries + 1, sizeof(*sc->entries));
	memcpy(sc->words + sc->nwords, key, n * sizeof(uint64_t));
	sc->entries[sc->nentries] = (struct sample_cache_entry){
		.off = (uint32_t)sc->nwords, .n = (uint32_t)n, .v = *v,
	};
	hmap_insert(&sc->index, hash, (uint32_t)sc->nentries);
	sc->nentries++;
	sc->nwords += n;
}

void sample_cache_clear(struct sample_cache *sc)
{
	if (sc->nentries)
		hmap_clear(&sc->index);
	sc->nentries = 0;
	sc->nwords = 0;
}

void sample_cache_free(struct sample_cache *sc)
{
	hmap_free(&sc->index);
	free(sc->entries);
	free(sc->words);
	memset(sc, 0, sizeof(*sc));
}

size_t sample_cache_bytes(const struct sample_cache *sc)
{
	return sc->capentries * sizeof(*sc->entries) + sc->capwords * sizeof(*sc->words) +
	       hmap_bytes(&sc->index);
}
