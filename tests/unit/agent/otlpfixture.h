/* otlpfixture.h - the agent's OTLP export as a server reads it: a batch
 * encoded by otlp_encode, decompressed and unpacked. */
#ifndef EMBER_TEST_OTLPFIXTURE_H
#define EMBER_TEST_OTLPFIXTURE_H

#include "testutil.h"

#include "agent/batch.h"
#include "agent/otlp_export.h"
#include "compress.h"
#include "otlp_profiles.pb-c.h"

/* b as instance "inst" of project "default" sends it (5 s from
 * 1700000000000, 19 Hz), unpacked; the caller frees the request with
 * ember__otlp__export_profiles_service_request__free_unpacked. */
static inline Ember__Otlp__ExportProfilesServiceRequest *otlp_roundtrip(const struct batch *b)
{
	struct batch_meta meta = { "inst", 1, "default", 1700000000000, 1700000005000, 19 };
	struct buf z = { 0 }, raw = { 0 };
	assert_int_equal(otlp_encode(b, &meta, &z), 0);
	assert_int_equal(gzip_decompress_bounded(z.data, z.len, 1 << 20, &raw), 0);
	Ember__Otlp__ExportProfilesServiceRequest *req =
		ember__otlp__export_profiles_service_request__unpack(NULL, raw.len, (const uint8_t *)raw.data);
	assert_non_null(req);
	buf_free(&z);
	buf_free(&raw);
	return req;
}

#endif
