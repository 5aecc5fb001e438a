/* codecs.h - what ingest writes into the store's log, and how the store
 * reads it back (store.h, "codecs"): one codec per record type.
 *
 *   STORE_RECORD_BATCH    a version 1 batch as received (batch_append);
 *                         replayed by batch_decode() and batch_index()
 *   STORE_RECORD_SESSION  a session batch with the definitions it carries
 *                         (sessions.h); replayed through a session replay
 *
 * ingest_codecs() registers both in a store_config before store_open():
 * every process that opens a store ember's ingest wrote (the server, its
 * tests and benchmarks) does so, else store_open refuses logs it cannot
 * read. Thread-safe: the codecs hold no state outside a replay.
 */
#ifndef EMBER_SERVER_CODECS_H
#define EMBER_SERVER_CODECS_H

#include <stddef.h>

#include "buf.h"
#include "ingest.pb-c.h"
#include "server/store/store.h"

/* Sets cfg's codecs to those of every record type ingest writes. */
void ingest_codecs(struct store_config *cfg);

/* Appends a batch that batch_decode() accepted for project_id (a project
 * id); zbody is its encoded form, which is what the log keeps. Returns an
 * enum store_rc (store_append_entry). */
int batch_append(struct store *s, const char *project_id, const Ember__Ingest__V1__Batch *b,
		 const void *zbody, size_t zlen, struct buf *err);

/* Adds a batch that batch_decode() accepted to a head (what its append's
 * index() and its replay do). */
void batch_index(struct store_head *h, const char *project_id, const Ember__Ingest__V1__Batch *b);

#endif
