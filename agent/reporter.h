/* reporter.h - the thread that delivers encoded batches to the server.
 *
 * Batches wait in a bounded queue (sendq.h). Each is POSTed to
 * /ingest/v1/batch; a 2xx removes it, a 4xx that retrying cannot fix
 * (malformed, too large) drops it with an error, anything else (server
 * down, 5xx, 429, 401/403) keeps it and retries with exponential backoff
 * from 1 s to 30 s. The server ignores a batch it already stored (same
 * agent instance and sequence), so a retry after a lost answer is safe.
 */
#ifndef EMBER_AGENT_REPORTER_H
#define EMBER_AGENT_REPORTER_H

#include <stddef.h>
#include <stdint.h>

#include "httpc.h"

struct reporter_stats {
	uint64_t sent_batches, sent_bytes;
	uint64_t failed_attempts;
	uint64_t rejected_batches;
	uint64_t dropped_batches, dropped_bytes; /* queue overflow */
	size_t queued_batches, queued_bytes;
};

struct reporter;

struct reporter *reporter_start(const struct http_opts *opts, size_t max_queue_bytes);
/* Takes ownership of data. */
void reporter_enqueue(struct reporter *r, char *data, size_t len, uint64_t seq);
void reporter_get_stats(struct reporter *r, struct reporter_stats *out);
/* Tries to deliver what is queued for up to flush_ms, then stops. */
void reporter_stop(struct reporter *r, long flush_ms);

#endif
