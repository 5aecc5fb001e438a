/* assistant_api.c - the AI assistant (docs/assistant.md):
 * POST /public/api/v1/project/{project_id}/assistant runs a tool-calling
 * loop: the model (server/llm/llm.h) reads the conversation and the
 * catalogue of ember's MCP tools (mcp_tools_list), each tool call it asks
 * for runs in-process through mcp_tool_call as the caller (the caller's
 * permissions apply: a project it may not read is a tool error), and the
 * result goes back to the model, until it answers without a tool call, or
 * ASSISTANT_MAX_STEPS model calls, or ASSISTANT_MAX_INPUT_TOKENS input
 * tokens in this request. Every tool call and its result are in the
 * answer. GET /public/api/v1/assistant/config says whether the server has
 * an LLM (the UI shows the assistant only then).
 *
 * Request: {"messages":[{"role":"user"|"assistant","content":"..."}],
 * "context":"..." (optional: what the user is looking at, e.g. a
 * flamegraph frame), "max_steps":N (optional, 1..ASSISTANT_MAX_STEPS)}.
 * Answer: {"answer","provider","model","stopped":"done"|"max_steps"|
 * "token_budget","steps":[{"step","tool","arguments","is_error",
 * "result"}],"usage":{"input_tokens","output_tokens","model_calls"}}.
 * A provider failure is a 502 and a token-limit refusal a 429, with the
 * steps run before it.
 */
#include <stdlib.h>
#include <string.h>

#include "handlers.h"
#include "jsonw.h"
#include "mcp.h"
#include "server/auth/authz.h"
#include "server/llm/llm.h"
#include "server/llm/mcp_remote.h"
#include "server/query/request.h"
#include "server/store/projects.h"
#include "util.h"

#define ASSISTANT_MAX_STEPS 8
#define ASSISTANT_MAX_INPUT_TOKENS 400000
#define ASSISTANT_MAX_MESSAGES 64
#define ASSISTANT_MAX_CONTENT (32u * 1024u)
#define ASSISTANT_TOOL_CHARS 12000 /* a tool's text the model reads */
#define ASSISTANT_ANSWER_TOKENS 2048

void handle_assistant_config(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)req;
	struct buf status = { 0 };
	llm_status_json(srv->llm, &status);
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	jsonw_kv_bool(&w, "enabled", srv->llm != NULL);
	jsonw_kv_u64(&w, "max_steps", ASSISTANT_MAX_STEPS);
	jsonw_key(&w, "llm");
	jsonw_raw(&w, status.data, status.len);
	jsonw_end_object(&w);
	http_json_end(resp, &w, 200);
	buf_free(&status);
}

/* The conversation of the request, validated, as llm.h messages. */
static json_t *conversation(const json_t *doc, struct buf *err)
{
	json_t *msgs = json_object_get(doc, "messages");
	if (!json_is_array(msgs) || !json_array_size(msgs) || json_array_size(msgs) > ASSISTANT_MAX_MESSAGES) {
		buf_printf(err, "messages: expected an array of 1 to %d messages", ASSISTANT_MAX_MESSAGES);
		return NULL;
	}
	json_t *out = json_array();
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		json_t *c = json_object_get(m, "content");
		if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)) {
			buf_printf(err, "messages[%zu].role: expected \"user\" or \"assistant\"", i);
			json_decref(out);
			return NULL;
		}
		if (!json_is_string(c) || json_string_length(c) > ASSISTANT_MAX_CONTENT) {
			buf_printf(err, "messages[%zu].content: expected a string of at most %u bytes", i,
				   ASSISTANT_MAX_CONTENT);
			json_decref(out);
			return NULL;
		}
		json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", c));
	}
	const char *last = json_string_value(json_object_get(json_array_get(out, json_array_size(out) - 1), "role"));
	if (strcmp(last, "user") != 0) {
		buf_puts(err, "messages: the last message must be the user's");
		json_decref(out);
		return NULL;
	}
	return out;
}

/* The MCP catalogue as llm.h tools. */
static json_t *tools_of(void)
{
	json_t *list = mcp_tools_list(), *out = json_array(), *t;
	size_t i;
	json_array_foreach(list, i, t)
		json_array_append_new(out, json_pack("{s:O, s:O, s:O}", "name", json_object_get(t, "name"),
						     "description", json_object_get(t, "description"), "input_schema",
						     json_object_get(t, "inputSchema")));
	json_decref(list);
	return out;
}

/* The text of a CallToolResult. */
static void result_text(const json_t *res, struct buf *out)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(res, "content"), i, c) {
		const char *t = json_string_value(json_object_get(c, "text"));
		if (t) {
			if (out->len)
				buf_puts(out, "\n");
			buf_puts(out, t);
		}
	}
	if (!out->data)
		buf_puts(out, "");
}

void handle_assistant(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	const char *project = req->params[0];
	if (!uuid_valid(project) || !projects_exists(srv->projects, project)) {
		http_error(resp, 404, "no project with id %.40s", project);
		return;
	}
	if (!srv->llm) {
		http_error(resp, 503, "the assistant needs an LLM: start ember-server with --llm-provider "
				      "(docs/assistant.md)");
		return;
	}
	const struct principal *who = req->who ? req->who : srv->auth ? NULL : &principal_open;
	if (!who) {
		http_error(resp, 401, "sign in to use the assistant");
		return;
	}
	struct buf err = { 0 };
	json_t *doc = req_load(req->body, req->body_len, &err);
	json_t *conv = doc ? conversation(doc, &err) : NULL;
	if (!conv) {
		http_error(resp, 400, "%s", err.data ? err.data : "expected a JSON object");
		json_decref(doc);
		buf_free(&err);
		return;
	}
	unsigned max_steps = ASSISTANT_MAX_STEPS;
	json_t *ms = json_object_get(doc, "max_steps");
	if (ms && (!json_is_integer(ms) || json_integer_value(ms) < 1 ||
		   json_integer_value(ms) > ASSISTANT_MAX_STEPS)) {
		http_error(resp, 400, "max_steps: expected an integer from 1 to %d", ASSISTANT_MAX_STEPS);
		goto out;
	}
	if (ms)
		max_steps = (unsigned)json_integer_value(ms);
	json_t *ctx = json_object_get(doc, "context");
	if (ctx && !json_is_null(ctx) && (!json_is_string(ctx) || json_string_length(ctx) > ASSISTANT_MAX_CONTENT)) {
		http_error(resp, 400, "context: expected a string of at most %u bytes", ASSISTANT_MAX_CONTENT);
		goto out;
	}
	struct buf sys = { 0 };
	buf_printf(&sys,
		   "You are the AI assistant of ember, a continuous CPU and GPU profiler. Answer questions about "
		   "the profiling data of project %s with the tools, which read it; pass \"project\": \"%s\" "
		   "unless the user names another. Stacks run root (caller) to leaf. Name functions, source "
		   "locations and shares from the tool results; say what to change and what it would save. "
		   "Be concise.",
		   project, project);
	if (json_is_string(ctx))
		buf_printf(&sys, "\n\nThe user is looking at this (from the UI):\n%s", json_string_value(ctx));
	json_t *tools = tools_of();
	struct buf notes = { 0 };
	mcp_remotes_tools(srv->mcp_remotes, tools, &notes);
	/* Every tool call and its result, as the answer's "steps". */
	struct buf steps = { 0 }, answer = { 0 };
	struct jsonw sw;
	jsonw_init(&sw, &steps);
	jsonw_begin_array(&sw);
	const char *stopped = "max_steps";
	char model[LLM_MAX_MODEL];
	llm_model(srv->llm, false, model);
	uint64_t in = 0, outt = 0;
	unsigned calls = 0, nsteps = 0;
	int status = 200;
	buf_puts(&answer, "");
	for (unsigned s = 0; s < max_steps; s++) {
		if (in >= ASSISTANT_MAX_INPUT_TOKENS) {
			stopped = "token_budget";
			break;
		}
		struct llm_reply r;
		buf_reset(&err);
		int rc = llm_chat(srv->llm, model, sys.data, conv, tools, ASSISTANT_ANSWER_TOKENS, false, &r, &err);
		if (rc != LLM_OK) {
			status = rc == LLM_REFUSED ? 429 : 502;
			stopped = "error";
			break;
		}
		calls++;
		in += r.input_tokens;
		outt += r.output_tokens;
		buf_reset(&answer);
		buf_puts(&answer, r.text);
		if (!json_array_size(r.tool_calls)) {
			stopped = "done";
			llm_reply_free(&r);
			break;
		}
		json_array_append_new(conv, json_pack("{s:s, s:s, s:O}", "role", "assistant", "content", r.text,
						      "tool_calls", r.tool_calls));
		size_t i;
		json_t *c;
		json_array_foreach(r.tool_calls, i, c) {
			const char *name = json_string_value(json_object_get(c, "name"));
			json_t *args = json_deep_copy(json_object_get(c, "arguments"));
			if (!json_is_object(args)) {
				json_decref(args);
				args = json_object();
			}
			json_t *res = NULL;
			struct buf text = { 0 }, terr = { 0 };
			bool is_error = true;
			char *a = json_dumps(args, JSON_COMPACT);
			if (a && strlen(a) > MCP_MAX_ARGS) {
				buf_printf(&text, "arguments: %zu bytes, at most %u", strlen(a), MCP_MAX_ARGS);
			} else if (mcp_remotes_owns(srv->mcp_remotes, name)) {
				/* An external server's tool: it answers with its own
				 * credentials (auth-token), not the caller's. */
				if (mcp_remotes_call(srv->mcp_remotes, name, args, &res, &terr) < 0)
					buf_printf(&text, "%s", terr.data ? terr.data : "the MCP server failed");
				else {
					result_text(res, &text);
					is_error = json_is_true(json_object_get(res, "isError"));
				}
			} else if (mcp_tool_call(srv, who, name, args, &res, &terr) < 0) {
				buf_printf(&text, "%s", terr.data ? terr.data : "unknown tool");
			} else {
				result_text(res, &text);
				is_error = json_is_true(json_object_get(res, "isError"));
			}
			nsteps++;
			jsonw_begin_object(&sw);
			jsonw_kv_u64(&sw, "step", s + 1);
			jsonw_kv_str(&sw, "tool", name);
			jsonw_key(&sw, "arguments");
			if (a)
				jsonw_raw(&sw, a, strlen(a));
			else
				jsonw_raw(&sw, "{}", 2);
			jsonw_kv_bool(&sw, "is_error", is_error);
			jsonw_kv_str(&sw, "result", text.data);
			jsonw_end_object(&sw);
			if (text.len > ASSISTANT_TOOL_CHARS) {
				text.len = ASSISTANT_TOOL_CHARS;
				text.data[text.len] = 0;
				buf_puts(&text, "\n(truncated)");
			}
			json_array_append_new(conv, json_pack("{s:s, s:O, s:s, s:s}", "role", "tool", "tool_call_id",
							      json_object_get(c, "id"), "name", name, "content",
							      text.data));
			free(a);
			json_decref(args);
			json_decref(res);
			buf_free(&text);
			buf_free(&terr);
		}
		llm_reply_free(&r);
	}
	(void)nsteps;
	jsonw_end_array(&sw);
	if (jsonw_finish(&sw) != 0) {
		buf_reset(&steps);
		buf_puts(&steps, "[]");
	}
	buf_reset(&resp->body);
	struct jsonw w;
	http_json_begin(resp, &w);
	jsonw_begin_object(&w);
	if (status != 200)
		jsonw_kv_str(&w, "error", err.data ? err.data : "error");
	jsonw_kv_str(&w, "answer", answer.data);
	jsonw_kv_str(&w, "provider", llm_provider_name(srv->llm));
	jsonw_kv_str(&w, "model", model);
	jsonw_kv_str(&w, "stopped", stopped);
	jsonw_key(&w, "steps");
	jsonw_raw(&w, steps.data, steps.len);
	if (notes.len)
		jsonw_kv_str(&w, "notes", notes.data);
	jsonw_key(&w, "usage");
	jsonw_begin_object(&w);
	jsonw_kv_u64(&w, "input_tokens", in);
	jsonw_kv_u64(&w, "output_tokens", outt);
	jsonw_kv_u64(&w, "model_calls", calls);
	jsonw_end_object(&w);
	jsonw_end_object(&w);
	http_json_end(resp, &w, status);
	json_decref(tools);
	buf_free(&notes);
	buf_free(&steps);
	buf_free(&answer);
	buf_free(&sys);
out:
	json_decref(conv);
	json_decref(doc);
	buf_free(&err);
}

/* GET/PUT /public/api/v1/settings/llm (admin:settings:read/update): the
 * models, token limits and the recommendations' LLM mode (llm.h); never
 * the key. */
void handle_llm_settings_get(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)req;
	llm_settings_json(srv->llm, &resp->body);
	buf_puts(&resp->body, "\n");
	http_json(resp, 200);
}

void handle_llm_settings_put(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!srv->llm) {
		http_error(resp, 409, "this server has no LLM: start it with --llm-provider (docs/assistant.md)");
		return;
	}
	struct buf err = { 0 };
	json_t *doc = req_load(req->body, req->body_len, &err);
	int rc = doc ? llm_settings_put(srv->llm, doc, &err) : -1;
	if (rc < 0) {
		http_error(resp, rc == -2 ? 500 : 400, "%s", err.data ? err.data : "expected a JSON object");
	} else {
		llm_settings_json(srv->llm, &resp->body);
		buf_puts(&resp->body, "\n");
		http_json(resp, 200);
	}
	json_decref(doc);
	buf_free(&err);
}
