/* oncpu.c - see oncpu.h. */
#include "oncpu.h"

#include <errno.h>
#include <stdbool.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "cpulist.h"
#include "log.h"
#include "offcpu.h"
#include "ember.skel.h"
#include "util.h"

#define MAX_CPUS CPULIST_MAX_ID
struct oncpu {
	struct ember_bpf *skel;
	struct ring_buffer *rb;
	int *fds;
	struct bpf_link **links;
	int ncpu;
	oncpu_sample_fn fn;
	void *ctx;
	bool has_task_pt_regs;
	uint64_t offcpu_hz;            /* 0: off-CPU sampling off or unavailable */
	struct offcpu off;             /* its hooks (offcpu.h) */
	bool cuda_ok;                  /* cuda_progs filled: the marker uprobe may be attached */
	struct bpf_link *cuda_links[ONCPU_MAX_CUDA_FILES]; /* one per copy of the library */
	int ncuda_links;
};

static int on_event(void *ctx, void *data, size_t size)
{
	struct oncpu *o = ctx;
	o->fn(o->ctx, data, size);
	return 0;
}

static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && !log_enabled(LOG_DEBUG))
		return 0;
	struct buf b = { 0 };
	buf_vprintf(&b, fmt, ap);
	while (b.len && b.data[b.len - 1] == '\n')
		b.data[--b.len] = '\0';
	log_msg(level == LIBBPF_WARN ? LOG_WARN : LOG_DEBUG, "libbpf: %s", b.data);
	buf_free(&b);
	return 0;
}

static size_t next_pow2(size_t v)
{
	size_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

/* Opens the skeleton and loads it, with the off-CPU programs and maps
 * when offcpu_hz > 0 and without them otherwise. Returns the loaded
 * skeleton, or NULL with the reason in err. */
static struct ember_bpf *load_skel(struct oncpu *o, size_t rb, uint32_t unwind_entries, int ncpu,
				   uint64_t offcpu_hz, struct buf *err)
{
	struct ember_bpf *skel = ember_bpf__open();
	if (!skel) {
		buf_printf(err, "opening the BPF object failed: %s", strerror(errno));
		return NULL;
	}
	bpf_map__set_max_entries(skel->maps.samples, (uint32_t)rb);
	bpf_map__set_max_entries(skel->maps.unwind_entries, (uint32_t)unwind_entries);
	long tck = sysconf(_SC_CLK_TCK);
	skel->rodata->ns_per_tick = tck > 0 ? 1000000000ull / (uint64_t)tck : 10000000ull;
	skel->rodata->has_task_pt_regs = o->has_task_pt_regs;
	skel->rodata->ring_wake_bytes = rb / 4;
	offcpu_configure(skel, offcpu_hz, ncpu);
	if (ember_bpf__load(skel) != 0) {
		buf_printf(err, "loading the BPF program failed (%s)", strerror(errno));
		ember_bpf__destroy(skel);
		return NULL;
	}
	return skel;
}

/* Fills a tail-call array: PROG_UNWIND, PROG_PYTHON. */
static int install_tail_calls(struct bpf_map *map, struct bpf_program *unwind,
			      struct bpf_program *python, struct buf *err)
{
	int progs[2] = { bpf_program__fd(unwind), bpf_program__fd(python) };
	for (uint32_t key = 0; key < 2; key++)
		if (bpf_map_update_elem(bpf_map__fd(map), &key, &progs[key], BPF_ANY) != 0) {
			buf_printf(err, "installing the tail calls of %s failed: %s", bpf_map__name(map),
				   strerror(errno));
			return -1;
		}
	return 0;
}

int oncpu_open(struct oncpu **out, uint64_t hz, uint64_t offcpu_hz, uint32_t unwind_entries,
	       oncpu_sample_fn fn, void *ctx, struct buf *err)
{
	libbpf_set_print(libbpf_log);
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
		buf_puts(err, "this kernel exposes no BTF (/sys/kernel/btf/vmlinux); ember-agent needs Linux >= 5.10 with CONFIG_DEBUG_INFO_BTF=y");
		return -1;
	}
	if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL) != 1) {
		buf_puts(err, "this kernel has no BPF ring buffer (Linux >= 5.8 needed)");
		return -1;
	}
	char *online;
	int cpus[MAX_CPUS];
	if (read_file("/sys/devices/system/cpu/online", 65536, &online, NULL) < 0) {
		buf_puts(err, "cannot read /sys/devices/system/cpu/online");
		return -1;
	}
	int ncpu = parse_cpu_list(online, cpus, MAX_CPUS);
	free(online);
	if (ncpu <= 0) {
		buf_puts(err, "cannot parse /sys/devices/system/cpu/online");
		return -1;
	}

	struct oncpu *o = xcalloc(1, sizeof(*o));
	o->fn = fn;
	o->ctx = ctx;
	o->has_task_pt_regs =
		libbpf_probe_bpf_helper(BPF_PROG_TYPE_PERF_EVENT, BPF_FUNC_task_pt_regs, NULL) == 1;
	/* One second of worst-case records (both stacks full) per CPU; the
	 * agent drains every second, and sooner when a sample finds the ring
	 * a quarter full (ring_wake_bytes). Off-CPU records come at about
	 * offcpu_hz per blocked thread: the same allowance per CPU again.
	 * 1 MiB at least: room for the raw records (16.6 KiB each) of a new
	 * process's first samples and first burst of CUDA launches, which
	 * BPF sends only while the ring is a quarter (launches: half) full. */
	size_t rb = next_pow2(MAX((size_t)(hz + offcpu_hz) * (size_t)ncpu * sizeof(struct oncpu_sample),
				  (size_t)1 << 20));
	rb = MIN(rb, (size_t)256 << 20);
	const char *no_offcpu = offcpu_hz ? offcpu_unsupported(o->has_task_pt_regs) : NULL;
	if (no_offcpu) {
		log_warn("off-CPU profiling is off: %s; sampling on-CPU only", no_offcpu);
		offcpu_hz = 0;
	}
	struct buf why = { 0 };
	o->skel = load_skel(o, rb, unwind_entries, ncpu, offcpu_hz, &why);
	if (!o->skel && offcpu_hz) {
		log_warn("off-CPU profiling is off: loading its programs (tp_btf/sched_switch, tp_btf/sys_exit, "
			 "tp_btf/sched_process_exit, tp_btf/sched_process_fork, iter/task) failed: %s; "
			 "sampling on-CPU only", why.data);
		offcpu_hz = 0;
		buf_reset(&why);
		o->skel = load_skel(o, rb, unwind_entries, ncpu, 0, &why);
	}
	if (!o->skel) {
		buf_printf(err, "%s; run as root with CAP_BPF and CAP_PERFMON", why.data);
		buf_free(&why);
		goto fail;
	}
	o->off.skel = o->skel;
	/* The tail-call targets, at PROG_UNWIND and PROG_PYTHON. */
	if (install_tail_calls(o->skel->maps.unwind_progs, o->skel->progs.oncpu_unwind,
			       o->skel->progs.oncpu_python, err) < 0)
		goto fail;
	if (offcpu_hz) {
		buf_reset(&why);
		if (install_tail_calls(o->skel->maps.offcpu_progs, o->skel->progs.offcpu_unwind,
				       o->skel->progs.offcpu_python, &why) < 0 ||
		    offcpu_attach(&o->off, &why) < 0) {
			log_warn("off-CPU profiling is off: %s; sampling on-CPU only", why.data);
			offcpu_hz = 0;
		}
	}
	buf_reset(&why);
	/* The CUDA launch path's targets: without them no marker uprobe is
	 * attached (oncpu_attach_cuda_marker says why). */
	if (install_tail_calls(o->skel->maps.cuda_progs, o->skel->progs.cuda_unwind,
			       o->skel->progs.cuda_python, &why) < 0)
		log_warn("CUDA launch stacks are off: %s", why.data);
	else
		o->cuda_ok = true;
	buf_free(&why);
	o->offcpu_hz = offcpu_hz;
	o->rb = ring_buffer__new(bpf_map__fd(o->skel->maps.samples), on_event, o, NULL);
	if (!o->rb) {
		buf_printf(err, "creating the ring buffer reader failed: %s", strerror(errno));
		goto fail;
	}
	o->fds = xcalloc((size_t)ncpu, sizeof(int));
	o->links = xcalloc((size_t)ncpu, sizeof(*o->links));
	for (int i = 0; i < ncpu; i++)
		o->fds[i] = -1;
	o->ncpu = ncpu;
	for (int i = 0; i < ncpu; i++) {
		struct perf_event_attr attr = {
			.type = PERF_TYPE_SOFTWARE,
			.size = sizeof(attr),
			.config = PERF_COUNT_SW_CPU_CLOCK,
			.sample_period = 1000000000ull / hz,
		};
		int fd = (int)syscall(__NR_perf_event_open, &attr, -1, cpus[i], -1,
				      PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			if (errno == ENODEV)
				continue; /* went offline meanwhile */
			buf_printf(err, "perf_event_open(cpu-clock, cpu %d) failed: %s", cpus[i],
				   strerror(errno));
			goto fail;
		}
		o->fds[i] = fd;
		o->links[i] = bpf_program__attach_perf_event(o->skel->progs.oncpu_sample, fd);
		if (!o->links[i]) {
			buf_printf(err, "attaching to the perf event of cpu %d failed: %s", cpus[i],
				   strerror(errno));
			goto fail;
		}
	}
	log_info("on-CPU sampling: cpu-clock at %llu Hz on %d CPUs, ring buffer %zu KiB; user stacks: "
		 "ember's DWARF-CFI unwinder (up to %d frames, %u table rows) once a process is "
		 "read, the kernel's frame-pointer walk before that%s",
		 (unsigned long long)hz, ncpu, rb >> 10, ONCPU_MAX_UFRAMES, (unsigned)unwind_entries,
		 o->has_task_pt_regs ? ""
				     : "; this kernel lacks bpf_task_pt_regs (< 5.15): samples taken "
				       "inside system calls use the frame-pointer walk");
	if (o->offcpu_hz)
		log_info("off-CPU sampling: waits of user threads in system calls timed at each context "
			 "switch (tp_btf/sched_switch), the kernel stack taken as a picked thread switches "
			 "in, its user stack at the system call's exit (tp_btf/sys_exit); %llu samples per "
			 "second of waiting per thread, each worth at least %.1f ms",
			 (unsigned long long)o->offcpu_hz, 1e3 / (double)o->offcpu_hz);
	*out = o;
	return 0;
fail:
	oncpu_close(o);
	return -1;
}

bool oncpu_offcpu_active(const struct oncpu *o)
{
	return offcpu_attached(&o->off);
}

int oncpu_set_enabled(struct oncpu *o, bool on)
{
	int rc = 0, e = 0;
	for (int i = 0; i < o->ncpu; i++)
		if (o->fds[i] >= 0 &&
		    ioctl(o->fds[i], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0) != 0) {
			e = errno;
			rc = -1;
		}
	if (o->offcpu_hz && on) {
		struct buf why = { 0 };
		if (offcpu_attach(&o->off, &why) < 0) {
			e = errno;
			log_warn("off-CPU sampling: %s", why.data);
			rc = -1;
		}
		buf_free(&why);
	} else if (o->offcpu_hz) {
		offcpu_detach(&o->off);
	}
	if (rc < 0)
		errno = e;
	return rc;
}

int oncpu_drain(struct oncpu *o)
{
	return ring_buffer__consume(o->rb);
}

int oncpu_epoll_fd(const struct oncpu *o)
{
	return ring_buffer__epoll_fd(o->rb);
}

int oncpu_attach_cuda_marker(struct oncpu *o, const char *path, const char *func, struct buf *err)
{
	if (!o->cuda_ok) {
		buf_printf(err, "the CUDA launch programs could not be installed");
		return -1;
	}
	if (o->ncuda_links >= ONCPU_MAX_CUDA_FILES) {
		buf_printf(err, "already %d copies of the library probed", ONCPU_MAX_CUDA_FILES);
		return -1;
	}
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = func, .retprobe = false);
	struct bpf_link *l = bpf_program__attach_uprobe_opts(o->skel->progs.cuda_marker, -1, path, 0,
							     &opts);
	if (!l) {
		buf_printf(err, "attaching a uprobe to %s in %s failed: %s", func, path, strerror(errno));
		return -1;
	}
	o->cuda_links[o->ncuda_links++] = l;
	return 0;
}

int oncpu_wait(struct oncpu *o, int timeout_ms)
{
	int n = ring_buffer__poll(o->rb, timeout_ms);
	return n == -EINTR ? 0 : n;
}

void oncpu_read_stats(struct oncpu *o, uint64_t out[ONCPU_STAT_MAX])
{
	int ncpus = libbpf_num_possible_cpus();
	memset(out, 0, ONCPU_STAT_MAX * sizeof(uint64_t));
	if (ncpus <= 0)
		return;
	uint64_t *vals = xcalloc((size_t)ncpus, sizeof(uint64_t));
	int fd = bpf_map__fd(o->skel->maps.oncpu_stats);
	for (uint32_t k = 0; k < ONCPU_STAT_MAX; k++) {
		if (bpf_map_lookup_elem(fd, &k, vals) != 0)
			continue;
		for (int c = 0; c < ncpus; c++)
			out[k] += vals[c];
	}
	free(vals);
}

void oncpu_unwind_maps(const struct oncpu *o, struct unwind_map_fds *out)
{
	out->rules = bpf_map__fd(o->skel->maps.unwind_rules);
	out->rules_cap = bpf_map__max_entries(o->skel->maps.unwind_rules);
	out->entries = bpf_map__fd(o->skel->maps.unwind_entries);
	out->entries_cap = bpf_map__max_entries(o->skel->maps.unwind_entries);
	out->files = bpf_map__fd(o->skel->maps.unwind_files);
	out->files_cap = bpf_map__max_entries(o->skel->maps.unwind_files);
	out->procs = bpf_map__fd(o->skel->maps.unwind_procs);
	out->seen = bpf_map__fd(o->skel->maps.unwind_seen);
	out->wanted = bpf_map__fd(o->skel->maps.unwind_wanted);
}

int oncpu_python_map(const struct oncpu *o)
{
	return bpf_map__fd(o->skel->maps.py_procs);
}

int oncpu_python_exes_map(const struct oncpu *o)
{
	return bpf_map__fd(o->skel->maps.py_exes);
}

int oncpu_cpu_count(const struct oncpu *o)
{
	return o->ncpu;
}

void oncpu_close(struct oncpu *o)
{
	if (!o)
		return;
	offcpu_detach(&o->off);
	for (int i = 0; i < o->ncuda_links; i++)
		bpf_link__destroy(o->cuda_links[i]);
	for (int i = 0; i < o->ncpu; i++) {
		if (o->links && o->links[i])
			bpf_link__destroy(o->links[i]);
		if (o->fds && o->fds[i] >= 0)
			close(o->fds[i]);
	}
	free(o->links);
	free(o->fds);
	ring_buffer__free(o->rb);
	ember_bpf__destroy(o->skel);
	free(o);
}
