/* symfile.h - ember's symbol file: what the code of one ELF file is.
 *
 * A symbol file maps offsets *within the ELF file* (what the agent sends
 * for each native frame) to a chain of frames: the function, and when the
 * compiler inlined functions into it, each inlined function, innermost
 * first, with the source file and line of each (for the outer frames the
 * line is where the inner one was called). It is built from ELF symbols
 * (names only), from DWARF (lines and inlined functions) or both; the
 * design follows LLVM's GSYM: a sorted address table over deduplicated
 * records. Little-endian and fixed-width, so a file is used in place
 * (mmap'ed) after one validation pass:
 *
 *   header  48 bytes  magic "EMSYM002", u32 nseg, u32 nrow, u32 nchain,
 *                     u32 strtab_len, u64 base, u32 flags, u32 0, u64 0
 *   seg[nseg]  24 B   u64 file_offset, u64 vaddr, u64 size  (executable PT_LOAD)
 *   row[nrow]   8 B   u32 addr (vaddr - base), u32 chain (1-based; 0 = no code
 *                     known here)    sorted by addr, unique
 *   chain[nchain] 16 B u32 name, u32 file (string offsets; file 0xffffffff =
 *                     unknown), u32 line (0 = unknown), u32 parent (1-based
 *                     chain of the caller this was inlined into; 0 = none;
 *                     always smaller than its own 1-based index)
 *   strtab            NUL-terminated strings; offset 0 is ""
 *
 * A row covers the addresses from its addr up to the next row's. Names are
 * stored as the compiler wrote them (mangled); the server demangles when it
 * shows them. Produced by the agent, `ember upload-symbols` and the
 * server's debuginfod fetcher; symfile_parse() is written for hostile
 * input.
 */
#ifndef EMBER_SYMFILE_H
#define EMBER_SYMFILE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define SYMFILE_MAGIC "EMSYM002"
#define SYMFILE_MAX_SEGMENTS 256
#define SYMFILE_MAX_ROWS (64u << 20)
#define SYMFILE_MAX_NAME 4096
#define SYMFILE_MAX_DEPTH 64 /* inline depth a lookup follows */
#define SYMFILE_NO_FILE 0xffffffffu

/* Header flags: what the file was built from. */
#define SYMFILE_HAS_LINES 1u   /* source files and lines (DWARF) */
#define SYMFILE_HAS_INLINES 2u /* inlined functions (DWARF) */

struct symfile_view {
	const uint8_t *base;
	size_t len;
	uint32_t nseg, nrow, nchain, strtab_len, flags;
	uint64_t vbase;
	const uint8_t *segs, *rows, *chains;
	const char *strtab;
};

struct sym_frame {
	const char *name;
	const char *file; /* NULL when unknown */
	uint32_t line;    /* 0 when unknown */
};

/* Validates data[0..len) completely. On success fills *out (pointing into
 * data) and returns 0; otherwise returns -1 with a static reason in *err. */
int symfile_parse(const void *data, size_t len, struct symfile_view *out, const char **err);

/* The frames at a file offset, innermost first, at most max. Returns how
 * many (0 when no function is known there). */
int symfile_lookup(const struct symfile_view *v, uint64_t file_offset, struct sym_frame *out, int max);

/* Building. Ranges are [lo, hi) in ELF virtual addresses; where ranges
 * overlap, the higher rank wins, and within a rank the earlier start. */
struct symfile_builder;
struct symfile_builder *symfile_builder_new(void);
void symfile_builder_free(struct symfile_builder *b);
void symfile_add_segment(struct symfile_builder *b, uint64_t file_offset, uint64_t vaddr,
			 uint64_t size);
/* A frame record (deduplicated); file may be NULL, parent 0. Returns its
 * 1-based id. */
uint32_t symfile_chain(struct symfile_builder *b, const char *name, const char *file,
		       uint32_t line, uint32_t parent);
void symfile_add_range(struct symfile_builder *b, uint64_t lo, uint64_t hi, uint32_t chain,
		       int rank);
void symfile_set_flags(struct symfile_builder *b, uint32_t flags);
size_t symfile_builder_ranges(const struct symfile_builder *b);
/* Resolves overlaps and appends the encoded file to out. Returns 0, or -1
 * when limits are exceeded. Either finish call ends building: the builder
 * can then only be freed. */
int symfile_finish(struct symfile_builder *b, struct buf *out);
/* As symfile_finish, but hands the encoded file to sink in pieces (the
 * header, the rows, blocks of chains, the strings), so that a caller that
 * compresses or sends it never holds a second copy. Sets *len to the
 * file's length. Returns 0, or -1 when limits are exceeded or sink
 * returned < 0. */
typedef int (*symfile_sink)(void *ctx, const void *data, size_t n);
int symfile_finish_to(struct symfile_builder *b, symfile_sink sink, void *ctx, size_t *len);
/* Bytes the builder holds now (what a caller accounts as in flight). */
size_t symfile_builder_bytes(const struct symfile_builder *b);

#endif
