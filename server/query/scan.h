/* scan.h - reading what a query selects: the samples of one project and
 * event kind, in a time range, whose label set passes a CEL filter.
 *
 * Every query (flamegraph, top functions, diff, entities, time series,
 * labels, events) reads through a scan:
 *
 *   scan_open      compiles the filter and pins the parts of the range
 *   scan_begin(i)  loads part i; then scan_selected() says which of its
 *                  series the query takes (project, kind and CEL, the CEL
 *                  evaluated once per label set of the part) and
 *                  scan_rows() gives a series' rows
 *   scan_end(i)
 *   scan_stats_json writes the statistics every answer carries
 *
 * Rows returned by scan_rows() may lie outside the range: callers keep
 * those with scan_in_range() unless scan_series_inside() says the whole
 * series lies inside it.
 *
 * The scan reads through the store's read interface (store.h, "reading"),
 * whichever backend is behind it: a part here is a segment of the view.
 *
 * Ownership: the scan owns its view and compiled filter; segments and rows
 * belong to the store and are valid between scan_begin and scan_end.
 * Threading: one scan is used by one thread.
 */
#ifndef EMBER_SERVER_SCAN_H
#define EMBER_SERVER_SCAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "jsonw.h"
#include "server/store/store.h"

/* What a query selects. */
struct scope {
	char project_id[37];
	uint8_t kind;          /* enum store_event_kind */
	int64_t start_ms, end_ms;
	char *query;           /* CEL source, or NULL for everything */
	const char *what;      /* what names it in errors ("filter", "baseline"); NULL = "filter" */
};

/* Parses {"start_ts", "end_ts", "event_kind", "query"} (what names the
 * object in error messages, e.g. "filter"). The project id is set by the
 * caller. Returns 0, or -1 with a message for the client in err. */
int scope_parse(const json_t *filter, const char *what, struct scope *sc, struct buf *err);
void scope_free(struct scope *sc);
/* A request body of {"filter", "limit", "raw_names"}: the filter into sc,
 * the limit (1..max; *limit is the default) and raw_names (default as
 * given). Returns 0, or -1 with a message in err (sc freed). */
int scope_limit_parse(const char *body, size_t len, struct scope *sc, uint32_t *limit, uint32_t max,
		      bool *raw_names, struct buf *err);

struct cel_program;
/* Whether label set `labels` of segment p satisfies the CEL program. */
bool scan_labels_match(const struct cel_program *cel, const struct store_segment *p, uint32_t labels);

/* Event kinds: name ("on_cpu") and unit ("samples"). */
const char *event_kind_name(uint8_t kind);
const char *event_kind_unit(uint8_t kind);
/* What the "cores" fields of an answer count for a kind: "cores" (on_cpu:
 * samples / rate / seconds), "threads" (off_cpu: threads waiting on average,
 * ns / 1e9 / seconds), "gpus" (cuda: GPUs busy on average), "bytes" (alloc). */
const char *event_kind_rate_unit(uint8_t kind);
/* Whether absolute CPU % (a share of the hosts' logical CPUs) means anything
 * for a kind: on_cpu only. Other kinds answer relative percentages. */
bool event_kind_absolute_ok(uint8_t kind);
/* Writes the members "cpu_mode" and "cores_unit" into the object open in
 * w, for a request that asked for
 * absolute (or not): the mode the percentages are in, and a
 * "cpu_mode_note" when absolute was asked for a kind without it. */
void event_kind_mode_json(struct jsonw *w, uint8_t kind, bool absolute);

struct scan;

/* Returns NULL with a message for the client in err (a bad CEL filter). */
struct scan *scan_open(struct store *st, const struct scope *sc, struct buf *err);
void scan_close(struct scan *s);

/* The parts a query reads, numbered 0 .. scan_parts() - 1 in the order
 * it is to read them: the view's order (oldest first, the head last),
 * or after scan_carry_blocks() the order it sets. */
size_t scan_parts(const struct scan *s);
/* Loads part i. NULL when it is damaged (skipped, counted) or holds
 * nothing the query selects, unless it ends a chain of carried blocks
 * (below): then it is begun, selecting nothing, to fold them. */
const struct store_segment *scan_begin(struct scan *s, size_t i);
void scan_end(struct scan *s, size_t i);
/* Whether a later segment gives its stacks in the id space of segment i
 * (store_view_same_ids): then a query may keep segment i begun, carry its
 * stack sums over and fold them once, together with those of the next
 * such segment it begins (whose stack tree holds every id of segment i),
 * instead of once per segment. A segment begun before may be ended after
 * another was begun. Which segments share ids, and the order that reads
 * them one after another, is the store's (store_view_carry): the
 * embedded store's sealed heads and head, whose dictionaries are copies,
 * and the blocks it wrote from them (docs/internals/store.md). */
bool scan_shares_later(const struct scan *s, size_t i);
bool scan_same_dictionary(const struct scan *s, size_t i, size_t j);
/* For a query that carries sums as above (and folds every segment it
 * does not carry with that segment's own stack tree): store_view_carry,
 * which may set the order the segments are read in (what it adds up does
 * not depend on it). Call while none is begun, before the ones it sums. */
void scan_carry_blocks(struct scan *s);

/* How the stacks the segment begun gives are to be named (its stack_map,
 * stack_nown, stack_count): by map (NULL: as they are) when below nown,
 * else as node 0 (out of range); count bounds every id given (the size
 * of a per-node array). */
struct scan_ids {
	const uint32_t *map;
	uint32_t nown;
	size_t count;
};
struct scan_ids scan_stack_ids(const struct scan *s);
static inline uint32_t scan_id(const struct scan_ids *x, uint32_t stack)
{
	return stack < x->nown ? (x->map ? x->map[stack] : stack) : 0;
}
/* Whether series `series` of the part begun is selected. */
bool scan_selected(struct scan *s, uint32_t series);
/* Whether every row of a selected series lies inside the range. */
bool scan_series_inside(const struct scan *s, const struct store_series *ps);
static inline bool scan_in_range(const struct scope *sc, int64_t ts)
{
	return ts >= sc->start_ms && ts < sc->end_ms;
}
/* The rows of series `series` of the part begun (see above); -1 when they
 * cannot be read (skipped, counted). Valid until the next call. */
long scan_rows(struct scan *s, uint32_t series, const struct store_row **rows);
/* The same, reading only what holds rows at or after since_ms (older ones
 * may come too): in a block, the time slices that meet [since_ms, end). */
long scan_rows_since(struct scan *s, uint32_t series, int64_t since_ms,
		     const struct store_row **rows);
/* The stacks of series `series` of the part begun with their summed
 * values in the range (see store_view_sums); -1 when unreadable. */
long scan_sums(struct scan *s, uint32_t series, const uint32_t **stacks, const uint64_t **sums);
/* The stack totals (ascending) of everything the query selects in the
 * segment begun, read in one list instead of series by series: when there
 * is no CEL filter and the store has such a list for the project and kind
 * at one rate (hz) (store_view_rollup_sums: the embedded store's rollups,
 * by time slice where the range cuts a block). -1 when the query must
 * read the series. Valid until the next call. */
long scan_rollup_sums(struct scan *s, const uint32_t **stacks, const uint64_t **sums,
		      uint16_t *hz);
const struct scope *scan_scope(const struct scan *s);

/* Counts rows a query used (the rest were read but outside the range or
 * left out by sampling). */
void scan_count_matched(struct scan *s, uint64_t rows);
/* 0, or with the message appended to err (may be NULL): STORE_READ_RC
 * (server/store/store.h) when a read of the store failed (answer 503:
 * what was read is not the whole answer), UREGEX_RC
 * (server/query/uregex.h) when a matches() pattern of the query reached
 * its bounds: what was selected since is not to be trusted (answer 422).
 * Cheap: the loops over parts call it to stop early. */
int scan_check(const struct scan *s, struct buf *err);
/* Writes the statistics every answer carries as "query_stats", an
 * object, as one value at w's position (after its key), with the time
 * since start_ns (now_mono_ns()). */
void scan_stats_json(const struct scan *s, uint64_t start_ns, struct jsonw *w);

/* Sum of the values of the rows of series `series` of the part begun that
 * lie in the range: its total when the series lies inside it, else its
 * minute totals for the range's whole minutes and rows only for the parts
 * of minutes at the range's ends (store_view_total). -1 when those rows
 * cannot be read. */
int64_t scan_series_total(struct scan *s, uint32_t series);


/* --- the sample rate of an answer --------------------------------------- */

/* Which sample rate most of a value came at: answers report one rate, and
 * series may differ (agents configured differently). */
struct hz_vote {
	uint16_t hz[8];
	uint64_t value[8];
};

void hz_vote_add(struct hz_vote *v, uint16_t hz, uint64_t value);
uint16_t hz_vote_best(const struct hz_vote *v); /* 0 = nothing voted */

/* --- per-stack sums of one part ------------------------------------------ */

/* The values of the selected, in-range rows of one part summed per stack
 * node: v[stack] for each stack in leaves[0..n). Also the sample-rate vote
 * and the time range seen. */
struct stack_sums {
	uint64_t *v;
	size_t cap;
	uint32_t *leaves;
	size_t n, capleaves;
	uint64_t total;
	struct hz_vote hz;
};

/* Adds the part begun in scan (all its selected series) to ss. */
void stack_sums_add_part(struct stack_sums *ss, struct scan *scan, const struct store_segment *p);
/* Adds one selected series of the part begun. */
void stack_sums_add_series(struct stack_sums *ss, struct scan *scan, const struct store_segment *p,
			   uint32_t series);
/* Puts the leaves in id order. Blocks number nodes depth first, so a
 * stack walked after the one before it finds most of its nodes, and the
 * answer's entries they map to, still in the cache (docs/internals/store.md,
 * "Node order"); in arrival order each walk waits for memory. nnodes: the
 * part's node count (every leaf is below it). */
void stack_sums_order(struct stack_sums *ss, size_t nnodes);
/* Forgets the per-stack values (keeps total and the rate vote). */
void stack_sums_clear(struct stack_sums *ss);
void stack_sums_free(struct stack_sums *ss);

/* --- what the range holds, unfiltered ------------------------------------ */

/* The whole project and event kind in the scope's time range, ignoring
 * the CEL filter: the denominators of relative and absolute percentages. */
struct scope_context {
	uint64_t total;          /* every value in the range */
	int64_t min_ts, max_ts;  /* of the rows in the range (INT64_MAX/MIN: none) */
	uint64_t host_cpus;      /* logical CPUs of the hosts that sent samples */
	uint64_t hosts;
	double seconds;          /* the range, cut to the data it holds (>= 1 s) */
};

/* Reads the context with a second view (cheap: series totals). */
void scope_context_read(struct store *st, const struct scope *sc, struct scope_context *out);
/* Cores (or GPUs) a value amounts to over the context's seconds. */
double scope_cores(const struct scope_context *c, uint8_t kind, uint16_t hz, uint64_t value);
/* Writes the members sample_rate_hz, seconds, all_total, hosts and
 * host_cpus of an answer's "scope" into the object open in w. */
void scope_context_json(struct jsonw *w, const struct scope_context *c, uint16_t hz);

#endif
