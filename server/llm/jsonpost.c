/* jsonpost.c - one HTTP POST of a JSON text: see jsonpost.h. */
#include <string.h>
#include <strings.h>

#include "jsonpost.h"
#include "httpc.h"

struct want {
	const char *name;
	size_t len;
	struct json_answer *a;
};

/* CURLOPT_HEADERFUNCTION: keeps the value of the wanted header. */
static size_t on_header(char *p, size_t sz, size_t n, void *ctx)
{
	struct want *w = ctx;
	size_t len = sz * n;
	if (w->name && len > w->len && p[w->len] == ':' && strncasecmp(p, w->name, w->len) == 0) {
		const char *v = p + w->len + 1;
		size_t k = len - w->len - 1;
		while (k && (*v == ' ' || *v == '\t')) {
			v++;
			k--;
		}
		while (k && (v[k - 1] == '\r' || v[k - 1] == '\n' || v[k - 1] == ' ' || v[k - 1] == '\t'))
			k--;
		if (k < sizeof(w->a->header)) {
			memcpy(w->a->header, v, k);
			w->a->header[k] = 0;
		}
	}
	return len;
}

CURLcode json_post(const struct json_post *p, struct json_answer *a)
{
	buf_reset(&a->body);
	a->status = 0;
	a->over = false;
	a->header[0] = 0;
	CURL *c = curl_easy_init();
	if (!c)
		return CURLE_FAILED_INIT;
	struct http_sink sink = { &a->body, p->max_answer, false };
	struct want w = { p->want_header, p->want_header ? strlen(p->want_header) : 0, a };
	curl_easy_setopt(c, CURLOPT_URL, p->url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, p->body);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(p->body));
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, p->headers);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, p->timeout_ms);
	if (p->connect_timeout_ms)
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, p->connect_timeout_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &w);
	CURLcode cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
	curl_easy_cleanup(c);
	a->over = sink.over;
	return cc;
}
