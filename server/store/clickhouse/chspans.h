/* chspans.h - the GPU timeline's spans in ClickHouse, so that every
 * replica on one fleet store draws the same timeline
 * (docs/internals/clickhouse.md, "GPU spans").
 *
 * The embedded server keeps spans in memory (server/store/gpuspans.h);
 * with --store clickhouse they go to two tables (schema.h, version 3):
 *   gpu_spans         one row per span: project, hour, start_ns, end_ns,
 *                     device, stream, kind, origin
 *   gpu_span_origins  hour, hash, data: an origin (launch stack and
 *                     resource attributes, server/store/spancodec.h) once
 *                     per batch and hour, folded by ReplacingMergeTree
 * `hour` is the hour (Unix seconds / 3600) the server stored the batch in,
 * each table partitioned by it: retention drops whole hours past
 * --gpu-span-retention (and one hour more, for spans that ended before
 * they arrived). A query reads the newest spans of the range (the
 * timeline's limit of them, or CHSPANS_READ_MAX when a filter over their
 * attributes, applied in ember, may leave some out), newest end first,
 * then the origins they name, into an
 * in-memory struct gpuspans that the timeline query reads as on the
 * embedded store.
 *
 * Spans are stored after their batch's samples (only for a batch stored
 * the first time, as in memory): a failed span insert is logged and
 * counted, and the batch is still acknowledged -- the spans only draw GPU
 * time the batch's samples hold already.
 *
 * Threading: any number of threads may insert and read at once (each call
 * takes a connection of its own).
 */
#ifndef EMBER_STORE_CH_SPANS_H
#define EMBER_STORE_CH_SPANS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "hmap.h"
#include "server/store/clickhouse/chttp.h"
#include "server/store/gpuspans.h"

#define CHSPANS_READ_MAX 200000 /* spans a query reads at most (the timeline's largest limit) */

struct chspans;

struct chspans_stats {
	uint64_t added;          /* spans inserted */
	uint64_t insert_failed;  /* spans whose insert failed (logged) */
	uint64_t read_failed;    /* timeline reads that failed (answered 503) */
	uint64_t hours_dropped;  /* partitions retention dropped */
	uint64_t orphans;        /* spans read whose origin was not found (skipped) */
};

/* conn: the fleet store's connection options (copied); cluster: NULL or
 * "" for one server. NULL with a message for bad options. */
struct chspans *chspans_open(const struct ch_conn_opts *conn, const char *cluster,
			     int64_t retention_ms, struct buf *err);
void chspans_close(struct chspans *cs);

/* The spans of one batch, gathered before one insert. */
struct chspans_batch {
	char project[40];
	uint32_t hour;
	size_t n;
	struct buf spans, origins, blob;
	struct hmap seen; /* origins of this batch, by hash */
	uint64_t *hashes;
	size_t nhashes, caphashes;
};

void chspans_batch_init(struct chspans_batch *b, const char *project, int64_t now_ms);
void chspans_batch_add(struct chspans_batch *b, const struct gpuspan_in *in);
void chspans_batch_free(struct chspans_batch *b);

/* Inserts the batch's origins, then its spans: 0, or -1 with a message
 * (counted in insert_failed). Drops expired hours at most every 10
 * minutes, from the inserting thread. */
int chspans_insert(struct chspans *cs, const struct chspans_batch *b, int64_t now_ms, struct buf *err);

/* Adds the spans of project overlapping [from_ns, to_ns) that ended within
 * the retention to into (a struct gpuspans of the caller), newest end
 * first, at most max (and CHSPANS_READ_MAX); *truncated when more were
 * there. 0, or -1 with a message when ClickHouse failed. */
int chspans_read(struct chspans *cs, const char *project, int64_t from_ns, int64_t to_ns,
		 int64_t now_ms, size_t max, struct gpuspans *into, bool *truncated, struct buf *err);

void chspans_get_stats(struct chspans *cs, struct chspans_stats *out);

#endif
