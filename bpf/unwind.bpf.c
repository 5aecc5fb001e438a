// SPDX-License-Identifier: GPL-2.0
/* unwind.bpf.c - ember's native unwinder in BPF: walks a user stack by
 * the DWARF call-frame tables the agent loads (agent/unwind.c,
 * bpf/unwind_types.h), one step a frame (bpf/unwind_step.h),
 * UNWIND_FRAMES_PER_PROG frames per program, continuing through tail
 * calls; hands each interpreter-loop frame of a Python process to the
 * Python walker (python.bpf.c). One program per path, each the tail-call
 * target PROG_UNWIND of its sampler: oncpu_unwind (the perf event),
 * offcpu_unwind (tp_btf/sys_exit), cuda_unwind (the launch uprobe); tail
 * calls only reach programs of the caller's type. See
 * docs/internals/unwinding.md. */
#include "record.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define UNWIND_FRAMES_PER_PROG 16

static __always_inline const struct unwind_entry *entry_at(__u32 i)
{
	return bpf_map_lookup_elem(&unwind_entries, &i);
}

static __always_inline const struct unwind_rule *rule_at(__u32 i)
{
	return bpf_map_lookup_elem(&unwind_rules, &i);
}

static __always_inline const struct unwind_file_info *file_at(__u32 i)
{
	return bpf_map_lookup_elem(&unwind_files, &i);
}

int uw_mapping_index(__u32 pid, __u64 pc);
int uw_rule_id(__u32 file, __u64 vaddr);
__s64 uw_row_page(__u32 file, __u32 rel);
int uw_page_rule(__u32 page, __u32 n, __u32 rel);

#define UW_INLINE static __always_inline
/* Zero, but not known to the verifier (.bss is writable): OR-ing it into
 * a variable makes the verifier forget the variable's value. */
volatile __u32 uw_opaque_zero;
#define UW_OPAQUE(x) ((x) |= uw_opaque_zero)
#define UW_READ_U64(addr, out) read_u64((addr), (out))
#define UW_ENTRY(i) entry_at(i)
#define UW_RULE(i) rule_at(i)
#define UW_FILE(i) file_at(i)
#define UW_MAPPING_INDEX(p, pid, pc) uw_mapping_index((pid), (pc))
#define UW_RULE_ID(file, vaddr) uw_rule_id((file), (vaddr))
#include "unwind_step.h"

/* The two searches are global functions: the verifier checks each once,
 * not once per frame of the unrolled unwinding loop. */
__noinline int uw_mapping_index(__u32 pid, __u64 pc)
{
	const struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &pid);
	if (!p)
		return -1;
	return uw_find_mapping(p, pc);
}

#define UNWIND_SEEN_NS 100000000ull

/* The two searches in a table, each verified once. */
__noinline __s64 uw_row_page(__u32 file, __u32 rel)
{
	return uw_find_row_page(file_at(file), rel);
}

__noinline int uw_page_rule(__u32 page, __u32 n, __u32 rel)
{
	return uw_search_page(page, n, rel);
}

/* uw_find_rule_id, with the searches above; also notes that the table was
 * used (unwind_seen) and which missing row page was wanted. Returns -2
 * when the file's table, or the row page, is not loaded, UW_ID_PENDING
 * when the agent is building the table. */
__noinline int uw_rule_id(__u32 file, __u64 vaddr)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *seen = bpf_map_lookup_elem(&unwind_seen, &file);
	if (seen && now - *seen >= UNWIND_SEEN_NS)
		*seen = now;
	const struct unwind_file_info *fi = file_at(file);
	if (!fi)
		return -2;
	if (fi->count == 0)
		return fi->pending ? UW_ID_PENDING : -2;
	if (vaddr < fi->base || vaddr - fi->base > 0xffffffffull)
		return -1;
	__u32 rel = (__u32)(vaddr - fi->base);
	__s64 where = uw_row_page(file, rel);
	if (where <= -2) {
		__u64 key = (__u64)file << 32 | (__u32)(-2 - where);
		bpf_map_update_elem(&unwind_wanted, &key, &now, BPF_ANY);
		return -2;
	}
	if (where < 0)
		return -1;
	return uw_page_rule((__u32)((__u64)where >> 32), (__u32)where, rel);
}

/* The body of the unwinder programs (oncpu_unwind, offcpu_unwind,
 * cuda_unwind): continues ember's unwinder from sc->regs, UNWIND_FRAMES_PER_PROG frames,
 * then a tail call into itself through progs (the caller's program
 * array). */
static __always_inline int unwind_body(void *ctx, struct scratch *sc, void *progs, const int off)
{
	__u32 pid = sc->s.pid;
	const struct unwind_proc *p = bpf_map_lookup_elem(&unwind_procs, &pid);
	if (!p) {
		stop_unwind(sc, UWE_NO_MAPPING, off);
		return 0;
	}
	__u32 nk = sc->s.kstack_len > 0 ? (__u32)sc->s.kstack_len : 0;
	if (nk > ONCPU_MAX_KFRAMES)
		nk = ONCPU_MAX_KFRAMES;
	const struct py_proc *py = bpf_map_lookup_elem(&py_procs, &pid);
	if (py && (py->start_ticks != p->start_ticks || py->exec_id != p->exec_id))
		py = NULL;
	for (int i = 0; i < UNWIND_FRAMES_PER_PROG; i++) {
		__u32 nu = (__u32)sc->s.ustack_len;
		if (nu >= ONCPU_MAX_UFRAMES) {
			stop_unwind(sc, UWE_TRUNCATED, off);
			return 0;
		}
		__u32 idx = nk + nu;
		if (idx >= ONCPU_MAX_FRAMES) {
			stop_unwind(sc, UWE_TRUNCATED, off);
			return 0;
		}
		bool native = true, on_stack = py && (py->off.flags & PY_F_ENTRY_ON_STACK);
		__u64 pc = sc->regs.pc;
		if (on_stack && !sc->py_started && py_call_room(sc))
			/* Find the thread's frames and the first marker. */
			tail_call_counted(ctx, sc, progs, PROG_PYTHON);
		if (py && !on_stack && ((pc >= py->eval_lo && pc < py->eval_hi) ||
					(pc >= py->cold_lo && pc < py->cold_hi))) {
			/* The interpreter loop: its Python frames instead, once. */
			if (!sc->py_visited && py_call_room(sc)) {
				sc->py_visited = 1;
				tail_call_counted(ctx, sc, progs, PROG_PYTHON);
			}
			native = !sc->py_emitted;
			sc->py_visited = 0;
			sc->py_emitted = 0;
		}
		if (native) {
			/* Masked: the compiler does not keep the bound
			 * checked above across the tail-call branch. */
			asm volatile("" : "+r"(idx));
			sc->s.frames[idx & FRAME_INDEX_MASK] = pc;
			sc->s.ustack_len = (__s32)(nu + 1);
			count(ONCPU_STAT_CFI_FRAMES, 1);
		}
		__u64 sp = sc->regs.sp;
		int rc = uw_step(p, pid, &sc->regs);
		if (rc != UW_CONTINUE) {
			stop_unwind(sc, rc < 0 ? -rc : 0, off);
			return 0;
		}
		if (on_stack && native && sc->py_marker >= sp && sc->py_marker < sc->regs.sp &&
		    py_call_room(sc)) {
			/* The frame just written holds the next marker: it is
			 * the interpreter invocation whose Python frames
			 * replace it. The walk goes on from its caller. */
			sc->py_native = pc;
			sc->py_marker = 0;
			sc->py_emitted = 0;
			sc->s.ustack_len = (__s32)nu;
			tail_call_counted(ctx, sc, progs, PROG_PYTHON);
		}
	}
	if (++sc->tail_calls > UNWIND_MAX_TAIL_CALLS) {
		stop_unwind(sc, UWE_TRUNCATED, off);
		return 0;
	}
	count(ONCPU_STAT_TAIL_CALLS, 1);
	bpf_tail_call(ctx, progs, PROG_UNWIND);
	stop_unwind(sc, UWE_TRUNCATED, off); /* the tail call failed */
	return 0;
}

/* The tail-call targets PROG_UNWIND of the three paths: oncpu_unwind,
 * offcpu_unwind, cuda_unwind (record.bpf.h). */
WALKER_PROGRAMS(unwind, unwind_body)
