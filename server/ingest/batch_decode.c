/* batch_decode.c - see batch_decode.h. */
#include "batch_decode.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "pbarena.h"
#include "server/store/projects.h"
#include "fileid.h"
#include "util.h"

#define MAX_TABLE (16u << 20)

int batch_validate_meta(const Ember__Ingest__V1__Batch *b, struct buf *err)
{
	if (projects_name_check(b->project, err) < 0)
		return -1;
	if (strlen(b->agent_instance) > 64) {
		buf_puts(err, "agent_instance: longer than 64 bytes");
		return -1;
	}
	if (b->sample_rate_hz == 0 || b->sample_rate_hz > 100000) {
		buf_puts(err, "sample_rate_hz: expected 1 to 100000");
		return -1;
	}
	/* Logical CPUs of the host (0 = unknown): bounded so that absolute
	 * CPU percentages stay meaningful. */
	if (b->host_cpus > 65536) {
		buf_puts(err, "host_cpus: expected 0 (unknown) to 65536");
		return -1;
	}
	if (b->start_unix_ms <= 0 || b->end_unix_ms < b->start_unix_ms ||
	    b->end_unix_ms - b->start_unix_ms > 86400000LL ||
	    b->end_unix_ms > 32503680000000LL) {
		buf_puts(err, "start_unix_ms/end_unix_ms: not a plausible interval (at most one day, after 1970)");
		return -1;
	}
	return 0;
}

int batch_validate(const Ember__Ingest__V1__Batch *b, struct buf *err)
{
	size_t ns = b->n_strings;
	if (ns == 0 || ns > MAX_TABLE || b->strings[0][0] != '\0') {
		buf_puts(err, "strings: the table must start with the empty string");
		return -1;
	}
	for (size_t i = 0; i < ns; i++)
		if (strlen(b->strings[i]) > BATCH_MAX_STRING) {
			buf_printf(err, "strings[%zu]: longer than %u bytes", i, BATCH_MAX_STRING);
			return -1;
		}
	if (batch_validate_meta(b, err) < 0)
		return -1;
	if (b->n_files > MAX_TABLE || b->n_frames > MAX_TABLE || b->n_stacks > MAX_TABLE ||
	    b->n_resources > MAX_TABLE || b->n_samples > MAX_TABLE) {
		buf_puts(err, "a table has more than 16M entries");
		return -1;
	}
	for (size_t i = 0; i < b->n_files; i++) {
		const Ember__Ingest__V1__File *f = b->files[i];
		if (f->file_id.len != FILE_ID_LEN || f->name >= ns || f->build_id.len > 64 ||
		    f->n_exec_segments % 3 || f->n_exec_segments > 12) {
			buf_printf(err, "files[%zu]: bad file_id, name, build_id or exec_segments", i);
			return -1;
		}
	}
	for (size_t i = 0; i < b->n_frames; i++) {
		const Ember__Ingest__V1__Frame *f = b->frames[i];
		if ((int)f->type <= 0 || (int)f->type > EMBER__INGEST__V1__FRAME_TYPE__NVTX) {
			buf_printf(err, "frames[%zu]: unknown frame type %d", i, (int)f->type);
			return -1;
		}
		if (f->file > b->n_files || f->name >= ns || f->binary >= ns) {
			buf_printf(err, "frames[%zu]: file, name or binary out of range", i);
			return -1;
		}
	}
	for (size_t i = 0; i < b->n_stacks; i++) {
		const Ember__Ingest__V1__Stack *s = b->stacks[i];
		if (s->n_frames > BATCH_MAX_STACK_DEPTH) {
			buf_printf(err, "stacks[%zu]: deeper than %u frames", i, BATCH_MAX_STACK_DEPTH);
			return -1;
		}
		for (size_t j = 0; j < s->n_frames; j++)
			if (s->frames[j] >= b->n_frames) {
				buf_printf(err, "stacks[%zu]: frame index out of range", i);
				return -1;
			}
	}
	for (size_t i = 0; i < b->n_resources; i++) {
		const Ember__Ingest__V1__Resource *r = b->resources[i];
		if (r->n_attributes % 2 || r->n_attributes > 2 * BATCH_MAX_ATTRIBUTES) {
			buf_printf(err, "resources[%zu]: expected at most %u key/value pairs", i,
				   BATCH_MAX_ATTRIBUTES);
			return -1;
		}
		for (size_t j = 0; j < r->n_attributes; j++)
			if (r->attributes[j] >= ns || (j % 2 == 0 && r->attributes[j] == 0)) {
				buf_printf(err, "resources[%zu]: attribute out of range or empty key", i);
				return -1;
			}
	}
	for (size_t i = 0; i < b->n_samples; i++) {
		const Ember__Ingest__V1__Sample *s = b->samples[i];
		if (s->stack >= b->n_stacks || s->resource >= b->n_resources) {
			buf_printf(err, "samples[%zu]: stack or resource out of range", i);
			return -1;
		}
		if ((int)s->kind <= 0 || (int)s->kind > EMBER__INGEST__V1__EVENT_KIND__ALLOC) {
			buf_printf(err, "samples[%zu]: unknown event kind %d", i, (int)s->kind);
			return -1;
		}
		if (s->value == 0 || s->value > (1ull << 48)) {
			buf_printf(err, "samples[%zu]: value out of range", i);
			return -1;
		}
	}
	return 0;
}

/* Decompresses zbody (bounded) and unpacks one message of desc. Returns
 * the message (free with pb_free) or NULL with err set. */
static ProtobufCMessage *decode_message(const void *zbody, size_t len,
					const ProtobufCMessageDescriptor *desc, struct buf *err)
{
	if (len > BATCH_MAX_COMPRESSED) {
		buf_printf(err, "batch larger than %u bytes", BATCH_MAX_COMPRESSED);
		return NULL;
	}
	struct buf raw = { 0 };
	int rc = zstd_decompress_bounded(zbody, len, BATCH_MAX_DECOMPRESSED, &raw);
	if (rc == -2) {
		buf_printf(err, "batch decompresses to more than %u bytes", BATCH_MAX_DECOMPRESSED);
		buf_free(&raw);
		return NULL;
	}
	if (rc < 0) {
		buf_puts(err, "body is not a valid zstd frame");
		buf_free(&raw);
		return NULL;
	}
	ProtobufCMessage *m = pb_unpack(desc, raw.data, raw.len, err);
	buf_free(&raw);
	return m;
}

Ember__Ingest__V1__Batch *batch_decode(const void *zbody, size_t len, struct buf *err)
{
	Ember__Ingest__V1__Batch *b = (Ember__Ingest__V1__Batch *)decode_message(
		zbody, len, &ember__ingest__v1__batch__descriptor, err);
	if (b && batch_validate(b, err) < 0) {
		pb_free(b);
		return NULL;
	}
	return b;
}

void batch_decode_free(Ember__Ingest__V1__Batch *b)
{
	pb_free(b);
}

int batch_pack(const Ember__Ingest__V1__Batch *b, int level, struct buf *out)
{
	size_t len = ember__ingest__v1__batch__get_packed_size(b);
	uint8_t *raw = xmalloc(len + 1);
	ember__ingest__v1__batch__pack(b, raw);
	int rc = zstd_compress_buf(raw, len, level, out);
	free(raw);
	return rc;
}

Ember__Ingest__V1__SessionBatch *session_batch_decode(const void *zbody, size_t len,
						       struct buf *err)
{
	return (Ember__Ingest__V1__SessionBatch *)decode_message(
		zbody, len, &ember__ingest__v1__session_batch__descriptor, err);
}

void session_batch_free(Ember__Ingest__V1__SessionBatch *m)
{
	pb_free(m);
}

Ember__Ingest__V1__SessionCarry *session_carry_decode(const void *zbody, size_t len,
						     struct buf *err)
{
	return (Ember__Ingest__V1__SessionCarry *)decode_message(
		zbody, len, &ember__ingest__v1__session_carry__descriptor, err);
}

void session_carry_free(Ember__Ingest__V1__SessionCarry *c)
{
	pb_free(c);
}
