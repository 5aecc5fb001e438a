/* metrics.h - host and GPU metrics: the ingest decoder, the store
 * (SQLite, DATA_DIR/metrics.db; or the shared PostgreSQL of
 * --metadata postgres://..., so that every replica reads every replica's
 * metrics) and the queries (docs/internals/metrics.md).
 *
 * Ingest: metrics_decode() decompresses (bounded) and unpacks a
 * MetricsBatch (lib/proto/ingest.proto) and checks every count, index,
 * length and value against the MET_MAX_* bounds; metrics_store_batch()
 * writes it in one transaction: a series is (project, metric name, label
 * set) with the label set kept as canonical JSON (keys sorted); its points
 * of one hour are one chunk row (12 bytes a point, sorted by time), into
 * which a batch's points are merged: one point per (series, ts_ms), so a
 * batch sent again replaces, never duplicates. At most
 * METRICS_CHUNK_MAX_POINTS per series and hour (the rest are counted in
 * points_refused). It returns only once committed.
 * Retention: points older than retention_ms are deleted, and series left
 * without points, by metrics_retention(), which metrics_store_batch runs
 * at most every METRICS_RETENTION_EVERY_MS (and metrics_open once).
 *
 * On PostgreSQL a batch is five statements over arrays (series upserted,
 * their ids read, chunk rows made and locked with SELECT ... FOR UPDATE
 * until the commit, chunks written back), so replicas storing into one
 * chunk take turns; a series two replicas add at once is added once.
 *
 * Queries read through a second connection (WAL: readers do not wait for
 * the writer): the series of one metric in a range, filtered by a CEL
 * program (cel.h) evaluated once per series, their points bucketed in
 * time (temporal avg or max per series and bucket), then combined per
 * group (spatial sum, avg or max of the series having a value in the
 * bucket).
 *
 * Thread-safe: one mutex for the writer, one for the reader.
 */
#ifndef EMBER_SERVER_METRICS_H
#define EMBER_SERVER_METRICS_H

#include <stdint.h>

#include "buf.h"
#include "ingest.pb-c.h"

#define MET_MAX_COMPRESSED (16u << 20)
#define MET_MAX_DECOMPRESSED (64u << 20)
#define MET_MAX_STRINGS 200000
#define MET_MAX_STRING 1024     /* bytes of one string */
#define MET_MAX_LABEL_SETS 50000
#define MET_MAX_LABELS 64       /* key/value pairs in one label set */
#define MET_MAX_SERIES 50000
#define MET_MAX_POINTS 200000
#define MET_MAX_BUCKETS 10000
#define MET_MAX_GROUPS 1000
#define MET_MAX_QUERY_SERIES 200000
#define METRICS_RETENTION_EVERY_MS 600000
#define METRICS_CHUNK_MAX_POINTS 65536 /* points of one series in one hour */
#define MET_MAX_PERCENTILE_POINTS 4000000u /* points kept for one query's percentiles */

struct metrics_store;

struct metrics_stats {
	uint64_t batches, points;      /* stored since start */
	uint64_t retention_deleted;    /* points deleted by the retention */
	uint64_t points_refused;       /* past METRICS_CHUNK_MAX_POINTS in an hour */
};

/* url: an SQLite file's path (DATA_DIR/metrics.db) or postgres://...
 * (password: NULL, or its password). -1 with err set. */
int metrics_open(const char *url, const char *password, int64_t retention_ms,
		 struct metrics_store **out, struct buf *err);
/* metrics_open of dir/metrics.db. */
int metrics_open_dir(const char *dir, int64_t retention_ms, struct metrics_store **out, struct buf *err);
void metrics_close(struct metrics_store *m);
void metrics_get_stats(struct metrics_store *m, struct metrics_stats *out);

/* NULL with a message for the client in err when the body is not a valid
 * batch within the bounds. */
Ember__Ingest__V1__MetricsBatch *metrics_decode(const void *zbody, size_t len, struct buf *err);
void metrics_decode_free(Ember__Ingest__V1__MetricsBatch *b);
/* Checks a decoded message (metrics_decode does). 0 or -1 with err. */
int metrics_validate(const Ember__Ingest__V1__MetricsBatch *b, struct buf *err);

/* Stores a validated batch under project_id. 0 once committed, -1 with err. */
int metrics_store_batch(struct metrics_store *m, const char *project_id,
			const Ember__Ingest__V1__MetricsBatch *b, int64_t now_ms, struct buf *err);
/* Deletes what is older than now_ms - retention. 0 or -1. */
int metrics_retention(struct metrics_store *m, int64_t now_ms, struct buf *err);

/* The query endpoints' answers (docs/api.md). Return 0 with the JSON in
 * out, or an HTTP status (400, 404, 500; 503: the database could not be
 * reached) with a message in err. */
int metrics_query(struct metrics_store *m, const char *project_id, const char *body, size_t len,
		  struct buf *out, struct buf *err);
/* The p-th percentile (nearest rank: the smallest value with at least p %
 * of the values at or below it) of v[0..n), sorted ascending, n > 0.
 * metrics_query answers p50/p95/p99 per group with "percentiles": true. */
double metrics_percentile(const double *v, size_t n, double p);
int metrics_names(struct metrics_store *m, const char *project_id, const char *body, size_t len,
		  struct buf *out, struct buf *err);

/* Calls fn for each point of metric name (every project) with from_ms <=
 * ts < to_ms, at most max_points, by time within each hour: the project,
 * the series' labels (canonical JSON), the time and the value. Used for
 * events stored as points (hw.gpu.xid: the Slack notifier). 0, or -1
 * with err. */
typedef void (*metrics_point_fn)(void *ctx, const char *project, const char *labels, int64_t ts_ms,
				 double value);
int metrics_points(struct metrics_store *m, const char *name, int64_t from_ms, int64_t to_ms,
		   size_t max_points, metrics_point_fn fn, void *ctx, struct buf *err);

/* Calls fn once for each series of metric name in project that has a
 * point in from_ms <= ts < to_ms, with that series' latest such point
 * (read from its newest chunk before to_ms). More than max_series series
 * is an error (-1 with err); 0 otherwise. */
int metrics_latest(struct metrics_store *m, const char *project, const char *name, int64_t from_ms, int64_t to_ms,
		   size_t max_series, metrics_point_fn fn, void *ctx, struct buf *err);

#endif
