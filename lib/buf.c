/* buf.c - see buf.h. */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void buf_reserve(struct buf *b, size_t extra)
{
	if (b->len + extra + 1 <= b->cap)
		return;
	xgrow((void **)&b->data, &b->cap, b->len + extra + 1, 1);
}

void buf_append(struct buf *b, const void *p, size_t n)
{
	buf_reserve(b, n);
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void buf_puts(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void buf_putc(struct buf *b, char c)
{
	buf_reserve(b, 1);
	b->data[b->len++] = c;
	b->data[b->len] = '\0';
}

void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	buf_reserve(b, 64);
	int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
	if (n < 0) {
		va_end(ap2);
		return;
	}
	if ((size_t)n >= b->cap - b->len) {
		buf_reserve(b, (size_t)n);
		vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap2);
	}
	va_end(ap2);
	b->len += (size_t)n;
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(b, fmt, ap);
	va_end(ap);
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

char *buf_steal(struct buf *b, size_t *len)
{
	if (!b->data) {
		buf_reserve(b, 0);
		b->data[0] = '\0';
	}
	char *d = b->data;
	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	return d;
}
