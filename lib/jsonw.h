/* jsonw.h - writing JSON text into a struct buf.
 *
 * ember parses JSON with jansson; it writes JSON with these few helpers
 * because the largest answers (flamegraphs of 100k nodes) are written
 * straight into one buffer, without building a document tree first.
 */
#ifndef EMBER_JSONW_H
#define EMBER_JSONW_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Appends s as a JSON string literal, quotes included. Bytes that are not
 * valid UTF-8 are replaced by U+FFFD so the output is always valid JSON. */
void jsonw_str(struct buf *b, const char *s);
void jsonw_strn(struct buf *b, const char *s, size_t n);
/* Appends "key": (with the quotes and colon). */
void jsonw_key(struct buf *b, const char *key);
void jsonw_u64(struct buf *b, uint64_t v);
void jsonw_i64(struct buf *b, int64_t v);
/* Finite doubles with up to 6 significant decimals; NaN/inf become null. */
void jsonw_double(struct buf *b, double v);

#endif
