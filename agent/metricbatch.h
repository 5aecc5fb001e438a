/* metricbatch.h - one interval's metrics, built by the collectors
 * (hostmetrics.h, gpumetrics.h) and encoded as an ingest MetricsBatch
 * (lib/proto/ingest.proto, docs/protocol.md §4).
 *
 * Strings, label sets and series are interned: a label set is a list of
 * key/value string ids, stored once however many series use it, and a
 * series is (metric name, unit, label set). A point is (series, time,
 * value). Bounded: at most MB_MAX_POINTS points, MB_MAX_SERIES series and
 * MB_MAX_LABELS pairs per label set (well inside what the server accepts);
 * a point past a bound is refused and counted in `refused`.
 * Ownership: the batch owns every string it interned. Not thread-safe.
 */
#ifndef EMBER_AGENT_METRICBATCH_H
#define EMBER_AGENT_METRICBATCH_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "hmap.h"
#include "strtab.h"

#define MB_MAX_POINTS 50000
#define MB_MAX_SERIES 20000
#define MB_MAX_LABELS 64       /* key/value pairs in one label set */
#define MB_MAX_STRING 512      /* longer strings are cut */

struct mb_series {
	uint32_t name, unit, labels;
};

struct metric_batch {
	struct strtab strings;
	uint32_t *set_lengths;      /* string ids per label set */
	size_t nsets, capsets;
	uint32_t *set_strings;      /* all label sets' ids, one after another */
	size_t nset_strings, capset_strings;
	size_t *set_offsets;        /* where each set starts in set_strings */
	size_t capset_offsets;
	struct hmap set_index;
	struct mb_series *series;
	size_t nseries, capseries;
	struct hmap series_index;
	uint32_t *point_series;
	int64_t *point_ms;
	double *point_values;
	size_t npoints, cappoints;
	uint64_t refused;           /* points refused by a bound */
	uint64_t dropped_processes; /* set by the host collector */
};

struct metric_batch_meta {
	const char *agent_instance;
	uint64_t sequence;
	const char *project;
	int64_t start_unix_ms, end_unix_ms;
};

void metric_batch_init(struct metric_batch *b);
void metric_batch_free(struct metric_batch *b);
uint32_t metric_batch_str(struct metric_batch *b, const char *s);
/* The label set of kv[0..n) (key, value string id pairs, n even; pairs
 * past MB_MAX_LABELS are left out), interned. */
uint32_t metric_batch_labels(struct metric_batch *b, const uint32_t *kv, size_t n);
/* Adds a point of metric name (in unit) for label set `labels`. Returns
 * 0, or -1 when a bound refused it (counted). Non-finite values are
 * refused too. */
int metric_batch_add(struct metric_batch *b, const char *name, const char *unit, uint32_t labels,
		     int64_t ts_ms, double value);
/* Appends the zstd-compressed MetricsBatch to out. Returns 0 or -1. */
int metric_batch_encode(const struct metric_batch *b, const struct metric_batch_meta *meta,
			struct buf *out);
/* Memory the batch holds, roughly. */
size_t metric_batch_memory(const struct metric_batch *b);

#endif
