/* gpumetrics.h - NVIDIA GPU metrics and XID events through NVML, loaded at
 * run time.
 *
 * NVML (libnvidia-ml.so, shipped with the driver) is opened with dlopen,
 * in this order (docs/internals/metrics.md):
 *   1. -nvml-path, when given: that file only;
 *   2. else the soname libnvidia-ml.so.1 through the dynamic loader;
 *   3. then, with -nvml-auto-scan, libnvidia-ml.so.1 in the usual driver
 *      directories (GPU_SCAN_DIRS below, and the GPU operator's
 *      /run/nvidia/driver tree).
 * When none loads (or nvmlInit_v2 fails) gpumetrics_open returns NULL and
 * says in why which paths it tried and what failed: the agent logs it once
 * and runs without GPU metrics. ember compiles against NVIDIA's nvml.h
 * (Debian's libnvidia-ml-dev, fetched by scripts/fetch-cuda-headers.sh)
 * and looks every function up with dlsym; nothing of NVML is linked.
 *
 * Devices: every GPU NVML enumerates, and, for a GPU in MIG mode, each of
 * its MIG devices as a device of its own (gpu.index "<gpu>/mig<i>", its
 * own gpu.uuid and gpu.name, gpu.parent.index and gpu.parent.uuid).
 * Each collection adds, per device, the hw.gpu.* metrics of
 * docs/internals/metrics.md (utilization, memory, power and its limit,
 * temperature, clocks, clocks-throttle reasons, PCIe and per-link NVLink
 * throughput, NVLink errors, ECC counts, retired pages, remapped rows, GPM
 * SM occupancy / tensor activity / DRAM bandwidth where the GPU has GPM)
 * and per process with a compute context its SM utilization and memory.
 * XID events: a thread waits on an NVML event set (nvmlEventSetWait_v2,
 * nvmlEventTypeXidCriticalError) and queues each XID with the time it
 * arrived; the next collection adds it as a point of hw.gpu.xid (value 1,
 * labels gpu.xid.code and gpu.xid.meaning). At most GPU_MAX_DEVICES
 * devices, GPU_MAX_PROCS processes per device and GPU_MAX_XIDS queued
 * XIDs (more are counted in hw.gpu.xid.dropped). A function NVML lacks or
 * that fails leaves its metric out.
 * Topology, each collection (hw.gpu.topology.*): per GPU its NUMA node
 * and near CPUs (NVML's memory and CPU affinity, asked once) and its
 * NVLinks; per pair of GPUs the NVLinks between them (NV<n>) or else the
 * PCIe path (nvmlDeviceGetTopologyCommonAncestor, as PIX/PXB/PHB/NODE/
 * SYS); per process feeding a GPU (a compute process of the GPU or of one
 * of its MIG devices) its Cpus_allowed_list from /proc/PID/status; per
 * NUMA node of the host its CPUs (/sys/devices/system/node). The server
 * draws the findings from these (server/metrics/gputopo.h).
 * Ownership: the handle owns the library and its event thread; one thread
 * calls gpumetrics_collect.
 */
#ifndef EMBER_AGENT_GPUMETRICS_H
#define EMBER_AGENT_GPUMETRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "cpulist.h"
#include "hostmetrics.h"
#include "metricbatch.h"

#define GPU_MAX_DEVICES 64
#define GPU_MAX_PROCS 256
#define GPU_MAX_XIDS 256

struct gpumetrics;

/* path: -nvml-path ("" = none); auto_scan: -nvml-auto-scan. */
struct gpumetrics *gpumetrics_open(const char *path, bool auto_scan, struct buf *why);
void gpumetrics_close(struct gpumetrics *g);
/* The file NVML was loaded from, and how many devices (GPUs and MIG
 * devices) it reported. */
const char *gpumetrics_library(const struct gpumetrics *g);
unsigned gpumetrics_devices(const struct gpumetrics *g);
/* Adds this interval's GPU points at ts_ms (and the XIDs queued since the
 * last call, at their own times); hm gives the labels of processes and
 * the host. */
void gpumetrics_collect(struct gpumetrics *g, struct hostmetrics *hm, struct metric_batch *b,
			int64_t ts_ms);
/* The meaning of XID code (a short phrase), or NULL when ember's table of
 * common XIDs does not have it. */
const char *gpumetrics_xid_meaning(unsigned long long code);
/* The CPUs of Cpus_allowed_list in the text of /proc/PID/status: 0, or
 * -1 when absent, malformed or empty. Exposed for tests. */
int gpu_parse_cpus_allowed(const char *status, struct cpuset *out);

#endif
