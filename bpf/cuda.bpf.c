// SPDX-License-Identifier: GPL-2.0
/* cuda.bpf.c - CUDA launch stacks: the uprobe on ember_cuda_launch_marker
 * (agent/cuda.c attaches it). */
#include "record.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* libembercuda.so calls void ember_cuda_launch_marker(uint64_t stack_id,
 * uint32_t kind) on the launching thread at each launch it picked for a
 * stack (lib/cuda_wire.h). The agent attaches cuda_marker to it in every
 * copy of the library it finds mapped; the program takes the thread's
 * user stack exactly as the on-CPU sampler does (ember's unwinder through
 * cuda_progs, Python frames included; for a process not described yet,
 * or a young one whose walk broke, the raw stack too, for the agent to
 * unwind) and sends it as an ONCPU_KIND_CUDA_LAUNCH record. There is no
 * kernel stack: the thread is in user space. */
SEC("uprobe")
int cuda_marker(struct pt_regs *ctx)
{
	count(ONCPU_STAT_CUDA_HITS, 1);
	struct scratch *sc = launch_scratch();
	if (!sc)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	struct oncpu_sample *s = &sc->s;
	fill_header(s, (struct task_struct *)bpf_get_current_task(), id >> 32, (__u32)id,
		    bpf_ktime_get_ns(), ONCPU_KIND_CUDA_LAUNCH, PT_REGS_PARM1(ctx));
	s->arg = (__u32)PT_REGS_PARM2(ctx);
	s->kstack_len = 0;
	reset_walk(sc);
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	/* At the function's first instruction: the exact pc. */
	sc->regs.pc = PT_REGS_IP(ctx);
	sc->regs.sp = PT_REGS_SP(ctx);
	sc->regs.bp = PT_REGS_FP(ctx);
	sc->regs.exact = 1;
	return finish_sample(ctx, sc, 0, 1, &cuda_progs, PATH_CUDA);
}
