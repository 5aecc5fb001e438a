/* Fuzz target: the proto3 JSON decoder (server/ingest/pbjson.c) and OTLP/JSON
 * ingest (otlp_decode_json, then the same conversion as protobuf).
 * Input: an OTLP ExportProfilesServiceRequest as JSON, or a gzip stream of
 * one when the first byte is 'G', or, after a first byte 'B', an
 * ember.ingest.v1.Batch as JSON (enums, bytes, unsigned fields). Every
 * decoded message must survive protobuf-c's packing and unpacking
 * unchanged, and every batch the conversion emits must be valid. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "server/ingest/batch_decode.h"
#include "server/ingest/otlp.h"
#include "server/ingest/pbarena.h"
#include "server/ingest/pbjson.h"

/* m packs, unpacks and packs again to the same bytes. */
static void check_round_trip(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *a = malloc(n + 1);
	if (!a || protobuf_c_message_pack(m, a) != n)
		abort();
	struct buf err = { 0 };
	ProtobufCMessage *back = pb_unpack(m->descriptor, a, n, &err);
	if (!back)
		abort();
	size_t n2 = protobuf_c_message_get_packed_size(back);
	uint8_t *b = malloc(n2 + 1);
	if (!b || n2 != n || protobuf_c_message_pack(back, b) != n || memcmp(a, b, n) != 0)
		abort();
	free(a);
	free(b);
	pb_free(back);
	buf_free(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf err = { 0 };
	int too_large;
	if (size > 0 && data[0] == 'B') {
		static const struct pbjson_opts opts = {
			.max_depth = 16, .max_items = 4096, .max_containers = 1024, .max_string = 4096,
		};
		ProtobufCMessage *m = pbjson_decode(&ember__ingest__v1__batch__descriptor, data + 1,
						    size - 1, &opts, &too_large, &err);
		if (m) {
			check_round_trip(m);
			pb_free(m);
		}
		buf_free(&err);
		return 0;
	}
	int gzip = size > 0 && data[0] == 'G';
	Ember__Otlp__ExportProfilesServiceRequest *r =
		otlp_decode_json(data + gzip, size - (size_t)gzip, gzip, &too_large, &err);
	if (r) {
		check_round_trip(&r->base);
		fuzz_convert_otlp(r, &err);
	}
	buf_free(&err);
	return 0;
}
