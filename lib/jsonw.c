/* jsonw.c - see jsonw.h. */
#include "jsonw.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence starting at s (at most n bytes
 * available), or 0 when the bytes there are not valid UTF-8. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	uint32_t cp;
	if (c < 0x80)
		return 1;
	if ((c & 0xe0) == 0xc0) {
		len = 2;
		cp = c & 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3;
		cp = c & 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* Room for n more bytes at the end of b: where they go. commit() then
 * sets the length (and the NUL buf.h promises) to end at `end`. Writing
 * through these instead of one buf call per byte keeps large answers
 * (flamegraphs) as cheap as hand-punctuated text. */
static inline char *room(struct buf *b, size_t n)
{
	if (b->len + n + 1 > b->cap)
		buf_reserve(b, n);
	return b->data + b->len;
}

static inline void commit(struct buf *b, char *end)
{
	b->len = (size_t)(end - b->data);
	*end = '\0';
}

static inline void put1(struct buf *b, char c)
{
	char *p = room(b, 1);
	*p++ = c;
	commit(b, p);
}

/* How many leading bytes of s need no escaping (printable ASCII other
 * than the quote and the backslash). */
/* The length of NUL-terminated s when all of it needs no escaping, else
 * SIZE_MAX: one pass for the usual case of keys and names. */
static inline size_t plain_len(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	for (;; i++) {
		unsigned char c = s[i];
		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\')
			continue;
		return c ? SIZE_MAX : i;
	}
}

static inline size_t plain_prefix(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\')
		i++;
	return i;
}

void jsonw_quote(struct buf *b, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = plain_prefix(s, n);
	char *p = room(b, n + 2);
	*p++ = '"';
	memcpy(p, s, i);
	p += i;
	if (i == n) { /* the usual case: nothing to escape */
		*p++ = '"';
		commit(b, p);
		return;
	}
	commit(b, p);
	while (i < n) {
		unsigned char c = s[i];
		if (c == '"' || c == '\\') {
			buf_putc(b, '\\');
			buf_putc(b, (char)c);
			i++;
		} else if (c < 0x20) {
			switch (c) {
			case '\n': buf_puts(b, "\\n"); break;
			case '\r': buf_puts(b, "\\r"); break;
			case '\t': buf_puts(b, "\\t"); break;
			default: buf_printf(b, "\\u%04x", c); break;
			}
			i++;
		} else if (c < 0x80) {
			/* Run of plain ASCII: copy in one go. */
			size_t j = i + 1;
			while (j < n && s[j] >= 0x20 && s[j] < 0x80 && s[j] != '"' && s[j] != '\\')
				j++;
			buf_append(b, s + i, j - i);
			i = j;
		} else {
			size_t l = utf8_len(s + i, n - i);
			if (l == 0) {
				buf_puts(b, "\\ufffd");
				i++;
			} else {
				buf_append(b, s + i, l);
				i += l;
			}
		}
	}
	buf_putc(b, '"');
}

/* Decimal digits without printf: flamegraphs write hundreds of thousands
 * of numbers. */
static void put_u64(struct buf *b, uint64_t v, bool neg)
{
	char tmp[24];
	char *e = tmp + sizeof(tmp), *p = e;
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	if (neg)
		*--p = '-';
	buf_append(b, p, (size_t)(e - p));
}


/* Records a misuse (the first one's reason is kept). */
static void misuse(struct jsonw *w, const char *why)
{
	if (!w->misuse)
		w->misuse = why;
#ifdef EMBER_JSONW_STRICT
	if (!w->lenient) {
		fprintf(stderr, "jsonw: misuse: %s\n", why);
		abort();
	}
#endif
}

void jsonw_init(struct jsonw *w, struct buf *b)
{
	w->b = b;
	w->depth = 0;
	w->comma = w->after_key = w->done = w->lenient = false;
	w->misuse = NULL;
}

/* Whether the innermost open level is an object (depth > 0). */
static inline bool in_object(const struct jsonw *w)
{
	uint32_t i = w->depth - 1;
	return w->is_object[i >> 3] >> (i & 7) & 1;
}

int jsonw_finish(struct jsonw *w)
{
	if (w->depth)
		misuse(w, "finished with an object or array open");
	else if (!w->done)
		misuse(w, "finished without a value");
	return w->misuse ? -1 : 0;
}

int jsonw_finish_answer(struct jsonw *w, struct buf *err)
{
	if (!jsonw_finish(w))
		return 0;
	buf_printf(err, "internal error: the answer was not written as valid JSON (%s)", w->misuse);
	return JSONW_RC;
}

/* Before any value: the comma of an array element, the check that an
 * object member has its key, the check of a second top-level value. */
static void before_value(struct jsonw *w)
{
	if (!w->depth) {
		if (w->done)
			misuse(w, "a second top-level value");
		return;
	}
	if (in_object(w)) {
		if (!w->after_key)
			misuse(w, "a value without a key in an object");
		w->after_key = false;
		return;
	}
	if (w->comma)
		put1(w->b, ',');
	w->comma = true;
}

/* After a scalar value: at the top it completes the document. */
static inline void after_value(struct jsonw *w)
{
	if (!w->depth)
		w->done = true;
}

static void begin(struct jsonw *w, char open)
{
	before_value(w);
	if (w->depth == JSONW_MAX_DEPTH) {
		misuse(w, "nested deeper than JSONW_MAX_DEPTH");
		/* Written anyway, not tracked: the document is already wrong. */
		put1(w->b, open);
		return;
	}
	uint32_t i = w->depth++;
	if (open == '{')
		w->is_object[i >> 3] |= (uint8_t)(1u << (i & 7));
	else
		w->is_object[i >> 3] &= (uint8_t)~(1u << (i & 7));
	w->comma = false;
	put1(w->b, open);
}

static void end(struct jsonw *w, char open, char close)
{
	if (!w->depth || in_object(w) != (open == '{')) {
		misuse(w, open == '{' ? "end_object without an open object"
				      : "end_array without an open array");
		return;
	}
	if (w->after_key)
		misuse(w, "a key without a value");
	w->after_key = false;
	w->depth--;
	w->comma = true;
	put1(w->b, close);
	after_value(w);
}

void jsonw_begin_object(struct jsonw *w)
{
	begin(w, '{');
}

void jsonw_end_object(struct jsonw *w)
{
	end(w, '{', '}');
}

void jsonw_begin_array(struct jsonw *w)
{
	begin(w, '[');
}

void jsonw_end_array(struct jsonw *w)
{
	end(w, '[', ']');
}

void jsonw_key(struct jsonw *w, const char *key)
{
	if (!w->depth || !in_object(w))
		misuse(w, "a key outside an object");
	else if (w->after_key)
		misuse(w, "two keys in a row");
	const char *k = key ? key : "";
	size_t n = plain_len(k);
	bool plain = n != SIZE_MAX;
	if (!plain)
		n = strlen(k);
	/* ,"key": in one go when the key needs no escaping (keys are names
	 * the code chose, nearly always). */
	char *p = room(w->b, n + 4);
	if (w->comma)
		*p++ = ',';
	w->comma = true;
	w->after_key = true;
	if (plain) {
		*p++ = '"';
		memcpy(p, k, n);
		p += n;
		*p++ = '"';
		*p++ = ':';
		commit(w->b, p);
		return;
	}
	commit(w->b, p);
	jsonw_quote(w->b, k, n);
	put1(w->b, ':');
}

void jsonw_strn(struct jsonw *w, const char *s, size_t n)
{
	before_value(w);
	jsonw_quote(w->b, s ? s : "", s ? n : 0);
	after_value(w);
}

void jsonw_str(struct jsonw *w, const char *s)
{
	if (!s)
		s = "";
	size_t n = plain_len(s);
	if (n == SIZE_MAX) {
		jsonw_strn(w, s, strlen(s));
		return;
	}
	before_value(w);
	char *p = room(w->b, n + 2);
	*p++ = '"';
	memcpy(p, s, n);
	p += n;
	*p++ = '"';
	commit(w->b, p);
	after_value(w);
}

void jsonw_u64(struct jsonw *w, uint64_t v)
{
	before_value(w);
	put_u64(w->b, v, false);
	after_value(w);
}

void jsonw_i64(struct jsonw *w, int64_t v)
{
	before_value(w);
	put_u64(w->b, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
	after_value(w);
}

void jsonw_double(struct jsonw *w, double v)
{
	before_value(w);
	if (!isfinite(v)) {
		buf_puts(w->b, "null");
	} else {
		char tmp[40];
		int n = snprintf(tmp, sizeof(tmp), "%.6g", v);
		buf_append(w->b, tmp, (size_t)n);
	}
	after_value(w);
}

void jsonw_bool(struct jsonw *w, bool v)
{
	before_value(w);
	buf_puts(w->b, v ? "true" : "false");
	after_value(w);
}

void jsonw_null(struct jsonw *w)
{
	before_value(w);
	buf_puts(w->b, "null");
	after_value(w);
}

void jsonw_raw(struct jsonw *w, const char *json, size_t n)
{
	before_value(w);
	buf_append(w->b, json, n);
	after_value(w);
}

/* The key + value functions of jsonw.h, one a value type. */
#define KV(kind, type)                                                    \
	void jsonw_kv_##kind(struct jsonw *w, const char *key, type v)    \
	{                                                                 \
		jsonw_key(w, key);                                        \
		jsonw_##kind(w, v);                                       \
	}
KV(str, const char *)
KV(u64, uint64_t)
KV(i64, int64_t)
KV(double, double)
KV(bool, bool)
