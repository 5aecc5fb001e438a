/* handlers.h - the HTTP handlers of ember-server, by area:
 * server/ingest.c (agent protocol) and server/api.c (REST API, health,
 * metrics, UI assets). The route table is in server/routes.c. */
#ifndef EMBER_SERVER_HANDLERS_H
#define EMBER_SERVER_HANDLERS_H

#include "http.h"
#include "server.h"

/* The --ingest-tokens check of every ingest route, run by the HTTP layer
 * on the headers before any body byte is read (and again by the
 * handlers): true, or false with a 401 answer in resp. */
bool ingest_authorized(struct server *srv, const struct http_req *req, struct http_resp *resp);

void handle_ingest_batch(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_otlp_profiles(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_ingest_session_batch(struct server *srv, const struct http_req *req,
				 struct http_resp *resp);
void handle_ingest_metrics(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_symbols_missing(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_symbols_put(struct server *srv, const struct http_req *req, struct http_resp *resp);

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
void handle_metrics_query(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_metrics_names(struct server *srv, const struct http_req *req, struct http_resp *resp);
void handle_asset(struct server *srv, const struct http_req *req, struct http_resp *resp);

#endif
