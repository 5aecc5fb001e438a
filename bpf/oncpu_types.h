/* oncpu_types.h - the record the on-CPU sampler (oncpu.bpf.c) sends to the
 * agent (agent/oncpu.c) through the ring buffer. Shared by both sides, so
 * it uses only fixed-width kernel types. */
#ifndef EMBER_BPF_ONCPU_TYPES_H
#define EMBER_BPF_ONCPU_TYPES_H

#define ONCPU_MAX_FRAMES 127 /* the kernel's perf_event_max_stack limit */
#define ONCPU_COMM_LEN 16

struct oncpu_sample {
	__u64 ktime_ns;
	__u64 proc_start_ns; /* boot-time start of the process, tells reused pids apart */
	__u32 pid;      /* thread group id */
	__u32 tid;
	__u32 cpu;
	__s32 ustack_len; /* frames, or a negative errno from bpf_get_stack */
	__s32 kstack_len;
	__u32 flags;
	char comm[ONCPU_COMM_LEN]; /* thread name */
	/* ustack_len user frames, then kstack_len kernel frames; each run is
	 * innermost (leaf) first. Only the used part is sent. */
	__u64 frames[2 * ONCPU_MAX_FRAMES];
};

#define ONCPU_HDR_SIZE (sizeof(struct oncpu_sample) - 2 * ONCPU_MAX_FRAMES * sizeof(__u64))

/* Indexes of the per-CPU counters the program keeps in oncpu_stats. */
enum oncpu_stat {
	ONCPU_STAT_SAMPLES = 0,   /* samples sent */
	ONCPU_STAT_IDLE,          /* interrupts that hit the idle task */
	ONCPU_STAT_RB_FULL,       /* samples lost: ring buffer full */
	ONCPU_STAT_USTACK_ERR,    /* user stack could not be read */
	ONCPU_STAT_KSTACK_ERR,    /* kernel stack could not be read */
	ONCPU_STAT_MAX,
};

#endif
