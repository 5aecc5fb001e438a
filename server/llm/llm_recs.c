/* llm_recs.c - the LLM mode of the recommendations (contract in llm_recs.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm_recs.h"
#include "log.h"
#include "util.h"

#define MAX_PROMPT_CHARS 24000
#define EXAMINE_TOKENS 2048
#define SUMMARY_TOKENS 512

const char LLM_EXAMINE_SCHEMA[] =
	"{\"type\":\"object\",\"additionalProperties\":false,"
	"\"required\":[\"diagnosis\",\"actions\",\"confidence\"],"
	"\"properties\":{"
	"\"diagnosis\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":6000},"
	"\"actions\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":10,\"items\":{"
	"\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"title\",\"detail\",\"savings_share\"],"
	"\"properties\":{\"title\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":200},"
	"\"detail\":{\"type\":\"string\",\"maxLength\":3000},"
	"\"source\":{\"type\":\"string\",\"maxLength\":300},"
	"\"savings_share\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1}}}},"
	"\"confidence\":{\"type\":\"string\",\"enum\":[\"high\",\"medium\",\"low\"]},"
	"\"lower_priority\":{\"type\":\"array\",\"maxItems\":10,\"items\":{\"type\":\"string\",\"maxLength\":500}}}}";

const char LLM_SUMMARY_SCHEMA[] =
	"{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"title\",\"description\",\"tags\"],"
	"\"properties\":{\"title\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":120},"
	"\"description\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":800},"
	"\"tags\":{\"type\":\"array\",\"maxItems\":8,\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":40}}}}";

/* --- validation --------------------------------------------------------------- */

/* The schema's type names, each with the JSON types it admits. */
#define JT(t) (1u << (t))
static const struct {
	const char *name;
	unsigned types;
} schema_types[] = {
	{ "object", JT(JSON_OBJECT) },
	{ "array", JT(JSON_ARRAY) },
	{ "string", JT(JSON_STRING) },
	{ "number", JT(JSON_INTEGER) | JT(JSON_REAL) },
	{ "integer", JT(JSON_INTEGER) },
	{ "boolean", JT(JSON_TRUE) | JT(JSON_FALSE) },
};
#undef JT

static bool type_is(const char *t, const json_t *v)
{
	for (size_t i = 0; i < sizeof(schema_types) / sizeof(schema_types[0]); i++)
		if (strcmp(t, schema_types[i].name) == 0)
			return v && (schema_types[i].types >> json_typeof(v) & 1);
	return false;
}

/* A schema's bounds on a size: a string's length, an array's items. */
struct size_bounds {
	const char *min_key, *max_key; /* the schema's keywords */
	const char *fewer, *more, *unit; /* the words of the refusals */
};
static const struct size_bounds string_size = { "minLength", "maxLength", "shorter", "longer",
						 "characters" };
static const struct size_bounds array_size = { "minItems", "maxItems", "fewer", "more", "items" };

/* n within the bounds schema s gives (b names them): 0, or -1 with err set. */
static int check_size(const json_t *s, size_t n, const struct size_bounds *b, const char *at,
		      struct buf *err)
{
	json_t *lim = json_object_get(s, b->min_key);
	if (lim && n < (size_t)json_integer_value(lim)) {
		buf_printf(err, "%s: %s than %lld %s", at, b->fewer, (long long)json_integer_value(lim),
			   b->unit);
		return -1;
	}
	lim = json_object_get(s, b->max_key);
	if (lim && n > (size_t)json_integer_value(lim)) {
		buf_printf(err, "%s: %s than %lld %s", at, b->more, (long long)json_integer_value(lim),
			   b->unit);
		return -1;
	}
	return 0;
}

static int validate_at(const json_t *s, const json_t *v, struct buf *path, struct buf *err)
{
	const char *type = json_string_value(json_object_get(s, "type"));
	const char *at = path->len ? path->data : "the answer";
	if (type && !type_is(type, v)) {
		buf_printf(err, "%s: expected %s %s", at, strchr("aeiou", type[0]) ? "an" : "a", type);
		return -1;
	}
	json_t *en = json_object_get(s, "enum");
	if (json_is_array(en)) {
		bool found = false;
		size_t i;
		json_t *e;
		json_array_foreach(en, i, e) found = found || json_equal(e, v);
		if (!found) {
			buf_printf(err, "%s: not one of the allowed values", at);
			return -1;
		}
	}
	json_t *lim;
	if (json_is_string(v) && check_size(s, json_string_length(v), &string_size, at, err) < 0)
		return -1;
	if (json_is_number(v)) {
		double x = json_number_value(v);
		if (!isfinite(x) || ((lim = json_object_get(s, "minimum")) && x < json_number_value(lim)) ||
		    ((lim = json_object_get(s, "maximum")) && x > json_number_value(lim))) {
			buf_printf(err, "%s: %g is out of range", at, x);
			return -1;
		}
	}
	if (json_is_array(v)) {
		if (check_size(s, json_array_size(v), &array_size, at, err) < 0)
			return -1;
		json_t *items = json_object_get(s, "items");
		size_t i;
		json_t *e;
		json_array_foreach(v, i, e) {
			size_t keep = path->len;
			buf_printf(path, "[%zu]", i);
			int rc = items ? validate_at(items, e, path, err) : 0;
			path->len = keep;
			if (path->data)
				path->data[keep] = 0;
			if (rc < 0)
				return -1;
		}
	}
	if (json_is_object(v)) {
		json_t *props = json_object_get(s, "properties");
		size_t i;
		json_t *e;
		json_array_foreach(json_object_get(s, "required"), i, e) {
			if (!json_object_get(v, json_string_value(e))) {
				buf_printf(err, "%s: \"%s\" is missing", at, json_string_value(e));
				return -1;
			}
		}
		const char *k;
		json_object_foreach((json_t *)v, k, e) {
			json_t *ps = json_object_get(props, k);
			if (!ps) {
				if (json_is_false(json_object_get(s, "additionalProperties"))) {
					buf_printf(err, "%s: unexpected key \"%.60s\"", at, k);
					return -1;
				}
				continue;
			}
			size_t keep = path->len;
			buf_printf(path, "%s%s", path->len ? "." : "", k);
			int rc = validate_at(ps, e, path, err);
			path->len = keep;
			if (path->data)
				path->data[keep] = 0;
			if (rc < 0)
				return -1;
		}
	}
	return 0;
}

int llm_validate(const json_t *schema, const json_t *doc, struct buf *err)
{
	struct buf path = { 0 };
	int rc = validate_at(schema, doc, &path, err);
	buf_free(&path);
	return rc;
}

json_t *llm_json_answer(const char *text, struct buf *err)
{
	const char *s = text ? text : "";
	size_t n = strlen(s);
	const char *fence = strstr(s, "```");
	if (fence) {
		const char *start = strchr(fence + 3, '\n');
		const char *end = start ? strstr(start, "```") : NULL;
		if (start && end) {
			s = start + 1;
			n = (size_t)(end - s);
		}
	}
	json_error_t je;
	json_t *doc = json_loadb(s, n, 0, &je);
	if (!doc) {
		buf_printf(err, "the answer is not JSON (%s at character %d)", je.text, je.position);
		return NULL;
	}
	if (!json_is_object(doc)) {
		buf_puts(err, "the answer is not a JSON object");
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* --- the two steps --------------------------------------------------------------- */

struct step_result {
	json_t *doc;
	int status; /* LLM_OK, LLM_ERROR, LLM_REFUSED */
	unsigned attempts;
	struct buf err;
};

/* One step: asks, validates, asks once more with what was wrong. */
static void run_step(struct llm *l, const char *model, const char *system, const char *user,
		     const char *schema_text, unsigned max_tokens, uint64_t *in, uint64_t *out,
		     struct step_result *res)
{
	json_t *schema = json_loads(schema_text, 0, NULL);
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", user);
	res->status = LLM_ERROR;
	for (res->attempts = 1; res->attempts <= 2; res->attempts++) {
		struct llm_reply r;
		buf_reset(&res->err);
		int rc = llm_chat(l, model, system, msgs, NULL, max_tokens, true, &r, &res->err);
		if (rc != LLM_OK) {
			res->status = rc;
			break;
		}
		*in += r.input_tokens;
		*out += r.output_tokens;
		struct buf why = { 0 };
		json_t *doc = llm_json_answer(r.text, &why);
		if (doc && llm_validate(schema, doc, &why) == 0) {
			res->doc = doc;
			res->status = LLM_OK;
			llm_reply_free(&r);
			buf_free(&why);
			break;
		}
		json_decref(doc);
		buf_printf(&res->err, "malformed answer: %s", why.data ? why.data : "invalid");
		/* Once more, with the model's answer and what was wrong with it. */
		json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", r.text));
		struct buf again = { 0 };
		buf_printf(&again, "That answer is not valid: %s. Answer again with only one JSON object that "
				   "follows the schema, and nothing else.",
			   why.data ? why.data : "invalid");
		json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", again.data));
		buf_free(&again);
		buf_free(&why);
		llm_reply_free(&r);
	}
	if (res->attempts > 2)
		res->attempts = 2;
	json_decref(msgs);
	json_decref(schema);
}

static const char *jstr(const json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

/* What the model reads of a recommendation: the built-in analysis as
 * evidence, the hot traces' frames, capped at MAX_PROMPT_CHARS. */
static void prompt_of(const json_t *rec, struct buf *out)
{
	json_t *tech = json_object_get(rec, "technical");
	json_t *traces = json_object_get(tech, "hot_traces");
	json_t *t = json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}", "application",
			      json_object_get(rec, "application"), "kind", json_object_get(rec, "kind"),
			      "event_kind", json_object_get(rec, "event_kind"), "unit", json_object_get(rec, "unit"),
			      "average_use", json_object_get(rec, "cores"), "peak", json_object_get(rec, "peak"),
			      "share_of_project", json_object_get(rec, "share"), "built_in_findings",
			      json_object_get(rec, "evidence"), "built_in_actions", json_object_get(rec, "actions"));
	json_t *tr = json_array();
	size_t i;
	json_t *x;
	json_array_foreach(traces, i, x) {
		if (i >= 10)
			break;
		json_array_append(tr, x);
	}
	json_object_set_new(t, "hot_traces", tr);
	char *s = json_dumps(t, JSON_COMPACT);
	json_decref(t);
	buf_puts(out, "Examine this application's hot code paths (stacks run root to leaf) and the findings of "
		      "ember's built-in analyzer, which are evidence, not the answer. Write the diagnosis and the "
		      "ranked actions that would save the most time.\n\n");
	if (s && strlen(s) > MAX_PROMPT_CHARS) {
		buf_append(out, s, MAX_PROMPT_CHARS);
		buf_puts(out, "\n(truncated)");
	} else if (s) {
		buf_puts(out, s);
	}
	free(s);
}

static json_t *failed(const char *status, const char *step, const struct step_result *s)
{
	json_t *o = json_pack("{s:s, s:s, s:s}", "status", status, "step", step, "error",
			      s->err.data ? s->err.data : "error");
	if (strcmp(status, "error") == 0)
		json_object_set_new(o, "attempts", json_integer(s->attempts));
	return o;
}

json_t *llm_recs_analyze(void *ctx, const char *project, const json_t *rec)
{
	struct llm *l = ctx;
	if (!llm_recs_enabled(l))
		return NULL;
	uint64_t in = 0, out = 0;
	char mex[LLM_MAX_MODEL], msu[LLM_MAX_MODEL];
	llm_model(l, false, mex);
	llm_model(l, true, msu);
	struct buf user = { 0 };
	prompt_of(rec, &user);
	char sys[sizeof(LLM_EXAMINE_SCHEMA) + 600];
	snprintf(sys, sizeof(sys),
		 "You are a performance engineer reviewing continuous profiling data of the ember profiler. "
		 "Answer with one JSON object and nothing else, valid against this JSON Schema: %s. "
		 "savings_share is the share (0 to 1) of the application's measured time the action saves; "
		 "name source locations (file:line) where the frames give them.",
		 LLM_EXAMINE_SCHEMA);
	struct step_result ex = { 0 }, su = { 0 };
	json_t *res;
	run_step(l, mex, sys, user.data, LLM_EXAMINE_SCHEMA, EXAMINE_TOKENS, &in, &out, &ex);
	if (ex.status != LLM_OK) {
		res = failed(ex.status == LLM_REFUSED ? "refused" : "error", "examine", &ex);
		goto done;
	}
	char *exam = json_dumps(ex.doc, JSON_COMPACT);
	buf_reset(&user);
	buf_printf(&user, "Application %s (%s). Examination:\n%s", jstr(rec, "application"), jstr(rec, "kind"),
		   exam ? exam : "{}");
	free(exam);
	snprintf(sys, sizeof(sys),
		 "Summarize and classify a performance examination. Answer with one JSON object and nothing "
		 "else, valid against this JSON Schema: %s. The title names the problem in a few words; tags "
		 "are short lower-case classes (e.g. allocation, regex, compression, locking, io, gpu).",
		 LLM_SUMMARY_SCHEMA);
	run_step(l, msu, sys, user.data, LLM_SUMMARY_SCHEMA, SUMMARY_TOKENS, &in, &out, &su);
	if (su.status != LLM_OK) {
		res = failed(su.status == LLM_REFUSED ? "refused" : "error", "summarize", &su);
		goto done;
	}
	double avg = json_number_value(json_object_get(rec, "cores"));
	json_t *acts = json_array();
	size_t i;
	json_t *a;
	json_array_foreach(json_object_get(ex.doc, "actions"), i, a) {
		double sh = json_number_value(json_object_get(a, "savings_share"));
		json_array_append_new(acts, json_pack("{s:i, s:s, s:s, s:s, s:f, s:f}", "rank", (int)i + 1, "title",
						      jstr(a, "title"), "detail", jstr(a, "detail"), "source",
						      jstr(a, "source"), "savings_share", sh, "savings", sh * avg));
	}
	json_t *lower = json_object_get(ex.doc, "lower_priority");
	res = json_pack("{s:s, s:s, s:{s:s, s:s}, s:O, s:O, s:O, s:O, s:o, s:O, s:o, s:{s:I, s:I}}", "status", "ok",
			"provider", llm_provider_name(l), "models", "examine", mex, "summarize",
			msu, "title", json_object_get(su.doc, "title"), "description",
			json_object_get(su.doc, "description"), "tags", json_object_get(su.doc, "tags"),
			"diagnosis", json_object_get(ex.doc, "diagnosis"), "actions", acts, "confidence",
			json_object_get(ex.doc, "confidence"), "lower_priority",
			json_is_array(lower) ? json_incref(lower) : json_array(), "usage", "input_tokens",
			(json_int_t)in, "output_tokens", (json_int_t)out);
done:
	if (!res)
		res = json_pack("{s:s, s:s}", "status", "error", "error", "out of memory");
	if (strcmp(jstr(res, "status"), "ok") != 0)
		log_warn("llm: recommendation %s of project %s: %s", jstr(rec, "id"), project, jstr(res, "error"));
	json_decref(ex.doc);
	json_decref(su.doc);
	buf_free(&ex.err);
	buf_free(&su.err);
	buf_free(&user);
	return res;
}
