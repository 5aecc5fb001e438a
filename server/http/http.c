/* http.c - see http.h. */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "jsonw.h"
#include "server/auth/authz.h"
#include "log.h"
#include "server.h"
#include "util.h"

#define MAX_PATH 2048

/* One per TCP connection, from libmicrohttpd's connection notifications:
 * the reaper shuts down a connection whose deadline has passed. */
struct track {
	struct track *prev, *next;
	int fd;
	uint64_t deadline_ns;  /* 0: none; atomic */
	int awaiting_next;     /* kept alive, waiting for its next request */
	bool counted;          /* holds one of the budget's connections */
};

struct conn_state;

/* A pool of handler threads: HTTP_QUERY and HTTP_INGEST requests wait
 * here for a thread of their own, their connection suspended, so that the
 * libmicrohttpd threads (which serve every connection they accepted,
 * /healthz included) never wait for a handler. */
struct qpool {
	struct http_server *h;
	unsigned queue_max;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct conn_state *head, *tail;
	unsigned waiting, running;
	pthread_t *tids;
	unsigned nthreads;
	bool stop;
};

struct http_server {
	struct MHD_Daemon *d;
	const struct route *routes;
	size_t nroutes;
	struct server *srv;
	struct http_limits lim;
	char *spool_dir;
	struct http_budget own;     /* the budget when limits name none */
	struct http_budget *budget; /* connections and bodies in memory, with the other listeners */
	pthread_mutex_t tmu; /* guards tracks; held while a reaped fd is shut down */
	struct track *tracks;
	pthread_t reaper;
	bool reaper_started;
	int stopping; /* atomic */
	struct qpool pools[2]; /* POOL_QUERY, POOL_INGEST */
};

enum { POOL_QUERY, POOL_INGEST };

struct conn_state {
	const struct route *route; /* NULL: no route matched */
	int status_hint;           /* 404 or 405 when route is NULL */
	const char *params[HTTP_MAX_PARAMS];
	size_t lens[HTTP_MAX_PARAMS];
	size_t nparams;
	struct buf body;
	size_t reserved;           /* bytes of h->budget->mem this request holds */
	int too_large, over_budget, spool_failed;
	int refused;               /* resp holds the answer; the body is discarded */
	int spool_fd;              /* -1: none */
	size_t spool_len;
	void *map;
	size_t map_len;
	/* HTTP_QUERY, HTTP_INGEST: */
	int qstate;                /* 0, 1 queued or running, 2 answered */
	struct conn_state *qnext;
	struct MHD_Connection *conn;
	const char *method, *url;
	struct http_resp resp;
	struct principal *who;     /* auth_request's, freed when the request ends */
};

int http_match(const char *pattern, const char *path, const char **params, size_t *lens,
	       size_t *nparams)
{
	*nparams = 0;
	if (strcmp(pattern, "*") == 0)
		return 1;
	const char *p = pattern, *s = path;
	while (*p && *s) {
		if (*p == '{') {
			const char *pe = strchr(p, '}');
			if (!pe)
				return 0;
			const char *se = strchr(s, '/');
			size_t len = se ? (size_t)(se - s) : strlen(s);
			if (len == 0 || *nparams >= HTTP_MAX_PARAMS)
				return 0;
			params[*nparams] = s;
			lens[*nparams] = len;
			(*nparams)++;
			p = pe + 1;
			s += len;
			continue;
		}
		if (*p != *s)
			return 0;
		p++;
		s++;
	}
	return *p == '\0' && *s == '\0';
}

static void route_request(struct http_server *h, const char *method, const char *url,
			  struct conn_state *cs)
{
	cs->status_hint = 404;
	for (size_t i = 0; i < h->nroutes; i++) {
		const struct route *r = &h->routes[i];
		size_t n;
		const char *params[HTTP_MAX_PARAMS];
		size_t lens[HTTP_MAX_PARAMS];
		if (!http_match(r->pattern, url, params, lens, &n))
			continue;
		/* A path an endpoint owns is never served as a page. */
		if (strcmp(r->pattern, "*") == 0 && cs->status_hint == 405)
			continue;
		if (strcmp(r->method, method) != 0 &&
		    !(strcmp(method, "HEAD") == 0 && strcmp(r->method, "GET") == 0)) {
			if (strcmp(r->pattern, "*") != 0)
				cs->status_hint = 405;
			continue;
		}
		cs->route = r;
		memcpy(cs->params, params, sizeof(params));
		memcpy(cs->lens, lens, sizeof(lens));
		cs->nparams = n;
		return;
	}
}

void http_error(struct http_resp *resp, int status, const char *fmt, ...)
{
	struct buf msg = { 0 };
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&msg, fmt, ap);
	va_end(ap);
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "error", msg.data);
	jsonw_end_object(&w);
	http_json_end(resp, &w, status);
	buf_free(&msg);
}

void http_add_header(struct http_resp *resp, const char *name, const char *fmt, ...)
{
	struct buf v = { 0 };
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&v, fmt, ap);
	va_end(ap);
	if (strpbrk(v.data ? v.data : "", "\r\n") || strpbrk(name, "\r\n: ")) {
		log_error("http: header %s with a line break not sent", name);
	} else {
		buf_printf(&resp->headers, "%s: %s\n", name, v.data ? v.data : "");
	}
	buf_free(&v);
}

void http_json(struct http_resp *resp, int status)
{
	resp->status = status;
	resp->content_type = "application/json";
}

void http_json_doc(struct http_resp *resp, int status, struct json_t *doc)
{
	char *s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	if (!s) {
		http_error(resp, 500, "the answer could not be written");
		return;
	}
	buf_puts(&resp->body, s);
	buf_putc(&resp->body, '\n');
	free(s);
	http_json(resp, status);
}

void http_json_begin(struct http_resp *resp, struct jsonw *w)
{
	buf_reset(&resp->body);
	jsonw_init(w, &resp->body);
}

void http_json_end(struct http_resp *resp, struct jsonw *w, int status)
{
	if (jsonw_finish(w)) {
		log_error("http: an answer was not written as valid JSON (%s)", w->misuse);
		/* Not http_error, whose own answer comes through here. */
		struct jsonw e;
		http_json_begin(resp, &e);
		jsonw_begin_object(&e);
		jsonw_kv_str(&e, "error", "internal error: the answer was not written as valid JSON");
		jsonw_end_object(&e);
		(void)jsonw_finish(&e); /* one flat object: no misuse is possible */
		buf_putc(&resp->body, '\n');
		http_json(resp, 500);
		return;
	}
	buf_putc(&resp->body, '\n');
	http_json(resp, status);
}

void http_json_bool(struct http_resp *resp, int status, const char *key, bool v)
{
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	jsonw_kv_bool(&w, key, v);
	jsonw_end_object(&w);
	http_json_end(resp, &w, status);
}

static const char *list_value(const char *const *kv, const char *name, bool nocase)
{
	for (size_t i = 0; kv && kv[i] && kv[i + 1]; i += 2)
		if (nocase ? strcasecmp(kv[i], name) == 0 : strcmp(kv[i], name) == 0)
			return kv[i + 1];
	return NULL;
}

const char *http_header(const struct http_req *req, const char *name)
{
	if (!req->conn)
		return list_value(req->headers, name, true);
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

void http_client_address(const struct http_req *req, char *out, size_t n)
{
	snprintf(out, n, "%s", !req->conn && req->peer ? req->peer : "");
	if (!req->conn)
		return;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	http_address_text(ci ? ci->client_addr : NULL, out, n);
}

void http_address_text(const struct sockaddr *sa, char *out, size_t n)
{
	snprintf(out, n, "%s", "");
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out, (socklen_t)n);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out, (socklen_t)n);
}

const char *http_query_arg(const struct http_req *req, const char *name)
{
	if (!req->conn)
		return list_value(req->args, name, false);
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

static enum MHD_Result send_response(struct MHD_Connection *c, struct http_resp *resp)
{
	struct MHD_Response *r;
	if (resp->static_body) {
		r = MHD_create_response_from_buffer(resp->static_len, (void *)resp->static_body,
						    MHD_RESPMEM_PERSISTENT);
	} else {
		size_t len;
		char *data = buf_steal(&resp->body, &len);
		r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
		if (!r)
			free(data);
	}
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type",
				resp->content_type ? resp->content_type : "text/plain; charset=utf-8");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r, "Cache-Control", resp->cache_control ? resp->cache_control : "no-store");
	if (resp->retry_after)
		MHD_add_response_header(r, "Retry-After", resp->retry_after);
	for (char *line = resp->headers.data, *end; line && *line; line = end + 1) {
		end = strchr(line, '\n');
		if (!end)
			end = line + strlen(line) - 1;
		else
			*end = 0;
		char *colon = strchr(line, ':');
		if (colon && colon != line) {
			*colon = 0;
			MHD_add_response_header(r, line, colon + 1 + (colon[1] == ' '));
		}
	}
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)resp->status, r);
	MHD_destroy_response(r);
	return ret;
}

static struct track *track_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void set_deadline(struct MHD_Connection *c, unsigned seconds)
{
	struct track *t = track_of(c);
	if (t)
		__atomic_store_n(&t->deadline_ns, seconds ? now_mono_ns() + seconds * 1000000000ull : 0,
				 __ATOMIC_RELAXED);
}

bool http_budget_take_conn(struct http_budget *b, unsigned max)
{
	unsigned cur = __atomic_load_n(&b->conns, __ATOMIC_RELAXED);
	do {
		if (cur >= max)
			return false;
	} while (!__atomic_compare_exchange_n(&b->conns, &cur, cur + 1, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return true;
}

void http_budget_put_conn(struct http_budget *b)
{
	__atomic_sub_fetch(&b->conns, 1, __ATOMIC_RELAXED);
}

bool http_budget_take_mem(struct http_budget *b, size_t n, size_t max)
{
	size_t cur = __atomic_load_n(&b->mem, __ATOMIC_RELAXED);
	do {
		if (cur + n < cur || cur + n > max)
			return false;
	} while (!__atomic_compare_exchange_n(&b->mem, &cur, cur + n, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return true;
}

void http_budget_put_mem(struct http_budget *b, size_t n)
{
	if (n)
		__atomic_sub_fetch(&b->mem, n, __ATOMIC_RELAXED);
}

/* Takes n bytes of the in-memory body budget for cs; false when the
 * budget has not that much left. */
static bool reserve(struct http_server *h, struct conn_state *cs, size_t n)
{
	if (!http_budget_take_mem(h->budget, n, h->lim.upload_memory))
		return false;
	cs->reserved += n;
	return true;
}

static void release(struct http_server *h, struct conn_state *cs)
{
	http_budget_put_mem(h->budget, cs->reserved);
	cs->reserved = 0;
}

static void drop_body(struct http_server *h, struct conn_state *cs)
{
	buf_free(&cs->body);
	release(h, cs);
	if (cs->spool_fd >= 0)
		close(cs->spool_fd);
	cs->spool_fd = -1;
	cs->spool_len = 0;
}

static void write_all(int fd, const char *p, size_t n, int *failed)
{
	while (n && !*failed) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			*failed = 1;
			break;
		}
		p += w;
		n -= (size_t)w;
	}
}

/* Appends to an HTTP_SPOOL body's file, moving what memory held there
 * first; the file has no name (O_TMPFILE) and goes with its descriptor. */
static void spool(struct http_server *h, struct conn_state *cs, const char *data, size_t n)
{
	if (cs->spool_fd < 0) {
		cs->spool_fd = unnamed_file(h->spool_dir);
		if (cs->spool_fd < 0) {
			log_error("http: cannot create a spool file in %s: %s", h->spool_dir,
				  strerror(errno));
			cs->spool_failed = 1;
			drop_body(h, cs);
			return;
		}
		write_all(cs->spool_fd, cs->body.data, cs->body.len, &cs->spool_failed);
		cs->spool_len = cs->body.len;
		buf_free(&cs->body);
		release(h, cs);
	}
	write_all(cs->spool_fd, data, n, &cs->spool_failed);
	cs->spool_len += n;
	if (cs->spool_failed) {
		log_error("http: cannot write a spool file in %s: %s", h->spool_dir, strerror(errno));
		drop_body(h, cs);
	}
}

static void take_body(struct http_server *h, struct conn_state *cs, const char *data, size_t n)
{
	size_t max = cs->route ? cs->route->max_body : 0;
	if (cs->refused || cs->too_large || cs->over_budget || cs->spool_failed)
		return; /* read and discarded */
	if (cs->body.len + cs->spool_len + n > max) {
		cs->too_large = 1;
		drop_body(h, cs);
		return;
	}
	if (cs->spool_fd >= 0 ||
	    ((cs->route->flags & HTTP_SPOOL) && cs->body.len + n > HTTP_SPOOL_AFTER)) {
		spool(h, cs, data, n);
		return;
	}
	if (cs->body.len + n > cs->reserved && !reserve(h, cs, cs->body.len + n - cs->reserved)) {
		cs->over_budget = 1;
		drop_body(h, cs);
		return;
	}
	buf_append(&cs->body, data, n);
}

/* Counts and queues an answer. */
static enum MHD_Result respond(struct http_server *h, struct MHD_Connection *c,
			       struct http_resp *resp)
{
	__atomic_add_fetch(&h->srv->counters.http_requests, 1, __ATOMIC_RELAXED);
	if (resp->status >= 400)
		__atomic_add_fetch(&h->srv->counters.http_errors, 1, __ATOMIC_RELAXED);
	enum MHD_Result ret = send_response(c, resp);
	buf_free(&resp->body);
	buf_free(&resp->headers);
	return ret;
}

static void busy(struct http_resp *resp, const char *what)
{
	http_error(resp, 503, "the server is busy: %s; retry later", what);
	resp->retry_after = "5";
}

static void make_req(struct conn_state *cs, struct MHD_Connection *c, const char *method,
		     const char *url, char params[][256], struct http_req *req)
{
	*req = (struct http_req){
		.method = method,
		.path = url,
		.body = cs->map ? cs->map : cs->body.data ? cs->body.data : "",
		.body_len = cs->map ? cs->map_len : cs->body.len,
		.conn = c,
		.nparams = cs->nparams,
		.who = cs->who,
	};
	for (size_t i = 0; i < cs->nparams; i++) {
		snprintf(params[i], 256, "%.*s", (int)MIN(cs->lens[i], 255u), cs->params[i]);
		req->params[i] = params[i];
	}
}

/* A refused request's body up to this size is read and discarded before
 * the answer, so that a client that sends its whole body before reading
 * sees the answer rather than a reset connection; a larger one (or one of
 * unknown length) is answered at once and the connection closed unread. */
#define HTTP_DISCARD_MAX (4u << 20)

/* The first call, with the headers only: what can be refused is refused
 * here, before a body byte is read. Returns 1 with resp set to the
 * refusal, else 0. */
static int on_headers(struct http_server *h, struct MHD_Connection *c, const char *url,
		      const char *method, struct conn_state *cs, struct http_resp *resp)
{
	if (strlen(url) > MAX_PATH) {
		http_error(resp, 414, "request path longer than %d bytes", MAX_PATH);
		return 1;
	}
	route_request(h, method, url, cs);
	if (!cs->route) {
		if (cs->status_hint == 405)
			http_error(resp, 405, "method %s is not allowed on %s", method, url);
		else
			http_error(resp, 404, "no such endpoint: %s %s", method, url);
		return 1;
	}
	if (cs->route->role && h->lim.roles && !(cs->route->role & h->lim.roles)) {
		http_error(resp, 404, "%s %s is not served here: this ember-server's --roles leave out %s",
			   method, url, http_role_name(cs->route->role));
		return 1;
	}
	{
		char params[HTTP_MAX_PARAMS][256];
		struct http_req req;
		make_req(cs, c, method, url, params, &req);
		if (!auth_request(h->srv, cs->route, &req, resp, &cs->who))
			return 1;
	}
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	uint64_t n = 0;
	if (cl && parse_u64(cl, &n) < 0) {
		http_error(resp, 400, "Content-Length: expected a number of bytes");
		return 1;
	}
	if (n > cs->route->max_body) {
		http_error(resp, 413, "request body larger than %zu bytes", cs->route->max_body);
		return 1;
	}
	size_t want = (cs->route->flags & HTTP_SPOOL) ? MIN((size_t)n, HTTP_SPOOL_AFTER) : (size_t)n;
	if (want && !reserve(h, cs, want)) {
		busy(resp, "request bodies in memory reach --max-upload-memory");
		return 1;
	}
	if (want)
		buf_reserve(&cs->body, want);
	return 0;
}

static void *pool_worker(void *arg)
{
	struct qpool *q = arg;
	struct http_server *h = q->h;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (!q->head && !q->stop)
			pthread_cond_wait(&q->cv, &q->mu);
		struct conn_state *cs = q->head;
		if (!cs)
			break; /* stopping with nothing queued */
		q->head = cs->qnext;
		if (!q->head)
			q->tail = NULL;
		q->waiting--;
		q->running++;
		bool stop = q->stop;
		pthread_mutex_unlock(&q->mu);
		if (stop) {
			busy(&cs->resp, "stopping");
		} else {
			char params[HTTP_MAX_PARAMS][256];
			struct http_req req;
			make_req(cs, cs->conn, cs->method, cs->url, params, &req);
			cs->route->fn(h->srv, &req, &cs->resp);
		}
		struct MHD_Connection *c = cs->conn;
		pthread_mutex_lock(&q->mu);
		q->running--;
		__atomic_store_n(&cs->qstate, 2, __ATOMIC_RELEASE);
		/* cs is the connection's until it is resumed: not touched after. */
		MHD_resume_connection(c);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

/* Hands a request to pool q and suspends its connection; false when the
 * pool is full (or stopping). */
static bool admit(struct qpool *q, struct MHD_Connection *c, const char *method, const char *url,
		  struct conn_state *cs)
{
	pthread_mutex_lock(&q->mu);
	if (q->stop || q->running + q->waiting >= q->nthreads + q->queue_max) {
		pthread_mutex_unlock(&q->mu);
		return false;
	}
	cs->conn = c;
	cs->method = method;
	cs->url = url;
	cs->resp = (struct http_resp){ .status = 200 };
	cs->qstate = 1;
	cs->qnext = NULL;
	MHD_suspend_connection(c);
	if (q->tail)
		q->tail->qnext = cs;
	else
		q->head = cs;
	q->tail = cs;
	q->waiting++;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
	return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	(void)version;
	struct http_server *h = cls;
	struct conn_state *cs = *con_cls;
	if (!cs) {
		cs = xcalloc(1, sizeof(*cs));
		cs->spool_fd = -1;
		*con_cls = cs;
		struct http_resp resp = { .status = 200 };
		if (on_headers(h, c, url, method, cs, &resp)) {
			const char *cl =
				MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
			const char *te =
				MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
			uint64_t n = 0;
			if (!te && (!cl || (parse_u64(cl, &n) == 0 && n <= HTTP_DISCARD_MAX))) {
				cs->refused = 1;
				cs->resp = resp;
				set_deadline(c, h->lim.body_timeout_s);
				return MHD_YES;
			}
			/* Queued before the body: libmicrohttpd reads no more of
			 * this connection and closes it after the answer. */
			set_deadline(c, 0);
			return respond(h, c, &resp);
		}
		set_deadline(c, h->lim.body_timeout_s);
		return MHD_YES;
	}
	if (*upload_data_size) {
		take_body(h, cs, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (cs->refused || __atomic_load_n(&cs->qstate, __ATOMIC_ACQUIRE) == 2) {
		set_deadline(c, 0);
		return respond(h, c, &cs->resp);
	}
	if (cs->qstate == 1)
		return MHD_YES; /* cannot happen: suspended meanwhile */
	set_deadline(c, 0);

	struct http_resp resp = { .status = 200 };
	if (cs->too_large) {
		http_error(&resp, 413, "request body larger than %zu bytes", cs->route->max_body);
	} else if (cs->over_budget) {
		busy(&resp, "request bodies in memory reach --max-upload-memory");
	} else if (cs->spool_failed) {
		http_error(&resp, 503, "the request body could not be written to %s", h->spool_dir);
		resp.retry_after = "30";
	} else {
		if (cs->spool_fd >= 0 && cs->spool_len) {
			cs->map = mmap(NULL, cs->spool_len, PROT_READ, MAP_PRIVATE, cs->spool_fd, 0);
			if (cs->map == MAP_FAILED) {
				cs->map = NULL;
				http_error(&resp, 503, "cannot map the spooled request body: %s",
					   strerror(errno));
				resp.retry_after = "30";
				return respond(h, c, &resp);
			}
			cs->map_len = cs->spool_len;
		}
		if (cs->route->flags & HTTP_INGEST) {
			if (admit(&h->pools[POOL_INGEST], c, method, url, cs))
				return MHD_YES;
			busy(&resp, "too many ingest requests at once (--ingest-threads, --ingest-queue)");
			resp.retry_after = "1";
		} else if (cs->route->flags & HTTP_QUERY) {
			if (admit(&h->pools[POOL_QUERY], c, method, url, cs))
				return MHD_YES;
			http_error(&resp, 503, "too many queries at once (%u running, %u waiting at most: "
					       "--query-threads, --query-queue); retry later",
				   h->lim.query_threads, h->lim.query_queue);
			resp.retry_after = "1";
			__atomic_add_fetch(&h->srv->counters.queries_refused, 1, __ATOMIC_RELAXED);
		} else {
			char params[HTTP_MAX_PARAMS][256];
			struct http_req req;
			make_req(cs, c, method, url, params, &req);
			cs->route->fn(h->srv, &req, &resp);
		}
	}
	return respond(h, c, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *h = cls;
	(void)toe;
	struct conn_state *cs = *con_cls;
	if (cs) {
		drop_body(h, cs);
		if (cs->map)
			munmap(cs->map, cs->map_len);
		buf_free(&cs->resp.body);
		buf_free(&cs->resp.headers);
		principal_free(cs->who);
		free(cs);
		*con_cls = NULL;
	}
	/* Kept alive: the next request may take the idle timeout to start. */
	struct track *t = track_of(c);
	if (t) {
		t->awaiting_next = 1;
		set_deadline(c, h->lim.idle_timeout_s);
	}
}

/* The request line has arrived: its headers have header_timeout_s (from
 * the connection's start for its first request, from here for the next). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	struct http_server *h = cls;
	(void)uri;
	struct track *t = track_of(c);
	if (t && t->awaiting_next) {
		t->awaiting_next = 0;
		set_deadline(c, h->lim.header_timeout_s);
	}
	return NULL; /* on_request's *con_cls starts NULL */
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct http_server *h = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct track *t = xcalloc(1, sizeof(*t));
		t->fd = ci ? ci->connect_fd : -1;
		t->deadline_ns = now_mono_ns() + h->lim.header_timeout_s * 1000000000ull;
		/* The budget shared with the gRPC listener: beyond it the
		 * connection is shut down at once (libmicrohttpd then closes it). */
		t->counted = http_budget_take_conn(h->budget, h->lim.max_connections);
		if (!t->counted && t->fd >= 0)
			shutdown(t->fd, SHUT_RDWR);
		pthread_mutex_lock(&h->tmu);
		t->next = h->tracks;
		if (h->tracks)
			h->tracks->prev = t;
		h->tracks = t;
		pthread_mutex_unlock(&h->tmu);
		*socket_context = t;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
		/* libmicrohttpd closes the socket after this: once the track is
		 * unlinked the reaper can no longer shut down a reused fd. */
		struct track *t = *socket_context;
		pthread_mutex_lock(&h->tmu);
		if (t->prev)
			t->prev->next = t->next;
		else
			h->tracks = t->next;
		if (t->next)
			t->next->prev = t->prev;
		pthread_mutex_unlock(&h->tmu);
		if (t->counted)
			http_budget_put_conn(h->budget);
		free(t);
		*socket_context = NULL;
	}
}

/* Shuts down the connections past their deadline (libmicrohttpd then
 * sees them end and closes them), twice a second. */
static void *reaper(void *arg)
{
	struct http_server *h = arg;
	while (!__atomic_load_n(&h->stopping, __ATOMIC_RELAXED)) {
		struct timespec ts = { 0, 250 * 1000000L };
		nanosleep(&ts, NULL);
		uint64_t now = now_mono_ns();
		pthread_mutex_lock(&h->tmu);
		for (struct track *t = h->tracks; t; t = t->next) {
			uint64_t d = __atomic_load_n(&t->deadline_ns, __ATOMIC_RELAXED);
			if (d && now > d && t->fd >= 0) {
				shutdown(t->fd, SHUT_RDWR);
				__atomic_store_n(&t->deadline_ns, 0, __ATOMIC_RELAXED);
				__atomic_add_fetch(&h->srv->counters.http_timeouts, 1, __ATOMIC_RELAXED);
			}
		}
		pthread_mutex_unlock(&h->tmu);
	}
	return NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	log_vlibrary(LOG_WARN, "http", fmt, ap);
}

static const char *const role_names[] = { "ingest", "query", "ui", "symbols" };

const char *http_role_name(unsigned role)
{
	for (unsigned i = 0; i < ARRAY_SIZE(role_names); i++)
		if (role == 1u << i)
			return role_names[i];
	return "?";
}

int http_roles_parse(const char *s, unsigned *out, struct buf *err)
{
	*out = 0;
	for (const char *p = s;;) {
		size_t n = strcspn(p, ",");
		unsigned i = 0;
		while (i < ARRAY_SIZE(role_names) &&
		       !(strlen(role_names[i]) == n && strncmp(role_names[i], p, n) == 0))
			i++;
		if (i == ARRAY_SIZE(role_names)) {
			buf_printf(err, "unknown role \"%.*s\" (expected ingest, query, ui or symbols, "
				   "comma-separated)", (int)MIN(n, (size_t)64), p);
			return -1;
		}
		*out |= 1u << i;
		if (!p[n])
			return 0;
		p += n + 1;
	}
}

void http_limits_default(struct http_limits *l)
{
	*l = (struct http_limits){
		.max_connections = 1024,
		.per_ip_connections = 128,
		.idle_timeout_s = 30,
		.header_timeout_s = 10,
		.body_timeout_s = 120,
		.upload_memory = (size_t)512 << 20,
		.query_threads = 2,
		.query_queue = 16,
		.ingest_threads = 4,
		.ingest_queue = 256,
		.spool_dir = ".",
	};
}

/* File descriptors besides the connections: the store's files, the
 * symbol store's, epoll, the debuginfod fetcher. */
#define FDS_BESIDES_CONNECTIONS 256u

/* Raises the soft open-file limit to the hard one so that the connection
 * limit is real (a server out of descriptors stops accepting, and every
 * new client hangs in the listen backlog); returns the connections the
 * limit allows. */
static unsigned connections_allowed(unsigned want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return want;
	rlim_t need = (rlim_t)want + FDS_BESIDES_CONNECTIONS;
	if (rl.rlim_cur < need && rl.rlim_cur < rl.rlim_max) {
		rlim_t old = rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
			log_info("http: open-file limit raised from %llu to %llu for %u connections",
				 (unsigned long long)old, (unsigned long long)rl.rlim_cur, want);
		else if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
			return want;
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		unsigned n = rl.rlim_cur > 2 * FDS_BESIDES_CONNECTIONS
				     ? (unsigned)(rl.rlim_cur - FDS_BESIDES_CONNECTIONS)
				     : (unsigned)(rl.rlim_cur / 2);
		log_warn("http: the open-file limit (%llu, ulimit -n) allows %u connections, not "
			 "--max-connections %u; raise the hard limit (LimitNOFILE=)",
			 (unsigned long long)rl.rlim_cur, n, want);
		return n;
	}
	return want;
}

static void pools_stop(struct http_server *h)
{
	for (int k = 0; k < 2; k++) {
		struct qpool *q = &h->pools[k];
		pthread_mutex_lock(&q->mu);
		q->stop = true;
		pthread_cond_broadcast(&q->cv);
		pthread_mutex_unlock(&q->mu);
	}
	for (int k = 0; k < 2; k++) {
		struct qpool *q = &h->pools[k];
		for (unsigned i = 0; i < q->nthreads; i++)
			pthread_join(q->tids[i], NULL);
		free(q->tids);
		q->tids = NULL;
		q->nthreads = 0;
	}
}

static int pool_start(struct http_server *h, struct qpool *q, unsigned threads, unsigned queue)
{
	q->h = h;
	q->queue_max = queue;
	q->tids = xcalloc(threads, sizeof(*q->tids));
	for (unsigned i = 0; i < threads; i++) {
		if (pthread_create(&q->tids[i], NULL, pool_worker, q) != 0)
			return -1;
		q->nthreads++;
	}
	return 0;
}

static void server_free(struct http_server *h)
{
	if (h->reaper_started) {
		__atomic_store_n(&h->stopping, 1, __ATOMIC_RELAXED);
		pthread_join(h->reaper, NULL);
	}
	pthread_mutex_destroy(&h->tmu);
	for (int k = 0; k < 2; k++) {
		pthread_mutex_destroy(&h->pools[k].mu);
		pthread_cond_destroy(&h->pools[k].cv);
	}
	free_all(h->spool_dir, h);
}

int http_listen_socket(const char *flag, const char *addr, struct buf *err)
{
	const char *colon = strrchr(addr, ':');
	char host[256];
	size_t hl = colon ? (size_t)(colon - addr) : 0;
	if (!colon || hl >= sizeof(host)) {
		buf_printf(err, "%s: expected host:port, got \"%s\"", flag, addr);
		return -1;
	}
	memcpy(host, addr, hl);
	host[hl] = '\0';
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	int gai = getaddrinfo(*host ? host : NULL, colon + 1, &hints, &ai);
	if (gai != 0) {
		buf_printf(err, "%s: cannot resolve \"%s\": %s", flag, addr, gai_strerror(gai));
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (ai->ai_family == AF_INET6 &&
	     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
		buf_printf(err, "%s: cannot listen on %s: %s", flag, addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

struct http_server *http_start(const char *addr, const struct route *routes, size_t nroutes,
			       struct server *srv, const struct http_tls *tls,
			       const struct http_limits *limits, struct buf *err)
{
	int lfd = http_listen_socket("--listen", addr, err);
	if (lfd < 0)
		return NULL;
	struct http_server *h = xcalloc(1, sizeof(*h));
	h->routes = routes;
	h->nroutes = nroutes;
	h->srv = srv;
	h->lim = *limits;
	h->spool_dir = xstrdup(limits->spool_dir);
	h->lim.spool_dir = h->spool_dir;
	h->budget = limits->budget ? limits->budget : &h->own;
	if (!h->lim.query_threads)
		h->lim.query_threads = 1;
	if (!h->lim.ingest_threads)
		h->lim.ingest_threads = 1;
	h->lim.max_connections = connections_allowed(h->lim.max_connections);
	pthread_mutex_init(&h->tmu, NULL);
	for (int k = 0; k < 2; k++) {
		pthread_mutex_init(&h->pools[k].mu, NULL);
		pthread_cond_init(&h->pools[k].cv, NULL);
	}
	if (pthread_create(&h->reaper, NULL, reaper, h) != 0) {
		buf_printf(err, "cannot start a thread");
		close(lfd);
		server_free(h);
		return NULL;
	}
	h->reaper_started = true;
	if (pool_start(h, &h->pools[POOL_QUERY], h->lim.query_threads, h->lim.query_queue) < 0 ||
	    pool_start(h, &h->pools[POOL_INGEST], h->lim.ingest_threads, h->lim.ingest_queue) < 0) {
		buf_printf(err, "cannot start a handler thread");
		close(lfd);
		pools_stop(h);
		server_free(h);
		return NULL;
	}
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
			 MHD_ALLOW_SUSPEND_RESUME;
	struct MHD_OptionItem tls_opts[] = {
		{ MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)(uintptr_t)(tls ? tls->cert_pem : NULL) },
		{ MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)(uintptr_t)(tls ? tls->key_pem : NULL) },
		{ MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)(uintptr_t)HTTP_TLS_PRIORITIES },
		{ MHD_OPTION_END, 0, NULL },
	};
	if (tls) {
		flags |= MHD_USE_TLS;
	} else {
		tls_opts[0].option = MHD_OPTION_END;
	}
	h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
				MHD_OPTION_ARRAY, tls_opts,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				MHD_OPTION_LISTEN_SOCKET, lfd,
				MHD_OPTION_THREAD_POOL_SIZE, (unsigned)4,
				MHD_OPTION_CONNECTION_TIMEOUT, h->lim.idle_timeout_s,
				MHD_OPTION_CONNECTION_LIMIT, h->lim.max_connections,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, h->lim.per_ip_connections,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
				MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
				MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
				MHD_OPTION_END);
	if (!h->d) {
		/* Whether libmicrohttpd closed lfd on failing is not part of
		 * its contract: left as it is (the server exits on this). */
		buf_printf(err, tls ? "cannot serve %s over TLS (a certificate and key that do not match?)"
				    : "cannot serve %s", addr);
		pools_stop(h);
		server_free(h);
		return NULL;
	}
	return h;
}

void http_stop(struct http_server *h)
{
	if (!h)
		return;
	/* Queries finish (or are answered 503) and resume their connections
	 * before the daemon goes. */
	pools_stop(h);
	MHD_stop_daemon(h->d);
	server_free(h);
}
