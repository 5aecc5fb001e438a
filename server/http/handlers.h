/* handlers.h - the HTTP handlers of ember-server, by area:
 * server/http/ingest_api.c (agent protocol), server/http/query_api.c (REST API, health,
 * metrics, UI assets) and server/auth/auth_api.c (sign-in, service
 * tokens, users, roles, audit). The route table is in server/http/routes.c. */
#ifndef EMBER_SERVER_HANDLERS_H
#define EMBER_SERVER_HANDLERS_H

#include "http.h"
#include "server.h"

/* The project of a /project/{project_id}/... request (req->params[0]),
 * lower-cased into out, or false with the error answered (400 not a UUID,
 * 404 no such project). Shared by query_api.c and recs_api.c. */
bool handler_project(struct server *srv, const struct http_req *req, struct http_resp *resp,
		     char out[37]);

void handle_ingest_batch(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_otlp_profiles(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_ingest_session_batch(struct server *srv, const struct http_req *req,
				 struct http_resp *resp);
void handle_ingest_metrics(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_symbols_missing(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_symbols_put(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_cubin_put(struct server *srv, const struct http_req *req, struct http_resp *resp);

void handle_healthz(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_metrics(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_projects(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_flamegraph(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_top_functions(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_sandwich(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_diff(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_top_entities(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_labels(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_timeseries(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_events(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_gpu_timeline(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_metrics_query(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_metrics_names(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_gpu_topology(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_auth_login(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_auth_refresh(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_auth_logout(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_oauth2_login(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_oauth2_callback(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_auth_config(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_auth_me(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_tokens_list(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_tokens_create(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_tokens_revoke(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_users_list(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_users_create(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_user_roles_set(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_roles_list(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_roles_create(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_roles_update(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_roles_delete(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_audit_list(struct server *srv, const struct http_req *req, struct http_resp *resp);
/* server/http/recs_api.c */
void handle_recommendations(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_recommendation_state(struct server *srv, const struct http_req *req,
				 struct http_resp *resp);
void handle_recommendations_regenerate(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_recommendations_refresh(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_hot_trace_suppress(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_hot_trace_unsuppress(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_recommendations_suppressed(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_recommendations_history(struct server *srv, const struct http_req *req, struct http_resp *resp);
/* server/http/agents_api.c: the profiler inventory. */
void handle_agents_list(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_recs_settings_get(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_recs_settings_put(struct server *srv, const struct http_req *req, struct http_resp *resp);
/* server/http/assistant_api.c: the AI assistant (docs/assistant.md). */
void handle_assistant(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_assistant_config(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_llm_settings_get(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_llm_settings_put(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_asset(struct server *srv, const struct http_req *req, struct http_resp *resp);

#endif
