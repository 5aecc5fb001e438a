/* memstats.h - where the agent's memory goes, and the budget that bounds
 * its two big transient jobs.
 *
 * Gauges: the modules that hold memory that depends on the host (the
 * unwind table being built, the symbol file being extracted) add and
 * subtract what they allocate here, so that the agent's counters
 * (selfstats.c) can show each part while it is held.
 *
 * Budget: building the unwind table of a large file (agent/unwind.c's
 * thread) and extracting its symbols (agent/symupload.c's thread) each
 * hold tens of MB for a second or two. Each job first reserves an estimate
 * of its peak from one process-wide budget of MEMSTATS_BUDGET bytes and
 * waits while the others' reservations leave too little; a job larger
 * than the whole budget runs alone. Small files (under
 * MEMSTATS_SMALL_FILE) reserve nothing: their jobs hold little.
 *
 * Thread-safe. Process-wide state (one agent per process), so that the
 * jobs of different modules share one bound.
 */
#ifndef EMBER_AGENT_MEMSTATS_H
#define EMBER_AGENT_MEMSTATS_H

#include <stdbool.h>
#include <stdint.h>

enum mem_part {
	MEM_UNWIND_BUILD, /* rows and FDE list of tables being built */
	MEM_SYMBOLS,      /* symbol files being extracted and compressed */
	MEM_NPARTS,
};

#define MEMSTATS_BUDGET (40ull << 20)
#define MEMSTATS_SMALL_FILE (16ull << 20)

/* Adds delta (may be negative) to a part's gauge. */
void memstats_add(enum mem_part p, int64_t delta);
/* A part's bytes now. */
uint64_t memstats_get(enum mem_part p);

/* Reserves bytes of the budget, waiting until they fit (or nothing else is
 * reserved). Returns what was reserved (bytes clamped to the budget), to
 * give to memstats_release. */
uint64_t memstats_reserve(uint64_t bytes);
void memstats_release(uint64_t reserved);
/* Bytes reserved now, and the times a job waited for the budget. */
uint64_t memstats_reserved(void);
uint64_t memstats_waits(void);

/* The process's resident set and its peak (VmRSS, VmHWM), in bytes; 0
 * when /proc/self/status cannot be read. */
void memstats_rss(uint64_t *rss, uint64_t *peak);

/* Sets glibc's allocator up for a bounded peak (called first in main):
 * blocks of 256 KiB and more are mapped on their own, given back when
 * freed and grown by moving pages (mremap) rather than by copying. Left to
 * itself, glibc raises that threshold to 32 MiB after the first large
 * free, and from then on the rows of a table being built double inside
 * the heap by copy (old and new copies resident at once) and leave holes
 * there. At most two arenas: threads that run big jobs one after the other
 * reuse one heap's free space instead of each keeping its own. */
void memstats_malloc_setup(void);

/* Gives the heap's free pages back to the system (after a big job). */
void memstats_trim(void);

#endif
