/* dwarfsyms.h - source lines and inlined functions from DWARF, read with
 * elfutils' libdw, as ranges of a symbol file (symfile.h).
 *
 * For every compile unit: the line table (address -> file:line) and the
 * tree of functions and the functions inlined into them (with the file and
 * line of each call site). Every line-table range becomes one symbol-file
 * range whose frame chain is the innermost inlined function at file:line,
 * then each function it was inlined into at its call site, out to the real
 * function. Bounded by a deadline; a file over it yields what was read.
 */
#ifndef EMBER_DWARFSYMS_H
#define EMBER_DWARFSYMS_H

#include <libelf.h>
#include <stdint.h>

#include "symfile.h"

#define DWARFSYMS_RANK 100 /* above any ELF symbol */

/* Adds the DWARF ranges of elf to b. Returns the number of ranges added,
 * 0 when the file has no usable DWARF, -1 on error. */
long dwarfsyms_add(Elf *elf, struct symfile_builder *b, uint64_t deadline_ns);

#endif
