/* display.c - see display.h. */
#include "display.h"
#include "jsonw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/symbols/debuginfod.h"
#include "hmap.h"
#include "names.h"
#include "uregex.h"
#include "util.h"

static const char *const frame_types[] = {
	[0] = "native",
	[SFT_KERNEL] = "kernel",
	[SFT_NATIVE] = "native",
	[SFT_CPYTHON] = "cpython",
	[SFT_GO] = "go",
	[SFT_JVM] = "jvm",
	[SFT_V8] = "v8",
	[SFT_RUBY] = "ruby",
	[SFT_PHP] = "php",
	[SFT_PERL] = "perl",
	[SFT_DOTNET] = "dotnet",
	[SFT_CUDA_LAUNCH] = "cuda_launch",
	[SFT_CUDA_KERNEL] = "cuda_kernel",
	[SFT_CUDA_SASS] = "cuda_sass",
	[SFT_CUDA_STALL] = "cuda_stall",
	[SFT_ERROR] = "error",
	[SFT_CUDA_MEMCPY] = "cuda_memcpy",
	[SFT_CUDA_MEMSET] = "cuda_memset",
	[SFT_CUDA_SYNC] = "cuda_sync",
	[SFT_NVTX] = "nvtx",
};

const char *frame_type_name(uint8_t type)
{
	if (type == DT_ROOT)
		return "root";
	if (type == DT_SYNTHETIC || type == DT_OTHER)
		return "synthetic";
	return type <= SFT_MAX ? frame_types[type] : "native";
}

int frame_type_parse(const char *name)
{
	for (int t = 1; t <= SFT_MAX; t++)
		if (strcmp(name, frame_types[t]) == 0)
			return t;
	return -1;
}

struct display {
	struct symbols *sym;
	struct fetcher *fetch;
	bool raw, verbose;
	struct uregex *masks[DISPLAY_MAX_MASKS];
	size_t nmasks;
	struct uregex *search;
	struct uregex_matcher *rm; /* bounds every match of the query (uregex.h); NULL: no patterns */
	struct strtab names;
	struct dkey *keys;
	size_t nkeys, capkeys;
	struct hmap key_index;
	/* the current part: stored frame -> (first run item + 1) << 32 | count */
	const struct store_segment *p;
	uint64_t *frame_run;
	size_t capframe_run;
	struct drun *runs;
	size_t nruns, capruns;
	struct buf name;
	int64_t now_ms;   /* when the query began: uploads expected since then */
	size_t npending;  /* keys marked pending */
};

void display_free(struct display *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nmasks; i++)
		uregex_free(d->masks[i]);
	uregex_free(d->search);
	uregex_matcher_free(d->rm);
	strtab_free(&d->names);
	free(d->keys);
	hmap_free(&d->key_index);
	free_all(d->frame_run, d->runs);
	buf_free(&d->name);
	free(d);
}

static struct uregex *compile(const char *pat, const char *what, struct buf *err)
{
	char msg[256];
	size_t off;
	struct uregex *re = uregex_compile(pat, strlen(pat), 0, what, msg, sizeof(msg), &off);
	if (!re)
		buf_printf(err, "%s: %s at offset %zu", what, msg, off);
	return re;
}

struct display *display_new(struct symbols *sym, struct fetcher *fetch,
			    const struct display_opts *o, const char *what_masks, struct buf *err)
{
	struct display *d = xcalloc(1, sizeof(*d));
	d->sym = sym;
	d->fetch = fetch;
	d->raw = o->raw_names;
	d->verbose = o->verbose_names;
	d->now_ms = now_unix_ms();
	strtab_init(&d->names);
	char what[96];
	for (size_t i = 0; i < o->nmasks && i < DISPLAY_MAX_MASKS; i++) {
		snprintf(what, sizeof(what), "%s[%zu]", what_masks, i);
		if (!(d->masks[i] = compile(o->masks[i], what, err)))
			goto fail;
		d->nmasks++;
	}
	if (o->search && !(d->search = compile(o->search, "search", err)))
		goto fail;
	if (d->nmasks || d->search)
		d->rm = uregex_matcher_new(o->regex_budget_ms);
	return d;
fail:
	display_free(d);
	return NULL;
}

struct key_ctx {
	const struct display *d;
	const struct dkey *want;
};

static bool eq_key(const void *ctx, uint32_t idx)
{
	const struct key_ctx *c = ctx;
	const struct dkey *k = &c->d->keys[idx];
	return k->type == c->want->type && k->name == c->want->name &&
	       k->binary == c->want->binary;
}

/* A bound reached reads as no match; the query then fails (display_check). */
static bool matches(struct display *d, const struct uregex *re, const char *s)
{
	return uregex_match(d->rm, re, s, strlen(s)) > 0;
}

uint32_t display_key(struct display *d, uint8_t type, const char *name, const char *binary,
		     const char *file)
{
	struct dkey want = { .type = type,
			     .name = strtab_intern_cstr(&d->names, name),
			     .binary = strtab_intern_cstr(&d->names, binary ? binary : ""),
			     .file = file && *file ? strtab_intern_cstr(&d->names, file) : 0 };
	uint64_t h = hash_mix(hash_u64((uint64_t)want.name << 32 | want.binary), type);
	struct key_ctx c = { d, &want };
	uint32_t idx;
	if (hmap_find(&d->key_index, h, eq_key, &c, &idx)) {
		if (!d->keys[idx].file)
			d->keys[idx].file = want.file;
		return idx;
	}
	if (type != DT_SYNTHETIC && type != DT_ROOT && type != DT_OTHER) {
		for (size_t i = 0; i < d->nmasks && !want.masked; i++)
			want.masked = matches(d, d->masks[i], name);
		want.matched = d->search && matches(d, d->search, name);
	}
	xgrow((void **)&d->keys, &d->capkeys, d->nkeys + 1, sizeof(*d->keys));
	idx = (uint32_t)d->nkeys++;
	d->keys[idx] = want;
	hmap_insert(&d->key_index, h, idx);
	return idx;
}

void display_mark_unsymbolized(struct display *d, uint32_t key, uint64_t address)
{
	d->keys[key].unsymbolized = true;
	d->keys[key].address = address;
}

void display_mark_absent(struct display *d, uint32_t key)
{
	d->keys[key].absent = true;
}

void display_frame_json(struct jsonw *w, const struct display *d, uint32_t key, uint32_t line)
{
	const struct dkey *k = &d->keys[key];
	jsonw_kv_str(w, "name", display_str(d, k->name));
	jsonw_kv_str(w, "frame_type", frame_type_name(k->type));
	const char *binary = display_str(d, k->binary);
	if (*binary)
		jsonw_kv_str(w, "binary", binary);
	if (k->file) {
		jsonw_kv_str(w, "file", display_str(d, k->file));
		if (line)
			jsonw_kv_u64(w, "line", line);
	}
	if (k->unsymbolized) {
		char hex[24];
		snprintf(hex, sizeof(hex), "0x%llx", (unsigned long long)k->address);
		jsonw_kv_bool(w, "symbolized", false);
		jsonw_kv_str(w, "address", hex);
	}
	if (k->absent)
		jsonw_kv_bool(w, "absent", true);
}

const struct dkey *display_get(const struct display *d, uint32_t key)
{
	return &d->keys[key];
}

const char *display_str(const struct display *d, uint32_t id)
{
	return strtab_get(&d->names, id);
}

size_t display_count(const struct display *d)
{
	return d->nkeys;
}

bool display_has_masks(const struct display *d)
{
	return d->nmasks > 0;
}

int display_check(const struct display *d, struct buf *err)
{
	if (!d->rm || !uregex_failed(d->rm))
		return 0;
	if (err)
		uregex_error(d->rm, err);
	return UREGEX_RC;
}

bool display_has_search(const struct display *d)
{
	return d->search != NULL;
}

void display_part(struct display *d, const struct store_segment *p)
{
	d->p = p;
	xgrow((void **)&d->frame_run, &d->capframe_run, p->nframes + 1, sizeof(uint64_t));
	memset(d->frame_run, 0, (p->nframes + 1) * sizeof(uint64_t));
	d->nruns = 0;
}

static void push_run(struct display *d, uint32_t key, uint32_t line)
{
	xgrow((void **)&d->runs, &d->capruns, d->nruns + 1, sizeof(*d->runs));
	d->runs[d->nruns++] = (struct drun){ key, line };
}

/* A PC-sampled instruction: its cubin ("cubin:<crc>") as the binary, its
 * function as the name, its offset in the function as the address. Named
 * "MNEMONIC +0xOFFSET" once the server has the cubin and nvdisasm
 * (symbols_sass), "cubin:<crc>+0xOFFSET" until then. */
static void symbolize_sass(struct display *d, const struct store_frame_info *f, const char *binary)
{
	struct buf *name = &d->name;
	buf_reset(name);
	unsigned long long crc;
	int used = 0;
	const char *m = NULL;
	if (f->name && sscanf(binary, "cubin:%16llx%n", &crc, &used) == 1 && used == 22 && !binary[used])
		m = symbols_sass(d->sym, crc, f->name, f->address);
	if (m)
		buf_printf(name, "%s +0x%llx", m, (unsigned long long)f->address);
	else
		buf_printf(name, "%s+0x%llx", *binary ? binary : "[unknown]", (unsigned long long)f->address);
	uint32_t key = display_key(d, f->type, name->data, binary, NULL);
	if (!m)
		display_mark_unsymbolized(d, key, f->address);
	push_run(d, key, 0);
}

static void symbolize(struct display *d, const struct store_frame_info *f)
{
	const char *binary = f->binary ? f->binary : "";
	const struct store_file *sf = f->file;
	if (sf)
		binary = f->file_name ? f->file_name : "";
	struct sym_frame frames[SYMFILE_MAX_DEPTH];
	int nf = 0;
	struct buf *name = &d->name;
	buf_reset(name);
	if (f->type == SFT_CPYTHON && f->name) {
		/* Interpreted frames carry their source file as the binary and
		 * their line as the address (docs/protocol.md). */
		const char *src = f->binary ? f->binary : "";
		const char *base = strrchr(src, '/');
		push_run(d, display_key(d, f->type, f->name, base ? base + 1 : src,
					src),
			 (uint32_t)MIN(f->address, (uint64_t)UINT32_MAX));
		return;
	}
	if (f->type == SFT_CUDA_SASS) {
		symbolize_sass(d, f, binary);
		return;
	}
	if (f->name) {
		display_name(f->name, binary, d->raw, d->verbose, name);
		push_run(d, display_key(d, f->type, name->data, binary, NULL), 0);
	} else if (sf && (nf = symbols_lookup(d->sym, &sf->id, sf->build_id, sf->build_id_len,
					      f->address, frames, SYMFILE_MAX_DEPTH)) > 0) {
		for (int i = nf; i-- > 0;) {
			buf_reset(name);
			display_name(frames[i].name, binary, d->raw, d->verbose, name);
			push_run(d, display_key(d, f->type, name->data, binary, frames[i].file),
				 frames[i].line);
		}
	} else {
		buf_printf(name, "%s+0x%llx", *binary ? binary : "[unknown]",
			   (unsigned long long)f->address);
		uint32_t key = display_key(d, f->type, name->data, binary, NULL);
		display_mark_unsymbolized(d, key, f->address);
		push_run(d, key, 0);
	}
	/* Unnamed, but an agent was told to upload this file's symbols: its
	 * names are on their way. */
	bool pending = sf && !f->name && nf == 0 && symbols_expected(d->sym, &sf->id, d->now_ms);
	/* No source lines for this file yet: global symbolization may have
	 * them (asked once per file; the answer comes later). */
	if (sf && d->fetch && (nf == 0 || !frames[0].file)) {
		int quality = symbols_quality_any(d->sym, &sf->id, sf->build_id, sf->build_id_len);
		if ((quality < 0 || !(quality & SYMFILE_HAS_LINES)) && fetcher_request(d->fetch, sf) &&
		    !f->name && nf == 0)
			pending = true;
	}
	struct dkey *k = &d->keys[d->runs[d->nruns - 1].key];
	if (pending && !k->pending) {
		k->pending = true;
		d->npending++;
	}
}

size_t display_pending(const struct display *d)
{
	return d->npending;
}

const struct drun *display_frame(struct display *d, uint32_t frame, uint32_t *n)
{
	if (frame < d->p->nframes && d->frame_run[frame]) {
		uint64_t v = d->frame_run[frame];
		*n = (uint32_t)v;
		return d->runs + ((v >> 32) - 1);
	}
	size_t start = d->nruns;
	struct store_frame_info fi;
	if (frame >= d->p->nframes || store_seg_frame(d->p, frame, &fi) < 0)
		push_run(d, display_key(d, SFT_ERROR, "[missing frame]", "", NULL), 0);
	else
		symbolize(d, &fi);
	*n = (uint32_t)(d->nruns - start);
	if (frame < d->p->nframes)
		d->frame_run[frame] = (uint64_t)(start + 1) << 32 | *n;
	return d->runs + start;
}

size_t display_stack(struct display *d, uint32_t stack, uint32_t *keys, uint32_t *lines,
		     size_t max)
{
	uint32_t frames[DISPLAY_MAX_DEPTH];
	size_t depth = MIN(store_seg_stack(d->p, stack, frames, DISPLAY_MAX_DEPTH),
			   (size_t)DISPLAY_MAX_DEPTH);
	size_t n = 0;
	for (size_t i = 0; i < depth && n < max; i++) {
		uint32_t nr;
		const struct drun *r = display_frame(d, frames[i], &nr);
		for (uint32_t j = 0; j < nr && n < max; j++) {
			if (d->keys[r[j].key].masked)
				continue;
			if (lines)
				lines[n] = r[j].line;
			keys[n++] = r[j].key;
		}
	}
	return n;
}
