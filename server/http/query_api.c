/* api.c - the REST API (/public/api/v1/...), /healthz, /metrics and the
 * UI's static assets. */
#include <stdio.h>
#include <string.h>

#include "assets.h"
#include "server/symbols/debuginfod.h"
#include "server/query/entities.h"
#include "server/query/events.h"
#include "server/query/flamegraph.h"
#include "server/query/functions.h"
#include "server/query/timeline.h"
#include "handlers.h"
#include "server/auth/authz.h"
#include "jsonw.h"
#include "log.h"
#include "server/metrics/gputopo.h"
#include "server/metrics/metrics.h"
#include "server/ingest/sessions.h"
#include "server/query/uregex.h"
#include "server/store/spanstore.h"
#include "server/store/store.h"
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
	struct sessions_stats ses;
	sessions_get_stats(srv->sessions, &ses);
	const struct server_counters *c = &srv->counters;
	struct buf *b = &resp->body;
	metric(b, "ember_http_requests_total", "counter", "HTTP requests answered", load(&c->http_requests));
	metric(b, "ember_http_errors_total", "counter", "HTTP answers with status >= 400", load(&c->http_errors));
	metric(b, "ember_http_timeouts_total", "counter", "connections closed for sending their headers or body too slowly", load(&c->http_timeouts));
	metric(b, "ember_http_queries_refused_total", "counter", "queries answered 503 because the query threads and their queue were full", load(&c->queries_refused));
	metric(b, "ember_ingest_batches_total", "counter", "agent batches stored", load(&c->ingest_batches));
	metric(b, "ember_ingest_duplicates_total", "counter", "agent batches received again and ignored", load(&c->ingest_duplicates));
	metric(b, "ember_ingest_rejected_total", "counter", "agent batches refused as invalid", load(&c->ingest_rejected));
	metric(b, "ember_ingest_failed_total", "counter", "agent batches that could not be stored", load(&c->ingest_failed));
	metric(b, "ember_ingest_samples_total", "counter", "on-CPU samples stored", load(&c->ingest_samples));
	metric(b, "ember_ingest_off_cpu_nanoseconds_total", "counter", "off-CPU time stored, in nanoseconds", load(&c->ingest_off_cpu_ns));
	metric(b, "ember_ingest_cuda_nanoseconds_total", "counter", "GPU kernel time stored, in nanoseconds", load(&c->ingest_cuda_ns));
	metric(b, "ember_ingest_alloc_bytes_total", "counter", "allocated bytes stored (allocation samples)", load(&c->ingest_alloc_bytes));
	metric(b, "ember_ingest_bytes_total", "counter", "compressed batch bytes stored", load(&c->ingest_bytes));
	metric(b, "ember_ingest_resyncs_total", "counter", "version 2 batches answered 409 (the agent starts a new session)", load(&c->ingest_resyncs));
	metric(b, "ember_ingest_unauthorized_total", "counter", "ingest requests refused for a missing or wrong token", load(&c->ingest_unauthorized));
	metric(b, "ember_auth_refused_total", "counter", "requests refused for a missing or invalid credential (401) or a missing permission (403)", load(&c->auth_refused));
	metric(b, "ember_otlp_requests_total", "counter", "OTLP Profiles requests stored", load(&c->otlp_requests));
	metric(b, "ember_otlp_rejected_total", "counter", "OTLP Profiles requests refused as invalid", load(&c->otlp_rejected));
	metric(b, "ember_log_suppressed_total", "counter", "log lines left out by the log rate limit (--log-rate-limit-interval)", log_suppressed_total());
	metric(b, "ember_sessions", "gauge", "agent sessions held (protocol version 2)", ses.count);
	metric(b, "ember_session_bytes", "gauge", "memory of the agent sessions", ses.bytes);
	metric(b, "ember_sessions_evicted_total", "counter", "sessions forgotten to stay within --session-memory", ses.evicted);
	metric(b, "ember_sessions_expired_total", "counter", "sessions forgotten after --session-idle unused", ses.expired);
	metric(b, "ember_symbols_uploaded_total", "counter", "symbol files stored", load(&c->symbols_uploaded));
	metric(b, "ember_symbols_rejected_total", "counter", "symbol files refused as invalid", load(&c->symbols_rejected));
	metric(b, "ember_flamegraph_queries_total", "counter", "flamegraph queries answered", load(&c->flamegraph_queries));
	metric(b, "ember_queries_total", "counter", "queries answered (every REST query endpoint)", load(&c->queries));
	metric(b, "ember_store_rows_total", "counter", "sample rows stored since start (including replayed)", st.rows);
	metric(b, "ember_store_head_rows", "gauge", "sample rows in the in-memory head", st.head_rows);
	metric(b, "ember_store_unflushed_rows", "gauge", "sample rows in memory not yet written to blocks", st.unflushed_rows);
	metric(b, "ember_store_blocks", "gauge", "block files", st.blocks);
	metric(b, "ember_store_block_bytes", "gauge", "bytes of block files on disk", st.block_bytes);
	metric(b, "ember_store_block_rows", "gauge", "sample rows in block files", st.block_rows);
	metric(b, "ember_store_block_samples", "gauge", "sample values in block files", st.block_samples);
	metric(b, "ember_store_memory_bytes", "gauge", "memory of the head, sealed parts and cached block dictionaries", st.memory_bytes);
	metric(b, "ember_store_cache_bytes", "gauge", "memory of cached block dictionaries", st.cache_bytes);
	metric(b, "ember_store_wal_bytes", "gauge", "bytes in the active write-ahead log", st.wal_bytes);
	metric(b, "ember_store_wal_skipped_records", "gauge", "corrupt log records skipped at startup", st.wal_skipped_records);
	metric(b, "ember_store_flushes_total", "counter", "in-memory parts written as blocks", st.flushes);
	metric(b, "ember_store_compactions_total", "counter", "partitions compacted", st.compactions);
	metric(b, "ember_store_retention_deleted_total", "counter", "blocks deleted by the retention", st.retention_deleted);
	metric(b, "ember_store_corrupt_blocks_total", "counter", "damaged blocks found, skipped and kept aside", st.corrupt_blocks);
	metric(b, "ember_store_refused_busy_total", "counter", "batches refused while too much waited to be written", st.refused_busy);
	metric(b, "ember_metrics_batches_total", "counter", "host and GPU metric batches stored", load(&c->metrics_batches));
	metric(b, "ember_metrics_points_total", "counter", "host and GPU metric points stored", load(&c->metrics_points));
	metric(b, "ember_metrics_rejected_total", "counter", "metric batches refused as invalid or over the bounds", load(&c->metrics_rejected));
	metric(b, "ember_metrics_failed_total", "counter", "metric batches that could not be stored", load(&c->metrics_failed));
	struct metrics_stats ms;
	metrics_get_stats(srv->metrics, &ms);
	metric(b, "ember_metrics_retention_deleted_total", "counter", "metric points deleted by the retention", ms.retention_deleted);
	metric(b, "ember_metrics_points_refused_total", "counter", "metric points dropped past 65536 per series and hour", ms.points_refused);
	metric(b, "ember_symbols_files", "gauge", "symbol files stored", symbols_count(srv->symbols));
	if (srv->spans) {
		struct span_store_stats ss;
		span_store_get_stats(srv->spans, &ss);
		metric(b, "ember_gpu_spans_stored_total", "counter", "GPU timeline spans stored", ss.stored);
		metric(b, "ember_gpu_spans_insert_failed_total", "counter", "GPU timeline spans whose insert into ClickHouse failed (their batch's samples were stored)", ss.insert_failed);
		metric(b, "ember_gpu_spans_read_failed_total", "counter", "GPU timeline reads from ClickHouse that failed (answered 503)", ss.read_failed);
		metric(b, "ember_gpu_spans_expired_total", "counter", "GPU spans kept in memory dropped past --gpu-span-retention", ss.expired);
		metric(b, "ember_gpu_spans_evicted_total", "counter", "GPU spans kept in memory dropped past --gpu-span-max", ss.evicted);
		metric(b, "ember_gpu_spans_hours_dropped_total", "counter", "hour partitions of GPU spans in ClickHouse dropped past --gpu-span-retention", ss.hours_dropped);
		metric(b, "ember_gpu_spans_orphans_total", "counter", "GPU spans read whose launch stack was not found (skipped)", ss.orphans);
	}
	struct fetcher_stats fs;
	fetcher_get_stats(srv->fetcher, &fs);
	metric(b, "ember_debuginfod_requests_total", "counter", "symbol files asked of debuginfod", fs.requested);
	metric(b, "ember_debuginfod_fetched_total", "counter", "symbol files built from debuginfod", fs.fetched);
	metric(b, "ember_debuginfod_failed_total", "counter", "debuginfod fetches that found nothing", fs.failed);
	resp->status = 200;
	resp->content_type = "text/plain; version=0.0.4";
}

static bool may_read(const char *id, void *who)
{
	return principal_can(who, "project:read", id);
}

/* The projects the caller may read. */
void handle_projects(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	jsonw_key(&w, "projects");
	projects_list_json(srv->projects, may_read, (void *)req->who, &w);
	jsonw_end_object(&w);
	http_json_end(resp, &w, 200);
}

bool handler_project(struct server *srv, const struct http_req *req, struct http_resp *resp,
		     char out[37])
{
	const char *project = req->params[0];
	if (!uuid_valid(project)) {
		http_error(resp, 400, "project id: expected a UUID, got \"%s\"", project);
		return false;
	}
	if (!projects_exists(srv->projects, project)) {
		http_error(resp, 404, "no project with id %s", project);
		return false;
	}
	snprintf(out, 37, "%s", project);
	for (char *p = out; *p; p++)
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	return true;
}

static void answer(struct server *srv, struct http_resp *resp, int rc, struct buf *err)
{
	if (rc == STORE_READ_RC) {
		/* The store could not be read whole (a ClickHouse shard down):
		 * no answer rather than a smaller one; the client retries. */
		resp->retry_after = "5";
		http_error(resp, 503, "%s", err->data);
	} else if (rc < 0) {
		/* UREGEX_RC: the request was valid but a pattern in it reached
		 * its bounds on the data (server/query/uregex.h). */
		http_error(resp, rc == UREGEX_RC ? 422 : rc == JSONW_RC ? 500 : 400, "%s", err->data);
	} else {
		__atomic_add_fetch(&srv->counters.queries, 1, __ATOMIC_RELAXED);
		http_json(resp, 200);
	}
	buf_free(err);
}

static void metrics_answer(struct server *srv, struct http_resp *resp, int status, struct buf *err)
{
	if (status == 0) {
		__atomic_add_fetch(&srv->counters.queries, 1, __ATOMIC_RELAXED);
		http_json(resp, 200);
	} else {
		buf_reset(&resp->body);
		http_error(resp, status, "%s", err->data ? err->data : "error");
	}
	buf_free(err);
}

/* The metrics queries share one shape: project, body in, JSON out. */
typedef int (*metrics_fn)(struct metrics_store *m, const char *project_id, const char *body, size_t len,
			  struct buf *out, struct buf *err);

static void metrics_handler(struct server *srv, const struct http_req *req, struct http_resp *resp, metrics_fn fn)
{
	char project[37];
	if (!handler_project(srv, req, resp, project))
		return;
	struct buf err = { 0 };
	int status = fn(srv->metrics, project, req->body, req->body_len, &resp->body, &err);
	metrics_answer(srv, resp, status, &err);
}

void handle_metrics_query(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	metrics_handler(srv, req, resp, metrics_query);
}

void handle_metrics_names(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	metrics_handler(srv, req, resp, metrics_names);
}

void handle_gpu_topology(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	metrics_handler(srv, req, resp, gputopo_query);
}

void handle_flamegraph(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!handler_project(srv, req, resp, project))
		return;
	/* The {format} segment: json (the flamegraph itself) or an export. */
	int format = req->nparams > 1 ? fg_format_parse(req->params[1]) : FG_FORMAT_JSON;
	if (format < 0) {
		http_error(resp, 404, "flamegraph format: expected json, pprof, folded or speedscope, got \"%s\"",
			   req->params[1]);
		return;
	}
	struct fg_request r;
	struct buf err = { 0 };
	if (fg_request_parse(&r, req->body, req->body_len, &err) < 0) {
		answer(srv, resp, -1, &err);
		return;
	}
	memcpy(r.scope.project_id, project, sizeof(project));
	r.format = (enum fg_format)format;
	int rc = flamegraph_query(srv->store, symbols_for_query(srv->symbols, project), srv->fetcher, &r, &resp->body, &err);
	if (rc == 0)
		__atomic_add_fetch(&srv->counters.flamegraph_queries, 1, __ATOMIC_RELAXED);
	answer(srv, resp, rc, &err);
	if (rc == 0 && r.format != FG_FORMAT_JSON) {
		/* An export: a file to save, named by what it holds. */
		resp->content_type = fg_format_content_type(r.format);
		http_add_header(resp, "Content-Disposition", "attachment; filename=\"ember-%s-%s.%s\"",
				event_kind_name(r.scope.kind), project, fg_format_extension(r.format));
	}
	fg_request_free(&r);
}

static void functions(struct server *srv, const struct http_req *req, struct http_resp *resp,
		      enum fn_query what)
{
	char project[37];
	if (!handler_project(srv, req, resp, project))
		return;
	struct fn_request r;
	struct buf err = { 0 };
	if (fn_request_parse(&r, what, req->body, req->body_len, &err) < 0) {
		answer(srv, resp, -1, &err);
		return;
	}
	fn_request_set_project(&r, project);
	answer(srv, resp, functions_query(srv->store, symbols_for_query(srv->symbols, project), srv->fetcher, &r, &resp->body, &err),
	       &err);
	fn_request_free(&r);
}

void handle_top_functions(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	functions(srv, req, resp, FN_TOP);
}

void handle_sandwich(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	functions(srv, req, resp, FN_SANDWICH);
}

void handle_diff(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	functions(srv, req, resp, FN_DIFF);
}

static void entities(struct server *srv, const struct http_req *req, struct http_resp *resp,
		     enum ent_query what)
{
	char project[37];
	if (!handler_project(srv, req, resp, project))
		return;
	struct ent_request r;
	struct buf err = { 0 };
	if (ent_request_parse(&r, what, req->body, req->body_len, &err) < 0) {
		answer(srv, resp, -1, &err);
		return;
	}
	memcpy(r.scope.project_id, project, sizeof(project));
	answer(srv, resp, entities_query(srv->store, &r, &resp->body, &err), &err);
	ent_request_free(&r);
}

void handle_top_entities(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	entities(srv, req, resp, ENT_TOP);
}

void handle_labels(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	entities(srv, req, resp, ENT_LABELS);
}

void handle_timeseries(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	entities(srv, req, resp, ENT_TIMESERIES);
}

void handle_events(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!handler_project(srv, req, resp, project))
		return;
	struct ev_request r;
	struct buf err = { 0 };
	if (ev_request_parse(&r, req->body, req->body_len, &err) < 0) {
		answer(srv, resp, -1, &err);
		return;
	}
	memcpy(r.scope.project_id, project, sizeof(project));
	answer(srv, resp, events_query(srv->store, symbols_for_query(srv->symbols, project), &r, &resp->body, &err), &err);
	ev_request_free(&r);
}

void handle_gpu_timeline(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!handler_project(srv, req, resp, project))
		return;
	if (!srv->spans) {
		http_error(resp, 503, "GPU spans are not kept by this server");
		return;
	}
	struct tl_request r;
	struct buf err = { 0 };
	if (tl_request_parse(&r, req->body, req->body_len, &err) < 0) {
		answer(srv, resp, -1, &err);
		return;
	}
	memcpy(r.scope.project_id, project, sizeof(project));
	int64_t now = now_unix_ms();
	int64_t from = r.scope.start_ms > INT64_MAX / 1000000 ? INT64_MAX : r.scope.start_ms * 1000000;
	int64_t to = r.scope.end_ms > INT64_MAX / 1000000 ? INT64_MAX : r.scope.end_ms * 1000000;
	/* a CEL filter is applied in ember: read all it may keep */
	size_t max = r.scope.query ? SIZE_MAX : r.limit;
	struct gpuspans *g;
	if (span_store_read(srv->spans, project, from, to, now, max, &g, &r.source_truncated, &err) < 0) {
		http_error(resp, 503, "%s", err.data ? err.data : "the GPU spans' read failed");
		buf_free(&err);
		tl_request_free(&r);
		return;
	}
	answer(srv, resp,
	       timeline_query(g, symbols_for_query(srv->symbols, project), &r, now, &resp->body, &err),
	       &err);
	span_store_release(srv->spans, g);
	tl_request_free(&r);
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
