/* chttp.c - ClickHouse's HTTP interface: see chttp.h. */
#include "chttp.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <zlib.h>

#include "util.h"

struct ch_conn {
	char *urls[CH_MAX_SERVERS];
	int n;
	char *database;
	char *user;
	char *password;
	char *ca_file; /* NULL: the system's CAs */
	long timeout_ms;
	size_t max_response;
	CURL *curl;
};

void ch_conn_free(struct ch_conn *c)
{
	if (!c)
		return;
	free_each((void *const *)c->urls, (size_t)c->n);
	free_all(c->database, c->user, c->ca_file);
	free_secret(c->password);
	if (c->curl)
		curl_easy_cleanup(c->curl);
	free(c);
}

struct sink {
	struct buf *b;
	size_t max;
	int over;
};

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
	struct sink *s = ud;
	size_t n = size * nmemb;
	if (s->b->len + n > s->max) {
		s->over = 1;
		return 0;
	}
	buf_append(s->b, p, n);
	return n;
}

static int name_ok(const char *s)
{
	if (!*s || strlen(s) > 64 || isdigit((unsigned char)*s))
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_')
			return 0;
	return 1;
}

struct ch_conn *ch_conn_new(const struct ch_conn_opts *o, struct buf *err)
{
	struct ch_conn *c = xcalloc(1, sizeof(*c));
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
	c->max_response = o->max_response ? o->max_response : 16u << 20;
	c->database = xstrdup(o->database && *o->database ? o->database : "ember");
	if (!name_ok(c->database)) {
		buf_printf(err, "--clickhouse-database %s: letters, digits and _ only", c->database);
		goto fail;
	}
	const char *p = o->urls ? o->urls : "";
	while (*p) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		while (n && p[n - 1] == '/')
			n--;
		if (n) {
			if (c->n == CH_MAX_SERVERS || n > CH_MAX_URL ||
			    (strncmp(p, "http://", 7) && strncmp(p, "https://", 8))) {
				buf_printf(err, "--clickhouse-url: %.*s: want http[s]://HOST:PORT (at most %d, comma-separated)",
					   (int)(n > 200 ? 200 : n), p, CH_MAX_SERVERS);
				goto fail;
			}
			c->urls[c->n++] = xstrndup(p, n);
		}
		p += e ? (size_t)(e - p) + 1 : strlen(p);
	}
	if (!c->n) {
		buf_puts(err, "--clickhouse-url: no server named");
		goto fail;
	}
	if (o->user && *o->user)
		c->user = xstrdup(o->user);
	if (o->password_file && *o->password_file) {
		char *data = NULL;
		size_t len = 0;
		if (read_file(o->password_file, 4096, &data, &len) < 0) {
			buf_printf(err, "--clickhouse-password-file %s: cannot read it", o->password_file);
			goto fail;
		}
		size_t line = strcspn(data, "\r\n");
		c->password = xstrndup(data, line);
		free(data);
		if (!c->user)
			c->user = xstrdup("default");
	}
	if (o->ca_file && *o->ca_file) {
		if (access(o->ca_file, R_OK) < 0) {
			buf_printf(err, "--clickhouse-ca-file %s: %s", o->ca_file, strerror(errno));
			goto fail;
		}
		c->ca_file = xstrdup(o->ca_file);
	}
	c->curl = curl_easy_init();
	if (!c->curl) {
		buf_puts(err, "clickhouse: curl_easy_init failed");
		goto fail;
	}
	return c;
fail:
	ch_conn_free(c);
	return NULL;
}

int ch_conn_servers(const struct ch_conn *c)
{
	return c->n;
}

const char *ch_conn_database(const struct ch_conn *c)
{
	return c->database;
}

/* --- the pool ------------------------------------------------------------------ */

struct ch_pool {
	struct ch_conn_opts o; /* its strings are the owned copies below */
	char *urls, *database, *user, *password_file, *ca_file;
	pthread_mutex_t mu; /* idle */
	struct ch_conn **idle;
	size_t nidle, capidle;
};

static char *pool_dup(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

struct ch_pool *ch_pool_new(const struct ch_conn_opts *o)
{
	struct ch_pool *p = xcalloc(1, sizeof(*p));
	p->urls = pool_dup(o->urls);
	p->database = pool_dup(o->database);
	p->user = pool_dup(o->user);
	p->password_file = pool_dup(o->password_file);
	p->ca_file = pool_dup(o->ca_file);
	p->o = (struct ch_conn_opts){ .urls = p->urls, .database = p->database, .user = p->user,
				      .password_file = p->password_file, .ca_file = p->ca_file,
				      .timeout_ms = o->timeout_ms };
	pthread_mutex_init(&p->mu, NULL);
	return p;
}

void ch_pool_free(struct ch_pool *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nidle; i++)
		ch_conn_free(p->idle[i]);
	pthread_mutex_destroy(&p->mu);
	free_all(p->idle, p->urls, p->database, p->user, p->password_file, p->ca_file, p);
}

struct ch_conn *ch_pool_get(struct ch_pool *p, size_t max_response, struct buf *err)
{
	struct ch_conn *c = NULL;
	pthread_mutex_lock(&p->mu);
	if (!max_response && p->nidle)
		c = p->idle[--p->nidle];
	pthread_mutex_unlock(&p->mu);
	if (c)
		return c;
	struct ch_conn_opts o = p->o;
	o.max_response = max_response;
	return ch_conn_new(&o, err);
}

void ch_pool_put(struct ch_pool *p, struct ch_conn *c, bool keep)
{
	if (!c)
		return;
	if (!keep) {
		ch_conn_free(c);
		return;
	}
	pthread_mutex_lock(&p->mu);
	xgrow((void **)&p->idle, &p->capidle, p->nidle + 1, sizeof(*p->idle));
	p->idle[p->nidle++] = c;
	pthread_mutex_unlock(&p->mu);
}

int ch_gzip(const void *in, size_t n, struct buf *out)
{
	z_stream z = { 0 };
	if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	uLong bound = deflateBound(&z, n) + 32;
	buf_reserve(out, bound);
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)n;
	z.next_out = (Bytef *)out->data + out->len;
	z.avail_out = (uInt)bound;
	if (n > UINT32_MAX / 2 || deflate(&z, Z_FINISH) != Z_STREAM_END) {
		deflateEnd(&z);
		return -1;
	}
	out->len += z.total_out;
	out->data[out->len] = 0;
	deflateEnd(&z);
	return 0;
}

/* ClickHouse exception codes that mean "not now" rather than "never":
 * network and socket errors, timeouts, too many queries or parts, memory
 * limits, a shard that no connection reached. */
static const int transient_codes[] = {
	159, /* TIMEOUT_EXCEEDED */
	164, /* READONLY (a replica in read-only mode) */
	202, /* TOO_MANY_SIMULTANEOUS_QUERIES */
	203, /* NO_FREE_CONNECTION */
	209, /* SOCKET_TIMEOUT */
	210, /* NETWORK_ERROR */
	241, /* MEMORY_LIMIT_EXCEEDED */
	242, /* TABLE_IS_READ_ONLY */
	252, /* TOO_MANY_PARTS */
	279, /* ALL_CONNECTION_TRIES_FAILED */
	285, /* TOO_FEW_LIVE_REPLICAS */
	319, /* UNKNOWN_STATUS_OF_INSERT */
	425, /* SYSTEM_ERROR */
};

enum ch_rc ch_classify(int curl_code, long http_status, const char *body)
{
	/* A certificate that does not verify (or a CA file curl cannot use)
	 * stays so until someone changes it. */
	if (curl_code == CURLE_PEER_FAILED_VERIFICATION || curl_code == CURLE_SSL_CACERT_BADFILE ||
	    curl_code == CURLE_SSL_CERTPROBLEM)
		return CH_FAILED;
	if (curl_code != CURLE_OK)
		return CH_UNAVAILABLE;  /* no connection, a timeout, a reset */
	if (http_status == 200)
		return CH_OK;
	if (http_status == 503 || http_status == 502 || http_status == 504 || http_status == 429)
		return CH_UNAVAILABLE;
	const char *p = body ? strstr(body, "Code: ") : NULL;
	if (p) {
		long code = strtol(p + 6, NULL, 10);
		for (size_t i = 0; i < sizeof(transient_codes) / sizeof(transient_codes[0]); i++)
			if (code == transient_codes[i])
				return CH_UNAVAILABLE;
	}
	return CH_FAILED;
}

/* The external tables' URL parameters appended to url and their parts in
 * a new *mime; 0, or -1 with err set (a bound broken, a curl failure). */
static int ext_parts(CURL *h, const struct ch_ext_table *ext, size_t next, struct buf *url,
		     curl_mime **mime, struct buf *err)
{
	*mime = NULL;
	if (next < 1 || next > CH_MAX_EXT_TABLES) {
		buf_printf(err, "clickhouse: %zu external tables (1 to %d)", next, CH_MAX_EXT_TABLES);
		return -1;
	}
	for (size_t i = 0; i < next; i++) {
		const struct ch_ext_table *t = &ext[i];
		if (!t->name || !name_ok(t->name) || !t->format || !name_ok(t->format) ||
		    !t->structure || !*t->structure || strlen(t->structure) > CH_MAX_EXT_STRUCTURE ||
		    t->len > CH_MAX_EXT_BYTES || (t->len && !t->data)) {
			buf_printf(err, "clickhouse: external table %zu: a bad name, structure, format or size", i);
			return -1;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(ext[j].name, t->name)) {
				buf_printf(err, "clickhouse: external table %s named twice", t->name);
				return -1;
			}
	}
	curl_mime *m = curl_mime_init(h);
	if (!m) {
		buf_puts(err, "clickhouse: curl_mime_init failed");
		return -1;
	}
	for (size_t i = 0; i < next; i++) {
		const struct ch_ext_table *t = &ext[i];
		char *st = curl_easy_escape(h, t->structure, 0);
		if (!st) {
			buf_puts(err, "clickhouse: cannot escape an external table's structure");
			curl_mime_free(m);
			return -1;
		}
		buf_printf(url, "&%s_structure=%s&%s_format=%s", t->name, st, t->name, t->format);
		curl_free(st);
		/* A file part (a filename): ClickHouse takes only those as tables. */
		curl_mimepart *part = curl_mime_addpart(m);
		if (!part || curl_mime_name(part, t->name) != CURLE_OK ||
		    curl_mime_filename(part, t->name) != CURLE_OK ||
		    curl_mime_type(part, "application/octet-stream") != CURLE_OK ||
		    curl_mime_data(part, t->len ? (const char *)t->data : "", t->len) != CURLE_OK) {
			buf_printf(err, "clickhouse: cannot build external table %s's part", t->name);
			curl_mime_free(m);
			return -1;
		}
	}
	*mime = m;
	return 0;
}

/* One request: sql in the URL; as its body, either body (may be NULL) or
 * the external tables ext[0..next) when next is not 0. */
static enum ch_rc ch_request(struct ch_conn *c, int server, const char *sql, const void *body,
			     size_t len, int gzip, const struct ch_ext_table *ext, size_t next,
			     int use_db, const char *settings, struct buf *out, struct buf *err)
{
	if (server < 0 || server >= c->n) {
		buf_puts(err, "clickhouse: no such server");
		return CH_FAILED;
	}
	CURL *h = c->curl;
	curl_easy_reset(h);
	struct buf url = { 0 }, zbody = { 0 }, resp = { 0 };
	char *q = curl_easy_escape(h, sql, 0);
	if (!q) {
		buf_puts(err, "clickhouse: cannot escape the query");
		return CH_FAILED;
	}
	buf_printf(&url, "%s/?query=%s", c->urls[server], q);
	curl_free(q);
	if (use_db)
		buf_printf(&url, "&database=%s", c->database);
	if (settings && *settings)
		buf_printf(&url, "&%s", settings);
	curl_mime *mime = NULL;
	if (next && ext_parts(h, ext, next, &url, &mime, err) < 0) {
		buf_free(&url);
		return CH_FAILED;
	}
	struct curl_slist *hdr = NULL;
	if (!mime) /* a multipart body: curl names its Content-Type and boundary */
		hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
	hdr = curl_slist_append(hdr, "Expect:");
	if (!mime && body && gzip) {
		if (ch_gzip(body, len, &zbody) < 0) {
			buf_puts(err, "clickhouse: gzip failed");
			curl_slist_free_all(hdr);
			buf_free(&url);
			return CH_FAILED;
		}
		body = zbody.data;
		len = zbody.len;
		hdr = curl_slist_append(hdr, "Content-Encoding: gzip");
	}
	struct sink s = { .b = &resp, .max = c->max_response };
	char ebuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_URL, url.data);
	if (mime) {
		if (curl_easy_setopt(h, CURLOPT_MIMEPOST, mime) != CURLE_OK) {
			buf_puts(err, "clickhouse: cannot set the multipart body");
			curl_mime_free(mime);
			curl_slist_free_all(hdr);
			buf_free(&url);
			return CH_FAILED;
		}
	} else {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms < 5000 ? c->timeout_ms : 5000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	if (c->user) {
		curl_easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
		curl_easy_setopt(h, CURLOPT_USERNAME, c->user);
		curl_easy_setopt(h, CURLOPT_PASSWORD, c->password ? c->password : "");
	}
	CURLcode cc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	/* The handle keeps pointers to the mime and headers: drop them first. */
	curl_easy_setopt(h, CURLOPT_MIMEPOST, (curl_mime *)NULL);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
	curl_mime_free(mime);
	curl_slist_free_all(hdr);
	buf_free(&url);
	buf_free(&zbody);
	enum ch_rc rc;
	if (s.over) {
		buf_printf(err, "clickhouse %s: answer over %zu bytes", c->urls[server], c->max_response);
		rc = CH_FAILED;
	} else {
		rc = ch_classify(cc, status, resp.data);
		if (rc != CH_OK) {
			if (cc != CURLE_OK)
				buf_printf(err, "clickhouse %s: %s", c->urls[server],
					   ebuf[0] ? ebuf : curl_easy_strerror(cc));
			else
				buf_printf(err, "clickhouse %s: HTTP %ld: %.*s", c->urls[server], status,
					   (int)(resp.len > 1000 ? 1000 : resp.len), resp.data ? resp.data : "");
		} else if (out) {
			buf_append(out, resp.data ? resp.data : "", resp.len);
		}
	}
	buf_free(&resp);
	return rc;
}

enum ch_rc ch_query(struct ch_conn *c, int server, const char *sql, const void *body, size_t len,
		    int gzip, int use_db, const char *settings, struct buf *out, struct buf *err)
{
	return ch_request(c, server, sql, body, len, gzip, NULL, 0, use_db, settings, out, err);
}

enum ch_rc ch_query_ext(struct ch_conn *c, int server, const char *sql,
			const struct ch_ext_table *ext, size_t next, int use_db, const char *settings,
			struct buf *out, struct buf *err)
{
	if (!sql || strlen(sql) > CH_MAX_EXT_QUERY) {
		buf_printf(err, "clickhouse: a query with external tables over %d bytes", CH_MAX_EXT_QUERY);
		return CH_FAILED;
	}
	if (next < 1) {
		buf_puts(err, "clickhouse: no external table");
		return CH_FAILED;
	}
	return ch_request(c, server, sql, NULL, 0, 0, ext, next, use_db, settings, out, err);
}
