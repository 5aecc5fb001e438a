/* unwind_mem.h - the memory of the BPF unwinder's row table: fixed-size
 * pages, table slots, and which table gives its pages back when the table
 * is full. No BPF here (agent/unwind.c does the map writes), so the
 * policy is unit-tested on its own (tests/unit/agent/test_unwind.c).
 *
 * Pages: the shared entry array (bpf/unwind_types.h) is cut into pages of
 * UNWIND_PAGE_ROWS entries. A table takes whole pages, any free ones: a
 * file's rows are spread over pages found through its directory, so the
 * space a file gives back is usable by any other file and the array never
 * fragments. A page given back is quarantined for quarantine_ns before it
 * is handed out again: a BPF program that read a table's directory just
 * before the table was unpublished may still be reading its rows, and it
 * must never see another file's rows there (the unpublishing write comes
 * first, then the release, then, after the quarantine, reuse).
 *
 * Slots: a table's identity in BPF (the file index of unwind_mapping and
 * unwind_files). A slot is reference-counted by the processes whose
 * mappings name it; slots given back are quarantined like pages.
 *
 * Victims: when a table needs more pages than are free, um_victims picks
 * the tables to give theirs back: first those no process maps any more
 * (least recently used first), then those least recently sampled. A table
 * being written is never a victim, nor is a mapped table sampled
 * (last_sampled) at or after protect_after: the caller protects what runs
 * now, so that a table that does not fit waits (or is loaded in part)
 * instead of pushing out what runs, which would push it out in turn.
 *
 * Not thread-safe: agent/unwind.c calls it under its mutex.
 */
#ifndef EMBER_AGENT_UNWIND_MEM_H
#define EMBER_AGENT_UNWIND_MEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UM_NONE UINT32_MAX

struct um_slot {
	bool used;
	bool loading;         /* its pages are being written: not a victim */
	uint32_t refs;        /* processes whose BPF entry names the slot */
	uint32_t gen;         /* bumped at every um_slot_free */
	uint32_t *pages;      /* the pages it holds (directory and rows) */
	uint32_t npages, cappages;
	uint64_t last_seen;   /* last sampled (BPF's clock), or when loaded */
	uint64_t last_sampled; /* last sampled; 0 = never */
	uint64_t unref_since; /* when refs dropped to 0 */
};

struct um_freed {
	uint32_t id;
	uint64_t at;
};

/* A FIFO of pages or slots given back, with when. */
struct um_fifo {
	struct um_freed *q;
	size_t head, len, cap;
};

struct unwind_mem {
	uint32_t npages;
	uint64_t quarantine_ns;
	uint32_t *free_pages; /* past their quarantine */
	size_t nfree;
	struct um_fifo pending; /* pages in quarantine */
	struct um_slot *slots;
	uint32_t nslots;
	uint32_t *free_slots;
	size_t nfree_slots;
	struct um_fifo pending_slots;
	uint32_t pages_used; /* held by slots */
};

void um_init(struct unwind_mem *m, uint32_t npages, uint32_t nslots, uint64_t quarantine_ns);
void um_destroy(struct unwind_mem *m);

/* A new slot (refs 0, no pages), or UM_NONE when every slot is used or
 * still in quarantine. */
uint32_t um_slot_alloc(struct unwind_mem *m, uint64_t now);
/* Gives back a slot and all its pages. */
void um_slot_free(struct unwind_mem *m, uint32_t s, uint64_t now);
static inline struct um_slot *um_slot(struct unwind_mem *m, uint32_t s)
{
	return s < m->nslots && m->slots[s].used ? &m->slots[s] : NULL;
}
void um_ref(struct unwind_mem *m, uint32_t s);
void um_unref(struct unwind_mem *m, uint32_t s, uint64_t now);

/* Pages free now (quarantine over), and still in quarantine. */
uint32_t um_free_now(struct unwind_mem *m, uint64_t now);
uint32_t um_pending(const struct unwind_mem *m);
/* When the oldest page in quarantine comes out of it; 0 when none is. */
uint64_t um_next_free_at(const struct unwind_mem *m);
/* Moves up to n free pages to slot s (appended to its pages, and to out
 * when not NULL); returns how many it got. */
uint32_t um_take(struct unwind_mem *m, uint32_t s, uint32_t n, uint64_t now, uint32_t *out);
/* Puts all pages of s in quarantine. */
void um_release(struct unwind_mem *m, uint32_t s, uint64_t now);

/* Chooses the slots (other than except) whose pages, given back, bring the
 * free and quarantined pages up to need: in the order described above.
 * Writes at most max slots to out and returns their count; stops early
 * when need is reached, and returns all candidates when it cannot be. */
size_t um_victims(struct unwind_mem *m, uint32_t except, uint32_t need, uint64_t protect_after,
		  uint32_t *out, size_t max);

#endif
