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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int gzip = size > 0 && data[0] == 'G';
	struct buf err = { 0 };
	int too_large;
	Ember__Otlp__ExportProfilesServiceRequest *r =
		otlp_decode(data + gzip, size - (size_t)gzip, gzip, &too_large, &err);
	if (r)
		fuzz_convert_otlp(r, &err);
	buf_free(&err);
	return 0;
}
