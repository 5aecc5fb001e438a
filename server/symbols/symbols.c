/* symbols.c - see symbols.h. */
#include "symbols.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hmap.h"
#include "sass.h"
#include "log.h"
#include "util.h"

enum state { PRESENT = 0, LOADED, BROKEN };

struct entry {
	struct file_id id;
	uint8_t state;
	int quality; /* symfile flags; -1 until read */
	void *map;
	size_t len;
	struct symfile_view view;
};

struct retired {
	void *map;
	size_t len;
};

struct bid {
	uint8_t id[64];
	uint8_t len;
	struct file_id file;
};

struct scope {
	char project[37];
	struct symbols *s;
};

struct symbols {
	pthread_mutex_t mu;
	char *dir;
	char project[37]; /* a project's own store: its id; the global one: "" */
	/* The global store's: what also stores every upload in the store
	 * the replicas share (symbols_set_publisher); NULL: none. */
	symbols_publish_fn publish;
	void *publish_ctx;
	/* A project's own store (symbols_scope) reads through to its parent,
	 * the global store; the global store owns its projects' stores. */
	struct symbols *parent;
	pthread_mutex_t scope_mu; /* guards scopes */
	struct scope *scopes;
	size_t nscopes, capscopes;
	struct entry *entries;
	size_t count, cap;
	struct hmap index;
	struct bid *bids; /* build ID -> file id */
	size_t nbids, capbids;
	struct hmap bid_index;
	/* Cubins (symbols_put_cubin) disassembled on first use, by CRC;
	 * under mu. The tables never change once added. */
	struct cubin {
		uint64_t crc;
		struct sass_table *t; /* NULL: nvdisasm failed at failed_ms */
		int64_t failed_ms;
	} *cubins;
	size_t ncubins, capcubins;
	char *nvdisasm; /* the global store's (symbols_set_nvdisasm); NULL: none */
	struct retired *retired; /* replaced mappings, unmapped at close */
	size_t nretired, capretired;
	/* uploads on their way (symbols_expect): a fixed table, slot by id
	 * hash, probed over EXPECT_PROBE slots; at_ms 0 = empty */
	struct expect {
		struct file_id id;
		int64_t at_ms;
	} expect[SYMBOLS_EXPECT_SLOTS];
};

#define EXPECT_PROBE 8

static size_t expect_slot(const struct file_id *id)
{
	uint64_t h;
	memcpy(&h, id->b, sizeof(h));
	return (size_t)(hash_u64(h) % SYMBOLS_EXPECT_SLOTS);
}

static struct entry *find(struct symbols *s, const struct file_id *id)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(s->entries, id, id);
	uint32_t idx;
	if (hmap_find(&s->index, hash_bytes(id->b, FILE_ID_LEN), hmap_field_eq, &k, &idx))
		return &s->entries[idx];
	return NULL;
}

static bool eq_bid(const void *ctx, uint32_t idx)
{
	const struct symbols *s = ((const struct hmap_span_key *)ctx)->owner;
	return hmap_span_is(ctx, s->bids[idx].id, (size_t)s->bids[idx].len, 1);
}

static struct bid *find_bid(struct symbols *s, const uint8_t *id, int len)
{
	if (len <= 0 || len > 64)
		return NULL;
	struct hmap_span_key k = { s, id, (size_t)len };
	uint32_t idx;
	if (hmap_find(&s->bid_index, hash_bytes(id, (size_t)len), eq_bid, &k, &idx))
		return &s->bids[idx];
	return NULL;
}

static void set_bid(struct symbols *s, const uint8_t *id, int len, const struct file_id *file)
{
	struct bid *b = find_bid(s, id, len);
	if (!b) {
		xgrow((void **)&s->bids, &s->capbids, s->nbids + 1, sizeof(*s->bids));
		b = &s->bids[s->nbids];
		memcpy(b->id, id, (size_t)len);
		b->len = (uint8_t)len;
		hmap_insert(&s->bid_index, hash_bytes(id, (size_t)len), (uint32_t)s->nbids);
		s->nbids++;
	}
	b->file = *file;
}

static struct entry *add(struct symbols *s, const struct file_id *id)
{
	xgrow((void **)&s->entries, &s->cap, s->count + 1, sizeof(*s->entries));
	struct entry *e = &s->entries[s->count];
	memset(e, 0, sizeof(*e));
	e->id = *id;
	e->state = PRESENT;
	e->quality = -1;
	hmap_insert(&s->index, hash_bytes(id->b, FILE_ID_LEN), (uint32_t)s->count);
	s->count++;
	return e;
}

static void path_of(const struct symbols *s, const struct file_id *id, const char *suffix,
		    struct buf *out)
{
	char hex[FILE_ID_HEX_LEN + 1];
	fileid_hex(id, hex);
	buf_printf(out, "%s/%s%s", s->dir, hex, suffix);
}

/* Maps and validates the file of e. Called with the lock held. */
static void load(struct symbols *s, struct entry *e)
{
	struct buf path = { 0 };
	path_of(s, &e->id, ".sym", &path);
	e->state = BROKEN;
	int fd = open(path.data, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 ||
	    (uint64_t)st.st_size > SYMBOLS_MAX_UPLOAD) {
		log_error("symbols: cannot open %s: %s", path.data, strerror(errno));
		if (fd >= 0)
			close(fd);
		buf_free(&path);
		return;
	}
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	const char *why;
	if (m == MAP_FAILED) {
		log_error("symbols: cannot map %s: %s", path.data, strerror(errno));
	} else if (symfile_parse(m, (size_t)st.st_size, &e->view, &why) < 0) {
		log_error("symbols: %s is damaged or of an older format (%s); ignoring it", path.data, why);
		munmap(m, (size_t)st.st_size);
	} else {
		e->map = m;
		e->len = (size_t)st.st_size;
		e->state = LOADED;
		e->quality = (int)e->view.flags;
	}
	buf_free(&path);
}

int symbols_open(const char *data_dir, struct symbols **out, struct buf *err)
{
	struct symbols *s = xcalloc(1, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->scope_mu, NULL);
	struct buf d = { 0 };
	buf_printf(&d, "%s/symbols", data_dir);
	s->dir = buf_steal(&d, NULL);
	if (mkdir(s->dir, 0755) < 0 && errno != EEXIST) {
		buf_printf(err, "cannot create %s: %s", s->dir, strerror(errno));
		symbols_close(s);
		return -1;
	}
	DIR *dir = opendir(s->dir);
	if (!dir) {
		buf_printf(err, "cannot read %s: %s", s->dir, strerror(errno));
		symbols_close(s);
		return -1;
	}
	struct dirent *de;
	while ((de = readdir(dir)) != NULL) {
		size_t n = strlen(de->d_name);
		struct file_id id;
		if (n == FILE_ID_HEX_LEN + 4 && strcmp(de->d_name + FILE_ID_HEX_LEN, ".sym") == 0 &&
		    hex_decode(de->d_name, FILE_ID_HEX_LEN, id.b, FILE_ID_LEN) == 0 && !find(s, &id)) {
			add(s, &id);
		} else if (n > 4 && n <= 128 + 4 && n % 2 == 0 && strcmp(de->d_name + n - 4, ".bid") == 0) {
			uint8_t bid[64];
			struct buf p = { 0 };
			char *text = NULL;
			buf_printf(&p, "%s/%s", s->dir, de->d_name);
			if (hex_decode(de->d_name, n - 4, bid, (n - 4) / 2) == 0 &&
			    read_file(p.data, 64, &text, NULL) == 0 &&
			    hex_decode(text, strnlen(text, FILE_ID_HEX_LEN + 1), id.b, FILE_ID_LEN) == 0)
				set_bid(s, bid, (int)(n - 4) / 2, &id);
			free(text);
			buf_free(&p);
		}
	}
	closedir(dir);
	*out = s;
	return 0;
}

void symbols_close(struct symbols *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nscopes; i++)
		symbols_close(s->scopes[i].s);
	free(s->scopes);
	pthread_mutex_destroy(&s->scope_mu);
	for (size_t i = 0; i < s->count; i++)
		if (s->entries[i].map)
			munmap(s->entries[i].map, s->entries[i].len);
	for (size_t i = 0; i < s->nretired; i++)
		munmap(s->retired[i].map, s->retired[i].len);
	free(s->retired);
	for (size_t i = 0; i < s->ncubins; i++) {
		sass_free(s->cubins[i].t);
		free(s->cubins[i].t);
	}
	free_all(s->cubins, s->nvdisasm, s->entries);
	hmap_free(&s->index);
	free(s->bids);
	hmap_free(&s->bid_index);
	free(s->dir);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static int quality_one(struct symbols *s, const struct file_id *id)
{
	pthread_mutex_lock(&s->mu);
	struct entry *e = find(s, id);
	if (e && e->state == PRESENT)
		load(s, e);
	int q = e ? (e->state == LOADED ? e->quality : 0) : -1;
	pthread_mutex_unlock(&s->mu);
	return q;
}

size_t symbols_count(struct symbols *s)
{
	pthread_mutex_lock(&s->mu);
	size_t n = s->count;
	pthread_mutex_unlock(&s->mu);
	return n;
}

static int quality_rank(int flags)
{
	return __builtin_popcount((unsigned)flags);
}

/* Records that build ID bid's symbols are those of file id (a small file
 * beside the symbol files, written atomically). Lock held. */
static void save_bid(struct symbols *s, const uint8_t *bid, int len, const struct file_id *id)
{
	char bhex[129], fhex[FILE_ID_HEX_LEN + 1];
	hex_encode(bid, (size_t)len, bhex);
	fileid_hex(id, fhex);
	struct buf tmp = { 0 }, final = { 0 };
	buf_printf(&tmp, "%s/%s.bid.tmp", s->dir, bhex);
	buf_printf(&final, "%s/%s.bid", s->dir, bhex);
	int fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		bool ok = write(fd, fhex, FILE_ID_HEX_LEN) == FILE_ID_HEX_LEN && fsync(fd) == 0;
		close(fd);
		if (ok && rename(tmp.data, final.data) == 0)
			set_bid(s, bid, len, id);
		else
			unlink(tmp.data);
	}
	buf_free(&tmp);
	buf_free(&final);
}

static int quality_any_one(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
			   int build_id_len);

/* Writes len bytes to tmp, fsyncs and renames it to final: a reader sees
 * the whole file or none. Returns 0, or -1 with err set. */
static int store_whole(const char *tmp, const char *final, const void *data, size_t len, struct buf *err)
{
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		buf_printf(err, "cannot create %s: %s", tmp, strerror(errno));
		return -1;
	}
	if (write_exact(fd, data, len) < 0 || fsync(fd) < 0) {
		buf_printf(err, "cannot write %s: %s", tmp, strerror(errno));
		close(fd);
		unlink(tmp);
		return -1;
	}
	close(fd);
	if (rename(tmp, final) < 0) {
		buf_printf(err, "cannot rename %s: %s", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

void symbols_set_publisher(struct symbols *s, symbols_publish_fn fn, void *ctx)
{
	pthread_mutex_lock(&s->mu);
	s->publish = fn;
	s->publish_ctx = ctx;
	pthread_mutex_unlock(&s->mu);
}

int symbols_rank(int quality)
{
	return quality < 0 ? -1 : quality_rank(quality);
}

/* Hands what is about to be stored here to the global store's publisher
 * first (a file the replicas share is never only here): 0 stored there
 * or no publisher, -2 with err set when it failed. */
static int publish(struct symbols *s, enum symbols_kind kind, const char *name, const uint8_t *build_id,
		   int build_id_len, int rank, const void *data, size_t len, struct buf *err)
{
	struct symbols *g = s->parent ? s->parent : s;
	pthread_mutex_lock(&g->mu);
	symbols_publish_fn fn = g->publish;
	void *ctx = g->publish_ctx;
	pthread_mutex_unlock(&g->mu);
	if (!fn)
		return 0;
	return fn(ctx, s->project, kind, name, build_id, build_id_len, rank, data, len, err) < 0 ? -2 : 0;
}

static int put_file(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		    int build_id_len, const void *data, size_t len, bool shared, struct buf *err);

int symbols_put(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		int build_id_len, const void *data, size_t len, struct buf *err)
{
	return put_file(s, id, build_id, build_id_len, data, len, true, err);
}

int symbols_put_local(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		      int build_id_len, const void *data, size_t len, struct buf *err)
{
	return put_file(s, id, build_id, build_id_len, data, len, false, err);
}

static int put_file(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		    int build_id_len, const void *data, size_t len, bool shared, struct buf *err)
{
	struct symfile_view v;
	const char *why;
	if (len > SYMBOLS_MAX_UPLOAD) {
		buf_printf(err, "symbol file larger than %u bytes", SYMBOLS_MAX_UPLOAD);
		return -1;
	}
	if (symfile_parse(data, len, &v, &why) < 0) {
		buf_printf(err, "invalid symbol file: %s", why);
		return -1;
	}
	/* A project keeps no copy of what every project already has. */
	int global = s->parent ? quality_any_one(s->parent, id, build_id, build_id_len) : -1;
	if (global >= 0 && quality_rank(global) >= quality_rank((int)v.flags))
		return 1;
	/* Shared first, unless what is here is at least as good (then kept
	 * below, with its build ID noted). */
	int here = shared ? quality_one(s, id) : -1;
	if (shared && !(here > 0 && quality_rank(here) >= quality_rank((int)v.flags))) {
		char hex[FILE_ID_HEX_LEN + 1];
		fileid_hex(id, hex);
		if (publish(s, SYMBOLS_KIND_FILE, hex, build_id, build_id_len, quality_rank((int)v.flags), data,
			    len, err) < 0)
			return -2;
	}
	struct buf tmp = { 0 }, final = { 0 };
	path_of(s, id, ".tmp", &tmp);
	path_of(s, id, ".sym", &final);
	int rc = -2;
	pthread_mutex_lock(&s->mu);
	struct entry *e = find(s, id);
	if (e && e->state == PRESENT)
		load(s, e);
	if (e && e->state == LOADED && quality_rank(e->quality) >= quality_rank((int)v.flags)) {
		rc = 1; /* what is stored is at least as good */
		goto out;
	}
	if (store_whole(tmp.data, final.data, data, len, err) < 0)
		goto out;
	if (!e) {
		e = add(s, id);
	} else if (e->map) {
		/* Queries may still hold names from the old mapping. */
		xgrow((void **)&s->retired, &s->capretired, s->nretired + 1, sizeof(*s->retired));
		s->retired[s->nretired++] = (struct retired){ e->map, e->len };
		e->map = NULL;
	}
	e->state = PRESENT; /* mapped again on next use */
	e->quality = -1;
	rc = 0;
out:
	if (rc >= 0 && build_id_len > 0 && build_id_len <= 64) {
		/* The build ID leads to the best symbols stored for it. */
		struct bid *b = find_bid(s, build_id, build_id_len);
		struct entry *cur = b ? find(s, &b->file) : NULL;
		if (cur && cur->state == PRESENT)
			load(s, cur);
		struct entry *mine = find(s, id);
		if (mine && mine->state == PRESENT)
			load(s, mine);
		if (!b || !cur || (mine && quality_rank(mine->quality) > quality_rank(cur->quality)))
			save_bid(s, build_id, build_id_len, id);
	}
	pthread_mutex_unlock(&s->mu);
	buf_free(&tmp);
	buf_free(&final);
	return rc;
}

/* The entry lookups use: the file id's own, unless the build ID leads to
 * more complete symbols (an agent uploads the stripped binary's few ELF
 * symbols; a user the unstripped build's DWARF). Lock held. */
static struct entry *resolve(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
			     int build_id_len)
{
	struct entry *e = find(s, id);
	if (e && e->state == PRESENT)
		load(s, e);
	struct bid *b = find_bid(s, build_id, build_id_len);
	struct entry *o = b ? find(s, &b->file) : NULL;
	if (o && o->state == PRESENT)
		load(s, o);
	if (!e || e->state != LOADED)
		return o ? o : e;
	if (o && o->state == LOADED && quality_rank(o->quality) > quality_rank(e->quality))
		return o;
	return e;
}

static int quality_any_one(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
			   int build_id_len)
{
	pthread_mutex_lock(&s->mu);
	struct entry *e = resolve(s, id, build_id, build_id_len);
	int q = e ? (e->state == LOADED ? e->quality : 0) : -1;
	pthread_mutex_unlock(&s->mu);
	return q;
}

static int lookup_one(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		      int build_id_len, uint64_t offset, struct sym_frame *out, int max)
{
	pthread_mutex_lock(&s->mu);
	struct entry *e = resolve(s, id, build_id, build_id_len);
	int n = 0;
	if (e && e->state == LOADED)
		n = symfile_lookup(&e->view, offset, out, max);
	pthread_mutex_unlock(&s->mu);
	return n;
}

void symbols_expect(struct symbols *s, const struct file_id *id, int64_t now_ms)
{
	if (s->parent)
		s = s->parent;
	size_t first = expect_slot(id), use = first;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < EXPECT_PROBE; i++) {
		struct expect *e = &s->expect[(first + i) % SYMBOLS_EXPECT_SLOTS];
		if (e->at_ms && fileid_equal(&e->id, id)) {
			use = (first + i) % SYMBOLS_EXPECT_SLOTS;
			break;
		}
		/* else the empty or oldest slot of the probe */
		if (e->at_ms < s->expect[use].at_ms)
			use = (first + i) % SYMBOLS_EXPECT_SLOTS;
	}
	s->expect[use].id = *id;
	s->expect[use].at_ms = now_ms ? now_ms : 1;
	pthread_mutex_unlock(&s->mu);
}

bool symbols_expected(struct symbols *s, const struct file_id *id, int64_t now_ms)
{
	if (s->parent)
		s = s->parent;
	size_t first = expect_slot(id);
	bool found = false;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < EXPECT_PROBE && !found; i++) {
		const struct expect *e = &s->expect[(first + i) % SYMBOLS_EXPECT_SLOTS];
		found = e->at_ms && fileid_equal(&e->id, id) && now_ms - e->at_ms < SYMBOLS_EXPECT_MS;
	}
	found = found && !find(s, id);
	pthread_mutex_unlock(&s->mu);
	return found;
}

/* --- scopes --------------------------------------------------------------------- */

struct symbols *symbols_scope(struct symbols *s, const char *project, struct buf *err)
{
	if (!project)
		return s;
	if (s->parent || !uuid_valid(project)) {
		buf_printf(err, "symbols: no scope \"%.40s\" here", project);
		return NULL;
	}
	pthread_mutex_lock(&s->scope_mu);
	struct symbols *c = NULL;
	for (size_t i = 0; i < s->nscopes && !c; i++)
		if (!strcmp(s->scopes[i].project, project))
			c = s->scopes[i].s;
	if (!c) {
		struct buf dir = { 0 };
		buf_printf(&dir, "%s/projects", s->dir);
		if (mkdir(dir.data, 0755) < 0 && errno != EEXIST) {
			buf_printf(err, "cannot create %s: %s", dir.data, strerror(errno));
		} else {
			buf_printf(&dir, "/%s", project);
			if (mkdir(dir.data, 0755) < 0 && errno != EEXIST)
				buf_printf(err, "cannot create %s: %s", dir.data, strerror(errno));
			else if (symbols_open(dir.data, &c, err) == 0) {
				c->parent = s;
				snprintf(c->project, sizeof(c->project), "%s", project);
				xgrow((void **)&s->scopes, &s->capscopes, s->nscopes + 1, sizeof(*s->scopes));
				snprintf(s->scopes[s->nscopes].project, 37, "%s", project);
				s->scopes[s->nscopes++].s = c;
			}
		}
		buf_free(&dir);
	}
	pthread_mutex_unlock(&s->scope_mu);
	return c;
}

struct symbols *symbols_for_query(struct symbols *s, const char *project)
{
	struct buf err = { 0 };
	struct symbols *c = symbols_scope(s, project, &err);
	if (!c) {
		log_error("%s (the project's own symbols are not used)", err.data);
		c = s;
	}
	buf_free(&err);
	return c;
}

/* Where a project's store and the global one both know a file, the more
 * complete symbols win; on a tie, the project's own. */
int symbols_quality(struct symbols *s, const struct file_id *id)
{
	int q = quality_one(s, id);
	if (s->parent) {
		int p = quality_one(s->parent, id);
		if (p >= 0 && (q < 0 || quality_rank(p) > quality_rank(q)))
			q = p;
	}
	return q;
}

int symbols_quality_any(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
			int build_id_len)
{
	int q = quality_any_one(s, id, build_id, build_id_len);
	if (s->parent) {
		int p = quality_any_one(s->parent, id, build_id, build_id_len);
		if (p >= 0 && (q < 0 || quality_rank(p) > quality_rank(q)))
			q = p;
	}
	return q;
}

int symbols_lookup(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		   int build_id_len, uint64_t offset, struct sym_frame *out, int max)
{
	if (s->parent) {
		int q = quality_any_one(s, id, build_id, build_id_len);
		int p = quality_any_one(s->parent, id, build_id, build_id_len);
		if (p >= 0 && (q < 0 || quality_rank(p) > quality_rank(q)))
			return lookup_one(s->parent, id, build_id, build_id_len, offset, out, max);
	}
	return lookup_one(s, id, build_id, build_id_len, offset, out, max);
}

/* --- cubins ------------------------------------------------------------------ */

#define CUBIN_RETRY_MS 60000 /* a cubin nvdisasm failed on is tried again after */
#define CUBIN_DISASM_MS 20000
#define CUBIN_DISASM_OUT (256u << 20)
#define EM_CUDA_MACHINE 190

void symbols_set_nvdisasm(struct symbols *s, const char *path)
{
	pthread_mutex_lock(&s->mu);
	free(s->nvdisasm);
	s->nvdisasm = path && *path ? xstrdup(path) : NULL;
	pthread_mutex_unlock(&s->mu);
}

static void cubin_path(const struct symbols *s, uint64_t crc, const char *ext, struct buf *out)
{
	buf_printf(out, "%s/cubins/%016llx%s", s->dir, (unsigned long long)crc, ext);
}

static int put_cubin(struct symbols *s, uint64_t crc, const void *data, size_t len, bool shared,
		     struct buf *err);

int symbols_put_cubin(struct symbols *s, uint64_t crc, const void *data, size_t len, struct buf *err)
{
	return put_cubin(s, crc, data, len, true, err);
}

int symbols_put_cubin_local(struct symbols *s, uint64_t crc, const void *data, size_t len, struct buf *err)
{
	return put_cubin(s, crc, data, len, false, err);
}

bool symbols_have_cubin(struct symbols *s, uint64_t crc)
{
	struct buf path = { 0 };
	cubin_path(s, crc, ".cubin", &path);
	bool have = access(path.data, F_OK) == 0;
	buf_free(&path);
	return have;
}

static int put_cubin(struct symbols *s, uint64_t crc, const void *data, size_t len, bool shared,
		     struct buf *err)
{
	const unsigned char *b = data;
	/* A 64-bit little-endian ELF for NVIDIA's CUDA machine: what nvdisasm
	 * reads. Its parser sees the rest, in a child process. */
	if (len < 64 || len > SYMBOLS_MAX_CUBIN || memcmp(b, "\177ELF", 4) != 0 || b[4] != 2 || b[5] != 1 ||
	    (b[18] | b[19] << 8) != EM_CUDA_MACHINE) {
		buf_printf(err, "not a cubin (a 64-bit little-endian CUDA ELF of at most %u bytes)",
			   SYMBOLS_MAX_CUBIN);
		return -1;
	}
	if (shared) {
		if (symbols_have_cubin(s, crc))
			return 1; /* named by its CRC: the same image */
		char hex[17];
		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)crc);
		if (publish(s, SYMBOLS_KIND_CUBIN, hex, NULL, 0, 0, data, len, err) < 0)
			return -2;
	}
	struct buf dir = { 0 }, tmp = { 0 }, final = { 0 };
	buf_printf(&dir, "%s/cubins", s->dir);
	cubin_path(s, crc, ".tmp", &tmp);
	cubin_path(s, crc, ".cubin", &final);
	int rc = -2;
	pthread_mutex_lock(&s->mu);
	if (access(final.data, F_OK) == 0)
		rc = 1; /* named by its CRC: the same image */
	else if (mkdir(dir.data, 0755) < 0 && errno != EEXIST)
		buf_printf(err, "cannot create %s: %s", dir.data, strerror(errno));
	else if (store_whole(tmp.data, final.data, data, len, err) == 0)
		rc = 0;
	pthread_mutex_unlock(&s->mu);
	buf_free(&dir);
	buf_free(&tmp);
	buf_free(&final);
	return rc;
}

static struct cubin *find_cubin(struct symbols *s, uint64_t crc)
{
	for (size_t i = 0; i < s->ncubins; i++)
		if (s->cubins[i].crc == crc)
			return &s->cubins[i];
	return NULL;
}

/* The mnemonic from this store's cubin, disassembled on first use (outside
 * the lock: nvdisasm may take a while). */
static const char *sass_one(struct symbols *s, const char *nvdisasm, uint64_t crc, const char *func,
			    uint64_t offset)
{
	pthread_mutex_lock(&s->mu);
	struct cubin *c = find_cubin(s, crc);
	int64_t now = now_unix_ms();
	if (c && (c->t || now - c->failed_ms < CUBIN_RETRY_MS)) {
		const char *m = c->t ? sass_lookup(c->t, func, offset) : NULL;
		pthread_mutex_unlock(&s->mu);
		return m;
	}
	pthread_mutex_unlock(&s->mu);
	struct buf path = { 0 }, err = { 0 };
	cubin_path(s, crc, ".cubin", &path);
	if (access(path.data, R_OK) != 0) {
		buf_free(&path);
		return NULL; /* not uploaded (yet) */
	}
	struct sass_table *t = xcalloc(1, sizeof(*t));
	if (sass_disassemble(nvdisasm, path.data, CUBIN_DISASM_MS, CUBIN_DISASM_OUT, t, &err) < 0) {
		log_warn("SASS of cubin %016llx: %s", (unsigned long long)crc, err.data);
		sass_free(t);
		free(t);
		t = NULL;
	}
	buf_free(&path);
	buf_free(&err);
	pthread_mutex_lock(&s->mu);
	c = find_cubin(s, crc);
	if (!c) {
		xgrow((void **)&s->cubins, &s->capcubins, s->ncubins + 1, sizeof(*s->cubins));
		c = &s->cubins[s->ncubins++];
		*c = (struct cubin){ .crc = crc };
	}
	if (!c->t) {
		c->t = t;
		c->failed_ms = t ? 0 : now;
		t = NULL;
	}
	const char *m = c->t ? sass_lookup(c->t, func, offset) : NULL;
	pthread_mutex_unlock(&s->mu);
	if (t) { /* another query disassembled it first */
		sass_free(t);
		free(t);
	}
	return m;
}

const char *symbols_sass(struct symbols *s, uint64_t crc, const char *func, uint64_t offset)
{
	struct symbols *g = s->parent ? s->parent : s;
	pthread_mutex_lock(&g->mu);
	char *tool = g->nvdisasm ? xstrdup(g->nvdisasm) : NULL;
	pthread_mutex_unlock(&g->mu);
	if (!tool)
		return NULL;
	const char *m = sass_one(s, tool, crc, func, offset);
	if (!m && s->parent)
		m = sass_one(s->parent, tool, crc, func, offset);
	free(tool);
	return m;
}
