/* selfstats.c - see selfstats.h. */
#include "selfstats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "jsonw.h"
#include "log.h"
#include "util.h"

#define PREFIX "ember_agent_"

enum kind { COUNTER, GAUGE };

struct metric {
	const char *name;   /* without PREFIX */
	enum kind kind;
	const char *help;
	const char *label;  /* the family's label name, or NULL */
	const char *lvalue; /* this row's label value */
	bool seconds;       /* the value is nanoseconds, shown as seconds */
};

/* Rows of one family (same name) are consecutive; HELP and TYPE are
 * written before the first. */
static const struct metric metrics[SS_COUNT] = {
	[SS_SAMPLES] = { "samples_total", COUNTER, "On-CPU samples added to batches (what the server stores once they are sent)." },
	[SS_FRAMES] = { "frames_total", COUNTER, "User and kernel frames of those samples." },
	[SS_ERROR_STACKS] = { "error_stacks_total", COUNTER, "Samples whose stack ends in an error frame (unwinding stopped early)." },
	[SS_TRUNCATED] = { "truncated_stacks_total", COUNTER, "Samples whose stack was cut at the frame limit." },
	[SS_MALFORMED] = { "malformed_records_total", COUNTER, "Ring buffer records too short or inconsistent to use." },
	[SS_CFI_STACKS] = { "cfi_stacks_total", COUNTER, "Samples whose user stack ember's DWARF unwinder took." },
	[SS_FP_STACKS] = { "fp_stacks_total", COUNTER, "Samples whose user stack the kernel's frame-pointer walk took." },
	[SS_PY_FRAMES] = { "python_frames_total", COUNTER, "Python frames named." },
	[SS_PY_UNNAMED] = { "python_unnamed_frames_total", COUNTER, "Python frames that could not be named." },
	[SS_OFFCPU_SAMPLES] = { "off_cpu_samples_total", COUNTER, "Off-CPU samples added to batches (-enable-off-cpu)." },
	[SS_OFFCPU_NS] = { "off_cpu_seconds_total", COUNTER, "Time off CPU those samples stand for.", NULL, NULL, true },
	[SS_BPF_SAMPLES] = { "bpf_samples_total", COUNTER, "Samples the BPF program wrote to the ring buffer." },
	[SS_BPF_IDLE] = { "bpf_idle_ticks_total", COUNTER, "Timer ticks that hit the idle task (not sampled)." },
	[SS_LOST] = { "samples_lost_total", COUNTER, "Samples lost because the ring buffer was full." },
	[SS_BPF_USTACK_ERR] = { "bpf_user_stack_errors_total", COUNTER, "User stacks the kernel's walker could not read." },
	[SS_BPF_KSTACK_ERR] = { "bpf_kernel_stack_errors_total", COUNTER, "Kernel stacks that could not be read." },
	[SS_BPF_KERNEL_FP] = { "bpf_fp_stacks_total", COUNTER, "User stacks from the kernel's frame-pointer walk." },
	[SS_BPF_CFI] = { "bpf_cfi_stacks_total", COUNTER, "User stacks from ember's unwinder." },
	[SS_BPF_CFI_FRAMES] = { "bpf_cfi_frames_total", COUNTER, "Frames ember's unwinder produced." },
	[SS_BPF_FP_FRAMES] = { "bpf_fp_fallback_frames_total", COUNTER, "Frames of ember's unwinder found by its frame-pointer fallback." },
	[SS_BPF_TAIL_CALLS] = { "bpf_tail_calls_total", COUNTER, "Tail calls of the unwinder program." },
	[SS_BPF_PY_STACKS] = { "bpf_python_stacks_total", COUNTER, "Python stacks whose frame chain was found." },
	[SS_BPF_PY_NO_THREAD] = { "bpf_python_no_thread_total", COUNTER, "Samples in the interpreter loop without a thread state or frame." },
	[SS_BPF_PY_FRAMES] = { "bpf_python_frames_total", COUNTER, "Python frames the BPF walker wrote." },
	[SS_BPF_PY_READ_ERR] = { "bpf_python_read_errors_total", COUNTER, "Python walks cut short by unreadable memory." },
	[SS_BPF_STOP_NO_MAPPING] = { "bpf_unwind_stopped_total", COUNTER, "User stacks ember's unwinder ended early, by reason.", "reason", "no_mapping" },
	[SS_BPF_STOP_READ] = { "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "read" },
	[SS_BPF_STOP_NO_PROGRESS] = { "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "no_progress" },
	[SS_BPF_STOP_TRUNCATED] = { "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "truncated" },
	[SS_BPF_STOP_NO_FP] = { "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "no_fp" },
	[SS_BPF_OFFCPU_WAITS] = { "bpf_off_cpu_waits_total", COUNTER, "Waits of user threads timed at their switch-in (off-CPU)." },
	[SS_BPF_OFFCPU_SAMPLED] = { "bpf_off_cpu_sampled_total", COUNTER, "Of those, waits picked for sampling." },
	[SS_BPF_OFFCPU_SAMPLES] = { "bpf_off_cpu_samples_total", COUNTER, "Off-CPU samples the BPF program wrote to the ring buffer." },
	[SS_OFFCPU_LOST] = { "off_cpu_samples_lost_total", COUNTER, "Off-CPU samples lost because the ring buffer was full." },
	[SS_BPF_OFFCPU_NO_SCRATCH] = { "bpf_off_cpu_no_scratch_total", COUNTER, "Picked waits not sampled: no per-thread scratch record could be had." },
	[SS_BPF_RING_WAKES] = { "bpf_ring_fill_wakeups_total", COUNTER, "Times a sample woke the agent before its next drain because the ring buffer was a quarter full." },
	[SS_BPF_RAW_STACKS] = { "bpf_raw_stacks_total", COUNTER, "Samples of processes not described to the unwinder yet, sent with their raw user stack." },
	[SS_BPF_RAW_SKIPPED] = { "bpf_raw_stacks_skipped_total", COUNTER, "Samples of processes not described to the unwinder yet, sent without their raw user stack (the ring buffer was a quarter full or full)." },
	[SS_RAW_STACKS] = { "raw_stacks_total", COUNTER, "Samples with a raw user stack received." },
	[SS_RAW_UNWOUND] = { "raw_stacks_unwound_total", COUNTER, "Raw user stacks unwound by CFI as they came." },
	[SS_RAW_UNWOUND_LATE] = { "raw_stacks_unwound_late_total", COUNTER, "Raw user stacks unwound by CFI after waiting for a table to be loaded." },
	[SS_RAW_EXPIRED] = { "raw_stacks_expired_total", COUNTER, "Raw user stacks that waited the longest time (5 s) or found the queue full, unwound with the tables there were (frame pointers where one was missing)." },
	[SS_RAW_FALLBACK] = { "raw_stacks_fallback_total", COUNTER, "Raw user stacks of processes the agent could not read (gone before their maps were read): the frame-pointer walk kept." },
	[SS_RAW_PENDING] = { "raw_stacks_pending", GAUGE, "Raw user stacks waiting for a table: at most 128 samples and 128 CUDA launch records." },
	[SS_RAW_PENDING_BYTES] = { "raw_stacks_pending_bytes", GAUGE, "Bytes held by the raw user stacks waiting (at most 128 x 20.6 KiB and 128 x 16.6 KiB)." },
	[SS_PROCESSES] = { "processes", GAUGE, "Processes in the agent's table." },
	[SS_FILES] = { "files", GAUGE, "Distinct executable files seen." },
	[SS_TABLES_QUEUED] = { "unwind_tables_queued_total", COUNTER, "Files queued for an unwind table." },
	[SS_TABLES_LOADED] = { "unwind_tables_loaded_total", COUNTER, "Unwind tables built and loaded." },
	[SS_TABLES_SHARED] = { "unwind_tables_shared_total", COUNTER, "Files that reused an identical file's table." },
	[SS_TABLES_FAILED] = { "unwind_tables_failed_total", COUNTER, "Files whose table could not be built or loaded." },
	[SS_TABLES_SKIPPED] = { "unwind_tables_skipped_total", COUNTER, "Files not queued (queue full)." },
	[SS_TABLES_PRIORITIZED] = { "unwind_tables_prioritized_total", COUNTER, "Tables moved to the front of the queue because a sample needed them." },
	[SS_TABLES_RECLAIMED] = { "unwind_tables_reclaimed_total", COUNTER, "Unwind tables given back because no process mapped their file any more." },
	[SS_TABLES_EVICTED] = { "unwind_tables_evicted_total", COUNTER, "Unwind tables of mapped files given back to make room (least recently sampled first)." },
	[SS_TABLES_RELOADED] = { "unwind_tables_reloaded_total", COUNTER, "Evicted or partial unwind tables loaded again because samples needed them." },
	[SS_TABLES_REFUSED] = { "unwind_tables_refused_total", COUNTER, "Unwind tables that found no room at all, even after evicting others." },
	[SS_TABLES_PARTIAL] = { "unwind_tables_partial_total", COUNTER, "Unwind tables too large for the room left, loaded in part (the pages samples fell in first)." },
	[SS_TABLES_RESIDENT] = { "unwind_tables", GAUGE, "Unwind tables loaded now." },
	[SS_TABLE_ROWS] = { "unwind_table_rows_total", COUNTER, "Rows of the tables built." },
	[SS_TABLE_ENTRIES_USED] = { "unwind_table_entries", GAUGE, "Entries of the shared BPF unwind array held by tables (whole pages of 1024)." },
	[SS_TABLE_ENTRIES_CAP] = { "unwind_table_entries_capacity", GAUGE, "Entries of the shared BPF unwind array." },
	[SS_TABLE_RULES] = { "unwind_rules", GAUGE, "Distinct unwind rules in the BPF map." },
	[SS_UNWIND_PROC_UPDATES] = { "unwind_process_updates_total", COUNTER, "Processes described to the unwinder." },
	[SS_UNWIND_PROC_FAILURES] = { "unwind_process_failures_total", COUNTER, "Processes that could not be described to the unwinder." },
	[SS_TABLE_BUILD_NS] = { "unwind_table_build_seconds_total", COUNTER, "CPU time the unwind thread spent building unwind tables (its own CPU clock, not wall time).", NULL, NULL, true },
	[SS_BATCHES_SENT] = { "batches_sent_total", COUNTER, "Batches the server accepted." },
	[SS_BYTES_SENT] = { "bytes_sent_total", COUNTER, "Bytes of the batches the server accepted." },
	[SS_SEND_FAILURES] = { "send_failures_total", COUNTER, "Delivery attempts that failed and will be retried." },
	[SS_BATCHES_REJECTED] = { "batches_rejected_total", COUNTER, "Batches the server refused for good." },
	[SS_BATCHES_DROPPED] = { "batches_dropped_total", COUNTER, "Batches dropped because the send queue was full." },
	[SS_BYTES_DROPPED] = { "bytes_dropped_total", COUNTER, "Memory of the batches dropped because the send queue was full." },
	[SS_RESYNCS] = { "resyncs_total", COUNTER, "409 answers: the server lost the session." },
	[SS_SESSIONS] = { "sessions_total", COUNTER, "Protocol sessions started." },
	[SS_QUEUED_BATCHES] = { "queued_batches", GAUGE, "Batches waiting to be sent." },
	[SS_QUEUED_BYTES] = { "queued_bytes", GAUGE, "Memory of the batches waiting to be sent." },
	[SS_SESSION_BYTES] = { "session_dictionary_bytes", GAUGE, "Size of the current session's dictionary." },
	[SS_ENCODE_NS] = { "encode_seconds_total", COUNTER, "CPU time spent encoding batches.", NULL, NULL, true },
	[SS_SYM_QUEUED] = { "symbol_files_queued_total", COUNTER, "Files queued for the symbol uploader." },
	[SS_SYM_CHECKED] = { "symbol_files_checked_total", COUNTER, "Files the server was asked about." },
	[SS_SYM_UPLOADED] = { "symbol_files_uploaded_total", COUNTER, "Symbol files uploaded." },
	[SS_SYM_PRESENT] = { "symbol_files_present_total", COUNTER, "Files whose symbols the server already had." },
	[SS_SYM_FAILED] = { "symbol_files_failed_total", COUNTER, "Symbol uploads that failed." },
	[SS_SYM_SKIPPED] = { "symbol_files_skipped_total", COUNTER, "Files skipped (queue full, no symbols, too large)." },
	[SS_SYM_UPLOADED_BYTES] = { "symbol_bytes_uploaded_total", COUNTER, "Bytes of the symbol files uploaded." },
	[SS_PY_SYMBOLIZED] = { "python_symbolized_total", COUNTER, "Python code objects named." },
	[SS_PY_CACHE_HITS] = { "python_cache_hits_total", COUNTER, "Python frames named from the cache." },
	[SS_PY_REVALIDATED] = { "python_revalidated_total", COUNTER, "Cached Python code objects checked again." },
	[SS_PY_READ_ERRORS] = { "python_read_errors_total", COUNTER, "Python code objects that could not be read." },
	[SS_PY_STALE] = { "python_stale_frames_total", COUNTER, "Python frames whose code object was freed before the agent read it." },
	[SS_PY_PROCESSES] = { "python_processes", GAUGE, "CPython processes being walked." },
	[SS_KUBELET_FETCHES] = { "kubelet_fetches_total", COUNTER, "Pod lists read from the kubelet (-k8s-pod-labels)." },
	[SS_KUBELET_ERRORS] = { "kubelet_fetch_errors_total", COUNTER, "Pod list requests that failed." },
	[SS_KUBELET_PODS] = { "kubelet_pods", GAUGE, "Pods in the last pod list." },
	[SS_MET_COLLECTIONS] = { "metrics_collections_total", COUNTER, "Host and GPU metrics collections (-collect-metrics-interval)." },
	[SS_MET_POINTS] = { "metrics_points_total", COUNTER, "Metric points collected." },
	[SS_MET_BATCHES_SENT] = { "metrics_batches_sent_total", COUNTER, "Metrics batches the server stored." },
	[SS_MET_BYTES_SENT] = { "metrics_bytes_sent_total", COUNTER, "Bytes of the metrics batches sent (compressed)." },
	[SS_MET_SEND_FAILURES] = { "metrics_send_failures_total", COUNTER, "Metrics sends that failed and will be retried." },
	[SS_MET_BATCHES_REJECTED] = { "metrics_batches_rejected_total", COUNTER, "Metrics batches the server refused (4xx): dropped." },
	[SS_MET_BATCHES_DROPPED] = { "metrics_batches_dropped_total", COUNTER, "Metrics batches dropped, oldest first, while the queue was full." },
	[SS_MET_COLLECT_NS] = { "metrics_last_collect_ns", GAUGE, "What the last metrics collection cost, in nanoseconds." },
	[SS_MET_PROCESSES_DROPPED] = { "metrics_processes_dropped", GAUGE, "Processes left out of the last collection (beyond the per-interval bound)." },
	[SS_CUDA_CONNECTIONS] = { "cuda_connections_total", COUNTER, "Connections of libembercuda.so accepted on the agent's socket (-cuda-profiler-dir)." },
	[SS_CUDA_CONNS_REFUSED] = { "cuda_connections_refused_total", COUNTER, "Connections refused: too many open, or no peer process." },
	[SS_CUDA_CONNS_OPEN] = { "cuda_connections", GAUGE, "Connections of libembercuda.so open now." },
	[SS_CUDA_PROCESSES] = { "cuda_processes_injected_total", COUNTER, "CUDA processes whose libembercuda.so said hello." },
	[SS_CUDA_MESSAGES] = { "cuda_messages_total", COUNTER, "Messages from libembercuda.so accepted." },
	[SS_CUDA_REJ_SHORT] = { "cuda_messages_rejected_total", COUNTER, "Messages from libembercuda.so refused, by reason.", "reason", "short" },
	[SS_CUDA_REJ_OVERSIZE] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "oversize" },
	[SS_CUDA_REJ_MAGIC] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "magic" },
	[SS_CUDA_REJ_VERSION] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "version" },
	[SS_CUDA_REJ_TYPE] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "type" },
	[SS_CUDA_REJ_LENGTH] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "length" },
	[SS_CUDA_REJ_COUNT] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "count" },
	[SS_CUDA_REJ_KIND] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "kind" },
	[SS_CUDA_REJ_STRING] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "string" },
	[SS_CUDA_REJ_RESERVED] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "reserved" },
	[SS_CUDA_REJ_VALUE] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "value" },
	[SS_CUDA_REJ_ORDER] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "order" },
	[SS_CUDA_REJ_RATE] = { "cuda_messages_rejected_total", COUNTER, NULL, "reason", "rate" },
	[SS_CUDA_PROBED_FILES] = { "cuda_probed_libraries", GAUGE, "Copies of libembercuda.so with the launch-marker uprobe attached." },
	[SS_CUDA_MARKER_HITS] = { "bpf_cuda_marker_hits_total", COUNTER, "Calls of ember_cuda_launch_marker the uprobe saw." },
	[SS_CUDA_STACKS] = { "cuda_launch_stacks_total", COUNTER, "Launch stacks recorded by the uprobe and kept for the join." },
	[SS_CUDA_STACKS_LOST] = { "cuda_launch_stacks_lost_total", COUNTER, "Launch stacks lost because the ring buffer was full." },
	[SS_CUDA_STACKS_EVICTED] = { "cuda_launch_stacks_evicted_total", COUNTER, "Launch stacks dropped, oldest first, to keep the table bounded." },
	[SS_CUDA_RAW_STACKS] = { "cuda_raw_launch_stacks_total", COUNTER, "Launch records of processes not described to the unwinder yet (or young ones whose walk broke), received with their raw user stack." },
	[SS_CUDA_RAW_UNWOUND] = { "cuda_raw_launch_stacks_unwound_total", COUNTER, "Raw launch stacks unwound by CFI as they came." },
	[SS_CUDA_RAW_UNWOUND_LATE] = { "cuda_raw_launch_stacks_unwound_late_total", COUNTER, "Raw launch stacks unwound by CFI after waiting for a table to be loaded." },
	[SS_CUDA_RAW_EXPIRED] = { "cuda_raw_launch_stacks_expired_total", COUNTER, "Raw launch stacks that waited the longest time (5 s) or found their queue full (128), unwound with the tables there were (frame pointers where one was missing)." },
	[SS_CUDA_RAW_FALLBACK] = { "cuda_raw_launch_stacks_fallback_total", COUNTER, "Raw launch stacks of processes the agent could not read: the frame-pointer walk kept." },
	[SS_CUDA_RAW_PENDING] = { "cuda_raw_launch_stacks_pending", GAUGE, "Raw launch stacks waiting for a table (at most 128); their GPU time waits with them (at most 8 s)." },
	[SS_CUDA_ENTRIES] = { "cuda_entries_total", COUNTER, "Aggregates of GPU time received (one per stack, thread, kernel, device, stream)." },
	[SS_CUDA_JOINED] = { "cuda_entries_joined_total", COUNTER, "Of those, emitted under the CPU stack of their launch." },
	[SS_CUDA_NOT_SAMPLED] = { "cuda_entries_not_sampled_total", COUNTER, "Of those, emitted under [launch not sampled]: the library had no sampled launch for them (stack id 0)." },
	[SS_CUDA_UNKNOWN_STACK] = { "cuda_entries_unknown_stack_total", COUNTER, "Of those, emitted under [launch not sampled]: no launch stack arrived within the hold time." },
	[SS_CUDA_PENDING_OVERFLOW] = { "cuda_entries_pending_overflow_total", COUNTER, "Of those, emitted under [launch not sampled] at once: too many entries were waiting for their stacks." },
	[SS_CUDA_PENDING] = { "cuda_entries_pending", GAUGE, "Entries waiting for their launch stack now." },
	[SS_CUDA_GPU_NS] = { "cuda_gpu_seconds_total", COUNTER, "GPU time emitted as cuda samples.", NULL, NULL, true },
	[SS_CUDA_NOT_SAMPLED_NS] = { "cuda_not_sampled_seconds_total", COUNTER, "Of that, GPU time emitted under [launch not sampled].", NULL, NULL, true },
	[SS_CUDA_LIB_LAUNCHES] = { "cuda_library_launches_total", COUNTER, "Launches the libraries saw (each connection's latest STATS, summed)." },
	[SS_CUDA_LIB_SAMPLED] = { "cuda_library_launches_sampled_total", COUNTER, "Of those, launches the marker was called for." },
	[SS_CUDA_LIB_RECORDS_DROPPED] = { "cuda_library_records_dropped_total", COUNTER, "Activity records CUPTI dropped in the libraries." },
	[SS_CUDA_LIB_MESSAGES_DROPPED] = { "cuda_library_messages_dropped_total", COUNTER, "Messages the libraries could not send (the agent was busy)." },
	[SS_CUDA_LIB_PC_SAMPLES] = { "cuda_library_pc_samples_total", COUNTER, "PC samples the libraries received from CUPTI (EMBER_CUDA_ENABLE_PC_SAMPLING)." },
	[SS_CUDA_LIB_PC_REFUSED] = { "cuda_library_pc_sampling_refused", GAUGE, "Processes whose CUPTI refused PC sampling for want of privileges (NVreg_RestrictProfilingToAdminUsers)." },
	[SS_CUDA_PC_ENTRIES] = { "cuda_pc_entries_total", COUNTER, "Parts of kernels' GPU time attributed to an instruction and stall reason by PC sampling." },
	[SS_SAMPLING] = { "sampling", GAUGE, "1 while sampling, 0 while probabilistic profiling has it off." },
	[SS_OFFCPU_SAMPLING] = { "off_cpu_sampling", GAUGE, "1 while off-CPU sampling is attached, 0 otherwise." },
	[SS_START_TIME] = { "start_time_seconds", GAUGE, "When the agent started, Unix seconds." },
	/* memory: where the agent's resident memory goes (docs/internals/agent.md) */
	[SS_MEM_RSS] = { "resident_bytes", GAUGE, "The agent's resident memory now (VmRSS)." },
	[SS_MEM_RSS_PEAK] = { "resident_peak_bytes", GAUGE, "The agent's peak resident memory since it started (VmHWM); bounded by design to 100 MB." },
	[SS_MEM_UNWIND_BUILD] = { "memory_unwind_build_bytes", GAUGE, "Memory of the unwind tables being built (rows and FDE list, before they go to BPF)." },
	[SS_MEM_SYMBOLS] = { "memory_symbols_bytes", GAUGE, "Memory of the symbol files being extracted (names, ranges, compressed output)." },
	[SS_MEM_BUDGET_RESERVED] = { "memory_budget_reserved_bytes", GAUGE, "Bytes of the transient-job memory budget reserved now by table builds and symbol extraction of large files." },
	[SS_MEM_BUDGET_WAITS] = { "memory_budget_waits_total", COUNTER, "Times a table build or symbol extraction waited for the memory budget." },
	[SS_MEM_PROCESSES] = { "memory_processes_bytes", GAUGE, "Memory of the per-process state (the process table and each process's mappings)." },
	[SS_MEM_FILES] = { "memory_files_bytes", GAUGE, "Memory of the file registry." },
	[SS_MEM_SAMPLE_CACHE] = { "memory_sample_cache_bytes", GAUGE, "Memory of the cache of raw samples already in the batch." },
	[SS_MEM_PYTHON] = { "memory_python_bytes", GAUGE, "Memory of the Python processes' state and cached code objects." },
	[SS_MEM_KERNEL_SYMBOLS] = { "memory_kernel_symbols_bytes", GAUGE, "Memory of the kernel's symbols (/proc/kallsyms)." },
};

const char *selfstats_name(enum selfstat i)
{
	return (unsigned)i < SS_COUNT ? metrics[i].name : NULL;
}

static void put_value(struct buf *out, const struct metric *m, uint64_t v)
{
	if (m->seconds)
		buf_printf(out, "%llu.%09llu", (unsigned long long)(v / 1000000000ull),
			   (unsigned long long)(v % 1000000000ull));
	else
		buf_printf(out, "%llu", (unsigned long long)v);
}

void selfstats_prometheus(const struct selfstats_values *s, struct buf *out)
{
	for (size_t i = 0; i < SS_COUNT; i++) {
		const struct metric *m = &metrics[i];
		if (i == 0 || strcmp(metrics[i - 1].name, m->name) != 0)
			buf_printf(out, "# HELP " PREFIX "%s %s\n# TYPE " PREFIX "%s %s\n", m->name,
				   m->help, m->name, m->kind == COUNTER ? "counter" : "gauge");
		buf_printf(out, PREFIX "%s", m->name);
		if (m->label)
			buf_printf(out, "{%s=\"%s\"}", m->label, m->lvalue);
		buf_putc(out, ' ');
		put_value(out, m, s->v[i]);
		buf_putc(out, '\n');
	}
}

void selfstats_json(const struct selfstats_values *s, struct buf *out)
{
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	jsonw_kv_i64(&w, "time_unix_ms", s->time_unix_ms);
	struct buf num = { 0 };
	for (size_t i = 0; i < SS_COUNT; i++) {
		const struct metric *m = &metrics[i];
		bool first = i == 0 || strcmp(metrics[i - 1].name, m->name) != 0;
		bool last = i + 1 == SS_COUNT || strcmp(metrics[i + 1].name, m->name) != 0;
		if (first) {
			jsonw_key(&w, m->name);
			if (m->label)
				jsonw_begin_object(&w);
		}
		if (m->label)
			jsonw_key(&w, m->lvalue);
		/* The number as the text format writes it (seconds to the ns). */
		buf_reset(&num);
		put_value(&num, m, s->v[i]);
		jsonw_raw(&w, num.data, num.len);
		if (last && m->label)
			jsonw_end_object(&w);
	}
	buf_free(&num);
	jsonw_end_object(&w);
	(void)jsonw_finish(&w); /* the table's shape is fixed: a misuse fails the unit test */
	buf_putc(out, '\n');
}

int selfstats_split_addr(const char *addr, char *host, size_t hostcap, uint16_t *port)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || hostcap == 0)
		return -1;
	const char *h = addr;
	size_t hl = (size_t)(colon - addr);
	if (hl && addr[0] == '[') {
		if (hl < 3 || addr[hl - 1] != ']')
			return -1;
		h++;
		hl -= 2;
	} else if (memchr(addr, ':', hl)) {
		return -1; /* an IPv6 address needs brackets */
	}
	if (hl >= hostcap)
		return -1;
	for (size_t i = 0; i < hl; i++) {
		char c = h[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':' || c == '%' || c == '_'))
			return -1;
	}
	uint64_t p;
	if (parse_u64(colon + 1, &p) < 0 || p == 0 || p > 65535)
		return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* --- the server ------------------------------------------------------------------ */

struct selfstats_server {
	struct MHD_Daemon *d;
	/* The latest published values: written by the main loop, read by
	 * the server's thread, both under mu. */
	pthread_mutex_t mu;
	struct selfstats_values latest;
};

/* Writes {"error": msg} and a newline to body. */
static void json_error(struct buf *body, const char *msg)
{
	struct jsonw w;
	jsonw_init(&w, body);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "error", msg);
	jsonw_end_object(&w);
	(void)jsonw_finish(&w); /* one flat object: no misuse is possible */
	buf_putc(body, '\n');
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     struct buf *body, const char *allow)
{
	size_t len = body->len;
	char *data = buf_steal(body, NULL);
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, data ? data : xstrdup(""), MHD_RESPMEM_MUST_FREE);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	if (allow)
		MHD_add_response_header(r, "Allow", allow);
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)con_cls;
	struct selfstats_server *srv = cls;
	struct buf body = { 0 };
	bool metrics_path = strcmp(url, "/metrics") == 0;
	bool stats_path = strcmp(url, "/debug/stats") == 0;
	if (!metrics_path && !stats_path) {
		struct buf msg = { 0 };
		buf_printf(&msg, "no such endpoint: %.200s; the agent serves GET /metrics and GET /debug/stats",
			   url);
		json_error(&body, msg.data);
		buf_free(&msg);
		return reply(c, MHD_HTTP_NOT_FOUND, "application/json", &body, NULL);
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		struct buf msg = { 0 };
		buf_printf(&msg, "method %.32s not allowed on %s; use GET", method, url);
		json_error(&body, msg.data);
		buf_free(&msg);
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json", &body, "GET, HEAD");
	}
	struct selfstats_values v;
	pthread_mutex_lock(&srv->mu);
	v = srv->latest;
	pthread_mutex_unlock(&srv->mu);
	if (metrics_path) {
		selfstats_prometheus(&v, &body);
		return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &body, NULL);
	}
	selfstats_json(&v, &body);
	return reply(c, MHD_HTTP_OK, "application/json", &body, NULL);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	struct buf b = { 0 };
	buf_vprintf(&b, fmt, ap);
	while (b.len && b.data[b.len - 1] == '\n')
		b.data[--b.len] = '\0';
	log_debug("-pprof server: %s", b.data);
	buf_free(&b);
}

struct selfstats_server *selfstats_start(const char *addr, struct buf *err)
{
	char host[256], port[8];
	uint16_t p;
	if (selfstats_split_addr(addr, host, sizeof(host), &p) < 0) {
		buf_printf(err, "-pprof: expected host:port, e.g. 127.0.0.1:6060, got \"%s\"", addr);
		return NULL;
	}
	snprintf(port, sizeof(port), "%u", p);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	int gai = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
	if (gai != 0) {
		buf_printf(err, "-pprof: cannot resolve \"%s\": %s", addr, gai_strerror(gai));
		return NULL;
	}
	/* A name such as localhost: its IPv4 address first, as Go's
	 * listeners do; every address (":6060"): IPv6 accepting IPv4 too,
	 * when the host has IPv6. A family the host lacks is skipped; any
	 * other failure (a port in use) is the answer. */
	int want = *host ? AF_INET : AF_INET6;
	int fd = -1, saved = EAFNOSUPPORT;
	for (int pass = 0; pass < 2 && fd < 0; pass++) {
		for (struct addrinfo *r = ai; r && fd < 0; r = r->ai_next) {
			if ((r->ai_family == want) != (pass == 0))
				continue;
			fd = socket(r->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				saved = errno;
				continue;
			}
			int one = 1, zero = 0;
			if (r->ai_family == AF_INET6 && !*host)
				(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
			if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
			    bind(fd, r->ai_addr, r->ai_addrlen) != 0 || listen(fd, 16) != 0) {
				saved = errno;
				close(fd);
				fd = -1;
				pass = 2; /* not another address: this one's error is the answer */
				break;
			}
		}
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		buf_printf(err, "-pprof: cannot listen on %s: %s", addr, strerror(saved));
		return NULL;
	}
	struct selfstats_server *srv = xcalloc(1, sizeof(*srv));
	pthread_mutex_init(&srv->mu, NULL);
	srv->latest.time_unix_ms = now_unix_ms();
	srv->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
				  on_request, srv,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				  MHD_OPTION_LISTEN_SOCKET, fd,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
				  MHD_OPTION_END);
	if (!srv->d) {
		buf_printf(err, "-pprof: cannot start the HTTP server on %s", addr);
		close(fd);
		pthread_mutex_destroy(&srv->mu);
		free(srv);
		return NULL;
	}
	return srv;
}

void selfstats_publish(struct selfstats_server *srv, const struct selfstats_values *s)
{
	if (!srv)
		return;
	pthread_mutex_lock(&srv->mu);
	srv->latest = *s;
	pthread_mutex_unlock(&srv->mu);
}

void selfstats_stop(struct selfstats_server *srv)
{
	if (!srv)
		return;
	MHD_stop_daemon(srv->d); /* closes the listening socket */
	pthread_mutex_destroy(&srv->mu);
	free(srv);
}
