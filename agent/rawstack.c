/* rawstack.c - see rawstack.h. */
#include "rawstack.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
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

/* Entry i of unwind_entries, from a page read in the last
 * RAWSTACK_PAGE_NS (or read now). Valid until the next call. */
static const struct unwind_entry *raw_entry(__u32 i)
{
	struct rawstack *r = cur->r;
	if (i >= r->nentries)
		return NULL;
	uint32_t page = i / UNWIND_PAGE_ROWS;
	for (uint32_t k = 0; k < RAWSTACK_PAGES; k++) {
		struct rawstack_page *pg = &r->pages[k];
		if (pg->page == page && cur->now_ns - pg->read_ns < RAWSTACK_PAGE_NS)
			return &pg->rows[i % UNWIND_PAGE_ROWS];
	}
	struct rawstack_page *pg = &r->pages[r->next_page];
	r->next_page = (r->next_page + 1) % RAWSTACK_PAGES;
	pg->page = UNWIND_PAGE_NONE;
	/* The batch starts after in_batch (the key before the page's first). */
	uint32_t first = page * UNWIND_PAGE_ROWS, before = first - 1, out = 0;
	uint32_t count = MIN((uint32_t)UNWIND_PAGE_ROWS, r->nentries - first);
	r->page_reads++;
	int rc = bpf_map_lookup_batch(r->entries_fd, first ? &before : NULL, &out, r->keys, pg->rows,
				      &count, NULL);
	if ((rc == 0 || errno == ENOENT) && count > i - first && r->keys[0] == first &&
	    r->keys[i - first] == i) {
		pg->page = page;
		pg->read_ns = cur->now_ns;
		return &pg->rows[i - first];
	}
	/* No batched lookups (Linux < 5.6): the entry alone. */
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
	r->pages = xcalloc(RAWSTACK_PAGES, sizeof(*r->pages));
	for (uint32_t k = 0; k < RAWSTACK_PAGES; k++)
		r->pages[k].page = UNWIND_PAGE_NONE;
	r->keys = xcalloc(UNWIND_PAGE_ROWS, sizeof(*r->keys));
}

void rawstack_close(struct rawstack *r)
{
	free(r->pages);
	free(r->keys);
	memset(r, 0, sizeof(*r));
}

enum rawstack_result rawstack_unwind(struct rawstack *r, uint32_t pid, uint64_t start_ticks,
				     uint64_t exec_id, const struct oncpu_raw_stack *raw, bool final,
				     __u64 *out, uint32_t max, uint32_t *n, uint16_t *err,
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
	cur = &w;
	struct unwind_regs regs = { raw->pc, raw->sp, raw->bp, raw->exact ? 1 : 0, 0 };
	enum rawstack_result res = RAWSTACK_UNWOUND;
	for (;;) {
		if (*n >= max) {
			*err = UWE_TRUNCATED;
			break;
		}
		out[(*n)++] = regs.pc;
		w.missing = false;
		uint64_t pc = regs.pc;
		int rc = uw_step(p, pid, &regs);
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
