// SPDX-License-Identifier: GPL-2.0
/* oncpu.bpf.c - on-CPU sampling: runs on every tick of the per-CPU
 * cpu-clock perf event the agent opens, captures the kernel stack and the
 * user stack of the interrupted thread and sends them through a ring
 * buffer. With -enable-off-cpu, off-CPU sampling too: tp_btf/sched_switch
 * times how long each user thread stays switched out inside a system
 * call, picks waits to sample with a probability proportional to their
 * length and takes a picked thread's kernel stack as it switches in;
 * tp_btf/sys_exit, in that thread, adds its user stack the same way as
 * the on-CPU sampler and sends the record (see "Off-CPU" in
 * docs/internals/agent.md).
 *
 * User stacks of processes the agent has described (unwind_procs) are
 * unwound by ember's own unwinder from DWARF call-frame tables
 * (unwind_step.h), UNWIND_FRAMES_PER_PROG frames per program, continuing
 * through tail calls; so code without frame pointers unwinds, and stacks
 * deeper than the kernel's 127-frame limit survive. Processes not described
 * yet (their first samples) use the kernel's frame-pointer walk, and send
 * their raw stack along for the agent to unwind by CFI once it has read
 * them (submit_raw; so does a young process whose walk broke). In a
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
#define PROG_UNWIND 0
#define PROG_PYTHON 1
/* Which sampler a walk belongs to (a constant in every program, so each
 * refers only to its own maps and counters). */
#define PATH_ON 0   /* on-CPU: the perf event */
#define PATH_OFF 1  /* off-CPU: tp_btf/sys_exit */
#define PATH_CUDA 2 /* a CUDA launch stack: the uprobe on the marker */
#define PF_KTHREAD 0x00200000

/* Set by the agent before load. */
const volatile __u64 ns_per_tick = 10000000; /* 1e9 / USER_HZ */
const volatile __u32 has_task_pt_regs = 1;   /* bpf_task_pt_regs exists (Linux >= 5.15) */
const volatile __u64 offcpu_period_ns = 52631578; /* 1e9 / -off-cpu-sampling-rate */
/* A sample that finds this many bytes waiting in the ring buffer (a
 * quarter of it) wakes the agent, so a burst is drained before the ring
 * fills, however long the agent sleeps between drains. */
const volatile __u64 ring_wake_bytes = 1 << 18;

/* Written by the agent while the programs run (the .bss map is mmap'd):
 * waits that began before it are not measured (off-CPU sampling was off
 * then, so their start times are stale). */
volatile __u64 offcpu_since_ns;
/* Off-CPU records started and not yet sent or dropped (offcpu_begin,
 * offcpu_sample): while 0, as it nearly always is, the system-call exit
 * hook returns at once. A record dropped with its thread leaves it above
 * the truth, which costs a lookup per system call, nothing else. */
__u64 offcpu_pending;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by the agent before load */
} samples SEC(".maps");

struct scratch {
	struct oncpu_sample s;
	struct unwind_regs regs;
	struct unwind_regs regs0; /* the user registers the walk began with (submit_raw) */
	__u32 tail_calls;
	__u32 wake;	     /* wake the agent for this sample (submit) */
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

/* Samples wait in the ring buffer until the agent's next drain (1 s),
 * except a sample of a process the agent has not described yet (or whose
 * description lacks a mapping the stack went through): that one wakes it
 * at once, so it reads the process and its next stacks are unwound by CFI
 * within milliseconds instead of a whole drain interval. A sample that
 * finds the ring buffer a quarter full wakes it too (ring_wake_bytes).
 * At most one forced wakeup per CPU per WAKE_MIN_NS, whatever happens. */
#define WAKE_MIN_NS 10000000ull

/* The masked frame slot (FRAME_INDEX_MASK) stays inside the record. */
_Static_assert(__builtin_offsetof(struct oncpu_sample, frames) + (FRAME_INDEX_MASK + 1) * 8 <=
		       sizeof(struct scratch),
	       "masked slot stays in the scratch record");

/* The on-CPU sampler's scratch record, per CPU: far too large for the
 * 512-byte BPF stack. Perf-event programs run in interrupt context, so
 * nothing else on the CPU uses it meanwhile. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

/* The off-CPU sampler's records in progress, per thread id: one is
 * started when the thread is switched in (on whichever CPU) and finished
 * at its system call's exit, where the tracepoint may run preemptibly (and
 * the cpu-clock interrupt may run the on-CPU sampler), so it cannot live
 * in per-CPU memory. Preallocated: the switch hook runs with the run queue
 * locked, where allocating memory is not safe on every kernel. Sized by
 * the agent; a full map drops picked waits (counted). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct scratch);
} offcpu_scratch SEC(".maps");

/* Where the switch hook builds a record before it goes into
 * offcpu_scratch: per CPU, as that hook runs with interrupts off. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} offcpu_stage SEC(".maps");

/* Per user thread: when it was last switched out inside a system call, 0
 * = not waiting (offcpu_switch). Created outside the scheduler, which
 * only looks it up (it runs with the run queue locked, where allocating
 * memory is not safe on every kernel): for the threads there are when
 * sampling starts by the task iterator offcpu_threads, which the agent
 * runs, for new ones by offcpu_fork. Freed with the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} offcpu_waits SEC(".maps");

/* Each CPU's last forced wakeup of the agent (wake_agent). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} wake_times SEC(".maps");

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

/* The agent maps row pages of it read-only, a few milliseconds at a time,
 * to unwind the raw stacks of processes it had not described yet with the
 * same rows (agent/rawstack.h); lookups here are the same either way. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 21); /* resized by the agent before load */
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct unwind_entry);
} unwind_entries SEC(".maps");

/* Indexed by the agent's table slot (agent/unwind_mem.h), not by file:
 * slots are given back and reused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, struct unwind_file_info);
} unwind_files SEC(".maps");

/* slot -> when a frame was last looked up in it (bpf_ktime_get_ns, updated
 * at most every UNWIND_SEEN_NS): which tables are in use, for the agent's
 * choice of what to give back when the table is full, and which given-back
 * table a sample needs again. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 32768);
	__type(key, __u32);
	__type(value, __u64);
} unwind_seen SEC(".maps");

/* (slot << 32 | row page) -> when a frame fell in a row page of a table
 * loaded in part: the pages the agent loads first when it reloads it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u64);
} unwind_wanted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct unwind_proc);
} unwind_procs SEC(".maps");

/* Tail calls only reach programs of the caller's type (and, for tracing
 * programs, of its attach target): the perf-event unwinder and the
 * tp_btf/sys_exit one each have their own array. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2); /* PROG_UNWIND, PROG_PYTHON */
	__type(key, __u32);
	__type(value, __u32);
} unwind_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2); /* PROG_UNWIND, PROG_PYTHON of the off-CPU path */
	__type(key, __u32);
	__type(value, __u32);
} offcpu_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2); /* PROG_UNWIND, PROG_PYTHON of the CUDA launch path */
	__type(key, __u32);
	__type(value, __u32);
} cuda_progs SEC(".maps");

/* The CUDA launch path's scratch record, per CPU. A uprobe program may be
 * preempted, but while one runs on a CPU the kernel runs no other
 * tracing program there (bpf_prog_active), so no second walk shares it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} cuda_scratch SEC(".maps");

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
__s64 uw_row_page(__u32 file, __u32 rel);
int uw_page_rule(__u32 page, __u32 n, __u32 rel);

#define UW_INLINE static __always_inline
/* Zero, but not known to the verifier (.bss is writable): OR-ing it into
 * a variable makes the verifier forget the variable's value. */
volatile __u32 uw_opaque_zero;
#define UW_OPAQUE(x) ((x) |= uw_opaque_zero)
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

#define UNWIND_SEEN_NS 100000000ull

/* The two searches in a table, each verified once. */
__noinline __s64 uw_row_page(__u32 file, __u32 rel)
{
	return uw_find_row_page(file_at(file), rel);
}

__noinline int uw_page_rule(__u32 page, __u32 n, __u32 rel)
{
	return uw_search_page(page, n, rel);
}

/* uw_find_rule_id, with the searches above; also notes that the table was
 * used (unwind_seen) and which missing row page was wanted. Returns -2
 * when the file's table, or the row page, is not loaded (yet). */
__noinline int uw_rule_id(__u32 file, __u64 vaddr)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *seen = bpf_map_lookup_elem(&unwind_seen, &file);
	if (seen && now - *seen >= UNWIND_SEEN_NS)
		*seen = now;
	const struct unwind_file_info *fi = file_at(file);
	if (!fi || fi->count == 0)
		return -2;
	if (vaddr < fi->base || vaddr - fi->base > 0xffffffffull)
		return -1;
	__u32 rel = (__u32)(vaddr - fi->base);
	__s64 where = uw_row_page(file, rel);
	if (where <= -2) {
		__u64 key = (__u64)file << 32 | (__u32)(-2 - where);
		bpf_map_update_elem(&unwind_wanted, &key, &now, BPF_ANY);
		return -2;
	}
	if (where < 0)
		return -1;
	return uw_page_rule((__u32)((__u64)where >> 32), (__u32)where, rel);
}

/* Asks submit to wake the agent, at most once per WAKE_MIN_NS per CPU. */
static __always_inline void wake_agent(struct scratch *sc)
{
	__u32 zero = 0;
	__u64 *last = bpf_map_lookup_elem(&wake_times, &zero);
	if (last && sc->s.ktime_ns - *last >= WAKE_MIN_NS) {
		sc->wake = 1;
		*last = sc->s.ktime_ns;
	}
}

/* Sends the record (only its used part) and counts it. path PATH_OFF: the
 * record is the off-CPU sampler's, in offcpu_scratch, which is deleted
 * once sent. path is a constant in every caller, so the perf-event
 * programs never refer to the off-CPU maps. */
static __always_inline void submit(struct scratch *sc, const int path)
{
	struct oncpu_sample *s = &sc->s;
	__u32 nk = s->kstack_len > 0 ? (__u32)s->kstack_len : 0;
	__u32 nu = s->ustack_len > 0 ? (__u32)s->ustack_len : 0;
	__u64 size = ONCPU_HDR_SIZE + (__u64)(nk + nu) * sizeof(__u64);
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (!sc->wake && bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >= ring_wake_bytes) {
		wake_agent(sc);
		if (sc->wake)
			count(ONCPU_STAT_RING_WAKES, 1);
	}
	__u64 flags = sc->wake ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&samples, s, size, flags) < 0)
		count(path == PATH_OFF ? ONCPU_STAT_OFFCPU_RB_FULL :
		      path == PATH_CUDA ? ONCPU_STAT_CUDA_RB_FULL : ONCPU_STAT_RB_FULL, 1);
	else
		count(path == PATH_OFF ? ONCPU_STAT_OFFCPU_SAMPLES :
		      path == PATH_CUDA ? ONCPU_STAT_CUDA_STACKS : ONCPU_STAT_SAMPLES, 1);
	if (path == PATH_OFF) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		if (bpf_map_delete_elem(&offcpu_scratch, &tid) == 0)
			__sync_fetch_and_add(&offcpu_pending, -1);
	}
}

/* A process this young whose CFI walk broke sends its raw stack too
 * (stop_unwind). */
#define RAW_YOUNG_NS 2000000000ull

__noinline int cuda_raw_python(void);

/* Sends the sample with the user registers its walk began with and the
 * raw bytes of its user stack (struct oncpu_raw_sample), so that the agent
 * can unwind it by CFI once it has read the process and loaded its tables
 * (agent/rawstack.h): a sample of a process the agent has not described
 * yet, or of a process younger than RAW_YOUNG_NS whose walk broke. Returns
 * false when it did not (the ring buffer a quarter full, or full): the
 * caller then sends the record as it is. Only these samples,
 * never a stack unwound whole, pay for the copy. */
static __always_inline bool submit_raw(struct scratch *sc, const int path)
{
	/* A launch stack (PATH_CUDA) goes raw too: the agent unwinds it
	 * before it joins it with GPU time (agent/cuda.h). One stands for
	 * the GPU time of many launches (the library's unsampled ones take
	 * its stack id): it may fill the ring up to half, not a quarter,
	 * and wakes the agent, so that a program's first burst of launches
	 * is not left to the frame-pointer walk. */
	__u64 limit = path == PATH_CUDA ? 2 * ring_wake_bytes : ring_wake_bytes;
	if (bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >= limit) {
		count(ONCPU_STAT_RAW_SKIPPED, 1);
		return false;
	}
	struct oncpu_raw_sample *r = bpf_ringbuf_reserve(&samples, sizeof(*r), 0);
	if (!r) {
		count(ONCPU_STAT_RAW_SKIPPED, 1);
		return false;
	}
	/* A launch in a Python process: its Python frames, which the agent
	 * cannot read later (the thread has moved on by then), in place of
	 * the frame-pointer walk. */
	sc->s.flags = ONCPU_F_RAW_STACK;
	if (path == PATH_CUDA)
		cuda_raw_python(); /* no branch on its answer here: the verifier
				      walks the rest once */
	bpf_probe_read_kernel(&r->s, sizeof(r->s), &sc->s);
	sc->s.flags = 0;
	r->raw.pc = sc->regs0.pc;
	r->raw.sp = sc->regs0.sp;
	r->raw.bp = sc->regs0.bp;
	r->raw.exact = sc->regs0.exact;
	/* From SP up to the process's initial stack pointer (mm->start_stack,
	 * where argc is: the outermost frame is below it, its arguments and
	 * environment above it are not copied) when SP is on the main thread's
	 * stack, else ONCPU_RAW_STACK_MAX bytes, or a quarter, or a sixteenth
	 * when that much is not mapped. */
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 sp = sc->regs0.sp, top = BPF_CORE_READ(task, mm, start_stack) + 8;
	__u64 n = ONCPU_RAW_STACK_MAX;
	if (top > sp && top - sp < n)
		n = top - sp;
	__u32 len = 0;
	for (int i = 0; i < 3; i++) {
		asm volatile("" : "+r"(n));
		if (n == 0 || n > ONCPU_RAW_STACK_MAX)
			break;
		if (bpf_probe_read_user(r->raw.bytes, n, (const void *)sp) == 0) {
			len = (__u32)n;
			break;
		}
		n >>= 2;
	}
	r->raw.len = len;
	bpf_ringbuf_submit(r, sc->wake || path == PATH_CUDA ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	count(path == PATH_OFF ? ONCPU_STAT_OFFCPU_SAMPLES :
	      path == PATH_CUDA ? ONCPU_STAT_CUDA_STACKS : ONCPU_STAT_SAMPLES, 1);
	count(ONCPU_STAT_RAW_STACKS, 1);
	if (path == PATH_OFF) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		if (bpf_map_delete_elem(&offcpu_scratch, &tid) == 0)
			__sync_fetch_and_add(&offcpu_pending, -1);
	}
	return true;
}

static __always_inline void stop_unwind(struct scratch *sc, int err, const int off)
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
	/* A walk that broke in a process started moments ago most likely met
	 * a table still being built (the first runs of a new compiler) or a
	 * library mapped since the agent read the process: its raw stack
	 * goes too, for the agent to unwind again once it has them. So does
	 * one that ended quietly after following a frame pointer through a
	 * file whose table was not loaded yet (a zero frame pointer there
	 * is as likely a register in use as the outermost frame). Only
	 * then, never for a stack unwound by its tables. */
	if (((err > 0 && err != UWE_TRUNCATED) || (err == 0 && sc->regs.no_table)) &&
	    bpf_ktime_get_boot_ns() - sc->s.proc_start_ns < RAW_YOUNG_NS && submit_raw(sc, off))
		return;
	submit(sc, off);
}

/* The body of the unwinder programs (oncpu_unwind, offcpu_unwind):
 * continues ember's unwinder from sc->regs, UNWIND_FRAMES_PER_PROG frames,
 * then a tail call into itself through progs (the caller's program
 * array). */
static __always_inline int unwind_body(void *ctx, struct scratch *sc, void *progs, const int off)
{
	__u32 pid = sc->s.pid;
	const struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &pid);
	if (!p) {
		stop_unwind(sc, UWE_NO_MAPPING, off);
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
			stop_unwind(sc, UWE_TRUNCATED, off);
			return 0;
		}
		__u32 idx = nk + nu;
		if (idx >= ONCPU_MAX_FRAMES) {
			stop_unwind(sc, UWE_TRUNCATED, off);
			return 0;
		}
		bool native = true, on_stack = py && (py->off.flags & PY_F_ENTRY_ON_STACK);
		__u64 pc = sc->regs.pc;
		if (on_stack && !sc->py_started && sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
			/* Find the thread's frames and the first marker. */
			sc->tail_calls++;
			bpf_tail_call(ctx, progs, PROG_PYTHON);
		}
		if (py && !on_stack && ((pc >= py->eval_lo && pc < py->eval_hi) ||
					(pc >= py->cold_lo && pc < py->cold_hi))) {
			/* The interpreter loop: its Python frames instead, once. */
			if (!sc->py_visited && sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
				sc->py_visited = 1;
				sc->tail_calls++;
				bpf_tail_call(ctx, progs, PROG_PYTHON);
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
			stop_unwind(sc, rc < 0 ? -rc : 0, off);
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
			bpf_tail_call(ctx, progs, PROG_PYTHON);
		}
	}
	if (++sc->tail_calls > UNWIND_MAX_TAIL_CALLS) {
		stop_unwind(sc, UWE_TRUNCATED, off);
		return 0;
	}
	count(ONCPU_STAT_TAIL_CALLS, 1);
	bpf_tail_call(ctx, progs, PROG_UNWIND);
	stop_unwind(sc, UWE_TRUNCATED, off); /* the tail call failed */
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

/* The launching thread's Python frames, all its invocations'
 * (ONCPU_RAW_PY_FRAMES at most), into the frame slots of the launch record
 * in cuda_scratch, flagged ONCPU_F_RAW_PYTHON (oncpu_types.h), before
 * submit_raw copies it: returns how many slots, 0 (the record untouched) when the
 * process runs no Python ember knows, a layout that marks invocations on
 * the native stack (PY_F_ENTRY_ON_STACK, 3.12+), or no frame could be
 * read. A global function: verified once, not once per inlined copy of
 * submit_raw. */
__noinline int cuda_raw_python(void)
{
	__u32 zero = 0;
	struct scratch *sc = bpf_map_lookup_elem(&cuda_scratch, &zero);
	if (!sc)
		return 0;
	__u32 pid = sc->s.pid;
	const struct py_proc *py = bpf_map_lookup_elem(&py_procs, &pid);
	if (!py || py->start_ticks != sc->s.proc_start_ns / ns_per_tick ||
	    (py->exec_id != sc->s.exec_id && py->exec_id != UNWIND_EXEC_ANY) ||
	    (py->off.flags & PY_F_ENTRY_ON_STACK))
		return 0;
	__u64 f = py_current_frame(py, sc->s.tid);
	__u32 n = 0;
	/* Two slots a frame, always: the walk's states stay few. */
	for (__u32 i = 0; i < ONCPU_RAW_PY_FRAMES; i++) {
		__u64 code = 0, instr = 0, prev = 0, qualname = 0, at = 0, end = 0;
		if (!f)
			break;
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
			__u64 first = code + py->off.code_adaptive;
			if (instr > first)
				at = (instr - first) / 2;
			__u8 is_entry = 0;
			if (py->off.frame_is_entry != PY_NO_FIELD &&
			    bpf_probe_read_user(&is_entry, 1, (const void *)(f + py->off.frame_is_entry)))
				break;
			if (is_entry)
				end = ONCPU_RAW_PY_END;
		}
		if (at > PY_FRAME_INSTR_MAX)
			at = PY_FRAME_INSTR_MAX;
		__u32 k = 2 * i;
		asm volatile("" : "+r"(k));
		sc->s.frames[k & FRAME_INDEX_MASK] = PY_FRAME_FLAG | at << PY_FRAME_INSTR_SHIFT | (code & PY_FRAME_ADDR_MASK);
		k = 2 * i + 1;
		asm volatile("" : "+r"(k));
		sc->s.frames[k & FRAME_INDEX_MASK] = (qualname & PY_FRAME_ADDR_MASK) | end;
		n = 2 * i + 2;
		f = prev;
	}
	if (n == 0)
		return 0;
	sc->s.kstack_len = 0;
	sc->s.ustack_len = (__s32)n;
	sc->s.flags |= ONCPU_F_RAW_PYTHON;
	return (int)n;
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

/* The body of the Python walker programs (oncpu_python, offcpu_python):
 * writes the Python frames of one invocation of the interpreter loop (the
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
	if (sc->py_frame && sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS) {
		sc->tail_calls++;
		bpf_tail_call(ctx, progs, PROG_PYTHON);
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
		bpf_tail_call(ctx, progs, PROG_PYTHON);
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
	bpf_tail_call(ctx, progs, PROG_UNWIND);
	stop_unwind(sc, UWE_TRUNCATED, off); /* the tail call failed */
	return 0;
}

/* The registers of a thread in the kernel: those saved when it entered it
 * (system call, interrupt, fault). 0 when there are none: a kernel
 * thread, or a kernel without bpf_task_pt_regs. */
static __always_inline int entry_regs(struct unwind_regs *r)
{
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
	return entry_regs(r);
}

/* Fills the record's header for the current thread and its kernel stack;
 * returns the number of kernel frames. */
/* The record's header for thread tid of process pid (task), before any
 * frame: both samplers' records start the same way. */
static __always_inline void fill_header(struct oncpu_sample *s, struct task_struct *task,
					__u32 pid, __u32 tid, __u64 now, __u32 kind, __u64 value)
{
	s->ktime_ns = now;
	s->proc_start_ns = BPF_CORE_READ(task, group_leader, start_boottime);
	s->exec_id = BPF_CORE_READ(task, group_leader, self_exec_id);
	s->value = value;
	s->pid = pid;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->unwind_mode = UWM_NONE;
	s->unwind_error = UWE_NONE;
	s->kind = kind;
	s->arg = 0;
	s->flags = 0;
	s->ustack_len = 0;
}

/* A new walk of the user stack: no tail call made, no Python frame seen. */
static __always_inline void reset_walk(struct scratch *sc)
{
	sc->tail_calls = 0;
	sc->wake = 0;
	sc->py_frame = 0;
	sc->py_scan = 0;
	sc->py_marker = 0;
	sc->py_started = 0;
	sc->py_visited = 0;
	sc->py_emitted = 0;
}

static __always_inline __u32 begin_sample(void *ctx, struct scratch *sc, __u64 now, __u32 kind,
					  __u64 value)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct oncpu_sample *s = &sc->s;
	fill_header(s, (struct task_struct *)bpf_get_current_task(), id >> 32, (__u32)id, now, kind,
		    value);
	reset_walk(sc);
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
	return nk;
}

/* Takes the user stack from sc->regs (has_regs = 0: none, a kernel
 * thread) and sends the record: ember's unwinder through progs for a
 * process the agent has described, else the kernel's frame-pointer walk. */
static __always_inline int finish_sample(void *ctx, struct scratch *sc, __u32 nk, int has_regs,
					 void *progs, const int off)
{
	struct oncpu_sample *s = &sc->s;
	if (!has_regs) {
		submit(sc, off); /* a kernel thread: no user stack */
		return 0;
	}
	sc->regs.no_table = 0;
	sc->regs0 = sc->regs;
	__u32 tgid = s->pid;
	const struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &tgid);
	if (p && p->start_ticks == s->proc_start_ns / ns_per_tick &&
	    (p->exec_id == s->exec_id || p->exec_id == UNWIND_EXEC_ANY)) {
		s->unwind_mode = UWM_CFI;
		count(ONCPU_STAT_CFI, 1);
		bpf_tail_call(ctx, progs, PROG_UNWIND);
		/* Tail call failed: fall back to the kernel's walk below. */
		s->unwind_mode = UWM_NONE;
	}
	/* Not described yet (or the pid was reused, or the process exec'd
	 * since): the kernel's frame-pointer walk, until the agent has read
	 * the process — which this sample asks it to do now — and the raw
	 * stack, for the agent to unwind by CFI once it has (submit_raw). */
	s->unwind_mode = UWM_KERNEL_FP;
	count(ONCPU_STAT_KERNEL_FP, 1);
	wake_agent(sc);
	/* Masked: the compiler drops the mask where it knows nk's bound,
	 * which the verifier may not. */
	asm volatile("" : "+r"(nk));
	long un = bpf_get_stack(ctx, &s->frames[nk & 127], ONCPU_MAX_KFRAMES * sizeof(__u64),
				BPF_F_USER_STACK);
	if (un < 0) {
		count(ONCPU_STAT_USTACK_ERR, 1);
		s->ustack_len = (__s32)un;
	} else {
		__u32 nu = (__u32)un / sizeof(__u64);
		s->ustack_len = (__s32)(nu > ONCPU_MAX_KFRAMES ? ONCPU_MAX_KFRAMES : nu);
	}
	if (!submit_raw(sc, off))
		submit(sc, off);
	return 0;
}

/* --- on-CPU: the cpu-clock perf event -------------------------------- */

/* The on-CPU programs' scratch record: this CPU's. */
static __always_inline struct scratch *cpu_scratch(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&scratch, &zero);
}

/* The on-CPU sampler's tail-call targets (unwind_progs: PROG_UNWIND,
 * PROG_PYTHON). */
SEC("perf_event")
int oncpu_unwind(struct bpf_perf_event_data *ctx)
{
	struct scratch *sc = cpu_scratch();
	return sc ? unwind_body(ctx, sc, &unwind_progs, PATH_ON) : 0;
}

SEC("perf_event")
int oncpu_python(struct bpf_perf_event_data *ctx)
{
	struct scratch *sc = cpu_scratch();
	return sc ? python_body(ctx, sc, &unwind_progs, PATH_ON) : 0;
}

/* At every cpu-clock tick: the stacks of the interrupted thread, as one
 * on-CPU sample (the idle task is only counted). */
SEC("perf_event")
int oncpu_sample(struct bpf_perf_event_data *ctx)
{
	if ((__u32)bpf_get_current_pid_tgid() == 0) {
		count(ONCPU_STAT_IDLE, 1);
		return 0;
	}
	struct scratch *sc = cpu_scratch();
	if (!sc)
		return 0;
	__u32 nk = begin_sample(ctx, sc, bpf_ktime_get_ns(), ONCPU_KIND_ON_CPU, 1);
	int has_regs = user_regs(ctx, &sc->regs);
	return finish_sample(ctx, sc, nk, has_regs, &unwind_progs, PATH_ON);
}

/* --- off-CPU: tp_btf/sched_switch and tp_btf/sys_exit ---------------- */

#define PF_IO_WORKER 0x00000010

/* Whether thread t is inside the body of a system call: its registers
 * saved at kernel entry hold the call's number in orig_ax (-1 for
 * interrupts and exceptions, whose entry code overwrites the error code
 * there), and ax still holds the -ENOSYS the entry code put there until
 * the call returns (x86-64). A thread rescheduled after its call returned,
 * on its way back to user space, is not: its sys_exit has already run. */
static __always_inline bool in_syscall(struct task_struct *t)
{
	/* A BTF pointer: plain loads, cheaper than BPF_CORE_READ's helper
	 * calls at every context switch. */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	return regs && (long)regs->orig_ax >= 0 && (long)regs->ax == -38 /* -ENOSYS */;
}

/* Starts the off-CPU record of next, whose wait was picked: the header and
 * the kernel stack it waited with (next is not running yet, its kernel
 * stack is still; the kernel's walk of a sleeping task leaves out the
 * scheduler's own functions). offcpu_sample adds the user stack in next's
 * own context, at the exit of the system call it waited in. A second wait
 * picked in the same system call adds its value to that record. */
static __always_inline void offcpu_begin(struct task_struct *next, __u32 tid, __u64 now,
					 __u64 value)
{
	struct scratch *sc = bpf_map_lookup_elem(&offcpu_scratch, &tid);
	if (sc && sc->s.ktime_ns >= offcpu_since_ns) {
		__u64 v = sc->s.value + value;
		sc->s.value = v < OFFCPU_MAX_VALUE_NS ? v : OFFCPU_MAX_VALUE_NS;
		return;
	}
	/* None, or one left from before sampling was last switched on (its
	 * system call returned unseen): a new one, built here and copied in. */
	bool replaces = sc != NULL;
	__u32 zero = 0;
	sc = bpf_map_lookup_elem(&offcpu_stage, &zero);
	if (!sc)
		return;
	struct oncpu_sample *s = &sc->s;
	fill_header(s, next, next->tgid, next->pid, now, ONCPU_KIND_OFF_CPU,
		    value < OFFCPU_MAX_VALUE_NS ? value : OFFCPU_MAX_VALUE_NS);
	bpf_probe_read_kernel(s->comm, sizeof(s->comm), next->comm);
	long kn = bpf_get_task_stack(next, s->frames, ONCPU_MAX_KFRAMES * sizeof(__u64), 0);
	if (kn < 0) {
		count(ONCPU_STAT_KSTACK_ERR, 1);
		s->kstack_len = (__s32)kn;
	} else {
		__u32 nk = (__u32)kn / sizeof(__u64);
		s->kstack_len = (__s32)(nk > ONCPU_MAX_KFRAMES ? ONCPU_MAX_KFRAMES : nk);
	}
	if (bpf_map_update_elem(&offcpu_scratch, &tid, sc, BPF_ANY) != 0) {
		count(ONCPU_STAT_OFFCPU_NO_SCRATCH, 1);
		return;
	}
	if (!replaces)
		__sync_fetch_and_add(&offcpu_pending, 1);
}

/* At every context switch (interrupts off, the run queue locked: keep it
 * short). prev, a user thread that gives up the CPU itself inside a
 * system call (it blocks, or yields), gets its switch-out time. next, if
 * it has one, has waited now - start: the wait is picked for sampling with
 * probability min(1, wait / offcpu_period_ns), and a picked one stands
 * for max(wait, offcpu_period_ns) nanoseconds, so the expected sum of the
 * samples is the time spent waiting. Not timed: waits outside system
 * calls (page faults, preemption on the way back to user space) and
 * preemption inside the kernel (preempt = true), which no hook here sees
 * end in the thread's own context. */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *start;
	if (!preempt && prev->pid && !(prev->flags & (PF_KTHREAD | PF_IO_WORKER)) && in_syscall(prev)) {
		start = bpf_task_storage_get(&offcpu_waits, prev, 0, 0);
		if (start)
			*start = now;
	}
	if (!next->pid || (next->flags & (PF_KTHREAD | PF_IO_WORKER)))
		return 0;
	start = bpf_task_storage_get(&offcpu_waits, next, 0, 0);
	if (!start || !*start)
		return 0;
	__u64 t = *start;
	*start = 0;
	__u32 tid = next->pid;
	if (t < offcpu_since_ns || t >= now)
		return 0;
	__u64 wait = now - t, period = offcpu_period_ns;
	count(ONCPU_STAT_OFFCPU_WAITS, 1);
	if (wait < period) {
		/* wait < period <= 1e9 < 2^30: the shift cannot overflow. */
		if ((__u64)bpf_get_prandom_u32() >= (wait << 32) / period)
			return 0;
		wait = period;
	}
	count(ONCPU_STAT_OFFCPU_SAMPLED, 1);
	offcpu_begin(next, tid, now, wait);
	return 0;
}

/* The off-CPU programs' scratch record: the current thread's. */
static __always_inline struct scratch *thread_scratch(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	return bpf_map_lookup_elem(&offcpu_scratch, &tid);
}

/* The off-CPU sampler's tail-call targets (offcpu_progs: PROG_UNWIND,
 * PROG_PYTHON): loaded as tp_btf/sys_exit programs, like their caller
 * offcpu_sample, and never attached. */
SEC("tp_btf/sys_exit")
int offcpu_unwind(__u64 *ctx)
{
	struct scratch *sc = thread_scratch();
	return sc ? unwind_body(ctx, sc, &offcpu_progs, PATH_OFF) : 0;
}

SEC("tp_btf/sys_exit")
int offcpu_python(__u64 *ctx)
{
	struct scratch *sc = thread_scratch();
	return sc ? python_body(ctx, sc, &offcpu_progs, PATH_OFF) : 0;
}

/* At every system call's exit, in the calling thread: a thread with a
 * record started at its switch-in (offcpu_begin) is back from the system
 * call it waited in, with its user stack as it was while it waited. The
 * stack is taken as the on-CPU sampler takes it and the record sent. */
SEC("tp_btf/sys_exit")
int BPF_PROG(offcpu_sample, struct pt_regs *regs, long ret)
{
	if (!offcpu_pending)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct scratch *sc = bpf_map_lookup_elem(&offcpu_scratch, &tid);
	if (!sc)
		return 0;
	/* Started before sampling was last switched on (its system call may
	 * have returned unseen since), or before an exec: not this call's. */
	struct task_struct *task = bpf_get_current_task_btf();
	if (sc->s.ktime_ns < offcpu_since_ns ||
	    sc->s.exec_id != BPF_CORE_READ(task, group_leader, self_exec_id)) {
		if (bpf_map_delete_elem(&offcpu_scratch, &tid) == 0)
			__sync_fetch_and_add(&offcpu_pending, -1);
		return 0;
	}
	sc->regs.pc = BPF_CORE_READ(regs, ip);
	sc->regs.sp = BPF_CORE_READ(regs, sp);
	sc->regs.bp = BPF_CORE_READ(regs, bp);
	sc->regs.exact = 0; /* the instruction after the system call */
	reset_walk(sc);
	__u32 nk = sc->s.kstack_len > 0 ? (__u32)sc->s.kstack_len : 0;
	if (nk > ONCPU_MAX_KFRAMES)
		nk = ONCPU_MAX_KFRAMES;
	return finish_sample(ctx, sc, nk, sc->regs.pc != 0, &offcpu_progs, PATH_OFF);
}

/* A thread that exits inside the system call it waited in (exit_group)
 * never reaches its exit hook: its record is dropped here, out of the
 * count of pending ones, and its thread id forgotten (ids are reused). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(offcpu_exit, struct task_struct *p)
{
	__u32 tid = p->pid;
	if (offcpu_pending && bpf_map_delete_elem(&offcpu_scratch, &tid) == 0)
		__sync_fetch_and_add(&offcpu_pending, -1);
	return 0;
}

/* Gives a user thread its offcpu_waits slot. */
static __always_inline void offcpu_adopt(struct task_struct *t)
{
	if (t->pid && !(t->flags & (PF_KTHREAD | PF_IO_WORKER)))
		bpf_task_storage_get(&offcpu_waits, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* Every new thread or process, in its parent, before it first runs. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(offcpu_fork, struct task_struct *parent, struct task_struct *child)
{
	offcpu_adopt(child);
	return 0;
}

/* Every thread there is, once, when the agent starts off-CPU sampling
 * (after attaching offcpu_fork, so none is missed). */
SEC("iter/task")
int offcpu_threads(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	if (t)
		offcpu_adopt(t);
	return 0;
}

/* --- CUDA launch stacks: the uprobe on ember_cuda_launch_marker -------- */

/* libembercuda.so calls void ember_cuda_launch_marker(uint64_t stack_id,
 * uint32_t kind) on the launching thread at each launch it picked for a
 * stack (lib/cuda_wire.h). The agent attaches cuda_marker to it in every
 * copy of the library it finds mapped; the program takes the thread's
 * user stack exactly as the on-CPU sampler does (ember's unwinder through
 * cuda_progs, Python frames included; for a process not described yet,
 * or a young one whose walk broke, the raw stack too, for the agent to
 * unwind) and sends it as an ONCPU_KIND_CUDA_LAUNCH record. There is no
 * kernel stack: the thread is in user space. */
static __always_inline struct scratch *launch_scratch(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cuda_scratch, &zero);
}

/* The CUDA launch path's tail-call targets (cuda_progs): loaded as uprobe
 * programs, like their caller, and never attached. */
SEC("uprobe")
int cuda_unwind(struct pt_regs *ctx)
{
	struct scratch *sc = launch_scratch();
	return sc ? unwind_body(ctx, sc, &cuda_progs, PATH_CUDA) : 0;
}

SEC("uprobe")
int cuda_python(struct pt_regs *ctx)
{
	struct scratch *sc = launch_scratch();
	return sc ? python_body(ctx, sc, &cuda_progs, PATH_CUDA) : 0;
}

SEC("uprobe")
int cuda_marker(struct pt_regs *ctx)
{
	count(ONCPU_STAT_CUDA_HITS, 1);
	struct scratch *sc = launch_scratch();
	if (!sc)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	struct oncpu_sample *s = &sc->s;
	fill_header(s, (struct task_struct *)bpf_get_current_task(), id >> 32, (__u32)id,
		    bpf_ktime_get_ns(), ONCPU_KIND_CUDA_LAUNCH, PT_REGS_PARM1(ctx));
	s->arg = (__u32)PT_REGS_PARM2(ctx);
	s->kstack_len = 0;
	reset_walk(sc);
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	/* At the function's first instruction: the exact pc. */
	sc->regs.pc = PT_REGS_IP(ctx);
	sc->regs.sp = PT_REGS_SP(ctx);
	sc->regs.bp = PT_REGS_FP(ctx);
	sc->regs.exact = 1;
	return finish_sample(ctx, sc, 0, 1, &cuda_progs, PATH_CUDA);
}
