/* nvtx_inject.c - libembercuda.so as an NVTX injection library: a program
 * that uses NVTX v3 (header-only, NVIDIA's nvtx3) and runs with
 * NVTX_INJECTION64_PATH naming this library has its NVTX calls handed here
 * (docs/internals/gpu.md, "NVTX ranges"). Each thread keeps its open push
 * ranges (gpu/nvtx_ranges.h, bounded); a sampled launch takes the path
 * (embercuda.c). Only when EMBER_CUDA_ENABLE_NVTX is on (the default):
 * off, InitializeInjectionNvtx2 declines and NVTX's calls stay no-ops.
 *
 * The NVTX injection interface, as NVIDIA's nvtx3 headers define it
 * (nvtxDetail/nvtxTypes.h; stable across NVTX v3): the loader calls the
 * exported InitializeInjectionNvtx2(getExportTable); getExportTable(1)
 * (NVTX_ETID_CALLBACKS) gives { size_t struct_size; int
 * (*GetModuleFunctionTable)(module, NvtxFunctionPointer ***table, unsigned
 * *max_index) }; a module's table is an array of pointers to the slots the
 * loader calls through, indexed by callback id (1..max_index). Written out
 * here, so that the product builds without NVIDIA's headers.
 *
 * Ranges started with nvtxRangeStart and ended with nvtxRangeEnd may cross
 * threads and do not nest: they are not kept (a launch's path is its
 * thread's pushed ranges). */
#include "embercuda.h"
#include "nvtx_ranges.h"

#include <stdlib.h>
#include <strings.h>
#include <wchar.h>

enum {
	ETID_CALLBACKS = 1,
	MODULE_CORE = 1,
	MODULE_CORE2 = 5,
	CORE_RANGE_PUSH_EX = 8,
	CORE_RANGE_PUSH_A = 9,
	CORE_RANGE_PUSH_W = 10,
	CORE_RANGE_POP = 11,
	CORE2_DOMAIN_RANGE_PUSH_EX = 4,
	CORE2_DOMAIN_RANGE_POP = 5,
	MESSAGE_ASCII = 1,
	MESSAGE_UNICODE = 2,
};

typedef void (*nvtx_fn)(void);
struct nvtx_callbacks {
	size_t struct_size;
	int (*get_module_table)(int module, nvtx_fn ***table, unsigned *max_index);
};


/* nvtxEventAttributes_t, version 2 and 3: the fields read here. */
struct nvtx_event_attributes {
	uint16_t version;
	uint16_t size;
	uint32_t category;
	int32_t color_type;
	uint32_t color;
	int32_t payload_type;
	int32_t reserved0;
	uint64_t payload;
	int32_t message_type;
	const void *message;
};

/* Per thread, touched only by it (NVTX calls are on the caller's thread). */
static __thread struct nvtx_ranges ranges;

const struct nvtx_ranges *ember_nvtx_ranges(void)
{
	return &ranges;
}

static int push_attributes(const struct nvtx_event_attributes *a)
{
	/* a shorter struct than the fields read is a caller's error: unnamed */
	if (a && a->size >= sizeof(*a)) {
		if (a->message_type == MESSAGE_ASCII)
			return nvtx_ranges_push(&ranges, a->message);
		if (a->message_type == MESSAGE_UNICODE)
			return nvtx_ranges_push_wide(&ranges, a->message);
	}
	return nvtx_ranges_push(&ranges, NULL); /* registered strings: not kept */
}

static int on_push_a(const char *message)
{
	return nvtx_ranges_push(&ranges, message);
}

static int on_push_w(const wchar_t *message)
{
	return nvtx_ranges_push_wide(&ranges, message);
}

static int on_push_ex(const struct nvtx_event_attributes *a)
{
	return push_attributes(a);
}

static int on_pop(void)
{
	return nvtx_ranges_pop(&ranges);
}

static int on_domain_push_ex(void *domain, const struct nvtx_event_attributes *a)
{
	(void)domain;
	return push_attributes(a);
}

static int on_domain_pop(void *domain)
{
	(void)domain;
	return nvtx_ranges_pop(&ranges);
}

static int set_slot(nvtx_fn **table, unsigned max_index, unsigned id, nvtx_fn fn)
{
	if (!table || id > max_index || !table[id])
		return 0;
	*table[id] = fn;
	return 1;
}

static int nvtx_enabled(void)
{
	const char *v = getenv("EMBER_CUDA_ENABLE_NVTX");
	if (v && (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") ||
		  !strcasecmp(v, "off")))
		return 0;
	v = getenv("EMBER_CUDA_NOOP");
	return !(v && (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
		       !strcasecmp(v, "on")));
}

EMBERCUDA_EXPORT int InitializeInjectionNvtx2(const void *(*get)(uint32_t id))
{
	if (!get || !nvtx_enabled())
		return 0;
	const struct nvtx_callbacks *cb = get(ETID_CALLBACKS);
	if (!cb || cb->struct_size < sizeof(*cb) || !cb->get_module_table)
		return 0;
	nvtx_fn **core = NULL, **core2 = NULL;
	unsigned ncore = 0, ncore2 = 0;
	if (!cb->get_module_table(MODULE_CORE, &core, &ncore))
		return 0;
	int ok = set_slot(core, ncore, CORE_RANGE_PUSH_A, (nvtx_fn)on_push_a) &
		 set_slot(core, ncore, CORE_RANGE_POP, (nvtx_fn)on_pop);
	if (!ok)
		return 0;
	set_slot(core, ncore, CORE_RANGE_PUSH_W, (nvtx_fn)on_push_w);
	set_slot(core, ncore, CORE_RANGE_PUSH_EX, (nvtx_fn)on_push_ex);
	if (cb->get_module_table(MODULE_CORE2, &core2, &ncore2)) {
		set_slot(core2, ncore2, CORE2_DOMAIN_RANGE_PUSH_EX, (nvtx_fn)on_domain_push_ex);
		set_slot(core2, ncore2, CORE2_DOMAIN_RANGE_POP, (nvtx_fn)on_domain_pop);
	}
	return 1;
}
