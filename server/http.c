/* http.c - see http.h. */
#include "http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "jsonw.h"
#include "log.h"
#include "server.h"
#include "util.h"

#define MAX_PATH 2048

struct http_server {
	struct MHD_Daemon *d;
	const struct route *routes;
	size_t nroutes;
	struct server *srv;
};

struct conn_state {
	const struct route *route; /* NULL: no route matched */
	int status_hint;           /* 404 or 405 when route is NULL */
	const char *params[HTTP_MAX_PARAMS];
	size_t lens[HTTP_MAX_PARAMS];
	size_t nparams;
	struct buf body;
	int too_large;
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
	buf_reset(&resp->body);
	buf_puts(&resp->body, "{\"error\":");
	jsonw_str(&resp->body, msg.data);
	buf_puts(&resp->body, "}\n");
	buf_free(&msg);
	resp->status = status;
	resp->content_type = "application/json";
}

void http_json(struct http_resp *resp, int status)
{
	resp->status = status;
	resp->content_type = "application/json";
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
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)resp->status, r);
	MHD_destroy_response(r);
	return ret;
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
		*con_cls = cs;
		if (strlen(url) <= MAX_PATH)
			route_request(h, method, url, cs);
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		uint64_t n;
		size_t max = cs->route ? cs->route->max_body : 0;
		if (cl && parse_u64(cl, &n) == 0 && n > max)
			cs->too_large = 1;
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t max = cs->route ? cs->route->max_body : 0;
		if (!cs->too_large && cs->body.len + *upload_data_size > max) {
			cs->too_large = 1;
			buf_free(&cs->body);
		}
		if (!cs->too_large)
			buf_append(&cs->body, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}

	struct http_resp resp = { .status = 200 };
	__atomic_add_fetch(&h->srv->counters.http_requests, 1, __ATOMIC_RELAXED);
	if (strlen(url) > MAX_PATH) {
		http_error(&resp, 414, "request path longer than %d bytes", MAX_PATH);
	} else if (!cs->route) {
		if (cs->status_hint == 405)
			http_error(&resp, 405, "method %s is not allowed on %s", method, url);
		else
			http_error(&resp, 404, "no such endpoint: %s %s", method, url);
	} else if (cs->too_large) {
		http_error(&resp, 413, "request body larger than %zu bytes", cs->route->max_body);
	} else {
		struct http_req req = {
			.method = method,
			.path = url,
			.body = cs->body.data ? cs->body.data : "",
			.body_len = cs->body.len,
			.conn = c,
			.nparams = cs->nparams,
		};
		char params[HTTP_MAX_PARAMS][256];
		for (size_t i = 0; i < cs->nparams; i++) {
			snprintf(params[i], sizeof(params[i]), "%.*s", (int)MIN(cs->lens[i], 255u),
				 cs->params[i]);
			req.params[i] = params[i];
		}
		cs->route->fn(h->srv, &req, &resp);
	}
	if (resp.status >= 400)
		__atomic_add_fetch(&h->srv->counters.http_errors, 1, __ATOMIC_RELAXED);
	enum MHD_Result ret = send_response(c, &resp);
	buf_free(&resp.body);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	struct conn_state *cs = *con_cls;
	if (cs) {
		buf_free(&cs->body);
		free(cs);
		*con_cls = NULL;
	}
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	struct buf b = { 0 };
	buf_vprintf(&b, fmt, ap);
	while (b.len && b.data[b.len - 1] == '\n')
		b.data[--b.len] = '\0';
	log_warn("http: %s", b.data);
	buf_free(&b);
}

struct http_server *http_start(const char *addr, const struct route *routes, size_t nroutes,
			       struct server *srv, const struct http_tls *tls, struct buf *err)
{
	const char *colon = strrchr(addr, ':');
	if (!colon) {
		buf_printf(err, "--listen: expected host:port, got \"%s\"", addr);
		return NULL;
	}
	char host[256];
	size_t hl = (size_t)(colon - addr);
	if (hl >= sizeof(host)) {
		buf_printf(err, "--listen: host too long in \"%s\"", addr);
		return NULL;
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
		buf_printf(err, "--listen: cannot resolve \"%s\": %s", addr, gai_strerror(gai));
		return NULL;
	}
	struct http_server *h = xcalloc(1, sizeof(*h));
	h->routes = routes;
	h->nroutes = nroutes;
	h->srv = srv;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	struct MHD_OptionItem tls_opts[] = {
		{ MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)(uintptr_t)(tls ? tls->cert_pem : NULL) },
		{ MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)(uintptr_t)(tls ? tls->key_pem : NULL) },
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
				MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				MHD_OPTION_THREAD_POOL_SIZE, (unsigned)4,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
				MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!h->d) {
		buf_printf(err, tls ? "cannot listen on %s over TLS (address in use, not a local address, or a certificate and key that do not match?)"
				    : "cannot listen on %s (address in use, or not a local address?)", addr);
		free(h);
		return NULL;
	}
	return h;
}

void http_stop(struct http_server *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}
