/* chstore.h - the fleet store: ember's storage interface (store.h) over
 * ClickHouse, for `ember-server --store clickhouse`
 * (docs/internals/clickhouse.md, "The backend").
 *
 * Writing (struct store_write_ops): an entry's index() writes into a head
 * of the backend's own (one per append, never logged: record() is not
 * called), whose rows, stacks, frames, strings and label sets are then
 * sent as one batch (ch_insert_batch: content-hashed dictionaries, the
 * samples in one insert, the batch's id for dedup). store_append_entry
 * answers STORE_OK only once ClickHouse acknowledged every insert,
 * STORE_DUPLICATE when the batch id (agent instance, sequence) was stored
 * before, STORE_BUSY when ClickHouse is down, slow or busy (ingest's 503
 * with Retry-After: nothing of the batch counts until a retry completes
 * it), STORE_REFUSED outside the time window, STORE_FAILED otherwise. An
 * entry without an agent instance gets an id of its own (never a
 * duplicate). With claims_url, a replica claims a batch's id before it
 * sends it (claims.h): a batch another replica is storing now is
 * STORE_BUSY.
 *
 * Reading (struct store_read_ops): a view is one segment built from
 * ClickHouse for the view's scope (project, event kind, the filter as
 * SQL over label_sets): series with their per-minute totals, then only
 * the label sets, stacks, frames and strings those samples name; the
 * stack tree is built here. Per-stack sums are aggregated in ClickHouse
 * (GROUP BY stack, for every series of the scope in one query), rows of
 * a series by (second, stack). A view holds one connection while open.
 *
 * Retention: with cfg.background a thread drops the samples' day
 * partitions past cfg.retention_ms (ch_retention) at the start and hourly.
 *
 * Threading: every function may be called from any thread. Appends run
 * their index() one at a time (a session's state is shared between its
 * batches), encode in parallel, and are sent in groups (group commit:
 * up to CH_SENDERS groups at once, a connection each from a pool); a
 * batch whose id a group has in flight waits for it.
 */
#ifndef EMBER_STORE_CH_STORE_H
#define EMBER_STORE_CH_STORE_H

#include "buf.h"
#include "server/store/store.h"

struct ch_store_opts {
	const char *urls;          /* --clickhouse-url: one server, or every shard's */
	const char *database;      /* NULL: "ember" */
	const char *cluster;       /* NULL or "": no cluster */
	const char *user;          /* NULL: ClickHouse's default */
	const char *password_file; /* NULL: none */
	const char *ca_file;       /* https: the CA bundle to verify with; NULL: the system's */
	long timeout_ms;           /* each request; 0: 10 s */
	/* The metadata database every replica shares (postgres://…), where a
	 * replica claims a batch before it inserts it (claims.h), so that two
	 * replicas racing one batch store it once; NULL: no claims (one
	 * replica). Its password, NULL: none. */
	const char *claims_url, *claims_password;
};

/* Connects, checks that `ember-server migrate` brought the schema to this
 * build's version, and makes the handle (freed by store_close). -1 with a
 * message in err when ClickHouse cannot be reached or is not migrated.
 * cfg: time_window, retention_ms and the codecs are used. */
int ch_store_open(const struct ch_store_opts *o, const struct store_config *cfg,
		  struct store **out, struct buf *err);

/* Every query text the backend sends besides ch_insert_batch's (the
 * view's reads for an example scope (project "p", on-CPU), the hosts insert), each
 * NUL-terminated, for `migrate --print-sql` and the check of the current
 * dialect (tests/integration/test_clickhouse_schema.py). How many. */
int ch_store_query_texts(const char *database, struct buf *out);

#endif
