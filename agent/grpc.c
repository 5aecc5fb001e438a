/* grpc.c - see grpc.h. */
#include "grpc.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "util.h"

void grpc_answer_init(struct grpc_answer *a, size_t max)
{
	memset(a, 0, sizeof(*a));
	a->max = max;
	a->status = -1;
}

void grpc_answer_free(struct grpc_answer *a)
{
	buf_free(&a->body);
	a->msg = NULL;
	a->len = 0;
}

/* Does line[0..n) name header `name` (case-insensitively)? Then *v, *vn is
 * its value without surrounding blanks. */
static bool header_is(const char *line, size_t n, const char *name, const char **v, size_t *vn)
{
	size_t nl = strlen(name);
	if (n <= nl || line[nl] != ':' || strncasecmp(line, name, nl) != 0)
		return false;
	const char *s = line + nl + 1, *e = line + n;
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
		e--;
	*v = s;
	*vn = (size_t)(e - s);
	return true;
}

void grpc_answer_header(struct grpc_answer *a, const char *line, size_t n)
{
	const char *v;
	size_t vn;
	if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
		/* "HTTP/2 200": a new response (after a 1xx one) starts over. */
		const char *sp = memchr(line, ' ', n);
		long st = 0;
		size_t i = sp ? (size_t)(sp - line) + 1 : n;
		for (size_t d = 0; i < n && d < 3 && isdigit((unsigned char)line[i]); i++, d++)
			st = st * 10 + (line[i] - '0');
		a->http_status = st;
		a->grpc_type = false;
		a->bad_status = false;
		a->status = -1;
		a->message[0] = '\0';
	} else if (header_is(line, n, "content-type", &v, &vn)) {
		/* application/grpc, application/grpc+proto, application/grpc;... */
		static const char ct[] = "application/grpc";
		a->grpc_type = vn >= sizeof(ct) - 1 && strncasecmp(v, ct, sizeof(ct) - 1) == 0 &&
			       (vn == sizeof(ct) - 1 || v[sizeof(ct) - 1] == '+' ||
				v[sizeof(ct) - 1] == ';');
	} else if (header_is(line, n, "grpc-status", &v, &vn)) {
		int st = 0;
		bool ok = vn > 0 && vn <= 3 && a->status < 0;
		for (size_t i = 0; ok && i < vn; i++) {
			if (!isdigit((unsigned char)v[i]))
				ok = false;
			else
				st = st * 10 + (v[i] - '0');
		}
		if (ok)
			a->status = st;
		else
			a->bad_status = true;
	} else if (header_is(line, n, "grpc-message", &v, &vn)) {
		size_t m = vn < sizeof(a->message) - 1 ? vn : sizeof(a->message) - 1;
		for (size_t i = 0; i < m; i++)
			a->message[i] = (unsigned char)v[i] >= 0x20 && v[i] != 0x7f ? v[i] : '?';
		a->message[m] = '\0';
	}
}

bool grpc_answer_body(struct grpc_answer *a, const void *p, size_t n)
{
	size_t cap = a->max + 5;
	if (a->too_large || n > cap - a->body.len) {
		a->too_large = true;
		return false;
	}
	buf_append(&a->body, p, n);
	return true;
}

static bool frame(struct buf *out, const void *msg, size_t len, uint8_t flag)
{
	if (len > UINT32_MAX)
		return false;
	uint8_t h[5] = { flag, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
			 (uint8_t)len };
	buf_append(out, h, sizeof(h));
	if (len)
		buf_append(out, msg, len);
	return true;
}

bool grpc_frame(struct buf *out, const void *msg, size_t len)
{
	return frame(out, msg, len, 0);
}

bool grpc_frame_gzip(struct buf *out, const void *msg, size_t len)
{
	return frame(out, msg, len, 1);
}

int grpc_unframe(const uint8_t *body, size_t n, size_t max, const uint8_t **msg, size_t *len)
{
	if (n < 5 || body[0] != 0) /* no frame; compressed (1) or unknown flags */
		return GRPC_PROTOCOL;
	uint32_t l = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 |
		     body[4];
	if (l > max || l != n - 5) /* too large, truncated, or more after it */
		return GRPC_PROTOCOL;
	*msg = body + 5;
	*len = l;
	return GRPC_OK;
}

int grpc_answer_finish(struct grpc_answer *a)
{
	a->msg = NULL;
	a->len = 0;
	if (a->http_status != 200)
		return GRPC_TRANSPORT;
	if (a->too_large || a->bad_status || a->status < 0 || !a->grpc_type)
		return GRPC_PROTOCOL;
	if (a->status != GRPC_STATUS_OK)
		return GRPC_STATUS;
	return grpc_unframe((const uint8_t *)a->body.data, a->body.len, a->max, &a->msg, &a->len);
}

/* --- libcurl ------------------------------------------------------------------- */

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	grpc_answer_header(ud, p, size * n);
	return size * n;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	return grpc_answer_body(ud, p, size * n) ? size * n : 0;
}

struct grpc_client {
	struct grpc_endpoint ep; /* strings owned */
	CURL *h;
};

struct grpc_client *grpc_client_new(const struct grpc_endpoint *ep)
{
	struct grpc_client *c = xcalloc(1, sizeof(*c));
	c->ep = *ep;
	c->ep.unix_path = ep->unix_path ? xstrdup(ep->unix_path) : NULL;
	c->ep.host_port = ep->host_port ? xstrdup(ep->host_port) : NULL;
	c->ep.ca_file = ep->ca_file && *ep->ca_file ? xstrdup(ep->ca_file) : NULL;
	c->h = curl_easy_init();
	if (!c->h) {
		grpc_client_free(c);
		return NULL;
	}
	return c;
}

void grpc_client_free(struct grpc_client *c)
{
	if (!c)
		return;
	if (c->h)
		curl_easy_cleanup(c->h);
	free((char *)c->ep.unix_path);
	free((char *)c->ep.host_port);
	free((char *)c->ep.ca_file);
	free(c);
}

int grpc_client_call(struct grpc_client *c, const char *method, const char *const *headers,
		     const void *req, size_t req_len, bool gzip, long timeout_ms,
		     struct grpc_answer *a, struct buf *err)
{
	struct buf url = { 0 }, body = { 0 };
	struct curl_slist *hl = NULL;
	int rc = GRPC_TRANSPORT;
	CURL *h = c->h;
	const char *where = c->ep.unix_path ? c->ep.unix_path : c->ep.host_port;
	if (timeout_ms < 1 || !(gzip ? grpc_frame_gzip : grpc_frame)(&body, req, req_len)) {
		if (err)
			buf_puts(err, "a message too large for gRPC");
		goto out;
	}
	if (c->ep.unix_path)
		buf_printf(&url, "http://localhost%s", method);
	else
		buf_printf(&url, "%s://%s%s", c->ep.tls ? "https" : "http", c->ep.host_port, method);
	char tmo[48];
	snprintf(tmo, sizeof(tmo), "grpc-timeout: %ldm", timeout_ms);
	const char *fixed[] = { "content-type: application/grpc", "te: trailers", tmo,
				"Expect:", "Accept:", gzip ? "grpc-encoding: gzip" : NULL };
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && fixed[i]; i++) {
		struct curl_slist *t = curl_slist_append(hl, fixed[i]);
		if (!t)
			goto out;
		hl = t;
	}
	for (size_t i = 0; headers && headers[i]; i++) {
		struct curl_slist *t = curl_slist_append(hl, headers[i]);
		if (!t)
			goto out;
		hl = t;
	}
	CURLcode set = CURLE_OK;
#define SET(opt, val) (set = set != CURLE_OK ? set : curl_easy_setopt(h, opt, val))
	if (c->ep.unix_path)
		SET(CURLOPT_UNIX_SOCKET_PATH, c->ep.unix_path);
	SET(CURLOPT_URL, url.data);
	SET(CURLOPT_PROTOCOLS_STR, c->ep.tls ? "https" : "http");
	SET(CURLOPT_HTTP_VERSION, c->ep.tls ? (long)CURL_HTTP_VERSION_2TLS
					    : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
	if (c->ep.tls) {
		SET(CURLOPT_SSL_VERIFYPEER, c->ep.insecure ? 0L : 1L);
		SET(CURLOPT_SSL_VERIFYHOST, c->ep.insecure ? 0L : 2L);
		if (c->ep.ca_file)
			SET(CURLOPT_CAINFO, c->ep.ca_file);
	}
	/* A connection is not used for a second call: libcurl 7.88 (Debian
	 * 12) fails the next request on an HTTP/2 connection whose previous
	 * answer ended with trailers (CURLE_HTTP2, before sending it; seen
	 * against grpcio's server as against ember-server's), and every
	 * gRPC answer ends so. */
	SET(CURLOPT_FORBID_REUSE, 1L);
	SET(CURLOPT_POST, 1L);
	SET(CURLOPT_POSTFIELDS, body.data);
	SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body.len);
	SET(CURLOPT_HTTPHEADER, hl);
	SET(CURLOPT_USERAGENT, "ember-agent");
	SET(CURLOPT_TIMEOUT_MS, timeout_ms);
	SET(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, a);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, a);
#undef SET
	if (set != CURLE_OK) {
		log_debug("grpc %s: %s", method, curl_easy_strerror(set));
		if (err)
			buf_printf(err, "libcurl: %s", curl_easy_strerror(set));
		goto out;
	}
	CURLcode res = curl_easy_perform(h);
	if (res != CURLE_OK && !a->too_large) {
		log_debug("grpc %s at %s: %s", method, where, curl_easy_strerror(res));
		if (err)
			buf_printf(err, "gRPC to %s: %s", where, curl_easy_strerror(res));
		goto out;
	}
	long ver = 0;
	if (curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &ver) != CURLE_OK ||
	    ver != CURL_HTTP_VERSION_2_0) {
		if (err)
			buf_printf(err, "%s does not speak HTTP/2 (not a gRPC server?)", where);
		goto out; /* not an HTTP/2 server */
	}
	rc = grpc_answer_finish(a);
	if (rc == GRPC_PROTOCOL && err)
		buf_printf(err, "%s: a malformed gRPC answer", where);
out:
	curl_slist_free_all(hl);
	buf_free(&url);
	buf_free(&body);
	return rc;
}

int grpc_unary(const char *socket_path, const char *method, const char *const *headers,
	       const void *req, size_t req_len, long timeout_ms, struct grpc_answer *a)
{
	struct grpc_endpoint ep = { .unix_path = socket_path };
	struct grpc_client *c = grpc_client_new(&ep);
	if (!c)
		return GRPC_TRANSPORT;
	int rc = grpc_client_call(c, method, headers, req, req_len, false, timeout_ms, a, NULL);
	grpc_client_free(c);
	return rc;
}
