/* spanstore.h - where the GPU timeline's spans are kept, behind one
 * interface so that ingest and the timeline query never ask which:
 *   span_store_memory   the embedded server's: in memory, per server
 *                       (server/store/gpuspans.h)
 *   chspans_open        the fleet store's: in ClickHouse, shared by every
 *                       replica (server/store/clickhouse/chspans.h)
 *
 * Adding: a stored batch's spans, given as an iterator over them (the
 * session decodes each span in place, so a span is valid only while its
 * callback runs). A failure is returned with a message; the batch's
 * samples stay acknowledged (the spans only draw GPU time they hold).
 *
 * Reading: span_store_read gives a struct gpuspans holding the spans of a
 * project that overlap [from_ns, to_ns) and ended within the retention,
 * newest end first as far as a store keeps an order, at most max of them
 * where the store reads them in (*truncated when more were there); the
 * timeline query reads it with gpuspans_read, then hands it back with
 * span_store_release (the memory store's is its own, shared; the fleet
 * store's is built for the call and freed there).
 *
 * Threading: any number of threads may add, read and release at once.
 */
#ifndef EMBER_SERVER_SPANSTORE_H
#define EMBER_SERVER_SPANSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "server/store/gpuspans.h"

/* Calls each(each_ctx, span) for every span of one batch. */
typedef void (*span_each_fn)(void *each_ctx, const struct gpuspan_in *span);
typedef void (*span_iter_fn)(const void *src, span_each_fn each, void *each_ctx);

/* Counters of either store; those a store does not have stay 0. */
struct span_store_stats {
	uint64_t stored;        /* spans added */
	uint64_t insert_failed; /* spans whose insert failed (logged) */
	uint64_t read_failed;   /* timeline reads that failed (answered 503) */
	uint64_t expired;       /* spans dropped past the retention (memory) */
	uint64_t evicted;       /* spans dropped past the memory store's bound */
	uint64_t hours_dropped; /* hour partitions dropped past the retention (ClickHouse) */
	uint64_t orphans;       /* spans read whose launch stack was not found (skipped) */
};

struct span_store_ops {
	int (*add)(void *impl, const char *project, span_iter_fn iter, const void *src, int64_t now_ms,
		   struct buf *err);
	int (*read)(void *impl, const char *project, int64_t from_ns, int64_t to_ns, int64_t now_ms,
		    size_t max, struct gpuspans **out, bool *truncated, struct buf *err);
	void (*release)(void *impl, struct gpuspans *g);
	void (*stats)(void *impl, struct span_store_stats *out);
	void (*close)(void *impl);
};

struct span_store {
	const struct span_store_ops *ops;
	void *impl;
};

/* The embedded server's store: spans in memory for retention_ms, at most
 * max_spans of them (gpuspans_new). */
struct span_store *span_store_memory(int64_t retention_ms, size_t max_spans);

/* A store over an implementation (for chspans_open). */
struct span_store *span_store_new(const struct span_store_ops *ops, void *impl);

/* 0, or -1 with a message. */
int span_store_add(struct span_store *s, const char *project, span_iter_fn iter, const void *src,
		   int64_t now_ms, struct buf *err);
/* 0 with *out set, or -1 with a message (answered 503). */
int span_store_read(struct span_store *s, const char *project, int64_t from_ns, int64_t to_ns,
		    int64_t now_ms, size_t max, struct gpuspans **out, bool *truncated, struct buf *err);
void span_store_release(struct span_store *s, struct gpuspans *g);
void span_store_get_stats(struct span_store *s, struct span_store_stats *out);
/* Closes the store and frees it; NULL is ignored. */
void span_store_close(struct span_store *s);

#endif
