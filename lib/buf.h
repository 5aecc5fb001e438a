/* buf.h - a growable byte buffer; the owner of .data is the struct buf.
 *
 * A zeroed struct buf is an empty buffer. .data is always NUL-terminated
 * after any append (the NUL is not counted in .len), so text built in a
 * buf can be passed to C string functions.
 */
#ifndef EMBER_BUF_H
#define EMBER_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct buf {
	char *data;
	size_t len;
	size_t cap;
};

void buf_reserve(struct buf *b, size_t extra);
void buf_append(struct buf *b, const void *p, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_putc(struct buf *b, char c);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(struct buf *b, const char *fmt, va_list ap);
void buf_reset(struct buf *b);
void buf_free(struct buf *b);
/* Hands the bytes to the caller (who must free() them) and empties b. */
char *buf_steal(struct buf *b, size_t *len);

#endif
