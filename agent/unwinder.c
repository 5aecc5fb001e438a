/* unwinder.c - see unwinder.h. */
#include "unwinder.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hmap.h"
#include "log.h"
#include "unwind_table.h"
#include "util.h"

#define MAX_JOBS 16384
#define MAX_ROWS_PER_FILE (4u << 20)
#define BUILD_DEADLINE_NS (5ull * 1000000000ull)
#define BATCH 4096

struct job {
	uint32_t index;
	struct file_id id;
	char name[64];
	int fd;
};

struct table {
	struct file_id id;
	struct unwind_file_info info;
};

struct unwinder {
	struct unwind_map_fds fds;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct job *jobs;
	size_t njobs, capjobs;
	bool stopping;
	struct unwinder_stats stats;
	/* worker thread only: */
	struct rule_set rules;
	size_t rules_pushed;
	uint32_t next_entry;
	bool full_logged;
	struct table *tables;
	size_t ntables, captables;
	struct hmap table_index;
};

struct tkey {
	const struct unwinder *u;
	const struct file_id *id;
};

static bool eq_table(const void *ctx, uint32_t idx)
{
	const struct tkey *k = ctx;
	return fileid_equal(&k->u->tables[idx].id, k->id);
}

static void stat_add(struct unwinder *u, uint64_t *field, uint64_t v)
{
	pthread_mutex_lock(&u->mu);
	*field += v;
	pthread_mutex_unlock(&u->mu);
}

/* Writes rules the map does not have yet. */
static int push_rules(struct unwinder *u)
{
	for (; u->rules_pushed < u->rules.count; u->rules_pushed++) {
		uint32_t key = (uint32_t)u->rules_pushed;
		if (bpf_map_update_elem(u->fds.rules, &key, &u->rules.rules[key], BPF_ANY) != 0)
			return -errno;
	}
	return 0;
}

static int write_entries(struct unwinder *u, uint32_t start, const struct unwind_rows *rows,
			 uint64_t base)
{
	uint32_t *keys = xmalloc(BATCH * sizeof(uint32_t));
	struct unwind_entry *vals = xmalloc(BATCH * sizeof(*vals));
	int rc = 0;
	for (size_t i = 0; i < rows->count && rc == 0; i += BATCH) {
		uint32_t n = (uint32_t)MIN((size_t)BATCH, rows->count - i);
		for (uint32_t j = 0; j < n; j++) {
			keys[j] = start + (uint32_t)(i + j);
			vals[j].addr = (uint32_t)(rows->rows[i + j].vaddr - base);
			vals[j].rule = rows->rows[i + j].rule;
		}
		uint32_t count = n;
		if (bpf_map_update_batch(u->fds.entries, keys, vals, &count, NULL) != 0) {
			/* Batch updates need Linux >= 5.6: one by one otherwise. */
			for (uint32_t j = 0; j < n && rc == 0; j++)
				if (bpf_map_update_elem(u->fds.entries, &keys[j], &vals[j], BPF_ANY) != 0)
					rc = -errno;
		}
	}
	free(keys);
	free(vals);
	return rc;
}

static void publish(struct unwinder *u, uint32_t index, const struct unwind_file_info *info)
{
	if (bpf_map_update_elem(u->fds.files, &index, info, BPF_ANY) != 0)
		log_warn("unwinder: cannot publish the table of file %u: %s", index, strerror(errno));
}

static void build(struct unwinder *u, struct job *j)
{
	if (j->index >= u->fds.files_cap) {
		stat_add(u, &u->stats.files_skipped, 1);
		return;
	}
	struct tkey k = { u, &j->id };
	uint32_t t;
	if (hmap_find(&u->table_index, hash_bytes(j->id.b, FILE_ID_LEN), eq_table, &k, &t)) {
		publish(u, j->index, &u->tables[t].info);
		stat_add(u, &u->stats.files_shared, 1);
		return;
	}
	struct unwind_rows rows;
	struct buf err = { 0 };
	uint64_t t0 = now_mono_ns(), cpu0 = now_thread_cpu_ns();
	struct unwind_budget budget = { MAX_ROWS_PER_FILE, t0 + BUILD_DEADLINE_NS };
	int rc = unwind_table_build(j->fd, &u->rules, &budget, &rows, &err);
	uint64_t dt = now_thread_cpu_ns() - cpu0; /* CPU time of this thread, not wall time */
	stat_add(u, &u->stats.build_ns, dt);
	if (rc < 0 || rows.count == 0) {
		log_debug("unwinder: no table for %s: %s", j->name, err.data ? err.data : "no rows");
		stat_add(u, &u->stats.files_failed, 1);
		buf_free(&err);
		unwind_rows_free(&rows);
		return;
	}
	uint64_t base = rows.rows[0].vaddr;
	if (rows.rows[rows.count - 1].vaddr - base > UINT32_MAX) {
		log_warn("unwinder: %s spans more than 4 GiB of code; unwinding it by frame pointer", j->name);
		stat_add(u, &u->stats.files_failed, 1);
		unwind_rows_free(&rows);
		return;
	}
	if ((uint64_t)u->next_entry + rows.count > u->fds.entries_cap) {
		if (!u->full_logged)
			log_warn("unwinder: the table of unwind rows is full (%u rows); %s and later files are unwound by frame pointer",
				 u->fds.entries_cap, j->name);
		u->full_logged = true;
		stat_add(u, &u->stats.files_failed, 1);
		unwind_rows_free(&rows);
		return;
	}
	uint32_t start = u->next_entry;
	int e = push_rules(u);
	if (e == 0)
		e = write_entries(u, start, &rows, base);
	if (e != 0) {
		log_warn("unwinder: writing the table of %s failed: %s", j->name, strerror(-e));
		stat_add(u, &u->stats.files_failed, 1);
		unwind_rows_free(&rows);
		return;
	}
	u->next_entry += (uint32_t)rows.count;
	struct unwind_file_info info = { base, start, (uint32_t)rows.count };
	xgrow((void **)&u->tables, &u->captables, u->ntables + 1, sizeof(*u->tables));
	u->tables[u->ntables] = (struct table){ j->id, info };
	hmap_insert(&u->table_index, hash_bytes(j->id.b, FILE_ID_LEN), (uint32_t)u->ntables);
	u->ntables++;
	publish(u, j->index, &info);
	log_debug("unwinder: %s: %zu rows from %s in %.1f ms", j->name, rows.count, rows.source,
		  (double)dt / 1e6);
	pthread_mutex_lock(&u->mu);
	u->stats.files_loaded++;
	u->stats.rows += rows.count;
	u->stats.entries_used = u->next_entry;
	u->stats.rules = u->rules.count;
	pthread_mutex_unlock(&u->mu);
	unwind_rows_free(&rows);
}

static void *run(void *arg)
{
	struct unwinder *u = arg;
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
		close(j.fd);
		pthread_mutex_lock(&u->mu);
	}
	for (size_t i = 0; i < u->njobs; i++)
		close(u->jobs[i].fd);
	u->njobs = 0;
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

struct unwinder *unwinder_start(const struct unwind_map_fds *fds, struct buf *err)
{
	struct unwinder *u = xcalloc(1, sizeof(*u));
	u->fds = *fds;
	u->stats.entries_cap = fds->entries_cap;
	rule_set_init(&u->rules, fds->rules_cap);
	pthread_mutex_init(&u->mu, NULL);
	pthread_cond_init(&u->cond, NULL);
	if (pthread_create(&u->thread, NULL, run, u) != 0) {
		buf_puts(err, "cannot start the unwind-table thread");
		rule_set_free(&u->rules);
		free(u);
		return NULL;
	}
	pthread_setname_np(u->thread, "ember-unwinder");
	return u;
}

void unwinder_stop(struct unwinder *u)
{
	if (!u)
		return;
	pthread_mutex_lock(&u->mu);
	u->stopping = true;
	pthread_cond_broadcast(&u->cond);
	pthread_mutex_unlock(&u->mu);
	pthread_join(u->thread, NULL);
	rule_set_free(&u->rules);
	free(u->jobs);
	free(u->tables);
	hmap_free(&u->table_index);
	pthread_mutex_destroy(&u->mu);
	pthread_cond_destroy(&u->cond);
	free(u);
}

void unwinder_add_file(struct unwinder *u, uint32_t index, const struct file_id *id,
		       const char *name, int fd)
{
	pthread_mutex_lock(&u->mu);
	if (u->njobs >= MAX_JOBS || u->stopping) {
		u->stats.files_skipped++;
		pthread_mutex_unlock(&u->mu);
		close(fd);
		return;
	}
	xgrow((void **)&u->jobs, &u->capjobs, u->njobs + 1, sizeof(*u->jobs));
	struct job *j = &u->jobs[u->njobs++];
	j->index = index;
	j->id = *id;
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->fd = fd;
	u->stats.files_queued++;
	pthread_cond_signal(&u->cond);
	pthread_mutex_unlock(&u->mu);
}

void unwinder_prioritize(struct unwinder *u, uint32_t index)
{
	pthread_mutex_lock(&u->mu);
	for (size_t i = 1; i < u->njobs; i++)
		if (u->jobs[i].index == index) {
			struct job j = u->jobs[i];
			memmove(u->jobs + 1, u->jobs, i * sizeof(*u->jobs));
			u->jobs[0] = j;
			u->stats.files_prioritized++;
			break;
		}
	pthread_mutex_unlock(&u->mu);
}

int unwinder_set_process(struct unwinder *u, uint32_t pid, uint64_t start_ticks,
			 uint64_t exec_id, const struct unwind_mapping *maps, size_t n)
{
	/* The value is 8 KiB: built on the heap, not the stack. */
	struct unwind_proc *p = xcalloc(1, sizeof(*p));
	p->start_ticks = start_ticks;
	p->exec_id = exec_id;
	p->nmaps = (uint32_t)MIN(n, (size_t)UNWIND_MAX_MAPPINGS);
	memcpy(p->maps, maps, p->nmaps * sizeof(*maps));
	int rc = bpf_map_update_elem(u->fds.procs, &pid, p, BPF_ANY) == 0 ? 0 : -errno;
	free(p);
	stat_add(u, rc == 0 ? &u->stats.proc_updates : &u->stats.proc_failures, 1);
	return rc;
}

void unwinder_remove_process(struct unwinder *u, uint32_t pid)
{
	(void)bpf_map_delete_elem(u->fds.procs, &pid); /* may never have been written */
}

void unwinder_get_stats(struct unwinder *u, struct unwinder_stats *out)
{
	pthread_mutex_lock(&u->mu);
	*out = u->stats;
	pthread_mutex_unlock(&u->mu);
}
