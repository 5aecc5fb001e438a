/* reporter.c - see reporter.h. */
#include "reporter.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grpc.h"
#include "log.h"
#include "otlp_export.h"
#include "sendq.h"
#include "session.h"
#include "util.h"

#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 30000

/* A finished batch waiting in the queue, and its encoding once it has been
 * tried (kept so a retry sends the same bytes in the same session). */
struct pending {
	struct batch *b;
	struct batch_meta meta;
	char *enc;
	size_t enc_len;
	uint64_t session_serial; /* the session it was encoded in */
	bool fresh;              /* encoded as a session's first batch */
};

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
	/* Set (under lock) when an encoded batch is dropped unsent: the
	 * server may lack its definitions, so the session must restart. */
	bool session_dirty;
	/* Owned by the thread, used outside the lock. */
	struct session sess;
	uint64_t session_serial;
	size_t max_session_bytes;
	bool otlp;          /* OTLP Profiles instead of protocol version 2 */
	char otlp_path[512];
	/* -otlp-transport=grpc: the client, and its metadata. */
	struct grpc_client *grpc;
	char *grpc_headers[3];
};

static void pending_free(struct pending *p)
{
	if (!p)
		return;
	batch_free(p->b);
	free(p->b);
	free(p->enc);
	free(p);
}

/* sendq's destroy: called under r->lock. */
static void drop_pending(void *ctx, void *data)
{
	struct reporter *r = ctx;
	struct pending *p = data;
	if (p->enc && !r->otlp)
		r->session_dirty = true;
	pending_free(p);
}

static size_t pending_bytes(const struct pending *p)
{
	return sizeof(*p) + batch_memory(p->b) + p->enc_len;
}

static void new_session(struct reporter *r)
{
	session_reset(&r->sess);
	r->session_serial++;
	pthread_mutex_lock(&r->lock);
	r->stats.sessions++;
	pthread_mutex_unlock(&r->lock);
}

/* Encodes p (in the current session, or as OTLP) unless it already is.
 * Returns 0/-1. */
static int encode(struct reporter *r, struct pending *p, struct buf *why)
{
	if (p->enc && (r->otlp || p->session_serial == r->session_serial))
		return 0;
	size_t st0 = 0, fr0 = 0, nd0 = 0;
	if (!r->otlp) {
		pthread_mutex_lock(&r->lock);
		bool dirty = r->session_dirty;
		r->session_dirty = false;
		pthread_mutex_unlock(&r->lock);
		if (dirty || session_memory(&r->sess) > r->max_session_bytes ||
		    !session_fits(&r->sess, p->b))
			new_session(r);
		p->fresh = r->sess.batches == 0;
		st0 = r->sess.sent_strings;
		fr0 = r->sess.sent_frames;
		nd0 = r->sess.sent_nodes;
	}
	free(p->enc);
	p->enc = NULL;
	p->enc_len = 0;
	uint64_t t0 = now_thread_cpu_ns();
	struct buf out = { 0 };
	int rc = r->otlp ? otlp_encode(p->b, &p->meta, &out)
			 : session_encode(&r->sess, p->b, &p->meta, &out);
	if (rc < 0) {
		buf_free(&out);
		buf_puts(why, "encoding failed");
		return -1;
	}
	p->enc = buf_steal(&out, &p->enc_len);
	p->session_serial = r->session_serial;
	uint64_t cpu_ns = now_thread_cpu_ns() - t0;
	if (!r->otlp)
		log_debug("batch %llu: %zu bytes for %zu sample rows in %llu us; defines %zu strings, %zu frames, %zu stack nodes",
			  (unsigned long long)p->meta.sequence, p->enc_len, p->b->nsamples,
			  (unsigned long long)(cpu_ns / 1000), r->sess.sent_strings - st0,
			  r->sess.sent_frames - fr0, r->sess.sent_nodes - nd0);
	else
		log_debug("batch %llu: %zu bytes for %zu sample rows in %llu us", (unsigned long long)p->meta.sequence,
			  p->enc_len, p->b->nsamples, (unsigned long long)(cpu_ns / 1000));
	pthread_mutex_lock(&r->lock);
	r->stats.encode_ns += cpu_ns;
	r->stats.session_bytes = r->otlp ? 0 : session_memory(&r->sess);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

enum outcome { DELIVERED, RETRY, RESYNC, DROP };

#define OTLP_GRPC_EXPORT "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

/* Sends one OTLP batch over gRPC (the encoding is gzip already). */
static enum outcome deliver_grpc(struct reporter *r, struct pending *p, struct buf *why)
{
	struct grpc_answer a;
	grpc_answer_init(&a, 1u << 20);
	int rc = grpc_client_call(r->grpc, OTLP_GRPC_EXPORT, (const char *const *)r->grpc_headers,
				  p->enc, p->enc_len, true, 10000, &a, why);
	enum outcome result;
	if (rc == GRPC_OK) {
		result = DELIVERED;
	} else if (rc == GRPC_STATUS) {
		/* The server may take it later (as HTTP's 401, 403, 429 and
		 * 5xx). */
		bool retry = a.status == GRPC_STATUS_DEADLINE_EXCEEDED ||
			     a.status == GRPC_STATUS_PERMISSION_DENIED ||
			     a.status == GRPC_STATUS_RESOURCE_EXHAUSTED || a.status == GRPC_STATUS_ABORTED ||
			     a.status == GRPC_STATUS_INTERNAL || a.status == GRPC_STATUS_UNAVAILABLE ||
			     a.status == GRPC_STATUS_UNAUTHENTICATED;
		buf_printf(why, "server answered gRPC status %d: %.200s", a.status, a.message);
		result = retry ? RETRY : DROP;
	} else {
		if (!why->len)
			buf_puts(why, rc == GRPC_PROTOCOL ? "a malformed gRPC answer" : "gRPC transport failed");
		result = RETRY;
	}
	grpc_answer_free(&a);
	return result;
}

/* Sends one batch; why describes a failure. */
static enum outcome deliver(struct reporter *r, struct pending *p, struct buf *why)
{
	if (encode(r, p, why) < 0)
		return DROP;
	if (r->grpc)
		return deliver_grpc(r, p, why);
	struct buf resp = { 0 };
	int status = r->otlp ? http_send(r->http, "POST", r->otlp_path, "application/x-protobuf",
					 "gzip", p->enc, p->enc_len, &resp, why)
			     : http_send(r->http, "POST", "/ingest/v2/batch", "application/x-protobuf",
					 "zstd", p->enc, p->enc_len, &resp, why);
	enum outcome result;
	if (status >= 200 && status < 300) {
		result = DELIVERED;
	} else if (status < 0) {
		result = RETRY;
	} else if (status == 409 && !p->fresh) {
		buf_printf(why, "the server asks for a new session: %.200s",
			   resp.data ? resp.data : "");
		result = RESYNC;
	} else if (status == 408 || status == 409 || status == 429 || status == 401 ||
		   status == 403 || status >= 500) {
		buf_printf(why, "server answered %d: %.200s", status, resp.data ? resp.data : "");
		result = RETRY;
	} else {
		buf_printf(why, "server rejected it with %d: %.200s", status,
			   resp.data ? resp.data : "");
		result = DROP;
	}
	buf_free(&resp);
	return result;
}

/* A streak of failures is logged when it starts, then at most once a
 * minute, and once more when delivery works again. */
static void note_failure(struct reporter *r, uint64_t seq, const char *why)
{
	uint64_t now = now_mono_ns();
	r->streak++;
	if (r->streak == 1 || now - r->last_warn_ns >= 60ull * 1000000000ull) {
		log_warn("cannot deliver batch %llu (%llu failed attempts in a row, %zu batches queued): %s; retrying",
			 (unsigned long long)seq, (unsigned long long)r->streak, r->q.count + 1, why);
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
		struct pending *p = it->data;
		struct buf why = { 0 };
		enum outcome res = deliver(r, p, &why);
		if (res == RESYNC) {
			log_info("batch %llu: %s; starting a new session",
				 (unsigned long long)it->seq, why.data);
			new_session(r);
		}
		it->len = pending_bytes(p);
		pthread_mutex_lock(&r->lock);
		if (res == RESYNC) {
			r->stats.resyncs++;
			sendq_push_front(&r->q, it);
			buf_free(&why);
			continue;
		}
		if (res == DELIVERED) {
			if (r->streak)
				log_info("delivering batches again after %llu failed attempts",
					 (unsigned long long)r->streak);
			r->streak = 0;
			r->stats.sent_batches++;
			r->stats.sent_bytes += p->enc_len;
			free(p->enc); /* delivered: not a lost definition */
			p->enc = NULL;
			sendq_item_free(&r->q, it);
			buf_free(&why);
			backoff = 0;
			continue;
		}
		if (res == DROP) {
			log_error("batch %llu dropped: %s", (unsigned long long)it->seq, why.data);
			r->stats.rejected_batches++;
			sendq_item_free(&r->q, it); /* marks the session dirty */
			buf_free(&why);
			continue;
		}
		note_failure(r, it->seq, why.data);
		buf_free(&why);
		r->stats.failed_attempts++;
		sendq_push_front(&r->q, it);
		if (r->stopping) {
			/* Keep trying until the flush deadline, a little apart. */
			struct timespec ts;
			deadline_in_ms(&ts, 200);
			pthread_cond_timedwait(&r->cond, &r->lock, &ts);
			continue;
		}
		backoff = backoff ? MIN(backoff * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
		/* Up to 20% jitter so a fleet does not retry in lockstep. */
		long wait = backoff - (long)(now_mono_ns() % (uint64_t)(backoff / 5 + 1));
		struct timespec ts;
		deadline_in_ms(&ts, (uint64_t)wait);
		while (!r->stopping) {
			int rc = pthread_cond_timedwait(&r->cond, &r->lock, &ts);
			if (rc == ETIMEDOUT)
				break;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

/* The OTLP path with ?project=, the name percent-encoded. */
static void make_otlp_path(struct reporter *r, const char *project)
{
	static const char hexd[] = "0123456789ABCDEF";
	size_t n = (size_t)snprintf(r->otlp_path, sizeof(r->otlp_path),
				    "/v1development/profiles?project=");
	for (const unsigned char *c = (const unsigned char *)project; *c && n + 4 < sizeof(r->otlp_path); c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		    *c == '-' || *c == '_' || *c == '.' || *c == '~') {
			r->otlp_path[n++] = (char)*c;
		} else {
			r->otlp_path[n++] = '%';
			r->otlp_path[n++] = hexd[*c >> 4];
			r->otlp_path[n++] = hexd[*c & 15];
		}
	}
	r->otlp_path[n] = '\0';
}

struct reporter *reporter_start(const struct http_opts *opts, size_t max_queue_bytes,
				size_t max_session_bytes, const char *otlp_project,
				const char *otlp_grpc_endpoint)
{
	struct reporter *r = xcalloc(1, sizeof(*r));
	if (otlp_project) {
		r->otlp = true;
		make_otlp_path(r, otlp_project);
	}
	if (otlp_project && otlp_grpc_endpoint) {
		struct grpc_endpoint ep = { .host_port = otlp_grpc_endpoint, .tls = !opts->disable_tls,
					    .insecure = opts->insecure, .ca_file = opts->ca_file };
		r->grpc = grpc_client_new(&ep);
		if (!r->grpc) {
			free(r);
			return NULL;
		}
		struct buf h = { 0 };
		size_t n = 0;
		if (opts->auth_token && *opts->auth_token) {
			buf_printf(&h, "authorization: Bearer %s", opts->auth_token);
			r->grpc_headers[n++] = buf_steal(&h, NULL);
		}
		buf_printf(&h, "ember-project: %s", otlp_project);
		r->grpc_headers[n++] = buf_steal(&h, NULL);
	}
	r->http = http_client_new(opts);
	if (!r->http) {
		grpc_client_free(r->grpc);
		for (size_t i = 0; i < 3; i++)
			free(r->grpc_headers[i]);
		free(r);
		return NULL;
	}
	sendq_init(&r->q, max_queue_bytes);
	r->q.destroy = drop_pending;
	r->q.destroy_ctx = r;
	session_init(&r->sess);
	r->stats.sessions = 1;
	r->max_session_bytes = max_session_bytes;
	pthread_mutex_init(&r->lock, NULL);
	cond_init_monotonic(&r->cond);
	if (pthread_create(&r->thread, NULL, run, r) != 0) {
		grpc_client_free(r->grpc);
		for (size_t i = 0; i < 3; i++)
			free(r->grpc_headers[i]);
		http_client_free(r->http);
		session_free(&r->sess);
		free(r);
		return NULL;
	}
	pthread_setname_np(r->thread, "ember-reporter"); /* named for top -H and bench/protocol_compare.sh */
	return r;
}

void reporter_enqueue(struct reporter *r, struct batch *b, const struct batch_meta *meta)
{
	batch_freeze(b);
	struct pending *p = xcalloc(1, sizeof(*p));
	p->b = b;
	p->meta = *meta;
	pthread_mutex_lock(&r->lock);
	uint64_t dropped = r->q.dropped_batches;
	sendq_push(&r->q, p, pending_bytes(p), meta->sequence);
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
	session_free(&r->sess);
	http_client_free(r->http);
	grpc_client_free(r->grpc);
	for (size_t i = 0; i < 3; i++)
		free(r->grpc_headers[i]);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	free(r);
}
