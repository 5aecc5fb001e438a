/* gpumetrics.h - NVIDIA GPU metrics through NVML, loaded at run time.
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
 * and runs without GPU metrics. ember declares the few NVML types and
 * functions it calls itself (gpumetrics.c), following NVML's documented
 * ABI; nothing of NVML is linked.
 *
 * Each collection adds, per GPU (labels gpu.index, gpu.uuid, gpu.name and
 * the host's): hw.gpu.utilization and hw.gpu.memory.utilization (%),
 * hw.gpu.power (W), hw.gpu.temp (°C), hw.gpu.clock.sm and hw.gpu.clock.mem
 * (MHz); per process with a compute context (the process's own labels,
 * hostmetrics.h, and the GPU's): hw.gpu.process.utilization (SM %, from
 * the samples since the last collection) and
 * hw.gpu.process.memory.utilization (% of the GPU's memory it holds).
 * At most GPU_MAX_DEVICES GPUs and GPU_MAX_PROCS processes per GPU.
 * A function NVML lacks or that fails leaves its metric out.
 * Ownership: the handle owns the library; one thread uses it.
 */
#ifndef EMBER_AGENT_GPUMETRICS_H
#define EMBER_AGENT_GPUMETRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "hostmetrics.h"
#include "metricbatch.h"

#define GPU_MAX_DEVICES 64
#define GPU_MAX_PROCS 256

struct gpumetrics;

/* path: -nvml-path ("" = none); auto_scan: -nvml-auto-scan. */
struct gpumetrics *gpumetrics_open(const char *path, bool auto_scan, struct buf *why);
void gpumetrics_close(struct gpumetrics *g);
/* The file NVML was loaded from, and how many GPUs it reported. */
const char *gpumetrics_library(const struct gpumetrics *g);
unsigned gpumetrics_devices(const struct gpumetrics *g);
/* Adds this interval's GPU points at ts_ms; hm gives the labels of
 * processes and the host. */
void gpumetrics_collect(struct gpumetrics *g, struct hostmetrics *hm, struct metric_batch *b,
			int64_t ts_ms);

#endif
