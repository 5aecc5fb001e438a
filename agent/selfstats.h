/* selfstats.h - the agent's own counters, and the HTTP server of -pprof
 * that serves them.
 *
 * The main loop fills an array of values (enum selfstat, one per metric:
 * samples, lost samples, unwinding, tables, delivery, symbols, Python, the
 * kubelet) and publishes it with selfstats_publish() about once a second
 * and after every batch; the server copies the latest published array
 * under its mutex and renders it, so it never reads the main loop's live
 * structures. Endpoints (GET or HEAD; other methods: 405 with a JSON
 * error; other paths: 404 with a JSON error):
 *   /metrics       Prometheus text format 0.0.4: every metric named
 *                  ember_agent_<name>, with HELP and TYPE lines
 *   /debug/stats   the same values as one JSON object: "time_unix_ms" (when
 *                  they were published), then "<name>": value per metric;
 *                  a labelled family is an object of label value -> value
 * The server is libmicrohttpd with its own thread, on a socket the agent
 * binds itself (so "address in use" is told as such), 16 connections at
 * most, 10 s idle timeout.
 */
#ifndef EMBER_AGENT_SELFSTATS_H
#define EMBER_AGENT_SELFSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

enum selfstat {
	/* samples (collect.h) */
	SS_SAMPLES,
	SS_FRAMES,
	SS_ERROR_STACKS,
	SS_TRUNCATED,
	SS_MALFORMED,
	SS_CFI_STACKS,
	SS_FP_STACKS,
	SS_PY_FRAMES,
	SS_PY_UNNAMED,
	SS_OFFCPU_SAMPLES,
	SS_OFFCPU_NS,
	/* the BPF program's per-CPU counters (oncpu_types.h) */
	SS_BPF_SAMPLES,
	SS_BPF_IDLE,
	SS_LOST,
	SS_BPF_USTACK_ERR,
	SS_BPF_KSTACK_ERR,
	SS_BPF_KERNEL_FP,
	SS_BPF_CFI,
	SS_BPF_CFI_FRAMES,
	SS_BPF_FP_FRAMES,
	SS_BPF_TAIL_CALLS,
	SS_BPF_PY_STACKS,
	SS_BPF_PY_NO_THREAD,
	SS_BPF_PY_FRAMES,
	SS_BPF_PY_READ_ERR,
	SS_BPF_STOP_NO_MAPPING, /* stacks ended, per enum unwind_error */
	SS_BPF_STOP_READ,
	SS_BPF_STOP_NO_PROGRESS,
	SS_BPF_STOP_TRUNCATED,
	SS_BPF_STOP_NO_FP,
	SS_BPF_OFFCPU_WAITS,
	SS_BPF_OFFCPU_SAMPLED,
	SS_BPF_OFFCPU_SAMPLES,
	SS_OFFCPU_LOST,
	SS_BPF_OFFCPU_NO_SCRATCH,
	SS_BPF_RING_WAKES,
	SS_BPF_RAW_STACKS,
	SS_BPF_RAW_SKIPPED,
	/* raw stacks of new processes (collect.h, rawstack.h) */
	SS_RAW_STACKS,
	SS_RAW_UNWOUND,
	SS_RAW_UNWOUND_LATE,
	SS_RAW_EXPIRED,
	SS_RAW_FALLBACK,
	SS_RAW_PENDING,
	SS_RAW_PENDING_BYTES,
	/* processes and files (proc.h, files.h) */
	SS_PROCESSES,
	SS_FILES,
	/* unwind tables (unwind.h) */
	SS_TABLES_QUEUED,
	SS_TABLES_LOADED,
	SS_TABLES_SHARED,
	SS_TABLES_FAILED,
	SS_TABLES_SKIPPED,
	SS_TABLES_PRIORITIZED,
	SS_TABLES_RECLAIMED,
	SS_TABLES_EVICTED,
	SS_TABLES_RELOADED,
	SS_TABLES_REFUSED,
	SS_TABLES_PARTIAL,
	SS_TABLES_RESIDENT,
	SS_TABLE_ROWS,
	SS_TABLE_ENTRIES_USED,
	SS_TABLE_ENTRIES_CAP,
	SS_TABLE_RULES,
	SS_UNWIND_PROC_UPDATES,
	SS_UNWIND_PROC_FAILURES,
	SS_TABLE_BUILD_NS,
	/* delivery (reporter.h) */
	SS_BATCHES_SENT,
	SS_BYTES_SENT,
	SS_SEND_FAILURES,
	SS_BATCHES_REJECTED,
	SS_BATCHES_DROPPED,
	SS_BYTES_DROPPED,
	SS_RESYNCS,
	SS_SESSIONS,
	SS_QUEUED_BATCHES,
	SS_QUEUED_BYTES,
	SS_SESSION_BYTES,
	SS_ENCODE_NS,
	/* symbol upload (symupload.h) */
	SS_SYM_QUEUED,
	SS_SYM_CHECKED,
	SS_SYM_UPLOADED,
	SS_SYM_PRESENT,
	SS_SYM_FAILED,
	SS_SYM_SKIPPED,
	SS_SYM_UPLOADED_BYTES,
	/* the Python symbolizer (python.h) */
	SS_PY_SYMBOLIZED,
	SS_PY_CACHE_HITS,
	SS_PY_REVALIDATED,
	SS_PY_READ_ERRORS,
	SS_PY_STALE,
	SS_PY_PROCESSES,
	/* the kubelet's pod list (kubelet.h) */
	SS_KUBELET_FETCHES,
	SS_KUBELET_ERRORS,
	SS_KUBELET_PODS,
	/* host and GPU metrics (metricsender.h) */
	SS_MET_COLLECTIONS,
	SS_MET_POINTS,
	SS_MET_BATCHES_SENT,
	SS_MET_BYTES_SENT,
	SS_MET_SEND_FAILURES,
	SS_MET_BATCHES_REJECTED,
	SS_MET_BATCHES_DROPPED,
	SS_MET_COLLECT_NS,
	SS_MET_PROCESSES_DROPPED,
	/* GPU time from libembercuda.so (cuda.h) */
	SS_CUDA_CONNECTIONS,
	SS_CUDA_CONNS_REFUSED,
	SS_CUDA_CONNS_OPEN,
	SS_CUDA_PROCESSES,
	SS_CUDA_MESSAGES,
	SS_CUDA_REJ_SHORT, /* messages refused, per enum cuda_wire_reject, in its order */
	SS_CUDA_REJ_OVERSIZE,
	SS_CUDA_REJ_MAGIC,
	SS_CUDA_REJ_VERSION,
	SS_CUDA_REJ_TYPE,
	SS_CUDA_REJ_LENGTH,
	SS_CUDA_REJ_COUNT,
	SS_CUDA_REJ_KIND,
	SS_CUDA_REJ_STRING,
	SS_CUDA_REJ_RESERVED,
	SS_CUDA_REJ_VALUE,
	SS_CUDA_REJ_ORDER,
	SS_CUDA_REJ_RATE,
	SS_CUDA_PROBED_FILES,
	SS_CUDA_MARKER_HITS,
	SS_CUDA_STACKS,
	SS_CUDA_STACKS_LOST,
	SS_CUDA_STACKS_EVICTED,
	SS_CUDA_RAW_STACKS, /* launch records with a raw stack (collect_cuda_raw) */
	SS_CUDA_RAW_UNWOUND,
	SS_CUDA_RAW_UNWOUND_LATE,
	SS_CUDA_RAW_EXPIRED,
	SS_CUDA_RAW_FALLBACK,
	SS_CUDA_RAW_PENDING,
	SS_CUDA_ENTRIES,
	SS_CUDA_JOINED,
	SS_CUDA_NOT_SAMPLED,
	SS_CUDA_UNKNOWN_STACK,
	SS_CUDA_PENDING_OVERFLOW,
	SS_CUDA_PENDING,
	SS_CUDA_GPU_NS,
	SS_CUDA_NOT_SAMPLED_NS,
	SS_CUDA_LIB_LAUNCHES,
	SS_CUDA_LIB_SAMPLED,
	SS_CUDA_LIB_RECORDS_DROPPED,
	SS_CUDA_LIB_MESSAGES_DROPPED,
	/* the agent */
	SS_SAMPLING,
	SS_OFFCPU_SAMPLING,
	SS_START_TIME,
	/* memory (memstats.h): one block, kept together */
	SS_MEM_RSS,
	SS_MEM_RSS_PEAK,
	SS_MEM_UNWIND_BUILD,
	SS_MEM_SYMBOLS,
	SS_MEM_BUDGET_RESERVED,
	SS_MEM_BUDGET_WAITS,
	SS_MEM_PROCESSES,
	SS_MEM_FILES,
	SS_MEM_SAMPLE_CACHE,
	SS_MEM_PYTHON,
	SS_MEM_KERNEL_SYMBOLS,
	SS_COUNT
};

struct selfstats_values {
	uint64_t v[SS_COUNT];
	int64_t time_unix_ms; /* when they were taken */
};

/* Renders values as Prometheus text / as the JSON object above. */
void selfstats_prometheus(const struct selfstats_values *s, struct buf *out);
void selfstats_json(const struct selfstats_values *s, struct buf *out);
/* The Prometheus name of a metric, without the ember_agent_ prefix (for
 * tests; NULL past the end). */
const char *selfstats_name(enum selfstat i);

/* Splits "host:port" ("[v6]:port"; an empty host means every address)
 * into host (at most hostcap - 1 bytes) and port (1 to 65535). Returns 0,
 * or -1 when malformed. */
int selfstats_split_addr(const char *addr, char *host, size_t hostcap, uint16_t *port);

struct selfstats_server;

/* Listens on addr (host:port) and serves the published values. Returns
 * NULL with the reason in err ("-pprof: cannot listen on ...: Address
 * already in use"). */
struct selfstats_server *selfstats_start(const char *addr, struct buf *err);
/* Copies s for the server to serve; s stays the caller's. */
void selfstats_publish(struct selfstats_server *srv, const struct selfstats_values *s);
/* Stops the server (its connections are closed) and frees it; NULL is a
 * no-op. */
void selfstats_stop(struct selfstats_server *srv);

#endif
