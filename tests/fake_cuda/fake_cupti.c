/* fake_cupti.c - FOR TESTS ONLY: the CUPTI subset libembercuda.so calls,
 * driven by the fake driver (fake_cuda.c). See fake_cuda.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <cupti_activity.h>
#include <cupti_pcsampling.h>
#include <stdio.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_CBID 4096
#define LATE_MAX 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_CallbackFunc subscriber_fn;
static void *subscriber_data;
static int subscribed;
static unsigned char enabled_cb[2][MAX_CBID];
static unsigned char enabled_kind[64];
static unsigned char enabled_res[8];
static CUpti_BuffersCallbackRequestFunc buf_request;
static CUpti_BuffersCallbackCompleteFunc buf_complete;
static uint8_t *cur;           /* the buffer being filled (lock) */
static size_t cur_size, cur_used, cur_records;
static size_t dropped;         /* since the last GetNumDroppedRecords (lock) */
static uint64_t records_seen;  /* (lock) */
static uint32_t corr_next = 1;
static struct {
	unsigned char bytes[256];
	size_t size;
} late[LATE_MAX];
static unsigned nlate;
static int env_read;
static unsigned drop_every, late_every, per_buffer;

static unsigned env_uint(const char *name, unsigned def)
{
	const char *v = getenv(name);
	return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

static void read_env(void)
{
	if (env_read)
		return;
	drop_every = env_uint("FAKE_CUDA_DROP_EVERY", 0);
	late_every = env_uint("FAKE_CUDA_LATE_EVERY", 0);
	per_buffer = env_uint("FAKE_CUDA_RECORDS_PER_BUFFER", 500);
	env_read = 1;
}

/* --- names of the callbacks the fake driver fires (and a few others) --- */

struct cbname {
	int runtime;
	uint32_t cbid;
	const char *name;
};

static const struct cbname names[] = {
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuInit, "cuInit" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice, "cuCtxGetDevice" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, "cuCtxSynchronize" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, "cuStreamSynchronize" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, "cuStreamSynchronize_ptsz" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, "cuLaunchKernel_ptsz" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, "cuLaunchKernelEx" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc, "cuLaunchHostFunc" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, "cuGraphLaunch" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, "cuMemsetD8Async" },
	{ 0, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2" },
	{ 1, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel_v7000" },
	{ 1, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, "cudaLaunchKernel_ptsz_v7000" },
	{ 1, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, "cudaDeviceSynchronize_v3020" },
	{ 1, CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020, "cudaGetDevice_v3020" },
	{ 1, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc_v3020" },
};

EXPORT CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char **name)
{
	if (!name)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*name = NULL;
	int runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
	if (!runtime && domain != CUPTI_CB_DOMAIN_DRIVER_API)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (names[i].runtime == runtime && names[i].cbid == cbid) {
			*name = names[i].name;
			return CUPTI_SUCCESS;
		}
	}
	return CUPTI_ERROR_INVALID_PARAMETER;
}

EXPORT CUptiResult cuptiGetVersion(uint32_t *version)
{
	*version = env_uint("FAKE_CUPTI_VERSION", 18);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
	*str = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
									 : "fake CUPTI error";
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata)
{
	unsigned err = env_uint("FAKE_CUPTI_SUBSCRIBE_ERROR", 0);
	if (err)
		return (CUptiResult)err;
	pthread_mutex_lock(&lock);
	if (subscribed) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	}
	subscribed = 1;
	subscriber_fn = callback;
	subscriber_data = userdata;
	*subscriber = (CUpti_SubscriberHandle)&subscribed;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
	(void)subscriber;
	pthread_mutex_lock(&lock);
	subscribed = 0;
	subscriber_fn = NULL;
	memset(enabled_cb, 0, sizeof(enabled_cb));
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain,
				       CUpti_CallbackId cbid)
{
	if (!subscriber || !subscribed || cbid >= MAX_CBID)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
		if (cbid != CUPTI_CBID_RESOURCE_CONTEXT_CREATED && cbid != CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING &&
		    cbid != CUPTI_CBID_RESOURCE_MODULE_LOADED)
			return CUPTI_ERROR_INVALID_PARAMETER;
		__atomic_store_n(&enabled_res[cbid], enable ? 1 : 0, __ATOMIC_RELEASE);
		return CUPTI_SUCCESS;
	}
	if (domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API)
		return CUPTI_ERROR_INVALID_PARAMETER;
	__atomic_store_n(&enabled_cb[domain == CUPTI_CB_DOMAIN_RUNTIME_API][cbid], enable ? 1 : 0, __ATOMIC_RELEASE);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
						  CUpti_BuffersCallbackCompleteFunc complete)
{
	if (!request || !complete)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	buf_request = request;
	buf_complete = complete;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
	if ((unsigned)kind >= sizeof(enabled_kind))
		return CUPTI_ERROR_INVALID_KIND;
	__atomic_store_n(&enabled_kind[kind], 1, __ATOMIC_RELEASE);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
	if ((unsigned)kind >= sizeof(enabled_kind))
		return CUPTI_ERROR_INVALID_KIND;
	__atomic_store_n(&enabled_kind[kind], 0, __ATOMIC_RELEASE);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp)
{
	/* The fake GPU's clock is CLOCK_MONOTONIC, not CUPTI's default
	 * CLOCK_REALTIME: the library must convert. */
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	*timestamp = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
	return CUPTI_SUCCESS;
}

static size_t record_size(const CUpti_Activity *r)
{
	switch (r->kind) {
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
	case CUPTI_ACTIVITY_KIND_KERNEL: return sizeof(CUpti_ActivityKernel8);
	case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy5);
	case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization);
	default: return 0;
	}
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
	size_t off = 0;
	if (*record) {
		size_t sz = record_size(*record);
		if (!sz)
			return CUPTI_ERROR_INVALID_KIND;
		off = (size_t)((uint8_t *)*record - buffer) + sz;
	}
	if (off >= valid) {
		*record = NULL;
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	}
	*record = (CUpti_Activity *)(buffer + off);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t *n)
{
	(void)context;
	(void)streamId;
	pthread_mutex_lock(&lock);
	*n = dropped;
	dropped = 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* Takes the current buffer out (lock held); the caller completes it
 * without the lock. */
static uint8_t *take_buffer(size_t *used, size_t *size)
{
	uint8_t *b = cur;
	*used = cur_used;
	*size = cur_size;
	cur = NULL;
	cur_used = cur_size = cur_records = 0;
	return b;
}

static void complete(uint8_t *b, size_t used, size_t size)
{
	if (b && buf_complete)
		buf_complete(NULL, 0, b, size, used);
}

/* Appends (lock held); returns a full buffer to complete, or NULL. */
static uint8_t *append(const void *rec, size_t size, size_t *out_used, size_t *out_size)
{
	uint8_t *full = NULL;
	if (cur && (cur_used + size > cur_size || cur_records >= per_buffer))
		full = take_buffer(out_used, out_size);
	if (!cur && buf_request) {
		size_t max = 0;
		buf_request(&cur, &cur_size, &max);
		if (!cur)
			cur_size = 0;
	}
	if (!cur || cur_used + size > cur_size) {
		dropped++;
		return full;
	}
	memcpy(cur + cur_used, rec, size);
	cur_used += size;
	cur_records++;
	return full;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	size_t used = 0, size = 0;
	pthread_mutex_lock(&lock);
	uint8_t *b = take_buffer(&used, &size);
	pthread_mutex_unlock(&lock);
	complete(b, used, size);
	/* Held-back records come now, after records that were made later. */
	pthread_mutex_lock(&lock);
	read_env();
	size_t fused = 0, fsize = 0;
	for (unsigned i = 0; i < nlate; i++) {
		uint8_t *f = append(late[i].bytes, late[i].size, &fused, &fsize);
		if (f) {
			pthread_mutex_unlock(&lock);
			complete(f, fused, fsize);
			pthread_mutex_lock(&lock);
		}
	}
	nlate = 0;
	b = take_buffer(&used, &size);
	pthread_mutex_unlock(&lock);
	complete(b, used, size);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t ms)
{
	(void)ms;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiFinalize(void)
{
	return CUPTI_SUCCESS;
}

/* --- PC sampling: a scripted sequence replayed ---
 *
 * FAKE_CUDA_PCSAMPLES="kernel:offset:reason:samples,..." (offset in hex
 * or decimal, reason a short name of the table below): each kernel record
 * of that name adds those samples, which cuptiPCSamplingGetData hands
 * back (at most collectNumPcs records a call, the rest said in
 * remainingNumPcs) and cuptiPCSamplingDisable flushes into the configured
 * buffer. FAKE_CUPTI_PCSAMPLING_ERROR=code: cuptiPCSamplingEnable fails
 * with it (35: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES). */

#define PCS_SCRIPT 64
#define PCS_PENDING 4096
#define FAKE_CUBIN_CRC 0x5eed0000c0b1ull

/* Hardware indices as a device names them: not 0..n-1. */
static const struct {
	uint32_t index;
	const char *name;
} stall_table[] = {
	{ 2, "smsp__pcsamp_warps_issue_stalled_barrier" },
	{ 4, "smsp__pcsamp_warps_issue_stalled_long_scoreboard" },
	{ 7, "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle" },
	{ 9, "smsp__pcsamp_warps_issue_stalled_short_scoreboard" },
	{ 12, "smsp__pcsamp_warps_issue_stalled_selected" },
	{ 15, "smsp__pcsamp_warps_issue_stalled_wait" },
};
#define NSTALLS (sizeof(stall_table) / sizeof(stall_table[0]))

static struct {
	char *name;
	uint64_t offset;
	uint32_t stall;
	uint32_t samples;
} script[PCS_SCRIPT];
static unsigned nscript;
/* FAKE_CUDA_CUBIN=path: the module each context loads (its image handed
 * to MODULE_LOADED); PC records then name its CRC. */
static uint64_t cubin_crc = FAKE_CUBIN_CRC;
static struct {
	char *name; /* the script's: one pointer per function, as CUPTI's */
	uint64_t offset;
	uint32_t stall;
	uint64_t samples;
} pending[PCS_PENDING];
static unsigned npending;
static int pcs_enabled;
static CUpti_PCSamplingData *pcs_conf;

static void pcs_read_script(void)
{
	const char *v = getenv("FAKE_CUDA_PCSAMPLES");
	if (!v)
		return;
	char *copy = strdup(v), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t && nscript < PCS_SCRIPT; t = strtok_r(NULL, ",", &save)) {
		char name[256], reason[128];
		unsigned long long off;
		unsigned n;
		if (sscanf(t, "%255[^:]:%lli:%127[^:]:%u", name, (long long *)&off, reason, &n) != 4)
			continue;
		for (size_t i = 0; i < NSTALLS; i++) {
			if (strcmp(stall_table[i].name + strlen("smsp__pcsamp_warps_issue_stalled_"), reason) == 0) {
				script[nscript].name = strdup(name);
				script[nscript].offset = off;
				script[nscript].stall = stall_table[i].index;
				script[nscript].samples = n;
				nscript++;
			}
		}
	}
	free(copy);
}

static void pcs_kernel_ran(const char *name)
{
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; pcs_enabled && name && i < nscript; i++) {
		if (strcmp(script[i].name, name) != 0)
			continue;
		unsigned j;
		for (j = 0; j < npending; j++)
			if (pending[j].name == script[i].name && pending[j].offset == script[i].offset &&
			    pending[j].stall == script[i].stall)
				break;
		if (j == npending) {
			if (npending >= PCS_PENDING)
				continue;
			pending[npending].name = script[i].name;
			pending[npending].offset = script[i].offset;
			pending[npending].stall = script[i].stall;
			pending[npending].samples = 0;
			npending++;
		}
		pending[j].samples += script[i].samples;
	}
	pthread_mutex_unlock(&lock);
}

EXPORT CUptiResult cuptiPCSamplingEnable(CUpti_PCSamplingEnableParams *p)
{
	unsigned err = env_uint("FAKE_CUPTI_PCSAMPLING_ERROR", 0);
	if (err)
		return (CUptiResult)err;
	if (!p || p->size != sizeof(*p) || !p->ctx)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	if (!pcs_enabled && nscript == 0)
		pcs_read_script();
	pcs_enabled = 1;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingGetNumStallReasons(CUpti_PCSamplingGetNumStallReasonsParams *p)
{
	if (!p || !p->numStallReasons || !p->ctx)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*p->numStallReasons = NSTALLS;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingGetStallReasons(CUpti_PCSamplingGetStallReasonsParams *p)
{
	if (!p || p->numStallReasons != NSTALLS || !p->stallReasonIndex || !p->stallReasons)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < NSTALLS; i++) {
		p->stallReasonIndex[i] = stall_table[i].index;
		snprintf(p->stallReasons[i], CUPTI_STALL_REASON_STRING_SIZE, "%s", stall_table[i].name);
	}
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingSetConfigurationAttribute(CUpti_PCSamplingConfigurationInfoParams *p)
{
	if (!p || !p->ctx || !p->pPCSamplingConfigurationInfo)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < p->numAttributes; i++) {
		CUpti_PCSamplingConfigurationInfo *c = &p->pPCSamplingConfigurationInfo[i];
		if (c->attributeType == CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER)
			pcs_conf = c->attributeData.samplingDataBufferData.samplingDataBuffer;
		if (c->attributeType == CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE &&
		    c->attributeData.collectionModeData.collectionMode != CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS)
			return CUPTI_ERROR_NOT_SUPPORTED;
	}
	return CUPTI_SUCCESS;
}

/* Moves pending records into d, as many as it holds. */
static void pcs_fill(CUpti_PCSamplingData *d)
{
	size_t n = 0;
	while (n < d->collectNumPcs && npending > 0) {
		CUpti_PCSamplingPCData *o = &d->pPcData[n++];
		unsigned j = --npending;
		o->cubinCrc = cubin_crc;
		o->pcOffset = pending[j].offset;
		o->functionIndex = 0;
		o->functionName = pending[j].name;
		o->stallReasonCount = 1;
		o->stallReason[0].pcSamplingStallReasonIndex = pending[j].stall;
		o->stallReason[0].samples = (uint32_t)pending[j].samples;
	}
	d->totalNumPcs = n;
	d->remainingNumPcs = npending;
}

EXPORT CUptiResult cuptiPCSamplingGetData(CUpti_PCSamplingGetDataParams *p)
{
	if (!p || !p->pcSamplingData)
		return CUPTI_ERROR_INVALID_PARAMETER;
	CUpti_PCSamplingData *d = p->pcSamplingData;
	if (d->size != sizeof(*d) || !d->pPcData || d->pPcData[0].size != sizeof(CUpti_PCSamplingPCData))
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	if (!pcs_enabled) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_INVALID_OPERATION;
	}
	pcs_fill(d);
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingDisable(CUpti_PCSamplingDisableParams *p)
{
	if (!p)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	if (pcs_enabled && pcs_conf)
		pcs_fill(pcs_conf);
	pcs_enabled = 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* --- the hooks the fake driver calls --- */

EXPORT uint32_t fakecupti_next_corr(void)
{
	return __atomic_fetch_add(&corr_next, 1, __ATOMIC_RELAXED);
}

EXPORT void fakecupti_api(int runtime, uint32_t cbid, int site, uint32_t corr, const char *function, const char *symbol)
{
	if (cbid >= MAX_CBID || !__atomic_load_n(&enabled_cb[runtime ? 1 : 0][cbid], __ATOMIC_ACQUIRE))
		return;
	CUpti_CallbackFunc fn = __atomic_load_n(&subscriber_fn, __ATOMIC_ACQUIRE);
	if (!fn)
		return;
	uint64_t correlation_data = 0;
	CUpti_CallbackData d = {
		.callbackSite = site ? CUPTI_API_EXIT : CUPTI_API_ENTER,
		.functionName = function,
		.symbolName = symbol,
		.correlationId = corr,
		.correlationData = &correlation_data,
	};
	fn(subscriber_data, runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
}

EXPORT int fakecupti_enabled(int kind)
{
	return kind >= 0 && (unsigned)kind < sizeof(enabled_kind) && __atomic_load_n(&enabled_kind[kind], __ATOMIC_ACQUIRE);
}

EXPORT void fakecupti_record(const void *rec, size_t size)
{
	size_t used = 0, bsize = 0;
	pthread_mutex_lock(&lock);
	read_env();
	uint64_t n = ++records_seen;
	if (drop_every && n % drop_every == 0) {
		dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	if (late_every && n % late_every == 0 && nlate < LATE_MAX && size <= sizeof(late[0].bytes)) {
		memcpy(late[nlate].bytes, rec, size);
		late[nlate].size = size;
		nlate++;
		pthread_mutex_unlock(&lock);
		return;
	}
	uint8_t *full = append(rec, size, &used, &bsize);
	pthread_mutex_unlock(&lock);
	complete(full, used, bsize);
	const CUpti_Activity *a = rec;
	if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
		pcs_kernel_ran(((const CUpti_ActivityKernel8 *)rec)->name);
}

/* The fake's own CRC of a cubin (FNV-1a, 64 bits): opaque to the library,
 * as CUPTI's is. */
EXPORT CUptiResult cuptiGetCubinCrc(CUpti_GetCubinCrcParams *p)
{
	if (!p || p->size == 0 || !p->cubin || p->cubinSize == 0)
		return CUPTI_ERROR_INVALID_PARAMETER;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < p->cubinSize; i++)
		h = (h ^ ((const unsigned char *)p->cubin)[i]) * 0x100000001b3ull;
	p->cubinCrc = h;
	return CUPTI_SUCCESS;
}

/* The context's module: FAKE_CUDA_CUBIN's image to MODULE_LOADED. */
static void load_module(CUcontext ctx, CUpti_CallbackFunc fn)
{
	const char *path = getenv("FAKE_CUDA_CUBIN");
	FILE *f = path && *path ? fopen(path, "rb") : NULL;
	if (!f)
		return;
	static char image[1 << 20];
	size_t n = fread(image, 1, sizeof(image), f);
	fclose(f);
	CUpti_GetCubinCrcParams cp = { .size = sizeof(cp), .cubinSize = n, .cubin = image };
	if (n == 0 || cuptiGetCubinCrc(&cp) != CUPTI_SUCCESS)
		return;
	pthread_mutex_lock(&lock);
	cubin_crc = cp.cubinCrc;
	pthread_mutex_unlock(&lock);
	if (!__atomic_load_n(&enabled_res[CUPTI_CBID_RESOURCE_MODULE_LOADED], __ATOMIC_ACQUIRE))
		return;
	CUpti_ModuleResourceData m = { .moduleId = 1, .cubinSize = n, .pCubin = image };
	CUpti_ResourceData d = { .context = ctx, .resourceDescriptor = &m };
	fn(subscriber_data, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED, &d);
}

/* Fires the resource callback of a context made (created 1) or about to
 * go (0), if enabled; a context made loads FAKE_CUDA_CUBIN's module. */
EXPORT void fakecupti_context(int created, void *ctx)
{
	uint32_t cbid = created ? CUPTI_CBID_RESOURCE_CONTEXT_CREATED : CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING;
	if (!__atomic_load_n(&enabled_res[cbid], __ATOMIC_ACQUIRE))
		return;
	CUpti_CallbackFunc fn = __atomic_load_n(&subscriber_fn, __ATOMIC_ACQUIRE);
	if (!fn)
		return;
	CUpti_ResourceData d = { .context = (CUcontext)ctx };
	fn(subscriber_data, CUPTI_CB_DOMAIN_RESOURCE, cbid, &d);
	if (created)
		load_module((CUcontext)ctx, fn);
}
