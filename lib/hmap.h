/* hmap.h - an open-addressing hash index over entries the caller owns.
 *
 * ember keeps most of its tables as plain arrays (strings, frames, stacks,
 * processes) and indexes them by hash. hmap stores only (hash, entry index)
 * pairs; equality is decided by a caller callback, so one index type
 * serves every table. Linear probing, power-of-two capacity, load factor
 * at most 1/2, deletion by backward shifting (no tombstones).
 *
 * A slot holds its entry index and its hash side by side (12 bytes), so a
 * lookup in a table of millions waits for memory once for the slot, then
 * once for the entry the callback compares.
 */
#ifndef EMBER_HMAP_H
#define EMBER_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct hmap_slot {
	uint32_t idx; /* entry index + 1; 0 = empty slot */
	uint32_t hash_lo, hash_hi;
};

struct hmap {
	struct hmap_slot *slots;
	size_t mask; /* capacity - 1, or 0 when unallocated */
	size_t count;
};

/* Returns true when the entry with index idx equals the key in ctx. */
typedef bool (*hmap_eq_fn)(const void *ctx, uint32_t idx);

/* The key of a table whose entries are equal when one field is (a pid, an
 * address): hmap_field_eq compares the field of record idx of an array
 * with *want, byte for byte. Made by HMAP_FIELD_KEY(array, field, want)
 * from the array as it is now (a key does not outlive a reallocation of
 * it), want pointing to a value of the field's type (the compiler checks),
 * e.g. HMAP_FIELD_KEY(t->procs, pid, &pid) with hmap_field_eq. */
struct hmap_field_key {
	const void *base;
	size_t size, off, width;
	const void *want;
};
bool hmap_field_eq(const void *ctx, uint32_t idx);
#define HMAP_FIELD_KEY(array, field, want)                                          \
	((struct hmap_field_key){ (array), sizeof(*(array)),                        \
				  offsetof(__typeof__(*(array)), field),            \
				  sizeof((array)->field),                           \
				  (const void *)(1 ? (want) : &(array)->field) })

/* The key of a table whose entries are runs of items (a string's bytes, a
 * label set's ids): owner is the table, data and n the run sought. The
 * table's eq callback finds entry idx's run and answers hmap_span_is. */
struct hmap_span_key {
	const void *owner;
	const void *data;
	size_t n;
};
/* True when the run of n items of elem bytes at data is the key's. */
static inline bool hmap_span_is(const struct hmap_span_key *k, const void *data, size_t n,
				size_t elem)
{
	return n == k->n && (n == 0 || memcmp(data, k->data, n * elem) == 0);
}

/* A table of pairs held in two parallel arrays (a tree's nodes: parent[i],
 * frame[i]) of *n entries and capacity *cap, indexed by m under the hash
 * h of each pair: the index of (x, y), added when new. */
uint32_t hmap_pair_intern(struct hmap *m, uint64_t h, uint32_t **a, uint32_t **b, size_t *n,
			  size_t *cap, uint32_t x, uint32_t y);

bool hmap_find(const struct hmap *m, uint64_t hash, hmap_eq_fn eq, const void *ctx,
	       uint32_t *idx_out);
/* Adds (hash, idx); the caller has checked it is absent. */
void hmap_insert(struct hmap *m, uint64_t hash, uint32_t idx);
/* Removes the entry that eq() matches; returns true when one was found. */
bool hmap_remove(struct hmap *m, uint64_t hash, hmap_eq_fn eq, const void *ctx);
void hmap_clear(struct hmap *m);
/* Makes dst (uninitialised or freed) an independent copy of src. */
void hmap_copy(struct hmap *dst, const struct hmap *src);
void hmap_free(struct hmap *m);
/* Bytes the index holds (its slots). */
size_t hmap_bytes(const struct hmap *m);

/* 64-bit hash of bytes (XXH3). */
uint64_t hash_bytes(const void *p, size_t n);
uint64_t hash_u64(uint64_t v);
/* Combines a running hash with another value. */
uint64_t hash_mix(uint64_t h, uint64_t v);

#endif
