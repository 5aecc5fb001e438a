/* timeline.h - the GPU timeline: the single kernels, copies, sets and
 * syncs of a time range (server/store/gpuspans.h), each with its device,
 * stream, start and end, and the stack that launched it, symbolized like
 * the flamegraph's (server/query/display.h).
 *
 * Request: {"filter": {"start_ts", "end_ts", "query"}, "limit", "raw_names"}
 * (filter as every query's; its CEL query is evaluated over each span's
 * process attributes, once per attribute set; event_kind is ignored: spans
 * are GPU work). limit: at most TIMELINE_MAX_LIMIT spans (default
 * TIMELINE_DEFAULT_LIMIT), the newest chunks' first; "truncated" says
 * that more matched. On the fleet store every replica reads the same spans
 * from ClickHouse (server/store/clickhouse/chspans.h).
 *
 * Answer: {"spans": [{"start_ns", "end_ns", "device", "stream", "kind",
 * "name", "stack", "labels"}], "stacks": [[frame, ...]], "label_sets":
 * [{key: value}], "truncated"}: spans by start; stack and labels index
 * "stacks" (outermost frame first, the frames' fields as the events'
 * answer) and "label_sets", each written once. kind is kernel, memcpy,
 * memset, sync or graph (a kernel of a CUDA graph); name the leaf frame's
 * display name (the demangled kernel, or the copy's direction).
 */
#ifndef EMBER_SERVER_TIMELINE_H
#define EMBER_SERVER_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "scan.h"
#include "server/store/gpuspans.h"
#include "server/symbols/symbols.h"

#define TIMELINE_DEFAULT_LIMIT 20000
#define TIMELINE_MAX_LIMIT 200000

struct tl_request {
	struct scope scope;
	uint32_t limit;
	bool raw_names;
	/* set by the caller, not parsed: the spans given are the newest of
	 * more (the fleet store read CHSPANS_READ_MAX): "truncated" */
	bool source_truncated;
};

int tl_request_parse(struct tl_request *r, const char *body, size_t len, struct buf *err);
void tl_request_free(struct tl_request *r);

/* Answers r from g into out at now_ms (spans past the retention are gone);
 * -1 (400: a bad CEL query) or UREGEX_RC (422) with a message in err. */
int timeline_query(struct gpuspans *g, struct symbols *sym, const struct tl_request *r, int64_t now_ms,
		   struct buf *out, struct buf *err);

#endif
