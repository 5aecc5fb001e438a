/* schema.h - the fleet store's tables in ClickHouse, and `ember-server
 * migrate` (docs/internals/clickhouse.md).
 *
 * Tables, in the database of --clickhouse-database:
 *   samples     (project, kind, ts, stack, labels, hz, value, batch)
 *               MergeTree, PARTITION BY toDate(ts),
 *               ORDER BY (project, kind, ts, stack, labels)
 *   stacks      (hash, frames Array(UInt64) root first)       ReplacingMergeTree by hash
 *   frames      (hash, type, address, function, binary, build_id: strings' hashes,
 *                file: a files hash, 0 none (version 2))
 *                                                              ReplacingMergeTree by hash
 *   strings     (hash, value)                                  ReplacingMergeTree by hash
 *   label_sets  (hash, keys Array(String), values Array(String), sorted by key)
 *                                                              ReplacingMergeTree by hash
 *   batches     (batch, project, agent, sequence, rows, ts_min, ts_max, inserted)
 *                                                              ReplacingMergeTree by batch
 *   hosts       (name, cpus, seen) (version 2)  ReplacingMergeTree(cpus) by name
 *   files       (hash, id, name, build_id, segs) (version 2)  ReplacingMergeTree by hash
 *   gpu_spans   (project, hour, start_ns, end_ns, device, stream, kind, origin) (version 3)
 *               MergeTree, PARTITION BY hour, ORDER BY (project, end_ns)
 *   gpu_span_origins (hour, hash, data) (version 3)  ReplacingMergeTree by hash,
 *               PARTITION BY hour (chspans.h)
 *   schema_version (version, applied)                          TinyLog, per server
 * With a cluster (--clickhouse-cluster NAME), each of these (but
 * schema_version) is created as NAME_local on every server of
 * --clickhouse-url, and NAME is a Distributed table over the cluster:
 * samples sharded by batch (a batch lands whole on one shard, in one
 * insert), the content tables by their hash (equal content meets on one
 * shard, where ReplacingMergeTree folds it). Without a cluster the names
 * are the MergeTree tables themselves. Queries read the plain names.
 *
 * Every statement is plain SQL that ClickHouse 18.16 and current
 * releases both accept (no LowCardinality, DateTime64, codecs or TTL in
 * the DDL): retention drops day partitions (ch_schema_drop_partition),
 * and on servers that have TTL (19.6 and later) ch_schema_ttl adds one.
 */
#ifndef EMBER_STORE_CH_SCHEMA_H
#define EMBER_STORE_CH_SCHEMA_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "chttp.h"

/* The version this build's schema is at. */
#define CH_SCHEMA_VERSION 3

enum ch_table_kind { CH_TABLE_PLAIN, CH_TABLE_LOCAL, CH_TABLE_DISTRIBUTED };

struct ch_schema {
	const char *database;  /* validated: letters, digits, _ */
	const char *cluster;   /* NULL or "": one server, no Distributed tables */
};

/* Appends the statements that bring a server's schema from version `from`
 * to CH_SCHEMA_VERSION, each NUL-terminated, one after another, to out;
 * returns how many. With a cluster, local tables come first, then the
 * Distributed ones. CREATE DATABASE comes first when from is 0. */
int ch_schema_statements(const struct ch_schema *s, int from, struct buf *out);

/* Every query text the fleet store sends besides the DDL (the version
 * check, the dedup check, the insert headers, retention), with
 * placeholder values, each NUL-terminated: for tests that run them
 * through a current ClickHouse. Returns how many. */
int ch_schema_query_texts(const struct ch_schema *s, struct buf *out);

/* ALTER TABLE ... DROP PARTITION for one day (YYYY-MM-DD, checked) of the
 * samples' MergeTree table. -1 for a malformed day. */
int ch_schema_drop_partition(const struct ch_schema *s, const char *day, struct buf *out);
/* ALTER TABLE ... MODIFY TTL ts + INTERVAL days DAY (servers 19.6 and later). */
void ch_schema_ttl(const struct ch_schema *s, int days, struct buf *out);

/* Whether a server version string ("18.16.1", "24.3.2.23") supports TTL. */
bool ch_version_has_ttl(const char *version);

/* Retention: on every server of c, drops the samples' day partitions
 * wholly before cutoff_s (seconds since 1970, UTC: a partition of day D
 * goes when D + 1 day <= cutoff_s), adding how many went to *dropped.
 * Works on every version (18.16 has no TTL). */
enum ch_rc ch_retention(struct ch_conn *c, const char *cluster, int64_t cutoff_s, int *dropped,
			struct buf *err);

/* `ember-server migrate`: on every server of c, reads schema_version
 * (created when missing), applies the statements from there to
 * CH_SCHEMA_VERSION and records the version. A server already there is
 * left untouched. Writes one line per server to log (may be NULL).
 * Returns CH_OK or the first failure (err says which server, which
 * statement). */
enum ch_rc ch_migrate(struct ch_conn *c, const char *cluster, struct buf *log, struct buf *err);

#endif
