/* recs_api.c - the recommendations routes (server/query/recommend.h):
 * GET .../recommendations?kind=cpu|cuda|all and
 * POST .../recommendations/{rec_id}/state {"state":"dismissed"|"active"}. */
#include <string.h>

#include "handlers.h"
#include "server/query/recommend.h"
#include "server/query/request.h"
#include "server/auth/authz.h"
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
