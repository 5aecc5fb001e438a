/* httpc.c - see httpc.h. */
#include "httpc.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "version.h"

#define MAX_RESPONSE (1u << 20)

struct http_client {
	CURL *curl;
	char *base;
	char *auth_header;
	char *ca_file;
	char *plain_hint; /* what to do when the server answers TLS in plain HTTP; NULL = https not used */
	char *user_agent; /* NULL: "ember/VERSION" */
	char *host_header; /* "X-Ember-Host: ..."; NULL: none */
	long timeout_ms;
	int insecure;
	size_t max_response;
};

int http_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void http_global_cleanup(void)
{
	curl_global_cleanup();
}

struct http_client *http_client_new(const struct http_opts *o)
{
	struct http_client *c = xcalloc(1, sizeof(*c));
	c->curl = curl_easy_init();
	if (!c->curl) {
		free(c);
		return NULL;
	}
	struct buf b = { 0 };
	buf_printf(&b, "%s://%s", o->disable_tls ? "http" : "https", o->host_port);
	c->base = buf_steal(&b, NULL);
	if (o->auth_token && *o->auth_token) {
		buf_printf(&b, "Authorization: Bearer %s", o->auth_token);
		c->auth_header = buf_steal(&b, NULL);
	}
	if (o->user_agent)
		c->user_agent = xstrdup(o->user_agent);
	if (o->host_name && *o->host_name) {
		buf_printf(&b, "X-Ember-Host: %s", o->host_name);
		c->host_header = buf_steal(&b, NULL);
	}
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
	c->insecure = o->insecure;
	if (o->ca_file && *o->ca_file)
		c->ca_file = xstrdup(o->ca_file);
	c->max_response = MAX_RESPONSE;
	if (!o->disable_tls) {
		buf_printf(&b, "the server at %s speaks plain HTTP: start the agent with -disable-tls, "
			       "or the server with --tls-cert/--tls-key", o->host_port);
		c->plain_hint = buf_steal(&b, NULL);
	}
	return c;
}

struct http_client *http_client_new_url(const char *base_url, const char *token, long timeout_ms,
					size_t max_response)
{
	struct http_client *c = xcalloc(1, sizeof(*c));
	c->curl = curl_easy_init();
	if (!c->curl) {
		free(c);
		return NULL;
	}
	size_t n = strlen(base_url);
	while (n && base_url[n - 1] == '/')
		n--;
	c->base = xstrndup(base_url, n);
	if (token && *token) {
		struct buf b = { 0 };
		buf_printf(&b, "Authorization: Bearer %s", token);
		c->auth_header = buf_steal(&b, NULL);
	}
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
	c->max_response = max_response ? max_response : MAX_RESPONSE;
	if (strncmp(c->base, "https://", 8) == 0) {
		struct buf b = { 0 };
		buf_printf(&b, "the server at %s speaks plain HTTP: use an http:// endpoint, "
			       "or start the server with --tls-cert/--tls-key", c->base + 8);
		c->plain_hint = buf_steal(&b, NULL);
	}
	return c;
}

void http_client_free(struct http_client *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free_all(c->base, c->auth_header, c->ca_file, c->plain_hint, c->user_agent, c->host_header, c);
}

size_t http_sink_write(char *p, size_t size, size_t n, void *sink)
{
	struct http_sink *s = sink;
	size_t len = size * n;
	if (s->b->len + len > s->max) {
		s->over = true;
		return 0; /* aborts the transfer */
	}
	buf_append(s->b, p, len);
	return len;
}

bool http_plain_answer(int curl_code, const char *message)
{
	/* OpenSSL reads the first bytes of "HTTP/1.1 400 ..." as a TLS
	 * record of an unknown version; GnuTLS as an unexpected packet. */
	return curl_code == CURLE_SSL_CONNECT_ERROR && message &&
	       (strstr(message, "wrong version number") ||
		strstr(message, "unexpected TLS packet") ||
		strstr(message, "packet length too long"));
}

int http_send(struct http_client *c, const char *method, const char *path,
	      const char *content_type, const char *content_encoding, const void *body,
	      size_t len, struct buf *resp, struct buf *err)
{
	CURL *h = c->curl;
	curl_easy_reset(h);
	struct buf url = { 0 };
	buf_printf(&url, "%s%s", c->base, path);
	struct curl_slist *hdrs = NULL;
	struct buf line = { 0 };
	if (content_type) {
		buf_printf(&line, "Content-Type: %s", content_type);
		hdrs = curl_slist_append(hdrs, line.data);
	}
	if (content_encoding) {
		buf_reset(&line);
		buf_printf(&line, "Content-Encoding: %s", content_encoding);
		hdrs = curl_slist_append(hdrs, line.data);
	}
	if (c->auth_header)
		hdrs = curl_slist_append(hdrs, c->auth_header);
	if (c->host_header)
		hdrs = curl_slist_append(hdrs, c->host_header);
	hdrs = curl_slist_append(hdrs, "Expect:");
	buf_free(&line);

	buf_reset(resp);
	struct http_sink sink = { resp, c->max_response, false };
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_URL, url.data);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_sink_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, MIN(c->timeout_ms, 10000L));
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	char agent[64];
	snprintf(agent, sizeof(agent), "ember/%s", ember_version());
	curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent ? c->user_agent : agent);
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	if (c->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	CURLcode rc = curl_easy_perform(h);
	long status = -1;
	if (rc == CURLE_OK) {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	} else {
		buf_printf(err, "%s %s: %s", method, url.data, errbuf[0] ? errbuf : curl_easy_strerror(rc));
		if (c->plain_hint && http_plain_answer(rc, errbuf))
			buf_printf(err, " (%s)", c->plain_hint);
		status = -1;
	}
	curl_slist_free_all(hdrs);
	buf_free(&url);
	return (int)status;
}

void http_client_set_tls(struct http_client *c, const char *ca_file, int insecure)
{
	/* libcurl passes its own CA bundle to OpenSSL, so OpenSSL's reading
	 * of $SSL_CERT_FILE never happens: honour it here. */
	if (!ca_file || !*ca_file)
		ca_file = getenv("SSL_CERT_FILE");
	free(c->ca_file);
	c->ca_file = ca_file && *ca_file ? xstrdup(ca_file) : NULL;
	c->insecure = insecure;
}
