/* block_read.c - loading a block's dictionaries and rows; see block.h. */
#include "block_int.h"


#include <errno.h>
#include <xxhash.h>

#include "compress.h"
#include "util.h"

/* --- loading the dictionaries ---------------------------------------------------- */

/* Reads, checks and decompresses one section into raw. */
static int read_section(struct block *b, int id, struct buf *raw, struct buf *err)
{
	const struct section_ref *r = &b->sec[id];
	char *z = xmalloc(r->len ? r->len : 1);
	int rc = -1;
	if (pread_exact(b->fd, z, r->len, r->off) < 0) {
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

void block_push_slice(struct part *p, const struct part_slice *sl)
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
	block_push_slice(p, &sl);
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
		block_push_slice(p, &sl);
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
		block_push_slice(p, &sl);
	}
	r->nslices = (uint32_t)(p->nslices - r->slice0);
}

/* A section's table: its count (bounded by the bytes left, each item
 * taking at least min_bytes) into *n, and an array of that many zeroed
 * items of elem bytes (one at least), its capacity in *cap. */
static void *table_of(struct cursor *c, uint64_t min_bytes, size_t elem, size_t *cap, uint64_t *n)
{
	*n = varint_get_max(c, cursor_left(c) / min_bytes);
	*cap = *n ? *n : 1;
	return xcalloc(*cap, elem);
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
		p->files = table_of(c, 18, sizeof(*p->files), &p->capfiles, &n);
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
		p->frames = table_of(c, 5, sizeof(*p->frames), &p->capframes, &n);
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
		p->series = table_of(c, 10, sizeof(*p->series), &p->capseries, &n);
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
			uint64_t m;
			s->minutes = table_of(c, 2, sizeof(*s->minutes), &s->capminutes, &m);
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
					(struct store_minute){ t, varint_get(c) };
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
	if (pread_exact(b->fd, z, len, off) < 0) {
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
	struct store_row *rows;
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
			const struct part_slice *sl, const uint8_t *raw, struct store_row *out)
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
			out[n + j] = (struct store_row){ .ts_ms = ts, .stack = (uint32_t)local };
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
	size_t rows_bytes = nrows * sizeof(struct store_row);
	size_t dict_bytes = (nstacks * sizeof(uint32_t) + 7) & ~(size_t)7;
	size_t sums_bytes = nstacks * sizeof(uint64_t);
	size_t raw_head = want == WANT_ROWS ? 0 : ((s->stacks_raw + s->sums_raw + 7) & ~(size_t)7);
	buf_reset(scratch);
	buf_reserve(scratch, rows_bytes + dict_bytes + sums_bytes + raw_head + raw_rows + zmax + 16);
	char *at = scratch->data;
	v->rows = (struct store_row *)at;
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
		int64_t since_ms, struct buf *scratch, const struct store_row **rows,
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
