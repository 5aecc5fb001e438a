/* offcpu.h - off-CPU sampling (-enable-off-cpu): the agent's side of
 * bpf/offcpu.bpf.c. Whether this kernel can do it, its programs' and
 * maps' settings before ember's BPF object is loaded, and attaching and
 * detaching its hooks: tp_btf/sched_process_fork (a new thread gets its
 * slot for switch-out times), the task iterator (the threads there are
 * get theirs), tp_btf/sys_exit and tp_btf/sched_process_exit (records
 * finished or dropped), tp_btf/sched_switch (waits timed, picked,
 * started). agent/oncpu.c owns the object, fills the off-CPU path's
 * tail-call array and calls these; the records arrive through the same
 * ring buffer as the on-CPU samples. Main thread only.
 */
#ifndef EMBER_AGENT_OFFCPU_H
#define EMBER_AGENT_OFFCPU_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

struct ember_bpf;
struct bpf_link;

#define OFFCPU_HOOKS 4

struct offcpu {
	struct ember_bpf *skel;                /* not owned */
	struct bpf_link *links[OFFCPU_HOOKS]; /* in attach order; NULL: detached */
};

/* Why this kernel cannot do off-CPU sampling, or NULL when it looks able
 * to (the load and the attach may still fail; the caller logs them). */
const char *offcpu_unsupported(bool has_task_pt_regs);
/* Before the object is loaded: the off-CPU programs are loaded, and its
 * maps take kernel memory, only when hz > 0 (samples per second of waiting
 * per thread); the records in progress are sized for ncpu CPUs. */
void offcpu_configure(struct ember_bpf *skel, uint64_t hz, int ncpu);
/* Attaches the hooks (a no-op when attached); waits that began before now
 * are not measured. Returns 0, or -1 with errno set, the reason in err and
 * nothing attached. */
int offcpu_attach(struct offcpu *off, struct buf *err);
/* Detaches every hook (a stopped sampler costs nothing); a no-op when
 * detached. */
void offcpu_detach(struct offcpu *off);
bool offcpu_attached(const struct offcpu *off);

#endif
