/* offcpu.c - see offcpu.h. */
#include "offcpu.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "ember.skel.h"
#include "util.h"

/* Off-CPU records in progress per CPU (4.2 KB each, preallocated; a
 * record lives from a switch-in to the end of a system call:
 * microseconds). */
#define OFFCPU_RECORDS_PER_CPU 4u

const char *offcpu_unsupported(bool has_task_pt_regs)
{
	if (!has_task_pt_regs)
		return "it needs bpf_task_pt_regs (Linux >= 5.15) to find the user registers of a thread inside the kernel";
	if (libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) != 1)
		return "it needs BPF task storage (Linux >= 5.11)";
	if (libbpf_find_vmlinux_btf_id("sched_switch", BPF_TRACE_RAW_TP) < 0)
		return "the kernel's BTF has no sched_switch tracepoint for tp_btf";
	if (libbpf_find_vmlinux_btf_id("sys_exit", BPF_TRACE_RAW_TP) < 0)
		return "the kernel's BTF has no sys_exit tracepoint for tp_btf";
	if (libbpf_find_vmlinux_btf_id("sched_process_fork", BPF_TRACE_RAW_TP) < 0)
		return "the kernel's BTF has no sched_process_fork tracepoint for tp_btf";
	return NULL;
}

void offcpu_configure(struct ember_bpf *skel, uint64_t hz, int ncpu)
{
	skel->rodata->offcpu_period_ns = 1000000000ull / (hz ? hz : 1);
	struct bpf_program *progs[] = { skel->progs.offcpu_switch, skel->progs.offcpu_sample,
					skel->progs.offcpu_unwind, skel->progs.offcpu_python,
					skel->progs.offcpu_exit, skel->progs.offcpu_fork,
					skel->progs.offcpu_threads };
	for (size_t i = 0; i < ARRAY_SIZE(progs); i++)
		bpf_program__set_autoload(progs[i], hz > 0);
	/* The off-CPU maps take kernel memory only when off-CPU is on. */
	struct bpf_map *maps[] = { skel->maps.offcpu_scratch, skel->maps.offcpu_stage,
				   skel->maps.offcpu_waits };
	for (size_t i = 0; i < ARRAY_SIZE(maps); i++)
		bpf_map__set_autocreate(maps[i], hz > 0);
	bpf_map__set_max_entries(skel->maps.offcpu_scratch,
				 MIN(MAX((uint32_t)ncpu * OFFCPU_RECORDS_PER_CPU, 64u), 4096u));
}

void offcpu_detach(struct offcpu *off)
{
	for (size_t i = 0; i < ARRAY_SIZE(off->links); i++) {
		bpf_link__destroy(off->links[i]);
		off->links[i] = NULL;
	}
}

bool offcpu_attached(const struct offcpu *off)
{
	return off->links[0] != NULL;
}

/* Runs the task iterator offcpu_threads once: every thread there is gets
 * its slot for switch-out times. Returns 0, or -1 with errno set and the
 * reason in err. */
static int adopt_threads(struct offcpu *off, struct buf *err)
{
	struct bpf_link *link = bpf_program__attach_iter(off->skel->progs.offcpu_threads, NULL);
	if (!link) {
		int e = errno;
		buf_printf(err, "attaching the task iterator (iter/task) failed: %s", strerror(e));
		errno = e;
		return -1;
	}
	int rc = 0, e = 0;
	int fd = bpf_iter_create(bpf_link__fd(link));
	if (fd < 0) {
		e = errno;
		buf_printf(err, "starting the task iterator failed: %s", strerror(e));
		rc = -1;
	} else {
		char sink[64]; /* the program writes nothing: read() ends at once */
		ssize_t n;
		while ((n = read(fd, sink, sizeof(sink))) != 0)
			if (n < 0 && errno != EINTR) {
				e = errno;
				buf_printf(err, "running the task iterator failed: %s", strerror(e));
				rc = -1;
				break;
			}
		close(fd);
	}
	bpf_link__destroy(link);
	errno = e;
	return rc;
}

int offcpu_attach(struct offcpu *off, struct buf *err)
{
	if (off->links[0])
		return 0;
	off->skel->bss->offcpu_since_ns = now_mono_ns(); /* bpf_ktime_get_ns's clock */
	/* New threads get their slot from the fork hook, then the threads
	 * there are from the iterator; then the hooks that finish records,
	 * so that every record the switch hook starts is finished. */
	struct bpf_program *progs[] = { off->skel->progs.offcpu_fork, off->skel->progs.offcpu_sample,
					off->skel->progs.offcpu_exit, off->skel->progs.offcpu_switch };
	const char *names[] = { "tp_btf/sched_process_fork", "tp_btf/sys_exit",
				"tp_btf/sched_process_exit", "tp_btf/sched_switch" };
	_Static_assert(ARRAY_SIZE(progs) == ARRAY_SIZE(off->links), "a link per program");
	for (size_t i = 0; i < ARRAY_SIZE(progs); i++) {
		off->links[i] = bpf_program__attach(progs[i]);
		if (!off->links[i]) {
			int e = errno;
			buf_printf(err, "attaching %s failed: %s", names[i], strerror(e));
			offcpu_detach(off);
			errno = e;
			return -1;
		}
		if (i == 0 && adopt_threads(off, err) < 0) {
			int e = errno;
			offcpu_detach(off);
			errno = e;
			return -1;
		}
	}
	return 0;
}
