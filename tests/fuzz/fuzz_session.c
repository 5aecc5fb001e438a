/* Fuzz target: protocol version 2 on the server, the session batch
 * decoder and the sessions that check it, log it and index it
 * (server/ingest/sessions.c). Input: a zstd-compressed SessionBatch, or raw
 * protobuf bytes when the first byte is 'R'. The sessions live across
 * inputs, so sequences of batches (new sessions, continuations, duplicates,
 * batches out of step) are explored too. Every accepted batch is indexed
 * into a part as the store's head would, and its log record (the carried
 * definitions and the batch) must replay into another part with the same
 * number of rows: a log file is self-contained. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "fuzz_check.h"
#include "server/ingest/batch_decode.h"
#include "server/store/part.h"
#include "server/ingest/sessions.h"
#include "server/store/gpuspans.h"

/* Across inputs (see above): the sessions, the head and its replay, and
 * the generation, advanced (a new head) every 512 batches to bound memory. */
static struct sessions *sessions;
static struct part live, replayed;
static struct session_replay *replay;
static uint64_t gen, stored;
/* 'L' inputs replay into their own sessions and part, so what they define
 * cannot change what the checks above compare. */
static struct session_replay *raw_replay;
static struct part raw_part;

#define PROJECT_ID "0b7a8f6e-1c2d-4e3f-8a9b-0c1d2e3f4a5b"

/* A span store bounded small, so that chunks are dropped as they fill. */
static struct gpuspans *spans;

static void keep_span(void *ctx, const struct gpuspan_in *span)
{
	(void)ctx;
	if (span->end_ns < span->start_ns || span->kind < 1 || span->kind > SESSION_SPAN_KIND_MAX ||
	    span->nframes > GPUSPANS_MAX_DEPTH || span->nlabels > BATCH_MAX_ATTRIBUTES)
		abort(); /* sessions_ingest checked every span */
	for (size_t i = 0; i < span->nframes; i++)
		if ((span->frames[i].name && strlen(span->frames[i].name) > (1u << 24)) ||
		    (span->frames[i].file && !span->frames[i].file_name))
			abort();
	if (!spans)
		spans = gpuspans_new(60000, 100000);
	gpuspans_add(spans, PROJECT_ID, span, 1, 1700000000000LL);
}

static int store(void *ctx, const char *project_name, struct store_entry *e)
{
	(void)ctx;
	(void)project_name;
	e->project = PROJECT_ID;
	if (++stored % 512 == 0) {
		part_free(&live);
		part_free(&replayed);
		part_init(&live, 1);
		part_init(&replayed, 1);
		session_replay_free(replay);
		replay = session_replay_new();
		gen++;
	}
	struct buf head = { 0 }, err = { 0 };
	const void *body;
	size_t blen;
	if (e->record(e->ctx, gen, &head, &body, &blen, &err) < 0)
		abort(); /* nothing can fail once a batch is accepted */
	uint64_t rows = live.rows;
	struct store_head lh = { &live }, rh = { &replayed };
	if (e->index(e->ctx, &lh, gen) < 0)
		abort();
	buf_append(&head, body, blen);
	struct store_replayed out;
	uint64_t rrows = replayed.rows;
	if (session_replay_record(replay, PROJECT_ID, (const uint8_t *)head.data, head.len, &rh, 1,
				  &out) < 0 ||
	    replayed.rows - rrows != live.rows - rows || out.sequence != e->sequence)
		abort();
	buf_free(&head);
	buf_free(&err);
	/* the batch's GPU spans into a span store, as the HTTP layer does */
	sessions_spans(e, keep_span, NULL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!sessions) {
		sessions = sessions_new(8u << 20, 4u << 20, 3600000);
		part_init(&live, 1);
		part_init(&replayed, 1);
		replay = session_replay_new();
		gen = 1;
	}
	if (size > 0 && data[0] == 'L') {
		struct store_replayed out;
		if (!raw_replay || raw_part.rows > 1000000) {
			session_replay_free(raw_replay);
			part_free(&raw_part);
			raw_replay = session_replay_new();
			part_init(&raw_part, 1);
		}
		struct store_head rh = { &raw_part };
		session_replay_record(raw_replay, PROJECT_ID, data + 1, size - 1, &rh, 1, &out);
		return 0;
	}
	struct buf z = { 0 }, err = { 0 };
	const void *body;
	size_t len;
	fuzz_body(data, size, &z, &body, &len);
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(body, len, &err);
	if (m) {
		sessions_ingest(sessions, m, body, len, 1700000000000LL, store, NULL, &err);
		session_batch_free(m);
	}
	buf_free(&z);
	buf_free(&err);
	return 0;
}
