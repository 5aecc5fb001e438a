/* config.c - see config.h. */
#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "flags.h"
#include "selfstats.h"
#include "util.h"

#define OFF(f) offsetof(struct agent_config, f)

static const struct flag_def defs[] = {
	{ "collection-agent", FLAG_STRING, "", OFF(collection_agent), 0, 0,
	  "host:port of ember-server, e.g. 127.0.0.1:8080" },
	{ "disable-tls", FLAG_BOOL, "false", OFF(disable_tls), 0, 0,
	  "send to the server over plain HTTP" },
	{ "insecure", FLAG_BOOL, "false", OFF(insecure), 0, 0,
	  "use TLS but do not verify the server's certificate" },
	{ "tls-ca-file", FLAG_STRING, "", OFF(tls_ca_file), 0, 0,
	  "PEM file of the CA certificates to trust for the server (default: the system's)" },
	{ "project", FLAG_STRING, "default", OFF(project), 0, 0,
	  "project the samples belong to (created on the server when new)" },
	{ "auth-token", FLAG_STRING, "", OFF(auth_token), 0, 0, "bearer token sent to the server" },
	{ "cluster-name", FLAG_STRING, "", OFF(cluster_name), 0, 0,
	  "cluster.name attribute of every sample (filter and group by it)" },
	{ "host-type", FLAG_STRING, "", OFF(host_type), 0, 0,
	  "host.type attribute of every sample, e.g. the instance type" },
	{ "machine-id", FLAG_STRING, "", OFF(machine_id), 0, 0,
	  "host.id attribute of every sample (default: /etc/machine-id)" },
	{ "tags", FLAG_STRING, "", OFF(tags), 0, 0,
	  "tags of every sample, ';'-separated (key:value or plain): user.tag, and user.tag.KEY=value" },
	{ "job-tag-env", FLAG_STRING, "EMBER_JOB_TAG", OFF(job_tag_env), 0, 0,
	  "environment variable of a process whose value becomes its job.tag attribute" },
	{ "container-runtime-socket", FLAG_STRING, "", OFF(container_runtime_socket), 0, 0,
	  "container runtime API socket for container names: Docker-compatible, containerd (file name containing \"containerd\") or CRI-O (path containing \"crio\") (default: probe the usual ones; none: off)" },
	{ "k8s-pod-labels", FLAG_STRING, "", OFF(k8s_pod_labels), 0, 0,
	  "Kubernetes pod labels to add to a pod's samples as k8s.pod.label[NAME], comma-separated (at most 16; keep them low-cardinality)" },
	{ "kubelet-url", FLAG_STRING, "https://127.0.0.1:10250", OFF(kubelet_url), 0, 0,
	  "with -k8s-pod-labels: the kubelet's API, whose /pods lists this node's pods (read-only port: http://127.0.0.1:10255)" },
	{ "kubelet-token-file", FLAG_STRING, "/var/run/secrets/kubernetes.io/serviceaccount/token",
	  OFF(kubelet_token_file), 0, 0,
	  "with -k8s-pod-labels: bearer token for the kubelet, re-read at each request (absent: none sent)" },
	{ "kubelet-insecure", FLAG_BOOL, "false", OFF(kubelet_insecure), 0, 0,
	  "with -k8s-pod-labels: do not verify the kubelet's certificate (often self-signed)" },
	{ "pprof", FLAG_STRING, "", OFF(pprof), 0, 0,
	  "host:port to serve the agent's own stats on (GET /metrics, /debug/stats), e.g. 127.0.0.1:6060; empty: off" },
	{ "debug-file-dir", FLAG_STRING, "/usr/lib/debug", OFF(debug_file_dir), 0, 0,
	  "root of local debug files (.build-id/xx/yyyy.debug, and by .gnu_debuglink), whose symbols (and DWARF with -dwarf) are uploaded for a file of the same build; empty: none" },
	{ "state-dir", FLAG_STRING, "/run/ember", OFF(state_dir), 0, 0,
	  "directory where a crash of the agent leaves a note (the signal and a backtrace) that the next start logs, with the unit's note of how the run ended; empty: off" },
	{ "tracers", FLAG_STRING, "all", OFF(tracers), 0, 0,
	  "interpreter tracers, comma-separated: python; all; none" },
	{ "on-cpu-sampling-rate", FLAG_UINT, "19", OFF(on_cpu_hz), 1, 1000,
	  "on-CPU samples per second per CPU (Hz)" },
	{ "enable-off-cpu", FLAG_BOOL, "false", OFF(enable_off_cpu), 0, 0,
	  "record where threads wait off CPU in system calls (locks, sleeps, I/O) as off_cpu samples of nanoseconds" },
	{ "off-cpu-sampling-rate", FLAG_UINT, "19", OFF(off_cpu_hz), 0, 1000,
	  "off-CPU samples per second of waiting, per thread (Hz); setting it to a non-zero value also enables off-CPU profiling" },
	{ "unwind-table-rows", FLAG_UINT, "4194304", OFF(unwind_table_rows), 65536, 1ull << 28,
	  "rows of the BPF unwinder's table shared by all files (8 bytes each, in pages of 1024; 4194304 = 32 MiB of kernel memory); when full, tables of files no process maps are given back first, then the least recently sampled ones" },
	{ "reporter-interval", FLAG_DURATION, "5s", OFF(reporter_interval_ms), 1000, 3600000,
	  "how often a batch is sent to the server" },
	{ "collect-metrics-interval", FLAG_DURATION, "30s", OFF(metrics_interval_ms), 1000, 3600000,
	  "how often host and GPU metrics are collected and sent (1s to 1h)" },
	{ "enable-host-metrics", FLAG_BOOL, "true", OFF(host_metrics), 0, 0,
	  "collect host, process, cgroup and disk metrics from /proc and /sys/fs/cgroup" },
	{ "enable-gpu-metrics", FLAG_BOOL, "true", OFF(gpu_metrics), 0, 0,
	  "collect NVIDIA GPU metrics, MIG devices and XID events through NVML (libnvidia-ml.so) when it can be loaded" },
	{ "nvml-path", FLAG_STRING, "", OFF(nvml_path), 0, 0,
	  "path of libnvidia-ml.so to load (default: the soname libnvidia-ml.so.1 through the dynamic loader)" },
	{ "nvml-auto-scan", FLAG_BOOL, "false", OFF(nvml_auto_scan), 0, 0,
	  "when NVML is not found by its soname, scan the usual driver library directories for libnvidia-ml.so.1" },
	{ "enable-cuda-profiler", FLAG_BOOL, "true", OFF(enable_cuda_profiler), 0, 0,
	  "install libembercuda.so into -cuda-profiler-dir and record the GPU work of CUDA programs started with CUDA_INJECTION64_PATH pointing at it" },
	{ "cuda-profiler-dir", FLAG_STRING, "/var/lib/ember/profiler", OFF(cuda_profiler_dir), 0, 0,
	  "directory the CUDA injection library and the agent's socket for it are placed in" },
	{ "ember-protocol", FLAG_BOOL, "true", OFF(ember_protocol), 0, 0,
	  "send with ember's session protocol; false: OTLP Profiles (over -otlp-transport)" },
	{ "otlp-transport", FLAG_STRING, "http", OFF(otlp_transport), 0, 0,
	  "with -ember-protocol=false: http (POST /v1development/profiles on -collection-agent) or grpc (ProfilesService/Export on -otlp-grpc-endpoint)" },
	{ "otlp-grpc-endpoint", FLAG_STRING, "", OFF(otlp_grpc_endpoint), 0, 0,
	  "host:port of the OTLP gRPC receiver (default: the host of -collection-agent, port 4317); TLS as -disable-tls, -tls-ca-file and -insecure say" },
	{ "probabilistic-threshold", FLAG_UINT, "100", OFF(probabilistic_threshold), 1, 100,
	  "profile in this percentage of probabilistic intervals, chosen at random (100: always)" },
	{ "probabilistic-interval", FLAG_DURATION, "1m", OFF(probabilistic_interval_ms), 1000,
	  7ULL * 86400000, "how long each probabilistic on/off decision lasts" },
	FLAG_DEFS_LOG(struct agent_config),
	{ "dwarf", FLAG_BOOL, "false", OFF(dwarf), 0, 0,
	  "upload source lines and inlined functions (DWARF) with the symbols" },
	{ "max-input-file-size", FLAG_UINT, "2147483648", OFF(max_input_file_size), 1, UINT64_MAX,
	  "with -dwarf: no DWARF is read from files larger than this many bytes" },
	{ "max-symbfile-size", FLAG_UINT, "52428800", OFF(max_symbfile_size), 1024, 1ull << 30,
	  "with -dwarf: symbol files larger than this many bytes are sent without DWARF" },
	{ "lock-file", FLAG_STRING, "/run/ember/agent.lock", OFF(lock_file), 0, 0,
	  "file the agent locks (and writes its pid in) while it runs, so that a second agent on the "
	  "host refuses to start instead of reporting every sample twice; empty: no lock" },
	FLAG_DEF_CONFIG(struct agent_config, config_path),
	FLAG_DEFS_HELP_VERSION(struct agent_config),
};

static const struct flag_set agent_flags = {
	.program = "ember-agent",
	.env_prefix = "EMBER_",
	.defs = defs,
	.count = ARRAY_SIZE(defs),
	.config_flag = "config",
};

/* Whether -off-cpu-sampling-rate was set (command line, environment or
 * config file) rather than left at its default, which a non-zero value
 * must be to enable off-CPU profiling: the flags are loaded a second time
 * with that flag turned into a string defaulting to "", so lib/flags.c's
 * own rules (dashes, precedence, the config file) decide. Called after
 * the first load succeeded. Returns 1, 0, or -1 with a message in err. */
static int off_cpu_rate_given(int argc, char **argv, char **envp, struct buf *err)
{
	struct flag_def probe[ARRAY_SIZE(defs)];
	memcpy(probe, defs, sizeof(defs));
	for (size_t i = 0; i < ARRAY_SIZE(probe); i++)
		if (strcmp(probe[i].name, "off-cpu-sampling-rate") == 0) {
			probe[i].kind = FLAG_STRING;
			probe[i].def = "";
			probe[i].offset = OFF(off_cpu_rate_arg);
		}
	struct flag_set fs = agent_flags;
	fs.defs = probe;
	struct agent_config tmp;
	memset(&tmp, 0, sizeof(tmp));
	int rc = flags_load(&fs, &tmp, argc, argv, envp, err);
	int given = rc == 0 && tmp.off_cpu_rate_arg && *tmp.off_cpu_rate_arg;
	flags_free(&fs, &tmp);
	return rc < 0 ? -1 : given;
}

/* -tags "k:v;plain;k2:v2" -> user.tag = the tags sorted, ';'-joined, and
 * user.tag.k = v for each key:value tag. */
static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int parse_tags(struct agent_config *cfg, struct buf *err)
{
	char *tags[AGENT_MAX_TAGS];
	size_t n = 0;
	int rc = 0;
	for (const char *p = cfg->tags; *p && rc == 0;) {
		const char *e = strchr(p, ';');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len) {
			const char *colon = memchr(p, ':', len);
			if (n == AGENT_MAX_TAGS || len > 128 || !str_printable(p, len) ||
			    (colon && (colon == p || colon - p > 64))) {
				buf_printf(err, "-tags: expected at most %d tags of at most 128 printable characters, "
						"key:value with a key of 1 to 64, separated by ';', got \"%s\"",
					   AGENT_MAX_TAGS, cfg->tags);
				rc = -1;
				break;
			}
			tags[n++] = xstrndup(p, len);
		}
		p += len + (e ? 1 : 0);
	}
	if (rc == 0 && n) {
		qsort(tags, n, sizeof(*tags), cmp_strp);
		struct buf all = { 0 };
		for (size_t i = 0; i < n; i++)
			buf_printf(&all, "%s%s", i ? ";" : "", tags[i]);
		cfg->tag_kv[cfg->ntag_kv++] = xstrdup("user.tag");
		cfg->tag_kv[cfg->ntag_kv++] = buf_steal(&all, NULL);
		for (size_t i = 0; i < n; i++) {
			char *colon = strchr(tags[i], ':');
			if (!colon)
				continue;
			struct buf k = { 0 };
			buf_printf(&k, "user.tag.%.*s", (int)(colon - tags[i]), tags[i]);
			cfg->tag_kv[cfg->ntag_kv++] = buf_steal(&k, NULL);
			cfg->tag_kv[cfg->ntag_kv++] = xstrdup(colon + 1);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(tags[i]);
	return rc;
}

/* -tracers: "all", "none" or a list. Names of tracers ember does not have
 * (the reference's nodejs, hotspot, ...) are accepted and logged by the
 * agent, so a command line written for it still starts. */
static const char *const known_tracers[] = { "python" };
static const char *const other_tracers[] = { "perl", "php", "hotspot", "ruby", "v8", "nodejs",
					     "dotnet", "beam", "go", "labels" };

static int parse_tracers(struct agent_config *cfg, struct buf *err)
{
	const char *t = cfg->tracers;
	if (strcmp(t, "all") == 0) {
		cfg->trace_python = true;
		return 0;
	}
	if (strcmp(t, "none") == 0 || !*t)
		return 0;
	for (const char *p = t; *p;) {
		size_t len = strcspn(p, ",");
		bool ok = false;
		for (size_t i = 0; i < ARRAY_SIZE(known_tracers) && !ok; i++)
			ok = strlen(known_tracers[i]) == len && memcmp(p, known_tracers[i], len) == 0;
		if (ok)
			cfg->trace_python = true;
		for (size_t i = 0; i < ARRAY_SIZE(other_tracers) && !ok; i++)
			ok = strlen(other_tracers[i]) == len && memcmp(p, other_tracers[i], len) == 0;
		if (!ok) {
			buf_printf(err, "-tracers: unknown tracer \"%.*s\"; expected all, none, or a comma-separated list of: python",
				   (int)MIN(len, (size_t)64), p);
			return -1;
		}
		p += len + (p[len] == ',');
	}
	return 0;
}

/* -k8s-pod-labels "app,tier": distinct label names, spaces around the
 * commas ignored. */
static int parse_pod_labels(struct agent_config *cfg, struct buf *err)
{
	for (const char *p = cfg->k8s_pod_labels; *p;) {
		size_t len = strcspn(p, ",");
		const char *s = p, *e = p + len;
		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		size_t n = (size_t)(e - s);
		if (n) {
			if (!kubelet_label_name_valid(s, n)) {
				buf_printf(err, "-k8s-pod-labels: \"%.*s\" is not a Kubernetes label name; expected "
						"comma-separated names such as app,app.kubernetes.io/name ([prefix/]name, "
						"name of 1 to 63 letters, digits, '-', '_', '.')",
					   (int)MIN(n, (size_t)80), s);
				return -1;
			}
			bool dup = false;
			for (size_t i = 0; i < cfg->npod_labels && !dup; i++)
				dup = strlen(cfg->pod_labels[i]) == n && memcmp(cfg->pod_labels[i], s, n) == 0;
			if (!dup && cfg->npod_labels == KUBELET_MAX_LABELS) {
				buf_printf(err, "-k8s-pod-labels: at most %d labels", KUBELET_MAX_LABELS);
				return -1;
			}
			if (!dup)
				cfg->pod_labels[cfg->npod_labels++] = xstrndup(s, n);
		}
		p += len + (p[len] == ',');
	}
	const char *u = cfg->kubelet_url;
	size_t ul = strlen(u);
	const char *rest = strncmp(u, "http://", 7) == 0 ? u + 7 : strncmp(u, "https://", 8) == 0 ? u + 8 : NULL;
	if (!rest || ul > 512 || !str_printable(u, ul) || strpbrk(u, " ?#@") || strcspn(rest, "/") == 0) {
		buf_printf(err, "-kubelet-url: expected http://HOST:PORT or https://HOST:PORT (at most 512 characters), got \"%.*s\"",
			   (int)MIN(strlen(u), (size_t)512), u);
		return -1;
	}
	return 0;
}

int agent_config_load(struct agent_config *cfg, int argc, char **argv, char **envp,
		      struct buf *err)
{
	memset(cfg, 0, sizeof(*cfg));
	if (flags_load(&agent_flags, cfg, argc, argv, envp, err) < 0)
		return -1;
	if (cfg->help || cfg->version)
		return 0;
	int rate_given = off_cpu_rate_given(argc, argv, envp, err);
	if (rate_given < 0)
		return -1;
	if (cfg->enable_off_cpu && cfg->off_cpu_hz == 0) {
		buf_puts(err, "-off-cpu-sampling-rate: 0 cannot be used with -enable-off-cpu; expected 1 to 1000 samples per second of waiting");
		return -1;
	}
	cfg->off_cpu = cfg->enable_off_cpu || (rate_given && cfg->off_cpu_hz > 0);
	if (!*cfg->collection_agent) {
		buf_puts(err, "-collection-agent: not set; expected host:port of ember-server, e.g. -collection-agent=127.0.0.1:8080");
		return -1;
	}
	const char *colon = strrchr(cfg->collection_agent, ':');
	uint64_t port;
	if (!colon || colon == cfg->collection_agent || parse_u64(colon + 1, &port) < 0 ||
	    port == 0 || port > 65535 || strpbrk(cfg->collection_agent, "/ ?#@")) {
		buf_printf(err, "-collection-agent: expected host:port, got \"%s\"",
			   cfg->collection_agent);
		return -1;
	}
	if (strcmp(cfg->otlp_transport, "http") && strcmp(cfg->otlp_transport, "grpc")) {
		buf_printf(err, "-otlp-transport: expected http or grpc, got \"%s\"", cfg->otlp_transport);
		return -1;
	}
	if (*cfg->otlp_grpc_endpoint) {
		const char *c = strrchr(cfg->otlp_grpc_endpoint, ':');
		if (!c || c == cfg->otlp_grpc_endpoint || parse_u64(c + 1, &port) < 0 || port == 0 ||
		    port > 65535 || strpbrk(cfg->otlp_grpc_endpoint, "/ ?#@")) {
			buf_printf(err, "-otlp-grpc-endpoint: expected host:port, got \"%s\"",
				   cfg->otlp_grpc_endpoint);
			return -1;
		}
	}
	if (*cfg->tls_ca_file && access(cfg->tls_ca_file, R_OK) != 0) {
		buf_printf(err, "-tls-ca-file: cannot read \"%s\"", cfg->tls_ca_file);
		return -1;
	}
	if (cfg->insecure && cfg->disable_tls) {
		buf_puts(err, "-insecure: cannot be used together with -disable-tls");
		return -1;
	}
	const struct {
		const char *flag, *value;
	} attrs[] = { { "cluster-name", cfg->cluster_name }, { "host-type", cfg->host_type },
		      { "machine-id", cfg->machine_id } };
	for (size_t i = 0; i < ARRAY_SIZE(attrs); i++) {
		const char *v = attrs[i].value;
		if (strlen(v) > 128 || !str_printable(v, strlen(v))) {
			buf_printf(err, "-%s: expected at most 128 printable characters", attrs[i].flag);
			return -1;
		}
	}
	if (parse_tags(cfg, err) < 0)
		return -1;
	if (parse_tracers(cfg, err) < 0)
		return -1;
	if (parse_pod_labels(cfg, err) < 0)
		return -1;
	char host[256];
	uint16_t pprof_port;
	if (*cfg->pprof && selfstats_split_addr(cfg->pprof, host, sizeof(host), &pprof_port) < 0) {
		buf_printf(err, "-pprof: expected host:port (port 1 to 65535; [v6 address]:port; :port for every address), e.g. 127.0.0.1:6060, got \"%.*s\"",
			   (int)MIN(strlen(cfg->pprof), (size_t)300), cfg->pprof);
		return -1;
	}
	size_t nl = strlen(cfg->nvml_path);
	if (nl > 1024 || (nl && (cfg->nvml_path[0] != '/' || !str_printable(cfg->nvml_path, nl)))) {
		buf_printf(err, "-nvml-path: expected an absolute path of libnvidia-ml.so (at most 1024 printable characters), got \"%.*s\"",
			   (int)MIN(nl, (size_t)300), cfg->nvml_path);
		return -1;
	}
	size_t dl = strlen(cfg->cuda_profiler_dir);
	/* the socket's path is this directory + "/agent.sock" and must fit in
	 * sun_path (108 bytes) */
	if (dl < 2 || dl > 90 || cfg->cuda_profiler_dir[0] != '/' || !str_printable(cfg->cuda_profiler_dir, dl)) {
		buf_printf(err, "-cuda-profiler-dir: expected an absolute directory path of 2 to 90 printable characters, got \"%.*s\"",
			   (int)MIN(dl, (size_t)300), cfg->cuda_profiler_dir);
		return -1;
	}
	if (!*cfg->project || strlen(cfg->project) > 128 || strpbrk(cfg->project, " \t\r\n/")) {
		buf_printf(err, "-project: expected a name of 1 to 128 characters without spaces or '/', got \"%s\"",
			   cfg->project);
		return -1;
	}
	return 0;
}

void agent_config_free(struct agent_config *cfg)
{
	for (size_t i = 0; i < cfg->ntag_kv; i++)
		free(cfg->tag_kv[i]);
	cfg->ntag_kv = 0;
	for (size_t i = 0; i < cfg->npod_labels; i++)
		free(cfg->pod_labels[i]);
	cfg->npod_labels = 0;
	flags_free(&agent_flags, cfg);
}

void agent_config_usage(struct buf *out)
{
	flags_usage(&agent_flags, "-collection-agent=HOST:PORT [flags]", out);
}
