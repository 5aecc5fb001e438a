/* agents_api.c - GET /public/api/v1/agents: the profiler inventory
 * (server/store/agents.h), as JSON or, with ?format=csv, as a CSV file. */
#include <string.h>

#include "handlers.h"
#include "http.h"
#include "jsonw.h"
#include "server.h"
#include "server/store/agents.h"
#include "util.h"

struct listing {
	int64_t now_ms;
	bool csv;
	struct jsonw *w;
	struct buf *out;
	uint64_t total, reporting;
};

/* One CSV field: quoted when it holds a comma, quote or line break. */
static void csv_field(struct buf *b, const char *s, bool last)
{
	if (strpbrk(s, ",\"\r\n")) {
		buf_putc(b, '"');
		for (; *s; s++) {
			if (*s == '"')
				buf_putc(b, '"');
			buf_putc(b, *s);
		}
		buf_putc(b, '"');
	} else {
		buf_puts(b, s);
	}
	buf_putc(b, last ? '\n' : ',');
}

static void on_agent(void *ctx, const struct agent_row *r)
{
	struct listing *l = ctx;
	bool reporting = l->now_ms - r->last_seen_ms <= AGENTS_REPORTING_MS;
	l->total++;
	l->reporting += reporting;
	/* The texts, in the CSV's order too. */
	static const char *const keys[6] = { "instance", "host", "version", "project_id", "protocol", "address" };
	const char *texts[6] = { r->instance, r->host, r->version, r->project, r->protocol, r->address };
	if (l->csv) {
		for (int i = 0; i < 6; i++)
			csv_field(l->out, texts[i], false);
		buf_printf(l->out, "%u,%lld,%lld,%llu,%llu,%s\n", r->host_cpus, (long long)r->first_seen_ms,
			   (long long)r->last_seen_ms, (unsigned long long)r->batches,
			   (unsigned long long)r->samples, reporting ? "yes" : "no");
		return;
	}
	struct jsonw *w = l->w;
	jsonw_begin_object(w);
	for (int i = 0; i < 6; i++)
		jsonw_kv_str(w, keys[i], texts[i]);
	jsonw_kv_u64(w, "host_cpus", r->host_cpus);
	jsonw_kv_i64(w, "first_seen_ms", r->first_seen_ms);
	jsonw_kv_i64(w, "last_seen_ms", r->last_seen_ms);
	jsonw_kv_u64(w, "batches", r->batches);
	jsonw_kv_u64(w, "samples", r->samples);
	jsonw_kv_bool(w, "reporting", reporting);
	jsonw_end_object(w);
}

void handle_agents_list(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	const char *format = http_query_arg(req, "format");
	if (format && strcmp(format, "json") != 0 && strcmp(format, "csv") != 0) {
		http_error(resp, 400, "format: expected json or csv");
		return;
	}
	if (!srv->agents) {
		http_error(resp, 503, "the profiler inventory is not kept by this server");
		return;
	}
	struct listing l = { .now_ms = now_unix_ms(), .csv = format && !strcmp(format, "csv") };
	struct buf err = { 0 };
	bool unavailable = false;
	struct jsonw w;
	int rc;
	if (l.csv) {
		l.out = &resp->body;
		buf_puts(l.out, "instance,host,version,project_id,protocol,address,host_cpus,first_seen_ms,"
				"last_seen_ms,batches,samples,reporting\n");
		rc = agents_list(srv->agents, on_agent, &l, &unavailable, &err);
	} else {
		http_json_begin(resp, &w);
		l.w = &w;
		jsonw_begin_object(&w);
		jsonw_key(&w, "agents");
		jsonw_begin_array(&w);
		rc = agents_list(srv->agents, on_agent, &l, &unavailable, &err);
		jsonw_end_array(&w);
		jsonw_kv_u64(&w, "total", l.total);
		jsonw_kv_u64(&w, "reporting", l.reporting);
		jsonw_kv_i64(&w, "reporting_window_ms", AGENTS_REPORTING_MS);
		jsonw_end_object(&w);
	}
	if (rc < 0) {
		buf_reset(&resp->body);
		http_error(resp, unavailable ? 503 : 500, "the profiler inventory cannot be read: %s", err.data);
		if (unavailable)
			resp->retry_after = "5";
	} else if (l.csv) {
		resp->status = 200;
		resp->content_type = "text/csv; charset=utf-8";
		http_add_header(resp, "Content-Disposition", "attachment; filename=\"ember-agents.csv\"");
	} else {
		http_json_end(resp, &w, 200);
	}
	buf_free(&err);
}
