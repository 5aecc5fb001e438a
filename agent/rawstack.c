/* rawstack.c - see rawstack.h. */
#include "rawstack.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util.h"

/* The walk in progress: unwind_step.h's hooks take no context, so they
 * find it here. Per thread (only the main thread walks), set for the
 * length of one rawstack_unwind call. */
struct walk {
	struct rawstack *r;
	uint64_t now_ns;
	const struct oncpu_raw_stack *raw;
	struct unwind_file_info file; /* the last UW_FILE answer */
	struct unwind_rule rule;      /* the last UW_RULE answer */
	bool missing;                 /* the step met a file whose table is not loaded */
};
static __thread struct walk *cur;

static int raw_read_u64(__u64 addr, __u64 *out)
{
	const struct oncpu_raw_stack *raw = cur->raw;
	/* Only the bytes copied from SP up: the stack has changed since. */
	if (addr < raw->sp || addr - raw->sp > raw->len || raw->len - (addr - raw->sp) < 8)
		return 1;
	memcpy(out, raw->bytes + (addr - raw->sp), 8);
	return 0;
}

static void unmap_page(struct rawstack_page *pg)
{
	if (pg->page != UNWIND_PAGE_NONE)
		munmap((void *)pg->rows, UNWIND_PAGE_ROWS * sizeof(struct unwind_entry));
	pg->page = UNWIND_PAGE_NONE;
	pg->rows = NULL;
}

/* Entry i of unwind_entries, from its row page mapped in the last
 * RAWSTACK_PAGE_NS (or mapped now). Valid until the next call. */
static const struct unwind_entry *raw_entry(__u32 i)
{
	struct rawstack *r = cur->r;
	if (i >= r->nentries)
		return NULL;
	uint32_t page = i / UNWIND_PAGE_ROWS;
	for (uint32_t k = 0; k < RAWSTACK_PAGES; k++) {
		struct rawstack_page *pg = &r->pages[k];
		if (pg->page == page && cur->now_ns - pg->mapped_ns < RAWSTACK_PAGE_NS)
			return &pg->rows[i % UNWIND_PAGE_ROWS];
	}
	size_t len = UNWIND_PAGE_ROWS * sizeof(struct unwind_entry);
	if ((uint64_t)(page + 1) * UNWIND_PAGE_ROWS <= r->nentries) {
		struct rawstack_page *pg = &r->pages[r->next_page];
		r->next_page = (r->next_page + 1) % RAWSTACK_PAGES;
		unmap_page(pg);
		void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, r->entries_fd, (off_t)page * (off_t)len);
		if (m != MAP_FAILED) {
			r->page_maps++;
			pg->page = page;
			pg->mapped_ns = cur->now_ns;
			pg->rows = m;
			return &pg->rows[i % UNWIND_PAGE_ROWS];
		}
	}
	/* The map cannot be mapped (not BPF_F_MMAPABLE, Linux < 5.5): the
	 * entry alone. */
	r->single_reads++;
	return bpf_map_lookup_elem(r->entries_fd, &i, &r->one) == 0 ? &r->one : NULL;
}

static const struct unwind_rule *raw_rule(__u32 i)
{
	return bpf_map_lookup_elem(cur->r->rules_fd, &i, &cur->rule) == 0 ? &cur->rule : NULL;
}

static const struct unwind_file_info *raw_file(__u32 i)
{
	return bpf_map_lookup_elem(cur->r->files_fd, &i, &cur->file) == 0 ? &cur->file : NULL;
}

#define UW_INLINE static inline
#define UW_READ_U64(addr, out) raw_read_u64((addr), (out))
#define UW_ENTRY(i) raw_entry(i)
#define UW_RULE(i) raw_rule(i)
#define UW_FILE(i) raw_file(i)
#define UW_MAPPING_INDEX(p, pid, pc) ((void)(pid), uw_find_mapping((p), (pc)))
#define UW_RULE_ID(file, vaddr) raw_rule_id((file), (vaddr))
static int raw_rule_id(__u32 file, __u64 vaddr);
#include "unwind_step.h"

/* uw_find_rule_id, noting a table that is not (or not wholly) loaded:
 * the BPF program would follow the frame pointer there, and so does the
 * final walk; the others stop and wait for it. */
static int raw_rule_id(__u32 file, __u64 vaddr)
{
	const struct unwind_file_info *fi = raw_file(file);
	if (!fi || fi->count == 0) {
		cur->missing = true;
		return -1;
	}
	int id = uw_find_rule_id(fi, vaddr);
	if (id < -1)
		cur->missing = true; /* a row page not loaded */
	return id < 0 ? -1 : id;
}

void rawstack_open(struct rawstack *r, const struct unwind_map_fds *fds)
{
	memset(r, 0, sizeof(*r));
	r->procs_fd = fds->procs;
	r->files_fd = fds->files;
	r->rules_fd = fds->rules;
	r->entries_fd = fds->entries;
	r->nentries = fds->entries_cap;
	for (uint32_t k = 0; k < RAWSTACK_PAGES; k++)
		r->pages[k].page = UNWIND_PAGE_NONE;
}

void rawstack_close(struct rawstack *r)
{
	for (uint32_t k = 0; k < RAWSTACK_PAGES; k++)
		unmap_page(&r->pages[k]);
	memset(r, 0, sizeof(*r));
}

enum rawstack_result rawstack_unwind(struct rawstack *r, uint32_t pid, uint64_t start_ticks,
				     uint64_t exec_id, const struct oncpu_raw_stack *raw, bool final,
				     __u64 *out, __u64 *cfa, uint32_t max, uint32_t *n, uint16_t *err,
				     uint64_t *stuck)
{
	*n = 0;
	*err = UWE_NONE;
	/* The value is 8 KiB: on the heap. */
	struct unwind_proc *p = xmalloc(sizeof(*p));
	if (bpf_map_lookup_elem(r->procs_fd, &pid, p) != 0 || p->start_ticks != start_ticks ||
	    p->exec_id != exec_id) {
		free(p);
		return RAWSTACK_NO_PROCESS;
	}
	struct walk w = { .r = r, .raw = raw, .now_ns = now_mono_ns() };
	/* Pages mapped longer ago than that may belong to another table
	 * now: unmapped, which also keeps them out of the agent's RSS. */
	for (uint32_t k = 0; k < RAWSTACK_PAGES; k++)
		if (r->pages[k].page != UNWIND_PAGE_NONE &&
		    w.now_ns - r->pages[k].mapped_ns >= RAWSTACK_PAGE_NS)
			unmap_page(&r->pages[k]);
	cur = &w;
	struct unwind_regs regs = { raw->pc, raw->sp, raw->bp, raw->exact ? 1 : 0, 0 };
	enum rawstack_result res = RAWSTACK_UNWOUND;
	for (;;) {
		if (*n >= max) {
			*err = UWE_TRUNCATED;
			break;
		}
		if (cfa)
			cfa[*n] = 0;
		out[(*n)++] = regs.pc;
		w.missing = false;
		uint64_t pc = regs.pc;
		int rc = uw_step(p, pid, &regs);
		if (cfa && rc == UW_CONTINUE)
			cfa[*n - 1] = regs.sp;
		if (w.missing && !final) {
			*stuck = pc;
			res = RAWSTACK_NO_TABLE;
			break;
		}
		if (rc != UW_CONTINUE) {
			*err = (uint16_t)(rc < 0 ? -rc : UWE_NONE);
			*stuck = regs.pc; /* for UWE_NO_MAPPING: the address in none */
			break;
		}
	}
	cur = NULL;
	free(p);
	return res;
}
