/* sessions.c - see sessions.h. */
#include "sessions.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "batch_decode.h"
#include "compress.h"
#include "fileid.h"
#include "hmap.h"
#include "server/store/gpuspans.h"
#include "util.h"

#define MAX_TABLE (16u << 20)

/* How many entries ahead the loops over a batch prefetch the session
 * entries (and their log and head marks) the entry will read. A session
 * holds millions of nodes and frames, and a batch names them at random,
 * so without it every entry waits for memory in turn. 24, not 8: an entry's
 * own work is a few nanoseconds against a miss of about a hundred (and a
 * page walk: the tables are small pages), so 8 ahead came back too late
 * (EMBER_BENCH_PROTOCOL=2 store_bench 100 900, two alternated pairs:
 * ingest threads 0.81 and 0.91 against 0.79 and 0.74 M samples/s). */
#define AHEAD 24

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

/* Runs of ids: entry i is ids[start[i] .. start[i] + len[i]). The ids
 * only grow; a replayed entry defined again points at its new run. */
struct runs {
	uint32_t *ids;
	size_t nids, capids;
	uint32_t *start, *len;
	size_t n, cap;
};

/* The tables; T_LSTR is the strings again, as the store's label strings
 * (resource attributes) rather than its symbol strings. */
enum { T_STR, T_FILE, T_FRAME, T_STACK, T_RES, T_COUNT, T_LSTR = T_COUNT, T_MAPS };

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
	/* 128-bit content hashes (lo, hi) of each frame (what it is: type,
	 * address, file id, name and binary bytes) and of each node's whole
	 * stack (its frame's and its parent's), computed when defined: a
	 * stack is found in any head part by one lookup. */
	uint64_t *frame_h, *node_h;
	size_t capframe_h, capnode_h;
	struct runs res;
	/* The store's side of each entry (docs/internals/ingest.md): whether
	 * the log file of generation logged_gen holds its definition, a bit
	 * per entry (cleared when the session's first record goes into a new
	 * log file; a bit, not the generation per entry, so that the marks
	 * every sample's stack is checked against stay in the cache: 160 KiB
	 * for a session of 1.3 M nodes instead of 5 MiB), and the id the head
	 * part's dictionaries gave it, as dict_id << 32 | id (stale once a
	 * head starts with new dictionaries); either is found again on first
	 * use. */
	uint64_t *logged[T_COUNT];
	size_t caplogged[T_COUNT]; /* words */
	uint32_t logged_gen;       /* 0: nothing is marked */
	uint64_t *pm[T_MAPS];
	size_t cappm[T_MAPS];
	/* series of (resource, kind) in the head numbered gen (store.c) */
	struct sseries *series;
	size_t capseries;
	/* Replayed sessions only: which entries are defined (a log file
	 * defines what its records use, in any order). NULL when live. */
	uint8_t *defined[T_COUNT];
	size_t capdefined[T_COUNT];
};

struct sseries {
	uint32_t gen, series;
	uint16_t hz;
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
	free_all(s->project, s->agent);
	buf_free(&s->sbytes);
	free(s->soff);
	table_free(s->files, s->capfiles, sizeof(*s->files));
	table_free(s->frames, s->capframes, sizeof(*s->frames));
	table_free(s->node_parent, s->capnodes, sizeof(uint32_t));
	table_free(s->node_frame, s->capnodes, sizeof(uint32_t));
	table_free(s->node_depth, s->capnodes, sizeof(uint16_t));
	table_free(s->frame_h, s->capframe_h, sizeof(uint64_t));
	table_free(s->node_h, s->capnode_h, sizeof(uint64_t));
	free_all(s->res.ids, s->res.start, s->res.len);
	for (int t = 0; t < T_COUNT; t++) {
		table_free(s->logged[t], s->caplogged[t], sizeof(uint64_t));
		table_free(s->defined[t], s->capdefined[t], 1);
	}
	for (int t = 0; t < T_MAPS; t++)
		table_free(s->pm[t], s->cappm[t], sizeof(uint64_t));
	table_free(s->series, s->capseries, sizeof(*s->series));
	pthread_mutex_destroy(&s->mu);
	free(s);
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

static size_t sess_bytes(const struct sess *s)
{
	size_t b = sizeof(*s) + s->sbytes.cap + s->capsoff * 4 + s->capfiles * sizeof(struct sfile) +
		   s->capframes * sizeof(struct sframe) + s->capnodes * 10 +
		   (s->res.capids + 2 * s->res.cap) * 4 + s->capseries * sizeof(struct sseries) +
		   (s->capframe_h + s->capnode_h) * 8;
	for (int t = 0; t < T_COUNT; t++)
		b += s->caplogged[t] * 8 + s->capdefined[t];
	for (int t = 0; t < T_MAPS; t++)
		b += s->cappm[t] * sizeof(uint64_t);
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
	size_t nsp = m->n_span_nodes;
	if (m->n_span_resources != nsp || m->n_span_starts_ns != nsp || m->n_span_ends_ns != nsp ||
	    m->n_span_kinds != nsp || m->n_span_devices != nsp || m->n_span_streams != nsp) {
		buf_puts(err, "span_*: the span arrays differ in length");
		return -1;
	}
	if (nsp > SESSION_MAX_SPANS) {
		buf_printf(err, "span_*: more than %u spans in one batch", SESSION_MAX_SPANS);
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

/* Sets run i to ids[0..n) (i <= r->n; i == r->n appends). */
static void runs_set(struct runs *r, size_t i, const uint32_t *ids, size_t n)
{
	xgrow((void **)&r->ids, &r->capids, r->nids + n + 1, sizeof(uint32_t));
	if (n)
		memcpy(r->ids + r->nids, ids, n * sizeof(uint32_t));
	if (i == r->n) {
		size_t c = r->cap;
		xgrow((void **)&r->start, &c, r->n + 1, sizeof(uint32_t));
		c = r->cap;
		xgrow((void **)&r->len, &c, r->n + 1, sizeof(uint32_t));
		r->cap = c;
		r->n++;
	}
	r->start[i] = (uint32_t)r->nids;
	r->len[i] = (uint32_t)n;
	r->nids += n;
}

/* --- defining entries ------------------------------------------------------- */

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

static bool defined(const struct sess *s, int t, size_t id)
{
	return id < table_size(s, t) && (!s->defined[t] || s->defined[t][id]);
}

/* Grows a per-entry array to hold n entries, by half again (not twice)
 * its capacity: a session lasts as long as its agent, up to millions of
 * nodes, and spare capacity is most of what doubling costs it (a table
 * ends 1.25 times its entries on average instead of 1.5). The arrays are
 * tables (util.h): a large one grows without being copied; sess_free
 * frees each with its capacity. */
static size_t next_cap(size_t cap, size_t n)
{
	return MAX(MAX(n, cap + cap / 2), (size_t)16);
}

static void grow_entries(void **a, size_t *cap, size_t n, size_t size)
{
	if (n <= *cap)
		return;
	size_t c = next_cap(*cap, n);
	*a = table_grow(*a, *cap, c, size);
	*cap = c;
}

/* Grows a zero-filled per-entry array to hold n entries (the same way). */
static void grow_zero(void **a, size_t *cap, size_t n, size_t size)
{
	if (n <= *cap)
		return;
	size_t c = next_cap(*cap, n);
	*a = table_grow_zero(*a, *cap, c, size);
	*cap = c;
}

/* A replayed session defines id of table t, which may lie past the end:
 * the table grows, entries in between stay undefined. */
static void replay_mark(struct sess *s, int t, size_t id)
{
	grow_zero((void **)&s->defined[t], &s->capdefined[t], id + 1, 1);
	s->defined[t][id] = 1;
}

static int def_string(struct sess *s, size_t id, const char *str, struct buf *err)
{
	size_t len = strlen(str);
	if (len > BATCH_MAX_STRING) {
		buf_printf(err, "strings[%zu]: longer than %u bytes", id, BATCH_MAX_STRING);
		return -1;
	}
	if (s->sbytes.len + len + 1 > UINT32_MAX) {
		buf_puts(err, "the session's strings exceed 4 GiB");
		return -1;
	}
	if (id >= s->ns) {
		xgrow((void **)&s->soff, &s->capsoff, id + 1, sizeof(uint32_t));
		for (size_t j = s->ns; j < id; j++)
			s->soff[j] = 0; /* undefined (replay): never read */
		s->ns = id + 1;
	}
	s->soff[id] = (uint32_t)s->sbytes.len;
	buf_append(&s->sbytes, str, len + 1);
	return 0;
}

static int def_file(struct sess *s, size_t id, const Ember__Ingest__V1__File *f, struct buf *err)
{
	if (f->file_id.len != FILE_ID_LEN || !defined(s, T_STR, f->name) || f->build_id.len > 64 ||
	    f->n_exec_segments % 3 || f->n_exec_segments > 12) {
		buf_printf(err, "files[%zu]: bad file_id, name, build_id or exec_segments", id);
		return -1;
	}
	if (id >= s->nfiles) {
		grow_zero((void **)&s->files, &s->capfiles, id + 1, sizeof(*s->files));
		s->nfiles = id + 1;
	}
	struct sfile *sf = &s->files[id];
	memset(sf, 0, sizeof(*sf));
	memcpy(sf->id, f->file_id.data, FILE_ID_LEN);
	sf->name = f->name;
	sf->build_id_len = (uint8_t)f->build_id.len;
	if (f->build_id.len)
		memcpy(sf->build_id, f->build_id.data, f->build_id.len);
	sf->nsegs = (uint8_t)(f->n_exec_segments / 3);
	if (f->n_exec_segments)
		memcpy(sf->segs, f->exec_segments, f->n_exec_segments * sizeof(uint64_t));
	return 0;
}

static int def_frame(struct sess *s, size_t id, int type, uint32_t file, uint64_t address,
		     uint32_t name, uint32_t binary, struct buf *err)
{
	if (type <= 0 || type > EMBER__INGEST__V1__FRAME_TYPE__NVTX) {
		buf_printf(err, "frame_types[%zu]: unknown frame type %d", id, type);
		return -1;
	}
	if ((file && !defined(s, T_FILE, file - 1)) || !defined(s, T_STR, name) ||
	    !defined(s, T_STR, binary)) {
		buf_printf(err, "frames[%zu]: file, name or binary not defined in the session", id);
		return -1;
	}
	if (id >= s->nframes) {
		grow_zero((void **)&s->frames, &s->capframes, id + 1, sizeof(*s->frames));
		s->nframes = id + 1;
	}
	s->frames[id] = (struct sframe){ .address = address, .file = file, .name = name,
					 .binary = binary, .type = (uint8_t)type };
	grow_entries((void **)&s->frame_h, &s->capframe_h, 2 * (id + 1), sizeof(uint64_t));
	const char *bin = s->sbytes.data + s->soff[binary], *nm = s->sbytes.data + s->soff[name];
	uint64_t seed = hash_mix(hash_mix(hash_u64((uint64_t)type), address),
				 hash_bytes(bin, strlen(bin)));
	if (file)
		seed = hash_mix(seed, hash_bytes(s->files[file - 1].id, FILE_ID_LEN));
	XXH128_hash_t h = XXH3_128bits_withSeed(nm, strlen(nm), seed);
	s->frame_h[2 * id] = h.low64;
	s->frame_h[2 * id + 1] = h.high64;
	return 0;
}

/* What def_node will read for a node of that parent and frame, when
 * they are defined already (a node may name one defined just before it:
 * that is in the cache). */
static void prefetch_node_inputs(const struct sess *s, uint32_t parent, uint32_t frame)
{
	if (frame < s->nframes)
		prefetch(&s->frame_h[2 * (size_t)frame]);
	if (parent && parent - 1 < s->nnodes) {
		prefetch(&s->node_depth[parent - 1]);
		prefetch(&s->node_h[2 * (size_t)(parent - 1)]);
	}
}

/* A node's parent (id + 1, 0 = none) is always defined before it and has
 * a lower id, so every walk up a stack ends. */
static int def_node(struct sess *s, size_t id, uint32_t parent, uint32_t frame, struct buf *err)
{
	if ((parent && (parent - 1 >= id || !defined(s, T_STACK, parent - 1))) ||
	    !defined(s, T_FRAME, frame)) {
		buf_printf(err, "nodes[%zu]: parent or frame not defined in the session", id);
		return -1;
	}
	unsigned depth = parent ? s->node_depth[parent - 1] + 1u : 1u;
	if (depth > BATCH_MAX_STACK_DEPTH) {
		buf_printf(err, "nodes[%zu]: deeper than %u frames", id, BATCH_MAX_STACK_DEPTH);
		return -1;
	}
	if (id >= s->capnodes) {
		size_t c1 = s->capnodes, c2 = c1, c3 = c1;
		grow_entries((void **)&s->node_parent, &c1, id + 1, sizeof(uint32_t));
		grow_entries((void **)&s->node_frame, &c2, id + 1, sizeof(uint32_t));
		grow_entries((void **)&s->node_depth, &c3, id + 1, sizeof(uint16_t));
		s->capnodes = c1;
	}
	for (size_t j = s->nnodes; j < id; j++) { /* undefined (replay): never read */
		s->node_parent[j] = 0;
		s->node_frame[j] = 0;
		s->node_depth[j] = 1;
	}
	if (id >= s->nnodes)
		s->nnodes = id + 1;
	s->node_parent[id] = parent;
	s->node_frame[id] = frame;
	s->node_depth[id] = (uint16_t)depth;
	grow_entries((void **)&s->node_h, &s->capnode_h, 2 * (id + 1), sizeof(uint64_t));
	uint64_t in[4] = { s->frame_h[2 * frame], s->frame_h[2 * frame + 1],
			   parent ? s->node_h[2 * (parent - 1)] : 0,
			   parent ? s->node_h[2 * (parent - 1) + 1] : 0 };
	XXH128_hash_t h = XXH3_128bits(in, sizeof(in));
	s->node_h[2 * id] = h.low64;
	s->node_h[2 * id + 1] = h.high64;
	return 0;
}

static int def_resource(struct sess *s, size_t id, const uint32_t *ids, size_t n,
			struct buf *err)
{
	if (n % 2 || n > 2 * BATCH_MAX_ATTRIBUTES) {
		buf_printf(err, "resources[%zu]: expected at most %u key/value pairs", id,
			   BATCH_MAX_ATTRIBUTES);
		return -1;
	}
	for (size_t j = 0; j < n; j++)
		if (!defined(s, T_STR, ids[j]) || (j % 2 == 0 && ids[j] == 0)) {
			buf_printf(err, "resources[%zu]: attribute not defined or empty key", id);
			return -1;
		}
	while (s->res.n < id)
		runs_set(&s->res, s->res.n, NULL, 0); /* undefined (replay) */
	runs_set(&s->res, id, ids, n);
	return 0;
}

/* Validates m's definitions and sets them at its bases: a live session's
 * bases are its table sizes (checked by the caller), a replayed one's are
 * whatever the record says. */
static int define_batch(struct sess *s, const Ember__Ingest__V1__SessionBatch *m, struct buf *err)
{
	if (m->strings_base + (uint64_t)m->n_strings > MAX_TABLE ||
	    m->files_base + (uint64_t)m->n_files > MAX_TABLE ||
	    m->frames_base + (uint64_t)m->n_frame_types > MAX_TABLE ||
	    m->nodes_base + (uint64_t)m->n_node_parents > MAX_TABLE ||
	    m->resources_base + (uint64_t)m->n_resource_lengths > MAX_TABLE) {
		buf_puts(err, "the session would hold more than 16M entries in a table");
		return -1;
	}
	bool replay = s->defined[T_STR] != NULL;
	for (size_t i = 0; i < m->n_strings; i++) {
		if (def_string(s, m->strings_base + i, m->strings[i], err) < 0)
			return -1;
		if (replay)
			replay_mark(s, T_STR, m->strings_base + i);
	}
	for (size_t i = 0; i < m->n_files; i++) {
		if (def_file(s, m->files_base + i, m->files[i], err) < 0)
			return -1;
		if (replay)
			replay_mark(s, T_FILE, m->files_base + i);
	}
	for (size_t i = 0; i < m->n_frame_types; i++) {
		if (def_frame(s, m->frames_base + i, (int)m->frame_types[i], m->frame_files[i],
			      m->frame_addresses[i], m->frame_names[i], m->frame_binaries[i], err) < 0)
			return -1;
		if (replay)
			replay_mark(s, T_FRAME, m->frames_base + i);
	}
	for (size_t i = 0; i < m->n_node_parents; i++) {
		if (i + AHEAD < m->n_node_parents)
			prefetch_node_inputs(s, m->node_parents[i + AHEAD], m->node_frames[i + AHEAD]);
		if (def_node(s, m->nodes_base + i, m->node_parents[i], m->node_frames[i], err) < 0)
			return -1;
		if (replay)
			replay_mark(s, T_STACK, m->nodes_base + i);
	}
	const uint32_t *ids = m->resource_attributes;
	for (size_t i = 0; i < m->n_resource_lengths; i++) {
		if (def_resource(s, m->resources_base + i, ids, m->resource_lengths[i], err) < 0)
			return -1;
		if (replay)
			replay_mark(s, T_RES, m->resources_base + i);
		ids += m->resource_lengths[i];
	}
	return 0;
}

/* The samples refer to defined nodes and resources, with known kinds and
 * plausible values; the batch's own fields are checked as a version 1
 * batch's are. */
static int check_samples(const struct sess *s, const Ember__Ingest__V1__SessionBatch *m,
			 struct buf *err)
{
	Ember__Ingest__V1__Batch meta = EMBER__INGEST__V1__BATCH__INIT;
	meta.agent_instance = m->agent_instance;
	meta.sequence = m->sequence;
	meta.project = m->project;
	meta.start_unix_ms = m->start_unix_ms;
	meta.end_unix_ms = m->end_unix_ms;
	meta.sample_rate_hz = m->sample_rate_hz;
	meta.host_cpus = m->host_cpus;
	if (batch_validate_meta(&meta, err) < 0)
		return -1;
	uint64_t node = 0;
	for (size_t i = 0; i < m->n_sample_nodes; i++) {
		int kind = m->n_sample_kinds ? (int)m->sample_kinds[i] : EMBER__INGEST__V1__EVENT_KIND__ON_CPU;
		node += m->sample_nodes[i];
		if (node >= UINT32_MAX || !defined(s, T_STACK, node) ||
		    !defined(s, T_RES, m->sample_resources[i])) {
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
	for (size_t i = 0; i < m->n_span_nodes; i++) {
		if (!defined(s, T_STACK, m->span_nodes[i]) || !defined(s, T_RES, m->span_resources[i])) {
			buf_printf(err, "spans[%zu]: node or resource not defined in the session", i);
			return -1;
		}
		if (m->span_kinds[i] < 1 || m->span_kinds[i] > SESSION_SPAN_KIND_MAX) {
			buf_printf(err, "spans[%zu]: unknown kind %u", i, m->span_kinds[i]);
			return -1;
		}
		uint64_t a = m->span_starts_ns[i], b = m->span_ends_ns[i];
		if (a == 0 || a > (uint64_t)INT64_MAX || b < a || b - a > SESSION_SPAN_MAX_NS) {
			buf_printf(err, "spans[%zu]: start and end out of range", i);
			return -1;
		}
	}
	return 0;
}

/* --- the log record: what the batch needs that its log file lacks ------------- */

/* Session ids to carry, per table. */
struct idlist {
	uint32_t *v;
	size_t n, cap;
};

struct carry {
	struct sess *s;
	uint32_t gen;
	struct idlist l[T_COUNT];
};

static bool is_logged(const struct sess *s, int t, size_t id)
{
	return s->logged[t][id >> 6] >> (id & 63) & 1;
}

static void mark_logged(struct sess *s, int t, size_t id)
{
	s->logged[t][id >> 6] |= 1ull << (id & 63);
}

static void prefetch_logged(const struct sess *s, int t, size_t id)
{
	prefetch(&s->logged[t][id >> 6]);
}

/* Marks entry id of table t as in this generation's log; true when it was
 * not (the caller then carries it). */
static bool take(struct carry *c, int t, uint32_t id)
{
	if (is_logged(c->s, t, id))
		return false;
	mark_logged(c->s, t, id);
	struct idlist *l = &c->l[t];
	if (l->n == l->cap)
		xgrow((void **)&l->v, &l->cap, l->n + 1, sizeof(uint32_t));
	l->v[l->n++] = id;
	return true;
}

/* Takes the nodes front[0..n) and their ancestors up to the first one
 * already logged (front is overwritten). The first batch of a session in
 * a new log names thousands of stacks none of whose nodes are logged:
 * walked one stack at a time, every step up waits for memory; walked a
 * level at a time across all of them, the reads of a level are
 * independent and are prefetched. */
static void take_nodes(struct carry *c, uint32_t *front, size_t n)
{
	const struct sess *s = c->s;
	while (n) {
		size_t next = 0;
		for (size_t i = 0; i < n; i++) {
			if (i + AHEAD < n) {
				prefetch_logged(s, T_STACK, front[i + AHEAD]);
				prefetch(&s->node_parent[front[i + AHEAD]]);
			}
			uint32_t id = front[i];
			if (take(c, T_STACK, id) && s->node_parent[id])
				front[next++] = s->node_parent[id] - 1;
		}
		n = next;
	}
}

static void take_frame_refs(struct carry *c, const struct sframe *f)
{
	if (f->file)
		take(c, T_FILE, f->file - 1);
	take(c, T_STR, f->name);
	take(c, T_STR, f->binary);
}

/* Sorts v[0..n), distinct ids below universe, ascending. A session's
 * first batch in a new log carries hundreds of thousands of nodes, and
 * a comparison sort of those took a third of the carry's time: a long list
 * is sorted by setting its ids in a bitmap of the universe and reading
 * them back in order, in time linear in both. */
static void sort_ids(uint32_t *v, size_t n, size_t universe)
{
	if (n < 2)
		return;
	if (n < 256 || universe / 64 > 16 * n) {
		qsort(v, n, sizeof(uint32_t), cmp_u32);
		return;
	}
	size_t words = (universe + 63) / 64, k = 0;
	uint64_t *bits = xcalloc(words, sizeof(uint64_t));
	for (size_t i = 0; i < n; i++)
		bits[v[i] >> 6] |= 1ull << (v[i] & 63);
	for (size_t w = 0; w < words; w++)
		for (uint64_t b = bits[w]; b; b &= b - 1)
			v[k++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
	free(bits);
}

/* The SessionCarry of c's lists, packed. */
static void pack_carry(struct carry *c, struct buf *out)
{
	struct sess *s = c->s;
	Ember__Ingest__V1__SessionCarry m = EMBER__INGEST__V1__SESSION_CARRY__INIT;
	const struct idlist *l = &c->l[T_STR];
	char **strings = xmalloc((l->n + 1) * sizeof(char *));
	for (size_t i = 0; i < l->n; i++)
		strings[i] = s->sbytes.data + s->soff[l->v[i]];
	m.string_ids = l->v;
	m.n_string_ids = m.n_strings = l->n;
	m.strings = strings;

	l = &c->l[T_FILE];
	Ember__Ingest__V1__File *files = xcalloc(l->n + 1, sizeof(*files));
	Ember__Ingest__V1__File **filep = xmalloc((l->n + 1) * sizeof(*filep));
	for (size_t i = 0; i < l->n; i++) {
		struct sfile *sf = &s->files[l->v[i]];
		Ember__Ingest__V1__File *f = &files[i];
		ember__ingest__v1__file__init(f);
		f->file_id.data = sf->id;
		f->file_id.len = FILE_ID_LEN;
		f->name = sf->name;
		f->build_id.data = sf->build_id;
		f->build_id.len = sf->build_id_len;
		f->exec_segments = sf->segs;
		f->n_exec_segments = (size_t)sf->nsegs * 3;
		filep[i] = f;
	}
	m.file_ids = l->v;
	m.n_file_ids = m.n_files = l->n;
	m.files = filep;

	l = &c->l[T_FRAME];
	size_t nf = l->n;
	uint32_t *u32 = xmalloc((3 * nf + 2 * c->l[T_STACK].n + 1) * sizeof(uint32_t));
	uint64_t *addr = xmalloc((nf + 1) * sizeof(uint64_t));
	Ember__Ingest__V1__FrameType *types = xmalloc((nf + 1) * sizeof(*types));
	for (size_t i = 0; i < nf; i++) {
		const struct sframe *f = &s->frames[l->v[i]];
		types[i] = (Ember__Ingest__V1__FrameType)f->type;
		u32[i] = f->file;
		addr[i] = f->address;
		u32[nf + i] = f->name;
		u32[2 * nf + i] = f->binary;
	}
	m.frame_ids = l->v;
	m.n_frame_ids = m.n_frame_types = m.n_frame_files = m.n_frame_addresses = m.n_frame_names =
		m.n_frame_binaries = nf;
	m.frame_types = types;
	m.frame_files = u32;
	m.frame_addresses = addr;
	m.frame_names = u32 + nf;
	m.frame_binaries = u32 + 2 * nf;

	l = &c->l[T_STACK]; /* ascending (v2_record) */
	uint32_t *np = u32 + 3 * nf, *nfr = np + l->n;
	for (size_t i = 0; i < l->n; i++) {
		if (i + AHEAD < l->n) {
			prefetch(&s->node_parent[l->v[i + AHEAD]]);
			prefetch(&s->node_frame[l->v[i + AHEAD]]);
		}
		np[i] = s->node_parent[l->v[i]];
		nfr[i] = s->node_frame[l->v[i]];
	}
	m.node_ids = l->v;
	m.n_node_ids = m.n_node_parents = m.n_node_frames = l->n;
	m.node_parents = np;
	m.node_frames = nfr;

	l = &c->l[T_RES];
	size_t nattr = 0;
	for (size_t i = 0; i < l->n; i++)
		nattr += s->res.len[l->v[i]];
	uint32_t *rlen = xmalloc((l->n + 1) * sizeof(uint32_t));
	uint32_t *rattr = xmalloc((nattr + 1) * sizeof(uint32_t));
	nattr = 0;
	for (size_t i = 0; i < l->n; i++) {
		uint32_t r = l->v[i];
		rlen[i] = s->res.len[r];
		memcpy(rattr + nattr, s->res.ids + s->res.start[r], rlen[i] * sizeof(uint32_t));
		nattr += rlen[i];
	}
	m.resource_ids = l->v;
	m.n_resource_ids = m.n_resource_lengths = l->n;
	m.resource_lengths = rlen;
	m.n_resource_attributes = nattr;
	m.resource_attributes = rattr;

	size_t len = ember__ingest__v1__session_carry__get_packed_size(&m);
	buf_reserve(out, out->len + len + 1);
	ember__ingest__v1__session_carry__pack(&m, (uint8_t *)out->data + out->len);
	out->len += len;
	free_all(strings, files, filep, u32, addr, types, rlen, rattr);
}

/* A sample's node marks: its log mark, read here, and its head id, read
 * when the batch is indexed after the log's sync. Both are likely misses
 * (the head ids are 8 bytes per node in tables of millions); fetched
 * together, the second may still be in the cache when the index reads
 * it. */
static void prefetch_sample_marks(const struct sess *s, uint64_t node)
{
	prefetch_logged(s, T_STACK, node);
	if (node < s->cappm[T_STACK])
		prefetch(&s->pm[T_STACK][node]);
}

/* zstd's fastest level for the carry: twice as fast as level 1 on a
 * carry (870 against 440 MB/s on carries of the store bench), for 13 %
 * more bytes; an hour of 100 busy hosts compresses about 1 GB of them. */
#define CARRY_ZSTD_LEVEL (-1)

/* The entry sessions_ingest gives the store for one batch. */
struct v2_entry {
	struct sess *s;
	const Ember__Ingest__V1__SessionBatch *m;
	const void *zbody;
	size_t zlen;
	struct store_entry e;
};

/* record(): u32 length of the zstd SessionCarry (0: none), the carry, and
 * then the batch as received. Everything the batch uses that was defined
 * before it and is not yet in this generation's log is carried. */
static int v2_record(void *ctx, uint64_t gen, struct buf *head, const void **body, size_t *blen,
		     struct buf *err)
{
	struct v2_entry *v = ctx;
	struct sess *s = v->s;
	const Ember__Ingest__V1__SessionBatch *m = v->m;
	struct carry c = { .s = s, .gen = (uint32_t)gen };
	for (int t = 0; t < T_COUNT; t++)
		grow_zero((void **)&s->logged[t], &s->caplogged[t], table_size(s, t) / 64 + 1,
			  sizeof(uint64_t));
	/* The session's first record in this log file: nothing is in it yet.
	 * Marks are only ever set below table_size(), which only grows. */
	if (s->logged_gen != c.gen) {
		for (int t = 0; t < T_COUNT; t++)
			memset(s->logged[t], 0, (table_size(s, t) / 64 + 1) * sizeof(uint64_t));
		s->logged_gen = c.gen;
	}
	/* The batch's own definitions are in its body. */
	size_t base[T_COUNT] = { m->strings_base, m->files_base, m->frames_base, m->nodes_base,
				 m->resources_base };
	for (int t = 0; t < T_COUNT; t++)
		for (size_t id = base[t]; id < table_size(s, t); id++)
			mark_logged(s, t, id);
	/* What its samples and its definitions refer to (check_samples and
	 * define_batch checked every id). */
	uint64_t node = 0, ahead = 0;
	size_t n = m->n_sample_nodes, nfront = 0;
	uint32_t *front = xmalloc((n + m->n_node_parents + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < MIN(n, (size_t)AHEAD); i++)
		prefetch_sample_marks(s, ahead += m->sample_nodes[i]);
	for (size_t i = 0; i < n; i++) {
		if (i + AHEAD < n)
			prefetch_sample_marks(s, ahead += m->sample_nodes[i + AHEAD]);
		node += m->sample_nodes[i];
		if (!is_logged(s, T_STACK, node))
			front[nfront++] = (uint32_t)node;
		take(&c, T_RES, m->sample_resources[i]);
	}
	for (size_t i = 0; i < m->n_node_parents; i++) {
		if (i + AHEAD < m->n_node_parents && m->node_parents[i + AHEAD])
			prefetch_logged(s, T_STACK, m->node_parents[i + AHEAD] - 1);
		uint32_t p = m->node_parents[i];
		if (p && !is_logged(s, T_STACK, p - 1))
			front[nfront++] = p - 1;
	}
	take_nodes(&c, front, nfront);
	free(front);
	/* In id order (take() listed each once): parents first, as replay
	 * defines them, and the reads of node_frame below and in pack_carry go
	 * up the table, not at random. */
	sort_ids(c.l[T_STACK].v, c.l[T_STACK].n, s->nnodes);
	const struct idlist *l = &c.l[T_STACK];
	for (size_t i = 0; i < l->n; i++) {
		if (i + 2 * AHEAD < l->n)
			prefetch(&s->node_frame[l->v[i + 2 * AHEAD]]);
		if (i + AHEAD < l->n)
			prefetch_logged(s, T_FRAME, s->node_frame[l->v[i + AHEAD]]);
		take(&c, T_FRAME, s->node_frame[l->v[i]]);
	}
	for (size_t i = 0; i < m->n_node_frames; i++) {
		if (i + AHEAD < m->n_node_frames)
			prefetch_logged(s, T_FRAME, m->node_frames[i + AHEAD]);
		take(&c, T_FRAME, m->node_frames[i]);
	}
	l = &c.l[T_FRAME];
	for (size_t i = 0; i < l->n; i++) {
		if (i + AHEAD < l->n)
			prefetch(&s->frames[l->v[i + AHEAD]]);
		take_frame_refs(&c, &s->frames[l->v[i]]);
	}
	for (size_t i = 0; i < m->n_frame_types; i++)
		take_frame_refs(&c, &s->frames[m->frames_base + i]);
	for (size_t i = 0; i < c.l[T_FILE].n; i++)
		take(&c, T_STR, s->files[c.l[T_FILE].v[i]].name);
	for (size_t i = 0; i < m->n_files; i++)
		take(&c, T_STR, m->files[i]->name);
	for (size_t i = 0; i < c.l[T_RES].n; i++) {
		uint32_t r = c.l[T_RES].v[i];
		for (uint32_t j = 0; j < s->res.len[r]; j++)
			take(&c, T_STR, s->res.ids[s->res.start[r] + j]);
	}
	for (size_t i = 0; i < m->n_resource_attributes; i++)
		take(&c, T_STR, m->resource_attributes[i]);

	size_t at = head->len, carried = 0;
	uint32_t zl = 0;
	buf_append(head, &zl, 4);
	for (int t = 0; t < T_COUNT; t++)
		carried += c.l[t].n;
	int rc = 0;
	if (carried) {
		struct buf raw = { 0 };
		pack_carry(&c, &raw);
		rc = zstd_compress_buf(raw.data, raw.len, CARRY_ZSTD_LEVEL, head);
		buf_free(&raw);
		if (rc < 0 || head->len - at - 4 > BATCH_MAX_COMPRESSED) {
			buf_puts(err, "compressing the session's definitions for the log failed");
			rc = -1;
		}
		zl = (uint32_t)(head->len - at - 4);
		memcpy(head->data + at, &zl, 4);
	}
	for (int t = 0; t < T_COUNT; t++)
		free(c.l[t].v);
	*body = v->zbody;
	*blen = v->zlen;
	return rc;
}

/* failed(): the record was cut off the log, so what it logged is not in
 * the log: every entry counts as unlogged again (rare: a failed write or
 * sync). */
static void v2_failed(void *ctx)
{
	struct v2_entry *v = ctx;
	v->s->logged_gen = 0;
}

/* --- indexing: session ids to the head part's ids ------------------------------ */

#define MAP_FAIL UINT32_MAX

struct mapper {
	struct sess *s;
	struct store_head *h;
	uint32_t gen;    /* the head's dictionaries' name: what pm entries are valid for */
	uint32_t *chain; /* a stack's part frame ids, outermost first */
	size_t capchain;
};

/* Session entry id of pm type t (defined as def_t) in this head: true when
 * answered, *pid its head id when mapped for this head already, MAP_FAIL
 * when the session never defined it; false when it is to be mapped now and
 * remembered in *e (memo_put). */
static bool memo_done(struct mapper *x, int t, int def_t, uint32_t id, uint64_t **e, uint32_t *pid)
{
	*e = &x->s->pm[t][id];
	if (**e >> 32 == x->gen) {
		*pid = (uint32_t)**e;
		return true;
	}
	*pid = MAP_FAIL;
	return !defined(x->s, def_t, id);
}

/* Remembers pid as e's head id in this head; returns it. */
static uint32_t memo_put(struct mapper *x, uint64_t *e, uint32_t pid)
{
	*e = (uint64_t)x->gen << 32 | pid;
	return pid;
}

static uint32_t map_string(struct mapper *x, int t, uint32_t id)
{
	uint64_t *e;
	uint32_t done;
	if (memo_done(x, t, T_STR, id, &e, &done))
		return done;
	const char *str = x->s->sbytes.data + x->s->soff[id];
	uint32_t pid = store_head_string(x->h, t == T_LSTR ? STORE_LABEL_STRINGS : STORE_SYMBOL_STRINGS,
					 str, strlen(str));
	return memo_put(x, e, pid);
}

static uint32_t map_file(struct mapper *x, uint32_t id)
{
	uint64_t *e;
	uint32_t done;
	if (memo_done(x, T_FILE, T_FILE, id, &e, &done))
		return done;
	const struct sfile *f = &x->s->files[id];
	struct store_file sf = { .name = map_string(x, T_STR, f->name) };
	if (sf.name == MAP_FAIL)
		return MAP_FAIL;
	memcpy(sf.id.b, f->id, FILE_ID_LEN);
	memcpy(sf.build_id, f->build_id, f->build_id_len);
	sf.build_id_len = f->build_id_len;
	sf.nsegs = MIN(f->nsegs, STORE_FILE_SEGMENTS);
	memcpy(sf.segs, f->segs, (size_t)sf.nsegs * 3 * sizeof(uint64_t));
	uint32_t pid = store_head_file(x->h, &sf);
	return memo_put(x, e, pid);
}

static uint32_t map_frame(struct mapper *x, uint32_t id)
{
	uint64_t *e;
	uint32_t done;
	if (memo_done(x, T_FRAME, T_FRAME, id, &e, &done))
		return done;
	const struct sframe *f = &x->s->frames[id];
	struct store_frame sf = { .type = f->type, .address = f->address };
	uint32_t file = f->file ? map_file(x, f->file - 1) : 0;
	sf.name = f->name ? map_string(x, T_STR, f->name) : 0;
	sf.binary = f->binary ? map_string(x, T_STR, f->binary) : 0;
	if (file == MAP_FAIL || sf.name == MAP_FAIL || sf.binary == MAP_FAIL)
		return MAP_FAIL;
	sf.file = f->file ? file + 1 : 0;
	uint32_t pid = store_head_frame(x->h, &sf);
	return memo_put(x, e, pid);
}

/* The head's stack (leaf node) of session node id: one lookup of its
 * content hash when any session put it in this head before, so an agent's
 * stack costs the head one lookup however many agents send it; else by
 * its frames (store_head_stack), and noted by its content hash. Only the
 * nodes samples name are kept in pm. */
static uint32_t map_node(struct mapper *x, uint32_t id)
{
	uint64_t *e;
	uint32_t done;
	if (memo_done(x, T_STACK, T_STACK, id, &e, &done))
		return done;
	uint64_t lo = x->s->node_h[2 * (size_t)id], hi = x->s->node_h[2 * (size_t)id + 1];
	uint32_t leaf = store_head_stack_by_hash(x->h, lo, hi);
	if (leaf != UINT32_MAX) {
		return memo_put(x, e, leaf);
	}
	size_t n = 0;
	for (uint32_t nd = id + 1; nd; nd = x->s->node_parent[nd - 1]) {
		if (!defined(x->s, T_STACK, nd - 1) || n == BATCH_MAX_STACK_DEPTH)
			return MAP_FAIL;
		n++;
	}
	xgrow((void **)&x->chain, &x->capchain, n + 1, sizeof(uint32_t));
	size_t k = n;
	for (uint32_t nd = id + 1; nd; nd = x->s->node_parent[nd - 1])
		if ((x->chain[--k] = map_frame(x, x->s->node_frame[nd - 1])) == MAP_FAIL)
			return MAP_FAIL;
	leaf = store_head_stack(x->h, x->chain, n);
	store_head_note_stack_hash(x->h, lo, hi, leaf);
	return memo_put(x, e, leaf);
}

/* The head's label set of session resource id. */
static uint32_t map_resource(struct mapper *x, uint32_t id, uint32_t host_cpus)
{
	uint64_t *e;
	uint32_t done;
	if (memo_done(x, T_RES, T_RES, id, &e, &done))
		return done;
	uint32_t kv[2 * BATCH_MAX_ATTRIBUTES];
	uint32_t n = MIN(x->s->res.len[id], 2 * BATCH_MAX_ATTRIBUTES);
	const uint32_t *ids = x->s->res.ids + x->s->res.start[id];
	for (uint32_t j = 0; j < n; j++)
		if ((kv[j] = map_string(x, T_LSTR, ids[j])) == MAP_FAIL)
			return MAP_FAIL;
	uint32_t labels = store_head_labels(x->h, kv, n / 2, host_cpus);
	return memo_put(x, e, labels);
}

/* Adds m's samples to h, the head numbered gen. Every entry is
 * mapped first; only when all resolve are rows added (a replayed record
 * that does not resolve adds nothing). */
static int index_batch(struct sess *s, const Ember__Ingest__V1__SessionBatch *m,
		       const char *project_id, struct store_head *h, uint32_t gen)
{
	for (int t = 0; t < T_MAPS; t++)
		grow_zero((void **)&s->pm[t], &s->cappm[t], table_size(s, t == T_LSTR ? T_STR : t) + 1,
			  sizeof(uint64_t));
	grow_zero((void **)&s->series, &s->capseries, (s->res.n + 1) * 4, sizeof(*s->series));
	/* Dictionary ids stay valid while the head's dictionaries do (a new
	 * head may start with the old one's: store_head_dictionaries); series
	 * are the head's own. */
	struct mapper x = { .s = s, .h = h, .gen = (uint32_t)store_head_dictionaries(h) };
	size_t n = m->n_sample_nodes;
	uint32_t *stack = xmalloc((2 * n + 1) * sizeof(uint32_t)), *series = stack + n;
	uint32_t project = store_head_string(h, STORE_LABEL_STRINGS, project_id, strlen(project_id));
	uint16_t hz = (uint16_t)MIN(m->sample_rate_hz, 65535u);
	uint64_t node = 0, ahead = 0;
	int rc = 0;
	for (size_t i = 0; i < MIN(n, (size_t)AHEAD); i++)
		prefetch(&s->pm[T_STACK][ahead += m->sample_nodes[i]]);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (i + AHEAD < n)
			prefetch(&s->pm[T_STACK][ahead += m->sample_nodes[i + AHEAD]]);
		node += m->sample_nodes[i];
		uint32_t r = m->sample_resources[i];
		int kind = m->n_sample_kinds ? (int)m->sample_kinds[i] : EMBER__INGEST__V1__EVENT_KIND__ON_CPU;
		stack[i] = map_node(&x, (uint32_t)node);
		uint32_t labels = map_resource(&x, r, m->host_cpus);
		if (stack[i] == MAP_FAIL || labels == MAP_FAIL) {
			rc = -1;
			break;
		}
		struct sseries *se = &s->series[(size_t)r * 4 + (unsigned)(kind - 1) % 4];
		if (se->gen != gen || se->hz != hz) {
			se->series = store_head_series(h, project, (uint8_t)kind, hz, labels);
			se->gen = gen;
			se->hz = hz;
		}
		series[i] = se->series;
	}
	if (rc == 0) {
		store_head_rows(h, series, m->start_unix_ms, stack, m->sample_values, n);
		if (m->agent_instance[0])
			store_head_note_agent(h, m->agent_instance, m->sequence);
	}
	free_all(stack, x.chain);
	return rc;
}

static int v2_index(void *ctx, struct store_head *head, uint64_t gen)
{
	struct v2_entry *v = ctx;
	return index_batch(v->s, v->m, v->e.project, head, (uint32_t)gen);
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

int sessions_ingest(struct sessions *ss, const Ember__Ingest__V1__SessionBatch *m,
		    const void *zbody, size_t zlen, int64_t now_ms, session_store_fn store, void *ctx,
		    struct buf *err)
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
	} else if (define_batch(s, m, err) < 0 || check_samples(s, m, err) < 0) {
		rc = SESSION_INVALID;
	} else if (s->ns == 0) {
		buf_puts(err, "strings: the session has none");
		rc = SESSION_INVALID;
	} else if (sess_bytes(s) > ss->max_session_bytes) {
		buf_printf(err, "session %s holds more than %zu MiB: start a new one", s->id,
			   ss->max_session_bytes >> 20);
		rc = SESSION_RESYNC;
	} else {
		struct v2_entry v = { .s = s, .m = m, .zbody = zbody, .zlen = zlen };
		v.e = (struct store_entry){
			.agent_instance = m->agent_instance, .sequence = m->sequence,
			.start_unix_ms = m->start_unix_ms, .record_type = STORE_RECORD_SESSION,
			.record = v2_record, .index = v2_index,
			.failed = v2_failed, .ctx = &v,
		};
		rc = store(ctx, m->project, &v.e);
	}
	if (rc == STORE_OK || rc == STORE_DUPLICATE) {
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

/* --- timeline spans ------------------------------------------------------------- */

void sessions_spans(const struct store_entry *e, session_span_fn fn, void *ctx)
{
	const struct v2_entry *v = e->ctx;
	const struct sess *s = v->s;
	const Ember__Ingest__V1__SessionBatch *m = v->m;
	if (m->n_span_nodes == 0)
		return;
	struct store_frame_info *frames = xmalloc(GPUSPANS_MAX_DEPTH * sizeof(*frames));
	struct store_file *files = xmalloc(GPUSPANS_MAX_DEPTH * sizeof(*files));
	const char *labels[2 * BATCH_MAX_ATTRIBUTES];
	for (size_t i = 0; i < m->n_span_nodes; i++) {
		/* the stack, leaf first, then turned outermost first */
		size_t n = 0;
		for (uint32_t node = m->span_nodes[i] + 1; node && n < GPUSPANS_MAX_DEPTH; node = s->node_parent[node - 1]) {
			const struct sframe *f = &s->frames[s->node_frame[node - 1]];
			struct store_frame_info *fi = &frames[n];
			*fi = (struct store_frame_info){
				.type = f->type,
				.address = f->address,
				.name = f->name ? s->sbytes.data + s->soff[f->name] : NULL,
				.binary = f->binary ? s->sbytes.data + s->soff[f->binary] : NULL,
			};
			if (f->file) {
				const struct sfile *sf = &s->files[f->file - 1];
				struct store_file *out = &files[n];
				memset(out, 0, sizeof(*out));
				memcpy(out->id.b, sf->id, FILE_ID_LEN);
				memcpy(out->build_id, sf->build_id, sf->build_id_len);
				out->build_id_len = sf->build_id_len;
				out->nsegs = MIN(sf->nsegs, STORE_FILE_SEGMENTS);
				memcpy(out->segs, sf->segs, (size_t)out->nsegs * 3 * sizeof(uint64_t));
				fi->file = out;
				fi->file_name = s->sbytes.data + s->soff[sf->name];
			}
			n++;
		}
		for (size_t a = 0, b = n; a + 1 < b; a++, b--) {
			struct store_frame_info t = frames[a];
			frames[a] = frames[b - 1];
			frames[b - 1] = t;
		}
		uint32_t r = m->span_resources[i];
		size_t nl = MIN((size_t)s->res.len[r], 2 * (size_t)BATCH_MAX_ATTRIBUTES);
		for (size_t j = 0; j < nl; j++)
			labels[j] = s->sbytes.data + s->soff[s->res.ids[s->res.start[r] + j]];
		struct gpuspan_in in = {
			.start_ns = (int64_t)m->span_starts_ns[i],
			.end_ns = (int64_t)m->span_ends_ns[i],
			.device = m->span_devices[i],
			.stream = m->span_streams[i],
			.kind = (uint8_t)m->span_kinds[i],
			.frames = frames,
			.nframes = n,
			.labels = labels,
			.nlabels = nl / 2,
		};
		fn(ctx, &in);
	}
	free_all(frames, files);
}

/* --- replaying log records ------------------------------------------------------- */

struct session_replay {
	struct sessions *ss;
};

struct session_replay *session_replay_new(void)
{
	struct session_replay *r = xcalloc(1, sizeof(*r));
	r->ss = sessions_new(SIZE_MAX, SIZE_MAX, INT64_MAX);
	return r;
}

void session_replay_free(struct session_replay *r)
{
	if (!r)
		return;
	sessions_free(r->ss);
	free(r);
}

/* Sets the carried definitions (each entry's references must be defined
 * before it: the record lists strings, files, frames, nodes ascending,
 * resources). */
static int define_carry(struct sess *s, const Ember__Ingest__V1__SessionCarry *c, struct buf *err)
{
	size_t nf = c->n_frame_ids;
	if (c->n_strings != c->n_string_ids || c->n_files != c->n_file_ids ||
	    c->n_frame_types != nf || c->n_frame_files != nf || c->n_frame_addresses != nf ||
	    c->n_frame_names != nf || c->n_frame_binaries != nf ||
	    c->n_node_parents != c->n_node_ids || c->n_node_frames != c->n_node_ids ||
	    c->n_resource_lengths != c->n_resource_ids) {
		buf_puts(err, "carried definitions: arrays differ in length");
		return -1;
	}
	for (size_t i = 0; i < c->n_string_ids; i++) {
		if (c->string_ids[i] >= MAX_TABLE || def_string(s, c->string_ids[i], c->strings[i], err) < 0)
			return -1;
		replay_mark(s, T_STR, c->string_ids[i]);
	}
	for (size_t i = 0; i < c->n_file_ids; i++) {
		if (c->file_ids[i] >= MAX_TABLE || def_file(s, c->file_ids[i], c->files[i], err) < 0)
			return -1;
		replay_mark(s, T_FILE, c->file_ids[i]);
	}
	for (size_t i = 0; i < nf; i++) {
		if (c->frame_ids[i] >= MAX_TABLE ||
		    def_frame(s, c->frame_ids[i], (int)c->frame_types[i], c->frame_files[i],
			      c->frame_addresses[i], c->frame_names[i], c->frame_binaries[i], err) < 0)
			return -1;
		replay_mark(s, T_FRAME, c->frame_ids[i]);
	}
	for (size_t i = 0; i < c->n_node_ids; i++) {
		if (c->node_ids[i] >= MAX_TABLE ||
		    def_node(s, c->node_ids[i], c->node_parents[i], c->node_frames[i], err) < 0)
			return -1;
		replay_mark(s, T_STACK, c->node_ids[i]);
	}
	const uint32_t *ids = c->resource_attributes;
	size_t left = c->n_resource_attributes;
	for (size_t i = 0; i < c->n_resource_ids; i++) {
		if (c->resource_ids[i] >= MAX_TABLE || c->resource_lengths[i] > left ||
		    def_resource(s, c->resource_ids[i], ids, c->resource_lengths[i], err) < 0)
			return -1;
		replay_mark(s, T_RES, c->resource_ids[i]);
		ids += c->resource_lengths[i];
		left -= c->resource_lengths[i];
	}
	return 0;
}

int session_replay_record(struct session_replay *r, const char *project_id, const uint8_t *p,
			  size_t len, struct store_head *head, uint32_t head_no,
			  struct store_replayed *out)
{
	struct buf err = { 0 };
	uint32_t zl;
	if (len < 4)
		return -1;
	memcpy(&zl, p, 4);
	if (zl > len - 4)
		return -1;
	Ember__Ingest__V1__SessionCarry *c = NULL;
	if (zl && !(c = session_carry_decode(p + 4, zl, &err))) {
		buf_free(&err);
		return -1;
	}
	Ember__Ingest__V1__SessionBatch *m = session_batch_decode(p + 4 + zl, len - 4 - zl, &err);
	int rc = -1;
	if (m && check_shape(m, &err) == 0) {
		struct sessions *ss = r->ss;
		pthread_mutex_lock(&ss->mu);
		uint32_t i = find(ss, m->session);
		struct sess *s;
		if (i != UINT32_MAX) {
			s = ss->v[i];
		} else {
			s = xcalloc(1, sizeof(*s));
			snprintf(s->id, sizeof(s->id), "%s", m->session);
			pthread_mutex_init(&s->mu, NULL);
			for (int t = 0; t < T_COUNT; t++)
				grow_zero((void **)&s->defined[t], &s->capdefined[t], 1, 1);
			xgrow((void **)&ss->v, &ss->cap, ss->n + 1, sizeof(*ss->v));
			ss->v[ss->n] = s;
			hmap_insert(&ss->index, hash_bytes(s->id, strlen(s->id)), (uint32_t)ss->n);
			ss->n++;
		}
		pthread_mutex_unlock(&ss->mu);
		if ((!c || define_carry(s, c, &err) == 0) && define_batch(s, m, &err) == 0 &&
		    check_samples(s, m, &err) == 0 &&
		    index_batch(s, m, project_id, head, head_no) == 0) {
			snprintf(out->agent_instance, sizeof(out->agent_instance), "%s",
				 m->agent_instance);
			out->sequence = m->sequence;
			rc = 0;
		}
	}
	if (m)
		session_batch_free(m);
	if (c)
		session_carry_free(c);
	buf_free(&err);
	return rc;
}

static void *codec_replay_begin(void)
{
	return session_replay_new();
}

static int codec_replay(void *state, const char *project, const uint8_t *body, size_t len,
			struct store_head *head, uint32_t head_no, struct store_replayed *out)
{
	return session_replay_record(state, project, body, len, head, head_no, out);
}

static void codec_replay_end(void *state)
{
	session_replay_free(state);
}

const struct store_codec session_codec = {
	.type = STORE_RECORD_SESSION, .name = "session batch", .replay_begin = codec_replay_begin,
	.replay = codec_replay, .replay_end = codec_replay_end,
};
