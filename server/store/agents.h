/* agents.h - the profiler inventory: every agent that sends profiles,
 * kept in the metadata database (metadb.h: SQLite DATA_DIR/meta.db, or
 * PostgreSQL shared by every replica), so that any replica lists every
 * agent of the fleet (GET /public/api/v1/agents, the Settings view's
 * "Profiler inventory").
 *
 * An agent is its instance (the random UUID it draws at start, in every
 * batch), with what its requests say of it: its project, host (the
 * X-Ember-Host header), version (User-Agent, "ember-agent/VERSION"),
 * protocol, the address it sends from, its host's CPUs, when it was first
 * and last seen, and the batches and samples it sent.
 *
 * Writes: agents_seen keeps each agent's news in memory; a thread of its
 * own writes them every AGENTS_TICK_MS for the agents new to this replica
 * and those whose last write is AGENTS_WRITE_MS old (one upsert each;
 * counts are added, so replicas that share an agent's batches sum them):
 * a list shows a new agent within a second and lags its counts by at most
 * AGENTS_WRITE_MS. Ingest never waits on the database. The database down:
 * the news wait (a failed write is tried again after AGENTS_RETRY_MS). At
 * most AGENTS_MAX_MEMORY agents are held in memory: past that the writer
 * writes all and memory starts over (a new agent's first batches in the
 * meantime are not noted). agents_close writes what is pending.
 *
 * Every text is bounded (AGENTS_TEXT_MAX bytes, control characters
 * replaced): headers come from any client.
 *
 * Threading: every function may be called from any thread (one lock).
 * Ownership: agents_close frees what agents_open made. */
#ifndef EMBER_SERVER_AGENTS_H
#define EMBER_SERVER_AGENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "jsonw.h"

#define AGENTS_WRITE_MS 15000
#define AGENTS_RETRY_MS 5000
#define AGENTS_TICK_MS 1000
#define AGENTS_MAX_MEMORY 65536
#define AGENTS_TEXT_MAX 128
/* An agent silent longer than this is listed as not reporting. */
#define AGENTS_REPORTING_MS 120000
/* The most agents one list returns. */
#define AGENTS_LIST_MAX 100000

struct agents;

/* What one batch tells of its agent. */
struct agent_note {
	const char *instance; /* required: "" or NULL notes nothing */
	const char *project;  /* the project's id */
	const char *host, *version, *protocol, *address; /* NULL: unknown */
	uint32_t host_cpus;
	uint64_t samples;
};

/* Opens url (a metadb URL: an SQLite path or postgres://...; password,
 * NULL: none) and creates the table when absent. -1 with err set. */
int agents_open(const char *url, const char *password, struct agents **out, struct buf *err);
void agents_close(struct agents *a); /* writes what is pending first; NULL: nothing */

void agents_seen(struct agents *a, const struct agent_note *n, int64_t now_ms);
/* Writes every agent's pending news now (a test's, or at close). */
void agents_flush(struct agents *a, int64_t now_ms);

/* One listed agent (texts valid during the callback). */
struct agent_row {
	const char *instance, *project, *host, *version, *protocol, *address;
	uint32_t host_cpus;
	int64_t first_seen_ms, last_seen_ms;
	uint64_t batches, samples;
};

/* Calls fn for each agent (the most recently seen first; at most
 * AGENTS_LIST_MAX), from the database. -1 with err set (*unavailable:
 * the database could not be reached). */
int agents_list(struct agents *a, void (*fn)(void *ctx, const struct agent_row *r), void *ctx,
		bool *unavailable, struct buf *err);

#endif
