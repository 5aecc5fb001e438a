/* agents.c - see agents.h. */
#include "agents.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmap.h"
#include "log.h"
#include "metadb.h"
#include "util.h"

/* One agent as this replica knows it, and what it has not written yet. */
struct mem {
	char instance[65], project[37];
	char host[AGENTS_TEXT_MAX + 1], version[AGENTS_TEXT_MAX + 1];
	char protocol[AGENTS_TEXT_MAX + 1], address[AGENTS_TEXT_MAX + 1];
	uint32_t host_cpus;
	int64_t first_ms, last_ms, written_ms; /* written_ms 0: never */
	uint64_t batches, samples;             /* since the last write */
	bool dirty;
};

struct agents {
	pthread_mutex_t mu; /* guards all below, and db */
	struct metadb *db;
	struct mem *mem;
	size_t count, cap;
	struct hmap index;
	bool warned; /* the database's failure was logged (until it works again) */
	int64_t retry_ms; /* after a failed write, none is tried before this */
	/* The writer thread: every AGENTS_TICK_MS, the news due (write_due). */
	pthread_t writer;
	pthread_cond_t wake;
	bool stopping, started;
	bool full; /* AGENTS_MAX_MEMORY held: the writer writes all and starts over */
};



static const char agents_ddl[] =
	"CREATE TABLE IF NOT EXISTS agent_inventory ("
	" instance TEXT PRIMARY KEY,"
	" project TEXT NOT NULL,"
	" host TEXT NOT NULL,"
	" version TEXT NOT NULL,"
	" protocol TEXT NOT NULL,"
	" address TEXT NOT NULL,"
	" host_cpus {int} NOT NULL,"
	" first_seen_ms {int} NOT NULL,"
	" last_seen_ms {int} NOT NULL,"
	" batches {int} NOT NULL,"
	" samples {int} NOT NULL)";

static void *writer_main(void *arg);

int agents_open(const char *url, const char *password, struct agents **out, struct buf *err)
{
	*out = NULL;
	struct agents *a = xcalloc(1, sizeof(*a));
	pthread_mutex_init(&a->mu, NULL);
	cond_init_monotonic(&a->wake);
	if (metadb_open_schema(url, password, "agent_inventory", 1, agents_ddl, &a->db, err) < 0) {
		agents_close(a);
		return -1;
	}
	if (pthread_create(&a->writer, NULL, writer_main, a) != 0) {
		buf_puts(err, "profiler inventory: cannot start its thread");
		agents_close(a);
		return -1;
	}
	a->started = true;
	*out = a;
	return 0;
}

/* Copies at most AGENTS_TEXT_MAX bytes of s, printable ASCII only (any
 * other byte becomes '?'): what a header may hold, safe in any database
 * text and any answer. */
static void copy_text(char *dst, size_t cap, const char *s)
{
	size_t n = 0;
	for (; s && s[n] && n + 1 < cap; n++)
		dst[n] = s[n] >= 0x20 && s[n] < 0x7f ? s[n] : '?';
	dst[n] = '\0';
}

/* Writes m's news (its fields, the counts since the last write). Lock
 * held. */
static int write_one(struct agents *a, struct mem *m, int64_t now_ms)
{
	struct metadb_stmt *st = NULL;
	struct buf err = { 0 };
	int rc = -1;
	if (now_ms < a->retry_ms)
		return -1;
	if (metadb_prepare(a->db,
			   "INSERT INTO agent_inventory (instance, project, host, version, protocol, address, "
			   "host_cpus, first_seen_ms, last_seen_ms, batches, samples) VALUES "
			   "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT(instance) DO UPDATE SET "
			   "project = excluded.project, host = excluded.host, version = excluded.version, "
			   "protocol = excluded.protocol, address = excluded.address, "
			   "host_cpus = excluded.host_cpus, "
			   "first_seen_ms = CASE WHEN excluded.first_seen_ms < agent_inventory.first_seen_ms "
			   "THEN excluded.first_seen_ms ELSE agent_inventory.first_seen_ms END, "
			   "last_seen_ms = CASE WHEN excluded.last_seen_ms > agent_inventory.last_seen_ms "
			   "THEN excluded.last_seen_ms ELSE agent_inventory.last_seen_ms END, "
			   "batches = agent_inventory.batches + excluded.batches, "
			   "samples = agent_inventory.samples + excluded.samples",
			   &st, &err) == 0) {
		const char *texts[6] = { m->instance, m->project, m->host, m->version, m->protocol, m->address };
		for (int i = 0; i < 6; i++)
			metadb_bind_text(st, i + 1, texts[i]);
		const int64_t ints[5] = { m->host_cpus, m->first_ms, m->last_ms, (int64_t)m->batches,
					  (int64_t)m->samples };
		for (int i = 0; i < 5; i++)
			metadb_bind_int64(st, i + 7, ints[i]);
		rc = metadb_step(st, &err) < 0 ? -1 : 0;
	}
	metadb_finalize(st);
	if (rc == 0) {
		m->batches = m->samples = 0;
		m->dirty = false;
		m->written_ms = now_ms;
		if (a->warned)
			log_info("profiler inventory: written again");
		a->warned = false;
	} else {
		a->retry_ms = now_ms + AGENTS_RETRY_MS;
		if (!a->warned)
			log_warn("profiler inventory: not written (kept for the next try): %s", err.data);
		a->warned = true;
	}
	buf_free(&err);
	return rc;
}

/* Writes the news of every agent (all: also those written less than
 * AGENTS_WRITE_MS ago). Lock held. */
static void flush_locked(struct agents *a, int64_t now_ms, bool all)
{
	for (size_t i = 0; i < a->count; i++) {
		struct mem *m = &a->mem[i];
		if (m->dirty && (all || !m->written_ms || now_ms - m->written_ms >= AGENTS_WRITE_MS) &&
		    write_one(a, m, now_ms) < 0)
			break; /* the database is down: the rest wait too */
	}
}

/* The writer: the database's round trips happen here, never on the
 * ingest threads. */
static void *writer_main(void *arg)
{
	struct agents *a = arg;
	pthread_mutex_lock(&a->mu);
	while (!a->stopping) {
		flush_locked(a, now_unix_ms(), a->full);
		if (a->full) {
			a->count = 0;
			hmap_clear(&a->index);
			a->full = false;
		}
		struct timespec until;
		deadline_in_ms(&until, AGENTS_TICK_MS);
		while (!a->stopping && pthread_cond_timedwait(&a->wake, &a->mu, &until) == 0)
			;
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

void agents_close(struct agents *a)
{
	if (!a)
		return;
	if (a->started)
		thread_stop_join(a->writer, &a->mu, &a->wake, &a->stopping);
	if (a->db)
		flush_locked(a, now_unix_ms(), true);
	metadb_close(a->db);
	pthread_cond_destroy(&a->wake);
	free(a->mem);
	hmap_free(&a->index);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

struct mem_key {
	const struct agents *a;
	const char *instance;
};

static bool eq_mem(const void *ctx, uint32_t idx)
{
	const struct mem_key *k = ctx;
	return strcmp(k->a->mem[idx].instance, k->instance) == 0;
}

void agents_seen(struct agents *a, const struct agent_note *n, int64_t now_ms)
{
	if (!a || !n->instance || !*n->instance)
		return;
	char instance[65];
	copy_text(instance, sizeof(instance), n->instance);
	uint64_t h = hash_bytes(instance, strlen(instance));
	struct mem_key k = { a, instance };
	uint32_t idx;
	pthread_mutex_lock(&a->mu);
	if (!hmap_find(&a->index, h, eq_mem, &k, &idx)) {
		if (a->count >= AGENTS_MAX_MEMORY) {
			/* Full: the writer writes everything and starts over;
			 * until then a new agent is not noted. */
			a->full = true;
			pthread_cond_signal(&a->wake);
			pthread_mutex_unlock(&a->mu);
			return;
		}
		xgrow((void **)&a->mem, &a->cap, a->count + 1, sizeof(*a->mem));
		idx = (uint32_t)a->count++;
		memset(&a->mem[idx], 0, sizeof(a->mem[idx]));
		snprintf(a->mem[idx].instance, sizeof(a->mem[idx].instance), "%s", instance);
		a->mem[idx].first_ms = now_ms;
		hmap_insert(&a->index, h, idx);
	}
	struct mem *m = &a->mem[idx];
	copy_text(m->project, sizeof(m->project), n->project);
	copy_text(m->host, sizeof(m->host), n->host);
	copy_text(m->version, sizeof(m->version), n->version);
	copy_text(m->protocol, sizeof(m->protocol), n->protocol);
	copy_text(m->address, sizeof(m->address), n->address);
	m->host_cpus = n->host_cpus;
	m->last_ms = now_ms;
	m->batches++;
	m->samples += n->samples;
	m->dirty = true;
	pthread_mutex_unlock(&a->mu);
}

void agents_flush(struct agents *a, int64_t now_ms)
{
	pthread_mutex_lock(&a->mu);
	flush_locked(a, now_ms, true);
	pthread_mutex_unlock(&a->mu);
}

int agents_list(struct agents *a, void (*fn)(void *ctx, const struct agent_row *r), void *ctx,
		bool *unavailable, struct buf *err)
{
	pthread_mutex_lock(&a->mu);
	struct metadb_stmt *st = NULL;
	int rc = -1;
	*unavailable = false;
	if (metadb_prepare(a->db,
			   "SELECT instance, project, host, version, protocol, address, host_cpus, "
			   "first_seen_ms, last_seen_ms, batches, samples FROM agent_inventory "
			   "ORDER BY last_seen_ms DESC, instance LIMIT ?1",
			   &st, err) == 0) {
		metadb_bind_int64(st, 1, AGENTS_LIST_MAX);
		int r;
		while ((r = metadb_step(st, err)) == 1) {
			struct agent_row row = {
				.instance = metadb_text(st, 0), .project = metadb_text(st, 1),
				.host = metadb_text(st, 2), .version = metadb_text(st, 3),
				.protocol = metadb_text(st, 4), .address = metadb_text(st, 5),
				.host_cpus = (uint32_t)metadb_int64(st, 6),
				.first_seen_ms = metadb_int64(st, 7), .last_seen_ms = metadb_int64(st, 8),
				.batches = (uint64_t)metadb_int64(st, 9), .samples = (uint64_t)metadb_int64(st, 10),
			};
			fn(ctx, &row);
		}
		rc = r < 0 ? -1 : 0;
	}
	metadb_finalize(st);
	if (rc < 0)
		*unavailable = metadb_unavailable(a->db);
	pthread_mutex_unlock(&a->mu);
	return rc;
}
