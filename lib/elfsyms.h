/* elfsyms.h - reading what ember needs from an ELF file with libelf/libdw.
 *
 * elfsyms_extract() builds an ember symbol file (symfile.h) for an
 * executable or library: its executable PT_LOAD segments, and its
 * functions from .symtab and .dynsym, from .gopclntab (Go binaries, even
 * stripped ones) and, when asked, from DWARF (source lines and inlined
 * functions; dwarfsyms.h). The symbols may come from a separate debug file
 * (e.g. found through .gnu_debuglink or a build ID). elfsyms_build_id()
 * reads the GNU build ID. Nothing in the file is trusted: counts are
 * bounded and every libelf/libdw error is a clean failure.
 */
#ifndef EMBER_ELFSYMS_H
#define EMBER_ELFSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "symfile.h"

#define ELF_BUILD_ID_MAX 64

struct elf_segment {
	uint64_t offset, vaddr, size;
};

struct elfsyms_opts {
	bool dwarf;           /* read DWARF lines and inlined functions too */
	uint64_t max_input;   /* no DWARF for symbol sources larger than this; 0 = any */
	uint64_t deadline_ns; /* stop reading DWARF after this (now_mono_ns clock); 0 = none */
	/* The executable's segments when fd cannot tell them (a separate debug
	 * file's program headers carry no file offsets); nsegments 0 = read fd's. */
	const struct elf_segment *segments;
	int nsegments;
	/* Told the bytes the symbol file's builder holds once all symbols are
	 * read (before the file is encoded); NULL = not told. */
	void (*on_bytes)(void *ctx, size_t bytes);
	void *on_bytes_ctx;
};

/* Appends the symbol file of the ELF file `fd` to out, with symbols read
 * from `debug_fd` (pass fd itself when there is no separate debug file).
 * Returns the number of address ranges (>= 0), or -1 with *err set. */
long elfsyms_extract(int fd, int debug_fd, const struct elfsyms_opts *o, struct buf *out,
		     const char **err);
/* As elfsyms_extract, but the symbol file goes to sink in pieces
 * (symfile_finish_to) and *len is set to its length: a caller that
 * compresses it never holds it whole. Memory: the symbol and string tables
 * are read SYM_CHUNK symbols at a time through a mapping dropped after
 * each, so what is held is the builder (the names, once each) and not
 * the file's tables too. */
long elfsyms_extract_to(int fd, int debug_fd, const struct elfsyms_opts *o, symfile_sink sink,
			void *ctx, size_t *len, const char **err);

/* The executable PT_LOAD segments (file offset, virtual address, size in
 * the file), at most max. Returns how many, or -1 when not ELF. */
int elfsyms_exec_segments(int fd, struct elf_segment *out, int max);

/* Copies the GNU build ID into id (up to ELF_BUILD_ID_MAX bytes).
 * Returns its length, 0 when the file has none, -1 on error. */
int elfsyms_build_id(int fd, uint8_t *id);

/* The file name in .gnu_debuglink. Returns 0, or -1 when there is none. */
int elfsyms_debuglink(int fd, char *name, size_t n);

/* Opens the separate debug file of the ELF file fd, found as gdb finds
 * one: DEBUG_ROOT/.build-id/xx/yyyy.debug by fd's GNU build ID, then the
 * .gnu_debuglink name in the file's directory (path: where it lives,
 * absolute; NULL = unknown), in .debug/ there, and in DEBUG_ROOT followed
 * by that directory. A candidate is taken only when it is the same build:
 * its build ID equals fd's, or (either has none) its CRC-32 is the one
 * .gnu_debuglink recorded. Returns an open descriptor and the path in
 * found, or -1. DEBUG_ROOT is normally /usr/lib/debug. */
int elfsyms_open_debug_file(int fd, const char *path, const char *debug_root, char *found,
			    size_t n);

/* Whether the file has DWARF debugging information (.debug_info). */
bool elfsyms_has_dwarf(int fd);

/* A symbol looked up by name: value (its virtual address) and size. */
struct elf_symbol_query {
	const char *name;
	uint64_t value, size;
	bool found;
};

/* Fills in each named symbol from .symtab, else .dynsym (defined symbols
 * only). Returns how many were found, or -1 when fd is not ELF. */
int elfsyms_lookup(int fd, struct elf_symbol_query *q, size_t n);

/* Copies len bytes stored at virtual address vaddr (in a PT_LOAD segment's
 * file part) into out. Returns 0, or -1 when they are not all in the file. */
int elfsyms_read_vaddr(int fd, uint64_t vaddr, void *out, size_t len);

#endif
