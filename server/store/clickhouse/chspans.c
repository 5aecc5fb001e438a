/* chspans.c - see chspans.h. */
#include "chspans.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hmap.h"
#include "log.h"
#include "server/store/clickhouse/rowbinary.h"
#include "server/store/spancodec.h"
#include "util.h"

#define HOUR_MS 3600000LL
#define RETENTION_EVERY_MS (10 * 60000)
#define READ_MAX_RESPONSE (256u << 20)
#define ORIGINS_PER_QUERY 4096
#define SPAN_ROW 33 /* start_ns, end_ns, device, stream, kind, origin */

struct chspans_stats {
	uint64_t added;          /* spans inserted */
	uint64_t insert_failed;  /* spans whose insert failed (logged) */
	uint64_t read_failed;    /* timeline reads that failed (answered 503) */
	uint64_t hours_dropped;  /* partitions retention dropped */
	uint64_t orphans;        /* spans read whose origin was not found (skipped) */
};

/* The spans of one batch, gathered before one insert. */
struct chspans_batch {
	char project[40];
	uint32_t hour;
	size_t n;
	struct buf spans, origins, blob;
	struct hmap seen; /* origins of this batch, by hash */
	uint64_t *hashes;
	size_t nhashes, caphashes;
};

struct chspans {
	struct ch_pool *pool; /* connections (chttp.h) */
	char *database, *cluster;
	int64_t retention_ms;
	pthread_mutex_t mu; /* last_retention_ms, stats */
	int64_t last_retention_ms;
	struct chspans_stats stats;
};

struct origin_hash {
	uint64_t h;
};

static void chspans_close(struct chspans *cs)
{
	if (!cs)
		return;
	ch_pool_free(cs->pool);
	pthread_mutex_destroy(&cs->mu);
	free_all(cs->database, cs->cluster, cs);
}

static char *dup_opt(const char *s)
{
	return s && *s ? xstrdup(s) : NULL;
}

static struct chspans *cs_open(const struct ch_conn_opts *conn, const char *cluster,
				int64_t retention_ms, struct buf *err)
{
	struct chspans *cs = xcalloc(1, sizeof(*cs));
	pthread_mutex_init(&cs->mu, NULL);
	cs->database = dup_opt(conn->database);
	cs->cluster = dup_opt(cluster);
	cs->retention_ms = retention_ms;
	struct ch_conn_opts o = *conn;
	o.database = cs->database;
	o.max_response = 0;
	cs->pool = ch_pool_new(&o);
	/* the options checked now (the URLs, the files), not at the first batch */
	struct ch_conn *c = ch_pool_get(cs->pool, 0, err);
	if (!c) {
		chspans_close(cs);
		return NULL;
	}
	ch_pool_put(cs->pool, c, true);
	return cs;
}

/* A connection for one call: an idle one, or a new one (reads: answers
 * up to READ_MAX_RESPONSE, not kept). */
static struct ch_conn *conn_get(struct chspans *cs, bool read, struct buf *err)
{
	return ch_pool_get(cs->pool, read ? READ_MAX_RESPONSE : 0, err);
}

static void conn_put(struct chspans *cs, struct ch_conn *c, bool read)
{
	ch_pool_put(cs->pool, c, !read);
}

static void count(struct chspans *cs, uint64_t *field, uint64_t n)
{
	pthread_mutex_lock(&cs->mu);
	*field += n;
	pthread_mutex_unlock(&cs->mu);
}

static void cs_stats(void *impl, struct span_store_stats *out)
{
	struct chspans *cs = impl;
	pthread_mutex_lock(&cs->mu);
	out->stored = cs->stats.added;
	out->insert_failed = cs->stats.insert_failed;
	out->read_failed = cs->stats.read_failed;
	out->hours_dropped = cs->stats.hours_dropped;
	out->orphans = cs->stats.orphans;
	pthread_mutex_unlock(&cs->mu);
}

/* --- a batch's spans ------------------------------------------------------------- */

static void chspans_batch_init(struct chspans_batch *b, const char *project, int64_t now_ms)
{
	memset(b, 0, sizeof(*b));
	snprintf(b->project, sizeof(b->project), "%s", project);
	b->hour = (uint32_t)(now_ms / HOUR_MS);
}

static void chspans_batch_free(struct chspans_batch *b)
{
	buf_free(&b->spans);
	buf_free(&b->origins);
	buf_free(&b->blob);
	hmap_free(&b->seen);
	free(b->hashes);
	memset(b, 0, sizeof(*b));
}

static void chspans_batch_add(struct chspans_batch *b, const struct gpuspan_in *in)
{
	b->blob.len = 0;
	spancodec_encode(in, &b->blob);
	uint64_t h = hash_bytes(b->blob.data, b->blob.len);
	struct origin_hash *hs = (struct origin_hash *)b->hashes;
	struct hmap_field_key k = HMAP_FIELD_KEY(hs, h, &h);
	uint32_t idx;
	if (!hmap_find(&b->seen, hash_u64(h), hmap_field_eq, &k, &idx)) {
		xgrow((void **)&b->hashes, &b->caphashes, b->nhashes + 1, sizeof(*b->hashes));
		b->hashes[b->nhashes] = h;
		hmap_insert(&b->seen, hash_u64(h), (uint32_t)b->nhashes++);
		ch_rb_u32(&b->origins, b->hour);
		ch_rb_u64(&b->origins, h);
		ch_rb_string(&b->origins, b->blob.data, b->blob.len);
	}
	ch_rb_string(&b->spans, b->project, strlen(b->project));
	ch_rb_u32(&b->spans, b->hour);
	ch_rb_u64(&b->spans, (uint64_t)in->start_ns);
	ch_rb_u64(&b->spans, (uint64_t)in->end_ns);
	ch_rb_u32(&b->spans, in->device);
	ch_rb_u32(&b->spans, in->stream);
	ch_rb_u8(&b->spans, in->kind);
	ch_rb_u64(&b->spans, h);
	b->n++;
}

/* --- retention --------------------------------------------------------------------- */

/* On every server: drops the hours of both tables wholly before cutoff. */
static enum ch_rc drop_hours(struct chspans *cs, struct ch_conn *c, int64_t cutoff, struct buf *err)
{
	const char *local = cs->cluster ? "_local" : "";
	enum ch_rc rc = CH_OK;
	for (int i = 0; i < ch_conn_servers(c) && rc == CH_OK; i++) {
		struct buf sql = { 0 }, ans = { 0 };
		buf_printf(&sql,
			   "SELECT DISTINCT table, partition FROM system.parts WHERE database = '%s' AND "
			   "table IN ('gpu_spans%s', 'gpu_span_origins%s') AND active",
			   ch_conn_database(c), local, local);
		rc = ch_query(c, i, sql.data, NULL, 0, 0, 0, NULL, &ans, err);
		for (char *line = ans.data, *next; rc == CH_OK && line && *line; line = next) {
			next = strchr(line, '\n');
			if (next)
				*next++ = 0;
			char *tab = strchr(line, '\t');
			if (!tab)
				continue;
			*tab = 0;
			char spans[32], origins[32];
			snprintf(spans, sizeof(spans), "gpu_spans%s", local);
			snprintf(origins, sizeof(origins), "gpu_span_origins%s", local);
			if (strcmp(line, spans) && strcmp(line, origins))
				continue;
			char *end;
			long long hour = strtoll(tab + 1, &end, 10);
			/* partitions print as the hour number; anything else is not ours */
			if (*end || end == tab + 1 || hour >= cutoff)
				continue;
			buf_reset(&sql);
			buf_printf(&sql, "ALTER TABLE %s.%s DROP PARTITION %lld", ch_conn_database(c), line, hour);
			rc = ch_query(c, i, sql.data, NULL, 0, 0, 0, NULL, NULL, err);
			if (rc == CH_OK)
				count(cs, &cs->stats.hours_dropped, 1);
		}
		buf_free(&sql);
		buf_free(&ans);
	}
	return rc;
}

static void retention(struct chspans *cs, struct ch_conn *c, int64_t now_ms)
{
	pthread_mutex_lock(&cs->mu);
	bool due = now_ms - cs->last_retention_ms >= RETENTION_EVERY_MS;
	if (due)
		cs->last_retention_ms = now_ms;
	pthread_mutex_unlock(&cs->mu);
	if (!due)
		return;
	struct buf err = { 0 };
	/* one hour more than the retention: a span may end before the hour
	 * its batch was stored in */
	if (drop_hours(cs, c, (now_ms - cs->retention_ms) / HOUR_MS - 1, &err) != CH_OK)
		log_warn("clickhouse GPU spans: retention: %s", err.data ? err.data : "failed");
	buf_free(&err);
}

static int chspans_insert(struct chspans *cs, const struct chspans_batch *b, int64_t now_ms, struct buf *err)
{
	if (!b->n)
		return 0;
	struct ch_conn *c = conn_get(cs, false, err);
	enum ch_rc rc = c ? CH_OK : CH_FAILED;
	/* origins first: a reader that sees a span finds its origin */
	if (rc == CH_OK)
		rc = ch_insert_rows(c, "gpu_span_origins", "hour, hash, data", &b->origins, err);
	if (rc == CH_OK)
		rc = ch_insert_rows(c, "gpu_spans",
				    "project, hour, start_ns, end_ns, device, stream, kind, origin", &b->spans,
				    err);
	if (rc == CH_OK)
		retention(cs, c, now_ms);
	if (c)
		conn_put(cs, c, false);
	count(cs, rc == CH_OK ? &cs->stats.added : &cs->stats.insert_failed, b->n);
	return rc == CH_OK ? 0 : -1;
}

/* --- reading ----------------------------------------------------------------------- */

struct span_row {
	int64_t start_ns, end_ns;
	uint32_t device, stream;
	uint8_t kind;
	uint64_t origin;
};

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The origins read: their bytes by hash. */
struct origins {
	struct origin_hash *h;
	size_t *off, *len;
	size_t n, caph, capoff, caplen;
	struct hmap index;
	struct buf data;
};

static void origins_free(struct origins *o)
{
	hmap_free(&o->index);
	buf_free(&o->data);
	free_all(o->h, o->off, o->len);
}

static bool origin_find(const struct origins *o, uint64_t h, uint32_t *idx)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(o->h, h, &h);
	return hmap_find(&o->index, hash_u64(h), hmap_field_eq, &k, idx);
}

/* Parses a RowBinary answer of (hash UInt64, data String) rows into o;
 * -1 when it is malformed. */
static int origins_parse(struct origins *o, const uint8_t *p, size_t n)
{
	const uint8_t *end = p + n;
	while (p < end) {
		if (end - p < 9)
			return -1;
		uint64_t h = le64(p);
		p += 8;
		uint64_t len = 0;
		int shift = 0;
		for (;;) {
			if (p >= end || shift > 63)
				return -1;
			uint8_t byte = *p++;
			len |= (uint64_t)(byte & 0x7f) << shift;
			shift += 7;
			if (!(byte & 0x80))
				break;
		}
		if (len > (uint64_t)(end - p))
			return -1;
		uint32_t idx;
		if (!origin_find(o, h, &idx)) {
			xgrow((void **)&o->h, &o->caph, o->n + 1, sizeof(*o->h));
			xgrow((void **)&o->off, &o->capoff, o->n + 1, sizeof(*o->off));
			xgrow((void **)&o->len, &o->caplen, o->n + 1, sizeof(*o->len));
			o->h[o->n].h = h;
			o->off[o->n] = o->data.len;
			o->len[o->n] = (size_t)len;
			buf_append(&o->data, p, (size_t)len);
			hmap_insert(&o->index, hash_u64(h), (uint32_t)o->n++);
		}
		p += len;
	}
	return 0;
}

/* The origins of rows[0..n), ORIGINS_PER_QUERY hashes a query. */
static enum ch_rc read_origins(struct chspans *cs, struct ch_conn *c, const struct span_row *rows,
			       size_t n, int64_t min_hour, struct origins *o, struct buf *err)
{
	struct hmap asked = { 0 };
	struct origin_hash *hs = NULL;
	size_t nh = 0, caph = 0;
	enum ch_rc rc = CH_OK;
	for (size_t i = 0; i < n; i++) {
		uint64_t h = rows[i].origin;
		struct hmap_field_key k = HMAP_FIELD_KEY(hs, h, &h);
		uint32_t idx;
		if (hmap_find(&asked, hash_u64(h), hmap_field_eq, &k, &idx))
			continue;
		xgrow((void **)&hs, &caph, nh + 1, sizeof(*hs));
		hs[nh].h = h;
		hmap_insert(&asked, hash_u64(h), (uint32_t)nh++);
	}
	struct buf sql = { 0 }, ans = { 0 };
	for (size_t from = 0; from < nh && rc == CH_OK; from += ORIGINS_PER_QUERY) {
		buf_reset(&sql);
		buf_printf(&sql, "SELECT hash, any(data) FROM %s.gpu_span_origins WHERE hour >= %" PRId64
			   " AND hash IN (", cs->database ? cs->database : "ember", min_hour);
		for (size_t i = from; i < nh && i < from + ORIGINS_PER_QUERY; i++)
			buf_printf(&sql, "%s%" PRIu64, i > from ? ", " : "", hs[i].h);
		buf_puts(&sql, ") GROUP BY hash FORMAT RowBinary");
		ans.len = 0;
		rc = ch_query(c, 0, "", sql.data, sql.len, 0, 0, NULL, &ans, err);
		if (rc == CH_OK && origins_parse(o, (const uint8_t *)ans.data, ans.len) < 0) {
			buf_puts(err, "clickhouse: a malformed answer to the GPU span origins' query");
			rc = CH_FAILED;
		}
	}
	buf_free(&sql);
	buf_free(&ans);
	hmap_free(&asked);
	free(hs);
	return rc;
}

/* Adds rows[0..n) to into, each with its decoded origin (the last one
 * decoded is kept: neighbours often share it); a span whose origin is
 * missing or malformed is skipped and counted. */
static void add_rows(struct chspans *cs, const char *project, const struct span_row *rows, size_t n,
		     const struct origins *o, int64_t now_ms, struct gpuspans *into)
{
	struct spancodec_origin dec;
	spancodec_init(&dec);
	uint64_t have = 0, orphans = 0;
	bool decoded = false;
	for (size_t i = 0; i < n; i++) {
		uint32_t idx;
		if (!decoded || have != rows[i].origin) {
			decoded = origin_find(o, rows[i].origin, &idx) &&
				  spancodec_decode(o->data.data + o->off[idx], o->len[idx], &dec) == 0;
			have = rows[i].origin;
		}
		if (!decoded) {
			orphans++;
			continue;
		}
		struct gpuspan_in in = { .start_ns = rows[i].start_ns, .end_ns = rows[i].end_ns,
					 .device = rows[i].device, .stream = rows[i].stream,
					 .kind = rows[i].kind };
		spancodec_fill(&dec, &in);
		gpuspans_add(into, project, &in, 1, now_ms);
	}
	spancodec_free(&dec);
	if (orphans)
		count(cs, &cs->stats.orphans, orphans);
}

static int chspans_read(struct chspans *cs, const char *project, int64_t from_ns, int64_t to_ns,
			int64_t now_ms, size_t max, struct gpuspans *into, bool *truncated, struct buf *err)
{
	*truncated = false;
	if (max > CHSPANS_READ_MAX)
		max = CHSPANS_READ_MAX;
	int64_t min_end_ns = (now_ms - cs->retention_ms) * 1000000;
	int64_t low = MAX(from_ns, min_end_ns);
	int64_t min_hour = (low > 0 ? low / 1000000 / HOUR_MS : 0) - 1;
	struct ch_conn *c = conn_get(cs, true, err);
	if (!c) {
		count(cs, &cs->stats.read_failed, 1);
		return -1;
	}
	struct buf sql = { 0 }, ans = { 0 };
	buf_printf(&sql, "SELECT start_ns, end_ns, device, stream, kind, origin FROM %s.gpu_spans WHERE project = ",
		   cs->database ? cs->database : "ember");
	ch_sql_string(&sql, project, strlen(project));
	buf_printf(&sql, " AND hour >= %" PRId64 " AND end_ns > %" PRId64 " AND start_ns < %" PRId64
		   " AND end_ns >= %" PRId64 " ORDER BY end_ns DESC, start_ns DESC LIMIT %zu FORMAT RowBinary",
		   min_hour, from_ns, to_ns, min_end_ns, max + 1);
	enum ch_rc rc = ch_query(c, 0, "", sql.data, sql.len, 0, 0, NULL, &ans, err);
	struct span_row *rows = NULL;
	size_t n = 0;
	if (rc == CH_OK && ans.len % SPAN_ROW) {
		buf_puts(err, "clickhouse: a malformed answer to the GPU spans' query");
		rc = CH_FAILED;
	}
	if (rc == CH_OK) {
		n = ans.len / SPAN_ROW;
		if (n > max) {
			n = max;
			*truncated = true;
		}
		rows = xmalloc((n ? n : 1) * sizeof(*rows));
		for (size_t i = 0; i < n; i++) {
			const uint8_t *p = (const uint8_t *)ans.data + i * SPAN_ROW;
			rows[i] = (struct span_row){ .start_ns = (int64_t)le64(p), .end_ns = (int64_t)le64(p + 8),
						     .device = le32(p + 16), .stream = le32(p + 20),
						     .kind = p[24], .origin = le64(p + 25) };
		}
	}
	struct origins o = { 0 };
	if (rc == CH_OK)
		rc = read_origins(cs, c, rows, n, min_hour - 1, &o, err);
	if (rc == CH_OK)
		add_rows(cs, project, rows, n, &o, now_ms, into);
	else
		count(cs, &cs->stats.read_failed, 1);
	origins_free(&o);
	free(rows);
	buf_free(&sql);
	buf_free(&ans);
	conn_put(cs, c, true);
	return rc == CH_OK ? 0 : -1;
}

/* --- the span store ------------------------------------------------------------- */

static void gather(void *ctx, const struct gpuspan_in *span)
{
	chspans_batch_add(ctx, span);
}

static int cs_add(void *impl, const char *project, span_iter_fn iter, const void *src, int64_t now_ms,
		  struct buf *err)
{
	struct chspans_batch b;
	chspans_batch_init(&b, project, now_ms);
	iter(src, gather, &b);
	struct buf why = { 0 };
	int rc = chspans_insert(impl, &b, now_ms, &why);
	if (rc < 0)
		buf_printf(err, "%zu GPU spans not kept: %s", b.n, why.data ? why.data : "");
	buf_free(&why);
	chspans_batch_free(&b);
	return rc;
}

/* The spans, read into memory for this call (the read applied the
 * retention; the struct's own, longer than any --gpu-span-retention,
 * drops nothing). */
static int cs_read(void *impl, const char *project, int64_t from_ns, int64_t to_ns, int64_t now_ms,
		   size_t max, struct gpuspans **out, bool *truncated, struct buf *err)
{
	struct gpuspans *g = gpuspans_new(8 * 86400000LL, CHSPANS_READ_MAX);
	if (chspans_read(impl, project, from_ns, to_ns, now_ms, max, g, truncated, err) < 0) {
		if (!err->len)
			buf_puts(err, "clickhouse: the GPU spans' read failed");
		gpuspans_free(g);
		return -1;
	}
	*out = g;
	return 0;
}

static void cs_release(void *impl, struct gpuspans *g)
{
	(void)impl;
	gpuspans_free(g);
}

static void cs_close(void *impl)
{
	chspans_close(impl);
}

static const struct span_store_ops cs_ops = {
	.add = cs_add,
	.read = cs_read,
	.release = cs_release,
	.stats = cs_stats,
	.close = cs_close,
};

struct span_store *chspans_open(const struct ch_conn_opts *conn, const char *cluster,
				int64_t retention_ms, struct buf *err)
{
	struct chspans *cs = cs_open(conn, cluster, retention_ms, err);
	return cs ? span_store_new(&cs_ops, cs) : NULL;
}
