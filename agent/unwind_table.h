/* unwind_table.h - turning one ELF file's call-frame information into the
 * rows ember's BPF unwinder reads (bpf/unwind_types.h).
 *
 * The CFI is read with elfutils' libdw: the start of every function's FDE
 * comes from .eh_frame_hdr's search table (or from the FDEs of
 * .debug_frame, for programs without .eh_frame), and for each
 * address range libdw evaluates the CFI program (dwarf_cfi_addrframe); the
 * resulting frame state is matched against the handful of shapes real code
 * uses (CFA = SP or BP + offset, return address and BP saved at CFA +
 * offset, the lazy-binding PLT expression, signal trampolines, the
 * outermost frame). Anything else becomes UW_INVALID, which makes the BPF
 * program fall back to the frame pointer for that address. Gaps between
 * functions are UW_INVALID too.
 *
 * Go binaries without .eh_frame are described from their own pc-to-SP-delta
 * table in .gopclntab (which stripping keeps): CFA = SP + delta + 8.
 *
 * Building is bounded: at most max_rows rows and deadline_ns of time per
 * file; a file over budget gets no table (and is unwound by frame
 * pointers). Rules are interned in a rule_set shared by all files.
 * Memory: the rows being built (8 bytes each) and libdw's cache of the
 * FDEs walked (a few thousand functions' worth at most: the CFI handle is
 * reopened as the walk goes, so a 500 MB library costs little more than
 * its rows) are counted in memstats' MEM_UNWIND_BUILD (the rows until
 * unwind_rows_free); the symbol table is read only for Go programs.
 * Functions known to be the bottom of a stack without saying so in their
 * CFI (the Go runtime's goexit, mstart, rt0_go) get the UW_STOP rule.
 */
#ifndef EMBER_AGENT_UNWIND_TABLE_H
#define EMBER_AGENT_UNWIND_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "buf.h"
#include "hmap.h"
#include "unwind_types.h"

struct rule_set {
	struct unwind_rule *rules;
	size_t count, cap;
	struct hmap index;
	size_t max; /* capacity of the BPF rule map */
};

void rule_set_init(struct rule_set *rs, size_t max);
void rule_set_free(struct rule_set *rs);
/* The id of r, added when new. Returns UINT32_MAX when the set is full. */
uint32_t rule_set_intern(struct rule_set *rs, const struct unwind_rule *r);

/* A row: its address as an offset from the table's base (the first row's
 * address), and its rule. 8 bytes: a large library's table (libLLVM: 1.4 M
 * rows) is held whole while it is built. */
struct unwind_row {
	uint32_t addr;
	uint32_t rule;
};

struct unwind_rows {
	struct unwind_row *rows;
	size_t count, cap;
	uint64_t base; /* the first row's address; rows are sorted from it */
	bool too_wide; /* a row was more than 4 GiB past base (the build fails) */
	const char *source; /* ".eh_frame" or ".debug_frame" */
};

/* The address row i starts at. */
static inline uint64_t unwind_row_vaddr(const struct unwind_rows *r, size_t i)
{
	return r->base + r->rows[i].addr;
}

struct unwind_budget {
	size_t max_rows;
	uint64_t deadline_ns; /* on the CLOCK_MONOTONIC clock of now_mono_ns() */
};

/* Builds the rows of the ELF file open on fd, sorted by address, adjacent
 * equal rules merged. Returns 0, or -1 with the reason in err (no CFI,
 * over budget, not ELF, rule set full, more than 4 GiB of code). */
int unwind_table_build(int fd, struct rule_set *rs, const struct unwind_budget *budget,
		       struct unwind_rows *out, struct buf *err);
void unwind_rows_free(struct unwind_rows *r);

#endif
