/* pbjson.c - see pbjson.h. */
#include "pbjson.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pbarena.h"
#include "util.h"

/* Where in the document: a chain of keys and array indexes from the
 * innermost outwards, on the decoder's stack; rendered only for errors. */
struct seg {
	const struct seg *up;
	const char *key; /* NULL: an array index */
	size_t idx;
};

struct dec {
	const struct pbjson_opts *o;
	ProtobufCMessage *root; /* owns the arena everything is allocated in */
	struct buf *err;
	int *too_large;
};

static void path_put(struct buf *b, const struct seg *s)
{
	if (s->up)
		path_put(b, s->up);
	if (s->key)
		buf_printf(b, "%s%.64s%s", s->up ? "." : "", s->key, strlen(s->key) > 64 ? "..." : "");
	else
		buf_printf(b, "[%zu]", s->idx);
}

__attribute__((format(printf, 3, 4))) static int fail(struct dec *d, const struct seg *at,
						       const char *fmt, ...)
{
	if (at)
		path_put(d->err, at);
	else
		buf_puts(d->err, "(root)");
	buf_puts(d->err, ": ");
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(d->err, fmt, ap);
	va_end(ap);
	return -1;
}

static int out_of_memory(struct dec *d, const struct seg *at)
{
	*d->too_large = 1;
	return fail(d, at, "out of memory");
}

/* --- bounds before parsing ---------------------------------------------------- */

/* One pass over the text: nesting depth, containers (objects and
 * arrays) and items (every value and key of a valid document follows
 * exactly one of , : [ { or is the root, so counting those bounds what
 * jansson will allocate). Malformed text is left for jansson to describe. */
static int prescan(struct dec *d, const unsigned char *s, size_t n)
{
	const struct pbjson_opts *o = d->o;
	size_t depth = 0, items = 1, containers = 0;
	bool str = false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		if (str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				str = false;
			continue;
		}
		switch (c) {
		case '"':
			str = true;
			break;
		case '{':
		case '[':
			containers++;
			if (++depth > o->max_depth) {
				buf_printf(d->err, "JSON nested deeper than %u levels", o->max_depth);
				return -1;
			}
			items++;
			break;
		case '}':
		case ']':
			if (depth)
				depth--;
			break;
		case ',':
		case ':':
			items++;
			break;
		default:
			break;
		}
	}
	if (containers > o->max_containers) {
		*d->too_large = 1;
		buf_printf(d->err, "JSON with more than %zu objects and arrays", o->max_containers);
		return -1;
	}
	if (items > o->max_items) {
		*d->too_large = 1;
		buf_printf(d->err, "JSON with more than %zu values", o->max_items);
		return -1;
	}
	return 0;
}

/* --- scalars --------------------------------------------------------------------- */

static const char *type_name(ProtobufCType t)
{
	static const char *const names[] = {
		[PROTOBUF_C_TYPE_INT32] = "int32",     [PROTOBUF_C_TYPE_SINT32] = "sint32",
		[PROTOBUF_C_TYPE_SFIXED32] = "sfixed32", [PROTOBUF_C_TYPE_INT64] = "int64",
		[PROTOBUF_C_TYPE_SINT64] = "sint64",   [PROTOBUF_C_TYPE_SFIXED64] = "sfixed64",
		[PROTOBUF_C_TYPE_UINT32] = "uint32",   [PROTOBUF_C_TYPE_FIXED32] = "fixed32",
		[PROTOBUF_C_TYPE_UINT64] = "uint64",   [PROTOBUF_C_TYPE_FIXED64] = "fixed64",
		[PROTOBUF_C_TYPE_FLOAT] = "float",     [PROTOBUF_C_TYPE_DOUBLE] = "double",
		[PROTOBUF_C_TYPE_BOOL] = "bool",       [PROTOBUF_C_TYPE_ENUM] = "enum",
		[PROTOBUF_C_TYPE_STRING] = "string",   [PROTOBUF_C_TYPE_BYTES] = "bytes",
		[PROTOBUF_C_TYPE_MESSAGE] = "message",
	};
	return (unsigned)t < ARRAY_SIZE(names) && names[t] ? names[t] : "?";
}

/* A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? and
 * nothing else; *integral_form when it has neither fraction nor exponent. */
static bool number_syntax(const char *s, size_t n, bool *integral_form)
{
	size_t i = 0;
	if (i < n && s[i] == '-')
		i++;
	if (i >= n || s[i] < '0' || s[i] > '9')
		return false;
	if (s[i] == '0')
		i++;
	else
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	*integral_form = true;
	if (i < n && s[i] == '.') {
		*integral_form = false;
		if (++i >= n || s[i] < '0' || s[i] > '9')
			return false;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		*integral_form = false;
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i >= n || s[i] < '0' || s[i] > '9')
			return false;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	return i == n;
}

enum { NUM_OK = 0, NUM_TYPE = -1, NUM_RANGE = -2 };

/* The double in v (a number or a string holding one, or "NaN",
 * "Infinity", "-Infinity"). */
static int get_double(json_t *v, double *out)
{
	if (json_is_integer(v)) {
		*out = (double)json_integer_value(v);
		return NUM_OK;
	}
	if (json_is_real(v)) {
		*out = json_real_value(v);
		return NUM_OK;
	}
	if (!json_is_string(v))
		return NUM_TYPE;
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	bool integral_form;
	if (strcmp(s, "NaN") == 0)
		*out = NAN;
	else if (strcmp(s, "Infinity") == 0)
		*out = INFINITY;
	else if (strcmp(s, "-Infinity") == 0)
		*out = -INFINITY;
	else if (!number_syntax(s, n, &integral_form))
		return NUM_TYPE;
	else {
		errno = 0;
		*out = strtod(s, NULL);
		if (errno == ERANGE && isinf(*out))
			return NUM_RANGE;
	}
	return NUM_OK;
}

/* The integer in v as a double that must be integral and in [lo, hi), for
 * reals and numeric strings with a fraction or exponent ("1e2", "5.0"). */
static int integral_double(json_t *v, double lo, double hi, double *x)
{
	int rc = get_double(v, x);
	if (rc != NUM_OK)
		return rc;
	if (!isfinite(*x) || *x != trunc(*x))
		return NUM_TYPE;
	if (!(*x >= lo && *x < hi))
		return NUM_RANGE;
	return NUM_OK;
}

/* v's text when v is a JSON string holding an integer in decimal
 * ("-12", not "1e2"), else NULL. */
static const char *integer_string(json_t *v)
{
	bool integral_form = false;
	if (json_is_string(v) && number_syntax(json_string_value(v), json_string_length(v), &integral_form) &&
	    integral_form)
		return json_string_value(v);
	return NULL;
}

/* The integer in v (a JSON integer, a decimal string, or an integral real
 * or numeric string) as int64_t (is_signed) or uint64_t, its bits in *out. */
static int get_integer(json_t *v, bool is_signed, uint64_t *out)
{
	const char *s;
	if (json_is_integer(v)) {
		if (!is_signed && json_integer_value(v) < 0)
			return NUM_RANGE;
		*out = (uint64_t)json_integer_value(v);
	} else if ((s = integer_string(v))) {
		if (!is_signed && s[0] == '-' && strcmp(s, "-0") != 0)
			return NUM_RANGE;
		errno = 0;
		*out = is_signed ? (uint64_t)strtoll(s, NULL, 10) : strtoull(s, NULL, 10);
		if (errno == ERANGE)
			return NUM_RANGE;
	} else {
		double d; /* -0 passes as 0 */
		int rc = integral_double(v, is_signed ? -0x1p63 : 0, is_signed ? 0x1p63 : 0x1p64, &d);
		if (rc != NUM_OK)
			return rc;
		*out = is_signed ? (uint64_t)(int64_t)d : (uint64_t)d;
	}
	return NUM_OK;
}

static int get_i64(json_t *v, int64_t lo, int64_t hi, int64_t *out)
{
	uint64_t bits;
	int rc = get_integer(v, true, &bits);
	if (rc != NUM_OK)
		return rc;
	int64_t x = (int64_t)bits;
	if (x < lo || x > hi)
		return NUM_RANGE;
	*out = x;
	return NUM_OK;
}

static int get_u64(json_t *v, uint64_t hi, uint64_t *out)
{
	uint64_t x;
	int rc = get_integer(v, false, &x);
	if (rc != NUM_OK)
		return rc;
	if (x > hi)
		return NUM_RANGE;
	*out = x;
	return NUM_OK;
}

static int num_fail(struct dec *d, const struct seg *at, const ProtobufCFieldDescriptor *f, int rc,
		    const char *expected)
{
	if (rc == NUM_RANGE)
		return fail(d, at, "out of range for %s", type_name(f->type));
	return fail(d, at, "expected %s", expected);
}

/* --- bytes ------------------------------------------------------------------------ */

static bool is_hex_field(const struct dec *d, const ProtobufCMessageDescriptor *desc,
			 const ProtobufCFieldDescriptor *f)
{
	if (!d->o->hex_bytes)
		return false;
	size_t dl = strlen(desc->name);
	for (const char *const *h = d->o->hex_bytes; *h; h++)
		if (strncmp(*h, desc->name, dl) == 0 && (*h)[dl] == '.' &&
		    strcmp(*h + dl + 1, f->name) == 0)
			return true;
	return false;
}

static bool all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return false;
	}
	return true;
}

/* Base64 (standard or URL-safe alphabet, padding optional) of s[0..n)
 * into the arena. */
static int decode_base64(struct dec *d, const struct seg *at, const char *s, size_t n,
			 ProtobufCBinaryData *out)
{
	size_t m = n;
	while (m > 0 && n - m < 2 && s[m - 1] == '=')
		m--;
	if (m % 4 == 1)
		return fail(d, at, "expected base64");
	size_t len = m / 4 * 3 + (m % 4 ? m % 4 - 1 : 0);
	if (len > d->o->max_string) {
		*d->too_large = 1;
		return fail(d, at, "longer than %zu bytes", d->o->max_string);
	}
	size_t padded = (m + 3) / 4 * 4;
	if (padded > INT32_MAX)
		return fail(d, at, "expected base64");
	unsigned char *tmp = xmalloc(padded + 1);
	for (size_t i = 0; i < m; i++) {
		char c = s[i];
		if (c == '-')
			c = '+';
		else if (c == '_')
			c = '/';
		else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			   (c >= '0' && c <= '9') || c == '+' || c == '/')) {
			free(tmp);
			return fail(d, at, "expected base64");
		}
		tmp[i] = (unsigned char)c;
	}
	memset(tmp + m, '=', padded - m);
	uint8_t *data = NULL;
	if (padded) {
		data = pb_alloc(d->root, padded / 4 * 3);
		if (!data) {
			free(tmp);
			return out_of_memory(d, at);
		}
		int got = EVP_DecodeBlock(data, tmp, (int)padded);
		if (got < 0 || (size_t)got != padded / 4 * 3) {
			free(tmp);
			return fail(d, at, "expected base64");
		}
	}
	free(tmp);
	out->data = data;
	out->len = len;
	return 0;
}

static int decode_bytes(struct dec *d, const ProtobufCMessageDescriptor *desc,
			const ProtobufCFieldDescriptor *f, json_t *v, ProtobufCBinaryData *out,
			const struct seg *at)
{
	if (!json_is_string(v))
		return fail(d, at, "expected a base64 string");
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (n % 2 == 0 && is_hex_field(d, desc, f) && all_hex(s, n)) {
		if (n / 2 > d->o->max_string) {
			*d->too_large = 1;
			return fail(d, at, "longer than %zu bytes", d->o->max_string);
		}
		uint8_t *data = n ? pb_alloc(d->root, n / 2) : NULL;
		if (n && !data)
			return out_of_memory(d, at);
		if (n)
			hex_decode(s, n, data, n / 2); /* all hex: cannot fail */
		out->data = data;
		out->len = n / 2;
		return 0;
	}
	return decode_base64(d, at, s, n, out);
}

/* --- messages --------------------------------------------------------------------- */

static int decode_message(struct dec *d, const ProtobufCMessageDescriptor *desc, json_t *obj,
			  ProtobufCMessage *m, const struct seg *at, unsigned depth);

/* The proto3 JSON name of a field is its name with each "_x" made "X". */
static bool json_name_eq(const char *key, const char *name)
{
	bool up = false;
	for (; *name; name++) {
		if (*name == '_') {
			up = true;
			continue;
		}
		char c = *name;
		if (up && c >= 'a' && c <= 'z')
			c = (char)(c - 'a' + 'A');
		up = false;
		if (*key++ != c)
			return false;
	}
	return *key == '\0';
}

static const ProtobufCFieldDescriptor *field_by_key(const ProtobufCMessageDescriptor *desc,
						    const char *key)
{
	const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(desc, key);
	if (f)
		return f;
	for (unsigned i = 0; i < desc->n_fields; i++)
		if (json_name_eq(key, desc->fields[i].name))
			return &desc->fields[i];
	return NULL;
}

/* An integer value of field f into out: signed or not, 64 bits (wide) or
 * 32, refused outside that type's range. */
static int decode_int(struct dec *d, const ProtobufCFieldDescriptor *f, json_t *v, void *out,
		      const struct seg *at, bool is_signed, bool wide)
{
	int rc;
	if (is_signed) {
		int64_t i;
		if ((rc = get_i64(v, wide ? INT64_MIN : INT32_MIN, wide ? INT64_MAX : INT32_MAX, &i)) != NUM_OK)
			return num_fail(d, at, f, rc, "an integer");
		if (wide)
			*(int64_t *)out = i;
		else
			*(int32_t *)out = (int32_t)i;
	} else {
		uint64_t u;
		if ((rc = get_u64(v, wide ? UINT64_MAX : UINT32_MAX, &u)) != NUM_OK)
			return num_fail(d, at, f, rc, "an integer");
		if (wide)
			*(uint64_t *)out = u;
		else
			*(uint32_t *)out = (uint32_t)u;
	}
	return 0;
}

/* One value of field f (an element when f is repeated) into out. */
static int decode_value(struct dec *d, const ProtobufCMessageDescriptor *desc,
			const ProtobufCFieldDescriptor *f, json_t *v, void *out,
			const struct seg *at, unsigned depth)
{
	double x;
	int rc;
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		return decode_int(d, f, v, out, at, true, false);
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		return decode_int(d, f, v, out, at, true, true);
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		return decode_int(d, f, v, out, at, false, false);
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return decode_int(d, f, v, out, at, false, true);
	case PROTOBUF_C_TYPE_FLOAT:
	case PROTOBUF_C_TYPE_DOUBLE:
		if ((rc = get_double(v, &x)) != NUM_OK)
			return num_fail(d, at, f, rc, "a number");
		if (f->type == PROTOBUF_C_TYPE_DOUBLE) {
			*(double *)out = x;
			return 0;
		}
		if (isfinite(x) && fabs(x) > FLT_MAX)
			return num_fail(d, at, f, NUM_RANGE, "");
		*(float *)out = (float)x;
		return 0;
	case PROTOBUF_C_TYPE_BOOL:
		if (!json_is_boolean(v))
			return fail(d, at, "expected true or false");
		*(protobuf_c_boolean *)out = json_is_true(v);
		return 0;
	case PROTOBUF_C_TYPE_ENUM: {
		const ProtobufCEnumDescriptor *ed = f->descriptor;
		if (json_is_string(v) && !integer_string(v)) {
			const ProtobufCEnumValue *ev =
				protobuf_c_enum_descriptor_get_value_by_name(ed, json_string_value(v));
			if (!ev)
				return fail(d, at, "\"%.64s\" is not a value of enum %s",
					    json_string_value(v), ed->name);
			*(int32_t *)out = ev->value;
			return 0;
		}
		if (!json_is_number(v) && !json_is_string(v))
			return fail(d, at, "expected an enum value's name or number");
		int64_t i;
		if ((rc = get_i64(v, INT32_MIN, INT32_MAX, &i)) != NUM_OK)
			return num_fail(d, at, f, rc, "an enum value's name or number");
		*(int32_t *)out = (int32_t)i;
		return 0;
	}
	case PROTOBUF_C_TYPE_STRING: {
		if (!json_is_string(v))
			return fail(d, at, "expected a string");
		size_t n = json_string_length(v);
		if (n > d->o->max_string) {
			*d->too_large = 1;
			return fail(d, at, "longer than %zu bytes", d->o->max_string);
		}
		char *s = pb_alloc(d->root, n + 1);
		if (!s)
			return out_of_memory(d, at);
		memcpy(s, json_string_value(v), n); /* jansson refuses \u0000: no NUL inside */
		*(char **)out = s;
		return 0;
	}
	case PROTOBUF_C_TYPE_BYTES:
		return decode_bytes(d, desc, f, v, out, at);
	case PROTOBUF_C_TYPE_MESSAGE: {
		const ProtobufCMessageDescriptor *sd = f->descriptor;
		if (!json_is_object(v))
			return fail(d, at, "expected an object");
		ProtobufCMessage *sub = pb_alloc(d->root, sd->sizeof_message);
		if (!sub)
			return out_of_memory(d, at);
		sd->message_init(sub);
		*(ProtobufCMessage **)out = sub;
		return decode_message(d, sd, v, sub, at, depth + 1);
	}
	}
	return fail(d, at, "fields of type %s are not supported", type_name(f->type));
}

static size_t elem_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return sizeof(uint64_t);
	case PROTOBUF_C_TYPE_DOUBLE:
		return sizeof(double);
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
		return sizeof(char *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(ProtobufCMessage *);
	default: /* 32-bit integers, float, enum */
		return sizeof(uint32_t);
	}
}

static int decode_repeated(struct dec *d, const ProtobufCMessageDescriptor *desc,
			   const ProtobufCFieldDescriptor *f, json_t *v, ProtobufCMessage *m,
			   const struct seg *at, unsigned depth)
{
	if (!json_is_array(v))
		return fail(d, at, "expected an array");
	size_t n = json_array_size(v);
	if (!n)
		return 0;
	size_t es = elem_size(f->type);
	char *arr = pb_alloc(d->root, n * es); /* n <= max_items: cannot overflow */
	if (!arr)
		return out_of_memory(d, at);
	for (size_t k = 0; k < n; k++) {
		json_t *e = json_array_get(v, k);
		struct seg here = { at, NULL, k };
		if (json_is_null(e))
			return fail(d, &here, "null in a repeated field");
		if (decode_value(d, desc, f, e, arr + k * es, &here, depth) < 0)
			return -1;
	}
	*(size_t *)((char *)m + f->quantifier_offset) = n;
	*(void **)((char *)m + f->offset) = arr;
	return 0;
}

static int decode_field(struct dec *d, const ProtobufCMessageDescriptor *desc,
			const ProtobufCFieldDescriptor *f, json_t *v, ProtobufCMessage *m,
			const struct seg *at, unsigned depth)
{
	if (f->label == PROTOBUF_C_LABEL_REPEATED)
		return decode_repeated(d, desc, f, v, m, at, depth);
	char *base = (char *)m;
	if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
		uint32_t *which = (uint32_t *)(base + f->quantifier_offset);
		if (*which)
			return fail(d, at, "a second member of the same oneof");
		if (decode_value(d, desc, f, v, base + f->offset, at, depth) < 0)
			return -1;
		*which = f->id;
		return 0;
	}
	if (decode_value(d, desc, f, v, base + f->offset, at, depth) < 0)
		return -1;
	/* Optional scalars and bytes have a has_ member; strings and
	 * messages are present when their pointer is set. */
	if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
	    f->type != PROTOBUF_C_TYPE_MESSAGE)
		*(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
	return 0;
}

static int decode_message(struct dec *d, const ProtobufCMessageDescriptor *desc, json_t *obj,
			  ProtobufCMessage *m, const struct seg *at, unsigned depth)
{
	if (!json_is_object(obj))
		return fail(d, at, "expected an object");
	if (depth > d->o->max_depth) /* the prescan's bound; kept for the recursion's sake */
		return fail(d, at, "nested deeper than %u levels", d->o->max_depth);
	/* Which fields were given, to refuse one under both its names. */
	uint64_t seen_small[8] = { 0 };
	size_t words = (desc->n_fields + 63) / 64;
	uint64_t *seen = words <= ARRAY_SIZE(seen_small) ? seen_small : xcalloc(words, 8);
	int rc = 0;
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		const ProtobufCFieldDescriptor *f = field_by_key(desc, key);
		if (!f)
			continue; /* unknown fields are ignored */
		struct seg here = { at, key, 0 };
		size_t fi = (size_t)(f - desc->fields);
		if (seen[fi / 64] >> (fi % 64) & 1) {
			rc = fail(d, &here, "field %s given twice (by its .proto and its JSON name)",
				  f->name);
			break;
		}
		seen[fi / 64] |= 1ull << (fi % 64);
		if (json_is_null(v))
			continue; /* absent */
		if ((rc = decode_field(d, desc, f, v, m, &here, depth)) < 0)
			break;
	}
	for (unsigned fi = 0; rc == 0 && fi < desc->n_fields; fi++)
		if (desc->fields[fi].label == PROTOBUF_C_LABEL_REQUIRED &&
		    !(seen[fi / 64] >> (fi % 64) & 1))
			rc = fail(d, at, "required field %s is missing", desc->fields[fi].name);
	if (seen != seen_small)
		free(seen);
	return rc;
}

ProtobufCMessage *pbjson_decode(const ProtobufCMessageDescriptor *desc, const void *json,
				size_t len, const struct pbjson_opts *opts, int *too_large,
				struct buf *err)
{
	*too_large = 0;
	struct dec d = { .o = opts, .err = err, .too_large = too_large };
	if (prescan(&d, json, len) < 0)
		return NULL;
	json_error_t jerr;
	json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		buf_printf(err, "not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
			   jerr.column);
		return NULL;
	}
	d.root = pb_new(desc);
	int rc = decode_message(&d, desc, doc, d.root, NULL, 0);
	json_decref(doc);
	if (rc < 0) {
		pb_free(d.root);
		return NULL;
	}
	return d.root;
}
