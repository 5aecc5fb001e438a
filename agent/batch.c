/* batch.c - see batch.h. */
#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "ingest.pb-c.h"
#include "util.h"

void batch_init(struct batch *b)
{
	memset(b, 0, sizeof(*b));
	strtab_init(&b->strings);
}

void batch_free(struct batch *b)
{
	strtab_free(&b->strings);
	hmap_free(&b->frame_index);
	hmap_free(&b->stack_index);
	hmap_free(&b->res_index);
	hmap_free(&b->sample_index);
	free_all(b->files, b->file_slot, b->frames, b->stack_ids, b->stack_off, b->res_ids, b->res_off,
		 b->samples, b->spans);
	memset(b, 0, sizeof(*b));
}

void batch_reset(struct batch *b)
{
	strtab_reset(&b->strings);
	for (size_t i = 0; i < b->nfiles; i++)
		b->file_slot[b->files[i].agent_index] = 0;
	b->nfiles = 0;
	b->nframes = 0;
	hmap_clear(&b->frame_index);
	b->nstack_ids = b->nstacks = 0;
	hmap_clear(&b->stack_index);
	b->nres_ids = b->nres = 0;
	hmap_clear(&b->res_index);
	b->nsamples = 0;
	hmap_clear(&b->sample_index);
	b->total_value = 0;
	b->nspans = 0;
}

void batch_freeze(struct batch *b)
{
	hmap_free(&b->strings.index);
	hmap_free(&b->frame_index);
	hmap_free(&b->stack_index);
	hmap_free(&b->res_index);
	hmap_free(&b->sample_index);
}

size_t batch_memory(const struct batch *b)
{
	return sizeof(*b) + b->strings.bytes.cap + b->strings.cap * 2 * sizeof(uint32_t) +
	       hmap_bytes(&b->strings.index) + b->capfiles * sizeof(*b->files) +
	       b->capslot * sizeof(uint32_t) + b->capframes * sizeof(*b->frames) +
	       hmap_bytes(&b->frame_index) + b->capstack_ids * sizeof(uint32_t) +
	       b->capstacks * sizeof(uint32_t) + hmap_bytes(&b->stack_index) +
	       b->capres_ids * sizeof(uint32_t) + b->capres * sizeof(uint32_t) +
	       hmap_bytes(&b->res_index) + b->capsamples * sizeof(*b->samples) +
	       hmap_bytes(&b->sample_index) + b->capspans * sizeof(*b->spans);
}

uint32_t batch_string(struct batch *b, const char *s, size_t n)
{
	return strtab_intern(&b->strings, s, n);
}

uint32_t batch_file(struct batch *b, uint32_t agent_index, const struct file_id *id,
		    const char *name, const uint8_t *build_id, int build_id_len,
		    const uint64_t (*segs)[3], int nsegs)
{
	if (agent_index >= b->capslot) {
		size_t old = b->capslot;
		xgrow((void **)&b->file_slot, &b->capslot, (size_t)agent_index + 1, sizeof(uint32_t));
		memset(b->file_slot + old, 0, (b->capslot - old) * sizeof(uint32_t));
	}
	if (b->file_slot[agent_index])
		return b->file_slot[agent_index];
	xgrow((void **)&b->files, &b->capfiles, b->nfiles + 1, sizeof(*b->files));
	struct bfile *f = &b->files[b->nfiles++];
	memset(f, 0, sizeof(*f));
	f->id = *id;
	f->name = batch_string(b, name, strlen(name));
	if (build_id_len > 0 && build_id_len <= (int)sizeof(f->build_id)) {
		memcpy(f->build_id, build_id, (size_t)build_id_len);
		f->build_id_len = (uint8_t)build_id_len;
	}
	for (int i = 0; i < nsegs && i < 4; i++) {
		memcpy(f->segs[i], segs[i], sizeof(f->segs[i]));
		f->nsegs++;
	}
	f->agent_index = agent_index;
	b->file_slot[agent_index] = (uint32_t)b->nfiles;
	return (uint32_t)b->nfiles;
}

struct frame_key {
	const struct batch *b;
	const struct bframe *f;
};

static bool eq_frame(const void *ctx, uint32_t idx)
{
	const struct frame_key *k = ctx;
	const struct bframe *x = &k->b->frames[idx], *y = k->f;
	return x->type == y->type && x->file == y->file && x->address == y->address &&
	       x->name == y->name && x->binary == y->binary;
}

uint32_t batch_frame(struct batch *b, const struct bframe *f)
{
	uint64_t h = hash_mix(hash_mix(hash_mix(hash_u64(f->type), f->file), f->address),
			      (uint64_t)f->name << 32 | f->binary);
	struct frame_key k = { b, f };
	uint32_t idx;
	if (hmap_find(&b->frame_index, h, eq_frame, &k, &idx))
		return idx;
	xgrow((void **)&b->frames, &b->capframes, b->nframes + 1, sizeof(*b->frames));
	idx = (uint32_t)b->nframes++;
	b->frames[idx] = *f;
	hmap_insert(&b->frame_index, h, idx);
	return idx;
}

struct run_key {
	const uint32_t *ids, *off;
	const uint32_t *want;
	size_t n;
};

static bool eq_run(const void *ctx, uint32_t idx)
{
	const struct run_key *k = ctx;
	size_t len = k->off[idx + 1] - k->off[idx];
	return len == k->n &&
	       (k->n == 0 || memcmp(k->ids + k->off[idx], k->want, k->n * sizeof(uint32_t)) == 0);
}

/* Interns a run of ids in (ids, off) indexed by index. */
static uint32_t intern_run(uint32_t **ids, size_t *nids, size_t *capids, uint32_t **off,
			   size_t *nruns, size_t *capruns, struct hmap *index, const uint32_t *want,
			   size_t n)
{
	uint64_t h = hash_bytes(want, n * sizeof(uint32_t));
	if (*nruns == 0) {
		xgrow((void **)off, capruns, 1, sizeof(uint32_t));
		(*off)[0] = 0;
	}
	struct run_key k = { *ids, *off, want, n };
	uint32_t idx;
	if (hmap_find(index, h, eq_run, &k, &idx))
		return idx;
	if (n) {
		xgrow((void **)ids, capids, *nids + n, sizeof(uint32_t));
		memcpy(*ids + *nids, want, n * sizeof(uint32_t));
	}
	*nids += n;
	xgrow((void **)off, capruns, *nruns + 2, sizeof(uint32_t));
	idx = (uint32_t)(*nruns)++;
	(*off)[idx + 1] = (uint32_t)*nids;
	hmap_insert(index, h, idx);
	return idx;
}

uint32_t batch_stack(struct batch *b, const uint32_t *frames, size_t n)
{
	return intern_run(&b->stack_ids, &b->nstack_ids, &b->capstack_ids, &b->stack_off,
			  &b->nstacks, &b->capstacks, &b->stack_index, frames, n);
}

uint32_t batch_resource(struct batch *b, const uint32_t *kv, size_t n)
{
	return intern_run(&b->res_ids, &b->nres_ids, &b->capres_ids, &b->res_off, &b->nres,
			  &b->capres, &b->res_index, kv, n);
}

struct sample_key {
	const struct batch *b;
	uint32_t stack, resource;
	uint8_t kind;
};

static bool eq_sample(const void *ctx, uint32_t idx)
{
	const struct sample_key *k = ctx;
	const struct bsample *s = &k->b->samples[idx];
	return s->stack == k->stack && s->resource == k->resource && s->kind == k->kind;
}

uint32_t batch_add(struct batch *b, uint32_t stack, uint32_t resource, uint8_t kind, uint64_t value)
{
	uint64_t h = hash_mix(hash_u64((uint64_t)stack << 32 | resource), kind);
	struct sample_key k = { b, stack, resource, kind };
	uint32_t idx;
	b->total_value += value;
	if (hmap_find(&b->sample_index, h, eq_sample, &k, &idx)) {
		b->samples[idx].value += value;
		return idx;
	}
	xgrow((void **)&b->samples, &b->capsamples, b->nsamples + 1, sizeof(*b->samples));
	idx = (uint32_t)b->nsamples++;
	b->samples[idx] = (struct bsample){ stack, resource, kind, value };
	hmap_insert(&b->sample_index, h, idx);
	return idx;
}

bool batch_add_span(struct batch *b, const struct bspan *span)
{
	if (b->nspans >= BATCH_MAX_SPANS)
		return false;
	xgrow((void **)&b->spans, &b->capspans, b->nspans + 1, sizeof(*b->spans));
	b->spans[b->nspans++] = *span;
	return true;
}

void batch_add_to_row(struct batch *b, uint32_t row, uint64_t value)
{
	b->total_value += value;
	b->samples[row].value += value;
}

void batch_file_message(const struct bfile *f, Ember__Ingest__V1__File *out)
{
	ember__ingest__v1__file__init(out);
	out->file_id.data = (uint8_t *)f->id.b;
	out->file_id.len = FILE_ID_LEN;
	out->name = f->name;
	out->build_id.data = (uint8_t *)f->build_id;
	out->build_id.len = f->build_id_len;
	out->n_exec_segments = (size_t)f->nsegs * 3;
	out->exec_segments = (uint64_t *)f->segs;
}

int batch_encode(const struct batch *b, const struct batch_meta *meta, struct buf *out)
{
	Ember__Ingest__V1__Batch msg = EMBER__INGEST__V1__BATCH__INIT;
	BATCH_META_TO_MSG(&msg, meta);

	size_t ns = strtab_count(&b->strings);
	char **strings = xmalloc(ns * sizeof(char *));
	for (size_t i = 0; i < ns; i++)
		strings[i] = (char *)strtab_get(&b->strings, (uint32_t)i);
	msg.n_strings = ns;
	msg.strings = strings;

	Ember__Ingest__V1__File *files = xcalloc(b->nfiles, sizeof(*files));
	Ember__Ingest__V1__File **filep = xcalloc(b->nfiles, sizeof(*filep));
	for (size_t i = 0; i < b->nfiles; i++) {
		batch_file_message(&b->files[i], &files[i]);
		filep[i] = &files[i];
	}
	msg.n_files = b->nfiles;
	msg.files = filep;

	Ember__Ingest__V1__Frame *frames = xcalloc(b->nframes, sizeof(*frames));
	Ember__Ingest__V1__Frame **framep = xcalloc(b->nframes, sizeof(*framep));
	for (size_t i = 0; i < b->nframes; i++) {
		ember__ingest__v1__frame__init(&frames[i]);
		frames[i].type = b->frames[i].type;
		frames[i].file = b->frames[i].file;
		frames[i].address = b->frames[i].address;
		frames[i].name = b->frames[i].name;
		frames[i].binary = b->frames[i].binary;
		framep[i] = &frames[i];
	}
	msg.n_frames = b->nframes;
	msg.frames = framep;

	Ember__Ingest__V1__Stack *stacks = xcalloc(b->nstacks, sizeof(*stacks));
	Ember__Ingest__V1__Stack **stackp = xcalloc(b->nstacks, sizeof(*stackp));
	for (size_t i = 0; i < b->nstacks; i++) {
		ember__ingest__v1__stack__init(&stacks[i]);
		stacks[i].n_frames = b->stack_off[i + 1] - b->stack_off[i];
		stacks[i].frames = b->stack_ids + b->stack_off[i];
		stackp[i] = &stacks[i];
	}
	msg.n_stacks = b->nstacks;
	msg.stacks = stackp;

	Ember__Ingest__V1__Resource *res = xcalloc(b->nres, sizeof(*res));
	Ember__Ingest__V1__Resource **resp = xcalloc(b->nres, sizeof(*resp));
	for (size_t i = 0; i < b->nres; i++) {
		ember__ingest__v1__resource__init(&res[i]);
		res[i].n_attributes = b->res_off[i + 1] - b->res_off[i];
		res[i].attributes = b->res_ids + b->res_off[i];
		resp[i] = &res[i];
	}
	msg.n_resources = b->nres;
	msg.resources = resp;

	Ember__Ingest__V1__Sample *samples = xcalloc(b->nsamples, sizeof(*samples));
	Ember__Ingest__V1__Sample **samplep = xcalloc(b->nsamples, sizeof(*samplep));
	for (size_t i = 0; i < b->nsamples; i++) {
		ember__ingest__v1__sample__init(&samples[i]);
		samples[i].stack = b->samples[i].stack;
		samples[i].resource = b->samples[i].resource;
		samples[i].kind = b->samples[i].kind;
		samples[i].value = b->samples[i].value;
		samplep[i] = &samples[i];
	}
	msg.n_samples = b->nsamples;
	msg.samples = samplep;

	size_t len = ember__ingest__v1__batch__get_packed_size(&msg);
	uint8_t *raw = xmalloc(len);
	ember__ingest__v1__batch__pack(&msg, raw);
	int rc = zstd_compress_buf(raw, len, 3, out);

	free(raw);
	free(strings);
	free(files);
	free(filep);
	free(frames);
	free(framep);
	free(stacks);
	free(stackp);
	free(res);
	free(resp);
	free(samples);
	free(samplep);
	return rc;
}
