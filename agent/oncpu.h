/* oncpu.h - sampling: loads ember's BPF object (the programs of bpf/,
 * linked into one: build/bpf/ember.skel.h), opens one cpu-clock perf
 * event per online CPU at the configured rate and attaches the on-CPU
 * program (bpf/oncpu.bpf.c) to each; with off-CPU sampling asked for,
 * attaches the off-CPU programs too (agent/offcpu.h), or says in the log
 * why it cannot and goes on with on-CPU sampling only.
 * Drains the ring buffer both write to. The unwinder's maps are filled by
 * agent/unwind.c.
 *
 * cpu-clock is a software event, so sampling works on virtual machines
 * without a PMU; the period is exact (1e9 / Hz nanoseconds of CPU time).
 */
#ifndef EMBER_AGENT_ONCPU_H
#define EMBER_AGENT_ONCPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "cpulist.h"

#include <linux/types.h>
#include "oncpu_types.h"

struct oncpu;
typedef void (*oncpu_sample_fn)(void *ctx, const void *data, size_t size);

/* The BPF maps ember's unwinder reads, for agent/unwind.c to fill. */
struct unwind_map_fds {
	int rules, entries, files, procs, seen, wanted;
	uint32_t rules_cap, entries_cap, files_cap;
};

/* Loads and attaches the sampler: on-CPU at hz (1 to 1000) per CPU, and
 * off-CPU at offcpu_hz (samples per second of blocked time per thread;
 * 0 = off); unwind_entries sizes the table of unwind rows shared by all
 * files. A kernel that cannot do off-CPU sampling is logged, not an error
 * (oncpu_offcpu_active tells). Returns 0, or -1 with the reason in err. */
int oncpu_open(struct oncpu **out, uint64_t hz, uint64_t offcpu_hz, uint32_t unwind_entries,
	       oncpu_sample_fn fn, void *ctx, struct buf *err);
/* Whether off-CPU sampling was asked for, loaded and is attached now. */
bool oncpu_offcpu_active(const struct oncpu *o);
void oncpu_unwind_maps(const struct oncpu *o, struct unwind_map_fds *out);
/* Hands every sample waiting in the ring buffer to fn. Returns how many
 * or -1. Called from one thread. */
int oncpu_drain(struct oncpu *o);
/* The map of Python processes the walker reads (py_procs: pid -> struct
 * py_proc, python_types.h). */
int oncpu_python_map(const struct oncpu *o);
/* The map of interpreter executables (py_exes: struct py_exe_key -> struct
 * py_exe, python_types.h): a process not described yet is walked by its
 * executable's entry. */
int oncpu_python_exes_map(const struct oncpu *o);
/* Waits up to timeout_ms for a sample that asks to wake the agent (one of
 * a process not described to the unwinder yet) and then hands every waiting
 * sample to fn; ordinary samples do not wake it. Returns how many samples
 * were handed over (0 on timeout or a signal) or a negative errno. */
int oncpu_wait(struct oncpu *o, int timeout_ms);
/* The descriptor that becomes readable when oncpu_wait would return at
 * once (for a caller that waits on other descriptors too). */
int oncpu_epoll_fd(const struct oncpu *o);

/* Most copies of libembercuda.so (distinct files) probed at once. */
#define ONCPU_MAX_CUDA_FILES 64
/* Attaches the CUDA launch-stack program (bpf/cuda.bpf.c cuda_marker) as
 * a uprobe on function func of the ELF file at path, for every process
 * that maps it (the kernel keys uprobes by inode: once per file, not per
 * process). Records of kind ONCPU_KIND_CUDA_LAUNCH then arrive with the
 * samples. Returns 0, or -1 with the reason in err. */
int oncpu_attach_cuda_marker(struct oncpu *o, const char *path, const char *func, struct buf *err);
/* Starts or stops sampling (probabilistic profiling): the on-CPU timers,
 * and the off-CPU programs when they are loaded (detached while off, so a
 * stopped sampler costs nothing; waits that began while off are not
 * counted). Returns 0, or -1 (errno set) when an ioctl or an attach
 * failed. */
int oncpu_set_enabled(struct oncpu *o, bool on);
/* Sums the program's per-CPU counters (enum oncpu_stat). */
void oncpu_read_stats(struct oncpu *o, uint64_t out[ONCPU_STAT_MAX]);
int oncpu_cpu_count(const struct oncpu *o);
void oncpu_close(struct oncpu *o);


#endif
