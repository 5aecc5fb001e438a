/* recs_api.c - the recommendations routes (server/query/recommend.h):
 * GET .../recommendations?kind=cpu|cuda|all and
 * POST .../recommendations/{rec_id}/state {"state":"dismissed"|"active"},
 * the lifecycle (regenerate, refresh, suppress a hot trace, history) and
 * the settings (GET/PUT /public/api/v1/settings/recommendations). */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "server/query/recommend.h"
#include "server/query/request.h"
#include "server/auth/authz.h"
#include "jsonw.h"
#include "util.h"

/* Whether this server has recommendations, else false with 503 answered. */
static bool recs_ready(struct server *srv, struct http_resp *resp)
{
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return false;
	}
	return true;
}

/* The project of a /project/{project_id}/... request on a server with
 * recommendations, or false with the error answered. */
static bool recs_project(struct server *srv, const struct http_req *req, struct http_resp *resp,
			 char out[37])
{
	return handler_project(srv, req, resp, out) && recs_ready(srv, resp);
}

/* Answers what a query wrote into resp->body (rc >= 0), or 500 with err;
 * frees err. Returns whether it succeeded. */
static bool answer_body(struct http_resp *resp, int rc, struct buf *err)
{
	if (rc < 0) {
		buf_reset(&resp->body);
		http_error(resp, 500, "%s", err->data ? err->data : "error");
	} else {
		http_json(resp, 200);
	}
	buf_free(err);
	return rc >= 0;
}

/* Answers a failed change (rc < 0): -1 400 (a bad request), -3 404 (no
 * such thing), 503 when the database could not be reached, else 500, with
 * err's message. Returns whether rc failed. */
static bool change_failed(struct server *srv, struct http_resp *resp, int rc, const struct buf *err)
{
	if (rc == -1) {
		http_error(resp, 400, "%s", err->data);
	} else if (rc == -3) {
		http_error(resp, 404, "%s", err->data);
	} else if (rc < 0 && recs_unavailable(srv->recs)) {
		http_error(resp, 503, "the recommendations' database cannot be reached: %s",
			   err->data ? err->data : "error");
		resp->retry_after = "5";
	} else if (rc < 0) {
		http_error(resp, 500, "%s", err->data ? err->data : "error");
	}
	return rc < 0;
}

/* Answers {key: id, "state": state}. */
static void answer_state(struct http_resp *resp, const char *key, const char *id, const char *state)
{
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, key, id);
	jsonw_kv_str(&w, "state", state);
	jsonw_end_object(&w);
	http_json_end(resp, &w, 200);
}

static const char *actor_of(const struct http_req *req)
{
	return req->who && req->who->actor[0] ? req->who->actor : "anonymous";
}

void handle_recommendations(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!recs_project(srv, req, resp, project))
		return;
	const char *kind = http_query_arg(req, "kind");
	if (!kind || !*kind)
		kind = "all";
	if (strcmp(kind, "cpu") != 0 && strcmp(kind, "cuda") != 0 && strcmp(kind, "all") != 0) {
		http_error(resp, 400, "kind: expected cpu, cuda or all");
		return;
	}
	struct buf err = { 0 };
	int rc = recs_query(srv->recs, srv->store, symbols_for_query(srv->symbols, project), project,
			    kind, now_unix_ms(), &resp->body, &err);
	if (answer_body(resp, rc, &err))
		__atomic_add_fetch(&srv->counters.queries, 1, __ATOMIC_RELAXED);
}

void handle_recommendation_state(struct server *srv, const struct http_req *req,
				 struct http_resp *resp)
{
	char project[37];
	if (!recs_project(srv, req, resp, project))
		return;
	struct buf err = { 0 };
	json_t *doc = req_load(req->body, req->body_len, &err);
	char *state = NULL;
	if (!doc || req_string(doc, "state", 16, &state, &err) < 0 || !state) {
		http_error(resp, 400, "%s", err.data ? err.data : "state: expected \"dismissed\" or \"active\"");
		goto out;
	}
	int rc = recs_set_state(srv->recs, project, req->params[1], state, actor_of(req), now_unix_ms(),
				&err);
	if (!change_failed(srv, resp, rc, &err))
		answer_state(resp, "id", req->params[1], state);
out:
	free(state);
	json_decref(doc);
	buf_free(&err);
}

/* POST .../recommendations/regenerate and .../refresh: a new generation
 * now; answers it like GET .../recommendations?kind=all. */
static void regenerate(struct server *srv, const struct http_req *req, struct http_resp *resp, bool refresh)
{
	char project[37];
	if (!recs_project(srv, req, resp, project))
		return;
	struct buf err = { 0 };
	struct symbols *sym = symbols_for_query(srv->symbols, project);
	int64_t now = now_unix_ms();
	int rc = recs_regenerate(srv->recs, srv->store, sym, project, refresh, actor_of(req), now, &err);
	if (rc >= 0)
		rc = recs_query(srv->recs, srv->store, sym, project, "all", now, &resp->body, &err);
	answer_body(resp, rc, &err);
}

void handle_recommendations_regenerate(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	regenerate(srv, req, resp, false);
}

void handle_recommendations_refresh(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	regenerate(srv, req, resp, true);
}

/* POST (suppress) or DELETE (unsuppress) .../recommendations/hot-traces/{trace_id}/suppress */
static void suppress(struct server *srv, const struct http_req *req, struct http_resp *resp, bool on)
{
	char project[37];
	if (!recs_project(srv, req, resp, project))
		return;
	struct buf err = { 0 };
	const char *tid = req->params[1];
	int rc = recs_suppress(srv->recs, srv->store, symbols_for_query(srv->symbols, project), project, tid,
			       on, actor_of(req), now_unix_ms(), &err);
	if (!change_failed(srv, resp, rc, &err))
		answer_state(resp, "trace_id", tid, on ? "suppressed" : "active");
	buf_free(&err);
}

void handle_hot_trace_suppress(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	suppress(srv, req, resp, true);
}

void handle_hot_trace_unsuppress(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	suppress(srv, req, resp, false);
}

void handle_recommendations_suppressed(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!recs_project(srv, req, resp, project))
		return;
	struct buf err = { 0 };
	answer_body(resp, recs_suppressed_json(srv->recs, project, &resp->body, &err), &err);
}

/* GET .../recommendations/history?limit=N (1..1000, default 100) */
void handle_recommendations_history(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!recs_project(srv, req, resp, project))
		return;
	long limit = 100;
	const char *l = http_query_arg(req, "limit");
	if (l && *l) {
		char *end = NULL;
		limit = strtol(l, &end, 10);
		if (!end || *end || limit < 1 || limit > 1000) {
			http_error(resp, 400, "limit: expected a number from 1 to 1000");
			return;
		}
	}
	struct buf err = { 0 };
	answer_body(resp, recs_history_json(srv->recs, project, (int)limit, &resp->body, &err), &err);
}

/* GET and PUT /public/api/v1/settings/recommendations */
void handle_recs_settings_get(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)req;
	if (!recs_ready(srv, resp))
		return;
	recs_settings_json(srv->recs, &resp->body);
	http_json(resp, 200);
}

void handle_recs_settings_put(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!recs_ready(srv, resp))
		return;
	struct buf err = { 0 };
	json_t *doc = req_load(req->body, req->body_len, &err);
	if (!doc) {
		http_error(resp, 400, "%s", err.data ? err.data : "expected a JSON object");
		goto out;
	}
	int rc = recs_settings_put(srv->recs, doc, actor_of(req), now_unix_ms(), &err);
	if (!change_failed(srv, resp, rc, &err)) {
		recs_settings_json(srv->recs, &resp->body);
		http_json(resp, 200);
	}
out:
	json_decref(doc);
	buf_free(&err);
}
