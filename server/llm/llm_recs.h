/* llm_recs.h - the LLM mode of the recommendations (docs/recommendations.md,
 * "LLM mode"): the analyzer recs_set_analyzer calls (server/query/recommend.h)
 * for each recommendation to examine, in the reference's two steps:
 *
 * 1. trace examination (--llm-model-examine): the hot traces, their
 *    frames and source lines, and the built-in analyzer's findings given as
 *    evidence; the answer is an object of LLM_EXAMINE_SCHEMA (diagnosis,
 *    ranked actions with the share of the application's time each saves,
 *    confidence, lower-priority ideas);
 * 2. summary and classification (--llm-model-summarize): the
 *    examination in, LLM_SUMMARY_SCHEMA out (title, description, tags).
 *
 * Each answer must be one JSON object (a ```json fence around it is
 * taken off) valid against its schema (llm_validate); a malformed one is
 * asked for again once, with what was wrong, and a second malformed one
 * makes the result an error: {"status":"error","step","error","attempts"}
 * (never the model's raw text). A request the token limits refuse gives
 * {"status":"refused","step","error"}. A good one gives
 * {"status":"ok","provider","models":{"examine","summarize"},"title",
 * "description","tags","diagnosis","actions":[{"rank","title","detail",
 * "source","savings_share","savings"}],"confidence","lower_priority",
 * "usage":{"input_tokens","output_tokens"}}, savings in the
 * recommendation's unit (savings_share x its average use).
 */
#ifndef EMBER_SERVER_LLM_RECS_H
#define EMBER_SERVER_LLM_RECS_H

#include <jansson.h>

#include "buf.h"
#include "llm.h"

/* ctx: a struct llm. A new result object (never NULL). */
json_t *llm_recs_analyze(void *ctx, const char *project, const json_t *rec);

/* Validates doc against schema, a subset of JSON Schema: type (object,
 * array, string, number, integer, boolean), properties, required,
 * additionalProperties false, items, enum, minLength, maxLength, minItems,
 * maxItems, minimum, maximum. 0, or -1 with err naming the first bad path. */
int llm_validate(const json_t *schema, const json_t *doc, struct buf *err);

/* The schemas (JSON text), for the tests and the docs. */
extern const char LLM_EXAMINE_SCHEMA[];
extern const char LLM_SUMMARY_SCHEMA[];

/* Takes one JSON object out of a model's text: the whole text, or the
 * inside of a ```json fence. NULL (with err) when it is none. */
json_t *llm_json_answer(const char *text, struct buf *err);

#endif
