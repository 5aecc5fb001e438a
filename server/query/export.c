/* export.c - see export.h. */
#include "export.h"

#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "hmap.h"
#include "jsonw.h"
#include "pprof_profile.pb-c.h"
#include "server/store/store.h"
#include "strtab.h"
#include "util.h"

static const struct {
	const char *name, *content_type, *extension;
} formats[] = {
	[FG_FORMAT_JSON] = { "json", "application/json", "json" },
	[FG_FORMAT_PPROF] = { "pprof", "application/vnd.google.protobuf+gzip", "pb.gz" },
	[FG_FORMAT_FOLDED] = { "folded", "text/plain; charset=utf-8", "folded.txt" },
	[FG_FORMAT_SPEEDSCOPE] = { "speedscope", "application/json", "speedscope.json" },
};

int fg_format_parse(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(formats); i++)
		if (strcmp(name, formats[i].name) == 0)
			return (int)i;
	return -1;
}

const char *fg_format_name(enum fg_format f)
{
	return formats[f].name;
}

const char *fg_format_content_type(enum fg_format f)
{
	return formats[f].content_type;
}

const char *fg_format_extension(enum fg_format f)
{
	return formats[f].extension;
}

void export_folded_frame(struct buf *out, const char *name)
{
	static const char hex[] = "0123456789abcdef";
	/* \\, ; and line breaks escaped by name; other controls in hex. */
	static const char named[] = "\\;\n\r", as[] = "\\;nr";
	for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
		const char *n = strchr(named, *s);
		if (n) {
			char e[2] = { '\\', as[n - named] };
			buf_append(out, e, sizeof(e));
		} else if (*s < 0x20 || *s == 0x7f) {
			char e[4] = { '\\', 'x', hex[*s >> 4], hex[*s & 15] };
			buf_append(out, e, sizeof(e));
		} else {
			buf_putc(out, (char)*s);
		}
	}
}

/* --- walking the tree ------------------------------------------------------ */

struct loc {
	uint32_t fn;      /* function index */
	uint32_t line;
	uint32_t mapping; /* mapping id, 0 none */
};

struct sample {
	size_t first, n; /* in ex.locids */
	uint64_t value;
};

struct ex {
	enum fg_format f;
	const struct display *d;
	const struct export_info *info;
	size_t depth; /* nodes entered and not yet left, the root included */
	size_t max_bytes, start; /* the size bound; out->len when the export began */
	bool too_big;            /* past max_bytes: nothing more is written */
	uint32_t *ids; /* per level below the root: location id (pprof) or frame index (speedscope) */
	size_t capids;
	size_t *plen; /* folded: path length before each level */
	size_t capplen;
	struct buf path;
	struct buf *out;
	/* key -> frame (speedscope) or function (pprof) index + 1; slot
	 * nkeys for OTREE_OTHER */
	uint32_t *frame_of;
	size_t nkeys, nframes;
	/* speedscope */
	struct buf frames, samples, weights; /* each a JSON array, written by fw, sw, ww */
	struct jsonw fw, sw, ww;
	/* pprof */
	struct strtab strs;
	struct fninfo { uint32_t name, system, file; } *fns; /* per function: string ids */
	size_t capfn;
	struct loc *locs;
	size_t nlocs, caplocs;
	struct hmap loc_index;
	uint32_t *mapping_of; /* binary string id -> mapping id (0 none yet) */
	size_t capmapping_of;
	uint32_t *mapping_file; /* mapping id - 1 -> its file name's string id */
	size_t nmappings, capmappings;
	struct sample *smp;
	size_t nsmp, capsmp;
	uint64_t *locids;
	size_t nlocids, caplocids;
};

/* What the formats name a frame by. */
struct frame_names {
	const char *name, *type, *binary, *file; /* file: NULL when unknown */
};

static struct frame_names frame_of_key(const struct ex *x, uint32_t key)
{
	if (key == OTREE_OTHER)
		return (struct frame_names){ "[other]", "synthetic", "", NULL };
	const struct dkey *k = display_get(x->d, key);
	return (struct frame_names){ display_str(x->d, k->name), frame_type_name(k->type),
				     display_str(x->d, k->binary),
				     k->file ? display_str(x->d, k->file) : NULL };
}

static size_t key_slot(const struct ex *x, uint32_t key)
{
	return key == OTREE_OTHER || key >= x->nkeys ? x->nkeys : key;
}

/* The frame index of key (speedscope's frames, pprof's functions): true
 * when it has one; else it gets the next, *f names it for the caller to
 * write, and false. */
static bool known_frame(struct ex *x, uint32_t key, uint32_t *idx, struct frame_names *f)
{
	size_t slot = key_slot(x, key);
	if (x->frame_of[slot]) {
		*idx = x->frame_of[slot] - 1;
		return true;
	}
	*f = frame_of_key(x, key);
	x->frame_of[slot] = (uint32_t)++x->nframes;
	*idx = (uint32_t)x->nframes - 1;
	return false;
}

/* The speedscope frame index of key, written to x->frames when new. */
static uint32_t speedscope_frame(struct ex *x, uint32_t key)
{
	uint32_t i;
	struct frame_names f;
	if (known_frame(x, key, &i, &f))
		return i;
	jsonw_begin_object(&x->fw);
	jsonw_kv_str(&x->fw, "name", f.name);
	if (f.file)
		jsonw_kv_str(&x->fw, "file", f.file);
	else if (*f.binary)
		jsonw_kv_str(&x->fw, "file", f.binary);
	jsonw_end_object(&x->fw);
	return i;
}

static uint32_t intern(struct ex *x, const char *s)
{
	return strtab_intern_cstr(&x->strs, s);
}

/* The pprof mapping id of a binary (0 for none). */
static uint32_t pprof_mapping(struct ex *x, const char *binary)
{
	if (!*binary)
		return 0;
	uint32_t s = intern(x, binary);
	size_t old = x->capmapping_of;
	xgrow((void **)&x->mapping_of, &x->capmapping_of, (size_t)s + 1, sizeof(uint32_t));
	if (x->capmapping_of != old)
		memset(x->mapping_of + old, 0, (x->capmapping_of - old) * sizeof(uint32_t));
	if (!x->mapping_of[s]) {
		xgrow((void **)&x->mapping_file, &x->capmappings, x->nmappings + 1, sizeof(uint32_t));
		x->mapping_file[x->nmappings++] = s;
		x->mapping_of[s] = (uint32_t)x->nmappings;
	}
	return x->mapping_of[s];
}

/* The pprof function index of key, made when new. */
static uint32_t pprof_function(struct ex *x, uint32_t key)
{
	uint32_t i;
	struct frame_names f;
	if (known_frame(x, key, &i, &f))
		return i;
	struct buf sys = { 0 };
	buf_printf(&sys, "%s:%s", f.type, f.name);
	xgrow((void **)&x->fns, &x->capfn, (size_t)i + 1, sizeof(*x->fns));
	x->fns[i].name = intern(x, f.name);
	x->fns[i].system = intern(x, sys.data);
	x->fns[i].file = f.file ? intern(x, f.file) : 0;
	buf_free(&sys);
	return i;
}

static bool eq_loc(const void *ctx, uint32_t idx)
{
	const void *const *pair = ctx;
	const struct ex *x = pair[0];
	const struct loc *k = pair[1];
	return x->locs[idx].fn == k->fn && x->locs[idx].line == k->line;
}

/* The pprof location id of (key, line), made when new. */
static uint32_t pprof_location(struct ex *x, uint32_t key, uint32_t line)
{
	struct loc k = { .fn = pprof_function(x, key), .line = line };
	const void *ctx[2] = { x, &k };
	uint64_t h = hash_u64((uint64_t)k.fn << 32 | line);
	uint32_t idx;
	if (hmap_find(&x->loc_index, h, eq_loc, ctx, &idx))
		return idx + 1;
	k.mapping = pprof_mapping(x, frame_of_key(x, key).binary);
	xgrow((void **)&x->locs, &x->caplocs, x->nlocs + 1, sizeof(*x->locs));
	x->locs[x->nlocs] = k;
	hmap_insert(&x->loc_index, h, (uint32_t)x->nlocs);
	return (uint32_t)++x->nlocs;
}

static void sample(struct ex *x, uint64_t value)
{
	size_t n = x->depth - 1; /* levels below the root */
	size_t size = x->f == FG_FORMAT_FOLDED	       ? x->out->len - x->start + x->path.len
		      : x->f == FG_FORMAT_SPEEDSCOPE ? x->samples.len + x->frames.len + 12 * n
						       : (x->nlocids + n) * sizeof(uint64_t);
	if (x->too_big || size > x->max_bytes) {
		x->too_big = true;
		return;
	}
	switch (x->f) {
	case FG_FORMAT_FOLDED:
		if (x->path.len)
			buf_append(x->out, x->path.data, x->path.len);
		else
			buf_puts(x->out, "[no frames]");
		buf_printf(x->out, " %llu\n", (unsigned long long)value);
		break;
	case FG_FORMAT_SPEEDSCOPE:
		jsonw_begin_array(&x->sw);
		for (size_t i = 0; i < n; i++)
			jsonw_u64(&x->sw, x->ids[i]);
		jsonw_end_array(&x->sw);
		jsonw_u64(&x->ww, value);
		break;
	case FG_FORMAT_PPROF:
		xgrow((void **)&x->locids, &x->caplocids, x->nlocids + n, sizeof(uint64_t));
		for (size_t i = 0; i < n; i++) /* leaf first */
			x->locids[x->nlocids + i] = x->ids[n - 1 - i];
		xgrow((void **)&x->smp, &x->capsmp, x->nsmp + 1, sizeof(*x->smp));
		x->smp[x->nsmp++] = (struct sample){ x->nlocids, n, value };
		x->nlocids += n;
		break;
	case FG_FORMAT_JSON:
		break;
	}
}

static void enter(void *ctx, uint32_t key, uint64_t self, uint64_t total, uint32_t line)
{
	(void)total;
	struct ex *x = ctx;
	if (x->depth > 0) {
		size_t level = x->depth - 1;
		xgrow((void **)&x->ids, &x->capids, level + 1, sizeof(uint32_t));
		xgrow((void **)&x->plen, &x->capplen, level + 1, sizeof(size_t));
		x->plen[level] = x->path.len;
		switch (x->f) {
		case FG_FORMAT_FOLDED: {
			if (level)
				buf_putc(&x->path, ';');
			export_folded_frame(&x->path, frame_of_key(x, key).name);
			break;
		}
		case FG_FORMAT_SPEEDSCOPE:
			x->ids[level] = speedscope_frame(x, key);
			break;
		case FG_FORMAT_PPROF:
			x->ids[level] = pprof_location(x, key, line);
			break;
		case FG_FORMAT_JSON:
			break;
		}
	}
	x->depth++;
	if (self)
		sample(x, self);
}

static void leave(void *ctx)
{
	struct ex *x = ctx;
	x->depth--;
	if (x->depth > 0)
		x->path.len = x->plen[x->depth - 1];
}

/* --- writing --------------------------------------------------------------- */

static const char *speedscope_unit(uint8_t kind)
{
	switch (kind) {
	case SEK_OFF_CPU:
	case SEK_CUDA:
		return "nanoseconds";
	case SEK_ALLOC:
		return "bytes";
	default:
		return "none";
	}
}

/* Ends the array w wrote and writes it as the value of key. */
static int splice_array(struct jsonw *out, const char *key, struct jsonw *w)
{
	jsonw_end_array(w);
	jsonw_key(out, key);
	jsonw_raw(out, w->b->data, w->b->len);
	return jsonw_finish(w);
}

static int write_speedscope(struct ex *x, struct buf *err)
{
	struct jsonw w;
	jsonw_init(&w, x->out);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "$schema", "https://www.speedscope.app/file-format-schema.json");
	jsonw_kv_str(&w, "version", "0.6.0");
	jsonw_kv_str(&w, "name", x->info->name);
	jsonw_kv_u64(&w, "activeProfileIndex", 0);
	jsonw_key(&w, "shared");
	jsonw_begin_object(&w);
	int rc = splice_array(&w, "frames", &x->fw);
	jsonw_end_object(&w);
	jsonw_key(&w, "profiles");
	jsonw_begin_array(&w);
	jsonw_begin_object(&w);
	jsonw_kv_str(&w, "type", "sampled");
	jsonw_kv_str(&w, "name", x->info->name);
	jsonw_kv_str(&w, "unit", speedscope_unit(x->info->kind));
	jsonw_kv_u64(&w, "startValue", 0);
	jsonw_kv_u64(&w, "endValue", x->info->total);
	rc |= splice_array(&w, "samples", &x->sw);
	rc |= splice_array(&w, "weights", &x->ww);
	jsonw_end_object(&w);
	jsonw_end_array(&w);
	jsonw_end_object(&w);
	if (rc) {
		buf_puts(err, "internal error: the speedscope export was not written as valid JSON");
		return JSONW_RC;
	}
	return jsonw_finish_answer(&w, err);
}

static int64_t clamp64(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

static int write_pprof(struct ex *x, struct buf *err)
{
	const struct export_info *in = x->info;
	/* Sample types, by event kind. */
	const char *types[2][2];
	size_t ntypes = 1;
	int64_t period = 0;
	switch (in->kind) {
	case SEK_OFF_CPU:
		types[0][0] = "off_cpu", types[0][1] = "nanoseconds";
		break;
	case SEK_CUDA:
		types[0][0] = "gpu", types[0][1] = "nanoseconds";
		break;
	case SEK_ALLOC:
		types[0][0] = "alloc_space", types[0][1] = "bytes";
		break;
	default:
		types[0][0] = "samples", types[0][1] = "count";
		if (in->hz) {
			types[1][0] = "cpu", types[1][1] = "nanoseconds";
			period = (1000000000 + in->hz / 2) / in->hz;
			ntypes = 2;
		}
	}
	Perftools__Profiles__ValueType vt[2], pt;
	Perftools__Profiles__ValueType *vtp[2];
	for (size_t i = 0; i < ntypes; i++) {
		perftools__profiles__value_type__init(&vt[i]);
		vt[i].type = intern(x, types[i][0]);
		vt[i].unit = intern(x, types[i][1]);
		vtp[i] = &vt[i];
	}
	perftools__profiles__value_type__init(&pt);
	pt.type = vt[ntypes - 1].type;
	pt.unit = vt[ntypes - 1].unit;

	Perftools__Profiles__Profile p;
	perftools__profiles__profile__init(&p);
	p.n_sample_type = ntypes;
	p.sample_type = vtp;
	p.period_type = &pt;
	p.period = period ? period : 1;
	if (in->start_ms > 0)
		p.time_nanos = in->start_ms * 1000000;
	if (in->end_ms > in->start_ms)
		p.duration_nanos = (in->end_ms - in->start_ms) * 1000000;

	/* Samples: values side by side, location ids in x->locids. */
	Perftools__Profiles__Sample *smp = xcalloc(x->nsmp + 1, sizeof(*smp));
	Perftools__Profiles__Sample **smpp = xcalloc(x->nsmp + 1, sizeof(*smpp));
	int64_t *values = xcalloc(x->nsmp * ntypes + 1, sizeof(int64_t));
	for (size_t i = 0; i < x->nsmp; i++) {
		perftools__profiles__sample__init(&smp[i]);
		smp[i].n_location_id = x->smp[i].n;
		smp[i].location_id = x->locids + x->smp[i].first;
		smp[i].n_value = ntypes;
		smp[i].value = values + i * ntypes;
		smp[i].value[0] = clamp64(x->smp[i].value);
		if (ntypes == 2) {
			uint64_t ns;
			smp[i].value[1] = __builtin_mul_overflow(x->smp[i].value, (uint64_t)period, &ns)
						  ? INT64_MAX
						  : clamp64(ns);
		}
		smpp[i] = &smp[i];
	}
	p.n_sample = x->nsmp;
	p.sample = smpp;

	/* Functions, locations (one line each), mappings. */
	size_t nfn = x->nframes;
	Perftools__Profiles__Function *fn = xcalloc(nfn + 1, sizeof(*fn));
	Perftools__Profiles__Function **fnp = xcalloc(nfn + 1, sizeof(*fnp));
	for (size_t i = 0; i < nfn; i++) {
		perftools__profiles__function__init(&fn[i]);
		fn[i].id = i + 1;
		fn[i].name = x->fns[i].name;
		fn[i].system_name = x->fns[i].system;
		fn[i].filename = x->fns[i].file;
		fnp[i] = &fn[i];
	}
	p.n_function = nfn;
	p.function = fnp;
	Perftools__Profiles__Location *loc = xcalloc(x->nlocs + 1, sizeof(*loc));
	Perftools__Profiles__Location **locp = xcalloc(x->nlocs + 1, sizeof(*locp));
	Perftools__Profiles__Line *ln = xcalloc(x->nlocs + 1, sizeof(*ln));
	Perftools__Profiles__Line **lnp = xcalloc(x->nlocs + 1, sizeof(*lnp));
	for (size_t i = 0; i < x->nlocs; i++) {
		perftools__profiles__location__init(&loc[i]);
		perftools__profiles__line__init(&ln[i]);
		ln[i].function_id = x->locs[i].fn + 1;
		ln[i].line = x->locs[i].line;
		lnp[i] = &ln[i];
		loc[i].id = i + 1;
		loc[i].mapping_id = x->locs[i].mapping;
		loc[i].n_line = 1;
		loc[i].line = &lnp[i];
		locp[i] = &loc[i];
	}
	p.n_location = x->nlocs;
	p.location = locp;
	Perftools__Profiles__Mapping *mp = xcalloc(x->nmappings + 1, sizeof(*mp));
	Perftools__Profiles__Mapping **mpp = xcalloc(x->nmappings + 1, sizeof(*mpp));
	for (size_t i = 0; i < x->nmappings; i++) {
		perftools__profiles__mapping__init(&mp[i]);
		mp[i].id = i + 1;
		mp[i].filename = x->mapping_file[i];
		/* Symbolized already: pprof must not look for the binary. */
		mp[i].has_functions = mp[i].has_filenames = mp[i].has_line_numbers = 1;
		mp[i].has_inline_frames = 1;
		mpp[i] = &mp[i];
	}
	p.n_mapping = x->nmappings;
	p.mapping = mpp;

	/* The string table: no string is interned from here on. */
	size_t ns = strtab_count(&x->strs);
	char **st = xcalloc(ns + 1, sizeof(char *));
	for (size_t i = 0; i < ns; i++)
		st[i] = (char *)strtab_get(&x->strs, (uint32_t)i);
	p.n_string_table = ns;
	p.string_table = st;

	size_t len = perftools__profiles__profile__get_packed_size(&p);
	uint8_t *raw = xmalloc(len ? len : 1);
	perftools__profiles__profile__pack(&p, raw);
	int rc = gzip_compress_buf(raw, len, 6, x->out);
	if (rc < 0)
		buf_puts(err, "pprof: compressing the profile failed");
	free_all(raw, st, mp, mpp, ln, lnp, loc, locp, fn, fnp, values, smp, smpp);
	return rc < 0 ? -1 : 0;
}

int export_tree(enum fg_format f, struct otree *t, const struct display *d, size_t max_nodes,
		const struct export_info *info, struct buf *out, struct buf *err)
{
	if (f == FG_FORMAT_JSON) {
		buf_puts(err, "export_tree: JSON is the flamegraph answer itself");
		return -1;
	}
	struct ex x = { .f = f, .d = d, .info = info, .out = out, .nkeys = display_count(d),
			.max_bytes = info->max_bytes ? info->max_bytes : EXPORT_MAX_BYTES,
			.start = out->len };
	x.frame_of = xcalloc(x.nkeys + 1, sizeof(uint32_t));
	strtab_init(&x.strs);
	if (f == FG_FORMAT_SPEEDSCOPE) {
		jsonw_init(&x.fw, &x.frames);
		jsonw_init(&x.sw, &x.samples);
		jsonw_init(&x.ww, &x.weights);
		jsonw_begin_array(&x.fw);
		jsonw_begin_array(&x.sw);
		jsonw_begin_array(&x.ww);
	}
	const struct otree_visitor v = { enter, leave };
	otree_visit(t, d, max_nodes, &v, &x);
	int rc = 0;
	if (x.too_big) {
		out->len = x.start;
		if (out->data)
			out->data[out->len] = 0;
		buf_printf(err, "the %s export would exceed %zu %s (its stacks repeat their callers: "
				"deep stacks); ask for fewer nodes (max_nodes, now %zu)",
			   fg_format_name(f), x.max_bytes >= (1u << 20) ? x.max_bytes >> 20 : x.max_bytes,
			   x.max_bytes >= (1u << 20) ? "MiB" : "bytes", max_nodes);
		rc = -1;
	} else if (f == FG_FORMAT_SPEEDSCOPE)
		rc = write_speedscope(&x, err);
	else if (f == FG_FORMAT_PPROF)
		rc = write_pprof(&x, err);
	free_all(x.ids, x.plen);
	buf_free(&x.path);
	free(x.frame_of);
	buf_free(&x.frames);
	buf_free(&x.samples);
	buf_free(&x.weights);
	strtab_free(&x.strs);
	free_all(x.fns, x.locs);
	hmap_free(&x.loc_index);
	free_all(x.mapping_of, x.mapping_file, x.smp, x.locids);
	return rc;
}
