/* Unit tests of the MCP transport (server/http/mcp.c): the Host/Origin
 * allowlist, and JSON-RPC handling in-process (initialize, sessions,
 * notifications, batches, errors, tools/list's schemas). The tools over a
 * store are tested end to end in tests/integration/test_mcp.py. */
#include "testutil.h"
#include <jansson.h>

#include "server/http/http.h"
#include "server/http/mcp.h"
#include "server/http/server.h"

static void test_host_allowlist(void **state)
{
	(void)state;
	struct mcp *m = mcp_new(" ember.example ,B.Example,", "10.0.0.5:8080");
	const char *ok[] = { "localhost", "localhost:8080", "LOCALHOST:1", "127.0.0.1:80", "[::1]:8080",
			     "[::1]", "10.0.0.5:8080", "ember.example", "b.example:443",
			     "http://localhost:3000", "https://ember.example", "http://[::1]:9" };
	const char *bad[] = { "", "evil.example", "localhost.evil.example", "127.0.0.2", "[::2]:80",
			      "http://evil.example", "10.0.0.6:8080", "[::1", "ember.example.evil",
			      "0.0.0.0:8080" };
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!mcp_host_allowed(m, ok[i]))
			fail_msg("%s refused", ok[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (mcp_host_allowed(m, bad[i]))
			fail_msg("%s allowed", bad[i]);
	assert_false(mcp_host_allowed(m, NULL));
	mcp_free(m);
	/* A wildcard --listen adds nothing; "*" allows any host. */
	m = mcp_new(NULL, "0.0.0.0:8080");
	assert_false(mcp_host_allowed(m, "0.0.0.0:8080"));
	assert_true(mcp_host_allowed(m, "localhost:8080"));
	mcp_free(m);
	m = mcp_new("*", "[::]:8080");
	assert_true(mcp_host_allowed(m, "anything.example"));
	mcp_free(m);
}

struct answer {
	int status;
	json_t *body; /* NULL when empty */
	char session[64];
};

static struct answer post(struct server *srv, const char *session, const char *body)
{
	const char *headers[] = { "Host", "localhost:8080", "Content-Type", "application/json",
				  session ? "Mcp-Session-Id" : NULL, session, NULL };
	struct http_req req = { .method = "POST", .path = "/mcp", .body = body,
				.body_len = strlen(body), .headers = headers };
	struct http_resp resp = { 0 };
	handle_mcp_post(srv, &req, &resp);
	struct answer a = { .status = resp.status };
	if (resp.body.len) {
		a.body = json_loadb(resp.body.data, resp.body.len, 0, NULL);
		assert_non_null(a.body);
	}
	const char *h = resp.headers.data ? strstr(resp.headers.data, "Mcp-Session-Id: ") : NULL;
	if (h)
		snprintf(a.session, sizeof(a.session), "%.32s", h + 16);
	buf_free(&resp.body);
	buf_free(&resp.headers);
	return a;
}

static json_int_t error_code(json_t *msg)
{
	return json_integer_value(json_object_get(json_object_get(msg, "error"), "code"));
}

static void test_jsonrpc(void **state)
{
	(void)state;
	struct server srv = { 0 };
	srv.mcp = mcp_new(NULL, "127.0.0.1:8080");
	struct answer a = post(&srv, NULL, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
					   "\"params\":{\"protocolVersion\":\"2025-03-26\"}}");
	assert_int_equal(a.status, 200);
	assert_int_equal(strlen(a.session), 32);
	json_t *r = json_object_get(a.body, "result");
	assert_string_equal(json_string_value(json_object_get(r, "protocolVersion")), "2025-03-26");
	json_decref(a.body);
	char sid[64];
	memcpy(sid, a.session, sizeof(sid));

	a = post(&srv, sid, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
	assert_int_equal(a.status, 202);
	assert_null(a.body);

	a = post(&srv, NULL, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
	assert_int_equal(a.status, 400);
	json_decref(a.body);
	a = post(&srv, "0123456789abcdef0123456789abcdef", "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
	assert_int_equal(a.status, 404);
	json_decref(a.body);

	a = post(&srv, sid, "{\"jsonrpc\":");
	assert_int_equal(a.status, 400);
	assert_int_equal(error_code(a.body), -32700);
	json_decref(a.body);
	a = post(&srv, sid, "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}");
	assert_int_equal(error_code(a.body), -32600);
	json_decref(a.body);
	a = post(&srv, sid, "[]");
	assert_int_equal(error_code(a.body), -32600);
	json_decref(a.body);
	a = post(&srv, sid, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}");
	assert_int_equal(a.status, 200);
	assert_int_equal(error_code(a.body), -32601);
	json_decref(a.body);
	a = post(&srv, sid, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":"
			    "{\"name\":\"nope\"}}");
	assert_int_equal(error_code(a.body), -32602);
	json_decref(a.body);
	/* A batch answers its requests, in order; a response from the
	 * client and a notification need none. */
	a = post(&srv, sid, "[{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"},"
			    "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}},"
			    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\"},"
			    "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"initialize\"}]");
	assert_int_equal(a.status, 200);
	assert_int_equal(json_array_size(a.body), 2);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(a.body, 0), "id")), 4);
	assert_int_equal(error_code(json_array_get(a.body, 1)), -32600);
	json_decref(a.body);

	/* Every tool has schemas; inputs refuse unknown properties. */
	a = post(&srv, sid, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"}");
	json_t *tools = json_object_get(json_object_get(a.body, "result"), "tools");
	assert_true(json_array_size(tools) >= 11);
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t) {
		json_t *in = json_object_get(t, "inputSchema");
		assert_string_equal(json_string_value(json_object_get(in, "type")), "object");
		assert_true(json_is_false(json_object_get(in, "additionalProperties")));
		assert_string_equal(
			json_string_value(json_object_get(json_object_get(t, "outputSchema"), "type")),
			"object");
	}
	json_decref(a.body);

	/* DELETE ends the session. */
	const char *headers[] = { "Host", "localhost", "Mcp-Session-Id", sid, NULL };
	struct http_req del = { .method = "DELETE", .path = "/mcp", .headers = headers };
	struct http_resp resp = { 0 };
	handle_mcp_delete(&srv, &del, &resp);
	assert_int_equal(resp.status, 204);
	buf_free(&resp.body);
	a = post(&srv, sid, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}");
	assert_int_equal(a.status, 404);
	json_decref(a.body);
	mcp_free(srv.mcp);
}

static int ping_status(struct server *srv, const char *session)
{
	struct answer p = post(srv, session, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
	json_decref(p.body);
	return p.status;
}

/* Past MCP_MAX_SESSIONS the least recently used session is forgotten:
 * by use, not by age or place in the table. */
static void test_sessions_bounded(void **state)
{
	(void)state;
	struct server srv = { 0 };
	srv.mcp = mcp_new(NULL, "127.0.0.1:8080");
	static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
				   "\"params\":{\"protocolVersion\":\"2025-06-18\"}}";
	struct answer a = post(&srv, NULL, init), b = post(&srv, NULL, init), c0 = { 0 };
	json_decref(a.body);
	json_decref(b.body);
	for (int i = 0; i < MCP_MAX_SESSIONS - 2; i++) {
		struct answer x = post(&srv, NULL, init);
		json_decref(x.body);
		if (i == 0)
			c0 = x;
	}
	/* Full. a and b are used again: c0 is now the least recently used. */
	assert_int_equal(ping_status(&srv, b.session), 200);
	assert_int_equal(ping_status(&srv, a.session), 200);
	struct answer x = post(&srv, NULL, init);
	json_decref(x.body);
	assert_int_equal(ping_status(&srv, c0.session), 404);
	assert_int_equal(ping_status(&srv, a.session), 200);
	assert_int_equal(ping_status(&srv, b.session), 200);
	assert_int_equal(ping_status(&srv, x.session), 200);
	mcp_free(srv.mcp);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_host_allowlist),
	cmocka_unit_test(test_jsonrpc),
	cmocka_unit_test(test_sessions_bounded))
