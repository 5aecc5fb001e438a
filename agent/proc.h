/* proc.h - what the agent knows about each process it has sampled.
 *
 * Processes are discovered lazily: the first sample of an unknown pid
 * reads /proc/PID/stat (start time, to detect pid reuse), the executable
 * name, the executable mappings and where it runs (attrib.h). A user address that falls in no known
 * mapping triggers a re-read of the maps (at most once per second per
 * process), which covers dlopen() without tracing mmap. Processes that
 * have exited are dropped by proc_table_sweep().
 */
#ifndef EMBER_AGENT_PROC_H
#define EMBER_AGENT_PROC_H

#include <stdbool.h>
#include <stdint.h>

#include "attrib.h"
#include "files.h"
#include "hmap.h"

enum mapping_kind {
	MAPPING_FILE = 0, /* a file-backed executable mapping */
	MAPPING_VDSO,
	MAPPING_ANON,     /* anonymous executable memory, e.g. JIT code */
};

struct mapping {
	uint64_t start, end, offset;
	uint32_t file; /* index in the file registry, or FILE_NONE */
	uint8_t kind;
};

struct proc {
	int32_t pid;
	bool live;           /* /proc/PID could be read */
	uint64_t start_time; /* clock ticks since boot, from /proc/PID/stat */
	uint64_t exec_id;    /* the exec the mappings were read for (oncpu_sample.exec_id) */
	char exe_name[64];   /* base name of /proc/PID/exe, else the comm */
	struct proc_attrs attrs; /* container, pod, job (attrib.h) */
	struct mapping *maps;
	size_t nmaps, capmaps;
	uint64_t maps_read_ns;
	uint8_t refreshes;   /* re-reads of the maps since the exec (proc.c) */
	uint64_t last_sample_ns;
};

/* Called after a process's mappings were (re)read, and when a process is
 * forgotten: the unwinder mirrors the table into BPF maps. */
typedef void (*proc_maps_fn)(void *ctx, const struct proc *p);
typedef void (*proc_gone_fn)(void *ctx, int32_t pid);

struct proc_table {
	struct proc *procs; /* slots; free ones have pid == 0 */
	size_t count, cap;
	uint32_t *free_slots;
	size_t nfree, capfree;
	struct hmap index;
	struct file_registry *files;
	const char *proc_root;
	uint32_t vdso_file; /* registry index of the vDSO image, or FILE_NONE */
	struct attrib *attrib; /* where processes run; NULL = not read */
	proc_maps_fn on_maps;
	proc_gone_fn on_gone;
	void *hook_ctx;
	uint64_t swept_ns; /* the clock of the previous proc_table_sweep */
};

void proc_table_init(struct proc_table *t, struct file_registry *files, const char *proc_root);
void proc_table_free(struct proc_table *t);
/* Bytes the table holds (slots, mappings, index): memory accounting. */
size_t proc_table_bytes(const struct proc_table *t);
/* The process with this pid, created (and read from /proc) on first
 * sight. start_ticks is the process start time in clock ticks since boot
 * as the sample saw it: a cached entry with another start time belongs
 * to an earlier process that had the same pid, and is replaced. exec_id
 * is the process's exec count as the sample saw it: a higher one than the
 * entry's means the process exec'd since it was read, and it is read
 * again at once (name, attributes, mappings). comm names processes whose
 * /proc entry is already gone. exec_id PROC_EXEC_UNKNOWN (a caller that
 * has no record from BPF, e.g. the CUDA socket's hello): the entry takes
 * the exec count of the first record that brings one, without reading
 * the process again. */
#define PROC_EXEC_UNKNOWN UINT64_MAX /* = UNWIND_EXEC_ANY (unwind_types.h) for BPF */
struct proc *proc_table_get(struct proc_table *t, int32_t pid, uint64_t start_ticks,
			    uint64_t exec_id, const char *comm, uint64_t now_ns);
/* The mapping containing addr, re-reading the maps (rate-limited) when
 * no known mapping contains it. */
const struct mapping *proc_find_mapping(struct proc_table *t, struct proc *p, uint64_t addr,
					uint64_t now_ns);
/* Drops processes that exited or were not sampled for idle_ns. Only
 * those not sampled since the previous sweep are looked up in /proc (a
 * read of PROC/PID/stat each, tens of microseconds): one that was is
 * alive or just gone, and the next sweep tells; a pid taken over by
 * another process in between is replaced by proc_table_get at that
 * process's first sample. The caller drains the ring buffer first: an
 * exited process's last records (an off-CPU wait that ends as the process
 * does) must find its entry, maps and name still there, not a blank one
 * made after it is gone. */
void proc_table_sweep(struct proc_table *t, uint64_t now_ns, uint64_t idle_ns);
/* proc_table_get(pid, start_ticks, PROC_EXEC_UNKNOWN), and the process's
 * mappings read again if it was known already: it has told the agent it
 * loaded something (libembercuda.so's hello comes after the library was
 * loaded, maybe long after the process's first sample). */
void proc_table_refresh(struct proc_table *t, int32_t pid, uint64_t start_ticks, uint64_t now_ns);
size_t proc_table_count(const struct proc_table *t);

/* The executable name of pid: the base name of PROC/PID/exe (without
 * " (deleted)"), else comm, else "[unknown]"; at most 63 bytes, control
 * characters replaced by '?'. Shared
 * by the sample path and the metrics collector (hostmetrics.h). */
void proc_exe_name(const char *proc_root, int32_t pid, const char *comm, char *out, size_t n);

/* Exposed for tests: reads start time (field 22) from /proc/PID/stat text. */
int proc_parse_stat_start(const char *text, size_t len, uint64_t *start_time);

#endif
