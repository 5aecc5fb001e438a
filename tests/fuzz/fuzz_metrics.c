/* Fuzz target: the server's metrics ingest (server/metrics/metrics.h). Any body
 * (zstd, or 'R' + raw protobuf) is decoded and validated; a batch that
 * passes must have every index inside its tables, and must store into an
 * in-memory-sized database without error and answer a query (with
 * percentiles too) and the GPU topology route's function. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "server/metrics/gputopo.h"
#include "server/metrics/metrics.h"
#include "util.h"

/* Opened once per fuzzing process: a store under /tmp, reused by every
 * input (LibFuzzer runs inputs one after another in one thread), removed
 * when the process exits. */
static struct metrics_store *store;
static char dir[] = "/tmp/ember-fuzz-metrics-XXXXXX";

static void remove_store(void)
{
	static const char *const files[] = { "metrics.db", "metrics.db-wal", "metrics.db-shm" };
	metrics_close(store);
	store = NULL;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char path[sizeof(dir) + 32];
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!store) {
		struct buf err = { 0 };
		if (!mkdtemp(dir) || metrics_open_dir(dir, 3600000, &store, &err) < 0)
			abort();
		buf_free(&err);
		atexit(remove_store);
	}
	struct buf z = { 0 }, err = { 0 }, out = { 0 };
	const void *body;
	size_t len;
	fuzz_body(data, size, &z, &body, &len);
	Ember__Ingest__V1__MetricsBatch *b = metrics_decode(body, len, &err);
	if (b) {
		size_t sum = 0;
		for (size_t i = 0; i < b->n_label_set_lengths; i++)
			sum += b->label_set_lengths[i];
		if (sum != b->n_label_set_strings)
			abort();
		for (size_t i = 0; i < b->n_label_set_strings; i++)
			if (b->label_set_strings[i] >= b->n_strings)
				abort();
		for (size_t i = 0; i < b->n_point_series; i++)
			if (b->point_series[i] >= b->n_series_names)
				abort();
		if (metrics_store_batch(store, "fuzz", b, now_unix_ms(), &err) < 0)
			abort();
		const char *q = "{\"filter\":{\"start_ts\":0,\"end_ts\":4102444800000},\"metric\":\"m\",\"group_by\":\"k\",\"num_buckets\":10}";
		int rc = metrics_query(store, "fuzz", q, strlen(q), &out, &err);
		if (rc != 0 && rc != 404)
			abort();
		/* The same with percentiles, and the GPU topology of whatever
		 * was stored (labels as hostile as the batch). */
		const char *qp = "{\"filter\":{\"start_ts\":0,\"end_ts\":4102444800000},\"metric\":\"m\",\"percentiles\":true}";
		buf_reset(&out);
		rc = metrics_query(store, "fuzz", qp, strlen(qp), &out, &err);
		if (rc != 0 && rc != 404)
			abort();
		const char *qt = "{\"filter\":{\"start_ts\":0,\"end_ts\":4102444800000}}";
		buf_reset(&out);
		rc = gputopo_query(store, "fuzz", qt, strlen(qt), &out, &err);
		if (rc != 0 && rc != 400)
			abort();
		metrics_decode_free(b);
	} else if (!err.len) {
		abort();
	}
	buf_free(&z);
	buf_free(&err);
	buf_free(&out);
	return 0;
}
