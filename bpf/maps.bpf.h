/* maps.bpf.h - what the BPF programs of ember share: the maps, the
 * variables the agent sets, the scratch record a walk builds a sample in,
 * and the constants every program needs. Included by every .bpf.c file.
 *
 * The programs are compiled one file a feature (oncpu, offcpu, unwind,
 * python, cuda) and linked into one object by `bpftool gen object`
 * (libbpf's static linker; Makefile), from which one skeleton is made
 * (build/bpf/ember.skel.h, struct ember_bpf). Each map is defined here
 * once, __weak: every object that includes this header carries the same
 * definition, and the linker resolves them to one map (it refuses
 * definitions that differ). A variable is defined in the one file that
 * owns it, and declared extern here when others read it. Functions shared by
 * several programs are static __always_inline (record.bpf.h, this file),
 * except the few global (__noinline) functions the verifier checks once,
 * each defined in one file and declared where it is called (a call into
 * another object is resolved by the linker).
 *
 * The agent side: agent/oncpu.c loads the object (sampling, the ring
 * buffer), agent/offcpu.c attaches the off-CPU programs, agent/unwind.c
 * fills the unwinder's maps, agent/main.c py_procs and py_exes, and
 * oncpu_attach_cuda_marker (agent/oncpu.c) attaches cuda_marker to each
 * copy of libembercuda.so the agent finds. */
#ifndef EMBER_BPF_MAPS_BPF_H
#define EMBER_BPF_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "oncpu_types.h"
#include "python_types.h"
#include "unwind_types.h"

/* Every tail call of a sample counts (native, into and out of the Python
 * walker): the kernel allows 33. */
#define UNWIND_MAX_TAIL_CALLS 32
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

/* A shared map (see above: __weak, one definition in every object that
 * includes this header) of type, max_entries, key and value types, and
 * map_flags for SHARED_MAP_FLAGS. */
#define SHARED_MAP_FLAGS(name, map_type, entries, flags, key_type, value_type) \
	struct {                                                               \
		__uint(type, map_type);                                        \
		__uint(max_entries, entries);                                  \
		__uint(map_flags, flags);                                      \
		__type(key, key_type);                                         \
		__type(value, value_type);                                     \
	} name __weak SEC(".maps")
#define SHARED_MAP(name, map_type, entries, key_type, value_type) \
	struct {                                                  \
		__uint(type, map_type);                           \
		__uint(max_entries, entries);                     \
		__type(key, key_type);                            \
		__type(value, value_type);                        \
	} name __weak SEC(".maps")

/* The variables more than one file reads, each defined (and described)
 * in the file named: set by the agent before load (oncpu.bpf.c), and the
 * off-CPU records in progress (offcpu.bpf.c). */
extern const volatile __u64 ns_per_tick;
extern const volatile __u64 ring_wake_bytes;
extern __u64 offcpu_pending;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by the agent before load */
} samples __weak SEC(".maps");

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

/* The masked frame slot (FRAME_INDEX_MASK) stays inside the record. */
_Static_assert(__builtin_offsetof(struct oncpu_sample, frames) + (FRAME_INDEX_MASK + 1) * 8 <=
		       sizeof(struct scratch),
	       "masked slot stays in the scratch record");

/* The on-CPU sampler's scratch record, per CPU: far too large for the
 * 512-byte BPF stack. Perf-event programs run in interrupt context, so
 * nothing else on the CPU uses it meanwhile. */
SHARED_MAP(scratch, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct scratch);

/* The off-CPU sampler's records in progress, per thread id: one is
 * started when the thread is switched in (on whichever CPU) and finished
 * at its system call's exit, where the tracepoint may run preemptibly (and
 * the cpu-clock interrupt may run the on-CPU sampler), so it cannot live
 * in per-CPU memory. Preallocated: the switch hook runs with the run queue
 * locked, where allocating memory is not safe on every kernel. Sized by
 * the agent; a full map drops picked waits (counted). */
SHARED_MAP(offcpu_scratch, BPF_MAP_TYPE_HASH, 256, __u32, struct scratch);

/* Where the switch hook builds a record before it goes into
 * offcpu_scratch: per CPU, as that hook runs with interrupts off. */
SHARED_MAP(offcpu_stage, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct scratch);

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
} offcpu_waits __weak SEC(".maps");

/* Each CPU's last forced wakeup of the agent (wake_agent). */
SHARED_MAP(wake_times, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, __u64);

SHARED_MAP(oncpu_stats, BPF_MAP_TYPE_PERCPU_ARRAY, ONCPU_STAT_MAX, __u32, __u64);

SHARED_MAP(unwind_rules, BPF_MAP_TYPE_ARRAY, 16384, __u32, struct unwind_rule);

/* The agent maps row pages of it read-only, a few milliseconds at a time,
 * to unwind the raw stacks of processes it had not described yet with the
 * same rows (agent/rawstack.h); lookups here are the same either way.
 * Its 1 << 21 entries are resized by the agent before load. */
SHARED_MAP_FLAGS(unwind_entries, BPF_MAP_TYPE_ARRAY, 1 << 21, BPF_F_MMAPABLE, __u32,
		 struct unwind_entry);

/* Indexed by the agent's table slot (agent/unwind_mem.h), not by file:
 * slots are given back and reused. */
SHARED_MAP(unwind_files, BPF_MAP_TYPE_ARRAY, 32768, __u32, struct unwind_file_info);

/* slot -> when a frame was last looked up in it (bpf_ktime_get_ns, updated
 * at most every UNWIND_SEEN_NS): which tables are in use, for the agent's
 * choice of what to give back when the table is full, and which given-back
 * table a sample needs again. */
SHARED_MAP(unwind_seen, BPF_MAP_TYPE_ARRAY, 32768, __u32, __u64);

/* (slot << 32 | row page) -> when a frame fell in a row page of a table
 * loaded in part: the pages the agent loads first when it reloads it. */
SHARED_MAP(unwind_wanted, BPF_MAP_TYPE_LRU_HASH, 4096, __u64, __u64);

SHARED_MAP_FLAGS(unwind_procs, BPF_MAP_TYPE_HASH, 16384, BPF_F_NO_PREALLOC, __u32, struct unwind_proc);

/* Tail calls only reach programs of the caller's type (and, for tracing
 * programs, of its attach target): the perf-event unwinder and the
 * tp_btf/sys_exit one each have their own array. */
SHARED_MAP(unwind_progs, BPF_MAP_TYPE_PROG_ARRAY, 2, __u32, __u32); /* PROG_UNWIND, PROG_PYTHON */

/* PROG_UNWIND, PROG_PYTHON of the off-CPU path */
SHARED_MAP(offcpu_progs, BPF_MAP_TYPE_PROG_ARRAY, 2, __u32, __u32);

/* PROG_UNWIND, PROG_PYTHON of the CUDA launch path */
SHARED_MAP(cuda_progs, BPF_MAP_TYPE_PROG_ARRAY, 2, __u32, __u32);

/* The CUDA launch path's scratch record, per CPU. A uprobe program may be
 * preempted, but while one runs on a CPU the kernel runs no other
 * tracing program there (bpf_prog_active), so no second walk shares it. */
SHARED_MAP(cuda_scratch, BPF_MAP_TYPE_PERCPU_ARRAY, 1, __u32, struct scratch);

SHARED_MAP_FLAGS(py_procs, BPF_MAP_TYPE_HASH, 4096, BPF_F_NO_PREALLOC, __u32, struct py_proc);

/* Interpreter executables the agent has read (struct py_exe): few, one per
 * installed version. */
SHARED_MAP_FLAGS(py_exes, BPF_MAP_TYPE_HASH, 64, BPF_F_NO_PREALLOC, struct py_exe_key, struct py_exe);

/* tid -> its PyThreadState, checked on every use (thread states are freed
 * and reused). */
SHARED_MAP(py_threads, BPF_MAP_TYPE_LRU_HASH, 16384, __u32, __u64);

static __always_inline void count(__u32 stat, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&oncpu_stats, &stat);
	if (v)
		*v += n;
}

/* Whether a sample's walk may go into the Python walker: room for that
 * tail call and the one back to the native unwinder. */
static __always_inline bool py_call_room(const struct scratch *sc)
{
	return sc->tail_calls + 2 < UNWIND_MAX_TAIL_CALLS;
}

/* Tail-calls program prog of progs, counted in the sample's budget;
 * returns only when the call failed. */
static __always_inline void tail_call_counted(void *ctx, struct scratch *sc, void *progs, __u32 prog)
{
	sc->tail_calls++;
	bpf_tail_call(ctx, progs, prog);
}

static __always_inline int read_u64(__u64 addr, __u64 *out)
{
	return bpf_probe_read_user(out, sizeof(*out), (const void *)addr) ? 1 : 0;
}

#endif
