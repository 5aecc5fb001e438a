/* request.c - see request.h. */
#include "request.h"

#include <string.h>

#include "util.h"

json_t *req_load(const char *body, size_t len, struct buf *err)
{
	json_error_t jerr;
	json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		buf_printf(err, "request body is not valid JSON: %s (line %d, column %d)", jerr.text,
			   jerr.line, jerr.column);
		return NULL;
	}
	if (!json_is_object(doc)) {
		buf_puts(err, "request body: expected a JSON object");
		json_decref(doc);
		return NULL;
	}
	return doc;
}

static const json_t *field(const json_t *doc, const char *name)
{
	const json_t *v = json_object_get(doc, name);
	return v && !json_is_null(v) ? v : NULL;
}

int req_bool(const json_t *doc, const char *name, bool *out, struct buf *err)
{
	const json_t *v = field(doc, name);
	if (!v)
		return 0;
	if (!json_is_boolean(v)) {
		buf_printf(err, "%s: expected true or false", name);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

int req_count(const json_t *doc, const char *name, uint64_t max, uint64_t *out,
	      struct buf *err)
{
	const json_t *v = field(doc, name);
	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    (uint64_t)json_integer_value(v) > max) {
		buf_printf(err, "%s: expected an integer from 1 to %llu", name, (unsigned long long)max);
		return -1;
	}
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int req_string(const json_t *doc, const char *name, size_t max, char **out, struct buf *err)
{
	const json_t *v = field(doc, name);
	if (!v)
		return 0;
	if (!json_is_string(v) || json_string_length(v) > max) {
		buf_printf(err, "%s: expected a string of at most %zu bytes", name, max);
		return -1;
	}
	free(*out);
	*out = xstrdup(json_string_value(v));
	return 0;
}

int req_search(const json_t *doc, char **out, struct buf *err)
{
	if (req_string(doc, "search", 1024, out, err) < 0)
		return -1;
	if (*out && !**out) {
		free(*out);
		*out = NULL;
	}
	return 0;
}

int req_choice(const json_t *doc, const char *name, const char *a, const char *b, bool *is_b,
	       struct buf *err)
{
	const json_t *v = field(doc, name);
	if (!v)
		return 0;
	const char *s = json_string_value(v);
	if (!s || (strcmp(s, a) != 0 && strcmp(s, b) != 0)) {
		buf_printf(err, "%s: expected \"%s\" or \"%s\"", name, a, b);
		return -1;
	}
	*is_b = strcmp(s, b) == 0;
	return 0;
}

int req_patterns(const json_t *mask, const char *what, size_t max, char **out, size_t *n,
		 struct buf *err)
{
	if (!mask || json_is_null(mask))
		return 0;
	const json_t *pats = json_is_object(mask) ? json_object_get(mask, "patterns") : NULL;
	if (!pats || json_is_null(pats))
		return 0;
	if (!json_is_array(pats)) {
		buf_printf(err, "%s.patterns: expected an array of strings", what);
		return -1;
	}
	if (json_array_size(pats) > max) {
		buf_printf(err, "%s.patterns: at most %zu patterns", what, max);
		return -1;
	}
	size_t i;
	const json_t *v;
	json_array_foreach(pats, i, v)
	{
		if (!json_is_string(v) || json_string_length(v) > 1024) {
			buf_printf(err, "%s.patterns: expected strings of at most 1024 bytes", what);
			return -1;
		}
		out[(*n)++] = xstrdup(json_string_value(v));
	}
	return 0;
}
