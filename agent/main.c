/* main.c - ember-agent: samples every process on this host and reports
 * the stacks to ember-server. See docs/architecture.md for the path a
 * sample takes, and agent/config.h for the flags. */
#include <bpf/bpf.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "attrib.h"
#include "batch.h"
#include "collect.h"
#include "config.h"
#include "crashlog.h"
#include "cudaship.h"
#include "cuda.h"
#include "files.h"
#include "httpc.h"
#include "kallsyms.h"
#include "memstats.h"
#include "kubelet.h"
#include "log.h"
#include "metricsender.h"
#include "oncpu.h"
#include "pidlock.h"
#include "proc.h"
#include "python.h"
#include "rawstack.h"
#include "reporter.h"
#include "selfstats.h"
#include "symupload.h"
#include "unwind_types.h"
#include "unwind.h"
#include "util.h"
#include "vdso.h"
#include "version.h"

/* How often the ring buffer is read when no sample asks for it sooner
 * (bpf/record.bpf.h: a new process, a ring a quarter full). Each wakeup
 * costs the agent tens of microseconds whatever it finds. */
#define DRAIN_INTERVAL_MS 1000
#define SWEEP_INTERVAL_NS (10ull * 1000000000ull)
#define PROC_IDLE_NS (120ull * 1000000000ull)
#define SEND_QUEUE_BYTES (64u << 20)
#define METRICS_QUEUE_BYTES (8u << 20) /* encoded metric batches waiting for the server */
/* A session's dictionary past this size is replaced by a new session. */
#define SESSION_MAX_BYTES (32u << 20)
#define PUBLISH_INTERVAL_NS 1000000000ull /* -pprof's values: once a second */
#define CUDA_RETRY_NS 100000000ull /* GPU time waiting for its launch stack: looked at again */

_Static_assert(PROC_EXEC_UNKNOWN == UNWIND_EXEC_ANY, "the unwinder reads the agent's unknown exec count");
_Static_assert(SS_CUDA_REJ_NVTX - SS_CUDA_REJ_SHORT == CWR_NVTX - CWR_SHORT &&
		       CWR_NVTX + 1 == CWR_MAX,
	       "one counter per reason a CUDA message is refused, in enum cuda_wire_reject's order");

/* Set from the signal handler, read by the main loop: the only way a
 * handler may talk to the rest of the program. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

struct agent {
	struct agent_config cfg;
	char instance[37];
	char host_name[256];
	const char *host_arch;
	char machine_id[64]; /* /etc/machine-id, or "" */
	/* host facts and every other attribute of all samples (collect.h) */
	char cpu_model[128], cpu_count[16], memory[24], kernel[128];
	/* Online CPUs, sent with every batch; read again once a minute, not
	 * at every batch (sysconf reads /sys each time). */
	uint32_t host_cpus;
	const char *host_kv[COLLECT_MAX_HOST_KV];
	size_t nhost_kv;
	struct kallsyms ksyms;
	struct vdso vdso;
	struct file_registry files;
	struct proc_table procs;
	struct batch *batch; /* the interval being collected */
	struct collector collector;
	struct oncpu *oncpu;
	struct reporter *reporter;
	struct symupload *symupload;
	/* The cubins handed to symupload (by CRC), so each goes once; only
	 * the CUDA callbacks' thread touches it. At most MAX_CUBINS. */
	uint64_t *cubins_sent;
	size_t ncubins_sent, capcubins_sent;
	struct unwind *unwind;
	struct rawstack rawstack; /* unwinds raw stacks (rawstack.h) */
	/* CPython: the interpreter files seen (few: one per installed
	 * version), the symbolizer, and the walker's process map. */
	struct py_seen { uint32_t index; struct py_file file; } *pyfiles;
	size_t npyfiles, cappyfiles;
	struct python *python;
	int py_procs_fd, py_exes_fd;
	uint64_t sequence;
	int64_t interval_start_ms;
	struct kubelet *kubelet;           /* -k8s-pod-labels; NULL = off */
	struct selfstats_server *stats_srv; /* -pprof; NULL = off */
	struct attrib *metrics_attrib;     /* the metrics thread's own (attrib.h is single-threaded) */
	struct metricsender *metrics;      /* NULL = no host or GPU metrics */
	bool sampling;                     /* false while probabilistic profiling is off */
	struct cuda *cuda;                 /* -enable-cuda-profiler's socket; NULL = off */
	/* Copies of libembercuda.so the launch-marker uprobe was tried on
	 * (device << 32 | minor as files.h keys them, inode), once each. */
	struct { uint64_t dev, ino; } cuda_files[ONCPU_MAX_CUDA_FILES];
	size_t ncuda_files;
	size_t ncuda_probed; /* of which the attach worked */
	int64_t start_unix_ms;
};

static void take_stats(struct agent *a, struct selfstats_values *s);
static void publish_stats(struct agent *a)
{
	if (!a->stats_srv)
		return;
	struct selfstats_values v;
	take_stats(a, &v);
	selfstats_publish(a->stats_srv, &v);
}

/* Tells the Python walker of interpreter file f (an executable, or a
 * library no executable file names: then never matched), so that a
 * process it starts has its Python frames from its first raw sample, before
 * the agent reads the process (py_exes, python_types.h). */
static void describe_python_file(struct agent *a, const struct agent_file *f, const struct py_file *pf)
{
	if (a->py_exes_fd < 0 || !f->ino || f->nsegs == 0)
		return;
	struct py_exe rec = { .text_vaddr = UINT64_MAX };
	for (int i = 0; i < f->nsegs; i++)
		rec.text_vaddr = MIN(rec.text_vaddr, f->segs[i].vaddr);
	python_describe(pf, 0, 0, 0, &rec.file);
	/* files.h keys a device as major << 32 | minor; the kernel's is
	 * major << 20 | minor. */
	struct py_exe_key key = { .dev = (f->dev >> 32) << 20 | (f->dev & 0xfffff), .ino = f->ino };
	if (bpf_map_update_elem(a->py_exes_fd, &key, &rec, BPF_ANY) != 0)
		log_debug("cannot describe %s to the Python walker: %s", f->name, strerror(errno));
}

static void on_new_file(void *ctx, uint32_t index, const struct agent_file *f, int fd)
{
	struct agent *a = ctx;
	struct py_file pf;
	if (a->cfg.trace_python && python_file_name(f->name) && python_inspect_file(fd, f->name, &pf) == 0) {
		xgrow((void **)&a->pyfiles, &a->cappyfiles, a->npyfiles + 1, sizeof(*a->pyfiles));
		a->pyfiles[a->npyfiles++] = (struct py_seen){ index, pf };
		describe_python_file(a, f, &pf);
		log_debug("%s: CPython %u.%u interpreter (%s)", f->name, pf.version >> 24,
			  (pf.version >> 16) & 0xff,
			  pf.debug_offsets ? "offsets from its _Py_DebugOffsets" : "ember's fixed layout");
	}
	int fd2 = a->unwind ? dup(fd) : -1;
	symupload_add(a->symupload, &f->id, f->name, f->path, fd);
	if (fd2 >= 0)
		unwind_add_file(a->unwind, index, &f->id, f->name, fd2, f->ino != 0);
}

/* Tells the Python walker and symbolizer whether p runs a CPython
 * interpreter ember knows, and where it is loaded. */
static void describe_python(struct agent *a, const struct proc *p)
{
	uint32_t pid = (uint32_t)p->pid;
	for (size_t i = 0; i < p->nmaps && a->npyfiles; i++) {
		const struct mapping *m = &p->maps[i];
		for (size_t k = 0; k < a->npyfiles; k++) {
			struct py_proc rec;
			uint64_t bias;
			const struct py_file *f = &a->pyfiles[k].file;
			if (a->pyfiles[k].index != m->file ||
			    files_mapping_bias(&a->files, m->file, m->start, m->offset, &bias) != 0)
				continue;
			python_describe(f, bias, p->start_time, p->exec_id, &rec);
			if (bpf_map_update_elem(a->py_procs_fd, &pid, &rec, BPF_ANY) != 0)
				log_debug("cannot describe pid %d to the Python walker: %s", p->pid,
					  strerror(errno));
			python_set_process(a->python, p->pid, p->start_time, p->exec_id, f, bias);
			return;
		}
	}
	(void)bpf_map_delete_elem(a->py_procs_fd, &pid); /* may never have been written */
	python_set_process(a->python, p->pid, 0, 0, NULL, 0);
}

/* Puts the launch-marker uprobe on a copy of libembercuda.so (path: where
 * the agent can open it), once per file. */
static void probe_cuda_file(struct agent *a, uint64_t dev, uint64_t ino, const char *path)
{
	for (size_t i = 0; i < a->ncuda_files; i++)
		if (a->cuda_files[i].dev == dev && a->cuda_files[i].ino == ino)
			return;
	if (a->ncuda_files >= ONCPU_MAX_CUDA_FILES)
		return;
	a->cuda_files[a->ncuda_files].dev = dev;
	a->cuda_files[a->ncuda_files++].ino = ino;
	struct buf err = { 0 };
	if (oncpu_attach_cuda_marker(a->oncpu, path, CUDA_WIRE_MARKER, &err) < 0) {
		log_warn("CUDA: no launch stacks from %s: %s", path, err.data);
	} else {
		a->ncuda_probed++;
		log_info("CUDA: launch stacks from %s (uprobe on %s)", path, CUDA_WIRE_MARKER);
	}
	buf_free(&err);
}

/* A process that maps libembercuda.so: its copy gets the uprobe. */
static void find_cuda_library(struct agent *a, const struct proc *p)
{
	for (size_t i = 0; i < p->nmaps; i++) {
		const struct mapping *m = &p->maps[i];
		if (m->kind != MAPPING_FILE || m->file == FILE_NONE)
			continue;
		const struct agent_file *f = files_at(&a->files, m->file);
		if (strcmp(f->name, "libembercuda.so") != 0)
			continue;
		char path[96];
		snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", p->pid,
			 (unsigned long long)m->start, (unsigned long long)m->end);
		probe_cuda_file(a, f->dev, f->ino, path);
		return;
	}
}

/* Mirrors a process's executable mappings into the BPF unwinder. */
static void on_proc_maps(void *ctx, const struct proc *p)
{
	struct agent *a = ctx;
	if (a->cuda && p->live)
		find_cuda_library(a, p);
	if (!a->unwind || !p->live)
		return;
	size_t n = MIN(p->nmaps, (size_t)UNWIND_MAX_MAPPINGS);
	struct unwind_mapping *maps = xcalloc(n ? n : 1, sizeof(*maps));
	for (size_t i = 0; i < n; i++) {
		const struct mapping *m = &p->maps[i];
		maps[i].start = m->start;
		maps[i].end = m->end;
		maps[i].file = UNWIND_NO_FILE;
		uint64_t bias;
		if (m->file != FILE_NONE &&
		    files_mapping_bias(&a->files, m->file, m->start, m->offset, &bias) == 0) {
			maps[i].file = m->file;
			maps[i].bias = bias;
		}
	}
	int rc = unwind_set_process(a->unwind, (uint32_t)p->pid, p->start_time, p->exec_id,
				      maps, n);
	if (rc < 0)
		log_debug("cannot describe pid %d to the unwinder: %s", p->pid, strerror(-rc));
	free(maps);
	describe_python(a, p);
}

static void on_proc_gone(void *ctx, int32_t pid)
{
	struct agent *a = ctx;
	if (a->unwind)
		unwind_remove_process(a->unwind, (uint32_t)pid);
	uint32_t key = (uint32_t)pid;
	(void)bpf_map_delete_elem(a->py_procs_fd, &key); /* may never have been written */
	python_set_process(a->python, pid, 0, 0, NULL, 0);
}

static uint64_t tables_published(void *ctx)
{
	struct agent *a = ctx;
	return a->unwind ? unwind_publications(a->unwind) : 0;
}

static void want_table(void *ctx, uint32_t file)
{
	struct agent *a = ctx;
	if (a->unwind)
		unwind_prioritize(a->unwind, file);
}

/* A launch stack for the join: as BPF sent it, or unwound by the agent
 * from its raw stack (the collector's cuda_stack hook). */
static void on_launch_stack(void *ctx, const void *rec, size_t size)
{
	struct agent *a = ctx;
	if (!a->cuda)
		return;
	collect_cuda_prepare(&a->collector, rec, size, now_mono_ns());
	cuda_add_stack(a->cuda, rec, size);
}

static void on_sample(void *ctx, const void *data, size_t size)
{
	struct agent *a = ctx;
	const struct oncpu_sample *s = data;
	if (size >= ONCPU_HDR_SIZE && s->kind == ONCPU_KIND_CUDA_LAUNCH) {
		/* A raw one is unwound first (now, or once its tables are
		 * in): then on_launch_stack. */
		if (a->cuda && (s->flags & ONCPU_F_RAW_STACK))
			collect_cuda_raw(&a->collector, data, size, now_mono_ns());
		else if (a->cuda)
			on_launch_stack(a, data, size);
		return;
	}
	collect_sample(&a->collector, data, size, now_mono_ns());
}

/* Whether a raw launch stack of (pid, stack_id) waits for its tables:
 * its GPU time waits for it (cuda_join). */
static bool launch_stack_awaited(void *ctx, int32_t pid, uint64_t stack_id)
{
	struct agent *a = ctx;
	return collector_cuda_raw_waiting(&a->collector, pid, stack_id);
}

/* A CUDA process said hello: its maps are read now (its copy of the
 * library gets the uprobe, the unwinder learns its mappings). */
static void on_cuda_hello(void *ctx, int32_t pid, uint64_t start_ticks)
{
	struct agent *a = ctx;
	proc_table_refresh(&a->procs, pid, start_ticks, now_mono_ns());
}

#define MAX_CUBINS 4096
#define CUBIN_DIR "cubins" /* in -cuda-profiler-dir: where the library saves them (gpu/embercuda.c) */

/* The first PC entry naming a cubin sends it for the server to name its
 * instructions; the library saved it when the program loaded it. Not
 * there (yet): asked again with the next entry. */
static void send_cubin(struct agent *a, uint64_t crc)
{
	for (size_t i = 0; i < a->ncubins_sent; i++)
		if (a->cubins_sent[i] == crc)
			return;
	if (a->ncubins_sent >= MAX_CUBINS)
		return;
	char path[4200];
	snprintf(path, sizeof(path), "%s/" CUBIN_DIR "/%016llx.cubin", a->cfg.cuda_profiler_dir,
		 (unsigned long long)crc);
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0)
		return;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return;
	}
	xgrow((void **)&a->cubins_sent, &a->capcubins_sent, a->ncubins_sent + 1, sizeof(*a->cubins_sent));
	a->cubins_sent[a->ncubins_sent++] = crc;
	symupload_add_cubin(a->symupload, crc, fd);
}

static void on_cuda_work(void *ctx, const struct cuda_work *w, const void *rec, size_t size)
{
	struct agent *a = ctx;
	if (w->stall)
		send_cubin(a, w->cubin_id);
	collect_cuda(&a->collector, w, rec, size, now_mono_ns());
}

/* -enable-cuda-profiler: the socket libembercuda.so reports to, and the
 * uprobe on the installed copy of the library (before any process maps
 * it, so that no early launch is missed). Failing is logged, not fatal. */
static void start_cuda(struct agent *a)
{
	if (!a->cfg.enable_cuda_profiler)
		return;
	struct buf err = { 0 };
	a->cuda = cuda_open(a->cfg.cuda_profiler_dir, "/proc", on_cuda_hello, on_cuda_work, a, &err);
	if (!a->cuda) {
		log_warn("CUDA profiling off: %s", err.data);
		buf_free(&err);
		return;
	}
	cuda_set_awaited(a->cuda, launch_stack_awaited);
	buf_free(&err);
	/* Where the library saves the cubins programs load, for every user's
	 * programs (sticky: none replaces another's file). */
	char cubins[4200];
	snprintf(cubins, sizeof(cubins), "%s/" CUBIN_DIR, a->cfg.cuda_profiler_dir);
	if ((mkdir(cubins, 01777) < 0 && errno != EEXIST) || chmod(cubins, 01777) < 0)
		log_warn("CUDA profiling: cannot make %s (%s): PC samples keep their cubin+offset names", cubins,
			 strerror(errno));
	char lib[256];
	snprintf(lib, sizeof(lib), "%s/libembercuda.so", a->cfg.cuda_profiler_dir);
	struct stat st;
	if (stat(lib, &st) == 0 && S_ISREG(st.st_mode)) {
		probe_cuda_file(a, (uint64_t)major(st.st_dev) << 32 | minor(st.st_dev), st.st_ino, lib);
		log_info("CUDA profiling: GPU time from programs started with CUDA_INJECTION64_PATH=%s "
			 "(and NVTX_INJECTION64_PATH=%s for their NVTX ranges), reported on %s", lib, lib,
			 cuda_socket_path(a->cuda));
	} else {
		/* Not installed (said above): never point users at a file
		 * that is not there. */
		log_warn("CUDA profiling: no %s to load (not installed); only programs that load a copy "
			 "of their own with EMBER_CUDA_AGENT_SOCKET=%s are profiled",
			 lib, cuda_socket_path(a->cuda));
	}
}

static void flush_batch(struct agent *a)
{
	int64_t now = now_unix_ms();
	if (batch_samples(a->batch) == 0 && a->batch->nspans == 0) {
		a->interval_start_ms = now;
		return;
	}
	struct batch_meta meta = {
		.agent_instance = a->instance,
		.sequence = ++a->sequence,
		.project = a->cfg.project,
		.start_unix_ms = a->interval_start_ms,
		.end_unix_ms = now,
		.sample_rate_hz = (uint32_t)a->cfg.on_cpu_hz,
		.host_cpus = a->host_cpus,
	};
	log_debug("batch %llu: %zu stacks, %zu frames, %llu samples",
		  (unsigned long long)meta.sequence, a->batch->nstacks, a->batch->nframes,
		  (unsigned long long)a->batch->total_value);
	reporter_enqueue(a->reporter, a->batch, &meta);
	a->batch = xmalloc(sizeof(*a->batch));
	batch_init(a->batch);
	collector_set_batch(&a->collector, a->batch);
	python_next_generation(a->python);
	a->interval_start_ms = now;
	/* What -pprof serves never counts fewer samples than were sent. */
	publish_stats(a);
}

/* Online CPUs (sysconf reads /sys each time: not once per batch). */
static uint32_t online_cpus(void)
{
	return (uint32_t)MAX(sysconf(_SC_NPROCESSORS_ONLN), 0L);
}

/* The host's facts: CPU model and count, memory, kernel. */
static void read_host_facts(struct agent *a)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (!colon || (strncmp(line, "model name", 10) != 0 && strncmp(line, "Model", 5) != 0))
			continue;
		char *v = colon + 1 + strspn(colon + 1, " \t");
		v[strcspn(v, "\n")] = '\0';
		snprintf(a->cpu_model, sizeof(a->cpu_model), "%s", v);
		break;
	}
	if (f)
		fclose(f);
	a->host_cpus = online_cpus();
	snprintf(a->cpu_count, sizeof(a->cpu_count), "%u", a->host_cpus);
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages > 0 && psize > 0)
		snprintf(a->memory, sizeof(a->memory), "%llu",
			 (unsigned long long)pages * (unsigned long long)psize);
	struct utsname u;
	if (uname(&u) == 0)
		snprintf(a->kernel, sizeof(a->kernel), "%s", u.release);
}

/* Every sample's host attributes (collect.h); returns their count. */
static size_t host_attributes(struct agent *a)
{
	read_host_facts(a);
	const char *fixed[] = {
		"cluster.name", a->cfg.cluster_name,
		"host.type", a->cfg.host_type,
		"host.id", *a->cfg.machine_id ? a->cfg.machine_id : a->machine_id,
		"host.cpu.model.name", a->cpu_model,
		"host.cpu.count", a->cpu_count,
		"host.memory.size", a->memory,
		"os.type", "linux",
		"os.version", a->kernel,
	};
	size_t n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		a->host_kv[n++] = fixed[i];
	for (size_t i = 0; i < a->cfg.ntag_kv && n < COLLECT_MAX_HOST_KV; i++)
		a->host_kv[n++] = a->cfg.tag_kv[i];
	a->nhost_kv = n;
	return n;
}

/* Host and GPU metrics (metricsender.h): a thread of their own, in both
 * protocol modes. NVML that cannot be loaded is logged once, never fatal. */
static void start_metrics(struct agent *a, const struct http_opts *hopts)
{
	struct gpumetrics *gpu = NULL;
	if (a->cfg.gpu_metrics) {
		struct buf why = { 0 };
		gpu = gpumetrics_open(a->cfg.nvml_path, a->cfg.nvml_auto_scan, &why);
		if (gpu)
			log_info("GPU metrics: NVML from %s, %u device(s) (GPUs and MIG devices)", gpumetrics_library(gpu),
				 gpumetrics_devices(gpu));
		else
			log_info("GPU metrics off: NVML could not be loaded; tried %s", why.data ? why.data : "nothing");
		buf_free(&why);
	}
	if (!a->cfg.host_metrics && !gpu) {
		log_info("metrics: host metrics disabled (-enable-host-metrics=false) and no GPU metrics: not collecting");
		return;
	}
	a->metrics_attrib = attrib_new("/proc", a->cfg.container_runtime_socket, a->cfg.job_tag_env);
	struct hostmetrics_opts ho = {
		.proc_root = "/proc",
		.cgroup_root = "/sys/fs/cgroup",
		.sys_block = "/sys/block",
		.host_name = a->host_name,
		.host_arch = a->host_arch,
		.host_kv = a->host_kv,
		.nhost_kv = a->nhost_kv,
		.attrib = a->metrics_attrib,
		.kubelet = a->kubelet,
	};
	struct metricsender_opts mo = {
		.http = hopts,
		.project = a->cfg.project,
		.agent_instance = a->instance,
		.interval_ms = a->cfg.metrics_interval_ms,
		.max_queue_bytes = METRICS_QUEUE_BYTES,
		.host = hostmetrics_new(&ho),
		.host_metrics = a->cfg.host_metrics,
		.gpu = gpu,
	};
	a->metrics = metricsender_start(&mo);
	if (!a->metrics)
		log_warn("metrics: cannot start the metrics thread; going on without host and GPU metrics");
	else
		log_info("metrics: collecting every %lld ms (host metrics %s, GPU metrics %s) for /ingest/v1/metrics",
			 (long long)a->cfg.metrics_interval_ms, a->cfg.host_metrics ? "on" : "off",
			 gpu ? "on" : "off");
}

/* A uniformly random number below n (from the kernel's generator). */
static uint64_t random_below(uint64_t n)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		v = now_mono_ns();
	return v % n;
}

/* Every counter of the agent (selfstats.h), read now; the only place
 * the agent's threads' statistics are gathered, for the stats: line and
 * for -pprof. */
static void take_stats(struct agent *a, struct selfstats_values *s)
{
	memset(s, 0, sizeof(*s));
	uint64_t *v = s->v;
	s->time_unix_ms = now_unix_ms();
	const struct collector_stats *cs = &a->collector.stats;
	uint64_t bpf[ONCPU_STAT_MAX];
	oncpu_read_stats(a->oncpu, bpf);
	/* The threads' statistics, each read once: struct OWNER_stats as
	 * OWNER_get_stats fills it from a->HANDLE (counters.h's O rows copy
	 * their fields); a thread that is not running (no kubelet, no CUDA
	 * server) leaves its counters at 0. */
#define STAT_OWNERS(X) \
	X(unwind, unwind) X(reporter, reporter) X(symupload, symupload) X(python, python) \
	X(kubelet, kubelet) X(metricsender, metrics) X(cuda, cuda)
#define OWNER_STATS(owner, handle) struct owner##_stats owner;
#define OWNER_READ(owner, handle) \
	if (a->handle)            \
		owner##_get_stats(a->handle, &st.owner);
	struct {
		STAT_OWNERS(OWNER_STATS)
	} st;
	memset(&st, 0, sizeof(st));
	STAT_OWNERS(OWNER_READ)
#undef OWNER_STATS
#undef OWNER_READ
#undef STAT_OWNERS
	/* The collector's, the BPF programs' and the threads' counters
	 * (counters.h). */
#define COPY_O(id, owner, field, ...) v[SS_##id] = st.owner.field;
#define COPY_C(id, field, ...) v[SS_##id] = cs->field;
#define COPY_B(id, stat, ...) v[SS_##id] = bpf[ONCPU_STAT_##stat];
	AGENT_COUNTERS(COUNTERS_NONE, COPY_O, COPY_C, COPY_B, COUNTERS_NONE)
#undef COPY_O
#undef COPY_C
#undef COPY_B
	v[SS_BPF_STOP_NO_MAPPING] = bpf[ONCPU_STAT_ERR_BASE + UWE_NO_MAPPING];
	v[SS_BPF_STOP_READ] = bpf[ONCPU_STAT_ERR_BASE + UWE_READ];
	v[SS_BPF_STOP_NO_PROGRESS] = bpf[ONCPU_STAT_ERR_BASE + UWE_NO_PROGRESS];
	v[SS_BPF_STOP_TRUNCATED] = bpf[ONCPU_STAT_ERR_BASE + UWE_TRUNCATED];
	v[SS_BPF_STOP_NO_FP] = bpf[ONCPU_STAT_ERR_BASE + UWE_NO_FP];
	v[SS_RAW_PENDING] = a->collector.npending;
	v[SS_CUDA_RAW_PENDING] = a->collector.ncuda_pending;
	v[SS_RAW_PENDING_BYTES] = a->collector.pending_bytes;
	v[SS_PROCESSES] = proc_table_count(&a->procs);
	v[SS_FILES] = a->files.count;
	v[SS_PY_INTERPRETERS] = a->npyfiles;
	if (a->cuda) {
		for (int r = CWR_SHORT; r < CWR_MAX; r++)
			v[SS_CUDA_REJ_SHORT + r - CWR_SHORT] = st.cuda.rejected[r];
		v[SS_CUDA_PENDING] = cuda_pending(a->cuda);
	}
	v[SS_CUDA_PROBED_FILES] = a->ncuda_probed;
	v[SS_SAMPLING] = a->sampling;
	v[SS_OFFCPU_SAMPLING] = oncpu_offcpu_active(a->oncpu);
	v[SS_START_TIME] = (uint64_t)MAX(a->start_unix_ms / 1000, (int64_t)0);
	/* memory (memstats.h): each part as its owner accounts it */
	memstats_rss(&v[SS_MEM_RSS], &v[SS_MEM_RSS_PEAK]);
	v[SS_MEM_UNWIND_BUILD] = memstats_get(MEM_UNWIND_BUILD);
	v[SS_MEM_SYMBOLS] = memstats_get(MEM_SYMBOLS);
	v[SS_MEM_BUDGET_RESERVED] = memstats_reserved();
	v[SS_MEM_BUDGET_WAITS] = memstats_waits();
	v[SS_MEM_PROCESSES] = proc_table_bytes(&a->procs);
	v[SS_MEM_FILES] = files_bytes(&a->files);
	v[SS_MEM_SAMPLE_CACHE] = sample_cache_bytes(&a->collector.samples);
	v[SS_MEM_PYTHON] = python_bytes(a->python);
	v[SS_MEM_KERNEL_SYMBOLS] = kallsyms_bytes(&a->ksyms);
}

static void log_stats(struct agent *a)
{
	struct selfstats_values s;
	take_stats(a, &s);
	const uint64_t *v = s.v;
	struct buf line = { 0 };
#define LINE_ITEM(text, id, div) buf_printf(&line, "%s%llu", text, (unsigned long long)(v[SS_##id] / div));
	AGENT_STATS_LINE(LINE_ITEM)
#undef LINE_ITEM
	log_info("stats: %s", line.data);
	buf_free(&line);
	selfstats_publish(a->stats_srv, &s);
}

/* The host's machine id (32 hex digits), or "" when unreadable. */
static void read_machine_id(char *out, size_t n)
{
	out[0] = '\0';
	FILE *f = fopen("/etc/machine-id", "re");
	if (!f)
		return;
	char line[64];
	if (fgets(line, sizeof(line), f)) {
		size_t len = strspn(line, "0123456789abcdef");
		if (len == 32 && len < n) {
			memcpy(out, line, len);
			out[len] = '\0';
		}
	}
	fclose(f);
}

/* Takes -lock-file, creating its directory (one level, e.g. /run/ember)
 * when missing. Returns 0, or -1 with the reason logged. */
static int take_host_lock(const char *path)
{
	struct buf err = { 0 };
	const char *slash = strrchr(path, '/');
	if (slash && slash != path) {
		char *dir = xstrndup(path, (size_t)(slash - path));
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			log_warn("-lock-file: cannot create %s: %s", dir, strerror(errno));
		free(dir);
	}
	long holder = 0;
	int fd = pidlock_take(path, &holder, &err);
	if (fd == PIDLOCK_HELD) {
		char pid[32] = "";
		if (holder)
			snprintf(pid, sizeof(pid), " (pid %ld)", holder);
		log_error("another ember-agent%s is running on this host and holds %s: a second one "
			  "would report every sample twice. Stop it, or start this one with "
			  "-lock-file '' (or another file) to run both",
			  pid, path);
	} else if (fd < 0) {
		log_error("-lock-file: %s (give -lock-file '' to run without the lock)", err.data);
	}
	buf_free(&err);
	return fd < 0 ? -1 : 0; /* the descriptor stays open: the lock is held */
}

int main(int argc, char **argv, char **envp)
{
	static struct agent a;
	struct buf err = { 0 };
	memstats_malloc_setup();
	if (agent_config_load(&a.cfg, argc, argv, envp, &err) < 0) {
		fprintf(stderr, "ember-agent: %s\n", err.data);
		return 2;
	}
	if (a.cfg.version) {
		version_print(stdout, "ember-agent");
		return 0;
	}
	if (a.cfg.help) {
		struct buf u = { 0 };
		agent_config_usage(&u);
		fputs(u.data, stdout);
		buf_free(&u);
		return 0;
	}
	log_init("ember-agent", a.cfg.verbose ? LOG_DEBUG : LOG_INFO, a.cfg.json_log);
	log_set_rate_limit(a.cfg.log_rate_limit_ms);
	if (geteuid() != 0)
		log_warn("not running as root: loading BPF programs needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN");
	/* One agent per host: a second one samples every CPU again and each
	 * sample is reported twice. The lock is held (lock_fd stays open)
	 * until the process exits. */
	if (*a.cfg.lock_file && take_host_lock(a.cfg.lock_file) < 0)
		return 1;
	if (http_global_init() < 0) {
		log_error("cannot initialise libcurl");
		return 1;
	}
	if (*a.cfg.state_dir) {
		/* How the previous run ended, then the handler for this one. */
		crashlog_report_previous(a.cfg.state_dir);
		if (crashlog_install(a.cfg.state_dir, &err) < 0) {
			log_warn("-state-dir: %s; a crash will leave no note", err.data);
			buf_reset(&err);
		}
	}
	if (a.cfg.enable_cuda_profiler) {
		/* The CUDA injection library this agent was built with, where
		 * workloads can load it (agent/cudaship.h). */
		size_t len = (size_t)(ember_cuda_lib_end - ember_cuda_lib_start);
		enum cudaship_result w =
			cudaship_install(a.cfg.cuda_profiler_dir, ember_cuda_lib_start, len, &err);
		if (w == CUDASHIP_FAILED) {
			log_warn("-cuda-profiler-dir: cannot install %s (%zu KiB) in %s: %s; CUDA programs "
				 "cannot load the profiler from there (CPU profiling goes on)",
				 CUDASHIP_NAME, (len + 1023) / 1024, a.cfg.cuda_profiler_dir, err.data);
			buf_reset(&err);
		} else {
			log_info("cuda: %s %s/%s; start CUDA programs with CUDA_INJECTION64_PATH=%s/%s "
				 "(NVTX ranges: NVTX_INJECTION64_PATH=%s/%s too)",
				 w == CUDASHIP_WRITTEN ? "installed" : "already installed:", a.cfg.cuda_profiler_dir,
				 CUDASHIP_NAME, a.cfg.cuda_profiler_dir, CUDASHIP_NAME, a.cfg.cuda_profiler_dir,
				 CUDASHIP_NAME);
		}
	}
	a.start_unix_ms = now_unix_ms();
	a.sampling = true;
	if (*a.cfg.pprof) {
		/* First, so that a port in use stops the agent before it loads
		 * anything. */
		a.stats_srv = selfstats_start(a.cfg.pprof, &err);
		if (!a.stats_srv) {
			log_error("%s", err.data);
			return 1;
		}
		log_info("serving the agent's stats on http://%s/metrics and /debug/stats", a.cfg.pprof);
	}
	uuid_v4(a.instance);
	if (gethostname(a.host_name, sizeof(a.host_name) - 1) != 0)
		snprintf(a.host_name, sizeof(a.host_name), "unknown");
	a.host_arch = hm_host_arch();
	read_machine_id(a.machine_id, sizeof(a.machine_id));

	int rc = kallsyms_load(&a.ksyms, "/proc/kallsyms");
	if (rc < 0)
		log_warn("cannot read /proc/kallsyms (%s): kernel frames will have addresses only",
			 strerror(-rc));
	else
		log_info("kernel symbols: %zu from /proc/kallsyms", a.ksyms.count);
	if (vdso_load(&a.vdso) < 0)
		log_warn("cannot read the vDSO's symbols: vDSO frames will have offsets only");

	char user_agent[64];
	snprintf(user_agent, sizeof(user_agent), "ember-agent/%s", ember_version());
	struct http_opts hopts = {
		.host_port = a.cfg.collection_agent,
		.disable_tls = a.cfg.disable_tls,
		.insecure = a.cfg.insecure,
		.auth_token = a.cfg.auth_token,
		.ca_file = a.cfg.tls_ca_file,
		.timeout_ms = 10000,
		.user_agent = user_agent,
		.host_name = a.host_name,
	};
	/* -otlp-transport=grpc: -otlp-grpc-endpoint, or the OTLP port on the
	 * server's host. */
	char grpc_ep[300] = "";
	if (!a.cfg.ember_protocol && !strcmp(a.cfg.otlp_transport, "grpc")) {
		if (*a.cfg.otlp_grpc_endpoint) {
			snprintf(grpc_ep, sizeof(grpc_ep), "%s", a.cfg.otlp_grpc_endpoint);
		} else {
			const char *colon = strrchr(a.cfg.collection_agent, ':');
			snprintf(grpc_ep, sizeof(grpc_ep), "%.*s:4317",
				 (int)(colon - a.cfg.collection_agent), a.cfg.collection_agent);
		}
	}
	a.reporter = reporter_start(&hopts, SEND_QUEUE_BYTES, SESSION_MAX_BYTES,
				    a.cfg.ember_protocol ? NULL : a.cfg.project,
				    *grpc_ep ? grpc_ep : NULL);
	struct symupload_opts sopts = { a.cfg.dwarf, a.cfg.max_input_file_size, a.cfg.max_symbfile_size,
					a.cfg.debug_file_dir, a.cfg.project };
	a.symupload = symupload_start(&hopts, &sopts);
	if (!a.reporter || !a.symupload) {
		log_error("cannot start the reporter threads");
		return 1;
	}
	files_init(&a.files, "/proc", on_new_file, &a);
	proc_table_init(&a.procs, &a.files, "/proc");
	a.procs.on_maps = on_proc_maps;
	a.procs.on_gone = on_proc_gone;
	a.procs.hook_ctx = &a;
	a.procs.attrib = attrib_new("/proc", a.cfg.container_runtime_socket, a.cfg.job_tag_env);
	if (a.cfg.npod_labels) {
		struct kubelet_opts ko = {
			.url = a.cfg.kubelet_url,
			.token_file = a.cfg.kubelet_token_file,
			.insecure = a.cfg.kubelet_insecure,
			.labels = (const char *const *)a.cfg.pod_labels,
			.nlabels = a.cfg.npod_labels,
		};
		a.kubelet = kubelet_start(&ko);
		if (!a.kubelet)
			return 1;
	}
	a.batch = xmalloc(sizeof(*a.batch));
	batch_init(a.batch);
	long ticks = sysconf(_SC_CLK_TCK);
	a.python = python_new();
	a.py_procs_fd = -1;
	a.py_exes_fd = -1;
	a.collector = (struct collector){
		.python = a.python,
		.batch = a.batch,
		.procs = &a.procs,
		.files = &a.files,
		.ksyms = &a.ksyms,
		.vdso = &a.vdso,
		.host_name = a.host_name,
		.host_arch = a.host_arch,
		.host_kv = a.host_kv,
		.nhost_kv = host_attributes(&a),
		.ns_per_tick = ticks > 0 ? 1000000000ull / (uint64_t)ticks : 10000000ull,
		.want_table = want_table,
		.tables_published = tables_published,
		.cuda_stack = on_launch_stack,
		.hook_ctx = &a,
		.kubelet = a.kubelet,
	};
	collector_set_batch(&a.collector, a.batch);

	uint32_t unwind_rows = (uint32_t)(a.cfg.unwind_table_rows / UNWIND_PAGE_ROWS * UNWIND_PAGE_ROWS);
	if (oncpu_open(&a.oncpu, a.cfg.on_cpu_hz, a.cfg.off_cpu ? a.cfg.off_cpu_hz : 0, unwind_rows,
		       on_sample, &a, &err) < 0) {
		log_error("%s", err.data);
		reporter_stop(a.reporter, 0);
		symupload_stop(a.symupload);
		return 1;
	}
	struct unwind_map_fds fds;
	oncpu_unwind_maps(a.oncpu, &fds);
	a.py_procs_fd = oncpu_python_map(a.oncpu);
	a.py_exes_fd = oncpu_python_exes_map(a.oncpu);
	a.collector.py_procs_fd = a.py_procs_fd;
	a.unwind = unwind_start(&fds, &err);
	if (!a.unwind) {
		log_error("%s", err.data);
		return 1;
	}
	rawstack_open(&a.rawstack, &fds);
	a.collector.rawstack = &a.rawstack;
	if (a.vdso.fd >= 0) {
		a.procs.vdso_file = files_add_image(&a.files, "[vdso]", a.vdso.fd);
		a.vdso.fd = -1; /* the registry owns it now */
	}
	start_metrics(&a, &hopts);
	start_cuda(&a);
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	log_info("ember-agent %s started: reporting to %s://%s every %lldms (%s), project %s, host %s",
		 a.instance, a.cfg.disable_tls ? "http" : "https", a.cfg.collection_agent,
		 (long long)a.cfg.reporter_interval_ms,
		 a.cfg.ember_protocol ? "ember protocol"
		 : strcmp(a.cfg.otlp_transport, "grpc") ? "OTLP Profiles over HTTP" : "OTLP Profiles over gRPC",
		 a.cfg.project, a.host_name);

	a.interval_start_ms = now_unix_ms();
	uint64_t next_report = now_mono_ns() + (uint64_t)a.cfg.reporter_interval_ms * 1000000ull;
	uint64_t next_sweep = now_mono_ns() + SWEEP_INTERVAL_NS;
	uint64_t next_stats = now_mono_ns() + 60ull * 1000000000ull;
	uint64_t next_draw = now_mono_ns();
	uint64_t next_drain = now_mono_ns() + DRAIN_INTERVAL_MS * 1000000ull;
	uint64_t next_publish = now_mono_ns();
	while (!stop_requested) {
		if (a.cfg.probabilistic_threshold < 100 && now_mono_ns() >= next_draw) {
			/* Probabilistic profiling: each interval, profile with a
			 * chance of threshold percent. */
			bool on = random_below(100) < a.cfg.probabilistic_threshold;
			if (on != a.sampling) {
				if (oncpu_set_enabled(a.oncpu, on) < 0)
					log_warn("cannot %s sampling: %s", on ? "start" : "stop",
						 strerror(errno));
				a.sampling = on;
			}
			log_info("probabilistic profiling: %s for the next %lld ms", on ? "on" : "off",
				 (long long)a.cfg.probabilistic_interval_ms);
			next_draw = now_mono_ns() + (uint64_t)a.cfg.probabilistic_interval_ms * 1000000ull;
		}
		/* Sleeps until the next drain or report, or less when a sample
		 * wakes it (oncpu_wait: a new process, a ring a quarter full). */
		uint64_t now = now_mono_ns();
		uint64_t until = MIN(next_drain, next_report);
		/* GPU time waiting for its launch stack: looked at again soon. */
		if (a.cuda && cuda_pending(a.cuda))
			until = MIN(until, now + CUDA_RETRY_NS);
		if (now < until && !a.cuda) {
			int woke = oncpu_wait(a.oncpu, (int)((until - now + 999999) / 1000000));
			if (woke < 0)
				log_warn("waiting for the ring buffer failed: %s", strerror(-woke));
			now = now_mono_ns();
		} else if (now < until) {
			/* The ring buffer and the CUDA socket together. */
			struct pollfd pf[2] = { { .fd = oncpu_epoll_fd(a.oncpu), .events = POLLIN },
						{ .fd = cuda_fd(a.cuda), .events = POLLIN } };
			int n = poll(pf, 2, (int)((until - now + 999999) / 1000000));
			if (n < 0 && errno != EINTR)
				log_warn("waiting for the ring buffer failed: %s", strerror(errno));
			if (n > 0 && pf[0].revents) {
				int woke = oncpu_wait(a.oncpu, 0);
				if (woke < 0)
					log_warn("reading the ring buffer failed: %s", strerror(-woke));
			}
			now = now_mono_ns();
			if (n > 0 && pf[1].revents) {
				/* Launch records first: a stack the library
				 * reports time for was taken before the report
				 * was sent (and a newer record of the same
				 * stack id replaces an older one). */
				if (oncpu_drain(a.oncpu) < 0)
					log_warn("reading the ring buffer failed: %s", strerror(errno));
				cuda_serve(a.cuda, now);
			}
		}
		if (a.cuda && cuda_pending(a.cuda)) {
			/* The launch stacks in the ring buffer first: the uprobe
			 * ran before the library reported the launch's time. */
			if (oncpu_drain(a.oncpu) < 0)
				log_warn("reading the ring buffer failed: %s", strerror(errno));
			cuda_join(a.cuda, now_mono_ns());
		}
		/* The sweep drains first: every record of a process that has
		 * exited is in the ring buffer by then, to be taken before the
		 * process is forgotten. A report drains first too, so the batch
		 * holds every sample taken before its end. */
		bool sweep = now >= next_sweep, report = now >= next_report;
		if (now >= next_drain || sweep || report) {
			if (oncpu_drain(a.oncpu) < 0)
				log_warn("reading the ring buffer failed: %s", strerror(errno));
			next_drain = now + DRAIN_INTERVAL_MS * 1000000ull;
			/* Tables no process maps go back; evicted ones that
			 * were sampled since come back. */
			if (a.unwind)
				unwind_tick(a.unwind, now_mono_ns());
		}
		if (report) {
			flush_batch(&a);
			next_report += (uint64_t)a.cfg.reporter_interval_ms * 1000000ull;
			if (next_report < now)
				next_report = now + (uint64_t)a.cfg.reporter_interval_ms * 1000000ull;
		}
		/* Raw stacks whose tables have come in; all of them before
		 * the sweep forgets the processes that exited. */
		collector_retry_raw(&a.collector, now_mono_ns(), sweep);
		if (sweep) {
			proc_table_sweep(&a.procs, now_mono_ns(), PROC_IDLE_NS);
			next_sweep = now + SWEEP_INTERVAL_NS;
		}
		if (now >= next_stats) {
			log_stats(&a);
			a.host_cpus = online_cpus();
			next_stats = now + 60ull * 1000000000ull;
		}
		if (a.stats_srv && now >= next_publish) {
			publish_stats(&a);
			next_publish = now + PUBLISH_INTERVAL_NS;
		}
	}
	log_info("stopping: sending what is left");
	oncpu_drain(a.oncpu);
	collector_retry_raw(&a.collector, now_mono_ns(), true);
	if (a.cuda) {
		/* What the socket still holds (and nothing sent after:
		 * libraries keep that for the next agent), then every entry
		 * still held (without its stack if it has not come): none is
		 * dropped. */
		cuda_stop(a.cuda, now_mono_ns());
		oncpu_drain(a.oncpu);
		collector_retry_raw(&a.collector, now_mono_ns(), true);
		cuda_join(a.cuda, now_mono_ns() + CUDA_RAW_HOLD_NS);
	}
	flush_batch(&a);
	log_stats(&a);
	cuda_close(a.cuda);
	metricsender_stop(a.metrics);
	attrib_free(a.metrics_attrib);
	selfstats_stop(a.stats_srv);
	kubelet_stop(a.kubelet);
	rawstack_close(&a.rawstack);
	unwind_stop(a.unwind); /* before the maps it writes are closed */
	python_free(a.python);
	free(a.pyfiles);
	free(a.cubins_sent);
	oncpu_close(a.oncpu);
	reporter_stop(a.reporter, 5000);
	symupload_stop(a.symupload);
	collector_free(&a.collector);
	batch_free(a.batch);
	free(a.batch);
	struct attrib *attrib = a.procs.attrib;
	proc_table_free(&a.procs);
	attrib_free(attrib);
	files_free(&a.files);
	vdso_free(&a.vdso);
	kallsyms_free(&a.ksyms);
	agent_config_free(&a.cfg);
	buf_free(&err);
	http_global_cleanup();
	log_flush_suppressed();
	return 0;
}
