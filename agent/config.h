/* config.h - the agent's configuration: flags, EMBER_* environment
 * variables and the -config file.
 * The parsing rules (dashes, values, precedence) are lib/flags.h's.
 */
#ifndef EMBER_AGENT_CONFIG_H
#define EMBER_AGENT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "kubelet.h"

#define AGENT_MAX_TAGS 16

struct agent_config {
	char *collection_agent;     /* host:port of ember-server */
	bool disable_tls;
	bool insecure;
	char *tls_ca_file;          /* CAs to trust, "" = the system's */
	char *project;
	char *auth_token;
	char *cluster_name;         /* cluster.name of every sample, or "" */
	char *host_type;            /* host.type, or "" */
	char *machine_id;           /* host.id: "" = /etc/machine-id when readable */
	char *tags;                 /* -tags "a:b;c": user.tag and user.tag.<key> */
	char *job_tag_env;          /* environment variable whose value is job.tag */
	char *container_runtime_socket;
	char *pprof;                /* -pprof: host:port of the stats server, "" = off */
	char *state_dir;            /* -state-dir: crash notes (crashlog.h), "" = off */
	char *debug_file_dir;       /* -debug-file-dir: local debug files, "" = none */
	char *k8s_pod_labels;       /* -k8s-pod-labels: comma-separated label names */
	char *pod_labels[KUBELET_MAX_LABELS]; /* parsed, distinct (owned) */
	size_t npod_labels;
	char *kubelet_url;          /* base URL of the kubelet's API */
	char *kubelet_token_file;
	bool kubelet_insecure;
	char *tracers;              /* -tracers: "all", "none" or a list */
	bool trace_python;          /* -tracers includes python */
	/* -tags parsed: attribute key/value pairs (owned) */
	char *tag_kv[2 * (AGENT_MAX_TAGS + 1)];
	size_t ntag_kv;
	uint64_t on_cpu_hz;
	uint64_t unwind_table_rows; /* -unwind-table-rows: size of the BPF unwind-row table */
	bool enable_off_cpu;        /* -enable-off-cpu as given */
	uint64_t off_cpu_hz;        /* -off-cpu-sampling-rate: per second of waiting, per thread */
	bool off_cpu;               /* off-CPU profiling on: -enable-off-cpu, or a non-zero
				       -off-cpu-sampling-rate set explicitly */
	char *off_cpu_rate_arg;     /* internal: how -off-cpu-sampling-rate was given, "" = not */
	int64_t reporter_interval_ms;
	int64_t metrics_interval_ms;  /* -collect-metrics-interval */
	bool host_metrics;            /* -enable-host-metrics */
	bool gpu_metrics;             /* -enable-gpu-metrics */
	char *nvml_path;              /* -nvml-path: "" = the soname (and the scan) */
	bool nvml_auto_scan;          /* -nvml-auto-scan */
	bool enable_cuda_profiler;    /* -enable-cuda-profiler */
	char *cuda_profiler_dir;      /* -cuda-profiler-dir: library and socket */
	int64_t log_rate_limit_ms;
	uint64_t probabilistic_threshold; /* 1..100: percent of intervals profiled */
	int64_t probabilistic_interval_ms;
	bool verbose;
	bool json_log;
	bool dwarf;
	bool ember_protocol;         /* false: OTLP Profiles */
	char *otlp_transport;        /* -otlp-transport: "http" or "grpc" */
	char *otlp_grpc_endpoint;    /* -otlp-grpc-endpoint: host:port; "": -collection-agent's host, port 4317 */
	uint64_t max_input_file_size;
	uint64_t max_symbfile_size;
	char *config_path;
	char *lock_file;             /* -lock-file: one agent per host; "" = no lock */
	bool help;
	bool version; /* -version: print the version and build ID and exit */
};

/* Fills cfg from defaults, the config file, envp and argv (argv[0] is the
 * program). Returns 0, or -1 with a message in err. */
int agent_config_load(struct agent_config *cfg, int argc, char **argv, char **envp,
		      struct buf *err);
void agent_config_free(struct agent_config *cfg);
/* Appends the flag reference (name, default, meaning) to out. */
void agent_config_usage(struct buf *out);

#endif
