/* gpumetrics.c - see gpumetrics.h. */
#include "gpumetrics.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <nvml.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpulist.h"
#include "util.h"

/* Every NVML function ember calls, as a pointer of the type nvml.h
 * declares, named as the function. */
#define NVML_FN(f) __typeof__(f) *f
struct nvml_api {
	NVML_FN(nvmlInit_v2);
	NVML_FN(nvmlShutdown);
	NVML_FN(nvmlErrorString);
	NVML_FN(nvmlDeviceGetCount_v2);
	NVML_FN(nvmlDeviceGetHandleByIndex_v2);
	NVML_FN(nvmlDeviceGetName);
	NVML_FN(nvmlDeviceGetUUID);
	NVML_FN(nvmlDeviceGetPciInfo_v3);
	NVML_FN(nvmlDeviceGetUtilizationRates);
	NVML_FN(nvmlDeviceGetMemoryInfo);
	NVML_FN(nvmlDeviceGetMemoryInfo_v2);
	NVML_FN(nvmlDeviceGetPowerUsage);
	NVML_FN(nvmlDeviceGetEnforcedPowerLimit);
	NVML_FN(nvmlDeviceGetTemperature);
	NVML_FN(nvmlDeviceGetClockInfo);
	NVML_FN(nvmlDeviceGetCurrentClocksThrottleReasons);
	NVML_FN(nvmlDeviceGetPcieThroughput);
	NVML_FN(nvmlDeviceGetNvLinkState);
	NVML_FN(nvmlDeviceGetNvLinkRemotePciInfo_v2);
	NVML_FN(nvmlDeviceGetNvLinkErrorCounter);
	NVML_FN(nvmlDeviceGetFieldValues);
	NVML_FN(nvmlDeviceGetTotalEccErrors);
	NVML_FN(nvmlDeviceGetRetiredPages);
	NVML_FN(nvmlDeviceGetRemappedRows);
	NVML_FN(nvmlDeviceGetComputeRunningProcesses_v3);
	NVML_FN(nvmlDeviceGetProcessUtilization);
	NVML_FN(nvmlDeviceGetMigMode);
	NVML_FN(nvmlDeviceGetMaxMigDeviceCount);
	NVML_FN(nvmlDeviceGetMigDeviceHandleByIndex);
	NVML_FN(nvmlDeviceGetGpuInstanceId);
	NVML_FN(nvmlGpmQueryDeviceSupport);
	NVML_FN(nvmlGpmSampleAlloc);
	NVML_FN(nvmlGpmSampleFree);
	NVML_FN(nvmlGpmSampleGet);
	NVML_FN(nvmlGpmMetricsGet);
	NVML_FN(nvmlEventSetCreate);
	NVML_FN(nvmlDeviceRegisterEvents);
	NVML_FN(nvmlEventSetWait_v2);
	NVML_FN(nvmlEventSetFree);
	NVML_FN(nvmlDeviceGetCpuAffinity);
	NVML_FN(nvmlDeviceGetMemoryAffinity);
	NVML_FN(nvmlDeviceGetTopologyCommonAncestor);
};

#define NO_ID 0xFFFFFFFFu /* NVML's "no GPU/compute instance" */

struct gpu_dev {
	nvmlDevice_t h;
	char index[24], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "" for a MIG device */
	int parent;                                   /* dev[] index of a MIG device's GPU; -1 */
	unsigned gi;                                  /* a MIG device's GPU instance id */
	unsigned long long last_seen_us;              /* process samples newer than this */
	/* NVLink data counters (KiB) of the last collection, per link. */
	unsigned long long nvl_kib[NVML_NVLINK_MAX_LINKS][2];
	long long nvl_us[NVML_NVLINK_MAX_LINKS];
	bool nvl_have[NVML_NVLINK_MAX_LINKS];
	/* The other end of each link, asked once ("" = unknown). */
	char nvl_peer[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
	bool nvl_peer_asked[NVML_NVLINK_MAX_LINKS];
	/* This collection's NVLink: links the GPU has, those up. */
	bool nvl_up[NVML_NVLINK_MAX_LINKS];
	unsigned nvl_links, nvl_active;
	/* Topology, asked once: the NUMA node (-1 unknown) and the CPUs near
	 * the GPU as a CPU list ("" unknown). */
	int numa;
	char cpus[MB_MAX_STRING];
	/* The compute processes of this collection. */
	unsigned pids[GPU_MAX_PROCS];
	unsigned npids;
	/* GPM: two samples, the newer one at gpm[gpm_new]; metrics need both. */
	nvmlGpmSample_t gpm[2];
	int gpm_new;
	bool gpm_taken; /* gpm[gpm_new] holds a sample */
};

struct xid_event {
	int64_t ms;
	unsigned dev;
	unsigned long long code;
};

struct gpumetrics {
	void *lib;
	char path[512];
	struct nvml_api api;
	struct gpu_dev dev[GPU_MAX_DEVICES];
	unsigned ndev;
	/* XIDs: the event thread fills the queue, collect empties it; mu
	 * guards xids, nxid and dropped. */
	nvmlEventSet_t events;
	pthread_t thread;
	bool thread_on;
	atomic_bool stop;
	pthread_mutex_t mu;
	struct xid_event xids[GPU_MAX_XIDS];
	unsigned nxid;
	unsigned long long dropped;
};

/* Where processes' CPU affinity and the NUMA nodes are read. */
#define GPU_PROC "/proc"
#define GPU_NODE_DIR "/sys/devices/system/node"

/* The usual homes of the driver's user-space libraries. */
static const char *const GPU_SCAN_DIRS[] = {
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib",
	"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
	"/run/nvidia/driver/usr/lib/x86_64-linux-gnu", "/run/nvidia/driver/usr/lib64",
	"/run/nvidia/driver/usr/lib/aarch64-linux-gnu", "/host/usr/lib/x86_64-linux-gnu",
	"/host/usr/lib64",
};

/* Common XIDs (NVIDIA's XID catalog), in ember's words. */
static const struct {
	unsigned code;
	const char *meaning;
} XIDS[] = {
	{ 8, "GPU stopped processing" },
	{ 13, "graphics engine exception (often an out-of-range access in a kernel)" },
	{ 31, "GPU memory page fault (an illegal address in an application)" },
	{ 32, "invalid or corrupted push buffer stream" },
	{ 38, "driver firmware error" },
	{ 43, "GPU stopped processing (a channel reset after an application fault)" },
	{ 45, "preemptive cleanup after earlier errors" },
	{ 48, "double-bit ECC error" },
	{ 61, "internal micro-controller breakpoint or warning" },
	{ 62, "internal micro-controller halt" },
	{ 63, "ECC page retirement or row remapping recorded" },
	{ 64, "ECC page retirement or row remapping failed" },
	{ 68, "video decoder exception" },
	{ 69, "graphics engine class error" },
	{ 74, "NVLink error" },
	{ 79, "GPU has fallen off the bus" },
	{ 92, "high single-bit ECC error rate" },
	{ 94, "contained ECC error (the affected application is stopped)" },
	{ 95, "uncontained ECC error (the GPU needs a reset)" },
	{ 119, "GSP RPC timeout" },
	{ 120, "GSP error" },
	{ 121, "C2C link corrected error" },
	{ 140, "unrecovered ECC error" },
};

const char *gpumetrics_xid_meaning(unsigned long long code)
{
	for (size_t i = 0; i < ARRAY_SIZE(XIDS); i++)
		if (XIDS[i].code == code)
			return XIDS[i].meaning;
	return NULL;
}

#define LOAD(a, lib, f) (*(void **)&(a).f = dlsym((lib), #f))

static int try_load(struct gpumetrics *g, const char *path, struct buf *why)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		buf_printf(why, "%s%s (%.200s)", why->len ? "; " : "", path, e ? e : "cannot load");
		return -1;
	}
	struct nvml_api a = { 0 };
	LOAD(a, lib, nvmlInit_v2);
	LOAD(a, lib, nvmlShutdown);
	LOAD(a, lib, nvmlErrorString);
	LOAD(a, lib, nvmlDeviceGetCount_v2);
	LOAD(a, lib, nvmlDeviceGetHandleByIndex_v2);
	LOAD(a, lib, nvmlDeviceGetName);
	LOAD(a, lib, nvmlDeviceGetUUID);
	LOAD(a, lib, nvmlDeviceGetPciInfo_v3);
	LOAD(a, lib, nvmlDeviceGetUtilizationRates);
	LOAD(a, lib, nvmlDeviceGetMemoryInfo);
	LOAD(a, lib, nvmlDeviceGetMemoryInfo_v2);
	LOAD(a, lib, nvmlDeviceGetPowerUsage);
	LOAD(a, lib, nvmlDeviceGetEnforcedPowerLimit);
	LOAD(a, lib, nvmlDeviceGetTemperature);
	LOAD(a, lib, nvmlDeviceGetClockInfo);
	LOAD(a, lib, nvmlDeviceGetCurrentClocksThrottleReasons);
	LOAD(a, lib, nvmlDeviceGetPcieThroughput);
	LOAD(a, lib, nvmlDeviceGetNvLinkState);
	LOAD(a, lib, nvmlDeviceGetNvLinkRemotePciInfo_v2);
	LOAD(a, lib, nvmlDeviceGetNvLinkErrorCounter);
	LOAD(a, lib, nvmlDeviceGetFieldValues);
	LOAD(a, lib, nvmlDeviceGetTotalEccErrors);
	LOAD(a, lib, nvmlDeviceGetRetiredPages);
	LOAD(a, lib, nvmlDeviceGetRemappedRows);
	LOAD(a, lib, nvmlDeviceGetComputeRunningProcesses_v3);
	LOAD(a, lib, nvmlDeviceGetProcessUtilization);
	LOAD(a, lib, nvmlDeviceGetMigMode);
	LOAD(a, lib, nvmlDeviceGetMaxMigDeviceCount);
	LOAD(a, lib, nvmlDeviceGetMigDeviceHandleByIndex);
	LOAD(a, lib, nvmlDeviceGetGpuInstanceId);
	LOAD(a, lib, nvmlGpmQueryDeviceSupport);
	LOAD(a, lib, nvmlGpmSampleAlloc);
	LOAD(a, lib, nvmlGpmSampleFree);
	LOAD(a, lib, nvmlGpmSampleGet);
	LOAD(a, lib, nvmlGpmMetricsGet);
	LOAD(a, lib, nvmlEventSetCreate);
	LOAD(a, lib, nvmlDeviceRegisterEvents);
	LOAD(a, lib, nvmlEventSetWait_v2);
	LOAD(a, lib, nvmlEventSetFree);
	LOAD(a, lib, nvmlDeviceGetCpuAffinity);
	LOAD(a, lib, nvmlDeviceGetMemoryAffinity);
	LOAD(a, lib, nvmlDeviceGetTopologyCommonAncestor);
	if (!a.nvmlInit_v2 || !a.nvmlShutdown || !a.nvmlDeviceGetCount_v2 || !a.nvmlDeviceGetHandleByIndex_v2) {
		buf_printf(why, "%s%s (not NVML: nvmlInit_v2 or nvmlDeviceGetCount_v2 missing)",
			   why->len ? "; " : "", path);
		dlclose(lib);
		return -1;
	}
	nvmlReturn_t rc = a.nvmlInit_v2();
	if (rc != NVML_SUCCESS) {
		buf_printf(why, "%s%s (nvmlInit_v2 failed: %s)", why->len ? "; " : "", path,
			   a.nvmlErrorString ? a.nvmlErrorString(rc) : "error");
		dlclose(lib);
		return -1;
	}
	g->lib = lib;
	g->api = a;
	snprintf(g->path, sizeof(g->path), "%s", path);
	return 0;
}

static void names_of(struct gpumetrics *g, struct gpu_dev *d)
{
	if (!g->api.nvmlDeviceGetName || g->api.nvmlDeviceGetName(d->h, d->name, sizeof(d->name)) != NVML_SUCCESS)
		snprintf(d->name, sizeof(d->name), "unknown");
	if (!g->api.nvmlDeviceGetUUID || g->api.nvmlDeviceGetUUID(d->h, d->uuid, sizeof(d->uuid)) != NVML_SUCCESS)
		d->uuid[0] = '\0';
	d->name[sizeof(d->name) - 1] = d->uuid[sizeof(d->uuid) - 1] = '\0';
}

/* The GPU's NUMA node (the first node of its memory affinity) and the
 * CPUs of that node (its CPU affinity), as NVML tells them. A list too
 * long for a label is left out rather than cut. */
static void affinity_of(struct gpumetrics *g, struct gpu_dev *d)
{
	const struct nvml_api *a = &g->api;
	unsigned long set[CPULIST_MAX_ID / (8 * sizeof(unsigned long))];
	const unsigned words = ARRAY_SIZE(set), bits = 8 * sizeof(unsigned long);
	d->numa = -1;
	d->cpus[0] = '\0';
	memset(set, 0, sizeof(set));
	if (a->nvmlDeviceGetMemoryAffinity &&
	    a->nvmlDeviceGetMemoryAffinity(d->h, words, set, NVML_AFFINITY_SCOPE_NODE) == NVML_SUCCESS)
		for (unsigned i = 0; i < words * bits && d->numa < 0; i++)
			if (set[i / bits] >> (i % bits) & 1)
				d->numa = (int)i;
	memset(set, 0, sizeof(set));
	if (!a->nvmlDeviceGetCpuAffinity || a->nvmlDeviceGetCpuAffinity(d->h, words, set) != NVML_SUCCESS)
		return;
	struct cpuset cs = { 0 };
	for (unsigned i = 0; i < words * bits; i++)
		if (set[i / bits] >> (i % bits) & 1)
			cpuset_add(&cs, (int)i);
	struct buf t = { 0 };
	cpuset_format(&cs, &t);
	if (t.len && t.len < sizeof(d->cpus))
		memcpy(d->cpus, t.data, t.len + 1);
	buf_free(&t);
}

/* GPM needs two samples per device; a device without GPM gets none. */
static void gpm_setup(struct gpumetrics *g, struct gpu_dev *d)
{
	const struct nvml_api *a = &g->api;
	if (!a->nvmlGpmQueryDeviceSupport || !a->nvmlGpmSampleAlloc || !a->nvmlGpmSampleFree ||
	    !a->nvmlGpmSampleGet || !a->nvmlGpmMetricsGet)
		return;
	nvmlGpmSupport_t s = { .version = NVML_GPM_SUPPORT_VERSION };
	if (a->nvmlGpmQueryDeviceSupport(d->h, &s) != NVML_SUCCESS || !s.isSupportedDevice)
		return;
	if (a->nvmlGpmSampleAlloc(&d->gpm[0]) != NVML_SUCCESS) {
		d->gpm[0] = NULL;
		return;
	}
	if (a->nvmlGpmSampleAlloc(&d->gpm[1]) != NVML_SUCCESS) {
		a->nvmlGpmSampleFree(d->gpm[0]);
		d->gpm[0] = d->gpm[1] = NULL;
	}
}

/* A GPU in MIG mode: each of its MIG devices becomes a device of its own. */
static void add_mig_devices(struct gpumetrics *g, unsigned parent)
{
	const struct nvml_api *a = &g->api;
	unsigned int cur = 0, pending = 0, max = 0;
	if (!a->nvmlDeviceGetMigMode || !a->nvmlDeviceGetMaxMigDeviceCount || !a->nvmlDeviceGetMigDeviceHandleByIndex ||
	    a->nvmlDeviceGetMigMode(g->dev[parent].h, &cur, &pending) != NVML_SUCCESS || cur != NVML_DEVICE_MIG_ENABLE ||
	    a->nvmlDeviceGetMaxMigDeviceCount(g->dev[parent].h, &max) != NVML_SUCCESS)
		return;
	for (unsigned int i = 0; i < max && i < 64 && g->ndev < GPU_MAX_DEVICES; i++) {
		struct gpu_dev *d = &g->dev[g->ndev];
		memset(d, 0, sizeof(*d));
		if (a->nvmlDeviceGetMigDeviceHandleByIndex(g->dev[parent].h, i, &d->h) != NVML_SUCCESS)
			continue; /* an empty slot */
		d->parent = (int)parent;
		char pidx[sizeof(d->index)];
		memcpy(pidx, g->dev[parent].index, sizeof(pidx));
		snprintf(d->index, sizeof(d->index), "%.12s/mig%u", pidx, i);
		d->gi = NO_ID;
		if (a->nvmlDeviceGetGpuInstanceId && a->nvmlDeviceGetGpuInstanceId(d->h, &d->gi) != NVML_SUCCESS)
			d->gi = NO_ID;
		names_of(g, d);
		gpm_setup(g, d);
		g->ndev++;
	}
}

/* The event thread: waits for XIDs (half a second at a time, so that
 * close is prompt) and queues them with their arrival time. */
static void *xid_thread(void *arg)
{
	struct gpumetrics *g = arg;
	while (!atomic_load(&g->stop)) {
		nvmlEventData_t e = { 0 };
		nvmlReturn_t rc = g->api.nvmlEventSetWait_v2(g->events, &e, 500);
		if (rc == NVML_ERROR_TIMEOUT)
			continue;
		if (rc != NVML_SUCCESS) {
			/* e.g. GPU_IS_LOST: do not spin; try again later. */
			struct timespec ts = { 0, 500 * 1000000L };
			nanosleep(&ts, NULL);
			continue;
		}
		if (!(e.eventType & nvmlEventTypeXidCriticalError))
			continue;
		int64_t ms = now_unix_ms();
		/* The GPU it came from, or its MIG device when NVML says which. */
		unsigned dev = GPU_MAX_DEVICES;
		for (unsigned i = 0; i < g->ndev && dev == GPU_MAX_DEVICES; i++)
			if (g->dev[i].h == e.device && g->dev[i].parent < 0)
				dev = i;
		if (dev == GPU_MAX_DEVICES)
			continue;
		for (unsigned i = 0; e.gpuInstanceId != NO_ID && i < g->ndev; i++)
			if (g->dev[i].parent == (int)dev && g->dev[i].gi == e.gpuInstanceId) {
				dev = i;
				break;
			}
		pthread_mutex_lock(&g->mu);
		if (g->nxid < GPU_MAX_XIDS)
			g->xids[g->nxid++] = (struct xid_event){ .ms = ms, .dev = dev, .code = e.eventData };
		else
			g->dropped++;
		pthread_mutex_unlock(&g->mu);
	}
	return NULL;
}

/* Registers every GPU for XIDs and starts the thread; without events
 * (an old driver, a GPU that has none) there are no XIDs, nothing else. */
static void xid_start(struct gpumetrics *g)
{
	const struct nvml_api *a = &g->api;
	if (!a->nvmlEventSetCreate || !a->nvmlDeviceRegisterEvents || !a->nvmlEventSetWait_v2 || !a->nvmlEventSetFree)
		return;
	if (a->nvmlEventSetCreate(&g->events) != NVML_SUCCESS)
		return;
	unsigned registered = 0;
	for (unsigned i = 0; i < g->ndev; i++)
		if (g->dev[i].parent < 0 &&
		    a->nvmlDeviceRegisterEvents(g->dev[i].h, nvmlEventTypeXidCriticalError, g->events) == NVML_SUCCESS)
			registered++;
	if (registered && pthread_create(&g->thread, NULL, xid_thread, g) == 0) {
		pthread_setname_np(g->thread, "ember-gpu-xid");
		g->thread_on = true;
		return;
	}
	a->nvmlEventSetFree(g->events);
	g->events = NULL;
}

struct gpumetrics *gpumetrics_open(const char *path, bool auto_scan, struct buf *why)
{
	struct gpumetrics *g = xcalloc(1, sizeof(*g));
	int rc = -1;
	if (path && *path) {
		rc = try_load(g, path, why);
	} else {
		rc = try_load(g, "libnvidia-ml.so.1", why);
		for (size_t i = 0; rc < 0 && auto_scan && i < ARRAY_SIZE(GPU_SCAN_DIRS); i++) {
			char p[512];
			snprintf(p, sizeof(p), "%s/libnvidia-ml.so.1", GPU_SCAN_DIRS[i]);
			FILE *f = fopen(p, "re");
			if (!f)
				continue;
			fclose(f);
			rc = try_load(g, p, why);
		}
		/* The GPU operator's driver container: /run/nvidia/driver/... */
		glob_t gl;
		if (rc < 0 && auto_scan &&
		    glob("/run/nvidia/driver/usr/lib*/**/libnvidia-ml.so.1", 0, NULL, &gl) == 0) {
			for (size_t i = 0; rc < 0 && i < gl.gl_pathc && i < 16; i++)
				rc = try_load(g, gl.gl_pathv[i], why);
			globfree(&gl);
		}
		if (rc < 0 && !auto_scan)
			buf_puts(why, "; -nvml-auto-scan would also search the usual driver directories");
	}
	if (rc < 0) {
		free(g);
		return NULL;
	}
	g->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	unsigned int n = 0;
	if (g->api.nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS)
		n = 0;
	unsigned gpus[GPU_MAX_DEVICES], ngpu = 0;
	for (unsigned int i = 0; i < n && g->ndev < GPU_MAX_DEVICES; i++) {
		struct gpu_dev *d = &g->dev[g->ndev];
		if (g->api.nvmlDeviceGetHandleByIndex_v2(i, &d->h) != NVML_SUCCESS)
			continue;
		d->parent = -1;
		d->gi = NO_ID;
		snprintf(d->index, sizeof(d->index), "%u", i);
		names_of(g, d);
		nvmlPciInfo_t pci;
		if (g->api.nvmlDeviceGetPciInfo_v3 && g->api.nvmlDeviceGetPciInfo_v3(d->h, &pci) == NVML_SUCCESS) {
			pci.busId[sizeof(pci.busId) - 1] = '\0';
			snprintf(d->bus, sizeof(d->bus), "%s", pci.busId);
		}
		gpm_setup(g, d);
		affinity_of(g, d);
		gpus[ngpu++] = g->ndev++;
	}
	for (unsigned i = 0; i < ngpu; i++)
		add_mig_devices(g, gpus[i]);
	xid_start(g);
	return g;
}

void gpumetrics_close(struct gpumetrics *g)
{
	if (!g)
		return;
	if (g->thread_on) {
		atomic_store(&g->stop, true);
		pthread_join(g->thread, NULL);
	}
	if (g->events)
		g->api.nvmlEventSetFree(g->events);
	for (unsigned i = 0; i < g->ndev; i++)
		for (int k = 0; k < 2; k++)
			if (g->dev[i].gpm[k])
				g->api.nvmlGpmSampleFree(g->dev[i].gpm[k]);
	g->api.nvmlShutdown();
	dlclose(g->lib);
	free(g);
}

const char *gpumetrics_library(const struct gpumetrics *g)
{
	return g->path;
}

unsigned gpumetrics_devices(const struct gpumetrics *g)
{
	return g->ndev;
}

/* --- one collection -------------------------------------------------------- */

/* The device's labels, as key/value strings (at most DEV_KV). */
#define DEV_KV 10
static size_t dev_kv(const struct gpumetrics *g, const struct gpu_dev *d, const char **kv)
{
	size_t n = 0;
	kv[n++] = "gpu.index", kv[n++] = d->index;
	kv[n++] = "gpu.uuid", kv[n++] = d->uuid;
	kv[n++] = "gpu.name", kv[n++] = d->name;
	if (d->parent >= 0) {
		kv[n++] = "gpu.parent.index", kv[n++] = g->dev[d->parent].index;
		kv[n++] = "gpu.parent.uuid", kv[n++] = g->dev[d->parent].uuid;
	}
	return n;
}

/* The most extra pairs a point of this file carries. */
#define EXTRA_KV 10

/* The host's labels, the device's, and the extra pairs (n strings, at most
 * EXTRA_KV; a pair whose key is NULL is left out). */
static uint32_t labels_kv(const struct gpumetrics *g, const struct gpu_dev *d, struct hostmetrics *hm,
			  struct metric_batch *b, const char *const *extra, size_t nextra)
{
	const char *kv[DEV_KV + EXTRA_KV];
	size_t n = dev_kv(g, d, kv);
	for (size_t i = 0; i + 1 < nextra && i + 1 < EXTRA_KV; i += 2)
		if (extra[i])
			kv[n++] = extra[i], kv[n++] = extra[i + 1];
	return hostmetrics_host_labels(hm, b, kv, n);
}

/* The host's labels, the device's, and up to two more pairs. */
static uint32_t labels(const struct gpumetrics *g, const struct gpu_dev *d, struct hostmetrics *hm,
		       struct metric_batch *b, const char *k1, const char *v1, const char *k2, const char *v2)
{
	const char *extra[4] = { k1, v1, k2, v2 };
	return labels_kv(g, d, hm, b, extra, 4);
}

/* A process's labels (hostmetrics.h), the device's on top, and the extra
 * pairs (as labels_kv). */
static uint32_t proc_gpu_labels_kv(const struct gpumetrics *g, const struct gpu_dev *d, struct hostmetrics *hm,
				   struct metric_batch *b, unsigned int pid, const char *const *extra, size_t nextra)
{
	uint32_t ls = hostmetrics_process_labels(hm, b, (int32_t)MIN(pid, (unsigned)INT32_MAX));
	uint32_t kv[2 * MB_MAX_LABELS];
	size_t nkv = MIN((size_t)b->set_lengths[ls], ARRAY_SIZE(kv) - DEV_KV - EXTRA_KV);
	memcpy(kv, b->set_strings + b->set_offsets[ls], nkv * sizeof(uint32_t));
	const char *dkv[DEV_KV];
	size_t nd = dev_kv(g, d, dkv);
	for (size_t k = 0; k < nd; k++)
		kv[nkv++] = metric_batch_str(b, dkv[k]);
	for (size_t i = 0; i + 1 < nextra && i + 1 < EXTRA_KV; i += 2)
		if (extra[i]) {
			kv[nkv++] = metric_batch_str(b, extra[i]);
			kv[nkv++] = metric_batch_str(b, extra[i + 1]);
		}
	return metric_batch_labels(b, kv, nkv);
}

static uint32_t proc_gpu_labels(const struct gpumetrics *g, const struct gpu_dev *d, struct hostmetrics *hm,
				struct metric_batch *b, unsigned int pid)
{
	return proc_gpu_labels_kv(g, d, hm, b, pid, NULL, 0);
}

static void process_points(struct gpumetrics *g, struct gpu_dev *d, struct hostmetrics *hm,
			   struct metric_batch *b, int64_t ts, unsigned long long mem_total)
{
	const struct nvml_api *a = &g->api;
	d->npids = 0;
	/* Memory per process. */
	if (a->nvmlDeviceGetComputeRunningProcesses_v3) {
		nvmlProcessInfo_t *pi = xcalloc(GPU_MAX_PROCS, sizeof(*pi));
		unsigned int n = GPU_MAX_PROCS;
		if (a->nvmlDeviceGetComputeRunningProcesses_v3(d->h, &n, pi) == NVML_SUCCESS) {
			for (unsigned int i = 0; i < n && i < GPU_MAX_PROCS; i++) {
				d->pids[d->npids++] = pi[i].pid;
				/* NVML_VALUE_NOT_AVAILABLE (~0) without the rights to see it. */
				if (pi[i].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
					continue;
				uint32_t ls = proc_gpu_labels(g, d, hm, b, pi[i].pid);
				metric_batch_add(b, "hw.gpu.process.memory.usage", "bytes", ls, ts,
						 (double)pi[i].usedGpuMemory);
				if (mem_total)
					metric_batch_add(b, "hw.gpu.process.memory.utilization", "%", ls, ts,
							 100.0 * (double)pi[i].usedGpuMemory / (double)mem_total);
			}
		}
		free(pi);
	}
	/* SM utilization per process, from the samples since the last time. */
	if (a->nvmlDeviceGetProcessUtilization) {
		nvmlProcessUtilizationSample_t *ps = xcalloc(GPU_MAX_PROCS, sizeof(*ps));
		unsigned int n = GPU_MAX_PROCS;
		unsigned long long newest = d->last_seen_us;
		if (a->nvmlDeviceGetProcessUtilization(d->h, ps, &n, d->last_seen_us) == NVML_SUCCESS) {
			for (unsigned int i = 0; i < n && i < GPU_MAX_PROCS; i++) {
				metric_batch_add(b, "hw.gpu.process.utilization", "%",
						 proc_gpu_labels(g, d, hm, b, ps[i].pid), ts,
						 (double)MIN(ps[i].smUtil, 100u));
				newest = MAX(newest, ps[i].timeStamp);
			}
		}
		d->last_seen_us = newest;
		free(ps);
	}
}

static const struct {
	unsigned long long bit;
	const char *name;
} THROTTLE[] = {
	{ nvmlClocksThrottleReasonGpuIdle, "gpu_idle" },
	{ nvmlClocksThrottleReasonApplicationsClocksSetting, "applications_clocks_setting" },
	{ nvmlClocksThrottleReasonSwPowerCap, "sw_power_cap" },
	{ nvmlClocksThrottleReasonHwSlowdown, "hw_slowdown" },
	{ nvmlClocksThrottleReasonSyncBoost, "sync_boost" },
	{ nvmlClocksThrottleReasonSwThermalSlowdown, "sw_thermal_slowdown" },
	{ nvmlClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown" },
	{ nvmlClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown" },
	{ nvmlClocksThrottleReasonDisplayClockSetting, "display_clock_setting" },
};

static const char *const NVLINK_ERRORS[] = {
	[NVML_NVLINK_ERROR_DL_REPLAY] = "replay",
	[NVML_NVLINK_ERROR_DL_RECOVERY] = "recovery",
	[NVML_NVLINK_ERROR_DL_CRC_FLIT] = "crc_flit",
	[NVML_NVLINK_ERROR_DL_CRC_DATA] = "crc_data",
};

/* The NVLink peer of a link: the index of the GPU at the remote PCI bus
 * when it is one of this host's, else the remote bus id. */
static void nvlink_peer(const struct gpumetrics *g, const struct gpu_dev *d, unsigned link, char *out, size_t n)
{
	nvmlPciInfo_t pci;
	out[0] = '\0';
	if (!g->api.nvmlDeviceGetNvLinkRemotePciInfo_v2 ||
	    g->api.nvmlDeviceGetNvLinkRemotePciInfo_v2(d->h, link, &pci) != NVML_SUCCESS)
		return;
	pci.busId[sizeof(pci.busId) - 1] = '\0';
	for (unsigned i = 0; i < g->ndev; i++)
		if (g->dev[i].parent < 0 && g->dev[i].bus[0] && strcasecmp(g->dev[i].bus, pci.busId) == 0) {
			snprintf(out, n, "%s", g->dev[i].index);
			return;
		}
	snprintf(out, n, "%s", pci.busId);
}

static void nvlink_points(struct gpumetrics *g, struct gpu_dev *d, struct hostmetrics *hm,
			  struct metric_batch *b, int64_t ts)
{
	const struct nvml_api *a = &g->api;
	memset(d->nvl_up, 0, sizeof(d->nvl_up));
	d->nvl_links = d->nvl_active = 0;
	if (!a->nvmlDeviceGetNvLinkState)
		return;
	for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
		nvmlEnableState_t on = NVML_FEATURE_DISABLED;
		nvmlReturn_t rc = a->nvmlDeviceGetNvLinkState(d->h, link, &on);
		if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT)
			break; /* no NVLink, or no more links */
		if (rc == NVML_SUCCESS)
			d->nvl_links++;
		if (rc != NVML_SUCCESS || on != NVML_FEATURE_ENABLED)
			continue;
		d->nvl_up[link] = true;
		d->nvl_active++;
		char ln[12];
		snprintf(ln, sizeof(ln), "%u", link);
		if (!d->nvl_peer_asked[link]) {
			nvlink_peer(g, d, link, d->nvl_peer[link], sizeof(d->nvl_peer[link]));
			d->nvl_peer_asked[link] = true;
		}
		const char *peer = d->nvl_peer[link];
		/* Throughput: the data counters (KiB) over the time between two
		 * collections, as NVML stamps them. */
		if (a->nvmlDeviceGetFieldValues) {
			nvmlFieldValue_t fv[2] = {
				{ .fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, .scopeId = link },
				{ .fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, .scopeId = link },
			};
			if (a->nvmlDeviceGetFieldValues(d->h, 2, fv) == NVML_SUCCESS && fv[0].nvmlReturn == NVML_SUCCESS &&
			    fv[1].nvmlReturn == NVML_SUCCESS) {
				unsigned long long kib[2] = { fv[0].value.ullVal, fv[1].value.ullVal };
				long long us = fv[0].timestamp;
				if (d->nvl_have[link] && us > d->nvl_us[link] && kib[0] >= d->nvl_kib[link][0] &&
				    kib[1] >= d->nvl_kib[link][1]) {
					double s = (double)(us - d->nvl_us[link]) / 1e6;
					const char *names[2] = { "hw.gpu.nvlink.tx", "hw.gpu.nvlink.rx" };
					uint32_t ls = labels(g, d, hm, b, "gpu.nvlink.link", ln,
							     peer[0] ? "gpu.nvlink.peer" : NULL, peer);
					for (int k = 0; k < 2; k++)
						metric_batch_add(b, names[k], "bytes/s", ls, ts,
								 (double)(kib[k] - d->nvl_kib[link][k]) * 1024.0 / s);
				}
				d->nvl_kib[link][0] = kib[0];
				d->nvl_kib[link][1] = kib[1];
				d->nvl_us[link] = us;
				d->nvl_have[link] = true;
			}
		}
		for (unsigned e = 0; a->nvmlDeviceGetNvLinkErrorCounter && e < ARRAY_SIZE(NVLINK_ERRORS); e++) {
			unsigned long long c;
			if (a->nvmlDeviceGetNvLinkErrorCounter(d->h, link, (nvmlNvLinkErrorCounter_t)e, &c) == NVML_SUCCESS)
				metric_batch_add(b, "hw.gpu.nvlink.errors", "1",
						 labels(g, d, hm, b, "gpu.nvlink.link", ln, "error.type", NVLINK_ERRORS[e]),
						 ts, (double)c);
		}
	}
}

static void ecc_points(struct gpumetrics *g, struct gpu_dev *d, struct hostmetrics *hm, struct metric_batch *b,
		       int64_t ts)
{
	const struct nvml_api *a = &g->api;
	static const char *const type[2] = { [NVML_MEMORY_ERROR_TYPE_CORRECTED] = "corrected",
					     [NVML_MEMORY_ERROR_TYPE_UNCORRECTED] = "uncorrected" };
	static const char *const counter[2] = { [NVML_VOLATILE_ECC] = "volatile", [NVML_AGGREGATE_ECC] = "aggregate" };
	for (int t = 0; a->nvmlDeviceGetTotalEccErrors && t < 2; t++)
		for (int c = 0; c < 2; c++) {
			unsigned long long n;
			if (a->nvmlDeviceGetTotalEccErrors(d->h, (nvmlMemoryErrorType_t)t, (nvmlEccCounterType_t)c, &n) ==
			    NVML_SUCCESS)
				metric_batch_add(b, "hw.gpu.ecc.errors", "1",
						 labels(g, d, hm, b, "error.type", type[t], "gpu.ecc.counter", counter[c]), ts,
						 (double)n);
		}
	/* Retired pages (before Ampere), remapped rows (Ampere and later). */
	static const char *const cause[2] = { [NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS] = "single_bit",
					      [NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR] = "double_bit" };
	for (int c = 0; a->nvmlDeviceGetRetiredPages && c < 2; c++) {
		unsigned int n = 0;
		nvmlReturn_t rc = a->nvmlDeviceGetRetiredPages(d->h, (nvmlPageRetirementCause_t)c, &n, NULL);
		if (rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE)
			metric_batch_add(b, "hw.gpu.retired_pages", "1", labels(g, d, hm, b, "gpu.retirement.cause", cause[c], NULL, NULL),
					 ts, (double)n);
	}
	unsigned int corr, unc, pending, failed;
	if (a->nvmlDeviceGetRemappedRows &&
	    a->nvmlDeviceGetRemappedRows(d->h, &corr, &unc, &pending, &failed) == NVML_SUCCESS) {
		metric_batch_add(b, "hw.gpu.remapped_rows", "1", labels(g, d, hm, b, "error.type", "corrected", NULL, NULL), ts,
				 (double)corr);
		metric_batch_add(b, "hw.gpu.remapped_rows", "1", labels(g, d, hm, b, "error.type", "uncorrected", NULL, NULL),
				 ts, (double)unc);
		uint32_t ls = labels(g, d, hm, b, NULL, NULL, NULL, NULL);
		metric_batch_add(b, "hw.gpu.remapped_rows.pending", "1", ls, ts, pending ? 1.0 : 0.0);
		metric_batch_add(b, "hw.gpu.remapped_rows.failure", "1", ls, ts, failed ? 1.0 : 0.0);
	}
}

/* GPM: the metrics between the previous sample and this one. */
static const struct {
	unsigned id;
	const char *name;
} GPM[] = {
	{ NVML_GPM_METRIC_SM_UTIL, "hw.gpu.sm.efficiency" },
	{ NVML_GPM_METRIC_SM_OCCUPANCY, "hw.gpu.sm.occupancy" },
	{ NVML_GPM_METRIC_ANY_TENSOR_UTIL, "hw.gpu.tensor_util" },
	{ NVML_GPM_METRIC_DRAM_BW_UTIL, "hw.gpu.dram_bw_util" },
};

static void gpm_points(struct gpumetrics *g, struct gpu_dev *d, uint32_t ls, struct metric_batch *b, int64_t ts)
{
	const struct nvml_api *a = &g->api;
	if (!d->gpm[0])
		return;
	int next = d->gpm_taken ? 1 - d->gpm_new : 0;
	if (a->nvmlGpmSampleGet(d->h, d->gpm[next]) != NVML_SUCCESS)
		return;
	int prev = d->gpm_new;
	d->gpm_new = next;
	if (!d->gpm_taken) {
		d->gpm_taken = 1;
		return; /* the first sample: nothing to compare with yet */
	}
	nvmlGpmMetricsGet_t *mg = xcalloc(1, sizeof(*mg));
	mg->version = NVML_GPM_METRICS_GET_VERSION;
	mg->numMetrics = ARRAY_SIZE(GPM);
	mg->sample1 = d->gpm[prev];
	mg->sample2 = d->gpm[next];
	for (size_t i = 0; i < ARRAY_SIZE(GPM); i++)
		mg->metrics[i].metricId = GPM[i].id;
	if (a->nvmlGpmMetricsGet(mg) == NVML_SUCCESS)
		for (size_t i = 0; i < ARRAY_SIZE(GPM); i++)
			if (mg->metrics[i].nvmlReturn == NVML_SUCCESS)
				metric_batch_add(b, GPM[i].name, "%", ls, ts, mg->metrics[i].value);
	free(mg);
}

static void device_points(struct gpumetrics *g, struct gpu_dev *d, struct hostmetrics *hm, struct metric_batch *b,
			  int64_t ts)
{
	const struct nvml_api *a = &g->api;
	uint32_t ls = labels(g, d, hm, b, NULL, NULL, NULL, NULL);
	nvmlUtilization_t u;
	if (a->nvmlDeviceGetUtilizationRates && a->nvmlDeviceGetUtilizationRates(d->h, &u) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.utilization", "%", ls, ts, (double)u.gpu);
	nvmlMemory_t m = { 0 };
	nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
	if (a->nvmlDeviceGetMemoryInfo_v2 && a->nvmlDeviceGetMemoryInfo_v2(d->h, &m2) == NVML_SUCCESS && m2.total)
		m = (nvmlMemory_t){ .total = m2.total, .free = m2.free, .used = m2.used };
	else if (!a->nvmlDeviceGetMemoryInfo || a->nvmlDeviceGetMemoryInfo(d->h, &m) != NVML_SUCCESS)
		m.total = 0;
	if (m.total) {
		metric_batch_add(b, "hw.gpu.memory.utilization", "%", ls, ts, 100.0 * (double)m.used / (double)m.total);
		metric_batch_add(b, "hw.gpu.memory.usage", "bytes", ls, ts, (double)m.used);
		metric_batch_add(b, "hw.gpu.memory.limit", "bytes", ls, ts, (double)m.total);
	}
	unsigned int v;
	if (a->nvmlDeviceGetPowerUsage && a->nvmlDeviceGetPowerUsage(d->h, &v) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.power", "W", ls, ts, (double)v / 1000.0);
	if (a->nvmlDeviceGetEnforcedPowerLimit && a->nvmlDeviceGetEnforcedPowerLimit(d->h, &v) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.power.limit", "W", ls, ts, (double)v / 1000.0);
	if (a->nvmlDeviceGetTemperature && a->nvmlDeviceGetTemperature(d->h, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.temp", "Cel", ls, ts, (double)v);
	if (a->nvmlDeviceGetClockInfo && a->nvmlDeviceGetClockInfo(d->h, NVML_CLOCK_SM, &v) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.clock.sm", "MHz", ls, ts, (double)v);
	if (a->nvmlDeviceGetClockInfo && a->nvmlDeviceGetClockInfo(d->h, NVML_CLOCK_MEM, &v) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.clock.mem", "MHz", ls, ts, (double)v);
	unsigned long long reasons;
	if (a->nvmlDeviceGetCurrentClocksThrottleReasons &&
	    a->nvmlDeviceGetCurrentClocksThrottleReasons(d->h, &reasons) == NVML_SUCCESS) {
		metric_batch_add(b, "hw.gpu.clocks_throttle.reasons", "1", ls, ts, (double)reasons);
		for (size_t i = 0; i < ARRAY_SIZE(THROTTLE); i++)
			metric_batch_add(b, "hw.gpu.clocks_throttle", "1",
					 labels(g, d, hm, b, "gpu.throttle_reason", THROTTLE[i].name, NULL, NULL), ts,
					 (reasons & THROTTLE[i].bit) ? 1.0 : 0.0);
	}
	/* PCIe: NVML's KB/s over its last 20 ms. */
	if (a->nvmlDeviceGetPcieThroughput && a->nvmlDeviceGetPcieThroughput(d->h, NVML_PCIE_UTIL_TX_BYTES, &v) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.pcie.tx", "bytes/s", ls, ts, (double)v * 1024.0);
	if (a->nvmlDeviceGetPcieThroughput && a->nvmlDeviceGetPcieThroughput(d->h, NVML_PCIE_UTIL_RX_BYTES, &v) == NVML_SUCCESS)
		metric_batch_add(b, "hw.gpu.pcie.rx", "bytes/s", ls, ts, (double)v * 1024.0);
	nvlink_points(g, d, hm, b, ts);
	ecc_points(g, d, hm, b, ts);
	gpm_points(g, d, ls, b, ts);
	process_points(g, d, hm, b, ts, m.total);
}

/* --- topology ---------------------------------------------------------------- */

int gpu_parse_cpus_allowed(const char *status, struct cpuset *out)
{
	static const char KEY[] = "\nCpus_allowed_list:";
	const char *p = strstr(status, KEY);
	if (!p)
		return -1;
	p += sizeof(KEY) - 1;
	p += strspn(p, " \t");
	return cpuset_parse(p, out) > 0 ? 0 : -1;
}

/* The PCIe path between two GPUs in nvidia-smi topo -m's words. */
static const char *pcie_path(nvmlGpuTopologyLevel_t l)
{
	switch (l) {
	case NVML_TOPOLOGY_INTERNAL:
	case NVML_TOPOLOGY_SINGLE: return "PIX";
	case NVML_TOPOLOGY_MULTIPLE: return "PXB";
	case NVML_TOPOLOGY_HOSTBRIDGE: return "PHB";
	case NVML_TOPOLOGY_NODE: return "NODE";
	case NVML_TOPOLOGY_SYSTEM: return "SYS";
	}
	return NULL;
}

/* A process feeding a GPU: where it may run (Cpus_allowed_list), so that
 * the server can tell a process fed from the far NUMA node. */
static void feeder_point(struct gpumetrics *g, struct gpu_dev *d, struct hostmetrics *hm, struct metric_batch *b,
			 int64_t ts, unsigned pid)
{
	char path[64], *text = NULL;
	snprintf(path, sizeof(path), "%s/%u/status", GPU_PROC, pid);
	if (read_file(path, 1 << 16, &text, NULL) < 0)
		return; /* gone, or not ours to read */
	struct cpuset cs;
	int ok = gpu_parse_cpus_allowed(text, &cs);
	free(text);
	if (ok < 0)
		return;
	struct buf list = { 0 };
	cpuset_format(&cs, &list);
	if (list.len < MB_MAX_STRING) {
		const char *extra[] = { "process.cpus_allowed", list.data };
		metric_batch_add(b, "hw.gpu.topology.process", "1",
				 proc_gpu_labels_kv(g, d, hm, b, pid, extra, ARRAY_SIZE(extra)), ts,
				 (double)cpuset_count(&cs));
	}
	buf_free(&list);
}

/* The host's NUMA nodes and their CPUs (/sys/devices/system/node). */
static void numa_points(struct hostmetrics *hm, struct metric_batch *b, int64_t ts)
{
	DIR *dir = opendir(GPU_NODE_DIR);
	if (!dir)
		return; /* no NUMA in this kernel: the GPUs' own affinity stands */
	struct dirent *e;
	unsigned seen = 0;
	while ((e = readdir(dir)) && seen < CPULIST_MAX_ID) {
		char *end;
		if (strncmp(e->d_name, "node", 4) != 0)
			continue;
		errno = 0;
		long id = strtol(e->d_name + 4, &end, 10);
		if (end == e->d_name + 4 || *end || errno || id < 0 || id >= CPULIST_MAX_ID)
			continue;
		seen++;
		char path[300], *text = NULL, node[16];
		snprintf(path, sizeof(path), "%s/%s/cpulist", GPU_NODE_DIR, e->d_name);
		if (read_file(path, 1 << 16, &text, NULL) < 0)
			continue;
		struct cpuset cs;
		struct buf list = { 0 };
		if (cpuset_parse(text, &cs) >= 0) {
			cpuset_format(&cs, &list);
			snprintf(node, sizeof(node), "%ld", id);
			const char *kv[] = { "numa.node", node, "numa.node.cpus", list.data ? list.data : "" };
			if (list.len < MB_MAX_STRING)
				metric_batch_add(b, "hw.numa.node.cpus", "1", hostmetrics_host_labels(hm, b, kv, 4), ts,
						 (double)cpuset_count(&cs));
		}
		buf_free(&list);
		free(text);
	}
	closedir(dir);
}

/* Links up to something that is not a GPU of this host (an NVSwitch). */
static unsigned switch_links(const struct gpumetrics *g, const struct gpu_dev *d)
{
	unsigned n = 0;
	for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
		bool gpu = false;
		for (unsigned i = 0; i < g->ndev && d->nvl_up[l] && d->nvl_peer[l][0] && !gpu; i++)
			gpu = g->dev[i].parent < 0 && strcmp(d->nvl_peer[l], g->dev[i].index) == 0;
		n += d->nvl_up[l] && d->nvl_peer[l][0] && !gpu;
	}
	return n;
}

/* Each GPU's place (NUMA node, near CPUs, NVLinks), each pair's link
 * (NVLinks between them, else the PCIe path), each process feeding a GPU
 * and where it may run: hw.gpu.topology.* (docs/internals/metrics.md). */
static void topology_points(struct gpumetrics *g, struct hostmetrics *hm, struct metric_batch *b, int64_t ts)
{
	const struct nvml_api *a = &g->api;
	for (unsigned i = 0; i < g->ndev; i++) {
		struct gpu_dev *d = &g->dev[i];
		struct gpu_dev *gpu = d->parent >= 0 ? &g->dev[d->parent] : d;
		for (unsigned k = 0; k < d->npids; k++)
			feeder_point(g, gpu, hm, b, ts, d->pids[k]);
		if (d->parent >= 0)
			continue;
		char links[12], active[12];
		snprintf(links, sizeof(links), "%u", d->nvl_links);
		snprintf(active, sizeof(active), "%u", d->nvl_active);
		const char *extra[] = { d->bus[0] ? "gpu.pci.bus_id" : NULL, d->bus, d->cpus[0] ? "gpu.cpus" : NULL,
					d->cpus, "gpu.nvlink.links", links, "gpu.nvlink.active", active };
		metric_batch_add(b, "hw.gpu.topology.device", "1", labels_kv(g, d, hm, b, extra, ARRAY_SIZE(extra)), ts,
				 (double)d->numa);
		for (unsigned j = i + 1; j < g->ndev; j++) {
			struct gpu_dev *p = &g->dev[j];
			if (p->parent >= 0)
				continue;
			unsigned nv = 0;
			for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++)
				nv += d->nvl_up[l] && strcmp(d->nvl_peer[l], p->index) == 0;
			/* Through NVSwitches (links to no GPU of this host), as
			 * nvidia-smi counts them: the fewer of the two GPUs' links. */
			if (!nv)
				nv = MIN(switch_links(g, d), switch_links(g, p));
			char path[16];
			const char *via = NULL;
			nvmlGpuTopologyLevel_t lvl;
			if (a->nvmlDeviceGetTopologyCommonAncestor &&
			    a->nvmlDeviceGetTopologyCommonAncestor(d->h, p->h, &lvl) == NVML_SUCCESS)
				via = pcie_path(lvl);
			if (nv)
				snprintf(path, sizeof(path), "NV%u", nv);
			else
				snprintf(path, sizeof(path), "%s", via ? via : "unknown");
			const char *pe[] = { "gpu.peer.index", p->index, "gpu.peer.uuid", p->uuid, "gpu.topology.path", path,
					     via ? "gpu.topology.pcie" : NULL, via ? via : "" };
			metric_batch_add(b, "hw.gpu.topology.link", "1", labels_kv(g, d, hm, b, pe, ARRAY_SIZE(pe)), ts,
					 (double)nv);
		}
	}
	numa_points(hm, b, ts);
}

void gpumetrics_collect(struct gpumetrics *g, struct hostmetrics *hm, struct metric_batch *b, int64_t ts)
{
	for (unsigned i = 0; i < g->ndev; i++)
		device_points(g, &g->dev[i], hm, b, ts);
	topology_points(g, hm, b, ts);
	/* The XIDs that arrived since the last collection, at their times. */
	struct xid_event xs[GPU_MAX_XIDS];
	unsigned n;
	unsigned long long dropped;
	pthread_mutex_lock(&g->mu);
	n = g->nxid;
	memcpy(xs, g->xids, n * sizeof(xs[0]));
	g->nxid = 0;
	dropped = g->dropped;
	pthread_mutex_unlock(&g->mu);
	for (unsigned i = 0; i < n; i++) {
		char code[24];
		snprintf(code, sizeof(code), "%llu", xs[i].code);
		const char *meaning = gpumetrics_xid_meaning(xs[i].code);
		metric_batch_add(b, "hw.gpu.xid", "1",
				 labels(g, &g->dev[xs[i].dev], hm, b, "gpu.xid.code", code, "gpu.xid.meaning",
					meaning ? meaning : "unknown XID (see NVIDIA's XID catalog)"),
				 xs[i].ms, 1.0);
	}
	if (dropped)
		metric_batch_add(b, "hw.gpu.xid.dropped", "1", hostmetrics_host_labels(hm, b, NULL, 0), ts,
				 (double)dropped);
}
