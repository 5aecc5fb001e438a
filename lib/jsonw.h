/* jsonw.h - a JSON writer over a struct buf that checks its own nesting.
 *
 * ember parses JSON with jansson; it writes JSON with this writer because
 * the largest answers (flamegraphs of 100k nodes) are written straight
 * into one buffer, without building a document tree first. The writer
 * puts the punctuation (braces, brackets, commas, colons, quotes) itself:
 * callers say what they write, never how it is spelled.
 *
 *	struct jsonw w;
 *	jsonw_init(&w, out);
 *	jsonw_begin_object(&w);
 *	jsonw_kv_str(&w, "unit", "nanoseconds");
 *	jsonw_key(&w, "values");
 *	jsonw_begin_array(&w);
 *	jsonw_u64(&w, 1);
 *	jsonw_end_array(&w);
 *	jsonw_end_object(&w);
 *	if (jsonw_finish(&w)) ... a bug: the nesting was wrong
 *
 * It keeps a stack of the open objects and arrays (at most
 * JSONW_MAX_DEPTH) and records each misuse in a sticky error: a value
 * without a key inside an object, a key inside an array or at the top, two
 * keys in a row, an end of the wrong kind or with nothing open, a second
 * top-level value, nesting deeper than JSONW_MAX_DEPTH, and (at
 * jsonw_finish) a document left open or never begun. A misuse is a bug in
 * the caller: builds made with EMBER_JSONW_STRICT defined (the unit tests
 * and the fuzz targets, see the Makefile) abort at the misuse with its
 * reason on stderr, unless w.lenient is set (the writer's own test);
 * product builds go on writing (the output may then be invalid JSON) and
 * jsonw_finish returns -1 so the caller can fail the answer.
 *
 * A writer may also be handed to a function that writes one value or a
 * few object members at the current position (e.g. a tree node); that
 * function uses the same writer and does not call jsonw_init/finish.
 *
 * No allocation besides the buffer's own growth. Ownership: the caller
 * owns the buf; the writer only appends to it. Threading: one writer, one
 * thread.
 */
#ifndef EMBER_JSONW_H
#define EMBER_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Flamegraph trees nest two levels a frame (a node object, its children
 * array), and server/query/tree.c writes nodes 8192 deep at most
 * (2 x DISPLAY_MAX_DEPTH): 16 384 levels and a few around them. */
#define JSONW_MAX_DEPTH (16 * 1024 + 64)

struct jsonw {
	struct buf *b;
	uint32_t depth;      /* open objects and arrays */
	bool comma;          /* the next member or element needs a comma first */
	bool after_key;      /* in an object, a key was written: a value is due */
	bool done;           /* the top-level value is complete */
	bool lenient;        /* misuse is only recorded, even under EMBER_JSONW_STRICT */
	const char *misuse;  /* the first misuse, or NULL */
	/* One bit for each open level: 1 an object, 0 an array (2 KiB, not
	 * cleared by jsonw_init: a level's bit is set when it opens). */
	uint8_t is_object[JSONW_MAX_DEPTH / 8];
};

/* Starts a document appended to b (which may hold text already). */
void jsonw_init(struct jsonw *w, struct buf *b);
/* 0 when exactly one complete value was written without misuse; -1
 * otherwise (w->misuse says why). */
int jsonw_finish(struct jsonw *w);
/* jsonw_finish for an answer: 0, or JSONW_RC on a misuse, with a message
 * naming it ("internal error: ...") appended to err for the client (the
 * HTTP layer answers it 500). */
#define JSONW_RC (-7)
int jsonw_finish_answer(struct jsonw *w, struct buf *err);

void jsonw_begin_object(struct jsonw *w);
void jsonw_end_object(struct jsonw *w);
void jsonw_begin_array(struct jsonw *w);
void jsonw_end_array(struct jsonw *w);
/* A member's key, in an object; its value must follow. */
void jsonw_key(struct jsonw *w, const char *key);

/* Strings: bytes that are not valid UTF-8 are replaced by U+FFFD so the
 * output is always valid JSON. NULL is written as "". */
void jsonw_str(struct jsonw *w, const char *s);
void jsonw_strn(struct jsonw *w, const char *s, size_t n);
void jsonw_u64(struct jsonw *w, uint64_t v);
void jsonw_i64(struct jsonw *w, int64_t v);
/* Finite doubles with up to 6 significant decimals; NaN/inf become null. */
void jsonw_double(struct jsonw *w, double v);
void jsonw_bool(struct jsonw *w, bool v);
void jsonw_null(struct jsonw *w);
/* An already valid JSON value (e.g. a cached answer, jansson's output),
 * written as one value; n bytes. The writer does not check its text. */
void jsonw_raw(struct jsonw *w, const char *json, size_t n);

/* key + value in one call, for object members. */
void jsonw_kv_str(struct jsonw *w, const char *key, const char *s);
void jsonw_kv_u64(struct jsonw *w, const char *key, uint64_t v);
void jsonw_kv_i64(struct jsonw *w, const char *key, int64_t v);
void jsonw_kv_double(struct jsonw *w, const char *key, double v);
void jsonw_kv_bool(struct jsonw *w, const char *key, bool v);

/* Appends s (n bytes) as a JSON string literal, quotes included, to b,
 * outside any writer: for the writer itself and for a text that is not
 * JSON but quotes a string the same way (an error message quoting the
 * pattern that failed, server/query/uregex.c). */
void jsonw_quote(struct buf *b, const char *s, size_t n);

#endif
