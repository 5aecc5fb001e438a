// SPDX-License-Identifier: GPL-2.0
/* oncpu.bpf.c - on-CPU sampling: runs on every tick of the per-CPU
 * cpu-clock perf event the agent opens (agent/oncpu.c), captures the
 * kernel stack and the user stack of the interrupted thread and sends them
 * through the ring buffer (record.bpf.h).
 *
 * User stacks of processes the agent has described (unwind_procs) are
 * unwound by ember's own unwinder from DWARF call-frame tables
 * (unwind.bpf.c, tail-called through unwind_progs); so code without frame
 * pointers unwinds, and stacks deeper than the kernel's 127-frame limit
 * survive. Processes not described yet (their first samples) use the
 * kernel's frame-pointer walk, and send their raw stack along for the
 * agent to unwind by CFI once it has read them (submit_raw; so does a
 * young process whose walk broke). In a Python process (py_procs), each
 * native frame of the interpreter loop is replaced by the Python frames it
 * runs (python.bpf.c). No aggregation happens here: user space
 * deduplicates. The other samplers linked with it: off-CPU waits
 * (offcpu.bpf.c) and CUDA launch stacks (cuda.bpf.c). */
#include "record.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the agent before load. */
const volatile __u64 ns_per_tick = 10000000; /* 1e9 / USER_HZ */
const volatile __u32 has_task_pt_regs = 1;   /* bpf_task_pt_regs exists (Linux >= 5.15) */
/* A sample that finds this many bytes waiting in the ring buffer (a
 * quarter of it) wakes the agent, so a burst is drained before the ring
 * fills, however long the agent sleeps between drains (record.bpf.h). */
const volatile __u64 ring_wake_bytes = 1 << 18;

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
