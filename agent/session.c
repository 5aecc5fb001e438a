/* session.c - see session.h. */
#include "session.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "ingest.pb-c.h"
#include "sort.h"
#include "util.h"

#include <xxhash.h>

/* The node index: open addressing with linear probing over 32-bit slots,
 * each 0 (empty) or a node id + 1 in the low NODE_ID_BITS bits under 8
 * bits of the node's hash, so a probe past another node is nearly always
 * settled by the slot alone. At a load of at most 3/4 a node costs 4 to
 * 10.7 bytes of index besides its 8 bytes of arrays, where a general
 * hmap slot (12 bytes, load at most 1/2) cost 24 to 48: a host with a
 * million and more distinct stack nodes fits one 32 MiB session instead
 * of starting a new one (and defining everything again) every few
 * minutes. */
#define NODE_ID_BITS 24
#define NODE_ID_MASK ((1u << NODE_ID_BITS) - 1)

/* A memo: what the session has placed (a stack, as its leaf node; a
 * resource, as its id), by a 128-bit hash of its content, so an entry
 * seen in an earlier batch costs one hash and one probe instead of one
 * lookup per frame or string (its frames and strings are not looked up
 * at all). A slot is the hash's low 64 bits and, in its other word, 40
 * more bits of it over the id + 1 (NODE_ID_BITS); 0 is empty. Two
 * entries are taken for one only when 104 bits of their hashes agree:
 * about 1 in 10^19 for a session of a million distinct stacks.
 *
 * A memo is a cache over the dictionary, not part of it: an entry it does
 * not hold is found node by node (or string by string) as before, defining
 * nothing the session has sent. So it is bounded on its own (max_slots,
 * at most 3/4 full) and emptied when a batch would pass that, rather than
 * counted in session_memory() and making the session start over. */
struct memo_slot {
	uint64_t lo, hi;
};

#define MEMO_TAG(h) ((h).high64 & ~(uint64_t)NODE_ID_MASK)

static size_t memo_room(size_t slots)
{
	return slots / 4 * 3;
}

/* Makes room for extra more entries, so that the slots do not move while
 * they are probed: grows the table, or empties it first when the entries
 * would pass its bound. Returns false (the table unchanged) when even an
 * empty table of the most slots could not take them: the batch does
 * without it. */
static bool memo_reserve(struct session_memo *t, size_t extra)
{
	if (extra > memo_room(t->max_slots))
		return false;
	if (t->n + extra > memo_room(t->max_slots)) { /* at the bound: start over */
		free(t->slots);
		t->slots = NULL;
		t->n = t->mask = 0;
		t->flushes++;
	}
	size_t cap = t->slots ? t->mask + 1 : 0;
	if (cap && t->n + extra <= memo_room(cap))
		return true;
	size_t want = cap ? cap : MIN((size_t)1024, t->max_slots);
	while (t->n + extra > memo_room(want))
		want *= 2; /* stops by max_slots: the entries fit there */
	struct memo_slot *slots = xcalloc(want, sizeof(*slots));
	for (size_t i = 0; i < cap; i++) {
		if (!t->slots[i].hi)
			continue;
		size_t j = t->slots[i].lo & (want - 1);
		while (slots[j].hi)
			j = (j + 1) & (want - 1);
		slots[j] = t->slots[i];
	}
	free(t->slots);
	t->slots = slots;
	t->mask = want - 1;
	return true;
}

/* Empties t and gives its memory back, keeping its bound. */
static void memo_free(struct session_memo *t)
{
	free(t->slots);
	t->slots = NULL;
	t->n = t->mask = 0;
}

/* The slot of the entry with hash h: its own, or the empty one where it
 * goes (room reserved by the caller). */
static struct memo_slot *memo_find(struct session_memo *t, XXH128_hash_t h)
{
	size_t j = h.low64 & t->mask;
	while (t->slots[j].hi && (t->slots[j].lo != h.low64 || (t->slots[j].hi & ~(uint64_t)NODE_ID_MASK) != MEMO_TAG(h)))
		j = (j + 1) & t->mask;
	return &t->slots[j];
}

static void memo_set(struct session_memo *t, struct memo_slot *slot, XXH128_hash_t h, uint32_t id)
{
	*slot = (struct memo_slot){ h.low64, MEMO_TAG(h) | (id + 1) };
	t->n++;
}

static uint32_t memo_id(const struct memo_slot *slot)
{
	return (uint32_t)(slot->hi & NODE_ID_MASK) - 1;
}
void session_init(struct session *s)
{
	memset(s, 0, sizeof(*s));
	batch_init(&s->dict);
	s->stack_memo.max_slots = s->res_memo.max_slots = SESSION_MEMO_MAX_SLOTS;
	uuid_v4(s->id);
}

void session_free(struct session *s)
{
	batch_free(&s->dict);
	free_all(s->node_parent, s->node_frame, s->node_slots);
	memo_free(&s->stack_memo);
	memo_free(&s->res_memo);
}

void session_reset(struct session *s)
{
	/* Releases the memory too: a session is reset when it grew too large
	 * (or was lost), and its successor starts small. */
	session_free(s);
	batch_init(&s->dict);
	s->node_parent = s->node_frame = s->node_slots = NULL;
	s->nnodes = s->capnodes = s->node_mask = 0;
	s->sent_strings = s->sent_files = s->sent_frames = s->sent_nodes = s->sent_res = 0;
	s->batches = 0;
	s->resets++;
	uuid_v4(s->id);
}

size_t session_memory(const struct session *s)
{
	return batch_memory(&s->dict) + s->capnodes * 2 * sizeof(uint32_t) +
	       (s->node_slots ? (s->node_mask + 1) * sizeof(uint32_t) : 0);
}

bool session_fits(const struct session *s, const struct batch *b)
{
	return b->nstack_ids <= SESSION_MAX_NODES - s->nnodes;
}


static uint64_t node_hash(uint32_t parent, uint32_t frame)
{
	return hash_u64((uint64_t)parent << 32 | frame);
}

static uint32_t node_tag(uint64_t h)
{
	return (uint32_t)(h >> 56) << NODE_ID_BITS;
}

/* Doubles the index (or allocates it) and places every node again. */
static void index_grow(struct session *s)
{
	size_t cap = s->node_slots ? 2 * (s->node_mask + 1) : 1024;
	uint32_t *slots = xcalloc(cap, sizeof(uint32_t));
	size_t mask = cap - 1;
	for (size_t i = 0; i < s->nnodes; i++) {
		uint64_t h = node_hash(s->node_parent[i], s->node_frame[i]);
		size_t j = h & mask;
		while (slots[j])
			j = (j + 1) & mask;
		slots[j] = node_tag(h) | (uint32_t)(i + 1);
	}
	free(s->node_slots);
	s->node_slots = slots;
	s->node_mask = mask;
}

/* The node of frame under parent (a node id + 1, 0 = none), added when
 * new; the caller has checked the room (session_fits). */
static uint32_t node(struct session *s, uint32_t parent, uint32_t frame)
{
	if (!s->node_slots || 4 * (s->nnodes + 1) > 3 * (s->node_mask + 1))
		index_grow(s);
	uint64_t h = node_hash(parent, frame);
	uint32_t tag = node_tag(h);
	size_t j = h & s->node_mask;
	for (uint32_t v; (v = s->node_slots[j]); j = (j + 1) & s->node_mask) {
		uint32_t idx = (v & NODE_ID_MASK) - 1;
		if ((v & ~NODE_ID_MASK) == tag && s->node_parent[idx] == parent &&
		    s->node_frame[idx] == frame)
			return idx;
	}
	if (s->nnodes + 1 > s->capnodes) {
		size_t cap = s->capnodes;
		xgrow((void **)&s->node_parent, &cap, s->nnodes + 1, sizeof(uint32_t));
		size_t cap2 = s->capnodes;
		xgrow((void **)&s->node_frame, &cap2, s->nnodes + 1, sizeof(uint32_t));
		s->capnodes = cap;
	}
	uint32_t idx = (uint32_t)s->nnodes++;
	s->node_parent[idx] = parent;
	s->node_frame[idx] = frame;
	s->node_slots[j] = tag | (idx + 1);
	return idx;
}

/* The batch's tables translated to session ids, each looked up (and added
 * to the session's dictionary, so becoming a definition) only when a
 * stack or resource needs it: UNMAPPED until then. A stack maps to its
 * leaf node, UINT32_MAX for an empty stack. */
#define UNMAPPED UINT32_MAX

struct idmap {
	uint32_t *str, *file, *frame, *stack, *res;
	XXH128_hash_t *str_hash, *frame_hash; /* content hashes */
};

static uint32_t map_str(struct session *s, const struct batch *b, struct idmap *m, uint32_t i)
{
	if (m->str[i] == UNMAPPED)
		m->str[i] = batch_string(&s->dict, strtab_get(&b->strings, i), strtab_len(&b->strings, i));
	return m->str[i];
}

/* file: 1-based, 0 = none. */
static uint32_t map_file(struct session *s, const struct batch *b, struct idmap *m, uint32_t file)
{
	if (!file)
		return 0;
	if (m->file[file - 1] == UNMAPPED) {
		const struct bfile *f = &b->files[file - 1];
		m->file[file - 1] = batch_file(&s->dict, f->agent_index, &f->id,
					       strtab_get(&b->strings, f->name), f->build_id,
					       f->build_id_len, (const uint64_t(*)[3])f->segs, f->nsegs);
	}
	return m->file[file - 1];
}

static uint32_t map_frame(struct session *s, const struct batch *b, struct idmap *m, uint32_t i)
{
	if (m->frame[i] == UNMAPPED) {
		const struct bframe *f = &b->frames[i];
		struct bframe g = {
			.type = f->type, .file = map_file(s, b, m, f->file), .address = f->address,
			.name = map_str(s, b, m, f->name), .binary = map_str(s, b, m, f->binary),
		};
		m->frame[i] = batch_frame(&s->dict, &g);
	}
	return m->frame[i];
}

/* What makes a frame the session's frame (batch_frame's key), with the
 * file as the registry's index (what the session's files are keyed by)
 * and the strings as their contents' hashes. */
struct frame_content {
	uint64_t address;
	XXH128_hash_t name, binary;
	uint32_t file;
	uint32_t type;
};

static void hash_contents(const struct batch *b, struct idmap *m)
{
	size_t ns = strtab_count(&b->strings);
	for (size_t i = 0; i < ns; i++)
		m->str_hash[i] = XXH3_128bits(strtab_get(&b->strings, (uint32_t)i),
					      strtab_len(&b->strings, (uint32_t)i));
	for (size_t i = 0; i < b->nframes; i++) {
		const struct bframe *f = &b->frames[i];
		struct frame_content c;
		memset(&c, 0, sizeof(c)); /* the padding too: it is hashed */
		c.address = f->address;
		c.name = m->str_hash[f->name];
		c.binary = m->str_hash[f->binary];
		c.file = f->file ? b->files[f->file - 1].agent_index : UINT32_MAX;
		c.type = f->type;
		m->frame_hash[i] = XXH3_128bits(&c, sizeof(c));
	}
}

/* The 128-bit hash of batch stack i's content. hs: room for its frames'
 * hashes. */
static XXH128_hash_t stack_hash(const struct batch *b, const struct idmap *m, size_t i,
				XXH128_hash_t *hs)
{
	uint32_t lo = b->stack_off[i], hi = b->stack_off[i + 1];
	for (uint32_t j = lo; j < hi; j++)
		hs[j - lo] = m->frame_hash[b->stack_ids[j]];
	return XXH3_128bits(hs, (hi - lo) * sizeof(*hs));
}

/* The leaf node of batch stack i (hash h): from the memo when the session
 * has placed the same stack before, else node by node, translating its
 * frames. memo: whether the memo has room for this batch. */
static uint32_t map_stack(struct session *s, const struct batch *b, struct idmap *m, size_t i,
			  XXH128_hash_t h, bool memo)
{
	uint32_t lo = b->stack_off[i], hi = b->stack_off[i + 1];
	if (lo == hi)
		return UINT32_MAX;
	struct memo_slot *slot = memo ? memo_find(&s->stack_memo, h) : NULL;
	if (slot && slot->hi)
		return memo_id(slot);
	uint32_t parent = 0, leaf = UINT32_MAX;
	for (uint32_t j = lo; j < hi; j++) {
		leaf = node(s, parent, map_frame(s, b, m, b->stack_ids[j]));
		parent = leaf + 1;
	}
	if (slot)
		memo_set(&s->stack_memo, slot, h, leaf); /* leaf < SESSION_MAX_NODES: it fits */
	return leaf;
}

/* The session id of batch resource i (hash h), likewise. */
static uint32_t map_resource(struct session *s, const struct batch *b, struct idmap *m, size_t i,
			     XXH128_hash_t h, bool memo, uint32_t **tmp, size_t *cap)
{
	struct memo_slot *slot = memo ? memo_find(&s->res_memo, h) : NULL;
	if (slot && slot->hi)
		return memo_id(slot);
	size_t n = b->res_off[i + 1] - b->res_off[i];
	xgrow((void **)tmp, cap, n + 1, sizeof(uint32_t));
	for (size_t j = 0; j < n; j++)
		(*tmp)[j] = map_str(s, b, m, b->res_ids[b->res_off[i] + j]);
	uint32_t id = batch_resource(&s->dict, *tmp, n);
	if (slot && id < NODE_ID_MASK - 1) /* beyond that it is looked up every time */
		memo_set(&s->res_memo, slot, h, id);
	return id;
}

static void map_batch(struct session *s, const struct batch *b, struct idmap *m)
{
	size_t ns = strtab_count(&b->strings);
	m->str = xmalloc((ns ? ns : 1) * sizeof(uint32_t));
	memset(m->str, 0xff, ns * sizeof(uint32_t));
	m->file = xmalloc((b->nfiles + 1) * sizeof(uint32_t));
	memset(m->file, 0xff, b->nfiles * sizeof(uint32_t));
	m->frame = xmalloc((b->nframes + 1) * sizeof(uint32_t));
	memset(m->frame, 0xff, b->nframes * sizeof(uint32_t));
	m->str_hash = xmalloc((ns ? ns : 1) * sizeof(*m->str_hash));
	m->frame_hash = xmalloc((b->nframes + 1) * sizeof(*m->frame_hash));
	hash_contents(b, m);

	/* Every stack's and resource's hash first, then their memo slots
	 * fetched all at once, then the probes: the memos are out of the
	 * caches after an interval of other work, and one miss at a time
	 * would cost the whole latency of memory for each. */
	size_t longest = 0;
	for (size_t i = 0; i < b->nstacks; i++)
		longest = MAX(longest, (size_t)(b->stack_off[i + 1] - b->stack_off[i]));
	for (size_t i = 0; i < b->nres; i++)
		longest = MAX(longest, (size_t)(b->res_off[i + 1] - b->res_off[i]));
	XXH128_hash_t *hs = xmalloc((longest + 1) * sizeof(*hs));
	XXH128_hash_t *sh = xmalloc((b->nstacks + b->nres + 1) * sizeof(*sh));
	for (size_t i = 0; i < b->nstacks; i++)
		sh[i] = stack_hash(b, m, i, hs);
	for (size_t i = 0; i < b->nres; i++) {
		uint32_t lo = b->res_off[i], hi = b->res_off[i + 1];
		for (uint32_t j = lo; j < hi; j++)
			hs[j - lo] = m->str_hash[b->res_ids[j]];
		sh[b->nstacks + i] = XXH3_128bits(hs, (hi - lo) * sizeof(*hs));
	}
	free(hs);
	bool stack_memo = memo_reserve(&s->stack_memo, b->nstacks);
	bool res_memo = memo_reserve(&s->res_memo, b->nres);
	for (size_t i = 0; stack_memo && i < b->nstacks; i++)
		__builtin_prefetch(&s->stack_memo.slots[sh[i].low64 & s->stack_memo.mask]);
	for (size_t i = 0; res_memo && i < b->nres; i++)
		__builtin_prefetch(&s->res_memo.slots[sh[b->nstacks + i].low64 & s->res_memo.mask]);

	m->stack = xmalloc((b->nstacks + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->nstacks; i++)
		m->stack[i] = map_stack(s, b, m, i, sh[i], stack_memo);
	uint32_t *tmp = NULL;
	size_t cap = 0;
	m->res = xmalloc((b->nres + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->nres; i++)
		m->res[i] = map_resource(s, b, m, i, sh[b->nstacks + i], res_memo, &tmp, &cap);
	free(tmp);
	free(sh);
}

static void idmap_free(struct idmap *m)
{
	free(m->str);
	free(m->file);
	free(m->frame);
	free(m->stack);
	free(m->res);
	free(m->str_hash);
	free(m->frame_hash);
}

/* A sample row in session ids. */
struct srow {
	uint32_t node, res;
	uint64_t value;
	uint8_t kind;
};

/* The rows' order by (node, resource), so the node deltas are small: two
 * stable radix sorts of (key << 32 | row), by resource then by node.
 * Returns order[0..n), owned by the caller. */
static uint64_t *sort_rows(const struct srow *rows, size_t n)
{
	uint64_t *v = xmalloc((n + 1) * sizeof(uint64_t)), *tmp = xmalloc((n + 1) * sizeof(uint64_t));
	for (size_t i = 0; i < n; i++)
		v[i] = (uint64_t)rows[i].res << 32 | i;
	sort_u64_by_high(v, n, tmp);
	for (size_t i = 0; i < n; i++)
		v[i] = (uint64_t)rows[(uint32_t)v[i]].node << 32 | (uint32_t)v[i];
	sort_u64_by_high(v, n, tmp);
	free(tmp);
	return v;
}

int session_encode(struct session *s, const struct batch *b, const struct batch_meta *meta,
		   struct buf *out)
{
	if (!session_fits(s, b))
		return -1;
	struct batch *d = &s->dict;
	struct idmap m;
	map_batch(s, b, &m);

	Ember__Ingest__V1__SessionBatch msg = EMBER__INGEST__V1__SESSION_BATCH__INIT;
	msg.session = s->id;
	BATCH_META_TO_MSG(&msg, meta);

	/* Definitions: everything the dictionary holds beyond what was sent. */
	size_t ns = strtab_count(&d->strings);
	msg.strings_base = (uint32_t)s->sent_strings;
	msg.n_strings = ns - s->sent_strings;
	msg.strings = xmalloc((msg.n_strings + 1) * sizeof(char *));
	for (size_t i = 0; i < msg.n_strings; i++)
		msg.strings[i] = (char *)strtab_get(&d->strings, (uint32_t)(s->sent_strings + i));

	msg.files_base = (uint32_t)s->sent_files;
	msg.n_files = d->nfiles - s->sent_files;
	Ember__Ingest__V1__File *files = xcalloc(msg.n_files + 1, sizeof(*files));
	msg.files = xcalloc(msg.n_files + 1, sizeof(*msg.files));
	for (size_t i = 0; i < msg.n_files; i++) {
		batch_file_message(&d->files[s->sent_files + i], &files[i]);
		msg.files[i] = &files[i];
	}

	size_t nf = d->nframes - s->sent_frames;
	msg.frames_base = (uint32_t)s->sent_frames;
	msg.n_frame_types = msg.n_frame_files = msg.n_frame_addresses = msg.n_frame_names =
		msg.n_frame_binaries = nf;
	msg.frame_types = xmalloc((nf + 1) * sizeof(*msg.frame_types));
	msg.frame_files = xmalloc((nf + 1) * sizeof(uint32_t));
	msg.frame_addresses = xmalloc((nf + 1) * sizeof(uint64_t));
	msg.frame_names = xmalloc((nf + 1) * sizeof(uint32_t));
	msg.frame_binaries = xmalloc((nf + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < nf; i++) {
		const struct bframe *f = &d->frames[s->sent_frames + i];
		msg.frame_types[i] = (Ember__Ingest__V1__FrameType)f->type;
		msg.frame_files[i] = f->file;
		msg.frame_addresses[i] = f->address;
		msg.frame_names[i] = f->name;
		msg.frame_binaries[i] = f->binary;
	}

	size_t nn = s->nnodes - s->sent_nodes;
	msg.nodes_base = (uint32_t)s->sent_nodes;
	msg.n_node_parents = msg.n_node_frames = nn;
	msg.node_parents = s->node_parent + s->sent_nodes;
	msg.node_frames = s->node_frame + s->sent_nodes;

	size_t nr = d->nres - s->sent_res;
	msg.resources_base = (uint32_t)s->sent_res;
	msg.n_resource_lengths = nr;
	msg.resource_lengths = xmalloc((nr + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < nr; i++)
		msg.resource_lengths[i] = d->res_off[s->sent_res + i + 1] - d->res_off[s->sent_res + i];
	if (nr) {
		msg.n_resource_attributes = d->nres_ids - d->res_off[s->sent_res];
		msg.resource_attributes = d->res_ids + d->res_off[s->sent_res];
	}

	struct srow *rows = xmalloc((b->nsamples + 1) * sizeof(*rows));
	size_t n = 0;
	bool all_on_cpu = true;
	for (size_t i = 0; i < b->nsamples; i++) {
		const struct bsample *sm = &b->samples[i];
		if (m.stack[sm->stack] == UINT32_MAX)
			continue; /* an empty stack: nothing to show */
		rows[n++] = (struct srow){ m.stack[sm->stack], m.res[sm->resource], sm->value, sm->kind };
		all_on_cpu &= sm->kind == EK_ON_CPU;
	}
	uint64_t *order = sort_rows(rows, n);
	msg.n_sample_nodes = msg.n_sample_resources = msg.n_sample_values = n;
	msg.n_sample_kinds = all_on_cpu ? 0 : n;
	msg.sample_nodes = xmalloc((n + 1) * sizeof(uint32_t));
	msg.sample_resources = xmalloc((n + 1) * sizeof(uint32_t));
	msg.sample_kinds = xmalloc((n + 1) * sizeof(*msg.sample_kinds));
	msg.sample_values = xmalloc((n + 1) * sizeof(uint64_t));
	uint32_t prev = 0;
	for (size_t i = 0; i < n; i++) {
		const struct srow *r = &rows[(uint32_t)order[i]];
		msg.sample_nodes[i] = r->node - prev;
		prev = r->node;
		msg.sample_resources[i] = r->res;
		msg.sample_kinds[i] = (Ember__Ingest__V1__EventKind)r->kind;
		msg.sample_values[i] = r->value;
	}
	free(order);
	free(rows);

	/* Timeline spans, by the same nodes and resources as the samples. */
	size_t nsp = 0;
	msg.span_nodes = xmalloc((b->nspans + 1) * sizeof(uint32_t));
	msg.span_resources = xmalloc((b->nspans + 1) * sizeof(uint32_t));
	msg.span_starts_ns = xmalloc((b->nspans + 1) * sizeof(uint64_t));
	msg.span_ends_ns = xmalloc((b->nspans + 1) * sizeof(uint64_t));
	msg.span_kinds = xmalloc((b->nspans + 1) * sizeof(uint32_t));
	msg.span_devices = xmalloc((b->nspans + 1) * sizeof(uint32_t));
	msg.span_streams = xmalloc((b->nspans + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->nspans; i++) {
		const struct bspan *sp = &b->spans[i];
		if (m.stack[sp->stack] == UINT32_MAX)
			continue;
		msg.span_nodes[nsp] = m.stack[sp->stack];
		msg.span_resources[nsp] = m.res[sp->resource];
		msg.span_starts_ns[nsp] = sp->start_ns;
		msg.span_ends_ns[nsp] = sp->end_ns;
		msg.span_kinds[nsp] = sp->kind;
		msg.span_devices[nsp] = sp->device;
		msg.span_streams[nsp] = sp->stream;
		nsp++;
	}
	msg.n_span_nodes = msg.n_span_resources = msg.n_span_starts_ns = msg.n_span_ends_ns =
		msg.n_span_kinds = msg.n_span_devices = msg.n_span_streams = nsp;

	size_t len = ember__ingest__v1__session_batch__get_packed_size(&msg);
	uint8_t *raw = xmalloc(len + 1);
	ember__ingest__v1__session_batch__pack(&msg, raw);
	int rc = zstd_compress_buf(raw, len, 3, out);
	free(raw);
	if (rc == 0) {
		s->sent_strings = ns;
		s->sent_files = d->nfiles;
		s->sent_frames = d->nframes;
		s->sent_nodes = s->nnodes;
		s->sent_res = d->nres;
		s->batches++;
	}
	free(msg.strings);
	free(files);
	free(msg.files);
	free(msg.frame_types);
	free(msg.frame_files);
	free(msg.frame_addresses);
	free(msg.frame_names);
	free(msg.frame_binaries);
	free(msg.resource_lengths);
	free(msg.sample_nodes);
	free(msg.sample_resources);
	free(msg.sample_kinds);
	free(msg.sample_values);
	free(msg.span_nodes);
	free(msg.span_resources);
	free(msg.span_starts_ns);
	free(msg.span_ends_ns);
	free(msg.span_kinds);
	free(msg.span_devices);
	free(msg.span_streams);
	idmap_free(&m);
	return rc;
}
