/* flamegraph.h - the flamegraph query: samples of one project, event
 * kind and time range, filtered by a CEL query, merged into a tree of
 * functions and written as the JSON of SPEC.md's flamegraph endpoint.
 *
 * Frames are symbolized here, at query time, from the symbol store: a
 * native frame becomes the chain of functions inlined at that address,
 * each its own node; names are demangled and glibc's internal aliases shown
 * by their common names (unless raw_names). Two frames with the same
 * display name, type and binary are one node; a node reports its
 * function's source file and the line most of its samples were at. Frames
 * whose name matches a frame-mask pattern are left out of their stacks.
 * Synthetic frames (executable, host, thread, ...) add grouping levels
 * above the stacks. Children are sorted by total, largest first.
 */
#ifndef EMBER_SERVER_FLAMEGRAPH_H
#define EMBER_SERVER_FLAMEGRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "store.h"
#include "symbols.h"

#define FG_MAX_MASKS 64
#define FG_MAX_SYNTHETIC 8

enum fg_synthetic {
	SYN_DEPLOYMENT, SYN_CONTAINER, SYN_HOST, SYN_EXECUTABLE, SYN_THREAD, SYN_SCRIPT,
	SYN_NAMESPACE, SYN_POD, SYN_CLUSTER, SYN_PROCESS, SYN_COUNT
};

struct fg_request {
	char project_id[37];
	int64_t start_ms, end_ms;
	uint8_t kind;          /* enum store_event_kind */
	char *query;           /* CEL, or NULL */
	char *masks[FG_MAX_MASKS];
	size_t nmasks;
	enum fg_synthetic synthetic[FG_MAX_SYNTHETIC];
	size_t nsynthetic;
	uint64_t num_samples;  /* 0 = all */
	uint32_t num_stat_buckets; /* 0 = no time series */
	bool raw_names;        /* names as compiled: no demangling, no libc common names */
	bool verbose_names;    /* demangled names with their parameter lists */
};

/* Parses the JSON request body. Returns 0, or -1 with a message for the
 * client in err. */
int fg_request_parse(struct fg_request *r, const char *body, size_t len, struct buf *err);
void fg_request_free(struct fg_request *r);
/* Name of a synthetic level ("deployment") and the attribute it groups by. */
int fg_synthetic_from_name(const char *name);
const char *fg_synthetic_attribute(enum fg_synthetic s);

/* Runs the query and appends the JSON answer to out. Returns 0, or -1
 * with a message for the client in err (e.g. a bad regular expression). */
struct fetcher;
/* fetch (may be NULL) is asked for the symbols of files that have none
 * with source lines yet (server/debuginfod.h). */
int flamegraph_query(struct store *st, struct symbols *sym, struct fetcher *fetch,
		     const struct fg_request *r, struct buf *out, struct buf *err);

/* The SPEC name of a frame type ("native", "kernel", ...). */
const char *frame_type_name(uint8_t type);

#endif
