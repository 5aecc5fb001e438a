/* jsonpost.h - one HTTP POST of a JSON text (libcurl), the transport of the
 * LLM providers (llm.c) and of the assistant's external MCP servers
 * (mcp_remote.c).
 *
 * The answer's body is capped (the transfer stops once it would pass
 * max_answer bytes: over is set); one response header the caller names
 * (Retry-After, Mcp-Session-Id) is kept, trimmed of white space, when it
 * fits in header[]. http and https only; no signals (safe in threads).
 * The caller has called curl_global_init. */
#ifndef EMBER_SERVER_LLM_JSONPOST_H
#define EMBER_SERVER_LLM_JSONPOST_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

#include "buf.h"

struct json_post {
	const char *url;
	const char *body;		/* the JSON text, NUL-terminated */
	const struct curl_slist *headers;
	long timeout_ms;		/* the whole request */
	long connect_timeout_ms;	/* 0: libcurl's default */
	size_t max_answer;		/* bytes of the answer's body */
	const char *want_header;	/* "retry-after" (case does not matter), or NULL */
};

struct json_answer {
	struct buf body;	/* the caller frees it */
	long status;		/* the HTTP status; 0: no answer */
	bool over;		/* the body passed max_answer */
	char header[160];	/* want_header's value; "" when absent or longer */
};

/* Sends p; fills a (its body is reset first). Returns the CURLcode:
 * CURLE_OK for an HTTP answer of any status, else the transport's error
 * (curl_easy_strerror), CURLE_FAILED_INIT when libcurl cannot start. */
CURLcode json_post(const struct json_post *p, struct json_answer *a);

#endif
