/* Fuzz target: OTLP Profiles ingest (server/ingest/otlp.c), the decoder and the
 * conversion into ember batches. Input: an ExportProfilesServiceRequest
 * protobuf, or a gzip stream of one when the first byte is 'G'. Every
 * batch the conversion emits must be a valid version 1 batch that
 * survives the write-ahead log's encoding. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_check.h"
#include "server/ingest/batch_decode.h"
#include "server/ingest/otlp.h"

static int check_batch(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	(void)ctx;
	fuzz_check_batch(b);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int gzip = size > 0 && data[0] == 'G';
	struct buf err = { 0 };
	int too_large;
	Ember__Otlp__ExportProfilesServiceRequest *r =
		otlp_decode(data + gzip, size - (size_t)gzip, gzip, &too_large, &err);
	if (r) {
		struct otlp_result res = { 0 };
		otlp_convert(r, "default", 1700000000000LL, check_batch, NULL, &res, &err);
		buf_free(&res.message);
		otlp_free(r);
	}
	buf_free(&err);
	return 0;
}
