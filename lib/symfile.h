/* symfile.h - ember's symbol file: function address ranges of one ELF file.
 *
 * A symbol file maps offsets *within the ELF file* (what the agent sends
 * for each native frame) to function names. It holds the file's
 * executable PT_LOAD segments, used to turn a file offset into the ELF
 * virtual address, and a sorted table of functions. Everything is
 * little-endian and fixed-width so a file can be used in place (read or
 * mmap'ed) after one validation pass. Layout:
 *
 *   header  32 bytes  magic "EMSYM001", u32 nseg, u32 nsym,
 *                     u32 strtab_len, u32 flags (0), u64 reserved (0)
 *   seg[nseg] 24 B    u64 file_offset, u64 vaddr, u64 size
 *   sym[nsym] 16 B    u64 vaddr, u32 size, u32 name_off  (sorted by vaddr)
 *   strtab            strtab_len bytes of NUL-terminated names
 *
 * A symbol of size 0 extends to the next symbol's start. The format is
 * produced by the agent (and, later, the CLI) and validated by the server
 * before it is stored, so symfile_parse() is written for hostile input.
 */
#ifndef EMBER_SYMFILE_H
#define EMBER_SYMFILE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define SYMFILE_MAGIC "EMSYM001"
#define SYMFILE_MAX_SEGMENTS 256
#define SYMFILE_MAX_SYMBOLS (16u << 20)
#define SYMFILE_MAX_NAME 4096

struct symfile_view {
	const uint8_t *base;
	size_t len;
	uint32_t nseg;
	uint32_t nsym;
	uint32_t strtab_len;
	const uint8_t *segs;
	const uint8_t *syms;
	const char *strtab;
};

/* Validates data[0..len) completely. On success fills *out (which points
 * into data; data must outlive it) and returns 0; otherwise returns -1 and
 * sets *err to a static description. */
int symfile_parse(const void *data, size_t len, struct symfile_view *out, const char **err);

/* Looks up the function containing the given file offset. Returns its name
 * (pointing into the view) and the offset into the function, or NULL. */
const char *symfile_lookup(const struct symfile_view *v, uint64_t file_offset, uint64_t *func_off);

uint32_t symfile_symbol_count(const struct symfile_view *v);

/* Building: add segments and symbols in any order, then finish. */
struct symfile_builder;
struct symfile_builder *symfile_builder_new(void);
void symfile_builder_free(struct symfile_builder *b);
void symfile_add_segment(struct symfile_builder *b, uint64_t file_offset, uint64_t vaddr,
			 uint64_t size);
/* rank breaks ties between symbols at the same address: higher wins. */
void symfile_add_symbol(struct symfile_builder *b, const char *name, uint64_t vaddr,
			uint64_t size, int rank);
size_t symfile_builder_symbols(const struct symfile_builder *b);
/* Sorts, removes duplicates and appends the encoded file to out.
 * Returns 0, or -1 when limits are exceeded. */
int symfile_finish(struct symfile_builder *b, struct buf *out);

#endif
