/* claims.h - one replica at a time stores a batch: before it inserts a
 * batch into ClickHouse, a replica claims the batch's id in the shared
 * metadata database (PostgreSQL, --metadata), and gives the claim back
 * once the insert is over (stored, a duplicate, or failed).
 *
 * Why: dedup by batch id (the `batches` table, docs/internals/clickhouse.md)
 * looks first and writes last, so two replicas that receive the same batch
 * at the same moment (an agent's retry through a load balancer while the
 * first insert is still running) both find it new and both store it. With
 * the claim, the second answers STORE_BUSY (503 with Retry-After), and its
 * retry, after the first insert, finds the batch stored: a duplicate.
 *
 * A claim older than CH_CLAIM_LEASE_MS is taken over (the replica that
 * held it died mid-insert); the lease outlasts the longest insert a
 * replica makes (a group's requests, each at most --clickhouse timeout).
 * Claims left behind are deleted by ch_claims_expire (the retention
 * thread, hourly).
 *
 * SQL in both metadb dialects (an upsert whose update is conditional:
 * SQLite 3.24+, PostgreSQL 9.5+); the table ch_batch_claims, component
 * "ch_claims" in schema_version.
 *
 * Threading: every function may be called from any thread (one connection
 * under a lock: a claim is two short statements per batch).
 * Ownership: ch_claims_close frees what ch_claims_open made. */
#ifndef EMBER_STORE_CH_CLAIMS_H
#define EMBER_STORE_CH_CLAIMS_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

#define CH_CLAIM_LEASE_MS (120 * 1000LL)

struct ch_claims;

/* Opens url (a metadb URL; its password, NULL: none) and creates the table
 * when absent. -1 with err set. */
int ch_claims_open(const char *url, const char *password, struct ch_claims **out,
		   struct buf *err);
void ch_claims_close(struct ch_claims *c); /* NULL: nothing */

/* Claims batch (its id, any bytes but NUL) at now_ms: 1 claimed (*token
 * is this claim's, for ch_claims_release), 0 another request holds a
 * claim younger than the lease, -1 an error in err (*unavailable: the
 * database could not be reached, worth a retry). */
int ch_claims_take(struct ch_claims *c, const char *batch, int64_t now_ms, int64_t *token,
		   bool *unavailable, struct buf *err);
/* Gives the claim back (a claim taken over since is left alone). Errors
 * are logged: the claim then lapses with its lease. */
void ch_claims_release(struct ch_claims *c, const char *batch, int64_t token);
/* Deletes the claims made before before_ms; how many, or -1 (logged). */
long ch_claims_expire(struct ch_claims *c, int64_t before_ms);

#endif
