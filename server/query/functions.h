/* functions.h - the queries by function: top functions, the sandwich
 * view of one function (its callers and callees), and the diff of two
 * scopes (baseline and comparison), function by function.
 *
 * A function is a display key (server/query/display.h): a name, frame type and
 * binary. Its self value is what stacks ending in it hold; its total is
 * what stacks containing it hold, counted once per stack however often
 * recursion repeats it. Values come with cores (value / sample rate /
 * seconds for on-CPU; nanoseconds / 1e9 / seconds for off-CPU and GPU
 * time) and percentages in two modes: relative (of every value of the
 * project in the time range, filter or not) and absolute (of the logical
 * CPUs of the hosts that sent samples, as htop shows).
 *
 * Requests are JSON (docs/api.md); every answer carries query_stats.
 */
#ifndef EMBER_SERVER_FUNCTIONS_H
#define EMBER_SERVER_FUNCTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "scan.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"

#define FN_MAX_MASKS 64
#define FN_DEFAULT_LIMIT 100
#define FN_MAX_LIMIT 100000

enum fn_query { FN_TOP, FN_SANDWICH, FN_DIFF };

struct fn_request {
	enum fn_query what;
	struct scope scope;    /* top, sandwich; the comparison of a diff */
	struct scope baseline; /* diff */
	char *masks[FN_MAX_MASKS];
	size_t nmasks;
	char *search;          /* regex: only functions whose name matches */
	uint32_t frame_types;  /* bit 1 << SFT_x: only functions of these types; 0 = any */
	char *function;        /* sandwich: the function's display name */
	char *binary;          /* sandwich: its binary, or NULL for any */
	bool sort_total;       /* by total instead of self */
	bool absolute;         /* cpu_mode "absolute" */
	bool raw_names, verbose_names;
	uint32_t limit;
	uint32_t max_nodes;    /* sandwich trees */
};

/* Parses a request body. The project id of every scope is set by the
 * caller (fn_request_set_project). Returns 0, or -1 with a message for the
 * client in err. */
int fn_request_parse(struct fn_request *r, enum fn_query what, const char *body, size_t len,
		     struct buf *err);
void fn_request_set_project(struct fn_request *r, const char *project_id);
void fn_request_free(struct fn_request *r);

struct fetcher;
/* Runs the query and appends the JSON answer to out. Returns 0, or -1
 * with a message for the client in err. Returns UREGEX_RC
 * (server/query/uregex.h) with the message in err when a search or mask pattern
 * reached its match, heap or time bounds. */
int functions_query(struct store *st, struct symbols *sym, struct fetcher *fetch,
		    const struct fn_request *r, struct buf *out, struct buf *err);

#endif
