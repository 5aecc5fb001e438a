/* strtab.h - an interning string table: each distinct string stored once
 * and named by a dense 32-bit id. Id 0 is always the empty string.
 *
 * Pointers returned by strtab_get() stay valid until the next intern call
 * (the storage may move when it grows). The table owns all its memory.
 */
#ifndef EMBER_STRTAB_H
#define EMBER_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "hmap.h"

struct strtab {
	struct buf bytes;   /* all strings, each NUL-terminated */
	uint32_t *offsets;  /* id -> offset in bytes */
	uint32_t *lengths;  /* id -> length */
	size_t count, cap;
	struct hmap index;
};

void strtab_init(struct strtab *t);
void strtab_free(struct strtab *t);
/* Makes dst (uninitialised or freed) an independent copy of src: the same
 * strings under the same ids. */
void strtab_copy(struct strtab *dst, const struct strtab *src);
/* Removes every string but "" (id 0), keeping the allocations. */
void strtab_reset(struct strtab *t);
uint32_t strtab_intern(struct strtab *t, const char *s, size_t n);
uint32_t strtab_intern_cstr(struct strtab *t, const char *s);
/* Returns the id of s when present, else UINT32_MAX. */
uint32_t strtab_lookup(const struct strtab *t, const char *s, size_t n);
const char *strtab_get(const struct strtab *t, uint32_t id);
uint32_t strtab_len(const struct strtab *t, uint32_t id);
static inline size_t strtab_count(const struct strtab *t) { return t->count; }

#endif
