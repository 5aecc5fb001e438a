/* unwind_types.h - the tables ember's native unwinder reads, shared by the
 * BPF programs (bpf/unwind.bpf.c) and the agent that fills them
 * (agent/unwind.c, agent/unwind_table.c).
 *
 * For every executable file the agent turns its call-frame information
 * (.eh_frame, or .debug_frame) into a sorted array of (address, rule id)
 * entries: from that address on, until the next entry, the rule says how
 * to find the caller's registers. Rules are deduplicated across all files
 * (a few thousand distinct rules cover a whole system). Each process has
 * a sorted list of its executable mappings with the file each belongs to
 * and the bias that turns an address into the file's virtual address.
 *
 * x86-64 only for now: registers are PC (rip), SP (rsp) and BP (rbp). */
#ifndef EMBER_BPF_UNWIND_TYPES_H
#define EMBER_BPF_UNWIND_TYPES_H

enum unwind_kind {
	UW_INVALID = 0, /* no call-frame information here: use the frame pointer */
	UW_CFA_SP,      /* CFA = SP + cfa_off */
	UW_CFA_BP,      /* CFA = BP + cfa_off */
	UW_PLT,         /* lazy-binding PLT: CFA = SP + cfa_off + ((PC & 15) >= aux ? 8 : 0) */
	UW_SIGNAL,      /* signal trampoline: the interrupted SP, BP and PC are
			   saved at SP + cfa_off, SP + bp_off, SP + ra_off */
	UW_STOP,        /* the outermost frame: the return address is undefined */
	UW_CFA_DEREF_BP, /* CFA = *(BP + cfa_off): a stack realigned through a
			    DRAP register (GCC), e.g. for AVX-512 locals */
};

/* bp_saved: where the caller's BP is. */
enum unwind_bp_saved {
	UW_BP_SAME = 0, /* BP is unchanged */
	UW_BP_AT_CFA,   /* at CFA + bp_off */
	UW_BP_AT_BP,    /* at BP + bp_off (a DRAP frame keeps it at BP) */
};

/* For UW_CFA_* and UW_PLT: the return address is at CFA + ra_off; the
 * caller's BP as bp_saved says. */
struct unwind_rule {
	__u8 kind;
	__u8 bp_saved;
	__s16 bp_off;
	__s16 ra_off;
	__s16 aux;
	__s32 cfa_off;
};

/* One row of a file's table: from vaddr (relative to the file's table
 * base) on, rule applies. */
struct unwind_entry {
	__u32 addr;
	__u32 rule;
};

/* The entry array is cut into pages of UNWIND_PAGE_ROWS entries; a table
 * takes whole pages, anywhere in the array (agent/unwind_mem.h). */
#define UNWIND_PAGE_SHIFT 10
#define UNWIND_PAGE_ROWS (1u << UNWIND_PAGE_SHIFT)
#define UNWIND_DIR_PAGES 4 /* at most 4 Mi rows a table */
#define UNWIND_PAGE_NONE 0xffffffffu

/* Where a file's rows are in the global entry array. The rows are cut
 * into row pages of UNWIND_PAGE_ROWS rows (the last one shorter). A table
 * of one row page: dir[0] is the page that holds it. Otherwise dir[] are
 * the pages of its directory: entry i of the directory (page dir[i / ROWS],
 * slot i % ROWS) is { addr: the first address of row page i, rule: the
 * page that holds it, or UNWIND_PAGE_NONE when it is not loaded (a file
 * too large for the table is loaded in part) }. count = 0: no table (not
 * built yet, given back, or none). count is the last field: the agent
 * writes the value in one update, in address order, and the reader reads
 * count first. pending (count 0): the agent is building the file's first
 * table (queued or in progress); 0 again once the table is published,
 * cannot be built or finds no room. */
struct unwind_file_info {
	__u64 base;
	__u32 dir[UNWIND_DIR_PAGES];
	__u32 count;
	__u32 pending;
};

#define UNWIND_MAX_MAPPINGS 256
#define UNWIND_NO_FILE 0xffffffffu

struct unwind_mapping {
	__u64 start, end; /* [start, end) in the process */
	__u64 bias;       /* file vaddr = address - bias */
	__u32 file;       /* index into the file table, or UNWIND_NO_FILE */
	__u32 pad;
};

struct unwind_proc {
	__u64 start_ticks; /* process start in clock ticks since boot: tells reused pids apart */
	__u32 nmaps;
	__u32 pad;
	__u64 exec_id;     /* the exec these mappings belong to (oncpu_sample.exec_id);
			      UNWIND_EXEC_ANY: not known yet (a process described
			      before any sample of it, e.g. at its CUDA hello):
			      taken to be the current one */
	struct unwind_mapping maps[UNWIND_MAX_MAPPINGS]; /* sorted by start */
};

/* The registers the unwinder tracks for one frame. */
struct unwind_regs {
	__u64 pc, sp, bp;
	__u32 exact; /* pc is the interrupted instruction, not a return address */
	/* Set by uw_step (never cleared by it) when a frame had no rule
	 * because its file's table, or the row page, was not loaded yet
	 * (UW_RULE_ID < -1): the frame pointer was followed instead, so a
	 * walk that ended there may have ended early. UW_NO_TABLE, with
	 * UW_TABLE_PENDING when the agent was building that table
	 * (UW_RULE_ID == UW_ID_PENDING). */
	__u32 no_table;
};

#define UW_NO_TABLE 1u
#define UW_TABLE_PENDING 2u
/* UW_RULE_ID's answer for a file whose first table the agent is
 * building (unwind_file_info.pending). */
#define UW_ID_PENDING (-3)

/* Why a user stack ended early (struct oncpu_sample.unwind_error). */
enum unwind_error {
	UWE_NONE = 0,
	UWE_NO_MAPPING,  /* a return address in no executable mapping */
	UWE_READ,        /* reading the stack failed */
	UWE_NO_PROGRESS, /* the stack pointer did not move outwards */
	UWE_TRUNCATED,   /* more frames than ember keeps */
	UWE_NO_FP,       /* no unwind information and no frame pointer */
	UWE_MAX,
};

/* How the user stack of a sample was taken (oncpu_sample.unwind_mode). */
enum unwind_mode {
	UWM_NONE = 0,    /* no user stack (kernel thread) */
	UWM_KERNEL_FP,   /* the kernel's frame-pointer walk: process not known yet */
	UWM_CFI,         /* ember's unwinder, from the call-frame tables */
};

/* unwind_proc.exec_id of a process read before its exec count was known
 * (agent/proc.h PROC_EXEC_UNKNOWN). */
#define UNWIND_EXEC_ANY 0xffffffffffffffffull

#endif
