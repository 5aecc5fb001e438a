/* elfsyms.h - reading what ember needs from an ELF file with libelf.
 *
 * elfsyms_extract() turns the function symbols of .symtab and .dynsym and
 * the executable PT_LOAD segments into an ember symbol file (symfile.h).
 * elfsyms_build_id() reads the GNU build ID note. Both take an open file
 * descriptor, read through libelf's mmap mode and never trust the file:
 * counts are bounded and every libelf error is a clean failure.
 */
#ifndef EMBER_ELFSYMS_H
#define EMBER_ELFSYMS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define ELF_BUILD_ID_MAX 64

/* Appends a symbol file to out. Returns the number of symbols (>= 0), or
 * -1 with *err set to a static description. */
long elfsyms_extract(int fd, struct buf *out, const char **err);

struct elf_segment {
	uint64_t offset, vaddr, size;
};

/* The executable PT_LOAD segments (file offset, virtual address, size in
 * the file), at most max. Returns how many, or -1 when not ELF. */
int elfsyms_exec_segments(int fd, struct elf_segment *out, int max);

/* Copies the GNU build ID into id (up to ELF_BUILD_ID_MAX bytes).
 * Returns its length, 0 when the file has none, -1 on error. */
int elfsyms_build_id(int fd, uint8_t *id);

#endif
