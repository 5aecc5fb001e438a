/* python_layouts.h - the fixed layouts of the CPython versions ember's
 * walker supports: byte offsets of the interpreter's fields on x86-64,
 * taken from each version's own headers. Included by agent/python.c and by
 * tests/tools/pylayout_check.c, which compares them with offsetof() in the
 * headers of every interpreter present (tests/integration/test_python.py).
 * Only python.c (one copy of the table) and the checker include it. */
#ifndef EMBER_AGENT_PYTHON_LAYOUTS_H
#define EMBER_AGENT_PYTHON_LAYOUTS_H

#include "python.h"

static const struct py_layout py_layouts[] = {
	{
		.version = EMBER_PY_VERSION(3, 8), .last = EMBER_PY_VERSION(3, 9),
		.lines = PY_LINES_LNOTAB,
		.off = {
			.runtime_interpreters_head = 32, .interp_next = 0, .interp_threads_head = 8,
			.tstate_next = 8, .tstate_thread_id = 176, .tstate_frame = 24,
			.cframe_current_frame = PY_NO_FIELD, .frame_previous = 24, .frame_code = 32,
			.frame_instr = 104, .frame_owner = PY_NO_FIELD, .frame_is_entry = PY_NO_FIELD,
			.code_adaptive = PY_NO_FIELD, .code_qualname = 112,
			.flags = PY_F_FRAME_OBJECTS | PY_F_LASTI_BYTES,
		},
		.code_filename = 104, .code_name = 112, .code_firstlineno = 40, .code_linetable = 120,
		.bytes_size = 16, .bytes_data = 32,
		.str_length = 16, .str_state = 32, .str_ascii_data = 48, .str_compact_data = 72,
	},
	{
		.version = EMBER_PY_VERSION(3, 10), .last = EMBER_PY_VERSION(3, 10),
		.lines = PY_LINES_310,
		.off = {
			.runtime_interpreters_head = 32, .interp_next = 0, .interp_threads_head = 8,
			.tstate_next = 8, .tstate_thread_id = 176, .tstate_frame = 24,
			.cframe_current_frame = PY_NO_FIELD, .frame_previous = 24, .frame_code = 32,
			.frame_instr = 96, .frame_owner = PY_NO_FIELD, .frame_is_entry = PY_NO_FIELD,
			.code_adaptive = PY_NO_FIELD, .code_qualname = 112,
			.flags = PY_F_FRAME_OBJECTS,
		},
		.code_filename = 104, .code_name = 112, .code_firstlineno = 40, .code_linetable = 120,
		.bytes_size = 16, .bytes_data = 32,
		.str_length = 16, .str_state = 32, .str_ascii_data = 48, .str_compact_data = 72,
	},
	{
		.version = EMBER_PY_VERSION(3, 11), .last = EMBER_PY_VERSION(3, 11),
		.lines = PY_LINES_LOCATIONS,
		.off = {
			.runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 16,
			.tstate_next = 8, .tstate_thread_id = 152, .tstate_frame = 56,
			.cframe_current_frame = 8, .frame_previous = 48, .frame_code = 32,
			.frame_instr = 56, .frame_owner = 69, .frame_is_entry = 68,
			.code_adaptive = 184, .code_qualname = 128,
		},
		.code_filename = 112, .code_name = 120,
		.code_firstlineno = 72, .code_linetable = 136,
		.bytes_size = 16, .bytes_data = 32,
		.str_length = 16, .str_state = 32, .str_ascii_data = 48, .str_compact_data = 72,
	},
	{
		.version = EMBER_PY_VERSION(3, 12), .last = EMBER_PY_VERSION(3, 12),
		.lines = PY_LINES_LOCATIONS,
		.off = {
			.runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 72,
			.tstate_next = 8, .tstate_thread_id = 136, .tstate_frame = 56,
			.cframe_current_frame = 0, .frame_previous = 8, .frame_code = 0,
			.frame_instr = 56, .frame_owner = 70, .frame_is_entry = PY_NO_FIELD,
			.code_adaptive = 192, .code_qualname = 128,
			.flags = PY_F_ENTRY_ON_STACK,
		},
		.code_filename = 112, .code_name = 120,
		.code_firstlineno = 68, .code_linetable = 136,
		.bytes_size = 16, .bytes_data = 32,
		.str_length = 16, .str_state = 32, .str_ascii_data = 40, .str_compact_data = 56,
	},
	{
		.version = EMBER_PY_VERSION(3, 13), .last = EMBER_PY_VERSION(3, 13),
		.lines = PY_LINES_LOCATIONS,
		.off = {
			.runtime_interpreters_head = 632, .interp_next = 7264, .interp_threads_head = 7344,
			.tstate_next = 8, .tstate_thread_id = 152, .tstate_frame = 72,
			.cframe_current_frame = PY_NO_FIELD, .frame_previous = 8, .frame_code = 0,
			.frame_instr = 56, .frame_owner = 70, .frame_is_entry = PY_NO_FIELD,
			.code_adaptive = 200, .code_qualname = 128,
			.flags = PY_F_ENTRY_ON_STACK,
		},
		.code_filename = 112, .code_name = 120,
		.code_firstlineno = 68, .code_linetable = 136,
		.bytes_size = 16, .bytes_data = 32,
		.str_length = 16, .str_state = 32, .str_ascii_data = 40, .str_compact_data = 56,
		.debug = {
			.size = 352, .free_threaded = 0,
			.interpreters_head = 40, .interp_next = 64, .threads_head = 72,
			.tstate_next = 168, .current_frame = 184, .thread_id = 192,
			.frame_previous = 232, .frame_executable = 240, .frame_instr_ptr = 248,
			.frame_owner = 264, .code_filename = 280, .code_name = 288, .code_qualname = 296,
			.code_linetable = 304, .code_firstlineno = 312, .code_adaptive = 344,
		},
	},
	{
		.version = EMBER_PY_VERSION(3, 14), .last = EMBER_PY_VERSION(3, 14),
		.lines = PY_LINES_LOCATIONS,
		.off = {
			.runtime_interpreters_head = 808, .interp_next = 7272, .interp_threads_head = 7344,
			.tstate_next = 8, .tstate_thread_id = 152, .tstate_frame = 72,
			.cframe_current_frame = PY_NO_FIELD, .frame_previous = 8, .frame_code = 0,
			.frame_instr = 56, .frame_owner = 74, .frame_is_entry = PY_NO_FIELD,
			.code_adaptive = 208, .code_qualname = 128,
			.flags = PY_F_ENTRY_ON_STACK,
		},
		.code_filename = 112, .code_name = 120,
		.code_firstlineno = 68, .code_linetable = 136,
		.bytes_size = 16, .bytes_data = 32,
		.str_length = 16, .str_state = 32, .str_ascii_data = 40, .str_compact_data = 56,
		.debug = {
			.size = 400, .free_threaded = 16,
			.interpreters_head = 40, .interp_next = 64, .threads_head = 72,
			.tstate_next = 192, .current_frame = 208, .thread_id = 216,
			.frame_previous = 256, .frame_executable = 264, .frame_instr_ptr = 272,
			.frame_owner = 288, .code_filename = 320, .code_name = 328, .code_qualname = 336,
			.code_linetable = 344, .code_firstlineno = 352, .code_adaptive = 384,
		},
	},
};

/* The layout of a version (major and minor only), or NULL. */
static inline const struct py_layout *py_layout_find(uint32_t version)
{
	version &= 0xffff0000u;
	for (size_t i = 0; i < sizeof(py_layouts) / sizeof(py_layouts[0]); i++)
		if (version >= py_layouts[i].version && version <= py_layouts[i].last)
			return &py_layouts[i];
	return NULL;
}

#endif
