/* Fuzz target: permission patterns (server/auth/perm.c). Input: a pattern,
 * a NUL byte, a permission. perm_match is checked against a plain
 * recursive matcher written here from perm.h's words alone, and
 * perm_check_pattern against a validity check written the same way: both
 * must agree on every input. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/auth/perm.h"

#define MAXL 64

struct levels {
	int n;
	const char *s[MAXL];
	size_t len[MAXL];
};

/* Splits s at every ':' (at most MAXL levels; false beyond). */
static bool split(const char *s, struct levels *l)
{
	l->n = 0;
	for (;;) {
		if (l->n == MAXL)
			return false;
		const char *c = strchr(s, ':');
		size_t n = c ? (size_t)(c - s) : strlen(s);
		l->s[l->n] = s;
		l->len[l->n++] = n;
		if (!c)
			return true;
		s = c + 1;
	}
}

static bool is_lit(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789_-", s[i]) || s[i] == '\0')
			return false;
	return true;
}

static bool is_one(const char *s, size_t n)
{
	return n == 1 && s[0] == '*';
}

static bool is_many(const char *s, size_t n)
{
	return n == 2 && s[0] == '*' && s[1] == '*';
}

static bool ref_valid(const char *s, bool pattern, struct levels *l)
{
	if (strlen(s) > PERM_MAX_LEN || !split(s, l) || l->n < 2 || l->n > PERM_MAX_LEVELS)
		return false;
	for (int i = 0; i < l->n; i++)
		if (!is_lit(l->s[i], l->len[i]) &&
		    !(pattern && (is_one(l->s[i], l->len[i]) || is_many(l->s[i], l->len[i]))))
			return false;
	return true;
}

static bool ref_match(const struct levels *p, int i, const struct levels *q, int j)
{
	if (i == p->n)
		return j == q->n;
	if (j == q->n)
		return false;
	if (is_many(p->s[i], p->len[i]))
		return ref_match(p, i + 1, q, j + 1) || ref_match(p, i, q, j + 1);
	if (is_one(p->s[i], p->len[i]))
		return ref_match(p, i + 1, q, j + 1);
	return p->len[i] == q->len[j] && memcmp(p->s[i], q->s[j], p->len[i]) == 0 &&
	       ref_match(p, i + 1, q, j + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1024)
		return 0;
	char *in = malloc(size + 2);
	memcpy(in, data, size);
	in[size] = in[size + 1] = '\0';
	const char *pattern = in, *perm = in + strlen(in) + 1;
	if (perm > in + size)
		perm = in + size + 1;
	struct levels p, q;
	bool pv = ref_valid(pattern, true, &p), qv = ref_valid(perm, false, &q);
	bool want = pv && qv && ref_match(&p, 0, &q, 0);
	if (perm_match(pattern, perm) != want)
		abort();
	struct buf err = { 0 };
	int rc = perm_check_pattern(pattern, &err);
	if ((rc == 0) != pv || (rc == 0) != (err.len == 0))
		abort(); /* valid exactly when the reference says, and a refusal says why */
	/* A permission is a pattern that grants itself, and "**:**" grants
	 * every valid permission; the catalogue's are valid. */
	if (qv && (!perm_match(perm, perm) || !perm_match("**:**", perm) || perm_check_pattern(perm, NULL) != 0))
		abort();
	if (perm_known(perm) && !qv)
		abort();
	buf_free(&err);
	free(in);
	return 0;
}
