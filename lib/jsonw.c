/* jsonw.c - see jsonw.h. */
#include "jsonw.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
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

void jsonw_strn(struct buf *b, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	buf_reserve(b, n + 2);
	buf_putc(b, '"');
	size_t i = 0;
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

void jsonw_str(struct buf *b, const char *s)
{
	jsonw_strn(b, s ? s : "", s ? strlen(s) : 0);
}

void jsonw_key(struct buf *b, const char *key)
{
	jsonw_str(b, key);
	buf_putc(b, ':');
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

void jsonw_u64(struct buf *b, uint64_t v)
{
	put_u64(b, v, false);
}

void jsonw_i64(struct buf *b, int64_t v)
{
	put_u64(b, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
}

void jsonw_double(struct buf *b, double v)
{
	if (!isfinite(v)) {
		buf_puts(b, "null");
		return;
	}
	char tmp[40];
	int n = snprintf(tmp, sizeof(tmp), "%.6g", v);
	buf_append(b, tmp, (size_t)n);
}
