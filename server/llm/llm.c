/* llm.c - the LLM clients (contract in llm.h). */
#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonpost.h"
#include "llm.h"
#include "log.h"
#include "util.h"

#define USAGE_BUCKETS 60 /* one a minute: the last hour */

struct usage_bucket {
	int64_t minute;
	uint64_t in, out;
};

struct llm {
	enum llm_provider provider;
	char *base_url, *key, *key_source;
	/* The flags' values, and what the settings made of them (under mu). */
	char flag_examine[LLM_MAX_MODEL], flag_summarize[LLM_MAX_MODEL];
	uint64_t flag_max_in, flag_max_out;
	bool flag_recs;
	char model_examine[LLM_MAX_MODEL], model_summarize[LLM_MAX_MODEL];
	uint64_t max_in, max_out;
	bool recs;
	json_t *saved; /* the settings file's object; NULL: none */
	char *settings_path;
	int64_t timeout_ms;
	unsigned max_retries;
	/* The usage of the last hour, one bucket a minute; under mu. */
	pthread_mutex_t mu;
	struct usage_bucket usage[USAGE_BUCKETS];
};

static const char *const provider_names[] = { "anthropic", "openai", "gemini", "openai-compatible" };
static const char *const default_urls[] = { "https://api.anthropic.com", "https://api.openai.com/v1",
					    "https://generativelanguage.googleapis.com/v1beta", "" };
static const char *const default_envs[] = { "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY",
					    "CUSTOM_LLM_API_KEY" };

enum llm_provider llm_provider_of(const struct llm *l) { return l->provider; }
const char *llm_provider_name(const struct llm *l) { return provider_names[l->provider]; }
const char *llm_model(struct llm *l, bool summarize, char out[LLM_MAX_MODEL])
{
	pthread_mutex_lock(&l->mu);
	snprintf(out, LLM_MAX_MODEL, "%s", summarize ? l->model_summarize : l->model_examine);
	pthread_mutex_unlock(&l->mu);
	return out;
}

bool llm_recs_enabled(struct llm *l)
{
	pthread_mutex_lock(&l->mu);
	bool on = l->recs;
	pthread_mutex_unlock(&l->mu);
	return on;
}

/* Strips the key of surrounding white space; false when what is left is
 * empty or holds bytes a header cannot carry. */
static bool key_clean(char *k)
{
	size_t n = strlen(k);
	while (n && isspace((unsigned char)k[n - 1]))
		k[--n] = 0;
	size_t s = 0;
	while (k[s] && isspace((unsigned char)k[s]))
		s++;
	memmove(k, k + s, n - s + 1);
	if (!*k)
		return false;
	for (const char *p = k; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			return false;
	return true;
}

void llm_close(struct llm *l)
{
	if (!l)
		return;
	if (l->key) {
		/* The key does not outlive the client in freed memory. */
		volatile char *k = l->key;
		for (size_t i = 0; k[i]; i++)
			k[i] = 0;
	}
	free_all(l->key, l->base_url, l->key_source);
	json_decref(l->saved);
	free(l->settings_path);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

int llm_open(const struct llm_config *c, struct llm **out, struct buf *err)
{
	*out = NULL;
	if (!c->provider || !*c->provider)
		return 0;
	int p = -1;
	for (int i = 0; i < 4; i++)
		if (strcmp(c->provider, provider_names[i]) == 0)
			p = i;
	if (p < 0) {
		buf_printf(err, "--llm-provider: expected anthropic, openai, gemini or openai-compatible, not \"%.64s\"",
			   c->provider);
		return -1;
	}
	const char *base = c->base_url && *c->base_url ? c->base_url : default_urls[p];
	if (!*base) {
		buf_puts(err, "--llm-base-url: openai-compatible needs the URL of its chat completions endpoint");
		return -1;
	}
	if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) {
		buf_puts(err, "--llm-base-url: expected an http:// or https:// URL");
		return -1;
	}
	if (!c->model_examine || !*c->model_examine) {
		buf_puts(err, "--llm-model-examine: name the model (e.g. the provider's strongest)");
		return -1;
	}
	if (strlen(c->model_examine) >= LLM_MAX_MODEL ||
	    (c->model_summarize && strlen(c->model_summarize) >= LLM_MAX_MODEL)) {
		buf_printf(err, "--llm-model-examine/--llm-model-summarize: at most %d bytes", LLM_MAX_MODEL - 1);
		return -1;
	}
	char *key = NULL;
	struct buf src = { 0 };
	if (c->api_key_file && *c->api_key_file) {
		size_t n;
		int rc = read_file(c->api_key_file, LLM_MAX_KEY, &key, &n);
		if (rc < 0) {
			buf_printf(err, "--llm-api-key-file %s: cannot read it: %s", c->api_key_file, strerror(-rc));
			return -1;
		}
		buf_printf(&src, "file %s", c->api_key_file);
	} else {
		const char *env = c->api_key_env && *c->api_key_env ? c->api_key_env : default_envs[p];
		const char *v = getenv(env);
		if (!v || !*v) {
			buf_printf(err, "--llm-provider %s: no key: give --llm-api-key-file or set %s", provider_names[p],
				   env);
			return -1;
		}
		if (strlen(v) > LLM_MAX_KEY) {
			buf_printf(err, "%s: the key is longer than %d bytes", env, LLM_MAX_KEY);
			return -1;
		}
		key = xstrdup(v);
		buf_printf(&src, "environment %s", env);
	}
	if (!key_clean(key)) {
		buf_printf(err, "the LLM key (%s) is empty or holds spaces or control characters", src.data);
		free(key);
		buf_free(&src);
		return -1;
	}
	struct llm *l = xcalloc(1, sizeof(*l));
	l->provider = (enum llm_provider)p;
	l->base_url = xstrdup(base);
	size_t bl = strlen(l->base_url);
	while (bl && l->base_url[bl - 1] == '/')
		l->base_url[--bl] = 0;
	l->key = key;
	l->key_source = src.data;
	snprintf(l->flag_examine, sizeof(l->flag_examine), "%s", c->model_examine);
	snprintf(l->flag_summarize, sizeof(l->flag_summarize), "%s",
		 c->model_summarize && *c->model_summarize ? c->model_summarize : c->model_examine);
	l->flag_max_in = c->max_input_tokens_hour;
	l->flag_max_out = c->max_output_tokens_hour;
	l->flag_recs = c->recommendations;
	memcpy(l->model_examine, l->flag_examine, sizeof(l->model_examine));
	memcpy(l->model_summarize, l->flag_summarize, sizeof(l->model_summarize));
	l->max_in = l->flag_max_in;
	l->max_out = l->flag_max_out;
	l->recs = l->flag_recs;
	l->timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : 120000;
	l->max_retries = c->max_retries;
	pthread_mutex_init(&l->mu, NULL);
	if (c->data_dir && llm_settings_load(l, c->data_dir, err) < 0) {
		llm_close(l);
		return -1;
	}
	*out = l;
	return 0;
}

void llm_scrub(const struct llm *l, struct buf *s)
{
	if (!l || !l->key || !s->data || !*l->key)
		return;
	static const char mark[] = "[api key]";
	size_t kl = strlen(l->key);
	struct buf o = { 0 };
	const char *p = s->data, *hit;
	bool any = false;
	while ((hit = strstr(p, l->key))) {
		buf_append(&o, p, (size_t)(hit - p));
		buf_puts(&o, mark);
		p = hit + kl;
		any = true;
	}
	if (!any) {
		buf_free(&o);
		return;
	}
	buf_puts(&o, p);
	buf_reset(s);
	buf_puts(s, o.data);
	buf_free(&o);
}

/* --- usage ------------------------------------------------------------------ */

static void usage_sum(struct llm *l, int64_t minute, uint64_t *in, uint64_t *out)
{
	*in = *out = 0;
	for (size_t i = 0; i < USAGE_BUCKETS; i++)
		if (l->usage[i].minute > minute - USAGE_BUCKETS) {
			*in += l->usage[i].in;
			*out += l->usage[i].out;
		}
}

static void usage_add(struct llm *l, int64_t minute, uint64_t in, uint64_t out)
{
	struct usage_bucket *b = &l->usage[minute % USAGE_BUCKETS];
	if (b->minute != minute) {
		b->minute = minute;
		b->in = b->out = 0;
	}
	b->in += in;
	b->out += out;
}

/* --- requests in each provider's format -------------------------------------- */

static const char *jstr(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static json_t *args_of(const json_t *call)
{
	json_t *a = json_object_get(call, "arguments");
	return json_is_object(a) ? json_incref(a) : json_object();
}

/* The keywords of JSON Schema that Gemini's function declarations take. */
static json_t *gemini_schema(const json_t *s)
{
	static const char *const keep[] = { "type", "description", "enum", "format", "minimum", "maximum",
					    "nullable", "required", "minItems", "maxItems", NULL };
	json_t *o = json_object();
	if (!json_is_object(s))
		return o;
	for (size_t i = 0; keep[i]; i++) {
		json_t *v = json_object_get(s, keep[i]);
		if (v && !(strcmp(keep[i], "type") == 0 && !json_is_string(v)))
			json_object_set(o, keep[i], v);
	}
	json_t *props = json_object_get(s, "properties");
	if (json_is_object(props)) {
		json_t *np = json_object();
		const char *k;
		json_t *v;
		json_object_foreach(props, k, v) json_object_set_new(np, k, gemini_schema(v));
		json_object_set_new(o, "properties", np);
	}
	json_t *items = json_object_get(s, "items");
	if (json_is_object(items))
		json_object_set_new(o, "items", gemini_schema(items));
	return o;
}

/* How an API that alternates roles (Anthropic's Messages, Gemini's
 * contents) writes a conversation: each message one turn of parts under
 * key, the assistant's role named assistant, and one part for a tool's
 * result, a text and a tool call. */
struct turns_style {
	const char *assistant, *key;
	json_t *(*tool_result)(const json_t *m);
	json_t *(*text)(const char *text);
	json_t *(*tool_call)(const json_t *c);
};

/* The messages as turns in style st: consecutive messages of one role
 * (tool results after each other) become one turn. */
static json_t *turns(const json_t *msgs, const struct turns_style *st)
{
	json_t *out = json_array();
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = jstr(m, "role");
		json_t *parts = json_array();
		const char *want = strcmp(role, "assistant") == 0 ? st->assistant : "user";
		if (strcmp(role, "tool") == 0) {
			json_array_append_new(parts, st->tool_result(m));
		} else {
			if (*jstr(m, "content"))
				json_array_append_new(parts, st->text(jstr(m, "content")));
			size_t j;
			json_t *c;
			json_array_foreach(json_object_get(m, "tool_calls"), j, c)
				json_array_append_new(parts, st->tool_call(c));
		}
		json_t *last = json_array_get(out, json_array_size(out) - 1);
		if (last && strcmp(jstr(last, "role"), want) == 0)
			json_array_extend(json_object_get(last, st->key), parts);
		else
			json_array_append_new(out, json_pack("{s:s, s:O}", "role", want, st->key, parts));
		json_decref(parts);
	}
	return out;
}

static json_t *anthropic_tool_result(const json_t *m)
{
	return json_pack("{s:s, s:s, s:s}", "type", "tool_result", "tool_use_id", jstr(m, "tool_call_id"), "content",
			 jstr(m, "content"));
}

static json_t *anthropic_text(const char *text)
{
	return json_pack("{s:s, s:s}", "type", "text", "text", text);
}

static json_t *anthropic_tool_call(const json_t *c)
{
	return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", jstr(c, "id"), "name", jstr(c, "name"),
			 "input", args_of(c));
}

static json_t *body_anthropic(const char *model, const char *system, const json_t *msgs, const json_t *tools,
			      unsigned max_tokens)
{
	static const struct turns_style style = { "assistant", "content", anthropic_tool_result, anthropic_text,
						  anthropic_tool_call };
	json_t *out = turns(msgs, &style);
	size_t i;
	json_t *b = json_pack("{s:s, s:i, s:o}", "model", model, "max_tokens", (int)max_tokens, "messages", out);
	if (system && *system)
		json_object_set_new(b, "system", json_string(system));
	if (tools && json_array_size(tools)) {
		json_t *t = json_array(), *x;
		json_array_foreach(tools, i, x)
			json_array_append_new(t, json_pack("{s:s, s:s, s:O}", "name", jstr(x, "name"), "description",
							   jstr(x, "description"), "input_schema",
							   json_object_get(x, "input_schema")));
		json_object_set_new(b, "tools", t);
	}
	return b;
}

static json_t *body_openai(bool compatible, const char *model, const char *system, const json_t *msgs,
			   const json_t *tools, unsigned max_tokens, bool json)
{
	json_t *out = json_array();
	if (system && *system)
		json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system", "content", system));
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = jstr(m, "role");
		if (strcmp(role, "tool") == 0) {
			json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id",
							     jstr(m, "tool_call_id"), "content", jstr(m, "content")));
			continue;
		}
		json_t *o = json_pack("{s:s, s:s}", "role", strcmp(role, "assistant") == 0 ? "assistant" : "user",
				      "content", jstr(m, "content"));
		json_t *calls = json_object_get(m, "tool_calls");
		if (json_array_size(calls)) {
			json_t *tc = json_array(), *c;
			size_t j;
			json_array_foreach(calls, j, c) {
				json_t *a = args_of(c);
				char *s = json_dumps(a, JSON_COMPACT);
				json_decref(a);
				json_array_append_new(tc, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", jstr(c, "id"), "type",
								    "function", "function", "name", jstr(c, "name"),
								    "arguments", s ? s : "{}"));
				free(s);
			}
			json_object_set_new(o, "tool_calls", tc);
		}
		json_array_append_new(out, o);
	}
	json_t *b = json_pack("{s:s, s:o}", "model", model, "messages", out);
	/* OpenAI's own API names the output limit max_completion_tokens;
	 * compatible servers mostly know only max_tokens. */
	json_object_set_new(b, compatible ? "max_tokens" : "max_completion_tokens", json_integer(max_tokens));
	if (json)
		json_object_set_new(b, "response_format", json_pack("{s:s}", "type", "json_object"));
	if (tools && json_array_size(tools)) {
		json_t *t = json_array(), *x;
		json_array_foreach(tools, i, x)
			json_array_append_new(t, json_pack("{s:s, s:{s:s, s:s, s:O}}", "type", "function", "function",
							   "name", jstr(x, "name"), "description",
							   jstr(x, "description"), "parameters",
							   json_object_get(x, "input_schema")));
		json_object_set_new(b, "tools", t);
	}
	return b;
}

static json_t *gemini_tool_result(const json_t *m)
{
	return json_pack("{s:{s:s, s:{s:s}}}", "functionResponse", "name", jstr(m, "name"), "response", "content",
			 jstr(m, "content"));
}

static json_t *gemini_text(const char *text)
{
	return json_pack("{s:s}", "text", text);
}

static json_t *gemini_tool_call(const json_t *c)
{
	return json_pack("{s:{s:s, s:o}}", "functionCall", "name", jstr(c, "name"), "args", args_of(c));
}

static json_t *body_gemini(const char *system, const json_t *msgs, const json_t *tools, unsigned max_tokens,
			   bool json)
{
	static const struct turns_style style = { "model", "parts", gemini_tool_result, gemini_text,
						  gemini_tool_call };
	json_t *out = turns(msgs, &style);
	size_t i;
	json_t *gc = json_pack("{s:i}", "maxOutputTokens", (int)max_tokens);
	if (json)
		json_object_set_new(gc, "responseMimeType", json_string("application/json"));
	json_t *b = json_pack("{s:o, s:o}", "contents", out, "generationConfig", gc);
	if (system && *system)
		json_object_set_new(b, "systemInstruction", json_pack("{s:[{s:s}]}", "parts", "text", system));
	if (tools && json_array_size(tools)) {
		json_t *decl = json_array(), *x;
		json_array_foreach(tools, i, x)
			json_array_append_new(decl, json_pack("{s:s, s:s, s:o}", "name", jstr(x, "name"), "description",
							      jstr(x, "description"), "parameters",
							      gemini_schema(json_object_get(x, "input_schema"))));
		json_object_set_new(b, "tools", json_pack("[{s:o}]", "functionDeclarations", decl));
	}
	return b;
}

json_t *llm_request_body(const struct llm *l, const char *model, const char *system, const json_t *messages,
			 const json_t *tools, unsigned max_tokens, bool json)
{
	switch (l->provider) {
	case LLM_ANTHROPIC: {
		json_t *b = body_anthropic(model, system, messages, tools, max_tokens);
		/* The Messages API has no JSON mode: the system prompt asks for it,
		 * and the answer is validated. */
		(void)json;
		return b;
	}
	case LLM_OPENAI:
	case LLM_COMPATIBLE:
		return body_openai(l->provider == LLM_COMPATIBLE, model, system, messages, tools, max_tokens, json);
	case LLM_GEMINI:
		return body_gemini(system, messages, tools, max_tokens, json);
	}
	return json_object();
}

/* --- answers ------------------------------------------------------------------ */

void llm_reply_free(struct llm_reply *r)
{
	free(r->text);
	json_decref(r->tool_calls);
	memset(r, 0, sizeof(*r));
}

/* A new reference: v when it is an object, else an empty object. */
static json_t *object_or_empty(json_t *v)
{
	return json_is_object(v) ? json_incref(v) : json_object();
}

static uint64_t unum(const json_t *o, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(o, k));
	return v > 0 ? (uint64_t)v : 0;
}

int llm_parse_reply(const struct llm *l, const char *body, size_t len, struct llm_reply *out, struct buf *err)
{
	memset(out, 0, sizeof(*out));
	json_error_t je;
	json_t *doc = json_loadb(body, len, 0, &je);
	if (!json_is_object(doc)) {
		buf_printf(err, "the provider's answer is not a JSON object (%s)", je.text);
		json_decref(doc);
		return -1;
	}
	struct buf text = { 0 };
	buf_puts(&text, "");
	json_t *calls = json_array();
	int rc = 0;
	size_t i;
	json_t *p;
	switch (l->provider) {
	case LLM_ANTHROPIC: {
		json_t *content = json_object_get(doc, "content");
		if (!json_is_array(content)) {
			buf_puts(err, "the provider's answer has no content array");
			rc = -1;
			break;
		}
		json_array_foreach(content, i, p) {
			const char *type = jstr(p, "type");
			if (strcmp(type, "text") == 0)
				buf_puts(&text, jstr(p, "text"));
			else if (strcmp(type, "tool_use") == 0 && *jstr(p, "name"))
				json_array_append_new(calls, json_pack("{s:s, s:s, s:o}", "id", jstr(p, "id"), "name",
								       jstr(p, "name"), "arguments",
								       object_or_empty(json_object_get(p, "input"))));
		}
		snprintf(out->stop, sizeof(out->stop), "%s", jstr(doc, "stop_reason"));
		json_t *u = json_object_get(doc, "usage");
		out->input_tokens = unum(u, "input_tokens");
		out->output_tokens = unum(u, "output_tokens");
		break;
	}
	case LLM_OPENAI:
	case LLM_COMPATIBLE: {
		json_t *ch = json_array_get(json_object_get(doc, "choices"), 0);
		json_t *msg = json_object_get(ch, "message");
		if (!json_is_object(msg)) {
			buf_puts(err, "the provider's answer has no choices[0].message");
			rc = -1;
			break;
		}
		buf_puts(&text, jstr(msg, "content"));
		json_array_foreach(json_object_get(msg, "tool_calls"), i, p) {
			json_t *fn = json_object_get(p, "function");
			const char *a = jstr(fn, "arguments");
			json_t *args = json_loads(*a ? a : "{}", 0, NULL);
			if (!json_is_object(args)) {
				json_decref(args);
				args = json_object();
				json_object_set_new(args, "_unparsed", json_string(a));
			}
			if (*jstr(fn, "name"))
				json_array_append_new(calls, json_pack("{s:s, s:s, s:o}", "id", jstr(p, "id"), "name",
								       jstr(fn, "name"), "arguments", args));
			else
				json_decref(args);
		}
		snprintf(out->stop, sizeof(out->stop), "%s", jstr(ch, "finish_reason"));
		json_t *u = json_object_get(doc, "usage");
		out->input_tokens = unum(u, "prompt_tokens");
		out->output_tokens = unum(u, "completion_tokens");
		break;
	}
	case LLM_GEMINI: {
		json_t *cand = json_array_get(json_object_get(doc, "candidates"), 0);
		json_t *parts = json_object_get(json_object_get(cand, "content"), "parts");
		if (!json_is_array(parts)) {
			const char *why = jstr(json_object_get(doc, "promptFeedback"), "blockReason");
			buf_printf(err, "the provider's answer has no candidates[0].content.parts%s%s",
				   *why ? ": blocked, " : "", why);
			rc = -1;
			break;
		}
		json_array_foreach(parts, i, p) {
			json_t *fc = json_object_get(p, "functionCall");
			if (json_is_string(json_object_get(p, "text")))
				buf_puts(&text, jstr(p, "text"));
			else if (json_is_object(fc) && *jstr(fc, "name")) {
				char id[32];
				snprintf(id, sizeof(id), "call_%zu", json_array_size(calls) + 1);
				json_t *a = json_object_get(fc, "args");
				json_array_append_new(calls, json_pack("{s:s, s:s, s:o}", "id",
								       *jstr(fc, "id") ? jstr(fc, "id") : id, "name",
								       jstr(fc, "name"), "arguments", object_or_empty(a)));
			}
		}
		snprintf(out->stop, sizeof(out->stop), "%s", jstr(cand, "finishReason"));
		json_t *u = json_object_get(doc, "usageMetadata");
		out->input_tokens = unum(u, "promptTokenCount");
		out->output_tokens = unum(u, "candidatesTokenCount");
		break;
	}
	}
	json_decref(doc);
	if (rc < 0) {
		buf_free(&text);
		json_decref(calls);
		return -1;
	}
	out->text = text.data;
	out->tool_calls = calls;
	return 0;
}

/* The provider's error message of an answer, or the start of the body. */
static void error_message(const char *body, size_t len, struct buf *out)
{
	json_t *doc = json_loadb(body, len, 0, NULL);
	json_t *e = json_object_get(doc, "error");
	const char *m = json_is_string(e) ? json_string_value(e) : jstr(e, "message");
	if (*m)
		buf_printf(out, "%.500s", m);
	else
		buf_printf(out, "%.200s", len ? body : "(no body)");
	json_decref(doc);
}

/* --- transport ------------------------------------------------------------------ */

/* The seconds of a Retry-After header's value (delta-seconds), capped at
 * a day; -1 when absent or not a number. */
static long retry_after_s(const char *v)
{
	char *end;
	double x = strtod(v, &end);
	if (end == v || !(x >= 0))
		return -1;
	return x > 86400 ? 86400 : (long)(x + 0.999);
}

static void url_of(const struct llm *l, const char *model, struct buf *url)
{
	switch (l->provider) {
	case LLM_ANTHROPIC:
		buf_printf(url, "%s/v1/messages", l->base_url);
		break;
	case LLM_OPENAI:
	case LLM_COMPATIBLE: {
		size_t n = strlen(l->base_url);
		if (n >= 17 && strcmp(l->base_url + n - 17, "/chat/completions") == 0)
			buf_puts(url, l->base_url);
		else
			buf_printf(url, "%s/chat/completions", l->base_url);
		break;
	}
	case LLM_GEMINI: {
		char *esc = curl_easy_escape(NULL, model, 0);
		buf_printf(url, "%s/models/%s:generateContent", l->base_url, esc ? esc : "");
		curl_free(esc);
		break;
	}
	}
}

static bool retryable(long status)
{
	return status == 429 || status == 500 || status == 502 || status == 503 || status == 529;
}

int llm_chat(struct llm *l, const char *model, const char *system, const json_t *messages, const json_t *tools,
	     unsigned max_tokens, bool json, struct llm_reply *out, struct buf *err)
{
	memset(out, 0, sizeof(*out));
	json_t *body = llm_request_body(l, model, system, messages, tools, max_tokens, json);
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text) {
		buf_puts(err, "out of memory");
		return LLM_ERROR;
	}
	size_t blen = strlen(text);
	uint64_t est_in = (blen + 3) / 4;
	/* The limits are checked before anything is sent. */
	int64_t minute = now_unix_ms() / 60000;
	pthread_mutex_lock(&l->mu);
	uint64_t max_in = l->max_in, max_out = l->max_out;
	uint64_t used_in, used_out;
	usage_sum(l, minute, &used_in, &used_out);
	bool over_in = l->max_in && used_in + est_in > l->max_in;
	bool over_out = l->max_out && used_out + max_tokens > l->max_out;
	if (!over_in && !over_out)
		usage_add(l, minute, est_in, max_tokens); /* reserved; corrected below */
	pthread_mutex_unlock(&l->mu);
	if (over_in || over_out) {
		if (over_in)
			buf_printf(err, "token limit: this request needs about %llu input tokens and %llu of the "
					"%llu input tokens an hour are used (--llm-max-input-tokens-per-hour)",
				   (unsigned long long)est_in, (unsigned long long)used_in,
				   (unsigned long long)max_in);
		else
			buf_printf(err, "token limit: this request may answer %u output tokens and %llu of the "
					"%llu output tokens an hour are used (--llm-max-output-tokens-per-hour)",
				   max_tokens, (unsigned long long)used_out, (unsigned long long)max_out);
		free(text);
		return LLM_REFUSED;
	}
	struct buf url = { 0 }, hdr = { 0 };
	url_of(l, model, &url);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	switch (l->provider) {
	case LLM_ANTHROPIC:
		buf_printf(&hdr, "x-api-key: %s", l->key);
		h = curl_slist_append(h, "anthropic-version: 2023-06-01");
		break;
	case LLM_OPENAI:
	case LLM_COMPATIBLE:
		buf_printf(&hdr, "Authorization: Bearer %s", l->key);
		break;
	case LLM_GEMINI:
		buf_printf(&hdr, "x-goog-api-key: %s", l->key);
		break;
	}
	h = curl_slist_append(h, hdr.data);
	int rc = LLM_ERROR;
	long status = 0;
	struct json_answer r = { 0 };
	struct json_post post = { .url = url.data, .body = text, .headers = h, .timeout_ms = (long)l->timeout_ms,
				  .connect_timeout_ms = 10000, .max_answer = LLM_MAX_RESPONSE,
				  .want_header = "retry-after" };
	for (unsigned attempt = 0;; attempt++) {
		CURLcode cc = json_post(&post, &r);
		if (cc == CURLE_FAILED_INIT) {
			buf_puts(err, "libcurl could not start a request");
			break;
		}
		status = r.status;
		if (cc != CURLE_OK) {
			buf_reset(err);
			if (r.over)
				buf_printf(err, "the provider's answer is larger than %u bytes", LLM_MAX_RESPONSE);
			else
				buf_printf(err, "the provider could not be reached: %s", curl_easy_strerror(cc));
			if (cc == CURLE_OPERATION_TIMEDOUT && attempt < l->max_retries && attempt == 0)
				continue; /* one more try after a timeout */
			break;
		}
		if (status >= 200 && status < 300) {
			if (llm_parse_reply(l, r.body.data ? r.body.data : "", r.body.len, out, err) == 0)
				rc = LLM_OK;
			break;
		}
		buf_reset(err);
		buf_printf(err, "the provider answered %ld: ", status);
		error_message(r.body.data ? r.body.data : "", r.body.len, err);
		if (!retryable(status) || attempt >= l->max_retries)
			break;
		long wait = retry_after_s(r.header);
		if (wait < 0)
			wait = 1L << (attempt < 5 ? attempt : 5);
		if (wait > LLM_MAX_RETRY_WAIT_S) {
			buf_printf(err, " (it asked to retry after %ld s, more than the %d s ember waits)", wait,
				   LLM_MAX_RETRY_WAIT_S);
			break;
		}
		log_info("llm: %s answered %ld, retry %u of %u in %ld s", provider_names[l->provider], status,
			 attempt + 1, l->max_retries, wait);
		struct timespec ts = { .tv_sec = wait };
		while (nanosleep(&ts, &ts) < 0)
			;
	}
	if (rc != LLM_OK && status && retryable(status))
		buf_printf(err, " (after %u retries)", l->max_retries);
	/* The usage: what the provider counted, else the estimate. */
	pthread_mutex_lock(&l->mu);
	struct usage_bucket *b = &l->usage[minute % USAGE_BUCKETS];
	if (b->minute == minute) {
		b->in -= b->in >= est_in ? est_in : b->in;
		b->out -= b->out >= max_tokens ? max_tokens : b->out;
	}
	if (rc == LLM_OK)
		usage_add(l, now_unix_ms() / 60000, out->input_tokens ? out->input_tokens : est_in,
			  out->output_tokens ? out->output_tokens : (strlen(out->text) + 3) / 4);
	pthread_mutex_unlock(&l->mu);
	llm_scrub(l, err);
	curl_slist_free_all(h);
	/* The header held the key. */
	if (hdr.data)
		memset(hdr.data, 0, hdr.len);
	buf_free(&hdr);
	buf_free(&url);
	buf_free(&r.body);
	free(text);
	return rc;
}

void llm_status_json(struct llm *l, struct buf *out)
{
	if (!l) {
		buf_puts(out, "{\"provider\":null}");
		return;
	}
	uint64_t in, o;
	pthread_mutex_lock(&l->mu);
	usage_sum(l, now_unix_ms() / 60000, &in, &o);
	pthread_mutex_unlock(&l->mu);
	pthread_mutex_lock(&l->mu);
	json_t *d = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:{s:o, s:o}, s:{s:I, s:I}, s:I, s:i}", "provider",
			      provider_names[l->provider], "base_url", l->base_url, "models", "examine",
			      l->model_examine, "summarize", l->model_summarize, "key_source", l->key_source,
			      "limits", "input_tokens_per_hour",
			      l->max_in ? json_integer((json_int_t)l->max_in) : json_null(), "output_tokens_per_hour",
			      l->max_out ? json_integer((json_int_t)l->max_out) : json_null(), "usage_last_hour",
			      "input_tokens", (json_int_t)in, "output_tokens", (json_int_t)o, "timeout_ms",
			      (json_int_t)l->timeout_ms, "max_retries", (int)l->max_retries);
	pthread_mutex_unlock(&l->mu);
	char *s = json_dumps(d, JSON_COMPACT);
	json_decref(d);
	buf_puts(out, s ? s : "{}");
	free(s);
}

/* --- settings ------------------------------------------------------------------- */

static bool model_valid(const char *m)
{
	size_t n = strlen(m);
	if (!n || n >= LLM_MAX_MODEL)
		return false;
	for (const char *p = m; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._:/@-", *p))
			return false;
	return true;
}

static const char *const settable[] = { "model_examine", "model_summarize", "max_input_tokens_per_hour",
					"max_output_tokens_per_hour", "recommendations", NULL };

/* Checks doc (every key) and, with apply, applies it over the flags'
 * values (mu held by the caller when applying). */
static int settings_check(const json_t *doc, struct buf *err)
{
	if (!json_is_object(doc)) {
		buf_puts(err, "expected a JSON object");
		return -1;
	}
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)doc, k, v) {
		size_t i = 0;
		while (settable[i] && strcmp(settable[i], k) != 0)
			i++;
		if (!settable[i]) {
			if (strstr(k, "key"))
				buf_printf(err, "%.40s: the API key is set only by --llm-api-key-file or its environment "
						"variable, never through the API", k);
			else if (strcmp(k, "provider") == 0 || strcmp(k, "base_url") == 0)
				buf_printf(err, "%s: set by --llm-%s (with its key) when the server starts", k,
					   k[0] == 'p' ? "provider" : "base-url");
			else
				buf_printf(err, "%.60s: not a setting (expected one of model_examine, model_summarize, "
						"max_input_tokens_per_hour, max_output_tokens_per_hour, recommendations)", k);
			return -1;
		}
		if (json_is_null(v))
			continue;
		if (i < 2 && (!json_is_string(v) || !model_valid(json_string_value(v)))) {
			buf_printf(err, "%s: expected a model name of 1 to %d letters, digits and ._:/@-", k,
				   LLM_MAX_MODEL - 1);
			return -1;
		}
		if ((i == 2 || i == 3) &&
		    (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1LL << 40))) {
			buf_printf(err, "%s: expected an integer from 0 (no limit) to %lld, or null", k, 1LL << 40);
			return -1;
		}
		if (i == 4 && !json_is_boolean(v)) {
			buf_printf(err, "%s: expected true or false, or null", k);
			return -1;
		}
	}
	return 0;
}

/* The flags' values with saved over them; mu held. */
static void settings_apply(struct llm *l)
{
	memcpy(l->model_examine, l->flag_examine, sizeof(l->model_examine));
	memcpy(l->model_summarize, l->flag_summarize, sizeof(l->model_summarize));
	l->max_in = l->flag_max_in;
	l->max_out = l->flag_max_out;
	l->recs = l->flag_recs;
	json_t *v;
	if ((v = json_object_get(l->saved, "model_examine")) && json_is_string(v))
		snprintf(l->model_examine, sizeof(l->model_examine), "%s", json_string_value(v));
	if ((v = json_object_get(l->saved, "model_summarize")) && json_is_string(v))
		snprintf(l->model_summarize, sizeof(l->model_summarize), "%s", json_string_value(v));
	if ((v = json_object_get(l->saved, "max_input_tokens_per_hour")) && json_is_integer(v))
		l->max_in = (uint64_t)json_integer_value(v);
	if ((v = json_object_get(l->saved, "max_output_tokens_per_hour")) && json_is_integer(v))
		l->max_out = (uint64_t)json_integer_value(v);
	if ((v = json_object_get(l->saved, "recommendations")) && json_is_boolean(v))
		l->recs = json_is_true(v);
}

int llm_settings_load(struct llm *l, const char *data_dir, struct buf *err)
{
	struct buf p = { 0 };
	buf_printf(&p, "%s/llm-settings.json", data_dir);
	free(l->settings_path);
	l->settings_path = p.data;
	char *text = NULL;
	size_t n;
	int rc = read_file(l->settings_path, 1 << 20, &text, &n);
	if (rc == -ENOENT)
		return 0;
	if (rc < 0) {
		buf_printf(err, "%s: cannot read it: %s", l->settings_path, strerror(-rc));
		return -1;
	}
	json_t *doc = json_loadb(text, n, 0, NULL);
	free(text);
	struct buf why = { 0 };
	if (!doc || settings_check(doc, &why) < 0) {
		buf_printf(err, "%s: %s (fix or delete the file)", l->settings_path, why.data ? why.data : "not JSON");
		buf_free(&why);
		json_decref(doc);
		return -1;
	}
	pthread_mutex_lock(&l->mu);
	json_decref(l->saved);
	l->saved = doc;
	settings_apply(l);
	pthread_mutex_unlock(&l->mu);
	return 0;
}

void llm_settings_json(struct llm *l, struct buf *out)
{
	if (!l) {
		buf_puts(out, "{\"provider\":null}");
		return;
	}
	pthread_mutex_lock(&l->mu);
	json_t *over = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(l->saved, k, v) json_array_append_new(over, json_string(k));
	json_t *d = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:b, s:{s:s, s:s, s:I, s:I, s:b}, s:o}",
			      "provider", provider_names[l->provider], "base_url", l->base_url, "key_source",
			      l->key_source, "model_examine", l->model_examine, "model_summarize",
			      l->model_summarize, "max_input_tokens_per_hour", (json_int_t)l->max_in,
			      "max_output_tokens_per_hour", (json_int_t)l->max_out, "recommendations", l->recs,
			      "defaults", "model_examine", l->flag_examine, "model_summarize", l->flag_summarize,
			      "max_input_tokens_per_hour", (json_int_t)l->flag_max_in, "max_output_tokens_per_hour",
			      (json_int_t)l->flag_max_out, "recommendations", l->flag_recs, "overridden", over);
	pthread_mutex_unlock(&l->mu);
	char *s = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(d);
	buf_puts(out, s ? s : "{}");
	free(s);
}

int llm_settings_put(struct llm *l, const json_t *doc, struct buf *err)
{
	if (settings_check(doc, err) < 0)
		return -1;
	pthread_mutex_lock(&l->mu);
	json_t *next = l->saved ? json_deep_copy(l->saved) : json_object();
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)doc, k, v) {
		if (json_is_null(v))
			json_object_del(next, k);
		else
			json_object_set(next, k, v);
	}
	int rc = 0;
	if (l->settings_path) {
		struct buf tmp = { 0 };
		buf_printf(&tmp, "%s.tmp", l->settings_path);
		/* Written whole, then renamed over: never half a file. */
		if (json_dump_file(next, tmp.data, JSON_COMPACT | JSON_SORT_KEYS) < 0 ||
		    rename(tmp.data, l->settings_path) < 0) {
			buf_printf(err, "%s: cannot write it", l->settings_path);
			unlink(tmp.data);
			rc = -2;
		}
		buf_free(&tmp);
	}
	if (rc == 0) {
		json_decref(l->saved);
		l->saved = next;
		settings_apply(l);
	} else {
		json_decref(next);
	}
	pthread_mutex_unlock(&l->mu);
	return rc;
}
