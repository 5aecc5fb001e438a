/* Fuzz target: what an LLM provider answers (server/llm/llm.c) and what
 * a model writes for the recommendations' LLM mode (server/llm/llm_recs.c).
 * The first byte picks the provider (its low two bits); the rest is the
 * answer's body, read by llm_parse_reply, and, as a model's text, taken
 * through llm_json_answer and validated against both answer schemas. A
 * parsed answer must have text and a tool_calls array whose calls each
 * have a name and an object of arguments. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/llm/llm.h"
#include "server/llm/llm_recs.h"

static struct llm *clients[4];
static json_t *schemas[2];

static void setup(void)
{
	static const char *const names[] = { "anthropic", "openai", "gemini", "openai-compatible" };
	setenv("EMBER_FUZZ_LLM_KEY", "sk-fuzz", 1);
	for (int i = 0; i < 4; i++) {
		struct llm_config c = { .provider = names[i], .base_url = "http://127.0.0.1:1",
					.api_key_env = "EMBER_FUZZ_LLM_KEY", .model_examine = "m" };
		struct buf err = { 0 };
		if (llm_open(&c, &clients[i], &err) < 0 || !clients[i])
			abort();
		buf_free(&err);
	}
	schemas[0] = json_loads(LLM_EXAMINE_SCHEMA, 0, NULL);
	schemas[1] = json_loads(LLM_SUMMARY_SCHEMA, 0, NULL);
	if (!schemas[0] || !schemas[1])
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!clients[0])
		setup();
	if (size < 1 || size > (1u << 20))
		return 0;
	struct llm *l = clients[data[0] & 3];
	const char *body = (const char *)data + 1;
	size_t n = size - 1;
	struct llm_reply r;
	struct buf err = { 0 };
	if (llm_parse_reply(l, body, n, &r, &err) == 0) {
		if (!r.text || !json_is_array(r.tool_calls))
			abort();
		size_t i;
		json_t *c;
		json_array_foreach(r.tool_calls, i, c) {
			if (!json_is_string(json_object_get(c, "name")) || !json_is_object(json_object_get(c, "arguments")))
				abort();
		}
		llm_reply_free(&r);
	} else if (!err.data) {
		abort();
	}
	buf_reset(&err);
	char *text = malloc(n + 1);
	if (!text)
		return 0;
	memcpy(text, body, n);
	text[n] = 0;
	json_t *doc = llm_json_answer(text, &err);
	if (doc) {
		for (int s = 0; s < 2; s++) {
			buf_reset(&err);
			if (llm_validate(schemas[s], doc, &err) < 0 && !err.data)
				abort();
		}
		json_decref(doc);
	}
	free(text);
	buf_free(&err);
	return 0;
}
