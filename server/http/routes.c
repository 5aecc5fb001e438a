/* routes.c - every endpoint of ember-server, in one table. The public ones
 * are described in server/http/openapi.json (GET /public/api/v1/openapi.json).
 * Each route names the permission it needs and where (auth/authz.h),
 * checked on the headers, before the body;
 * ingest and queries run on pools of their own (HTTP_INGEST, HTTP_QUERY,
 * http.h), so that health checks never wait behind them, nor ingest
 * behind a query. */
#include "handlers.h"
#include "server/auth/authz.h"
#include "mcp.h"
#include "server/metrics/metrics.h"
#include "util.h"

#define KiB 1024u
#define MiB (1024u * KiB)
#define Q HTTP_QUERY
#define IN HTTP_INGEST
/* Where a route's permission applies (auth/authz.h). */
#define PUB AUTH_PUBLIC, ROUTE_GLOBAL
#define ME AUTH_SIGNED_IN, ROUTE_GLOBAL
#define GLOBAL(p) p, ROUTE_GLOBAL
#define IN_PROJECT(p) p, ROUTE_PROJECT
#define IN_BODY(p) p, ROUTE_BODY
/* The role that serves a route (--roles, http.h); 0: every server. */
#define ING HTTP_ROLE_INGEST
#define QRY HTTP_ROLE_QUERY
#define UI HTTP_ROLE_UI
#define SYM HTTP_ROLE_SYMBOLS

const struct route server_routes[] = {
	{ "GET", "/healthz", handle_healthz, 0, 0, PUB, 0 },
	{ "GET", "/metrics", handle_metrics, 0, 0, GLOBAL("server:metrics:read"), 0 },
	{ "POST", "/ingest/v1/batch", handle_ingest_batch, 64 * MiB, IN, IN_BODY("ingest:profile:write"), ING },
	{ "POST", "/ingest/v2/batch", handle_ingest_session_batch, 64 * MiB, IN, IN_BODY("ingest:profile:write"), ING },
	{ "POST", "/v1development/profiles", handle_otlp_profiles, 64 * MiB, IN, IN_BODY("ingest:profile:write"), ING },
	{ "POST", "/ingest/v1/metrics", handle_ingest_metrics, MET_MAX_COMPRESSED, IN, IN_BODY("ingest:metrics:write"), ING },
	{ "POST", "/ingest/v1/symbols/missing", handle_symbols_missing, 8 * MiB, IN, IN_BODY("ingest:symbols:write"), SYM },
	{ "PUT", "/ingest/v1/symbols/{file_id}", handle_symbols_put, 256 * MiB, IN | HTTP_SPOOL, IN_BODY("ingest:symbols:write"), SYM },
	{ "PUT", "/ingest/v1/cubins/{crc}", handle_cubin_put, 256 * MiB, IN | HTTP_SPOOL, IN_BODY("ingest:symbols:write"), SYM },
	{ "POST", "/api/v1/auth/login", handle_auth_login, 64 * KiB, 0, PUB, QRY },
	{ "POST", "/api/v1/auth/refresh", handle_auth_refresh, 0, 0, PUB, QRY },
	{ "POST", "/api/v1/auth/logout", handle_auth_logout, 0, 0, PUB, QRY },
	{ "GET", "/api/v1/auth/config", handle_auth_config, 0, 0, PUB, QRY },
	{ "GET", "/api/v1/auth/me", handle_auth_me, 0, 0, ME, QRY },
	{ "GET", "/api/v1/oauth2/login", handle_oauth2_login, 0, 0, PUB, QRY },
	{ "GET", "/api/v1/oauth2/callback", handle_oauth2_callback, 0, 0, PUB, QRY },
	{ "GET", "/public/api/v1/service-tokens", handle_tokens_list, 0, 0, GLOBAL("service:token:read"), QRY },
	{ "POST", "/public/api/v1/service-tokens", handle_tokens_create, 64 * KiB, 0, GLOBAL("service:token:create"), QRY },
	{ "DELETE", "/public/api/v1/service-tokens/{token_id}", handle_tokens_revoke, 0, 0, GLOBAL("service:token:revoke"), QRY },
	{ "GET", "/public/api/v1/users", handle_users_list, 0, 0, GLOBAL("admin:user:read"), QRY },
	{ "POST", "/public/api/v1/users", handle_users_create, 64 * KiB, 0, GLOBAL("admin:user:create"), QRY },
	{ "PUT", "/public/api/v1/users/{user_id}/roles", handle_user_roles_set, 64 * KiB, 0, GLOBAL("admin:role:assignment:set"), QRY },
	{ "GET", "/public/api/v1/roles", handle_roles_list, 0, 0, GLOBAL("admin:role:read"), QRY },
	{ "POST", "/public/api/v1/roles", handle_roles_create, 64 * KiB, 0, GLOBAL("admin:role:create"), QRY },
	{ "PUT", "/public/api/v1/roles/{role_id}", handle_roles_update, 64 * KiB, 0, GLOBAL("admin:role:update"), QRY },
	{ "DELETE", "/public/api/v1/roles/{role_id}", handle_roles_delete, 0, 0, GLOBAL("admin:role:delete"), QRY },
	{ "GET", "/public/api/v1/audit", handle_audit_list, 0, 0, GLOBAL("admin:audit:read"), QRY },
	/* Lists the projects the caller may read (none may be an answer). */
	{ "GET", "/public/api/v1/projects", handle_projects, 0, Q, ME, QRY },
	/* {format}: json (the flamegraph), pprof, folded or speedscope (server/query/export.h). */
	{ "POST", "/public/api/v1/project/{project_id}/flamegraph/{format}", handle_flamegraph, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/top_functions", handle_top_functions, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/sandwich", handle_sandwich, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/diff", handle_diff, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/top_entities", handle_top_entities, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/labels", handle_labels, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/timeseries", handle_timeseries, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/events", handle_events, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	/* The GPU timeline: single kernels and copies with their launch stacks (query/timeline.h). */
	{ "POST", "/public/api/v1/project/{project_id}/gpu/timeline", handle_gpu_timeline, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/metrics", handle_metrics_query, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/metrics/names", handle_metrics_names, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/gpu/topology", handle_gpu_topology, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	/* ?kind=cpu|cuda|all (server/query/recommend.h). */
	{ "GET", "/public/api/v1/project/{project_id}/recommendations", handle_recommendations, 0, Q, IN_PROJECT("project:read"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/recommendations/{rec_id}/state", handle_recommendation_state, 64 * KiB, 0, IN_PROJECT("project:update"), QRY },
	/* The lifecycle (server/query/recommend.h): a new generation now (regenerate: the
	 * analysis again; refresh: the hot traces read again first), a hot trace
	 * suppressed (POST) or back (DELETE), and the history of every change. */
	{ "POST", "/public/api/v1/project/{project_id}/recommendations/regenerate", handle_recommendations_regenerate, 0, Q, IN_PROJECT("project:update"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/recommendations/refresh", handle_recommendations_refresh, 0, Q, IN_PROJECT("project:update"), QRY },
	{ "POST", "/public/api/v1/project/{project_id}/recommendations/hot-traces/{trace_id}/suppress", handle_hot_trace_suppress, 0, Q, IN_PROJECT("project:update"), QRY },
	{ "DELETE", "/public/api/v1/project/{project_id}/recommendations/hot-traces/{trace_id}/suppress", handle_hot_trace_unsuppress, 0, Q, IN_PROJECT("project:update"), QRY },
	{ "GET", "/public/api/v1/project/{project_id}/recommendations/suppressed", handle_recommendations_suppressed, 0, 0, IN_PROJECT("project:read"), QRY },
	{ "GET", "/public/api/v1/project/{project_id}/recommendations/history", handle_recommendations_history, 0, 0, IN_PROJECT("project:read"), QRY },
	/* The profiler inventory (metadata: every replica lists every agent): admins. */
	{ "GET", "/public/api/v1/agents", handle_agents_list, 0, 0, GLOBAL("admin:settings:read"), QRY },
	/* Recommendations and cost settings, stored in recs.db over the flags: admins. */
	{ "GET", "/public/api/v1/settings/recommendations", handle_recs_settings_get, 0, 0, GLOBAL("admin:settings:read"), QRY },
	{ "PUT", "/public/api/v1/settings/recommendations", handle_recs_settings_put, 64 * KiB, 0, GLOBAL("admin:settings:update"), QRY },
	/* The AI assistant (docs/assistant.md): a tool-calling loop over the MCP
	 * tools, each run as the caller; the config says whether there is one. */
	{ "POST", "/public/api/v1/project/{project_id}/assistant", handle_assistant, 1 * MiB, Q, IN_PROJECT("project:read"), QRY },
	{ "GET", "/public/api/v1/assistant/config", handle_assistant_config, 0, 0, ME, QRY },
	/* The LLM's models, token limits and LLM mode (never its key): admins. */
	{ "GET", "/public/api/v1/settings/llm", handle_llm_settings_get, 0, 0, GLOBAL("admin:settings:read"), QRY },
	{ "PUT", "/public/api/v1/settings/llm", handle_llm_settings_put, 64 * KiB, 0, GLOBAL("admin:settings:update"), QRY },
	/* MCP (server/http/mcp.h): any credential; each tool checks project:read. */
	{ "POST", "/mcp", handle_mcp_post, MCP_MAX_BODY, Q, ME, QRY },
	{ "GET", "/mcp", handle_mcp_get, 0, 0, ME, QRY },
	{ "DELETE", "/mcp", handle_mcp_delete, 0, 0, ME, QRY },
	/* The UI's files, the OpenAPI document and the login page: public. */
	{ "GET", "*", handle_asset, 0, 0, PUB, UI },
};

const unsigned server_route_count = ARRAY_SIZE(server_routes);
