/* pylayout_check.c - compares ember's fixed layout of a CPython version
 * (agent/python_layouts.h) with offsetof() in that version's own headers.
 * Built by tests/integration/test_python.py against each interpreter's
 * include directory; prints every field and exits 1 on a mismatch, 2 when
 * ember has no layout for the version. */
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif
#if PY_VERSION_HEX >= 0x03090000
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#else
#include <internal/pycore_pystate.h>
#endif
#include <stddef.h>
#include <stdio.h>

#include "python_layouts.h"

static int bad;

static void check(const char *what, unsigned ember, size_t real)
{
	printf("%-40s ember %5u  headers %5zu%s\n", what, ember, real, ember == real ? "" : "  MISMATCH");
	bad |= ember != real;
}

#define CHECK(field, expr) check(#field, l->field, (expr))

int main(void)
{
	const struct py_layout *l = py_layout_find(EMBER_PY_VERSION(PY_MAJOR_VERSION, PY_MINOR_VERSION));
	printf("CPython %s\n", PY_VERSION);
	if (!l) {
		printf("ember has no layout for this version\n");
		return 2;
	}
	CHECK(off.runtime_interpreters_head, offsetof(_PyRuntimeState, interpreters.head));
	CHECK(off.interp_next, offsetof(PyInterpreterState, next));
	CHECK(off.tstate_next, offsetof(PyThreadState, next));
	CHECK(off.tstate_thread_id, offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX < 0x030B0000
	/* A chain of frame objects, one per interpreter invocation. */
	CHECK(off.interp_threads_head, offsetof(PyInterpreterState, tstate_head));
	CHECK(off.tstate_frame, offsetof(PyThreadState, frame));
	check("off.cframe_current_frame (none)", l->off.cframe_current_frame, PY_NO_FIELD);
	CHECK(off.frame_previous, offsetof(PyFrameObject, f_back));
	CHECK(off.frame_code, offsetof(PyFrameObject, f_code));
	CHECK(off.frame_instr, offsetof(PyFrameObject, f_lasti));
	check("f_lasti is an int", 4, sizeof(((PyFrameObject *)0)->f_lasti));
	check("off.frame_owner (none)", l->off.frame_owner, PY_NO_FIELD);
	check("off.frame_is_entry (none)", l->off.frame_is_entry, PY_NO_FIELD);
	check("flags: frame objects", l->off.flags & PY_F_FRAME_OBJECTS, PY_F_FRAME_OBJECTS);
	/* 3.10 counts f_lasti in code units, 3.8 and 3.9 in bytes. */
	check("flags: f_lasti in bytes", !!(l->off.flags & PY_F_LASTI_BYTES), PY_VERSION_HEX < 0x030A0000);
	CHECK(off.code_qualname, offsetof(PyCodeObject, co_name)); /* no co_qualname */
	CHECK(code_name, offsetof(PyCodeObject, co_name));
	CHECK(code_filename, offsetof(PyCodeObject, co_filename));
	CHECK(code_firstlineno, offsetof(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX >= 0x030A0000
	CHECK(code_linetable, offsetof(PyCodeObject, co_linetable));
	check("lines: 3.10 line table", l->lines, PY_LINES_310);
#else
	CHECK(code_linetable, offsetof(PyCodeObject, co_lnotab));
	check("lines: lnotab", l->lines, PY_LINES_LNOTAB);
#endif
#else
	CHECK(off.interp_threads_head, offsetof(PyInterpreterState, threads.head));
	CHECK(off.frame_previous, offsetof(_PyInterpreterFrame, previous));
	CHECK(off.frame_owner, offsetof(_PyInterpreterFrame, owner));
	/* 3.12+ keep each invocation's marker frame on the native stack. */
	check("flags", l->off.flags, PY_VERSION_HEX >= 0x030C0000 ? PY_F_ENTRY_ON_STACK : 0);
	check("lines: location table", l->lines, PY_LINES_LOCATIONS);
#if PY_VERSION_HEX >= 0x030D0000
	CHECK(off.tstate_frame, offsetof(PyThreadState, current_frame));
	check("off.cframe_current_frame (none)", l->off.cframe_current_frame, PY_NO_FIELD);
	CHECK(off.frame_code, offsetof(_PyInterpreterFrame, f_executable));
	CHECK(off.frame_instr, offsetof(_PyInterpreterFrame, instr_ptr));
#else
	CHECK(off.tstate_frame, offsetof(PyThreadState, cframe));
	CHECK(off.cframe_current_frame, offsetof(_PyCFrame, current_frame));
	CHECK(off.frame_code, offsetof(_PyInterpreterFrame, f_code));
	CHECK(off.frame_instr, offsetof(_PyInterpreterFrame, prev_instr));
#endif
#if PY_VERSION_HEX < 0x030C0000
	CHECK(off.frame_is_entry, offsetof(_PyInterpreterFrame, is_entry));
#else
	check("off.frame_is_entry (none)", l->off.frame_is_entry, PY_NO_FIELD);
	/* The owner of the marker frame an interpreter invocation pushes. */
#if PY_VERSION_HEX >= 0x030E0000
	check("FRAME_OWNED_BY_INTERPRETER", PY_OWNED_BY_ENTRY, FRAME_OWNED_BY_INTERPRETER);
#else
	check("FRAME_OWNED_BY_CSTACK", PY_OWNED_BY_ENTRY, FRAME_OWNED_BY_CSTACK);
#endif
#endif
#if PY_VERSION_HEX >= 0x030D0000
	/* Where ember reads the version's own offsets (l->debug). */
	CHECK(debug.interpreters_head, offsetof(_Py_DebugOffsets, runtime_state.interpreters_head));
	CHECK(debug.interp_next, offsetof(_Py_DebugOffsets, interpreter_state.next));
	CHECK(debug.threads_head, offsetof(_Py_DebugOffsets, interpreter_state.threads_head));
	CHECK(debug.tstate_next, offsetof(_Py_DebugOffsets, thread_state.next));
	CHECK(debug.current_frame, offsetof(_Py_DebugOffsets, thread_state.current_frame));
	CHECK(debug.thread_id, offsetof(_Py_DebugOffsets, thread_state.thread_id));
	CHECK(debug.frame_previous, offsetof(_Py_DebugOffsets, interpreter_frame.previous));
	CHECK(debug.frame_executable, offsetof(_Py_DebugOffsets, interpreter_frame.executable));
	CHECK(debug.frame_instr_ptr, offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
	CHECK(debug.frame_owner, offsetof(_Py_DebugOffsets, interpreter_frame.owner));
	CHECK(debug.code_filename, offsetof(_Py_DebugOffsets, code_object.filename));
	CHECK(debug.code_name, offsetof(_Py_DebugOffsets, code_object.name));
	CHECK(debug.code_qualname, offsetof(_Py_DebugOffsets, code_object.qualname));
	CHECK(debug.code_linetable, offsetof(_Py_DebugOffsets, code_object.linetable));
	CHECK(debug.code_firstlineno, offsetof(_Py_DebugOffsets, code_object.firstlineno));
	CHECK(debug.code_adaptive, offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
	CHECK(debug.size, offsetof(_Py_DebugOffsets, pyobject));
#if PY_VERSION_HEX >= 0x030E0000
	CHECK(debug.free_threaded, offsetof(_Py_DebugOffsets, free_threaded));
#else
	check("debug.free_threaded (none)", l->debug.free_threaded, 0);
#endif
#else
	check("debug.size (no table)", l->debug.size, 0);
#endif
	CHECK(off.code_adaptive, offsetof(PyCodeObject, co_code_adaptive));
	CHECK(code_filename, offsetof(PyCodeObject, co_filename));
	CHECK(code_name, offsetof(PyCodeObject, co_name));
	CHECK(off.code_qualname, offsetof(PyCodeObject, co_qualname));
	CHECK(code_firstlineno, offsetof(PyCodeObject, co_firstlineno));
	CHECK(code_linetable, offsetof(PyCodeObject, co_linetable));
#endif
	CHECK(bytes_size, offsetof(PyVarObject, ob_size));
	CHECK(bytes_data, offsetof(PyBytesObject, ob_sval));
	CHECK(str_length, offsetof(PyASCIIObject, length));
	CHECK(str_state, offsetof(PyASCIIObject, state));
	CHECK(str_ascii_data, sizeof(PyASCIIObject));
	CHECK(str_compact_data, sizeof(PyCompactUnicodeObject));
	return bad;
}
