/* hostmetrics.h - host, process, cgroup and disk metrics from /proc and
 * the cgroup v2 tree, collected every -collect-metrics-interval
 * (docs/internals/metrics.md).
 *
 * Each collection reads
 *   /proc/stat            host.cpu.{user,system,idle,iowait} (cores)
 *   /proc/meminfo         host.memory.{total,available,used} (bytes)
 *   /proc/diskstats       io.disk.{read,write}_throughput (bytes/s) and
 *                         io.disk.{read,write}_latency (ms per operation)
 *                         of whole disks (those under /sys/block)
 *   /proc/PID/stat        of every process: process.utime and
 *                         process.stime (cores over the interval, from the
 *                         tick deltas), process.rss (bytes)
 *   /proc/PID/io          of the processes kept: io.read_throughput and
 *                         io.write_throughput (bytes/s from read_bytes and
 *                         write_bytes deltas)
 *   /proc/PID/cgroup and CGROUP/memory.current, memory.stat
 *                         process.wss of each kept process's cgroup
 *                         (memory.current - inactive_file, bytes)
 * Rates need two readings: a process (or disk, or the host) yields them
 * from its second collection on; a process's io rates from the second
 * interval in a row it is kept.
 *
 * Bounds: at most HM_MAX_SCAN processes are read per interval, and of
 * those only the opts.max_procs using the most CPU (then memory) are kept
 * and sent; the others are counted (dropped_processes). Every file is
 * read into a fixed buffer; a process that vanishes mid-read is skipped.
 * Per-process attributes (host.name, process.executable.name,
 * process.pid, container, pod, job ...) are the samples' own: proc.h's
 * executable name and attrib.h's attributes, read once per process.
 *
 * The parsers are pure functions over a buffer (for tests and fuzzing).
 * Ownership: the collector owns its process cache; the attrib handle and
 * the host attributes belong to the caller and must outlive it. One
 * thread uses a collector.
 */
#ifndef EMBER_AGENT_HOSTMETRICS_H
#define EMBER_AGENT_HOSTMETRICS_H

#include <stddef.h>
#include <stdint.h>

#include "attrib.h"
#include "kubelet.h"
#include "metricbatch.h"

#define HM_MAX_SCAN 65536     /* /proc entries read per interval */
#define HM_DEFAULT_PROCS 256  /* processes kept per interval */
#define HM_MAX_CGROUPS 128    /* cgroups read per interval */
#define HM_MAX_DISKS 64

/* --- parsers (0 or -1 for text they cannot use) -------------------------- */

struct hm_cpu {
	uint64_t user, nice, system, idle, iowait, irq, softirq, steal; /* ticks */
};
/* The "cpu " line of /proc/stat. */
int hm_parse_stat(const char *text, size_t len, struct hm_cpu *out);

struct hm_meminfo {
	uint64_t total, free, available, buffers, cached; /* bytes */
};
int hm_parse_meminfo(const char *text, size_t len, struct hm_meminfo *out);

struct hm_pstat {
	char comm[17];
	uint64_t utime, stime;   /* ticks */
	uint64_t start_time;     /* ticks since boot */
	uint64_t rss_pages;
};
/* /proc/PID/stat: fields 14, 15, 22 and 24, counted after the last ')'. */
int hm_parse_pid_stat(const char *text, size_t len, struct hm_pstat *out);

/* /proc/PID/io: read_bytes and write_bytes. */
int hm_parse_pid_io(const char *text, size_t len, uint64_t *read_bytes, uint64_t *write_bytes);

/* The cgroup v2 path ("0::/a/b") of /proc/PID/cgroup into out (n bytes);
 * -1 when absent, too long, or holding "..", control characters. */
int hm_parse_cgroup2_path(const char *text, size_t len, char *out, size_t n);

/* inactive_file of a cgroup's memory.stat. */
int hm_parse_memory_stat(const char *text, size_t len, uint64_t *inactive_file);

struct hm_disk {
	char name[32];
	uint64_t reads, read_sectors, read_ms, writes, write_sectors, write_ms;
};
/* The lines of /proc/diskstats, at most max; returns how many. */
size_t hm_parse_diskstats(const char *text, size_t len, struct hm_disk *out, size_t max);

/* --- the collector --------------------------------------------------------- */

struct hostmetrics_opts {
	const char *proc_root;    /* "/proc" */
	const char *cgroup_root;  /* "/sys/fs/cgroup" */
	const char *sys_block;    /* "/sys/block": which diskstats lines are disks */
	const char *host_name, *host_arch;
	/* Attributes of every series of this host (collect.h's host_kv):
	 * key/value pairs; empty values are left out. */
	const char *const *host_kv;
	size_t nhost_kv;
	struct attrib *attrib;    /* where processes run; NULL = not read */
	struct kubelet *kubelet;  /* pod names and labels (-k8s-pod-labels); NULL = none */
	size_t max_procs;         /* processes kept per interval; 0 = HM_DEFAULT_PROCS */
	long ticks_per_s;         /* sysconf(_SC_CLK_TCK); 0 = that */
	long page_size;           /* 0 = sysconf(_SC_PAGESIZE) */
};

struct hostmetrics_stats {
	uint64_t collections;
	uint64_t processes_seen;      /* in the last collection */
	uint64_t processes_dropped;   /* in the last collection, past max_procs */
	uint64_t processes_vanished;  /* total: gone between listing and reading */
	uint64_t last_ns;             /* time the last collection took */
};

struct hostmetrics;

struct hostmetrics *hostmetrics_new(const struct hostmetrics_opts *opts);
void hostmetrics_free(struct hostmetrics *h);
/* Reads everything and adds this interval's points (at ts_ms) to b.
 * now_ns is a monotonic time: rates are over the time since the last
 * collection. */
void hostmetrics_collect(struct hostmetrics *h, struct metric_batch *b, int64_t ts_ms,
			 uint64_t now_ns);
/* The label set of process pid (its attributes read if new to the
 * collector), for other collectors' per-process series (gpumetrics.h). */
uint32_t hostmetrics_process_labels(struct hostmetrics *h, struct metric_batch *b, int32_t pid);
/* The label set of the host alone (host.name, host.arch, host_kv). */
uint32_t hostmetrics_host_labels(struct hostmetrics *h, struct metric_batch *b,
				 const char *const *extra_kv, size_t nextra);
void hostmetrics_get_stats(const struct hostmetrics *h, struct hostmetrics_stats *out);
/* The host's architecture as OpenTelemetry's host.arch names it (amd64,
 * arm64, else uname's machine); "unknown" when uname fails. */
const char *hm_host_arch(void);

#endif
