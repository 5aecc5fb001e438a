/* slack.c - see slack.h. */
#include "slack.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hmap.h"
#include "jsonw.h"
#include "log.h"
#include "util.h"

struct item {
	char *title;  /* mrkdwn-ready pieces are made when sending */
	char *detail;
	char *link;
	bool xid;
};

struct seen {
	uint64_t key;
	int64_t ts;
};

struct slack {
	struct slack_config c;
	char *url, *public_url;
	struct metrics_store *metrics;
	pthread_t thread;
	pthread_mutex_t mu; /* guards pending, npending, extra, stop */
	pthread_cond_t wake;
	bool stop;
	struct item pending[SLACK_MAX_PENDING];
	size_t npending;
	size_t extra;       /* items past SLACK_MAX_PENDING, only counted */
	/* The thread's own. */
	int64_t *sent;      /* times of the messages in the current window (ring) */
	size_t nsent;
	struct seen *seen;  /* XIDs told (or older than the start), pruned by age */
	size_t nseen, capseen;
	int64_t started_ms;
	uint64_t messages, failures; /* since start */
};

int slack_read_url(const char *path, struct buf *out, struct buf *err)
{
	char *data = NULL;
	size_t n = 0;
	int rc = read_file(path, 2048, &data, &n);
	if (rc < 0) {
		buf_printf(err, "--slack-webhook-url-file %s: %s", path, strerror(-rc));
		return -1;
	}
	size_t a = 0, b = n;
	while (a < b && (data[a] == ' ' || data[a] == '\t' || data[a] == '\n' || data[a] == '\r'))
		a++;
	while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t' || data[b - 1] == '\n' || data[b - 1] == '\r'))
		b--;
	bool ok = b > a && (strncmp(data + a, "https://", 8) == 0 || strncmp(data + a, "http://", 7) == 0);
	for (size_t i = a; ok && i < b; i++)
		ok = (unsigned char)data[i] > ' ' && (unsigned char)data[i] < 127;
	if (!ok) {
		buf_printf(err, "--slack-webhook-url-file %s: expected one http:// or https:// URL", path);
		free(data);
		return -1;
	}
	buf_reset(out);
	buf_append(out, data + a, b - a);
	buf_putc(out, 0);
	out->len--;
	free(data);
	return 0;
}

static void item_free(struct item *it)
{
	free_all(it->title, it->detail, it->link);
	memset(it, 0, sizeof(*it));
}

static void enqueue(struct slack *s, char *title, char *detail, char *link, bool xid)
{
	pthread_mutex_lock(&s->mu);
	if (s->npending < SLACK_MAX_PENDING) {
		s->pending[s->npending++] = (struct item){ .title = title, .detail = detail, .link = link, .xid = xid };
		title = detail = link = NULL;
	} else {
		s->extra++;
	}
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->mu);
	free_all(title, detail, link);
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	struct buf b = { 0 };
	va_list ap;
	va_start(ap, f);
	buf_vprintf(&b, f, ap);
	va_end(ap);
	buf_putc(&b, 0);
	return b.data;
}

void slack_recs_event(void *ctx, const struct recs_event *ev)
{
	struct slack *s = ctx;
	const char *what = strcmp(ev->status, "new") == 0 ? "New recommendation" : "Worsened recommendation";
	char *title = fmt("%s: %s", what, ev->title);
	char *detail;
	if (strcmp(ev->kind, "cuda") == 0)
		detail = fmt("%s · saves %.3g GPU-s/h (%.0f/yr) · peak %.3g GPUs", ev->application, ev->savings,
			     ev->annual_cost, ev->peak);
	else if (strcmp(ev->unit, "threads") == 0)
		detail = fmt("%s · %.3g waiting threads fewer · peak %.3g threads", ev->application, ev->savings, ev->peak);
	else
		detail = fmt("%s · saves %.3g cores (%.0f/yr) · peak %.3g cores", ev->application, ev->savings,
			     ev->annual_cost, ev->peak);
	char *link = fmt("%s/?view=recs&project=%s&rec=%s", s->public_url, ev->project, ev->id);
	enqueue(s, title, detail, link, false);
}

/* --- XIDs ----------------------------------------------------------------------- */

struct xid_scan {
	struct slack *s;
	int64_t now;
};

static bool seen_has(struct slack *s, uint64_t key)
{
	for (size_t i = 0; i < s->nseen; i++)
		if (s->seen[i].key == key)
			return true;
	return false;
}

static void on_xid(void *ctx, const char *project, const char *labels, int64_t ts, double value)
{
	struct xid_scan *x = ctx;
	struct slack *s = x->s;
	(void)value;
	uint64_t key = hash_mix(hash_mix(hash_bytes(project, strlen(project)), hash_bytes(labels, strlen(labels))),
				(uint64_t)ts);
	if (seen_has(s, key))
		return;
	xgrow((void **)&s->seen, &s->capseen, s->nseen + 1, sizeof(*s->seen));
	s->seen[s->nseen++] = (struct seen){ .key = key, .ts = ts };
	if (ts < s->started_ms)
		return; /* before this start: told by the last run, or too old */
	json_t *l = json_loads(labels, 0, NULL);
	const char *code = json_string_value(json_object_get(l, "gpu.xid.code"));
	const char *meaning = json_string_value(json_object_get(l, "gpu.xid.meaning"));
	const char *host = json_string_value(json_object_get(l, "host.name"));
	const char *gpu = json_string_value(json_object_get(l, "gpu.device.index"));
	const char *gname = json_string_value(json_object_get(l, "gpu.name"));
	char *title = fmt("GPU XID %s%s%s", code ? code : "?", meaning ? ": " : "", meaning ? meaning : "");
	time_t t = (time_t)(ts / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	char when[32];
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	char *detail = fmt("host %s · GPU %s%s%s%s · %s", host ? host : "?", gpu ? gpu : "?", gname ? " (" : "",
			   gname ? gname : "", gname ? ")" : "", when);
	char *link = fmt("%s/?view=metrics&project=%s", s->public_url, project);
	json_decref(l);
	enqueue(s, title, detail, link, true);
}

static void poll_xids(struct slack *s, int64_t now)
{
	if (!s->metrics)
		return;
	/* Forget what is past the look-back. */
	size_t w = 0;
	for (size_t i = 0; i < s->nseen; i++)
		if (s->seen[i].ts >= now - SLACK_XID_LOOKBACK_MS - 60000)
			s->seen[w++] = s->seen[i];
	s->nseen = w;
	struct xid_scan x = { s, now };
	struct buf err = { 0 };
	if (metrics_points(s->metrics, "hw.gpu.xid", now - SLACK_XID_LOOKBACK_MS, now + 60000, 10000, on_xid, &x,
			   &err) < 0)
		log_warn("slack: reading XID events: %s", err.data ? err.data : "error");
	buf_free(&err);
}

/* --- sending -------------------------------------------------------------------- */

/* Slack's mrkdwn: &, < and > escaped (they delimit links). */
static void mrkdwn(struct buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '&')
			buf_puts(b, "&amp;");
		else if (*s == '<')
			buf_puts(b, "&lt;");
		else if (*s == '>')
			buf_puts(b, "&gt;");
		else
			buf_putc(b, *s);
	}
}

static void text_block(struct jsonw *w, const char *type, const char *text_type, const char *text)
{
	jsonw_begin_object(w);
	jsonw_kv_str(w, "type", type);
	jsonw_key(w, "text");
	jsonw_begin_object(w);
	jsonw_kv_str(w, "type", text_type);
	jsonw_kv_str(w, "text", text);
	jsonw_end_object(w);
	jsonw_end_object(w);
}

/* The message of items (n of them, extra more only counted). */
static void payload(struct slack *s, const struct item *items, size_t n, size_t extra, struct buf *out)
{
	size_t nrec = 0, nxid = 0;
	for (size_t i = 0; i < n; i++)
		items[i].xid ? nxid++ : nrec++;
	struct buf summary = { 0 }, t = { 0 };
	if (n + extra == 1)
		buf_printf(&summary, "ember: %s", items[0].title);
	else
		buf_printf(&summary, "ember: %zu notifications (%zu recommendations, %zu GPU XID events%s)", n + extra,
			   nrec, nxid, extra ? ", more not listed" : "");
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "text", summary.data);
	jsonw_key(&w, "blocks");
	jsonw_begin_array(&w);
	text_block(&w, "header", "plain_text", n + extra == 1 ? "ember" : summary.data + 7);
	for (size_t i = 0; i < n && i < SLACK_MAX_LISTED; i++) {
		buf_reset(&t);
		buf_puts(&t, "*<");
		mrkdwn(&t, items[i].link);
		buf_puts(&t, "|");
		mrkdwn(&t, items[i].title);
		buf_puts(&t, ">*\n");
		mrkdwn(&t, items[i].detail);
		text_block(&w, "section", "mrkdwn", t.data);
	}
	buf_reset(&t);
	size_t more = n + extra > SLACK_MAX_LISTED ? n + extra - SLACK_MAX_LISTED : 0;
	if (more)
		buf_printf(&t, "%zu more not listed: see ", more);
	else
		buf_puts(&t, "Open ");
	buf_puts(&t, "<");
	mrkdwn(&t, s->public_url);
	buf_puts(&t, "/?view=recs|ember's recommendations>");
	buf_printf(&t, " · at most %u messages per %lld min; the rest are grouped", s->c.max_messages,
		   (long long)(s->c.window_ms / 60000));
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "type", "context");
	jsonw_key(&w, "elements");
	jsonw_begin_array(&w);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "type", "mrkdwn");
	jsonw_kv_str(&w, "text", t.data);
	jsonw_end_object(&w);
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	if (jsonw_finish(&w) != 0)
		log_warn("slack: a message was written wrongly (a bug)");
	buf_free(&summary);
	buf_free(&t);
}

static size_t discard(void *p, size_t size, size_t n, void *ctx)
{
	(void)p;
	(void)ctx;
	return size * n;
}

/* POSTs body to the webhook: 0, or -1 (logged without the URL). */
static int post(struct slack *s, const struct buf *body)
{
	CURL *h = curl_easy_init();
	if (!h) {
		log_warn("slack: libcurl could not start a request");
		return -1;
	}
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_URL, s->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->data);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)body->len);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(h);
	if (rc != CURLE_OK) {
		log_warn("slack: the webhook could not be reached: %s", curl_easy_strerror(rc));
		return -1;
	}
	if (status < 200 || status > 299) {
		log_warn("slack: the webhook answered HTTP %ld", status);
		return -1;
	}
	return 0;
}

/* Whether a message may go now (fewer than max in the window). */
static bool budget(struct slack *s, int64_t now)
{
	size_t w = 0;
	for (size_t i = 0; i < s->nsent; i++)
		if (s->sent[i] > now - s->c.window_ms)
			s->sent[w++] = s->sent[i];
	s->nsent = w;
	return s->nsent < s->c.max_messages;
}

static void send_pending(struct slack *s, int64_t now)
{
	if (!budget(s, now))
		return;
	pthread_mutex_lock(&s->mu);
	size_t n = s->npending, extra = s->extra;
	if (!n) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	struct item *items = xcalloc(n, sizeof(*items));
	memcpy(items, s->pending, n * sizeof(*items));
	s->npending = 0;
	s->extra = 0;
	pthread_mutex_unlock(&s->mu);
	struct buf body = { 0 };
	payload(s, items, n, extra, &body);
	s->sent[s->nsent++] = now;
	int rc = post(s, &body);
	buf_free(&body);
	if (rc == 0) {
		s->messages++;
		for (size_t i = 0; i < n; i++)
			item_free(&items[i]);
	} else {
		/* Back at the front, sent with the next message. */
		s->failures++;
		pthread_mutex_lock(&s->mu);
		size_t keep = MIN(n, (size_t)SLACK_MAX_PENDING - s->npending);
		memmove(s->pending + keep, s->pending, s->npending * sizeof(*items));
		memcpy(s->pending, items, keep * sizeof(*items));
		s->npending += keep;
		for (size_t i = keep; i < n; i++) {
			item_free(&items[i]);
			s->extra++;
		}
		s->extra += extra;
		pthread_mutex_unlock(&s->mu);
	}
	free(items);
}

static void *run(void *arg)
{
	struct slack *s = arg;
	int64_t next_poll = 0;
	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		pthread_mutex_unlock(&s->mu);
		int64_t now = now_unix_ms();
		if (now >= next_poll) {
			poll_xids(s, now);
			next_poll = now + SLACK_XID_POLL_MS;
		}
		send_pending(s, now);
		pthread_mutex_lock(&s->mu);
		if (s->stop)
			break;
		/* Wake for new items, the next poll, or (with items
		 * waiting) a second later to see whether a slot freed. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t ms = s->npending ? 1000 : MAX(1, next_poll - now_unix_ms());
		ts.tv_sec += ms / 1000;
		ts.tv_nsec += (ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		size_t before = s->npending;
		while (!s->stop && s->npending == before &&
		       pthread_cond_timedwait(&s->wake, &s->mu, &ts) == 0)
			;
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

struct slack *slack_start(const struct slack_config *c, struct metrics_store *metrics, struct buf *err)
{
	if (!c->max_messages || c->window_ms <= 0) {
		buf_puts(err, "slack: the rate limit needs at least one message per window");
		return NULL;
	}
	struct slack *s = xcalloc(1, sizeof(*s));
	s->c = *c;
	s->url = xstrdup(c->webhook_url);
	s->public_url = xstrdup(c->public_url);
	size_t n = strlen(s->public_url);
	while (n && s->public_url[n - 1] == '/')
		s->public_url[--n] = 0;
	s->c.webhook_url = s->url;
	s->c.public_url = s->public_url;
	s->metrics = metrics;
	s->sent = xcalloc(c->max_messages, sizeof(*s->sent));
	s->started_ms = now_unix_ms();
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->wake, NULL);
	int e = pthread_create(&s->thread, NULL, run, s);
	if (e) {
		buf_printf(err, "slack: %s", strerror(e));
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->wake);
		free_all(s->sent, s->url, s->public_url, s);
		return NULL;
	}
	pthread_setname_np(s->thread, "ember-slack");
	return s;
}

void slack_stop(struct slack *s)
{
	if (!s)
		return;
	thread_stop_join(s->thread, &s->mu, &s->wake, &s->stop);
	for (size_t i = 0; i < s->npending; i++)
		item_free(&s->pending[i]);
	if (s->messages || s->failures)
		log_info("slack: %llu messages sent, %llu failed", (unsigned long long)s->messages,
			 (unsigned long long)s->failures);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->wake);
	free_all(s->seen, s->sent, s->url, s->public_url, s);
}
