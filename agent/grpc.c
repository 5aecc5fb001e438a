/* grpc.c - see grpc.h. */
#include "grpc.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "log.h"

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

bool grpc_frame(struct buf *out, const void *msg, size_t len)
{
	if (len > UINT32_MAX)
		return false;
	uint8_t h[5] = { 0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
			 (uint8_t)len };
	buf_append(out, h, sizeof(h));
	if (len)
		buf_append(out, msg, len);
	return true;
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

int grpc_unary(const char *socket_path, const char *method, const char *const *headers,
	       const void *req, size_t req_len, long timeout_ms, struct grpc_answer *a)
{
	struct buf url = { 0 }, body = { 0 };
	struct curl_slist *hl = NULL;
	int rc = GRPC_TRANSPORT;
	CURL *h = NULL;
	if (timeout_ms < 1 || !grpc_frame(&body, req, req_len))
		goto out;
	buf_printf(&url, "http://localhost%s", method);
	char tmo[48];
	snprintf(tmo, sizeof(tmo), "grpc-timeout: %ldm", timeout_ms);
	const char *fixed[] = { "content-type: application/grpc", "te: trailers", tmo,
				"Expect:", "Accept:" };
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
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
	h = curl_easy_init();
	if (!h)
		goto out;
	CURLcode set = CURLE_OK;
#define SET(opt, val) (set = set != CURLE_OK ? set : curl_easy_setopt(h, opt, val))
	SET(CURLOPT_UNIX_SOCKET_PATH, socket_path);
	SET(CURLOPT_URL, url.data);
	SET(CURLOPT_PROTOCOLS_STR, "http");
	SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
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
		goto out;
	}
	CURLcode res = curl_easy_perform(h);
	if (res != CURLE_OK && !a->too_large) {
		log_debug("grpc %s at %s: %s", method, socket_path, curl_easy_strerror(res));
		goto out;
	}
	long ver = 0;
	if (curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &ver) != CURLE_OK ||
	    ver != CURL_HTTP_VERSION_2_0)
		goto out; /* not an HTTP/2 server */
	rc = grpc_answer_finish(a);
out:
	if (h)
		curl_easy_cleanup(h);
	curl_slist_free_all(hl);
	buf_free(&url);
	buf_free(&body);
	return rc;
}
