/* Unit tests of the LLM clients (server/llm/llm.c) and of the LLM mode's
 * answer checks (server/llm/llm_recs.c): each provider's request body
 * (messages, tool calls and their results, tools, JSON mode), reading each
 * provider's answer (text, tool calls, usage; malformed ones refused),
 * the configuration's refusals, the key scrubbed from messages, the token
 * limits refusing before anything is sent, and the schema validation. */
#include "testutil.h"

#include <jansson.h>

#include "server/llm/llm.h"
#include "server/llm/llm_recs.h"

#define KEY "sk-unit-key-123456"

static struct llm *open_llm(const char *provider, uint64_t max_in, uint64_t max_out)
{
	setenv("EMBER_TEST_LLM_KEY", "  " KEY "\n", 1);
	struct llm_config c = { .provider = provider, .base_url = "http://127.0.0.1:1/v1",
				.api_key_env = "EMBER_TEST_LLM_KEY", .model_examine = "m1", .model_summarize = "m2",
				.max_input_tokens_hour = max_in, .max_output_tokens_hour = max_out,
				.timeout_ms = 2000, .recommendations = true };
	struct llm *l = NULL;
	struct buf err = { 0 };
	assert_int_equal(llm_open(&c, &l, &err), 0);
	assert_non_null(l);
	buf_free(&err);
	return l;
}

/* A conversation with a tool call and its result. */
static json_t *conversation(void)
{
	return json_pack("[{s:s, s:s}, {s:s, s:s, s:[{s:s, s:s, s:{s:i}}, {s:s, s:s, s:{}}]},"
			 " {s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]",
			 "role", "user", "content", "why slow?",
			 "role", "assistant", "content", "", "tool_calls", "id", "c1", "name", "top_functions",
			 "arguments", "limit", 5, "id", "c2", "name", "list_projects", "arguments",
			 "role", "tool", "tool_call_id", "c1", "name", "top_functions", "content", "compile_branch 80%",
			 "role", "tool", "tool_call_id", "c2", "name", "list_projects", "content", "default");
}

static json_t *tools(void)
{
	return json_pack("[{s:s, s:s, s:{s:s, s:b, s:{s:{s:s}}}}]", "name", "top_functions", "description", "d",
			 "input_schema", "type", "object", "additionalProperties", 0, "properties", "limit", "type",
			 "integer");
}

static void test_bodies(void **state)
{
	(void)state;
	json_t *conv = conversation(), *t = tools();
	/* Anthropic: tool_use blocks; both results in ONE user message. */
	struct llm *l = open_llm("anthropic", 0, 0);
	json_t *b = llm_request_body(l, "m1", "sys", conv, t, 100, false);
	json_t *msgs = json_object_get(b, "messages");
	assert_int_equal(json_array_size(msgs), 3);
	assert_string_equal(json_string_value(json_object_get(b, "system")), "sys");
	json_t *asst = json_object_get(json_array_get(msgs, 1), "content");
	assert_int_equal(json_array_size(asst), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(asst, 0), "type")), "tool_use");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(json_array_get(asst, 0), "input"), "limit")), 5);
	json_t *res = json_object_get(json_array_get(msgs, 2), "content");
	assert_int_equal(json_array_size(res), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(res, 1), "tool_use_id")), "c2");
	assert_non_null(json_object_get(json_array_get(json_object_get(b, "tools"), 0), "input_schema"));
	json_decref(b);
	llm_close(l);

	/* OpenAI: arguments as a JSON string, role tool, max_completion_tokens, JSON mode. */
	l = open_llm("openai", 0, 0);
	b = llm_request_body(l, "m1", "sys", conv, t, 100, true);
	msgs = json_object_get(b, "messages");
	assert_int_equal(json_array_size(msgs), 5);
	assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "role")), "system");
	json_t *fn = json_object_get(json_array_get(json_object_get(json_array_get(msgs, 2), "tool_calls"), 0), "function");
	assert_string_equal(json_string_value(json_object_get(fn, "arguments")), "{\"limit\":5}");
	assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 3), "tool_call_id")), "c1");
	assert_non_null(json_object_get(b, "max_completion_tokens"));
	assert_non_null(json_object_get(b, "response_format"));
	json_decref(b);
	llm_close(l);
	l = open_llm("openai-compatible", 0, 0);
	b = llm_request_body(l, "m1", NULL, conv, NULL, 100, false);
	assert_non_null(json_object_get(b, "max_tokens"));
	assert_null(json_object_get(b, "max_completion_tokens"));
	assert_null(json_object_get(b, "tools"));
	json_decref(b);
	llm_close(l);

	/* Gemini: model role, functionCall/functionResponse, schema keywords it takes. */
	l = open_llm("gemini", 0, 0);
	b = llm_request_body(l, "m1", "sys", conv, t, 100, true);
	json_t *contents = json_object_get(b, "contents");
	assert_int_equal(json_array_size(contents), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(contents, 1), "role")), "model");
	assert_int_equal(json_array_size(json_object_get(json_array_get(contents, 2), "parts")), 2);
	json_t *params = json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(b, "tools"), 0),
									"functionDeclarations"), 0), "parameters");
	assert_null(json_object_get(params, "additionalProperties"));
	assert_non_null(json_object_get(json_object_get(params, "properties"), "limit"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(b, "generationConfig"), "responseMimeType")),
			    "application/json");
	json_decref(b);
	llm_close(l);
	json_decref(conv);
	json_decref(t);
}

static void parse_ok(const char *provider, const char *body, const char *text, const char *tool, uint64_t in)
{
	struct llm *l = open_llm(provider, 0, 0);
	struct llm_reply r;
	struct buf err = { 0 };
	assert_int_equal(llm_parse_reply(l, body, strlen(body), &r, &err), 0);
	assert_string_equal(r.text, text);
	if (tool) {
		assert_int_equal(json_array_size(r.tool_calls), 1);
		assert_string_equal(json_string_value(json_object_get(json_array_get(r.tool_calls, 0), "name")), tool);
		assert_true(json_is_object(json_object_get(json_array_get(r.tool_calls, 0), "arguments")));
	} else {
		assert_int_equal(json_array_size(r.tool_calls), 0);
	}
	assert_int_equal(r.input_tokens, in);
	llm_reply_free(&r);
	buf_free(&err);
	llm_close(l);
}

static void parse_bad(const char *provider, const char *body)
{
	struct llm *l = open_llm(provider, 0, 0);
	struct llm_reply r;
	struct buf err = { 0 };
	assert_int_equal(llm_parse_reply(l, body, strlen(body), &r, &err), -1);
	assert_non_null(err.data);
	buf_free(&err);
	llm_close(l);
}

static void test_replies(void **state)
{
	(void)state;
	parse_ok("anthropic", "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"},{\"type\":\"tool_use\",\"id\":\"t\","
			      "\"name\":\"flamegraph\",\"input\":{\"a\":1}}],\"usage\":{\"input_tokens\":7,\"output_tokens\":2}}",
		 "hi", "flamegraph", 7);
	parse_ok("openai", "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[{\"id\":\"x\",\"type\":"
			   "\"function\",\"function\":{\"name\":\"diff\",\"arguments\":\"not json\"}}]}}],"
			   "\"usage\":{\"prompt_tokens\":9}}",
		 "", "diff", 9);
	parse_ok("gemini", "{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"},{\"text\":\"b\"}]}}],"
			   "\"usageMetadata\":{\"promptTokenCount\":3}}",
		 "ab", NULL, 3);
	/* A call without its arguments: an empty object (and nothing leaked). */
	parse_ok("anthropic", "{\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"events\"}]}", "",
		 "events", 0);
	parse_ok("gemini", "{\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\"}}]}}]}",
		 "", "f", 0);
	parse_bad("anthropic", "{\"content\":\"x\"}");
	parse_bad("openai", "{\"choices\":[]}");
	parse_bad("gemini", "{\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}");
	parse_bad("openai", "{\"choices\":[{\"message\":{\"content\":\"trunc");
	parse_bad("gemini", "[1,2]");
}

static void test_config(void **state)
{
	(void)state;
	struct llm *l = NULL;
	struct buf err = { 0 };
	struct llm_config c = { .provider = "" };
	assert_int_equal(llm_open(&c, &l, &err), 0);
	assert_null(l);
	c.provider = "claude";
	assert_int_equal(llm_open(&c, &l, &err), -1);
	assert_non_null(strstr(err.data, "--llm-provider"));
	buf_reset(&err);
	c.provider = "openai-compatible";
	c.model_examine = "m";
	assert_int_equal(llm_open(&c, &l, &err), -1);
	assert_non_null(strstr(err.data, "--llm-base-url"));
	buf_reset(&err);
	c.provider = "openai";
	c.api_key_env = "EMBER_TEST_NO_SUCH_VARIABLE";
	unsetenv("EMBER_TEST_NO_SUCH_VARIABLE");
	assert_int_equal(llm_open(&c, &l, &err), -1);
	assert_non_null(strstr(err.data, "EMBER_TEST_NO_SUCH_VARIABLE"));
	buf_reset(&err);
	setenv("EMBER_TEST_BAD_KEY", "sk-a b", 1);
	c.api_key_env = "EMBER_TEST_BAD_KEY";
	assert_int_equal(llm_open(&c, &l, &err), -1);
	assert_null(strstr(err.data, "sk-a"));
	buf_free(&err);
}

static void test_scrub_and_status(void **state)
{
	(void)state;
	struct llm *l = open_llm("openai", 0, 0);
	struct buf s = { 0 };
	buf_puts(&s, "bad key " KEY " and " KEY "!");
	llm_scrub(l, &s);
	assert_string_equal(s.data, "bad key [api key] and [api key]!");
	buf_reset(&s);
	llm_status_json(l, &s);
	assert_null(strstr(s.data, KEY));
	assert_non_null(strstr(s.data, "environment EMBER_TEST_LLM_KEY"));
	buf_reset(&s);
	llm_settings_json(l, &s);
	assert_null(strstr(s.data, KEY));
	buf_free(&s);
	llm_close(l);
}

/* Nothing listens on 127.0.0.1:1: a refused request never gets that far. */
static void test_token_limits(void **state)
{
	(void)state;
	json_t *conv = json_pack("[{s:s, s:s}]", "role", "user", "content", "hello there, a long enough question");
	struct llm *l = open_llm("openai", 10, 0);
	struct llm_reply r;
	struct buf err = { 0 };
	assert_int_equal(llm_chat(l, "m1", "system prompt", conv, NULL, 100, false, &r, &err), LLM_REFUSED);
	assert_non_null(strstr(err.data, "--llm-max-input-tokens-per-hour"));
	llm_close(l);
	buf_reset(&err);
	l = open_llm("openai", 0, 50);
	assert_int_equal(llm_chat(l, "m1", NULL, conv, NULL, 100, false, &r, &err), LLM_REFUSED);
	assert_non_null(strstr(err.data, "--llm-max-output-tokens-per-hour"));
	buf_reset(&err);
	/* Within the limits: sent, and the transport error is an error, not a refusal. */
	assert_int_equal(llm_chat(l, "m1", NULL, conv, NULL, 40, false, &r, &err), LLM_ERROR);
	assert_non_null(strstr(err.data, "could not be reached"));
	llm_close(l);
	buf_free(&err);
	json_decref(conv);
}

static void test_validate(void **state)
{
	(void)state;
	json_t *schema = json_loads(LLM_EXAMINE_SCHEMA, 0, NULL);
	assert_non_null(schema);
	static const struct {
		const char *doc, *why; /* why NULL: valid */
	} cases[] = {
		{ "{\"diagnosis\":\"d\",\"actions\":[{\"title\":\"t\",\"detail\":\"x\",\"savings_share\":0.5}],"
		  "\"confidence\":\"high\"}", NULL },
		{ "{\"diagnosis\":\"d\",\"actions\":[],\"confidence\":\"high\"}", "fewer than 1" },
		{ "{\"diagnosis\":\"d\",\"actions\":[{\"title\":\"t\",\"detail\":\"x\",\"savings_share\":1.5}],"
		  "\"confidence\":\"high\"}", "actions[0].savings_share" },
		{ "{\"diagnosis\":\"d\",\"actions\":[{\"title\":\"t\",\"detail\":\"x\",\"savings_share\":0.1}],"
		  "\"confidence\":\"sure\"}", "confidence" },
		{ "{\"diagnosis\":\"d\",\"actions\":[{\"title\":\"t\",\"detail\":\"x\",\"savings_share\":0.1}]}",
		  "\"confidence\" is missing" },
		{ "{\"diagnosis\":5,\"actions\":[{\"title\":\"t\",\"detail\":\"x\",\"savings_share\":0.1}],"
		  "\"confidence\":\"low\"}", "diagnosis: expected a string" },
		{ "{\"diagnosis\":\"d\",\"actions\":[{\"title\":\"t\",\"detail\":\"x\",\"savings_share\":0.1,\"z\":1}],"
		  "\"confidence\":\"low\"}", "unexpected key \"z\"" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *d = json_loads(cases[i].doc, 0, NULL);
		assert_non_null(d);
		struct buf err = { 0 };
		int rc = llm_validate(schema, d, &err);
		if (!cases[i].why) {
			assert_int_equal(rc, 0);
		} else {
			assert_int_equal(rc, -1);
			if (!strstr(err.data, cases[i].why))
				fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.data, cases[i].why);
		}
		buf_free(&err);
		json_decref(d);
	}
	json_decref(schema);
	struct buf err = { 0 };
	json_t *d = llm_json_answer("Here:\n```json\n{\"a\":1}\n```\n", &err);
	assert_non_null(d);
	assert_int_equal(json_integer_value(json_object_get(d, "a")), 1);
	json_decref(d);
	assert_null(llm_json_answer("{\"a\":", &err));
	buf_reset(&err);
	assert_null(llm_json_answer("[1]", &err));
	assert_null(llm_json_answer(NULL, &err));
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_bodies),
	cmocka_unit_test(test_replies),
	cmocka_unit_test(test_config),
	cmocka_unit_test(test_scrub_and_status),
	cmocka_unit_test(test_token_limits),
	cmocka_unit_test(test_validate))
