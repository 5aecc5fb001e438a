/* Fuzz target: everything ember reads from an executable or debug file:
 * ELF symbols, .gopclntab, DWARF lines and inlined functions and segments
 * (lib/elfsyms.c, gopclntab.c, dwarfsyms.c) and the unwind table
 * (agent/unwind_table.c). The input is the whole file. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/unwind_table.h"
#include "elfsyms.h"
#include "symfile.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > (1u << 20))
		return 0;
	int fd = memfd_create("fuzz-elf", MFD_CLOEXEC);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	struct buf sym = { 0 };
	const char *why;
	struct elfsyms_opts o = { .dwarf = true, .deadline_ns = now_mono_ns() + 1000000000ull };
	if (elfsyms_extract(fd, fd, &o, &sym, &why) >= 0) {
		struct symfile_view v;
		if (symfile_parse(sym.data, sym.len, &v, &why) < 0)
			abort(); /* what ember writes, ember must read back */
	}
	buf_free(&sym);
	uint8_t bid[ELF_BUILD_ID_MAX];
	elfsyms_build_id(fd, bid);
	struct elf_segment segs[4];
	elfsyms_exec_segments(fd, segs, 4);
	struct rule_set rs;
	rule_set_init(&rs, 1024);
	struct unwind_budget b = { 100000, now_mono_ns() + 1000000000ull };
	struct unwind_rows rows;
	struct buf err = { 0 };
	if (unwind_table_build(fd, &rs, &b, &rows, &err) == 0) {
		for (size_t i = 1; i < rows.count; i++)
			if (unwind_row_vaddr(&rows, i) <= unwind_row_vaddr(&rows, i - 1))
				abort(); /* rows must be strictly sorted */
		unwind_rows_free(&rows);
	}
	buf_free(&err);
	rule_set_free(&rs);
	close(fd);
	return 0;
}
