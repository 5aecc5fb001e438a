// SPDX-License-Identifier: GPL-2.0
/* oncpu.bpf.c - on-CPU sampling: runs on every tick of the per-CPU
 * cpu-clock perf event the agent opens, captures the kernel and user
 * stacks of the interrupted thread and sends them through a ring buffer.
 *
 * User stacks are walked by the kernel's frame-pointer unwinder
 * (bpf_get_stack with BPF_F_USER_STACK); the unwinding issue replaces it
 * with ember's own unwinder. No aggregation happens here: user space
 * deduplicates, which keeps kernel memory small and the program simple. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "oncpu_types.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by the agent before load */
} samples SEC(".maps");

/* Per-CPU scratch record: far too large for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct oncpu_sample);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ONCPU_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} oncpu_stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *v = bpf_map_lookup_elem(&oncpu_stats, &stat);
	if (v)
		*v += 1;
}

SEC("perf_event")
int oncpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	__u32 zero = 0;

	if (tid == 0) {
		count(ONCPU_STAT_IDLE);
		return 0;
	}
	struct oncpu_sample *s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 0;
	s->ktime_ns = bpf_ktime_get_ns();
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	s->proc_start_ns = BPF_CORE_READ(task, group_leader, start_boottime);
	s->pid = tgid;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->flags = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	long un = bpf_get_stack(ctx, s->frames, ONCPU_MAX_FRAMES * sizeof(__u64),
				BPF_F_USER_STACK);
	__u32 nu = 0;
	if (un < 0) {
		count(ONCPU_STAT_USTACK_ERR);
		s->ustack_len = (__s32)un;
	} else {
		nu = (__u32)un / sizeof(__u64);
		if (nu > ONCPU_MAX_FRAMES)
			nu = ONCPU_MAX_FRAMES;
		s->ustack_len = (__s32)nu;
	}
	long kn = bpf_get_stack(ctx, &s->frames[nu & 127], ONCPU_MAX_FRAMES * sizeof(__u64), 0);
	__u32 nk = 0;
	if (kn < 0) {
		count(ONCPU_STAT_KSTACK_ERR);
		s->kstack_len = (__s32)kn;
	} else {
		nk = (__u32)kn / sizeof(__u64);
		if (nk > ONCPU_MAX_FRAMES)
			nk = ONCPU_MAX_FRAMES;
		s->kstack_len = (__s32)nk;
	}
	__u64 size = ONCPU_HDR_SIZE + (__u64)((nu & 127) + (nk & 127)) * sizeof(__u64);
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (bpf_ringbuf_output(&samples, s, size, BPF_RB_NO_WAKEUP) < 0) {
		count(ONCPU_STAT_RB_FULL);
		return 0;
	}
	count(ONCPU_STAT_SAMPLES);
	return 0;
}
