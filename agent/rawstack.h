/* rawstack.h - unwinds, in user space, the user stacks the BPF program
 * sent raw (struct oncpu_raw_sample, bpf/oncpu_types.h): the samples of a
 * process taken before the agent had read its maps, which the kernel's
 * frame-pointer walk cannot unwind in code built without frame pointers.
 *
 * The walk is the BPF unwinder's own (bpf/unwind_step.h, compiled here as
 * plain C) over the same tables: the process's mappings from unwind_procs
 * (written when the agent read its maps), the rows from unwind_entries
 * (mapped read-only into the agent), the rules and table directories from
 * unwind_rules and unwind_files; memory reads are served from the copied
 * stack bytes only. At most ONCPU_MAX_UFRAMES frames.
 *
 * Used by the collector (collect.h), which keeps the samples whose tables
 * are not loaded yet for a bounded time and count, and retries them.
 * Main thread only.
 */
#ifndef EMBER_AGENT_RAWSTACK_H
#define EMBER_AGENT_RAWSTACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "oncpu.h"
#include "oncpu_types.h"
#include "unwind_types.h"

struct rawstack {
	int procs_fd, files_fd, rules_fd;
	const struct unwind_entry *entries; /* the entry array, read-only */
	uint32_t nentries;
	size_t map_len;
};

/* Maps the unwinder's tables (fds stay the caller's). Returns 0 or -errno
 * (the entry array could not be mapped: a kernel without mmap-able BPF
 * arrays, Linux < 5.5). */
int rawstack_open(struct rawstack *r, const struct unwind_map_fds *fds);
void rawstack_close(struct rawstack *r);

enum rawstack_result {
	RAWSTACK_UNWOUND,    /* out[0..*n) is the stack, innermost first; *err why it
				ended early (UWE_NONE: it reached the outermost frame;
				UWE_NO_MAPPING: *stuck is the address in no mapping) */
	RAWSTACK_NO_PROCESS, /* the unwinder has no description of this process and
				exec (it exited before the agent read its maps) */
	RAWSTACK_NO_TABLE,   /* the walk reached a file whose table is not loaded
				yet (*stuck: the address); final = false only */
};

/* Unwinds the raw stack of process pid (start time in clock ticks, exec
 * id as the sample saw them) into out (at most max frames). With final,
 * a frame in a file without a loaded table is followed by its frame
 * pointer, as the BPF program does; without, the walk stops there and
 * says so (RAWSTACK_NO_TABLE), to be retried once the table is in. */
enum rawstack_result rawstack_unwind(const struct rawstack *r, uint32_t pid, uint64_t start_ticks,
				     uint64_t exec_id, const struct oncpu_raw_stack *raw, bool final,
				     __u64 *out, uint32_t max, uint32_t *n, uint16_t *err,
				     uint64_t *stuck);

#endif
