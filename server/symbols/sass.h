/* sass.h - the SASS mnemonic of each instruction of a cubin (a CUDA ELF
 * image), for naming the cuda_sass frames of PC sampling (an instruction is
 * stored as its cubin and its offset in the function; docs/internals/gpu.md).
 *
 * The project has no SASS decoder of its own: NVIDIA does not document the
 * encodings, and a mnemonic is never guessed. The names come from NVIDIA's
 * disassembler where it is on the host: sass_disassemble() runs
 * `nvdisasm -c CUBIN` as a child process (no shell; stdin and stderr
 * /dev/null), reads at most max_out bytes of its output within timeout_ms
 * (past either the child is killed and the call fails), and parses it with
 * sass_parse().
 *
 * sass_parse() reads nvdisasm's text: a function starts at its section line
 * ("//----- .text.NAME -----"); each instruction line is
 * "/[*]OFFSET[*]/  [@[!]PRED] MNEMONIC operands ;" with OFFSET in hex, the
 * offset in the function, as CUPTI's PC sampling gives it. The mnemonic is
 * the opcode with its modifiers ("LDG.E.128", "ISETP.GE.U32.AND"), without
 * the predicate or operands. Every byte is treated as untrusted: lines,
 * names and counts are bounded (SASS_MAX_*); a line that is not one of the
 * two is skipped. The table is sorted by (function, offset) for lookups.
 */
#ifndef EMBER_SERVER_SASS_H
#define EMBER_SERVER_SASS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define SASS_MAX_FUNCS 65536
#define SASS_MAX_INSNS (1u << 22)
#define SASS_MAX_NAME 1024    /* bytes of a function's name */
#define SASS_MAX_MNEMONIC 47  /* bytes of a mnemonic */

struct sass_insn {
	uint64_t offset;
	uint32_t func;                        /* index in funcs */
	char mnemonic[SASS_MAX_MNEMONIC + 1]; /* NUL-terminated */
};

struct sass_table {
	char **funcs; /* owned, NUL-terminated */
	size_t nfuncs, capfuncs;
	struct sass_insn *insns; /* owned, sorted by (func name, offset) after parsing */
	size_t ninsns, capinsns;
};

/* Parses len bytes of `nvdisasm -c` output into t (zeroed first by the
 * caller, or freed with sass_free). Returns the number of instructions, or
 * -1 with the reason in err (a limit passed). */
long sass_parse(const char *text, size_t len, struct sass_table *t, struct buf *err);

/* The mnemonic of the instruction at offset in function func, or NULL. */
const char *sass_lookup(const struct sass_table *t, const char *func, uint64_t offset);

/* Runs nvdisasm (a path) on the cubin file and parses its output into t.
 * Returns the number of instructions, or -1 with the reason in err (no
 * such program, it failed, it ran past timeout_ms, or wrote more than
 * max_out bytes). */
long sass_disassemble(const char *nvdisasm, const char *cubin, unsigned timeout_ms, size_t max_out,
		      struct sass_table *t, struct buf *err);

void sass_free(struct sass_table *t);

#endif
