/* session.c - see session.h. */
#include "session.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "ingest.pb-c.h"
#include "util.h"

void session_init(struct session *s)
{
	memset(s, 0, sizeof(*s));
	batch_init(&s->dict);
	uuid_v4(s->id);
}

void session_free(struct session *s)
{
	batch_free(&s->dict);
	free(s->node_parent);
	free(s->node_frame);
	free(s->node_slots);
}

void session_reset(struct session *s)
{
	/* Releases the memory too: a session is reset when it grew too large
	 * (or was lost), and its successor starts small. */
	batch_free(&s->dict);
	batch_init(&s->dict);
	free(s->node_parent);
	free(s->node_frame);
	free(s->node_slots);
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

/* The batch's tables translated to session ids; entries the session has
 * not seen are added to its dictionary (and so become definitions). A
 * stack maps to its leaf node, UINT32_MAX for an empty stack. */
struct idmap {
	uint32_t *str, *file, *frame, *stack, *res;
};

static void map_batch(struct session *s, const struct batch *b, struct idmap *m)
{
	struct batch *d = &s->dict;
	size_t ns = strtab_count(&b->strings);
	m->str = xmalloc((ns ? ns : 1) * sizeof(uint32_t));
	for (size_t i = 0; i < ns; i++)
		m->str[i] = batch_string(d, strtab_get(&b->strings, (uint32_t)i),
					 strtab_len(&b->strings, (uint32_t)i));
	m->file = xmalloc((b->nfiles + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->nfiles; i++) {
		const struct bfile *f = &b->files[i];
		m->file[i] = batch_file(d, f->agent_index, &f->id, strtab_get(&b->strings, f->name),
					f->build_id, f->build_id_len, (const uint64_t(*)[3])f->segs,
					f->nsegs);
	}
	m->frame = xmalloc((b->nframes + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->nframes; i++) {
		const struct bframe *f = &b->frames[i];
		struct bframe g = {
			.type = f->type, .file = f->file ? m->file[f->file - 1] : 0,
			.address = f->address, .name = m->str[f->name], .binary = m->str[f->binary],
		};
		m->frame[i] = batch_frame(d, &g);
	}
	uint32_t *tmp = NULL;
	size_t cap = 0;
	m->stack = xmalloc((b->nstacks + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->nstacks; i++) {
		uint32_t parent = 0, leaf = UINT32_MAX;
		for (uint32_t j = b->stack_off[i]; j < b->stack_off[i + 1]; j++) {
			leaf = node(s, parent, m->frame[b->stack_ids[j]]);
			parent = leaf + 1;
		}
		m->stack[i] = leaf;
	}
	m->res = xmalloc((b->nres + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->nres; i++) {
		size_t n = b->res_off[i + 1] - b->res_off[i];
		xgrow((void **)&tmp, &cap, n + 1, sizeof(uint32_t));
		for (size_t j = 0; j < n; j++)
			tmp[j] = m->str[b->res_ids[b->res_off[i] + j]];
		m->res[i] = batch_resource(d, tmp, n);
	}
	free(tmp);
}

static void idmap_free(struct idmap *m)
{
	free(m->str);
	free(m->file);
	free(m->frame);
	free(m->stack);
	free(m->res);
}

/* Samples sorted by node, so the node deltas are small. */
struct srow {
	uint32_t node, res;
	uint64_t value;
	uint8_t kind;
};

static int cmp_row(const void *a, const void *b)
{
	const struct srow *x = a, *y = b;
	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return x->res < y->res ? -1 : x->res > y->res;
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
	msg.agent_instance = (char *)meta->agent_instance;
	msg.sequence = meta->sequence;
	msg.project = (char *)meta->project;
	msg.start_unix_ms = meta->start_unix_ms;
	msg.end_unix_ms = meta->end_unix_ms;
	msg.sample_rate_hz = meta->sample_rate_hz;
	msg.host_cpus = meta->host_cpus;

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
	qsort(rows, n, sizeof(*rows), cmp_row);
	msg.n_sample_nodes = msg.n_sample_resources = msg.n_sample_values = n;
	msg.n_sample_kinds = all_on_cpu ? 0 : n;
	msg.sample_nodes = xmalloc((n + 1) * sizeof(uint32_t));
	msg.sample_resources = xmalloc((n + 1) * sizeof(uint32_t));
	msg.sample_kinds = xmalloc((n + 1) * sizeof(*msg.sample_kinds));
	msg.sample_values = xmalloc((n + 1) * sizeof(uint64_t));
	uint32_t prev = 0;
	for (size_t i = 0; i < n; i++) {
		msg.sample_nodes[i] = rows[i].node - prev;
		prev = rows[i].node;
		msg.sample_resources[i] = rows[i].res;
		msg.sample_kinds[i] = (Ember__Ingest__V1__EventKind)rows[i].kind;
		msg.sample_values[i] = rows[i].value;
	}
	free(rows);

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
	idmap_free(&m);
	return rc;
}
