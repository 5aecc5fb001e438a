/* http.h - ember-server's HTTP layer on libmicrohttpd.
 *
 * libmicrohttpd parses HTTP; this module matches the route table, collects
 * request bodies and turns handler results into responses. Routes are
 * "METHOD /path/{param}/..." patterns; a path that matches a route with
 * another method gets 405. Handlers must be thread-safe.
 *
 * What a client can hold is bounded (docs/internals/http.md):
 * - a request whose route has an auth check is checked on its headers,
 *   before any body byte is read; a refusal is answered at once and the
 *   connection closed, the body never read;
 * - a declared Content-Length beyond the route's limit is answered 413 at
 *   once (the connection closed); a body that grows beyond it is read,
 *   discarded and answered 413;
 * - bodies held in memory by all requests together stay within
 *   http_limits.upload_memory (beyond it: 503 with Retry-After), counted
 *   with the gRPC listener's bodies when they share a budget; a route
 *   with HTTP_SPOOL keeps only the first HTTP_SPOOL_AFTER bytes of a body in
 *   memory and writes the rest to an unlinked file in spool_dir, which the
 *   handler sees read-only mapped as req->body;
 * - connections: a total (with the gRPC listener's, struct http_budget;
 *   one beyond it is shut down as it starts) and a per-client-address
 *   limit, an idle timeout,
 *   and deadlines for a request's headers and for its body;
 * - HTTP_QUERY and HTTP_INGEST routes run on pools of their own (the
 *   connection is suspended meanwhile): at most query_threads queries at
 *   once with at most query_queue waiting, the excess answered 503 with
 *   Retry-After; ingest likewise. libmicrohttpd's own threads, which serve
 *   every connection they accepted, only read, write and answer cheap
 *   routes (/healthz, /metrics, assets), so no handler can hold a health
 *   check, and a long query never holds an ingest thread.
 */
#ifndef EMBER_SERVER_HTTP_H
#define EMBER_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "jsonw.h"

#define HTTP_MAX_PARAMS 4

struct server;
struct principal;
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
	/* With conn NULL: the client's address, when the in-process request
	 * stands for one that came over a socket (OTLP over gRPC); NULL: none. */
	const char *peer;
	/* Who sent it (auth/authz.h): set by the route's check before the
	 * body is read; handlers that learn a project from the body check it
	 * with principal_can. */
	const struct principal *who;
};

struct http_resp {
	int status;
	const char *content_type;
	struct buf body;          /* owned body, or: */
	const char *static_body;  /* bytes that outlive the response */
	size_t static_len;
	const char *retry_after;  /* seconds, for 503 */
	const char *cache_control;
	struct buf headers;       /* more headers, "Name: value" one per line: http_add_header */
};

typedef void (*http_handler)(struct server *srv, const struct http_req *req,
			     struct http_resp *resp);

enum {
	HTTP_QUERY = 1 << 0, /* runs on the query pool, admission-limited */
	HTTP_SPOOL = 1 << 1, /* a large body goes to a file, not memory */
	HTTP_INGEST = 1 << 2, /* runs on the ingest pool */
};

/* In-memory part of an HTTP_SPOOL route's body. */
#define HTTP_SPOOL_AFTER (1u << 20)

struct route {
	const char *method;
	const char *pattern; /* "/a/{x}/b"; "*" matches any path */
	http_handler fn;
	size_t max_body;
	unsigned flags;      /* HTTP_QUERY, HTTP_SPOOL */
	/* The permission the route needs and where (auth/authz.h: a perm.h
	 * name, AUTH_PUBLIC or AUTH_SIGNED_IN; enum route_scope), checked on
	 * the headers alone, before a body byte is read. */
	const char *perm;
	int scope;
	unsigned role; /* enum http_role that serves it; 0: every server (/healthz, /metrics) */
};

/* What one ember-server serves (--roles), so that a deployment can scale
 * ingest, queries, the UI and symbol uploads apart behind one load
 * balancer. A route of a role the server leaves out answers 404 naming
 * the role, before its body is read. */
enum http_role {
	HTTP_ROLE_INGEST = 1,  /* profiles and metrics from agents (and OTLP over gRPC) */
	HTTP_ROLE_QUERY = 2,   /* the query, admin, recommendation, assistant and MCP APIs */
	HTTP_ROLE_UI = 4,      /* the web UI's files */
	HTTP_ROLE_SYMBOLS = 8, /* symbol and cubin uploads */
	HTTP_ROLES_ALL = 15,
};
/* Parses a comma-separated list of role names ("ingest,query") into
 * *out; -1 with err set on an unknown or empty one. */
int http_roles_parse(const char *s, unsigned *out, struct buf *err);
/* The name of one role ("ingest"). */
const char *http_role_name(unsigned role);

struct http_server;

/* HTTPS: the server's certificate chain and private key, PEM. TLS 1.2 and
 * 1.3 only, AEAD ciphers with forward secrecy (HTTP_TLS_PRIORITIES). */
struct http_tls {
	const char *cert_pem, *key_pem;
};

#define HTTP_TLS_PRIORITIES                                                              \
	"SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:"        \
	"+CHACHA20-POLY1305:+AES-128-GCM:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:" \
	"+DHE-RSA:%SERVER_PRECEDENCE"

/* What a server's listeners hold together, the HTTP server's and the
 * OTLP gRPC listener's (otlp_grpc.h): open connections and bytes of
 * request bodies in memory, each bounded by http_limits (max_connections,
 * upload_memory), so that a flood on one listener leaves the other no more
 * than the one budget allows. Atomic counters; the caller owns the object
 * and keeps it until every listener that shares it has stopped. */
struct http_budget {
	unsigned conns;
	size_t mem;
};

/* Takes one connection (false at max: refuse it) / gives it back. */
bool http_budget_take_conn(struct http_budget *b, unsigned max);
void http_budget_put_conn(struct http_budget *b);
/* Takes n bytes of body memory (false when fewer than n are left of max)
 * / gives n back. */
bool http_budget_take_mem(struct http_budget *b, size_t n, size_t max);
void http_budget_put_mem(struct http_budget *b, size_t n);

struct http_limits {
	unsigned max_connections;   /* in all (with budget: all listeners together) */
	unsigned per_ip_connections;
	unsigned idle_timeout_s;    /* no byte either way for this long: closed */
	unsigned header_timeout_s;  /* a request's headers must arrive within */
	unsigned body_timeout_s;    /* its body within this after its headers */
	size_t upload_memory;       /* request bodies in memory, all together */
	unsigned query_threads;
	unsigned query_queue;       /* queries that may wait for a thread */
	unsigned ingest_threads;
	unsigned ingest_queue;
	const char *spool_dir;      /* HTTP_SPOOL bodies (unlinked files) */
	unsigned roles;             /* enum http_role served; 0: all */
	struct http_budget *budget; /* shared by the listeners given it; NULL: one of their own */
};

/* The defaults the server's flags start from. */
void http_limits_default(struct http_limits *l);

/* A listening TCP socket on addr ("host:port", "[v6 address]:port",
 * ":port" for every address; SO_REUSEADDR, an IPv6 one IPv6 only,
 * non-blocking, close-on-exec), what the HTTP server and the gRPC listener
 * both listen on. Returns -1 with err set, its messages led by flag (the
 * command-line flag that named addr). */
int http_listen_socket(const char *flag, const char *addr, struct buf *err);

/* Starts listening on addr ("host:port"), over TLS when tls is not NULL.
 * Returns NULL with err set. */
struct http_server *http_start(const char *addr, const struct route *routes, size_t nroutes,
			       struct server *srv, const struct http_tls *tls,
			       const struct http_limits *limits, struct buf *err);
void http_stop(struct http_server *h);

/* A request header (names compare without case) or query argument; NULL
 * when absent. */
const char *http_header(const struct http_req *req, const char *name);
/* The peer's IP address as text into out (n bytes: INET6_ADDRSTRLEN is
 * enough); req->peer for a request made in-process, "" when unknown. */
void http_client_address(const struct http_req *req, char *out, size_t n);
/* An IPv4 or IPv6 socket address's IP as text into out; "" for another
 * family or NULL. */
struct sockaddr;
void http_address_text(const struct sockaddr *sa, char *out, size_t n);
const char *http_query_arg(const struct http_req *req, const char *name);
/* Sets a JSON error answer {"error": message}. */
void http_error(struct http_resp *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void http_json(struct http_resp *resp, int status);
/* A JSON answer written with the writer (lib/jsonw.h): http_json_begin
 * empties the body and starts w over it; the caller writes one value;
 * http_json_end answers it with status and a final newline, or 500 when
 * the writer was misused (a bug). */
void http_json_begin(struct http_resp *resp, struct jsonw *w);
void http_json_end(struct http_resp *resp, struct jsonw *w, int status);
/* Answers the jansson document doc (json_t, taken: freed here), compact,
 * with a final newline and status; 500 when it cannot be written. */
struct json_t;
void http_json_doc(struct http_resp *resp, int status, struct json_t *doc);
/* Answers {"<key>": v} with status. */
void http_json_bool(struct http_resp *resp, int status, const char *key, bool v);
/* Adds a header to the answer (Set-Cookie may come several times). A value
 * with a line break is refused (logged, not sent): no header injection. */
void http_add_header(struct http_resp *resp, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Exposed for tests: matches path against pattern, capturing params. */
int http_match(const char *pattern, const char *path, const char **params, size_t *lens,
	       size_t *nparams);

#endif
