/* uregex.c - see uregex.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "uregex.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonw.h"
#include "util.h"

#ifdef PCRE2_MATCH_INVALID_UTF
#define UTF_OPTIONS (PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C)
#else
#define UTF_OPTIONS PCRE2_NEVER_BACKSLASH_C
#endif
#define JIT_STACK_MIN (32 * 1024)
#define JIT_STACK_MAX (1024 * 1024)
#define SUBJECT_SHOWN 64 /* bytes of the text named in a message */

struct uregex {
	pcre2_code *code;
	char *pattern, *what;
};

struct uregex_matcher {
	pcre2_match_context *mctx;
	pcre2_match_data *md;
	pcre2_jit_stack *jit_stack; /* NULL: PCRE2's default (32 KiB) */
	uint64_t budget_ns, spent_ns;
	/* the first bound reached */
	char *limit; /* NULL = none */
	char *what, *pattern, *subject;
};

struct uregex *uregex_compile(const char *pat, size_t len, unsigned options, const char *what,
			      char *msg, size_t msgsize, size_t *off)
{
	int ec;
	PCRE2_SIZE eoff = 0;
	uint32_t opts = (options & UREGEX_UTF) ? UTF_OPTIONS : 0;
	pcre2_code *code = pcre2_compile((PCRE2_SPTR)(pat ? pat : ""), len, opts, &ec, &eoff, NULL);
	if (!code) {
		if (pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, msgsize) == PCRE2_ERROR_BADDATA)
			snprintf(msg, msgsize, "unknown error %d", ec);
		*off = (size_t)eoff;
		return NULL;
	}
	/* Without JIT (no support on this platform, or out of executable
	 * memory) the interpreter runs it, within the same limits. */
	(void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
	struct uregex *re = xcalloc(1, sizeof(*re));
	re->code = code;
	re->pattern = xstrndup(pat ? pat : "", len);
	re->what = xstrdup(what ? what : "pattern");
	return re;
}

void uregex_free(struct uregex *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	free_all(re->pattern, re->what, re);
}

struct uregex_matcher *uregex_matcher_new(uint64_t budget_ms)
{
	struct uregex_matcher *m = xcalloc(1, sizeof(*m));
	m->mctx = pcre2_match_context_create(NULL);
	m->md = pcre2_match_data_create(1, NULL);
	if (!m->mctx || !m->md) {
		fprintf(stderr, "ember: out of memory creating a PCRE2 match block\n");
		abort();
	}
	pcre2_set_match_limit(m->mctx, UREGEX_MATCH_LIMIT);
	pcre2_set_heap_limit(m->mctx, UREGEX_HEAP_LIMIT_KIB);
	/* A JIT stack larger than the default lets deep but honest patterns
	 * run; beyond it the match fails with a bound reached. */
	m->jit_stack = pcre2_jit_stack_create(JIT_STACK_MIN, JIT_STACK_MAX, NULL);
	if (m->jit_stack)
		pcre2_jit_stack_assign(m->mctx, NULL, m->jit_stack);
	m->budget_ns = (budget_ms ? budget_ms : UREGEX_BUDGET_MS) * 1000000ull;
	return m;
}

void uregex_matcher_free(struct uregex_matcher *m)
{
	if (!m)
		return;
	pcre2_match_data_free(m->md);
	pcre2_match_context_free(m->mctx);
	pcre2_jit_stack_free(m->jit_stack);
	free_all(m->limit, m->what, m->pattern, m->subject, m);
}

static void trip(struct uregex_matcher *m, const struct uregex *re, const char *limit,
		 const char *s, size_t len)
{
	m->limit = xstrdup(limit);
	m->what = xstrdup(re->what);
	m->pattern = xstrdup(re->pattern);
	m->subject = xstrndup(s, MIN(len, (size_t)SUBJECT_SHOWN));
}

/* The coarse monotonic clock (a few ns to read, ticks of a few ms): most
 * matches read no tick, a slow one reads its ticks, and over many matches
 * the sum is the time spent (each match's reading is right on average),
 * at a fifth of the cost of the precise clock, which cost as much as a
 * simple match. */
static uint64_t coarse_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int uregex_match(struct uregex_matcher *m, const struct uregex *re, const char *s, size_t len)
{
	if (m->limit)
		return -1;
	uint64_t t0 = coarse_ns();
	int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, 0, 0, m->md, m->mctx);
	m->spent_ns += coarse_ns() - t0;
	char limit[96];
	limit[0] = 0;
	if (rc == PCRE2_ERROR_MATCHLIMIT)
		snprintf(limit, sizeof(limit), "the match limit (%d steps)", UREGEX_MATCH_LIMIT);
	else if (rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT)
		snprintf(limit, sizeof(limit), "the heap limit (%d KiB)", UREGEX_HEAP_LIMIT_KIB);
	else if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
		snprintf(limit, sizeof(limit), "the JIT stack limit (%d KiB)", JIT_STACK_MAX / 1024);
	else if (m->spent_ns > m->budget_ns)
		snprintf(limit, sizeof(limit), "the query's time budget for patterns (%llu ms)",
			 (unsigned long long)(m->budget_ns / 1000000));
	if (limit[0]) {
		trip(m, re, limit, s, len);
		return -1;
	}
	/* No match, and errors that are not bounds (bad UTF-8 where it is
	 * checked, out of memory), read as no match. */
	return rc >= 0 ? 1 : 0;
}

bool uregex_failed(const struct uregex_matcher *m)
{
	return m->limit != NULL;
}

void uregex_error(const struct uregex_matcher *m, struct buf *err)
{
	if (!m->limit)
		return;
	buf_printf(err, "%s: the pattern ", m->what);
	jsonw_quote(err, m->pattern, strlen(m->pattern));
	buf_printf(err, " reached %s", m->limit);
	buf_puts(err, " while matching ");
	jsonw_quote(err, m->subject, strlen(m->subject));
	buf_puts(err, "; simplify it (nested repetition such as (a+)+ backtracks without end)");
}
