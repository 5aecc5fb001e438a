/* cel.c - see cel.h. A recursive-descent parser into a small tree of nodes
 * (indexes into one array). Everything evaluation needs is prepared here:
 * literal lengths, sorted `in` lists, compiled regular expressions and one
 * PCRE2 match block, so cel_eval does not allocate. */
#include "cel.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cel_int.h"
#include "uregex.h"
#include "util.h"

struct parser {
	const char *src;
	size_t pos, len;
	int depth;
	struct cel_program *p;
	struct buf *err;
	bool failed;
};

/* The functions, in both forms: name(subject, arg) and subject.name(arg). */
static const struct {
	const char *name;
	enum node_kind kind;
} funcs[] = {
	{ "matches", N_MATCHES },
	{ "startsWith", N_STARTS },
	{ "endsWith", N_ENDS },
	{ "contains", N_CONTAINS },
};
#define FUNC_NAMES "matches, startsWith, endsWith, contains"

static int func_index(const char *s, size_t n)
{
	for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++)
		if (strlen(funcs[i].name) == n && memcmp(funcs[i].name, s, n) == 0)
			return (int)i;
	return -1;
}

static int fail_at(struct parser *ps, size_t at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Records the first error only, naming the 1-based column of at. */
static int fail_at(struct parser *ps, size_t at, const char *fmt, ...)
{
	if (!ps->failed) {
		buf_printf(ps->err, "query: column %zu: ", at + 1);
		va_list ap;
		va_start(ap, fmt);
		buf_vprintf(ps->err, fmt, ap);
		va_end(ap);
		ps->failed = true;
	}
	return -1;
}

static int fail(struct parser *ps, const char *msg)
{
	return fail_at(ps, ps->pos, "%s", msg);
}

static int new_node(struct parser *ps, enum node_kind k, int a, int b, char *text)
{
	struct cel_program *p = ps->p;
	xgrow((void **)&p->nodes, &p->cap, p->count + 1, sizeof(*p->nodes));
	p->nodes[p->count] = (struct node){ .kind = k, .a = a, .b = b, .text = text };
	return (int)p->count++;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_ident_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident(char c)
{
	return is_ident_start(c) || (c >= '0' && c <= '9');
}

/* The end of the run of characters that are (is_space, is_ident) from at. */
static size_t run_end(const struct parser *ps, size_t at, bool (*is)(char))
{
	while (at < ps->len && is(ps->src[at]))
		at++;
	return at;
}

static size_t ws_end(const struct parser *ps, size_t at)
{
	return run_end(ps, at, is_space);
}

static void skip_ws(struct parser *ps)
{
	ps->pos = ws_end(ps, ps->pos);
}

/* Eats tok after spaces; a word (whole) only when it is not the start of
 * a longer identifier. */
static bool eat_tok(struct parser *ps, const char *tok, bool whole)
{
	skip_ws(ps);
	size_t n = strlen(tok);
	if (ps->len - ps->pos >= n && memcmp(ps->src + ps->pos, tok, n) == 0 &&
	    (!whole || ps->pos + n == ps->len || !is_ident(ps->src[ps->pos + n]))) {
		ps->pos += n;
		return true;
	}
	return false;
}

static bool eat(struct parser *ps, const char *tok)
{
	return eat_tok(ps, tok, false);
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* The length of the number spelled at s[0..n): an optional sign, digits,
 * an optional fraction and an optional exponent ("-12", "1.5", "2e9"), or
 * 0 when s does not start with one. strtod accepts more (hex, "inf",
 * leading spaces), so the spelling is checked here first. */
static size_t number_len(const char *s, size_t n)
{
	size_t i = 0;
	if (i < n && (s[i] == '-' || s[i] == '+'))
		i++;
	size_t d = i;
	while (i < n && is_digit(s[i]))
		i++;
	if (i == d)
		return 0;
	if (i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
		i++;
		while (i < n && is_digit(s[i]))
			i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		size_t e = i + 1;
		if (e < n && (s[e] == '-' || s[e] == '+'))
			e++;
		if (e < n && is_digit(s[e])) {
			while (e < n && is_digit(s[e]))
				e++;
			i = e;
		}
	}
	return i;
}

/* Parses all of s as a number into *out; false when s is anything else
 * (empty, text, trailing bytes, out of range). */
static bool parse_number(const char *s, double *out)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64 || number_len(s, n) != n)
		return false;
	char *end;
	double v = strtod(s, &end);
	if (*end != '\0' || !isfinite(v))
		return false;
	*out = v;
	return true;
}

static size_t ident_end(const struct parser *ps, size_t at)
{
	return run_end(ps, at, is_ident);
}

/* Eats the word kw when it is not the start of a longer identifier. */
static bool eat_keyword(struct parser *ps, const char *kw)
{
	return eat_tok(ps, kw, true);
}

static bool at_quote(const struct parser *ps)
{
	return ps->pos < ps->len && (ps->src[ps->pos] == '"' || ps->src[ps->pos] == '\'');
}

/* Parses a string literal at the current position into out. */
static int string_lit(struct parser *ps, struct buf *out)
{
	skip_ws(ps);
	if (!at_quote(ps))
		return fail(ps, "expected a string literal");
	char q = ps->src[ps->pos++];
	while (ps->pos < ps->len && ps->src[ps->pos] != q) {
		char c = ps->src[ps->pos++];
		if (c == '\\') {
			if (ps->pos >= ps->len)
				break;
			char e = ps->src[ps->pos++];
			switch (e) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case '\\': case '"': case '\'': c = e; break;
			default:
				ps->pos--;
				return fail(ps, "unknown escape sequence in string");
			}
		} else if (c == '\n') {
			return fail(ps, "newline inside a string literal");
		}
		buf_putc(out, c);
	}
	if (ps->pos >= ps->len)
		return fail(ps, "unterminated string literal");
	ps->pos++;
	return 0;
}

/* A string literal as a freshly allocated C string, or NULL. */
static char *string_value(struct parser *ps)
{
	struct buf text = { 0 };
	if (string_lit(ps, &text) < 0) {
		buf_free(&text);
		return NULL;
	}
	return buf_steal(&text, NULL);
}

/* An attribute or a string literal. A dotted name stops before a segment
 * followed by "(": in host.name.matches("x") the attribute is host.name
 * and .matches( is a method call, left for the caller. */
static int operand(struct parser *ps)
{
	skip_ws(ps);
	if (ps->pos >= ps->len)
		return fail(ps, "expected an attribute or a string, found the end of the query");
	char c = ps->src[ps->pos];
	if (c == '"' || c == '\'') {
		char *s = string_value(ps);
		if (!s)
			return -1;
		int n = new_node(ps, N_STR, -1, -1, s);
		ps->p->nodes[n].isnum = parse_number(s, &ps->p->nodes[n].num);
		return n;
	}
	size_t nl = number_len(ps->src + ps->pos, ps->len - ps->pos);
	if (nl > 0 && c != '+') {
		size_t at = ps->pos;
		if (at + nl < ps->len && (is_ident(ps->src[at + nl]) || ps->src[at + nl] == '.'))
			return fail_at(ps, at, "a malformed number");
		char *text = xstrndup(ps->src + at, nl);
		double v;
		if (!parse_number(text, &v)) {
			free(text);
			return fail_at(ps, at, "the number %.*s is out of range", (int)nl, ps->src + at);
		}
		ps->pos += nl;
		int n = new_node(ps, N_NUM, -1, -1, text);
		ps->p->nodes[n].num = v;
		ps->p->nodes[n].isnum = true;
		return n;
	}
	if (!is_ident_start(c))
		return fail(ps, "expected an attribute name, a string or a number");
	size_t first_end = ident_end(ps, ps->pos);
	size_t next = ws_end(ps, first_end);
	if (next < ps->len && ps->src[next] == '(')
		return fail_at(ps, ps->pos,
			       "a function call is a condition, not a value: expected an attribute or a string");
	struct buf text = { 0 };
	for (;;) {
		size_t start = ps->pos;
		ps->pos = ident_end(ps, ps->pos);
		buf_append(&text, ps->src + start, ps->pos - start);
		if (ps->pos + 1 < ps->len && ps->src[ps->pos] == '.' &&
		    is_ident_start(ps->src[ps->pos + 1])) {
			size_t after = ws_end(ps, ident_end(ps, ps->pos + 1));
			if (after < ps->len && ps->src[after] == '(')
				break; /* .method( */
			buf_putc(&text, '.');
			ps->pos++;
			continue;
		}
		break;
	}
	if (eat(ps, "[")) {
		struct buf key = { 0 };
		if (string_lit(ps, &key) < 0 || !eat(ps, "]")) {
			buf_free(&key);
			buf_free(&text);
			return fail(ps, "expected [\"key\"] after the attribute");
		}
		buf_printf(&text, "[%s]", key.data ? key.data : "");
		buf_free(&key);
	}
	return new_node(ps, N_ATTR, -1, -1, buf_steal(&text, NULL));
}

/* Attributes whose values are text by definition (OpenTelemetry names
 * ember-agent records): comparing one with <, <=, >, >= or with a number
 * is a type error found at compile time. Any other attribute may hold a
 * number; one whose value is not a number compares as false. */
static const char *const string_attrs[] = {
	"host.name", "host.arch", "host.type", "host.cpu.model.name", "os.type", "os.version",
	"process.executable.name", "thread.name", "script.name", "cluster.name",
	"container.name", "k8s.pod.name", "k8s.namespace.name", "k8s.container.name",
	"k8s.deployment.name", "slurm.job.name", "slurm.job.user", "gpu.name", "gpu.device.uuid",
};

static bool is_string_attr(const char *name)
{
	for (size_t i = 0; i < sizeof(string_attrs) / sizeof(string_attrs[0]); i++)
		if (strcmp(string_attrs[i], name) == 0)
			return true;
	return false;
}

/* An operand where a string is expected (a function's subject or
 * argument, the left of "in"): a number literal is a type error. */
static int string_operand(struct parser *ps, const char *where)
{
	size_t at = ws_end(ps, ps->pos);
	int n = operand(ps);
	if (n >= 0 && ps->p->nodes[n].kind == N_NUM)
		return fail_at(ps, at, "type error: %s takes a string, not the number %s", where,
			       ps->p->nodes[n].text);
	return n;
}

/* The type check of one side of a numeric comparison op (at: its column). */
static int numeric_side(struct parser *ps, int n, size_t at, const char *op)
{
	const struct node *nd = &ps->p->nodes[n];
	if (nd->kind == N_STR && !nd->isnum)
		return fail_at(ps, at, "type error: %s compares numbers, and \"%s\" is not a number", op,
			       nd->text);
	if (nd->kind == N_ATTR && is_string_attr(nd->text))
		return fail_at(ps, at, "type error: %s compares numbers, and %s is a string attribute", op,
			       nd->text);
	return n;
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* After "in": a list of string literals, "[" [string ("," string)* [","]] "]". */
static int in_list(struct parser *ps, int l)
{
	if (!eat(ps, "["))
		return fail(ps, "expected '[' after in");
	if (ps->p->nodes[l].kind == N_NUM)
		return fail(ps, "type error: in takes a string, not a number");
	int n = new_node(ps, N_IN, l, -1, NULL);
	struct node *nd = &ps->p->nodes[n]; /* stays valid: no node is added below */
	size_t cap = 0;
	if (!eat(ps, "]")) {
		for (;;) {
			skip_ws(ps);
			if (nd->nitems >= CEL_MAX_LIST)
				return fail_at(ps, ps->pos, "a list of more than %d strings", CEL_MAX_LIST);
			if (!at_quote(ps))
				return fail(ps, "expected a string literal in the list");
			char *s = string_value(ps);
			if (!s)
				return -1;
			xgrow((void **)&nd->items, &cap, nd->nitems + 1, sizeof(*nd->items));
			nd->items[nd->nitems++] = s;
			if (eat(ps, ",")) {
				if (eat(ps, "]"))
					break; /* a trailing comma */
				continue;
			}
			if (eat(ps, "]"))
				break;
			return fail(ps, "expected ',' or ']' in the list");
		}
	}
	if (nd->nitems > 1)
		xqsort(nd->items, nd->nitems, sizeof(*nd->items), cmp_strp);
	return n;
}

/* The pattern of matches(): a string literal, compiled now. */
/* The compiled pattern; its text (for cel_sql.c) in *text, malloc'ed. */
static struct uregex *regex_arg(struct parser *ps, char **text)
{
	skip_ws(ps);
	size_t at = ps->pos;
	if (!at_quote(ps)) {
		fail(ps, "the pattern of matches() must be a string literal");
		return NULL;
	}
	struct cel_program *p = ps->p;
	if (p->nregex >= CEL_MAX_REGEX) {
		fail_at(ps, at, "more than %d regular expressions", CEL_MAX_REGEX);
		return NULL;
	}
	struct buf pat = { 0 };
	if (string_lit(ps, &pat) < 0) {
		buf_free(&pat);
		return NULL;
	}
	char msg[256], what[48];
	size_t off;
	snprintf(what, sizeof(what), "query: matches() at column %zu", at + 1);
	/* Patterns are UTF-8; a value that is not valid UTF-8 (a thread name
	 * cut in the middle of a character) can still match in its valid
	 * parts. \C (one byte, even inside a character) is refused. */
	struct uregex *re = uregex_compile(pat.data, pat.len, UREGEX_UTF, what, msg, sizeof(msg),
					   &off);
	if (re)
		*text = xstrndup(pat.data ? pat.data : "", pat.len);
	buf_free(&pat);
	if (!re) {
		fail_at(ps, at, "bad regular expression: %s (at offset %zu of the pattern)", msg, off);
		return NULL;
	}
	p->nregex++;
	if (!p->rm)
		p->rm = uregex_matcher_new(0);
	return re;
}

/* The rest of a call after "(" and, in the function form, the subject and
 * ",": the last argument and ")". */
static int call_rest(struct parser *ps, int fi, int subject)
{
	int n;
	if (funcs[fi].kind == N_MATCHES) {
		char *text = NULL;
		struct uregex *re = regex_arg(ps, &text);
		if (!re)
			return -1;
		n = new_node(ps, N_MATCHES, subject, -1, text);
		ps->p->nodes[n].re = re;
	} else {
		int arg = string_operand(ps, funcs[fi].name);
		if (arg < 0)
			return -1;
		n = new_node(ps, funcs[fi].kind, subject, arg, NULL);
	}
	if (!eat(ps, ")"))
		return fail_at(ps, ps->pos, "expected ')' after the argument of %s()", funcs[fi].name);
	return n;
}

/* name "(" operand "," arg ")" with pos at name. */
static int function_call(struct parser *ps)
{
	size_t at = ps->pos, end = ident_end(ps, at);
	int fi = func_index(ps->src + at, end - at);
	if (fi < 0)
		return fail_at(ps, at, "unknown function '%.*s' (known: " FUNC_NAMES ")",
			       (int)(end - at), ps->src + at);
	ps->pos = end;
	eat(ps, "(");
	int subject = string_operand(ps, funcs[fi].name);
	if (subject < 0)
		return -1;
	if (!eat(ps, ","))
		return fail_at(ps, ps->pos, "expected ',' after the first argument of %s()",
			       funcs[fi].name);
	return call_rest(ps, fi, subject);
}

/* "." name "(" arg ")" with pos at the dot, after the receiver. */
static int method_call(struct parser *ps, int receiver)
{
	ps->pos++;
	size_t at = ps->pos, end = ident_end(ps, at);
	if (end == at || !is_ident_start(ps->src[at]))
		return fail(ps, "expected a method name after '.'");
	int fi = func_index(ps->src + at, end - at);
	if (fi < 0)
		return fail_at(ps, at, "unknown method '%.*s' (known: " FUNC_NAMES ")",
			       (int)(end - at), ps->src + at);
	ps->pos = end;
	if (!eat(ps, "("))
		return fail_at(ps, ps->pos, "expected '(' after %s", funcs[fi].name);
	return call_rest(ps, fi, receiver);
}

static int expr(struct parser *ps);

static int primary(struct parser *ps)
{
	if (eat(ps, "(")) {
		int e = expr(ps);
		if (e < 0)
			return -1;
		if (!eat(ps, ")"))
			return fail(ps, "expected ')'");
		return e;
	}
	skip_ws(ps);
	size_t save = ps->pos;
	for (int i = 0; i < 2; i++) {
		if (eat_keyword(ps, i ? "false" : "true")) {
			skip_ws(ps);
			if (ps->pos < ps->len && strchr("=!<>", ps->src[ps->pos])) {
				ps->pos = save; /* "true == x" style: treat as operand */
				break;
			}
			return new_node(ps, i ? N_FALSE : N_TRUE, -1, -1, NULL);
		}
	}
	if (ps->pos < ps->len && is_ident_start(ps->src[ps->pos])) {
		size_t next = ws_end(ps, ident_end(ps, ps->pos));
		if (next < ps->len && ps->src[next] == '(')
			return function_call(ps);
	}
	size_t lat = ws_end(ps, ps->pos);
	int l = operand(ps);
	if (l < 0)
		return -1;
	skip_ws(ps);
	if (ps->pos < ps->len && ps->src[ps->pos] == '.') {
		if (ps->p->nodes[l].kind == N_NUM)
			return fail_at(ps, lat, "type error: a number has no methods");
		return method_call(ps, l);
	}
	static const struct {
		const char *tok;
		enum node_kind kind;
	} ops[] = { { "==", N_EQ }, { "!=", N_NE }, { "<=", N_LE },
		    { ">=", N_GE }, { "<", N_LT },  { ">", N_GT } };
	int oi = -1;
	for (int i = 0; i < (int)(sizeof(ops) / sizeof(ops[0])) && oi < 0; i++)
		if (eat(ps, ops[i].tok))
			oi = i;
	if (oi < 0) {
		if (ps->p->nodes[l].kind == N_NUM)
			return fail(ps, "expected ==, !=, <, <=, > or >= after the number");
		if (eat_keyword(ps, "in"))
			return in_list(ps, l);
		return fail(ps, "expected ==, !=, <, <=, >, >= or in after the operand");
	}
	size_t rat = ws_end(ps, ps->pos);
	int r = operand(ps);
	if (r < 0)
		return -1;
	enum node_kind k = ops[oi].kind;
	bool lnum = ps->p->nodes[l].kind == N_NUM, rnum = ps->p->nodes[r].kind == N_NUM;
	if (k == N_EQ || k == N_NE) {
		if (!lnum && !rnum)
			return new_node(ps, k, l, r, NULL); /* strings: bytes compared */
		k = k == N_EQ ? N_NUM_EQ : N_NUM_NE;
	}
	if (numeric_side(ps, l, lat, ops[oi].tok) < 0 || numeric_side(ps, r, rat, ops[oi].tok) < 0)
		return -1;
	return new_node(ps, k, l, r, NULL);
}

static int unary(struct parser *ps)
{
	skip_ws(ps);
	if (ps->pos < ps->len && ps->src[ps->pos] == '!' &&
	    !(ps->pos + 1 < ps->len && ps->src[ps->pos + 1] == '=')) {
		ps->pos++;
		if (++ps->depth > CEL_MAX_DEPTH)
			return fail(ps, "expression nested too deeply");
		int e = unary(ps);
		ps->depth--;
		if (e < 0)
			return -1;
		return new_node(ps, N_NOT, e, -1, NULL);
	}
	return primary(ps);
}

/* side (op side)*, left to right: nodes of kind k. */
static int chain(struct parser *ps, int (*side)(struct parser *), const char *op,
		 enum node_kind k)
{
	int l = side(ps);
	while (l >= 0 && eat(ps, op)) {
		int r = side(ps);
		if (r < 0)
			return -1;
		l = new_node(ps, k, l, r, NULL);
	}
	return l;
}

static int and_expr(struct parser *ps)
{
	return chain(ps, unary, "&&", N_AND);
}

static int expr(struct parser *ps)
{
	if (++ps->depth > CEL_MAX_DEPTH)
		return fail(ps, "expression nested too deeply");
	int l = chain(ps, and_expr, "||", N_OR);
	ps->depth--;
	return l;
}

struct cel_program *cel_compile(const char *src, struct buf *err)
{
	size_t len = strlen(src);
	if (len > CEL_MAX_SOURCE) {
		buf_printf(err, "query: longer than %d bytes", CEL_MAX_SOURCE);
		return NULL;
	}
	struct cel_program *p = xcalloc(1, sizeof(*p));
	struct parser ps = { src, 0, len, 0, p, err, false };
	int root = expr(&ps);
	skip_ws(&ps);
	if (root >= 0 && ps.pos < ps.len)
		root = fail(&ps, "unexpected text after the expression");
	if (root < 0) {
		cel_free(p);
		return NULL;
	}
	p->root = root;
	return p;
}

static const char *value_of(const struct cel_program *p, int n, cel_lookup_fn lookup, void *ctx)
{
	const struct node *nd = &p->nodes[n];
	if (nd->kind == N_STR)
		return nd->text;
	const char *v = lookup(ctx, nd->text);
	return v ? v : "";
}

/* The numeric value of operand n, or false when it is not a number. */
static bool number_of(const struct cel_program *p, int n, cel_lookup_fn lookup, void *ctx,
		      double *out)
{
	const struct node *nd = &p->nodes[n];
	if (nd->kind == N_NUM || nd->kind == N_STR) {
		*out = nd->num;
		return nd->isnum;
	}
	const char *v = lookup(ctx, nd->text);
	return v && parse_number(v, out);
}

static bool compare(const struct cel_program *p, const struct node *nd, cel_lookup_fn lookup,
		    void *ctx)
{
	double a, b;
	if (!number_of(p, nd->a, lookup, ctx, &a) || !number_of(p, nd->b, lookup, ctx, &b))
		return false;
	switch (nd->kind) {
	case N_LT: return a < b;
	case N_LE: return a <= b;
	case N_GT: return a > b;
	case N_GE: return a >= b;
	case N_NUM_EQ: return a == b;
	case N_NUM_NE: return a != b;
	default: return false;
	}
}

static bool in_items(const struct node *nd, const char *v)
{
	size_t lo = 0, hi = nd->nitems;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(v, nd->items[mid]);
		if (c == 0)
			return true;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return false;
}

static bool eval(const struct cel_program *p, int n, cel_lookup_fn lookup, void *ctx)
{
	const struct node *nd = &p->nodes[n];
	switch (nd->kind) {
	case N_TRUE: return true;
	case N_FALSE: return false;
	case N_NOT: return !eval(p, nd->a, lookup, ctx);
	case N_AND: return eval(p, nd->a, lookup, ctx) && eval(p, nd->b, lookup, ctx);
	case N_OR: return eval(p, nd->a, lookup, ctx) || eval(p, nd->b, lookup, ctx);
	case N_EQ:
		return strcmp(value_of(p, nd->a, lookup, ctx), value_of(p, nd->b, lookup, ctx)) == 0;
	case N_NE:
		return strcmp(value_of(p, nd->a, lookup, ctx), value_of(p, nd->b, lookup, ctx)) != 0;
	case N_LT:
	case N_LE:
	case N_GT:
	case N_GE:
	case N_NUM_EQ:
	case N_NUM_NE:
		return compare(p, nd, lookup, ctx);
	case N_IN:
		return in_items(nd, value_of(p, nd->a, lookup, ctx));
	case N_MATCHES: {
		const char *s = value_of(p, nd->a, lookup, ctx);
		/* A bound reached reads as false, and cel_check fails the query. */
		return uregex_match(p->rm, nd->re, s, strlen(s)) > 0;
	}
	case N_STARTS:
	case N_ENDS: {
		const char *s = value_of(p, nd->a, lookup, ctx);
		const char *x = value_of(p, nd->b, lookup, ctx);
		size_t ls = strlen(s), lx = strlen(x);
		if (lx > ls)
			return false;
		return memcmp(nd->kind == N_STARTS ? s : s + ls - lx, x, lx) == 0;
	}
	case N_CONTAINS:
		return strstr(value_of(p, nd->a, lookup, ctx), value_of(p, nd->b, lookup, ctx)) != NULL;
	case N_ATTR:
	case N_STR:
	case N_NUM:
		break;
	}
	return false;
}

bool cel_eval(const struct cel_program *p, cel_lookup_fn lookup, void *ctx)
{
	return eval(p, p->root, lookup, ctx);
}

int cel_check(const struct cel_program *p, struct buf *err)
{
	if (!p || !p->rm || !uregex_failed(p->rm))
		return 0;
	if (err)
		uregex_error(p->rm, err);
	return UREGEX_RC;
}

void cel_free(struct cel_program *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->count; i++) {
		struct node *nd = &p->nodes[i];
		free(nd->text);
		for (size_t j = 0; j < nd->nitems; j++)
			free(nd->items[j]);
		free(nd->items);
		uregex_free(nd->re);
	}
	free(p->nodes);
	uregex_matcher_free(p->rm);
	free(p);
}
