/* spancodec.c - see spancodec.h. */
#include "spancodec.h"

#include <stdlib.h>
#include <string.h>

#include "fileid.h"
#include "util.h"
#include "varint.h"

#define VERSION 1
#define MAX_STRING (64u << 10)

static void put_str(struct buf *out, const char *s)
{
	if (!s) {
		varint_put(out, 0);
		return;
	}
	size_t n = strnlen(s, MAX_STRING);
	varint_put(out, n + 1);
	buf_append(out, s, n);
}

void spancodec_encode(const struct gpuspan_in *in, struct buf *out)
{
	varint_put(out, VERSION);
	size_t nl = MIN(in->nlabels, (size_t)SPANCODEC_MAX_LABELS);
	varint_put(out, nl);
	for (size_t i = 0; i < 2 * nl; i++)
		put_str(out, in->labels[i]);
	size_t nf = MIN(in->nframes, (size_t)GPUSPANS_MAX_DEPTH);
	varint_put(out, nf);
	for (size_t i = 0; i < nf; i++) {
		const struct store_frame_info *f = &in->frames[i];
		varint_put(out, f->type);
		varint_put(out, f->address);
		put_str(out, f->name);
		put_str(out, f->binary);
		varint_put(out, f->file != NULL);
		if (!f->file)
			continue;
		put_str(out, f->file_name);
		buf_append(out, f->file->id.b, FILE_ID_LEN);
		size_t nb = MIN((size_t)f->file->build_id_len, sizeof(f->file->build_id));
		varint_put(out, nb);
		buf_append(out, f->file->build_id, nb);
		size_t ns = MIN((size_t)f->file->nsegs, (size_t)STORE_FILE_SEGMENTS);
		varint_put(out, ns);
		for (size_t s = 0; s < ns; s++)
			for (int k = 0; k < 3; k++)
				varint_put(out, f->file->segs[s][k]);
	}
}

void spancodec_init(struct spancodec_origin *o)
{
	memset(o, 0, sizeof(*o));
	o->frames = xcalloc(GPUSPANS_MAX_DEPTH, sizeof(*o->frames));
	o->files = xcalloc(GPUSPANS_MAX_DEPTH, sizeof(*o->files));
}

void spancodec_free(struct spancodec_origin *o)
{
	free_all(o->frames, o->files);
	buf_free(&o->strs);
	memset(o, 0, sizeof(*o));
}

/* A string into o->strs (reserved beforehand: never moves), NUL-ended;
 * NULL for none or a malformed length (c->bad). */
static const char *get_str(struct cursor *c, struct spancodec_origin *o)
{
	uint64_t n = varint_get_max(c, MAX_STRING + 1);
	if (c->bad || n == 0)
		return NULL;
	n--;
	if (cursor_left(c) < n) {
		c->bad = true;
		return NULL;
	}
	char *s = o->strs.data + o->strs.len;
	memcpy(s, c->p, n);
	s[n] = 0;
	o->strs.len += n + 1;
	c->p += n;
	return s;
}

int spancodec_decode(const void *p, size_t n, struct spancodec_origin *o)
{
	struct cursor c = { .p = p, .end = (const uint8_t *)p + n };
	/* Each string takes at least one input byte (its length) and adds at
	 * most one (its NUL): 2n + 1 bytes hold them all without a move. */
	buf_reset(&o->strs);
	buf_reserve(&o->strs, 2 * n + 1);
	o->nframes = o->nlabels = 0;
	if (varint_get(&c) != VERSION)
		return -1;
	size_t nl = (size_t)varint_get_max(&c, SPANCODEC_MAX_LABELS);
	for (size_t i = 0; i < 2 * nl && !c.bad; i++) {
		o->labels[i] = get_str(&c, o);
		if (!o->labels[i])
			c.bad = true; /* a label's key and value are never none */
	}
	size_t nf = (size_t)varint_get_max(&c, GPUSPANS_MAX_DEPTH);
	for (size_t i = 0; i < nf && !c.bad; i++) {
		struct store_frame_info *f = &o->frames[i];
		*f = (struct store_frame_info){ 0 };
		f->type = (uint8_t)varint_get_max(&c, UINT8_MAX);
		f->address = varint_get(&c);
		f->name = get_str(&c, o);
		f->binary = get_str(&c, o);
		uint64_t has_file = varint_get_max(&c, 1);
		if (c.bad || !has_file)
			continue;
		struct store_file *file = &o->files[i];
		memset(file, 0, sizeof(*file));
		f->file_name = get_str(&c, o);
		cursor_bytes(&c, file->id.b, FILE_ID_LEN);
		file->build_id_len = (uint8_t)varint_get_max(&c, sizeof(file->build_id));
		cursor_bytes(&c, file->build_id, file->build_id_len);
		file->nsegs = (uint8_t)varint_get_max(&c, STORE_FILE_SEGMENTS);
		for (size_t s = 0; s < file->nsegs && !c.bad; s++)
			for (int k = 0; k < 3; k++)
				file->segs[s][k] = varint_get(&c);
		f->file = file;
	}
	if (c.bad || cursor_left(&c) != 0)
		return -1;
	o->nlabels = nl;
	o->nframes = nf;
	return 0;
}

void spancodec_fill(const struct spancodec_origin *o, struct gpuspan_in *in)
{
	in->frames = o->frames;
	in->nframes = o->nframes;
	in->labels = o->labels;
	in->nlabels = o->nlabels;
}
