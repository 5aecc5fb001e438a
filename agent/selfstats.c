/* selfstats.c - see selfstats.h. */
#include "selfstats.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "jsonw.h"
#include "log.h"
#include "util.h"

#define PREFIX "ember_agent_"

enum kind { COUNTER, GAUGE };

struct metric {
	const char *name;   /* without PREFIX */
	enum kind kind;
	const char *help;
	const char *label;  /* the family's label name, or NULL */
	const char *lvalue; /* this row's label value */
	bool seconds;       /* the value is nanoseconds, shown as seconds */
};

/* Rows of one family (same name) are consecutive; HELP and TYPE are
 * written before the first. From agent/counters.h. */
#define KIND_COUNTER COUNTER
#define KIND_GAUGE GAUGE
#define KIND_SECONDS COUNTER
#define SECONDS_COUNTER false
#define SECONDS_GAUGE false
#define SECONDS_SECONDS true
#define ROW_L(id, name, kind, help, label, value) \
	[SS_##id] = { name, KIND_##kind, help, label, value, SECONDS_##kind },
#define ROW(id, name, kind, help) ROW_L(id, name, kind, help, NULL, NULL)
#define ROW_O(id, owner, field, name, kind, help) ROW(id, name, kind, help)
#define ROW_C(id, field, name, kind, help) ROW(id, name, kind, help)
#define ROW_B(id, stat, name, kind, help) ROW(id, name, kind, help)
static const struct metric metrics[SS_COUNT] = { AGENT_COUNTERS(ROW, ROW_O, ROW_C, ROW_B, ROW_L) };
#undef ROW_L
#undef ROW
#undef ROW_O
#undef ROW_C
#undef ROW_B

const char *selfstats_name(enum selfstat i)
{
	return (unsigned)i < SS_COUNT ? metrics[i].name : NULL;
}

static void put_value(struct buf *out, const struct metric *m, uint64_t v)
{
	if (m->seconds)
		buf_printf(out, "%llu.%09llu", (unsigned long long)(v / 1000000000ull),
			   (unsigned long long)(v % 1000000000ull));
	else
		buf_printf(out, "%llu", (unsigned long long)v);
}

void selfstats_prometheus(const struct selfstats_values *s, struct buf *out)
{
	for (size_t i = 0; i < SS_COUNT; i++) {
		const struct metric *m = &metrics[i];
		if (i == 0 || strcmp(metrics[i - 1].name, m->name) != 0)
			buf_printf(out, "# HELP " PREFIX "%s %s\n# TYPE " PREFIX "%s %s\n", m->name,
				   m->help, m->name, m->kind == COUNTER ? "counter" : "gauge");
		buf_printf(out, PREFIX "%s", m->name);
		if (m->label)
			buf_printf(out, "{%s=\"%s\"}", m->label, m->lvalue);
		buf_putc(out, ' ');
		put_value(out, m, s->v[i]);
		buf_putc(out, '\n');
	}
}

void selfstats_json(const struct selfstats_values *s, struct buf *out)
{
	struct jsonw w;
	jsonw_init(&w, out);
	jsonw_begin_object(&w);
	jsonw_kv_i64(&w, "time_unix_ms", s->time_unix_ms);
	struct buf num = { 0 };
	for (size_t i = 0; i < SS_COUNT; i++) {
		const struct metric *m = &metrics[i];
		bool first = i == 0 || strcmp(metrics[i - 1].name, m->name) != 0;
		bool last = i + 1 == SS_COUNT || strcmp(metrics[i + 1].name, m->name) != 0;
		if (first) {
			jsonw_key(&w, m->name);
			if (m->label)
				jsonw_begin_object(&w);
		}
		if (m->label)
			jsonw_key(&w, m->lvalue);
		/* The number as the text format writes it (seconds to the ns). */
		buf_reset(&num);
		put_value(&num, m, s->v[i]);
		jsonw_raw(&w, num.data, num.len);
		if (last && m->label)
			jsonw_end_object(&w);
	}
	buf_free(&num);
	jsonw_end_object(&w);
	(void)jsonw_finish(&w); /* the table's shape is fixed: a misuse fails the unit test */
	buf_putc(out, '\n');
}

int selfstats_split_addr(const char *addr, char *host, size_t hostcap, uint16_t *port)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || hostcap == 0)
		return -1;
	const char *h = addr;
	size_t hl = (size_t)(colon - addr);
	if (hl && addr[0] == '[') {
		if (hl < 3 || addr[hl - 1] != ']')
			return -1;
		h++;
		hl -= 2;
	} else if (memchr(addr, ':', hl)) {
		return -1; /* an IPv6 address needs brackets */
	}
	if (hl >= hostcap)
		return -1;
	for (size_t i = 0; i < hl; i++) {
		char c = h[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':' || c == '%' || c == '_'))
			return -1;
	}
	uint64_t p;
	if (parse_u64(colon + 1, &p) < 0 || p == 0 || p > 65535)
		return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}

/* --- the server ------------------------------------------------------------------ */

struct selfstats_server {
	struct MHD_Daemon *d;
	/* The latest published values: written by the main loop, read by
	 * the server's thread, both under mu. */
	pthread_mutex_t mu;
	struct selfstats_values latest;
};

/* Writes {"error": msg} and a newline to body. */
static void json_error(struct buf *body, const char *msg)
{
	struct jsonw w;
	jsonw_init(&w, body);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "error", msg);
	jsonw_end_object(&w);
	(void)jsonw_finish(&w); /* one flat object: no misuse is possible */
	buf_putc(body, '\n');
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     struct buf *body, const char *allow)
{
	size_t len = body->len;
	char *data = buf_steal(body, NULL);
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, data ? data : xstrdup(""), MHD_RESPMEM_MUST_FREE);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	if (allow)
		MHD_add_response_header(r, "Allow", allow);
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)con_cls;
	struct selfstats_server *srv = cls;
	struct buf body = { 0 };
	bool metrics_path = strcmp(url, "/metrics") == 0;
	bool stats_path = strcmp(url, "/debug/stats") == 0;
	if (!metrics_path && !stats_path) {
		struct buf msg = { 0 };
		buf_printf(&msg, "no such endpoint: %.200s; the agent serves GET /metrics and GET /debug/stats",
			   url);
		json_error(&body, msg.data);
		buf_free(&msg);
		return reply(c, MHD_HTTP_NOT_FOUND, "application/json", &body, NULL);
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		struct buf msg = { 0 };
		buf_printf(&msg, "method %.32s not allowed on %s; use GET", method, url);
		json_error(&body, msg.data);
		buf_free(&msg);
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "application/json", &body, "GET, HEAD");
	}
	struct selfstats_values v;
	pthread_mutex_lock(&srv->mu);
	v = srv->latest;
	pthread_mutex_unlock(&srv->mu);
	if (metrics_path) {
		selfstats_prometheus(&v, &body);
		return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", &body, NULL);
	}
	selfstats_json(&v, &body);
	return reply(c, MHD_HTTP_OK, "application/json", &body, NULL);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	log_vlibrary(LOG_DEBUG, "-pprof server", fmt, ap);
}

struct selfstats_server *selfstats_start(const char *addr, struct buf *err)
{
	char host[256], port[8];
	uint16_t p;
	if (selfstats_split_addr(addr, host, sizeof(host), &p) < 0) {
		buf_printf(err, "-pprof: expected host:port, e.g. 127.0.0.1:6060, got \"%s\"", addr);
		return NULL;
	}
	snprintf(port, sizeof(port), "%u", p);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	int gai = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
	if (gai != 0) {
		buf_printf(err, "-pprof: cannot resolve \"%s\": %s", addr, gai_strerror(gai));
		return NULL;
	}
	/* A name such as localhost: its IPv4 address first, as Go's
	 * listeners do; every address (":6060"): IPv6 accepting IPv4 too,
	 * when the host has IPv6. A family the host lacks is skipped; any
	 * other failure (a port in use) is the answer. */
	int want = *host ? AF_INET : AF_INET6;
	int fd = -1, saved = EAFNOSUPPORT;
	for (int pass = 0; pass < 2 && fd < 0; pass++) {
		for (struct addrinfo *r = ai; r && fd < 0; r = r->ai_next) {
			if ((r->ai_family == want) != (pass == 0))
				continue;
			fd = socket(r->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (fd < 0) {
				saved = errno;
				continue;
			}
			int one = 1, zero = 0;
			if (r->ai_family == AF_INET6 && !*host)
				(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
			if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
			    bind(fd, r->ai_addr, r->ai_addrlen) != 0 || listen(fd, 16) != 0) {
				saved = errno;
				close(fd);
				fd = -1;
				pass = 2; /* not another address: this one's error is the answer */
				break;
			}
		}
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		buf_printf(err, "-pprof: cannot listen on %s: %s", addr, strerror(saved));
		return NULL;
	}
	struct selfstats_server *srv = xcalloc(1, sizeof(*srv));
	pthread_mutex_init(&srv->mu, NULL);
	srv->latest.time_unix_ms = now_unix_ms();
	srv->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
				  on_request, srv,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				  MHD_OPTION_LISTEN_SOCKET, fd,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
				  MHD_OPTION_END);
	if (!srv->d) {
		buf_printf(err, "-pprof: cannot start the HTTP server on %s", addr);
		close(fd);
		pthread_mutex_destroy(&srv->mu);
		free(srv);
		return NULL;
	}
	return srv;
}

void selfstats_publish(struct selfstats_server *srv, const struct selfstats_values *s)
{
	if (!srv)
		return;
	pthread_mutex_lock(&srv->mu);
	srv->latest = *s;
	pthread_mutex_unlock(&srv->mu);
}

void selfstats_stop(struct selfstats_server *srv)
{
	if (!srv)
		return;
	MHD_stop_daemon(srv->d); /* closes the listening socket */
	pthread_mutex_destroy(&srv->mu);
	free(srv);
}
