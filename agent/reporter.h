/* reporter.h - the thread that delivers batches to the server over
 * protocol version 2 (docs/protocol.md §2).
 *
 * Finished batches wait, not yet encoded, in a bounded queue (sendq.h):
 * when the server is unreachable the oldest are dropped first and counted,
 * so memory stays bounded. The thread encodes the oldest batch in its
 * session (session.h) only when it sends it, and POSTs it to
 * /ingest/v2/batch:
 *   2xx        delivered; removed
 *   409        the server lost the session (restart, eviction, a lost
 *              batch): a new session starts and the same batch is encoded
 *              and sent again at once, defining what it references
 *   400, 413, 415, 422
 *              refused for good (malformed, too large, outside the time the
 *              server keeps): dropped and logged; a new session starts, as
 *              the server did not take its definitions
 *   anything else (no answer, 5xx, 429, 401/403)
 *              kept first and retried with the same bytes after 1, 2, 4 ...
 *              30 s (±20%); the server ignores a batch it already stored
 *              (same agent instance and sequence), so a retry after a lost
 *              answer is safe
 * A session whose dictionary outgrows max_session_bytes is replaced by a
 * new one before the next batch is encoded.
 */
#ifndef EMBER_AGENT_REPORTER_H
#define EMBER_AGENT_REPORTER_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "httpc.h"

struct reporter_stats {
	uint64_t sent_batches, sent_bytes;
	uint64_t failed_attempts;
	uint64_t rejected_batches;
	uint64_t dropped_batches, dropped_bytes; /* queue overflow */
	uint64_t resyncs;                        /* 409 answers */
	uint64_t sessions;                       /* sessions started */
	size_t queued_batches, queued_bytes;
	size_t session_bytes;
	uint64_t encode_ns;                      /* CPU time spent encoding */
};

struct reporter;

/* With otlp_project set, batches go as OTLP Profiles (otlp_export.h) to
 * /v1development/profiles?project=otlp_project instead: no session, the
 * same queue, retries and answers (a 409 is retried like a 5xx). With
 * otlp_grpc_endpoint (host:port) set too, they go over gRPC to
 * ProfilesService/Export there instead of HTTP: TLS, the CA and the token
 * as opts say, the token as "authorization: Bearer ...", the project as
 * "ember-project"; UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED,
 * ABORTED, INTERNAL, UNAUTHENTICATED and PERMISSION_DENIED are retried
 * (as HTTP's 5xx, 429, 401 and 403), other statuses drop the batch. */
struct reporter *reporter_start(const struct http_opts *opts, size_t max_queue_bytes,
				size_t max_session_bytes, const char *otlp_project,
				const char *otlp_grpc_endpoint);
/* Takes ownership of b (a finished batch, allocated with xmalloc and
 * batch_init). meta's strings must outlive the reporter. */
void reporter_enqueue(struct reporter *r, struct batch *b, const struct batch_meta *meta);
void reporter_get_stats(struct reporter *r, struct reporter_stats *out);
/* Tries to deliver what is queued for up to flush_ms, then stops. */
void reporter_stop(struct reporter *r, long flush_ms);

#endif
