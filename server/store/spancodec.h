/* spancodec.h - a GPU span's origin (its launch stack and the resource
 * attributes of its process) as self-contained bytes, for a store that
 * keeps spans outside this process (the fleet store's gpu_span_origins
 * table, docs/internals/clickhouse.md "GPU spans").
 *
 * The bytes: varint fields, strings as varint length + 1 then the bytes
 * (0: none), in this order --
 *   u8 version (1), nlabels, then key, value for each;
 *   nframes, then for each: type, address, name, binary, and a file flag
 *   (0 / 1); with a file: its name, FILE_ID_LEN id bytes, build id length
 *   and bytes, nsegs and 3 * nsegs varints (offset, vaddr, size).
 * Frames outermost first, as struct gpuspan_in has them.
 *
 * Decoding reads bytes another program stored: every count and length is
 * bounded (GPUSPANS_MAX_DEPTH frames, SPANCODEC_MAX_LABELS pairs, strings
 * within what is left, STORE_FILE_SEGMENTS segments, 64 build id bytes)
 * and a malformed input is refused whole (-1), never read past its end.
 */
#ifndef EMBER_SERVER_SPANCODEC_H
#define EMBER_SERVER_SPANCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "server/store/gpuspans.h"

#define SPANCODEC_MAX_LABELS 128 /* pairs, as a batch's resource has at most */

/* Appends the origin of in (frames, labels; not its times, device,
 * stream or kind) to out. Strings longer than 64 KiB are cut there. */
void spancodec_encode(const struct gpuspan_in *in, struct buf *out);

/* A decoded origin: in's frames and labels point into this struct (its
 * strings NUL-terminated), valid until the next decode into it or
 * spancodec_free. */
struct spancodec_origin {
	struct store_frame_info *frames; /* GPUSPANS_MAX_DEPTH */
	struct store_file *files;        /* GPUSPANS_MAX_DEPTH */
	const char *labels[2 * SPANCODEC_MAX_LABELS];
	size_t nframes, nlabels;
	struct buf strs;
};

void spancodec_init(struct spancodec_origin *o);
void spancodec_free(struct spancodec_origin *o);

/* Decodes p[0..n) into o: 0, or -1 for a malformed input (o then holds
 * nothing usable). */
int spancodec_decode(const void *p, size_t n, struct spancodec_origin *o);

/* in's frames and labels from o (the times and the rest are the caller's). */
void spancodec_fill(const struct spancodec_origin *o, struct gpuspan_in *in);

#endif
