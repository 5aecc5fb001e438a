/* otlp_grpc.c - OTLP Profiles over gRPC on libnghttp2 (otlp_grpc.h).
 *
 * One I/O thread runs every connection (epoll, non-blocking sockets,
 * GnuTLS when TLS is on) and their nghttp2 server sessions; it never
 * blocks on a request. A stream's whole body is collected there; then the
 * stream is handed to a worker (a fixed set of threads with a bounded
 * queue), which decodes and stores it (its credential was checked on the
 * headers, in the I/O thread, as libmicrohttpd's threads check HTTP's), and hands the
 * answer back through a completion list and an eventfd. Only the I/O
 * thread touches connections and sessions; a stream that a worker holds
 * is never freed under it: a stream (or connection) closed meanwhile is
 * marked orphaned and freed when the worker's answer comes back. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "handlers.h"
#include "log.h"
#include "server/ingest/otlp.h"
#include "otlp_grpc.h"
#include "server.h"
#include "server/auth/authz.h"
#include "util.h"

#define GRPC_PREFIX 5u
#define OTLP_GRPC_MAX_MESSAGE ((size_t)OTLP_MAX_BODY)
#define READ_CHUNK (16u << 10)
#define OUT_HIGH (256u << 10) /* stop asking nghttp2 for bytes beyond this */
#define TLS_RECORD (16u << 10)

struct gconn;

struct gstream {
	int32_t id;
	struct gconn *conn;        /* NULL once orphaned */
	struct gstream *next;      /* the connection's streams */
	struct gstream *qnext;     /* the queue or the completion list */
	struct buf body;
	size_t held;               /* bytes of the budget's memory the body holds */
	struct principal *who;     /* authenticated on the headers */
	size_t header_bytes;
	char *authorization, *project, *encoding, *content_type, *path, *method, *user_agent;
	char peer[64];             /* the client's address, as text */
	bool complete;             /* END_STREAM seen */
	bool answered;             /* a response was submitted (or is being made) */
	bool queued;               /* a worker holds it */
	bool closed;               /* nghttp2 closed it */
	int64_t started_ms;
	/* the answer */
	int status;
	struct buf message;
	struct buf reply;          /* the framed response message */
	size_t reply_off;
	char status_str[8];
	struct buf message_enc;
};

struct otlp_grpc;

struct gconn {
	struct otlp_grpc *g;
	int fd;                    /* -1 in memory (otlp_grpc_feed) */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	gnutls_session_t tls;
	bool handshaken;
	nghttp2_session *h2;
	struct gstream *streams;
	unsigned nstreams;
	struct buf out;
	size_t out_off;
	size_t tls_again;          /* a record send to repeat after EAGAIN */
	bool want_out;             /* EPOLLOUT armed */
	bool closing;
	int64_t opened_ms, last_io_ms;
	struct gconn *prev, *next;
};

struct otlp_grpc {
	struct server *srv;
	const struct route *route; /* the OTLP HTTP route: its permission */
	struct http_limits lim;
	int lfd, ep, efd;
	gnutls_certificate_credentials_t cred;
	gnutls_priority_t prio;
	bool tls;
	pthread_t io;
	bool io_started;
	/* Connections: the I/O thread's alone. */
	struct gconn *conns;
	/* Connections and bodies in memory, with the HTTP server's
	 * (limits->budget; own when it names none). */
	struct http_budget own;
	struct http_budget *budget;
	/* The work queue and the completion list. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct gstream *qhead, *qtail;
	unsigned qlen;
	struct gstream *done;
	bool stop;
	pthread_t *workers;
	unsigned nworkers;
	bool memory;               /* otlp_grpc_feed: unframe and decode only */
	int fed;
};

/* --- the pure parts ------------------------------------------------------ */

int otlp_grpc_unframe(const uint8_t *body, size_t n, size_t max, const uint8_t **msg, size_t *len,
		 bool *compressed, struct buf *err)
{
	if (n == 0) {
		buf_puts(err, "expected one request message, got none");
		return GRPC_CODE_INVALID_ARGUMENT;
	}
	if (n < GRPC_PREFIX) {
		buf_printf(err, "a message prefix cut short (%zu of 5 bytes)", n);
		return GRPC_CODE_INVALID_ARGUMENT;
	}
	if (body[0] > 1) {
		buf_printf(err, "message flag %u (expected 0 or 1)", body[0]);
		return GRPC_CODE_INVALID_ARGUMENT;
	}
	uint32_t l = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 |
		     (uint32_t)body[4];
	if (l > max) {
		buf_printf(err, "a message of %u bytes (at most %zu)", l, max);
		return GRPC_CODE_RESOURCE_EXHAUSTED;
	}
	if (n - GRPC_PREFIX < l) {
		buf_printf(err, "a message of %u bytes cut short at %zu", l, n - GRPC_PREFIX);
		return GRPC_CODE_INVALID_ARGUMENT;
	}
	if (n - GRPC_PREFIX > l) {
		buf_puts(err, "more than one request message in a unary call");
		return GRPC_CODE_INVALID_ARGUMENT;
	}
	*msg = body + GRPC_PREFIX;
	*len = l;
	*compressed = body[0] == 1;
	return GRPC_CODE_OK;
}

void otlp_grpc_percent_encode(const char *s, struct buf *out)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
			buf_putc(out, (char)*p);
		} else {
			buf_putc(out, '%');
			buf_putc(out, hex[*p >> 4]);
			buf_putc(out, hex[*p & 15]);
		}
	}
	if (!out->data)
		buf_puts(out, "");
}

int otlp_grpc_status_of_http(int s)
{
	switch (s) {
	case 200: return GRPC_CODE_OK;
	case 400: case 415: return GRPC_CODE_INVALID_ARGUMENT;
	case 401: return GRPC_CODE_UNAUTHENTICATED;
	case 403: return GRPC_CODE_PERMISSION_DENIED;
	case 404: return GRPC_CODE_UNIMPLEMENTED;
	case 408: return GRPC_CODE_DEADLINE_EXCEEDED;
	case 409: return GRPC_CODE_ABORTED;
	case 413: return GRPC_CODE_RESOURCE_EXHAUSTED;
	case 429: case 502: case 503: case 504: return GRPC_CODE_UNAVAILABLE;
	case 500: return GRPC_CODE_INTERNAL;
	default: return GRPC_CODE_UNKNOWN;
	}
}

/* The "error" of a JSON error answer, else the body as it is. */
static void error_text(const struct http_resp *resp, struct buf *out)
{
	json_t *j = resp->body.len ? json_loadb(resp->body.data, resp->body.len, 0, NULL) : NULL;
	const char *e = j ? json_string_value(json_object_get(j, "error")) : NULL;
	if (e)
		buf_puts(out, e);
	else
		buf_printf(out, "HTTP status %d", resp->status);
	json_decref(j);
}

/* The OTLP HTTP route: the permission a call needs. */
static const struct route *otlp_route(void)
{
	for (unsigned i = 0; i < server_route_count; i++)
		if (server_routes[i].fn == handle_otlp_profiles)
			return &server_routes[i];
	return NULL;
}

int otlp_grpc_authenticate(struct server *srv, const char *authorization, struct principal **who,
			   struct buf *message)
{
	*who = NULL;
	const struct route *route = otlp_route();
	if (!route) {
		buf_puts(message, "no OTLP route");
		return GRPC_CODE_INTERNAL;
	}
	const char *headers[] = {
		authorization ? "Authorization" : NULL, authorization, NULL, NULL,
	};
	struct http_req req = { .method = "POST", .path = "/v1development/profiles", .headers = headers };
	struct http_resp resp = { .status = 200 };
	int status = GRPC_CODE_OK;
	if (!auth_request(srv, route, &req, &resp, who)) {
		status = otlp_grpc_status_of_http(resp.status);
		error_text(&resp, message);
	}
	buf_free(&resp.body);
	buf_free(&resp.headers);
	return status;
}

void otlp_grpc_export(struct server *srv, const struct principal *who, const char *project,
		      const char *encoding, const char *user_agent, const char *peer,
		      const uint8_t *body, size_t n, int *status, struct buf *message,
		      struct buf *reply)
{
	const uint8_t *msg;
	size_t len;
	bool compressed;
	*status = otlp_grpc_unframe(body, n, OTLP_GRPC_MAX_MESSAGE, &msg, &len, &compressed, message);
	if (*status != GRPC_CODE_OK)
		return;
	bool gzip = encoding && !strcasecmp(encoding, "gzip");
	if (compressed && !gzip) {
		/* The gRPC spec's answer to a compressed message without an
		 * encoding to read it with. */
		*status = GRPC_CODE_INTERNAL;
		buf_puts(message, "a compressed message without grpc-encoding gzip");
		return;
	}
	const char *headers[] = {
		"Content-Type", "application/x-protobuf",
		"Content-Encoding", compressed ? "gzip" : "identity",
		"X-Ember-Otlp-Transport", "grpc",
		"User-Agent", user_agent ? user_agent : "",
		NULL, NULL,
	};
	const char *args[] = { "project", project ? project : "default", NULL, NULL };
	struct http_req req = {
		.method = "POST",
		.path = "/v1development/profiles",
		.body = (const char *)msg,
		.body_len = len,
		.headers = headers,
		.args = args,
		.peer = peer,
		.who = who,
	};
	struct http_resp resp = { .status = 200 };
	handle_otlp_profiles(srv, &req, &resp);
	*status = otlp_grpc_status_of_http(resp.status);
	if (*status == GRPC_CODE_OK) {
		uint8_t pre[GRPC_PREFIX] = { 0, (uint8_t)(resp.body.len >> 24),
					     (uint8_t)(resp.body.len >> 16),
					     (uint8_t)(resp.body.len >> 8), (uint8_t)resp.body.len };
		buf_append(reply, pre, sizeof(pre));
		if (resp.body.len)
			buf_append(reply, resp.body.data, resp.body.len);
	} else {
		error_text(&resp, message);
	}
	buf_free(&resp.body);
	buf_free(&resp.headers);
}

/* --- streams -------------------------------------------------------------- */

static void drop_body(struct otlp_grpc *g, struct gstream *s)
{
	http_budget_put_mem(g->budget, s->held);
	s->held = 0;
	buf_free(&s->body);
}

static void stream_free(struct otlp_grpc *g, struct gstream *s)
{
	drop_body(g, s);
	principal_free(s->who);
	buf_free(&s->message);
	buf_free(&s->message_enc);
	buf_free(&s->reply);
	free_all(s->authorization, s->project, s->encoding, s->content_type, s->path, s->method,
		 s->user_agent, s);
}

static void stream_unlink(struct gconn *c, struct gstream *s)
{
	for (struct gstream **pp = &c->streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			c->nstreams--;
			return;
		}
}

static ssize_t reply_read(nghttp2_session *h2, int32_t id, uint8_t *out, size_t len,
			  uint32_t *flags, nghttp2_data_source *src, void *user)
{
	(void)user;
	struct gstream *s = src->ptr;
	size_t left = s->reply.len - s->reply_off;
	size_t n = left < len ? left : len;
	if (n)
		memcpy(out, s->reply.data + s->reply_off, n);
	s->reply_off += n;
	if (s->reply_off == s->reply.len) {
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		nghttp2_nv tr[] = {
			{ (uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NONE },
		};
		if (nghttp2_submit_trailer(h2, id, tr, 1) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }

/* Submits s's answer: the message and grpc-status 0, or trailers only. */
static void answer(struct gconn *c, struct gstream *s)
{
	s->answered = true;
	if (s->closed || !c->h2)
		return;
	if (s->status == GRPC_CODE_OK) {
		nghttp2_nv hd[] = { NV(":status", "200"), NV("content-type", "application/grpc") };
		nghttp2_data_provider dp = { .source.ptr = s, .read_callback = reply_read };
		if (nghttp2_submit_response(c->h2, s->id, hd, 2, &dp) != 0)
			nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
		return;
	}
	snprintf(s->status_str, sizeof(s->status_str), "%d", s->status);
	buf_reset(&s->message_enc);
	if (s->message.len > 1024)
		s->message.data[s->message.len = 1024] = '\0';
	otlp_grpc_percent_encode(s->message.data ? s->message.data : "", &s->message_enc);
	nghttp2_nv hd[] = {
		NV(":status", "200"),
		NV("content-type", "application/grpc"),
		NV("grpc-status", s->status_str),
		NV("grpc-message", s->message_enc.data),
		NV("grpc-accept-encoding", "gzip,identity"),
	};
	if (nghttp2_submit_response(c->h2, s->id, hd, s->status == GRPC_CODE_UNIMPLEMENTED ? 5 : 4, NULL))
		nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
}

/* Once an answer has gone out whole while the client is still sending,
 * tells it to stop (RST_STREAM NO_ERROR, as gRPC servers do): the rest of
 * its message would only be discarded. */
static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	(void)user;
	if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
	    !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	struct gstream *s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (s && !s->complete)
		nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
	return 0;
}

static void fail(struct gconn *c, struct gstream *s, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail(struct gconn *c, struct gstream *s, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	buf_reset(&s->message);
	buf_vprintf(&s->message, fmt, ap);
	va_end(ap);
	s->status = status;
	drop_body(c->g, s);
	answer(c, s);
}

/* Hands a complete stream to a worker, or answers it busy. */
static void dispatch(struct gconn *c, struct gstream *s)
{
	struct otlp_grpc *g = c->g;
	if (g->memory) { /* otlp_grpc_feed: the framing and the decoder only */
		const uint8_t *msg;
		size_t len;
		bool z;
		struct buf err = { 0 };
		g->fed++;
		s->status = otlp_grpc_unframe((const uint8_t *)s->body.data, s->body.len, OTLP_GRPC_MAX_MESSAGE,
					 &msg, &len, &z, &err);
		if (s->status == GRPC_CODE_OK) {
			int too_large;
			Ember__Otlp__ExportProfilesServiceRequest *r =
				otlp_decode(msg, len, z, &too_large, &err);
			if (!r)
				s->status = GRPC_CODE_INVALID_ARGUMENT;
			otlp_free(r);
		}
		buf_puts(&s->message, err.data ? err.data : "");
		buf_free(&err);
		buf_append(&s->reply, "\0\0\0\0\0", 5);
		answer(c, s);
		return;
	}
	pthread_mutex_lock(&g->mu);
	bool full = g->qlen >= g->lim.ingest_queue + g->nworkers;
	if (!full) {
		s->queued = true;
		s->qnext = NULL;
		if (g->qtail)
			g->qtail->qnext = s;
		else
			g->qhead = s;
		g->qtail = s;
		g->qlen++;
		pthread_cond_signal(&g->cv);
	}
	pthread_mutex_unlock(&g->mu);
	if (full)
		fail(c, s, GRPC_CODE_UNAVAILABLE, "the server is busy (ingest queue full): retry later");
}

static void *worker(void *arg)
{
	struct otlp_grpc *g = arg;
	for (;;) {
		pthread_mutex_lock(&g->mu);
		while (!g->qhead && !g->stop)
			pthread_cond_wait(&g->cv, &g->mu);
		if (g->stop && !g->qhead) {
			pthread_mutex_unlock(&g->mu);
			return NULL;
		}
		struct gstream *s = g->qhead;
		g->qhead = s->qnext;
		if (!g->qhead)
			g->qtail = NULL;
		pthread_mutex_unlock(&g->mu);
		if (!g->stop)
			otlp_grpc_export(g->srv, s->who, s->project, s->encoding, s->user_agent, s->peer,
					 (const uint8_t *)s->body.data, s->body.len, &s->status,
					 &s->message, &s->reply);
		else
			s->status = GRPC_CODE_UNAVAILABLE;
		pthread_mutex_lock(&g->mu);
		g->qlen--;
		s->qnext = g->done;
		g->done = s;
		pthread_mutex_unlock(&g->mu);
		uint64_t one = 1;
		if (write(g->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			log_error("otlp-grpc: eventfd: %s", strerror(errno));
	}
}

/* --- nghttp2 callbacks ---------------------------------------------------- */

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	struct gconn *c = user;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (c->nstreams >= OTLP_GRPC_MAX_STREAMS) {
		nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	struct gstream *s = xcalloc(1, sizeof(*s));
	s->id = f->hd.stream_id;
	s->conn = c;
	/* copied now: the stream may outlive its connection */
	http_address_text(c->fd >= 0 ? (const struct sockaddr *)&c->peer : NULL, s->peer, sizeof(s->peer));
	s->started_ms = now_unix_ms();
	s->next = c->streams;
	c->streams = s;
	c->nstreams++;
	nghttp2_session_set_stream_user_data(h2, s->id, s);
	return 0;
}

static char *dup_n(const uint8_t *v, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, v, n);
	p[n] = '\0';
	return p;
}

static void set_field(char **f, const uint8_t *v, size_t n)
{
	free(*f);
	*f = dup_n(v, n);
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t nl,
		     const uint8_t *value, size_t vl, uint8_t flags, void *user)
{
	(void)flags;
	(void)user;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct gstream *s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (!s)
		return 0;
	s->header_bytes += nl + vl + 32;
	if (s->header_bytes > OTLP_GRPC_MAX_HEADER_BYTES)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
#define IS(lit) (nl == sizeof(lit) - 1 && !memcmp(name, lit, nl))
	if (IS(":path"))
		set_field(&s->path, value, vl);
	else if (IS(":method"))
		set_field(&s->method, value, vl);
	else if (IS("content-type"))
		set_field(&s->content_type, value, vl);
	else if (IS("grpc-encoding"))
		set_field(&s->encoding, value, vl);
	else if (IS("authorization"))
		set_field(&s->authorization, value, vl);
	else if (IS("ember-project"))
		set_field(&s->project, value, vl);
	else if (IS("user-agent"))
		set_field(&s->user_agent, value, vl);
#undef IS
	return 0;
}

/* The checks a request's headers must pass; false when answered. */
static bool headers_ok(struct gconn *c, struct gstream *s)
{
	if (!s->method || strcmp(s->method, "POST")) {
		fail(c, s, GRPC_CODE_UNIMPLEMENTED, "method %s: gRPC calls are POST", s->method ? s->method : "(none)");
		return false;
	}
	const char *ct = s->content_type;
	if (!ct || strncmp(ct, "application/grpc", 16) ||
	    (ct[16] && ct[16] != '+' && ct[16] != ';') || !strncmp(ct + 16, "+json", 5)) {
		fail(c, s, GRPC_CODE_INVALID_ARGUMENT, "content-type %s: expected application/grpc (protobuf)",
		     ct ? ct : "(none)");
		return false;
	}
	if (!s->path || strcmp(s->path, GRPC_EXPORT_PATH)) {
		fail(c, s, GRPC_CODE_UNIMPLEMENTED, "unknown method %s (this server has %s)",
		     s->path ? s->path : "(none)", GRPC_EXPORT_PATH);
		return false;
	}
	if (s->encoding && strcasecmp(s->encoding, "gzip") && strcasecmp(s->encoding, "identity")) {
		fail(c, s, GRPC_CODE_UNIMPLEMENTED, "grpc-encoding %s is not supported (gzip, identity)",
		     s->encoding);
		return false;
	}
	/* The credential, before a byte of the message is held: a refused
	 * call is answered now and its body discarded as it comes. */
	if (!c->g->memory) {
		struct buf why = { 0 };
		int st = otlp_grpc_authenticate(c->g->srv, s->authorization, &s->who, &why);
		if (st != GRPC_CODE_OK)
			fail(c, s, st, "%s", why.data ? why.data : "refused");
		buf_free(&why);
		if (st != GRPC_CODE_OK)
			return false;
	}
	return true;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	struct gconn *c = user;
	if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
		return 0;
	struct gstream *s = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (!s)
		return 0;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST && !s->answered)
		headers_ok(c, s);
	if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
		s->complete = true;
		if (!s->answered) {
			s->answered = true; /* the worker's answer is submitted later */
			dispatch(c, s);
		}
	}
	return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
		   void *user)
{
	(void)flags;
	struct gconn *c = user;
	struct gstream *s = nghttp2_session_get_stream_user_data(h2, id);
	if (!s || s->answered)
		return 0;
	if (s->body.len + len > OTLP_GRPC_MAX_MESSAGE + GRPC_PREFIX) {
		fail(c, s, GRPC_CODE_RESOURCE_EXHAUSTED, "the request is larger than %zu bytes",
		     OTLP_GRPC_MAX_MESSAGE);
		return 0;
	}
	if (!http_budget_take_mem(c->g->budget, len, c->g->lim.upload_memory)) {
		fail(c, s, GRPC_CODE_UNAVAILABLE, "the server holds too many request bodies: retry later");
		return 0;
	}
	buf_append(&s->body, data, len);
	s->held += len;
	return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code, void *user)
{
	(void)code;
	struct gconn *c = user;
	struct gstream *s = nghttp2_session_get_stream_user_data(h2, id);
	if (!s)
		return 0;
	nghttp2_session_set_stream_user_data(h2, id, NULL);
	s->closed = true;
	stream_unlink(c, s);
	if (s->queued)
		s->conn = NULL; /* freed when its worker is done */
	else
		stream_free(c->g, s);
	return 0;
}

static int conn_session(struct gconn *c)
{
	nghttp2_session_callbacks *cb;
	if (nghttp2_session_callbacks_new(&cb) != 0)
		return -1;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
	nghttp2_option *opt;
	if (nghttp2_option_new(&opt) != 0) {
		nghttp2_session_callbacks_del(cb);
		return -1;
	}
	nghttp2_option_set_max_send_header_block_length(opt, 64 << 10);
	int rc = nghttp2_session_server_new2(&c->h2, cb, c, opt);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	if (rc != 0)
		return -1;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, OTLP_GRPC_MAX_STREAMS },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1u << 20 },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, OTLP_GRPC_MAX_HEADER_BYTES },
	};
	if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 3) != 0 ||
	    nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 4u << 20) != 0)
		return -1;
	return 0;
}

/* --- connections ---------------------------------------------------------- */

static void conn_close(struct gconn *c)
{
	struct otlp_grpc *g = c->g;
	/* The session first: should it close its streams, they leave the
	 * list through on_stream_close. */
	if (c->h2)
		nghttp2_session_del(c->h2);
	c->h2 = NULL;
	for (struct gstream *s = c->streams, *n; s; s = n) {
		n = s->next;
		if (s->queued)
			s->conn = NULL;
		else
			stream_free(g, s);
	}
	c->streams = NULL;
	if (c->tls)
		gnutls_deinit(c->tls);
	if (c->fd >= 0) {
		epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		if (c->prev)
			c->prev->next = c->next;
		else
			g->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		http_budget_put_conn(g->budget);
	}
	buf_free(&c->out);
	free(c);
}

/* Writes what is pending; false when the connection failed. */
static bool conn_flush(struct gconn *c)
{
	for (;;) {
		while (c->out.len - c->out_off < OUT_HIGH && nghttp2_session_want_write(c->h2)) {
			const uint8_t *p;
			ssize_t n = nghttp2_session_mem_send(c->h2, &p);
			if (n < 0)
				return false;
			if (n == 0)
				break;
			if (c->out_off == c->out.len) {
				buf_reset(&c->out);
				c->out_off = 0;
			}
			buf_append(&c->out, p, (size_t)n);
		}
		if (c->out_off == c->out.len)
			break;
		if (c->fd < 0) { /* in memory: the bytes go nowhere */
			c->out_off = c->out.len;
			continue;
		}
		size_t left = c->out.len - c->out_off;
		ssize_t w;
		if (c->tls) {
			size_t n = c->tls_again ? c->tls_again : (left < TLS_RECORD ? left : TLS_RECORD);
			w = gnutls_record_send(c->tls, c->out.data + c->out_off, n);
			if (w == GNUTLS_E_AGAIN || w == GNUTLS_E_INTERRUPTED) {
				c->tls_again = n;
				break;
			}
			c->tls_again = 0;
			if (w < 0)
				return false;
		} else {
			w = send(c->fd, c->out.data + c->out_off, left, MSG_NOSIGNAL);
			if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				break;
			if (w < 0)
				return false;
		}
		c->out_off += (size_t)w;
		c->last_io_ms = now_unix_ms();
	}
	if (c->fd >= 0) {
		bool want = c->out_off < c->out.len;
		if (want != c->want_out) {
			struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c };
			epoll_ctl(c->g->ep, EPOLL_CTL_MOD, c->fd, &ev);
			c->want_out = want;
		}
	}
	return true;
}

/* True when the connection is done with (closed by the peer, an error, or
 * nothing left to say). */
static bool conn_finished(struct gconn *c)
{
	return !nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) &&
	       c->out_off == c->out.len;
}

static void conn_readable(struct gconn *c)
{
	if (c->tls && !c->handshaken) {
		int rc = gnutls_handshake(c->tls);
		if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED)
			return;
		if (rc < 0) {
			log_debug("otlp-grpc: TLS handshake: %s", gnutls_strerror(rc));
			conn_close(c);
			return;
		}
		gnutls_datum_t proto = { 0 };
		if (gnutls_alpn_get_selected_protocol(c->tls, &proto) < 0 || proto.size != 2 ||
		    memcmp(proto.data, "h2", 2)) {
			log_debug("otlp-grpc: a TLS client without ALPN h2");
			conn_close(c);
			return;
		}
		c->handshaken = true;
		if (!conn_flush(c)) { /* the server's SETTINGS */
			conn_close(c);
			return;
		}
	}
	uint8_t buf[READ_CHUNK];
	for (;;) {
		ssize_t n;
		if (c->tls) {
			n = gnutls_record_recv(c->tls, buf, sizeof(buf));
			if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
				break;
			if (n < 0 && n != GNUTLS_E_PREMATURE_TERMINATION)
				log_debug("otlp-grpc: TLS: %s", gnutls_strerror((int)n));
		} else {
			n = recv(c->fd, buf, sizeof(buf), 0);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
				break;
		}
		if (n <= 0) {
			conn_close(c);
			return;
		}
		c->last_io_ms = now_unix_ms();
		ssize_t r = nghttp2_session_mem_recv(c->h2, buf, (size_t)n);
		if (r < 0) {
			log_debug("otlp-grpc: HTTP/2: %s", nghttp2_strerror((int)r));
			conn_flush(c); /* the GOAWAY, where it can go */
			conn_close(c);
			return;
		}
	}
	if (!conn_flush(c) || conn_finished(c))
		conn_close(c);
}

static bool same_client(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return true;
}

static void accept_all(struct otlp_grpc *g)
{
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t pl = sizeof(peer);
		int fd = accept4(g->lfd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				log_warn("otlp-grpc: accept: %s", strerror(errno));
			return;
		}
		unsigned same = 0;
		for (struct gconn *c = g->conns; c; c = c->next)
			same += same_client(&c->peer, &peer);
		if (same >= g->lim.per_ip_connections ||
		    !http_budget_take_conn(g->budget, g->lim.max_connections)) {
			log_debug("otlp-grpc: connection refused (limit)");
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct gconn *c = xcalloc(1, sizeof(*c));
		c->g = g;
		c->fd = fd;
		c->peer = peer;
		c->peer_len = pl;
		c->opened_ms = c->last_io_ms = now_unix_ms();
		c->next = g->conns;
		if (g->conns)
			g->conns->prev = c;
		g->conns = c;
		bool ok = conn_session(c) == 0;
		if (ok && g->tls) {
			ok = gnutls_init(&c->tls, GNUTLS_SERVER | GNUTLS_NONBLOCK) == 0 &&
			     gnutls_priority_set(c->tls, g->prio) == 0 &&
			     gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, g->cred) == 0;
			gnutls_datum_t h2 = { (unsigned char *)"h2", 2 };
			ok = ok && gnutls_alpn_set_protocols(c->tls, &h2, 1, GNUTLS_ALPN_MANDATORY) == 0;
			if (ok)
				gnutls_transport_set_int(c->tls, fd);
		}
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
		if (!ok || epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			log_warn("otlp-grpc: cannot set up a connection");
			conn_close(c);
			continue;
		}
		if (!g->tls) {
			c->handshaken = true;
			if (!conn_flush(c))
				conn_close(c);
		}
	}
}

/* Submits the answers the workers finished. */
static void completions(struct otlp_grpc *g)
{
	uint64_t v;
	if (read(g->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_debug("otlp-grpc: eventfd: %s", strerror(errno));
	pthread_mutex_lock(&g->mu);
	struct gstream *s = g->done;
	g->done = NULL;
	pthread_mutex_unlock(&g->mu);
	while (s) {
		struct gstream *n = s->qnext;
		s->queued = false;
		struct gconn *c = s->conn;
		if (!c) {
			stream_free(g, s);
		} else {
			drop_body(g, s);
			answer(c, s);
			if (!conn_flush(c) || conn_finished(c))
				conn_close(c);
		}
		s = n;
	}
}

/* Deadlines: TLS handshakes, streams that do not finish, idle connections. */
static void sweep(struct otlp_grpc *g)
{
	int64_t now = now_unix_ms();
	int64_t stream_ms = ((int64_t)g->lim.header_timeout_s + g->lim.body_timeout_s) * 1000;
	for (struct gconn *c = g->conns, *n; c; c = n) {
		n = c->next;
		if (!c->handshaken) {
			if (now - c->opened_ms > (int64_t)g->lim.header_timeout_s * 1000)
				conn_close(c);
			continue;
		}
		for (struct gstream *s = c->streams; s; s = s->next)
			if (!s->answered && now - s->started_ms > stream_ms)
				fail(c, s, GRPC_CODE_DEADLINE_EXCEEDED,
				     "the request did not arrive within %lld s",
				     (long long)(stream_ms / 1000));
		if (!c->streams && now - c->last_io_ms > (int64_t)g->lim.idle_timeout_s * 1000 &&
		    !c->closing) {
			c->closing = true;
			nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR);
		}
		if (!conn_flush(c) || conn_finished(c) ||
		    (c->closing && now - c->last_io_ms > (int64_t)g->lim.idle_timeout_s * 2000))
			conn_close(c);
	}
}

static void *io_thread(void *arg)
{
	struct otlp_grpc *g = arg;
	struct epoll_event evs[64];
	int64_t last_sweep = now_unix_ms();
	for (;;) {
		int n = epoll_wait(g->ep, evs, 64, 500);
		pthread_mutex_lock(&g->mu);
		bool stop = g->stop;
		pthread_mutex_unlock(&g->mu);
		if (stop)
			break;
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &g->lfd)
				accept_all(g);
			else if (p == &g->efd)
				completions(g);
		}
		/* Connections after the completions: one closed by them is
		 * not in this batch (events are looked up by pointer). */
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &g->lfd || p == &g->efd)
				continue;
			struct gconn *c = p;
			bool alive = false;
			for (struct gconn *k = g->conns; k && !alive; k = k->next)
				alive = k == c;
			if (!alive)
				continue;
			if (evs[i].events & EPOLLIN || evs[i].events & (EPOLLERR | EPOLLHUP))
				conn_readable(c);
			else if (evs[i].events & EPOLLOUT) {
				if (!c->handshaken || !conn_flush(c) || conn_finished(c)) {
					if (!c->handshaken)
						conn_readable(c);
					else
						conn_close(c);
				}
			}
		}
		int64_t now = now_unix_ms();
		if (now - last_sweep >= 1000) {
			sweep(g);
			last_sweep = now;
		}
	}
	return NULL;
}

/* --- start and stop ------------------------------------------------------ */

struct otlp_grpc *otlp_grpc_start(const char *addr, struct server *srv, const struct http_tls *tls,
				  const struct http_limits *limits, struct buf *err)
{
	struct otlp_grpc *g = xcalloc(1, sizeof(*g));
	g->srv = srv;
	g->lim = *limits;
	g->budget = limits->budget ? limits->budget : &g->own;
	g->lfd = g->ep = g->efd = -1;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	if (!g->lim.ingest_threads)
		g->lim.ingest_threads = 1;
	if (tls) {
		int rc = gnutls_certificate_allocate_credentials(&g->cred);
		gnutls_datum_t cert = { (unsigned char *)(uintptr_t)tls->cert_pem,
					(unsigned)strlen(tls->cert_pem) };
		gnutls_datum_t key = { (unsigned char *)(uintptr_t)tls->key_pem,
				       (unsigned)strlen(tls->key_pem) };
		if (rc == 0)
			rc = gnutls_certificate_set_x509_key_mem(g->cred, &cert, &key, GNUTLS_X509_FMT_PEM);
		if (rc >= 0)
			rc = gnutls_priority_init(&g->prio, HTTP_TLS_PRIORITIES, NULL);
		if (rc < 0) {
			buf_printf(err, "--otlp-grpc-listen: TLS: %s", gnutls_strerror(rc));
			otlp_grpc_stop(g);
			return NULL;
		}
		g->tls = true;
	}
	g->lfd = http_listen_socket("--otlp-grpc-listen", addr, err);
	g->ep = epoll_create1(EPOLL_CLOEXEC);
	g->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (g->lfd < 0 || g->ep < 0 || g->efd < 0) {
		if (g->lfd >= 0)
			buf_printf(err, "otlp-grpc: epoll or eventfd: %s", strerror(errno));
		otlp_grpc_stop(g);
		return NULL;
	}
	struct epoll_event le = { .events = EPOLLIN, .data.ptr = &g->lfd };
	struct epoll_event ee = { .events = EPOLLIN, .data.ptr = &g->efd };
	if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &le) < 0 ||
	    epoll_ctl(g->ep, EPOLL_CTL_ADD, g->efd, &ee) < 0) {
		buf_printf(err, "otlp-grpc: epoll: %s", strerror(errno));
		otlp_grpc_stop(g);
		return NULL;
	}
	g->workers = xcalloc(g->lim.ingest_threads, sizeof(pthread_t));
	for (unsigned i = 0; i < g->lim.ingest_threads; i++) {
		if (pthread_create(&g->workers[i], NULL, worker, g) != 0) {
			buf_puts(err, "otlp-grpc: cannot start a worker thread");
			otlp_grpc_stop(g);
			return NULL;
		}
		g->nworkers++;
	}
	if (pthread_create(&g->io, NULL, io_thread, g) != 0) {
		buf_puts(err, "otlp-grpc: cannot start its thread");
		otlp_grpc_stop(g);
		return NULL;
	}
	g->io_started = true;
	return g;
}

void otlp_grpc_stop(struct otlp_grpc *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	g->stop = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	if (g->io_started)
		pthread_join(g->io, NULL);
	for (unsigned i = 0; i < g->nworkers; i++)
		pthread_join(g->workers[i], NULL);
	free(g->workers);
	while (g->conns)
		conn_close(g->conns);
	/* What the workers finished after the I/O thread stopped. */
	for (struct gstream *s = g->done, *n; s; s = n) {
		n = s->qnext;
		stream_free(g, s);
	}
	if (g->lfd >= 0)
		close(g->lfd);
	if (g->ep >= 0)
		close(g->ep);
	if (g->efd >= 0)
		close(g->efd);
	if (g->prio)
		gnutls_priority_deinit(g->prio);
	if (g->cred)
		gnutls_certificate_free_credentials(g->cred);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
}

int otlp_grpc_feed(const uint8_t *data, size_t n)
{
	struct otlp_grpc g = { .memory = true, .lfd = -1, .ep = -1, .efd = -1 };
	http_limits_default(&g.lim);
	g.budget = &g.own;
	pthread_mutex_init(&g.mu, NULL);
	pthread_cond_init(&g.cv, NULL);
	struct gconn *c = xcalloc(1, sizeof(*c));
	c->g = &g;
	c->fd = -1;
	c->handshaken = true;
	if (conn_session(c) == 0) {
		/* In pieces, as a socket would hand them over. */
		size_t off = 0;
		while (off < n) {
			size_t k = n - off < 1000 ? n - off : 1000;
			if (nghttp2_session_mem_recv(c->h2, data + off, k) < 0)
				break;
			off += k;
			if (!conn_flush(c))
				break;
		}
		conn_flush(c);
	}
	int fed = g.fed;
	conn_close(c);
	pthread_mutex_destroy(&g.mu);
	pthread_cond_destroy(&g.cv);
	return fed;
}
