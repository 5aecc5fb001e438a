/* otlp.c - see otlp.h. */
#include "otlp.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_decode.h"
#include "compress.h"
#include "fileid.h"
#include "hmap.h"
#include "pbarena.h"
#include "pbjson.h"
#include "util.h"

#define MAX_TABLE (16u << 20)
#define MAX_PAIRS BATCH_MAX_ATTRIBUTES

/* The body, bounded and gunzipped into raw when gzip is set. Returns 0
 * (*data, *len: the bytes to decode) or -1 with err set. */
static int unzip(const void *body, size_t len, int gzip, int *too_large, struct buf *raw,
		 const void **data, size_t *dlen, struct buf *err)
{
	*too_large = 0;
	if (len > OTLP_MAX_BODY) {
		*too_large = 1;
		buf_printf(err, "request larger than %u bytes", OTLP_MAX_BODY);
		return -1;
	}
	*data = body;
	*dlen = len;
	if (gzip) {
		int rc = gzip_decompress_bounded(body, len, OTLP_MAX_DECODED, raw);
		if (rc == -2) {
			*too_large = 1;
			buf_printf(err, "request decompresses to more than %u bytes", OTLP_MAX_DECODED);
		} else if (rc < 0) {
			buf_puts(err, "body is not a valid gzip stream");
		}
		if (rc < 0)
			return -1;
		*data = raw->data;
		*dlen = raw->len;
	}
	return 0;
}

Ember__Otlp__ExportProfilesServiceRequest *otlp_decode(const void *body, size_t len, int gzip,
						       int *too_large, struct buf *err)
{
	struct buf raw = { 0 };
	const void *data;
	size_t dlen;
	ProtobufCMessage *m = NULL;
	if (unzip(body, len, gzip, too_large, &raw, &data, &dlen, err) == 0)
		m = pb_unpack(&ember__otlp__export_profiles_service_request__descriptor, data, dlen,
			      err);
	buf_free(&raw);
	return (Ember__Otlp__ExportProfilesServiceRequest *)m;
}

/* OTLP/JSON sends trace, span and profile ids as hex, not base64. */
static const char *const otlp_hex_bytes[] = {
	"ember.otlp.Link.trace_id",
	"ember.otlp.Link.span_id",
	"ember.otlp.Profile.profile_id",
	NULL,
};

static const struct pbjson_opts otlp_json_opts = {
	.max_depth = OTLP_JSON_MAX_DEPTH,
	.max_items = OTLP_JSON_MAX_VALUES,
	.max_containers = OTLP_JSON_MAX_CONTAINERS,
	.max_string = OTLP_MAX_DECODED,
	.hex_bytes = otlp_hex_bytes,
};

Ember__Otlp__ExportProfilesServiceRequest *otlp_decode_json(const void *body, size_t len,
							    int gzip, int *too_large,
							    struct buf *err)
{
	struct buf raw = { 0 };
	const void *data;
	size_t dlen;
	ProtobufCMessage *m = NULL;
	if (unzip(body, len, gzip, too_large, &raw, &data, &dlen, err) == 0)
		m = pbjson_decode(&ember__otlp__export_profiles_service_request__descriptor, data,
				  dlen, &otlp_json_opts, too_large, err);
	buf_free(&raw);
	return (Ember__Otlp__ExportProfilesServiceRequest *)m;
}

void otlp_free(Ember__Otlp__ExportProfilesServiceRequest *req)
{
	pb_free(req);
}

/* --- checking the request ------------------------------------------------------ */

struct dict {
	const Ember__Otlp__ProfilesDictionary *d;
	size_t nstr, nmap, nloc, nfun, nlink, nattr, nstack;
};

static void dict_init(struct dict *x, const Ember__Otlp__ProfilesDictionary *d)
{
	static const Ember__Otlp__ProfilesDictionary empty = EMBER__OTLP__PROFILES_DICTIONARY__INIT;
	x->d = d ? d : &empty;
	x->nstr = x->d->n_string_table;
	x->nmap = x->d->n_mapping_table;
	x->nloc = x->d->n_location_table;
	x->nfun = x->d->n_function_table;
	x->nlink = x->d->n_link_table;
	x->nattr = x->d->n_attribute_table;
	x->nstack = x->d->n_stack_table;
}

/* An index into a table of n entries: 0 is "unset" and allowed even when
 * the table is empty. */
static bool idx_ok(int32_t i, size_t n)
{
	return i == 0 || (i > 0 && (size_t)i < n);
}

static bool indices_ok(const int32_t *v, size_t n, size_t table)
{
	for (size_t i = 0; i < n; i++)
		if (!idx_ok(v[i], table))
			return false;
	return true;
}

static bool value_ok(const struct dict *x, const Ember__Otlp__AnyValue *v)
{
	return !v || v->value_case != EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX ||
	       idx_ok(v->string_value_strindex, x->nstr);
}

static bool keyvalues_ok(const struct dict *x, Ember__Otlp__KeyValue **kv, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!idx_ok(kv[i]->key_strindex, x->nstr) || !value_ok(x, kv[i]->value))
			return false;
	return true;
}

static int check(const Ember__Otlp__ExportProfilesServiceRequest *req, const struct dict *x,
		 struct buf *err)
{
	const Ember__Otlp__ProfilesDictionary *d = x->d;
	if (x->nstr > MAX_TABLE || x->nmap > MAX_TABLE || x->nloc > MAX_TABLE ||
	    x->nfun > MAX_TABLE || x->nattr > MAX_TABLE || x->nstack > MAX_TABLE) {
		buf_puts(err, "dictionary: a table has more than 16M entries");
		return -1;
	}
	if (x->nstr && d->string_table[0][0] != '\0') {
		buf_puts(err, "dictionary.string_table[0]: must be the empty string");
		return -1;
	}
	for (size_t i = 0; i < x->nstr; i++)
		if (strlen(d->string_table[i]) > BATCH_MAX_STRING) {
			buf_printf(err, "dictionary.string_table[%zu]: longer than %u bytes", i,
				   BATCH_MAX_STRING);
			return -1;
		}
	for (size_t i = 0; i < x->nmap; i++) {
		const Ember__Otlp__Mapping *m = d->mapping_table[i];
		if (!idx_ok(m->filename_strindex, x->nstr) ||
		    !indices_ok(m->attribute_indices, m->n_attribute_indices, x->nattr)) {
			buf_printf(err, "dictionary.mapping_table[%zu]: an index out of range", i);
			return -1;
		}
	}
	for (size_t i = 0; i < x->nfun; i++) {
		const Ember__Otlp__Function *f = d->function_table[i];
		if (!idx_ok(f->name_strindex, x->nstr) || !idx_ok(f->system_name_strindex, x->nstr) ||
		    !idx_ok(f->filename_strindex, x->nstr)) {
			buf_printf(err, "dictionary.function_table[%zu]: a string index out of range", i);
			return -1;
		}
	}
	for (size_t i = 0; i < x->nloc; i++) {
		const Ember__Otlp__Location *l = d->location_table[i];
		if (!idx_ok(l->mapping_index, x->nmap) ||
		    !indices_ok(l->attribute_indices, l->n_attribute_indices, x->nattr) ||
		    l->n_lines > BATCH_MAX_STACK_DEPTH) {
			buf_printf(err, "dictionary.location_table[%zu]: an index out of range", i);
			return -1;
		}
		for (size_t j = 0; j < l->n_lines; j++)
			if (!idx_ok(l->lines[j]->function_index, x->nfun)) {
				buf_printf(err, "dictionary.location_table[%zu].lines[%zu]: function_index out of range", i, j);
				return -1;
			}
	}
	for (size_t i = 0; i < x->nattr; i++) {
		const Ember__Otlp__KeyValueAndUnit *a = d->attribute_table[i];
		if (!idx_ok(a->key_strindex, x->nstr) || !idx_ok(a->unit_strindex, x->nstr) ||
		    !value_ok(x, a->value)) {
			buf_printf(err, "dictionary.attribute_table[%zu]: a string index out of range", i);
			return -1;
		}
	}
	for (size_t i = 0; i < x->nstack; i++) {
		const Ember__Otlp__Stack *s = d->stack_table[i];
		if (!indices_ok(s->location_indices, s->n_location_indices, x->nloc)) {
			buf_printf(err, "dictionary.stack_table[%zu]: location index out of range", i);
			return -1;
		}
		/* Frames once inlined lines are expanded (at most 255 a location). */
		size_t depth = 0;
		for (size_t j = 0; j < s->n_location_indices && depth <= BATCH_MAX_STACK_DEPTH; j++) {
			int32_t li = s->location_indices[j];
			size_t nl = li > 0 ? d->location_table[li]->n_lines : 0;
			depth += nl ? MIN(nl, 255u) : 1;
		}
		if (depth > BATCH_MAX_STACK_DEPTH) {
			buf_printf(err, "dictionary.stack_table[%zu]: deeper than %u frames", i,
				   BATCH_MAX_STACK_DEPTH);
			return -1;
		}
	}
	uint64_t total = 0;
	for (size_t r = 0; r < req->n_resource_profiles; r++) {
		const Ember__Otlp__ResourceProfiles *rp = req->resource_profiles[r];
		if (rp->resource && !keyvalues_ok(x, rp->resource->attributes, rp->resource->n_attributes)) {
			buf_printf(err, "resource_profiles[%zu].resource: an attribute index out of range", r);
			return -1;
		}
		for (size_t s = 0; s < rp->n_scope_profiles; s++) {
			const Ember__Otlp__ScopeProfiles *sp = rp->scope_profiles[s];
			if (sp->scope && !keyvalues_ok(x, sp->scope->attributes, sp->scope->n_attributes)) {
				buf_printf(err, "resource_profiles[%zu].scope_profiles[%zu].scope: an attribute index out of range", r, s);
				return -1;
			}
			for (size_t p = 0; p < sp->n_profiles; p++) {
				const Ember__Otlp__Profile *pr = sp->profiles[p];
				const Ember__Otlp__ValueType *vt[2] = { pr->sample_type, pr->period_type };
				for (int k = 0; k < 2; k++)
					if (vt[k] && (!idx_ok(vt[k]->type_strindex, x->nstr) ||
						      !idx_ok(vt[k]->unit_strindex, x->nstr))) {
						buf_printf(err, "resource_profiles[%zu]...profiles[%zu]: a value type index out of range", r, p);
						return -1;
					}
				if (!indices_ok(pr->attribute_indices, pr->n_attribute_indices, x->nattr)) {
					buf_printf(err, "resource_profiles[%zu]...profiles[%zu].attribute_indices: out of range", r, p);
					return -1;
				}
				total += pr->n_samples;
				for (size_t i = 0; i < pr->n_samples; i++) {
					const Ember__Otlp__Sample *sm = pr->samples[i];
					if (!idx_ok(sm->stack_index, x->nstack) ||
					    !idx_ok(sm->link_index, x->nlink) ||
					    !indices_ok(sm->attribute_indices, sm->n_attribute_indices, x->nattr)) {
						buf_printf(err, "resource_profiles[%zu]...profiles[%zu].samples[%zu]: an index out of range", r, p, i);
						return -1;
					}
					if (sm->n_values && sm->n_timestamps_unix_nano &&
					    sm->n_values != sm->n_timestamps_unix_nano) {
						buf_printf(err, "resource_profiles[%zu]...profiles[%zu].samples[%zu]: values and timestamps_unix_nano differ in length", r, p, i);
						return -1;
					}
				}
			}
		}
	}
	if (total > MAX_TABLE) {
		buf_puts(err, "more than 16M samples in one request");
		return -1;
	}
	return 0;
}

/* --- converting ------------------------------------------------------------------ */

/* A growing string table for one batch: the dictionary's strings first
 * (same indexes), then what the conversion adds. */
struct strs {
	char **v;
	size_t n, cap;
	struct buf extra; /* owned copies of added strings, NUL-separated */
	size_t *extra_off;
	size_t nextra, capextra;
};

static uint32_t str_add(struct strs *s, const char *p, size_t len)
{
	if (len > BATCH_MAX_STRING)
		len = BATCH_MAX_STRING;
	xgrow((void **)&s->extra_off, &s->capextra, s->nextra + 1, sizeof(size_t));
	s->extra_off[s->nextra++] = s->extra.len;
	buf_append(&s->extra, p, len);
	buf_putc(&s->extra, '\0');
	xgrow((void **)&s->v, &s->cap, s->n + 1, sizeof(char *));
	s->v[s->n] = NULL; /* fixed up in str_finish (extra may move) */
	return (uint32_t)s->n++;
}

struct conv {
	const struct dict *x;
	struct strs strs;
	size_t base_strings; /* how many of strs are the dictionary's */
	/* per dictionary entry, the batch index + 1 (0 = not yet) */
	uint32_t *map_file;   /* mapping -> file */
	uint32_t *loc_first;  /* location -> first frame + 1 */
	uint8_t *loc_count;   /* frames of the location (lines, >= 1) */
	uint32_t *stack_map;  /* stack -> batch stack + 1 */
	uint32_t *attr_key, *attr_val; /* attribute -> string ids; key UINT32_MAX = none */
	uint32_t binary_kernel;
	/* the batch */
	Ember__Ingest__V1__File **files;
	size_t nfiles, capfiles;
	Ember__Ingest__V1__Frame **frames;
	size_t nframes, capframes;
	Ember__Ingest__V1__Stack **stacks;
	size_t nstacks, capstacks;
	Ember__Ingest__V1__Resource **res;
	size_t nres, capres;
	struct hmap res_index;
	Ember__Ingest__V1__Sample **samples;
	size_t nsamples, capsamples;
	void **allocs;
	size_t nallocs, capallocs;
};

static void *alloc(struct conv *c, size_t n)
{
	void *p = xcalloc(1, n ? n : 1);
	xgrow((void **)&c->allocs, &c->capallocs, c->nallocs + 1, sizeof(void *));
	c->allocs[c->nallocs++] = p;
	return p;
}

static const char *dstr(const struct conv *c, int32_t i)
{
	return i > 0 && (size_t)i < c->x->nstr ? c->x->d->string_table[i] : "";
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* The string form of an attribute value, or NULL to leave it out. */
static const char *value_str(const struct conv *c, const Ember__Otlp__AnyValue *v, char *tmp,
			     size_t n)
{
	if (!v)
		return NULL;
	switch (v->value_case) {
	case EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE:
		return v->string_value;
	case EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX:
		return dstr(c, v->string_value_strindex);
	case EMBER__OTLP__ANY_VALUE__VALUE_INT_VALUE:
		snprintf(tmp, n, "%" PRId64, v->int_value);
		return tmp;
	case EMBER__OTLP__ANY_VALUE__VALUE_BOOL_VALUE:
		return v->bool_value ? "true" : "false";
	case EMBER__OTLP__ANY_VALUE__VALUE_DOUBLE_VALUE:
		snprintf(tmp, n, "%.17g", v->double_value);
		return tmp;
	default:
		return NULL;
	}
}

/* Attribute pairs as batch string ids; a later key replaces an earlier. */
struct pairs {
	uint32_t kv[2 * MAX_PAIRS];
	const char *keys[MAX_PAIRS];
	size_t n;
};

static void pairs_copy(struct pairs *dst, const struct pairs *src)
{
	memcpy(dst->kv, src->kv, 2 * src->n * sizeof(uint32_t));
	memcpy(dst->keys, src->keys, src->n * sizeof(char *));
	dst->n = src->n;
}

static void pair_put(struct pairs *p, const char *key, uint32_t kid, uint32_t vid)
{
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->keys[i], key) == 0) {
			p->kv[2 * i + 1] = vid;
			return;
		}
	if (p->n == MAX_PAIRS)
		return; /* beyond what a sample may carry: left out */
	p->keys[p->n] = key;
	p->kv[2 * p->n] = kid;
	p->kv[2 * p->n + 1] = vid;
	p->n++;
}

static void pairs_from_keyvalues(struct conv *c, struct pairs *p, Ember__Otlp__KeyValue **kv,
				 size_t n)
{
	char tmp[64];
	for (size_t i = 0; i < n; i++) {
		const char *key = kv[i]->key_strindex ? dstr(c, kv[i]->key_strindex) : kv[i]->key;
		const char *val = value_str(c, kv[i]->value, tmp, sizeof(tmp));
		if (!key || !*key || !val)
			continue;
		pair_put(p, key, str_add(&c->strs, key, strlen(key)),
			 str_add(&c->strs, val, strlen(val)));
	}
}

/* Attribute table entry ai as (key, value) string ids, computed once per
 * batch; false when it has no string form. */
static bool attr_ids(struct conv *c, int32_t ai, uint32_t *kid, uint32_t *vid)
{
	if (c->attr_key[ai] == UINT32_MAX)
		return false;
	if (!c->attr_key[ai]) {
		const Ember__Otlp__KeyValueAndUnit *a = c->x->d->attribute_table[ai];
		const Ember__Otlp__AnyValue *v = a->value;
		char tmp[64];
		const char *val = value_str(c, v, tmp, sizeof(tmp));
		if (a->key_strindex <= 0 || !val) {
			c->attr_key[ai] = UINT32_MAX;
			return false;
		}
		c->attr_key[ai] = (uint32_t)a->key_strindex;
		c->attr_val[ai] = v->value_case == EMBER__OTLP__ANY_VALUE__VALUE_STRING_VALUE_STRINDEX
					  ? (uint32_t)v->string_value_strindex
					  : str_add(&c->strs, val, strlen(val));
	}
	*kid = c->attr_key[ai];
	*vid = c->attr_val[ai];
	return true;
}

static void pairs_from_indices(struct conv *c, struct pairs *p, const int32_t *idx, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t kid, vid;
		if (idx[i] > 0 && attr_ids(c, idx[i], &kid, &vid))
			pair_put(p, c->x->d->string_table[kid], kid, vid);
	}
}

/* The value of attribute key among idx, or NULL. */
static const char *attr_of(const struct conv *c, const int32_t *idx, size_t n, const char *key)
{
	char tmp[64];
	for (size_t i = 0; i < n; i++) {
		if (idx[i] <= 0)
			continue;
		const Ember__Otlp__KeyValueAndUnit *a = c->x->d->attribute_table[idx[i]];
		if (strcmp(dstr(c, a->key_strindex), key) == 0) {
			const char *v = value_str(c, a->value, tmp, sizeof(tmp));
			return v == tmp ? NULL : v; /* only string values */
		}
	}
	return NULL;
}

static Ember__Ingest__V1__FrameType frame_type(const char *t)
{
	static const struct {
		const char *name;
		Ember__Ingest__V1__FrameType type;
	} types[] = {
		{ "native", EMBER__INGEST__V1__FRAME_TYPE__NATIVE },
		{ "kernel", EMBER__INGEST__V1__FRAME_TYPE__KERNEL },
		{ "cpython", EMBER__INGEST__V1__FRAME_TYPE__CPYTHON },
		{ "go", EMBER__INGEST__V1__FRAME_TYPE__GO },
		{ "jvm", EMBER__INGEST__V1__FRAME_TYPE__JVM },
		{ "v8js", EMBER__INGEST__V1__FRAME_TYPE__V8 },
		{ "ruby", EMBER__INGEST__V1__FRAME_TYPE__RUBY },
		{ "php", EMBER__INGEST__V1__FRAME_TYPE__PHP },
		{ "perl", EMBER__INGEST__V1__FRAME_TYPE__PERL },
		{ "dotnet", EMBER__INGEST__V1__FRAME_TYPE__DOTNET },
		{ "cuda_launch", EMBER__INGEST__V1__FRAME_TYPE__CUDA_LAUNCH },
		{ "cuda_kernel", EMBER__INGEST__V1__FRAME_TYPE__CUDA_KERNEL },
		{ "cuda_memcpy", EMBER__INGEST__V1__FRAME_TYPE__CUDA_MEMCPY },
		{ "cuda_memset", EMBER__INGEST__V1__FRAME_TYPE__CUDA_MEMSET },
		{ "cuda_sync", EMBER__INGEST__V1__FRAME_TYPE__CUDA_SYNC },
		{ "nvtx", EMBER__INGEST__V1__FRAME_TYPE__NVTX },
		{ "error", EMBER__INGEST__V1__FRAME_TYPE__ERROR },
	};
	for (size_t i = 0; t && i < ARRAY_SIZE(types); i++)
		if (strcmp(t, types[i].name) == 0)
			return types[i].type;
	return EMBER__INGEST__V1__FRAME_TYPE__NATIVE;
}

/* The batch file (1-based) of a mapping that names an OpenTelemetry file
 * id, else 0. */
static uint32_t mapping_file(struct conv *c, int32_t mi)
{
	if (mi <= 0)
		return 0;
	if (c->map_file[mi])
		return c->map_file[mi] == UINT32_MAX ? 0 : c->map_file[mi];
	const Ember__Otlp__Mapping *m = c->x->d->mapping_table[mi];
	const char *hex = attr_of(c, m->attribute_indices, m->n_attribute_indices,
				  "process.executable.build_id.htlhash");
	struct file_id id;
	if (!hex || fileid_parse_hex(hex, &id) < 0) {
		c->map_file[mi] = UINT32_MAX;
		return 0;
	}
	Ember__Ingest__V1__File *f = alloc(c, sizeof(*f));
	ember__ingest__v1__file__init(f);
	uint8_t *idb = alloc(c, FILE_ID_LEN);
	memcpy(idb, id.b, FILE_ID_LEN);
	f->file_id.data = idb;
	f->file_id.len = FILE_ID_LEN;
	const char *name = base_name(dstr(c, m->filename_strindex));
	f->name = str_add(&c->strs, name, strlen(name));
	const char *gnu = attr_of(c, m->attribute_indices, m->n_attribute_indices,
				  "process.executable.build_id.gnu");
	size_t gl = gnu ? strlen(gnu) : 0;
	if (gl >= 2 && gl <= 128 && gl % 2 == 0) {
		uint8_t *bid = alloc(c, gl / 2);
		if (hex_decode(gnu, gl, bid, gl / 2) == 0) {
			f->build_id.data = bid;
			f->build_id.len = gl / 2;
		}
	}
	xgrow((void **)&c->files, &c->capfiles, c->nfiles + 1, sizeof(*c->files));
	c->files[c->nfiles++] = f;
	return c->map_file[mi] = (uint32_t)c->nfiles;
}

static uint32_t add_frame(struct conv *c, Ember__Ingest__V1__FrameType type, uint32_t file,
			  uint64_t address, uint32_t name, uint32_t binary)
{
	Ember__Ingest__V1__Frame *f = alloc(c, sizeof(*f));
	ember__ingest__v1__frame__init(f);
	f->type = type;
	f->file = file;
	f->address = address;
	f->name = name;
	f->binary = binary;
	xgrow((void **)&c->frames, &c->capframes, c->nframes + 1, sizeof(*c->frames));
	c->frames[c->nframes] = f;
	return (uint32_t)c->nframes++;
}

/* The frames of location li (caller first), added on first use. */
static void location_frames(struct conv *c, int32_t li)
{
	if (c->loc_first[li])
		return;
	const Ember__Otlp__Location *l = c->x->d->location_table[li];
	const Ember__Otlp__Mapping *m =
		l->mapping_index > 0 ? c->x->d->mapping_table[l->mapping_index] : NULL;
	const char *mname = m ? base_name(dstr(c, m->filename_strindex)) : "";
	Ember__Ingest__V1__FrameType type =
		frame_type(attr_of(c, l->attribute_indices, l->n_attribute_indices, "profile.frame.type"));
	if (type == EMBER__INGEST__V1__FRAME_TYPE__NATIVE &&
	    (strcmp(mname, "[kernel.kallsyms]") == 0 || strcmp(mname, "vmlinux") == 0))
		type = EMBER__INGEST__V1__FRAME_TYPE__KERNEL;
	uint32_t binary = *mname ? str_add(&c->strs, mname, strlen(mname)) : 0;
	uint32_t first = (uint32_t)c->nframes;
	size_t named = 0;
	/* Lines: inlined first, the caller last; ember wants the caller first. */
	for (size_t j = l->n_lines; j-- > 0;) {
		const Ember__Otlp__Line *ln = l->lines[j];
		if (ln->function_index <= 0)
			continue;
		const Ember__Otlp__Function *fn = c->x->d->function_table[ln->function_index];
		int32_t ni = fn->name_strindex ? fn->name_strindex : fn->system_name_strindex;
		if (ni <= 0)
			continue;
		uint32_t b = binary;
		uint64_t line = 0;
		if (type == EMBER__INGEST__V1__FRAME_TYPE__CPYTHON) {
			/* Interpreted frames: the source file as the binary,
			 * the line as the address (docs/protocol.md). */
			const char *src = fn->filename_strindex > 0 ? dstr(c, fn->filename_strindex) : "";
			b = *src ? str_add(&c->strs, src, strlen(src)) : 0;
			line = ln->line > 0 ? (uint64_t)ln->line : 0;
		} else if (!b && fn->filename_strindex > 0) {
			const char *fname = base_name(dstr(c, fn->filename_strindex));
			b = str_add(&c->strs, fname, strlen(fname));
		}
		add_frame(c, type, 0, line, (uint32_t)ni, b);
		named++;
	}
	if (!named) {
		/* Not symbolized: an address, in the file when the mapping
		 * names one (the server symbolizes it), else shown as
		 * binary+0xoffset. */
		uint64_t off = l->address;
		if (m && l->address >= m->memory_start && l->address < m->memory_limit)
			off = l->address - m->memory_start + m->file_offset;
		uint32_t file = type == EMBER__INGEST__V1__FRAME_TYPE__KERNEL ? 0 :
										 mapping_file(c, l->mapping_index);
		add_frame(c, type, file, off, 0, file ? 0 : binary);
	}
	c->loc_first[li] = first + 1;
	c->loc_count[li] = (uint8_t)MIN(c->nframes - first, 255u);
	if (c->nframes - first > 255) {
		/* More than 255 inlined levels: keep the caller-most 255. */
		c->nframes = first + 255;
	}
}

/* The batch stack of dictionary stack si, or UINT32_MAX when too deep. */
static uint32_t stack_of(struct conv *c, int32_t si, struct buf *err)
{
	if (si > 0 && c->stack_map[si])
		return c->stack_map[si] - 1;
	const Ember__Otlp__Stack *s = si > 0 ? c->x->d->stack_table[si] : NULL;
	size_t nl = s ? s->n_location_indices : 0;
	uint32_t *ids = NULL;
	size_t n = 0, cap = 0;
	/* Locations are leaf first: walk them backwards. */
	for (size_t k = nl; k-- > 0;) {
		int32_t li = s->location_indices[k];
		if (li <= 0)
			continue;
		location_frames(c, li);
		uint32_t first = c->loc_first[li] - 1;
		if (n + c->loc_count[li] > BATCH_MAX_STACK_DEPTH) {
			free(ids);
			buf_printf(err, "dictionary.stack_table[%d]: deeper than %u frames", si,
				   BATCH_MAX_STACK_DEPTH);
			return UINT32_MAX;
		}
		xgrow((void **)&ids, &cap, n + c->loc_count[li], sizeof(uint32_t));
		for (uint32_t j = 0; j < c->loc_count[li]; j++)
			ids[n++] = first + j;
	}
	Ember__Ingest__V1__Stack *st = alloc(c, sizeof(*st));
	ember__ingest__v1__stack__init(st);
	st->n_frames = n;
	st->frames = alloc(c, n * sizeof(uint32_t));
	if (n)
		memcpy(st->frames, ids, n * sizeof(uint32_t));
	free(ids);
	xgrow((void **)&c->stacks, &c->capstacks, c->nstacks + 1, sizeof(*c->stacks));
	c->stacks[c->nstacks] = st;
	if (si > 0)
		c->stack_map[si] = (uint32_t)c->nstacks + 1;
	return (uint32_t)c->nstacks++;
}

static bool eq_res(const void *ctx, uint32_t idx)
{
	const struct conv *c = ((const struct hmap_span_key *)ctx)->owner;
	return hmap_span_is(ctx, c->res[idx]->attributes, c->res[idx]->n_attributes, sizeof(uint32_t));
}

static void fix_strings(struct conv *c)
{
	for (size_t i = 0; i < c->strs.nextra; i++)
		c->strs.v[c->base_strings + i] = c->strs.extra.data + c->strs.extra_off[i];
}

/* Resources are told apart by their string ids (the store interns them by
 * content, so a rare duplicate by content costs nothing). */
static uint32_t resource_of(struct conv *c, const struct pairs *p)
{
	uint64_t h = hash_bytes(p->kv, 2 * p->n * sizeof(uint32_t));
	struct hmap_span_key k = { c, p->kv, 2 * p->n };
	uint32_t idx;
	if (hmap_find(&c->res_index, h, eq_res, &k, &idx))
		return idx;
	Ember__Ingest__V1__Resource *r = alloc(c, sizeof(*r));
	ember__ingest__v1__resource__init(r);
	r->n_attributes = 2 * p->n;
	r->attributes = alloc(c, 2 * p->n * sizeof(uint32_t));
	memcpy(r->attributes, p->kv, 2 * p->n * sizeof(uint32_t));
	xgrow((void **)&c->res, &c->capres, c->nres + 1, sizeof(*c->res));
	c->res[c->nres] = r;
	hmap_insert(&c->res_index, h, (uint32_t)c->nres);
	return (uint32_t)c->nres++;
}

/* The event kind of a sample type, or 0 when ember has none for it. */
static Ember__Ingest__V1__EventKind kind_of(const char *type, const char *unit, bool *per_ns)
{
	*per_ns = strcmp(unit, "nanoseconds") == 0;
	if (!strcmp(type, "samples") || !strcmp(type, "cpu") || !strcmp(type, "process_cpu") ||
	    !strcmp(type, "on_cpu"))
		return EMBER__INGEST__V1__EVENT_KIND__ON_CPU;
	if (!strcmp(type, "off_cpu"))
		return *per_ns ? EMBER__INGEST__V1__EVENT_KIND__OFF_CPU : 0;
	if (!strcmp(type, "cuda") || !strcmp(type, "gpu_kernel_time") || !strcmp(type, "gpu_time"))
		return *per_ns ? EMBER__INGEST__V1__EVENT_KIND__CUDA : 0;
	if (!strcmp(type, "alloc") || !strcmp(type, "alloc_space"))
		return strcmp(unit, "bytes") == 0 ? EMBER__INGEST__V1__EVENT_KIND__ALLOC : 0;
	return 0;
}

static void conv_reset(struct conv *c)
{
	for (size_t i = 0; i < c->nallocs; i++)
		free(c->allocs[i]);
	c->nallocs = 0;
	c->nfiles = c->nframes = c->nstacks = c->nres = c->nsamples = 0;
	hmap_clear(&c->res_index);
	c->strs.n = c->base_strings;
	c->strs.nextra = 0;
	buf_reset(&c->strs.extra);
	memset(c->map_file, 0, (c->x->nmap + 1) * sizeof(uint32_t));
	memset(c->loc_first, 0, (c->x->nloc + 1) * sizeof(uint32_t));
	memset(c->stack_map, 0, (c->x->nstack + 1) * sizeof(uint32_t));
	memset(c->attr_key, 0, (c->x->nattr + 1) * sizeof(uint32_t));
}

static void conv_free(struct conv *c)
{
	conv_reset(c);
	free_all(c->allocs, c->strs.v);
	buf_free(&c->strs.extra);
	free_all(c->strs.extra_off, c->map_file, c->loc_first, c->loc_count, c->stack_map,
	         c->attr_key, c->attr_val, c->files, c->frames, c->stacks, c->res);
	hmap_free(&c->res_index);
	free(c->samples);
}

static void note(struct otlp_result *res, const char *why)
{
	if (res->message.len < 1024) {
		if (res->message.len)
			buf_puts(&res->message, "; ");
		buf_puts(&res->message, why);
	}
}

static void note_rejected(struct otlp_result *res, const char *why)
{
	res->rejected_profiles++;
	note(res, why);
}

/* What was changed of the values, for partial_success's message. */
static void note_values(struct otlp_result *res)
{
	char why[256];
	if (res->negative_values) {
		snprintf(why, sizeof(why),
			 "%llu negative sample values left out (%llu samples with no other value dropped)",
			 (unsigned long long)res->negative_values,
			 (unsigned long long)res->dropped_samples);
		note(res, why);
	}
	if (res->clamped_samples) {
		snprintf(why, sizeof(why),
			 "%llu sample values above 2^48 (%llu) stored as 2^48",
			 (unsigned long long)res->clamped_samples, (unsigned long long)OTLP_MAX_VALUE);
		note(res, why);
	}
}

/* Converts one profile into the batch in c; returns 0, 1 (skipped) or -1. */
static int convert_profile(struct conv *c, const struct pairs *outer,
			   const Ember__Otlp__Profile *pr, const char *project, int64_t now_ms,
			   Ember__Ingest__V1__Batch *b, struct otlp_result *res, struct buf *err)
{
	const char *type = pr->sample_type ? dstr(c, pr->sample_type->type_strindex) : "";
	const char *unit = pr->sample_type ? dstr(c, pr->sample_type->unit_strindex) : "";
	bool per_ns;
	Ember__Ingest__V1__EventKind kind = kind_of(type, unit, &per_ns);
	if (!kind) {
		char why[160];
		snprintf(why, sizeof(why), "sample type %.40s/%.40s is not one ember stores", type,
			 unit);
		note_rejected(res, why);
		return 1;
	}
	const char *punit = pr->period_type ? dstr(c, pr->period_type->unit_strindex) : "";
	uint32_t hz = 19;
	if (pr->period > 0 && strcmp(punit, "nanoseconds") == 0)
		hz = (uint32_t)MAX(1, MIN(100000, (1000000000 + pr->period / 2) / pr->period));
	int64_t start = pr->time_unix_nano ? (int64_t)(pr->time_unix_nano / 1000000) : now_ms;
	int64_t dur = (int64_t)MIN(pr->duration_nano / 1000000, (uint64_t)86400000);
	struct pairs prof, p;
	pairs_copy(&prof, outer);
	pairs_from_indices(c, &prof, pr->attribute_indices, pr->n_attribute_indices);
	uint32_t prof_res = UINT32_MAX;
	/* One allocation for the profile's samples, not one per sample. */
	Ember__Ingest__V1__Sample *rows = alloc(c, pr->n_samples * sizeof(*rows));
	xgrow((void **)&c->samples, &c->capsamples, pr->n_samples + 1, sizeof(*c->samples));
	for (size_t i = 0; i < pr->n_samples; i++) {
		const Ember__Otlp__Sample *sm = pr->samples[i];
		uint64_t v = 0;
		bool negative = false;
		for (size_t j = 0; j < sm->n_values; j++) {
			if (sm->values[j] < 0) {
				res->negative_values++;
				negative = true;
			} else if (sm->values[j] > 0) {
				uint64_t x = (uint64_t)sm->values[j];
				v = v + x < v ? UINT64_MAX : v + x;
			}
		}
		if (!sm->n_values)
			v = sm->n_timestamps_unix_nano;
		if (kind == EMBER__INGEST__V1__EVENT_KIND__ON_CPU && per_ns && pr->period > 0)
			v = v / (uint64_t)pr->period +
			    (v % (uint64_t)pr->period >= ((uint64_t)pr->period + 1) / 2); /* ns -> samples */
		if (v == 0) {
			if (negative)
				res->dropped_samples++;
			continue;
		}
		if (v > OTLP_MAX_VALUE) {
			v = OTLP_MAX_VALUE;
			res->clamped_samples++;
		}
		uint32_t st = stack_of(c, sm->stack_index, err);
		if (st == UINT32_MAX)
			return -1;
		uint32_t rs;
		if (sm->n_attribute_indices) {
			pairs_copy(&p, &prof);
			pairs_from_indices(c, &p, sm->attribute_indices, sm->n_attribute_indices);
			rs = resource_of(c, &p);
		} else {
			if (prof_res == UINT32_MAX)
				prof_res = resource_of(c, &prof);
			rs = prof_res;
		}
		Ember__Ingest__V1__Sample *s = &rows[c->nsamples];
		ember__ingest__v1__sample__init(s);
		s->stack = st;
		s->resource = rs;
		s->kind = kind;
		s->value = v;
		c->samples[c->nsamples++] = s;
	}
	fix_strings(c);
	ember__ingest__v1__batch__init(b);
	b->agent_instance = "";
	b->project = (char *)project;
	b->start_unix_ms = start;
	b->end_unix_ms = start + dur;
	b->sample_rate_hz = hz;
	b->n_strings = c->strs.n;
	b->strings = c->strs.v;
	b->n_files = c->nfiles;
	b->files = c->files;
	b->n_frames = c->nframes;
	b->frames = c->frames;
	b->n_stacks = c->nstacks;
	b->stacks = c->stacks;
	b->n_resources = c->nres;
	b->resources = c->res;
	b->n_samples = c->nsamples;
	b->samples = c->samples;
	return 0;
}

int otlp_convert(const Ember__Otlp__ExportProfilesServiceRequest *req, const char *project,
		 int64_t now_ms, otlp_emit_fn emit, void *ctx, struct otlp_result *res,
		 struct buf *err)
{
	struct dict x;
	dict_init(&x, req->dictionary);
	if (check(req, &x, err) < 0)
		return -1;
	struct conv c = { .x = &x };
	/* The batch's strings start as the dictionary's (index 0 = ""). */
	c.base_strings = x.nstr ? x.nstr : 1;
	xgrow((void **)&c.strs.v, &c.strs.cap, c.base_strings + 1, sizeof(char *));
	c.strs.v[0] = "";
	for (size_t i = 1; i < x.nstr; i++)
		c.strs.v[i] = x.d->string_table[i];
	c.strs.n = c.base_strings;
	c.map_file = xcalloc(x.nmap + 1, sizeof(uint32_t));
	c.loc_first = xcalloc(x.nloc + 1, sizeof(uint32_t));
	c.loc_count = xcalloc(x.nloc + 1, 1);
	c.stack_map = xcalloc(x.nstack + 1, sizeof(uint32_t));
	c.attr_key = xcalloc(x.nattr + 1, sizeof(uint32_t));
	c.attr_val = xcalloc(x.nattr + 1, sizeof(uint32_t));
	int rc = 0;
	for (size_t r = 0; r < req->n_resource_profiles && rc == 0; r++) {
		const Ember__Otlp__ResourceProfiles *rp = req->resource_profiles[r];
		for (size_t s = 0; s < rp->n_scope_profiles && rc == 0; s++) {
			const Ember__Otlp__ScopeProfiles *sp = rp->scope_profiles[s];
			for (size_t p = 0; p < sp->n_profiles && rc == 0; p++) {
				conv_reset(&c);
				struct pairs outer = { .n = 0 };
				if (rp->resource)
					pairs_from_keyvalues(&c, &outer, rp->resource->attributes,
							     rp->resource->n_attributes);
				if (sp->scope)
					pairs_from_keyvalues(&c, &outer, sp->scope->attributes,
							     sp->scope->n_attributes);
				Ember__Ingest__V1__Batch b;
				int cr = convert_profile(&c, &outer, sp->profiles[p], project, now_ms, &b,
							 res, err);
				if (cr < 0) {
					rc = -1;
				} else if (cr == 0 && b.n_samples) {
					if (batch_validate(&b, err) < 0) {
						rc = -1;
					} else {
						rc = emit(ctx, &b);
						if (rc == 0) {
							res->batches++;
							for (size_t i = 0; i < b.n_samples; i++) {
								const Ember__Ingest__V1__Sample *sm = b.samples[i];
								res->samples += sm->value;
								if ((unsigned)sm->kind < 5)
									res->kind_values[sm->kind] += sm->value;
							}
						}
					}
				}
			}
		}
	}
	conv_free(&c);
	if (rc == 0)
		note_values(res);
	return rc;
}
