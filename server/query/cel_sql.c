/* cel_sql.c - a CEL program as SQL over label_sets: see cel_sql.h. */
#include "cel_sql.h"

#include <stdio.h>
#include <string.h>

#include "cel_int.h"
#include "server/store/clickhouse/rowbinary.h"

struct emit {
	const struct cel_program *p;
	const char *keys, *values;
	struct buf *out;
	struct buf *err;
	int failed;
};

/* cel.c's number spelling (number_len), whole, at most 64 bytes. */
#define NUMBER_RE "^[+-]?[0-9]+(\\\\.[0-9]+)?([eE][+-]?[0-9]+)?$"

static void str_lit(struct emit *e, const char *s)
{
	ch_sql_string(e->out, s, strlen(s));
}

/* The string value of operand n. */
static void value(struct emit *e, int n)
{
	const struct node *nd = &e->p->nodes[n];
	if (nd->kind == N_ATTR) {
		buf_printf(e->out, "%s[indexOf(%s, ", e->values, e->keys);
		str_lit(e, nd->text);
		buf_puts(e->out, ")]");
	} else {
		str_lit(e, nd->text ? nd->text : "");
	}
}

/* "is a number" and "its value" for operand n; a literal is decided now. */
static void is_number(struct emit *e, int n)
{
	const struct node *nd = &e->p->nodes[n];
	if (nd->kind != N_ATTR) {
		buf_puts(e->out, nd->isnum ? "1" : "0");
		return;
	}
	buf_puts(e->out, "(length(");
	value(e, n);
	buf_puts(e->out, ") <= 64 AND match(");
	value(e, n);
	buf_puts(e->out, ", '" NUMBER_RE "') AND isFinite(toFloat64OrZero(replaceRegexpOne(");
	value(e, n);
	buf_puts(e->out, ", '^\\\\+', ''))))");
}

static void number(struct emit *e, int n)
{
	const struct node *nd = &e->p->nodes[n];
	if (nd->kind != N_ATTR) {
		buf_printf(e->out, "toFloat64(%.17g)", nd->isnum ? nd->num : 0.0);
		return;
	}
	buf_puts(e->out, "toFloat64OrZero(replaceRegexpOne(");
	value(e, n);
	buf_puts(e->out, ", '^\\\\+', ''))");
}

/* PCRE2 syntax RE2 does not take, or takes with another meaning. */
static const struct {
	const char *seq;
	const char *what;
} pcre_only[] = {
	{ "(?=", "lookahead" }, { "(?!", "negative lookahead" }, { "(?<=", "lookbehind" },
	{ "(?<!", "negative lookbehind" }, { "(?<", "named groups spelled (?<name>: use (?P<name>" }, { "(?>", "atomic groups" }, { "(?|", "branch reset" },
	{ "(?R", "recursion" }, { "(?&", "subroutine calls" }, { "(?(", "conditionals" },
	{ "(?C", "callouts" }, { "(*", "verbs" }, { "(?#", "comments" }, { "(?'", "named groups in quotes" },
	{ "\\K", "\\K" }, { "\\g", "\\g references" }, { "\\k", "named references" },
	{ "*+", "possessive quantifiers" }, { "++", "possessive quantifiers" },
	{ "?+", "possessive quantifiers" }, { "}+", "possessive quantifiers" },
	{ "\\G", "\\G" }, { "\\R", "\\R" }, { "\\X", "\\X" }, { "\\h", "\\h" }, { "\\H", "\\H" },
	{ "\\v", "\\v" }, { "\\V", "\\V" }, { "\\N", "\\N" }, { "\\Z", "\\Z" }, { "\\c", "\\c" },
	{ "\\e", "\\e" }, { "\\o", "\\o{}" }, { "\\x{", "\\x{} above ASCII (use the character)" },
	{ "[[:<:]]", "word boundaries in brackets" },
};

static int regex_supported(struct emit *e, const char *re)
{
	for (const char *s = re; *s; s++) {
		if (*s == '\\' && s[1] >= '1' && s[1] <= '9') {
			buf_printf(e->err, "query: matches(): backreferences (\\%c) have no ClickHouse equivalent",
				   s[1]);
			return -1;
		}
		for (size_t i = 0; i < sizeof(pcre_only) / sizeof(pcre_only[0]); i++) {
			size_t n = strlen(pcre_only[i].seq);
			if (!strncmp(s, pcre_only[i].seq, n)) {
				/* an escaped backslash followed by a letter is a plain letter */
				size_t bs = 0;
				for (const char *q = s; q > re && q[-1] == '\\'; q--)
					bs++;
				if (bs % 2)
					continue;
				buf_printf(e->err, "query: matches(): %s (PCRE2) have no ClickHouse equivalent",
					   pcre_only[i].what);
				return -1;
			}
		}
		if (*s == '\\' && s[1])
			s++;  /* an escape pair: its second byte is not the start of a sequence */
	}
	return 0;
}

/* PCRE2's "$" (outside a character class, without (?m)) matches at the
 * end and before a newline that ends the subject; RE2's only at the end.
 * Appends re to out with each such "$" spelled (?:\n?\z); -1 when re
 * sets the multiline flag, whose "$" differs again. */
static int translate_dollars(struct emit *e, const char *re, struct buf *out)
{
	int in_class = 0;
	for (const char *s = re; *s; s++) {
		if (*s == '\\' && s[1]) {
			buf_append(out, s, 2);
			s++;
			continue;
		}
		if (!in_class && s[0] == '(' && s[1] == '?') {
			for (const char *f = s + 2; *f && *f != ')' && *f != ':'; f++)
				if (*f == 'm') {
					buf_puts(e->err, "query: matches(): the multiline flag (?m) has no "
							 "ClickHouse equivalent");
					return -1;
				}
		}
		if (in_class) {
			if (*s == '[' && s[1] == ':') {  /* [:alpha:] */
				const char *end = strstr(s + 2, ":]");
				if (end) {
					buf_append(out, s, (size_t)(end + 2 - s));
					s = end + 1;
					continue;
				}
			}
			if (*s == ']')
				in_class = 0;
			buf_putc(out, *s);
		} else if (*s == '[') {
			in_class = 1;
			buf_putc(out, *s);
			/* a "]" (after an optional "^") first in a class is literal */
			if (s[1] == '^') {
				buf_putc(out, *++s);
			}
			if (s[1] == ']')
				buf_putc(out, *++s);
		} else if (*s == '$') {
			buf_puts(out, "(?:\\n?\\z)");
		} else {
			buf_putc(out, *s);
		}
	}
	return 0;
}

/* A two-operand form: open, side(a), mid, side(b), close. */
static void infix(struct emit *e, void (*side)(struct emit *, int), const char *open, int a, const char *mid,
		  int b, const char *close)
{
	buf_puts(e->out, open);
	side(e, a);
	buf_puts(e->out, mid);
	side(e, b);
	buf_puts(e->out, close);
}

static void emit(struct emit *e, int n)
{
	if (e->failed)
		return;
	const struct node *nd = &e->p->nodes[n];
	struct buf *o = e->out;
	switch (nd->kind) {
	case N_TRUE: buf_puts(o, "1"); return;
	case N_FALSE: buf_puts(o, "0"); return;
	case N_NOT:
		buf_puts(o, "(NOT ");
		emit(e, nd->a);
		buf_puts(o, ")");
		return;
	case N_AND:
	case N_OR:
		infix(e, emit, "(", nd->a, nd->kind == N_AND ? " AND " : " OR ", nd->b, ")");
		return;
	case N_EQ:
	case N_NE:
		infix(e, value, "(", nd->a, nd->kind == N_EQ ? " = " : " != ", nd->b, ")");
		return;
	case N_LT:
	case N_LE:
	case N_GT:
	case N_GE:
	case N_NUM_EQ:
	case N_NUM_NE: {
		static const char *ops[] = { [N_LT] = " < ", [N_LE] = " <= ", [N_GT] = " > ",
					     [N_GE] = " >= ", [N_NUM_EQ] = " = ", [N_NUM_NE] = " != " };
		infix(e, is_number, "(", nd->a, " AND ", nd->b, " AND ");
		infix(e, number, "", nd->a, ops[nd->kind], nd->b, ")");
		return;
	}
	case N_IN:
		if (!nd->nitems) {
			buf_puts(o, "0");
			return;
		}
		buf_puts(o, "(");
		value(e, nd->a);
		buf_puts(o, " IN (");
		for (size_t i = 0; i < nd->nitems; i++) {
			if (i)
				buf_puts(o, ", ");
			str_lit(e, nd->items[i]);
		}
		buf_puts(o, "))");
		return;
	case N_MATCHES: {
		if (regex_supported(e, nd->text ? nd->text : "") < 0) {
			e->failed = 1;
			return;
		}
		struct buf re = { 0 }, body = { 0 };
		if (translate_dollars(e, nd->text ? nd->text : "", &body) < 0) {
			buf_free(&body);
			e->failed = 1;
			return;
		}
		/* In a group: ClickHouse 18.16 looks for a required substring
		 * outside groups and ignores a leading (?i) there ("(?i)NODE"
		 * matched nothing); (?-s: makes "." stop at a newline, as PCRE2's. */
		buf_printf(&re, "(?-s:%s)", body.data ? body.data : "");
		buf_free(&body);
		buf_puts(o, "match(");
		value(e, nd->a);
		buf_puts(o, ", ");
		ch_sql_string(o, re.data, re.len);
		buf_puts(o, ")");
		buf_free(&re);
		return;
	}
	case N_STARTS:
	case N_ENDS:
		infix(e, value, nd->kind == N_STARTS ? "startsWith(" : "endsWith(", nd->a, ", ", nd->b, ")");
		return;
	case N_CONTAINS:
		infix(e, value, "(position(", nd->a, ", ", nd->b, ") > 0)");
		return;
	case N_ATTR:
	case N_STR:
	case N_NUM:
		break;
	}
	buf_puts(e->err, "query: this filter has no SQL form");
	e->failed = 1;
}

int cel_sql(const struct cel_program *p, const char *keys_col, const char *values_col,
	    struct buf *out, struct buf *err)
{
	struct buf sql = { 0 };
	struct emit e = { .p = p, .keys = keys_col, .values = values_col, .out = &sql, .err = err };
	emit(&e, p->root);
	if (!e.failed)
		buf_append(out, sql.data ? sql.data : "", sql.len);
	buf_free(&sql);
	return e.failed ? CEL_SQL_UNSUPPORTED : 0;
}
