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
 * yet (their first samples) use the kernel's frame-pointer walk. No
 * aggregation happens here: user space deduplicates. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "oncpu_types.h"
#include "unwind_types.h"

char LICENSE[] SEC("license") = "GPL";

#define UNWIND_FRAMES_PER_PROG 16
#define UNWIND_MAX_TAIL_CALLS 26 /* the kernel allows 33 */
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
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwind_progs SEC(".maps");

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
		sc->s.frames[idx] = sc->regs.pc;
		sc->s.ustack_len = (__s32)(nu + 1);
		count(ONCPU_STAT_CFI_FRAMES, 1);
		int rc = uw_step(p, pid, &sc->regs);
		if (rc != UW_CONTINUE) {
			stop_unwind(sc, rc < 0 ? -rc : 0);
			return 0;
		}
	}
	if (++sc->tail_calls > UNWIND_MAX_TAIL_CALLS) {
		stop_unwind(sc, UWE_TRUNCATED);
		return 0;
	}
	count(ONCPU_STAT_TAIL_CALLS, 1);
	bpf_tail_call(ctx, &unwind_progs, 0);
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
