/* metricbatch.c - see metricbatch.h. */
#include "metricbatch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "ingest.pb-c.h"
#include "util.h"

void metric_batch_init(struct metric_batch *b)
{
	memset(b, 0, sizeof(*b));
	strtab_init(&b->strings);
}

void metric_batch_free(struct metric_batch *b)
{
	strtab_free(&b->strings);
	hmap_free(&b->set_index);
	hmap_free(&b->series_index);
	free_all(b->set_lengths, b->set_strings, b->set_offsets, b->series, b->point_series, b->point_ms,
		 b->point_values);
	memset(b, 0, sizeof(*b));
}

uint32_t metric_batch_str(struct metric_batch *b, const char *s)
{
	size_t n = strnlen(s, MB_MAX_STRING);
	if (str_printable(s, n))
		return strtab_intern(&b->strings, s, n);
	/* The server refuses a batch holding a control character, and a
	 * process or thread may name itself with one: replaced, so an odd
	 * name costs its own characters, not every metric of the interval. */
	char tmp[MB_MAX_STRING];
	memcpy(tmp, s, n);
	str_make_printable(tmp, n);
	return strtab_intern(&b->strings, tmp, n);
}

struct set_key {
	const struct metric_batch *b;
	const uint32_t *kv;
	size_t n;
};

static bool set_eq(const void *ctx, uint32_t idx)
{
	const struct set_key *k = ctx;
	return k->b->set_lengths[idx] == k->n &&
	       memcmp(k->b->set_strings + k->b->set_offsets[idx], k->kv, k->n * sizeof(uint32_t)) == 0;
}

uint32_t metric_batch_labels(struct metric_batch *b, const uint32_t *kv, size_t n)
{
	n = MIN(n & ~(size_t)1, (size_t)(2 * MB_MAX_LABELS));
	struct set_key k = { b, kv, n };
	uint64_t h = hash_bytes(kv, n * sizeof(uint32_t));
	uint32_t idx;
	if (hmap_find(&b->set_index, h, set_eq, &k, &idx))
		return idx;
	xgrow((void **)&b->set_lengths, &b->capsets, b->nsets + 1, sizeof(*b->set_lengths));
	xgrow((void **)&b->set_offsets, &b->capset_offsets, b->nsets + 1, sizeof(*b->set_offsets));
	xgrow((void **)&b->set_strings, &b->capset_strings, b->nset_strings + n + 1,
	      sizeof(*b->set_strings));
	idx = (uint32_t)b->nsets++;
	b->set_lengths[idx] = (uint32_t)n;
	b->set_offsets[idx] = b->nset_strings;
	if (n)
		memcpy(b->set_strings + b->nset_strings, kv, n * sizeof(uint32_t));
	b->nset_strings += n;
	hmap_insert(&b->set_index, h, idx);
	return idx;
}

struct series_key {
	const struct metric_batch *b;
	struct mb_series s;
};

static bool series_eq(const void *ctx, uint32_t idx)
{
	const struct series_key *k = ctx;
	const struct mb_series *s = &k->b->series[idx];
	return s->name == k->s.name && s->unit == k->s.unit && s->labels == k->s.labels;
}

int metric_batch_add(struct metric_batch *b, const char *name, const char *unit, uint32_t labels,
		     int64_t ts_ms, double value)
{
	if (b->npoints >= MB_MAX_POINTS || !isfinite(value) || labels >= b->nsets) {
		b->refused++;
		return -1;
	}
	struct series_key k = { b, { metric_batch_str(b, name), metric_batch_str(b, unit), labels } };
	uint64_t h = hash_mix(hash_mix(hash_u64(k.s.name), k.s.unit), k.s.labels);
	uint32_t idx;
	if (!hmap_find(&b->series_index, h, series_eq, &k, &idx)) {
		if (b->nseries >= MB_MAX_SERIES) {
			b->refused++;
			return -1;
		}
		xgrow((void **)&b->series, &b->capseries, b->nseries + 1, sizeof(*b->series));
		idx = (uint32_t)b->nseries++;
		b->series[idx] = k.s;
		hmap_insert(&b->series_index, h, idx);
	}
	size_t cap = b->cappoints;
	xgrow((void **)&b->point_series, &cap, b->npoints + 1, sizeof(*b->point_series));
	cap = b->cappoints;
	xgrow((void **)&b->point_ms, &cap, b->npoints + 1, sizeof(*b->point_ms));
	cap = b->cappoints;
	xgrow((void **)&b->point_values, &cap, b->npoints + 1, sizeof(*b->point_values));
	b->cappoints = cap;
	b->point_series[b->npoints] = idx;
	b->point_ms[b->npoints] = ts_ms;
	b->point_values[b->npoints] = value;
	b->npoints++;
	return 0;
}

int metric_batch_encode(const struct metric_batch *b, const struct metric_batch_meta *meta,
			struct buf *out)
{
	Ember__Ingest__V1__MetricsBatch m = EMBER__INGEST__V1__METRICS_BATCH__INIT;
	m.agent_instance = (char *)meta->agent_instance;
	m.sequence = meta->sequence;
	m.project = (char *)meta->project;
	m.start_unix_ms = meta->start_unix_ms;
	m.end_unix_ms = meta->end_unix_ms;
	size_t ns = strtab_count(&b->strings);
	char **strs = xcalloc(ns ? ns : 1, sizeof(*strs));
	for (size_t i = 0; i < ns; i++)
		strs[i] = (char *)strtab_get(&b->strings, (uint32_t)i);
	m.n_strings = ns;
	m.strings = strs;
	m.n_label_set_lengths = b->nsets;
	m.label_set_lengths = b->set_lengths;
	m.n_label_set_strings = b->nset_strings;
	m.label_set_strings = b->set_strings;
	uint32_t *cols = xcalloc(3 * (b->nseries ? b->nseries : 1), sizeof(*cols));
	for (size_t i = 0; i < b->nseries; i++) {
		cols[i] = b->series[i].name;
		cols[b->nseries + i] = b->series[i].unit;
		cols[2 * b->nseries + i] = b->series[i].labels;
	}
	m.n_series_names = m.n_series_units = m.n_series_label_sets = b->nseries;
	m.series_names = cols;
	m.series_units = cols + b->nseries;
	m.series_label_sets = cols + 2 * b->nseries;
	m.n_point_series = m.n_point_times_ms = m.n_point_values = b->npoints;
	m.point_series = b->point_series;
	m.point_times_ms = b->point_ms;
	m.point_values = b->point_values;
	m.dropped_processes = b->dropped_processes;
	size_t n = ember__ingest__v1__metrics_batch__get_packed_size(&m);
	uint8_t *raw = xmalloc(n ? n : 1);
	ember__ingest__v1__metrics_batch__pack(&m, raw);
	int rc = zstd_compress_buf(raw, n, 3, out);
	free(raw);
	free(cols);
	free(strs);
	return rc;
}

size_t metric_batch_memory(const struct metric_batch *b)
{
	return sizeof(*b) + b->strings.bytes.cap + b->capsets * (sizeof(uint32_t) + sizeof(size_t)) +
	       b->capset_strings * sizeof(uint32_t) + b->capseries * sizeof(struct mb_series) +
	       b->cappoints * (sizeof(uint32_t) + sizeof(int64_t) + sizeof(double));
}
