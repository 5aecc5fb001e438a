/* llm.h - clients of large language models (libcurl), used by the LLM mode
 * of the recommendations (llm_recs.h) and the AI assistant
 * (server/http/assistant_api.c); docs/assistant.md and
 * docs/recommendations.md describe them for users.
 *
 * Providers: "anthropic" (Messages API, POST {base}/v1/messages with
 * x-api-key and anthropic-version), "openai" (Chat Completions, POST
 * {base}/chat/completions with Authorization: Bearer), "gemini"
 * (generateContent, POST {base}/models/{model}:generateContent with
 * x-goog-api-key) and "openai-compatible" (the Chat Completions shape at
 * --llm-base-url: the full chat-completions URL, or a base URL to which
 * /chat/completions is added).
 *
 * Conversations are provider-neutral jansson arrays of messages:
 *   {"role":"user","content":"text"}
 *   {"role":"assistant","content":"text","tool_calls":[{"id","name","arguments":{}}]}
 *   {"role":"tool","tool_call_id":"id","name":"tool","content":"text"}
 * and tools {"name","description","input_schema"}; each client writes them
 * in its provider's format (tool_use/tool_result blocks, function tool
 * calls, functionCall/functionResponse parts) and reads the answer back.
 *
 * The key: read once at llm_open from --llm-api-key-file or the variable
 * --llm-api-key-env names (default per provider: ANTHROPIC_API_KEY,
 * OPENAI_API_KEY, GEMINI_API_KEY, CUSTOM_LLM_API_KEY); it is sent only in
 * the provider's header, never logged, never answered: every error text
 * that leaves this module has any copy of it replaced by "[api key]".
 *
 * Limits: each request has a timeout (llm_config.timeout_ms); a 429, 500,
 * 502, 503 or 529 answer is retried at most max_retries times, after the
 * Retry-After the provider sent (at most LLM_MAX_RETRY_WAIT_S, else 1 s,
 * 2 s, 4 s...). Token limits per hour (input and output, 0: none) are
 * checked BEFORE a request is sent: its input estimated at one token per
 * 4 bytes of the request body, its output at its max_tokens; a request
 * that would pass either limit within the last hour is refused (LLM_REFUSED)
 * with a message naming the limit. Usage is counted from the provider's
 * answer (usage / usageMetadata), else from the estimate.
 *
 * Threading: llm_chat may be called from any thread; the usage counters
 * are under a mutex. Answers are capped at LLM_MAX_RESPONSE bytes.
 */
#ifndef EMBER_SERVER_LLM_H
#define EMBER_SERVER_LLM_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

#define LLM_MAX_RESPONSE (4u << 20)
#define LLM_MAX_RETRY_WAIT_S 30
#define LLM_MAX_KEY 4096
#define LLM_MAX_MODEL 128

enum llm_provider { LLM_ANTHROPIC, LLM_OPENAI, LLM_GEMINI, LLM_COMPATIBLE };

struct llm_config {
	const char *provider;        /* --llm-provider: anthropic|openai|gemini|openai-compatible; "" = off */
	const char *base_url;        /* --llm-base-url ("" = the provider's) */
	const char *api_key_file;    /* --llm-api-key-file */
	const char *api_key_env;     /* --llm-api-key-env ("" = the provider's variable) */
	const char *model_examine;   /* --llm-model-examine: trace examination, the assistant */
	const char *model_summarize; /* --llm-model-summarize ("" = model_examine) */
	uint64_t max_input_tokens_hour, max_output_tokens_hour; /* 0: no limit */
	int64_t timeout_ms;          /* --llm-timeout */
	unsigned max_retries;        /* --llm-max-retries */
	bool recommendations;        /* --llm-recommendations */
	const char *data_dir;        /* where llm-settings.json is; NULL: no settings file */
};

/* One answer of the model. */
struct llm_reply {
	char *text;           /* the text parts, joined; "" when none */
	json_t *tool_calls;   /* [{"id","name","arguments":{}}], possibly empty */
	char stop[32];        /* the provider's stop reason */
	uint64_t input_tokens, output_tokens;
};

enum { LLM_OK = 0, LLM_ERROR = -1, LLM_REFUSED = -2 };

struct llm;

/* Reads the key and checks the configuration. 0 with *out (NULL when
 * c->provider is empty: no LLM), or -1 with err naming the flag. */
int llm_open(const struct llm_config *c, struct llm **out, struct buf *err);
void llm_close(struct llm *l);

enum llm_provider llm_provider_of(const struct llm *l);
const char *llm_provider_name(const struct llm *l);
/* The model of a step, copied into out (the settings may change it). */
const char *llm_model(struct llm *l, bool summarize, char out[LLM_MAX_MODEL]);
/* Whether the recommendations' LLM mode is on (--llm-recommendations, or
 * the settings). */
bool llm_recs_enabled(struct llm *l);

/* Sends system + messages (+ tools, may be NULL) to model, asking for at
 * most max_tokens; with json the model is asked for a JSON object (the
 * provider's JSON mode where it has one). LLM_OK with *out filled (free it
 * with llm_reply_free), LLM_ERROR with err (the provider's message,
 * scrubbed of the key), or LLM_REFUSED (token limit) with err. */
int llm_chat(struct llm *l, const char *model, const char *system, const json_t *messages,
	     const json_t *tools, unsigned max_tokens, bool json, struct llm_reply *out,
	     struct buf *err);
void llm_reply_free(struct llm_reply *r);

/* {"provider","base_url","models":{"examine","summarize"},"key_source",
 * "limits":{"input_tokens_per_hour","output_tokens_per_hour"},
 * "usage_last_hour":{"input_tokens","output_tokens"},"timeout_ms",
 * "max_retries"}; with l NULL: {"provider":null}. Never the key. */
void llm_status_json(struct llm *l, struct buf *out);

/* Settings (GET/PUT /public/api/v1/settings/llm; the Settings page):
 * the models, the token limits and the recommendations' LLM mode change
 * at runtime, saved in DATA_DIR/llm-settings.json over the flags; the
 * provider, its URL and the key are the flags' only (the key is never
 * settable through the API). llm_settings_json: {"provider","base_url",
 * "key_source","model_examine","model_summarize",
 * "max_input_tokens_per_hour","max_output_tokens_per_hour",
 * "recommendations","saved"}. llm_settings_put: any of the five
 * changeable keys (null: the flag's value), checked whole first; 0, -1
 * with a message for the client, or -2 (the file could not be written). */
void llm_settings_json(struct llm *l, struct buf *out);
int llm_settings_put(struct llm *l, const json_t *doc, struct buf *err);
/* Reads DATA_DIR/llm-settings.json when there is one (llm_open calls it
 * when data_dir is set). 0, or -1 with err. */
int llm_settings_load(struct llm *l, const char *data_dir, struct buf *err);

/* Replaces every copy of the key in s (in place) with "[api key]". */
void llm_scrub(const struct llm *l, struct buf *s);

/* For tests: the request body llm_chat would send (provider format). */
json_t *llm_request_body(const struct llm *l, const char *model, const char *system,
			 const json_t *messages, const json_t *tools, unsigned max_tokens, bool json);
/* For tests: reads a provider answer (0, or -1 with err). */
int llm_parse_reply(const struct llm *l, const char *body, size_t len, struct llm_reply *out,
		    struct buf *err);

#endif
