/* counters.h - the agent's own counters, one row each: the single list
 * from which the agent generates the enum of its counters (enum selfstat,
 * selfstats.h), their metric names, types and help (the -pprof server's
 * /metrics and /debug/stats, selfstats.c), the collector's counters
 * (struct collector_stats, collect.h) and the copies of the collector's,
 * the BPF programs' and the agent's threads' counters into the published
 * values (main.c's take_stats).
 * The once-a-minute stats: line (main.c) is generated from
 * AGENT_STATS_LINE below.
 *
 * AGENT_COUNTERS(X, O, C, B, L) calls, in the order the metrics are
 * published (rows of one labelled family consecutive):
 *   X(ID, name, kind, help)           a value main.c's take_stats computes
 *                                     on its own (a gauge, a table's size)
 *   O(ID, owner, field, name, kind, help)  a field of an agent thread's
 *                                     statistics: struct owner_stats as
 *                                     owner_get_stats() fills it (unwind.h,
 *                                     reporter.h, symupload.h, python.h,
 *                                     kubelet.h, metricsender.h, cuda.h)
 *   C(ID, field, name, kind, help)    the collector's: struct collector_stats
 *                                     has field, copied as it is
 *   B(ID, STAT, name, kind, help)     the BPF programs': bpf[ONCPU_STAT_STAT]
 *                                     (oncpu_types.h), summed over the CPUs
 *   L(ID, name, kind, help, label, value)  one row of a labelled family
 *                                     (help on its first row, NULL after)
 * ID names enum selfstat's SS_ID; name is the metric's name without the
 * ember_agent_ prefix (a contract: dashboards and tests use them); kind is
 * COUNTER, GAUGE, or SECONDS (a counter of nanoseconds, shown as seconds).
 * A caller that uses only some kinds of row passes COUNTERS_NONE for the
 * others.
 */
#ifndef EMBER_AGENT_COUNTERS_H
#define EMBER_AGENT_COUNTERS_H

#define COUNTERS_NONE(...)

#define AGENT_COUNTERS(X, O, C, B, L) \
	/* samples (collect.h) */ \
	C(SAMPLES, samples, "samples_total", COUNTER, "On-CPU samples added to batches (what the server stores once they are sent).") \
	C(FRAMES, frames, "frames_total", COUNTER, "User and kernel frames of those samples.") \
	C(ERROR_STACKS, unknown_frames, "error_stacks_total", COUNTER, "Samples whose stack ends in an error frame (unwinding stopped early).") \
	C(TRUNCATED, truncated, "truncated_stacks_total", COUNTER, "Samples whose stack was cut at the frame limit.") \
	C(MALFORMED, malformed, "malformed_records_total", COUNTER, "Ring buffer records too short or inconsistent to use.") \
	C(CFI_STACKS, cfi_stacks, "cfi_stacks_total", COUNTER, "Samples whose user stack ember's DWARF unwinder took.") \
	C(FP_STACKS, fp_stacks, "fp_stacks_total", COUNTER, "Samples whose user stack the kernel's frame-pointer walk took.") \
	C(PY_FRAMES, python_frames, "python_frames_total", COUNTER, "Python frames named.") \
	C(PY_UNNAMED, python_unknown, "python_unnamed_frames_total", COUNTER, "Python frames that could not be named.") \
	C(OFFCPU_SAMPLES, offcpu_samples, "off_cpu_samples_total", COUNTER, "Off-CPU samples added to batches (-enable-off-cpu).") \
	C(OFFCPU_NS, offcpu_ns, "off_cpu_seconds_total", SECONDS, "Time off CPU those samples stand for.") \
	/* the BPF program's per-CPU counters (oncpu_types.h) */ \
	B(BPF_SAMPLES, SAMPLES, "bpf_samples_total", COUNTER, "Samples the BPF program wrote to the ring buffer.") \
	B(BPF_IDLE, IDLE, "bpf_idle_ticks_total", COUNTER, "Timer ticks that hit the idle task (not sampled).") \
	B(LOST, RB_FULL, "samples_lost_total", COUNTER, "Samples lost because the ring buffer was full.") \
	B(BPF_USTACK_ERR, USTACK_ERR, "bpf_user_stack_errors_total", COUNTER, "User stacks the kernel's walker could not read.") \
	B(BPF_KSTACK_ERR, KSTACK_ERR, "bpf_kernel_stack_errors_total", COUNTER, "Kernel stacks that could not be read.") \
	B(BPF_KERNEL_FP, KERNEL_FP, "bpf_fp_stacks_total", COUNTER, "User stacks from the kernel's frame-pointer walk.") \
	B(BPF_CFI, CFI, "bpf_cfi_stacks_total", COUNTER, "User stacks from ember's unwinder.") \
	B(BPF_CFI_FRAMES, CFI_FRAMES, "bpf_cfi_frames_total", COUNTER, "Frames ember's unwinder produced.") \
	B(BPF_FP_FRAMES, FP_FRAMES, "bpf_fp_fallback_frames_total", COUNTER, "Frames of ember's unwinder found by its frame-pointer fallback.") \
	B(BPF_TAIL_CALLS, TAIL_CALLS, "bpf_tail_calls_total", COUNTER, "Tail calls of the unwinder program.") \
	B(BPF_PY_STACKS, PY_STACKS, "bpf_python_stacks_total", COUNTER, "Python stacks whose frame chain was found.") \
	B(BPF_PY_NO_THREAD, PY_NO_THREAD, "bpf_python_no_thread_total", COUNTER, "Samples in the interpreter loop without a thread state or frame.") \
	B(BPF_PY_FRAMES, PY_FRAMES, "bpf_python_frames_total", COUNTER, "Python frames the BPF walker wrote.") \
	B(BPF_PY_READ_ERR, PY_READ_ERR, "bpf_python_read_errors_total", COUNTER, "Python walks cut short by unreadable memory.") \
	B(BPF_PY_BY_EXE, PY_BY_EXE, "bpf_python_stacks_by_executable_total", COUNTER, "Raw stacks of processes not described yet whose Python frames were read through their interpreter executable.") \
	/* stacks ended, per enum unwind_error */ \
	L(BPF_STOP_NO_MAPPING, "bpf_unwind_stopped_total", COUNTER, "User stacks ember's unwinder ended early, by reason.", "reason", "no_mapping") \
	L(BPF_STOP_READ, "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "read") \
	L(BPF_STOP_NO_PROGRESS, "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "no_progress") \
	L(BPF_STOP_TRUNCATED, "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "truncated") \
	L(BPF_STOP_NO_FP, "bpf_unwind_stopped_total", COUNTER, NULL, "reason", "no_fp") \
	B(BPF_OFFCPU_WAITS, OFFCPU_WAITS, "bpf_off_cpu_waits_total", COUNTER, "Waits of user threads timed at their switch-in (off-CPU).") \
	B(BPF_OFFCPU_SAMPLED, OFFCPU_SAMPLED, "bpf_off_cpu_sampled_total", COUNTER, "Of those, waits picked for sampling.") \
	B(BPF_OFFCPU_SAMPLES, OFFCPU_SAMPLES, "bpf_off_cpu_samples_total", COUNTER, "Off-CPU samples the BPF program wrote to the ring buffer.") \
	B(OFFCPU_LOST, OFFCPU_RB_FULL, "off_cpu_samples_lost_total", COUNTER, "Off-CPU samples lost because the ring buffer was full.") \
	B(BPF_OFFCPU_NO_SCRATCH, OFFCPU_NO_SCRATCH, "bpf_off_cpu_no_scratch_total", COUNTER, "Picked waits not sampled: no per-thread scratch record could be had.") \
	B(BPF_RING_WAKES, RING_WAKES, "bpf_ring_fill_wakeups_total", COUNTER, "Times a sample woke the agent before its next drain because the ring buffer was a quarter full.") \
	B(BPF_RAW_STACKS, RAW_STACKS, "bpf_raw_stacks_total", COUNTER, "Samples of processes not described to the unwinder yet, sent with their raw user stack.") \
	B(BPF_RAW_SKIPPED, RAW_SKIPPED, "bpf_raw_stacks_skipped_total", COUNTER, "Samples of processes not described to the unwinder yet, sent without their raw user stack (the ring buffer was a quarter full or full).") \
	/* raw stacks of new processes (collect.h, rawstack.h) */ \
	C(RAW_STACKS, raw_stacks, "raw_stacks_total", COUNTER, "Samples with a raw user stack received.") \
	C(RAW_UNWOUND, raw_unwound, "raw_stacks_unwound_total", COUNTER, "Raw user stacks unwound by CFI as they came.") \
	C(RAW_UNWOUND_LATE, raw_unwound_late, "raw_stacks_unwound_late_total", COUNTER, "Raw user stacks unwound by CFI after waiting for a table to be loaded.") \
	C(RAW_EXPIRED, raw_expired, "raw_stacks_expired_total", COUNTER, "Raw user stacks that waited the longest time (5 s) or found the queue full, unwound with the tables there were (frame pointers where one was missing).") \
	C(RAW_FALLBACK, raw_fallback, "raw_stacks_fallback_total", COUNTER, "Raw user stacks of processes the agent could not read (gone before their maps were read): the frame-pointer walk kept.") \
	X(RAW_PENDING, "raw_stacks_pending", GAUGE, "Raw user stacks waiting for a table (samples in at most 8 MiB, CUDA launch records in at most 2 MiB; each at most 5 s).") \
	X(RAW_PENDING_BYTES, "raw_stacks_pending_bytes", GAUGE, "Bytes held by the raw user stacks waiting (at most 8 MiB of samples and 2 MiB of CUDA launch records).") \
	/* processes and files (proc.h, files.h) */ \
	X(PROCESSES, "processes", GAUGE, "Processes in the agent's table.") \
	X(FILES, "files", GAUGE, "Distinct executable files seen.") \
	X(PY_INTERPRETERS, "python_interpreters", GAUGE, "CPython interpreter files read (a process of one has its Python frames before the agent reads the process).") \
	/* unwind tables (unwind.h) */ \
	O(TABLES_QUEUED, unwind, files_queued, "unwind_tables_queued_total", COUNTER, "Files queued for an unwind table.") \
	O(TABLES_LOADED, unwind, files_loaded, "unwind_tables_loaded_total", COUNTER, "Unwind tables built and loaded.") \
	O(TABLES_SHARED, unwind, files_shared, "unwind_tables_shared_total", COUNTER, "Files that reused an identical file's table.") \
	O(TABLES_FAILED, unwind, files_failed, "unwind_tables_failed_total", COUNTER, "Files whose table could not be built or loaded.") \
	O(TABLES_SKIPPED, unwind, files_skipped, "unwind_tables_skipped_total", COUNTER, "Files not queued (queue full).") \
	O(TABLES_PRIORITIZED, unwind, files_prioritized, "unwind_tables_prioritized_total", COUNTER, "Tables moved to the front of the queue because a sample needed them.") \
	O(TABLES_RECLAIMED, unwind, files_reclaimed, "unwind_tables_reclaimed_total", COUNTER, "Unwind tables given back because no process mapped their file any more.") \
	O(TABLES_EVICTED, unwind, files_evicted, "unwind_tables_evicted_total", COUNTER, "Unwind tables of mapped files given back to make room (least recently sampled first).") \
	O(TABLES_RELOADED, unwind, files_reloaded, "unwind_tables_reloaded_total", COUNTER, "Evicted or partial unwind tables loaded again because samples needed them.") \
	O(TABLES_REFUSED, unwind, files_refused, "unwind_tables_refused_total", COUNTER, "Unwind tables that found no room at all, even after evicting others.") \
	O(TABLES_PARTIAL, unwind, files_partial, "unwind_tables_partial_total", COUNTER, "Unwind tables too large for the room left, loaded in part (the pages samples fell in first).") \
	O(TABLES_RESIDENT, unwind, tables, "unwind_tables", GAUGE, "Unwind tables loaded now.") \
	O(TABLE_ROWS, unwind, rows, "unwind_table_rows_total", COUNTER, "Rows of the tables built.") \
	O(TABLE_ENTRIES_USED, unwind, entries_used, "unwind_table_entries", GAUGE, "Entries of the shared BPF unwind array held by tables (whole pages of 1024).") \
	O(TABLE_ENTRIES_CAP, unwind, entries_cap, "unwind_table_entries_capacity", GAUGE, "Entries of the shared BPF unwind array.") \
	O(TABLE_RULES, unwind, rules, "unwind_rules", GAUGE, "Distinct unwind rules in the BPF map.") \
	O(UNWIND_PROC_UPDATES, unwind, proc_updates, "unwind_process_updates_total", COUNTER, "Processes described to the unwinder.") \
	O(UNWIND_PROC_FAILURES, unwind, proc_failures, "unwind_process_failures_total", COUNTER, "Processes that could not be described to the unwinder.") \
	O(TABLE_BUILD_NS, unwind, build_ns, "unwind_table_build_seconds_total", SECONDS, "CPU time the unwind thread spent building unwind tables (its own CPU clock, not wall time).") \
	/* delivery (reporter.h) */ \
	O(BATCHES_SENT, reporter, sent_batches, "batches_sent_total", COUNTER, "Batches the server accepted.") \
	O(BYTES_SENT, reporter, sent_bytes, "bytes_sent_total", COUNTER, "Bytes of the batches the server accepted.") \
	O(SEND_FAILURES, reporter, failed_attempts, "send_failures_total", COUNTER, "Delivery attempts that failed and will be retried.") \
	O(BATCHES_REJECTED, reporter, rejected_batches, "batches_rejected_total", COUNTER, "Batches the server refused for good.") \
	O(BATCHES_DROPPED, reporter, dropped_batches, "batches_dropped_total", COUNTER, "Batches dropped because the send queue was full.") \
	O(BYTES_DROPPED, reporter, dropped_bytes, "bytes_dropped_total", COUNTER, "Memory of the batches dropped because the send queue was full.") \
	O(RESYNCS, reporter, resyncs, "resyncs_total", COUNTER, "409 answers: the server lost the session.") \
	O(SESSIONS, reporter, sessions, "sessions_total", COUNTER, "Protocol sessions started.") \
	O(QUEUED_BATCHES, reporter, queued_batches, "queued_batches", GAUGE, "Batches waiting to be sent.") \
	O(QUEUED_BYTES, reporter, queued_bytes, "queued_bytes", GAUGE, "Memory of the batches waiting to be sent.") \
	O(SESSION_BYTES, reporter, session_bytes, "session_dictionary_bytes", GAUGE, "Size of the current session's dictionary.") \
	O(ENCODE_NS, reporter, encode_ns, "encode_seconds_total", SECONDS, "CPU time spent encoding batches.") \
	/* symbol upload (symupload.h) */ \
	O(SYM_QUEUED, symupload, queued, "symbol_files_queued_total", COUNTER, "Files queued for the symbol uploader.") \
	O(SYM_CHECKED, symupload, checked, "symbol_files_checked_total", COUNTER, "Files the server was asked about.") \
	O(SYM_UPLOADED, symupload, uploaded, "symbol_files_uploaded_total", COUNTER, "Symbol files uploaded.") \
	O(SYM_PRESENT, symupload, present, "symbol_files_present_total", COUNTER, "Files whose symbols the server already had.") \
	O(SYM_FAILED, symupload, failed, "symbol_files_failed_total", COUNTER, "Symbol uploads that failed.") \
	O(SYM_SKIPPED, symupload, skipped, "symbol_files_skipped_total", COUNTER, "Files skipped (queue full, no symbols, too large).") \
	O(SYM_UPLOADED_BYTES, symupload, uploaded_bytes, "symbol_bytes_uploaded_total", COUNTER, "Bytes of the symbol files uploaded.") \
	/* the Python symbolizer (python.h) */ \
	O(PY_SYMBOLIZED, python, symbolized, "python_symbolized_total", COUNTER, "Python code objects named.") \
	O(PY_CACHE_HITS, python, cache_hits, "python_cache_hits_total", COUNTER, "Python frames named from the cache.") \
	O(PY_REVALIDATED, python, revalidated, "python_revalidated_total", COUNTER, "Cached Python code objects checked again.") \
	O(PY_READ_ERRORS, python, read_errors, "python_read_errors_total", COUNTER, "Python code objects that could not be read.") \
	O(PY_STALE, python, stale, "python_stale_frames_total", COUNTER, "Python frames whose code object was freed before the agent read it.") \
	O(PY_PROCESSES, python, processes, "python_processes", GAUGE, "CPython processes being walked.") \
	/* the kubelet's pod list (kubelet.h) */ \
	O(KUBELET_FETCHES, kubelet, fetches, "kubelet_fetches_total", COUNTER, "Pod lists read from the kubelet (-k8s-pod-labels).") \
	O(KUBELET_ERRORS, kubelet, errors, "kubelet_fetch_errors_total", COUNTER, "Pod list requests that failed.") \
	O(KUBELET_PODS, kubelet, pods, "kubelet_pods", GAUGE, "Pods in the last pod list.") \
	/* host and GPU metrics (metricsender.h) */ \
	O(MET_COLLECTIONS, metricsender, collections, "metrics_collections_total", COUNTER, "Host and GPU metrics collections (-collect-metrics-interval).") \
	O(MET_POINTS, metricsender, points, "metrics_points_total", COUNTER, "Metric points collected.") \
	O(MET_BATCHES_SENT, metricsender, batches_sent, "metrics_batches_sent_total", COUNTER, "Metrics batches the server stored.") \
	O(MET_BYTES_SENT, metricsender, bytes_sent, "metrics_bytes_sent_total", COUNTER, "Bytes of the metrics batches sent (compressed).") \
	O(MET_SEND_FAILURES, metricsender, send_failures, "metrics_send_failures_total", COUNTER, "Metrics sends that failed and will be retried.") \
	O(MET_BATCHES_REJECTED, metricsender, rejected_batches, "metrics_batches_rejected_total", COUNTER, "Metrics batches the server refused (4xx): dropped.") \
	O(MET_BATCHES_DROPPED, metricsender, dropped_batches, "metrics_batches_dropped_total", COUNTER, "Metrics batches dropped, oldest first, while the queue was full.") \
	O(MET_COLLECT_NS, metricsender, last_collect_ns, "metrics_last_collect_ns", GAUGE, "What the last metrics collection cost, in nanoseconds.") \
	O(MET_PROCESSES_DROPPED, metricsender, processes_dropped, "metrics_processes_dropped", GAUGE, "Processes left out of the last collection (beyond the per-interval bound).") \
	/* GPU time from libembercuda.so (cuda.h) */ \
	O(CUDA_CONNECTIONS, cuda, connections, "cuda_connections_total", COUNTER, "Connections of libembercuda.so accepted on the agent's socket (-cuda-profiler-dir).") \
	O(CUDA_CONNS_REFUSED, cuda, connections_refused, "cuda_connections_refused_total", COUNTER, "Connections refused: too many open, or no peer process.") \
	O(CUDA_CONNS_OPEN, cuda, connections_open, "cuda_connections", GAUGE, "Connections of libembercuda.so open now.") \
	O(CUDA_PROCESSES, cuda, processes, "cuda_processes_injected_total", COUNTER, "CUDA processes whose libembercuda.so said hello.") \
	O(CUDA_MESSAGES, cuda, messages, "cuda_messages_total", COUNTER, "Messages from libembercuda.so accepted.") \
	/* messages refused, per enum cuda_wire_reject, in its order */ \
	L(CUDA_REJ_SHORT, "cuda_messages_rejected_total", COUNTER, "Messages from libembercuda.so refused, by reason.", "reason", "short") \
	L(CUDA_REJ_OVERSIZE, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "oversize") \
	L(CUDA_REJ_MAGIC, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "magic") \
	L(CUDA_REJ_VERSION, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "version") \
	L(CUDA_REJ_TYPE, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "type") \
	L(CUDA_REJ_LENGTH, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "length") \
	L(CUDA_REJ_COUNT, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "count") \
	L(CUDA_REJ_KIND, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "kind") \
	L(CUDA_REJ_STRING, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "string") \
	L(CUDA_REJ_RESERVED, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "reserved") \
	L(CUDA_REJ_VALUE, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "value") \
	L(CUDA_REJ_ORDER, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "order") \
	L(CUDA_REJ_RATE, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "rate") \
	L(CUDA_REJ_NVTX, "cuda_messages_rejected_total", COUNTER, NULL, "reason", "nvtx") \
	X(CUDA_PROBED_FILES, "cuda_probed_libraries", GAUGE, "Copies of libembercuda.so with the launch-marker uprobe attached.") \
	B(CUDA_MARKER_HITS, CUDA_HITS, "bpf_cuda_marker_hits_total", COUNTER, "Calls of ember_cuda_launch_marker the uprobe saw.") \
	O(CUDA_STACKS, cuda, stacks, "cuda_launch_stacks_total", COUNTER, "Launch stacks recorded by the uprobe and kept for the join.") \
	B(CUDA_STACKS_LOST, CUDA_RB_FULL, "cuda_launch_stacks_lost_total", COUNTER, "Launch stacks lost because the ring buffer was full.") \
	O(CUDA_STACKS_EVICTED, cuda, stacks_evicted, "cuda_launch_stacks_evicted_total", COUNTER, "Launch stacks dropped, oldest first, to keep the table bounded.") \
	/* launch records with a raw stack (collect_cuda_raw) */ \
	C(CUDA_RAW_STACKS, cuda_raw_stacks, "cuda_raw_launch_stacks_total", COUNTER, "Launch records of processes not described to the unwinder yet (or young ones whose walk broke), received with their raw user stack.") \
	C(CUDA_RAW_UNWOUND, cuda_raw_unwound, "cuda_raw_launch_stacks_unwound_total", COUNTER, "Raw launch stacks unwound by CFI as they came.") \
	C(CUDA_RAW_UNWOUND_LATE, cuda_raw_unwound_late, "cuda_raw_launch_stacks_unwound_late_total", COUNTER, "Raw launch stacks unwound by CFI after waiting for a table to be loaded.") \
	C(CUDA_RAW_EXPIRED, cuda_raw_expired, "cuda_raw_launch_stacks_expired_total", COUNTER, "Raw launch stacks that waited the longest time (5 s) or found their queue full (128), unwound with the tables there were (frame pointers where one was missing).") \
	C(CUDA_RAW_FALLBACK, cuda_raw_fallback, "cuda_raw_launch_stacks_fallback_total", COUNTER, "Raw launch stacks of processes the agent could not read: the frame-pointer walk kept.") \
	X(CUDA_RAW_PENDING, "cuda_raw_launch_stacks_pending", GAUGE, "Raw launch stacks waiting for a table (in at most 2 MiB); their GPU time waits with them (at most 8 s).") \
	O(CUDA_ENTRIES, cuda, entries, "cuda_entries_total", COUNTER, "Aggregates of GPU time received (one per stack, thread, kernel, device, stream).") \
	O(CUDA_JOINED, cuda, joined, "cuda_entries_joined_total", COUNTER, "Of those, emitted under the CPU stack of their launch.") \
	O(CUDA_NOT_SAMPLED, cuda, not_sampled, "cuda_entries_not_sampled_total", COUNTER, "Of those, emitted under [launch not sampled]: the library had no sampled launch for them (stack id 0).") \
	O(CUDA_UNKNOWN_STACK, cuda, unknown_stack, "cuda_entries_unknown_stack_total", COUNTER, "Of those, emitted under [launch not sampled]: no launch stack arrived within the hold time.") \
	O(CUDA_PENDING_OVERFLOW, cuda, pending_overflow, "cuda_entries_pending_overflow_total", COUNTER, "Of those, emitted under [launch not sampled] at once: too many entries were waiting for their stacks.") \
	X(CUDA_PENDING, "cuda_entries_pending", GAUGE, "Entries waiting for their launch stack now.") \
	O(CUDA_GPU_NS, cuda, gpu_ns, "cuda_gpu_seconds_total", SECONDS, "GPU time emitted as cuda samples.") \
	O(CUDA_NOT_SAMPLED_NS, cuda, not_sampled_ns, "cuda_not_sampled_seconds_total", SECONDS, "Of that, GPU time emitted under [launch not sampled].") \
	O(CUDA_LIB_LAUNCHES, cuda, lib_launches, "cuda_library_launches_total", COUNTER, "Launches the libraries saw (each connection's latest STATS, summed).") \
	O(CUDA_LIB_SAMPLED, cuda, lib_sampled, "cuda_library_launches_sampled_total", COUNTER, "Of those, launches the marker was called for.") \
	O(CUDA_LIB_RECORDS_DROPPED, cuda, lib_records_dropped, "cuda_library_records_dropped_total", COUNTER, "Activity records CUPTI dropped in the libraries.") \
	O(CUDA_LIB_MESSAGES_DROPPED, cuda, lib_messages_dropped, "cuda_library_messages_dropped_total", COUNTER, "Messages the libraries could not send (the agent was busy).") \
	O(CUDA_LIB_PC_SAMPLES, cuda, lib_pc_samples, "cuda_library_pc_samples_total", COUNTER, "PC samples the libraries received from CUPTI (EMBER_CUDA_ENABLE_PC_SAMPLING).") \
	O(CUDA_LIB_PC_REFUSED, cuda, lib_pc_refused, "cuda_library_pc_sampling_refused", GAUGE, "Processes whose CUPTI refused PC sampling for want of privileges (NVreg_RestrictProfilingToAdminUsers).") \
	O(CUDA_PC_ENTRIES, cuda, pc_entries, "cuda_pc_entries_total", COUNTER, "Parts of kernels' GPU time attributed to an instruction and stall reason by PC sampling.") \
	O(CUDA_SPANS, cuda, spans, "cuda_spans_total", COUNTER, "Single GPU activities (kernels, copies, sets, syncs) sent to the server for the timeline.") \
	O(CUDA_SPANS_JOINED, cuda, spans_joined, "cuda_spans_joined_total", COUNTER, "Timeline spans sent with their launch stack.") \
	/* the agent */ \
	X(SAMPLING, "sampling", GAUGE, "1 while sampling, 0 while probabilistic profiling has it off.") \
	X(OFFCPU_SAMPLING, "off_cpu_sampling", GAUGE, "1 while off-CPU sampling is attached, 0 otherwise.") \
	X(START_TIME, "start_time_seconds", GAUGE, "When the agent started, Unix seconds.") \
	/* memory (memstats.h): one block, kept together */ \
	X(MEM_RSS, "resident_bytes", GAUGE, "The agent's resident memory now (VmRSS).") \
	X(MEM_RSS_PEAK, "resident_peak_bytes", GAUGE, "The agent's peak resident memory since it started (VmHWM); bounded by design to 100 MB.") \
	X(MEM_UNWIND_BUILD, "memory_unwind_build_bytes", GAUGE, "Memory of the unwind tables being built (rows and FDE list, before they go to BPF).") \
	X(MEM_SYMBOLS, "memory_symbols_bytes", GAUGE, "Memory of the symbol files being extracted (names, ranges, compressed output).") \
	X(MEM_BUDGET_RESERVED, "memory_budget_reserved_bytes", GAUGE, "Bytes of the transient-job memory budget reserved now by table builds and symbol extraction of large files.") \
	X(MEM_BUDGET_WAITS, "memory_budget_waits_total", COUNTER, "Times a table build or symbol extraction waited for the memory budget.") \
	X(MEM_PROCESSES, "memory_processes_bytes", GAUGE, "Memory of the per-process state (the process table and each process's mappings).") \
	X(MEM_FILES, "memory_files_bytes", GAUGE, "Memory of the file registry.") \
	X(MEM_SAMPLE_CACHE, "memory_sample_cache_bytes", GAUGE, "Memory of the cache of raw samples already in the batch.") \
	X(MEM_PYTHON, "memory_python_bytes", GAUGE, "Memory of the Python processes' state and cached code objects.") \
	X(MEM_KERNEL_SYMBOLS, "memory_kernel_symbols_bytes", GAUGE, "Memory of the kernel's symbols (/proc/kallsyms).")

/* The stats: line, in its order: X(text before the value, ID, divisor). */
#define AGENT_STATS_LINE(X) \
	X("samples=", SAMPLES, 1) \
	X(" lost=", LOST, 1) \
	X(" off_cpu_samples=", OFFCPU_SAMPLES, 1) \
	X(" off_cpu_lost=", OFFCPU_LOST, 1) \
	X(" cfi_stacks=", CFI_STACKS, 1) \
	X(" fp_stacks=", FP_STACKS, 1) \
	X(" errors=", ERROR_STACKS, 1) \
	X(" truncated=", TRUNCATED, 1) \
	X(" processes=", PROCESSES, 1) \
	X(" files=", FILES, 1) \
	X(" tables=", TABLES_LOADED, 1) \
	X(" shared=", TABLES_SHARED, 1) \
	X(" failed=", TABLES_FAILED, 1) \
	X(" prioritized=", TABLES_PRIORITIZED, 1) \
	X(" rows=", TABLE_ENTRIES_USED, 1) \
	X("/", TABLE_ENTRIES_CAP, 1) \
	X(" rules=", TABLE_RULES, 1) \
	X(" batches_sent=", BATCHES_SENT, 1) \
	X(" bytes_sent=", BYTES_SENT, 1) \
	X(" encode_us=", ENCODE_NS, 1000) \
	X(" queued=", QUEUED_BATCHES, 1) \
	X(" dropped=", BATCHES_DROPPED, 1) \
	X(" resyncs=", RESYNCS, 1) \
	X(" sessions=", SESSIONS, 1) \
	X(" session_bytes=", SESSION_BYTES, 1) \
	X(" symbols_uploaded=", SYM_UPLOADED, 1) \
	X(" symbols_present=", SYM_PRESENT, 1) \
	X(" python_stacks=", BPF_PY_STACKS, 1) \
	X(" python_frames=", PY_FRAMES, 1) \
	X(" python_unnamed=", PY_UNNAMED, 1) \
	X(" python_stale=", PY_STALE, 1) \
	X(" python_no_thread=", BPF_PY_NO_THREAD, 1) \
	X(" python_read_errors=", BPF_PY_READ_ERR, 1) \
	X(" python_processes=", PY_PROCESSES, 1) \
	X(" metrics_points=", MET_POINTS, 1) \
	X(" metrics_batches_sent=", MET_BATCHES_SENT, 1) \
	X(" metrics_dropped=", MET_BATCHES_DROPPED, 1) \
	X(" metrics_collect_us=", MET_COLLECT_NS, 1000) \
	X(" metrics_processes_dropped=", MET_PROCESSES_DROPPED, 1) \
	X(" raw_stacks=", RAW_STACKS, 1) \
	X(" raw_skipped=", BPF_RAW_SKIPPED, 1) \
	X(" raw_unwound=", RAW_UNWOUND, 1) \
	X(" raw_unwound_late=", RAW_UNWOUND_LATE, 1) \
	X(" raw_expired=", RAW_EXPIRED, 1) \
	X(" raw_fallback=", RAW_FALLBACK, 1) \
	X(" raw_pending=", RAW_PENDING, 1) \
	X(" rss_kb=", MEM_RSS, 1024) \
	X(" rss_peak_kb=", MEM_RSS_PEAK, 1024) \
	X(" mem_unwind_build_kb=", MEM_UNWIND_BUILD, 1024) \
	X(" mem_symbols_kb=", MEM_SYMBOLS, 1024) \
	X(" mem_processes_kb=", MEM_PROCESSES, 1024) \
	X(" mem_files_kb=", MEM_FILES, 1024) \
	X(" mem_sample_cache_kb=", MEM_SAMPLE_CACHE, 1024) \
	X(" mem_python_kb=", MEM_PYTHON, 1024) \
	X(" mem_kernel_symbols_kb=", MEM_KERNEL_SYMBOLS, 1024)

#endif
