/* sessions.c - see sessions.h. */
#include "sessions.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_decode.h"
#include "fileid.h"
#include "hmap.h"
#include "util.h"

#define MAX_TABLE (16u << 20)

struct sfile {
	uint8_t id[FILE_ID_LEN];
	uint32_t name;
	uint8_t build_id_len, nsegs;
	uint8_t build_id[64];
	uint64_t segs[12];
};

struct sframe {
	uint64_t address;
	uint32_t file; /* 1-based, 0 = none */
	uint32_t name, binary;
	uint8_t type;
};

/* Runs of ids: entry i is ids[off[i] .. off[i+1]). */
struct runs {
	uint32_t *ids;
	size_t nids, capids;
	uint32_t *off; /* n + 1 entries once n > 0 */
	size_t n, capoff;
};

enum { T_STR, T_FILE, T_FRAME, T_STACK, T_RES, T_COUNT };

struct sess {
	char id[37];
	char *project, *agent;
	uint64_t last_seq;
	int64_t last_used_ms;
	int refs;       /* under sessions.mu */
	bool dead;      /* removed from the index; freed when refs drops to 0 */
	size_t bytes;   /* as last accounted in sessions.bytes */
	pthread_mutex_t mu;
	/* strings: NUL-terminated in sbytes, string i at soff[i] */
	struct buf sbytes;
	uint32_t *soff;
	size_t ns, capsoff;
	struct sfile *files;
	size_t nfiles, capfiles;
	struct sframe *frames;
	size_t nframes, capframes;
	/* stack nodes: frame node_frame[i] under node node_parent[i] - 1 */
	uint32_t *node_parent, *node_frame;
	uint16_t *node_depth;
	size_t nnodes, capnodes;
	struct runs res;
	/* While expanding a batch: mark[t][id] = stamp << 32 | batch index. */
	uint64_t *mark[T_COUNT];
	size_t capmark[T_COUNT];
	uint32_t stamp;
};

struct sessions {
	pthread_mutex_t mu;
	struct sess **v;
	size_t n, cap;
	struct hmap index;
	size_t bytes, max_bytes, max_session_bytes;
	int64_t idle_ms;
	struct sessions_stats stats;
};

/* --- the session table ------------------------------------------------ */

static void sess_free(struct sess *s)
{
	free(s->project);
	free(s->agent);
	buf_free(&s->sbytes);
	free(s->soff);
	free(s->files);
	free(s->frames);
	free(s->node_parent);
	free(s->node_frame);
	free(s->node_depth);
	free(s->res.ids);
	free(s->res.off);
	for (int t = 0; t < T_COUNT; t++)
		free(s->mark[t]);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static size_t sess_bytes(const struct sess *s)
{
	size_t b = sizeof(*s) + s->sbytes.cap + s->capsoff * 4 + s->capfiles * sizeof(struct sfile) +
		   s->capframes * sizeof(struct sframe) + s->capnodes * 10 +
		   (s->res.capids + s->res.capoff) * 4;
	for (int t = 0; t < T_COUNT; t++)
		b += s->capmark[t] * sizeof(uint64_t);
	return b;
}

static bool eq_id(const void *ctx, uint32_t idx)
{
	const void *const *k = ctx;
	const struct sessions *ss = k[0];
	return strcmp(ss->v[idx]->id, (const char *)k[1]) == 0;
}

static uint32_t find(struct sessions *ss, const char *id)
{
	const void *k[2] = { ss, id };
	uint32_t idx;
	return hmap_find(&ss->index, hash_bytes(id, strlen(id)), eq_id, k, &idx) ? idx : UINT32_MAX;
}

/* Takes v[i] out of the index (under ss->mu); frees it unless in use. */
static void unlink_at(struct sessions *ss, size_t i)
{
	struct sess *s = ss->v[i];
	const void *k[2] = { ss, s->id };
	hmap_remove(&ss->index, hash_bytes(s->id, strlen(s->id)), eq_id, k);
	ss->n--;
	if (i != ss->n) {
		struct sess *moved = ss->v[ss->n];
		const void *mk[2] = { ss, moved->id };
		uint64_t h = hash_bytes(moved->id, strlen(moved->id));
		hmap_remove(&ss->index, h, eq_id, mk);
		ss->v[i] = moved;
		hmap_insert(&ss->index, h, (uint32_t)i);
	}
	ss->bytes -= s->bytes;
	s->dead = true;
	if (s->refs == 0)
		sess_free(s);
}

/* Forgets idle sessions, then the least recently used until the total
 * fits (under ss->mu). keep is never chosen by the second rule. */
static void trim(struct sessions *ss, int64_t now_ms, const struct sess *keep)
{
	for (size_t i = 0; i < ss->n;) {
		struct sess *s = ss->v[i];
		if (s->refs == 0 && now_ms - s->last_used_ms > ss->idle_ms) {
			unlink_at(ss, i);
			ss->stats.expired++;
		} else {
			i++;
		}
	}
	while (ss->bytes > ss->max_bytes) {
		size_t oldest = SIZE_MAX;
		for (size_t i = 0; i < ss->n; i++)
			if (ss->v[i] != keep && ss->v[i]->refs == 0 &&
			    (oldest == SIZE_MAX || ss->v[i]->last_used_ms < ss->v[oldest]->last_used_ms))
				oldest = i;
		if (oldest == SIZE_MAX)
			break;
		unlink_at(ss, oldest);
		ss->stats.evicted++;
	}
}

struct sessions *sessions_new(size_t max_bytes, size_t max_session_bytes, int64_t idle_ms)
{
	struct sessions *ss = xcalloc(1, sizeof(*ss));
	pthread_mutex_init(&ss->mu, NULL);
	ss->max_bytes = max_bytes;
	ss->max_session_bytes = max_session_bytes;
	ss->idle_ms = idle_ms;
	return ss;
}

void sessions_free(struct sessions *ss)
{
	if (!ss)
		return;
	for (size_t i = 0; i < ss->n; i++)
		sess_free(ss->v[i]);
	free(ss->v);
	hmap_free(&ss->index);
	pthread_mutex_destroy(&ss->mu);
	free(ss);
}

void sessions_get_stats(struct sessions *ss, struct sessions_stats *out)
{
	pthread_mutex_lock(&ss->mu);
	*out = ss->stats;
	out->count = ss->n;
	out->bytes = ss->bytes;
	pthread_mutex_unlock(&ss->mu);
}

/* --- checking and appending definitions ------------------------------------ */

static bool all_bases_zero(const Ember__Ingest__V1__SessionBatch *m)
{
	return !m->strings_base && !m->files_base && !m->frames_base && !m->nodes_base &&
	       !m->resources_base;
}

/* The shape of m alone: parallel arrays agree, counts are bounded. */
static int check_shape(const Ember__Ingest__V1__SessionBatch *m, struct buf *err)
{
	if (!uuid_valid(m->session)) {
		buf_puts(err, "session: expected a UUID");
		return -1;
	}
	size_t nf = m->n_frame_types;
	if (m->n_frame_files != nf || m->n_frame_addresses != nf || m->n_frame_names != nf ||
	    m->n_frame_binaries != nf) {
		buf_puts(err, "frame_*: the frame arrays differ in length");
		return -1;
	}
	size_t n = m->n_sample_nodes;
	if (m->n_sample_resources != n || (m->n_sample_kinds != n && m->n_sample_kinds != 0) ||
	    m->n_sample_values != n) {
		buf_puts(err, "sample_*: the sample arrays differ in length");
		return -1;
	}
	if (m->n_node_parents != m->n_node_frames) {
		buf_puts(err, "node_*: the node arrays differ in length");
		return -1;
	}
	if (m->n_strings > MAX_TABLE || m->n_files > MAX_TABLE || nf > MAX_TABLE ||
	    m->n_node_parents > MAX_TABLE || m->n_resource_lengths > MAX_TABLE || n > MAX_TABLE) {
		buf_puts(err, "a table has more than 16M entries");
		return -1;
	}
	uint64_t total = 0;
	for (size_t i = 0; i < m->n_resource_lengths; i++) {
		if (m->resource_lengths[i] % 2 || m->resource_lengths[i] > 2 * BATCH_MAX_ATTRIBUTES) {
			buf_printf(err, "resource_lengths[%zu]: expected at most %u key/value pairs", i,
				   BATCH_MAX_ATTRIBUTES);
			return -1;
		}
		total += m->resource_lengths[i];
	}
	if (total != m->n_resource_attributes) {
		buf_puts(err, "resource_attributes: does not hold the sum of resource_lengths ids");
		return -1;
	}
	if (m->strings_base == 0 && (m->n_strings == 0 || m->strings[0][0] != '\0')) {
		buf_puts(err, "strings: a session's strings must start with the empty string");
		return -1;
	}
	return 0;
}

struct counts {
	size_t ns, slen, nfiles, nframes, nnodes, nres, nres_ids;
};

static void save_counts(const struct sess *s, struct counts *c)
{
	*c = (struct counts){ s->ns, s->sbytes.len, s->nfiles, s->nframes, s->nnodes, s->res.n,
			      s->res.nids };
}

static void restore_counts(struct sess *s, const struct counts *c)
{
	s->ns = c->ns;
	s->sbytes.len = c->slen;
	s->nfiles = c->nfiles;
	s->nframes = c->nframes;
	s->nnodes = c->nnodes;
	s->res.n = c->nres;
	s->res.nids = c->nres_ids;
}

static void runs_add(struct runs *r, const uint32_t *ids, size_t n)
{
	if (r->n == 0) {
		xgrow((void **)&r->off, &r->capoff, 2, sizeof(uint32_t));
		r->off[0] = 0;
	}
	xgrow((void **)&r->ids, &r->capids, r->nids + n + 1, sizeof(uint32_t));
	if (n)
		memcpy(r->ids + r->nids, ids, n * sizeof(uint32_t));
	r->nids += n;
	xgrow((void **)&r->off, &r->capoff, r->n + 2, sizeof(uint32_t));
	r->off[++r->n] = (uint32_t)r->nids;
}

/* Validates m's definitions against the session and appends them. */
static int append_definitions(struct sess *s, const Ember__Ingest__V1__SessionBatch *m,
			      struct buf *err)
{
	if (s->ns + m->n_strings > MAX_TABLE || s->nfiles + m->n_files > MAX_TABLE ||
	    s->nframes + m->n_frame_types > MAX_TABLE || s->nnodes + m->n_node_parents > MAX_TABLE ||
	    s->res.n + m->n_resource_lengths > MAX_TABLE) {
		buf_puts(err, "the session would hold more than 16M entries in a table");
		return -1;
	}
	for (size_t i = 0; i < m->n_strings; i++) {
		size_t len = strlen(m->strings[i]);
		if (len > BATCH_MAX_STRING) {
			buf_printf(err, "strings[%zu]: longer than %u bytes", i, BATCH_MAX_STRING);
			return -1;
		}
		if (s->sbytes.len + len + 1 > UINT32_MAX) {
			buf_puts(err, "the session's strings exceed 4 GiB");
			return -1;
		}
		xgrow((void **)&s->soff, &s->capsoff, s->ns + 1, sizeof(uint32_t));
		s->soff[s->ns++] = (uint32_t)s->sbytes.len;
		buf_append(&s->sbytes, m->strings[i], len + 1);
	}
	for (size_t i = 0; i < m->n_files; i++) {
		const Ember__Ingest__V1__File *f = m->files[i];
		if (f->file_id.len != FILE_ID_LEN || f->name >= s->ns || f->build_id.len > 64 ||
		    f->n_exec_segments % 3 || f->n_exec_segments > 12) {
			buf_printf(err, "files[%zu]: bad file_id, name, build_id or exec_segments", i);
			return -1;
		}
		xgrow((void **)&s->files, &s->capfiles, s->nfiles + 1, sizeof(*s->files));
		struct sfile *sf = &s->files[s->nfiles++];
		memset(sf, 0, sizeof(*sf));
		memcpy(sf->id, f->file_id.data, FILE_ID_LEN);
		sf->name = f->name;
		sf->build_id_len = (uint8_t)f->build_id.len;
		if (f->build_id.len)
			memcpy(sf->build_id, f->build_id.data, f->build_id.len);
		sf->nsegs = (uint8_t)(f->n_exec_segments / 3);
		if (f->n_exec_segments)
			memcpy(sf->segs, f->exec_segments, f->n_exec_segments * sizeof(uint64_t));
	}
	for (size_t i = 0; i < m->n_frame_types; i++) {
		int type = (int)m->frame_types[i];
		if (type <= 0 || type > EMBER__INGEST__V1__FRAME_TYPE__ERROR) {
			buf_printf(err, "frame_types[%zu]: unknown frame type %d", i, type);
			return -1;
		}
		if (m->frame_files[i] > s->nfiles || m->frame_names[i] >= s->ns ||
		    m->frame_binaries[i] >= s->ns) {
			buf_printf(err, "frames[%zu]: file, name or binary not defined in the session", i);
			return -1;
		}
		xgrow((void **)&s->frames, &s->capframes, s->nframes + 1, sizeof(*s->frames));
		s->frames[s->nframes++] = (struct sframe){
			.address = m->frame_addresses[i], .file = m->frame_files[i],
			.name = m->frame_names[i], .binary = m->frame_binaries[i], .type = (uint8_t)type,
		};
	}
	if (s->nnodes + m->n_node_parents > s->capnodes) {
		size_t need = s->nnodes + m->n_node_parents, c1 = s->capnodes, c2 = c1;
		xgrow((void **)&s->node_parent, &c1, need, sizeof(uint32_t));
		xgrow((void **)&s->node_frame, &c2, need, sizeof(uint32_t));
		c2 = s->capnodes;
		xgrow((void **)&s->node_depth, &c2, need, sizeof(uint16_t));
		s->capnodes = c1;
	}
	for (size_t i = 0; i < m->n_node_parents; i++) {
		uint32_t parent = m->node_parents[i], frame = m->node_frames[i];
		if (parent > s->nnodes || frame >= s->nframes) {
			buf_printf(err, "nodes[%zu]: parent or frame not defined in the session", i);
			return -1;
		}
		unsigned depth = parent ? s->node_depth[parent - 1] + 1u : 1u;
		if (depth > BATCH_MAX_STACK_DEPTH) {
			buf_printf(err, "nodes[%zu]: deeper than %u frames", i, BATCH_MAX_STACK_DEPTH);
			return -1;
		}
		s->node_parent[s->nnodes] = parent;
		s->node_frame[s->nnodes] = frame;
		s->node_depth[s->nnodes] = (uint16_t)depth;
		s->nnodes++;
	}
	const uint32_t *ids = m->resource_attributes;
	for (size_t i = 0; i < m->n_resource_lengths; i++) {
		for (size_t j = 0; j < m->resource_lengths[i]; j++)
			if (ids[j] >= s->ns || (j % 2 == 0 && ids[j] == 0)) {
				buf_printf(err, "resources[%zu]: attribute not defined or empty key", i);
				return -1;
			}
		runs_add(&s->res, ids, m->resource_lengths[i]);
		ids += m->resource_lengths[i];
	}
	return 0;
}

/* --- expanding a batch into a self-contained version 1 batch ---------------- */

struct idlist {
	uint32_t *v;
	size_t n, cap;
};

struct expand {
	struct sess *s;
	struct idlist l[T_COUNT];
};

static size_t table_size(const struct sess *s, int t)
{
	switch (t) {
	case T_STR: return s->ns;
	case T_FILE: return s->nfiles;
	case T_FRAME: return s->nframes;
	case T_STACK: return s->nnodes;
	default: return s->res.n;
	}
}

/* Prepares the marks for a new batch. */
static void begin_marks(struct sess *s)
{
	if (++s->stamp == 0) {
		for (int t = 0; t < T_COUNT; t++)
			if (s->mark[t])
				memset(s->mark[t], 0, s->capmark[t] * sizeof(uint64_t));
		s->stamp = 1;
	}
	for (int t = 0; t < T_COUNT; t++) {
		size_t need = table_size(s, t) + 1, old = s->capmark[t];
		if (need > old) {
			xgrow((void **)&s->mark[t], &s->capmark[t], need, sizeof(uint64_t));
			memset(s->mark[t] + old, 0, (s->capmark[t] - old) * sizeof(uint64_t));
		}
	}
}

/* The batch index of session entry id of table t, assigned on first use. */
static uint32_t use(struct expand *x, int t, uint32_t id)
{
	uint64_t mk = x->s->mark[t][id];
	if (mk >> 32 == x->s->stamp)
		return (uint32_t)mk;
	struct idlist *l = &x->l[t];
	xgrow((void **)&l->v, &l->cap, l->n + 1, sizeof(uint32_t));
	uint32_t idx = (uint32_t)l->n;
	l->v[l->n++] = id;
	x->s->mark[t][id] = (uint64_t)x->s->stamp << 32 | idx;
	return idx;
}

/* The expanded batch's storage, freed together. */
struct v1 {
	Ember__Ingest__V1__Batch b;
	char **strings;
	Ember__Ingest__V1__File *files, **filep;
	Ember__Ingest__V1__Frame *frames, **framep;
	Ember__Ingest__V1__Stack *stacks, **stackp;
	Ember__Ingest__V1__Resource *res, **resp;
	Ember__Ingest__V1__Sample *samples, **samplep;
	uint32_t *ids; /* stack frames, then resource attributes */
};

static void v1_free(struct v1 *v)
{
	free(v->strings);
	free(v->files);
	free(v->filep);
	free(v->frames);
	free(v->framep);
	free(v->stacks);
	free(v->stackp);
	free(v->res);
	free(v->resp);
	free(v->samples);
	free(v->samplep);
	free(v->ids);
}

static int expand(struct sess *s, const Ember__Ingest__V1__SessionBatch *m, struct v1 *v,
		  struct buf *err)
{
	size_t n = m->n_sample_nodes;
	uint64_t node = 0;
	for (size_t i = 0; i < n; i++) {
		int kind = m->n_sample_kinds ? (int)m->sample_kinds[i] : EMBER__INGEST__V1__EVENT_KIND__ON_CPU;
		node += m->sample_nodes[i];
		if (node >= s->nnodes || m->sample_resources[i] >= s->res.n) {
			buf_printf(err, "samples[%zu]: node or resource not defined in the session", i);
			return -1;
		}
		if (kind <= 0 || kind > EMBER__INGEST__V1__EVENT_KIND__ALLOC) {
			buf_printf(err, "samples[%zu]: unknown event kind %d", i, kind);
			return -1;
		}
		if (m->sample_values[i] == 0 || m->sample_values[i] > (1ull << 48)) {
			buf_printf(err, "samples[%zu]: value out of range", i);
			return -1;
		}
	}
	if (s->ns == 0) {
		buf_puts(err, "strings: the session has none");
		return -1;
	}
	begin_marks(s);
	struct expand x = { .s = s };
	use(&x, T_STR, 0); /* version 1 batches start with "" */
	v->samples = xcalloc(n + 1, sizeof(*v->samples));
	v->samplep = xmalloc((n + 1) * sizeof(*v->samplep));
	node = 0;
	for (size_t i = 0; i < n; i++) {
		Ember__Ingest__V1__Sample *sm = &v->samples[i];
		ember__ingest__v1__sample__init(sm);
		node += m->sample_nodes[i];
		sm->stack = use(&x, T_STACK, (uint32_t)node);
		sm->resource = use(&x, T_RES, m->sample_resources[i]);
		sm->kind = m->n_sample_kinds ? m->sample_kinds[i] : EMBER__INGEST__V1__EVENT_KIND__ON_CPU;
		sm->value = m->sample_values[i];
		v->samplep[i] = sm;
	}
	size_t nids = 0;
	for (size_t i = 0; i < x.l[T_STACK].n; i++) {
		for (uint32_t nd = x.l[T_STACK].v[i] + 1; nd; nd = s->node_parent[nd - 1])
			use(&x, T_FRAME, s->node_frame[nd - 1]);
		nids += s->node_depth[x.l[T_STACK].v[i]];
	}
	for (size_t i = 0; i < x.l[T_RES].n; i++) {
		uint32_t r = x.l[T_RES].v[i];
		for (uint32_t j = s->res.off[r]; j < s->res.off[r + 1]; j++)
			use(&x, T_STR, s->res.ids[j]);
		nids += s->res.off[r + 1] - s->res.off[r];
	}
	for (size_t i = 0; i < x.l[T_FRAME].n; i++) {
		const struct sframe *f = &s->frames[x.l[T_FRAME].v[i]];
		if (f->file)
			use(&x, T_FILE, f->file - 1);
		use(&x, T_STR, f->name);
		use(&x, T_STR, f->binary);
	}
	for (size_t i = 0; i < x.l[T_FILE].n; i++)
		use(&x, T_STR, s->files[x.l[T_FILE].v[i]].name);

	/* Now the tables, in batch order. */
	Ember__Ingest__V1__Batch *b = &v->b;
	ember__ingest__v1__batch__init(b);
	b->agent_instance = m->agent_instance;
	b->sequence = m->sequence;
	b->project = m->project;
	b->start_unix_ms = m->start_unix_ms;
	b->end_unix_ms = m->end_unix_ms;
	b->sample_rate_hz = m->sample_rate_hz;
	b->host_cpus = m->host_cpus;
	b->n_samples = n;
	b->samples = v->samplep;

	const struct idlist *l = &x.l[T_STR];
	v->strings = xmalloc((l->n + 1) * sizeof(char *));
	for (size_t i = 0; i < l->n; i++)
		v->strings[i] = s->sbytes.data + s->soff[l->v[i]];
	b->n_strings = l->n;
	b->strings = v->strings;

	l = &x.l[T_FILE];
	v->files = xcalloc(l->n + 1, sizeof(*v->files));
	v->filep = xmalloc((l->n + 1) * sizeof(*v->filep));
	for (size_t i = 0; i < l->n; i++) {
		struct sfile *sf = &s->files[l->v[i]];
		Ember__Ingest__V1__File *f = &v->files[i];
		ember__ingest__v1__file__init(f);
		f->file_id.data = sf->id;
		f->file_id.len = FILE_ID_LEN;
		f->name = (uint32_t)s->mark[T_STR][sf->name];
		f->build_id.data = sf->build_id;
		f->build_id.len = sf->build_id_len;
		f->exec_segments = sf->segs;
		f->n_exec_segments = (size_t)sf->nsegs * 3;
		v->filep[i] = f;
	}
	b->n_files = l->n;
	b->files = v->filep;

	l = &x.l[T_FRAME];
	v->frames = xcalloc(l->n + 1, sizeof(*v->frames));
	v->framep = xmalloc((l->n + 1) * sizeof(*v->framep));
	for (size_t i = 0; i < l->n; i++) {
		const struct sframe *sf = &s->frames[l->v[i]];
		Ember__Ingest__V1__Frame *f = &v->frames[i];
		ember__ingest__v1__frame__init(f);
		f->type = (Ember__Ingest__V1__FrameType)sf->type;
		f->file = sf->file ? (uint32_t)s->mark[T_FILE][sf->file - 1] + 1 : 0;
		f->address = sf->address;
		f->name = (uint32_t)s->mark[T_STR][sf->name];
		f->binary = (uint32_t)s->mark[T_STR][sf->binary];
		v->framep[i] = f;
	}
	b->n_frames = l->n;
	b->frames = v->framep;

	v->ids = xmalloc((nids + 1) * sizeof(uint32_t));
	uint32_t *ids = v->ids;
	l = &x.l[T_STACK];
	v->stacks = xcalloc(l->n + 1, sizeof(*v->stacks));
	v->stackp = xmalloc((l->n + 1) * sizeof(*v->stackp));
	for (size_t i = 0; i < l->n; i++) {
		Ember__Ingest__V1__Stack *o = &v->stacks[i];
		ember__ingest__v1__stack__init(o);
		o->frames = ids;
		o->n_frames = s->node_depth[l->v[i]];
		/* From the leaf up, written from the end: outermost first. */
		size_t k = o->n_frames;
		for (uint32_t nd = l->v[i] + 1; nd; nd = s->node_parent[nd - 1])
			o->frames[--k] = (uint32_t)s->mark[T_FRAME][s->node_frame[nd - 1]];
		ids += o->n_frames;
		v->stackp[i] = o;
	}
	b->n_stacks = l->n;
	b->stacks = v->stackp;

	l = &x.l[T_RES];
	v->res = xcalloc(l->n + 1, sizeof(*v->res));
	v->resp = xmalloc((l->n + 1) * sizeof(*v->resp));
	for (size_t i = 0; i < l->n; i++) {
		uint32_t r = l->v[i];
		Ember__Ingest__V1__Resource *o = &v->res[i];
		ember__ingest__v1__resource__init(o);
		o->attributes = ids;
		for (uint32_t j = s->res.off[r]; j < s->res.off[r + 1]; j++)
			*ids++ = (uint32_t)s->mark[T_STR][s->res.ids[j]];
		o->n_attributes = (size_t)(ids - o->attributes);
		v->resp[i] = o;
	}
	b->n_resources = l->n;
	b->resources = v->resp;
	for (int t = 0; t < T_COUNT; t++)
		free(x.l[t].v);
	/* The tables are valid by construction: every id was checked when
	 * it was defined. */
	return batch_validate_meta(b, err);
}

/* --- one batch ------------------------------------------------------------------ */

/* Finds m's session (creating it for a first batch) and takes a reference. */
static struct sess *acquire(struct sessions *ss, const Ember__Ingest__V1__SessionBatch *m,
			    int64_t now_ms, struct buf *err)
{
	pthread_mutex_lock(&ss->mu);
	uint32_t i = find(ss, m->session);
	struct sess *s = NULL;
	if (i != UINT32_MAX) {
		s = ss->v[i];
	} else if (all_bases_zero(m)) {
		trim(ss, now_ms, NULL);
		s = xcalloc(1, sizeof(*s));
		snprintf(s->id, sizeof(s->id), "%s", m->session);
		s->project = xstrdup(m->project);
		s->agent = xstrdup(m->agent_instance);
		s->last_used_ms = now_ms;
		pthread_mutex_init(&s->mu, NULL);
		xgrow((void **)&ss->v, &ss->cap, ss->n + 1, sizeof(*ss->v));
		ss->v[ss->n] = s;
		hmap_insert(&ss->index, hash_bytes(s->id, strlen(s->id)), (uint32_t)ss->n);
		ss->n++;
		ss->stats.created++;
	} else {
		ss->stats.resyncs++;
		buf_printf(err, "unknown session %s (the server restarted or forgot it): start a new one",
			   m->session);
	}
	if (s)
		s->refs++;
	pthread_mutex_unlock(&ss->mu);
	return s;
}

static void release(struct sessions *ss, struct sess *s, int64_t now_ms)
{
	pthread_mutex_lock(&ss->mu);
	if (!s->dead) {
		size_t b = sess_bytes(s);
		ss->bytes = ss->bytes - s->bytes + b;
		s->bytes = b;
	}
	s->refs--;
	if (s->dead && s->refs == 0)
		sess_free(s);
	else
		trim(ss, now_ms, s);
	pthread_mutex_unlock(&ss->mu);
}

int sessions_ingest(struct sessions *ss, const Ember__Ingest__V1__SessionBatch *m, int64_t now_ms,
		    session_store_fn store, void *ctx, struct buf *err)
{
	if (check_shape(m, err) < 0)
		return SESSION_INVALID;
	struct sess *s = acquire(ss, m, now_ms, err);
	if (!s)
		return SESSION_RESYNC;
	pthread_mutex_lock(&s->mu);
	int rc;
	struct counts before;
	save_counts(s, &before);
	if (strcmp(s->project, m->project) != 0 || strcmp(s->agent, m->agent_instance) != 0) {
		buf_puts(err, "session: belongs to another project or agent instance");
		rc = SESSION_INVALID;
	} else if (s->last_seq && m->sequence <= s->last_seq) {
		rc = SESSION_SEEN;
	} else if (m->strings_base != s->ns || m->files_base != s->nfiles ||
		   m->frames_base != s->nframes || m->nodes_base != s->nnodes ||
		   m->resources_base != s->res.n) {
		buf_printf(err, "session %s is out of step (a batch was lost): start a new one",
			   s->id);
		rc = SESSION_RESYNC;
	} else if (append_definitions(s, m, err) < 0) {
		rc = SESSION_INVALID;
	} else if (sess_bytes(s) > ss->max_session_bytes) {
		buf_printf(err, "session %s holds more than %zu MiB: start a new one", s->id,
			   ss->max_session_bytes >> 20);
		rc = SESSION_RESYNC;
	} else {
		struct v1 v = { 0 };
		rc = expand(s, m, &v, err) < 0 ? SESSION_INVALID : store(ctx, &v.b);
		v1_free(&v);
	}
	if (rc == 0 || rc == 1) {
		s->last_seq = m->sequence;
	} else if (rc != SESSION_SEEN) {
		restore_counts(s, &before);
		if (rc == SESSION_RESYNC) {
			pthread_mutex_lock(&ss->mu);
			ss->stats.resyncs++;
			pthread_mutex_unlock(&ss->mu);
		}
	}
	s->last_used_ms = now_ms;
	pthread_mutex_unlock(&s->mu);
	release(ss, s, now_ms);
	return rc;
}
