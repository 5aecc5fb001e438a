/* unwind.h - keeps the BPF unwinder's tables (bpf/unwind_types.h) in step
 * with what the agent knows.
 *
 * Files: every executable file the agent sees is queued here; a worker
 * thread builds its rows (agent/unwind_table.c), writes them into free
 * pages of the shared entry array with the file's directory, adds new
 * rules to the rule map, and then publishes the table (unwind_files[slot])
 * so the BPF program starts using it. A table lives in a slot
 * (agent/unwind_mem.h); files with the same file id (a library copied into
 * several containers) share one. Until a file's table is published, frames
 * in it are unwound by frame pointer.
 *
 * Processes: unwind_set_process writes a process's executable mappings
 * (each naming its table's slot, with the mapping's bias) into
 * unwind_procs, tagged with the exec they belong to; from then on its
 * samples use the CFI unwinder, until the process execs (BPF sees another
 * exec id and falls back). Each slot counts the processes that map it.
 *
 * Memory (docs/internals/unwinding.md): the entry array has a fixed size
 * (-unwind-table-rows). A table no process maps any more is kept for
 * UNWIND_KEEP_NS (the next run of the same program needs it: compilers,
 * scripts) and then given back by unwind_tick; when the array is full,
 * tables no process maps are given back first, then the tables least
 * recently sampled are evicted. An evicted table that is sampled again is
 * reloaded. A file too large for the space there is is loaded in part:
 * the row pages samples fell in first. The agent's own memory: building
 * the table of a file of MEMSTATS_SMALL_FILE or more first reserves a
 * fifth of its size from the memory budget shared with the symbol
 * uploader (memstats.h), and the heap is trimmed after it.
 */
#ifndef EMBER_AGENT_UNWIND_H
#define EMBER_AGENT_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "buf.h"
#include "fileid.h"
#include "oncpu.h"
#include "unwind_types.h"

/* How long a table no process maps stays loaded. */
#define UNWIND_KEEP_NS (60ull * 1000000000ull)

struct unwind_stats {
	uint64_t files_queued, files_loaded, files_shared, files_failed, files_skipped,
		 files_prioritized;
	uint64_t files_reclaimed; /* tables no process mapped, given back */
	uint64_t files_evicted;   /* tables of mapped files, given back to make room */
	uint64_t files_reloaded;  /* evicted tables loaded again */
	uint64_t files_refused;   /* tables that got no space at all */
	uint64_t files_partial;   /* tables loaded in part (too large for the space) */
	uint64_t tables;          /* tables loaded now */
	uint64_t rows;            /* rows of the tables built (cumulative) */
	uint64_t entries_used, entries_cap; /* entries of the array held by tables, and all */
	uint64_t rules;
	uint64_t proc_updates, proc_failures;
	uint64_t build_ns; /* total time spent building tables */
};

struct unwind;

struct unwind *unwind_start(const struct unwind_map_fds *fds, struct buf *err);
void unwind_stop(struct unwind *u);
/* Registers the file with this registry index and queues its table's
 * build; takes ownership of fd. reopenable: the file can be opened again
 * through a process's /proc/PID/map_files when its table is needed after
 * it was given back (false for the vDSO image: its descriptor is kept). */
void unwind_add_file(struct unwind *u, uint32_t index, const struct file_id *id,
		       const char *name, int fd, bool reopenable);
/* Moves the table of the file at this registry index to the front of the
 * queue, when it is still waiting, or queues its reload when it was given
 * back: a sample needed it. */
void unwind_prioritize(struct unwind *u, uint32_t index);
/* Describes a process's executable mappings (sorted by start; at most
 * UNWIND_MAX_MAPPINGS are used). maps[i].file is the file's registry
 * index (or UNWIND_NO_FILE); the unwinder replaces it with the table's
 * slot. Returns 0 or -errno. */
int unwind_set_process(struct unwind *u, uint32_t pid, uint64_t start_ticks,
			 uint64_t exec_id, const struct unwind_mapping *maps, size_t n);
void unwind_remove_process(struct unwind *u, uint32_t pid);
/* Housekeeping, about once a second (the main loop): gives back tables no
 * process mapped for UNWIND_KEEP_NS; queues the reload of evicted
 * tables sampled since, and of the missing pages of partial ones. */
void unwind_tick(struct unwind *u, uint64_t now_ns);
void unwind_get_stats(struct unwind *u, struct unwind_stats *out);
/* A count that grows whenever a table is published (loaded, reloaded,
 * loaded in part) or its build fails: what waits for a table looks again
 * only when it changed. */
uint64_t unwind_publications(struct unwind *u);

#endif
