/* Unit tests: the MCP tools answer from the same queries as the REST API. */
#include "server_fixture.h"

/* The MCP tools (server/http/mcp_tools.c) over a store, under the sanitizers:
 * every tool answers, its text is bounded and its numbers are the
 * queries'. (tests/integration/test_mcp.py drives them over HTTP.) */
static json_t *mcp_call(struct server *srv, const char *tool, const char *args_json)
{
	json_t *args = json_loads(args_json, 0, NULL);
	assert_non_null(args);
	json_t *res = NULL;
	struct buf err = { 0 };
	assert_int_equal(mcp_tool_call(srv, &principal_open, tool, args, &res, &err), 0);
	json_decref(args);
	buf_free(&err);
	json_t *text = json_object_get(json_array_get(json_object_get(res, "content"), 0), "text");
	if (json_is_true(json_object_get(res, "isError")))
		fail_msg("%s: %s", tool, json_string_value(text));
	assert_true(json_string_length(text) <= 8000);
	return res;
}

static void test_mcp_tools(void **state)
{
	struct world *w = *state;
	struct server srv = { .store = w->s, .symbols = w->sym };
	struct buf err = { 0 }, z = { 0 };
	assert_int_equal(projects_open(w->dir, &srv.projects, &err), 0);
	assert_int_equal(metrics_open_dir(w->dir, 86400000, &srv.metrics, &err), 0);
	make_batch(sample_specs, 5, 1, T0, &z);
	append(w->s, &z);
	char window[128];
	snprintf(window, sizeof(window), "\"start\": %lld, \"end\": %lld", (long long)(T0 - 60000),
		 (long long)(T0 + 60000));
	static const char *const calls[][2] = {
		{ "list_projects", "" },
		{ "top_entities", ", \"entity\": \"threads\"" },
		{ "top_functions", ", \"limit\": 3" },
		{ "flamegraph", ", \"min_percent\": 0" },
		{ "flamegraph", ", \"min_percent\": 0, \"max_chars\": 500, \"group_by\": [\"thread\"]" },
		{ "sandwich", ", \"function\": \"run\"" },
		{ "diff", "" },
		{ "timeseries", ", \"group_by\": \"thread\", \"num_buckets\": 4" },
		{ "events", ", \"limit\": 3, \"max_frames\": 2" },
		{ "gpu_kernels", "" },
		{ "gpu_flamegraph", "" },
		{ "gpu_metrics", "" },
	};
	json_t *fg = NULL, *top = NULL;
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		char args[512];
		if (strcmp(calls[i][0], "list_projects") == 0)
			snprintf(args, sizeof(args), "{}");
		else
			snprintf(args, sizeof(args), "{%s%s}", window, calls[i][1]);
		json_t *res = mcp_call(&srv, calls[i][0], args);
		if (i == 3)
			fg = json_incref(res);
		if (i == 2)
			top = json_incref(res);
		json_decref(res);
	}
	/* The flamegraph: the numbers of the query; a chain on one line. */
	json_t *sc = json_object_get(fg, "structuredContent");
	assert_int_equal((int)json_number_value(json_object_get(sc, "total")), 100);
	const char *text = json_string_value(
		json_object_get(json_array_get(json_object_get(fg, "content"), 0), "text"));
	assert_non_null(strstr(text, "\n100.0% (self 0.0%) root\n 99.0% (self 0.0%) main [app]\n"
				     "  95.0% (self 0.0%) run [app]\n   60.0% (self 60.0%) hot_a [app]\n"));
	assert_non_null(strstr(text, "\n 1.0% (self 1.0%) main > idle_loop [other]\n"));
	json_t *f0 = json_array_get(json_object_get(json_object_get(top, "structuredContent"), "functions"), 0);
	assert_string_equal(json_string_value(json_object_get(f0, "name")), "hot_a");
	assert_int_equal((int)json_number_value(json_object_get(f0, "self")), 60);
	json_decref(fg);
	json_decref(top);
	metrics_close(srv.metrics);
	projects_close(srv.projects);
	buf_free(&z);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	WORLD_TEST(test_mcp_tools))
