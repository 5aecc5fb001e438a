/* batch_decode.h - decoding and validating one agent batch
 * (ember.ingest.v1.Batch or SessionBatch, zstd-compressed; docs/protocol.md).
 *
 * Everything in a batch is hostile until this returns: the compressed and
 * decompressed sizes are capped, the protobuf is parsed by protobuf-c, and
 * then every index, count, length and enum is checked so that code after
 * it may index the tables without further checks. The same function reads
 * batches back from the write-ahead log at startup.
 */
#ifndef EMBER_SERVER_BATCH_DECODE_H
#define EMBER_SERVER_BATCH_DECODE_H

#include <stddef.h>

#include "buf.h"
#include "ingest.pb-c.h"

#define BATCH_MAX_COMPRESSED (64u << 20)
#define BATCH_MAX_DECOMPRESSED (256u << 20)
#define BATCH_MAX_STACK_DEPTH 4096
#define BATCH_MAX_ATTRIBUTES 128
#define BATCH_MAX_STRING 65536

/* Decodes zbody. Returns the batch (free it with batch_decode_free) or
 * NULL with a message for the client in err. */
Ember__Ingest__V1__Batch *batch_decode(const void *zbody, size_t len, struct buf *err);
/* Validates an already unpacked batch. Returns 0 or -1 with err set. */
int batch_validate(const Ember__Ingest__V1__Batch *b, struct buf *err);
/* Only the batch's own fields (project, agent, rate, CPUs, interval), for
 * batches whose tables are valid by construction. */
int batch_validate_meta(const Ember__Ingest__V1__Batch *b, struct buf *err);
void batch_decode_free(Ember__Ingest__V1__Batch *b);
/* Appends b as a zstd-compressed (level) protobuf to out: the form the
 * write-ahead log keeps. Returns 0 or -1. */
int batch_pack(const Ember__Ingest__V1__Batch *b, int level, struct buf *out);

/* Decodes a protocol version 2 batch (zstd, bounded like batch_decode).
 * Only the protobuf is checked: its ids refer to a session, so
 * sessions_ingest() validates them. */
Ember__Ingest__V1__SessionBatch *session_batch_decode(const void *zbody, size_t len,
						       struct buf *err);
void session_batch_free(Ember__Ingest__V1__SessionBatch *m);
/* Decodes the definitions a log record carries beside a session batch
 * (zstd, bounded like batch_decode; only the protobuf is checked). */
Ember__Ingest__V1__SessionCarry *session_carry_decode(const void *zbody, size_t len,
						     struct buf *err);
void session_carry_free(Ember__Ingest__V1__SessionCarry *c);

#endif
