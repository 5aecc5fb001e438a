/* mcp.c - MCP's Streamable HTTP transport and JSON-RPC 2.0 dispatch
 * (contract in mcp.h); the tools are in mcp_tools.c. */
#include "mcp.h"

#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "handlers.h"
#include "http.h"
#include "log.h"
#include "server.h"
#include "server/auth/authz.h"
#include "util.h"
#include "version.h"

#define MCP_MAX_HOSTS 32
#define SESSION_ID_LEN 32 /* hex characters: 128 random bits */

/* JSON-RPC error codes. */
#define RPC_PARSE_ERROR -32700
#define RPC_INVALID_REQUEST -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS -32602
#define RPC_RESOURCE_NOT_FOUND -32002

struct mcp_session {
	bool used;
	char id[SESSION_ID_LEN + 1];
	char version[16];
	/* Who opened it: a session answers only the credential that opened it. */
	char owner[2 * IDENTITY_ID_LEN + 8];
	int64_t last_ms;
	uint64_t last_use; /* tick of its last use: the least recent goes first */
};

struct mcp {
	char *hosts[MCP_MAX_HOSTS]; /* lower-case host names, without port */
	size_t nhosts;
	bool any_host;
	pthread_mutex_t lock; /* guards sessions and tick */
	uint64_t tick;
	struct mcp_session sessions[MCP_MAX_SESSIONS];
};

static void add_host(struct mcp *m, const char *h, size_t n)
{
	while (n && (*h == ' ' || *h == '\t'))
		h++, n--;
	while (n && (h[n - 1] == ' ' || h[n - 1] == '\t'))
		n--;
	if (n == 0 || m->nhosts == MCP_MAX_HOSTS)
		return;
	if (n == 1 && *h == '*') {
		m->any_host = true;
		return;
	}
	/* "[::1]" and "::1" are the same host. */
	if (n >= 2 && h[0] == '[' && h[n - 1] == ']')
		h++, n -= 2;
	char *s = xstrndup(h, n);
	for (char *p = s; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	m->hosts[m->nhosts++] = s;
}

struct mcp *mcp_new(const char *allowed_hosts, const char *listen)
{
	struct mcp *m = xcalloc(1, sizeof(*m));
	pthread_mutex_init(&m->lock, NULL);
	add_host(m, "localhost", 9);
	add_host(m, "127.0.0.1", 9);
	add_host(m, "::1", 3);
	if (listen && *listen) {
		/* host:port, [v6]:port */
		const char *end = listen[0] == '[' ? strchr(listen, ']') : strrchr(listen, ':');
		size_t n = end ? (size_t)(end - listen) + (listen[0] == '[') : strlen(listen);
		char host[256];
		snprintf(host, sizeof(host), "%.*s", (int)MIN(n, sizeof(host) - 1), listen);
		if (strcmp(host, "0.0.0.0") && strcmp(host, "[::]") && strcmp(host, "::") && *host)
			add_host(m, host, strlen(host));
	}
	for (const char *p = allowed_hosts; p && *p;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		add_host(m, p, n);
		p += n + (comma != NULL);
	}
	return m;
}

void mcp_free(struct mcp *m)
{
	if (!m)
		return;
	free_each((void *const *)m->hosts, m->nhosts);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* host is a Host header ("name:port", "[v6]:port") or an Origin
 * ("scheme://name:port"). */
bool mcp_host_allowed(const struct mcp *m, const char *host)
{
	if (!host || !*host)
		return false;
	if (m->any_host)
		return true;
	const char *scheme = strstr(host, "://");
	if (scheme)
		host = scheme + 3;
	size_t n;
	if (host[0] == '[') {
		const char *close = strchr(host, ']');
		if (!close)
			return false;
		host++;
		n = (size_t)(close - host);
	} else {
		n = strcspn(host, ":/");
	}
	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i < m->nhosts; i++)
		if (strlen(m->hosts[i]) == n && strncasecmp(m->hosts[i], host, n) == 0)
			return true;
	return false;
}

/* What a session is bound to: the kind of credential and its ids. */
static void owner_of(const struct principal *who, char *out, size_t n)
{
	if (!who)
		snprintf(out, n, "none");
	else
		snprintf(out, n, "%d/%s/%s", (int)who->kind, who->user_id, who->token_id);
}

static int session_open(struct mcp *m, const struct principal *who, const char *version,
			char id[SESSION_ID_LEN + 1])
{
	uint8_t raw[SESSION_ID_LEN / 2];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -1;
	hex_encode(raw, sizeof(raw), id);
	id[SESSION_ID_LEN] = 0;
	int64_t now = now_unix_ms();
	pthread_mutex_lock(&m->lock);
	/* A free slot, an expired one, or the least recently used. */
	struct mcp_session *slot = NULL;
	for (size_t i = 0; i < MCP_MAX_SESSIONS; i++) {
		struct mcp_session *s = &m->sessions[i];
		if (!s->used || now - s->last_ms > MCP_SESSION_IDLE_MS) {
			slot = s;
			break;
		}
		if (!slot || s->last_use < slot->last_use)
			slot = s;
	}
	memset(slot, 0, sizeof(*slot));
	slot->used = true;
	memcpy(slot->id, id, SESSION_ID_LEN + 1);
	snprintf(slot->version, sizeof(slot->version), "%s", version);
	owner_of(who, slot->owner, sizeof(slot->owner));
	slot->last_ms = now;
	slot->last_use = ++m->tick;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* Finds (and touches) the session id of who; with end, forgets it.
 * Copies its protocol version. False when there is none. */
static bool session_find(struct mcp *m, const struct principal *who, const char *id, bool end,
			 char version[16])
{
	if (strlen(id) != SESSION_ID_LEN)
		return false;
	char owner[sizeof(m->sessions[0].owner)];
	owner_of(who, owner, sizeof(owner));
	int64_t now = now_unix_ms();
	bool found = false;
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < MCP_MAX_SESSIONS; i++) {
		struct mcp_session *s = &m->sessions[i];
		if (!s->used || strcmp(s->id, id) != 0)
			continue;
		if (now - s->last_ms > MCP_SESSION_IDLE_MS) {
			s->used = false;
			break;
		}
		if (strcmp(s->owner, owner) != 0)
			break;
		found = true;
		if (version)
			memcpy(version, s->version, 16);
		s->last_ms = now;
		s->last_use = ++m->tick;
		if (end)
			s->used = false;
		break;
	}
	pthread_mutex_unlock(&m->lock);
	return found;
}

/* Who the tools run as: with no auth (in-process tests) every request is
 * open, as in the rest of the server. */
static const struct principal *caller(struct server *srv, const struct http_req *req)
{
	if (req->who)
		return req->who;
	return srv->auth ? NULL : &principal_open;
}

/* Host and Origin against the allowlist; false with 403 answered. */
static bool check_host(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!srv->mcp) {
		http_error(resp, 404, "this server has no MCP endpoint");
		return false;
	}
	const char *host = http_header(req, "Host");
	if (!mcp_host_allowed(srv->mcp, host)) {
		http_error(resp, 403,
			   "Forbidden: Host header is not allowed: \"%.100s\" (/mcp answers only the "
			   "hosts of --mcp-allowed-hosts, against DNS rebinding)",
			   host ? host : "");
		return false;
	}
	const char *origin = http_header(req, "Origin");
	if (origin && strcmp(origin, "null") != 0 && !mcp_host_allowed(srv->mcp, origin)) {
		http_error(resp, 403,
			   "Origin \"%.100s\" is not allowed for /mcp; allow its host with "
			   "--mcp-allowed-hosts",
			   origin);
		return false;
	}
	if (origin && strcmp(origin, "null") == 0) {
		http_error(resp, 403, "Origin \"null\" is not allowed for /mcp");
		return false;
	}
	return true;
}

static json_t *rpc_error(json_t *id, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static json_t *rpc_error(json_t *id, int code, const char *fmt, ...)
{
	struct buf msg = { 0 };
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&msg, fmt, ap);
	va_end(ap);
	json_t *e = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
			      id ? id : json_null(), "error", "code", code, "message",
			      msg.data ? msg.data : "");
	buf_free(&msg);
	return e;
}

static json_t *rpc_result(json_t *id, json_t *result /* stolen */)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static const char *const server_instructions =
	"ember is a continuous CPU/GPU profiler. To find a bottleneck: list_projects, then "
	"top_entities (which hosts, processes, containers use the CPU), then top_functions and "
	"flamegraph with a CEL filter narrowing to the workload (e.g. "
	"process.executable.name == \"python3\"), sandwich for one function's callers and callees, "
	"diff to compare two time ranges, timeseries to see when. GPU work: gpu_kernels, "
	"gpu_flamegraph, gpu_metrics. Every tool takes project (name or id; default \"default\"), "
	"filter (CEL) and range (\"15m\", \"1h\", \"7d\"; default 1h) or start/end.";

static bool version_supported(const char *v)
{
	return v && (strcmp(v, MCP_VERSION_LATEST) == 0 || strcmp(v, MCP_VERSION_PREVIOUS) == 0 ||
		     strcmp(v, MCP_VERSION_OLDER) == 0);
}

struct dispatch {
	struct server *srv;
	const struct principal *who;
	const char *version; /* the session's */
};

/* Handles one request (id not NULL) or notification: the response, or
 * NULL for none. */
static json_t *dispatch(struct dispatch *d, const char *method, json_t *id, json_t *params)
{
	if (!id) {
		/* notifications/initialized, notifications/cancelled, ...: nothing
		 * to answer; unknown ones are ignored, as JSON-RPC asks. */
		return NULL;
	}
	if (params && !json_is_object(params))
		return rpc_error(id, RPC_INVALID_PARAMS, "params: expected an object");
	if (strcmp(method, "ping") == 0)
		return rpc_result(id, json_object());
	if (strcmp(method, "initialize") == 0)
		return rpc_error(id, RPC_INVALID_REQUEST,
				 "initialize: this session is already initialized");
	if (strcmp(method, "tools/list") == 0)
		return rpc_result(id, json_pack("{s:o}", "tools", mcp_tools_list()));
	if (strcmp(method, "tools/call") == 0) {
		json_t *name = params ? json_object_get(params, "name") : NULL;
		if (!json_is_string(name))
			return rpc_error(id, RPC_INVALID_PARAMS, "params.name: expected the tool's name");
		json_t *args = json_object_get(params, "arguments");
		if (args && !json_is_null(args) && !json_is_object(args))
			return rpc_error(id, RPC_INVALID_PARAMS, "params.arguments: expected an object");
		if (args) {
			char *dump = json_dumps(args, JSON_COMPACT);
			size_t n = dump ? strlen(dump) : 0;
			free(dump);
			if (n > MCP_MAX_ARGS)
				return rpc_error(id, RPC_INVALID_PARAMS,
						 "params.arguments: %zu bytes, at most %u", n, MCP_MAX_ARGS);
		}
		json_t *result = NULL;
		struct buf err = { 0 };
		int rc = mcp_tool_call(d->srv, d->who, json_string_value(name),
				       json_is_object(args) ? args : NULL, &result, &err);
		json_t *out = rc < 0 ? rpc_error(id, RPC_INVALID_PARAMS, "%s", err.data ? err.data : "")
				     : rpc_result(id, result);
		buf_free(&err);
		return out;
	}
	if (strcmp(method, "resources/list") == 0)
		return rpc_result(id, json_pack("{s:o}", "resources",
						mcp_resources_list(d->srv, d->who)));
	if (strcmp(method, "resources/templates/list") == 0)
		return rpc_result(id, json_pack("{s:o}", "resourceTemplates", mcp_resource_templates()));
	if (strcmp(method, "resources/read") == 0) {
		json_t *uri = params ? json_object_get(params, "uri") : NULL;
		if (!json_is_string(uri))
			return rpc_error(id, RPC_INVALID_PARAMS, "params.uri: expected a string");
		json_t *result = NULL;
		struct buf err = { 0 };
		int rc = mcp_resource_read(d->srv, d->who, json_string_value(uri), &result, &err);
		json_t *out = rc < 0 ? rpc_error(id, RPC_RESOURCE_NOT_FOUND, "%s", err.data ? err.data : "")
				     : rpc_result(id, result);
		if (rc < 0)
			json_object_set_new(json_object_get(out, "error"), "data",
					    json_pack("{s:O}", "uri", uri));
		buf_free(&err);
		return out;
	}
	return rpc_error(id, RPC_METHOD_NOT_FOUND, "Method not found: %.100s", method);
}

/* Checks the envelope of one message. Fills *method, *id (NULL for a
 * notification), *params; a client's response (result or error, no
 * method) sets *method NULL. Returns NULL, or the error response. */
static json_t *envelope(json_t *msg, const char **method, json_t **id, json_t **params)
{
	*method = NULL;
	*id = NULL;
	*params = NULL;
	if (!json_is_object(msg))
		return rpc_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: expected an object");
	json_t *idv = json_object_get(msg, "id");
	bool id_ok = !idv || json_is_string(idv) || json_is_integer(idv);
	json_t *ver = json_object_get(msg, "jsonrpc");
	if (!json_is_string(ver) || strcmp(json_string_value(ver), "2.0") != 0)
		return rpc_error(id_ok ? idv : NULL, RPC_INVALID_REQUEST,
				 "Invalid Request: jsonrpc must be \"2.0\"");
	if (!id_ok)
		return rpc_error(NULL, RPC_INVALID_REQUEST,
				 "Invalid Request: id must be a string or an integer");
	json_t *m = json_object_get(msg, "method");
	if (!m) {
		if (idv && (json_object_get(msg, "result") || json_object_get(msg, "error")))
			return NULL; /* a response to a request of ours: there are none */
		return rpc_error(idv, RPC_INVALID_REQUEST, "Invalid Request: method is missing");
	}
	if (!json_is_string(m) || !*json_string_value(m))
		return rpc_error(idv, RPC_INVALID_REQUEST, "Invalid Request: method must be a string");
	*method = json_string_value(m);
	*id = idv;
	*params = json_object_get(msg, "params");
	return NULL;
}

static void add_session_header(struct http_resp *resp, const char *id)
{
	http_add_header(resp, "Mcp-Session-Id", "%s", id);
}

/* initialize: opens a session and answers with the negotiated version. */
static void initialize(struct server *srv, const struct principal *who, json_t *id,
		       json_t *params, struct http_resp *resp)
{
	json_t *pv = json_is_object(params) ? json_object_get(params, "protocolVersion") : NULL;
	if (!json_is_string(pv)) {
		http_json_doc(resp, 400, rpc_error(id, RPC_INVALID_PARAMS,
						 "params.protocolVersion: expected a string"));
		return;
	}
	const char *version = version_supported(json_string_value(pv)) ? json_string_value(pv)
								       : MCP_VERSION_LATEST;
	char sid[SESSION_ID_LEN + 1];
	if (session_open(srv->mcp, who, version, sid) < 0) {
		http_json_doc(resp, 500, rpc_error(id, -32603, "no randomness for a session id"));
		return;
	}
	json_t *result = json_pack(
		"{s:s, s:{s:{s:b}, s:{s:b, s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
		version, "capabilities", "tools", "listChanged", 0, "resources", "subscribe", 0,
		"listChanged", 0, "serverInfo", "name", "ember", "title", "ember profiler",
		"version", ember_version(), "instructions", server_instructions);
	add_session_header(resp, sid);
	http_json_doc(resp, 200, rpc_result(id, result));
}

void handle_mcp_post(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!check_host(srv, req, resp))
		return;
	const char *ct = http_header(req, "Content-Type");
	if (!ct || strncasecmp(ct, "application/json", 16) != 0) {
		http_error(resp, 415, "Content-Type must be application/json");
		return;
	}
	const struct principal *who = caller(srv, req);
	json_error_t jerr;
	json_t *doc = json_loadb(req->body ? req->body : "", req->body_len,
				 JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		http_json_doc(resp, 400, rpc_error(NULL, RPC_PARSE_ERROR, "Parse error: %s (line %d)",
						 jerr.text, jerr.line));
		return;
	}
	bool batch = json_is_array(doc);
	size_t n = batch ? json_array_size(doc) : 1;
	if (batch && (n == 0 || n > MCP_MAX_BATCH)) {
		http_json_doc(resp, 400, rpc_error(NULL, RPC_INVALID_REQUEST,
						 "Invalid Request: a batch holds 1 to %d messages, not %zu",
						 MCP_MAX_BATCH, n));
		json_decref(doc);
		return;
	}
	/* initialize: alone, and it needs no session. */
	if (!batch) {
		const char *method;
		json_t *id, *params;
		json_t *bad = envelope(doc, &method, &id, &params);
		if (bad) {
			http_json_doc(resp, 400, bad);
			json_decref(doc);
			return;
		}
		if (method && strcmp(method, "initialize") == 0) {
			if (!id)
				http_json_doc(resp, 400, rpc_error(NULL, RPC_INVALID_REQUEST,
								 "initialize must be a request (with an id)"));
			else
				initialize(srv, who, id, params, resp);
			json_decref(doc);
			return;
		}
	}
	const char *sid = http_header(req, "Mcp-Session-Id");
	char version[16];
	if (!sid || !*sid) {
		http_json_doc(resp, 400, rpc_error(NULL, RPC_INVALID_REQUEST,
						 "Bad Request: the Mcp-Session-Id header is missing; "
						 "send initialize first"));
		json_decref(doc);
		return;
	}
	if (!session_find(srv->mcp, who, sid, false, version)) {
		http_json_doc(resp, 404, rpc_error(NULL, RPC_INVALID_REQUEST,
						 "Session not found: initialize a new session"));
		json_decref(doc);
		return;
	}
	const char *pv = http_header(req, "MCP-Protocol-Version");
	if (pv && !version_supported(pv)) {
		http_json_doc(resp, 400, rpc_error(NULL, RPC_INVALID_REQUEST,
						 "Bad Request: unsupported MCP-Protocol-Version \"%.40s\" "
						 "(supported: %s, %s, %s)",
						 pv, MCP_VERSION_LATEST, MCP_VERSION_PREVIOUS,
						 MCP_VERSION_OLDER));
		json_decref(doc);
		return;
	}
	struct dispatch d = { srv, who, version };
	json_t *answers = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *msg = batch ? json_array_get(doc, i) : doc;
		const char *method;
		json_t *id, *params;
		json_t *out = envelope(msg, &method, &id, &params);
		if (!out && method) {
			if (strcmp(method, "initialize") == 0)
				out = rpc_error(id, RPC_INVALID_REQUEST,
						"initialize must be sent alone, not in a batch");
			else
				out = dispatch(&d, method, id, params);
		}
		if (out)
			json_array_append_new(answers, out);
	}
	json_decref(doc);
	size_t nout = json_array_size(answers);
	if (nout == 0) {
		json_decref(answers);
		resp->status = 202;
		resp->content_type = "application/json";
		return;
	}
	/* A lone invalid message is a 400, as MCP's transport has it. */
	int status = 200;
	if (!batch) {
		json_t *e = json_object_get(json_array_get(answers, 0), "error");
		json_t *code = json_object_get(e, "code");
		if (json_integer_value(code) == RPC_INVALID_REQUEST)
			status = 400;
	}
	http_json_doc(resp, status, batch ? answers : json_incref(json_array_get(answers, 0)));
	if (!batch)
		json_decref(answers);
}

void handle_mcp_get(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!check_host(srv, req, resp))
		return;
	http_add_header(resp, "Allow", "POST, DELETE");
	http_error(resp, 405,
		   "this server sends no messages of its own: there is no event stream to GET; "
		   "POST JSON-RPC messages");
}

void handle_mcp_delete(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!check_host(srv, req, resp))
		return;
	const char *sid = http_header(req, "Mcp-Session-Id");
	if (!sid || !*sid) {
		http_error(resp, 400, "the Mcp-Session-Id header is missing");
		return;
	}
	if (!session_find(srv->mcp, caller(srv, req), sid, true, NULL)) {
		http_error(resp, 404, "Session not found");
		return;
	}
	resp->status = 204;
}
