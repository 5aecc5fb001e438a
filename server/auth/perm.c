/* perm.c - permission patterns: parsing into levels, and a matcher over
 * at most PERM_MAX_LEVELS x PERM_MAX_LEVELS states (see perm.h). */
#include "perm.h"

#include <stdint.h>
#include <string.h>

const char *const perm_catalogue[] = {
	/* The reference's eighteen. */
	"service:token:create",
	"service:token:read",
	"service:token:revoke",
	"project:create",
	"project:read",
	"project:update",
	"project:delete",
	"admin:user:create",
	"admin:user:read",
	"admin:user:update",
	"admin:user:delete",
	"admin:role:create",
	"admin:role:read",
	"admin:role:update",
	"admin:role:delete",
	"admin:role:assignment:set",
	"admin:audit:read",
	"auth:local:login",
	/* ember's own. */
	"ingest:profile:write",
	"ingest:metrics:write",
	"ingest:symbols:write",
	"symbols:global:write",
	"server:metrics:read",
	"admin:settings:read",   /* the recommendations and cost settings */
	"admin:settings:update",
	NULL,
};

enum level_kind { LVL_LITERAL, LVL_ONE, LVL_MANY };

struct level {
	uint8_t off, len; /* PERM_MAX_LEN < 256 */
	uint8_t kind;
};

_Static_assert(PERM_MAX_LEN < 256, "level offsets are bytes");

struct parsed {
	int n;
	struct level l[PERM_MAX_LEVELS];
};

/* The bytes a level may hold: [a-z0-9_-] (a constant table, faster than
 * the comparisons in the per-byte loop). */
#define A1(c) [c] = 1
static const bool alphabet[256] = {
	A1('a'), A1('b'), A1('c'), A1('d'), A1('e'), A1('f'), A1('g'), A1('h'), A1('i'), A1('j'), A1('k'),
	A1('l'), A1('m'), A1('n'), A1('o'), A1('p'), A1('q'), A1('r'), A1('s'), A1('t'), A1('u'), A1('v'),
	A1('w'), A1('x'), A1('y'), A1('z'), A1('0'), A1('1'), A1('2'), A1('3'), A1('4'), A1('5'), A1('6'),
	A1('7'), A1('8'), A1('9'), A1('_'), A1('-'),
};
#undef A1

static bool in_alphabet(unsigned char c)
{
	return alphabet[c];
}

/* Splits s into levels; wildcards only when allow_wild. 0, or -1 with
 * the reason in err when err is not NULL. Looks at PERM_MAX_LEN + 1
 * bytes at most. */
static int parse(const char *s, bool allow_wild, struct parsed *p, struct buf *err)
{
	const char *what = allow_wild ? "pattern" : "permission";
	if (!s) {
		if (err)
			buf_printf(err, "%s is missing", what);
		return -1;
	}
	size_t len = strnlen(s, PERM_MAX_LEN + 1);
	if (len == 0) {
		if (err)
			buf_printf(err, "%s is empty", what);
		return -1;
	}
	if (len > PERM_MAX_LEN) {
		if (err)
			buf_printf(err, "%s is longer than %d bytes", what, PERM_MAX_LEN);
		return -1;
	}
	p->n = 0;
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && s[i] != ':') {
			if (!in_alphabet((unsigned char)s[i]) && !(allow_wild && s[i] == '*')) {
				if (err) {
					unsigned char c = (unsigned char)s[i];
					if (c > 0x20 && c < 0x7f)
						buf_printf(err, "%s level %d: character '%c' is not one of a-z 0-9 _ -",
							   what, p->n + 1, c);
					else
						buf_printf(err, "%s level %d: byte 0x%02x is not one of a-z 0-9 _ -",
							   what, p->n + 1, c);
				}
				return -1;
			}
			continue;
		}
		/* A level ends at s[i]. */
		size_t n = i - start;
		if (p->n == PERM_MAX_LEVELS) {
			if (err)
				buf_printf(err, "%s has more than %d levels", what, PERM_MAX_LEVELS);
			return -1;
		}
		if (n == 0) {
			if (err)
				buf_printf(err, "%s level %d is empty", what, p->n + 1);
			return -1;
		}
		struct level *l = &p->l[p->n];
		l->off = (uint8_t)start;
		l->len = (uint8_t)n;
		l->kind = LVL_LITERAL;
		if (memchr(s + start, '*', n)) {
			if (n == 1)
				l->kind = LVL_ONE;
			else if (n == 2 && s[start] == '*' && s[start + 1] == '*')
				l->kind = LVL_MANY;
			else {
				if (err)
					buf_printf(err,
						   "%s level %d: '*' and '**' stand for whole levels (write \"a:*\", not \"a*\")",
						   what, p->n + 1);
				return -1;
			}
		}
		p->n++;
		start = i + 1;
	}
	if (p->n < 2) {
		if (err)
			buf_printf(err, "%s has one level; it needs at least two (\"project:read\", \"project:*\", \"**:**\")",
				   what);
		return -1;
	}
	return 0;
}

bool perm_match(const char *pattern, const char *permission)
{
	if (!pattern || !permission)
		return false;
	/* A pattern without wildcards grants only itself: compare first, and
	 * check the permission's form only when they are equal. */
	size_t plen = strnlen(pattern, PERM_MAX_LEN + 1);
	if (plen > PERM_MAX_LEN)
		return false;
	if (!memchr(pattern, '*', plen)) {
		struct parsed pm;
		return strcmp(pattern, permission) == 0 && parse(permission, false, &pm, NULL) == 0;
	}
	struct parsed pt, pm;
	if (parse(pattern, true, &pt, NULL) < 0 || parse(permission, false, &pm, NULL) < 0)
		return false;
	/* ok[i][j]: pattern levels i.. match permission levels j... Filled
	 * from the ends, so each state is computed once: at most
	 * (PERM_MAX_LEVELS + 1)^2 steps, whatever the number of "**". */
	bool ok[PERM_MAX_LEVELS + 1][PERM_MAX_LEVELS + 1];
	memset(ok, 0, sizeof(ok));
	ok[pt.n][pm.n] = true;
	for (int i = pt.n - 1; i >= 0; i--) {
		const struct level *a = &pt.l[i];
		for (int j = pm.n - 1; j >= 0; j--) {
			const struct level *b = &pm.l[j];
			switch (a->kind) {
			case LVL_LITERAL:
				ok[i][j] = a->len == b->len && memcmp(pattern + a->off, permission + b->off, a->len) == 0 &&
					   ok[i + 1][j + 1];
				break;
			case LVL_ONE:
				ok[i][j] = ok[i + 1][j + 1];
				break;
			default: /* LVL_MANY: this level, and then either stop or go on. */
				ok[i][j] = ok[i + 1][j + 1] || ok[i][j + 1];
				break;
			}
		}
	}
	return ok[0][0];
}

int perm_check_pattern(const char *pattern, struct buf *err)
{
	struct parsed p;
	return parse(pattern, true, &p, err);
}

bool perm_known(const char *permission)
{
	if (!permission)
		return false;
	for (size_t i = 0; perm_catalogue[i]; i++)
		if (strcmp(perm_catalogue[i], permission) == 0)
			return true;
	return false;
}
