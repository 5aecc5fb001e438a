// SPDX-License-Identifier: GPL-2.0
/* offcpu.bpf.c - off-CPU sampling (-enable-off-cpu; agent/offcpu.c):
 * tp_btf/sched_switch times how long each user thread stays switched out
 * inside a system call, picks waits to sample with a probability
 * proportional to their length and takes a picked thread's kernel stack
 * as it switches in; tp_btf/sys_exit, in that thread, adds its user stack
 * the same way as the on-CPU sampler (record.bpf.h; the unwinder and the
 * Python walker tail-called through offcpu_progs) and sends the record
 * (see "Off-CPU" in docs/internals/agent.md). */
#include "record.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the agent before load. */
const volatile __u64 offcpu_period_ns = 52631578; /* 1e9 / -off-cpu-sampling-rate */
/* Written by the agent while the programs run (the .bss map is mmap'd):
 * waits that began before it are not measured (off-CPU sampling was off
 * then, so their start times are stale). */
volatile __u64 offcpu_since_ns;
/* Off-CPU records started and not yet sent or dropped (offcpu_begin,
 * offcpu_sample; submit in record.bpf.h): while 0, as it nearly always
 * is, the system-call exit hook returns at once. A record dropped with its
 * thread leaves it above the truth, which costs a lookup per system call,
 * nothing else. */
__u64 offcpu_pending;

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
	set_kstack_len(s, bpf_get_task_stack(next, s->frames, ONCPU_MAX_KFRAMES * sizeof(__u64), 0));
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
