/* collect.h - turning one raw sample from BPF (on-CPU: a count of 1;
 * off-CPU: nanoseconds of waiting) into an aggregated stack in the current
 * batch.
 *
 * User frames become (file, offset within the file) for the server to
 * symbolize; kernel frames are named here from kallsyms and vDSO frames
 * from the agent's own vDSO. Return addresses (every frame but the
 * innermost) are looked up at address - 1, so a call that is the last
 * instruction of a function is not blamed on the next one. Frames that
 * cannot be resolved become explicit error frames, never silent gaps: a
 * user address in no executable mapping ends the user stack there (the
 * frame-pointer chain broke; what lies beyond is not trustworthy) under
 * one "[unknown mapping]" frame.
 */
#ifndef EMBER_AGENT_COLLECT_H
#define EMBER_AGENT_COLLECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "files.h"
#include "kallsyms.h"
#include "counters.h"
#include "kubelet.h"
#include "proc.h"
#include "samplecache.h"
#include "vdso.h"

struct oncpu_raw_sample;
struct oncpu_raw_stack;
struct oncpu_sample;
struct rawstack;

/* The collector's counters: a field for each C row of agent/counters.h
 * (what each counts is said there), and the GPU time samples. */
struct collector_stats {
#define COLLECTOR_FIELD(id, field, ...) uint64_t field;
	AGENT_COUNTERS(COUNTERS_NONE, COUNTERS_NONE, COLLECTOR_FIELD, COUNTERS_NONE, COUNTERS_NONE)
#undef COLLECTOR_FIELD
	uint64_t cuda_samples, cuda_ns; /* GPU time samples (collect_cuda) and their nanoseconds */
	uint64_t cuda_spans_dropped;    /* timeline spans over BATCH_MAX_SPANS in an interval */
};

/* Raw samples waiting for a table: each kept at most COLLECT_RAW_WAIT_NS,
 * at most COLLECT_RAW_MAX_BYTES of them (their header, the frame slots
 * they use and the stack bytes BPF copied: a sample of a Python main
 * thread takes 3 to 10 KiB, one of another thread up to 20 KiB), so that
 * a busy host's new processes wait seconds for their tables, not a
 * fraction of one; a retry runs when a table was published since the
 * last one (or a wait ended). */
#define COLLECT_RAW_MAX_BYTES (8u << 20)
#define COLLECT_RAW_WAIT_NS (5ull * 1000000000ull)
/* CUDA launch records waiting for a table, in a budget of their own (so
 * CPU samples cannot crowd them out). */
#define COLLECT_CUDA_RAW_MAX_BYTES (2u << 20)

/* Most host attribute ids (pairs x 2) a collector takes. */
#define COLLECT_MAX_HOST_KV 96
/* Most attributes (pairs) a sample adds to its process's (GPU samples). */
#define COLLECT_MAX_EXTRA_KV 8

struct collector {
	struct batch *batch;
	struct proc_table *procs;
	struct file_registry *files;
	const struct kallsyms *ksyms;
	const struct vdso *vdso;
	const char *host_name;
	const char *host_arch;
	/* Attributes of every sample of this host, key/value pairs (cluster,
	 * host type and id, host facts, -tags); empty values are left out. */
	const char *const *host_kv;
	size_t nhost_kv;
	uint64_t ns_per_tick; /* to convert start times to /proc clock ticks */
	/* Called with the registry index of the file where ember's unwinder
	 * stopped for want of a rule (its table may still be waiting to be
	 * built), so that it is built next; NULL = not called. */
	void (*want_table)(void *ctx, uint32_t file);
	void *hook_ctx;
	/* Called with each CUDA launch record unwound from its raw stack
	 * (collect_cuda_raw), a struct oncpu_sample of size bytes without
	 * ONCPU_F_RAW_STACK, for the join (cuda_add_stack); NULL = dropped. */
	void (*cuda_stack)(void *ctx, const void *rec, size_t size);
	struct python *python; /* names Python frames; NULL = none */
	/* Adds a pod's -k8s-pod-labels (and its name and namespace when the
	 * process's attributes lack them) to the resource of its processes;
	 * NULL = none. A process whose pod the latest list lacks is looked up
	 * again at its next sample, so labels appear as soon as a list has
	 * them. */
	struct kubelet *kubelet;
	struct collector_stats stats;
	/* Per-batch caches (valid while gen matches batch_gen): the resource
	 * of a (pid, thread name), the frame of a kernel address and of a
	 * Python frame, so a sample costs no string interning once its
	 * thread, kernel and Python frames were seen in the interval. */
	uint32_t batch_gen; /* bumped by collector_set_batch; 0 = no caching */
	struct {
		uint32_t gen, pid, res;
		char comm[17];
	} res_cache[256];
	/* An entry of an earlier batch (gen != 0 but not current) still
	 * holds the address's kallsyms name, so a new batch interns it again
	 * without searching kallsyms. */
	struct kframe_memo {
		uint32_t gen, frame;
		uint64_t addr;
		/* kallsyms_lookup's answer (pointers into ksyms, which outlives
		 * the collector); name NULL: not in kallsyms */
		const char *name, *module;
		bool unknown; /* not in kallsyms: counted in stats.unknown_frames */
	} kframe_cache[1024];
	/* The frame of a named Python frame (process, code object and
	 * instruction, co_qualname), so the interpreter's line table is
	 * read once per batch for each. */
	struct {
		uint32_t gen, frame;
		int32_t pid;
		uint64_t slot, qualname;
	} pyframe_cache[1024];
	/* Raw samples already in the batch (samplecache.h): a repeat goes to
	 * its row without resolving its stack again. A process's maps read
	 * again within the interval (dlopen) leave the stacks already
	 * resolved as they were until the next batch; a stack that broke at
	 * an address in no mapping is never kept, so the one that needed the
	 * new maps is resolved with them. */
	struct sample_cache samples;
	/* Unwinds the raw stacks of samples of processes the unwinder did not
	 * know yet (rawstack.h); NULL = they are taken as the frame-pointer
	 * walk they carry. */
	struct rawstack *rawstack;
	/* The py_procs map (bpf/python_types.h), whose layouts tell where the
	 * Python frames a raw record carries go (ONCPU_F_RAW_PYTHON); 0 =
	 * none (they are left out). */
	int py_procs_fd;
	/* Called before a retry: a count that changes whenever a table is
	 * published (unwind_publications); NULL = retry every 10 ms. */
	uint64_t (*tables_published)(void *ctx);
	uint64_t retried_tables; /* its value at the last retry */
	/* Those waiting for a table, oldest first (collector_retry_raw),
	 * each in two parts of the sizes they use. */
	struct raw_pending {
		struct oncpu_sample *s;     /* header and used frame slots: owned */
		struct oncpu_raw_stack *raw; /* registers and raw.len bytes: owned */
		size_t bytes;
		uint64_t deadline_ns;
	} *pending;
	size_t npending, cappending; /* all of them */
	size_t ncuda_pending;        /* of which CUDA launch records */
	size_t pending_bytes, cuda_pending_bytes;
	uint64_t retried_ns; /* the last retry (at most one every 10 ms) */
};

struct oncpu_sample;

/* Makes b the batch samples go to (the caches start over). Until it is
 * first called, nothing is cached. */
void collector_set_batch(struct collector *c, struct batch *b);
/* Frees the caches' memory (the collector's other fields are the
 * caller's). */
void collector_free(struct collector *c);
/* Adds the sample (size bytes as read from the ring buffer) to the batch,
 * as its kind (EK_ON_CPU with value 1, or EK_OFF_CPU with 1 to
 * OFFCPU_MAX_VALUE_NS nanoseconds); any other kind or value is counted as
 * malformed and dropped. */
void collect_sample(struct collector *c, const void *sample, size_t size, uint64_t now_ns);
/* A record with ONCPU_F_RAW_STACK (struct oncpu_raw_sample: a sample of a
 * process ember's unwinder did not know yet) is unwound here by CFI from
 * its raw stack (the process is read first, so its maps are described);
 * when a table it needs is not loaded yet, it waits (bounded above) and
 * collector_retry_raw adds it to the batch then current. */
/* Unwinds the waiting raw samples whose tables have come in, and those
 * that waited COLLECT_RAW_WAIT_NS (or all of them, with all) with the
 * tables there are, adding them to the batch (CUDA launch records: to
 * cuda_stack). The main loop calls it after each wakeup, and with all
 * before the sweep forgets exited processes and before the agent stops. */
void collector_retry_raw(struct collector *c, uint64_t now_ns, bool all);
/* A CUDA launch record with ONCPU_F_RAW_STACK (struct oncpu_raw_sample of
 * kind ONCPU_KIND_CUDA_LAUNCH, size bytes): unwound as collect_sample
 * unwinds a raw CPU sample (waiting, bounded, in its own
 * COLLECT_CUDA_RAW_MAX_BYTES, for a table not loaded yet), then
 * handed to cuda_stack with ONCPU_F_UNWOUND_RAW set; a process the agent
 * could not read keeps the frame-pointer walk the record carries. */
void collect_cuda_raw(struct collector *c, const void *rec, size_t size, uint64_t now_ns);
/* Whether a raw launch record of (pid, stack_id) waits for a table: its
 * GPU time waits for it too (cuda_join). */
bool collector_cuda_raw_waiting(const struct collector *c, int32_t pid, uint64_t stack_id);

struct cuda_work;
/* Adds one entry of GPU time (cuda.h) to the batch as an EK_CUDA sample
 * of w->total_ns nanoseconds. Its stack: the user stack of the launch
 * record rec (struct oncpu_sample of kind ONCPU_KIND_CUDA_LAUNCH, size
 * bytes) without the frames at its top that lie in the CUDA libraries
 * (libembercuda.so, libcupti*, libcuda*), or, with rec NULL, one error
 * frame "[launch not sampled]"; then a cuda_launch frame named by the API
 * and a leaf frame named by the kernel (as CUPTI gives it, mangled: the
 * server demangles names for display) of type cuda_kernel, cuda_memcpy,
 * cuda_memset or cuda_sync by the work's kind. Its resource: the
 * process's (thread.name from the launch record) plus gpu.device.index,
 * gpu.device.uuid and gpu.name (when the library sent the device),
 * cuda.stream.id and cuda.context.id. */
void collect_cuda(struct collector *c, const struct cuda_work *w, const void *rec, size_t size,
		  uint64_t now_ns);
/* What collect_cuda() will need of a launch record's process, read as the
 * record arrives (the process may be gone when its GPU time comes): its
 * entry (mappings, exec count) and the names of its Python frames (into
 * the symbolizer's cache); and, when the walk stopped for want of a file's
 * unwind table, want_table() for that file. */
void collect_cuda_prepare(struct collector *c, const void *rec, size_t size, uint64_t now_ns);

#endif
