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
 * then the origins they name, into a struct gpuspans built for the call,
 * which the timeline query reads as on the embedded store and
 * span_store_release frees.
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
#include "server/store/clickhouse/chttp.h"
#include "server/store/spanstore.h"

#define CHSPANS_READ_MAX 200000 /* spans a query reads at most (the timeline's largest limit) */

/* The fleet store's span store (spanstore.h) over the ClickHouse of conn
 * (copied); cluster: NULL or "" for one server. Its counters: stored,
 * insert_failed, read_failed, hours_dropped, orphans.
 * NULL with a message for bad options. */
struct span_store *chspans_open(const struct ch_conn_opts *conn, const char *cluster,
				int64_t retention_ms, struct buf *err);

#endif
