/* request.h - reading the JSON bodies of query requests: every field is
 * checked for type and range, and every refusal is a message for the
 * client that names the field. A field that is absent or null keeps the
 * caller's default. Each function returns 0, or -1 with err set.
 */
#ifndef EMBER_SERVER_REQUEST_H
#define EMBER_SERVER_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Parses the body (duplicate keys refused); it must be an object. The
 * caller frees the answer with json_decref. NULL with err set. */
json_t *req_load(const char *body, size_t len, struct buf *err);

int req_bool(const json_t *doc, const char *name, bool *out, struct buf *err);
/* An integer from 1 to max. */
int req_count(const json_t *doc, const char *name, uint64_t max, uint64_t *out,
	      struct buf *err);
/* A string of at most max bytes, copied (the caller frees it). */
int req_string(const json_t *doc, const char *name, size_t max, char **out, struct buf *err);
/* "search": a string of at most 1 KiB; an empty one is none (*out NULL). */
int req_search(const json_t *doc, char **out, struct buf *err);
/* One of two words: *is_b tells which. */
int req_choice(const json_t *doc, const char *name, const char *a, const char *b, bool *is_b,
	       struct buf *err);
/* {"patterns": [strings]}: at most max patterns of 1 KiB, appended to
 * out (copies) from *n on. what names the object in messages. */
int req_patterns(const json_t *mask, const char *what, size_t max, char **out, size_t *n,
		 struct buf *err);

#endif
