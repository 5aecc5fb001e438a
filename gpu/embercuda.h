/* embercuda.h - what libembercuda.so exports (everything else is hidden).
 *
 * libembercuda.so is a CUDA injection library: a CUDA program started with
 * CUDA_INJECTION64_PATH=/path/to/libembercuda.so has the driver load it
 * during cuInit and call InitializeInjection. The library then records
 * the program's GPU work through CUPTI (loaded with dlopen: the copy the
 * program already has, else the usual places) and sends it, aggregated,
 * to ember-agent over the socket lib/cuda_wire.h describes. The design,
 * settings (EMBER_CUDA_*) and failure modes are in docs/internals/gpu.md.
 *
 * Guarantees to the program: no crash and no change in behaviour. When
 * CUPTI is missing, too old or already owned by another profiler, the
 * library says so once on stderr (unless EMBER_CUDA_QUIET, the default)
 * and does nothing more. When no agent listens, it retries a bounded
 * number of times and then stops recording.
 */
#ifndef EMBER_GPU_EMBERCUDA_H
#define EMBER_GPU_EMBERCUDA_H

#include <stdint.h>

#define EMBERCUDA_EXPORT __attribute__((visibility("default")))

/* Called by the CUDA driver (or its test stand-in) once, during cuInit.
 * Returns 1 (the driver ignores a failure anyway; a library that stepped
 * aside returns 1 too, so the program carries on). */
EMBERCUDA_EXPORT int InitializeInjection(void);

/* Called on the launching thread for each launch picked for a stack, with
 * the launch's CUPTI correlation id (never 0) and enum cuda_wire_kind.
 * Does nothing; ember-agent puts a uprobe on it (lib/cuda_wire.h). */
EMBERCUDA_EXPORT void ember_cuda_launch_marker(uint64_t stack_id, uint32_t kind);

/* Called by NVTX v3 (NVIDIA's nvtx3 headers, in the program) once, at the
 * program's first NVTX call, when NVTX_INJECTION64_PATH names this library:
 * fills NVTX's push/pop slots (gpu/nvtx_inject.c). Returns 1, or 0 (NVTX
 * then makes its calls no-ops) when EMBER_CUDA_ENABLE_NVTX is off,
 * EMBER_CUDA_NOOP is on, or the export table lacks what it needs. */
struct nvtx_ranges;
EMBERCUDA_EXPORT int InitializeInjectionNvtx2(const void *(*get_export_table)(uint32_t id));

/* The calling thread's open NVTX ranges (never NULL; empty when NVTX is
 * off or unused). Not exported. */
const struct nvtx_ranges *ember_nvtx_ranges(void);

/* The library's version, NUL-terminated (also sent in HELLO). */
EMBERCUDA_EXPORT extern const char ember_cuda_version[];

#endif
