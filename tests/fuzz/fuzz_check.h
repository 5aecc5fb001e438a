/* fuzz_check.h - what the fuzz targets that make version 1 batches
 * (sessions, OTLP) require of each: valid by batch_validate, and the same
 * after the write-ahead log's encoding and decoding. Aborts otherwise. */
#ifndef EMBER_FUZZ_CHECK_H
#define EMBER_FUZZ_CHECK_H

#include <stdlib.h>

#include "server/batch_decode.h"

static inline void fuzz_check_batch(const Ember__Ingest__V1__Batch *b)
{
	struct buf err = { 0 }, z = { 0 };
	if (batch_validate(b, &err) < 0 || batch_pack(b, 1, &z) < 0)
		abort();
	Ember__Ingest__V1__Batch *back = batch_decode(z.data, z.len, &err);
	if (!back || back->n_samples != b->n_samples)
		abort();
	batch_decode_free(back);
	buf_free(&z);
	buf_free(&err);
}

#endif
