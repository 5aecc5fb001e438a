/* http.h - the agent's HTTP client (libcurl), one per thread.
 *
 * Builds URLs from -collection-agent, chooses http or https from
 * -disable-tls, skips certificate checks with -insecure, and sends
 * -auth-token as a bearer token. Responses are capped at 1 MiB.
 */
#ifndef EMBER_AGENT_HTTP_H
#define EMBER_AGENT_HTTP_H

#include <stddef.h>

#include "buf.h"

struct http_client;

struct http_opts {
	const char *host_port;
	int disable_tls;
	int insecure;
	const char *auth_token;
	long timeout_ms;
};

/* Call once per process before any thread uses a client. */
int http_global_init(void);
void http_global_cleanup(void);

struct http_client *http_client_new(const struct http_opts *o);
void http_client_free(struct http_client *c);

/* Sends method (POST or PUT) to path with body. content_encoding may be
 * NULL. Returns the HTTP status (>= 100), or -1 for a transport error
 * with a description in err. The response body is stored in resp. */
int http_send(struct http_client *c, const char *method, const char *path,
	      const char *content_type, const char *content_encoding, const void *body,
	      size_t len, struct buf *resp, struct buf *err);

#endif
