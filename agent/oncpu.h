/* oncpu.h - on-CPU sampling: loads bpf/oncpu.bpf.c, opens one cpu-clock
 * perf event per online CPU at the configured rate and attaches the
 * program to each, and drains the ring buffer the program writes to. The
 * unwinder's maps are filled by agent/unwinder.c.
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

#include <linux/types.h>
#include "oncpu_types.h"

struct oncpu;
typedef void (*oncpu_sample_fn)(void *ctx, const void *data, size_t size);

/* The BPF maps ember's unwinder reads, for agent/unwinder.c to fill. */
struct unwind_map_fds {
	int rules, entries, files, procs;
	uint32_t rules_cap, entries_cap, files_cap;
};

/* Loads and attaches the sampler; unwind_entries sizes the table of unwind
 * rows shared by all files. Returns 0, or -1 with the reason in err. */
int oncpu_open(struct oncpu **out, uint64_t hz, uint32_t unwind_entries, oncpu_sample_fn fn,
	       void *ctx, struct buf *err);
void oncpu_unwind_maps(const struct oncpu *o, struct unwind_map_fds *out);
/* Hands every sample waiting in the ring buffer to fn. Returns how many
 * or -1. Called from one thread. */
int oncpu_drain(struct oncpu *o);
/* The map of Python processes the walker reads (py_procs: pid -> struct
 * py_proc, python_types.h). */
int oncpu_python_map(const struct oncpu *o);
/* Waits up to timeout_ms for a sample that asks to wake the agent (one of
 * a process not described to the unwinder yet) and then hands every waiting
 * sample to fn; ordinary samples do not wake it. Returns how many samples
 * were handed over (0 on timeout or a signal) or a negative errno. */
int oncpu_wait(struct oncpu *o, int timeout_ms);
/* Starts or stops the sampling timers (probabilistic profiling); a stopped
 * sampler costs nothing. Returns 0, or -1 when an ioctl failed. */
int oncpu_set_enabled(struct oncpu *o, bool on);
/* Sums the program's per-CPU counters (enum oncpu_stat). */
void oncpu_read_stats(struct oncpu *o, uint64_t out[ONCPU_STAT_MAX]);
int oncpu_cpu_count(const struct oncpu *o);
void oncpu_close(struct oncpu *o);

/* Parses a CPU list such as "0-3,8,10-11" into ids (at most max).
 * Returns the count, or -1 when malformed. Exposed for tests. */
int parse_cpu_list(const char *s, int *ids, int max);

#endif
