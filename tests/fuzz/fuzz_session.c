/* Fuzz target: protocol version 2 on the server, the session batch
 * decoder and the sessions that check and expand it
 * (server/sessions.c). Input: a zstd-compressed SessionBatch, or raw
 * protobuf bytes when the first byte is 'R'. The sessions live across
 * inputs, so sequences of batches (new sessions, continuations, duplicates,
 * batches out of step) are explored too. Every expanded batch must be a
 * valid version 1 batch that survives the write-ahead log's encoding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "fuzz_check.h"
#include "server/batch_decode.h"
#include "server/sessions.h"

static struct sessions *sessions; /* across inputs: see above */

static int check_expanded(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	(void)ctx;
	fuzz_check_batch(b);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!sessions)
		sessions = sessions_new(8u << 20, 4u << 20, 3600000);
	struct buf z = { 0 }, err = { 0 };
	const void *body;
	size_t len;
	fuzz_body(data, size, &z, &body, &len);
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(body, len, &err);
	if (m) {
		sessions_ingest(sessions, m, 1700000000000LL, check_expanded, NULL, &err);
		session_batch_free(m);
	}
	buf_free(&z);
	buf_free(&err);
	return 0;
}
