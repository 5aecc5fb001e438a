/* flamegraph.h - the flamegraph query: samples of one project, event
 * kind and time range, filtered by a CEL query, merged into a tree of
 * functions and written as the JSON of SPEC.md's flamegraph endpoint.
 *
 * Frames are symbolized at query time (server/query/display.h): a native frame
 * becomes the chain of functions inlined at its address, each its own
 * node; two frames with the same display name, type and binary are one
 * node; a node reports its function's source file and the line most of
 * its samples were at. Frames whose name matches a frame-mask pattern are
 * left out of their stacks; a search pattern keeps only the stacks that
 * pass through a matching function. Synthetic frames (executable, host,
 * thread, ...) add grouping levels above the stacks. Children are sorted
 * by total, largest first. Beyond max_nodes (FG_DEFAULT_MAX_NODES unless
 * asked), the smallest nodes are folded into one "[other]" node per
 * parent, the "[other]" nodes counted in max_nodes, so the answer stays
 * bounded and its totals exact.
 *
 * The tree is built per part (server/store/part.h): values are added to the
 * part's own stack prefix tree, totals propagated from leaves to parents
 * in one pass over node ids, and each touched node mapped once onto the
 * output tree -- the cost grows with distinct stacks, not with samples.
 */
#ifndef EMBER_SERVER_FLAMEGRAPH_H
#define EMBER_SERVER_FLAMEGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "export.h"
#include "scan.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"

#define FG_MAX_MASKS 64
#define FG_MAX_SYNTHETIC 8
/* The answer's node budget unless max_nodes asks another: about 1 MB of
 * JSON, more than a flamegraph view can draw legibly. */
#define FG_DEFAULT_MAX_NODES 8192
#define FG_LIMIT_MAX_NODES 2000000
/* While building, a tree over this many nodes (or 8 x max_nodes) is
 * pruned to 2 x max_nodes, folding the rest into "[other]" nodes: a
 * query's memory stays bounded whatever it groups by. */
#define FG_PRUNE_AT 4000000

enum fg_synthetic {
	SYN_DEPLOYMENT, SYN_CONTAINER, SYN_HOST, SYN_EXECUTABLE, SYN_THREAD, SYN_SCRIPT,
	SYN_NAMESPACE, SYN_POD, SYN_CLUSTER, SYN_PROCESS, SYN_COUNT
};

struct fg_request {
	struct scope scope;    /* scope.project_id is set by the caller */
	char *masks[FG_MAX_MASKS];
	size_t nmasks;
	char *search;          /* regex: keep stacks through a matching function */
	enum fg_synthetic synthetic[FG_MAX_SYNTHETIC];
	size_t nsynthetic;
	uint64_t num_samples;  /* 0 = all */
	uint32_t num_stat_buckets; /* 0 = no time series */
	uint32_t max_nodes;    /* FG_DEFAULT_MAX_NODES unless asked */
	size_t prune_at;       /* tests: prune at this many nodes (0 = the default) */
	bool raw_names;        /* names as compiled: no demangling, no libc common names */
	bool verbose_names;    /* demangled names with their parameter lists */
	enum fg_format format; /* set by the caller (the path): FG_FORMAT_JSON after parsing */
};

/* Parses the JSON request body. Returns 0, or -1 with a message for the
 * client in err. */
int fg_request_parse(struct fg_request *r, const char *body, size_t len, struct buf *err);
void fg_request_free(struct fg_request *r);
/* Name of a synthetic level ("deployment") and the attribute it groups by. */
int fg_synthetic_from_name(const char *name);
const char *fg_synthetic_attribute(enum fg_synthetic s);
const char *fg_synthetic_name(enum fg_synthetic s);

/* Runs the query and appends the answer to out: the JSON below, or with
 * another r->format the export of its tree (server/query/export.h). Returns 0, or -1
 * with a message for the client in err (e.g. a bad regular expression).
 * fetch (may be NULL) is asked for the symbols of files that have none
 * with source lines yet (server/symbols/debuginfod.h). Returns UREGEX_RC
 * (server/query/uregex.h) with the message in err when a search or mask pattern
 * reached its match, heap or time bounds. */
struct fetcher;
int flamegraph_query(struct store *st, struct symbols *sym, struct fetcher *fetch,
		     const struct fg_request *r, struct buf *out, struct buf *err);

#endif
