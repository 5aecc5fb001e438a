/* api.c - the REST API (/public/api/v1/...), /healthz, /metrics and the
 * UI's static assets. */
#include <stdio.h>
#include <string.h>

#include "assets.h"
#include "debuginfod.h"
#include "flamegraph.h"
#include "handlers.h"
#include "jsonw.h"
#include "util.h"

void handle_healthz(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)srv;
	(void)req;
	buf_puts(&resp->body, "ok\n");
	resp->status = 200;
}

static void metric(struct buf *b, const char *name, const char *type, const char *help,
		   uint64_t v)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
		   (unsigned long long)v);
}

static uint64_t load(const uint64_t *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

void handle_metrics(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)req;
	struct store_stats st;
	store_get_stats(srv->store, &st);
	const struct server_counters *c = &srv->counters;
	struct buf *b = &resp->body;
	metric(b, "ember_http_requests_total", "counter", "HTTP requests answered", load(&c->http_requests));
	metric(b, "ember_http_errors_total", "counter", "HTTP answers with status >= 400", load(&c->http_errors));
	metric(b, "ember_ingest_batches_total", "counter", "agent batches stored", load(&c->ingest_batches));
	metric(b, "ember_ingest_duplicates_total", "counter", "agent batches received again and ignored", load(&c->ingest_duplicates));
	metric(b, "ember_ingest_rejected_total", "counter", "agent batches refused as invalid", load(&c->ingest_rejected));
	metric(b, "ember_ingest_failed_total", "counter", "agent batches that could not be stored", load(&c->ingest_failed));
	metric(b, "ember_ingest_samples_total", "counter", "sample values stored", load(&c->ingest_samples));
	metric(b, "ember_ingest_bytes_total", "counter", "compressed batch bytes stored", load(&c->ingest_bytes));
	metric(b, "ember_symbols_uploaded_total", "counter", "symbol files stored", load(&c->symbols_uploaded));
	metric(b, "ember_symbols_rejected_total", "counter", "symbol files refused as invalid", load(&c->symbols_rejected));
	metric(b, "ember_flamegraph_queries_total", "counter", "flamegraph queries answered", load(&c->flamegraph_queries));
	metric(b, "ember_store_rows", "gauge", "sample rows in the store", st.rows);
	metric(b, "ember_store_stack_nodes", "gauge", "distinct stack prefix-tree nodes", st.stack_nodes);
	metric(b, "ember_store_frames", "gauge", "distinct frames", st.frames);
	metric(b, "ember_store_strings", "gauge", "distinct strings", st.strings);
	metric(b, "ember_store_label_sets", "gauge", "distinct label sets", st.label_sets);
	metric(b, "ember_store_wal_bytes", "gauge", "bytes in the write-ahead log", st.wal_bytes);
	metric(b, "ember_store_wal_skipped_records", "gauge", "corrupt log records skipped at startup", st.wal_skipped_records);
	metric(b, "ember_symbols_files", "gauge", "symbol files stored", symbols_count(srv->symbols));
	struct fetcher_stats fs;
	fetcher_get_stats(srv->fetcher, &fs);
	metric(b, "ember_debuginfod_requests_total", "counter", "symbol files asked of debuginfod", fs.requested);
	metric(b, "ember_debuginfod_fetched_total", "counter", "symbol files built from debuginfod", fs.fetched);
	metric(b, "ember_debuginfod_failed_total", "counter", "debuginfod fetches that found nothing", fs.failed);
	resp->status = 200;
	resp->content_type = "text/plain; version=0.0.4";
}

void handle_projects(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)req;
	buf_puts(&resp->body, "{\"projects\":");
	projects_list_json(srv->projects, &resp->body);
	buf_puts(&resp->body, "}\n");
	http_json(resp, 200);
}

void handle_flamegraph(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	const char *project = req->params[0];
	if (!uuid_valid(project)) {
		http_error(resp, 400, "project id: expected a UUID, got \"%s\"", project);
		return;
	}
	if (!projects_exists(srv->projects, project)) {
		http_error(resp, 404, "no project with id %s", project);
		return;
	}
	struct fg_request r;
	struct buf err = { 0 };
	if (fg_request_parse(&r, req->body, req->body_len, &err) < 0) {
		http_error(resp, 400, "%s", err.data);
		buf_free(&err);
		return;
	}
	snprintf(r.project_id, sizeof(r.project_id), "%s", project);
	for (char *p = r.project_id; *p; p++)
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	if (flamegraph_query(srv->store, srv->symbols, srv->fetcher, &r, &resp->body, &err) < 0) {
		http_error(resp, 400, "%s", err.data);
	} else {
		__atomic_add_fetch(&srv->counters.flamegraph_queries, 1, __ATOMIC_RELAXED);
		http_json(resp, 200);
	}
	fg_request_free(&r);
	buf_free(&err);
}

const struct asset *asset_find(const char *path)
{
	if (strcmp(path, "/") == 0)
		path = "/index.html";
	for (unsigned i = 0; i < ember_asset_count; i++)
		if (strcmp(ember_assets[i].path, path) == 0)
			return &ember_assets[i];
	return NULL;
}

void handle_asset(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)srv;
	const struct asset *a = asset_find(req->path);
	if (!a) {
		http_error(resp, 404, "no such page: %s", req->path);
		return;
	}
	resp->status = 200;
	resp->content_type = a->content_type;
	resp->static_body = a->start;
	resp->static_len = (size_t)(a->end - a->start);
	resp->cache_control = "no-cache";
}
