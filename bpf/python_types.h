/* python_types.h - what ember's BPF CPython walker (bpf/python.bpf.c) knows of
 * a Python process, shared with the agent (agent/python.c), and how a
 * Python frame travels in a sample.
 *
 * A Python frame takes two slots of oncpu_sample.frames. The first: bit 63
 * set, the instruction index within the code object (16 bits, saturated)
 * in bits 47..62 and the address of the code object in bits 0..46
 * (user-space addresses on x86-64 are below 2^47). The second: the code
 * object's co_qualname pointer as the walker read it. The agent reads the
 * code object from the process's memory to name the frame, later; the
 * pointer tells it whether the object there is still the one sampled (code
 * objects are freed, e.g. a module's after its import, and their memory
 * reused), so a frame is never named after another function. Like the other shared
 * headers it uses only fixed-width kernel types, defined by the includer.
 */
#ifndef EMBER_BPF_PYTHON_TYPES_H
#define EMBER_BPF_PYTHON_TYPES_H

#define PY_FRAME_FLAG (1ull << 63)
#define PY_FRAME_INSTR_SHIFT 47
#define PY_FRAME_INSTR_MAX 0xffffull
#define PY_FRAME_ADDR_MASK ((1ull << 47) - 1)
#define PY_NO_FIELD 0xffff

/* The owner of the marker frame an invocation of the interpreter pushes
 * below its first frame (3.12+): FRAME_OWNED_BY_CSTACK in 3.12 and 3.13,
 * FRAME_OWNED_BY_INTERPRETER in 3.14 (which also marks the bottom frame
 * of every thread), 3 in each. Like CPython's own stack readers, the
 * walker takes any owner from this value up as such a marker. */
#define PY_OWNED_BY_ENTRY 3

/* A frame's code object reference may carry tag bits in its low bits
 * (3.14's _PyStackRef); objects are 8-byte aligned. */
#define PY_CODE_TAG_MASK 7ull

/* py_offsets.flags */
#define PY_F_FRAME_OBJECTS 1 /* 3.8-3.10: a chain of PyFrameObject, one per
				invocation of the interpreter loop; frame_instr
				is the int f_lasti */
#define PY_F_LASTI_BYTES 2   /* 3.8, 3.9: f_lasti counts bytes, not code units */
#define PY_F_ENTRY_ON_STACK 4 /* 3.12+: each invocation of the interpreter keeps
				its marker frame (PY_OWNED_BY_ENTRY) in its own
				native stack frame, which tells the walker which
				native frame is that invocation, whatever its
				code address (stripped, PGO-split, cloned or
				tail-calling interpreter loops alike) */

/* Byte offsets of the fields the walker reads, for one CPython version;
 * PY_NO_FIELD where the version has no such field. 3.8-3.10 name them
 * differently: interp_threads_head is tstate_head, tstate_frame is frame,
 * frame_previous f_back, frame_code f_code, frame_instr f_lasti, and
 * code_qualname is co_name (they have no co_qualname). */
struct py_offsets {
	__u16 runtime_interpreters_head; /* _PyRuntimeState.interpreters.head */
	__u16 interp_next;               /* PyInterpreterState.next */
	__u16 interp_threads_head;       /* PyInterpreterState.threads.head */
	__u16 tstate_next;               /* PyThreadState.next */
	__u16 tstate_thread_id;          /* PyThreadState.thread_id: pthread_self() */
	__u16 tstate_frame;              /* .cframe (3.11, 3.12) or .current_frame (3.13+) */
	__u16 cframe_current_frame;      /* _PyCFrame.current_frame, or PY_NO_FIELD */
	__u16 frame_previous;            /* _PyInterpreterFrame.previous */
	__u16 frame_code;                /* .f_code, or .f_executable (3.13+) */
	__u16 frame_instr;               /* .prev_instr, or .instr_ptr (3.13+) */
	__u16 frame_owner;               /* .owner */
	__u16 frame_is_entry;            /* .is_entry (3.11), or PY_NO_FIELD */
	__u16 code_adaptive;             /* PyCodeObject.co_code_adaptive */
	__u16 code_qualname;             /* PyCodeObject.co_qualname */
	__u16 flags;                     /* PY_F_* */
	__u16 pad;
};

/* A Python process (py_procs, keyed by pid). Addresses are the process's. */
struct py_proc {
	__u64 start_ticks, exec_id;  /* as in unwind_proc: which process, which exec */
	__u64 runtime;               /* &_PyRuntime */
	__u64 eval_lo, eval_hi;      /* _PyEval_EvalFrameDefault */
	__u64 cold_lo, cold_hi;      /* its .cold part, when the symbols name it */
	struct py_offsets off;
};

/* An interpreter executable (py_exes, keyed by its file: the kernel's
 * device number, major << 20 | minor, and inode), for the processes the
 * agent has not described yet: their raw stacks still carry their Python
 * frames. Addresses are the file's; the load bias is the process's
 * mm->start_code minus text_vaddr (the lowest executable segment's
 * p_vaddr, which the kernel put at start_code). start_ticks and exec_id
 * of file are unused. */
struct py_exe_key {
	__u64 dev, ino;
};

struct py_exe {
	__u64 text_vaddr;
	struct py_proc file;
};

#endif
