/* Fuzz target: a GPU span's origin as the fleet store keeps it
 * (server/store/spancodec.h). Any bytes are decoded; what decodes is
 * encoded again, and that encoding decodes to an origin that encodes to
 * the same bytes (a decoded origin is what the encoder writes, but for a
 * string's NUL bytes, which its C string ends at). Every decoded string is
 * read whole (ASan catches a read past it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/store/spancodec.h"

static size_t touch(const char *s)
{
	return s ? strlen(s) : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct spancodec_origin o, back;
	if (!o.frames) {
		spancodec_init(&o);
		spancodec_init(&back);
	}
	if (spancodec_decode(data, size, &o) < 0)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < 2 * o.nlabels; i++)
		n += touch(o.labels[i]);
	for (size_t i = 0; i < o.nframes; i++) {
		n += touch(o.frames[i].name) + touch(o.frames[i].binary) + touch(o.frames[i].file_name);
		if (o.frames[i].file && o.frames[i].file->nsegs > STORE_FILE_SEGMENTS)
			abort();
	}
	(void)n;
	struct gpuspan_in in = { 0 };
	spancodec_fill(&o, &in);
	struct buf once = { 0 }, twice = { 0 };
	spancodec_encode(&in, &once);
	if (spancodec_decode(once.data, once.len, &back) < 0)
		abort();
	spancodec_fill(&back, &in);
	spancodec_encode(&in, &twice);
	if (once.len != twice.len || memcmp(once.data, twice.data, once.len))
		abort();
	buf_free(&once);
	buf_free(&twice);
	return 0;
}
