/* mcp_remote.c - the assistant's external MCP servers (contract in
 * mcp_remote.h). */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_remote.h"
#include "jsonpost.h"
#include "util.h"

#define MAX_ANSWER (4u << 20)
#define NAME_MAX_LEN 24

struct remote {
	char name[NAME_MAX_LEN + 1];
	char *endpoint, *token;
};

struct mcp_remotes {
	struct remote r[MCP_REMOTE_MAX];
	size_t n;
};

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (!n || n > NAME_MAX_LEN || strstr(s, "__"))
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
		      *p == '_'))
			return false;
	return true;
}

int mcp_remotes_open(const char *path, struct mcp_remotes **out, struct buf *err)
{
	*out = NULL;
	if (!path || !*path)
		return 0;
	json_error_t je;
	json_t *doc = json_load_file(path, 0, &je);
	if (!json_is_array(doc) || json_array_size(doc) > MCP_REMOTE_MAX) {
		buf_printf(err, "--assistant-mcp-servers-file %s: expected a JSON array of at most %d "
				"{\"name\",\"endpoint\",\"auth-token\"} (%s)",
			   path, MCP_REMOTE_MAX, doc ? "not an array, or too long" : je.text);
		json_decref(doc);
		return -1;
	}
	struct mcp_remotes *m = xcalloc(1, sizeof(*m));
	size_t i;
	json_t *e;
	json_array_foreach(doc, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *ep = json_string_value(json_object_get(e, "endpoint"));
		json_t *tok = json_object_get(e, "auth-token");
		if (!name || !name_ok(name) || !ep ||
		    (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0) || (tok && !json_is_string(tok))) {
			buf_printf(err, "--assistant-mcp-servers-file %s: server %zu: expected a name of 1 to %d letters, "
					"digits, - and _ (no \"__\"), an http(s) endpoint and an optional auth-token string",
				   path, i, NAME_MAX_LEN);
			json_decref(doc);
			mcp_remotes_free(m);
			return -1;
		}
		for (size_t j = 0; j < m->n; j++)
			if (strcmp(m->r[j].name, name) == 0) {
				buf_printf(err, "--assistant-mcp-servers-file %s: two servers are named %s", path, name);
				json_decref(doc);
				mcp_remotes_free(m);
				return -1;
			}
		struct remote *r = &m->r[m->n++];
		snprintf(r->name, sizeof(r->name), "%s", name);
		r->endpoint = xstrdup(ep);
		r->token = tok && *json_string_value(tok) ? xstrdup(json_string_value(tok)) : NULL;
	}
	json_decref(doc);
	*out = m;
	return 0;
}

void mcp_remotes_free(struct mcp_remotes *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++) {
		free_all(m->r[i].endpoint, m->r[i].token);
	}
	free(m);
}

/* --- one server ------------------------------------------------------------- */

/* The JSON-RPC response in an answer: the body, or the data of an SSE
 * event that holds one. */
static json_t *response_of(const struct buf *b)
{
	if (!b->data)
		return NULL;
	json_t *doc = json_loadb(b->data, b->len, 0, NULL);
	if (doc)
		return doc;
	const char *p = b->data;
	while ((p = strstr(p, "data:"))) {
		p += 5;
		const char *end = strchr(p, '\n');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		doc = json_loadb(p, n, 0, NULL);
		if (json_is_object(doc) && (json_object_get(doc, "result") || json_object_get(doc, "error")))
			return doc;
		json_decref(doc);
	}
	return NULL;
}

/* Sends one message; with id >= 0 reads its result. 0 with *result (a
 * new reference, NULL for a notification), or -1 with err. */
static int rpc(const struct remote *r, char session[160], const char *method, json_t *params, int id,
	       json_t **result, struct buf *err)
{
	*result = NULL;
	json_t *msg = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", method);
	if (params)
		json_object_set(msg, "params", params);
	if (id >= 0)
		json_object_set_new(msg, "id", json_integer(id));
	char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	h = curl_slist_append(h, "Accept: application/json, text/event-stream");
	h = curl_slist_append(h, "MCP-Protocol-Version: 2025-06-18");
	struct buf hdr = { 0 };
	if (r->token) {
		buf_printf(&hdr, "Authorization: Bearer %s", r->token);
		h = curl_slist_append(h, hdr.data);
		buf_reset(&hdr);
	}
	if (*session) {
		buf_printf(&hdr, "Mcp-Session-Id: %s", session);
		h = curl_slist_append(h, hdr.data);
	}
	struct json_answer a = { 0 };
	struct json_post post = { .url = r->endpoint, .body = text, .headers = h, .timeout_ms = 30000,
				  .max_answer = MAX_ANSWER, .want_header = "mcp-session-id" };
	int rc = -1;
	if (!text) {
		buf_puts(err, "out of memory");
		goto out;
	}
	CURLcode cc = json_post(&post, &a);
	long status = a.status;
	if (cc != CURLE_OK) {
		buf_printf(err, "MCP server %s: %s", r->name, a.over ? "answer too large" : curl_easy_strerror(cc));
		goto out;
	}
	if (a.header[0])
		snprintf(session, 160, "%s", a.header);
	if (id < 0) {
		rc = status >= 200 && status < 300 ? 0 : -1;
		if (rc < 0)
			buf_printf(err, "MCP server %s answered %ld to %s", r->name, status, method);
		goto out;
	}
	json_t *doc = status >= 200 && status < 300 ? response_of(&a.body) : NULL;
	json_t *res = json_object_get(doc, "result");
	if (!json_is_object(res)) {
		const char *m = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
		buf_printf(err, "MCP server %s: %s: %s", r->name, method,
			   m ? m : status >= 300 || status < 200 ? "HTTP error" : "no result");
		if (status >= 300 || status < 200)
			buf_printf(err, " %ld", status);
		json_decref(doc);
		goto out;
	}
	*result = json_incref(res);
	json_decref(doc);
	rc = 0;
out:
	curl_slist_free_all(h);
	buf_free(&hdr);
	buf_free(&a.body);
	free(text);
	return rc;
}

/* initialize + notifications/initialized: the session id, or -1. */
static int open_session(const struct remote *r, char session[160], struct buf *err)
{
	session[0] = 0;
	json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", "2025-06-18", "capabilities",
				   "clientInfo", "name", "ember-assistant", "version", "1");
	json_t *res = NULL;
	int rc = rpc(r, session, "initialize", params, 1, &res, err);
	json_decref(params);
	json_decref(res);
	if (rc == 0)
		rc = rpc(r, session, "notifications/initialized", NULL, -1, &res, err);
	return rc;
}

void mcp_remotes_tools(struct mcp_remotes *m, json_t *tools, struct buf *notes)
{
	for (size_t i = 0; m && i < m->n; i++) {
		const struct remote *r = &m->r[i];
		char session[160];
		struct buf err = { 0 };
		json_t *res = NULL;
		if (open_session(r, session, &err) < 0 || rpc(r, session, "tools/list", NULL, 2, &res, &err) < 0) {
			buf_printf(notes, "%s\n", err.data ? err.data : r->name);
			buf_free(&err);
			continue;
		}
		size_t j;
		json_t *t;
		unsigned k = 0;
		json_array_foreach(json_object_get(res, "tools"), j, t) {
			const char *name = json_string_value(json_object_get(t, "name"));
			json_t *schema = json_object_get(t, "inputSchema");
			if (!name || strlen(name) + strlen(r->name) + 2 > 64 || !json_is_object(schema) ||
			    k >= MCP_REMOTE_MAX_TOOLS)
				continue;
			char full[160];
			snprintf(full, sizeof(full), "%s__%s", r->name, name);
			const char *desc = json_string_value(json_object_get(t, "description"));
			struct buf d = { 0 };
			buf_printf(&d, "(MCP server %s) %s", r->name, desc ? desc : "");
			json_array_append_new(tools, json_pack("{s:s, s:s, s:O}", "name", full, "description", d.data,
							       "input_schema", schema));
			buf_free(&d);
			k++;
		}
		json_decref(res);
		buf_free(&err);
	}
}

static const struct remote *owner(const struct mcp_remotes *m, const char *name, const char **tool)
{
	const char *sep = name ? strstr(name, "__") : NULL;
	for (size_t i = 0; m && sep && i < m->n; i++)
		if (strlen(m->r[i].name) == (size_t)(sep - name) && strncmp(m->r[i].name, name, (size_t)(sep - name)) == 0) {
			*tool = sep + 2;
			return &m->r[i];
		}
	return NULL;
}

int mcp_remotes_owns(const struct mcp_remotes *m, const char *name)
{
	const char *tool;
	return owner(m, name, &tool) != NULL;
}

int mcp_remotes_call(struct mcp_remotes *m, const char *name, json_t *args, json_t **result, struct buf *err)
{
	const char *tool;
	const struct remote *r = owner(m, name, &tool);
	*result = NULL;
	if (!r) {
		buf_printf(err, "no MCP server has the tool %s", name);
		return -1;
	}
	char session[160];
	if (open_session(r, session, err) < 0)
		return -1;
	json_t *params = json_pack("{s:s, s:O}", "name", tool, "arguments", args);
	int rc = rpc(r, session, "tools/call", params, 3, result, err);
	json_decref(params);
	return rc;
}
