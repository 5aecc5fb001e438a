/* routes.c - every endpoint of ember-server, in one table. The public ones
 * are described in server/openapi.json (GET /public/api/v1/openapi.json).
 * Ingest routes check the agent token on the headers, before the body;
 * ingest and queries run on pools of their own (HTTP_INGEST, HTTP_QUERY,
 * http.h), so that health checks never wait behind them, nor ingest
 * behind a query. */
#include "handlers.h"
#include "metrics.h"
#include "util.h"

#define KiB 1024u
#define MiB (1024u * KiB)
#define Q HTTP_QUERY
#define AUTH ingest_authorized
#define IN HTTP_INGEST

const struct route server_routes[] = {
	{ "GET", "/healthz", handle_healthz, 0 },
	{ "GET", "/metrics", handle_metrics, 0 },
	{ "POST", "/ingest/v1/batch", handle_ingest_batch, 64 * MiB, IN, AUTH },
	{ "POST", "/ingest/v2/batch", handle_ingest_session_batch, 64 * MiB, IN, AUTH },
	{ "POST", "/v1development/profiles", handle_otlp_profiles, 64 * MiB, IN, AUTH },
	{ "POST", "/ingest/v1/metrics", handle_ingest_metrics, MET_MAX_COMPRESSED, IN, AUTH },
	{ "POST", "/ingest/v1/symbols/missing", handle_symbols_missing, 8 * MiB, IN, AUTH },
	{ "PUT", "/ingest/v1/symbols/{file_id}", handle_symbols_put, 256 * MiB, IN | HTTP_SPOOL, AUTH },
	{ "GET", "/public/api/v1/projects", handle_projects, 0, Q },
	{ "POST", "/public/api/v1/project/{project_id}/flamegraph/json", handle_flamegraph, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/top_functions", handle_top_functions, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/sandwich", handle_sandwich, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/diff", handle_diff, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/top_entities", handle_top_entities, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/labels", handle_labels, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/timeseries", handle_timeseries, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/events", handle_events, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/metrics", handle_metrics_query, 1 * MiB, Q },
	{ "POST", "/public/api/v1/project/{project_id}/metrics/names", handle_metrics_names, 1 * MiB, Q },
	{ "GET", "*", handle_asset, 0 },
};

const unsigned server_route_count = ARRAY_SIZE(server_routes);
