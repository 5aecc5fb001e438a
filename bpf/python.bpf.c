// SPDX-License-Identifier: GPL-2.0
/* python.bpf.c - ember's CPython walker in BPF: replaces each native
 * frame of the interpreter loop by the Python frames it runs, read from
 * the interpreter's frame chain (python_types.h; the process's layout
 * written into py_procs by agent/python.c). One program per path, each
 * the tail-call target PROG_PYTHON of its sampler, called by the native
 * unwinder (unwind.bpf.c) and going back to it: oncpu_python,
 * offcpu_python, cuda_python. And raw_python_on/_off/_cuda, the Python
 * frames of a record sent raw. See docs/internals/python.md. */
#include "record.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define PY_FRAMES_PER_PROG 16
#define PY_SCAN_PER_PROG 64
#define PY_MAX_INTERPRETERS 4
#define PY_MAX_THREADS 128
#define PY_YOUNG_NS 2000000000ull /* see python_body */

static __always_inline int read_ptr(__u64 base, __u16 off, __u64 *out)
{
	*out = 0;
	if (off == PY_NO_FIELD)
		return 1;
	return read_u64(base + off, out);
}

/* The thread state of the current thread: the one whose thread_id (its
 * pthread_self(), which is the thread pointer on x86-64) is this thread's
 * FS base. Unlike the native thread id, that needs no pid-namespace
 * translation. Cached per tid, checked on every use. */
static __always_inline __u64 py_thread_state(const struct py_proc *py, __u32 tid)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase), id = 0, ts = 0, interp = 0;
	if (!fsbase)
		return 0;
	__u64 *cached = bpf_map_lookup_elem(&py_threads, &tid);
	if (cached && !read_ptr(*cached, py->off.tstate_thread_id, &id) && id == fsbase)
		return *cached;
	if (read_ptr(py->runtime, py->off.runtime_interpreters_head, &interp))
		return 0;
	for (int j = 0; j < PY_MAX_INTERPRETERS && interp; j++) {
		if (read_ptr(interp, py->off.interp_threads_head, &ts))
			return 0;
		for (int k = 0; k < PY_MAX_THREADS && ts; k++) {
			if (read_ptr(ts, py->off.tstate_thread_id, &id))
				return 0;
			if (id == fsbase) {
				bpf_map_update_elem(&py_threads, &tid, &ts, BPF_ANY);
				return ts;
			}
			if (read_ptr(ts, py->off.tstate_next, &ts))
				return 0;
		}
		if (read_ptr(interp, py->off.interp_next, &interp))
			return 0;
	}
	return 0;
}

/* The innermost Python frame of the thread, or 0. */
static __always_inline __u64 py_current_frame(const struct py_proc *py, __u32 tid)
{
	__u64 ts = py_thread_state(py, tid), f = 0;
	if (!ts || read_ptr(ts, py->off.tstate_frame, &f) || !f)
		return 0;
	if (py->off.cframe_current_frame != PY_NO_FIELD && read_ptr(f, py->off.cframe_current_frame, &f))
		return 0;
	return f;
}

/* The current process's interpreter, found by its executable file
 * (py_exes) when the agent has not described the process yet (a new one:
 * the agent reads a process after its first samples), in the process's
 * addresses, into out. False when the executable is no interpreter the
 * agent has read (a libpython program's is a launcher: it waits for the
 * agent). */
static __always_inline bool py_from_exe(__u32 pid, struct py_proc *out)
{
	if (bpf_get_current_pid_tgid() >> 32 != pid)
		return false;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct py_exe_key key = {
		.dev = BPF_CORE_READ(task, mm, exe_file, f_inode, i_sb, s_dev),
		.ino = BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino),
	};
	const struct py_exe *e = bpf_map_lookup_elem(&py_exes, &key);
	if (!e)
		return false;
	__u64 bias = BPF_CORE_READ(task, mm, start_code) - e->text_vaddr;
	*out = e->file;
	out->runtime += bias;
	out->eval_lo += bias;
	out->eval_hi += bias;
	if (out->cold_lo) {
		out->cold_lo += bias;
		out->cold_hi += bias;
	}
	return true;
}

/* The thread's Python frames, all its invocations' (ONCPU_RAW_PY_SLOTS
 * at most), into the frame slots after the user frames of the record in
 * sc, flagged ONCPU_F_RAW_PYTHON (oncpu_types.h), before submit_raw copies
 * it: the agent puts them in place once it has unwound the raw stack.
 * Returns how many slots, 0 (the record untouched) when the process runs
 * no Python ember knows (neither described nor its executable read, see
 * py_from_exe) or nothing could be read. */
static __always_inline int raw_python_body(struct scratch *sc)
{
	__u32 pid = sc->s.pid;
	struct py_proc from_exe;
	const struct py_proc *py = bpf_map_lookup_elem(&py_procs, &pid);
	if (!py || py->start_ticks != sc->s.proc_start_ns / ns_per_tick ||
	    (py->exec_id != sc->s.exec_id && py->exec_id != UNWIND_EXEC_ANY)) {
		if (!py_from_exe(pid, &from_exe))
			return 0;
		py = &from_exe;
	}
	bool on_stack = py->off.flags & PY_F_ENTRY_ON_STACK;
	__u32 nk = sc->s.kstack_len > 0 ? (__u32)sc->s.kstack_len : 0;
	__u32 nu = sc->s.ustack_len > 0 ? (__u32)sc->s.ustack_len : 0;
	__u32 base = nk + nu, n = 0;
	if (base >= ONCPU_MAX_FRAMES)
		return 0;
	__u64 f = py_current_frame(py, sc->s.tid);
	/* Two slots a frame or marker, always: the walk's states stay few. */
	for (__u32 i = 0; i < ONCPU_RAW_PY_SLOTS / 2; i++) {
		__u64 code = 0, instr = 0, prev = 0, qualname = 0, at = 0, end = 0, first;
		if (!f || base + 2 * i + 1 >= ONCPU_MAX_FRAMES)
			break;
		if (on_stack) {
			__u8 owner = 0;
			if (bpf_probe_read_user(&owner, 1, (const void *)(f + py->off.frame_owner)) ||
			    read_ptr(f, py->off.frame_previous, &prev))
				break;
			if (owner >= PY_OWNED_BY_ENTRY) {
				/* Where this invocation's native frame is. */
				first = f;
				end = ONCPU_RAW_PY_MARKER;
				goto put;
			}
		}
		if (read_ptr(f, py->off.frame_code, &code))
			break;
		code &= ~PY_CODE_TAG_MASK;
		if (read_ptr(f, py->off.frame_previous, &prev) ||
		    read_ptr(code, py->off.code_qualname, &qualname))
			break;
		if (py->off.flags & PY_F_FRAME_OBJECTS) {
			__s32 lasti = 0;
			if (bpf_probe_read_user(&lasti, sizeof(lasti), (const void *)(f + py->off.frame_instr)))
				break;
			if (lasti > 0)
				at = (py->off.flags & PY_F_LASTI_BYTES) ? (__u64)lasti / 2 : (__u64)lasti;
			end = ONCPU_RAW_PY_END;
		} else {
			if (read_ptr(f, py->off.frame_instr, &instr))
				break;
			__u64 start = code + py->off.code_adaptive;
			if (instr > start)
				at = (instr - start) / 2;
			__u8 is_entry = 0;
			if (!on_stack && py->off.frame_is_entry != PY_NO_FIELD &&
			    bpf_probe_read_user(&is_entry, 1, (const void *)(f + py->off.frame_is_entry)))
				break;
			if (is_entry)
				end = ONCPU_RAW_PY_END;
		}
		if (at > PY_FRAME_INSTR_MAX)
			at = PY_FRAME_INSTR_MAX;
		first = PY_FRAME_FLAG | at << PY_FRAME_INSTR_SHIFT | (code & PY_FRAME_ADDR_MASK);
		end |= qualname & PY_FRAME_ADDR_MASK;
put:;
		__u32 k = base + 2 * i;
		asm volatile("" : "+r"(k));
		sc->s.frames[k & FRAME_INDEX_MASK] = first;
		k = base + 2 * i + 1;
		asm volatile("" : "+r"(k));
		sc->s.frames[k & FRAME_INDEX_MASK] = end;
		n = 2 * i + 2;
		f = prev;
	}
	if (n == 0)
		return 0;
	if (py == &from_exe)
		count(ONCPU_STAT_PY_BY_EXE, 1);
	sc->s.raw_py = n;
	sc->s.flags |= ONCPU_F_RAW_PYTHON;
	return (int)n;
}

/* raw_python_body for each path's scratch record (record.bpf.h): global
 * functions, each verified once, not once per inlined copy of submit_raw,
 * and each referring only to its own path's maps. */
__noinline int raw_python_on(void)
{
	struct scratch *sc = cpu_scratch();
	return sc ? raw_python_body(sc) : 0;
}

__noinline int raw_python_off(void)
{
	struct scratch *sc = thread_scratch();
	return sc ? raw_python_body(sc) : 0;
}

__noinline int raw_python_cuda(void)
{
	struct scratch *sc = launch_scratch();
	return sc ? raw_python_body(sc) : 0;
}

/* PY_F_ENTRY_ON_STACK: an invocation with no Python frames of its own
 * keeps its native frame. */
static __always_inline void keep_native(struct scratch *sc, __u32 nk)
{
	__u32 nu = (__u32)sc->s.ustack_len;
	__u32 idx = nk + nu;
	if (nu >= ONCPU_MAX_UFRAMES || idx >= ONCPU_MAX_FRAMES)
		return;
	asm volatile("" : "+r"(idx));
	sc->s.frames[idx & FRAME_INDEX_MASK] = sc->py_native;
	sc->s.ustack_len = (__s32)(nu + 1);
}

/* The body of the Python walker programs (oncpu_python, offcpu_python,
 * cuda_python): writes the Python frames of one invocation of the interpreter loop (the
 * native frame the unwinder is at), PY_FRAMES_PER_PROG per program, then
 * goes back to the native unwinder through progs. An invocation's frames
 * end with its entry frame (3.11: is_entry) or at the marker frame below
 * them (3.12+: PY_OWNED_BY_ENTRY); before 3.11 an invocation runs one
 * frame. */
static __always_inline int python_body(void *ctx, struct scratch *sc, void *progs, const int off)
{
	__u32 pid = sc->s.pid;
	const struct py_proc *py = bpf_map_lookup_elem(&py_procs, &pid);
	if (!py)
		goto back;
	bool on_stack = py->off.flags & PY_F_ENTRY_ON_STACK;
	if (!sc->py_started) {
		sc->py_started = 1;
		sc->py_frame = py_current_frame(py, sc->s.tid);
		count(sc->py_frame ? ONCPU_STAT_PY_STACKS : ONCPU_STAT_PY_NO_THREAD, 1);
		/* The agent names Python frames by reading the process's code
		 * objects: a young process (maybe a short-lived one) wakes it
		 * now, before the process exits and takes them with it. */
		if (bpf_ktime_get_boot_ns() - sc->s.proc_start_ns < PY_YOUNG_NS)
			wake_agent(sc);
		if (on_stack) {
			sc->py_scan = sc->py_frame;
			goto scan;
		}
	}
	if (sc->py_scan)
		goto scan;
	__u32 nk = sc->s.kstack_len > 0 ? (__u32)sc->s.kstack_len : 0;
	if (nk > ONCPU_MAX_KFRAMES)
		nk = ONCPU_MAX_KFRAMES;
	for (int i = 0; i < PY_FRAMES_PER_PROG; i++) {
		__u64 f = sc->py_frame, code = 0, instr = 0, prev = 0;
		if (!f) {
			if (on_stack && !sc->py_emitted)
				keep_native(sc, nk);
			goto back;
		}
		if (py->off.frame_owner != PY_NO_FIELD) {
			__u8 owner = 0;
			if (bpf_probe_read_user(&owner, 1, (const void *)(f + py->off.frame_owner)))
				goto lost;
			if (owner >= PY_OWNED_BY_ENTRY) {
				/* Below this invocation's frames: the next
				 * invocation's go on from the one before. */
				if (read_ptr(f, py->off.frame_previous, &prev))
					goto lost;
				sc->py_frame = prev;
				if (!on_stack) {
					if (sc->py_emitted)
						goto back;
					continue;
				}
				if (!sc->py_emitted)
					keep_native(sc, nk);
				sc->py_scan = prev;
				goto scan;
			}
		}
		__u64 qualname = 0, at = 0;
		bool entry = false;
		if (read_ptr(f, py->off.frame_code, &code))
			goto lost;
		code &= ~PY_CODE_TAG_MASK;
		if (read_ptr(f, py->off.frame_previous, &prev) || read_ptr(code, py->off.code_qualname, &qualname))
			goto lost;
		if (py->off.flags & PY_F_FRAME_OBJECTS) {
			/* One frame object per interpreter invocation. */
			__s32 lasti = 0;
			if (bpf_probe_read_user(&lasti, sizeof(lasti), (const void *)(f + py->off.frame_instr)))
				goto lost;
			if (lasti > 0)
				at = (py->off.flags & PY_F_LASTI_BYTES) ? (__u64)lasti / 2 : (__u64)lasti;
			entry = true;
		} else {
			if (read_ptr(f, py->off.frame_instr, &instr))
				goto lost;
			__u64 first = code + py->off.code_adaptive;
			if (instr > first)
				at = (instr - first) / 2;
		}
		__u32 nu = (__u32)sc->s.ustack_len;
		__u32 idx = nk + nu;
		if (nu + 1 >= ONCPU_MAX_UFRAMES || idx + 1 >= ONCPU_MAX_FRAMES)
			goto back; /* the native unwinder ends the stack as truncated */
		if (at > PY_FRAME_INSTR_MAX)
			at = PY_FRAME_INSTR_MAX;
		if (idx >= ONCPU_MAX_FRAMES)
			goto back;
		asm volatile("" : "+r"(idx)); /* keeps the mask (FRAME_INDEX_MASK) */
		sc->s.frames[idx & FRAME_INDEX_MASK] = PY_FRAME_FLAG | at << PY_FRAME_INSTR_SHIFT | (code & PY_FRAME_ADDR_MASK);
		idx++;
		asm volatile("" : "+r"(idx));
		sc->s.frames[idx & FRAME_INDEX_MASK] = qualname;
		sc->s.ustack_len = (__s32)(nu + 2);
		sc->py_emitted = 1;
		count(ONCPU_STAT_PY_FRAMES, 1);
		sc->py_frame = prev;
		if (entry)
			goto back;
		if (py->off.frame_is_entry != PY_NO_FIELD) {
			__u8 is_entry = 0;
			if (bpf_probe_read_user(&is_entry, 1, (const void *)(f + py->off.frame_is_entry)))
				goto lost;
			if (is_entry)
				goto back;
		}
	}
	/* More frames in this invocation: go on. */
	if (sc->py_frame && py_call_room(sc))
		tail_call_counted(ctx, sc, progs, PROG_PYTHON);
	goto back;
scan:
	/* PY_F_ENTRY_ON_STACK: the next marker frame, which the native
	 * unwinder looks for in each native frame's stack. */
	for (int i = 0; i < PY_SCAN_PER_PROG; i++) {
		__u64 f = sc->py_scan;
		__u8 owner = 0;
		if (!f)
			goto no_marker;
		if (bpf_probe_read_user(&owner, 1, (const void *)(f + py->off.frame_owner)))
			goto lost;
		if (owner >= PY_OWNED_BY_ENTRY) {
			sc->py_marker = f;
			sc->py_scan = 0;
			goto back;
		}
		if (read_ptr(f, py->off.frame_previous, &sc->py_scan))
			goto lost;
	}
	if (sc->py_scan && py_call_room(sc))
		tail_call_counted(ctx, sc, progs, PROG_PYTHON);
	goto no_marker;
lost:
	count(ONCPU_STAT_PY_READ_ERR, 1);
	sc->py_frame = 0;
no_marker:
	sc->py_scan = 0;
	sc->py_marker = 0;
back:
	tail_call_counted(ctx, sc, progs, PROG_UNWIND);
	stop_unwind(sc, UWE_TRUNCATED, off); /* the tail call failed */
	return 0;
}

/* The tail-call targets PROG_PYTHON of the three paths: oncpu_python,
 * offcpu_python, cuda_python (record.bpf.h). */
WALKER_PROGRAMS(python, python_body)
