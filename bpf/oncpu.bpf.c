// SPDX-License-Identifier: GPL-2.0
/* oncpu.bpf.c - on-CPU sampling: runs on every tick of the per-CPU
 * cpu-clock perf event the agent opens, captures the kernel stack and the
 * user stack of the interrupted thread and sends them through a ring
 * buffer.
 *
 * User stacks of processes the agent has described (unwind_procs) are
 * unwound by ember's own unwinder from DWARF call-frame tables
 * (unwind_step.h), UNWIND_FRAMES_PER_PROG frames per program, continuing
 * through tail calls; so code without frame pointers unwinds, and stacks
 * deeper than the kernel's 127-frame limit survive. Processes not described
 * yet (their first samples) use the kernel's frame-pointer walk. In a
 * Python process (py_procs), each native frame of the interpreter loop is
 * replaced by the Python frames it runs, read from the interpreter's frame
 * chain by oncpu_python (python_types.h). No aggregation happens here:
 * user space deduplicates. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "oncpu_types.h"
#include "python_types.h"
#include "unwind_types.h"

char LICENSE[] SEC("license") = "GPL";

#define UNWIND_FRAMES_PER_PROG 16
/* Every tail call of a sample counts (native, into and out of the Python
 * walker): the kernel allows 33. */
#define UNWIND_MAX_TAIL_CALLS 32
#define PY_FRAMES_PER_PROG 16
#define PY_SCAN_PER_PROG 64
#define PY_MAX_INTERPRETERS 4
#define PY_MAX_THREADS 128
#define PY_YOUNG_NS 2000000000ull /* see oncpu_python */
/* idx < ONCPU_MAX_FRAMES is checked; the mask (ONCPU_MAX_FRAMES rounded
 * up to a power of two, minus one) shows the verifier that the slot stays
 * inside the scratch record, whatever the compiler did to the check. */
#define FRAME_INDEX_MASK 511
_Static_assert(FRAME_INDEX_MASK + 1 >= ONCPU_MAX_FRAMES, "mask covers the frames");
_Static_assert(sizeof(struct oncpu_sample) + 8 <= 4216, "masked slot stays in the scratch record");
#define PROG_UNWIND 0
#define PROG_PYTHON 1
#define PF_KTHREAD 0x00200000

/* Set by the agent before load. */
const volatile __u64 ns_per_tick = 10000000; /* 1e9 / USER_HZ */
const volatile __u32 has_task_pt_regs = 1;   /* bpf_task_pt_regs exists (Linux >= 5.15) */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by the agent before load */
} samples SEC(".maps");

struct scratch {
	struct oncpu_sample s;
	struct unwind_regs regs;
	__u32 tail_calls;
	__u32 wake;	     /* wake the agent for this sample (submit) */
	__u64 last_wake_ns;  /* this CPU's last forced wakeup */
	/* The Python walk of this sample: */
	__u64 py_frame;      /* the next _PyInterpreterFrame to read, 0 = none left */
	__u64 py_scan;       /* PY_F_ENTRY_ON_STACK: the next frame the search for
				the next marker reads, 0 = no search going on */
	__u64 py_marker;     /* ... the marker frame found, 0 = none (left) */
	__u64 py_native;     /* ... the native frame the Python frames replace */
	__u8 py_started;     /* py_frame was found from the thread state */
	__u8 py_visited;     /* oncpu_python ran for the current native frame */
	__u8 py_emitted;     /* ... and wrote Python frames for it */
	__u8 py_pad[5];
};

/* Samples wait in the ring buffer until the agent's next drain (200 ms),
 * except a sample of a process the agent has not described yet (or whose
 * description lacks a mapping the stack went through): that one wakes it
 * at once, so it reads the process and its next stacks are unwound by CFI
 * within milliseconds instead of a whole drain interval.
 * At most one forced wakeup per CPU per WAKE_MIN_NS, whatever happens. */
#define WAKE_MIN_NS 10000000ull

/* Per-CPU scratch record: far too large for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ONCPU_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} oncpu_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct unwind_rule);
} unwind_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 21); /* resized by the agent before load */
	__type(key, __u32);
	__type(value, struct unwind_entry);
} unwind_entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct unwind_file_info);
} unwind_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2); /* PROG_UNWIND, PROG_PYTHON */
	__type(key, __u32);
	__type(value, __u32);
} unwind_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

/* tid -> its PyThreadState, checked on every use (thread states are freed
 * and reused). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} py_threads SEC(".maps");

static __always_inline void count(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&oncpu_stats, &stat);
	if (v)
		*v += n;
}

static __always_inline int read_u64(__u64 addr, __u64 *out)
{
	return bpf_probe_read_user(out, sizeof(*out), (const void *)addr) ? 1 : 0;
}

static __always_inline const struct unwind_entry *entry_at(__u32 i)
{
	return bpf_map_lookup_elem(&unwind_entries, &i);
}

static __always_inline const struct unwind_rule *rule_at(__u32 i)
{
	return bpf_map_lookup_elem(&unwind_rules, &i);
}

static __always_inline const struct unwind_file_info *file_at(__u32 i)
{
	return bpf_map_lookup_elem(&unwind_files, &i);
}

int uw_mapping_index(__u32 pid, __u64 pc);
int uw_rule_id(__u32 file, __u64 vaddr);

#define UW_INLINE static __always_inline
#define UW_READ_U64(addr, out) read_u64((addr), (out))
#define UW_ENTRY(i) entry_at(i)
#define UW_RULE(i) rule_at(i)
#define UW_FILE(i) file_at(i)
#define UW_MAPPING_INDEX(p, pid, pc) uw_mapping_index((pid), (pc))
#define UW_RULE_ID(file, vaddr) uw_rule_id((file), (vaddr))
#include "unwind_step.h"

/* The two searches are global functions: the verifier checks each once,
 * not once per frame of the unrolled unwinding loop. */
__noinline int uw_mapping_index(__u32 pid, __u64 pc)
{
	const struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &pid);
	if (!p)
		return -1;
	return uw_find_mapping(p, pc);
}

__noinline int uw_rule_id(__u32 file, __u64 vaddr)
{
	return uw_find_rule_id(file_at(file), vaddr);
}

static __always_inline void submit(struct scratch *sc)
{
	struct oncpu_sample *s = &sc->s;
	__u32 nk = s->kstack_len > 0 ? (__u32)s->kstack_len : 0;
	__u32 nu = s->ustack_len > 0 ? (__u32)s->ustack_len : 0;
	__u64 size = ONCPU_HDR_SIZE + (__u64)(nk + nu) * sizeof(__u64);
	if (size > sizeof(*s))
		size = sizeof(*s);
	__u64 flags = sc->wake ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&samples, s, size, flags) < 0) {
		count(ONCPU_STAT_RB_FULL, 1);
		return;
	}
	count(ONCPU_STAT_SAMPLES, 1);
}

/* Asks submit to wake the agent, at most once per WAKE_MIN_NS per CPU. */
static __always_inline void wake_agent(struct scratch *sc)
{
	if (sc->s.ktime_ns - sc->last_wake_ns >= WAKE_MIN_NS) {
		sc->wake = 1;
		sc->last_wake_ns = sc->s.ktime_ns;
	}
}

static __always_inline void stop_unwind(struct scratch *sc, int err)
{
	/* A return address in no mapping the agent described: the process
	 * has mapped code since (ld.so loading libraries, dlopen, JIT), and
	 * the agent re-reads its maps when it sees this sample. */
	if (err == UWE_NO_MAPPING)
		wake_agent(sc);
	if (err > 0 && err < 8) {
		sc->s.unwind_error = (__u16)err;
		count(ONCPU_STAT_ERR_BASE + err, 1);
	}
	submit(sc);
}

/* Continues ember's unwinder from sc->regs: UNWIND_FRAMES_PER_PROG frames,
 * then a tail call into itself. */
SEC("perf_event")
int oncpu_unwind(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return 0;
	__u32 pid = sc->s.pid;
	const struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &pid);
	if (!p) {
		stop_unwind(sc, UWE_NO_MAPPING);
		return 0;
	}
	__u32 nk = sc->s.kstack_len > 0 ? (__u32)sc->s.kstack_len : 0;
	if (nk > ONCPU_MAX_KFRAMES)
		nk = ONCPU_MAX_KFRAMES;
	const struct py_proc *py = bpf_map_lookup_elem(&py_procs, &pid);
	if (py && (py->start_ticks != p->start_ticks || py->exec_id != p->exec_id))
		py = NULL;
	for (int i = 0; i < UNWIND_FRAMES_PER_PROG; i++) {
		__u32 nu = (__u32)sc->s.ustack_len;
		if (nu >= ONCPU_MAX_UFRAMES) {
			stop_unwind(sc, UWE_TRUNCATED);
			return 0;
		}
		__u32 idx = nk + nu;
		if (idx >= ONCPU_MAX_FRAMES) {
			stop_unwind(sc, UWE_TRUNCATED);
			return 0;
		}
		bool native = true, on_stack = py && (py->off.flags & PY_F_ENTRY_ON_STACK);
		__u64 pc = sc->regs.pc;
		if (on_stack && !sc->py_started && sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
			/* Find the thread's frames and the first marker. */
			sc->tail_calls++;
			bpf_tail_call(ctx, &unwind_progs, PROG_PYTHON);
		}
		if (py && !on_stack && ((pc >= py->eval_lo && pc < py->eval_hi) ||
					(pc >= py->cold_lo && pc < py->cold_hi))) {
			/* The interpreter loop: its Python frames instead, once. */
			if (!sc->py_visited && sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
				sc->py_visited = 1;
				sc->tail_calls++;
				bpf_tail_call(ctx, &unwind_progs, PROG_PYTHON);
			}
			native = !sc->py_emitted;
			sc->py_visited = 0;
			sc->py_emitted = 0;
		}
		if (native) {
			/* Masked: the compiler does not keep the bound
			 * checked above across the tail-call branch. */
			asm volatile("" : "+r"(idx));
			sc->s.frames[idx & FRAME_INDEX_MASK] = pc;
			sc->s.ustack_len = (__s32)(nu + 1);
			count(ONCPU_STAT_CFI_FRAMES, 1);
		}
		__u64 sp = sc->regs.sp;
		int rc = uw_step(p, pid, &sc->regs);
		if (rc != UW_CONTINUE) {
			stop_unwind(sc, rc < 0 ? -rc : 0);
			return 0;
		}
		if (on_stack && native && sc->py_marker >= sp && sc->py_marker < sc->regs.sp &&
		    sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
			/* The frame just written holds the next marker: it is
			 * the interpreter invocation whose Python frames
			 * replace it. The walk goes on from its caller. */
			sc->py_native = pc;
			sc->py_marker = 0;
			sc->py_emitted = 0;
			sc->s.ustack_len = (__s32)nu;
			sc->tail_calls++;
			bpf_tail_call(ctx, &unwind_progs, PROG_PYTHON);
		}
	}
	if (++sc->tail_calls > UNWIND_MAX_TAIL_CALLS) {
		stop_unwind(sc, UWE_TRUNCATED);
		return 0;
	}
	count(ONCPU_STAT_TAIL_CALLS, 1);
	bpf_tail_call(ctx, &unwind_progs, PROG_UNWIND);
	stop_unwind(sc, UWE_TRUNCATED); /* the tail call failed */
	return 0;
}

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

/* Writes the Python frames of one invocation of the interpreter loop (the
 * native frame oncpu_unwind is at), PY_FRAMES_PER_PROG per program, then
 * goes back to the native unwinder. An invocation's frames end with its
 * entry frame (3.11: is_entry) or at the marker frame below them (3.12+:
 * PY_OWNED_BY_ENTRY); before 3.11 an invocation runs one frame. */
SEC("perf_event")
int oncpu_python(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return 0;
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
	if (sc->py_frame && sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
		sc->tail_calls++;
		bpf_tail_call(ctx, &unwind_progs, PROG_PYTHON);
	}
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
	if (sc->py_scan && sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
		sc->tail_calls++;
		bpf_tail_call(ctx, &unwind_progs, PROG_PYTHON);
	}
	goto no_marker;
lost:
	count(ONCPU_STAT_PY_READ_ERR, 1);
	sc->py_frame = 0;
no_marker:
	sc->py_scan = 0;
	sc->py_marker = 0;
back:
	sc->tail_calls++;
	bpf_tail_call(ctx, &unwind_progs, PROG_UNWIND);
	stop_unwind(sc, UWE_TRUNCATED); /* the tail call failed */
	return 0;
}

/* The registers of the interrupted user code, or 0 when there is none. */
static __always_inline int user_regs(struct bpf_perf_event_data *ctx, struct unwind_regs *r)
{
	struct pt_regs *regs = (struct pt_regs *)&ctx->regs;
	/* The context allows only 8-byte loads: read cs through its u64 slot
	 * (x86-64 user-space ABI layout, not subject to CO-RE). */
	__u64 cs = *(__u64 *)((char *)regs + __builtin_offsetof(struct pt_regs, cs));
	if ((cs & 3) == 3) {
		r->pc = regs->ip;
		r->sp = regs->sp;
		r->bp = regs->bp;
		r->exact = 1;
		return 1;
	}
	/* In the kernel: the registers saved when the thread entered it. */
	struct task_struct *task = bpf_get_current_task_btf();
	if (!has_task_pt_regs || (task->flags & PF_KTHREAD))
		return 0;
	struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!u)
		return 0;
	r->pc = BPF_CORE_READ(u, ip);
	r->sp = BPF_CORE_READ(u, sp);
	r->bp = BPF_CORE_READ(u, bp);
	r->exact = 0; /* the instruction after the system call */
	return r->pc != 0;
}

SEC("perf_event")
int oncpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	__u32 zero = 0;

	if (tid == 0) {
		count(ONCPU_STAT_IDLE, 1);
		return 0;
	}
	struct scratch *sc = bpf_map_lookup_elem(&scratch, &zero);
	if (!sc)
		return 0;
	struct oncpu_sample *s = &sc->s;
	s->ktime_ns = bpf_ktime_get_ns();
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	s->proc_start_ns = BPF_CORE_READ(task, group_leader, start_boottime);
	s->exec_id = BPF_CORE_READ(task, group_leader, self_exec_id);
	s->pid = tgid;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->unwind_mode = UWM_NONE;
	s->unwind_error = UWE_NONE;
	s->ustack_len = 0;
	sc->tail_calls = 0;
	sc->wake = 0;
	sc->py_frame = 0;
	sc->py_scan = 0;
	sc->py_marker = 0;
	sc->py_started = 0;
	sc->py_visited = 0;
	sc->py_emitted = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	long kn = bpf_get_stack(ctx, s->frames, ONCPU_MAX_KFRAMES * sizeof(__u64), 0);
	__u32 nk = 0;
	if (kn < 0) {
		count(ONCPU_STAT_KSTACK_ERR, 1);
		s->kstack_len = (__s32)kn;
	} else {
		nk = (__u32)kn / sizeof(__u64);
		if (nk > ONCPU_MAX_KFRAMES)
			nk = ONCPU_MAX_KFRAMES;
		s->kstack_len = (__s32)nk;
	}

	if (!user_regs(ctx, &sc->regs)) {
		submit(sc); /* a kernel thread: no user stack */
		return 0;
	}
	const struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (p && p->start_ticks == s->proc_start_ns / ns_per_tick && p->exec_id == s->exec_id) {
		s->unwind_mode = UWM_CFI;
		count(ONCPU_STAT_CFI, 1);
		bpf_tail_call(ctx, &unwind_progs, 0);
		/* Tail call failed: fall back to the kernel's walk below. */
		s->unwind_mode = UWM_NONE;
	}
	/* Not described yet (or the pid was reused, or the process exec'd
	 * since): the kernel's frame-pointer walk, until the agent has read
	 * the process — which this sample asks it to do now. */
	s->unwind_mode = UWM_KERNEL_FP;
	count(ONCPU_STAT_KERNEL_FP, 1);
	wake_agent(sc);
	long un = bpf_get_stack(ctx, &s->frames[nk & 127], ONCPU_MAX_KFRAMES * sizeof(__u64),
				BPF_F_USER_STACK);
	if (un < 0) {
		count(ONCPU_STAT_USTACK_ERR, 1);
		s->ustack_len = (__s32)un;
	} else {
		__u32 nu = (__u32)un / sizeof(__u64);
		s->ustack_len = (__s32)(nu > ONCPU_MAX_KFRAMES ? ONCPU_MAX_KFRAMES : nu);
	}
	submit(sc);
	return 0;
}
