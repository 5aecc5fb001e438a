/* rawstack.h - unwinds, in user space, the user stacks the BPF program
 * sent raw (struct oncpu_raw_sample, bpf/oncpu_types.h): the samples of a
 * process taken before the agent had read its maps, which the kernel's
 * frame-pointer walk cannot unwind in code built without frame pointers.
 *
 * The walk is the BPF unwinder's own (bpf/unwind_step.h, compiled here as
 * plain C) over the same tables: the process's mappings from unwind_procs
 * (written when the agent read its maps), the rows from unwind_entries
 * (mapped a page at a time, for a few milliseconds), the rules and
 * table directories from unwind_rules and unwind_files; memory reads are
 * served from the copied stack bytes only. At most ONCPU_MAX_UFRAMES
 * frames.
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

/* Row pages of unwind_entries mapped into the agent, each used for
 * RAWSTACK_PAGE_NS after it was mapped: well within the 20 ms a page given
 * back stays out of use (agent/unwind.c), so a page in use is never
 * another table's. */
#define RAWSTACK_PAGES 32
#define RAWSTACK_PAGE_NS 5000000ull

struct rawstack {
	int procs_fd, files_fd, rules_fd, entries_fd;
	uint32_t nentries;
	/* The entry array is mapped a row page (8 KiB) at a time, only while
	 * it is used: a mapping of the whole array is populated whole and
	 * would count its size (32 MiB by default) in the agent's RSS, and
	 * a batched lookup of a page costs a hundred times more. */
	struct rawstack_page {
		uint32_t page; /* UNWIND_PAGE_NONE: none */
		uint64_t mapped_ns;
		const struct unwind_entry *rows; /* UNWIND_PAGE_ROWS, mapped */
	} pages[RAWSTACK_PAGES];
	uint32_t next_page; /* the slot the next mapping replaces */
	struct unwind_entry one; /* an entry read alone (the map cannot be mapped) */
	uint64_t page_maps, single_reads; /* pages mapped; entries read alone */
};

/* Prepares to read the unwinder's tables (fds stay the caller's). */
void rawstack_open(struct rawstack *r, const struct unwind_map_fds *fds);
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
 * id as the sample saw them) into out (at most max frames); cfa (NULL, or
 * max slots) gets each frame's CFA, its caller's SP (0 where the walk
 * ended), which tells what stack each frame owns. With final,
 * a frame in a file without a loaded table is followed by its frame
 * pointer, as the BPF program does; without, the walk stops there and
 * says so (RAWSTACK_NO_TABLE), to be retried once the table is in. */
enum rawstack_result rawstack_unwind(struct rawstack *r, uint32_t pid, uint64_t start_ticks,
				     uint64_t exec_id, const struct oncpu_raw_stack *raw, bool final,
				     __u64 *out, __u64 *cfa, uint32_t max, uint32_t *n, uint16_t *err,
				     uint64_t *stuck);

#endif
