/* store.c - see store.h. The write-ahead log format is described in
 * docs/internals/store.md. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "batch_decode.h"
#include "hmap.h"
#include "log.h"
#include "strtab.h"
#include "util.h"

#define WAL_MAGIC 0x57424d45u /* "EMBW" little-endian */
#define WAL_HDR 16
#define WAL_MAX_RECORD (BATCH_MAX_COMPRESSED + 256)

struct node {
	uint32_t parent;
	uint32_t frame;
};

struct agent_seq {
	uint32_t instance; /* string id */
	uint64_t seq;
};

struct store {
	pthread_rwlock_t lock;   /* tables and rows */
	pthread_mutex_t wal_mu;  /* serialises appends: dedup check, write, fsync, index */
	int wal_fd;
	uint64_t wal_size;
	struct strtab strings;
	struct store_file *files;
	size_t nfiles, capfiles;
	struct hmap file_index;
	struct store_frame *frames;
	size_t nframes, capframes;
	struct hmap frame_index;
	struct node *nodes; /* nodes[0] is the root; a stack is a node id */
	size_t nnodes, capnodes;
	struct hmap node_index;
	uint32_t *label_ids; /* pairs of string ids, runs per label set */
	size_t nlabel_ids, caplabel_ids;
	uint32_t *label_off;
	size_t nlabels, caplabels;
	struct hmap label_index;
	struct store_row *rows;
	size_t nrows, caprows;
	struct agent_seq *agents;
	size_t nagents, capagents;
	struct hmap agent_index;
	struct store_stats stats;
};

/* --- interning helpers (called with the write lock held) ----------------- */

struct file_key {
	const struct store *s;
	const uint8_t *id;
};

static bool eq_file(const void *ctx, uint32_t idx)
{
	const struct file_key *k = ctx;
	return memcmp(k->s->files[idx].id.b, k->id, FILE_ID_LEN) == 0;
}

static uint32_t intern_file(struct store *s, const Ember__Ingest__V1__File *f, uint32_t name)
{
	uint64_t h = hash_bytes(f->file_id.data, FILE_ID_LEN);
	struct file_key k = { s, f->file_id.data };
	uint32_t idx;
	if (!hmap_find(&s->file_index, h, eq_file, &k, &idx)) {
		xgrow((void **)&s->files, &s->capfiles, s->nfiles + 1, sizeof(*s->files));
		idx = (uint32_t)s->nfiles++;
		memset(&s->files[idx], 0, sizeof(s->files[idx]));
		memcpy(s->files[idx].id.b, f->file_id.data, FILE_ID_LEN);
		s->files[idx].name = name;
		hmap_insert(&s->file_index, h, idx);
	}
	/* A later batch may know more about the file than the first did. */
	struct store_file *sf = &s->files[idx];
	if (!sf->build_id_len && f->build_id.len) {
		memcpy(sf->build_id, f->build_id.data, f->build_id.len);
		sf->build_id_len = (uint8_t)f->build_id.len;
	}
	if (!sf->nsegs && f->n_exec_segments) {
		for (size_t i = 0; i + 2 < f->n_exec_segments && sf->nsegs < STORE_FILE_SEGMENTS; i += 3) {
			memcpy(sf->segs[sf->nsegs], f->exec_segments + i, 3 * sizeof(uint64_t));
			sf->nsegs++;
		}
	}
	return idx;
}

struct frame_key {
	const struct store *s;
	const struct store_frame *f;
};

static bool eq_frame(const void *ctx, uint32_t idx)
{
	const struct frame_key *k = ctx;
	const struct store_frame *a = &k->s->frames[idx], *b = k->f;
	return a->type == b->type && a->file == b->file && a->address == b->address &&
	       a->name == b->name && a->binary == b->binary;
}

static uint32_t intern_frame(struct store *s, const struct store_frame *f)
{
	uint64_t h = hash_mix(hash_mix(hash_mix(hash_u64(f->type), f->file), f->address),
			      (uint64_t)f->name << 32 | f->binary);
	struct frame_key k = { s, f };
	uint32_t idx;
	if (hmap_find(&s->frame_index, h, eq_frame, &k, &idx))
		return idx;
	xgrow((void **)&s->frames, &s->capframes, s->nframes + 1, sizeof(*s->frames));
	idx = (uint32_t)s->nframes++;
	s->frames[idx] = *f;
	hmap_insert(&s->frame_index, h, idx);
	return idx;
}

struct node_key {
	const struct store *s;
	uint32_t parent, frame;
};

static bool eq_node(const void *ctx, uint32_t idx)
{
	const struct node_key *k = ctx;
	return k->s->nodes[idx].parent == k->parent && k->s->nodes[idx].frame == k->frame;
}

static uint32_t intern_node(struct store *s, uint32_t parent, uint32_t frame)
{
	uint64_t h = hash_u64((uint64_t)parent << 32 | frame);
	struct node_key k = { s, parent, frame };
	uint32_t idx;
	if (hmap_find(&s->node_index, h, eq_node, &k, &idx))
		return idx;
	xgrow((void **)&s->nodes, &s->capnodes, s->nnodes + 1, sizeof(*s->nodes));
	idx = (uint32_t)s->nnodes++;
	s->nodes[idx] = (struct node){ parent, frame };
	hmap_insert(&s->node_index, h, idx);
	return idx;
}

struct label_key {
	const struct store *s;
	const uint32_t *kv;
	size_t n;
};

static bool eq_labels(const void *ctx, uint32_t idx)
{
	const struct label_key *k = ctx;
	size_t len = k->s->label_off[idx + 1] - k->s->label_off[idx];
	return len == k->n && (k->n == 0 || memcmp(k->s->label_ids + k->s->label_off[idx], k->kv,
						   k->n * sizeof(uint32_t)) == 0);
}

static uint32_t intern_labels(struct store *s, const uint32_t *kv, size_t n)
{
	uint64_t h = hash_bytes(kv, n * sizeof(uint32_t));
	struct label_key k = { s, kv, n };
	uint32_t idx;
	if (hmap_find(&s->label_index, h, eq_labels, &k, &idx))
		return idx;
	if (n) {
		xgrow((void **)&s->label_ids, &s->caplabel_ids, s->nlabel_ids + n, sizeof(uint32_t));
		memcpy(s->label_ids + s->nlabel_ids, kv, n * sizeof(uint32_t));
	}
	s->nlabel_ids += n;
	xgrow((void **)&s->label_off, &s->caplabels, s->nlabels + 2, sizeof(uint32_t));
	idx = (uint32_t)s->nlabels++;
	s->label_off[idx + 1] = (uint32_t)s->nlabel_ids;
	hmap_insert(&s->label_index, h, idx);
	return idx;
}

struct agent_key {
	const struct store *s;
	uint32_t instance;
};

static bool eq_agent(const void *ctx, uint32_t idx)
{
	const struct agent_key *k = ctx;
	return k->s->agents[idx].instance == k->instance;
}

static struct agent_seq *agent_seq(struct store *s, const char *instance, bool create)
{
	uint32_t id = create ? strtab_intern_cstr(&s->strings, instance)
			     : strtab_lookup(&s->strings, instance, strlen(instance));
	if (id == UINT32_MAX)
		return NULL;
	uint64_t h = hash_u64(id);
	struct agent_key k = { s, id };
	uint32_t idx;
	if (hmap_find(&s->agent_index, h, eq_agent, &k, &idx))
		return &s->agents[idx];
	if (!create)
		return NULL;
	xgrow((void **)&s->agents, &s->capagents, s->nagents + 1, sizeof(*s->agents));
	idx = (uint32_t)s->nagents++;
	s->agents[idx] = (struct agent_seq){ id, 0 };
	hmap_insert(&s->agent_index, h, idx);
	return &s->agents[idx];
}

/* Sorts label pairs by key id and drops repeated keys (first wins). */
static size_t canonical_labels(uint32_t *kv, size_t npairs)
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

/* Adds a validated batch to the in-memory tables. Write lock held. */
static void index_batch(struct store *s, const char *project_id, const Ember__Ingest__V1__Batch *b)
{
	uint32_t project = strtab_intern_cstr(&s->strings, project_id);
	uint32_t *smap = xmalloc(b->n_strings * sizeof(uint32_t));
	for (size_t i = 0; i < b->n_strings; i++)
		smap[i] = strtab_intern_cstr(&s->strings, b->strings[i]);
	uint32_t *fmap = xmalloc((b->n_files + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->n_files; i++)
		fmap[i] = intern_file(s, b->files[i], smap[b->files[i]->name]);
	uint32_t *frmap = xmalloc((b->n_frames + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->n_frames; i++) {
		const Ember__Ingest__V1__Frame *f = b->frames[i];
		struct store_frame sf = {
			.type = (uint8_t)f->type,
			.file = f->file ? fmap[f->file - 1] + 1 : 0,
			.address = f->address,
			.name = smap[f->name],
			.binary = smap[f->binary],
		};
		frmap[i] = intern_frame(s, &sf);
	}
	uint32_t *stmap = xmalloc((b->n_stacks + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < b->n_stacks; i++) {
		uint32_t node = 0;
		for (size_t j = 0; j < b->stacks[i]->n_frames; j++)
			node = intern_node(s, node, frmap[b->stacks[i]->frames[j]]);
		stmap[i] = node;
	}
	uint32_t *lmap = xmalloc((b->n_resources + 1) * sizeof(uint32_t));
	uint32_t kv[2 * BATCH_MAX_ATTRIBUTES];
	for (size_t i = 0; i < b->n_resources; i++) {
		const Ember__Ingest__V1__Resource *r = b->resources[i];
		for (size_t j = 0; j < r->n_attributes; j++)
			kv[j] = smap[r->attributes[j]];
		size_t pairs = canonical_labels(kv, r->n_attributes / 2);
		lmap[i] = intern_labels(s, kv, 2 * pairs);
	}
	for (size_t i = 0; i < b->n_samples; i++) {
		const Ember__Ingest__V1__Sample *sm = b->samples[i];
		xgrow((void **)&s->rows, &s->caprows, s->nrows + 1, sizeof(*s->rows));
		s->rows[s->nrows++] = (struct store_row){
			.ts_ms = b->start_unix_ms,
			.project = project,
			.stack = stmap[sm->stack],
			.labels = lmap[sm->resource],
			.hz = (uint16_t)MIN(b->sample_rate_hz, 65535u),
			.kind = (uint8_t)sm->kind,
			.value = sm->value,
		};
		s->stats.samples += sm->value;
	}
	s->stats.batches++;
	if (b->agent_instance[0]) {
		struct agent_seq *a = agent_seq(s, b->agent_instance, true);
		if (b->sequence > a->seq)
			a->seq = b->sequence;
	}
	free(smap);
	free(fmap);
	free(frmap);
	free(stmap);
	free(lmap);
}

/* --- write-ahead log --------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (int)(done == n);
}

/* Replays one record's payload. Returns 0 or -1 when it does not decode. */
static int replay_payload(struct store *s, const uint8_t *p, size_t len)
{
	if (len < 1 || p[0] == 0 || (size_t)p[0] + 1 > len)
		return -1;
	char project[256];
	memcpy(project, p + 1, p[0]);
	project[p[0]] = '\0';
	struct buf err = { 0 };
	Ember__Ingest__V1__Batch *b = batch_decode(p + 1 + p[0], len - 1 - p[0], &err);
	buf_free(&err);
	if (!b)
		return -1;
	index_batch(s, project, b);
	batch_decode_free(b);
	return 0;
}

/* Finds the next offset > from holding the record magic, or size. */
static uint64_t resync(int fd, uint64_t from, uint64_t size)
{
	uint8_t chunk[65536];
	uint64_t off = from;
	while (off + 4 <= size) {
		size_t n = (size_t)MIN((uint64_t)sizeof(chunk), size - off);
		if (pread_full(fd, chunk, n, off) != 1)
			return size;
		for (size_t i = 0; i + 4 <= n; i++)
			if (get32(chunk + i) == WAL_MAGIC)
				return off + i;
		off += n - 3;
	}
	return size;
}

static int replay_wal(struct store *s, const char *path, struct buf *err)
{
	struct stat st;
	if (fstat(s->wal_fd, &st) < 0) {
		buf_printf(err, "stat %s: %s", path, strerror(errno));
		return -1;
	}
	uint64_t size = (uint64_t)st.st_size, off = 0;
	uint8_t *payload = NULL;
	size_t cap = 0;
	while (off < size) {
		uint8_t hdr[WAL_HDR];
		if (off + WAL_HDR > size) {
			log_warn("%s: incomplete record header at offset %llu: truncating the unacknowledged tail",
				 path, (unsigned long long)off);
			break;
		}
		if (pread_full(s->wal_fd, hdr, WAL_HDR, off) != 1) {
			buf_printf(err, "reading %s: %s", path, strerror(errno));
			free(payload);
			return -1;
		}
		uint32_t len = get32(hdr + 4);
		if (get32(hdr) != WAL_MAGIC || len > WAL_MAX_RECORD) {
			uint64_t next = resync(s->wal_fd, off + 1, size);
			log_error("%s: corrupt record at offset %llu (bad header); skipping %llu bytes",
				  path, (unsigned long long)off, (unsigned long long)(next - off));
			s->stats.wal_skipped_records++;
			off = next;
			continue;
		}
		if (off + WAL_HDR + len > size) {
			log_warn("%s: record at offset %llu is cut short: truncating the unacknowledged tail",
				 path, (unsigned long long)off);
			break;
		}
		xgrow((void **)&payload, &cap, len, 1);
		if (pread_full(s->wal_fd, payload, len, off + WAL_HDR) != 1) {
			buf_printf(err, "reading %s: %s", path, strerror(errno));
			free(payload);
			return -1;
		}
		if (XXH64(payload, len, 0) != get64(hdr + 8)) {
			uint64_t next = resync(s->wal_fd, off + 1, size);
			log_error("%s: record at offset %llu fails its checksum; skipping %llu bytes",
				  path, (unsigned long long)off, (unsigned long long)(next - off));
			s->stats.wal_skipped_records++;
			off = next;
			continue;
		}
		if (replay_payload(s, payload, len) < 0) {
			log_error("%s: record at offset %llu does not decode; skipped", path,
				  (unsigned long long)off);
			s->stats.wal_skipped_records++;
		}
		off += WAL_HDR + len;
	}
	free(payload);
	if (off < size && ftruncate(s->wal_fd, (off_t)off) < 0) {
		buf_printf(err, "truncating %s: %s", path, strerror(errno));
		return -1;
	}
	s->wal_size = off;
	return 0;
}

static int write_full(int fd, const void *p, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(fd, (const char *)p + done, n - done);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

/* --- public API ---------------------------------------------------------- */

int store_open(const char *dir, struct store **out, struct buf *err)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create data directory %s: %s", dir, strerror(errno));
		return -1;
	}
	struct store *s = xcalloc(1, sizeof(*s));
	pthread_rwlock_init(&s->lock, NULL);
	pthread_mutex_init(&s->wal_mu, NULL);
	strtab_init(&s->strings);
	xgrow((void **)&s->nodes, &s->capnodes, 1, sizeof(*s->nodes));
	s->nodes[0] = (struct node){ 0, UINT32_MAX };
	s->nnodes = 1;
	xgrow((void **)&s->label_off, &s->caplabels, 1, sizeof(uint32_t));
	s->label_off[0] = 0;

	struct buf path = { 0 };
	buf_printf(&path, "%s/samples.wal", dir);
	s->wal_fd = open(path.data, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->wal_fd < 0) {
		buf_printf(err, "cannot open %s: %s", path.data, strerror(errno));
		buf_free(&path);
		store_close(s);
		return -1;
	}
	uint64_t t0 = now_mono_ns();
	if (replay_wal(s, path.data, err) < 0) {
		buf_free(&path);
		store_close(s);
		return -1;
	}
	if (lseek(s->wal_fd, 0, SEEK_END) < 0) {
		buf_printf(err, "seeking %s: %s", path.data, strerror(errno));
		buf_free(&path);
		store_close(s);
		return -1;
	}
	log_info("store: %s replayed in %.1f ms: %llu batches, %zu rows, %llu bytes",
		 path.data, (double)(now_mono_ns() - t0) / 1e6,
		 (unsigned long long)s->stats.batches, s->nrows, (unsigned long long)s->wal_size);
	buf_free(&path);
	*out = s;
	return 0;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	if (s->wal_fd >= 0)
		close(s->wal_fd);
	strtab_free(&s->strings);
	free(s->files);
	hmap_free(&s->file_index);
	free(s->frames);
	hmap_free(&s->frame_index);
	free(s->nodes);
	hmap_free(&s->node_index);
	free(s->label_ids);
	free(s->label_off);
	hmap_free(&s->label_index);
	free(s->rows);
	free(s->agents);
	hmap_free(&s->agent_index);
	pthread_rwlock_destroy(&s->lock);
	pthread_mutex_destroy(&s->wal_mu);
	free(s);
}

int store_append(struct store *s, const char *project_id, const Ember__Ingest__V1__Batch *b,
		 const void *zbody, size_t zlen, struct buf *err)
{
	size_t plen = strlen(project_id);
	if (plen == 0 || plen > 255 || zlen > BATCH_MAX_COMPRESSED) {
		buf_puts(err, "invalid project id or batch size");
		return -1;
	}
	pthread_mutex_lock(&s->wal_mu);
	if (b->agent_instance[0]) {
		pthread_rwlock_rdlock(&s->lock);
		struct agent_seq *a = agent_seq(s, b->agent_instance, false);
		bool dup = a && b->sequence <= a->seq;
		pthread_rwlock_unlock(&s->lock);
		if (dup) {
			pthread_mutex_unlock(&s->wal_mu);
			return 1;
		}
	}
	size_t len = 1 + plen + zlen;
	uint8_t *rec = xmalloc(WAL_HDR + len);
	put32(rec, WAL_MAGIC);
	put32(rec + 4, (uint32_t)len);
	rec[WAL_HDR] = (uint8_t)plen;
	memcpy(rec + WAL_HDR + 1, project_id, plen);
	memcpy(rec + WAL_HDR + 1 + plen, zbody, zlen);
	uint64_t sum = XXH64(rec + WAL_HDR, len, 0);
	memcpy(rec + 8, &sum, 8);
	int rc = write_full(s->wal_fd, rec, WAL_HDR + len);
	if (rc == 0)
		rc = fdatasync(s->wal_fd);
	free(rec);
	if (rc < 0) {
		int e = errno;
		buf_printf(err, "writing the log failed: %s", strerror(e));
		/* Cut off whatever part of the record reached the file, so the
		 * log stays a sequence of whole records. */
		if (ftruncate(s->wal_fd, (off_t)s->wal_size) < 0 ||
		    lseek(s->wal_fd, 0, SEEK_END) < 0)
			log_error("cannot roll back a failed log write: %s", strerror(errno));
		pthread_mutex_unlock(&s->wal_mu);
		errno = e;
		return -1;
	}
	s->wal_size += WAL_HDR + len;
	pthread_rwlock_wrlock(&s->lock);
	index_batch(s, project_id, b);
	pthread_rwlock_unlock(&s->lock);
	pthread_mutex_unlock(&s->wal_mu);
	return 0;
}

void store_read_lock(struct store *s)
{
	pthread_rwlock_rdlock(&s->lock);
}

void store_read_unlock(struct store *s)
{
	pthread_rwlock_unlock(&s->lock);
}

void store_scan(struct store *s, uint32_t project, uint8_t kind, int64_t start_ms, int64_t end_ms,
		store_row_fn fn, void *ctx)
{
	for (size_t i = 0; i < s->nrows; i++) {
		const struct store_row *r = &s->rows[i];
		if (r->project == project && r->kind == kind && r->ts_ms >= start_ms &&
		    r->ts_ms < end_ms)
			fn(ctx, r);
	}
}

uint32_t store_project_id(struct store *s, const char *uuid)
{
	return strtab_lookup(&s->strings, uuid, strlen(uuid));
}

const char *store_string(const struct store *s, uint32_t id)
{
	return strtab_get(&s->strings, id);
}

const struct store_frame *store_frame(const struct store *s, uint32_t id)
{
	return id < s->nframes ? &s->frames[id] : NULL;
}

size_t store_frame_count(const struct store *s)
{
	return s->nframes;
}

const struct store_file *store_file(const struct store *s, uint32_t index)
{
	return index < s->nfiles ? &s->files[index] : NULL;
}

size_t store_stack(const struct store *s, uint32_t stack, uint32_t *out, size_t max)
{
	size_t depth = 0;
	for (uint32_t n = stack; n != 0 && n < s->nnodes; n = s->nodes[n].parent)
		depth++;
	size_t i = depth;
	for (uint32_t n = stack; n != 0 && n < s->nnodes; n = s->nodes[n].parent) {
		i--;
		if (i < max)
			out[i] = s->nodes[n].frame;
	}
	return depth;
}

size_t store_labels(const struct store *s, uint32_t labels, const uint32_t **kv)
{
	if (labels >= s->nlabels) {
		*kv = NULL;
		return 0;
	}
	*kv = s->label_ids ? s->label_ids + s->label_off[labels] : NULL;
	return (s->label_off[labels + 1] - s->label_off[labels]) / 2;
}

size_t store_label_set_count(const struct store *s)
{
	return s->nlabels;
}

void store_get_stats(struct store *s, struct store_stats *out)
{
	pthread_rwlock_rdlock(&s->lock);
	*out = s->stats;
	out->rows = s->nrows;
	out->strings = strtab_count(&s->strings);
	out->files = s->nfiles;
	out->frames = s->nframes;
	out->stack_nodes = s->nnodes;
	out->label_sets = s->nlabels;
	out->wal_bytes = s->wal_size;
	pthread_rwlock_unlock(&s->lock);
}
