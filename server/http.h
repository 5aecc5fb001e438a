/* http.h - ember-server's HTTP layer on libmicrohttpd.
 *
 * libmicrohttpd parses HTTP; this module collects request bodies (up to a
 * per-route limit: a larger body is read and discarded, then answered
 * with 413), matches the route table and turns handler results into
 * responses. Routes are "METHOD /path/{param}/..." patterns; a path that
 * matches a route with another method gets 405. Handlers run on a pool of
 * threads and must be thread-safe.
 */
#ifndef EMBER_SERVER_HTTP_H
#define EMBER_SERVER_HTTP_H

#include <stddef.h>

#include "buf.h"

#define HTTP_MAX_PARAMS 4

struct server;
struct MHD_Connection;

struct http_req {
	const char *method;
	const char *path;
	const char *body;
	size_t body_len;
	const char *params[HTTP_MAX_PARAMS]; /* the {param} segments, in order */
	size_t nparams;
	struct MHD_Connection *conn;
	/* A request made in-process (tests drive handlers without a socket):
	 * with conn NULL, headers and query arguments are looked up in these
	 * NULL-terminated name, value lists (either may be NULL). */
	const char *const *headers;
	const char *const *args;
};

struct http_resp {
	int status;
	const char *content_type;
	struct buf body;          /* owned body, or: */
	const char *static_body;  /* bytes that outlive the response */
	size_t static_len;
	const char *retry_after;  /* seconds, for 503 */
	const char *cache_control;
};

typedef void (*http_handler)(struct server *srv, const struct http_req *req,
			     struct http_resp *resp);

struct route {
	const char *method;
	const char *pattern; /* "/a/{x}/b"; "*" matches any path */
	http_handler fn;
	size_t max_body;
};

struct http_server;

/* HTTPS: the server's certificate chain and private key, PEM. */
struct http_tls {
	const char *cert_pem, *key_pem;
};

/* Starts listening on addr ("host:port"), over TLS when tls is not NULL.
 * Returns NULL with err set. */
struct http_server *http_start(const char *addr, const struct route *routes, size_t nroutes,
			       struct server *srv, const struct http_tls *tls, struct buf *err);
void http_stop(struct http_server *h);

/* A request header (names compare without case) or query argument; NULL
 * when absent. */
const char *http_header(const struct http_req *req, const char *name);
const char *http_query_arg(const struct http_req *req, const char *name);
/* Sets a JSON error answer {"error": message}. */
void http_error(struct http_resp *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void http_json(struct http_resp *resp, int status);

/* Exposed for tests: matches path against pattern, capturing params. */
int http_match(const char *pattern, const char *path, const char **params, size_t *lens,
	       size_t *nparams);

#endif
