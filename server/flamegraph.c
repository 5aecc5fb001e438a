/* flamegraph.c - see flamegraph.h. */
#include "flamegraph.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "cel.h"
#include "debuginfod.h"
#include "hmap.h"
#include "jsonw.h"
#include "names.h"
#include "strtab.h"
#include "util.h"

#define MAX_DEPTH 4096

static const char *const synthetic_names[SYN_COUNT] = {
	[SYN_DEPLOYMENT] = "deployment", [SYN_CONTAINER] = "container", [SYN_HOST] = "host",
	[SYN_EXECUTABLE] = "executable", [SYN_THREAD] = "thread",       [SYN_SCRIPT] = "script",
	[SYN_NAMESPACE] = "namespace",   [SYN_POD] = "pod",             [SYN_CLUSTER] = "cluster",
	[SYN_PROCESS] = "process",
};

static const char *const synthetic_attrs[SYN_COUNT] = {
	[SYN_DEPLOYMENT] = "k8s.deployment.name",
	[SYN_CONTAINER] = "container.name",
	[SYN_HOST] = "host.name",
	[SYN_EXECUTABLE] = "process.executable.name",
	[SYN_THREAD] = "thread.name",
	[SYN_SCRIPT] = "script.name",
	[SYN_NAMESPACE] = "k8s.namespace.name",
	[SYN_POD] = "k8s.pod.name",
	[SYN_CLUSTER] = "cluster.name",
	[SYN_PROCESS] = "process.pid",
};

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
};

/* Pseudo frame types of output nodes that are not frames. */
#define T_ROOT 254
#define T_SYNTHETIC 253

const char *frame_type_name(uint8_t type)
{
	if (type == T_ROOT)
		return "root";
	if (type == T_SYNTHETIC)
		return "synthetic";
	return type <= SFT_MAX ? frame_types[type] : "native";
}

int fg_synthetic_from_name(const char *name)
{
	for (int i = 0; i < SYN_COUNT; i++)
		if (strcmp(name, synthetic_names[i]) == 0)
			return i;
	return -1;
}

const char *fg_synthetic_attribute(enum fg_synthetic s)
{
	return synthetic_attrs[s];
}

static const struct {
	const char *name;
	uint8_t kind;
	const char *unit;
} event_kinds[] = {
	{ "on_cpu", SEK_ON_CPU, "samples" },
	{ "off_cpu", SEK_OFF_CPU, "nanoseconds" },
	{ "cuda", SEK_CUDA, "nanoseconds" },
	{ "alloc", SEK_ALLOC, "bytes" },
};

/* --- request parsing ----------------------------------------------------- */

static int get_int(json_t *v, const char *what, int64_t min, int64_t max, int64_t *out,
		   struct buf *err)
{
	if (!json_is_integer(v)) {
		buf_printf(err, "%s: expected an integer", what);
		return -1;
	}
	json_int_t x = json_integer_value(v);
	if (x < min || x > max) {
		buf_printf(err, "%s: expected %lld to %lld, got %lld", what, (long long)min,
			   (long long)max, (long long)x);
		return -1;
	}
	*out = x;
	return 0;
}

int fg_request_parse(struct fg_request *r, const char *body, size_t len, struct buf *err)
{
	memset(r, 0, sizeof(*r));
	r->kind = SEK_ON_CPU;
	json_error_t jerr;
	json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		buf_printf(err, "request body is not valid JSON: %s (line %d, column %d)", jerr.text,
			   jerr.line, jerr.column);
		return -1;
	}
	int rc = -1;
	if (!json_is_object(doc)) {
		buf_puts(err, "request body: expected a JSON object");
		goto out;
	}
	json_t *filter = json_object_get(doc, "filter");
	if (!json_is_object(filter)) {
		buf_puts(err, "filter: expected an object with start_ts and end_ts");
		goto out;
	}
	if (get_int(json_object_get(filter, "start_ts"), "filter.start_ts", 0, 32503680000000LL,
		    &r->start_ms, err) < 0 ||
	    get_int(json_object_get(filter, "end_ts"), "filter.end_ts", 0, 32503680000000LL,
		    &r->end_ms, err) < 0)
		goto out;
	if (r->end_ms <= r->start_ms) {
		buf_puts(err, "filter: end_ts must be after start_ts");
		goto out;
	}
	json_t *kind = json_object_get(filter, "event_kind");
	if (kind && !json_is_null(kind)) {
		const char *k = json_string_value(kind);
		size_t i;
		for (i = 0; k && i < ARRAY_SIZE(event_kinds); i++)
			if (strcmp(k, event_kinds[i].name) == 0)
				break;
		if (!k || i == ARRAY_SIZE(event_kinds)) {
			buf_puts(err, "filter.event_kind: expected one of on_cpu, off_cpu, cuda, alloc");
			goto out;
		}
		r->kind = event_kinds[i].kind;
	}
	json_t *q = json_object_get(filter, "query");
	if (q && !json_is_null(q)) {
		if (!json_is_string(q)) {
			buf_puts(err, "filter.query: expected a CEL string or null");
			goto out;
		}
		const char *qs = json_string_value(q);
		if (qs[strspn(qs, " \t\r\n")])
			r->query = xstrdup(qs);
	}
	json_t *mask = json_object_get(filter, "frame_mask");
	if (mask && !json_is_null(mask)) {
		json_t *pats = json_is_object(mask) ? json_object_get(mask, "patterns") : NULL;
		if (pats && !json_is_array(pats)) {
			buf_puts(err, "filter.frame_mask.patterns: expected an array of strings");
			goto out;
		}
		if (json_array_size(pats) > FG_MAX_MASKS) {
			buf_printf(err, "filter.frame_mask.patterns: at most %d patterns", FG_MAX_MASKS);
			goto out;
		}
		size_t i;
		json_t *v;
		json_array_foreach(pats, i, v)
		{
			if (!json_is_string(v) || json_string_length(v) > 1024) {
				buf_puts(err, "filter.frame_mask.patterns: expected strings of at most 1024 bytes");
				goto out;
			}
			r->masks[r->nmasks++] = xstrdup(json_string_value(v));
		}
	}
	json_t *ns = json_object_get(doc, "num_samples");
	if (ns && !json_is_null(ns)) {
		int64_t v;
		if (get_int(ns, "num_samples", 1, INT64_MAX, &v, err) < 0)
			goto out;
		r->num_samples = (uint64_t)v;
	}
	json_t *nb = json_object_get(doc, "num_stat_buckets");
	if (nb && !json_is_null(nb)) {
		int64_t v;
		if (get_int(nb, "num_stat_buckets", 1, 10000, &v, err) < 0)
			goto out;
		r->num_stat_buckets = (uint32_t)v;
	}
	json_t *raw = json_object_get(doc, "raw_names");
	if (raw && !json_is_null(raw)) {
		if (!json_is_boolean(raw)) {
			buf_puts(err, "raw_names: expected true or false");
			goto out;
		}
		r->raw_names = json_is_true(raw);
	}
	json_t *verbose = json_object_get(doc, "verbose_names");
	if (verbose && !json_is_null(verbose)) {
		if (!json_is_boolean(verbose)) {
			buf_puts(err, "verbose_names: expected true or false");
			goto out;
		}
		r->verbose_names = json_is_true(verbose);
	}
	json_t *syn = json_object_get(doc, "synthetic_frames");
	if (syn && !json_is_null(syn)) {
		if (!json_is_array(syn) || json_array_size(syn) > FG_MAX_SYNTHETIC) {
			buf_printf(err, "synthetic_frames: expected an array of at most %d names",
				   FG_MAX_SYNTHETIC);
			goto out;
		}
		size_t i;
		json_t *v;
		json_array_foreach(syn, i, v)
		{
			int s = json_is_string(v) ? fg_synthetic_from_name(json_string_value(v)) : -1;
			if (s < 0) {
				buf_puts(err, "synthetic_frames: expected names among deployment, container, host, executable, thread, script, namespace, pod, cluster, process");
				goto out;
			}
			r->synthetic[r->nsynthetic++] = (enum fg_synthetic)s;
		}
	}
	rc = 0;
out:
	json_decref(doc);
	if (rc < 0)
		fg_request_free(r);
	return rc;
}

void fg_request_free(struct fg_request *r)
{
	free(r->query);
	for (size_t i = 0; i < r->nmasks; i++)
		free(r->masks[i]);
	r->query = NULL;
	r->nmasks = 0;
}

/* --- the query ----------------------------------------------------------- */

struct key {          /* one display identity: what a tree node is */
	uint8_t type;
	bool masked;
	uint32_t name;        /* query strtab id */
	uint32_t binary;      /* query strtab id */
	uint32_t file;        /* query strtab id of the source file; 0 = unknown */
};

/* One frame of a symbolized stored frame (several when inlined). */
struct run_item {
	uint32_t key;
	uint32_t line;
};

struct tnode {
	uint32_t key;
	uint32_t parent;
	uint32_t first_child, next_sibling; /* node index + 1, 0 = none */
	uint64_t self, total;
	uint32_t line;   /* the line most samples are at (majority vote) */
	uint64_t votes;
};

struct agg {
	uint32_t stack, labels;
	uint64_t value;
};

struct query {
	struct store *st;
	struct symbols *sym;
	const struct fg_request *req;
	struct cel_program *cel;
	pcre2_code *masks[FG_MAX_MASKS];
	pcre2_match_data *md;
	int8_t *label_ok; /* per label set: -1 unknown, 0 excluded, 1 included */
	size_t nlabel_sets;
	/* aggregation by (stack, labels) */
	struct agg *aggs;
	size_t naggs, capaggs;
	struct hmap agg_index;
	/* sample-rate votes */
	uint64_t hz_value[8];
	uint16_t hz[8];
	/* time series */
	uint64_t *buckets;
	/* display identities */
	struct strtab names;
	struct key *keys;
	size_t nkeys, capkeys;
	struct hmap key_index;
	uint64_t *frame_run; /* store frame id -> (start + 1) << 32 | count in runs */
	size_t nframe_run;
	struct run_item *runs;
	size_t nruns, capruns;
	struct fetcher *fetch;
	/* the tree */
	struct tnode *nodes;
	size_t nnodes, capnodes;
	struct hmap node_index;
	/* statistics */
	uint64_t rows_scanned, rows_matched, total, sampled_from;
	uint64_t keep_threshold; /* row kept when its hash < threshold (sampling) */
	int pass;
};

static bool eq_agg(const void *ctx, uint32_t idx)
{
	const struct query *q = ((const struct query *const *)ctx)[0];
	const struct agg *want = ((const struct agg *const *)ctx)[1];
	return q->aggs[idx].stack == want->stack && q->aggs[idx].labels == want->labels;
}

struct lookup_ctx {
	const struct store *st;
	const uint32_t *kv;
	size_t n;
};

static const char *label_lookup(void *ctx, const char *name)
{
	struct lookup_ctx *c = ctx;
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(store_string(c->st, c->kv[2 * i]), name) == 0)
			return store_string(c->st, c->kv[2 * i + 1]);
	return NULL;
}

static const char *label_value(const struct store *st, uint32_t labels, const char *name)
{
	struct lookup_ctx c = { st, NULL, 0 };
	c.n = store_labels(st, labels, &c.kv);
	return label_lookup(&c, name);
}

static bool labels_match(struct query *q, uint32_t labels)
{
	if (!q->cel)
		return true;
	if (labels >= q->nlabel_sets)
		return false;
	if (q->label_ok[labels] < 0) {
		struct lookup_ctx c = { q->st, NULL, 0 };
		c.n = store_labels(q->st, labels, &c.kv);
		q->label_ok[labels] = cel_eval(q->cel, label_lookup, &c) ? 1 : 0;
	}
	return q->label_ok[labels] == 1;
}

static void on_row(void *ctx, const struct store_row *row)
{
	struct query *q = ctx;
	q->rows_scanned++;
	if (!labels_match(q, row->labels))
		return;
	if (q->pass == 0) {
		q->sampled_from += row->value;
		return;
	}
	/* Sampling keeps a row by a hash of its content: the same rows on
	 * every run of the same query. */
	if (q->keep_threshold != UINT64_MAX &&
	    hash_mix(hash_u64((uint64_t)row->ts_ms), (uint64_t)row->stack << 32 | row->labels) >=
		    q->keep_threshold)
		return;
	q->rows_matched++;
	q->total += row->value;
	for (int i = 0; i < 8; i++) {
		if (q->hz[i] == row->hz || q->hz[i] == 0) {
			q->hz[i] = row->hz;
			q->hz_value[i] += row->value;
			break;
		}
	}
	if (q->buckets) {
		const struct fg_request *r = q->req;
		uint64_t span = (uint64_t)(r->end_ms - r->start_ms);
		uint64_t b = (uint64_t)(row->ts_ms - r->start_ms) * r->num_stat_buckets / span;
		if (b < r->num_stat_buckets)
			q->buckets[b] += row->value;
	}
	struct agg want = { row->stack, row->labels, 0 };
	const void *kctx[2] = { q, &want };
	uint64_t h = hash_u64((uint64_t)row->stack << 32 | row->labels);
	uint32_t idx;
	if (hmap_find(&q->agg_index, h, eq_agg, kctx, &idx)) {
		q->aggs[idx].value += row->value;
		return;
	}
	xgrow((void **)&q->aggs, &q->capaggs, q->naggs + 1, sizeof(*q->aggs));
	idx = (uint32_t)q->naggs++;
	q->aggs[idx] = (struct agg){ row->stack, row->labels, row->value };
	hmap_insert(&q->agg_index, h, idx);
}

static bool eq_keyid(const void *ctx, uint32_t idx)
{
	const struct query *q = ((const struct query *const *)ctx)[0];
	const struct key *want = ((const struct key *const *)ctx)[1];
	const struct key *k = &q->keys[idx];
	return k->type == want->type && k->name == want->name && k->binary == want->binary;
}

static uint32_t intern_key(struct query *q, uint8_t type, const char *name, const char *binary,
			   const char *file)
{
	struct key want = { type, false, strtab_intern_cstr(&q->names, name),
			    strtab_intern_cstr(&q->names, binary ? binary : ""),
			    file ? strtab_intern_cstr(&q->names, file) : 0 };
	uint64_t h = hash_mix(hash_u64((uint64_t)want.name << 32 | want.binary), type);
	const void *kctx[2] = { q, &want };
	uint32_t idx;
	if (hmap_find(&q->key_index, h, eq_keyid, kctx, &idx)) {
		if (!q->keys[idx].file)
			q->keys[idx].file = want.file;
		return idx;
	}
	if (type != T_SYNTHETIC && type != T_ROOT) {
		size_t nlen = strlen(name);
		for (size_t i = 0; i < q->req->nmasks && !want.masked; i++)
			want.masked = pcre2_match(q->masks[i], (PCRE2_SPTR)name, nlen, 0, 0, q->md,
						  NULL) >= 0;
	}
	xgrow((void **)&q->keys, &q->capkeys, q->nkeys + 1, sizeof(*q->keys));
	idx = (uint32_t)q->nkeys++;
	q->keys[idx] = want;
	hmap_insert(&q->key_index, h, idx);
	return idx;
}

static void push_run(struct query *q, uint32_t key, uint32_t line)
{
	xgrow((void **)&q->runs, &q->capruns, q->nruns + 1, sizeof(*q->runs));
	q->runs[q->nruns++] = (struct run_item){ key, line };
}

/* The display frames of a stored frame (outermost first), symbolized on
 * first use: returns the first item and sets *n. */
static const struct run_item *frame_run(struct query *q, uint32_t frame_id, uint32_t *n)
{
	if (frame_id < q->nframe_run && q->frame_run[frame_id]) {
		uint64_t v = q->frame_run[frame_id];
		*n = (uint32_t)v;
		return q->runs + ((v >> 32) - 1);
	}
	size_t start = q->nruns;
	const struct store_frame *f = store_frame(q->st, frame_id);
	struct buf name = { 0 };
	if (!f) {
		push_run(q, intern_key(q, SFT_ERROR, "[missing frame]", "", NULL), 0);
	} else {
		const char *binary = f->binary ? store_string(q->st, f->binary) : "";
		const struct store_file *sf = f->file ? store_file(q->st, f->file - 1) : NULL;
		if (sf)
			binary = store_string(q->st, sf->name);
		struct sym_frame frames[SYMFILE_MAX_DEPTH];
		int nf = 0;
		if (f->name) {
			display_name(store_string(q->st, f->name), binary, q->req->raw_names,
				     q->req->verbose_names, &name);
			push_run(q, intern_key(q, f->type, name.data, binary, NULL), 0);
		} else if (sf && (nf = symbols_lookup(q->sym, &sf->id, sf->build_id, sf->build_id_len,
						      f->address, frames, SYMFILE_MAX_DEPTH)) > 0) {
			for (int i = nf; i-- > 0;) {
				buf_reset(&name);
				display_name(frames[i].name, binary, q->req->raw_names,
					     q->req->verbose_names, &name);
				push_run(q, intern_key(q, f->type, name.data, binary, frames[i].file),
					 frames[i].line);
			}
		} else {
			buf_printf(&name, "%s+0x%llx", *binary ? binary : "[unknown]",
				   (unsigned long long)f->address);
			push_run(q, intern_key(q, f->type, name.data, binary, NULL), 0);
		}
		/* No source lines for this file yet: global symbolization may
		 * have them (asked once per file; the answer comes later). */
		if (sf && q->fetch && (nf == 0 || !frames[0].file)) {
			int quality = symbols_quality_any(q->sym, &sf->id, sf->build_id, sf->build_id_len);
			if (quality < 0 || !(quality & SYMFILE_HAS_LINES))
				fetcher_request(q->fetch, sf);
		}
	}
	buf_free(&name);
	*n = (uint32_t)(q->nruns - start);
	if (frame_id < q->nframe_run)
		q->frame_run[frame_id] = (uint64_t)(start + 1) << 32 | *n;
	return q->runs + start;
}

/* Boyer-Moore majority vote, weighted: after all votes, node->line is the
 * line holding more than half of the node's samples whenever one does. */
static void vote(struct tnode *t, uint32_t line, uint64_t w)
{
	if (!line)
		return;
	if (t->line == line) {
		t->votes += w;
	} else if (t->votes >= w) {
		t->votes -= w;
	} else {
		t->line = line;
		t->votes = w - t->votes;
	}
}

struct node_key {
	const struct query *q;
	uint32_t parent, key;
};

static bool eq_child(const void *ctx, uint32_t idx)
{
	const struct node_key *k = ctx;
	return k->q->nodes[idx].key == k->key && k->q->nodes[idx].parent == k->parent;
}

/* The child of parent with display identity key, created when new. */
static uint32_t child(struct query *q, uint32_t parent, uint32_t key)
{
	uint64_t h = hash_u64((uint64_t)parent << 32 | key);
	struct node_key k = { q, parent, key };
	uint32_t idx;
	if (hmap_find(&q->node_index, h, eq_child, &k, &idx))
		return idx;
	xgrow((void **)&q->nodes, &q->capnodes, q->nnodes + 1, sizeof(*q->nodes));
	idx = (uint32_t)q->nnodes++;
	q->nodes[idx] = (struct tnode){ key, parent, 0, q->nodes[parent].first_child, 0, 0, 0, 0 };
	q->nodes[parent].first_child = idx + 1;
	hmap_insert(&q->node_index, h, idx);
	return idx;
}

static int cmp_nodes(const void *a, const void *b, void *ctx)
{
	const struct query *q = ctx;
	const struct tnode *x = &q->nodes[*(const uint32_t *)a], *y = &q->nodes[*(const uint32_t *)b];
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(strtab_get(&q->names, q->keys[x->key].name),
		      strtab_get(&q->names, q->keys[y->key].name));
}

static void write_node(struct query *q, uint32_t n, struct buf *out, int depth)
{
	const struct tnode *t = &q->nodes[n];
	const struct key *k = &q->keys[t->key];
	buf_puts(out, "{\"name\":");
	jsonw_str(out, strtab_get(&q->names, k->name));
	buf_puts(out, ",\"frame_type\":");
	jsonw_str(out, frame_type_name(k->type));
	const char *binary = strtab_get(&q->names, k->binary);
	if (*binary) {
		buf_puts(out, ",\"binary\":");
		jsonw_str(out, binary);
	}
	if (k->file) {
		buf_puts(out, ",\"file\":");
		jsonw_str(out, strtab_get(&q->names, k->file));
		if (t->line) {
			buf_puts(out, ",\"line\":");
			jsonw_u64(out, t->line);
		}
	}
	buf_puts(out, ",\"self\":");
	jsonw_u64(out, t->self);
	buf_puts(out, ",\"total\":");
	jsonw_u64(out, t->total);
	buf_puts(out, ",\"children\":[");
	size_t nc = 0;
	for (uint32_t c = t->first_child; c; c = q->nodes[c - 1].next_sibling)
		nc++;
	if (nc && depth < MAX_DEPTH + FG_MAX_SYNTHETIC + 2) {
		uint32_t *kids = xmalloc(nc * sizeof(uint32_t));
		size_t i = 0;
		for (uint32_t c = t->first_child; c; c = q->nodes[c - 1].next_sibling)
			kids[i++] = c - 1;
		qsort_r(kids, nc, sizeof(uint32_t), cmp_nodes, q);
		for (i = 0; i < nc; i++) {
			if (i)
				buf_putc(out, ',');
			write_node(q, kids[i], out, depth + 1);
		}
		free(kids);
	}
	buf_puts(out, "]}");
}

static void query_free(struct query *q)
{
	cel_free(q->cel);
	for (size_t i = 0; i < FG_MAX_MASKS; i++)
		pcre2_code_free(q->masks[i]);
	pcre2_match_data_free(q->md);
	free(q->label_ok);
	free(q->aggs);
	hmap_free(&q->agg_index);
	free(q->buckets);
	strtab_free(&q->names);
	free(q->keys);
	hmap_free(&q->key_index);
	free(q->frame_run);
	free(q->runs);
	free(q->nodes);
	hmap_free(&q->node_index);
}

int flamegraph_query(struct store *st, struct symbols *sym, struct fetcher *fetch,
		     const struct fg_request *r, struct buf *out, struct buf *err)
{
	uint64_t t0 = now_mono_ns();
	struct query q = { .st = st, .sym = sym, .req = r, .keep_threshold = UINT64_MAX,
			   .fetch = fetch };
	strtab_init(&q.names);
	if (r->query && !(q.cel = cel_compile(r->query, err))) {
		query_free(&q);
		return -1;
	}
	for (size_t i = 0; i < r->nmasks; i++) {
		int ec;
		PCRE2_SIZE off;
		q.masks[i] = pcre2_compile((PCRE2_SPTR)r->masks[i], PCRE2_ZERO_TERMINATED, 0, &ec,
					   &off, NULL);
		if (!q.masks[i]) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(ec, msg, sizeof(msg));
			buf_printf(err, "filter.frame_mask.patterns[%zu]: %s at offset %zu", i,
				   (const char *)msg, (size_t)off);
			query_free(&q);
			return -1;
		}
	}
	q.md = pcre2_match_data_create(4, NULL);
	if (r->num_stat_buckets)
		q.buckets = xcalloc(r->num_stat_buckets, sizeof(uint64_t));

	store_read_lock(st);
	uint32_t project = store_project_id(st, r->project_id);
	q.nlabel_sets = store_label_set_count(st);
	q.label_ok = xmalloc(q.nlabel_sets ? q.nlabel_sets : 1);
	memset(q.label_ok, -1, q.nlabel_sets);
	if (project != UINT32_MAX) {
		if (r->num_samples) {
			q.pass = 0;
			store_scan(st, project, r->kind, r->start_ms, r->end_ms, on_row, &q);
			if (q.sampled_from > r->num_samples)
				q.keep_threshold = (uint64_t)((double)UINT64_MAX *
							      ((double)r->num_samples / (double)q.sampled_from));
			q.rows_scanned = 0;
		}
		q.pass = 1;
		store_scan(st, project, r->kind, r->start_ms, r->end_ms, on_row, &q);
	}

	/* Build the tree: root, synthetic levels, then the stack's frames. */
	xgrow((void **)&q.nodes, &q.capnodes, 1, sizeof(*q.nodes));
	q.nodes[0] = (struct tnode){ intern_key(&q, T_ROOT, "root", "", NULL), UINT32_MAX, 0, 0, 0, 0,
				     0, 0 };
	q.nnodes = 1;
	q.nframe_run = store_frame_count(st);
	q.frame_run = xcalloc(q.nframe_run ? q.nframe_run : 1, sizeof(uint64_t));
	uint32_t *frames = xmalloc(MAX_DEPTH * sizeof(uint32_t));
	for (size_t i = 0; i < q.naggs; i++) {
		const struct agg *a = &q.aggs[i];
		uint32_t node = 0;
		q.nodes[0].total += a->value;
		for (size_t s = 0; s < r->nsynthetic; s++) {
			const char *v = label_value(st, a->labels, synthetic_attrs[r->synthetic[s]]);
			char none[64];
			if (!v || !*v) {
				snprintf(none, sizeof(none), "[no %s]", synthetic_names[r->synthetic[s]]);
				v = none;
			}
			node = child(&q, node, intern_key(&q, T_SYNTHETIC, v, "", NULL));
			q.nodes[node].total += a->value;
		}
		size_t depth = MIN(store_stack(st, a->stack, frames, MAX_DEPTH), (size_t)MAX_DEPTH);
		for (size_t d = 0; d < depth; d++) {
			uint32_t n;
			const struct run_item *run = frame_run(&q, frames[d], &n);
			for (uint32_t j = 0; j < n; j++) {
				uint32_t line = run[j].line;
				uint32_t k = run[j].key;
				if (q.keys[k].masked)
					continue;
				node = child(&q, node, k);
				q.nodes[node].total += a->value;
				vote(&q.nodes[node], line, a->value);
			}
		}
		q.nodes[node].self += a->value;
	}
	free(frames);

	uint16_t hz = 0;
	uint64_t best = 0;
	for (int i = 0; i < 8; i++)
		if (q.hz_value[i] > best) {
			best = q.hz_value[i];
			hz = q.hz[i];
		}
	const char *unit = "samples";
	for (size_t i = 0; i < ARRAY_SIZE(event_kinds); i++)
		if (event_kinds[i].kind == r->kind)
			unit = event_kinds[i].unit;

	buf_puts(out, "{\"unit\":");
	jsonw_str(out, unit);
	buf_puts(out, ",\"sample_rate_hz\":");
	jsonw_u64(out, hz);
	buf_puts(out, ",\"total\":");
	jsonw_u64(out, q.total);
	if (r->num_samples) {
		buf_puts(out, ",\"sampled_from\":");
		jsonw_u64(out, q.sampled_from);
	}
	buf_puts(out, ",\"root\":");
	write_node(&q, 0, out, 0);
	if (q.buckets) {
		buf_puts(out, ",\"stats\":{\"start_ts\":");
		jsonw_i64(out, r->start_ms);
		buf_puts(out, ",\"bucket_ms\":");
		jsonw_double(out, (double)(r->end_ms - r->start_ms) / r->num_stat_buckets);
		buf_puts(out, ",\"values\":[");
		for (uint32_t i = 0; i < r->num_stat_buckets; i++) {
			if (i)
				buf_putc(out, ',');
			jsonw_u64(out, q.buckets[i]);
		}
		buf_puts(out, "]}");
	}
	buf_puts(out, ",\"query_stats\":{\"rows_scanned\":");
	jsonw_u64(out, q.rows_scanned);
	buf_puts(out, ",\"rows_matched\":");
	jsonw_u64(out, q.rows_matched);
	buf_puts(out, ",\"distinct_stacks\":");
	jsonw_u64(out, q.naggs);
	buf_puts(out, ",\"nodes\":");
	jsonw_u64(out, q.nnodes);
	buf_puts(out, ",\"time_ms\":");
	store_read_unlock(st);
	jsonw_double(out, (double)(now_mono_ns() - t0) / 1e6);
	buf_puts(out, "}}");
	query_free(&q);
	return 0;
}
