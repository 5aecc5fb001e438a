/* read.c - the read interface's dispatch and what every backend shares;
 * see store.h ("reading") and docs/internals/store.md. */
#include "store.h"

#include <string.h>

/* Every backend's handle begins with a struct store_backend (store.h). */
struct store_view *store_view_open_scoped(struct store *s, int64_t from_ms, int64_t to_ms,
					  const struct store_view_scope *scope)
{
	const struct store_backend *b = (const struct store_backend *)s;
	const struct store_read_ops *ops = b->read ? b->read : &store_embedded_read;
	return ops->view_open(s, from_ms, to_ms, scope);
}

struct store_view *store_view_open(struct store *s, int64_t from_ms, int64_t to_ms)
{
	return store_view_open_scoped(s, from_ms, to_ms, NULL);
}

void store_view_close(struct store_view *v)
{
	if (v)
		v->ops->close(v);
}

const char *store_seg_label_value(const struct store_segment *g, uint32_t labels,
				  const char *key)
{
	uint32_t k = store_seg_find(g, key, strlen(key));
	if (k == UINT32_MAX)
		return NULL;
	const uint32_t *kv;
	size_t n = store_seg_label_pairs(g, labels, &kv);
	for (size_t i = 0; i < n; i++)
		if (kv[2 * i] == k)
			return store_seg_str(g, kv[2 * i + 1]);
	return NULL;
}

size_t store_seg_stack(const struct store_segment *g, uint32_t stack, uint32_t *out, size_t max)
{
	size_t depth = 0;
	for (uint32_t n = stack; n && n < g->nnodes; n = g->node_parent[n])
		depth++;
	size_t i = depth;
	for (uint32_t n = stack; n && n < g->nnodes; n = g->node_parent[n]) {
		i--;
		if (i < max)
			out[i] = g->node_frame[n];
	}
	return depth;
}
