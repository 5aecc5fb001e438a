/* block.c - see block.h; the byte layout is in docs/internals/store.md. */
#include "block.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "compress.h"
#include "sort.h"
#include "util.h"
#include "varint.h"

#define BLOCK_MAGIC "EMBRBLK1"
#define BLOCK_END "EMBREND1"
#define BLOCK_VERSION 4
#define BLOCK_VERSION_UNSLICED 3 /* still read: one rows frame per series */

/* Fuzz builds let damaged checksums through so that mutations reach the
 * parsers behind them (tests/fuzz/fuzz_block.c); every other build checks. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define SUM_OK(computed, stored) ((void)(computed), (void)(stored), true)
#else
#define SUM_OK(computed, stored) ((computed) == (stored))
#endif
#define HEADER_LEN 16
#define TRAILER_LEN 24
#define MAX_FOOTER (16u << 20)
#define ZLEVEL 3

enum section {
	SEC_LSTR = 1, SEC_SSTR, SEC_FILES, SEC_FRAMES, SEC_NODES, SEC_LABELS, SEC_SERIES,
	SEC_MINUTES, SEC_HOSTS, SEC_ROLLUPS, SEC_COUNT
};

struct section_ref {
	uint64_t off, len, raw, sum;
};

struct block {
	int fd;
	uint32_t version;
	char *path;
	struct block_info info;
	struct section_ref sec[SEC_COUNT];
};

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(fd, (const char *)p + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

static void put_u32(struct buf *b, uint32_t v)
{
	buf_append(b, &v, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
	buf_append(b, &v, 8);
}

static uint64_t get_u64(struct cursor *c)
{
	uint64_t v = 0;
	cursor_bytes(c, &v, 8);
	return v;
}

static uint32_t get_u32(struct cursor *c)
{
	uint32_t v = 0;
	cursor_bytes(c, &v, 4);
	return v;
}

/* --- opening -------------------------------------------------------------- */

int block_open(const char *path, struct block **out, struct buf *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		buf_printf(err, "%s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	uint8_t head[HEADER_LEN], trail[TRAILER_LEN];
	uint8_t *footer = NULL;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < HEADER_LEN + TRAILER_LEN ||
	    pread_all(fd, head, HEADER_LEN, 0) < 0 ||
	    pread_all(fd, trail, TRAILER_LEN, (uint64_t)st.st_size - TRAILER_LEN) < 0) {
		buf_printf(err, "%s: too short or unreadable", path);
		goto fail;
	}
	uint32_t version;
	memcpy(&version, head + 8, 4);
	if (memcmp(head, BLOCK_MAGIC, 8) != 0 ||
	    (version != BLOCK_VERSION && version != BLOCK_VERSION_UNSLICED) ||
	    memcmp(trail + 16, BLOCK_END, 8) != 0) {
		buf_printf(err, "%s: not an ember block (bad magic or version)", path);
		goto fail;
	}
	uint64_t flen, fsum;
	memcpy(&flen, trail, 8);
	memcpy(&fsum, trail + 8, 8);
	uint64_t size = (uint64_t)st.st_size;
	if (flen == 0 || flen > MAX_FOOTER || flen > size - HEADER_LEN - TRAILER_LEN) {
		buf_printf(err, "%s: bad footer length", path);
		goto fail;
	}
	uint64_t foff = size - TRAILER_LEN - flen;
	footer = xmalloc(flen);
	if (pread_all(fd, footer, flen, foff) < 0 || !SUM_OK(XXH64(footer, flen, 0), fsum)) {
		buf_printf(err, "%s: footer checksum mismatch", path);
		goto fail;
	}
	struct block *b = xcalloc(1, sizeof(*b));
	b->fd = fd;
	b->version = version;
	struct cursor c = { footer, footer + flen, false };
	uint32_t nsec = get_u32(&c);
	for (uint32_t i = 0; i < nsec && !c.bad; i++) {
		uint32_t id = get_u32(&c);
		struct section_ref r = { get_u64(&c), get_u64(&c), get_u64(&c), get_u64(&c) };
		if (id == 0 || id >= SEC_COUNT || r.off < HEADER_LEN || r.off > foff ||
		    r.len > foff - r.off || r.raw > BLOCK_MAX_SECTION || !zstd_can_expand(r.len, r.raw)) {
			c.bad = true;
			break;
		}
		b->sec[id] = r;
	}
	struct block_info *in = &b->info;
	in->partition_ms = (int64_t)get_u64(&c);
	in->min_ts = (int64_t)get_u64(&c);
	in->max_ts = (int64_t)get_u64(&c);
	in->granularity_ms = get_u32(&c);
	in->slice_ms = version == BLOCK_VERSION_UNSLICED ? 0 : get_u32(&c);
	in->level = get_u32(&c);
	in->rows = get_u64(&c);
	in->samples = get_u64(&c);
	in->nseries = get_u64(&c);
	in->file_bytes = size;
	in->gen = get_u64(&c);
	in->wal_lo = get_u64(&c);
	in->wal_hi = get_u64(&c);
	uint64_t nsrc = get_u32(&c);
	if (nsrc > cursor_left(&c) / 8)
		c.bad = true;
	else if (nsrc) {
		in->sources = xmalloc(nsrc * sizeof(uint64_t));
		for (uint64_t i = 0; i < nsrc; i++)
			in->sources[in->nsources++] = get_u64(&c);
	}
	uint64_t nag = c.bad ? 0 : varint_get_max(&c, cursor_left(&c) / 2);
	if (nag)
		in->agents = xcalloc(nag, sizeof(*in->agents));
	for (uint64_t i = 0; i < nag && !c.bad; i++) {
		uint64_t len = varint_get_max(&c, 256);
		if (c.bad || len > cursor_left(&c)) {
			c.bad = true;
			break;
		}
		in->agents[in->nagents].instance = xstrndup((const char *)c.p, len);
		c.p += len;
		in->agents[in->nagents++].seq = varint_get(&c);
	}
	if (cursor_left(&c) != 0)
		c.bad = true;
	for (int i = 1; i < SEC_COUNT && !c.bad; i++)
		if (!b->sec[i].len)
			c.bad = true;
	/* Times are Unix milliseconds before the year 30000: arithmetic on
	 * them cannot overflow. */
	const int64_t max_ts = (int64_t)1 << 50;
	if (in->rows && (in->min_ts < 0 || in->max_ts < in->min_ts || in->max_ts > max_ts))
		c.bad = true;
	if (!in->rows)
		in->min_ts = in->max_ts = 0;
	if (in->partition_ms < -max_ts || in->partition_ms > max_ts ||
	    in->granularity_ms > 86400000 || in->slice_ms > 86400000 ||
	    (version != BLOCK_VERSION_UNSLICED && in->slice_ms == 0))
		c.bad = true;
	if (c.bad || in->granularity_ms == 0) {
		buf_printf(err, "%s: malformed footer", path);
		b->fd = -1;
		block_close(b);
		goto fail;
	}
	free(footer);
	b->path = xstrdup(path);
	*out = b;
	return 0;
fail:
	free(footer);
	close(fd);
	return -1;
}

void block_close(struct block *b)
{
	if (!b)
		return;
	if (b->fd >= 0)
		close(b->fd);
	for (size_t i = 0; i < b->info.nagents; i++)
		free(b->info.agents[i].instance);
	free(b->info.agents);
	free(b->info.sources);
	free(b->path);
	free(b);
}

const struct block_info *block_info(const struct block *b)
{
	return &b->info;
}

const char *block_path(const struct block *b)
{
	return b->path;
}

/* --- loading the dictionaries ---------------------------------------------------- */

/* Reads, checks and decompresses one section into raw. */
static int read_section(struct block *b, int id, struct buf *raw, struct buf *err)
{
	const struct section_ref *r = &b->sec[id];
	char *z = xmalloc(r->len ? r->len : 1);
	int rc = -1;
	if (pread_all(b->fd, z, r->len, r->off) < 0) {
		buf_printf(err, "%s: reading section %d: %s", b->path, id, strerror(errno));
	} else if (!SUM_OK(XXH64(z, r->len, 0), r->sum)) {
		buf_printf(err, "%s: section %d fails its checksum", b->path, id);
	} else {
		buf_reset(raw);
		buf_reserve(raw, r->raw + 1);
		if (zstd_decompress_exact(z, r->len, raw->data, r->raw) < 0) {
			buf_printf(err, "%s: section %d does not decompress", b->path, id);
		} else {
			raw->len = r->raw;
			rc = 0;
		}
	}
	free(z);
	return rc;
}

static int load_strings(struct strtab *t, struct cursor *c)
{
	uint64_t n = varint_get_max(c, cursor_left(c));
	for (uint64_t i = 0; i < n && !c->bad; i++) {
		uint64_t len = varint_get_max(c, BLOCK_MAX_SECTION);
		if (c->bad || len > cursor_left(c)) {
			c->bad = true;
			break;
		}
		uint32_t id = strtab_intern(t, (const char *)c->p, len);
		c->p += len;
		if (id != i + 1)
			c->bad = true; /* a repeated string: the ids would shift */
	}
	return c->bad ? -1 : 0;
}

static void push_slice(struct part *p, const struct part_slice *sl)
{
	xgrow((void **)&p->slices, &p->capslices, p->nslices + 1, sizeof(*p->slices));
	p->slices[p->nslices++] = *sl;
}

/* Where a slice of series s begins and ends: [*lo, *hi). */
static void slice_bounds(const struct part *p, const struct part_series *s,
			 const struct part_slice *sl, int64_t *lo, int64_t *hi)
{
	*lo = MAX(sl->from_ms, s->min_ts);
	*hi = p->slice_ms ? MIN(sl->from_ms + (int64_t)p->slice_ms, s->max_ts + 1) : s->max_ts + 1;
}

/* The number of the slice after slice *k: a gap of at least one. */
static void next_slice(struct cursor *c, int64_t *k, int64_t last)
{
	uint64_t d = varint_get_max(c, (uint64_t)(last - *k));
	*k += (int64_t)d;
	if (d == 0)
		c->bad = true;
}

/* A frame's length, raw length and XXH64. */
static void get_frame(struct cursor *c, struct part_slice *sl)
{
	sl->len = varint_get_max(c, BLOCK_MAX_CHUNK);
	sl->raw = varint_get_max(c, BLOCK_MAX_CHUNK);
	cursor_bytes(c, &sl->sum, 8);
	if (!zstd_can_expand(sl->len, sl->raw))
		c->bad = true;
}

/* A series' frames in a version 3 block: the stack totals, then one frame
 * of all its rows. */
static void load_frames_unsliced(struct part *p, struct part_series *s, struct cursor *c,
				 const struct block_info *in)
{
	s->stacks_len = varint_get_max(c, BLOCK_MAX_CHUNK);
	s->stacks_raw = varint_get_max(c, BLOCK_MAX_CHUNK);
	cursor_bytes(c, &s->stacks_sum, 8);
	struct part_slice sl = { .from_ms = s->min_ts, .n = s->nrows };
	sl.off = varint_get(c);
	get_frame(c, &sl);
	if (sl.off < HEADER_LEN + s->stacks_len || sl.off > in->file_bytes ||
	    sl.len > in->file_bytes - sl.off || sl.n > sl.raw) {
		c->bad = true;
		return;
	}
	s->stacks_off = sl.off - s->stacks_len;
	s->slice0 = (uint32_t)p->nslices;
	s->nslices = 1;
	push_slice(p, &sl);
}

/* A series' frames: its stack list, their totals, then a rows frame per
 * slice, each right after the one before. The first slice is the one holding the
 * series' first row, the last the one holding its last. */
static void load_frames(struct part *p, struct part_series *s, struct cursor *c,
			const struct block_info *in)
{
	s->stacks_off = varint_get_max(c, in->file_bytes);
	s->stacks_len = varint_get_max(c, BLOCK_MAX_CHUNK);
	s->stacks_raw = varint_get_max(c, BLOCK_MAX_CHUNK);
	cursor_bytes(c, &s->stacks_sum, 8);
	s->sums_len = varint_get_max(c, BLOCK_MAX_CHUNK);
	s->sums_raw = varint_get_max(c, BLOCK_MAX_CHUNK);
	cursor_bytes(c, &s->sums_sum, 8);
	if (!s->sums_len || s->nstacks > s->sums_raw)
		c->bad = true;
	uint64_t ns = varint_get_max(c, MIN(s->nrows, cursor_left(c) / 11));
	int64_t len = in->slice_ms, k = floor_div(s->min_ts, len), last = floor_div(s->max_ts, len);
	uint64_t off = s->stacks_off + s->stacks_len + s->sums_len, rows = 0, raw = 0;
	s->slice0 = (uint32_t)p->nslices;
	for (uint64_t i = 0; i < ns && !c->bad; i++) {
		if (i)
			next_slice(c, &k, last);
		struct part_slice sl = { .from_ms = k * len, .off = off };
		sl.n = varint_get_max(c, s->nrows - rows);
		get_frame(c, &sl);
		if (sl.n == 0 || sl.n > sl.raw || off > in->file_bytes ||
		    sl.len > in->file_bytes - off) {
			c->bad = true;
			break;
		}
		off += sl.len;
		rows += sl.n;
		raw += sl.raw;
		push_slice(p, &sl);
	}
	s->nslices = (uint32_t)(p->nslices - s->slice0);
	/* All rows, and no more bytes than one frame could hold before. */
	if (rows != s->nrows || (ns && k != last) || raw > BLOCK_MAX_CHUNK)
		c->bad = true;
}

/* A rollup's stack totals by time slice: frames anywhere in the file. */
static void load_rollup_slices(struct part *p, struct part_rollup *r, struct cursor *c,
			       const struct block_info *in)
{
	int64_t len = in->slice_ms, first = floor_div(in->min_ts, len), last = floor_div(in->max_ts, len);
	uint64_t ns = varint_get_max(c, MIN((uint64_t)(last - first + 1), cursor_left(c) / 12));
	int64_t k = 0;
	r->slice0 = (uint32_t)p->nslices;
	for (uint64_t i = 0; i < ns && !c->bad; i++) {
		if (i) {
			next_slice(c, &k, last);
		} else {
			k = unzigzag(varint_get(c));
			if (k < first || k > last) {
				c->bad = true;
				break;
			}
		}
		struct part_slice sl = { .from_ms = k * len };
		sl.off = varint_get_max(c, in->file_bytes);
		get_frame(c, &sl);
		sl.n = varint_get_max(c, p->nnodes);
		if (c->bad || sl.off < HEADER_LEN || sl.len > in->file_bytes - sl.off || sl.n > sl.raw) {
			c->bad = true;
			break;
		}
		push_slice(p, &sl);
	}
	r->nslices = (uint32_t)(p->nslices - r->slice0);
}

static int load_tables(struct part *p, int id, struct cursor *c, const struct block *b)
{
	const struct block_info *in = &b->info;
	uint64_t n;
	switch (id) {
	case SEC_LSTR:
		return load_strings(&p->lstr, c);
	case SEC_SSTR:
		return load_strings(&p->sstr, c);
	case SEC_FILES:
		n = varint_get_max(c, cursor_left(c) / 18);
		p->files = xcalloc(n ? n : 1, sizeof(*p->files));
		p->capfiles = n ? n : 1;
		for (uint64_t i = 0; i < n && !c->bad; i++) {
			struct store_file *f = &p->files[p->nfiles++];
			cursor_bytes(c, f->id.b, FILE_ID_LEN);
			f->name = (uint32_t)varint_get_max(c, strtab_count(&p->sstr) - 1);
			f->build_id_len = cursor_u8(c);
			if (f->build_id_len > sizeof(f->build_id))
				c->bad = true;
			else
				cursor_bytes(c, f->build_id, f->build_id_len);
			f->nsegs = cursor_u8(c);
			if (f->nsegs > STORE_FILE_SEGMENTS)
				c->bad = true;
			for (int s = 0; s < f->nsegs && !c->bad; s++)
				for (int k = 0; k < 3; k++)
					f->segs[s][k] = varint_get(c);
		}
		return c->bad ? -1 : 0;
	case SEC_FRAMES:
		n = varint_get_max(c, cursor_left(c) / 5);
		p->frames = xcalloc(n ? n : 1, sizeof(*p->frames));
		p->capframes = n ? n : 1;
		for (uint64_t i = 0; i < n && !c->bad; i++) {
			struct store_frame *f = &p->frames[p->nframes++];
			f->type = cursor_u8(c);
			f->file = (uint32_t)varint_get_max(c, p->nfiles);
			f->address = varint_get(c);
			f->name = (uint32_t)varint_get_max(c, strtab_count(&p->sstr) - 1);
			f->binary = (uint32_t)varint_get_max(c, strtab_count(&p->sstr) - 1);
			if (f->type == 0 || f->type > SFT_MAX)
				c->bad = true;
		}
		return c->bad ? -1 : 0;
	case SEC_NODES:
		n = varint_get_max(c, cursor_left(c) / 2);
		p->node_parent = xrealloc(p->node_parent, (n + 1) * sizeof(uint32_t));
		p->node_frame = xrealloc(p->node_frame, (n + 1) * sizeof(uint32_t));
		p->capnodes = n + 1;
		for (uint64_t i = 1; i <= n && !c->bad; i++) {
			uint64_t back = varint_get_max(c, i);
			p->node_parent[i] = (uint32_t)(i - back);
			p->node_frame[i] = (uint32_t)varint_get_max(c, p->nframes ? p->nframes - 1 : 0);
			if (back == 0 || !p->nframes)
				c->bad = true;
		}
		p->nnodes = n + 1;
		return c->bad ? -1 : 0;
	case SEC_LABELS:
		n = varint_get_max(c, cursor_left(c));
		p->label_off = xrealloc(p->label_off, (n + 1) * sizeof(uint32_t));
		p->caplabels = n + 1;
		p->label_off[0] = 0;
		for (uint64_t i = 0; i < n && !c->bad; i++) {
			uint64_t pairs = varint_get_max(c, cursor_left(c) / 2);
			xgrow((void **)&p->label_kv, &p->caplabel_kv, p->nlabel_kv + 2 * pairs,
			      sizeof(uint32_t));
			for (uint64_t j = 0; j < 2 * pairs; j++)
				p->label_kv[p->nlabel_kv++] =
					(uint32_t)varint_get_max(c, strtab_count(&p->lstr) - 1);
			p->label_off[++p->nlabels] = (uint32_t)p->nlabel_kv;
		}
		return c->bad ? -1 : 0;
	case SEC_SERIES:
		n = varint_get_max(c, cursor_left(c) / 10);
		p->series = xcalloc(n ? n : 1, sizeof(*p->series));
		p->capseries = n ? n : 1;
		for (uint64_t i = 0; i < n && !c->bad; i++) {
			struct part_series *s = &p->series[p->nseries++];
			s->project = (uint32_t)varint_get_max(c, strtab_count(&p->lstr) - 1);
			s->labels = (uint32_t)varint_get_max(c, p->nlabels ? p->nlabels - 1 : 0);
			s->kind = cursor_u8(c);
			s->hz = (uint16_t)varint_get_max(c, 65535);
			s->total = varint_get(c);
			s->nrows = varint_get(c);
			s->min_ts = unzigzag(varint_get(c));
			/* A series without rows has no time range (merges before
			 * 2026-12 wrote some, with 0 there); it is never read. */
			if (!s->nrows)
				s->min_ts = in->min_ts;
			if (s->min_ts < in->min_ts || s->min_ts > in->max_ts)
				s->min_ts = in->min_ts, c->bad = true; /* checked before any sum */
			s->max_ts = s->min_ts +
				    (int64_t)varint_get_max(c, (uint64_t)(in->max_ts - s->min_ts));
			s->nstacks = varint_get_max(c, s->nrows);
			if (b->version == BLOCK_VERSION_UNSLICED)
				load_frames_unsliced(p, s, c, in);
			else
				load_frames(p, s, c, in);
			if (!p->nlabels || s->kind == 0 || s->kind > SEK_ALLOC ||
			    s->stacks_off < HEADER_LEN || s->stacks_off > in->file_bytes ||
			    s->stacks_len + s->sums_len > in->file_bytes - s->stacks_off ||
			    s->nstacks > s->stacks_raw ||
			    !zstd_can_expand(s->stacks_len, s->stacks_raw) ||
			    !zstd_can_expand(s->sums_len, s->sums_raw) ||
			    (s->nrows && !s->nstacks) ||
			    (s->nrows && (s->min_ts < in->min_ts || s->max_ts > in->max_ts)))
				c->bad = true;
			p->rows += s->nrows;
			p->samples += s->total;
		}
		return c->bad ? -1 : 0;
	case SEC_MINUTES:
		for (size_t i = 0; i < p->nseries && !c->bad; i++) {
			struct part_series *s = &p->series[i];
			uint64_t m = varint_get_max(c, cursor_left(c) / 2);
			s->minutes = xcalloc(m ? m : 1, sizeof(*s->minutes));
			s->capminutes = m ? m : 1;
			/* Minutes lie within the block's time range. */
			int64_t lo = in->min_ts / 60000 - 1, hi = in->max_ts / 60000 + 1;
			int64_t mm = unzigzag(varint_get(c));
			if (mm < lo || mm > hi) {
				c->bad = true;
				break;
			}
			int64_t t = mm * 60000;
			for (uint64_t j = 0; j < m && !c->bad; j++) {
				if (j) {
					mm += (int64_t)varint_get_max(c, (uint64_t)(hi - mm));
					t = mm * 60000;
				}
				s->minutes[s->nminutes++] =
					(struct part_minute){ t, varint_get(c) };
			}
		}
		return c->bad ? -1 : 0;
	case SEC_HOSTS:
		n = varint_get_max(c, cursor_left(c) / 2);
		for (uint64_t i = 0; i < n && !c->bad; i++) {
			uint32_t name = (uint32_t)varint_get_max(c, strtab_count(&p->lstr) - 1);
			uint32_t cpus = (uint32_t)varint_get_max(c, UINT32_MAX);
			if (!c->bad)
				part_note_host(p, name, cpus);
		}
		return c->bad ? -1 : 0;
	case SEC_ROLLUPS:
		n = varint_get_max(c, MIN(cursor_left(c) / 4, 4096));
		for (uint64_t i = 0; i < n && !c->bad; i++) {
			uint32_t project = (uint32_t)varint_get_max(c, strtab_count(&p->lstr) - 1);
			uint8_t kind = cursor_u8(c);
			uint16_t hz = (uint16_t)varint_get_max(c, 65535);
			uint64_t m = varint_get_max(c, MIN(p->nnodes, cursor_left(c) / 2));
			if (c->bad || kind == 0 || kind > SEK_ALLOC) {
				c->bad = true;
				break;
			}
			struct part_rollup *r = part_rollup_get(p, project, kind, hz);
			if (r->n) {
				c->bad = true; /* the same group twice */
				break;
			}
			r->stacks = xmalloc((m + 1) * sizeof(uint32_t));
			r->sums = xmalloc((m + 1) * sizeof(uint64_t));
			uint32_t stack = 0;
			for (uint64_t j = 0; j < m && !c->bad; j++) {
				stack += (uint32_t)varint_get_max(c, p->nnodes);
				if (stack >= p->nnodes || (j && stack == r->stacks[j - 1]))
					c->bad = true;
				r->stacks[j] = stack;
			}
			for (uint64_t j = 0; j < m && !c->bad; j++)
				r->sums[j] = varint_get(c);
			r->n = c->bad ? 0 : m;
			if (b->version != BLOCK_VERSION_UNSLICED)
				load_rollup_slices(p, r, c, in);
		}
		return c->bad ? -1 : 0;
	}
	return -1;
}

int block_load(struct block *b, struct part *p, struct buf *err)
{
	part_init(p, b->info.granularity_ms);
	p->slice_ms = b->info.slice_ms;
	struct buf raw = { 0 };
	int rc = 0;
	for (int id = 1; id < SEC_COUNT && rc == 0; id++) {
		if (read_section(b, id, &raw, err) < 0) {
			rc = -1;
			break;
		}
		struct cursor c = { (const uint8_t *)raw.data, (const uint8_t *)raw.data + raw.len,
				    false };
		if (load_tables(p, id, &c, b) < 0 || cursor_left(&c) != 0) {
			buf_printf(err, "%s: section %d is malformed", b->path, id);
			rc = -1;
		}
	}
	buf_free(&raw);
	if (rc == 0) {
		p->min_ts = b->info.min_ts;
		p->max_ts = b->info.max_ts;
	} else {
		part_free(p);
	}
	return rc;
}

/* Reads one frame at z (already read from the file), checks its XXH64 and
 * decompresses it to exactly its raw length at out. */
static int open_frame(struct block *b, const uint8_t *z, uint64_t len, uint64_t raw,
		      uint64_t sum, uint8_t *out, struct buf *err)
{
	if (!SUM_OK(XXH64(z, len, 0), sum)) {
		buf_printf(err, "%s: a row chunk fails its checksum", b->path);
		return -1;
	}
	if (zstd_decompress_exact(z, len, out, raw) < 0) {
		buf_printf(err, "%s: a row chunk does not decompress", b->path);
		return -1;
	}
	return 0;
}

static int read_at(struct block *b, void *z, uint64_t len, uint64_t off, uint64_t *bytes_read,
		   struct buf *err)
{
	if (pread_all(b->fd, z, len, off) < 0) {
		buf_printf(err, "%s: reading rows: %s", b->path, strerror(errno));
		return -1;
	}
	*bytes_read += len;
	return 0;
}

/* What read_series gives, in scratch: the series' distinct stacks
 * (ascending) with their totals, and the rows of the slices asked for,
 * naming stacks by their index in dict. */
struct series_view {
	uint32_t *dict;
	uint64_t *sums;
	struct part_row *rows;
	size_t nrows;
};

/* A time range [r[0], r[1]). */
typedef int64_t range_t[2];

static bool slice_meets(const struct part *p, const struct part_series *s,
			const struct part_slice *sl, const range_t *ranges, size_t nranges)
{
	int64_t lo, hi;
	slice_bounds(p, s, sl, &lo, &hi);
	for (size_t i = 0; i < nranges; i++)
		if (lo < ranges[i][1] && hi > ranges[i][0])
			return true;
	return false;
}

/* Decodes one slice's rows frame: groups of one time, the first time
 * counted from the series' first. Every time must lie in the slice. */
static int decode_slice(const struct part *p, const struct part_series *s,
			const struct part_slice *sl, const uint8_t *raw, struct part_row *out)
{
	int64_t lo, hi;
	slice_bounds(p, s, sl, &lo, &hi);
	struct cursor c = { raw, raw + sl->raw, false };
	uint64_t groups = varint_get_max(&c, sl->n);
	int64_t ts = s->min_ts, g = p->granularity_ms;
	size_t n = 0;
	for (uint64_t i = 0; i < groups && !c.bad; i++) {
		ts += (int64_t)varint_get_max(&c, (uint64_t)(s->max_ts - ts) / (uint64_t)g) * g;
		uint64_t k = varint_get_max(&c, sl->n - n);
		if (ts < lo || ts >= hi)
			c.bad = true;
		uint64_t local = 0;
		for (uint64_t j = 0; j < k && !c.bad; j++) {
			local += varint_get_max(&c, s->nstacks);
			if (local >= s->nstacks) {
				c.bad = true;
				break;
			}
			/* The local index, until the caller maps it. */
			out[n + j] = (struct part_row){ .ts_ms = ts, .stack = (uint32_t)local };
		}
		for (uint64_t j = 0; j < k && !c.bad; j++)
			out[n + j].value = varint_get(&c);
		n += k;
	}
	if (c.bad || n != sl->n || cursor_left(&c) != 0)
		return -1;
	return 0;
}

/* What read_series reads besides rows. */
enum series_want {
	WANT_ROWS,   /* rows only: stacks as local indexes, dict and sums unset */
	WANT_STACKS, /* and the stack list (dict); sums unset */
	WANT_SUMS,   /* and the stacks' totals */
};

/* Reads series s: what `want` names, and the rows of every slice that
 * meets one of the ranges (none when nranges is 0). Adjacent frames are
 * read with one pread. */
static int read_series(struct block *b, const struct part *p, const struct part_series *s,
		       const range_t *ranges, size_t nranges, enum series_want want,
		       struct buf *scratch, struct series_view *v, uint64_t *bytes_read,
		       struct buf *err)
{
	const struct part_slice *sl = p->slices + s->slice0;
	/* The stack list and totals frames: the first, or both. */
	uint64_t head_len = want == WANT_ROWS ? 0 : s->stacks_len + (want == WANT_SUMS ? s->sums_len : 0);
	size_t nrows = 0, raw_rows = 0, zmax = head_len, run = 0;
	for (uint32_t i = 0; i < s->nslices; i++) {
		if (!slice_meets(p, s, &sl[i], ranges, nranges)) {
			run = 0;
			continue;
		}
		nrows += sl[i].n;
		raw_rows += sl[i].raw;
		run += sl[i].len;
		zmax = MAX(zmax, run);
	}
	size_t nstacks = want == WANT_ROWS ? 0 : s->nstacks;
	size_t rows_bytes = nrows * sizeof(struct part_row);
	size_t dict_bytes = (nstacks * sizeof(uint32_t) + 7) & ~(size_t)7;
	size_t sums_bytes = nstacks * sizeof(uint64_t);
	size_t raw_head = want == WANT_ROWS ? 0 : ((s->stacks_raw + s->sums_raw + 7) & ~(size_t)7);
	buf_reset(scratch);
	buf_reserve(scratch, rows_bytes + dict_bytes + sums_bytes + raw_head + raw_rows + zmax + 16);
	char *at = scratch->data;
	v->rows = (struct part_row *)at;
	v->nrows = nrows;
	v->dict = (uint32_t *)(at += rows_bytes);
	v->sums = (uint64_t *)(at += dict_bytes);
	uint8_t *rs = (uint8_t *)(at += sums_bytes);
	uint8_t *rr = rs + raw_head;
	uint8_t *z = rr + raw_rows;
	if (want != WANT_ROWS) {
		if (read_at(b, z, head_len, s->stacks_off, bytes_read, err) < 0 ||
		    open_frame(b, z, s->stacks_len, s->stacks_raw, s->stacks_sum, rs, err) < 0 ||
		    (want == WANT_SUMS && s->sums_len &&
		     open_frame(b, z + s->stacks_len, s->sums_len, s->sums_raw, s->sums_sum,
				rs + s->stacks_raw, err) < 0))
			return -1;
		/* Version 3: the totals follow the stacks in their frame. */
		size_t len = s->stacks_raw + (want == WANT_SUMS ? s->sums_raw : 0);
		struct cursor c = { rs, rs + len, false };
		uint32_t stack = 0;
		uint64_t total = 0;
		for (uint64_t i = 0; i < s->nstacks && !c.bad; i++) {
			stack += (uint32_t)varint_get_max(&c, p->nnodes);
			v->dict[i] = stack;
			if (stack >= p->nnodes || (i && stack == v->dict[i - 1]))
				c.bad = true;
		}
		if (s->sums_len && cursor_left(&c) != (want == WANT_SUMS ? s->sums_raw : 0))
			c.bad = true;
		for (uint64_t i = 0; want == WANT_SUMS && i < s->nstacks && !c.bad; i++) {
			v->sums[i] = varint_get(&c);
			total += v->sums[i];
		}
		if (c.bad || (want == WANT_SUMS && (cursor_left(&c) != 0 || total != s->total))) {
			buf_printf(err, "%s: a row chunk is malformed", b->path);
			return -1;
		}
	}
	size_t n = 0;
	for (uint32_t i = 0; i < s->nslices;) {
		if (!slice_meets(p, s, &sl[i], ranges, nranges)) {
			i++;
			continue;
		}
		uint32_t e = i;
		uint64_t len = 0;
		while (e < s->nslices && slice_meets(p, s, &sl[e], ranges, nranges))
			len += sl[e++].len;
		if (read_at(b, z, len, sl[i].off, bytes_read, err) < 0)
			return -1;
		for (const uint8_t *zi = z; i < e; zi += sl[i].len, rr += sl[i].raw, n += sl[i].n, i++) {
			if (open_frame(b, zi, sl[i].len, sl[i].raw, sl[i].sum, rr, err) < 0)
				return -1;
			if (decode_slice(p, s, &sl[i], rr, v->rows + n) < 0) {
				buf_printf(err, "%s: a row chunk is malformed", b->path);
				return -1;
			}
		}
	}
	return 0;
}

long block_rows(struct block *b, const struct part *p, const struct part_series *s,
		int64_t since_ms, struct buf *scratch, const struct part_row **rows,
		uint64_t *bytes_read, struct buf *err)
{
	range_t all = { since_ms, INT64_MAX };
	struct series_view v;
	if (read_series(b, p, s, &all, 1, WANT_STACKS, scratch, &v, bytes_read, err) < 0)
		return -1;
	for (size_t i = 0; i < v.nrows; i++)
		v.rows[i].stack = v.dict[v.rows[i].stack];
	*rows = v.rows;
	return (long)v.nrows;
}

long block_sums(struct block *b, const struct part *p, const struct part_series *s,
		int64_t from_ms, int64_t to_ms, struct buf *scratch, const uint32_t **stacks,
		const uint64_t **sums, uint64_t *rows_read, uint64_t *bytes_read, struct buf *err)
{
	bool inside = s->min_ts >= from_ms && s->max_ts < to_ms;
	range_t range = { from_ms, to_ms };
	struct series_view v;
	if (read_series(b, p, s, &range, inside ? 0 : 1, inside ? WANT_SUMS : WANT_STACKS, scratch, &v, bytes_read, err) < 0)
		return -1;
	if (!inside) {
		*rows_read += v.nrows;
		memset(v.sums, 0, s->nstacks * sizeof(uint64_t));
		for (size_t i = 0; i < v.nrows; i++)
			if (v.rows[i].ts_ms >= from_ms && v.rows[i].ts_ms < to_ms)
				v.sums[v.rows[i].stack] += v.rows[i].value;
	}
	size_t n = 0;
	for (size_t i = 0; i < s->nstacks; i++)
		if (v.sums[i]) {
			v.dict[n] = v.dict[i];
			v.sums[n++] = v.sums[i];
		}
	*stacks = v.dict;
	*sums = v.sums;
	return (long)n;
}

int64_t block_total(struct block *b, const struct part *p, const struct part_series *s,
		    int64_t from_ms, int64_t to_ms, struct buf *scratch, uint64_t *rows_read,
		    uint64_t *bytes_read, struct buf *err)
{
	range_t range = { from_ms, to_ms };
	struct series_view v;
	if (read_series(b, p, s, &range, 1, WANT_ROWS, scratch, &v, bytes_read, err) < 0)
		return -1;
	*rows_read += v.nrows;
	uint64_t sum = 0;
	for (size_t i = 0; i < v.nrows; i++)
		if (v.rows[i].ts_ms >= from_ms && v.rows[i].ts_ms < to_ms)
			sum += v.rows[i].value;
	return (int64_t)sum;
}

/* Adds one rollup slice's stack totals to the dense sums v. */
static int add_rollup_slice(struct block *b, const struct part *p, const struct part_slice *sl,
			    struct buf *scratch, uint64_t *v, uint64_t *bytes_read, struct buf *err)
{
	buf_reset(scratch);
	buf_reserve(scratch, sl->len + sl->raw + sl->n * sizeof(uint32_t) + 16);
	uint32_t *stacks = (uint32_t *)scratch->data;
	uint8_t *raw = (uint8_t *)(stacks + sl->n), *z = raw + sl->raw;
	if (read_at(b, z, sl->len, sl->off, bytes_read, err) < 0 ||
	    open_frame(b, z, sl->len, sl->raw, sl->sum, raw, err) < 0)
		return -1;
	struct cursor c = { raw, raw + sl->raw, false };
	uint32_t stack = 0;
	for (uint64_t i = 0; i < sl->n && !c.bad; i++) {
		stack += (uint32_t)varint_get_max(&c, p->nnodes);
		stacks[i] = stack;
		if (stack >= p->nnodes || (i && stack == stacks[i - 1]))
			c.bad = true;
	}
	for (uint64_t i = 0; i < sl->n && !c.bad; i++)
		v[stacks[i]] += varint_get(&c);
	if (c.bad || cursor_left(&c) != 0) {
		buf_printf(err, "%s: a rollup slice is malformed", b->path);
		return -1;
	}
	return 0;
}

long block_rollup_sums(struct block *b, const struct part *p, const struct part_rollup *r,
		       int64_t from_ms, int64_t to_ms, struct buf *scratch, struct buf *acc,
		       const uint32_t **stacks, const uint64_t **sums, struct block_read_stats *st,
		       struct buf *err)
{
	if (!r->nslices || !p->slice_ms) {
		buf_printf(err, "%s: no rollup slices", b->path);
		return -1;
	}
	buf_reset(acc);
	buf_reserve(acc, p->nnodes * sizeof(uint64_t) + 8);
	uint64_t *v = (uint64_t *)acc->data;
	memset(v, 0, p->nnodes * sizeof(uint64_t));
	/* Slices inside the range are read whole; the range cuts at most two
	 * (its ends), whose series' rows are read and cut to it. */
	range_t edge[2];
	size_t nedge = 0;
	const struct part_slice *rs = p->slices + r->slice0;
	for (uint32_t i = 0; i < r->nslices; i++) {
		int64_t lo = MAX(rs[i].from_ms, p->min_ts);
		int64_t hi = MIN(rs[i].from_ms + (int64_t)p->slice_ms, p->max_ts + 1);
		if (hi <= from_ms || lo >= to_ms)
			continue;
		if (lo >= from_ms && hi <= to_ms) {
			if (add_rollup_slice(b, p, &rs[i], scratch, v, &st->bytes_read, err) < 0)
				return -1;
			st->stack_sums_read += rs[i].n;
			continue;
		}
		if (nedge == 2) {
			buf_printf(err, "%s: rollup slices overlap", b->path);
			return -1;
		}
		edge[nedge][0] = MAX(lo, from_ms);
		edge[nedge++][1] = MIN(hi, to_ms);
	}
	for (size_t i = 0; i < p->nseries && nedge; i++) {
		const struct part_series *s = &p->series[i];
		if (s->project != r->project || s->kind != r->kind || s->hz != r->hz || !s->nrows ||
		    s->max_ts < edge[0][0] || s->min_ts >= edge[nedge - 1][1])
			continue;
		struct series_view sv;
		struct buf e = { 0 };
		if (read_series(b, p, s, edge, nedge, WANT_STACKS, scratch, &sv, &st->bytes_read, &e) < 0) {
			st->chunks_skipped++;
			if (!err->len)
				buf_puts(err, e.data);
			buf_free(&e);
			continue;
		}
		st->series_read++;
		st->rows_read += sv.nrows;
		for (size_t j = 0; j < sv.nrows; j++)
			if (sv.rows[j].ts_ms >= from_ms && sv.rows[j].ts_ms < to_ms)
				v[sv.dict[sv.rows[j].stack]] += sv.rows[j].value;
	}
	size_t n = 0;
	for (size_t i = 0; i < p->nnodes; i++)
		n += v[i] != 0;
	buf_reset(scratch);
	buf_reserve(scratch, n * (sizeof(uint32_t) + sizeof(uint64_t)) + 16);
	uint64_t *out_sums = (uint64_t *)scratch->data;
	uint32_t *out_stacks = (uint32_t *)(out_sums + n);
	n = 0;
	for (size_t i = 0; i < p->nnodes; i++)
		if (v[i]) {
			out_stacks[n] = (uint32_t)i;
			out_sums[n++] = v[i];
		}
	*stacks = out_stacks;
	*sums = out_sums;
	return (long)n;
}

/* --- writing ---------------------------------------------------------------- */

/* A rollup's sums in one time slice while a block is written: an open
 * addressing table keyed by stack id + 1 (0 = empty). */
struct slice_acc {
	uint32_t rollup;
	int64_t k; /* slice number: from_ms / BLOCK_SLICE_MS */
	uint32_t *keys;
	uint64_t *vals;
	size_t cap, n;
};

struct block_writer {
	int fd;
	char *tmp_path;
	uint64_t off;
	struct buf raw;
	uint32_t *dict, *local;
	uint64_t *sums, *keys;
	struct part_row *rtmp;
	size_t capdict, caplocal, capsums, capkeys, caprtmp;
	struct slice_acc *accs;
	size_t naccs, capaccs;
	/* One compression context for the block's many small frames (a
	 * context per frame costs its allocation and setup every time), and
	 * their bytes gathered into large writes. */
	ZSTD_CCtx *cctx;
	struct buf pending;
	struct section_ref sec[SEC_COUNT];
};

#define WRITE_AT_ONCE (1u << 20)

struct block_writer *block_writer_create(const char *tmp_path, struct buf *err)
{
	int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		buf_printf(err, "%s: %s", tmp_path, strerror(errno));
		return NULL;
	}
	uint8_t head[HEADER_LEN] = BLOCK_MAGIC;
	uint32_t v = BLOCK_VERSION;
	memcpy(head + 8, &v, 4);
	if (write_all(fd, head, HEADER_LEN) < 0) {
		buf_printf(err, "%s: %s", tmp_path, strerror(errno));
		close(fd);
		unlink(tmp_path);
		return NULL;
	}
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	if (!cctx) {
		buf_printf(err, "%s: no memory for a compression context", tmp_path);
		close(fd);
		unlink(tmp_path);
		return NULL;
	}
	struct block_writer *w = xcalloc(1, sizeof(*w));
	w->cctx = cctx;
	w->fd = fd;
	w->tmp_path = xstrdup(tmp_path);
	w->off = HEADER_LEN;
	return w;
}

static void writer_free(struct block_writer *w)
{
	for (size_t i = 0; i < w->naccs; i++) {
		free(w->accs[i].keys);
		free(w->accs[i].vals);
	}
	free(w->accs);
	ZSTD_freeCCtx(w->cctx);
	buf_free(&w->pending);
	close(w->fd);
	free(w->tmp_path);
	buf_free(&w->raw);
	free(w->dict);
	free(w->local);
	free(w->keys);
	free(w->rtmp);
	free(w->sums);
	free(w);
}

void block_writer_abort(struct block_writer *w)
{
	if (!w)
		return;
	unlink(w->tmp_path);
	writer_free(w);
}

/* Compresses w->raw and appends it to the file; returns its reference. */
static int flush_pending(struct block_writer *w, struct buf *err)
{
	if (write_all(w->fd, w->pending.data, w->pending.len) < 0) {
		buf_printf(err, "writing %s: %s", w->tmp_path, strerror(errno));
		return -1;
	}
	buf_reset(&w->pending);
	return 0;
}

static int emit(struct block_writer *w, struct section_ref *ref, struct buf *err)
{
	size_t bound = ZSTD_compressBound(w->raw.len);
	buf_reserve(&w->pending, bound);
	char *at = w->pending.data + w->pending.len;
	size_t len = ZSTD_compressCCtx(w->cctx, at, bound, w->raw.data ? w->raw.data : "",
				       w->raw.len, ZLEVEL);
	if (ZSTD_isError(len)) {
		buf_printf(err, "writing %s: zstd: %s", w->tmp_path, ZSTD_getErrorName(len));
		return -1;
	}
	*ref = (struct section_ref){ w->off, len, w->raw.len, XXH64(at, len, 0) };
	w->pending.len += len;
	w->off += len;
	return w->pending.len >= WRITE_AT_ONCE ? flush_pending(w, err) : 0;
}

static int cmp_row(const void *a, const void *b)
{
	const struct part_row *x = a, *y = b;
	if (x->ts_ms != y->ts_ms)
		return x->ts_ms < y->ts_ms ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static struct slice_acc *slice_acc_get(struct block_writer *w, uint32_t rollup, int64_t k)
{
	for (size_t i = w->naccs; i-- > 0;)
		if (w->accs[i].rollup == rollup && w->accs[i].k == k)
			return &w->accs[i];
	xgrow((void **)&w->accs, &w->capaccs, w->naccs + 1, sizeof(*w->accs));
	struct slice_acc *a = &w->accs[w->naccs++];
	*a = (struct slice_acc){ .rollup = rollup, .k = k, .cap = 1024 };
	a->keys = xcalloc(a->cap, sizeof(uint32_t));
	a->vals = xcalloc(a->cap, sizeof(uint64_t));
	return a;
}

static size_t slice_slot(const uint32_t *keys, size_t cap, uint32_t key)
{
	size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull >> 32) & (cap - 1);
	while (keys[i] && keys[i] != key)
		i = (i + 1) & (cap - 1);
	return i;
}

static void slice_acc_add(struct slice_acc *a, uint32_t stack, uint64_t value)
{
	if ((a->n + 1) * 4 > a->cap * 3) {
		size_t cap = a->cap * 2;
		uint32_t *keys = xcalloc(cap, sizeof(uint32_t));
		uint64_t *vals = xcalloc(cap, sizeof(uint64_t));
		for (size_t i = 0; i < a->cap; i++)
			if (a->keys[i]) {
				size_t j = slice_slot(keys, cap, a->keys[i]);
				keys[j] = a->keys[i];
				vals[j] = a->vals[i];
			}
		free(a->keys);
		free(a->vals);
		a->keys = keys;
		a->vals = vals;
		a->cap = cap;
	}
	size_t i = slice_slot(a->keys, a->cap, stack + 1);
	a->n += !a->keys[i];
	a->keys[i] = stack + 1;
	a->vals[i] += value;
}

/* Rows by (time, stack). A series' rows come in time order (an agent's
 * batches arrive in order, and a merge appends its sources' rows, which
 * lie in time order unless the sources overlap), so each run of one time
 * is put in stack order by a radix sort of (stack, index) keys; rows out
 * of time order (overlapping sources, late data) are sorted by qsort. */
static void sort_rows(struct block_writer *w, struct part_row *rows, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (rows[i].ts_ms < rows[i - 1].ts_ms) {
			xqsort(rows, n, sizeof(*rows), cmp_row);
			return;
		}
	for (size_t a = 0, b; a < n; a = b) {
		for (b = a + 1; b < n && rows[b].ts_ms == rows[a].ts_ms; b++)
			;
		size_t k = b - a, i = 1;
		while (i < k && rows[a + i - 1].stack <= rows[a + i].stack)
			i++;
		if (i >= k)
			continue; /* already in stack order (a block's own rows are) */
		xgrow((void **)&w->keys, &w->capkeys, 2 * k, sizeof(uint64_t));
		xgrow((void **)&w->rtmp, &w->caprtmp, k, sizeof(struct part_row));
		for (i = 0; i < k; i++)
			w->keys[i] = (uint64_t)rows[a + i].stack << 32 | i;
		sort_u64_by_high(w->keys, k, w->keys + k);
		for (i = 0; i < k; i++)
			w->rtmp[i] = rows[a + (uint32_t)w->keys[i]];
		memcpy(rows + a, w->rtmp, k * sizeof(*rows));
	}
}

int block_writer_chunk(struct block_writer *w, struct part *dst, uint32_t series,
		       struct part_row *rows, size_t n, struct buf *err)
{
	struct part_series *s = &dst->series[series];
	int64_t g = dst->granularity_ms;
	for (size_t i = 0; i < n; i++)
		rows[i].ts_ms = floor_to(rows[i].ts_ms, g);
	sort_rows(w, rows, n);
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (m && rows[m - 1].ts_ms == rows[i].ts_ms && rows[m - 1].stack == rows[i].stack)
			rows[m - 1].value += rows[i].value;
		else
			rows[m++] = rows[i];
	}
	s->nrows = m;
	s->total = 0;
	s->nminutes = 0;
	s->min_ts = m ? rows[0].ts_ms : 0;
	s->max_ts = m ? rows[m - 1].ts_ms : 0;
	/* The series' distinct stacks, ascending, with their totals: the
	 * first frame, all a query over the whole series needs. Rows name
	 * stacks by their index in this list, which keeps them small. */
	xgrow((void **)&w->dict, &w->capdict, m + 1, sizeof(uint32_t));
	xgrow((void **)&w->keys, &w->capkeys, 2 * m + 2, sizeof(uint64_t));
	for (size_t i = 0; i < m; i++)
		w->keys[i] = (uint64_t)rows[i].stack << 32;
	sort_u64_by_high(w->keys, m, w->keys + m);
	for (size_t i = 0; i < m; i++)
		w->dict[i] = (uint32_t)(w->keys[i] >> 32);
	size_t ndict = 0;
	for (size_t i = 0; i < m; i++)
		if (!ndict || w->dict[ndict - 1] != w->dict[i])
			w->dict[ndict++] = w->dict[i];
	xgrow((void **)&w->sums, &w->capsums, ndict + 1, sizeof(uint64_t));
	memset(w->sums, 0, (ndict + 1) * sizeof(uint64_t));
	/* Rows in (time, stack) order; local index by a moving search. */
	xgrow((void **)&w->local, &w->caplocal, m + 1, sizeof(uint32_t));
	for (size_t i = 0; i < m; i++) {
		size_t lo = i && rows[i].ts_ms == rows[i - 1].ts_ms ? w->local[i - 1] : 0, hi = ndict;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (w->dict[mid] < rows[i].stack)
				lo = mid + 1;
			else
				hi = mid;
		}
		w->local[i] = (uint32_t)lo;
		w->sums[lo] += rows[i].value;
	}
	buf_reset(&w->raw);
	uint32_t prev_stack = 0;
	for (size_t i = 0; i < ndict; i++) {
		varint_put(&w->raw, w->dict[i] - prev_stack);
		prev_stack = w->dict[i];
	}
	struct section_ref stacks, sums;
	if (emit(w, &stacks, err) < 0)
		return -1;
	buf_reset(&w->raw);
	for (size_t i = 0; i < ndict; i++)
		varint_put(&w->raw, w->sums[i]);
	if (emit(w, &sums, err) < 0)
		return -1;
	/* And into the rollup of its (project, kind, rate). */
	struct part_rollup *ru = part_rollup_get(dst, s->project, s->kind, s->hz);
	if (ru->capacc < dst->nnodes) {
		size_t old = ru->capacc;
		xgrow((void **)&ru->acc, &ru->capacc, dst->nnodes, sizeof(uint64_t));
		memset(ru->acc + old, 0, (ru->capacc - old) * sizeof(uint64_t));
	}
	for (size_t i = 0; i < ndict; i++)
		ru->acc[w->dict[i]] += w->sums[i];
	/* Then the rows, one frame per time slice: groups of one time each:
	 * time (from the series' first, in granularity units), count, local
	 * index deltas, values. */
	s->nstacks = ndict;
	s->stacks_off = stacks.off;
	s->stacks_len = stacks.len;
	s->stacks_raw = stacks.raw;
	s->stacks_sum = stacks.sum;
	s->sums_len = sums.len;
	s->sums_raw = sums.raw;
	s->sums_sum = sums.sum;
	s->slice0 = (uint32_t)dst->nslices;
	for (size_t i = 0; i < m;) {
		int64_t k = floor_div(rows[i].ts_ms, BLOCK_SLICE_MS);
		size_t e = i, groups = 0;
		for (; e < m && floor_div(rows[e].ts_ms, BLOCK_SLICE_MS) == k; e++)
			if (e == i || rows[e].ts_ms != rows[e - 1].ts_ms)
				groups++;
		struct slice_acc *acc = slice_acc_get(w, (uint32_t)(ru - dst->rollups), k);
		buf_reset(&w->raw);
		varint_put(&w->raw, groups);
		int64_t prev = s->min_ts;
		for (size_t j0 = i; j0 < e;) {
			size_t j = j0;
			while (j < e && rows[j].ts_ms == rows[j0].ts_ms)
				j++;
			varint_put(&w->raw, (uint64_t)((rows[j0].ts_ms - prev) / g));
			prev = rows[j0].ts_ms;
			varint_put(&w->raw, j - j0);
			uint32_t last = 0;
			for (size_t q = j0; q < j; q++) {
				varint_put(&w->raw, w->local[q] - last);
				last = w->local[q];
			}
			for (size_t q = j0; q < j; q++) {
				varint_put(&w->raw, rows[q].value);
				s->total += rows[q].value;
				part_add_minute(s, floor_to(rows[q].ts_ms, 60000), rows[q].value);
				slice_acc_add(acc, w->dict[w->local[q]], rows[q].value);
			}
			j0 = j;
		}
		struct section_ref ref;
		if (emit(w, &ref, err) < 0)
			return -1;
		struct part_slice sl = { k * BLOCK_SLICE_MS, ref.off, ref.len, ref.raw, ref.sum, e - i };
		push_slice(dst, &sl);
		i = e;
	}
	s->nslices = (uint32_t)(dst->nslices - s->slice0);
	return 0;
}

static void enc_strings(struct buf *b, const struct strtab *t)
{
	varint_put(b, strtab_count(t) - 1);
	for (uint32_t i = 1; i < strtab_count(t); i++) {
		varint_put(b, strtab_len(t, i));
		buf_append(b, strtab_get(t, i), strtab_len(t, i));
	}
}

static void enc_section(struct buf *b, const struct part *p, int id)
{
	switch (id) {
	case SEC_LSTR:
		enc_strings(b, &p->lstr);
		break;
	case SEC_SSTR:
		enc_strings(b, &p->sstr);
		break;
	case SEC_FILES:
		varint_put(b, p->nfiles);
		for (size_t i = 0; i < p->nfiles; i++) {
			const struct store_file *f = &p->files[i];
			buf_append(b, f->id.b, FILE_ID_LEN);
			varint_put(b, f->name);
			buf_putc(b, (char)f->build_id_len);
			buf_append(b, f->build_id, f->build_id_len);
			buf_putc(b, (char)f->nsegs);
			for (int s = 0; s < f->nsegs; s++)
				for (int k = 0; k < 3; k++)
					varint_put(b, f->segs[s][k]);
		}
		break;
	case SEC_FRAMES:
		varint_put(b, p->nframes);
		for (size_t i = 0; i < p->nframes; i++) {
			const struct store_frame *f = &p->frames[i];
			buf_putc(b, (char)f->type);
			varint_put(b, f->file);
			varint_put(b, f->address);
			varint_put(b, f->name);
			varint_put(b, f->binary);
		}
		break;
	case SEC_NODES:
		varint_put(b, p->nnodes - 1);
		for (size_t i = 1; i < p->nnodes; i++) {
			varint_put(b, i - p->node_parent[i]);
			varint_put(b, p->node_frame[i]);
		}
		break;
	case SEC_LABELS:
		varint_put(b, p->nlabels);
		for (size_t i = 0; i < p->nlabels; i++) {
			uint32_t a = p->label_off[i], e = p->label_off[i + 1];
			varint_put(b, (e - a) / 2);
			for (uint32_t j = a; j < e; j++)
				varint_put(b, p->label_kv[j]);
		}
		break;
	case SEC_SERIES:
		varint_put(b, p->nseries);
		for (size_t i = 0; i < p->nseries; i++) {
			const struct part_series *s = &p->series[i];
			varint_put(b, s->project);
			varint_put(b, s->labels);
			buf_putc(b, (char)s->kind);
			varint_put(b, s->hz);
			varint_put(b, s->total);
			varint_put(b, s->nrows);
			varint_put(b, zigzag(s->min_ts));
			varint_put(b, (uint64_t)(s->max_ts - s->min_ts));
			varint_put(b, s->nstacks);
			varint_put(b, s->stacks_off);
			varint_put(b, s->stacks_len);
			varint_put(b, s->stacks_raw);
			buf_append(b, &s->stacks_sum, 8);
			varint_put(b, s->sums_len);
			varint_put(b, s->sums_raw);
			buf_append(b, &s->sums_sum, 8);
			varint_put(b, s->nslices);
			const struct part_slice *sl = p->slices + s->slice0;
			for (uint32_t j = 0; j < s->nslices; j++) {
				if (j)
					varint_put(b, (uint64_t)((sl[j].from_ms - sl[j - 1].from_ms) /
								 (int64_t)p->slice_ms));
				varint_put(b, sl[j].n);
				varint_put(b, sl[j].len);
				varint_put(b, sl[j].raw);
				buf_append(b, &sl[j].sum, 8);
			}
		}
		break;
	case SEC_MINUTES:
		for (size_t i = 0; i < p->nseries; i++) {
			const struct part_series *s = &p->series[i];
			varint_put(b, s->nminutes);
			int64_t prev = s->nminutes ? s->minutes[0].minute_ms : 0;
			varint_put(b, zigzag(prev / 60000));
			for (size_t j = 0; j < s->nminutes; j++) {
				if (j)
					varint_put(b, (uint64_t)((s->minutes[j].minute_ms - prev) / 60000));
				prev = s->minutes[j].minute_ms;
				varint_put(b, s->minutes[j].value);
			}
		}
		break;
	case SEC_HOSTS:
		varint_put(b, p->nhosts);
		for (size_t i = 0; i < p->nhosts; i++) {
			varint_put(b, p->hosts[i].name);
			varint_put(b, p->hosts[i].cpus);
		}
		break;
	case SEC_ROLLUPS:
		varint_put(b, p->nrollups);
		for (size_t i = 0; i < p->nrollups; i++) {
			const struct part_rollup *r = &p->rollups[i];
			varint_put(b, r->project);
			buf_putc(b, (char)r->kind);
			varint_put(b, r->hz);
			varint_put(b, r->n);
			uint32_t prev = 0;
			for (size_t j = 0; j < r->n; j++) {
				varint_put(b, r->stacks[j] - prev);
				prev = r->stacks[j];
			}
			for (size_t j = 0; j < r->n; j++)
				varint_put(b, r->sums[j]);
			varint_put(b, r->nslices);
			const struct part_slice *sl = p->slices + r->slice0;
			for (uint32_t j = 0; j < r->nslices; j++) {
				if (j)
					varint_put(b, (uint64_t)((sl[j].from_ms - sl[j - 1].from_ms) /
								 (int64_t)p->slice_ms));
				else
					varint_put(b, zigzag(sl[j].from_ms / (int64_t)p->slice_ms));
				varint_put(b, sl[j].off);
				varint_put(b, sl[j].len);
				varint_put(b, sl[j].raw);
				buf_append(b, &sl[j].sum, 8);
				varint_put(b, sl[j].n);
			}
		}
		break;
	}
}

static int cmp_acc(const void *a, const void *b)
{
	const struct slice_acc *x = a, *y = b;
	if (x->rollup != y->rollup)
		return x->rollup < y->rollup ? -1 : 1;
	return x->k < y->k ? -1 : x->k > y->k;
}

/* Writes each rollup's slices: the stacks of each, ascending (gathered
 * through a dense array of the part's nodes), and their sums. */
static int write_rollup_slices(struct block_writer *w, struct part *p, struct buf *err)
{
	xqsort(w->accs, w->naccs, sizeof(*w->accs), cmp_acc);
	uint64_t *dense = xcalloc(p->nnodes + 1, sizeof(uint64_t));
	int rc = 0;
	for (size_t i = 0; i < w->naccs && rc == 0; i++) {
		struct slice_acc *a = &w->accs[i];
		struct part_rollup *r = &p->rollups[a->rollup];
		if (!r->nslices)
			r->slice0 = (uint32_t)p->nslices;
		uint32_t lo = UINT32_MAX, hi = 0;
		for (size_t j = 0; j < a->cap; j++)
			if (a->keys[j] && a->vals[j]) {
				uint32_t stack = a->keys[j] - 1;
				dense[stack] += a->vals[j];
				lo = MIN(lo, stack);
				hi = MAX(hi, stack);
			}
		buf_reset(&w->raw);
		uint64_t n = 0;
		uint32_t prev = 0;
		for (uint32_t j = lo; lo <= hi && j <= hi; j++)
			if (dense[j]) {
				varint_put(&w->raw, j - prev);
				prev = j;
				n++;
			}
		for (uint32_t j = lo; lo <= hi && j <= hi; j++)
			if (dense[j]) {
				varint_put(&w->raw, dense[j]);
				dense[j] = 0;
			}
		struct section_ref ref;
		if (!n)
			continue;
		if (emit(w, &ref, err) < 0) {
			rc = -1;
			break;
		}
		struct part_slice sl = { a->k * BLOCK_SLICE_MS, ref.off, ref.len, ref.raw, ref.sum, n };
		push_slice(p, &sl);
		r->nslices++;
	}
	free(dense);
	return rc;
}

/* Turns the dense sums gathered while writing chunks into the sorted
 * stack lists that are written and queried. */
static void finish_rollups(struct part *p)
{
	for (size_t i = 0; i < p->nrollups; i++) {
		struct part_rollup *r = &p->rollups[i];
		size_t n = 0;
		for (size_t j = 0; j < r->capacc; j++)
			n += r->acc[j] != 0;
		free(r->stacks);
		free(r->sums);
		r->stacks = xmalloc((n + 1) * sizeof(uint32_t));
		r->sums = xmalloc((n + 1) * sizeof(uint64_t));
		r->n = 0;
		for (size_t j = 0; j < r->capacc; j++)
			if (r->acc[j]) {
				r->stacks[r->n] = (uint32_t)j;
				r->sums[r->n++] = r->acc[j];
			}
		free(r->acc);
		r->acc = NULL;
		r->capacc = 0;
	}
}

static int fsync_dir_of(const char *path)
{
	char *copy = xstrdup(path);
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

int block_writer_finish(struct block_writer *w, struct part *dst,
			const struct block_meta *meta, const char *final_path, struct buf *err)
{
	dst->slice_ms = BLOCK_SLICE_MS;
	finish_rollups(dst);
	if (write_rollup_slices(w, dst, err) < 0) {
		block_writer_abort(w);
		return -1;
	}
	for (int id = 1; id < SEC_COUNT; id++) {
		buf_reset(&w->raw);
		enc_section(&w->raw, dst, id);
		if (emit(w, &w->sec[id], err) < 0) {
			block_writer_abort(w);
			return -1;
		}
	}
	int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
	uint64_t rows = 0, samples = 0;
	for (size_t i = 0; i < dst->nseries; i++) {
		const struct part_series *s = &dst->series[i];
		if (!s->nrows)
			continue;
		min_ts = MIN(min_ts, s->min_ts);
		max_ts = MAX(max_ts, s->max_ts);
		rows += s->nrows;
		samples += s->total;
	}
	if (min_ts > max_ts)
		min_ts = max_ts = meta->partition_ms;
	struct buf f = { 0 };
	put_u32(&f, SEC_COUNT - 1);
	for (int id = 1; id < SEC_COUNT; id++) {
		put_u32(&f, (uint32_t)id);
		put_u64(&f, w->sec[id].off);
		put_u64(&f, w->sec[id].len);
		put_u64(&f, w->sec[id].raw);
		put_u64(&f, w->sec[id].sum);
	}
	put_u64(&f, (uint64_t)meta->partition_ms);
	put_u64(&f, (uint64_t)min_ts);
	put_u64(&f, (uint64_t)max_ts);
	put_u32(&f, dst->granularity_ms);
	put_u32(&f, dst->slice_ms);
	put_u32(&f, meta->level);
	put_u64(&f, rows);
	put_u64(&f, samples);
	put_u64(&f, dst->nseries);
	put_u64(&f, meta->gen);
	put_u64(&f, meta->wal_lo);
	put_u64(&f, meta->wal_hi);
	put_u32(&f, (uint32_t)meta->nsources);
	for (size_t i = 0; i < meta->nsources; i++)
		put_u64(&f, meta->sources[i]);
	varint_put(&f, dst->nagents);
	for (size_t i = 0; i < dst->nagents; i++) {
		uint32_t id = dst->agents[i].instance;
		varint_put(&f, strtab_len(&dst->lstr, id));
		buf_append(&f, strtab_get(&dst->lstr, id), strtab_len(&dst->lstr, id));
		varint_put(&f, dst->agents[i].seq);
	}
	uint64_t flen = f.len;
	put_u64(&f, flen);
	put_u64(&f, XXH64(f.data, flen, 0));
	buf_append(&f, BLOCK_END, 8);
	int rc = -1;
	buf_append(&w->pending, f.data, f.len);
	bool written = flush_pending(w, err) == 0;
	if (written && fsync(w->fd) < 0) {
		buf_printf(err, "writing %s: %s", w->tmp_path, strerror(errno));
		written = false;
	}
	if (!written) {
		/* err says why */
	} else if (rename(w->tmp_path, final_path) < 0) {
		buf_printf(err, "renaming %s: %s", w->tmp_path, strerror(errno));
	} else if (fsync_dir_of(final_path) < 0) {
		buf_printf(err, "syncing the directory of %s: %s", final_path, strerror(errno));
		rc = 0; /* the block is in place; only its directory entry may lag */
	} else {
		rc = 0;
	}
	buf_free(&f);
	if (rc == 0)
		writer_free(w);
	else
		block_writer_abort(w);
	return rc;
}
