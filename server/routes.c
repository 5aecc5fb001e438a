/* routes.c - every endpoint of ember-server, in one table. The public ones
 * are described in server/openapi.json (GET /public/api/v1/openapi.json). */
#include "handlers.h"
#include "metrics.h"
#include "util.h"

#define KiB 1024u
#define MiB (1024u * KiB)

const struct route server_routes[] = {
	{ "GET", "/healthz", handle_healthz, 0 },
	{ "GET", "/metrics", handle_metrics, 0 },
	{ "POST", "/ingest/v1/batch", handle_ingest_batch, 64 * MiB },
	{ "POST", "/ingest/v2/batch", handle_ingest_session_batch, 64 * MiB },
	{ "POST", "/v1development/profiles", handle_otlp_profiles, 64 * MiB },
	{ "POST", "/ingest/v1/metrics", handle_ingest_metrics, MET_MAX_COMPRESSED },
	{ "POST", "/ingest/v1/symbols/missing", handle_symbols_missing, 8 * MiB },
	{ "PUT", "/ingest/v1/symbols/{file_id}", handle_symbols_put, 256 * MiB },
	{ "GET", "/public/api/v1/projects", handle_projects, 0 },
	{ "POST", "/public/api/v1/project/{project_id}/flamegraph/json", handle_flamegraph, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/top_functions", handle_top_functions, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/sandwich", handle_sandwich, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/diff", handle_diff, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/top_entities", handle_top_entities, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/labels", handle_labels, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/timeseries", handle_timeseries, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/events", handle_events, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/metrics", handle_metrics_query, 1 * MiB },
	{ "POST", "/public/api/v1/project/{project_id}/metrics/names", handle_metrics_names, 1 * MiB },
	{ "GET", "*", handle_asset, 0 },
};

const unsigned server_route_count = ARRAY_SIZE(server_routes);
