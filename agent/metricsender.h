/* metricsender.h - the thread that collects host and GPU metrics every
 * -collect-metrics-interval and sends them to POST /ingest/v1/metrics
 * (docs/protocol.md §4), in both protocol modes.
 *
 * Each interval: the collectors fill one metric batch (hostmetrics.h
 * unless -enable-host-metrics=false, gpumetrics.h when NVML loaded), it is
 * encoded (zstd) and queued in a bounded queue (sendq.h, max_queue_bytes:
 * when the server is unreachable the oldest batches are dropped first and
 * counted), then everything queued is sent, oldest first:
 *   2xx              delivered
 *   400, 413, 415... refused for good: dropped, logged, counted
 *   no answer, 5xx, 408, 429, 401, 403
 *                    kept, tried again at the next interval
 * The server stores a point once per (series, time), so sending a batch
 * again after a lost answer stores nothing twice.
 * Ownership: the sender owns its HTTP client, queue, and the collectors
 * handed to it (freed by metricsender_stop).
 */
#ifndef EMBER_AGENT_METRICSENDER_H
#define EMBER_AGENT_METRICSENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpumetrics.h"
#include "hostmetrics.h"
#include "httpc.h"

struct metricsender_opts {
	const struct http_opts *http;
	const char *project;
	const char *agent_instance;   /* must outlive the sender */
	int64_t interval_ms;
	size_t max_queue_bytes;
	struct hostmetrics *host;     /* owned from now on; always set (labels) */
	bool host_metrics;            /* collect with it */
	struct gpumetrics *gpu;       /* owned from now on; NULL = no GPU metrics */
};

struct metricsender_stats {
	uint64_t collections, points, batches_sent, bytes_sent;
	uint64_t send_failures, rejected_batches, dropped_batches;
	uint64_t refused_points;     /* points over a batch's bounds */
	uint64_t last_collect_ns;    /* the last collection's cost */
	uint64_t processes_dropped;  /* in the last collection */
	size_t queued_batches;
};

struct metricsender;

/* Returns NULL when the thread or client cannot start (opts' collectors
 * are then freed). */
struct metricsender *metricsender_start(const struct metricsender_opts *opts);
void metricsender_get_stats(struct metricsender *s, struct metricsender_stats *out);
/* Tries once more to deliver what is queued, and stops. */
void metricsender_stop(struct metricsender *s);

#endif
