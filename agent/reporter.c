/* reporter.c - see reporter.h. */
#include "reporter.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "sendq.h"
#include "util.h"

#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 30000

struct reporter {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sendq q;
	struct http_client *http;
	struct reporter_stats stats;
	int stopping;
	uint64_t flush_deadline_ns;
	uint64_t streak;      /* consecutive failed attempts */
	uint64_t last_warn_ns;
};

static void deadline_in(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Sends one batch. Returns 1 delivered, 0 retry later, -1 drop; why
 * describes a failure. */
static int deliver(struct reporter *r, const struct sendq_item *it, struct buf *why)
{
	struct buf resp = { 0 };
	int status = http_send(r->http, "POST", "/ingest/v1/batch", "application/x-protobuf",
			       "zstd", it->data, it->len, &resp, why);
	int result;
	if (status >= 200 && status < 300) {
		result = 1;
	} else if (status < 0) {
		result = 0;
	} else if (status == 408 || status == 429 || status == 401 || status == 403 ||
		   status >= 500) {
		buf_printf(why, "server answered %d: %.200s", status, resp.data ? resp.data : "");
		result = 0;
	} else {
		buf_printf(why, "server rejected it with %d: %.200s", status,
			   resp.data ? resp.data : "");
		result = -1;
	}
	buf_free(&resp);
	return result;
}

/* A streak of failures is logged when it starts, then at most once a
 * minute, and once more when delivery works again. */
static void note_failure(struct reporter *r, const struct sendq_item *it, const char *why)
{
	uint64_t now = now_mono_ns();
	r->streak++;
	if (r->streak == 1 || now - r->last_warn_ns >= 60ull * 1000000000ull) {
		log_warn("cannot deliver batch %llu (%llu failed attempts in a row, %zu batches queued): %s; retrying",
			 (unsigned long long)it->seq, (unsigned long long)r->streak, r->q.count + 1, why);
		r->last_warn_ns = now;
	}
}

static void *run(void *arg)
{
	struct reporter *r = arg;
	long backoff = 0;
	pthread_mutex_lock(&r->lock);
	for (;;) {
		while (!r->q.head && !r->stopping)
			pthread_cond_wait(&r->cond, &r->lock);
		if (r->stopping && (!r->q.head || now_mono_ns() >= r->flush_deadline_ns))
			break;
		struct sendq_item *it = sendq_pop(&r->q);
		pthread_mutex_unlock(&r->lock);
		struct buf why = { 0 };
		int res = deliver(r, it, &why);
		pthread_mutex_lock(&r->lock);
		if (res == 1) {
			if (r->streak)
				log_info("delivering batches again after %llu failed attempts",
					 (unsigned long long)r->streak);
			r->streak = 0;
			r->stats.sent_batches++;
			r->stats.sent_bytes += it->len;
			sendq_item_free(it);
			buf_free(&why);
			backoff = 0;
			continue;
		}
		if (res < 0) {
			log_error("batch %llu dropped: %s", (unsigned long long)it->seq, why.data);
			r->stats.rejected_batches++;
			sendq_item_free(it);
			buf_free(&why);
			continue;
		}
		note_failure(r, it, why.data);
		buf_free(&why);
		r->stats.failed_attempts++;
		sendq_push_front(&r->q, it);
		if (r->stopping) {
			/* Keep trying until the flush deadline, a little apart. */
			struct timespec ts;
			deadline_in(&ts, 200);
			pthread_cond_timedwait(&r->cond, &r->lock, &ts);
			continue;
		}
		backoff = backoff ? MIN(backoff * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
		/* Up to 20% jitter so a fleet does not retry in lockstep. */
		long wait = backoff - (long)(now_mono_ns() % (uint64_t)(backoff / 5 + 1));
		struct timespec ts;
		deadline_in(&ts, wait);
		while (!r->stopping) {
			int rc = pthread_cond_timedwait(&r->cond, &r->lock, &ts);
			if (rc == ETIMEDOUT)
				break;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

struct reporter *reporter_start(const struct http_opts *opts, size_t max_queue_bytes)
{
	struct reporter *r = xcalloc(1, sizeof(*r));
	r->http = http_client_new(opts);
	if (!r->http) {
		free(r);
		return NULL;
	}
	sendq_init(&r->q, max_queue_bytes);
	pthread_mutex_init(&r->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&r->thread, NULL, run, r) != 0) {
		http_client_free(r->http);
		free(r);
		return NULL;
	}
	return r;
}

void reporter_enqueue(struct reporter *r, char *data, size_t len, uint64_t seq)
{
	pthread_mutex_lock(&r->lock);
	uint64_t dropped = r->q.dropped_batches;
	sendq_push(&r->q, data, len, seq);
	if (r->q.dropped_batches != dropped)
		log_warn("send queue full (%zu bytes): dropped %llu oldest batch(es), %llu in total",
			 r->q.max_bytes, (unsigned long long)(r->q.dropped_batches - dropped),
			 (unsigned long long)r->q.dropped_batches);
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

void reporter_get_stats(struct reporter *r, struct reporter_stats *out)
{
	pthread_mutex_lock(&r->lock);
	*out = r->stats;
	out->dropped_batches = r->q.dropped_batches;
	out->dropped_bytes = r->q.dropped_bytes;
	out->queued_batches = r->q.count;
	out->queued_bytes = r->q.bytes;
	pthread_mutex_unlock(&r->lock);
}

void reporter_stop(struct reporter *r, long flush_ms)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = 1;
	r->flush_deadline_ns = now_mono_ns() + (uint64_t)flush_ms * 1000000ull;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	if (r->q.count)
		log_warn("stopping with %zu batch(es) not delivered", r->q.count);
	sendq_free(&r->q);
	http_client_free(r->http);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	free(r);
}
