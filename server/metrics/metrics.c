/* metrics.c - see metrics.h. */
#include "metrics.h"

#include <endian.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/query/cel.h"
#include "compress.h"
#include "jsonw.h"
#include "log.h"
#include "server/ingest/pbarena.h"
#include "server/query/request.h"
#include "server/query/scan.h"
#include "hmap.h"
#include "metadb.h"
#include "util.h"

/* Times outside 2000-01-01 .. 2100-01-01 are refused. */
#define MIN_TS_MS 946684800000LL
#define MAX_TS_MS 4102444800000LL

struct metrics_store {
	int64_t retention_ms;
	pthread_mutex_t wmu, rmu;
	struct metadb *w, *r; /* the writer's connection, the readers' */
	struct metadb_stmt *find_series, *add_series, *touch_series, *get_chunk, *put_chunk;
	bool postgres;
	int64_t last_retention_ms;
	struct metrics_stats stats; /* under wmu */
};

void metrics_close(struct metrics_store *m)
{
	if (!m)
		return;
	metadb_finalize(m->find_series);
	metadb_finalize(m->add_series);
	metadb_finalize(m->touch_series);
	metadb_finalize(m->get_chunk);
	metadb_finalize(m->put_chunk);
	metadb_close(m->r); /* NULL: nothing */
	metadb_close(m->w);
	pthread_mutex_destroy(&m->wmu);
	pthread_mutex_destroy(&m->rmu);
	free(m);
}

/* --- decoding ------------------------------------------------------------------ */

Ember__Ingest__V1__MetricsBatch *metrics_decode(const void *zbody, size_t len, struct buf *err)
{
	if (len > MET_MAX_COMPRESSED) {
		buf_printf(err, "metrics batch larger than %u bytes", MET_MAX_COMPRESSED);
		return NULL;
	}
	struct buf raw = { 0 };
	int rc = zstd_decompress_bounded(zbody, len, MET_MAX_DECOMPRESSED, &raw);
	if (rc < 0) {
		if (rc == -2)
			buf_printf(err, "metrics batch decompresses to more than %u bytes", MET_MAX_DECOMPRESSED);
		else
			buf_puts(err, "body is not a valid zstd frame");
		buf_free(&raw);
		return NULL;
	}
	Ember__Ingest__V1__MetricsBatch *b = (Ember__Ingest__V1__MetricsBatch *)pb_unpack(
		&ember__ingest__v1__metrics_batch__descriptor, raw.data ? raw.data : "", raw.len, err);
	buf_free(&raw);
	if (b && metrics_validate(b, err) < 0) {
		pb_free(b);
		return NULL;
	}
	return b;
}

void metrics_decode_free(Ember__Ingest__V1__MetricsBatch *b)
{
	if (b)
		pb_free(b);
}

int metrics_validate(const Ember__Ingest__V1__MetricsBatch *b, struct buf *err)
{
	size_t pl = b->project ? strlen(b->project) : 0;
	if (!pl || pl > 128 || strpbrk(b->project, " \t\r\n/") || !str_printable(b->project, pl)) {
		buf_puts(err, "project: expected a name of 1 to 128 printable characters without spaces or '/'");
		return -1;
	}
	if (b->start_unix_ms > b->end_unix_ms || b->end_unix_ms < MIN_TS_MS || b->end_unix_ms > MAX_TS_MS) {
		buf_puts(err, "start_unix_ms/end_unix_ms: expected an interval between 2000 and 2100");
		return -1;
	}
	if (b->n_strings == 0 || b->n_strings > MET_MAX_STRINGS || b->strings[0][0] != '\0') {
		buf_printf(err, "strings: expected 1 to %d strings, the first empty", MET_MAX_STRINGS);
		return -1;
	}
	for (size_t i = 0; i < b->n_strings; i++) {
		size_t n = strlen(b->strings[i]);
		if (n > MET_MAX_STRING || !str_printable(b->strings[i], n)) {
			buf_printf(err, "strings[%zu]: longer than %d bytes or not printable", i, MET_MAX_STRING);
			return -1;
		}
	}
	if (b->n_label_set_lengths > MET_MAX_LABEL_SETS) {
		buf_printf(err, "label_set_lengths: more than %d label sets", MET_MAX_LABEL_SETS);
		return -1;
	}
	size_t total = 0;
	for (size_t i = 0; i < b->n_label_set_lengths; i++) {
		uint32_t l = b->label_set_lengths[i];
		if (l % 2 || l > 2 * MET_MAX_LABELS) {
			buf_printf(err, "label_set_lengths[%zu]: expected an even count of at most %d", i,
				   2 * MET_MAX_LABELS);
			return -1;
		}
		size_t at = total;
		total += l;
		if (total > b->n_label_set_strings)
			break;
		for (uint32_t k = 0; k < l; k++) {
			uint32_t id = b->label_set_strings[at + k];
			if (id >= b->n_strings || (k % 2 == 0 && id == 0)) {
				buf_printf(err, "label set %zu: string id out of range or empty key", i);
				return -1;
			}
			for (uint32_t j = 0; k % 2 == 0 && j < k; j += 2)
				if (strcmp(b->strings[b->label_set_strings[at + j]], b->strings[id]) == 0) {
					buf_printf(err, "label set %zu: key \"%s\" twice", i, b->strings[id]);
					return -1;
				}
		}
	}
	if (total != b->n_label_set_strings) {
		buf_puts(err, "label_set_strings: the lengths do not add up to the strings given");
		return -1;
	}
	size_t ns = b->n_series_names;
	if (ns > MET_MAX_SERIES || b->n_series_units != ns || b->n_series_label_sets != ns) {
		buf_printf(err, "series: expected at most %d, as many names, units and label sets",
			   MET_MAX_SERIES);
		return -1;
	}
	for (size_t i = 0; i < ns; i++)
		if (b->series_names[i] == 0 || b->series_names[i] >= b->n_strings ||
		    strlen(b->strings[b->series_names[i]]) > 255 || b->series_units[i] >= b->n_strings ||
		    b->series_label_sets[i] >= b->n_label_set_lengths) {
			buf_printf(err, "series[%zu]: name (1 to 255 bytes), unit or label set out of range", i);
			return -1;
		}
	size_t np = b->n_point_series;
	if (np > MET_MAX_POINTS || b->n_point_times_ms != np || b->n_point_values != np) {
		buf_printf(err, "points: expected at most %d, as many times and values", MET_MAX_POINTS);
		return -1;
	}
	for (size_t i = 0; i < np; i++)
		if (b->point_series[i] >= ns || b->point_times_ms[i] < MIN_TS_MS ||
		    b->point_times_ms[i] > MAX_TS_MS || !isfinite(b->point_values[i])) {
			buf_printf(err, "points[%zu]: series out of range, time outside 2000..2100 or value not finite", i);
			return -1;
		}
	return 0;
}

/* --- storing ------------------------------------------------------------------- */

/* Version 1 is the schema every metrics.db had before schema_version: its
 * DDL is idempotent. */
static const char metrics_ddl[] =
	"CREATE TABLE IF NOT EXISTS series ("
	" id {serial}, project TEXT NOT NULL, name TEXT NOT NULL,"
	" labels TEXT NOT NULL, unit TEXT NOT NULL,"
	" first_ms {int} NOT NULL, last_ms {int} NOT NULL,"
	" UNIQUE(project, name, labels));"
	"CREATE TABLE IF NOT EXISTS chunks ("
	" series {int} NOT NULL, start_ms {int} NOT NULL, data {blob} NOT NULL,"
	" PRIMARY KEY(series, start_ms));";

int metrics_open(const char *url, const char *password, int64_t retention_ms,
		 struct metrics_store **out, struct buf *err)
{
	struct metrics_store *m = xcalloc(1, sizeof(*m));
	pthread_mutex_init(&m->wmu, NULL);
	pthread_mutex_init(&m->rmu, NULL);
	m->retention_ms = retention_ms;
	int rc = metadb_open_schema(url, password, "metrics", 1, metrics_ddl, &m->w, err);
	if (rc == 0)
		rc = metadb_open(url, password, &m->r, err);
	m->postgres = rc == 0 && metadb_dialect(m->w) == METADB_POSTGRES;
	if (rc == 0)
		rc = metadb_prepare(m->w, "SELECT id FROM series WHERE project = ? AND name = ? AND labels = ?",
				    &m->find_series, err);
	/* ON CONFLICT: another replica may add the series at the same time */
	if (rc == 0)
		rc = metadb_prepare(m->w, "INSERT INTO series(project, name, labels, unit, first_ms, last_ms) "
				    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(project, name, labels) DO NOTHING "
				    "RETURNING id", &m->add_series, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "UPDATE series SET unit = ?2, "
				    "first_ms = CASE WHEN first_ms < ?3 THEN first_ms ELSE ?3 END, "
				    "last_ms = CASE WHEN last_ms > ?4 THEN last_ms ELSE ?4 END WHERE id = ?1",
				    &m->touch_series, err);
	/* (on PostgreSQL a batch is stored by store_pg, below) */
	if (rc == 0)
		rc = metadb_prepare(m->w, "SELECT data FROM chunks WHERE series = ? AND start_ms = ?",
				    &m->get_chunk, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "INSERT INTO chunks(series, start_ms, data) VALUES (?, ?, ?) "
				    "ON CONFLICT(series, start_ms) DO UPDATE SET data = excluded.data",
				    &m->put_chunk, err);
	if (rc == 0)
		rc = metrics_retention(m, now_unix_ms(), err);
	if (rc < 0) {
		metrics_close(m);
		return -1;
	}
	*out = m;
	return 0;
}

int metrics_open_dir(const char *dir, int64_t retention_ms, struct metrics_store **out, struct buf *err)
{
	struct buf path = { 0 };
	buf_printf(&path, "%s/metrics.db", dir);
	int rc = metrics_open(path.data, NULL, retention_ms, out, err);
	buf_free(&path);
	return rc;
}

void metrics_get_stats(struct metrics_store *m, struct metrics_stats *out)
{
	pthread_mutex_lock(&m->wmu);
	*out = m->stats;
	pthread_mutex_unlock(&m->wmu);
}

/* The canonical text of label set i: a JSON object, keys sorted. */
struct kv {
	const char *k, *v;
};

static int cmp_kv(const void *a, const void *b)
{
	return strcmp(((const struct kv *)a)->k, ((const struct kv *)b)->k);
}

static void canonical_labels(const Ember__Ingest__V1__MetricsBatch *b, const size_t *offsets,
			     uint32_t set, struct buf *out)
{
	struct kv kv[MET_MAX_LABELS];
	size_t n = b->label_set_lengths[set] / 2;
	const uint32_t *ids = b->label_set_strings + offsets[set];
	for (size_t i = 0; i < n; i++)
		kv[i] = (struct kv){ b->strings[ids[2 * i]], b->strings[ids[2 * i + 1]] };
	xqsort(kv, n, sizeof(*kv), cmp_kv);
	buf_reset(out);
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	for (size_t i = 0; i < n; i++)
		jsonw_kv_str(&w, kv[i].k, kv[i].v);
	jsonw_end_object(&w);
	(void)jsonw_finish(&w); /* one flat object: no misuse is possible */
}

static int step_done(struct metadb_stmt *st, struct buf *err)
{
	int rc = metadb_step(st, err);
	metadb_reset(st);
	return rc < 0 ? -1 : 0;
}

/* --- chunks --------------------------------------------------------------------
 * A series' points of one hour (CHUNK_MS, aligned to the hour) are one row:
 * sorted by time, one point per time, each 12 bytes: the milliseconds since
 * the chunk's start (u32) and the value (IEEE double), both little-endian.
 * A batch merges its points into the stored chunk (a point at a time
 * already there replaces it), so a chunk grows by 12 bytes per point. */
#define CHUNK_MS 3600000LL
#define POINT_BYTES 12

struct mpoint {
	int64_t ts;
	double v;
	uint32_t series, order; /* while merging a batch: its series, its place in the batch */
};

static int64_t chunk_start(int64_t ts)
{
	return ts - ts % CHUNK_MS;
}

/* The points of a stored chunk into *pts (grown as needed): their count, or
 * -1 when the blob is not a chunk (length, order, range). */
static long chunk_decode(int64_t start, const void *data, size_t n, struct mpoint **pts, size_t *cap)
{
	const uint8_t *d = data;
	if (n % POINT_BYTES || n / POINT_BYTES > METRICS_CHUNK_MAX_POINTS)
		return -1;
	size_t np = n / POINT_BYTES;
	xgrow((void **)pts, cap, np + 1, sizeof(**pts));
	for (size_t i = 0; i < np; i++) {
		uint32_t off;
		uint64_t bits;
		double v;
		memcpy(&off, d + i * POINT_BYTES, 4);
		memcpy(&bits, d + i * POINT_BYTES + 4, 8);
		off = le32toh(off);
		bits = le64toh(bits);
		memcpy(&v, &bits, 8);
		if (off >= CHUNK_MS || (i && start + off <= (*pts)[i - 1].ts))
			return -1;
		(*pts)[i] = (struct mpoint){ .ts = start + off, .v = v };
	}
	return (long)np;
}

static void chunk_encode(int64_t start, const struct mpoint *p, size_t n, struct buf *out)
{
	buf_reset(out);
	buf_reserve(out, n * POINT_BYTES);
	for (size_t i = 0; i < n; i++) {
		uint32_t off = htole32((uint32_t)(p[i].ts - start));
		uint64_t bits;
		memcpy(&bits, &p[i].v, 8);
		bits = htole64(bits);
		buf_append(out, &off, 4);
		buf_append(out, &bits, 8);
	}
}

static int cmp_batch_point(const void *a, const void *b)
{
	const struct mpoint *x = a, *y = b;
	if (x->series != y->series)
		return x->series < y->series ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Merges the batch's points add[0..nadd) (one series, one chunk, sorted by
 * time then place in the batch) into the stored ones old[0..nold) (sorted,
 * one per time): the last of the batch wins a time. Returns the count in
 * out (at most METRICS_CHUNK_MAX_POINTS; *dropped counts the rest). */
static size_t chunk_merge(const struct mpoint *old, size_t nold, const struct mpoint *add, size_t nadd,
			  struct mpoint *out, uint64_t *dropped)
{
	size_t i = 0, j = 0, n = 0;
	while (i < nold || j < nadd) {
		struct mpoint p;
		if (j < nadd && (i == nold || add[j].ts <= old[i].ts)) {
			while (j + 1 < nadd && add[j + 1].ts == add[j].ts)
				j++; /* the last of the batch at this time */
			p = add[j];
			if (i < nold && old[i].ts == p.ts)
				i++; /* replaced */
			j++;
		} else {
			p = old[i++];
		}
		if (n == METRICS_CHUNK_MAX_POINTS) {
			(*dropped)++;
			continue;
		}
		out[n++] = p;
	}
	return n;
}

/* The batch's points by series, then time (then their order in it). */
static struct mpoint *sorted_points(const Ember__Ingest__V1__MetricsBatch *b)
{
	size_t np = b->n_point_series;
	struct mpoint *pts = xcalloc(np + 1, sizeof(*pts));
	for (size_t i = 0; i < np; i++)
		pts[i] = (struct mpoint){ .ts = b->point_times_ms[i], .v = b->point_values[i],
					  .series = b->point_series[i], .order = (uint32_t)i };
	xqsort(pts, np, sizeof(*pts), cmp_batch_point);
	return pts;
}

static int store_pg(struct metrics_store *m, const char *project, const Ember__Ingest__V1__MetricsBatch *b,
		    const size_t *offsets, const int64_t *lo, const int64_t *hi, struct buf *err);

static int store_locked(struct metrics_store *m, const char *project,
			const Ember__Ingest__V1__MetricsBatch *b, struct buf *err)
{
	size_t *offsets = xcalloc(b->n_label_set_lengths + 1, sizeof(*offsets));
	for (size_t i = 0, at = 0; i < b->n_label_set_lengths; i++) {
		offsets[i] = at;
		at += b->label_set_lengths[i];
	}
	size_t ns = b->n_series_names;
	int64_t *ids = xcalloc(ns + 1, sizeof(*ids));
	int64_t *lo = xcalloc(ns + 1, sizeof(*lo)), *hi = xcalloc(ns + 1, sizeof(*hi));
	for (size_t i = 0; i < ns; i++) {
		lo[i] = INT64_MAX;
		hi[i] = INT64_MIN;
	}
	for (size_t i = 0; i < b->n_point_series; i++) {
		uint32_t s = b->point_series[i];
		lo[s] = MIN(lo[s], b->point_times_ms[i]);
		hi[s] = MAX(hi[s], b->point_times_ms[i]);
	}
	if (m->postgres) {
		int prc = store_pg(m, project, b, offsets, lo, hi, err);
		free_all(offsets, ids, lo, hi);
		return prc;
	}
	struct buf labels = { 0 };
	int rc = 0;
	for (size_t i = 0; i < ns && rc == 0; i++) {
		if (lo[i] > hi[i]) {
			ids[i] = -1; /* no point: nothing to store */
			continue;
		}
		canonical_labels(b, offsets, b->series_label_sets[i], &labels);
		const char *name = b->strings[b->series_names[i]];
		const char *unit = b->strings[b->series_units[i]];
		struct metadb_stmt *f = m->find_series;
		metadb_bind_text(f, 1, project);
		metadb_bind_text(f, 2, name);
		metadb_bind_textn(f, 3, labels.data, labels.len);
		int s = metadb_step(f, err);
		if (s == 1)
			ids[i] = metadb_int64(f, 0);
		metadb_reset(f);
		if (s == 0) {
			/* new: added, or (another replica was first) found again */
			struct metadb_stmt *a = m->add_series;
			metadb_bind_text(a, 1, project);
			metadb_bind_text(a, 2, name);
			metadb_bind_textn(a, 3, labels.data, labels.len);
			metadb_bind_text(a, 4, unit);
			metadb_bind_int64(a, 5, lo[i]);
			metadb_bind_int64(a, 6, hi[i]);
			s = metadb_step(a, err);
			if (s == 1)
				ids[i] = metadb_int64(a, 0);
			metadb_reset(a);
			if (s == 0) {
				s = metadb_step(f, err);
				if (s == 1)
					ids[i] = metadb_int64(f, 0);
				else if (s == 0)
					buf_printf(err, "metrics: series %s vanished while being added", name);
				metadb_reset(f);
				s = s == 1 ? 2 : -1;
			} else if (s == 1) {
				s = 3; /* added with its range: nothing to touch */
			}
		}
		if (s < 0) {
			rc = -1;
		} else if (s != 3) {
			struct metadb_stmt *t = m->touch_series;
			metadb_bind_int64(t, 1, ids[i]);
			metadb_bind_text(t, 2, unit);
			metadb_bind_int64(t, 3, lo[i]);
			metadb_bind_int64(t, 4, hi[i]);
			rc = step_done(t, err);
		}
	}
	/* The points, by series and chunk, merged into the stored chunks. */
	size_t np = b->n_point_series;
	struct mpoint *pts = sorted_points(b), *old = NULL, *merged = NULL;
	size_t capold = 0, capmerged = 0;
	struct buf blob = { 0 };
	for (size_t i = 0; i < np && rc == 0;) {
		int64_t start = chunk_start(pts[i].ts);
		size_t j = i;
		while (j < np && pts[j].series == pts[i].series && chunk_start(pts[j].ts) == start)
			j++;
		int64_t id = ids[pts[i].series];
		struct metadb_stmt *g = m->get_chunk;
		metadb_bind_int64(g, 1, id);
		metadb_bind_int64(g, 2, start);
		long nold = 0;
		int st = metadb_step(g, err);
		if (st == 1) {
			nold = chunk_decode(start, metadb_blob(g, 0), metadb_bytes(g, 0), &old, &capold);
			if (nold < 0) {
				log_warn("metrics: series %lld's chunk at %lld is damaged: replaced",
					 (long long)id, (long long)start);
				nold = 0;
			}
		} else if (st < 0) {
			rc = -1;
		}
		metadb_reset(g);
		if (rc < 0)
			break;
		xgrow((void **)&merged, &capmerged, (size_t)nold + (j - i) + 1, sizeof(*merged));
		size_t n = chunk_merge(old, (size_t)nold, pts + i, j - i, merged, &m->stats.points_refused);
		chunk_encode(start, merged, n, &blob);
		struct metadb_stmt *p = m->put_chunk;
		metadb_bind_int64(p, 1, id);
		metadb_bind_int64(p, 2, start);
		metadb_bind_blob(p, 3, blob.data ? blob.data : "", blob.len);
		rc = step_done(p, err);
		i = j;
	}
	buf_free(&blob);
	free_all(pts, old, merged);
	buf_free(&labels);
	free_all(offsets, ids, lo, hi);
	return rc;
}

/* --- storing on PostgreSQL -----------------------------------------------------
 * One round trip per statement: a batch's series and chunks are read and
 * written as arrays (unnest), five statements a batch whatever its size,
 * where SQLite's path runs a few per series. Arrays are bound as their text
 * form ({...}), never spliced into the SQL. */

/* Appends s as an element of a PostgreSQL array literal: quoted, with
 * backslash and double quote escaped. */
static void pg_elem(struct buf *out, const char *s, size_t n)
{
	buf_putc(out, '"');
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			buf_putc(out, '\\');
		buf_putc(out, s[i]);
	}
	buf_putc(out, '"');
}

static void pg_sep(struct buf *out)
{
	buf_putc(out, out->len ? ',' : '{');
}

/* Prepares sql with ?1 bound to text (NULL: none; the arrays then start
 * at ?1) and the next parameters to the array texts arrays[0..n). */
static int pg_prepare_arrays(struct metadb *db, const char *sql, const char *text, const struct buf *const *arrays,
			     size_t n, struct metadb_stmt **q, struct buf *err)
{
	if (metadb_prepare(db, sql, q, err) < 0)
		return -1;
	int i = 1;
	if (text)
		metadb_bind_text(*q, i++, text);
	for (size_t k = 0; k < n; k++)
		metadb_bind_textn(*q, i++, arrays[k]->data ? arrays[k]->data : "{}", arrays[k]->len);
	return 0;
}

/* pg_prepare_arrays, one step, finalized. */
static int pg_exec_arrays(struct metadb *db, const char *sql, const char *text, const struct buf *const *arrays,
			  size_t n, struct buf *err)
{
	struct metadb_stmt *q = NULL;
	int rc = pg_prepare_arrays(db, sql, text, arrays, n, &q, err);
	if (rc == 0)
		rc = step_done(q, err);
	metadb_finalize(q);
	return rc;
}

struct pg_run {
	int64_t id, start;
	size_t from, to; /* of the sorted points */
	size_t old_off, old_len; /* the stored chunk's bytes in olds */
	bool found;
};

struct pg_run_key {
	const struct pg_run *runs;
	int64_t id, start;
};

static bool eq_run(const void *ctx, uint32_t idx)
{
	const struct pg_run_key *k = ctx;
	return k->runs[idx].id == k->id && k->runs[idx].start == k->start;
}

static uint64_t run_hash(int64_t id, int64_t start)
{
	return hash_mix(hash_u64((uint64_t)id), (uint64_t)start);
}

static int store_pg(struct metrics_store *m, const char *project, const Ember__Ingest__V1__MetricsBatch *b,
		    const size_t *offsets, const int64_t *lo, const int64_t *hi, struct buf *err)
{
	size_t ns = b->n_series_names;
	int64_t *ids = xcalloc(ns + 1, sizeof(*ids));
	struct buf names = { 0 }, labels = { 0 }, units = { 0 }, los = { 0 }, his = { 0 }, one = { 0 };
	size_t nwith = 0;
	for (size_t i = 0; i < ns; i++) {
		ids[i] = -1;
		if (lo[i] > hi[i])
			continue;
		canonical_labels(b, offsets, b->series_label_sets[i], &one);
		const char *name = b->strings[b->series_names[i]], *unit = b->strings[b->series_units[i]];
		pg_sep(&names), pg_elem(&names, name, strlen(name));
		pg_sep(&labels), pg_elem(&labels, one.data ? one.data : "", one.len);
		pg_sep(&units), pg_elem(&units, unit, strlen(unit));
		pg_sep(&los), buf_printf(&los, "%lld", (long long)lo[i]);
		pg_sep(&his), buf_printf(&his, "%lld", (long long)hi[i]);
		nwith++;
	}
	int rc = 0;
	struct metadb_stmt *q = NULL;
	if (nwith) {
		struct buf *arr[] = { &names, &labels, &units, &los, &his };
		for (size_t k = 0; k < ARRAY_SIZE(arr); k++)
			buf_putc(arr[k], '}');
		const struct buf *const *carr = (const struct buf *const *)arr;
		/* the series, added or widened; then their ids, by the
		 * batch's order (WITH ORDINALITY) */
		rc = pg_exec_arrays(m->w, "INSERT INTO series(project, name, labels, unit, first_ms, last_ms) "
				    "SELECT ?1::text, u.n, u.l, u.u, u.a, u.b FROM unnest(?2::text[], ?3::text[], ?4::text[], "
				    "?5::bigint[], ?6::bigint[]) AS u(n, l, u, a, b) ORDER BY u.n, u.l "
				    "ON CONFLICT(project, name, labels) DO UPDATE SET unit = excluded.unit, "
				    "first_ms = LEAST(series.first_ms, excluded.first_ms), "
				    "last_ms = GREATEST(series.last_ms, excluded.last_ms)",
				    project, carr, ARRAY_SIZE(arr), err);
		if (rc == 0)
			rc = pg_prepare_arrays(m->w, "SELECT u.o, s.id FROM unnest(?2::text[], ?3::text[]) WITH ORDINALITY "
					       "AS u(n, l, o) JOIN series s ON s.project = ?1::text AND s.name = u.n AND "
					       "s.labels = u.l", project, carr, 2, &q, err);
		if (rc == 0) {
			/* ordinal k (1-based) is the k-th series with points */
			size_t *which = xcalloc(nwith + 1, sizeof(*which));
			for (size_t i = 0, k = 0; i < ns; i++)
				if (lo[i] <= hi[i])
					which[k++] = i;
			int st;
			while ((st = metadb_step(q, err)) == 1) {
				int64_t o = metadb_int64(q, 0);
				if (o >= 1 && (size_t)o <= nwith)
					ids[which[o - 1]] = metadb_int64(q, 1);
			}
			if (st < 0)
				rc = -1;
			free(which);
		}
		metadb_finalize(q);
		q = NULL;
		for (size_t i = 0; rc == 0 && i < ns; i++)
			if (lo[i] <= hi[i] && ids[i] < 0) {
				buf_puts(err, "metrics: a series was not found after it was stored");
				rc = -1;
			}
	}
	/* The points by series and chunk: runs, their rows made and locked
	 * (another replica's batch into the same chunk waits for this
	 * commit), read, merged and written back. Rows are made and locked in
	 * (series, start) order, series in (name, labels) order, so replicas
	 * take their locks in one order. */
	size_t np = b->n_point_series;
	struct mpoint *pts = sorted_points(b), *old = NULL, *merged = NULL;
	size_t capold = 0, capmerged = 0;
	struct pg_run *runs = NULL;
	size_t nruns = 0, capruns = 0;
	struct hmap index = { 0 };
	struct buf rid = { 0 }, rstart = { 0 }, olds = { 0 }, blob = { 0 }, datas = { 0 };
	for (size_t i = 0; i < np && rc == 0;) {
		int64_t start = chunk_start(pts[i].ts);
		size_t j = i;
		while (j < np && pts[j].series == pts[i].series && chunk_start(pts[j].ts) == start)
			j++;
		xgrow((void **)&runs, &capruns, nruns + 1, sizeof(*runs));
		runs[nruns] = (struct pg_run){ .id = ids[pts[i].series], .start = start, .from = i, .to = j };
		hmap_insert(&index, run_hash(runs[nruns].id, start), (uint32_t)nruns);
		pg_sep(&rid), buf_printf(&rid, "%lld", (long long)runs[nruns].id);
		pg_sep(&rstart), buf_printf(&rstart, "%lld", (long long)start);
		nruns++;
		i = j;
	}
	if (rc == 0 && nruns) {
		buf_putc(&rid, '}');
		buf_putc(&rstart, '}');
		const struct buf *const keys[] = { &rid, &rstart };
		rc = pg_exec_arrays(m->w, "INSERT INTO chunks(series, start_ms, data) SELECT u.s, u.t, ''::bytea "
				    "FROM unnest(?1::bigint[], ?2::bigint[]) AS u(s, t) ORDER BY u.s, u.t "
				    "ON CONFLICT(series, start_ms) DO NOTHING", NULL, keys, 2, err);
		if (rc == 0)
			rc = pg_prepare_arrays(m->w, "SELECT c.series, c.start_ms, c.data FROM chunks c JOIN "
					       "unnest(?1::bigint[], ?2::bigint[]) AS u(s, t) ON c.series = u.s AND "
					       "c.start_ms = u.t ORDER BY c.series, c.start_ms FOR UPDATE OF c", NULL, keys, 2,
					       &q, err);
		if (rc == 0) {
			int st;
			while ((st = metadb_step(q, err)) == 1) {
				struct pg_run_key k = { runs, metadb_int64(q, 0), metadb_int64(q, 1) };
				uint32_t idx;
				if (!hmap_find(&index, run_hash(k.id, k.start), eq_run, &k, &idx))
					continue;
				runs[idx].found = true;
				runs[idx].old_off = olds.len;
				runs[idx].old_len = metadb_bytes(q, 2);
				buf_append(&olds, metadb_blob(q, 2), runs[idx].old_len);
			}
			if (st < 0)
				rc = -1;
		}
		metadb_finalize(q);
		q = NULL;
	}
	for (size_t r = 0; rc == 0 && r < nruns; r++) {
		long nold = 0;
		if (runs[r].found && runs[r].old_len) {
			nold = chunk_decode(runs[r].start, olds.data + runs[r].old_off, runs[r].old_len, &old, &capold);
			if (nold < 0) {
				log_warn("metrics: series %lld's chunk at %lld is damaged: replaced",
					 (long long)runs[r].id, (long long)runs[r].start);
				nold = 0;
			}
		}
		size_t nadd = runs[r].to - runs[r].from;
		xgrow((void **)&merged, &capmerged, (size_t)nold + nadd + 1, sizeof(*merged));
		size_t n = chunk_merge(old, (size_t)nold, pts + runs[r].from, nadd, merged, &m->stats.points_refused);
		chunk_encode(runs[r].start, merged, n, &blob);
		/* bytea's text form, \x and hex digits, as an array element */
		pg_sep(&datas);
		buf_puts(&datas, "\"\\\\x");
		for (size_t k = 0; k < blob.len; k++)
			buf_printf(&datas, "%02x", (uint8_t)blob.data[k]);
		buf_putc(&datas, '"');
	}
	if (rc == 0 && nruns) {
		buf_putc(&datas, '}');
		const struct buf *const rows[] = { &rid, &rstart, &datas };
		rc = pg_exec_arrays(m->w, "INSERT INTO chunks(series, start_ms, data) SELECT * FROM "
				    "unnest(?1::bigint[], ?2::bigint[], ?3::bytea[]) "
				    "ON CONFLICT(series, start_ms) DO UPDATE SET data = excluded.data", NULL, rows, 3, err);
	}
	hmap_free(&index);
	struct buf *bufs[] = { &names, &labels, &units, &los, &his, &one, &rid, &rstart, &olds, &blob, &datas };
	for (size_t k = 0; k < ARRAY_SIZE(bufs); k++)
		buf_free(bufs[k]);
	free_all(ids, pts, old, merged, runs);
	return rc;
}

int metrics_store_batch(struct metrics_store *m, const char *project_id,
			const Ember__Ingest__V1__MetricsBatch *b, int64_t now_ms, struct buf *err)
{
	pthread_mutex_lock(&m->wmu);
	int rc = metadb_begin(m->w, err);
	if (rc == 0) {
		rc = store_locked(m, project_id, b, err);
		if (rc == 0)
			rc = metadb_commit(m->w, err);
		if (rc < 0)
			metadb_rollback(m->w); /* may have ended already */
	}
	if (rc == 0) {
		m->stats.batches++;
		m->stats.points += b->n_point_series;
	}
	bool due = now_ms - m->last_retention_ms >= METRICS_RETENTION_EVERY_MS;
	pthread_mutex_unlock(&m->wmu);
	if (rc == 0 && due) {
		struct buf rerr = { 0 };
		if (metrics_retention(m, now_ms, &rerr) < 0)
			log_warn("metrics retention: %s", rerr.data);
		buf_free(&rerr);
	}
	return rc;
}

int metrics_retention(struct metrics_store *m, int64_t now_ms, struct buf *err)
{
	int64_t cutoff = now_ms - m->retention_ms;
	pthread_mutex_lock(&m->wmu);
	m->last_retention_ms = now_ms;
	/* Chunks wholly older than the cutoff go; the chunks it cuts keep their
	 * points at or after it; series first start at it; series whose last
	 * point is older go. */
	struct metadb_stmt *count = NULL, *del = NULL, *cut = NULL, *first = NULL, *drop = NULL, *del1 = NULL;
	int rc = metadb_begin(m->w, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "SELECT COALESCE(SUM(length(data)), 0) FROM chunks WHERE start_ms <= ?",
				   &count, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "DELETE FROM chunks WHERE start_ms <= ?", &del, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "SELECT series, start_ms, data FROM chunks WHERE start_ms > ? AND start_ms < ?",
				   &cut, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "DELETE FROM chunks WHERE series = ? AND start_ms = ?", &del1, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "UPDATE series SET first_ms = ?1 WHERE first_ms < ?1", &first, err);
	if (rc == 0)
		rc = metadb_prepare(m->w, "DELETE FROM series WHERE last_ms < ?", &drop, err);
	uint64_t deleted = 0;
	if (rc == 0) {
		metadb_bind_int64(count, 1, cutoff - CHUNK_MS);
		if (metadb_step(count, err) == 1)
			deleted += (uint64_t)metadb_int64(count, 0) / POINT_BYTES;
		metadb_bind_int64(del, 1, cutoff - CHUNK_MS);
		rc = step_done(del, err);
	}
	/* The chunks the cutoff falls in: read them all, then rewrite. */
	struct cut_chunk {
		int64_t series, start;
		struct mpoint *p;
		size_t n;
	} *cuts = NULL;
	size_t ncuts = 0, capcuts = 0;
	if (rc == 0) {
		metadb_bind_int64(cut, 1, cutoff - CHUNK_MS);
		metadb_bind_int64(cut, 2, cutoff);
		int st;
		while ((st = metadb_step(cut, err)) == 1) {
			struct mpoint *p = NULL;
			size_t cap = 0;
			int64_t start = metadb_int64(cut, 1);
			long n = chunk_decode(start, metadb_blob(cut, 2),
					      metadb_bytes(cut, 2), &p, &cap);
			xgrow((void **)&cuts, &capcuts, ncuts + 1, sizeof(*cuts));
			cuts[ncuts++] = (struct cut_chunk){ metadb_int64(cut, 0), start, p,
							    n < 0 ? 0 : (size_t)n };
		}
		if (st < 0)
			rc = -1;
		metadb_reset(cut);
	}
	struct buf blob = { 0 };
	for (size_t i = 0; i < ncuts; i++) {
		size_t keep = 0;
		while (keep < cuts[i].n && cuts[i].p[keep].ts < cutoff)
			keep++;
		deleted += keep;
		if (rc == 0 && keep == cuts[i].n) { /* nothing left (or damaged): the row goes */
			metadb_bind_int64(del1, 1, cuts[i].series);
			metadb_bind_int64(del1, 2, cuts[i].start);
			rc = step_done(del1, err);
		} else if (rc == 0 && keep) {
			chunk_encode(cuts[i].start, cuts[i].p + keep, cuts[i].n - keep, &blob);
			struct metadb_stmt *p = m->put_chunk;
			metadb_bind_int64(p, 1, cuts[i].series);
			metadb_bind_int64(p, 2, cuts[i].start);
			metadb_bind_blob(p, 3, blob.data ? blob.data : "", blob.len);
			rc = step_done(p, err);
		}
		free(cuts[i].p);
	}
	free(cuts);
	buf_free(&blob);
	if (rc == 0) {
		metadb_bind_int64(first, 1, cutoff);
		rc = step_done(first, err);
	}
	if (rc == 0) {
		metadb_bind_int64(drop, 1, cutoff);
		rc = step_done(drop, err);
	}
	if (rc == 0)
		rc = metadb_commit(m->w, err);
	else
		metadb_rollback(m->w); /* may not have begun */
	if (rc == 0)
		m->stats.retention_deleted += deleted;
	metadb_finalize(count);
	metadb_finalize(del);
	metadb_finalize(cut);
	metadb_finalize(first);
	metadb_finalize(drop);
	metadb_finalize(del1);
	pthread_mutex_unlock(&m->wmu);
	return rc;
}

/* --- queries ------------------------------------------------------------------- */

/* A read transaction on the readers' connection (a consistent view of
 * series and chunks); its failure only loses that consistency, and the
 * statements that follow report a lost connection themselves. */
static void read_begin(struct metrics_store *m)
{
	struct buf ignored = { 0 };
	(void)metadb_exec(m->r, "BEGIN", &ignored);
	buf_free(&ignored);
}

static void read_end(struct metrics_store *m)
{
	struct buf ignored = { 0 };
	(void)metadb_exec(m->r, "COMMIT", &ignored);
	buf_free(&ignored);
}

/* The HTTP status of a failed read: the database unreachable is 503. */
static int read_failed(struct metrics_store *m)
{
	return metadb_unavailable(m->r) ? 503 : 500;
}

enum { AGG_AVG, AGG_MAX, AGG_SUM };

struct mquery {
	int64_t start, end;
	char *cel;    /* or NULL */
	char *metric;
	char *group_by; /* or NULL */
	int temporal, spatial;
	uint64_t buckets;
	bool percentiles;
};

/* The filter every query takes (scope_parse); event_kind means nothing
 * to metrics and is ignored. */
static int parse_filter(const json_t *doc, struct mquery *q, struct buf *err)
{
	struct scope sc;
	if (scope_parse(json_object_get(doc, "filter"), "filter", &sc, err) < 0)
		return -1;
	q->start = sc.start_ms;
	q->end = sc.end_ms;
	q->cel = sc.query; /* now q's */
	return 0;
}

static int parse_agg(const json_t *doc, const char *name, bool allow_sum, int def, int *out,
		     struct buf *err)
{
	*out = def;
	const json_t *v = json_object_get(doc, name);
	if (!v || json_is_null(v))
		return 0;
	const char *s = json_is_string(v) ? json_string_value(v) : "";
	if (strcmp(s, "avg") == 0)
		*out = AGG_AVG;
	else if (strcmp(s, "max") == 0)
		*out = AGG_MAX;
	else if (allow_sum && strcmp(s, "sum") == 0)
		*out = AGG_SUM;
	else {
		buf_printf(err, "%s: expected %s", name, allow_sum ? "\"sum\", \"avg\" or \"max\"" : "\"avg\" or \"max\"");
		return -1;
	}
	return 0;
}

static void mquery_free(struct mquery *q)
{
	free_all(q->cel, q->metric, q->group_by);
}

static int mquery_parse(const char *body, size_t len, struct mquery *q, struct buf *err)
{
	memset(q, 0, sizeof(*q));
	q->buckets = 100;
	json_t *doc = req_load(body, len, err);
	if (!doc)
		return -1;
	int rc = parse_filter(doc, q, err);
	if (rc == 0)
		rc = req_string(doc, "metric", 255, &q->metric, err);
	if (rc == 0 && (!q->metric || !*q->metric)) {
		buf_puts(err, "metric: expected the name of a metric, e.g. \"process.utime\" (see .../metrics/names)");
		rc = -1;
	}
	if (rc == 0)
		rc = req_string(doc, "group_by", 255, &q->group_by, err);
	if (rc == 0 && q->group_by && !*q->group_by) {
		free(q->group_by);
		q->group_by = NULL;
	}
	if (rc == 0)
		rc = parse_agg(doc, "temporal", false, AGG_AVG, &q->temporal, err);
	if (rc == 0)
		rc = parse_agg(doc, "spatial", true, AGG_SUM, &q->spatial, err);
	if (rc == 0)
		rc = req_count(doc, "num_buckets", MET_MAX_BUCKETS, &q->buckets, err);
	if (rc == 0)
		rc = req_bool(doc, "percentiles", &q->percentiles, err);
	json_decref(doc);
	return rc;
}

/* A series' label set, parsed for CEL. */
struct labels {
	json_t *doc;
};

static const char *lookup_label(void *ctx, const char *name)
{
	const json_t *v = json_object_get(((struct labels *)ctx)->doc, name);
	return v && json_is_string(v) ? json_string_value(v) : NULL;
}

struct group {
	char *name;
	double *v;     /* per bucket */
	uint32_t *n;   /* series with a value in the bucket */
	double *raw;   /* every point of its series, for percentiles */
	size_t nraw, capraw;
};

/* The p-th percentile (nearest rank) of v[0..n), sorted ascending, n > 0. */
double metrics_percentile(const double *v, size_t n, double p)
{
	double rank = ceil(p / 100.0 * (double)n);
	size_t i = rank < 1 ? 0 : (size_t)rank - 1;
	return v[MIN(i, n - 1)];
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int cmp_group(const void *a, const void *b)
{
	return strcmp(((const struct group *)a)->name, ((const struct group *)b)->name);
}

static const char *const AGG_NAMES[] = { "avg", "max", "sum" };

/* Ends an answer written with w: 0 with a final newline, or 500 when the
 * writer was misused (a bug). */
static int end_answer(struct jsonw *w, struct buf *out, struct buf *err)
{
	if (jsonw_finish_answer(w, err))
		return 500;
	buf_putc(out, '\n');
	return 0;
}

int metrics_query(struct metrics_store *m, const char *project, const char *body, size_t len,
		  struct buf *out, struct buf *err)
{
	uint64_t t0 = now_mono_ns();
	struct mquery q;
	if (mquery_parse(body, len, &q, err) < 0) {
		mquery_free(&q);
		return 400;
	}
	struct cel_program *cel = NULL;
	if (q.cel && *q.cel && !(cel = cel_compile(q.cel, err))) {
		mquery_free(&q);
		return 400;
	}
	int64_t span = q.end - q.start;
	int64_t step = (span + (int64_t)q.buckets - 1) / (int64_t)q.buckets;
	if (step < 1)
		step = 1;
	size_t nb = (size_t)((span + step - 1) / step);
	int status = 0;
	struct group *groups = NULL;
	size_t ngroups = 0, capgroups = 0;
	double *sv = xcalloc(nb, sizeof(*sv));
	uint32_t *sn = xcalloc(nb, sizeof(*sn));
	char *unit = NULL;
	uint64_t scanned = 0, matched = 0, points = 0, kept = 0;
	struct mpoint *cp = NULL; /* a chunk's points */
	size_t capcp = 0;
	struct metadb_stmt *ss = NULL, *ps = NULL;
	/* the matched series (by label set), their group */
	int64_t *mid = NULL;
	size_t *mgroup = NULL, nm = 0, capm = 0, capg = 0;
	struct buf ids = { 0 };
	pthread_mutex_lock(&m->rmu);
	/* by label set, byte for byte on both databases: sums add up in one
	 * order wherever the series are */
	if (metadb_prepare(m->r, m->postgres ? "SELECT id, unit, labels FROM series WHERE project = ? AND name = ? "
					       "AND last_ms >= ? AND first_ms < ? ORDER BY labels COLLATE \"C\""
					     : "SELECT id, unit, labels FROM series WHERE project = ? AND name = ? "
					       "AND last_ms >= ? AND first_ms < ? ORDER BY labels",
			  &ss, err) < 0 ||
	    /* every matched series' chunks in one query (a round trip per
	     * series cost 0.1 ms on PostgreSQL), in the series' order */
	    metadb_prepare(m->r, m->postgres
			   ? "SELECT c.series, c.start_ms, c.data FROM chunks c JOIN series s ON s.id = c.series "
			     "WHERE c.series IN (SELECT jsonb_array_elements_text(?::jsonb)::bigint) "
			     "AND c.start_ms > ? AND c.start_ms < ? ORDER BY s.labels COLLATE \"C\", c.series, c.start_ms"
			   : "SELECT c.series, c.start_ms, c.data FROM chunks c JOIN series s ON s.id = c.series "
			     "WHERE c.series IN (SELECT value FROM json_each(?)) "
			     "AND c.start_ms > ? AND c.start_ms < ? ORDER BY s.labels, c.series, c.start_ms",
			   &ps, err) < 0) {
		status = 500;
		goto done;
	}
	/* One read transaction: a consistent view of series and points. */
	read_begin(m);
	metadb_bind_text(ss, 1, project);
	metadb_bind_text(ss, 2, q.metric);
	metadb_bind_int64(ss, 3, q.start);
	metadb_bind_int64(ss, 4, q.end);
	int srow = 0;
	buf_putc(&ids, '[');
	while (status == 0 && (srow = metadb_step(ss, err)) == 1) {
		if (++scanned > MET_MAX_QUERY_SERIES) {
			buf_printf(err, "more than %d series of %s in the range: narrow the filter",
				   MET_MAX_QUERY_SERIES, q.metric);
			status = 400;
			break;
		}
		const char *u = metadb_text(ss, 1);
		const char *lt = metadb_text(ss, 2);
		struct labels l = { json_loads(lt ? lt : "{}", 0, NULL) };
		if (!l.doc || !json_is_object(l.doc) || (cel && !cel_eval(cel, lookup_label, &l))) {
			json_decref(l.doc);
			continue;
		}
		matched++;
		if (!unit && u)
			unit = xstrdup(u);
		const char *gname = "all";
		if (q.group_by) {
			const char *g = lookup_label(&l, q.group_by);
			gname = g ? g : "";
		}
		size_t gi = 0;
		while (gi < ngroups && strcmp(groups[gi].name, gname) != 0)
			gi++;
		if (gi == ngroups) {
			if (ngroups == MET_MAX_GROUPS || (ngroups + 1) * nb > 4000000) {
				buf_printf(err, "more than %zu groups of %s: group by a coarser attribute, narrow the filter or ask for fewer buckets",
					   ngroups, q.group_by ? q.group_by : "");
				json_decref(l.doc);
				status = 400;
				break;
			}
			xgrow((void **)&groups, &capgroups, ngroups + 1, sizeof(*groups));
			groups[ngroups++] = (struct group){ xstrdup(gname), xcalloc(nb, sizeof(double)),
							    xcalloc(nb, sizeof(uint32_t)) };
		}
		json_decref(l.doc);
		xgrow((void **)&mid, &capm, nm + 1, sizeof(*mid));
		xgrow((void **)&mgroup, &capg, nm + 1, sizeof(*mgroup));
		mid[nm] = metadb_int64(ss, 0);
		mgroup[nm] = gi;
		buf_printf(&ids, "%s%" PRId64, nm ? "," : "", mid[nm]);
		nm++;
	}
	buf_putc(&ids, ']');
	if (status == 0 && srow < 0)
		status = read_failed(m);
	/* The chunks of the matched series, series after series in the
	 * order above: each series' buckets (temporal), then into its group
	 * (spatial). */
	size_t cur = 0; /* the series being read: mid[cur] */
	bool open = false;
	if (status == 0 && nm) {
		metadb_bind_text(ps, 1, ids.data);
		metadb_bind_int64(ps, 2, q.start - CHUNK_MS);
		metadb_bind_int64(ps, 3, q.end);
	}
	int pstep = 0;
	while (status == 0 && nm && (pstep = metadb_step(ps, err)) >= 0) {
		int64_t sid = pstep == 1 ? metadb_int64(ps, 0) : INT64_MIN;
		if (open && (pstep == 0 || sid != mid[cur])) {
			/* Spatial: the series read into its group. */
			struct group *g = &groups[mgroup[cur]];
			for (size_t i = 0; i < nb; i++) {
				if (!sn[i])
					continue;
				double v = q.temporal == AGG_AVG ? sv[i] / sn[i] : sv[i];
				if (q.spatial == AGG_MAX)
					g->v[i] = g->n[i] ? MAX(g->v[i], v) : v;
				else
					g->v[i] += v;
				g->n[i]++;
			}
			open = false;
			cur++;
		}
		if (pstep == 0)
			break;
		while (cur < nm && mid[cur] != sid)
			cur++; /* series without chunks in the range */
		if (cur == nm) {
			buf_puts(err, "metrics: chunks out of their series' order");
			status = 500;
			break;
		}
		if (!open) {
			memset(sv, 0, nb * sizeof(*sv));
			memset(sn, 0, nb * sizeof(*sn));
			open = true;
		}
		size_t gi = mgroup[cur];
		long n = chunk_decode(metadb_int64(ps, 1), metadb_blob(ps, 2), metadb_bytes(ps, 2), &cp, &capcp);
		for (long k = 0; k < n; k++) {
			if (cp[k].ts < q.start || cp[k].ts >= q.end)
				continue;
			size_t bi = (size_t)((cp[k].ts - q.start) / step);
			double v = cp[k].v;
			if (bi >= nb)
				continue;
			points++;
			if (q.percentiles && status == 0) {
				if (++kept > MET_MAX_PERCENTILE_POINTS) {
					buf_printf(err, "more than %u points of %s for percentiles: narrow the range or the filter",
						   MET_MAX_PERCENTILE_POINTS, q.metric);
					status = 400;
				} else {
					struct group *pg = &groups[gi];
					xgrow((void **)&pg->raw, &pg->capraw, pg->nraw + 1, sizeof(*pg->raw));
					pg->raw[pg->nraw++] = v;
				}
			}
			if (q.temporal == AGG_MAX)
				sv[bi] = sn[bi] ? MAX(sv[bi], v) : v;
			else
				sv[bi] += v;
			sn[bi]++;
		}
	}
	if (status == 0 && nm && pstep < 0)
		status = read_failed(m);
	metadb_reset(ps);
	metadb_reset(ss);
	read_end(m);
	if (status == 0 && scanned == 0) {
		/* Nothing in the range: an unknown metric is an error, a quiet one is not. */
		struct metadb_stmt *ex = NULL;
		if (metadb_prepare(m->r, "SELECT 1 FROM series WHERE project = ? AND name = ? LIMIT 1", &ex, err) < 0) {
			status = 500;
		} else {
			metadb_bind_text(ex, 1, project);
			metadb_bind_text(ex, 2, q.metric);
			int found = metadb_step(ex, err);
			if (found < 0) {
				status = read_failed(m);
			} else if (found == 0) {
				buf_printf(err, "no metric named \"%s\" in this project (see .../metrics/names)", q.metric);
				status = 404;
			}
		}
		metadb_finalize(ex);
	}
done:
	metadb_finalize(ss);
	metadb_finalize(ps);
	pthread_mutex_unlock(&m->rmu);
	free(cp);
	if (status == 0 && cel_check(cel, err))
		status = 422; /* a matches() pattern reached its bounds */
	if (status == 0) {
		xqsort(groups, ngroups, sizeof(*groups), cmp_group);
		struct jsonw w;
		jsonw_init(&w, out);
		jsonw_begin_object(&w);
		jsonw_kv_str(&w, "metric", q.metric);
		jsonw_key(&w, "unit");
		if (unit)
			jsonw_str(&w, unit);
		else
			jsonw_null(&w);
		jsonw_kv_i64(&w, "start_ts", q.start);
		jsonw_kv_i64(&w, "end_ts", q.end);
		jsonw_kv_i64(&w, "buckets_ms", step);
		jsonw_kv_str(&w, "temporal", AGG_NAMES[q.temporal]);
		jsonw_kv_str(&w, "spatial", AGG_NAMES[q.spatial]);
		jsonw_key(&w, "group_by");
		if (q.group_by)
			jsonw_str(&w, q.group_by);
		else
			jsonw_null(&w);
		jsonw_key(&w, "series");
		jsonw_begin_array(&w);
		for (size_t gi = 0; gi < ngroups; gi++) {
			struct group *g = &groups[gi];
			jsonw_begin_object(&w);
			jsonw_kv_str(&w, "group", g->name);
			jsonw_key(&w, "points");
			jsonw_begin_array(&w);
			for (size_t i = 0; i < nb; i++) {
				if (!g->n[i])
					continue;
				double v = q.spatial == AGG_AVG ? g->v[i] / g->n[i] : g->v[i];
				jsonw_begin_array(&w);
				jsonw_i64(&w, q.start + (int64_t)i * step);
				jsonw_double(&w, v);
				jsonw_end_array(&w);
			}
			jsonw_end_array(&w);
			if (q.percentiles && g->nraw) {
				/* Over the stored points themselves, not the buckets:
				 * a bucket's average would hide the spikes p99 is for. */
				xqsort(g->raw, g->nraw, sizeof(*g->raw), cmp_double);
				jsonw_key(&w, "percentiles");
				jsonw_begin_object(&w);
				jsonw_kv_double(&w, "p50", metrics_percentile(g->raw, g->nraw, 50));
				jsonw_kv_double(&w, "p95", metrics_percentile(g->raw, g->nraw, 95));
				jsonw_kv_double(&w, "p99", metrics_percentile(g->raw, g->nraw, 99));
				jsonw_kv_u64(&w, "points", g->nraw);
				jsonw_end_object(&w);
			}
			jsonw_end_object(&w);
		}
		jsonw_end_array(&w);
		jsonw_key(&w, "stats");
		jsonw_begin_object(&w);
		jsonw_kv_u64(&w, "series_scanned", scanned);
		jsonw_kv_u64(&w, "series_matched", matched);
		jsonw_kv_u64(&w, "points_read", points);
		jsonw_kv_u64(&w, "groups", ngroups);
		jsonw_kv_double(&w, "elapsed_ms", (double)(now_mono_ns() - t0) / 1e6);
		jsonw_end_object(&w);
		jsonw_end_object(&w);
		status = end_answer(&w, out, err);
	}
	for (size_t i = 0; i < ngroups; i++) {
		free_all(groups[i].name, groups[i].v, groups[i].n, groups[i].raw);
	}
	free_all(groups, sv, sn, unit, mid, mgroup);
	buf_free(&ids);
	cel_free(cel);
	mquery_free(&q);
	return status;
}

int metrics_names(struct metrics_store *m, const char *project, const char *body, size_t len,
		  struct buf *out, struct buf *err)
{
	struct mquery q;
	memset(&q, 0, sizeof(q));
	json_t *doc = req_load(body, len, err);
	if (!doc)
		return 400;
	int rc = parse_filter(doc, &q, err);
	json_decref(doc);
	struct cel_program *cel = NULL;
	if (rc == 0 && q.cel && *q.cel && !(cel = cel_compile(q.cel, err)))
		rc = -1;
	if (rc < 0) {
		mquery_free(&q);
		return 400;
	}
	int status = 0;
	struct metadb_stmt *st = NULL;
	pthread_mutex_lock(&m->rmu);
	if (metadb_prepare(m->r, m->postgres ? "SELECT name, unit, labels FROM series WHERE project = ? AND last_ms >= ? "
					       "AND first_ms < ? ORDER BY name COLLATE \"C\""
					     : "SELECT name, unit, labels FROM series WHERE project = ? AND last_ms >= ? "
					       "AND first_ms < ? ORDER BY name",
			  &st, err) < 0) {
		status = 500;
	} else {
		metadb_bind_text(st, 1, project);
		metadb_bind_int64(st, 2, q.start);
		metadb_bind_int64(st, 3, q.end);
		struct jsonw w;
		jsonw_init(&w, out);
		jsonw_begin_object(&w);
		jsonw_key(&w, "names");
		jsonw_begin_array(&w);
		char last[256] = "";
		uint64_t count = 0, scanned = 0;
		bool any = false;
		int step = 0;
		while ((step = metadb_step(st, err)) == 1 && ++scanned <= MET_MAX_QUERY_SERIES) {
			const char *name = metadb_text(st, 0);
			const char *unit = metadb_text(st, 1);
			const char *lt = metadb_text(st, 2);
			if (!name)
				continue;
			if (cel) {
				struct labels l = { json_loads(lt ? lt : "{}", 0, NULL) };
				bool ok = l.doc && json_is_object(l.doc) && cel_eval(cel, lookup_label, &l);
				json_decref(l.doc);
				if (!ok)
					continue;
			}
			if (any && strcmp(last, name) == 0) {
				count++;
				continue;
			}
			if (any) {
				jsonw_kv_u64(&w, "series", count);
				jsonw_end_object(&w);
			}
			jsonw_begin_object(&w);
			jsonw_kv_str(&w, "name", name);
			jsonw_kv_str(&w, "unit", unit ? unit : "");
			snprintf(last, sizeof(last), "%s", name);
			count = 1;
			any = true;
		}
		if (any) {
			jsonw_kv_u64(&w, "series", count);
			jsonw_end_object(&w);
		}
		jsonw_end_array(&w);
		jsonw_end_object(&w);
		status = step < 0 ? read_failed(m) : end_answer(&w, out, err);
	}
	metadb_finalize(st);
	pthread_mutex_unlock(&m->rmu);
	if (status == 0 && cel_check(cel, err))
		status = 422; /* a matches() pattern reached its bounds */
	cel_free(cel);
	mquery_free(&q);
	return status;
}

/* --- events ------------------------------------------------------------------- */

int metrics_points(struct metrics_store *m, const char *name, int64_t from_ms, int64_t to_ms,
		   size_t max_points, metrics_point_fn fn, void *ctx, struct buf *err)
{
	struct metadb_stmt *q = NULL;
	pthread_mutex_lock(&m->rmu);
	int rc = metadb_prepare(m->r, "SELECT s.project, s.labels, c.start_ms, c.data FROM series s "
				     "JOIN chunks c ON c.series = s.id WHERE s.name = ?1 AND s.last_ms >= ?2 "
				     "AND c.start_ms >= ?3 AND c.start_ms < ?4 ORDER BY c.start_ms, s.id",
			       &q, err);
	struct mpoint *pts = NULL;
	size_t cap = 0, seen = 0;
	if (rc == 0) {
		metadb_bind_text(q, 1, name);
		metadb_bind_int64(q, 2, from_ms);
		metadb_bind_int64(q, 3, chunk_start(from_ms));
		metadb_bind_int64(q, 4, to_ms);
		int st = 0;
		while (seen < max_points && (st = metadb_step(q, err)) == 1) {
			const char *project = metadb_text(q, 0);
			const char *labels = metadb_text(q, 1);
			int64_t start = metadb_int64(q, 2);
			long np = chunk_decode(start, metadb_blob(q, 3), metadb_bytes(q, 3),
					       &pts, &cap);
			for (long i = 0; i < np && seen < max_points; i++)
				if (pts[i].ts >= from_ms && pts[i].ts < to_ms) {
					fn(ctx, project ? project : "", labels ? labels : "{}", pts[i].ts, pts[i].v);
					seen++;
				}
		}
		if (st < 0)
			rc = -1;
	}
	free(pts);
	metadb_finalize(q);
	pthread_mutex_unlock(&m->rmu);
	return rc;
}

int metrics_latest(struct metrics_store *m, const char *project, const char *name, int64_t from_ms, int64_t to_ms,
		   size_t max_series, metrics_point_fn fn, void *ctx, struct buf *err)
{
	struct metadb_stmt *ss = NULL, *cs = NULL;
	struct mpoint *pts = NULL;
	size_t cap = 0, seen = 0;
	pthread_mutex_lock(&m->rmu);
	int rc = metadb_prepare(m->r, "SELECT id, labels FROM series WHERE project = ? AND name = ? "
				     "AND last_ms >= ? AND first_ms < ?", &ss, err);
	if (rc == 0)
		rc = metadb_prepare(m->r, "SELECT start_ms, data FROM chunks WHERE series = ? AND start_ms < ? "
					 "ORDER BY start_ms DESC LIMIT 1", &cs, err);
	if (rc == 0) {
		read_begin(m);
		metadb_bind_text(ss, 1, project);
		metadb_bind_text(ss, 2, name);
		metadb_bind_int64(ss, 3, from_ms);
		metadb_bind_int64(ss, 4, to_ms);
		int step = 0;
		while (rc == 0 && (step = metadb_step(ss, err)) == 1) {
			if (++seen > max_series) {
				buf_printf(err, "more than %zu series of %s in the range: narrow it", max_series, name);
				rc = -1;
				break;
			}
			const char *labels = metadb_text(ss, 1);
			metadb_bind_int64(cs, 1, metadb_int64(ss, 0));
			metadb_bind_int64(cs, 2, to_ms);
			int cstep = metadb_step(cs, err);
			if (cstep < 0)
				rc = -1;
			if (cstep == 1) {
				long np = chunk_decode(metadb_int64(cs, 0), metadb_blob(cs, 1),
						       metadb_bytes(cs, 1), &pts, &cap);
				long last = -1;
				for (long i = 0; i < np; i++) /* sorted by time */
					if (pts[i].ts >= from_ms && pts[i].ts < to_ms)
						last = i;
				if (last >= 0)
					fn(ctx, project, labels ? labels : "{}", pts[last].ts, pts[last].v);
			}
			metadb_reset(cs);
		}
		if (step < 0)
			rc = -1;
		read_end(m);
	}
	free(pts);
	metadb_finalize(ss);
	metadb_finalize(cs);
	pthread_mutex_unlock(&m->rmu);
	return rc;
}
