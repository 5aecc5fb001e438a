/* gputopo.h - the GPU topology of a host and its findings, from the
 * hw.gpu.topology.* and hw.numa.node.cpus points the agent sends
 * (agent/gpumetrics.h, docs/internals/metrics.md).
 *
 * Storage: the points are ordinary metric series (metrics.h); what the
 * topology answers is the latest collection of each host in the range:
 * per host the newest time of its hw.gpu.topology.device points, and
 * the points of every topology series at exactly that time (a process
 * that stopped feeding a GPU, a pair no longer reported, drop out). Older
 * collections stay as history under the metrics retention; nothing else
 * is kept.
 *
 * Findings (gputopo_findings):
 *  - numa_placement: a process feeding a GPU may run only on CPUs that
 *    are not near that GPU (its Cpus_allowed_list shares no CPU with the
 *    GPU's CPU affinity, or, when NVML gave none, with the CPUs of the
 *    GPU's NUMA node): it is fed from the far NUMA node. The fix pins it
 *    to the GPU's node with numactl.
 *  - pcie_fallback: two GPUs that both have NVLink links but none between
 *    them (directly or through NVSwitches) talk over PCIe.
 * A NUMA node's CPUs are those of NVML's affinity for the GPUs on it,
 * else /sys/devices/system/node's list.
 *
 * Bounds: at most TOPO_MAX_* GPUs, pairs, processes and nodes per host
 * and TOPO_MAX_HOSTS hosts (more are left out and counted in
 * "left_out"); every label is checked (an unparsable CPU list is treated
 * as unknown, never trusted).
 * Ownership: a struct gputopo owns all it holds; not thread-safe.
 */
#ifndef EMBER_SERVER_GPUTOPO_H
#define EMBER_SERVER_GPUTOPO_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "cpulist.h"
#include "jsonw.h"
#include "server/metrics/metrics.h"

#define TOPO_MAX_HOSTS 1000
#define TOPO_MAX_GPUS 64
#define TOPO_MAX_PAIRS (TOPO_MAX_GPUS * (TOPO_MAX_GPUS - 1) / 2)
#define TOPO_MAX_PROCS 1024
#define TOPO_MAX_NODES 64
#define TOPO_MAX_SERIES 200000 /* topology series read for one answer */

struct topo_gpu {
	char index[24], uuid[96], name[96], bus[32];
	int numa; /* -1 unknown */
	bool has_cpus;
	struct cpuset cpus;
	unsigned nvl_links, nvl_active;
};

struct topo_link {
	char a[24], b[24];
	unsigned nvlinks;
	char path[16], pcie[8];
};

struct topo_proc {
	char gpu[24];
	long pid;
	char name[128];
	struct cpuset cpus;
};

struct topo_node {
	int id;
	struct cpuset cpus;
};

/* One host's latest collection. */
struct topo_host {
	char name[256];
	int64_t ts;
	struct topo_gpu gpus[TOPO_MAX_GPUS];
	size_t ngpus;
	struct topo_link links[TOPO_MAX_PAIRS];
	size_t nlinks;
	struct topo_proc *procs; /* TOPO_MAX_PROCS */
	size_t nprocs;
	struct topo_node nodes[TOPO_MAX_NODES];
	size_t nnodes;
	uint64_t left_out;
};

struct gputopo {
	struct topo_host **hosts;
	size_t nhosts;
	uint64_t left_out; /* hosts past TOPO_MAX_HOSTS */
};

void gputopo_init(struct gputopo *t);
void gputopo_free(struct gputopo *t);
/* Adds one point (metric name, the series' labels as canonical JSON, its
 * time and value). Points of a time older than the host's newest
 * hw.gpu.topology.device point are dropped; a newer device point starts
 * the host over. Call with the device points first. */
void gputopo_add(struct gputopo *t, const char *metric, const char *labels, int64_t ts, double value);
/* Writes the findings of host h as a JSON array. */
void gputopo_findings(const struct topo_host *h, struct jsonw *w);
/* The route's answer (docs/api.md): body {"filter": {"start_ts",
 * "end_ts"}, "host": name or null}. 0 with the JSON in out, or 400/404/500
 * with a message in err. */
int gputopo_query(struct metrics_store *m, const char *project, const char *body, size_t len, struct buf *out,
		  struct buf *err);

#endif
