/* spanstore.c - see spanstore.h; the memory store over gpuspans. */
#include "spanstore.h"

#include <stdlib.h>

#include "util.h"

struct span_store *span_store_new(const struct span_store_ops *ops, void *impl)
{
	struct span_store *s = xcalloc(1, sizeof(*s));
	s->ops = ops;
	s->impl = impl;
	return s;
}

int span_store_add(struct span_store *s, const char *project, span_iter_fn iter, const void *src,
		   int64_t now_ms, struct buf *err)
{
	return s->ops->add(s->impl, project, iter, src, now_ms, err);
}

int span_store_read(struct span_store *s, const char *project, int64_t from_ns, int64_t to_ns,
		    int64_t now_ms, size_t max, struct gpuspans **out, bool *truncated, struct buf *err)
{
	*out = NULL;
	*truncated = false;
	return s->ops->read(s->impl, project, from_ns, to_ns, now_ms, max, out, truncated, err);
}

void span_store_release(struct span_store *s, struct gpuspans *g)
{
	if (g)
		s->ops->release(s->impl, g);
}

void span_store_get_stats(struct span_store *s, struct span_store_stats *out)
{
	*out = (struct span_store_stats){ 0 };
	s->ops->stats(s->impl, out);
}

void span_store_close(struct span_store *s)
{
	if (!s)
		return;
	s->ops->close(s->impl);
	free(s);
}

/* --- in memory ---------------------------------------------------------------- */

struct mem_add {
	struct gpuspans *g;
	const char *project;
	int64_t now_ms;
};

static void mem_each(void *ctx, const struct gpuspan_in *span)
{
	struct mem_add *a = ctx;
	gpuspans_add(a->g, a->project, span, 1, a->now_ms);
}

static int mem_add(void *impl, const char *project, span_iter_fn iter, const void *src, int64_t now_ms,
		   struct buf *err)
{
	(void)err;
	struct mem_add a = { impl, project, now_ms };
	iter(src, mem_each, &a);
	return 0;
}

/* The spans are read where they are: the query's gpuspans_read drops the
 * expired chunks and keeps to its range. */
static int mem_read(void *impl, const char *project, int64_t from_ns, int64_t to_ns, int64_t now_ms,
		    size_t max, struct gpuspans **out, bool *truncated, struct buf *err)
{
	(void)project, (void)from_ns, (void)to_ns, (void)now_ms, (void)max, (void)truncated, (void)err;
	*out = impl;
	return 0;
}

static void mem_release(void *impl, struct gpuspans *g)
{
	(void)impl, (void)g;
}

static void mem_stats(void *impl, struct span_store_stats *out)
{
	struct gpuspans_stats st;
	gpuspans_get_stats(impl, &st);
	out->stored = st.added;
	out->expired = st.expired;
	out->evicted = st.evicted;
}

static void mem_close(void *impl)
{
	gpuspans_free(impl);
}

static const struct span_store_ops mem_ops = {
	.add = mem_add,
	.read = mem_read,
	.release = mem_release,
	.stats = mem_stats,
	.close = mem_close,
};

struct span_store *span_store_memory(int64_t retention_ms, size_t max_spans)
{
	return span_store_new(&mem_ops, gpuspans_new(retention_ms, max_spans));
}
