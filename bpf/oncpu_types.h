/* oncpu_types.h - the record the samplers (bpf/oncpu.bpf.c on-CPU,
 * offcpu.bpf.c off-CPU, cuda.bpf.c CUDA launches) send to the agent
 * (agent/oncpu.c) through the ring buffer.
 * Shared by both sides, so it uses only fixed-width kernel types. */
#ifndef EMBER_BPF_ONCPU_TYPES_H
#define EMBER_BPF_ONCPU_TYPES_H

#define ONCPU_MAX_KFRAMES 127 /* the kernel's perf_event_max_stack limit */
#define ONCPU_MAX_UFRAMES 384 /* ember's own unwinder goes deeper */
#define ONCPU_MAX_FRAMES (ONCPU_MAX_KFRAMES + ONCPU_MAX_UFRAMES)
#define ONCPU_COMM_LEN 16

/* What a record measures (struct oncpu_sample.kind); the values are
 * ember.ingest.v1.EventKind's (agent/batch.h enum event_kind). */
enum oncpu_kind {
	ONCPU_KIND_ON_CPU = 1,  /* value: 1 sample */
	ONCPU_KIND_OFF_CPU = 2, /* value: nanoseconds off CPU this sample stands for */
	/* Not a sample: the stack of a thread in libembercuda.so's
	 * ember_cuda_launch_marker (the uprobe cuda_marker). value: the
	 * marker's stack_id (the CUPTI correlation id), arg: its kind (enum
	 * cuda_wire_kind). The agent keeps it to join with the GPU time the
	 * library reports for that stack_id (agent/cuda.h). */
	ONCPU_KIND_CUDA_LAUNCH = 3,
};

/* Longest wait one off-CPU record may carry (a thread asleep for a day
 * wakes up once); the agent refuses larger values as malformed. */
#define OFFCPU_MAX_VALUE_NS (86400ull * 1000000000ull)

struct oncpu_sample {
	__u64 ktime_ns;
	__u64 proc_start_ns; /* boot-time start of the process, tells reused pids apart */
	__u64 exec_id;       /* the process's exec count (self_exec_id): an exec changes it */
	__u64 value;         /* 1 for on-CPU; nanoseconds for off-CPU (enum oncpu_kind) */
	__u32 pid;           /* thread group id */
	__u32 tid;
	__u32 cpu;
	__s32 kstack_len;    /* frames, or a negative errno from bpf_get_stack */
	__s32 ustack_len;    /* frames, or a negative errno */
	__u16 unwind_mode;   /* enum unwind_mode (unwind_types.h) */
	__u16 unwind_error;  /* enum unwind_error: why the user stack ended early */
	__u32 kind;          /* enum oncpu_kind */
	__u32 arg;           /* ONCPU_KIND_CUDA_LAUNCH: the launch's kind; else 0 */
	__u32 flags;         /* ONCPU_F_* */
	__u32 raw_py;        /* ONCPU_F_RAW_PYTHON: Python slots after the user frames; else 0 */
	char comm[ONCPU_COMM_LEN]; /* thread name */
	/* kstack_len kernel frames, then ustack_len user frames; each run is
	 * innermost (leaf) first. Only the used part is sent. */
	__u64 frames[ONCPU_MAX_FRAMES];
};

#define ONCPU_HDR_SIZE (sizeof(struct oncpu_sample) - ONCPU_MAX_FRAMES * sizeof(__u64))

/* oncpu_sample.flags */
#define ONCPU_F_RAW_STACK 1u /* the record is a struct oncpu_raw_sample */
/* Set by the agent, never by BPF: the agent unwound this record's user
 * stack from its raw bytes (agent/rawstack.h); its Python frames, if any,
 * are those BPF read at the launch (ONCPU_F_RAW_PYTHON), for the copy
 * holds none the agent could read later. */
#define ONCPU_F_UNWOUND_RAW 2u
/* A raw record of a Python process (any path): besides its frame-pointer
 * walk, the thread's Python frames when the sample was taken, which the
 * agent cannot read later (the thread has moved on by then). They follow
 * the walk's frames: frames[kstack_len + ustack_len ..] holds raw_py slots,
 * innermost first, as (frame, qualname) pairs like the walker's
 * (python_types.h). Up to 3.11, the qualname word of each interpreter
 * invocation's last (outermost) frame is or'd with ONCPU_RAW_PY_END, and
 * the agent puts each invocation's run in place of the interpreter-loop
 * frame it unwinds for it. 3.12+ (PY_F_ENTRY_ON_STACK): each invocation's
 * run is followed by the pair (address of its marker frame,
 * ONCPU_RAW_PY_MARKER), and its run takes the place of the native frame
 * whose stack [SP, CFA) holds that address, as in the BPF walk. */
#define ONCPU_F_RAW_PYTHON 4u
/* Set by the agent with ONCPU_F_UNWOUND_RAW: the stack runs the
 * interpreter loop, but the record brought no Python frame for it. */
#define ONCPU_F_PY_MISSING 8u
#define ONCPU_RAW_PY_END (1ull << 63)
#define ONCPU_RAW_PY_MARKER (1ull << 62)
/* The most Python slots (two a frame or marker) such a record carries. */
#define ONCPU_RAW_PY_SLOTS 128

/* Most bytes of user stack a raw record carries (from SP upwards). */
#define ONCPU_RAW_STACK_MAX 16384u

/* The registers and the raw bytes of a user stack, from SP up. */
struct oncpu_raw_stack {
	__u64 pc, sp, bp;
	__u32 exact; /* pc is the interrupted instruction, not a return address */
	__u32 len;   /* bytes of bytes[] copied from sp; 0: none could be read */
	__u8 bytes[ONCPU_RAW_STACK_MAX];
};

/* A sample of a process ember's unwinder did not know yet (unwind_mode
 * UWM_KERNEL_FP): the record as usual (all frame slots sent, the kernel's
 * frame-pointer walk in them), then the user registers and up to
 * ONCPU_RAW_STACK_MAX bytes of its stack, so that the agent can unwind it
 * with the call-frame tables once it has read the process
 * (agent/rawstack.h). Sent only while the ring buffer holds less than a
 * quarter of its size; always this size. */
struct oncpu_raw_sample {
	struct oncpu_sample s;
	struct oncpu_raw_stack raw;
};

/* Indexes of the per-CPU counters the programs keep in oncpu_stats. */
enum oncpu_stat {
	ONCPU_STAT_SAMPLES = 0,   /* samples sent */
	ONCPU_STAT_IDLE,          /* interrupts that hit the idle task */
	ONCPU_STAT_RB_FULL,       /* samples lost: ring buffer full */
	ONCPU_STAT_USTACK_ERR,    /* user stack could not be read by the kernel walker */
	ONCPU_STAT_KSTACK_ERR,    /* kernel stack could not be read */
	ONCPU_STAT_KERNEL_FP,     /* user stacks from the kernel's frame-pointer walk */
	ONCPU_STAT_CFI,           /* user stacks from ember's unwinder */
	ONCPU_STAT_CFI_FRAMES,    /* frames ember's unwinder produced */
	ONCPU_STAT_FP_FRAMES,     /* of those, frames found by the frame-pointer fallback */
	ONCPU_STAT_TAIL_CALLS,    /* tail calls of the unwinder */
	ONCPU_STAT_PY_STACKS,     /* Python stacks: the thread's frame chain was found */
	ONCPU_STAT_PY_NO_THREAD,  /* in the interpreter loop, but no thread state or frame */
	ONCPU_STAT_PY_FRAMES,     /* Python frames written */
	ONCPU_STAT_PY_READ_ERR,   /* Python walks cut short by unreadable memory */
	ONCPU_STAT_PY_BY_EXE,     /* raw stacks' Python frames read by their executable (py_exes) */
	ONCPU_STAT_ERR_BASE,      /* + enum unwind_error: stacks ended by that error */
	/* Off-CPU (-enable-off-cpu): */
	ONCPU_STAT_OFFCPU_WAITS = ONCPU_STAT_ERR_BASE + 8, /* waits measured (switch-ins) */
	ONCPU_STAT_OFFCPU_SAMPLED,   /* of those, chosen to be sampled */
	ONCPU_STAT_OFFCPU_SAMPLES,   /* off-CPU records sent */
	ONCPU_STAT_OFFCPU_RB_FULL,   /* off-CPU records lost: ring buffer full */
	ONCPU_STAT_OFFCPU_NO_SCRATCH, /* sampled waits dropped: no scratch record */
	ONCPU_STAT_RING_WAKES,       /* agent woken because the ring buffer filled up */
	/* CUDA launch stacks (the uprobe on ember_cuda_launch_marker): */
	ONCPU_STAT_CUDA_HITS,        /* marker calls seen */
	ONCPU_STAT_CUDA_STACKS,      /* launch stacks written to the ring buffer */
	ONCPU_STAT_CUDA_RB_FULL,     /* launch stacks lost: ring buffer full */
	ONCPU_STAT_RAW_STACKS,       /* samples sent with their raw user stack */
	ONCPU_STAT_RAW_SKIPPED,      /* samples of unknown processes sent without: ring busy or full */
	ONCPU_STAT_MAX,
};

#endif
