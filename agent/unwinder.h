/* unwinder.h - keeps the BPF unwinder's tables (bpf/unwind_types.h) in step
 * with what the agent knows.
 *
 * Files: every executable file the agent sees is queued here; a worker
 * thread builds its rows (agent/unwind_table.c), appends them to the shared
 * entry array, adds new rules to the rule map, and then publishes the
 * file's slot (unwind_files[registry index]) so the BPF program starts
 * using it. Files with the same file id (a library copied into several
 * containers) share one table. Until a file's table is published, frames
 * in it are unwound by frame pointer.
 *
 * Processes: unwinder_set_process writes a process's executable mappings
 * (with each mapping's file and bias) into unwind_procs, tagged with the
 * exec they belong to; from then on its samples use the CFI unwinder, until
 * the process execs (BPF sees another exec id and falls back). The entry array is a bump allocator: it is
 * not reclaimed while the agent runs, and when it is full further files
 * fall back to frame pointers (logged, counted).
 */
#ifndef EMBER_AGENT_UNWINDER_H
#define EMBER_AGENT_UNWINDER_H

#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "buf.h"
#include "fileid.h"
#include "oncpu.h"
#include "unwind_types.h"

struct unwinder_stats {
	uint64_t files_queued, files_loaded, files_shared, files_failed, files_skipped,
		 files_prioritized;
	uint64_t rows, entries_used, entries_cap, rules;
	uint64_t proc_updates, proc_failures;
	uint64_t build_ns; /* total time spent building tables */
};

struct unwinder;

struct unwinder *unwinder_start(const struct unwind_map_fds *fds, struct buf *err);
void unwinder_stop(struct unwinder *u);
/* Queues a table build for the file with this registry index; takes
 * ownership of fd. */
void unwinder_add_file(struct unwinder *u, uint32_t index, const struct file_id *id,
		       const char *name, int fd);
/* Describes a process's executable mappings (sorted by start; at most
 * UNWIND_MAX_MAPPINGS are used). Returns 0 or -errno. */
/* Moves the file at this registry index to the front of the queue, when
 * it is still waiting: a sample needed its table (the queue is otherwise
 * first come, first built, and a new agent's backlog of every file on
 * the host can take a second or two). */
void unwinder_prioritize(struct unwinder *u, uint32_t index);
int unwinder_set_process(struct unwinder *u, uint32_t pid, uint64_t start_ticks,
			 uint64_t exec_id, const struct unwind_mapping *maps, size_t n);
void unwinder_remove_process(struct unwinder *u, uint32_t pid);
void unwinder_get_stats(struct unwinder *u, struct unwinder_stats *out);

#endif
