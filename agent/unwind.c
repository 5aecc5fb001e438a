/* unwind.c - see unwind.h. */
#include "unwind.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hmap.h"
#include "log.h"
#include "memstats.h"
#include "unwind_mem.h"
#include "unwind_table.h"
#include "util.h"

#define MAX_JOBS 16384
#define MAX_ROWS_PER_FILE ((size_t)UNWIND_DIR_PAGES * UNWIND_PAGE_ROWS * UNWIND_PAGE_ROWS)
#define BUILD_DEADLINE_NS (5ull * 1000000000ull)
#define BATCH 4096
/* A BPF program that read a table's directory before it was unpublished
 * runs for microseconds; its pages are reused after this. */
#define QUARANTINE_NS (20ull * 1000000ull)
/* The tick keeps this share of the array free (1/16) by giving back, ahead
 * of need, tables no process maps (least recently used first): a new
 * process's table then finds its pages at once, not after evicting and a
 * quarantine. */
#define HEADROOM_SHIFT 4
/* Tables sampled this recently are not evicted to make room for another:
 * when what runs needs more than the array holds, the table that asks
 * waits (refused, or loaded in part) rather than pushing out what runs,
 * which would push it out in turn (thrashing). Longer for a table larger
 * than half the array. */
#define PROTECT_NS (2ull * 1000000000ull)
#define PROTECT_LARGE_NS (10ull * 1000000000ull)
/* An evicted table is reloaded at most this often. */
#define RELOAD_MIN_NS (2ull * 1000000000ull)
#define MAX_WANT 16

enum tstate {
	T_QUEUED,   /* waiting for a build (first or again) */
	T_BUILDING,
	T_LOADED,
	T_PARTIAL,  /* some row pages loaded */
	T_EVICTED,  /* no rows: given back, or no room */
	T_FAILED,   /* no table can be built (no CFI, over budget) */
};

/* What the agent knows about a table slot (parallel to unwind_mem's). */
struct table {
	struct file_id id;
	char name[64];
	int fd;           /* to build it again; -1 once the slot is given back */
	bool reopenable;
	bool queued;
	bool published;   /* unwind_files[slot] has rows */
	bool pending;     /* unwind_files[slot] says its first table is being built */
	bool ever_loaded;
	uint8_t state;
	uint32_t nrowpages;
	uint64_t evicted_at, loaded_at, retry_at;
	uint32_t want[MAX_WANT]; /* row pages samples fell in, not loaded */
	uint32_t nwant;
};

/* A registry index: its file, and its table's slot while it has one. */
struct reg {
	struct file_id id;
	char name[64];
	uint32_t slot, gen;
	int fd; /* the descriptor given at registration, until a slot takes it */
	bool known, reopenable;
};

struct job {
	uint32_t slot, gen;
};

struct proc_refs {
	uint32_t pid;
	uint32_t *slots;
	uint32_t n;
};

struct unwind {
	struct unwind_map_fds fds;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	bool stopping;
	struct unwind_stats stats;
	/* under mu: */
	struct job *jobs;
	size_t njobs, capjobs;
	struct unwind_mem mem;
	struct table *tables; /* [mem.nslots] */
	struct hmap by_id;    /* file id -> slot */
	struct reg *regs;
	size_t nregs, capregs;
	struct proc_refs *procs;
	size_t nprocs, capprocs;
	struct hmap by_pid;
	uint32_t *free_procs;
	size_t nfree_procs, capfree_procs;
	/* worker thread only: */
	struct rule_set rules;
	size_t rules_pushed;
};

static bool eq_id(const void *ctx, uint32_t idx)
{
	const struct unwind *u = ((const void *const *)ctx)[0];
	const struct file_id *id = ((const void *const *)ctx)[1];
	return u->mem.slots[idx].used && fileid_equal(&u->tables[idx].id, id);
}

static uint64_t id_hash(const struct file_id *id)
{
	return hash_bytes(id->b, FILE_ID_LEN);
}

static uint32_t find_slot(struct unwind *u, const struct file_id *id)
{
	const void *ctx[2] = { u, id };
	uint32_t s;
	return hmap_find(&u->by_id, id_hash(id), eq_id, ctx, &s) ? s : UM_NONE;
}

/* Writes rules the map does not have yet. */
static int push_rules(struct unwind *u)
{
	for (; u->rules_pushed < u->rules.count; u->rules_pushed++) {
		uint32_t key = (uint32_t)u->rules_pushed;
		if (bpf_map_update_elem(u->fds.rules, &key, &u->rules.rules[key], BPF_ANY) != 0)
			return -errno;
	}
	return 0;
}

static int write_batch(struct unwind *u, uint32_t *keys, struct unwind_entry *vals, uint32_t n)
{
	uint32_t count = n;
	if (n == 0 || bpf_map_update_batch(u->fds.entries, keys, vals, &count, NULL) == 0)
		return 0;
	/* Batch updates need Linux >= 5.6: one by one otherwise. */
	for (uint32_t j = 0; j < n; j++)
		if (bpf_map_update_elem(u->fds.entries, &keys[j], &vals[j], BPF_ANY) != 0)
			return -errno;
	return 0;
}

/* Writes unwind_files[slot]: a table, or none (count 0). */
static void write_info(struct unwind *u, uint32_t slot, const struct unwind_file_info *info)
{
	if (bpf_map_update_elem(u->fds.files, &slot, info, BPF_ANY) != 0)
		log_warn("unwinder: cannot write the table of slot %u: %s", slot, strerror(errno));
}

/* Takes the table out of BPF's sight: first, before its pages go back.
 * Also ends a pending mark (the table will not come now). */
static void unpublish(struct unwind *u, uint32_t slot)
{
	struct table *t = &u->tables[slot];
	if (!t->published && !t->pending)
		return;
	struct unwind_file_info none = { 0 };
	write_info(u, slot, &none);
	t->published = false;
	t->pending = false;
}

static void push_job(struct unwind *u, uint32_t slot, bool front)
{
	struct table *t = &u->tables[slot];
	if (t->queued || u->njobs >= MAX_JOBS || u->stopping) {
		if (!t->queued)
			u->stats.files_skipped++;
		return;
	}
	xgrow((void **)&u->jobs, &u->capjobs, u->njobs + 1, sizeof(*u->jobs));
	struct job j = { slot, u->mem.slots[slot].gen };
	if (front) {
		memmove(u->jobs + 1, u->jobs, u->njobs * sizeof(*u->jobs));
		u->jobs[0] = j;
	} else {
		u->jobs[u->njobs] = j;
	}
	u->njobs++;
	t->queued = true;
	u->stats.files_queued++;
	pthread_cond_signal(&u->cond);
}

/* Gives a slot back whole (no process maps it). */
static void free_slot(struct unwind *u, uint32_t slot, uint64_t now)
{
	struct table *t = &u->tables[slot];
	unpublish(u, slot);
	const void *ctx[2] = { u, &t->id };
	hmap_remove(&u->by_id, id_hash(&t->id), eq_id, ctx);
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	um_slot_free(&u->mem, slot, now);
}

/* Gives back the pages of a victim of um_victims. */
static void evict(struct unwind *u, uint32_t slot, uint64_t now)
{
	struct table *t = &u->tables[slot];
	struct um_slot *sl = um_slot(&u->mem, slot);
	if (sl->refs == 0 && t->reopenable) {
		free_slot(u, slot, now);
		u->stats.files_reclaimed++;
		return;
	}
	unpublish(u, slot);
	um_release(&u->mem, slot, now);
	if (t->state == T_LOADED || t->state == T_PARTIAL) {
		t->state = T_EVICTED;
		t->nwant = 0;
	}
	t->evicted_at = now;
	u->stats.files_evicted++;
}

/* Copies when each loaded table was last sampled from BPF. */
static void refresh_seen(struct unwind *u)
{
	for (uint32_t s = 0; s < u->mem.nslots; s++) {
		struct um_slot *sl = &u->mem.slots[s];
		uint64_t seen;
		if (!sl->used || !sl->npages || bpf_map_lookup_elem(u->fds.seen, &s, &seen) != 0)
			continue;
		sl->last_seen = MAX(sl->last_seen, seen);
		sl->last_sampled = MAX(sl->last_sampled, seen);
	}
}

static uint64_t seen_of(struct unwind *u, uint32_t slot)
{
	uint64_t seen = 0;
	if (bpf_map_lookup_elem(u->fds.seen, &slot, &seen) != 0)
		return 0;
	return seen;
}

/* Waits (mu held) until t or a stop; false when stopping. */
static bool wait_until_ns(struct unwind *u, uint64_t t)
{
	while (!u->stopping && now_mono_ns() < t) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		timespec_add_ns(&ts, t - now_mono_ns() + 1000000);
		pthread_cond_timedwait(&u->cond, &u->mu, &ts);
	}
	return !u->stopping;
}

/* Gets pages for a table of need pages (mu held): from free pages, then by
 * evicting others. Returns how many it got (0 when none), in pages. */
static uint32_t reserve(struct unwind *u, uint32_t slot, uint32_t need, uint32_t min,
			uint32_t *pages)
{
	uint64_t now = now_mono_ns();
	if (um_free_now(&u->mem, now) + um_pending(&u->mem) < need) {
		refresh_seen(u);
		uint64_t window = need > u->mem.npages / 2 ? PROTECT_LARGE_NS : PROTECT_NS;
		uint64_t protect = now > window ? now - window : 0;
		uint32_t *victims = xmalloc(u->mem.nslots * sizeof(uint32_t));
		size_t nv = um_victims(&u->mem, slot, need, protect, victims, u->mem.nslots);
		for (size_t i = 0; i < nv; i++)
			evict(u, victims[i], now);
		free(victims);
	}
	uint32_t avail = um_free_now(&u->mem, now) + um_pending(&u->mem);
	uint32_t want = MIN(need, avail);
	if (want < min)
		return 0;
	/* Pages just given back come out of quarantine within QUARANTINE_NS. */
	while (um_free_now(&u->mem, now_mono_ns()) < want) {
		uint64_t at = um_next_free_at(&u->mem);
		if (!at || !wait_until_ns(u, at))
			return 0;
	}
	return um_take(&u->mem, slot, want, now_mono_ns(), pages);
}

/* What building the table of the file fd holds at its peak, estimated
 * from its size (the rows, libdw's cache of the FDEs, the pages of
 * .eh_frame read: ~1/5 of the file for libLLVM and librustc_driver): what
 * it reserves of the agent's memory budget (memstats.h). */
static uint64_t table_estimate(int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < MEMSTATS_SMALL_FILE)
		return 0;
	return (uint64_t)st.st_size / 5;
}

static void build_reserved(struct unwind *u, struct job *j, int fd, uint8_t prev);

/* Builds and loads the table of a slot (the worker thread). */
static void build(struct unwind *u, struct job *j)
{
	pthread_mutex_lock(&u->mu);
	struct um_slot *sl = um_slot(&u->mem, j->slot);
	struct table *t = &u->tables[j->slot];
	if (!sl || sl->gen != j->gen) {
		pthread_mutex_unlock(&u->mu);
		return;
	}
	t->queued = false;
	int fd = t->fd >= 0 ? dup(t->fd) : -1;
	if (fd < 0) {
		unpublish(u, j->slot);
		t->state = T_FAILED;
		u->stats.files_failed++;
		pthread_mutex_unlock(&u->mu);
		return;
	}
	uint8_t prev = t->state;
	t->state = T_BUILDING;
	sl->loading = true;
	pthread_mutex_unlock(&u->mu);
	/* Large files take their turn in the memory budget shared with the
	 * symbol uploader; the heap's free pages go back after them. */
	uint64_t reserved = memstats_reserve(table_estimate(fd));
	build_reserved(u, j, fd, prev);
	memstats_release(reserved);
	if (reserved)
		memstats_trim();
}

static void build_reserved(struct unwind *u, struct job *j, int fd, uint8_t prev)
{
	pthread_mutex_lock(&u->mu);
	struct um_slot *sl = um_slot(&u->mem, j->slot);
	struct table *t = &u->tables[j->slot];
	char name[64];
	memcpy(name, t->name, sizeof(name));
	pthread_mutex_unlock(&u->mu);

	struct unwind_rows rows;
	struct buf err = { 0 };
	uint64_t t0 = now_mono_ns(), cpu0 = now_thread_cpu_ns();
	struct unwind_budget budget = { MAX_ROWS_PER_FILE, t0 + BUILD_DEADLINE_NS };
	int rc = unwind_table_build(fd, &u->rules, &budget, &rows, &err);
	close(fd);
	uint64_t dt = now_thread_cpu_ns() - cpu0; /* CPU time of this thread, not wall time */
	/* Rows are offsets from the first one's address (at most 4 GiB past
	 * it: unwind_table_build fails a wider table), as BPF reads them. */
	uint64_t base = rc == 0 && rows.count ? unwind_row_vaddr(&rows, 0) : 0;
	const char *why = err.data ? err.data : "no rows";
	if (rc == 0 && rows.count && push_rules(u) != 0) {
		why = "cannot write the rules";
		rc = -1;
	}
	pthread_mutex_lock(&u->mu);
	u->stats.build_ns += dt;
	sl = um_slot(&u->mem, j->slot);
	if (rc < 0 || rows.count == 0) {
		log_debug("unwinder: no table for %s: %s", name, why);
		unpublish(u, j->slot);
		t->state = T_FAILED;
		sl->loading = false;
		u->stats.files_failed++;
		pthread_mutex_unlock(&u->mu);
		buf_free(&err);
		unwind_rows_free(&rows);
		return;
	}
	buf_free(&err);
	/* A partial table being reloaded with other pages: out of sight first
	 * (a pending mark stays while the pages are found and written). */
	if (t->published)
		unpublish(u, j->slot);
	um_release(&u->mem, j->slot, now_mono_ns());

	uint32_t nrp = (uint32_t)((rows.count + UNWIND_PAGE_ROWS - 1) / UNWIND_PAGE_ROWS);
	uint32_t ndir = nrp > 1 ? (nrp + UNWIND_PAGE_ROWS - 1) / UNWIND_PAGE_ROWS : 0;
	uint32_t *pages = xmalloc((nrp + ndir) * sizeof(uint32_t));
	uint32_t got = reserve(u, j->slot, nrp + ndir, ndir + 1, pages);
	uint64_t now = now_mono_ns();
	if (got == 0) {
		if (!u->stopping)
			log_info("unwinder: no room for the table of %s (%zu rows; %u of %u pages of %u rows held by tables sampled in the last seconds); unwound by frame pointer until room is made (-unwind-table-rows)",
				 name, rows.count, u->mem.pages_used, u->mem.npages, UNWIND_PAGE_ROWS);
		unpublish(u, j->slot);
		t->state = T_EVICTED;
		t->evicted_at = now;
		t->retry_at = now + RELOAD_MIN_NS;
		sl->loading = false;
		u->stats.files_refused++;
		pthread_mutex_unlock(&u->mu);
		free(pages);
		unwind_rows_free(&rows);
		return;
	}
	/* Which row pages get a page: all, or, in part, those samples fell in
	 * first, then the others from the start. */
	uint32_t *phys = xmalloc(nrp * sizeof(uint32_t));
	for (uint32_t i = 0; i < nrp; i++)
		phys[i] = UNWIND_PAGE_NONE;
	uint32_t next = ndir, nloaded = 0;
	if (got < nrp + ndir) {
		for (uint32_t w = 0; w < t->nwant && next < got; w++)
			if (t->want[w] < nrp && phys[t->want[w]] == UNWIND_PAGE_NONE) {
				phys[t->want[w]] = pages[next++];
				nloaded++;
			}
	}
	for (uint32_t i = 0; i < nrp && next < got; i++)
		if (phys[i] == UNWIND_PAGE_NONE) {
			phys[i] = pages[next++];
			nloaded++;
		}
	t->nwant = 0;
	t->nrowpages = nrp;
	pthread_mutex_unlock(&u->mu);

	/* The rows and the directory, into pages only this table holds. */
	uint32_t *keys = xmalloc(BATCH * sizeof(uint32_t));
	struct unwind_entry *vals = xmalloc(BATCH * sizeof(*vals));
	uint32_t n = 0;
	int e = 0;
	for (uint32_t p = 0; p < nrp && e == 0; p++) {
		if (phys[p] == UNWIND_PAGE_NONE)
			continue;
		size_t first = (size_t)p * UNWIND_PAGE_ROWS, end = MIN(rows.count, first + UNWIND_PAGE_ROWS);
		for (size_t i = first; i < end && e == 0; i++) {
			keys[n] = phys[p] * UNWIND_PAGE_ROWS + (uint32_t)(i - first);
			vals[n].addr = (uint32_t)(unwind_row_vaddr(&rows, i) - base);
			vals[n].rule = rows.rows[i].rule;
			if (++n == BATCH) {
				e = write_batch(u, keys, vals, n);
				n = 0;
			}
		}
	}
	struct unwind_file_info info = { .base = base, .count = (uint32_t)rows.count };
	for (uint32_t d = 0; d < ndir; d++)
		info.dir[d] = pages[d];
	if (ndir == 0)
		info.dir[0] = phys[0];
	for (uint32_t p = 0; ndir && p < nrp && e == 0; p++) {
		keys[n] = pages[p / UNWIND_PAGE_ROWS] * UNWIND_PAGE_ROWS + p % UNWIND_PAGE_ROWS;
		vals[n].addr = (uint32_t)(unwind_row_vaddr(&rows, (size_t)p * UNWIND_PAGE_ROWS) - base);
		vals[n].rule = phys[p];
		if (++n == BATCH) {
			e = write_batch(u, keys, vals, n);
			n = 0;
		}
	}
	if (e == 0)
		e = write_batch(u, keys, vals, n);
	free(keys);
	free(vals);
	free(phys);
	free(pages);

	pthread_mutex_lock(&u->mu);
	now = now_mono_ns();
	sl->loading = false;
	if (e != 0) {
		log_warn("unwinder: writing the table of %s failed: %s", name, strerror(-e));
		unpublish(u, j->slot);
		um_release(&u->mem, j->slot, now);
		t->state = T_FAILED;
		u->stats.files_failed++;
	} else {
		write_info(u, j->slot, &info);
		t->published = true;
		t->pending = false;
		bool partial = nloaded < nrp;
		t->state = partial ? T_PARTIAL : T_LOADED;
		t->loaded_at = now;
		t->retry_at = now + RELOAD_MIN_NS;
		sl->last_seen = MAX(sl->last_seen, now);
		if (partial) {
			u->stats.files_partial++;
			log_info("unwinder: %s loaded in part: %u of %u pages of %u rows (the table is full)",
				 name, nloaded, nrp, UNWIND_PAGE_ROWS);
		}
		if (t->ever_loaded || prev == T_EVICTED)
			u->stats.files_reloaded++;
		else
			u->stats.files_loaded++;
		t->ever_loaded = true;
		u->stats.rows += rows.count;
		u->stats.rules = u->rules.count;
		log_debug("unwinder: %s: %zu rows from %s in %.1f ms, %u pages", name, rows.count,
			  rows.source, (double)dt / 1e6, got);
	}
	pthread_mutex_unlock(&u->mu);
	unwind_rows_free(&rows);
}

static void *run(void *arg)
{
	struct unwind *u = arg;
	pthread_mutex_lock(&u->mu);
	while (!u->stopping) {
		if (!u->njobs) {
			pthread_cond_wait(&u->cond, &u->mu);
			continue;
		}
		struct job j = u->jobs[0];
		memmove(u->jobs, u->jobs + 1, (u->njobs - 1) * sizeof(*u->jobs));
		u->njobs--;
		pthread_mutex_unlock(&u->mu);
		build(u, &j);
		pthread_mutex_lock(&u->mu);
	}
	u->njobs = 0;
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

struct unwind *unwind_start(const struct unwind_map_fds *fds, struct buf *err)
{
	struct unwind *u = xcalloc(1, sizeof(*u));
	u->fds = *fds;
	uint32_t npages = fds->entries_cap / UNWIND_PAGE_ROWS;
	u->stats.entries_cap = (uint64_t)npages * UNWIND_PAGE_ROWS;
	um_init(&u->mem, npages, fds->files_cap, QUARANTINE_NS);
	/* Zeroed and untouched until a slot is used (new_slot sets fd): the
	 * array is 6 MiB of address space, resident only as far as slots are. */
	u->tables = xcalloc(fds->files_cap ? fds->files_cap : 1, sizeof(*u->tables));
	rule_set_init(&u->rules, fds->rules_cap);
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cond, NULL);
	if (pthread_create(&u->thread, NULL, run, u) != 0) {
		buf_puts(err, "cannot start the unwind-table thread");
		rule_set_free(&u->rules);
		um_destroy(&u->mem);
		free(u->tables);
		free(u);
		return NULL;
	}
	pthread_setname_np(u->thread, "ember-unwinder");
	return u;
}

void unwind_stop(struct unwind *u)
{
	if (!u)
		return;
	thread_stop_join(u->thread, &u->mu, &u->cond, &u->stopping);
	rule_set_free(&u->rules);
	free(u->jobs);
	for (uint32_t i = 0; i < u->mem.nslots; i++)
		if (u->mem.slots[i].used && u->tables[i].fd >= 0)
			close(u->tables[i].fd);
	free(u->tables);
	for (size_t i = 0; i < u->nregs; i++)
		if (u->regs[i].fd >= 0)
			close(u->regs[i].fd);
	free(u->regs);
	for (size_t i = 0; i < u->nprocs; i++)
		free(u->procs[i].slots);
	free(u->procs);
	free(u->free_procs);
	hmap_free(&u->by_pid);
	hmap_free(&u->by_id);
	um_destroy(&u->mem);
	pthread_mutex_destroy(&u->mu);
	pthread_cond_destroy(&u->cond);
	free(u);
}

/* A new slot for a file, with its descriptor (taken), queued for a
 * build; UM_NONE when no slot is left. mu held. */
static uint32_t new_slot(struct unwind *u, const struct file_id *id, const char *name, int fd,
			 bool reopenable, uint64_t now)
{
	uint32_t s = um_slot_alloc(&u->mem, now);
	if (s == UM_NONE) {
		/* Give back the least recently used table no process maps. */
		uint32_t best = UM_NONE;
		for (uint32_t i = 0; i < u->mem.nslots; i++) {
			const struct um_slot *sl = &u->mem.slots[i];
			if (sl->used && !sl->refs && !sl->loading && u->tables[i].reopenable &&
			    (best == UM_NONE || sl->unref_since < u->mem.slots[best].unref_since))
				best = i;
		}
		if (best != UM_NONE) {
			free_slot(u, best, now);
			u->stats.files_reclaimed++;
		}
		close(fd);
		u->stats.files_skipped++;
		return UM_NONE; /* the slot is in quarantine: the next read of the maps */
	}
	struct table *t = &u->tables[s];
	memset(t, 0, sizeof(*t));
	t->id = *id;
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->fd = fd;
	t->reopenable = reopenable;
	t->state = T_QUEUED;
	/* When the slot's previous table was last sampled is not this one's. */
	uint64_t zero = 0;
	(void)bpf_map_update_elem(u->fds.seen, &s, &zero, BPF_ANY);
	hmap_insert(&u->by_id, id_hash(id), s);
	push_job(u, s, false);
	if (t->queued) {
		/* BPF sends the raw stack of a walk that broke in this file,
		 * at any age of its process, until the table is in. */
		struct unwind_file_info mark = { .pending = 1 };
		write_info(u, s, &mark);
		t->pending = true;
	}
	return s;
}

void unwind_add_file(struct unwind *u, uint32_t index, const struct file_id *id,
		       const char *name, int fd, bool reopenable)
{
	pthread_mutex_lock(&u->mu);
	if (u->stopping || index > (1u << 30)) {
		pthread_mutex_unlock(&u->mu);
		close(fd);
		return;
	}
	if (index >= u->nregs) {
		xgrow((void **)&u->regs, &u->capregs, (size_t)index + 1, sizeof(*u->regs));
		for (size_t i = u->nregs; i <= index; i++)
			u->regs[i] = (struct reg){ .slot = UM_NONE, .fd = -1 };
		u->nregs = (size_t)index + 1;
	}
	struct reg *r = &u->regs[index];
	if (r->fd >= 0)
		close(r->fd);
	r->id = *id;
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->known = true;
	r->reopenable = reopenable;
	r->fd = -1;
	uint64_t now = now_mono_ns();
	uint32_t s = find_slot(u, id);
	if (s != UM_NONE) {
		u->stats.files_shared++;
		close(fd);
	} else {
		s = new_slot(u, id, name, fd, reopenable, now);
	}
	r->slot = s;
	r->gen = s != UM_NONE ? u->mem.slots[s].gen : 0;
	pthread_mutex_unlock(&u->mu);
}

/* The slot of registry index r for a mapping of pid, made (and the file
 * opened again) when the table was given back. mu held. */
static uint32_t slot_of(struct unwind *u, uint32_t index, uint32_t pid,
			const struct unwind_mapping *m, uint64_t now)
{
	if (index >= u->nregs || !u->regs[index].known)
		return UM_NONE;
	struct reg *r = &u->regs[index];
	const struct um_slot *sl = um_slot(&u->mem, r->slot);
	if (sl && sl->gen == r->gen && fileid_equal(&u->tables[r->slot].id, &r->id))
		return r->slot;
	uint32_t s = find_slot(u, &r->id);
	if (s == UM_NONE && r->reopenable) {
		char path[96];
		snprintf(path, sizeof(path), "/proc/%u/map_files/%llx-%llx", pid,
			 (unsigned long long)m->start, (unsigned long long)m->end);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		struct file_id id;
		if (fd >= 0 && (fileid_from_fd(fd, &id) < 0 || !fileid_equal(&id, &r->id))) {
			close(fd);
			fd = -1;
		}
		if (fd < 0)
			return UM_NONE;
		s = new_slot(u, &r->id, r->name, fd, true, now);
	}
	r->slot = s;
	r->gen = s != UM_NONE ? u->mem.slots[s].gen : 0;
	return s;
}

static struct proc_refs *find_proc(struct unwind *u, uint32_t pid)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(u->procs, pid, &pid);
	uint32_t i;
	return hmap_find(&u->by_pid, hash_u64(pid), hmap_field_eq, &k, &i) ? &u->procs[i] : NULL;
}

/* Replaces the slots a process holds (mu held). */
static void set_refs(struct unwind *u, uint32_t pid, uint32_t *slots, uint32_t n, uint64_t now)
{
	struct proc_refs *p = find_proc(u, pid);
	if (p) {
		for (uint32_t i = 0; i < p->n; i++)
			um_unref(&u->mem, p->slots[i], now);
		free(p->slots);
		p->slots = slots;
		p->n = n;
		if (n == 0) {
			struct hmap_field_key k = HMAP_FIELD_KEY(u->procs, pid, &pid);
			uint32_t idx = (uint32_t)(p - u->procs);
			hmap_remove(&u->by_pid, hash_u64(pid), hmap_field_eq, &k);
			free(p->slots);
			*p = (struct proc_refs){ 0 };
			xgrow((void **)&u->free_procs, &u->capfree_procs, u->nfree_procs + 1, sizeof(uint32_t));
			u->free_procs[u->nfree_procs++] = idx;
		}
		return;
	}
	if (n == 0) {
		free(slots);
		return;
	}
	uint32_t idx;
	if (u->nfree_procs) {
		idx = u->free_procs[--u->nfree_procs];
	} else {
		xgrow((void **)&u->procs, &u->capprocs, u->nprocs + 1, sizeof(*u->procs));
		idx = (uint32_t)u->nprocs++;
	}
	u->procs[idx] = (struct proc_refs){ pid, slots, n };
	hmap_insert(&u->by_pid, hash_u64(pid), idx);
}

void unwind_prioritize(struct unwind *u, uint32_t index)
{
	pthread_mutex_lock(&u->mu);
	uint32_t s = index < u->nregs ? u->regs[index].slot : UM_NONE;
	const struct um_slot *sl = um_slot(&u->mem, s);
	if (!sl || sl->gen != u->regs[index].gen) {
		pthread_mutex_unlock(&u->mu);
		return;
	}
	struct table *t = &u->tables[s];
	if (t->queued) {
		for (size_t i = 1; i < u->njobs; i++)
			if (u->jobs[i].slot == s) {
				struct job j = u->jobs[i];
				memmove(u->jobs + 1, u->jobs, i * sizeof(*u->jobs));
				u->jobs[0] = j;
				u->stats.files_prioritized++;
				break;
			}
	} else if (t->state == T_EVICTED && now_mono_ns() >= t->retry_at) {
		t->retry_at = now_mono_ns() + RELOAD_MIN_NS;
		push_job(u, s, true);
		u->stats.files_prioritized++;
	}
	pthread_mutex_unlock(&u->mu);
}

int unwind_set_process(struct unwind *u, uint32_t pid, uint64_t start_ticks,
			 uint64_t exec_id, const struct unwind_mapping *maps, size_t n)
{
	/* The value is 8 KiB: built on the heap, not the stack. */
	struct unwind_proc *p = xcalloc(1, sizeof(*p));
	p->start_ticks = start_ticks;
	p->exec_id = exec_id;
	p->nmaps = (uint32_t)MIN(n, (size_t)UNWIND_MAX_MAPPINGS);
	memcpy(p->maps, maps, p->nmaps * sizeof(*maps));
	uint32_t *slots = xmalloc((p->nmaps ? p->nmaps : 1) * sizeof(uint32_t));
	uint32_t ns = 0;
	uint64_t now = now_mono_ns();
	pthread_mutex_lock(&u->mu);
	for (uint32_t i = 0; i < p->nmaps; i++) {
		uint32_t f = p->maps[i].file;
		uint32_t s = f == UNWIND_NO_FILE ? UM_NONE : slot_of(u, f, pid, &p->maps[i], now);
		p->maps[i].file = s == UM_NONE ? UNWIND_NO_FILE : s;
		if (s != UM_NONE) {
			um_ref(&u->mem, s);
			slots[ns++] = s;
		}
	}
	pthread_mutex_unlock(&u->mu);
	int rc = bpf_map_update_elem(u->fds.procs, &pid, p, BPF_ANY) == 0 ? 0 : -errno;
	free(p);
	pthread_mutex_lock(&u->mu);
	/* The references the process held before go once BPF sees the new
	 * entry (or, when it could not be written, the process has none). */
	if (rc != 0) {
		for (uint32_t i = 0; i < ns; i++)
			um_unref(&u->mem, slots[i], now);
		ns = 0;
	}
	set_refs(u, pid, slots, ns, now);
	if (rc == 0)
		u->stats.proc_updates++;
	else
		u->stats.proc_failures++;
	pthread_mutex_unlock(&u->mu);
	return rc;
}

void unwind_remove_process(struct unwind *u, uint32_t pid)
{
	(void)bpf_map_delete_elem(u->fds.procs, &pid); /* may never have been written */
	pthread_mutex_lock(&u->mu);
	set_refs(u, pid, NULL, 0, now_mono_ns());
	pthread_mutex_unlock(&u->mu);
}

/* The row pages that samples wanted in tables loaded in part. mu held. */
static void collect_wanted(struct unwind *u)
{
	uint64_t key, next, at;
	const void *prev = NULL;
	size_t guard = 0;
	while (guard++ < 8192 && bpf_map_get_next_key(u->fds.wanted, prev, &next) == 0) {
		key = next;
		prev = &key;
		uint32_t s = (uint32_t)(key >> 32), page = (uint32_t)key;
		if (bpf_map_lookup_elem(u->fds.wanted, &key, &at) != 0 || !um_slot(&u->mem, s))
			continue;
		struct table *t = &u->tables[s];
		if (t->state != T_PARTIAL || at < t->loaded_at || t->nwant >= MAX_WANT)
			continue;
		bool dup = false;
		for (uint32_t w = 0; w < t->nwant; w++)
			dup |= t->want[w] == page;
		if (!dup)
			t->want[t->nwant++] = page;
	}
}

void unwind_tick(struct unwind *u, uint64_t now)
{
	pthread_mutex_lock(&u->mu);
	bool partial = false;
	for (uint32_t s = 0; s < u->mem.nslots; s++) {
		struct um_slot *sl = &u->mem.slots[s];
		struct table *t = &u->tables[s];
		if (!sl->used || sl->loading)
			continue;
		if (!sl->refs && t->reopenable && now > sl->unref_since &&
		    now - sl->unref_since >= UNWIND_KEEP_NS) {
			bool had = sl->npages > 0;
			free_slot(u, s, now);
			if (had)
				u->stats.files_reclaimed++;
			continue;
		}
		partial |= t->state == T_PARTIAL;
		if (sl->refs && t->state == T_EVICTED && !t->queued && now >= t->retry_at &&
		    seen_of(u, s) > t->evicted_at) {
			t->retry_at = now + RELOAD_MIN_NS;
			push_job(u, s, false);
		}
	}
	uint32_t want_free = u->mem.npages >> HEADROOM_SHIFT;
	if (um_free_now(&u->mem, now) + um_pending(&u->mem) < want_free) {
		/* Protecting every mapped table: only unmapped ones go. */
		uint32_t *victims = xmalloc(u->mem.nslots * sizeof(uint32_t));
		size_t nv = um_victims(&u->mem, UM_NONE, want_free, 0, victims, u->mem.nslots);
		for (size_t i = 0; i < nv; i++)
			if (!u->mem.slots[victims[i]].refs && u->tables[victims[i]].reopenable) {
				free_slot(u, victims[i], now);
				u->stats.files_reclaimed++;
			}
		free(victims);
	}
	if (partial) {
		collect_wanted(u);
		for (uint32_t s = 0; s < u->mem.nslots; s++) {
			struct table *t = &u->tables[s];
			if (u->mem.slots[s].used && t->state == T_PARTIAL && t->nwant && !t->queued &&
			    now >= t->retry_at) {
				qsort(t->want, t->nwant, sizeof(uint32_t), cmp_u32);
				t->retry_at = now + RELOAD_MIN_NS;
				push_job(u, s, false);
			}
		}
	}
	pthread_mutex_unlock(&u->mu);
}

uint64_t unwind_publications(struct unwind *u)
{
	pthread_mutex_lock(&u->mu);
	uint64_t n = u->stats.files_loaded + u->stats.files_reloaded + u->stats.files_partial +
		     u->stats.files_failed;
	pthread_mutex_unlock(&u->mu);
	return n;
}

void unwind_get_stats(struct unwind *u, struct unwind_stats *out)
{
	pthread_mutex_lock(&u->mu);
	*out = u->stats;
	out->entries_used = (uint64_t)u->mem.pages_used * UNWIND_PAGE_ROWS;
	uint64_t tables = 0;
	for (uint32_t s = 0; s < u->mem.nslots; s++)
		tables += u->mem.slots[s].used && u->tables[s].published;
	out->tables = tables;
	pthread_mutex_unlock(&u->mu);
}
