/* fake_nvml.c - a stand-in for libnvidia-ml.so that serves scripted
 * devices, so test_metrics, the integration test and the benchmark can
 * drive agent/gpumetrics.c through dlopen on machines without a GPU (the
 * real library is checked on hardware by tests/device/gpu_metrics.sh).
 * Compiled against NVIDIA's nvml.h, so every function has NVML's own
 * signature. Tests only: never shipped.
 *
 * Two H100s, NVLink between them (links 0 and 1 of each GPU lead to the
 * other), time 0 being nvmlInit_v2:
 *   GPU 0 "NVIDIA H100 80GB HBM3" (GPU-fake-0, bus 00000000:18:00.0):
 *     87 % busy; 80 GiB with 1 GiB reserved and 20 GiB used (21 GiB used
 *     through the first memory call, which counts the reserve); 512.345 W
 *     of a 700 W limit; 61 °C; SM 1980 MHz, memory 2619 MHz; clocks held
 *     by sw_power_cap and sw_thermal_slowdown (0x24); PCIe 1000 KB/s out,
 *     2000 KB/s in; NVLink link L sends (L+1) GiB/s and receives half of
 *     that (data counters that grow with the wall clock), link 0 has 3
 *     replay errors; ECC: corrected volatile 0 and aggregate 5 until
 *     FAKE_NVML_ECC_AFTER_MS (default 0), then 1 and 6 (the ECC error);
 *     uncorrected 0; retired pages 2 single-bit, 0 double-bit; remapped
 *     rows 1 corrected, 0 uncorrected, none pending, no failure; GPM: SM
 *     efficiency 60, occupancy 45.5, tensor 33, DRAM bandwidth 71 (%); one
 *     compute process, the caller itself, holding 10 GiB and 77 % of the
 *     SMs in a sample newer than the time asked for (66 % on the second
 *     call, if it asked for what is newer than the first). An XID 79 (GPU
 *     fallen off the bus) arrives on it FAKE_NVML_XID_AFTER_MS after init
 *     (default 0), once; right after it an XID 31 (a page fault) in GPU
 *     1's GPU instance 5, that is its MIG device mig1.
 *   GPU 1 "NVIDIA H100 80GB HBM3" (GPU-fake-1, bus 00000000:1B:00.0), in
 *     MIG mode, so (as with NVML) no utilization, processes or GPM of its
 *     own: 80 GiB, 3 GiB used; 300 W of 700 W; 45 °C; SM 1755 MHz, memory
 *     2619; clocks idle (0x1); PCIe 0 out, 0 in; NVLink as GPU 0's, no
 *     errors; ECC all 0; no retired pages (NOT_SUPPORTED); remapped rows
 *     0/0. Seven MIG slots, three used: mig0 "... MIG 3g.40gb" (GPU
 *     instance 1, 40 GiB, 10 GiB used), mig1 "... MIG 2g.20gb" (GI 5,
 *     20 GiB, 5 GiB used), mig2 "... MIG 1g.10gb" (GI 13, 10 GiB, 1 GiB
 *     used); a MIG device reports its names and memory, nothing else.
 * Topology: GPU 0 on NUMA node 0 near CPU 0, GPU 1 on node 1 near CPU 1;
 * between them NVLink (NV2) and, as PCIe, SYS.
 * With FAKE_NVML_TOPOLOGY set, a third GPU: GPU 2 "NVIDIA H100 80GB HBM3"
 *   (GPU-fake-2, bus 00000000:9A:00.0), as GPU 1 but not in MIG mode,
 *   on node 1 near CPU 1, with 18 NVLinks all down (so it talks to GPU 0
 *   over SYS and to GPU 1 over NODE although it has NVLink), and, when
 *   FAKE_NVML_FEEDER_PID is set, that process as its compute process
 *   (4 GiB), the one a test pins to CPU 0: the far node.
 * nvmlDeviceGetMemoryInfo_v2 refuses a wrong struct version. With
 * FAKE_NVML_INIT_FAIL set, nvmlInit_v2 fails as with no driver.
 */
#include <nvml.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GIB (1ull << 30)
#define NMIG 3

struct fake_dev {
	int gpu; /* 0 or 1 */
	int mig; /* -1 for a GPU */
};
static struct fake_dev devs[3] = { { 0, -1 }, { 1, -1 }, { 2, -1 } };
static struct fake_dev migs[NMIG] = { { 1, 0 }, { 1, 1 }, { 1, 2 } };
static const unsigned mig_gi[NMIG] = { 1, 5, 13 };
static const char *const mig_name[NMIG] = { "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "NVIDIA H100 80GB HBM3 MIG 2g.20gb",
					    "NVIDIA H100 80GB HBM3 MIG 1g.10gb" };
static const unsigned long long mig_total[NMIG] = { 40 * GIB, 20 * GIB, 10 * GIB };
static const unsigned long long mig_used[NMIG] = { 10 * GIB, 5 * GIB, 1 * GIB };
static const char *const bus[3] = { "00000000:18:00.0", "00000000:1B:00.0", "00000000:9A:00.0" };

/* The fake's state, global as NVML's own is (one library per process):
 * the scripted clock (microseconds of nvmlInit_v2), whether the XID was
 * sent, the event set's and the GPM samples' storage. */
static long long init_us;
static atomic_int xid_sent;
static int event_set; /* the one event set's storage */
static int gpm_storage[64];
static atomic_int gpm_next;

static long long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static long long env_ms(const char *name)
{
	const char *v = getenv(name);
	return v ? atoll(v) : 0;
}

static struct fake_dev *of(nvmlDevice_t d)
{
	return (struct fake_dev *)d;
}
static int is_gpu(nvmlDevice_t d, int gpu)
{
	return of(d)->mig < 0 && of(d)->gpu == gpu;
}
static int is_mig(nvmlDevice_t d)
{
	return of(d)->mig >= 0;
}

nvmlReturn_t nvmlInit_v2(void)
{
	if (getenv("FAKE_NVML_INIT_FAIL"))
		return NVML_ERROR_DRIVER_NOT_LOADED;
	init_us = now_us();
	atomic_store(&xid_sent, 0);
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlShutdown(void)
{
	return NVML_SUCCESS;
}
const char *nvmlErrorString(nvmlReturn_t r)
{
	return r == NVML_ERROR_DRIVER_NOT_LOADED ? "Driver Not Loaded" : "Unknown Error";
}
static unsigned ngpus(void)
{
	return getenv("FAKE_NVML_TOPOLOGY") ? 3 : 2;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	*n = ngpus();
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (i >= ngpus())
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = (nvmlDevice_t)&devs[i];
	return NVML_SUCCESS;
}

static nvmlReturn_t put(char *s, unsigned int n, const char *v)
{
	if (n <= strlen(v))
		return NVML_ERROR_INSUFFICIENT_SIZE;
	strcpy(s, v);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *s, unsigned int n)
{
	return put(s, n, is_mig(d) ? mig_name[of(d)->mig] : "NVIDIA H100 80GB HBM3");
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *s, unsigned int n)
{
	char u[64];
	if (is_mig(d))
		snprintf(u, sizeof(u), "MIG-fake-1-%d", of(d)->mig);
	else
		snprintf(u, sizeof(u), "GPU-fake-%d", of(d)->gpu);
	return put(s, n, u);
}
/* A value only a whole GPU has: a MIG device answers not supported. */
#define WHOLE_GPU_VALUE(fn, type, value)                 \
	nvmlReturn_t fn(nvmlDevice_t d, type *out)        \
	{                                                 \
		if (is_mig(d))                            \
			return NVML_ERROR_NOT_SUPPORTED;  \
		*out = (value);                           \
		return NVML_SUCCESS;                      \
	}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p)
{
	if (is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	memset(p, 0, sizeof(*p));
	snprintf(p->busId, sizeof(p->busId), "%s", bus[of(d)->gpu]);
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	if (!is_gpu(d, 0))
		return NVML_ERROR_NOT_SUPPORTED;
	u->gpu = 87;
	u->memory = 40;
	return NVML_SUCCESS;
}

static void mem_of(nvmlDevice_t d, unsigned long long *total, unsigned long long *used)
{
	if (is_mig(d)) {
		*total = mig_total[of(d)->mig];
		*used = mig_used[of(d)->mig];
	} else {
		*total = 80 * GIB;
		*used = of(d)->gpu ? 3 * GIB : 20 * GIB;
	}
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	unsigned long long total, used;
	mem_of(d, &total, &used);
	/* The first call counts the driver's reserve as used. */
	*m = (nvmlMemory_t){ .total = total, .used = used + GIB, .free = total - used - GIB };
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned long long total, used;
	mem_of(d, &total, &used);
	m->total = total;
	m->reserved = GIB;
	m->used = used;
	m->free = total - used - GIB;
	return NVML_SUCCESS;
}
WHOLE_GPU_VALUE(nvmlDeviceGetPowerUsage, unsigned int, of(d)->gpu ? 300000 : 512345)
WHOLE_GPU_VALUE(nvmlDeviceGetEnforcedPowerLimit, unsigned int, 700000)
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t sensor, unsigned int *c)
{
	if (is_mig(d) || sensor != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_NOT_SUPPORTED;
	*c = of(d)->gpu ? 45 : 61;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t type, unsigned int *mhz)
{
	if (is_mig(d) || (type != NVML_CLOCK_SM && type != NVML_CLOCK_MEM))
		return NVML_ERROR_NOT_SUPPORTED;
	*mhz = type == NVML_CLOCK_MEM ? 2619 : of(d)->gpu ? 1755 : 1980;
	return NVML_SUCCESS;
}
WHOLE_GPU_VALUE(nvmlDeviceGetCurrentClocksThrottleReasons, unsigned long long,
		of(d)->gpu ? nvmlClocksThrottleReasonGpuIdle
			   : nvmlClocksThrottleReasonSwPowerCap | nvmlClocksThrottleReasonSwThermalSlowdown)
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, nvmlPcieUtilCounter_t c, unsigned int *kbs)
{
	if (is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	*kbs = of(d)->gpu ? 0 : c == NVML_PCIE_UTIL_TX_BYTES ? 1000 : 2000;
	return NVML_SUCCESS;
}

/* NVLink: 18 links, 0 and 1 up, each to the other GPU. */
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *on)
{
	if (is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	if (link >= NVML_NVLINK_MAX_LINKS)
		return NVML_ERROR_INVALID_ARGUMENT;
	*on = link < 2 && of(d)->gpu < 2 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *p)
{
	if (is_mig(d) || link >= 2 || of(d)->gpu == 2)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(p, 0, sizeof(*p));
	snprintf(p->busId, sizeof(p->busId), "%s", bus[1 - of(d)->gpu]);
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t d, unsigned int link, nvmlNvLinkErrorCounter_t c,
					     unsigned long long *n)
{
	if (is_mig(d) || link >= 2 || c >= NVML_NVLINK_ERROR_COUNT)
		return NVML_ERROR_NOT_SUPPORTED;
	*n = is_gpu(d, 0) && link == 0 && c == NVML_NVLINK_ERROR_DL_REPLAY ? 3 : 0;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int n, nvmlFieldValue_t *v)
{
	if (is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	long long t = now_us();
	for (int i = 0; i < n; i++) {
		unsigned link = v[i].scopeId;
		unsigned id = v[i].fieldId;
		v[i].timestamp = t;
		v[i].latencyUsec = 0;
		if (link >= 2 || (id != NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX && id != NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)) {
			v[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
			continue;
		}
		/* KiB so far: (link+1) GiB/s out, half of it in. */
		unsigned long long kib_s = (link + 1) * 1048576ull / (id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? 1 : 2);
		v[i].valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
		v[i].value.ullVal = (unsigned long long)(t - init_us) * kib_s / 1000000ull;
		v[i].nvmlReturn = NVML_SUCCESS;
	}
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
					 unsigned long long *n)
{
	if (is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	int error = now_us() - init_us >= env_ms("FAKE_NVML_ECC_AFTER_MS") * 1000;
	*n = 0;
	if (is_gpu(d, 0) && type == NVML_MEMORY_ERROR_TYPE_CORRECTED)
		*n = (counter == NVML_AGGREGATE_ECC ? 5 : 0) + (unsigned long long)error;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, nvmlPageRetirementCause_t cause, unsigned int *count,
				       unsigned long long *addresses)
{
	if (!is_gpu(d, 0))
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned int have = cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS ? 2 : 0;
	if (*count < have) {
		*count = have;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < have && addresses; i++)
		addresses[i] = 0x1000ull * (i + 1);
	*count = have;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc, unsigned int *pending,
				       unsigned int *failed)
{
	if (is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	*corr = is_gpu(d, 0) ? 1 : 0;
	*unc = *pending = *failed = 0;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p)
{
	const char *feeder = getenv("FAKE_NVML_FEEDER_PID");
	if (is_gpu(d, 2) && feeder) {
		if (*n < 1) {
			*n = 1;
			return NVML_ERROR_INSUFFICIENT_SIZE;
		}
		*n = 1;
		p[0] = (nvmlProcessInfo_t){ .pid = (unsigned int)atoi(feeder), .usedGpuMemory = 4 * GIB,
					    .gpuInstanceId = 0xFFFFFFFF, .computeInstanceId = 0xFFFFFFFF };
		return NVML_SUCCESS;
	}
	if (!is_gpu(d, 0))
		return NVML_ERROR_NOT_SUPPORTED;
	if (*n < 1) {
		*n = 1;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*n = 1;
	p[0] = (nvmlProcessInfo_t){ .pid = (unsigned int)getpid(), .usedGpuMemory = 10 * GIB,
				    .gpuInstanceId = 0xFFFFFFFF, .computeInstanceId = 0xFFFFFFFF };
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *s, unsigned int *n,
					     unsigned long long since_us)
{
	if (!is_gpu(d, 0))
		return NVML_ERROR_NOT_SUPPORTED;
	if (*n < 1) {
		*n = 1;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*n = 1;
	/* 77 % when asked for everything, 66 % when asked for what is newer
	 * than the first answer's sample, 1 % otherwise (a caller that does
	 * not move its time forward). */
	unsigned int sm = since_us == 0 ? 77 : since_us == 1000 ? 66 : 1;
	s[0] = (nvmlProcessUtilizationSample_t){ .pid = (unsigned int)getpid(), .timeStamp = since_us + 1000, .smUtil = sm };
	return NVML_SUCCESS;
}

/* MIG: GPU 1 has seven slots, three used. */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pending)
{
	if (is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	*cur = *pending = of(d)->gpu == 1 ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
	return NVML_SUCCESS;
}
WHOLE_GPU_VALUE(nvmlDeviceGetMaxMigDeviceCount, unsigned int, of(d)->gpu == 1 ? 7 : 0)
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int i, nvmlDevice_t *mig)
{
	if (!is_gpu(d, 1))
		return NVML_ERROR_NOT_SUPPORTED;
	if (i >= 7)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (i >= NMIG)
		return NVML_ERROR_NOT_FOUND;
	*mig = (nvmlDevice_t)&migs[i];
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id)
{
	if (!is_mig(d))
		return NVML_ERROR_NOT_SUPPORTED;
	*id = mig_gi[of(d)->mig];
	return NVML_SUCCESS;
}

/* Topology: GPU 0 on node 0 near CPU 0, the others on node 1 near CPU 1;
 * two GPUs on one node share it (NODE), else SYS. */
static nvmlReturn_t one_bit(nvmlDevice_t d, unsigned int size, unsigned long *set)
{
	if (is_mig(d) || size < 1)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(set, 0, size * sizeof(*set));
	set[0] = of(d)->gpu ? 2 : 1;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t d, unsigned int size, unsigned long *set)
{
	return one_bit(d, size, set);
}
nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t d, unsigned int size, unsigned long *set,
					 nvmlAffinityScope_t scope)
{
	return scope == NVML_AFFINITY_SCOPE_NODE ? one_bit(d, size, set) : NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t *l)
{
	if (is_mig(a) || is_mig(b))
		return NVML_ERROR_NOT_SUPPORTED;
	*l = (of(a)->gpu ? 1 : 0) == (of(b)->gpu ? 1 : 0) ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
	return NVML_SUCCESS;
}

/* GPM on GPU 0 only; a sample remembers when it was taken. */
nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s)
{
	if (s->version != NVML_GPM_SUPPORT_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	s->isSupportedDevice = is_gpu(d, 0);
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *s)
{
	int i = atomic_fetch_add(&gpm_next, 1);
	if (i >= 64)
		return NVML_ERROR_MEMORY;
	gpm_storage[i] = 0;
	*s = (nvmlGpmSample_t)&gpm_storage[i];
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s)
{
	(void)s;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t s)
{
	static atomic_int taken;
	if (!is_gpu(d, 0))
		return NVML_ERROR_NOT_SUPPORTED;
	*(int *)s = atomic_fetch_add(&taken, 1) + 1;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m)
{
	if (m->version != NVML_GPM_METRICS_GET_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	/* Two samples, the second taken after the first. */
	if (!m->sample1 || !m->sample2 || *(int *)m->sample1 == 0 || *(int *)m->sample2 <= *(int *)m->sample1)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < m->numMetrics && i < NVML_GPM_METRIC_MAX; i++) {
		nvmlGpmMetric_t *x = &m->metrics[i];
		x->nvmlReturn = NVML_SUCCESS;
		switch (x->metricId) {
		case NVML_GPM_METRIC_SM_UTIL: x->value = 60.0; break;
		case NVML_GPM_METRIC_SM_OCCUPANCY: x->value = 45.5; break;
		case NVML_GPM_METRIC_ANY_TENSOR_UTIL: x->value = 33.0; break;
		case NVML_GPM_METRIC_DRAM_BW_UTIL: x->value = 71.0; break;
		default: x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		}
	}
	return NVML_SUCCESS;
}

/* Events, FAKE_NVML_XID_AFTER_MS after init, each once: an XID 79 on GPU 0,
 * then an XID 31 (a page fault) in GPU 1's GPU instance 5, its MIG device
 * 1. */
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	*set = (nvmlEventSet_t)&event_set;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set)
{
	if (is_mig(d) || set != (nvmlEventSet_t)&event_set || types & ~nvmlEventTypeAll)
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *e, unsigned int timeout_ms)
{
	if (set != (nvmlEventSet_t)&event_set)
		return NVML_ERROR_INVALID_ARGUMENT;
	long long due = init_us + env_ms("FAKE_NVML_XID_AFTER_MS") * 1000;
	long long wait = atomic_load(&xid_sent) >= 2 ? (long long)timeout_ms * 1000 : due - now_us();
	if (wait > (long long)timeout_ms * 1000)
		wait = (long long)timeout_ms * 1000;
	if (wait > 0) {
		struct timespec ts = { wait / 1000000, (wait % 1000000) * 1000 };
		nanosleep(&ts, NULL);
	}
	if (now_us() < due)
		return NVML_ERROR_TIMEOUT;
	int k = atomic_fetch_add(&xid_sent, 1);
	if (k == 0)
		*e = (nvmlEventData_t){ .device = (nvmlDevice_t)&devs[0], .eventType = nvmlEventTypeXidCriticalError,
					.eventData = 79, .gpuInstanceId = 0xFFFFFFFF, .computeInstanceId = 0xFFFFFFFF };
	else if (k == 1)
		*e = (nvmlEventData_t){ .device = (nvmlDevice_t)&devs[1], .eventType = nvmlEventTypeXidCriticalError,
					.eventData = 31, .gpuInstanceId = 5, .computeInstanceId = 0 };
	else {
		atomic_store(&xid_sent, 2);
		return NVML_ERROR_TIMEOUT;
	}
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	return set == (nvmlEventSet_t)&event_set ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
