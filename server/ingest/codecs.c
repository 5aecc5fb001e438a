/* codecs.c - see codecs.h. */
#include "codecs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_decode.h"
#include "fileid.h"
#include "hmap.h"
#include "sessions.h"
#include "util.h"

/* --- version 1 batches ------------------------------------------------------------ */

void batch_index(struct store_head *h, const char *project_id, const Ember__Ingest__V1__Batch *b)
{
	uint32_t project = store_head_string(h, STORE_LABEL_STRINGS, project_id, strlen(project_id));
	/* Batch strings serve as labels and as symbols: each table gets them
	 * on first use only. */
	size_t ns = b->n_strings;
	uint32_t *lmap = xmalloc((ns + 1) * sizeof(uint32_t) * 2);
	uint32_t *smap = lmap + ns + 1;
	memset(lmap, 0xff, (ns + 1) * sizeof(uint32_t) * 2);
	/* Per batch string: its length, and for binaries (few) a hash. */
	uint32_t *slen = xmalloc((ns + 1) * sizeof(uint32_t));
	uint64_t *bhash = xmalloc((ns + 1) * sizeof(uint64_t));
	uint8_t *known = xcalloc(ns + 1, 1); /* bit 0: slen set, bit 1: bhash set */
#define SLEN(i) ((known[i] & 1) ? slen[i] : (known[i] |= 1, slen[i] = (uint32_t)strlen(b->strings[i])))
#define LSTR(i) (lmap[i] != UINT32_MAX ? lmap[i] \
		 : (lmap[i] = store_head_string(h, STORE_LABEL_STRINGS, b->strings[i], SLEN(i))))
#define SSTR(i) (smap[i] != UINT32_MAX ? smap[i] \
		 : (smap[i] = store_head_string(h, STORE_SYMBOL_STRINGS, b->strings[i], SLEN(i))))
	uint32_t *fmap = xmalloc((b->n_files + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->n_files; i++) {
		const Ember__Ingest__V1__File *f = b->files[i];
		struct store_file sf = { .name = SSTR(f->name) };
		memcpy(sf.id.b, f->file_id.data, FILE_ID_LEN);
		if (f->build_id.len) {
			memcpy(sf.build_id, f->build_id.data, f->build_id.len);
			sf.build_id_len = (uint8_t)f->build_id.len;
		}
		for (size_t j = 0; j + 2 < f->n_exec_segments && sf.nsegs < STORE_FILE_SEGMENTS; j += 3) {
			memcpy(sf.segs[sf.nsegs], f->exec_segments + j, 3 * sizeof(uint64_t));
			sf.nsegs++;
		}
		fmap[i] = store_head_file(h, &sf);
	}
	/* Frames by content: a frame seen before costs one lookup, and its
	 * strings are interned only when it is new. */
	uint32_t *frmap = xmalloc((b->n_frames + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->n_frames; i++) {
		const Ember__Ingest__V1__Frame *f = b->frames[i];
		if (!(known[f->binary] & 2)) {
			bhash[f->binary] = hash_bytes(b->strings[f->binary], SLEN(f->binary));
			known[f->binary] |= 2;
		}
		struct store_frame_text ft = {
			.type = (uint8_t)f->type, .file = f->file ? fmap[f->file - 1] + 1 : 0,
			.address = f->address,
			.name = b->strings[f->name], .name_len = SLEN(f->name),
			.binary = b->strings[f->binary], .binary_len = SLEN(f->binary),
			.binary_hash = bhash[f->binary],
		};
		frmap[i] = store_head_frame_text(h, &ft);
	}
	free(bhash);
	uint32_t *stmap = xmalloc((b->n_stacks + 1) * sizeof(uint32_t));
	uint32_t *frames = NULL;
	size_t capframes = 0;
	for (size_t i = 0; i < b->n_stacks; i++) {
		const Ember__Ingest__V1__Stack *st = b->stacks[i];
		xgrow((void **)&frames, &capframes, st->n_frames + 1, sizeof(uint32_t));
		for (size_t j = 0; j < st->n_frames; j++)
			frames[j] = frmap[st->frames[j]];
		stmap[i] = store_head_stack(h, frames, st->n_frames);
	}
	free(frames);
	uint16_t hz = (uint16_t)MIN(b->sample_rate_hz, 65535u);
	/* Series per (resource, kind): kinds are few, so a small cache. */
	uint32_t *sermap = xmalloc((b->n_resources + 1) * 4 * sizeof(uint32_t));
	memset(sermap, 0xff, (b->n_resources + 1) * 4 * sizeof(uint32_t));
	uint32_t *labmap = xmalloc((b->n_resources + 1) * sizeof(uint32_t));
	uint32_t kv[2 * BATCH_MAX_ATTRIBUTES];
	for (size_t i = 0; i < b->n_resources; i++) {
		const Ember__Ingest__V1__Resource *r = b->resources[i];
		for (size_t j = 0; j < r->n_attributes; j++)
			kv[j] = LSTR(r->attributes[j]);
		labmap[i] = store_head_labels(h, kv, r->n_attributes / 2, b->host_cpus);
	}
	uint32_t *rseries = xmalloc((2 * b->n_samples + 1) * sizeof(uint32_t));
	uint32_t *rstacks = rseries + b->n_samples;
	uint64_t *rvalues = xmalloc((b->n_samples + 1) * sizeof(uint64_t));
	for (size_t i = 0; i < b->n_samples; i++) {
		const Ember__Ingest__V1__Sample *sm = b->samples[i];
		size_t slot = (size_t)sm->resource * 4 + ((unsigned)sm->kind - 1) % 4;
		if (sermap[slot] == UINT32_MAX)
			sermap[slot] = store_head_series(h, project, (uint8_t)sm->kind, hz,
							 labmap[sm->resource]);
		rseries[i] = sermap[slot];
		rstacks[i] = stmap[sm->stack];
		rvalues[i] = sm->value;
	}
	store_head_rows(h, rseries, b->start_unix_ms, rstacks, rvalues, b->n_samples);
	free_all(rseries, rvalues);
	if (b->agent_instance[0])
		store_head_note_agent(h, b->agent_instance, b->sequence);
#undef LSTR
#undef SSTR
#undef SLEN
	free_all(slen, known, lmap, fmap, frmap, stmap, sermap, labmap);
}

/* A version 1 batch: the record is the batch as received. */
struct v1_entry {
	const Ember__Ingest__V1__Batch *b;
	const char *project;
	const void *zbody;
	size_t zlen;
};

static int v1_record(void *ctx, uint64_t gen, struct buf *head, const void **body, size_t *blen,
		     struct buf *err)
{
	(void)gen;
	(void)head;
	(void)err;
	const struct v1_entry *v = ctx;
	*body = v->zbody;
	*blen = v->zlen;
	return 0;
}

static int v1_index(void *ctx, struct store_head *head, uint64_t gen)
{
	(void)gen;
	const struct v1_entry *v = ctx;
	batch_index(head, v->project, v->b);
	return 0;
}

int batch_append(struct store *s, const char *project_id, const Ember__Ingest__V1__Batch *b,
		 const void *zbody, size_t zlen, struct buf *err)
{
	if (zlen > BATCH_MAX_COMPRESSED) {
		buf_puts(err, "invalid batch size");
		return STORE_FAILED;
	}
	struct v1_entry v = { b, project_id, zbody, zlen };
	struct store_entry e = {
		.project = project_id, .agent_instance = b->agent_instance, .sequence = b->sequence,
		.start_unix_ms = b->start_unix_ms, .record_type = STORE_RECORD_BATCH,
		.record = v1_record, .index = v1_index, .ctx = &v,
	};
	return store_append_entry(s, &e, err);
}

static int v1_replay(void *state, const char *project, const uint8_t *body, size_t len,
		     struct store_head *head, uint32_t head_no, struct store_replayed *out)
{
	(void)state;
	(void)head_no;
	struct buf err = { 0 };
	Ember__Ingest__V1__Batch *b = batch_decode(body, len, &err);
	buf_free(&err);
	if (!b)
		return -1;
	batch_index(head, project, b);
	snprintf(out->agent_instance, sizeof(out->agent_instance), "%s", b->agent_instance);
	out->sequence = b->sequence;
	batch_decode_free(b);
	return 0;
}

static const struct store_codec batch_codec = {
	.type = STORE_RECORD_BATCH, .name = "version 1 batch", .replay = v1_replay,
};

/* --- every codec -------------------------------------------------------------------- */

static const struct store_codec *const ingest_codec_table[] = { &batch_codec, &session_codec };

void ingest_codecs(struct store_config *cfg)
{
	cfg->codecs = ingest_codec_table;
	cfg->ncodecs = ARRAY_SIZE(ingest_codec_table);
}
