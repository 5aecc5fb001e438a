/* unwind_step.h - one step of ember's native unwinder: from the registers
 * of one frame, the registers of its caller.
 *
 * The same code runs in the BPF program (bpf/unwind.bpf.c) and, compiled as
 * ordinary C, in the tests that replay a stopped process's memory
 * (tests/unit/agent/test_unwind.c). The includer provides:
 *   UW_INLINE                     how to declare the functions here
 *   UW_READ_U64(addr, out)        read 8 bytes of user memory; 0 on success
 *   UW_ENTRY(index)               const struct unwind_entry *, or NULL
 *   UW_RULE(id)                   const struct unwind_rule *, or NULL
 *   UW_FILE(index)                const struct unwind_file_info *, or NULL
 *   UW_MAPPING_INDEX(p, pid, pc)  index of the mapping holding pc, or < 0
 *   UW_RULE_ID(file, vaddr)       rule id for vaddr in a file, or < 0
 * The last two may simply call uw_find_mapping and uw_find_rule_id below;
 * the BPF program wraps them in global functions, which the verifier checks
 * once instead of at every call (their loops would otherwise exceed its
 * budget). */
#ifndef EMBER_BPF_UNWIND_STEP_H
#define EMBER_BPF_UNWIND_STEP_H

enum { UW_CONTINUE = 1, UW_DONE = 0 };

/* Makes the BPF verifier forget what it knows of a variable's range: a
 * binary search whose bounds it tracked precisely would be explored path
 * by path (2^iterations) instead of once. Nothing in plain C. */
#ifndef UW_OPAQUE
#define UW_OPAQUE(x) ((void)0)
#endif

/* The mapping containing pc: a binary search over the sorted mappings. */
UW_INLINE int uw_find_mapping(const struct unwind_proc *p, __u64 pc)
{
	__u32 lo = 0, hi = p->nmaps;
	if (hi > UNWIND_MAX_MAPPINGS)
		hi = UNWIND_MAX_MAPPINGS;
	for (int i = 0; i < 9; i++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;
		if (p->maps[mid & (UNWIND_MAX_MAPPINGS - 1)].start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	__u32 idx = (lo - 1) & (UNWIND_MAX_MAPPINGS - 1);
	if (pc >= p->maps[idx].end)
		return -1;
	return (int)idx;
}

/* How many of the hi sorted rows from entry index start have an address
 * at or below rel: a binary search of at most 11 halvings (hi is at most
 * UNWIND_PAGE_ROWS); 0 also when a row cannot be read, which the callers
 * treat alike (no row). The callers make start opaque (UW_OPAQUE). */
UW_INLINE __u32 uw_rows_at_or_below(__u32 start, __u32 hi, __u32 rel)
{
	__u32 lo = 0;
	UW_OPAQUE(hi);
	for (int i = 0; i < 11; i++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;
		const struct unwind_entry *e = UW_ENTRY(start + mid);
		if (!e)
			return 0;
		if (e->addr <= rel)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Where the rows for rel (an address relative to the table's base) are:
 * (page << 32 | number of rows in it); -1 when the table has none; -2 - i
 * when rel lies in row page i, which is not loaded. */
UW_INLINE __s64 uw_find_row_page(const struct unwind_file_info *fi, __u32 rel)
{
	if (!fi)
		return -1;
	__u32 count = fi->count; /* first: see struct unwind_file_info */
	if (count == 0)
		return -1;
	if (count <= UNWIND_PAGE_ROWS)
		return (__s64)((__u64)fi->dir[0] << 32 | count);
	/* The row page: the last directory entry at or below rel; first the
	 * directory page (constant indexes into dir[]: the verifier need not
	 * track the search's bounds precisely), then a search within it. */
	__u32 np = (count + UNWIND_PAGE_ROWS - 1) >> UNWIND_PAGE_SHIFT;
	if (np > UNWIND_DIR_PAGES * UNWIND_PAGE_ROWS)
		np = UNWIND_DIR_PAGES * UNWIND_PAGE_ROWS;
	__u32 k = 0, dp = fi->dir[0];
	for (__u32 kk = 1; kk < UNWIND_DIR_PAGES; kk++) {
		if (kk * UNWIND_PAGE_ROWS >= np)
			break;
		__u32 pk = fi->dir[kk];
		const struct unwind_entry *f = UW_ENTRY(pk * UNWIND_PAGE_ROWS);
		if (!f)
			return -1;
		if (f->addr <= rel) {
			k = kk;
			dp = pk;
		}
	}
	__u32 hi = np - k * UNWIND_PAGE_ROWS;
	if (hi > UNWIND_PAGE_ROWS)
		hi = UNWIND_PAGE_ROWS;
	__u32 dstart = dp * UNWIND_PAGE_ROWS;
	UW_OPAQUE(dstart);
	UW_OPAQUE(k);
	__u32 lo = uw_rows_at_or_below(dstart, hi, rel);
	if (lo == 0)
		return -1;
	__u32 d = k * UNWIND_PAGE_ROWS + lo - 1;
	const struct unwind_entry *e = UW_ENTRY(dstart + lo - 1);
	if (!e)
		return -1;
	if (e->rule == UNWIND_PAGE_NONE)
		return -2 - (__s64)d;
	__u32 n = d + 1 == np ? count - (d << UNWIND_PAGE_SHIFT) : UNWIND_PAGE_ROWS;
	return (__s64)((__u64)e->rule << 32 | n);
}

/* The rule id of the last of the n rows of a page at or below rel, or -1. */
UW_INLINE int uw_search_page(__u32 page, __u32 n, __u32 rel)
{
	if (page == UNWIND_PAGE_NONE || n > UNWIND_PAGE_ROWS)
		return -1;
	__u32 start = page * UNWIND_PAGE_ROWS;
	UW_OPAQUE(start);
	__u32 lo = uw_rows_at_or_below(start, n, rel);
	if (lo == 0)
		return -1;
	const struct unwind_entry *e = UW_ENTRY(start + lo - 1);
	return e ? (int)e->rule : -1;
}

/* The rule id for vaddr in a file's table; -1 when there is none; -2 - i
 * when vaddr lies in row page i, which is not loaded. (The BPF program
 * composes the two searches above itself, each a global function.) */
UW_INLINE int uw_find_rule_id(const struct unwind_file_info *fi, __u64 vaddr)
{
	if (!fi || vaddr < fi->base || vaddr - fi->base > 0xffffffffull)
		return -1;
	__u32 rel = (__u32)(vaddr - fi->base);
	__s64 where = uw_find_row_page(fi, rel);
	if (where < 0)
		return where < -1 ? (int)(where >= -0x10001 ? where : -1) : -1;
	return uw_search_page((__u32)((__u64)where >> 32), (__u32)where, rel);
}

/* Moves r to the caller's frame. Returns UW_CONTINUE, UW_DONE when the
 * outermost frame was reached, or -enum unwind_error. */
UW_INLINE int uw_step(const struct unwind_proc *p, __u32 pid, struct unwind_regs *r)
{
	int mi = UW_MAPPING_INDEX(p, pid, r->pc);
	if (mi < 0)
		return -UWE_NO_MAPPING;
	const struct unwind_mapping *m = &p->maps[mi & (UNWIND_MAX_MAPPINGS - 1)];
	const struct unwind_rule *rule = 0;
	if (m->file != UNWIND_NO_FILE) {
		/* A return address is looked up one byte back, inside the call:
		 * a call that ends a function must not get the next function's
		 * rule. */
		__u64 lookup = r->exact ? r->pc : r->pc - 1;
		int id = UW_RULE_ID(m->file, lookup - m->bias);
		if (id >= 0)
			rule = UW_RULE((__u32)id);
		else if (id < -1)
			r->no_table |= id == UW_ID_PENDING ? UW_NO_TABLE | UW_TABLE_PENDING : UW_NO_TABLE;
	}
	__u64 npc = 0, nsp = 0, nbp = r->bp, cfa = 0;
	__u8 kind = rule ? rule->kind : UW_INVALID;
	switch (kind) {
	case UW_STOP:
		return UW_DONE;
	case UW_SIGNAL:
		if (UW_READ_U64(r->sp + rule->cfa_off, &nsp) || UW_READ_U64(r->sp + rule->bp_off, &nbp) ||
		    UW_READ_U64(r->sp + rule->ra_off, &npc))
			return -UWE_READ;
		r->pc = npc;
		r->sp = nsp;
		r->bp = nbp;
		r->exact = 1; /* the interrupted instruction itself */
		return npc ? UW_CONTINUE : UW_DONE;
	case UW_CFA_SP:
	case UW_CFA_BP:
	case UW_PLT:
	case UW_CFA_DEREF_BP:
		if (kind == UW_CFA_SP)
			cfa = r->sp + rule->cfa_off;
		else if (kind == UW_CFA_BP)
			cfa = r->bp + rule->cfa_off;
		else if (kind == UW_PLT)
			cfa = r->sp + rule->cfa_off + ((r->pc & 15) >= (__u64)rule->aux ? 8 : 0);
		else if (UW_READ_U64(r->bp + rule->cfa_off, &cfa))
			return -UWE_READ;
		if (UW_READ_U64(cfa + rule->ra_off, &npc))
			return -UWE_READ;
		if (rule->bp_saved == UW_BP_AT_CFA && UW_READ_U64(cfa + rule->bp_off, &nbp))
			return -UWE_READ;
		if (rule->bp_saved == UW_BP_AT_BP && UW_READ_U64(r->bp + rule->bp_off, &nbp))
			return -UWE_READ;
		nsp = cfa;
		break;
	default:
		/* No rule: follow the frame pointer, as code without unwind
		 * tables (JIT code, stripped Go binaries, some hand-written
		 * assembly) expects. A zero frame pointer is how the outermost
		 * frame ends the chain (_start, Go's goexit). */
		if (r->bp == 0)
			return UW_DONE;
		if (r->bp < r->sp)
			return -UWE_NO_FP;
		if (UW_READ_U64(r->bp, &nbp) || UW_READ_U64(r->bp + 8, &npc))
			return -UWE_READ;
		nsp = r->bp + 16;
		break;
	}
	if (npc == 0)
		return UW_DONE; /* a zero return address ends the stack */
	if (nsp <= r->sp)
		return -UWE_NO_PROGRESS;
	r->pc = npc;
	r->sp = nsp;
	r->bp = nbp;
	r->exact = 0;
	return UW_CONTINUE;
}

#endif
