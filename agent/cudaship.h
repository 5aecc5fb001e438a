/* cudaship.h - ember-agent carries libembercuda.so (gpu/) inside its own
 * binary and places it where CUDA programs can load it.
 *
 * At start, unless -enable-cuda-profiler=false, the agent writes the
 * library it was built with to -cuda-profiler-dir (default
 * /var/lib/ember/profiler) as libembercuda.so, readable by every user,
 * and logs the line a workload needs:
 *   CUDA_INJECTION64_PATH=/var/lib/ember/profiler/libembercuda.so
 * The file is replaced atomically (a temporary file renamed over it), so
 * a process that has the previous copy mapped keeps running on it, and it
 * is not written at all when the copy there already has the same bytes.
 */
#ifndef EMBER_AGENT_CUDASHIP_H
#define EMBER_AGENT_CUDASHIP_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

#define CUDASHIP_NAME "libembercuda.so"

enum cudaship_result {
	CUDASHIP_FAILED = -1, /* with a message in err */
	CUDASHIP_SAME = 0,    /* the file there was already the same */
	CUDASHIP_WRITTEN = 1, /* the file was written */
};

/* Creates dir (0755, and its parents) when missing and makes
 * dir/libembercuda.so hold the len bytes at lib (mode 0755). */
enum cudaship_result cudaship_install(const char *dir, const void *lib, size_t len, struct buf *err);

/* The library ember-agent was built with (agent/cuda_blob.S). Linked into
 * ember-agent only. */
extern const unsigned char ember_cuda_lib_start[], ember_cuda_lib_end[];

#endif
