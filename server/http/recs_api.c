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

/* The project of a /project/{project_id}/... request, lower-cased, or
 * false with the error answered. */
static bool project_of(struct server *srv, const struct http_req *req, struct http_resp *resp,
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

void handle_recommendations(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!project_of(srv, req, resp, project))
		return;
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
	const char *kind = http_query_arg(req, "kind");
	if (!kind || !*kind)
		kind = "all";
	if (strcmp(kind, "cpu") != 0 && strcmp(kind, "cuda") != 0 && strcmp(kind, "all") != 0) {
		http_error(resp, 400, "kind: expected cpu, cuda or all");
		return;
	}
	struct buf err = { 0 };
	if (recs_query(srv->recs, srv->store, symbols_for_query(srv->symbols, project), project, kind,
		       now_unix_ms(), &resp->body, &err) < 0) {
		buf_reset(&resp->body);
		http_error(resp, 500, "%s", err.data ? err.data : "error");
	} else {
		__atomic_add_fetch(&srv->counters.queries, 1, __ATOMIC_RELAXED);
		http_json(resp, 200);
	}
	buf_free(&err);
}

void handle_recommendation_state(struct server *srv, const struct http_req *req,
				 struct http_resp *resp)
{
	char project[37];
	if (!project_of(srv, req, resp, project))
		return;
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
	struct buf err = { 0 };
	json_t *doc = req_load(req->body, req->body_len, &err);
	char *state = NULL;
	if (!doc || req_string(doc, "state", 16, &state, &err) < 0 || !state) {
		http_error(resp, 400, "%s", err.data ? err.data : "state: expected \"dismissed\" or \"active\"");
		goto out;
	}
	const char *actor = req->who && req->who->actor[0] ? req->who->actor : "anonymous";
	int rc = recs_set_state(srv->recs, project, req->params[1], state, actor, now_unix_ms(), &err);
	if (rc == -1) {
		http_error(resp, 400, "%s", err.data);
	} else if (rc < 0) {
		http_error(resp, 500, "%s", err.data ? err.data : "error");
	} else {
		struct jsonw w;
		http_json_begin(resp, &w);
		jsonw_begin_object(&w);
		jsonw_kv_str(&w, "id", req->params[1]);
		jsonw_kv_str(&w, "state", state);
		jsonw_end_object(&w);
		http_json_end(resp, &w, 200);
	}
out:
	free(state);
	json_decref(doc);
	buf_free(&err);
}

static const char *actor_of(const struct http_req *req)
{
	return req->who && req->who->actor[0] ? req->who->actor : "anonymous";
}

/* POST .../recommendations/regenerate and .../refresh: a new generation
 * now; answers it like GET .../recommendations?kind=all. */
static void regenerate(struct server *srv, const struct http_req *req, struct http_resp *resp, bool refresh)
{
	char project[37];
	if (!project_of(srv, req, resp, project))
		return;
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
	struct buf err = { 0 };
	struct symbols *sym = symbols_for_query(srv->symbols, project);
	int64_t now = now_unix_ms();
	if (recs_regenerate(srv->recs, srv->store, sym, project, refresh, actor_of(req), now, &err) < 0 ||
	    recs_query(srv->recs, srv->store, sym, project, "all", now, &resp->body, &err) < 0) {
		buf_reset(&resp->body);
		http_error(resp, 500, "%s", err.data ? err.data : "error");
	} else {
		http_json(resp, 200);
	}
	buf_free(&err);
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
	if (!project_of(srv, req, resp, project))
		return;
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
	struct buf err = { 0 };
	const char *tid = req->params[1];
	int rc = recs_suppress(srv->recs, srv->store, symbols_for_query(srv->symbols, project), project, tid,
			       on, actor_of(req), now_unix_ms(), &err);
	if (rc == -1) {
		http_error(resp, 400, "%s", err.data);
	} else if (rc == -3) {
		http_error(resp, 404, "%s", err.data);
	} else if (rc < 0) {
		http_error(resp, 500, "%s", err.data ? err.data : "error");
	} else {
		struct jsonw w;
		http_json_begin(resp, &w);
		jsonw_begin_object(&w);
		jsonw_kv_str(&w, "trace_id", tid);
		jsonw_kv_str(&w, "state", on ? "suppressed" : "active");
		jsonw_end_object(&w);
		http_json_end(resp, &w, 200);
	}
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
	if (!project_of(srv, req, resp, project))
		return;
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
	struct buf err = { 0 };
	if (recs_suppressed_json(srv->recs, project, &resp->body, &err) < 0) {
		buf_reset(&resp->body);
		http_error(resp, 500, "%s", err.data ? err.data : "error");
	} else {
		http_json(resp, 200);
	}
	buf_free(&err);
}

/* GET .../recommendations/history?limit=N (1..1000, default 100) */
void handle_recommendations_history(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	char project[37];
	if (!project_of(srv, req, resp, project))
		return;
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
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
	if (recs_history_json(srv->recs, project, (int)limit, &resp->body, &err) < 0) {
		buf_reset(&resp->body);
		http_error(resp, 500, "%s", err.data ? err.data : "error");
	} else {
		http_json(resp, 200);
	}
	buf_free(&err);
}

/* GET and PUT /public/api/v1/settings/recommendations */
void handle_recs_settings_get(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)req;
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
	recs_settings_json(srv->recs, &resp->body);
	http_json(resp, 200);
}

void handle_recs_settings_put(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!srv->recs) {
		http_error(resp, 503, "recommendations are not available on this server");
		return;
	}
	struct buf err = { 0 };
	json_t *doc = req_load(req->body, req->body_len, &err);
	if (!doc) {
		http_error(resp, 400, "%s", err.data ? err.data : "expected a JSON object");
		goto out;
	}
	int rc = recs_settings_put(srv->recs, doc, actor_of(req), now_unix_ms(), &err);
	if (rc == -1) {
		http_error(resp, 400, "%s", err.data);
	} else if (rc < 0) {
		http_error(resp, 500, "%s", err.data ? err.data : "error");
	} else {
		recs_settings_json(srv->recs, &resp->body);
		http_json(resp, 200);
	}
out:
	json_decref(doc);
	buf_free(&err);
}
