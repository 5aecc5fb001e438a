/* kallsyms.h - kernel symbolization from /proc/kallsyms.
 *
 * Loads the text symbols (types t, T, w, W) of the kernel and its modules
 * into a sorted table; lookups are a binary search. The agent resolves
 * kernel frames itself because the kernel's symbols never leave the host
 * otherwise. Input is bounded (line length, symbol count) and malformed
 * lines are skipped.
 */
#ifndef EMBER_KALLSYMS_H
#define EMBER_KALLSYMS_H

#include <stddef.h>
#include <stdint.h>

#include "strtab.h"

struct ksym {
	uint64_t addr;
	uint32_t name;   /* strtab id */
	uint32_t module; /* strtab id; 0 = the kernel image */
};

struct kallsyms {
	struct ksym *syms;
	size_t count, cap;
	struct strtab names;
};

/* Parses the text of a kallsyms file. Returns the number of symbols. */
size_t kallsyms_parse(struct kallsyms *k, const char *text, size_t len);
/* Loads path (normally /proc/kallsyms), once: the names are not interned
 * after it (its index is freed). Returns 0 or -errno. */
int kallsyms_load(struct kallsyms *k, const char *path);
/* Returns the symbol containing addr (the closest at or below it), or
 * NULL. *module is "" for the kernel image or the module name. */
const char *kallsyms_lookup(const struct kallsyms *k, uint64_t addr, const char **module);
void kallsyms_free(struct kallsyms *k);
/* Bytes held: memory accounting. */
size_t kallsyms_bytes(const struct kallsyms *k);

#endif
