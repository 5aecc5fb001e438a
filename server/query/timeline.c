/* timeline.c - see timeline.h. */
#include "timeline.h"

#include <stdlib.h>
#include <string.h>

#include "cel.h"
#include "display.h"
#include "jsonw.h"
#include "util.h"

int tl_request_parse(struct tl_request *r, const char *body, size_t len, struct buf *err)
{
	memset(r, 0, sizeof(*r));
	r->limit = TIMELINE_DEFAULT_LIMIT;
	return scope_limit_parse(body, len, &r->scope, &r->limit, TIMELINE_MAX_LIMIT, &r->raw_names, err);
}

void tl_request_free(struct tl_request *r)
{
	scope_free(&r->scope);
}

/* Unix milliseconds as nanoseconds, past 2262 (a filter may reach the
 * year 3000) as INT64_MAX. */
static int64_t ms_to_ns(int64_t ms)
{
	return ms > INT64_MAX / 1000000 ? INT64_MAX : ms * 1000000;
}

static const char *kind_name(uint8_t kind)
{
	static const char *const names[] = { "", "kernel", "memcpy", "memset", "sync", "graph" };
	return kind < ARRAY_SIZE(names) && kind ? names[kind] : "unknown";
}

/* One span of the answer, its stack and labels numbered in the answer. */
struct tl_span {
	int64_t start_ns, end_ns;
	uint32_t device, stream, stack, labels, name;
	uint8_t kind;
};

struct tl_read {
	const struct tl_request *r;
	struct display *d;
	struct cel_program *cel;
	int64_t from_ns, to_ns;
	struct tl_span *spans;
	size_t nspans, capspans;
	bool truncated;
	/* the answer's stacks and label sets, written once each */
	struct buf stacks, labels, names;
	struct jsonw ws, wl;
	uint32_t nstacks, nlabels;
	/* per chunk: its node / label set -> the answer's index + 1 */
	uint32_t *node_map, *lab_map;
	size_t capnode_map, caplab_map;
	int8_t *lab_ok;
	size_t caplab_ok;
	uint32_t *keys, *lines;
};

static int cmp_span(const void *a, const void *b)
{
	const struct tl_span *x = a, *y = b;
	if (x->start_ns != y->start_ns)
		return x->start_ns < y->start_ns ? -1 : 1;
	return x->end_ns < y->end_ns ? -1 : x->end_ns > y->end_ns;
}

/* The answer's index of the stack of node n of the chunk begun, and its
 * leaf's display name (a display string id, UINT32_MAX: none; kept by
 * stack in t->names). */
static uint32_t stack_of(struct tl_read *t, uint32_t n, uint32_t *name)
{
	if (t->node_map[n]) {
		uint32_t v = t->node_map[n] - 1;
		memcpy(name, t->names.data + (size_t)v * sizeof(uint32_t), sizeof(uint32_t));
		return v;
	}
	size_t depth = display_stack(t->d, n, t->keys, t->lines, DISPLAY_MAX_DEPTH);
	jsonw_begin_array(&t->ws);
	for (size_t i = 0; i < depth; i++) {
		jsonw_begin_object(&t->ws);
		display_frame_json(&t->ws, t->d, t->keys[i], t->lines[i]);
		jsonw_end_object(&t->ws);
	}
	jsonw_end_array(&t->ws);
	/* the leaf's display key names the span */
	uint32_t leaf = depth ? display_get(t->d, t->keys[depth - 1])->name : UINT32_MAX;
	buf_append(&t->names, &leaf, sizeof(leaf));
	*name = leaf;
	t->node_map[n] = ++t->nstacks;
	return t->nstacks - 1;
}

static uint32_t labels_of(struct tl_read *t, const struct store_segment *seg, uint32_t l)
{
	if (t->lab_map[l])
		return t->lab_map[l] - 1;
	const uint32_t *kv;
	size_t n = store_seg_label_pairs(seg, l, &kv);
	jsonw_begin_object(&t->wl);
	for (size_t i = 0; i < n; i++)
		jsonw_kv_str(&t->wl, store_seg_str(seg, kv[2 * i]), store_seg_str(seg, kv[2 * i + 1]));
	jsonw_end_object(&t->wl);
	t->lab_map[l] = ++t->nlabels;
	return t->nlabels - 1;
}

static int read_chunk(void *ctx, const struct store_segment *seg, const struct gpuspan *spans, size_t n)
{
	struct tl_read *t = ctx;
	xgrow((void **)&t->node_map, &t->capnode_map, seg->nnodes + 1, sizeof(uint32_t));
	memset(t->node_map, 0, (seg->nnodes + 1) * sizeof(uint32_t));
	xgrow((void **)&t->lab_map, &t->caplab_map, seg->nlabels + 1, sizeof(uint32_t));
	memset(t->lab_map, 0, (seg->nlabels + 1) * sizeof(uint32_t));
	xgrow((void **)&t->lab_ok, &t->caplab_ok, seg->nlabels + 1, 1);
	memset(t->lab_ok, -1, seg->nlabels + 1);
	display_part(t->d, seg);
	for (size_t i = 0; i < n; i++) {
		const struct gpuspan *s = &spans[i];
		if (s->end_ns <= t->from_ns || s->start_ns >= t->to_ns || s->labels >= seg->nlabels ||
		    s->node >= seg->nnodes)
			continue;
		if (t->cel) {
			int8_t *ok = &t->lab_ok[s->labels];
			if (*ok < 0)
				*ok = scan_labels_match(t->cel, seg, s->labels) ? 1 : 0;
			if (*ok == 0)
				continue;
		}
		if (t->nspans >= t->r->limit) {
			t->truncated = true;
			return 1;
		}
		struct tl_span o = { .start_ns = s->start_ns, .end_ns = s->end_ns, .device = s->device,
				     .stream = s->stream, .kind = s->kind };
		o.stack = stack_of(t, s->node, &o.name);
		o.labels = labels_of(t, seg, s->labels);
		xgrow((void **)&t->spans, &t->capspans, t->nspans + 1, sizeof(*t->spans));
		t->spans[t->nspans++] = o;
	}
	return display_check(t->d, NULL) ? 1 : 0;
}

int timeline_query(struct gpuspans *g, struct symbols *sym, const struct tl_request *r, int64_t now_ms,
		   struct buf *out, struct buf *err)
{
	struct tl_read t = { .r = r, .truncated = r->source_truncated };
	if (r->scope.query) {
		struct buf e = { 0 };
		t.cel = cel_compile(r->scope.query, &e);
		if (!t.cel) {
			buf_printf(err, "filter.query: %s", e.data);
			buf_free(&e);
			return -1;
		}
	}
	struct display_opts o = { .raw_names = r->raw_names };
	t.d = display_new(sym, NULL, &o, "", err);
	if (!t.d) {
		cel_free(t.cel);
		return -1;
	}
	t.from_ns = ms_to_ns(r->scope.start_ms);
	t.to_ns = ms_to_ns(r->scope.end_ms);
	t.keys = xmalloc(DISPLAY_MAX_DEPTH * sizeof(uint32_t));
	t.lines = xmalloc(DISPLAY_MAX_DEPTH * sizeof(uint32_t));
	jsonw_init(&t.ws, &t.stacks);
	jsonw_begin_array(&t.ws);
	jsonw_init(&t.wl, &t.labels);
	jsonw_begin_array(&t.wl);
	gpuspans_read(g, r->scope.project_id, t.from_ns, t.to_ns, now_ms, read_chunk, &t);
	jsonw_end_array(&t.ws);
	jsonw_end_array(&t.wl);
	int rc = display_check(t.d, err);
	if (!rc)
		rc = cel_check(t.cel, err);
	if (!rc && (jsonw_finish(&t.ws) || jsonw_finish(&t.wl))) {
		buf_puts(err, "internal error: a stack was not written as valid JSON");
		rc = JSONW_RC;
	}
	if (!rc) {
		xqsort(t.spans, t.nspans, sizeof(*t.spans), cmp_span);
		struct jsonw w;
		jsonw_init(&w, out);
		jsonw_begin_object(&w);
		jsonw_key(&w, "spans");
		jsonw_begin_array(&w);
		for (size_t i = 0; i < t.nspans; i++) {
			const struct tl_span *s = &t.spans[i];
			jsonw_begin_object(&w);
			jsonw_kv_i64(&w, "start_ns", s->start_ns);
			jsonw_kv_i64(&w, "end_ns", s->end_ns);
			jsonw_kv_u64(&w, "device", s->device);
			jsonw_kv_u64(&w, "stream", s->stream);
			jsonw_kv_str(&w, "kind", kind_name(s->kind));
			jsonw_kv_str(&w, "name", s->name == UINT32_MAX ? "" : display_str(t.d, s->name));
			jsonw_kv_u64(&w, "stack", s->stack);
			jsonw_kv_u64(&w, "labels", s->labels);
			jsonw_end_object(&w);
		}
		jsonw_end_array(&w);
		jsonw_key(&w, "stacks");
		jsonw_raw(&w, t.stacks.data, t.stacks.len);
		jsonw_key(&w, "label_sets");
		jsonw_raw(&w, t.labels.data, t.labels.len);
		jsonw_kv_bool(&w, "truncated", t.truncated);
		jsonw_end_object(&w);
		rc = jsonw_finish_answer(&w, err);
	}
	buf_free(&t.stacks);
	buf_free(&t.labels);
	buf_free(&t.names);
	free_all(t.spans, t.node_map, t.lab_map, t.lab_ok, t.keys, t.lines);
	display_free(t.d);
	cel_free(t.cel);
	return rc;
}
