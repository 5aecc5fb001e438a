/* block_write.c - writing a block; see block.h. */
#include "block_int.h"


#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "sort.h"
#include "util.h"


static void put_u32(struct buf *b, uint32_t v)
{
	buf_append(b, &v, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
	buf_append(b, &v, 8);
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
	struct store_row *rtmp;
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
	if (write_exact(fd, head, HEADER_LEN) < 0) {
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
		free_all(w->accs[i].keys, w->accs[i].vals);
	}
	free(w->accs);
	ZSTD_freeCCtx(w->cctx);
	buf_free(&w->pending);
	close(w->fd);
	free(w->tmp_path);
	buf_free(&w->raw);
	free_all(w->dict, w->local, w->keys, w->rtmp, w->sums, w);
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
	if (write_exact(w->fd, w->pending.data, w->pending.len) < 0) {
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
	const struct store_row *x = a, *y = b;
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
		free_all(a->keys, a->vals);
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
static void sort_rows(struct block_writer *w, struct store_row *rows, size_t n)
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
		xgrow((void **)&w->rtmp, &w->caprtmp, k, sizeof(struct store_row));
		for (i = 0; i < k; i++)
			w->keys[i] = (uint64_t)rows[a + i].stack << 32 | i;
		sort_u64_by_high(w->keys, k, w->keys + k);
		for (i = 0; i < k; i++)
			w->rtmp[i] = rows[a + (uint32_t)w->keys[i]];
		memcpy(rows + a, w->rtmp, k * sizeof(*rows));
	}
}

int block_writer_chunk(struct block_writer *w, struct part *dst, uint32_t series,
		       struct store_row *rows, size_t n, struct buf *err)
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
		block_push_slice(dst, &sl);
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
		block_push_slice(p, &sl);
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
		free_all(r->stacks, r->sums);
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
