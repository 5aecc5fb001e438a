/* gpuspans.c - see gpuspans.h. */
#include "gpuspans.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmap.h"
#include "strtab.h"
#include "util.h"

/* A frame as a chunk keeps it: string ids of its strtab (0: none), file
 * index + 1 (0: none). */
struct cframe {
	uint64_t address;
	uint32_t name, binary, file;
	uint8_t type;
	bool has_name, has_binary;
};

struct chunk {
	char project[37];
	int64_t created_ms;
	int64_t min_start_ns, max_end_ns;
	struct strtab strs;
	struct store_file *files;
	uint32_t *file_names; /* by file: string id of its name */
	size_t nfiles, capfiles, capfile_names;
	struct hmap file_index;
	struct cframe *frames;
	size_t nframes, capframes;
	struct hmap frame_index;
	uint32_t *node_parent, *node_frame; /* node 0: the root */
	size_t nnodes, capnodes;
	struct hmap node_index;
	/* label sets: sorted (key, value) string-id pairs, set i at
	 * lab_ids[lab_off[i] .. lab_off[i + 1]) */
	uint32_t *lab_ids, *lab_off;
	size_t nlab_ids, caplab_ids, nlabs, caplab_off;
	struct hmap lab_index;
	struct gpuspan *spans;
	size_t nspans, capspans;
	struct store_segment seg;
};

struct gpuspans {
	pthread_mutex_t mu;
	int64_t retention_ms;
	size_t max_spans, nspans;
	struct chunk **chunks; /* oldest first */
	size_t nchunks, capchunks;
	struct gpuspans_stats stats;
};

/* --- a chunk's dictionaries as a segment -------------------------------------- */

static const struct chunk *seg_chunk(const struct store_segment *g)
{
	return (const struct chunk *)((const char *)g - offsetof(struct chunk, seg));
}

static const char *seg_str(const struct store_segment *g, uint32_t id)
{
	const struct chunk *c = seg_chunk(g);
	return id < strtab_count(&c->strs) ? strtab_get(&c->strs, id) : "";
}

static uint32_t seg_find(const struct store_segment *g, const char *s, size_t len)
{
	return strtab_lookup(&seg_chunk(g)->strs, s, len);
}

static size_t seg_label_pairs(const struct store_segment *g, uint32_t labels, const uint32_t **kv)
{
	const struct chunk *c = seg_chunk(g);
	if (labels >= c->nlabs)
		return 0;
	*kv = c->lab_ids + c->lab_off[labels];
	return (c->lab_off[labels + 1] - c->lab_off[labels]) / 2;
}

static int seg_frame(const struct store_segment *g, uint32_t frame, struct store_frame_info *out)
{
	const struct chunk *c = seg_chunk(g);
	if (frame >= c->nframes)
		return -1;
	const struct cframe *f = &c->frames[frame];
	*out = (struct store_frame_info){
		.type = f->type,
		.address = f->address,
		.name = f->has_name ? strtab_get(&c->strs, f->name) : NULL,
		.binary = f->has_binary ? strtab_get(&c->strs, f->binary) : NULL,
		.file = f->file ? &c->files[f->file - 1] : NULL,
		.file_name = f->file ? strtab_get(&c->strs, c->file_names[f->file - 1]) : NULL,
	};
	return 0;
}

static uint32_t seg_host_cpus(const struct store_segment *g, uint32_t name)
{
	(void)g;
	(void)name;
	return 0; /* spans carry no host sizes: a timeline has no CPU share */
}

/* Only the dictionary half: a chunk is read through gpuspans_read, never
 * through a store view, so the view functions stay NULL. */
static const struct store_read_ops chunk_ops = {
	.name = "gpuspans",
	.str = seg_str,
	.find = seg_find,
	.label_pairs = seg_label_pairs,
	.frame = seg_frame,
	.host_cpus = seg_host_cpus,
};

/* --- interning ------------------------------------------------------------- */

struct file_key {
	const struct chunk *c;
	const struct file_id *id;
};

static bool eq_file(const void *ctx, uint32_t idx)
{
	const struct file_key *k = ctx;
	return memcmp(&k->c->files[idx].id, k->id, sizeof(*k->id)) == 0;
}

/* The chunk's file index + 1 of f (named name). */
static uint32_t intern_file(struct chunk *c, const struct store_file *f, const char *name)
{
	uint64_t h = hash_bytes(&f->id, sizeof(f->id));
	struct file_key k = { c, &f->id };
	uint32_t idx;
	if (hmap_find(&c->file_index, h, eq_file, &k, &idx))
		return idx + 1;
	xgrow((void **)&c->files, &c->capfiles, c->nfiles + 1, sizeof(*c->files));
	xgrow((void **)&c->file_names, &c->capfile_names, c->nfiles + 1, sizeof(*c->file_names));
	c->files[c->nfiles] = *f;
	c->files[c->nfiles].name = 0;
	c->file_names[c->nfiles] = strtab_intern_cstr(&c->strs, name ? name : "");
	hmap_insert(&c->file_index, h, (uint32_t)c->nfiles);
	return (uint32_t)++c->nfiles;
}

struct frame_key {
	const struct chunk *c;
	const struct cframe *f;
};

static bool eq_frame(const void *ctx, uint32_t idx)
{
	const struct frame_key *k = ctx;
	const struct cframe *a = &k->c->frames[idx], *b = k->f;
	return a->type == b->type && a->address == b->address && a->name == b->name &&
	       a->binary == b->binary && a->file == b->file && a->has_name == b->has_name &&
	       a->has_binary == b->has_binary;
}

static uint32_t intern_frame(struct chunk *c, const struct store_frame_info *fi)
{
	struct cframe f = {
		.address = fi->address,
		.type = fi->type,
		.has_name = fi->name != NULL,
		.has_binary = fi->binary != NULL,
	};
	f.name = fi->name ? strtab_intern_cstr(&c->strs, fi->name) : 0;
	f.binary = fi->binary ? strtab_intern_cstr(&c->strs, fi->binary) : 0;
	f.file = fi->file ? intern_file(c, fi->file, fi->file_name) : 0;
	uint64_t h = hash_mix(hash_mix(hash_mix(hash_u64(f.address), f.name), (uint64_t)f.binary << 32 | f.file),
			      (uint64_t)f.type << 2 | (uint64_t)f.has_name << 1 | f.has_binary);
	struct frame_key k = { c, &f };
	uint32_t idx;
	if (hmap_find(&c->frame_index, h, eq_frame, &k, &idx))
		return idx;
	xgrow((void **)&c->frames, &c->capframes, c->nframes + 1, sizeof(*c->frames));
	c->frames[c->nframes] = f;
	hmap_insert(&c->frame_index, h, (uint32_t)c->nframes);
	return (uint32_t)c->nframes++;
}

static uint32_t intern_node(struct chunk *c, uint32_t parent, uint32_t frame)
{
	return hmap_pair_intern(&c->node_index, hash_u64((uint64_t)parent << 32 | frame),
				&c->node_parent, &c->node_frame, &c->nnodes, &c->capnodes, parent, frame);
}

static bool eq_lab(const void *ctx, uint32_t idx)
{
	const struct chunk *c = ((const struct hmap_span_key *)ctx)->owner;
	const uint32_t *run = c->lab_ids ? c->lab_ids + c->lab_off[idx] : NULL; /* none yet: no array */
	return hmap_span_is(ctx, run, c->lab_off[idx + 1] - c->lab_off[idx], sizeof(uint32_t));
}

static int cmp_pair(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] < y[1] ? -1 : x[1] > y[1];
}

static uint32_t intern_labels(struct chunk *c, const char *const *kv, size_t npairs)
{
	uint32_t *ids = xmalloc((2 * npairs + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < 2 * npairs; i++)
		ids[i] = strtab_intern_cstr(&c->strs, kv[i] ? kv[i] : "");
	xqsort(ids, npairs, 2 * sizeof(uint32_t), cmp_pair);
	uint64_t h = hash_bytes(ids, 2 * npairs * sizeof(uint32_t));
	struct hmap_span_key k = { c, ids, 2 * npairs };
	uint32_t idx;
	if (!hmap_find(&c->lab_index, h, eq_lab, &k, &idx)) {
		if (c->nlabs == 0) {
			xgrow((void **)&c->lab_off, &c->caplab_off, 1, sizeof(uint32_t));
			c->lab_off[0] = 0;
		}
		xgrow((void **)&c->lab_ids, &c->caplab_ids, c->nlab_ids + 2 * npairs + 1, sizeof(uint32_t));
		memcpy(c->lab_ids + c->nlab_ids, ids, 2 * npairs * sizeof(uint32_t));
		c->nlab_ids += 2 * npairs;
		xgrow((void **)&c->lab_off, &c->caplab_off, c->nlabs + 2, sizeof(uint32_t));
		c->lab_off[c->nlabs + 1] = (uint32_t)c->nlab_ids;
		idx = (uint32_t)c->nlabs++;
		hmap_insert(&c->lab_index, h, idx);
	}
	free(ids);
	return idx;
}

/* --- chunks -------------------------------------------------------------------- */

static struct chunk *chunk_new(const char *project, int64_t now_ms)
{
	struct chunk *c = xcalloc(1, sizeof(*c));
	snprintf(c->project, sizeof(c->project), "%s", project);
	c->created_ms = now_ms;
	c->min_start_ns = INT64_MAX;
	c->max_end_ns = INT64_MIN;
	strtab_init(&c->strs);
	intern_node(c, 0, UINT32_MAX); /* the root, named by no frame */
	return c;
}

static void chunk_free(struct chunk *c)
{
	strtab_free(&c->strs);
	free_all(c->files, c->file_names);
	hmap_free(&c->file_index);
	free(c->frames);
	hmap_free(&c->frame_index);
	free_all(c->node_parent, c->node_frame);
	hmap_free(&c->node_index);
	free_all(c->lab_ids, c->lab_off);
	hmap_free(&c->lab_index);
	free_all(c->spans, c);
}

void gpuspans_free(struct gpuspans *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->nchunks; i++)
		chunk_free(g->chunks[i]);
	free(g->chunks);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

/* The segment of c as its dictionaries stand now. */
static const struct store_segment *chunk_segment(struct chunk *c)
{
	c->seg = (struct store_segment){
		.ops = &chunk_ops,
		.min_ts = INT64_MAX,
		.max_ts = INT64_MIN,
		.nlabels = (uint32_t)c->nlabs,
		.nframes = (uint32_t)c->nframes,
		.nnodes = (uint32_t)c->nnodes,
		.node_parent = c->node_parent,
		.node_frame = c->node_frame,
		.stack_nown = (uint32_t)c->nnodes,
		.stack_count = c->nnodes,
	};
	return &c->seg;
}

struct gpuspans *gpuspans_new(int64_t retention_ms, size_t max_spans)
{
	struct gpuspans *g = xcalloc(1, sizeof(*g));
	pthread_mutex_init(&g->mu, NULL);
	g->retention_ms = retention_ms > 0 ? retention_ms : GPUSPANS_DEFAULT_RETENTION_MS;
	g->max_spans = max_spans ? max_spans : GPUSPANS_DEFAULT_MAX;
	return g;
}

static void drop_chunk(struct gpuspans *g, size_t i)
{
	g->nspans -= g->chunks[i]->nspans;
	chunk_free(g->chunks[i]);
	memmove(g->chunks + i, g->chunks + i + 1, (g->nchunks - i - 1) * sizeof(*g->chunks));
	g->nchunks--;
}

/* Drops the chunks past the retention, then the oldest while over
 * max_spans (never the newest chunk, which is being filled). mu held. */
static void trim(struct gpuspans *g, int64_t now_ms)
{
	int64_t horizon_ns = (now_ms - g->retention_ms) * 1000000;
	for (size_t i = 0; i < g->nchunks;) {
		struct chunk *c = g->chunks[i];
		if (c->nspans && c->max_end_ns < horizon_ns && c->created_ms < now_ms - g->retention_ms) {
			g->stats.expired += c->nspans;
			drop_chunk(g, i);
		} else {
			i++;
		}
	}
	while (g->nspans > g->max_spans && g->nchunks > 1) {
		g->stats.evicted += g->chunks[0]->nspans;
		drop_chunk(g, 0);
	}
}

/* The project's chunk being filled, a new one when it is full or old. */
static struct chunk *open_chunk(struct gpuspans *g, const char *project, int64_t now_ms)
{
	for (size_t i = g->nchunks; i-- > 0;) {
		struct chunk *c = g->chunks[i];
		if (strcmp(c->project, project) != 0)
			continue;
		if (c->nspans < GPUSPANS_CHUNK_SPANS && now_ms - c->created_ms < GPUSPANS_CHUNK_MS)
			return c;
		break;
	}
	struct chunk *c = chunk_new(project, now_ms);
	xgrow((void **)&g->chunks, &g->capchunks, g->nchunks + 1, sizeof(*g->chunks));
	g->chunks[g->nchunks++] = c;
	return c;
}

void gpuspans_add(struct gpuspans *g, const char *project, const struct gpuspan_in *in, size_t n,
		  int64_t now_ms)
{
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < n; i++) {
		struct chunk *c = open_chunk(g, project, now_ms);
		uint32_t node = 0;
		for (size_t j = 0; j < in[i].nframes && j < GPUSPANS_MAX_DEPTH; j++)
			node = intern_node(c, node, intern_frame(c, &in[i].frames[j]));
		xgrow((void **)&c->spans, &c->capspans, c->nspans + 1, sizeof(*c->spans));
		c->spans[c->nspans++] = (struct gpuspan){
			.start_ns = in[i].start_ns,
			.end_ns = in[i].end_ns,
			.node = node,
			.labels = intern_labels(c, in[i].labels, in[i].nlabels),
			.device = in[i].device,
			.stream = in[i].stream,
			.kind = in[i].kind,
		};
		c->min_start_ns = MIN(c->min_start_ns, in[i].start_ns);
		c->max_end_ns = MAX(c->max_end_ns, in[i].end_ns);
		g->nspans++;
		g->stats.added++;
	}
	trim(g, now_ms);
	pthread_mutex_unlock(&g->mu);
}

int gpuspans_read(struct gpuspans *g, const char *project, int64_t from_ns, int64_t to_ns,
		  int64_t now_ms, gpuspans_fn fn, void *ctx)
{
	pthread_mutex_lock(&g->mu);
	trim(g, now_ms);
	int rc = 0;
	for (size_t i = g->nchunks; rc == 0 && i-- > 0;) {
		struct chunk *c = g->chunks[i];
		if (strcmp(c->project, project) != 0 || c->nspans == 0 || c->max_end_ns <= from_ns ||
		    c->min_start_ns >= to_ns)
			continue;
		rc = fn(ctx, chunk_segment(c), c->spans, c->nspans);
	}
	pthread_mutex_unlock(&g->mu);
	return rc;
}

void gpuspans_get_stats(struct gpuspans *g, struct gpuspans_stats *out)
{
	pthread_mutex_lock(&g->mu);
	*out = g->stats;
	out->spans = g->nspans;
	out->chunks = g->nchunks;
	pthread_mutex_unlock(&g->mu);
}
