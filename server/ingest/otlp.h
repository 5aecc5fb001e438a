/* otlp.h - OpenTelemetry Profiles ingest (POST /v1development/profiles):
 * an OTLP ExportProfilesServiceRequest from any producer, converted into
 * ember's own batches (docs/protocol.md §5).
 *
 * otlp_decode() bounds and unpacks the body (protobuf; gzip allowed);
 * otlp_decode_json() makes the same message of the OTLP/JSON encoding
 * (pbjson.h), so both go through the same checks and conversion.
 * otlp_convert() checks every index of the request against its dictionary
 * (anything out of range, values and timestamps of different lengths,
 * stacks deeper than 4096 frames: an error naming the field) and turns
 * each Profile into one ember.ingest.v1.Batch, handed to emit: resource,
 * profile and sample attributes become the sample's attributes; locations
 * become frames (inlined lines expanded, caller first); a native location
 * whose mapping carries the OpenTelemetry file id
 * (process.executable.build_id.htlhash, the same identity as ember's file
 * id) is symbolized by the server like the agent's; the sample type picks
 * the event kind (samples/cpu: on_cpu, off_cpu, gpu/cuda, alloc) and the
 * period the sampling rate. Profiles of other sample types are skipped and
 * counted as rejected (partial success).
 */
#ifndef EMBER_SERVER_OTLP_H
#define EMBER_SERVER_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ingest.pb-c.h"
#include "otlp_profiles.pb-c.h"

#define OTLP_MAX_BODY (64u << 20)     /* compressed or not */
#define OTLP_MAX_DECODED (64u << 20)  /* after gzip */

/* Decodes body (gzip when gzip is set). Returns the request (free with
 * otlp_free) or NULL with err set; *too_large is set when a size limit
 * was the reason (413). */
Ember__Otlp__ExportProfilesServiceRequest *otlp_decode(const void *body, size_t len, int gzip,
						       int *too_large, struct buf *err);
/* The same for a JSON body (the proto3 JSON mapping, as pbjson.h reads
 * it; trace, span and profile ids also as hex). Beyond the body limits, a
 * document may hold at most OTLP_JSON_MAX_VALUES values and keys and
 * OTLP_JSON_MAX_CONTAINERS objects and arrays (too_large), nested at most
 * OTLP_JSON_MAX_DEPTH levels: jansson's tree then stays under about 2 GB,
 * less than protobuf-c can need for the worst 64 MiB of protobuf. */
#define OTLP_JSON_MAX_DEPTH 64
#define OTLP_JSON_MAX_VALUES (16u << 20)
#define OTLP_JSON_MAX_CONTAINERS (4u << 20)
Ember__Otlp__ExportProfilesServiceRequest *otlp_decode_json(const void *body, size_t len,
							    int gzip, int *too_large,
							    struct buf *err);
/* Frees a request from either decoder. */
void otlp_free(Ember__Otlp__ExportProfilesServiceRequest *req);

/* Stores one converted batch; returns 0 or a negative code that stops the
 * conversion (and is returned by otlp_convert). */
typedef int (*otlp_emit_fn)(void *ctx, const Ember__Ingest__V1__Batch *b);

/* A sample's value (after nanoseconds become samples) is stored as at
 * most this; larger ones are clamped and counted. */
#define OTLP_MAX_VALUE (1ull << 48)

struct otlp_result {
	uint64_t batches, samples;
	uint64_t kind_values[5]; /* samples' values by EventKind (1..4) */
	uint64_t rejected_profiles;
	/* Values changed, each counted and named in message (partial_success
	 * with rejected_profiles 0 when nothing else happened: OTLP's
	 * warning): negative values are left out (a sample with nothing else
	 * is dropped), values over OTLP_MAX_VALUE are clamped. */
	uint64_t negative_values, dropped_samples, clamped_samples;
	struct buf message; /* why profiles were rejected, what was changed */
};

/* Converts req for project (a name). Returns 0, -1 when req is invalid
 * (err says why; nothing was emitted), or emit's code. */
int otlp_convert(const Ember__Otlp__ExportProfilesServiceRequest *req, const char *project,
		 int64_t now_ms, otlp_emit_fn emit, void *ctx, struct otlp_result *res,
		 struct buf *err);

#endif
