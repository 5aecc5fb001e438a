/* fake_cuda.h - FOR TESTS ONLY. The hooks between the two halves of the
 * project's stand-in for NVIDIA's driver and CUPTI (tests/fake_cuda/):
 *
 *   build/tests/fake_cuda/libcupti.so         fake_cupti.c: the CUPTI subset
 *       libembercuda.so calls (subscribe, callbacks, activity buffers, ...)
 *       plus the hooks below;
 *   build/tests/fake_cuda/driver/libcuda.so.1 fake_cuda.c: cuInit (loads
 *       CUDA_INJECTION64_PATH and calls InitializeInjection, as the driver
 *       does), launches, copies, sets and syncs that run no GPU work but go
 *       through the fake CUPTI: callbacks on the calling thread, activity
 *       records with scripted durations.
 *
 * The product never loads either: tests put their directories in
 * LD_LIBRARY_PATH. Scripted behaviour (environment, read at cuInit):
 *   FAKE_CUDA_KERNEL_NS="name=ns,..."  a kernel's duration (default 1000 ns)
 *   FAKE_CUDA_SYNC_NS=ns               a sync's duration (default 5000)
 *   FAKE_CUDA_BAD_EVERY=N              every Nth kernel record has a broken
 *                                      time (end before start, or hours long)
 *   FAKE_CUDA_DROP_EVERY=N             every Nth record is dropped (and
 *                                      reported by GetNumDroppedRecords)
 *   FAKE_CUDA_LATE_EVERY=N             every Nth record is held back and
 *                                      delivered after later ones
 *   FAKE_CUDA_NESTED_OWN_ID=1          the driver call nested in a runtime
 *                                      launch gets its own correlation id,
 *                                      which the kernel's record carries
 *   FAKE_CUDA_RECORDS_PER_BUFFER=N     records before a buffer is handed back
 *   FAKE_CUPTI_SUBSCRIBE_ERROR=code    cuptiSubscribe fails with it
 *   FAKE_CUPTI_VERSION=N               cuptiGetVersion's answer (default 18)
 *   FAKE_CUDA_PCSAMPLES="k:off:reason:n,..."  PC samples each kernel record
 *                                      of k adds (fake_cupti.c: PC sampling)
 *   FAKE_CUPTI_PCSAMPLING_ERROR=code   cuptiPCSamplingEnable fails with it
 */
#ifndef EMBER_FAKE_CUDA_H
#define EMBER_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

/* libcupti.so's side, looked up by libcuda.so.1 with dlsym. */
typedef uint32_t (*fakecupti_next_corr_fn)(void);
/* Runs the subscriber's callback if enabled; site 0 enter, 1 exit. */
typedef void (*fakecupti_api_fn)(int runtime, uint32_t cbid, int site, uint32_t corr, const char *function,
				 const char *symbol);
/* Appends one activity record (a CUpti_Activity* struct) to the current
 * buffer; size is the struct's. */
typedef void (*fakecupti_record_fn)(const void *record, size_t size);
/* 1 when activity records of `kind` are enabled. */
typedef int (*fakecupti_enabled_fn)(int kind);
/* Fires CONTEXT_CREATED (created 1) or CONTEXT_DESTROY_STARTING. */
typedef void (*fakecupti_context_fn)(int created, void *ctx);

#endif
