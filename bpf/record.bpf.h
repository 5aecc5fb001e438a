/* record.bpf.h - a sample's record from start to ring buffer, shared by
 * the samplers (oncpu.bpf.c, offcpu.bpf.c, cuda.bpf.c) and the walkers
 * they tail-call (unwind.bpf.c, python.bpf.c): the header, the kernel
 * stack, the start of the user stack's walk (ember's unwinder or the
 * kernel's frame-pointer walk), and sending the record, raw or unwound.
 * Every function is static __always_inline: each program has its own
 * copy, specialised by its path (PATH_ON, PATH_OFF, PATH_CUDA, a
 * constant), so a program refers only to its own path's maps. */
#ifndef EMBER_BPF_RECORD_BPF_H
#define EMBER_BPF_RECORD_BPF_H

#include "maps.bpf.h"

/* Samples wait in the ring buffer until the agent's next drain (1 s),
 * except a sample of a process the agent has not described yet (or whose
 * description lacks a mapping the stack went through): that one wakes it
 * at once, so it reads the process and its next stacks are unwound by CFI
 * within milliseconds instead of a whole drain interval. A sample that
 * finds the ring buffer a quarter full wakes it too (ring_wake_bytes).
 * At most one forced wakeup per CPU per WAKE_MIN_NS, whatever happens. */
#define WAKE_MIN_NS 10000000ull

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

/* The Python frames of a record sent raw, one global function per path
 * (python.bpf.c). */
__noinline int raw_python_on(void);
__noinline int raw_python_off(void);
__noinline int raw_python_cuda(void);

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
	/* A Python process: its Python frames, which the agent cannot read
	 * later (the thread has moved on by then), after the user frames.
	 * No branch on the answer here: the verifier walks the rest once. */
	sc->s.flags = ONCPU_F_RAW_STACK;
	sc->s.raw_py = 0;
	if (path == PATH_CUDA)
		raw_python_cuda();
	else if (path == PATH_OFF)
		raw_python_off();
	else
		raw_python_on();
	bpf_probe_read_kernel(&r->s, sizeof(r->s), &sc->s);
	sc->s.flags = 0;
	sc->s.raw_py = 0;
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
	 * is as likely a register in use as the outermost frame). At any
	 * age when the walk passed a table the agent is building (a busy
	 * agent takes longer than RAW_YOUNG_NS over a large library). Only
	 * then, never for a stack unwound by its tables. */
	if (((err > 0 && err != UWE_TRUNCATED) || (err == 0 && sc->regs.no_table)) &&
	    ((sc->regs.no_table & UW_TABLE_PENDING) ||
	     bpf_ktime_get_boot_ns() - sc->s.proc_start_ns < RAW_YOUNG_NS) &&
	    submit_raw(sc, off))
		return;
	submit(sc, off);
}

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
	s->raw_py = 0;
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

/* Notes the kernel stack the kernel's walk wrote into the record's frames
 * (kn: its bytes, or < 0: an error, counted); returns its frames. */
static __always_inline __u32 set_kstack_len(struct oncpu_sample *s, long kn)
{
	if (kn < 0) {
		count(ONCPU_STAT_KSTACK_ERR, 1);
		s->kstack_len = (__s32)kn;
		return 0;
	}
	__u32 nk = (__u32)kn / sizeof(__u64);
	if (nk > ONCPU_MAX_KFRAMES)
		nk = ONCPU_MAX_KFRAMES;
	s->kstack_len = (__s32)nk;
	return nk;
}

/* Fills the record's header for the current thread and its kernel stack;
 * returns the number of kernel frames. */
static __always_inline __u32 begin_sample(void *ctx, struct scratch *sc, __u64 now, __u32 kind,
					  __u64 value)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct oncpu_sample *s = &sc->s;
	fill_header(s, (struct task_struct *)bpf_get_current_task(), id >> 32, (__u32)id, now, kind,
		    value);
	reset_walk(sc);
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	return set_kstack_len(s, bpf_get_stack(ctx, s->frames, ONCPU_MAX_KFRAMES * sizeof(__u64), 0));
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

/* The scratch record of each path's walk, for the programs it
 * tail-calls. The on-CPU path's: this CPU's. */
static __always_inline struct scratch *cpu_scratch(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&scratch, &zero);
}

/* The off-CPU programs' scratch record: the current thread's. */
static __always_inline struct scratch *thread_scratch(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	return bpf_map_lookup_elem(&offcpu_scratch, &tid);
}

/* The CUDA launch path's: this CPU's (cuda_scratch). */
static __always_inline struct scratch *launch_scratch(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cuda_scratch, &zero);
}

/* The programs of a walker (unwind.bpf.c, python.bpf.c), one per path,
 * each running body(ctx, its path's scratch record, its path's tail-call
 * array, its path): tail calls only reach programs of the caller's type
 * (and, for tracing programs, of its attach target). For name unwind:
 * oncpu_unwind (perf_event, in unwind_progs), offcpu_unwind
 * (tp_btf/sys_exit, in offcpu_progs) and cuda_unwind (uprobe, in
 * cuda_progs); the last two are loaded like their callers, offcpu_sample
 * and cuda_marker, and never attached. */
#define WALKER_PROGRAMS(name, body)                                          \
	SEC("perf_event")                                                    \
	int oncpu_##name(struct bpf_perf_event_data *ctx)                    \
	{                                                                    \
		struct scratch *sc = cpu_scratch();                          \
		return sc ? body(ctx, sc, &unwind_progs, PATH_ON) : 0;       \
	}                                                                    \
	SEC("tp_btf/sys_exit")                                               \
	int offcpu_##name(__u64 *ctx)                                        \
	{                                                                    \
		struct scratch *sc = thread_scratch();                       \
		return sc ? body(ctx, sc, &offcpu_progs, PATH_OFF) : 0;      \
	}                                                                    \
	SEC("uprobe")                                                        \
	int cuda_##name(struct pt_regs *ctx)                                 \
	{                                                                    \
		struct scratch *sc = launch_scratch();                       \
		return sc ? body(ctx, sc, &cuda_progs, PATH_CUDA) : 0;       \
	}

#endif
