/* metricsender.c - see metricsender.h. */
#include "metricsender.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metricbatch.h"
#include "sendq.h"
#include "util.h"

struct metricsender {
	struct metricsender_opts o;
	char project[129];
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stopping;
	struct sendq q;              /* encoded batches; under lock */
	struct http_client *http;    /* the thread's */
	struct metricsender_stats stats; /* under lock */
	uint64_t sequence;
	int64_t last_ms;
	uint64_t fail_streak;
};

static void collect(struct metricsender *s)
{
	struct metric_batch b;
	metric_batch_init(&b);
	int64_t now = now_unix_ms();
	uint64_t t0 = now_mono_ns();
	if (s->o.host_metrics)
		hostmetrics_collect(s->o.host, &b, now, t0);
	if (s->o.gpu)
		gpumetrics_collect(s->o.gpu, s->o.host, &b, now);
	uint64_t cost = now_mono_ns() - t0;
	struct hostmetrics_stats hs;
	hostmetrics_get_stats(s->o.host, &hs);
	struct buf enc = { 0 };
	int rc = 0;
	if (b.npoints) {
		struct metric_batch_meta meta = {
			.agent_instance = s->o.agent_instance,
			.sequence = ++s->sequence,
			.project = s->project,
			.start_unix_ms = s->last_ms ? s->last_ms : now - s->o.interval_ms,
			.end_unix_ms = now,
		};
		rc = metric_batch_encode(&b, &meta, &enc);
	}
	log_debug("metrics: %zu points of %zu series in %zu label sets, %zu bytes; collected in %llu us",
		  b.npoints, b.nseries, b.nsets, enc.len, (unsigned long long)(cost / 1000));
	pthread_mutex_lock(&s->lock);
	s->stats.collections++;
	s->stats.points += b.npoints;
	s->stats.refused_points += b.refused;
	s->stats.last_collect_ns = cost;
	s->stats.processes_dropped = hs.processes_dropped;
	if (rc < 0) {
		log_warn("metrics: encoding the batch failed; dropped");
	} else if (enc.len) {
		uint64_t dropped = s->q.dropped_batches;
		size_t len = enc.len;
		sendq_push(&s->q, buf_steal(&enc, NULL), len, s->sequence);
		if (s->q.dropped_batches != dropped)
			log_warn("metrics: send queue full (%zu bytes): dropped %llu oldest batch(es), %llu in total",
				 s->q.max_bytes, (unsigned long long)(s->q.dropped_batches - dropped),
				 (unsigned long long)s->q.dropped_batches);
	}
	pthread_mutex_unlock(&s->lock);
	buf_free(&enc);
	metric_batch_free(&b);
	s->last_ms = now;
}

/* Sends the queued batches, oldest first, until one must wait. */
static void send_queued(struct metricsender *s)
{
	for (;;) {
		pthread_mutex_lock(&s->lock);
		struct sendq_item *it = sendq_pop(&s->q);
		pthread_mutex_unlock(&s->lock);
		if (!it)
			return;
		struct buf resp = { 0 }, why = { 0 };
		int status = http_send(s->http, "POST", "/ingest/v1/metrics", "application/x-protobuf",
				       "zstd", it->data, it->len, &resp, &why);
		bool retry = status < 0 || status == 408 || status == 429 || status == 401 ||
			     status == 403 || status >= 500;
		pthread_mutex_lock(&s->lock);
		if (status >= 200 && status < 300) {
			s->stats.batches_sent++;
			s->stats.bytes_sent += it->len;
			sendq_item_free(&s->q, it);
			if (s->fail_streak)
				log_info("metrics: delivering again after %llu failed attempts",
					 (unsigned long long)s->fail_streak);
			s->fail_streak = 0;
		} else if (retry) {
			s->stats.send_failures++;
			if (s->fail_streak++ % 60 == 0)
				log_warn("metrics: cannot deliver batch %llu (%s%.200s); kept, retrying at the next interval",
					 (unsigned long long)it->seq, status < 0 ? "" : "server answered ",
					 status < 0 ? (why.data ? why.data : "no answer") : (resp.data ? resp.data : ""));
			sendq_push_front(&s->q, it);
			pthread_mutex_unlock(&s->lock);
			buf_free(&resp);
			buf_free(&why);
			return;
		} else {
			s->stats.rejected_batches++;
			log_error("metrics: batch %llu dropped: server rejected it with %d: %.200s",
				  (unsigned long long)it->seq, status, resp.data ? resp.data : "");
			sendq_item_free(&s->q, it);
		}
		pthread_mutex_unlock(&s->lock);
		buf_free(&resp);
		buf_free(&why);
	}
}

static void *run(void *arg)
{
	struct metricsender *s = arg;
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (;;) {
		collect(s);
		send_queued(s);
		timespec_add_ns(&next, (uint64_t)s->o.interval_ms * 1000000ull);
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec + 1) /* fell behind (a slow send): start again from now */
			next = now;
		pthread_mutex_lock(&s->lock);
		while (!s->stopping) {
			int rc = pthread_cond_timedwait(&s->cond, &s->lock, &next);
			if (rc == ETIMEDOUT)
				break;
		}
		bool stop = s->stopping;
		pthread_mutex_unlock(&s->lock);
		if (stop)
			break;
	}
	send_queued(s); /* one last try */
	return NULL;
}

static void free_parts(struct metricsender_opts *o)
{
	hostmetrics_free(o->host);
	gpumetrics_close(o->gpu);
}

struct metricsender *metricsender_start(const struct metricsender_opts *opts)
{
	struct metricsender *s = xcalloc(1, sizeof(*s));
	s->o = *opts;
	snprintf(s->project, sizeof(s->project), "%s", opts->project);
	s->http = http_client_new(opts->http);
	if (!s->http) {
		free_parts(&s->o);
		free(s);
		return NULL;
	}
	sendq_init(&s->q, opts->max_queue_bytes);
	pthread_mutex_init(&s->lock, NULL);
	cond_init_monotonic(&s->cond);
	if (pthread_create(&s->thread, NULL, run, s) != 0) {
		http_client_free(s->http);
		pthread_mutex_destroy(&s->lock);
		pthread_cond_destroy(&s->cond);
		free_parts(&s->o);
		free(s);
		return NULL;
	}
	pthread_setname_np(s->thread, "ember-metrics");
	return s;
}

void metricsender_get_stats(struct metricsender *s, struct metricsender_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	*out = s->stats;
	out->dropped_batches = s->q.dropped_batches;
	out->queued_batches = s->q.count;
	pthread_mutex_unlock(&s->lock);
}

void metricsender_stop(struct metricsender *s)
{
	if (!s)
		return;
	thread_stop_join(s->thread, &s->lock, &s->cond, &s->stopping);
	if (s->q.count)
		log_warn("metrics: stopping with %zu batch(es) not delivered", s->q.count);
	sendq_free(&s->q);
	http_client_free(s->http);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free_parts(&s->o);
	free(s);
}
