/* sessions.h - the server's half of protocol version 2 (docs/protocol.md
 * §2): the per-agent sessions in which strings, files, frames, stacks and
 * resources are defined once and then referenced by id.
 *
 * sessions_ingest() takes one decoded SessionBatch: it finds (or, for a
 * session's first batch, creates) the session, checks that the batch
 * continues it (each table's base equals what the session holds), appends
 * the batch's definitions after validating every id and length, and gives
 * the store an entry (store.h, struct store_entry) for it:
 *
 *   the log record   the batch exactly as received, after the session
 *                    entries it uses that are not yet in the current log
 *                    file (a SessionCarry), so every log file replays
 *                    without the session: session_replay_record()
 *   the index        session ids mapped to the head part's ids, kept per
 *                    entry until the store seals its head, so an entry
 *                    is looked up in the part once per head, not once per
 *                    batch
 *
 * When storing fails, the definitions are taken back, so the agent's retry
 * of the same batch fits again.
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
#include "server/store/store.h"

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

/* Stores a batch: resolves the project name, sets e->project to its id
 * and returns what store_append_entry() returns (an enum store_rc:
 * STORE_OK, STORE_DUPLICATE when the store already had it, or a negative
 * code, the store's or the caller's: not stored). */
typedef int (*session_store_fn)(void *ctx, const char *project_name, struct store_entry *e);

/* Applies m, decoded from zbody[0..zlen) (what the log keeps), at now_ms.
 * Returns what store returned, SESSION_SEEN, SESSION_INVALID or
 * SESSION_RESYNC (err says why). */
int sessions_ingest(struct sessions *ss, const Ember__Ingest__V1__SessionBatch *m,
		    const void *zbody, size_t zlen, int64_t now_ms, session_store_fn store, void *ctx,
		    struct buf *err);

/* Timeline spans (SessionBatch span_*): at most SESSION_MAX_SPANS a
 * batch, each checked by sessions_ingest (node and resource defined, kind
 * 1..SESSION_SPAN_KIND_MAX as lib/cuda_wire.h, 0 < start <= end, at most
 * SESSION_SPAN_MAX_NS long) before anything is stored. */
#define SESSION_MAX_SPANS (1u << 20)
#define SESSION_SPAN_KIND_MAX 5
#define SESSION_SPAN_MAX_NS (86400ull * 1000000000ull)

struct gpuspan_in;
typedef void (*session_span_fn)(void *ctx, const struct gpuspan_in *span);

/* Calls fn with each span of the batch of e, a store entry sessions_ingest
 * gave the store function (call it from there, once store_append_entry
 * stored it: the session is locked then), its launch stack resolved into
 * frames (outermost first) and its resource into key/value strings, all
 * valid during the call only. */
void sessions_spans(const struct store_entry *e, session_span_fn fn, void *ctx);

/* Replaying the log at start: the sessions rebuilt from the records, in
 * log order, whose definitions are sparse (only what the records carry). */
struct session_replay;
struct session_replay *session_replay_new(void);
void session_replay_free(struct session_replay *r);
/* Adds one STORE_RECORD_SESSION record's samples (p: after the project
 * id) to head, whose number head_no is the replay's own (a new number for
 * each head the replay fills: the sessions' series ids are a head's own).
 * Returns 0 with the batch's agent instance and sequence in *out, or -1
 * when it does not decode or refers to what no earlier record of the
 * replay defined (nothing is added). */
int session_replay_record(struct session_replay *r, const char *project_id, const uint8_t *p,
			  size_t len, struct store_head *head, uint32_t head_no,
			  struct store_replayed *out);
/* The codec of STORE_RECORD_SESSION records (store.h): a session replay
 * per store_open, session_replay_record for each record. */
extern const struct store_codec session_codec;

void sessions_get_stats(struct sessions *ss, struct sessions_stats *out);

#endif
