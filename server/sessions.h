/* sessions.h - the server's half of protocol version 2 (docs/protocol.md
 * §2): the per-agent sessions in which strings, files, frames, stacks and
 * resources are defined once and then referenced by id.
 *
 * sessions_ingest() takes one decoded SessionBatch: it finds (or, for a
 * session's first batch, creates) the session, checks that the batch
 * continues it (each table's base equals what the session holds), appends
 * the batch's definitions after validating every id and length, and
 * expands the batch into a self-contained ember.ingest.v1.Batch holding
 * only what its samples reference, which it hands to the caller's store
 * function (the same path, write-ahead log and store as version 1). When
 * storing fails, the definitions are taken back, so the agent's retry of
 * the same batch fits again.
 *
 * Memory is bounded: a session may hold at most max_session_bytes, all
 * sessions together max_bytes (the least recently used are forgotten
 * first), and a session unused for idle_ms is forgotten. A forgotten
 * session costs the agent one 409 answer and a batch that defines again
 * what it references. Thread-safe: batches of different sessions are
 * handled in parallel; those of one session one after the other.
 */
#ifndef EMBER_SERVER_SESSIONS_H
#define EMBER_SERVER_SESSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ingest.pb-c.h"

/* sessions_ingest() results besides what the store function returns. */
#define SESSION_INVALID (-100) /* malformed: answer 400 with err */
#define SESSION_RESYNC (-101)  /* unknown session or out of step: answer 409 */
#define SESSION_SEEN 2         /* a batch this session already took: answer 200 */

/* The most one session may hold (an agent starts a new session at 32 MiB
 * of its own dictionary, which is larger than the server's copy). */
#define SESSION_MAX_BYTES (256u << 20)

struct sessions_stats {
	size_t count, bytes;
	uint64_t created, evicted, expired, resyncs;
};

struct sessions;

struct sessions *sessions_new(size_t max_bytes, size_t max_session_bytes, int64_t idle_ms);
void sessions_free(struct sessions *ss);

/* Stores an expanded batch; returns 0 (stored), 1 (a duplicate the store
 * already had) or a negative code of the caller's (not stored). */
typedef int (*session_store_fn)(void *ctx, const Ember__Ingest__V1__Batch *b);

/* Applies m (see above) at now_ms. Returns what store returned,
 * SESSION_SEEN, SESSION_INVALID or SESSION_RESYNC (err says why). */
int sessions_ingest(struct sessions *ss, const Ember__Ingest__V1__SessionBatch *m, int64_t now_ms,
		    session_store_fn store, void *ctx, struct buf *err);

void sessions_get_stats(struct sessions *ss, struct sessions_stats *out);

#endif
