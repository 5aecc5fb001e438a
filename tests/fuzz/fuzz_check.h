/* fuzz_check.h - helpers the batch fuzz targets share: the input as a
 * zstd body (raw protobuf when it starts with 'R', so mutations reach the
 * parsers without having to form zstd), what every version 1 batch they
 * make must satisfy, and OTLP's conversion checked batch by batch. */
#ifndef EMBER_FUZZ_CHECK_H
#define EMBER_FUZZ_CHECK_H

#include <stdint.h>
#include <stdlib.h>

#include "compress.h"
#include "server/ingest/batch_decode.h"
#include "server/ingest/otlp.h"

/* The body to decode: data itself, or 'R' + raw bytes compressed into z. */
static inline void fuzz_body(const uint8_t *data, size_t size, struct buf *z, const void **body,
			     size_t *len)
{
	*body = data;
	*len = size;
	if (size > 0 && data[0] == 'R') {
		zstd_compress_buf(data + 1, size - 1, 1, z);
		*body = z->data;
		*len = z->len;
	}
}

/* Valid by batch_validate, and the same after the write-ahead log's
 * encoding and decoding; aborts otherwise. */
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

static inline int fuzz_check_batch_cb(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	(void)ctx;
	fuzz_check_batch(b);
	return 0;
}

/* Converts a decoded OTLP request into batches as ingest does, each
 * checked by fuzz_check_batch, then frees the request. */
static inline void fuzz_convert_otlp(Ember__Otlp__ExportProfilesServiceRequest *r, struct buf *err)
{
	struct otlp_result res = { 0 };
	otlp_convert(r, "default", 1700000000000LL, fuzz_check_batch_cb, NULL, &res, err);
	buf_free(&res.message);
	otlp_free(r);
}

#endif
