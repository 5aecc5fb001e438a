/* python.h - CPython processes: finding the interpreter in a process,
 * describing it to the BPF walker, and naming the Python frames it sends.
 *
 * python_inspect_file() reads an ELF file whose name looks like a CPython
 * interpreter (python3.X, libpython3.X.so) and finds what the walker needs:
 * the version (Py_Version), _PyRuntime, _PyEval_EvalFrameDefault and its
 * .cold part, PyCode_Type. python_describe() turns that, with the load bias
 * of the process's mapping, into the BPF py_proc record (python_types.h)
 * using the fixed layout of that version (python_layout()), or for 3.13+
 * the offsets the interpreter publishes in _Py_DebugOffsets.
 *
 * python_symbolize() names a Python frame (a code object address and an
 * instruction index, as the walker sends them) by reading the code object
 * from the process's memory with process_vm_readv: its qualified name, file
 * name, and the line of the instruction from its location table. Code
 * objects are cached per process; a cached one is checked again (its
 * header re-read and compared) once per generation (the agent bumps it per
 * batch), so a freed and reused address is noticed. Every length read from
 * the process is bounded; nothing read is trusted.
 *
 * Supported: CPython 3.8 to 3.14 on x86-64, with the GIL (their layouts
 * are checked against each version's own headers by
 * tests/integration/test_python.py). Free-threaded builds (3.13t, 3.14t)
 * are refused: their processes get native frames only.
 *
 * Ownership: struct python owns its process table and caches; strings it
 * returns live until the next python_* call for the same process.
 * Threading: one thread.
 */
#ifndef EMBER_AGENT_PYTHON_H
#define EMBER_AGENT_PYTHON_H

#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "python_types.h"

#define EMBER_PY_VERSION(major, minor) ((uint32_t)(major) << 24 | (uint32_t)(minor) << 16)

/* What the walker and the symbolizer need to know of one CPython version
 * beyond py_offsets: where a code object keeps its names and lines, and
 * how strings and bytes are laid out. */
enum py_lines {
	PY_LINES_LNOTAB = 1, /* 3.8, 3.9: co_lnotab, (bytes, line) increments */
	PY_LINES_310,        /* 3.10: co_linetable, (bytes, line) ranges */
	PY_LINES_LOCATIONS,  /* 3.11+: co_linetable, the location table */
};

/* Where a version's _Py_DebugOffsets (3.13+: the first bytes of
 * _PyRuntime) keeps each offset ember reads: byte positions of its 64-bit
 * fields. size = 0: the version publishes no table. */
struct py_debug_positions {
	uint16_t size; /* bytes of the table ember reads */
	uint16_t free_threaded; /* the Py_GIL_DISABLED flag (3.14+); 0 = no such field */
	uint16_t interpreters_head, interp_next, threads_head;
	uint16_t tstate_next, current_frame, thread_id;
	uint16_t frame_previous, frame_executable, frame_instr_ptr, frame_owner;
	uint16_t code_filename, code_name, code_qualname, code_linetable, code_firstlineno;
	uint16_t code_adaptive;
};

struct py_layout {
	uint32_t version, last; /* the versions it is for: EMBER_PY_VERSION(3, minor) */
	uint8_t lines;    /* enum py_lines: the format of code_linetable */
	struct py_offsets off;
	uint16_t code_filename, code_name, code_firstlineno, code_linetable;
	uint16_t bytes_size, bytes_data;     /* PyBytesObject: ob_size, ob_sval */
	uint16_t str_length, str_state;      /* PyASCIIObject: length, state */
	uint16_t str_ascii_data, str_compact_data; /* where compact strings' characters start */
	struct py_debug_positions debug;
};

/* The layout of a version (major and minor only), or NULL. */
const struct py_layout *python_layout(uint32_t version);

/* An interpreter file; addresses are the file's virtual addresses. */
struct py_file {
	uint32_t version; /* Py_Version: 0x030B02F0 for 3.11.2 */
	uint64_t runtime, eval_lo, eval_hi, cold_lo, cold_hi, code_type;
	/* The version's fixed layout, with the offsets the interpreter
	 * publishes itself (_Py_DebugOffsets, 3.13+) where it has them. */
	struct py_layout layout;
	bool debug_offsets; /* layout took the interpreter's own offsets */
};

/* Applies a _Py_DebugOffsets table (the start of _PyRuntime, n bytes, as
 * the file's initialized data holds it) to l for an interpreter of
 * `version`, whose positions l->debug gives: every offset the walker and
 * the symbolizer read. Returns 0, or -1 (l unchanged) when the table is not
 * one ember knows (cookie, version), describes a free-threaded build, or
 * an offset is out of range. */
int python_apply_debug_offsets(const void *table, size_t n, uint32_t version, struct py_layout *l);

/* Whether a file name looks like an interpreter (cheap; checked first). */
bool python_file_name(const char *name);
/* Reads the interpreter's symbols from fd (name: the file's base name, for
 * the version of interpreters older than Py_Version, 3.11). Returns 0, or
 * -1 when it is not an interpreter ember supports. */
int python_inspect_file(int fd, const char *name, struct py_file *out);

/* The BPF record of a process running interpreter f loaded with bias. */
void python_describe(const struct py_file *f, uint64_t bias, uint64_t start_ticks,
		     uint64_t exec_id, struct py_proc *out);

struct python;

struct python *python_new(void);
void python_free(struct python *py);
/* Bytes held for the Python processes and their code objects: memory
 * accounting. Not thread-safe (the caller's thread owns py). */
size_t python_bytes(const struct python *py);
/* Process pid (started at start_ticks, in its exec_id-th program) runs
 * interpreter f with this bias; f = NULL forgets it. Its code cache stands
 * only while all of these stay the same (maps re-read after a dlopen). */
void python_set_process(struct python *py, int32_t pid, uint64_t start_ticks, uint64_t exec_id,
			const struct py_file *f, uint64_t bias);
/* The next generation: cached code objects are checked again on use. */
void python_next_generation(struct python *py);

struct py_sym {
	const char *name; /* qualified name, e.g. "Worker.run" */
	const char *file; /* co_filename */
	uint32_t line;    /* 0 = unknown */
};

/* Names the Python frame of process pid: slot is the sample's frame slot
 * with PY_FRAME_FLAG set, qualname the one after it (python_types.h).
 * Returns 0, or -1 when the code object cannot be read or is no longer the
 * one sampled. */
int python_symbolize(struct python *py, int32_t pid, uint64_t slot, uint64_t qualname,
		     struct py_sym *out);

/* The line of code unit `instr` in a line table of the given format (enum
 * py_lines); 0 = none. */
uint32_t python_line(int format, const uint8_t *table, size_t len, uint32_t firstlineno,
		     uint32_t instr);

struct python_stats {
	uint64_t symbolized, cache_hits, revalidated, read_errors, processes;
	uint64_t stale; /* frames whose code object was freed before the agent read it */
};
void python_get_stats(const struct python *py, struct python_stats *out);

#endif
