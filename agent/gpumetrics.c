/* gpumetrics.c - see gpumetrics.h. */
#include "gpumetrics.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* --- ember's own declarations of the NVML ABI it uses ------------------------
 * (NVML's documented C interface: return codes are ints, 0 = success;
 * devices are opaque pointers.) */
typedef int nvml_ret;
typedef void *nvml_device;
#define NVML_OK 0
#define NVML_ERR_INSUFFICIENT_SIZE 7
#define NVML_TEMP_GPU 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_NAME_LEN 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define NVML_UUID_LEN 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

struct nvml_utilization {
	unsigned int gpu, memory; /* percent */
};
struct nvml_memory {
	unsigned long long total, free, used; /* bytes */
};
/* nvmlMemory_v2_t: "used" without the memory the driver sets aside, as
 * nvidia-smi shows it (the first struct counts that ~0.4 % as used). */
struct nvml_memory_v2 {
	unsigned int version; /* NVML_MEMORY_V2 */
	unsigned long long total, reserved, free, used;
};
#define NVML_MEMORY_V2 ((unsigned int)sizeof(struct nvml_memory_v2) | (2u << 24))
_Static_assert(sizeof(struct nvml_memory_v2) == 40, "nvmlMemory_v2_t: an int padded to 8, then four 64-bit counts");
struct nvml_process_info { /* nvmlProcessInfo_t as _v3 fills it */
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
};
struct nvml_process_sample { /* nvmlProcessUtilizationSample_t */
	unsigned int pid;
	unsigned long long timestamp; /* microseconds */
	unsigned int sm_util, mem_util, enc_util, dec_util;
};

struct nvml_api {
	nvml_ret (*init)(void);
	nvml_ret (*shutdown)(void);
	const char *(*error_string)(nvml_ret);
	nvml_ret (*count)(unsigned int *);
	nvml_ret (*handle)(unsigned int, nvml_device *);
	nvml_ret (*name)(nvml_device, char *, unsigned int);
	nvml_ret (*uuid)(nvml_device, char *, unsigned int);
	nvml_ret (*utilization)(nvml_device, struct nvml_utilization *);
	nvml_ret (*memory)(nvml_device, struct nvml_memory *);
	nvml_ret (*memory_v2)(nvml_device, struct nvml_memory_v2 *); /* newer drivers */
	nvml_ret (*power)(nvml_device, unsigned int *);           /* milliwatts */
	nvml_ret (*temperature)(nvml_device, int, unsigned int *); /* °C */
	nvml_ret (*clock)(nvml_device, int, unsigned int *);       /* MHz */
	nvml_ret (*processes)(nvml_device, unsigned int *, struct nvml_process_info *);
	nvml_ret (*process_util)(nvml_device, struct nvml_process_sample *, unsigned int *,
				 unsigned long long);
};

struct gpu_dev {
	nvml_device h;
	char index[12], name[NVML_NAME_LEN], uuid[NVML_UUID_LEN];
	unsigned long long last_seen_us; /* process samples newer than this */
};

struct gpumetrics {
	void *lib;
	char path[512];
	struct nvml_api api;
	struct gpu_dev dev[GPU_MAX_DEVICES];
	unsigned ndev;
};

/* The usual homes of the driver's user-space libraries. */
static const char *const GPU_SCAN_DIRS[] = {
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib",
	"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
	"/run/nvidia/driver/usr/lib/x86_64-linux-gnu", "/run/nvidia/driver/usr/lib64",
	"/run/nvidia/driver/usr/lib/aarch64-linux-gnu", "/host/usr/lib/x86_64-linux-gnu",
	"/host/usr/lib64",
};

static void *sym(void *lib, const char *name)
{
	return dlsym(lib, name);
}

static int try_load(struct gpumetrics *g, const char *path, struct buf *why)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		buf_printf(why, "%s%s (%.200s)", why->len ? "; " : "", path, e ? e : "cannot load");
		return -1;
	}
	struct nvml_api a = { 0 };
	*(void **)&a.init = sym(lib, "nvmlInit_v2");
	*(void **)&a.shutdown = sym(lib, "nvmlShutdown");
	*(void **)&a.error_string = sym(lib, "nvmlErrorString");
	*(void **)&a.count = sym(lib, "nvmlDeviceGetCount_v2");
	*(void **)&a.handle = sym(lib, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&a.name = sym(lib, "nvmlDeviceGetName");
	*(void **)&a.uuid = sym(lib, "nvmlDeviceGetUUID");
	*(void **)&a.utilization = sym(lib, "nvmlDeviceGetUtilizationRates");
	*(void **)&a.memory = sym(lib, "nvmlDeviceGetMemoryInfo");
	*(void **)&a.memory_v2 = sym(lib, "nvmlDeviceGetMemoryInfo_v2");
	*(void **)&a.power = sym(lib, "nvmlDeviceGetPowerUsage");
	*(void **)&a.temperature = sym(lib, "nvmlDeviceGetTemperature");
	*(void **)&a.clock = sym(lib, "nvmlDeviceGetClockInfo");
	*(void **)&a.processes = sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	*(void **)&a.process_util = sym(lib, "nvmlDeviceGetProcessUtilization");
	if (!a.init || !a.shutdown || !a.count || !a.handle) {
		buf_printf(why, "%s%s (not NVML: nvmlInit_v2 or nvmlDeviceGetCount_v2 missing)",
			   why->len ? "; " : "", path);
		dlclose(lib);
		return -1;
	}
	nvml_ret rc = a.init();
	if (rc != NVML_OK) {
		buf_printf(why, "%s%s (nvmlInit_v2 failed: %s)", why->len ? "; " : "", path,
			   a.error_string ? a.error_string(rc) : "error");
		dlclose(lib);
		return -1;
	}
	g->lib = lib;
	g->api = a;
	snprintf(g->path, sizeof(g->path), "%s", path);
	return 0;
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
	unsigned int n = 0;
	if (g->api.count(&n) != NVML_OK)
		n = 0;
	for (unsigned int i = 0; i < n && g->ndev < GPU_MAX_DEVICES; i++) {
		struct gpu_dev *d = &g->dev[g->ndev];
		if (g->api.handle(i, &d->h) != NVML_OK)
			continue;
		snprintf(d->index, sizeof(d->index), "%u", i);
		if (!g->api.name || g->api.name(d->h, d->name, sizeof(d->name)) != NVML_OK)
			snprintf(d->name, sizeof(d->name), "unknown");
		if (!g->api.uuid || g->api.uuid(d->h, d->uuid, sizeof(d->uuid)) != NVML_OK)
			d->uuid[0] = '\0';
		d->name[sizeof(d->name) - 1] = d->uuid[sizeof(d->uuid) - 1] = '\0';
		g->ndev++;
	}
	return g;
}

void gpumetrics_close(struct gpumetrics *g)
{
	if (!g)
		return;
	g->api.shutdown();
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

/* A process's labels (hostmetrics.h) and the GPU's on top. */
static uint32_t proc_gpu_labels(const struct gpu_dev *d, struct hostmetrics *hm,
				struct metric_batch *b, unsigned int pid)
{
	uint32_t ls = hostmetrics_process_labels(hm, b, (int32_t)MIN(pid, (unsigned)INT32_MAX));
	uint32_t kv[2 * MB_MAX_LABELS];
	size_t nkv = MIN((size_t)b->set_lengths[ls], ARRAY_SIZE(kv) - 6);
	memcpy(kv, b->set_strings + b->set_offsets[ls], nkv * sizeof(uint32_t));
	const char *const keys[] = { "gpu.index", "gpu.uuid", "gpu.name" };
	const char *const vals[] = { d->index, d->uuid, d->name };
	for (size_t k = 0; k < 3; k++) {
		kv[nkv++] = metric_batch_str(b, keys[k]);
		kv[nkv++] = metric_batch_str(b, vals[k]);
	}
	return metric_batch_labels(b, kv, nkv);
}

static void process_points(struct gpumetrics *g, struct gpu_dev *d, struct hostmetrics *hm,
			   struct metric_batch *b, int64_t ts, unsigned long long mem_total)
{
	/* Memory per process. */
	if (g->api.processes && mem_total) {
		struct nvml_process_info *pi = xcalloc(GPU_MAX_PROCS, sizeof(*pi));
		unsigned int n = GPU_MAX_PROCS;
		if (g->api.processes(d->h, &n, pi) == NVML_OK) {
			for (unsigned int i = 0; i < n && i < GPU_MAX_PROCS; i++) {
				metric_batch_add(b, "hw.gpu.process.memory.utilization", "%",
						 proc_gpu_labels(d, hm, b, pi[i].pid), ts,
						 100.0 * (double)pi[i].used_gpu_memory / (double)mem_total);
			}
		}
		free(pi);
	}
	/* SM utilization per process, from the samples since the last time. */
	if (g->api.process_util) {
		struct nvml_process_sample *ps = xcalloc(GPU_MAX_PROCS, sizeof(*ps));
		unsigned int n = GPU_MAX_PROCS;
		unsigned long long newest = d->last_seen_us;
		if (g->api.process_util(d->h, ps, &n, d->last_seen_us) == NVML_OK) {
			for (unsigned int i = 0; i < n && i < GPU_MAX_PROCS; i++) {
				metric_batch_add(b, "hw.gpu.process.utilization", "%",
						 proc_gpu_labels(d, hm, b, ps[i].pid), ts, (double)MIN(ps[i].sm_util, 100u));
				newest = MAX(newest, ps[i].timestamp);
			}
		}
		d->last_seen_us = newest;
		free(ps);
	}
}

void gpumetrics_collect(struct gpumetrics *g, struct hostmetrics *hm, struct metric_batch *b,
			int64_t ts)
{
	for (unsigned i = 0; i < g->ndev; i++) {
		struct gpu_dev *d = &g->dev[i];
		const char *extra[] = { "gpu.index", d->index, "gpu.uuid", d->uuid, "gpu.name", d->name };
		uint32_t ls = hostmetrics_host_labels(hm, b, extra, ARRAY_SIZE(extra));
		struct nvml_utilization u;
		if (g->api.utilization && g->api.utilization(d->h, &u) == NVML_OK) {
			metric_batch_add(b, "hw.gpu.utilization", "%", ls, ts, (double)u.gpu);
		}
		struct nvml_memory m = { 0 };
		struct nvml_memory_v2 m2 = { .version = NVML_MEMORY_V2 };
		if (g->api.memory_v2 && g->api.memory_v2(d->h, &m2) == NVML_OK && m2.total)
			m = (struct nvml_memory){ .total = m2.total, .free = m2.free, .used = m2.used };
		else if (!g->api.memory || g->api.memory(d->h, &m) != NVML_OK)
			m.total = 0;
		if (m.total)
			metric_batch_add(b, "hw.gpu.memory.utilization", "%", ls, ts,
					 100.0 * (double)m.used / (double)m.total);
		unsigned int v;
		if (g->api.power && g->api.power(d->h, &v) == NVML_OK)
			metric_batch_add(b, "hw.gpu.power", "W", ls, ts, (double)v / 1000.0);
		if (g->api.temperature && g->api.temperature(d->h, NVML_TEMP_GPU, &v) == NVML_OK)
			metric_batch_add(b, "hw.gpu.temp", "Cel", ls, ts, (double)v);
		if (g->api.clock && g->api.clock(d->h, NVML_CLOCK_SM, &v) == NVML_OK)
			metric_batch_add(b, "hw.gpu.clock.sm", "MHz", ls, ts, (double)v);
		if (g->api.clock && g->api.clock(d->h, NVML_CLOCK_MEM, &v) == NVML_OK)
			metric_batch_add(b, "hw.gpu.clock.mem", "MHz", ls, ts, (double)v);
		process_points(g, d, hm, b, ts, m.total);
	}
}
