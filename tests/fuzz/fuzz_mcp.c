/* Fuzz target: the MCP server (server/http/mcp.c, server/http/mcp_tools.c) as POST
 * /mcp sees it: the body is JSON-RPC from a client that holds a session.
 * An input starting with 'T' is a tool's arguments instead: the byte after
 * it picks the tool, the rest is put in a tools/call as "arguments" when
 * it parses as JSON, so mutations reach every argument check, the time
 * and project arguments, the CEL filters and the rendering of the answers
 * without having to form the envelope. The store is a small one made at
 * start in a temporary directory (empty: the queries run, the answers are
 * short), opened once for all inputs. Every answer must be JSON or empty;
 * a crash, leak or sanitizer report is a finding. */
#include <ftw.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/ingest/codecs.h"
#include "server/http/http.h"
#include "server/http/mcp.h"
#include "server/metrics/metrics.h"
#include "server/store/projects.h"
#include "server/http/server.h"
#include "server/symbols/symbols.h"

/* The server lives across inputs: opening a store per input would be all
 * the fuzzer does. */
static struct server srv;
static char session[64];
static char dir[] = "/tmp/fuzz_mcp.XXXXXX";

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* The store's directory goes when the fuzzer exits. */
static void cleanup(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *const tool_names[] = { "list_projects", "top_entities", "top_functions",
					  "flamegraph", "sandwich", "diff", "timeseries",
					  "events", "gpu_kernels", "gpu_flamegraph", "gpu_metrics" };

static void post(const char *body, size_t len, struct http_resp *resp)
{
	const char *headers[] = { "Host", "127.0.0.1:8080", "Content-Type", "application/json",
				  "Mcp-Session-Id", session, NULL };
	struct http_req req = { .method = "POST", .path = "/mcp", .body = body, .body_len = len,
				.headers = headers };
	memset(resp, 0, sizeof(*resp));
	handle_mcp_post(&srv, &req, resp);
}

static void done(struct http_resp *resp)
{
	if (resp->body.len) {
		json_t *j = json_loadb(resp->body.data, resp->body.len, 0, NULL);
		if (!j)
			abort(); /* every answer with a body is JSON */
		json_decref(j);
	}
	buf_free(&resp->body);
	buf_free(&resp->headers);
}

static void setup(void)
{
	struct buf err = { 0 };
	struct store_config cfg;
	store_config_default(&cfg);
	ingest_codecs(&cfg);
	cfg.background = false;
	if (!mkdtemp(dir) || store_open(dir, &cfg, &srv.store, &err) < 0 ||
	    symbols_open(dir, &srv.symbols, &err) < 0 || projects_open(dir, &srv.projects, &err) < 0 ||
	    metrics_open_dir(dir, 86400000, &srv.metrics, &err) < 0) {
		fprintf(stderr, "fuzz_mcp: %s\n", err.data ? err.data : dir);
		abort();
	}
	buf_free(&err);
	atexit(cleanup);
	srv.mcp = mcp_new("", "127.0.0.1:8080");
	static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
				   "\"params\":{\"protocolVersion\":\"2025-06-18\"}}";
	struct http_resp resp;
	post(init, sizeof(init) - 1, &resp);
	const char *h = resp.headers.data ? strstr(resp.headers.data, "Mcp-Session-Id: ") : NULL;
	if (resp.status != 200 || !h)
		abort();
	snprintf(session, sizeof(session), "%.32s", h + strlen("Mcp-Session-Id: "));
	done(&resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!srv.mcp)
		setup();
	struct http_resp resp;
	if (size >= 2 && data[0] == 'T') {
		json_t *args = json_loadb((const char *)data + 2, size - 2, 0, NULL);
		if (!args)
			return 0;
		json_t *msg = json_pack("{s:s, s:i, s:s, s:{s:s, s:o}}", "jsonrpc", "2.0", "id", 1,
					"method", "tools/call", "params", "name",
					tool_names[data[1] % (sizeof(tool_names) / sizeof(tool_names[0]))],
					"arguments", args);
		char *body = json_dumps(msg, JSON_COMPACT);
		json_decref(msg);
		if (!body)
			return 0;
		post(body, strlen(body), &resp);
		free(body);
	} else {
		post((const char *)data, size, &resp);
	}
	done(&resp);
	return 0;
}
