/* httpc.h - the HTTP client of the agent and the command line (libcurl);
 * one client per thread.
 *
 * The agent builds it from -collection-agent (http or https from
 * -disable-tls; -insecure skips certificate checks; -auth-token is sent as
 * a bearer token; -tls-ca-file names the CAs to trust); the CLI from an
 * endpoint URL, --token or EMBER_SERVICE_TOKEN, and --ca-file,
 * $SSL_CERT_FILE or --insecure (http_client_set_tls).
 * Responses are capped (1 MiB by default).
 */
#ifndef EMBER_HTTPC_H
#define EMBER_HTTPC_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

struct http_client;

struct http_opts {
	const char *host_port;
	int disable_tls;
	int insecure;
	const char *auth_token;
	const char *ca_file;  /* CA certificates (PEM) to trust instead of the system's; NULL = system */
	long timeout_ms;
	/* Who sends (the server's profiler inventory): User-Agent, NULL =
	 * "ember/VERSION"; X-Ember-Host, NULL = not sent. */
	const char *user_agent;
	const char *host_name;
};

/* Call once per process before any thread uses a client. */
int http_global_init(void);
void http_global_cleanup(void);

struct http_client *http_client_new(const struct http_opts *o);
/* A client for base_url ("http://host:port"), with an optional bearer
 * token, answers of at most max_response bytes. */
struct http_client *http_client_new_url(const char *base_url, const char *token, long timeout_ms,
					size_t max_response);
/* The certificate checks of a client made by http_client_new_url: trust
 * the CAs in ca_file (PEM; NULL or "": libcurl's default, which
 * $SSL_CERT_FILE replaces when set), or with insecure check nothing. */
void http_client_set_tls(struct http_client *c, const char *ca_file, int insecure);
void http_client_free(struct http_client *c);

/* Sends method (POST or PUT) to path with body. content_encoding may be
 * NULL. Returns the HTTP status (>= 100), or -1 for a transport error
 * with a description in err. The response body is stored in resp. When
 * an https client's TLS handshake fails because the server answered in
 * plain HTTP (http_plain_answer), err also says what to do: the agent's
 * -disable-tls, an http:// endpoint for the CLI, or the server's
 * --tls-cert/--tls-key. */
int http_send(struct http_client *c, const char *method, const char *path,
	      const char *content_type, const char *content_encoding, const void *body,
	      size_t len, struct buf *resp, struct buf *err);

/* A capped response body: a libcurl write callback (CURLOPT_WRITEFUNCTION,
 * with the sink as CURLOPT_WRITEDATA) that appends to b and aborts the
 * transfer, setting over, once b would pass max bytes. */
struct http_sink {
	struct buf *b;
	size_t max;
	bool over;
};
size_t http_sink_write(char *p, size_t size, size_t n, void *sink);

/* Whether a libcurl failure (its CURLcode and error message) is a TLS
 * handshake answered in plain HTTP ("SSL routines::wrong version number"). */
bool http_plain_answer(int curl_code, const char *message);

#endif
