/* fake_nvml.c - a stand-in for libnvidia-ml.so with known readings, so
 * test_metrics can drive agent/gpumetrics.c through dlopen on machines
 * without a GPU (the real library is checked on hardware by
 * tests/device/gpu_metrics.sh).
 *
 * Two GPUs. GPU 0 ("Fake GPU 0") reads 87 % busy, 100 GiB with 1 GiB
 * reserved and 29 GiB used (30 GiB used through the first memory call,
 * which counts the reserve), 512.345 W, 61 °C, SM 1980 MHz, memory 3201
 * MHz, and one compute process: the caller's own pid, holding 10 GiB and
 * 77 % of the SMs in a sample newer than the time asked for (66 % on the
 * second call, if it asked for what is newer than the first).
 * GPU 1 supports only utilization (everything else NOT_SUPPORTED).
 * nvmlDeviceGetMemoryInfo_v2 refuses a wrong struct version. With
 * FAKE_NVML_INIT_FAIL set, nvmlInit_v2 fails as with no driver.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK 0
#define NOT_SUPPORTED 3
#define NOT_FOUND 6
#define INSUFFICIENT_SIZE 7
#define DRIVER_NOT_LOADED 9
#define VERSION_MISMATCH 25
#define GIB (1ull << 30)

typedef int ret;
typedef void *device;

struct util { unsigned int gpu, memory; };
struct mem { unsigned long long total, free, used; };
struct mem2 { unsigned int version; unsigned long long total, reserved, free, used; };
struct proc { unsigned int pid; unsigned long long used; unsigned int gi, ci; };
struct sample { unsigned int pid; unsigned long long ts; unsigned int sm, mem, enc, dec; };

static int devs[2];

ret nvmlInit_v2(void) { return getenv("FAKE_NVML_INIT_FAIL") ? DRIVER_NOT_LOADED : OK; }
ret nvmlShutdown(void) { return OK; }
const char *nvmlErrorString(ret r) { return r == DRIVER_NOT_LOADED ? "Driver Not Loaded" : "Unknown Error"; }
ret nvmlDeviceGetCount_v2(unsigned int *n) { *n = 2; return OK; }

ret nvmlDeviceGetHandleByIndex_v2(unsigned int i, device *d)
{
	if (i >= 2)
		return NOT_FOUND;
	*d = &devs[i];
	return OK;
}

static int idx(device d) { return d == &devs[0] ? 0 : 1; }

static ret put(char *s, unsigned int n, const char *v)
{
	if (n <= strlen(v))
		return INSUFFICIENT_SIZE;
	strcpy(s, v);
	return OK;
}

ret nvmlDeviceGetName(device d, char *s, unsigned int n)
{
	return put(s, n, idx(d) ? "Fake GPU 1" : "Fake GPU 0");
}

ret nvmlDeviceGetUUID(device d, char *s, unsigned int n)
{
	return put(s, n, idx(d) ? "GPU-fake-1" : "GPU-fake-0");
}

ret nvmlDeviceGetUtilizationRates(device d, struct util *u)
{
	u->gpu = idx(d) ? 5 : 87;
	u->memory = 40;
	return OK;
}

ret nvmlDeviceGetMemoryInfo(device d, struct mem *m)
{
	if (idx(d))
		return NOT_SUPPORTED;
	*m = (struct mem){ .total = 100 * GIB, .free = 70 * GIB, .used = 30 * GIB };
	return OK;
}

ret nvmlDeviceGetMemoryInfo_v2(device d, struct mem2 *m)
{
	if (idx(d))
		return NOT_SUPPORTED;
	if (m->version != (sizeof(struct mem2) | (2u << 24)))
		return VERSION_MISMATCH;
	m->total = 100 * GIB;
	m->reserved = GIB;
	m->free = 70 * GIB;
	m->used = 29 * GIB;
	return OK;
}

ret nvmlDeviceGetPowerUsage(device d, unsigned int *mw)
{
	if (idx(d))
		return NOT_SUPPORTED;
	*mw = 512345;
	return OK;
}

ret nvmlDeviceGetTemperature(device d, int sensor, unsigned int *c)
{
	if (idx(d) || sensor != 0)
		return NOT_SUPPORTED;
	*c = 61;
	return OK;
}

ret nvmlDeviceGetClockInfo(device d, int type, unsigned int *mhz)
{
	if (idx(d) || (type != 1 && type != 2))
		return NOT_SUPPORTED;
	*mhz = type == 1 ? 1980 : 3201;
	return OK;
}

ret nvmlDeviceGetComputeRunningProcesses_v3(device d, unsigned int *n, struct proc *p)
{
	if (idx(d))
		return NOT_SUPPORTED;
	if (*n < 1) {
		*n = 1;
		return INSUFFICIENT_SIZE;
	}
	*n = 1;
	p[0] = (struct proc){ .pid = (unsigned int)getpid(), .used = 10 * GIB };
	return OK;
}

ret nvmlDeviceGetProcessUtilization(device d, struct sample *s, unsigned int *n,
				    unsigned long long since_us)
{
	if (idx(d))
		return NOT_SUPPORTED;
	if (*n < 1) {
		*n = 1;
		return INSUFFICIENT_SIZE;
	}
	*n = 1;
	/* 77 % when asked for everything, 66 % when asked for what is newer
	 * than the first answer's sample, 1 % otherwise (a caller that does
	 * not move its time forward). */
	unsigned int sm = since_us == 0 ? 77 : since_us == 1000 ? 66 : 1;
	s[0] = (struct sample){ .pid = (unsigned int)getpid(), .ts = since_us + 1000, .sm = sm };
	return OK;
}
