/* uregex.h - the regular expressions a user sends (a query's search and
 * frame-mask patterns, CEL's matches()), compiled once per query and
 * matched within bounds, so that no pattern can hold a query thread:
 *
 *   - each match stops after UREGEX_MATCH_LIMIT backtracking steps and
 *     UREGEX_HEAP_LIMIT_KIB of backtracking memory (PCRE2's match and heap
 *     limits; the JIT stack is bounded too);
 *   - a matcher (one per query) sums the time its matches take and stops
 *     once that passes its budget (UREGEX_BUDGET_MS unless told).
 *
 * Patterns are JIT-compiled where PCRE2 supports it (a pathological
 * pattern then reaches its limit in about a millisecond, not tens).
 * The first bound reached is remembered with the pattern and the text it
 * was matching; from then on every match of that matcher answers -1 at
 * once, and the query answers UREGEX_RC, which the API turns into 422
 * with uregex_error's message.
 *
 * Ownership: a struct uregex owns its compiled code and copies of its
 * pattern and name; a matcher owns its match block and context.
 * Threading: a matcher belongs to one thread at a time; a compiled
 * pattern may be shared by several matchers.
 */
#ifndef EMBER_SERVER_UREGEX_H
#define EMBER_SERVER_UREGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define UREGEX_MATCH_LIMIT 1000000
#define UREGEX_HEAP_LIMIT_KIB 16384
#define UREGEX_BUDGET_MS 1000
/* What a query returns when a pattern reached a bound (422). */
#define UREGEX_RC (-2)

/* Compile options. */
#define UREGEX_UTF 1u /* UTF-8 pattern; invalid UTF-8 subjects still match in their valid parts; no \C */

struct uregex;
struct uregex_matcher;

/* Compiles pat (len bytes). what names the pattern in messages (e.g.
 * "search"). NULL with PCRE2's message in msg and the offset of the error
 * in *off. */
struct uregex *uregex_compile(const char *pat, size_t len, unsigned options, const char *what,
			      char *msg, size_t msgsize, size_t *off);
void uregex_free(struct uregex *re);

/* budget_ms: the total time its matches may take; 0 = UREGEX_BUDGET_MS. */
struct uregex_matcher *uregex_matcher_new(uint64_t budget_ms);
void uregex_matcher_free(struct uregex_matcher *m);

/* 1 when re finds a match in s, 0 when it does not, -1 when a bound was
 * reached, by this match or an earlier one of m. */
int uregex_match(struct uregex_matcher *m, const struct uregex *re, const char *s, size_t len);
/* Whether a bound was reached; the message for the client is appended to
 * err (naming the pattern, the bound and the text). */
bool uregex_failed(const struct uregex_matcher *m);
void uregex_error(const struct uregex_matcher *m, struct buf *err);

#endif
