/* part.c - see part.h. */
#include "part.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util.h"

/* The last dict_id given: process-wide so that two parts never share one
 * unless one is a copy of the other (part.h). */
static uint64_t last_dict_id;

void part_init(struct part *p, uint32_t granularity_ms)
{
	memset(p, 0, sizeof(*p));
	p->dict_id = __atomic_add_fetch(&last_dict_id, 1, __ATOMIC_RELAXED);
	strtab_init(&p->lstr);
	strtab_init(&p->sstr);
	xgrow((void **)&p->node_parent, &p->capnodes, 1, sizeof(uint32_t));
	p->node_frame = xrealloc(p->node_frame, p->capnodes * sizeof(uint32_t));
	p->node_parent[0] = 0;
	p->node_frame[0] = UINT32_MAX;
	p->nnodes = 1;
	xgrow((void **)&p->label_off, &p->caplabels, 1, sizeof(uint32_t));
	p->label_off[0] = 0;
	p->min_ts = INT64_MAX;
	p->max_ts = INT64_MIN;
	p->granularity_ms = granularity_ms ? granularity_ms : 1;
}

void part_free(struct part *p)
{
	strtab_free(&p->lstr);
	strtab_free(&p->sstr);
	free_all(p->files, p->frames, p->node_parent, p->node_frame, p->label_kv, p->label_off);
	for (size_t i = 0; i < p->nseries; i++) {
		free_all(p->series[i].minutes, p->series[i].rows);
	}
	free_all(p->series, p->hosts, p->agents);
	hmap_free(&p->file_index);
	hmap_free(&p->frame_index);
	hmap_free(&p->node_index);
	hmap_free(&p->stack_index);
	free_all(p->stack_keys, p->frame_hi);
	for (size_t i = 0; i < p->nrollups; i++) {
		free_all(p->rollups[i].stacks, p->rollups[i].sums, p->rollups[i].acc,
		         p->rollups[i].pos);
	}
	free_all(p->rollups, p->slices);
	hmap_free(&p->label_index);
	hmap_free(&p->series_index);
	hmap_free(&p->host_index);
	hmap_free(&p->agent_index);
	memset(p, 0, sizeof(*p));
}

static void *dup_array(const void *src, size_t n, size_t size, size_t *cap)
{
	*cap = n + 1;
	void *d = xmalloc(*cap * size);
	if (n)
		memcpy(d, src, n * size);
	return d;
}

void part_copy_dictionaries(struct part *dst, const struct part *src)
{
	strtab_free(&dst->lstr);
	strtab_free(&dst->sstr);
	free_all(dst->node_parent, dst->node_frame, dst->label_off);
	strtab_copy(&dst->lstr, &src->lstr);
	strtab_copy(&dst->sstr, &src->sstr);
	dst->files = dup_array(src->files, src->nfiles, sizeof(*src->files), &dst->capfiles);
	dst->nfiles = src->nfiles;
	dst->frames = dup_array(src->frames, src->nframes, sizeof(*src->frames), &dst->capframes);
	dst->nframes = src->nframes;
	size_t cap;
	dst->frame_hi = dup_array(src->frame_hi, src->nframes, sizeof(uint64_t), &dst->capframe_hi);
	dst->node_parent = dup_array(src->node_parent, src->nnodes, sizeof(uint32_t), &dst->capnodes);
	dst->node_frame = dup_array(src->node_frame, src->nnodes, sizeof(uint32_t), &cap);
	dst->nnodes = src->nnodes;
	dst->label_kv = dup_array(src->label_kv, src->nlabel_kv, sizeof(uint32_t), &dst->caplabel_kv);
	dst->nlabel_kv = src->nlabel_kv;
	dst->label_off = dup_array(src->label_off, src->nlabels + 1, sizeof(uint32_t), &dst->caplabels);
	dst->nlabels = src->nlabels;
	dst->stack_keys = dup_array(src->stack_keys, src->nstack_keys, sizeof(*src->stack_keys),
				    &dst->capstack_keys);
	dst->nstack_keys = src->nstack_keys;
	hmap_copy(&dst->file_index, &src->file_index);
	hmap_copy(&dst->frame_index, &src->frame_index);
	hmap_copy(&dst->node_index, &src->node_index);
	hmap_copy(&dst->stack_index, &src->stack_index);
	hmap_copy(&dst->label_index, &src->label_index);
	dst->dict_id = src->dict_id;
}

size_t part_dict_memory(const struct part *p)
{
	size_t m = p->lstr.bytes.cap + p->sstr.bytes.cap + (p->lstr.cap + p->sstr.cap) * 8 +
		   p->capfiles * sizeof(*p->files) + p->capframes * sizeof(*p->frames) +
		   p->capnodes * 8 + p->caplabel_kv * 4 + p->caplabels * 4 +
		   p->capstack_keys * sizeof(*p->stack_keys) + p->capframe_hi * 8;
	const struct hmap *maps[] = { &p->lstr.index, &p->sstr.index, &p->file_index,
				      &p->frame_index, &p->node_index, &p->stack_index,
				      &p->label_index };
	for (size_t i = 0; i < ARRAY_SIZE(maps); i++)
		m += hmap_bytes(maps[i]);
	return m;
}

/* --- interning ------------------------------------------------------------ */

struct file_key {
	const struct part *p;
	const uint8_t *id;
};

static bool eq_file(const void *ctx, uint32_t idx)
{
	const struct file_key *k = ctx;
	return memcmp(k->p->files[idx].id.b, k->id, FILE_ID_LEN) == 0;
}

uint32_t part_file(struct part *p, const struct store_file *f)
{
	uint64_t h = hash_bytes(f->id.b, FILE_ID_LEN);
	struct file_key k = { p, f->id.b };
	uint32_t idx;
	if (!hmap_find(&p->file_index, h, eq_file, &k, &idx)) {
		xgrow((void **)&p->files, &p->capfiles, p->nfiles + 1, sizeof(*p->files));
		idx = (uint32_t)p->nfiles++;
		p->files[idx] = *f;
		hmap_insert(&p->file_index, h, idx);
		return idx;
	}
	/* A later batch may know more about the file than the first did. */
	struct store_file *sf = &p->files[idx];
	if (!sf->build_id_len && f->build_id_len) {
		memcpy(sf->build_id, f->build_id, f->build_id_len);
		sf->build_id_len = f->build_id_len;
	}
	if (!sf->nsegs && f->nsegs) {
		memcpy(sf->segs, f->segs, sizeof(sf->segs));
		sf->nsegs = f->nsegs;
	}
	return idx;
}

/* Frames are indexed by a 128-bit hash of their content (strings by their
 * bytes, not their ids): 64 bits pick the slot, the other 64 are compared,
 * so a batch's frame seen before costs one lookup and no string compare,
 * and is found before its strings are interned. Two different frames of
 * one part would have to collide in all 128 bits to be confused. */
static XXH128_hash_t frame_hash(uint8_t type, uint32_t file, uint64_t address, const char *name,
				size_t name_len, uint64_t binary_hash)
{
	uint64_t seed = hash_mix(hash_mix(hash_u64((uint64_t)type << 32 | file), address),
				 binary_hash);
	return XXH3_128bits_withSeed(name, name_len, seed);
}

struct frame_key {
	const struct part *p;
	uint64_t hi;
};

static bool eq_frame(const void *ctx, uint32_t idx)
{
	const struct frame_key *k = ctx;
	return k->p->frame_hi[idx] == k->hi;
}

static uint32_t frame_find_or_add(struct part *p, XXH128_hash_t h, const struct store_frame *f)
{
	struct frame_key k = { p, h.high64 };
	uint32_t idx;
	if (hmap_find(&p->frame_index, h.low64, eq_frame, &k, &idx))
		return idx;
	xgrow((void **)&p->frames, &p->capframes, p->nframes + 1, sizeof(*p->frames));
	xgrow((void **)&p->frame_hi, &p->capframe_hi, p->nframes + 1, sizeof(uint64_t));
	idx = (uint32_t)p->nframes++;
	p->frames[idx] = *f;
	p->frame_hi[idx] = h.high64;
	hmap_insert(&p->frame_index, h.low64, idx);
	return idx;
}

uint32_t part_frame(struct part *p, const struct store_frame *f)
{
	const char *binary = strtab_get(&p->sstr, f->binary);
	XXH128_hash_t h = frame_hash(f->type, f->file, f->address, strtab_get(&p->sstr, f->name),
				     strtab_len(&p->sstr, f->name),
				     hash_bytes(binary, strtab_len(&p->sstr, f->binary)));
	return frame_find_or_add(p, h, f);
}

/* The node index of a part whose tree was renumbered (part_sort_nodes). */
static void index_nodes(struct part *p)
{
	for (size_t i = 1; i < p->nnodes; i++)
		hmap_insert(&p->node_index,
			    hash_u64((uint64_t)p->node_parent[i] << 32 | p->node_frame[i]), (uint32_t)i);
}

uint32_t part_node(struct part *p, uint32_t parent, uint32_t frame)
{
	if (!p->node_index.count && p->nnodes > 1)
		index_nodes(p);
	return hmap_pair_intern(&p->node_index, hash_u64((uint64_t)parent << 32 | frame),
				&p->node_parent, &p->node_frame, &p->nnodes, &p->capnodes, parent, frame);
}

/* Whole stacks are indexed by a 128-bit hash of their frame ids: 64 bits
 * pick the slot, the other 64 are compared, so a stack seen before costs
 * one lookup and no walk up the tree. Two different stacks of one part
 * would have to collide in all 128 bits to be confused. */
struct stack_key {
	const struct part *p;
	uint64_t hi;
};

static bool eq_stack(const void *ctx, uint32_t idx)
{
	const struct stack_key *k = ctx;
	return k->p->stack_keys[idx].hi == k->hi;
}

uint32_t part_stack_id(struct part *p, const uint32_t *frames, size_t n)
{
	if (n == 0)
		return 0;
	XXH128_hash_t h = XXH3_128bits(frames, n * sizeof(uint32_t));
	struct stack_key k = { p, h.high64 };
	uint32_t idx;
	if (hmap_find(&p->stack_index, h.low64, eq_stack, &k, &idx))
		return p->stack_keys[idx].leaf;
	uint32_t node = 0;
	for (size_t i = 0; i < n; i++)
		node = part_node(p, node, frames[i]);
	xgrow((void **)&p->stack_keys, &p->capstack_keys, p->nstack_keys + 1,
	      sizeof(*p->stack_keys));
	p->stack_keys[p->nstack_keys] = (struct part_stack_key){ h.high64, node };
	hmap_insert(&p->stack_index, h.low64, (uint32_t)p->nstack_keys++);
	return node;
}

uint32_t part_stack_by_hash(struct part *p, uint64_t lo, uint64_t hi)
{
	struct stack_key k = { p, hi };
	uint32_t idx;
	return hmap_find(&p->stack_index, lo, eq_stack, &k, &idx) ? p->stack_keys[idx].leaf
								  : UINT32_MAX;
}

void part_stack_note_hash(struct part *p, uint64_t lo, uint64_t hi, uint32_t leaf)
{
	xgrow((void **)&p->stack_keys, &p->capstack_keys, p->nstack_keys + 1,
	      sizeof(*p->stack_keys));
	p->stack_keys[p->nstack_keys] = (struct part_stack_key){ hi, leaf };
	hmap_insert(&p->stack_index, lo, (uint32_t)p->nstack_keys++);
}

uint32_t *part_sort_nodes(struct part *p)
{
	size_t n = p->nnodes;
	/* Two passes, no child lists: parents come before children, so the
	 * sizes of all subtrees add up in one pass downwards, and one pass
	 * upwards gives each child, in id order, the next free place after
	 * its parent's earlier children. at[] holds a subtree's size until
	 * its node is placed, then the next free place under it. */
	uint32_t *at = xmalloc((n ? n : 1) * sizeof(uint32_t));
	uint32_t *map = xmalloc((n ? n : 1) * sizeof(uint32_t));
	for (size_t i = 0; i < n; i++)
		at[i] = 1;
	for (size_t i = n; i-- > 1;)
		at[p->node_parent[i]] += at[i];
	map[0] = 0;
	at[0] = 1;
	for (size_t i = 1; i < n; i++) {
		uint32_t up = p->node_parent[i];
		map[i] = at[up];
		at[up] += at[i];
		at[i] = map[i] + 1;
	}
	free(at);
	uint32_t *parent = xmalloc(p->capnodes * sizeof(uint32_t));
	uint32_t *frame = xmalloc(p->capnodes * sizeof(uint32_t));
	parent[0] = 0;
	frame[0] = p->node_frame[0];
	for (size_t i = 1; i < n; i++) {
		parent[map[i]] = map[p->node_parent[i]];
		frame[map[i]] = p->node_frame[i];
	}
	free_all(p->node_parent, p->node_frame);
	p->node_parent = parent;
	p->node_frame = frame;
	/* Its keys name parents by id: built again when next needed. */
	hmap_free(&p->node_index);
	for (size_t i = 0; i < p->nstack_keys; i++)
		p->stack_keys[i].leaf = map[p->stack_keys[i].leaf];
	return map;
}

static bool eq_labels(const void *ctx, uint32_t idx)
{
	const struct part *p = ((const struct hmap_span_key *)ctx)->owner;
	/* No pairs yet (only empty label sets): no array to point into. */
	const uint32_t *run = p->label_kv ? p->label_kv + p->label_off[idx] : NULL;
	return hmap_span_is(ctx, run, p->label_off[idx + 1] - p->label_off[idx], sizeof(uint32_t));
}

uint32_t part_labels(struct part *p, const uint32_t *kv, size_t npairs)
{
	size_t n = 2 * npairs;
	uint64_t h = hash_bytes(kv, n * sizeof(uint32_t));
	struct hmap_span_key k = { p, kv, n };
	uint32_t idx;
	if (hmap_find(&p->label_index, h, eq_labels, &k, &idx))
		return idx;
	if (n) {
		xgrow((void **)&p->label_kv, &p->caplabel_kv, p->nlabel_kv + n, sizeof(uint32_t));
		memcpy(p->label_kv + p->nlabel_kv, kv, n * sizeof(uint32_t));
	}
	p->nlabel_kv += n;
	xgrow((void **)&p->label_off, &p->caplabels, p->nlabels + 2, sizeof(uint32_t));
	idx = (uint32_t)p->nlabels++;
	p->label_off[idx + 1] = (uint32_t)p->nlabel_kv;
	hmap_insert(&p->label_index, h, idx);
	return idx;
}

struct series_key {
	const struct part *p;
	uint32_t project, labels;
	uint8_t kind;
	uint16_t hz;
};

static bool eq_series(const void *ctx, uint32_t idx)
{
	const struct series_key *k = ctx;
	const struct part_series *s = &k->p->series[idx];
	return s->project == k->project && s->labels == k->labels && s->kind == k->kind &&
	       s->hz == k->hz;
}

uint32_t part_series_id(struct part *p, uint32_t project, uint8_t kind, uint16_t hz,
			uint32_t labels)
{
	uint64_t h = hash_mix(hash_u64((uint64_t)project << 32 | labels), (uint64_t)kind << 16 | hz);
	struct series_key k = { p, project, labels, kind, hz };
	uint32_t idx;
	if (hmap_find(&p->series_index, h, eq_series, &k, &idx))
		return idx;
	xgrow((void **)&p->series, &p->capseries, p->nseries + 1, sizeof(*p->series));
	idx = (uint32_t)p->nseries++;
	p->series[idx] = (struct part_series){ .project = project, .labels = labels, .kind = kind,
					       .hz = hz, .min_ts = INT64_MAX, .max_ts = INT64_MIN };
	hmap_insert(&p->series_index, h, idx);
	return idx;
}

void part_add_minute(struct part_series *s, int64_t minute_ms, uint64_t value)
{
	/* Rows come mostly in time order: look from the end. */
	size_t i = s->nminutes;
	while (i > 0 && s->minutes[i - 1].minute_ms > minute_ms)
		i--;
	if (i > 0 && s->minutes[i - 1].minute_ms == minute_ms) {
		s->minutes[i - 1].value += value;
		return;
	}
	xgrow((void **)&s->minutes, &s->capminutes, s->nminutes + 1, sizeof(*s->minutes));
	memmove(s->minutes + i + 1, s->minutes + i, (s->nminutes - i) * sizeof(*s->minutes));
	s->minutes[i] = (struct store_minute){ minute_ms, value };
	s->nminutes++;
}

/* The rollup of a series' (project, kind, rate), made when first needed. */
static struct part_rollup *series_rollup(struct part *p, struct part_series *s)
{
	if (!s->rollup)
		s->rollup = (uint32_t)(part_rollup_get(p, s->project, s->kind, s->hz) - p->rollups) + 1;
	return &p->rollups[s->rollup - 1];
}

/* Room in r's index for stack ids up to max. */
static void rollup_reserve(struct part_rollup *r, uint32_t max)
{
	if (max < r->cappos)
		return;
	size_t old = r->cappos;
	xgrow((void **)&r->pos, &r->cappos, (size_t)max + 1, sizeof(*r->pos));
	memset(r->pos + old, 0, (r->cappos - old) * sizeof(*r->pos));
}

/* Adds value to stack's sum in r (whose index has room for stack): the
 * dense index by stack id finds its place in the rollup's list. */
static void rollup_add(struct part_rollup *r, uint32_t stack, uint64_t value)
{
	uint32_t i = r->pos[stack];
	if (!i) {
		if (r->n == r->capstacks) {
			size_t cap = r->capstacks;
			xgrow((void **)&r->stacks, &r->capstacks, r->n + 1, sizeof(*r->stacks));
			xgrow((void **)&r->sums, &cap, r->n + 1, sizeof(*r->sums));
		}
		r->stacks[r->n] = stack;
		r->sums[r->n] = 0;
		i = r->pos[stack] = (uint32_t)++r->n;
	}
	r->sums[i - 1] += value;
}

/* The row itself, and every total but the rollup's. */
static void add_row(struct part *p, struct part_series *s, int64_t ts_ms, uint32_t stack,
		    uint64_t value)
{
	int64_t ts = floor_to(ts_ms, p->granularity_ms);
	xgrow((void **)&s->rows, &s->caprows, s->nrows + 1, sizeof(*s->rows));
	s->rows[s->nrows++] = (struct store_row){ .ts_ms = ts, .value = value, .stack = stack };
	s->total += value;
	s->min_ts = MIN(s->min_ts, ts);
	s->max_ts = MAX(s->max_ts, ts);
	part_add_minute(s, floor_to(ts, 60000), value);
	p->min_ts = MIN(p->min_ts, ts);
	p->max_ts = MAX(p->max_ts, ts);
	p->rows++;
	p->samples += value;
}

void part_add_row(struct part *p, uint32_t series, int64_t ts_ms, uint32_t stack, uint64_t value)
{
	struct part_series *s = &p->series[series];
	add_row(p, s, ts_ms, stack, value);
	struct part_rollup *r = series_rollup(p, s);
	rollup_reserve(r, stack);
	rollup_add(r, stack, value);
}

/* How far ahead part_add_rows fetches a row's index entry, then its sum:
 * both lie anywhere in arrays of megabytes, a cache miss each. */
#define ROLLUP_AHEAD_POS 16
#define ROLLUP_AHEAD_SUM 8

void part_add_rows(struct part *p, const uint32_t *series, int64_t ts_ms, const uint32_t *stacks,
		   const uint64_t *values, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct part_series *s = &p->series[series[i]];
		add_row(p, s, ts_ms, stacks[i], values[i]);
		rollup_reserve(series_rollup(p, s), stacks[i]);
	}
	/* The rollups in a pipeline: the index entry of row i + 16 and the
	 * sum of row i + 8 are on their way while row i is added. No rollup
	 * is made or grows its index below, so the pointers hold. */
	for (size_t i = 0; i < n + ROLLUP_AHEAD_POS; i++) {
		if (i < n) {
			const struct part_rollup *r = &p->rollups[p->series[series[i]].rollup - 1];
			prefetch(&r->pos[stacks[i]]);
		}
		if (i >= ROLLUP_AHEAD_SUM && i - ROLLUP_AHEAD_SUM < n) {
			size_t j = i - ROLLUP_AHEAD_SUM;
			const struct part_rollup *r = &p->rollups[p->series[series[j]].rollup - 1];
			uint32_t at = r->pos[stacks[j]];
			if (at)
				prefetch(&r->sums[at - 1]);
		}
		if (i >= ROLLUP_AHEAD_POS) {
			size_t j = i - ROLLUP_AHEAD_POS;
			rollup_add(&p->rollups[p->series[series[j]].rollup - 1], stacks[j], values[j]);
		}
	}
}

/* Hosts and agents: records keyed by a uint32_t lstr id, their first
 * field, found through an index. */
_Static_assert(offsetof(struct part_host, name) == 0 && offsetof(struct part_agent, instance) == 0,
	       "a keyed record starts with its key");

struct record_key {
	const void *records;
	size_t size;
	uint32_t key;
};

static bool eq_record(const void *ctx, uint32_t idx)
{
	const struct record_key *k = ctx;
	uint32_t have;
	memcpy(&have, (const char *)k->records + (size_t)idx * k->size, sizeof(have));
	return have == k->key;
}

/* The index of the record keyed key in *records (n of them, size bytes
 * each), appended zeroed but for its key when there is none. */
static uint32_t keyed_record(struct hmap *index, void **records, size_t *n, size_t *cap, size_t size,
			     uint32_t key)
{
	struct record_key k = { *records, size, key };
	uint64_t h = hash_u64(key);
	uint32_t idx;
	if (hmap_find(index, h, eq_record, &k, &idx))
		return idx;
	xgrow(records, cap, *n + 1, size);
	idx = (uint32_t)(*n)++;
	char *r = (char *)*records + (size_t)idx * size;
	memset(r, 0, size);
	memcpy(r, &key, sizeof(key));
	hmap_insert(index, h, idx);
	return idx;
}

void part_note_host(struct part *p, uint32_t name, uint32_t cpus)
{
	uint32_t i = keyed_record(&p->host_index, (void **)&p->hosts, &p->nhosts, &p->caphosts,
				  sizeof(*p->hosts), name);
	p->hosts[i].cpus = MAX(p->hosts[i].cpus, cpus);
}

void part_note_agent(struct part *p, uint32_t instance, uint64_t seq)
{
	uint32_t i = keyed_record(&p->agent_index, (void **)&p->agents, &p->nagents, &p->capagents,
				  sizeof(*p->agents), instance);
	p->agents[i].seq = MAX(p->agents[i].seq, seq);
}

uint64_t part_agent_seq(const struct part *p, const char *instance)
{
	uint32_t id = strtab_lookup(&p->lstr, instance, strlen(instance));
	if (id == UINT32_MAX)
		return 0;
	struct record_key k = { p->agents, sizeof(*p->agents), id };
	uint32_t idx;
	if (hmap_find(&p->agent_index, hash_u64(id), eq_record, &k, &idx))
		return p->agents[idx].seq;
	return 0;
}

size_t part_canonical_labels(uint32_t *kv, size_t npairs)
{
	for (size_t i = 1; i < npairs; i++) {
		uint32_t k = kv[2 * i], v = kv[2 * i + 1];
		size_t j = i;
		while (j > 0 && kv[2 * (j - 1)] > k) {
			kv[2 * j] = kv[2 * (j - 1)];
			kv[2 * j + 1] = kv[2 * (j - 1) + 1];
			j--;
		}
		kv[2 * j] = k;
		kv[2 * j + 1] = v;
	}
	size_t n = 0;
	for (size_t i = 0; i < npairs; i++)
		if (n == 0 || kv[2 * (n - 1)] != kv[2 * i]) {
			kv[2 * n] = kv[2 * i];
			kv[2 * n + 1] = kv[2 * i + 1];
			n++;
		}
	return n;
}

/* --- the head writer (store.h) ------------------------------------------------ */

uint32_t store_head_string(struct store_head *h, enum store_strings t, const char *s, size_t len)
{
	return strtab_intern(t == STORE_LABEL_STRINGS ? &h->part->lstr : &h->part->sstr, s, len);
}

uint64_t store_head_dictionaries(const struct store_head *h)
{
	return h->part->dict_id;
}

uint32_t store_head_file(struct store_head *h, const struct store_file *f)
{
	return part_file(h->part, f);
}

uint32_t store_head_frame(struct store_head *h, const struct store_frame *f)
{
	return part_frame(h->part, f);
}

uint32_t store_head_frame_text(struct store_head *h, const struct store_frame_text *f)
{
	struct part *p = h->part;
	XXH128_hash_t hash = frame_hash(f->type, f->file, f->address, f->name, f->name_len,
					f->binary_hash);
	struct frame_key k = { p, hash.high64 };
	uint32_t idx;
	if (hmap_find(&p->frame_index, hash.low64, eq_frame, &k, &idx))
		return idx;
	struct store_frame sf = {
		.type = f->type, .file = f->file, .address = f->address,
		.name = f->name_len ? strtab_intern(&p->sstr, f->name, f->name_len) : 0,
		.binary = f->binary_len ? strtab_intern(&p->sstr, f->binary, f->binary_len) : 0,
	};
	return frame_find_or_add(p, hash, &sf);
}

uint32_t store_head_stack(struct store_head *h, const uint32_t *frames, size_t n)
{
	return part_stack_id(h->part, frames, n);
}

uint32_t store_head_stack_by_hash(struct store_head *h, uint64_t lo, uint64_t hi)
{
	return part_stack_by_hash(h->part, lo, hi);
}

void store_head_note_stack_hash(struct store_head *h, uint64_t lo, uint64_t hi, uint32_t stack)
{
	part_stack_note_hash(h->part, lo, hi, stack);
}

uint32_t store_head_labels(struct store_head *h, uint32_t *kv, size_t npairs, uint32_t host_cpus)
{
	struct part *p = h->part;
	size_t pairs = part_canonical_labels(kv, npairs);
	uint32_t labels = part_labels(p, kv, pairs);
	if (host_cpus) {
		uint32_t host_key = strtab_lookup(&p->lstr, "host.name", 9);
		for (size_t j = 0; host_key != UINT32_MAX && j < pairs; j++)
			if (kv[2 * j] == host_key)
				part_note_host(p, kv[2 * j + 1], host_cpus);
	}
	return labels;
}

uint32_t store_head_series(struct store_head *h, uint32_t project, uint8_t kind, uint16_t hz,
			   uint32_t labels)
{
	return part_series_id(h->part, project, kind, hz, labels);
}

void store_head_rows(struct store_head *h, const uint32_t *series, int64_t ts_ms,
		     const uint32_t *stacks, const uint64_t *values, size_t n)
{
	part_add_rows(h->part, series, ts_ms, stacks, values, n);
}

void store_head_note_agent(struct store_head *h, const char *instance, uint64_t seq)
{
	part_note_agent(h->part, strtab_intern_cstr(&h->part->lstr, instance), seq);
}

/* --- reading ---------------------------------------------------------------- */

size_t part_stack(const struct part *p, uint32_t stack, uint32_t *out, size_t max)
{
	size_t depth = 0;
	for (uint32_t n = stack; n != 0 && n < p->nnodes; n = p->node_parent[n])
		depth++;
	size_t i = depth;
	for (uint32_t n = stack; n != 0 && n < p->nnodes; n = p->node_parent[n]) {
		i--;
		if (i < max)
			out[i] = p->node_frame[n];
	}
	return depth;
}

size_t part_label_pairs(const struct part *p, uint32_t labels, const uint32_t **kv)
{
	if (labels >= p->nlabels) {
		*kv = NULL;
		return 0;
	}
	*kv = p->label_kv ? p->label_kv + p->label_off[labels] : NULL;
	return (p->label_off[labels + 1] - p->label_off[labels]) / 2;
}

const char *part_label_value(const struct part *p, uint32_t labels, const char *key)
{
	const uint32_t *kv;
	size_t n = part_label_pairs(p, labels, &kv);
	uint32_t k = strtab_lookup(&p->lstr, key, strlen(key));
	if (k == UINT32_MAX)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (kv[2 * i] == k)
			return strtab_get(&p->lstr, kv[2 * i + 1]);
	return NULL;
}

struct part_rollup *part_rollup_get(struct part *p, uint32_t project, uint8_t kind, uint16_t hz)
{
	for (size_t i = 0; i < p->nrollups; i++) {
		struct part_rollup *r = &p->rollups[i];
		if (r->project == project && r->kind == kind && r->hz == hz)
			return r;
	}
	xgrow((void **)&p->rollups, &p->caprollups, p->nrollups + 1, sizeof(*p->rollups));
	struct part_rollup *r = &p->rollups[p->nrollups++];
	*r = (struct part_rollup){ .project = project, .kind = kind, .hz = hz };
	return r;
}

size_t part_memory(const struct part *p)
{
	size_t m = part_dict_memory(p) + p->capseries * sizeof(*p->series) +
		   p->caphosts * sizeof(*p->hosts) + p->capagents * sizeof(*p->agents) +
		   p->capslices * sizeof(*p->slices);
	const struct hmap *maps[] = { &p->series_index, &p->host_index, &p->agent_index };
	for (size_t i = 0; i < ARRAY_SIZE(maps); i++)
		m += hmap_bytes(maps[i]);
	for (size_t i = 0; i < p->nseries; i++)
		m += p->series[i].caprows * sizeof(struct store_row) +
		     p->series[i].capminutes * sizeof(struct store_minute);
	for (size_t i = 0; i < p->nrollups; i++)
		m += MAX(p->rollups[i].n, p->rollups[i].capstacks) * 12 + p->rollups[i].capacc * 8 +
		     p->rollups[i].cappos * 4;
	return m;
}
