/* cel.c - see cel.h. A recursive-descent parser into a small tree. */
#include "cel.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

enum node_kind { N_TRUE, N_FALSE, N_NOT, N_AND, N_OR, N_EQ, N_NE, N_ATTR, N_STR };

struct node {
	enum node_kind kind;
	int a, b;   /* children (indexes), -1 when unused */
	char *text; /* attribute name or string value */
};

struct cel_program {
	struct node *nodes;
	size_t count, cap;
	int root;
};

struct parser {
	const char *src;
	size_t pos, len;
	int depth;
	struct cel_program *p;
	struct buf *err;
	bool failed;
};

static int fail(struct parser *ps, const char *msg)
{
	if (!ps->failed) {
		buf_printf(ps->err, "query: column %zu: %s", ps->pos + 1, msg);
		ps->failed = true;
	}
	return -1;
}

static int new_node(struct parser *ps, enum node_kind k, int a, int b, char *text)
{
	struct cel_program *p = ps->p;
	xgrow((void **)&p->nodes, &p->cap, p->count + 1, sizeof(*p->nodes));
	p->nodes[p->count] = (struct node){ k, a, b, text };
	return (int)p->count++;
}

static void skip_ws(struct parser *ps)
{
	while (ps->pos < ps->len && strchr(" \t\r\n", ps->src[ps->pos]))
		ps->pos++;
}

static bool eat(struct parser *ps, const char *tok)
{
	skip_ws(ps);
	size_t n = strlen(tok);
	if (ps->len - ps->pos >= n && memcmp(ps->src + ps->pos, tok, n) == 0) {
		ps->pos += n;
		return true;
	}
	return false;
}

static bool is_ident_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_ident(char c)
{
	return is_ident_start(c) || (c >= '0' && c <= '9');
}

/* Parses a string literal at the current position into out. */
static int string_lit(struct parser *ps, struct buf *out)
{
	skip_ws(ps);
	if (ps->pos >= ps->len || (ps->src[ps->pos] != '"' && ps->src[ps->pos] != '\''))
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

static int operand(struct parser *ps)
{
	skip_ws(ps);
	if (ps->pos >= ps->len)
		return fail(ps, "expected an attribute or a string, found the end of the query");
	char c = ps->src[ps->pos];
	struct buf text = { 0 };
	if (c == '"' || c == '\'') {
		if (string_lit(ps, &text) < 0) {
			buf_free(&text);
			return -1;
		}
		return new_node(ps, N_STR, -1, -1, buf_steal(&text, NULL));
	}
	if (!is_ident_start(c))
		return fail(ps, "expected an attribute name or a string literal");
	for (;;) {
		size_t start = ps->pos;
		while (ps->pos < ps->len && is_ident(ps->src[ps->pos]))
			ps->pos++;
		buf_append(&text, ps->src + start, ps->pos - start);
		if (ps->pos < ps->len && ps->src[ps->pos] == '.' && ps->pos + 1 < ps->len &&
		    is_ident_start(ps->src[ps->pos + 1])) {
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
		const char *kw = i ? "false" : "true";
		size_t n = strlen(kw);
		if (ps->len - ps->pos >= n && memcmp(ps->src + ps->pos, kw, n) == 0 &&
		    (ps->pos + n == ps->len || !is_ident(ps->src[ps->pos + n]))) {
			ps->pos += n;
			skip_ws(ps);
			if (ps->pos < ps->len && (ps->src[ps->pos] == '=' || ps->src[ps->pos] == '!')) {
				ps->pos = save; /* "true == x" style: treat as operand */
				break;
			}
			return new_node(ps, i ? N_FALSE : N_TRUE, -1, -1, NULL);
		}
	}
	int l = operand(ps);
	if (l < 0)
		return -1;
	enum node_kind k;
	if (eat(ps, "=="))
		k = N_EQ;
	else if (eat(ps, "!="))
		k = N_NE;
	else
		return fail(ps, "expected == or != after the operand");
	int r = operand(ps);
	if (r < 0)
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

static int and_expr(struct parser *ps)
{
	int l = unary(ps);
	while (l >= 0 && eat(ps, "&&")) {
		int r = unary(ps);
		if (r < 0)
			return -1;
		l = new_node(ps, N_AND, l, r, NULL);
	}
	return l;
}

static int expr(struct parser *ps)
{
	if (++ps->depth > CEL_MAX_DEPTH)
		return fail(ps, "expression nested too deeply");
	int l = and_expr(ps);
	while (l >= 0 && eat(ps, "||")) {
		int r = and_expr(ps);
		if (r < 0)
			return -1;
		l = new_node(ps, N_OR, l, r, NULL);
	}
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
	case N_ATTR:
	case N_STR:
		break;
	}
	return false;
}

bool cel_eval(const struct cel_program *p, cel_lookup_fn lookup, void *ctx)
{
	return eval(p, p->root, lookup, ctx);
}

void cel_free(struct cel_program *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->count; i++)
		free(p->nodes[i].text);
	free(p->nodes);
	free(p);
}
