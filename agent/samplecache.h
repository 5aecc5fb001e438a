/* samplecache.h - the collector's memo of raw samples already added to the
 * current batch.
 *
 * Most samples of an interval repeat one seen earlier in it: the same
 * process, thread name and raw stack (the protocol bench's 1 000 samples
 * per 5 s batch make about 250 rows). Resolving a raw stack costs a
 * mapping search and a frame interning per frame; a repeat found here
 * costs one hash of the raw words and one comparison, and goes straight
 * to the batch row it was added to.
 *
 * A key is the caller's words (collect.c: the record's process, exec,
 * kind, unwinding outcome, thread name and raw frames); a value is the
 * row and what resolving the stack added to the collector's counters, so
 * a repeat counts the same. The cache is bounded: past
 * SAMPLE_CACHE_MAX_ENTRIES entries or SAMPLE_CACHE_MAX_WORDS key words,
 * sample_cache_put() keeps nothing more and the caller resolves as
 * before. sample_cache_clear() empties it for the next batch and keeps
 * its memory. A zeroed struct is an empty cache.
 */
#ifndef EMBER_AGENT_SAMPLECACHE_H
#define EMBER_AGENT_SAMPLECACHE_H

#include <stddef.h>
#include <stdint.h>

#include "hmap.h"

#define SAMPLE_CACHE_MAX_ENTRIES 16384
#define SAMPLE_CACHE_MAX_WORDS (512u * 1024u) /* 4 MiB of keys */

struct sample_cache_value {
	uint32_t row;            /* the batch row (batch_add) */
	uint16_t unknown_frames; /* collector_stats deltas of one resolution */
	uint16_t python_frames;
	uint8_t truncated;
};

struct sample_cache_entry {
	uint32_t off, n; /* key words: words[off .. off + n) */
	struct sample_cache_value v;
};

struct sample_cache {
	struct hmap index;
	struct sample_cache_entry *entries;
	size_t nentries, capentries;
	uint64_t *words;
	size_t nwords, capwords;
	uint64_t hits, misses; /* lookups since the cache was made */
};

/* The value stored under the n-word key (hash = hash_bytes(key, 8 n)), or
 * NULL. */
const struct sample_cache_value *sample_cache_find(struct sample_cache *sc, const uint64_t *key,
						   size_t n, uint64_t hash);
/* Stores v under a key that sample_cache_find() did not find; does
 * nothing when the cache is full. */
void sample_cache_put(struct sample_cache *sc, const uint64_t *key, size_t n, uint64_t hash,
		      const struct sample_cache_value *v);
void sample_cache_clear(struct sample_cache *sc);
void sample_cache_free(struct sample_cache *sc);
/* Bytes the cache holds: memory accounting. */
size_t sample_cache_bytes(const struct sample_cache *sc);

#endif
