/* fake_cuda.c - FOR TESTS ONLY: a stand-in libcuda.so.1 (driver API) that
 * also answers the runtime's launch (cudaLaunchKernel), so test programs
 * "launch" kernels without a GPU. Each call goes through the fake CUPTI
 * (fake_cupti.c) the way the real driver goes through the real one. See
 * fake_cuda.h. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cupti_result.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <cupti_activity.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))
#define STREAMS 64
#define KERNELS 64

typedef struct {
	unsigned x, y, z;
} dim3;

struct CUfunc_st {
	char name[256];
	uint64_t ns;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static fakecupti_next_corr_fn hook_corr;
static fakecupti_api_fn hook_api;
static fakecupti_record_fn hook_record;
static fakecupti_enabled_fn hook_enabled;
static fakecupti_context_fn hook_context; /* optional */
static uint64_t stream_end[STREAMS];        /* the fake GPU's clock per stream (lock) */
static struct CUfunc_st functions[KERNELS]; /* by name (lock) */
static unsigned nfunctions;
static struct {
	const void *host;
	struct CUfunc_st *f;
} registered[KERNELS];                      /* __cudaRegisterFunction (lock) */
static unsigned nregistered;
static uint64_t kernels_made;               /* (lock) */
static unsigned bad_every;
static int nested_own_id;
static uint64_t sync_ns = 5000;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t scripted_ns(const char *name)
{
	const char *spec = getenv("FAKE_CUDA_KERNEL_NS");
	size_t len = strlen(name);
	for (const char *p = spec; p && *p;) {
		const char *eq = strchr(p, '=');
		if (!eq)
			break;
		if ((size_t)(eq - p) == len && !strncmp(p, name, len))
			return strtoull(eq + 1, NULL, 10);
		p = strchr(eq, ',');
		if (p)
			p++;
	}
	return 1000;
}

/* --- initialization: what the real driver does with the injection path --- */

EXPORT CUresult cuInit(unsigned flags)
{
	(void)flags;
	pthread_mutex_lock(&lock);
	if (initialized) {
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	initialized = 1;
	const char *v = getenv("FAKE_CUDA_BAD_EVERY");
	bad_every = v ? (unsigned)strtoul(v, NULL, 10) : 0;
	nested_own_id = getenv("FAKE_CUDA_NESTED_OWN_ID") != NULL;
	v = getenv("FAKE_CUDA_SYNC_NS");
	if (v)
		sync_ns = strtoull(v, NULL, 10);
	pthread_mutex_unlock(&lock);

	const char *inj = getenv("CUDA_INJECTION64_PATH");
	if (inj && *inj) {
		void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
		int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
		if (init)
			init();
		else
			fprintf(stderr, "fake libcuda: cannot load %s: %s\n", inj, dlerror());
	}
	/* CUPTI only exists here if the injection library loaded it. */
	void *cupti = dlopen("libcupti.so", RTLD_NOW | RTLD_NOLOAD);
	if (cupti) {
		hook_corr = (fakecupti_next_corr_fn)dlsym(cupti, "fakecupti_next_corr");
		hook_api = (fakecupti_api_fn)dlsym(cupti, "fakecupti_api");
		hook_record = (fakecupti_record_fn)dlsym(cupti, "fakecupti_record");
		hook_enabled = (fakecupti_enabled_fn)dlsym(cupti, "fakecupti_enabled");
		hook_context = (fakecupti_context_fn)dlsym(cupti, "fakecupti_context");
		if (!hook_corr || !hook_api || !hook_record || !hook_enabled)
			hook_corr = NULL;
	}
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = 12040;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	*n = 2;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	if (dev < 0 || dev > 1 || len <= 0)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	snprintf(name, (size_t)len, "Fake GPU %d", dev);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	if (dev < 0 || dev > 1)
		return 101;
	for (int i = 0; i < 16; i++)
		uuid->bytes[i] = (char)(0xa0 + i + dev);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name)
{
	(void)mod;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nfunctions; i++) {
		if (!strcmp(functions[i].name, name)) {
			*f = &functions[i];
			pthread_mutex_unlock(&lock);
			return CUDA_SUCCESS;
		}
	}
	if (nfunctions >= KERNELS || strlen(name) >= sizeof(functions[0].name)) {
		pthread_mutex_unlock(&lock);
		return 500; /* CUDA_ERROR_NOT_FOUND */
	}
	struct CUfunc_st *nf = &functions[nfunctions++];
	snprintf(nf->name, sizeof(nf->name), "%s", name);
	nf->ns = scripted_ns(name);
	*f = nf;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

/* What nvcc's generated code calls for each kernel of a program. */
EXPORT void __cudaRegisterFunction(void **fatbin, const char *host, char *device_fun, const char *device_name,
				   int thread_limit, void *tid, void *bid, void *bdim, void *gdim, int *wsize)
{
	(void)fatbin, (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)bdim, (void)gdim, (void)wsize;
	CUfunction f;
	if (cuModuleGetFunction(&f, NULL, device_name) != CUDA_SUCCESS)
		return;
	pthread_mutex_lock(&lock);
	if (nregistered < KERNELS) {
		registered[nregistered].host = host;
		registered[nregistered].f = f;
		nregistered++;
	}
	pthread_mutex_unlock(&lock);
}

/* --- work --- */

static unsigned stream_id(CUstream s)
{
	return (unsigned)((uintptr_t)s % STREAMS);
}

/* The fake GPU runs a stream's work back to back from now on. */
static void schedule(unsigned stream, uint64_t ns, uint64_t *start, uint64_t *end)
{
	uint64_t now = now_ns();
	pthread_mutex_lock(&lock);
	uint64_t s = stream_end[stream] > now ? stream_end[stream] : now;
	stream_end[stream] = s + ns;
	pthread_mutex_unlock(&lock);
	*start = s;
	*end = s + ns;
}

static void kernel_record(uint32_t corr, const struct CUfunc_st *f, CUstream stream)
{
	if (!hook_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL))
		return;
	CUpti_ActivityKernel8 k;
	memset(&k, 0, sizeof(k));
	k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	schedule(stream_id(stream), f->ns, &k.start, &k.end);
	pthread_mutex_lock(&lock);
	uint64_t n = ++kernels_made;
	pthread_mutex_unlock(&lock);
	if (bad_every && n % bad_every == 0) {
		if ((n / bad_every) % 2)
			k.end = k.start - 1000;                      /* ends before it starts */
		else
			k.end = k.start + 7200ull * 1000000000ull;   /* two hours: a broken clock */
	}
	k.deviceId = 0;
	k.contextId = 1;
	k.streamId = stream_id(stream);
	k.correlationId = corr;
	k.name = f->name;
	k.gridX = k.gridY = k.gridZ = 1;
	k.blockX = k.blockY = k.blockZ = 1;
	hook_record(&k, sizeof(k));
}

static void launch(int runtime, uint32_t cbid, const char *api, const struct CUfunc_st *f, CUstream stream)
{
	if (!hook_corr)
		return;
	/* The primary context is made at the first launch, as the runtime
	 * makes it lazily. */
	static int ctx_made;
	static char ctx_object;
	if (hook_context && !__atomic_exchange_n(&ctx_made, 1, __ATOMIC_ACQ_REL))
		hook_context(1, &ctx_object);
	uint32_t corr = hook_corr();
	uint32_t record_corr = corr;
	hook_api(runtime, cbid, 0, corr, api, f->name);
	if (runtime) {
		/* The runtime launches through the driver: a nested callback,
		 * with the same id, or (FAKE_CUDA_NESTED_OWN_ID) its own id,
		 * which the kernel's record then carries. */
		uint32_t inner = nested_own_id ? hook_corr() : corr;
		hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 0, inner, "cuLaunchKernel", f->name);
		hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1, inner, "cuLaunchKernel", f->name);
		record_corr = inner;
	}
	kernel_record(record_corr, f, stream);
	hook_api(runtime, cbid, 1, corr, api, f->name);
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shmem, CUstream stream, void **params, void **extra)
{
	(void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)params, (void)extra;
	if (!f)
		return 400; /* CUDA_ERROR_INVALID_HANDLE */
	launch(0, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel", f, stream);
	return CUDA_SUCCESS;
}

EXPORT int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, CUstream stream)
{
	(void)grid, (void)block, (void)args, (void)shmem;
	struct CUfunc_st *f = NULL;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nregistered; i++) {
		if (registered[i].host == func)
			f = registered[i].f;
	}
	pthread_mutex_unlock(&lock);
	if (!f)
		return 98; /* cudaErrorInvalidDeviceFunction */
	launch(1, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel_v7000", f, stream);
	return 0;
}

/* Launches a host function on a stream: not GPU work, no record. */
EXPORT CUresult cuLaunchHostFunc(CUstream stream, void (*fn)(void *), void *data)
{
	(void)stream;
	if (!hook_corr) {
		fn(data);
		return CUDA_SUCCESS;
	}
	uint32_t corr = hook_corr();
	hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc, 0, corr, "cuLaunchHostFunc", NULL);
	fn(data);
	hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc, 1, corr, "cuLaunchHostFunc", NULL);
	return CUDA_SUCCESS;
}

/* --- graphs --- */

struct CUgraphExec_st {
	struct CUfunc_st *kernels[8];
	unsigned n;
	uint32_t id;
};

static struct CUgraphExec_st graphs[8]; /* (lock) */
static unsigned ngraphs;

/* Test hook (not a CUDA API): an instantiated graph of the kernels named in
 * `names` ("a,b,c"), as stream capture would have made one. */
EXPORT CUgraphExec fakecuda_graph(const char *names)
{
	CUgraphExec exec = NULL;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", names);
	struct CUgraphExec_st g = { .n = 0 };
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && g.n < 8; tok = strtok_r(NULL, ",", &save)) {
		CUfunction f;
		if (cuModuleGetFunction(&f, NULL, tok) != CUDA_SUCCESS)
			return NULL;
		g.kernels[g.n++] = f;
	}
	pthread_mutex_lock(&lock);
	if (ngraphs < 8 && g.n > 0) {
		g.id = ngraphs + 1;
		graphs[ngraphs] = g;
		exec = &graphs[ngraphs++];
	}
	pthread_mutex_unlock(&lock);
	return exec;
}

/* One launch runs every kernel of the graph: records with the launch's
 * correlation id and the graph's id. */
EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream)
{
	if (!exec)
		return 400;
	if (!hook_corr)
		return CUDA_SUCCESS;
	uint32_t corr = hook_corr();
	hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 0, corr, "cuGraphLaunch", NULL);
	for (unsigned i = 0; i < exec->n && hook_enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); i++) {
		CUpti_ActivityKernel8 k;
		memset(&k, 0, sizeof(k));
		k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
		schedule(stream_id(stream), exec->kernels[i]->ns, &k.start, &k.end);
		k.contextId = 1;
		k.streamId = stream_id(stream);
		k.correlationId = corr;
		k.name = exec->kernels[i]->name;
		k.graphId = exec->id;
		k.graphNodeId = ((uint64_t)exec->id << 32) | i;
		hook_record(&k, sizeof(k));
	}
	hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 1, corr, "cuGraphLaunch", NULL);
	return CUDA_SUCCESS;
}

/* A copy or a set of `bytes` bytes on `stream`, which takes `bytes` ns:
 * the driver call's callbacks around one record of `kind` (MEMCPY: a
 * host-to-device copy; MEMSET: a set to `value`). */
static CUresult memory_op(uint32_t cbid, const char *api, CUpti_ActivityKind kind, size_t bytes, unsigned char value,
			  CUstream stream)
{
	if (!hook_corr)
		return CUDA_SUCCESS;
	uint32_t corr = hook_corr();
	hook_api(0, cbid, 0, corr, api, NULL);
	if (hook_enabled(kind)) {
		uint64_t start, end;
		schedule(stream_id(stream), bytes, &start, &end);
		union {
			CUpti_ActivityMemcpy5 copy;
			CUpti_ActivityMemset4 set;
		} r;
		memset(&r, 0, sizeof(r));
		if (kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
			r.copy = (CUpti_ActivityMemcpy5){ .kind = kind, .copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD,
							  .bytes = bytes, .start = start, .end = end, .contextId = 1,
							  .streamId = stream_id(stream), .correlationId = corr };
			hook_record(&r.copy, sizeof(r.copy));
		} else {
			r.set = (CUpti_ActivityMemset4){ .kind = kind, .value = value, .bytes = bytes, .start = start,
							 .end = end, .contextId = 1, .streamId = stream_id(stream),
							 .correlationId = corr };
			hook_record(&r.set, sizeof(r.set));
		}
	}
	hook_api(0, cbid, 1, corr, api, NULL);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)
{
	(void)dst, (void)src;
	return memory_op(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2",
			 CUPTI_ACTIVITY_KIND_MEMCPY, bytes, 0, stream);
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream)
{
	(void)dst;
	return memory_op(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, "cuMemsetD8Async", CUPTI_ACTIVITY_KIND_MEMSET, n,
			 value, stream);
}

/* A sync waits FAKE_CUDA_SYNC_NS (recorded, not slept). */
EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
	if (!hook_corr)
		return CUDA_SUCCESS;
	uint32_t corr = hook_corr();
	hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, 0, corr, "cuStreamSynchronize", NULL);
	if (hook_enabled(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) {
		CUpti_ActivitySynchronization s;
		memset(&s, 0, sizeof(s));
		s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
		s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
		s.start = now_ns();
		s.end = s.start + sync_ns;
		s.correlationId = corr;
		s.contextId = 1;
		s.streamId = stream_id(stream);
		hook_record(&s, sizeof(s));
	}
	hook_api(0, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, 1, corr, "cuStreamSynchronize", NULL);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
	return CUDA_SUCCESS;
}
