/* recommend.h - recommendations without an LLM: the hot traces of a
 * project (server/query/hottraces.h) analysed by the built-in knowledge base
 * (server/query/patterns.h), one recommendation per application and kind,
 * with its lifecycle state (dismissed or active) kept in SQLite.
 *
 * Kinds: "cpu" recommendations come from on-CPU hot traces (savings in
 * cores) and from off-CPU ones that a pattern explains (lock waits:
 * savings in blocked threads); "cuda" ones from GPU time (savings in GPU
 * seconds per hour). Annual cost: saved cores x 8766 h x the price of a
 * core-hour (GPUs: of a GPU-hour). docs/recommendations.md describes the
 * answer field by field.
 *
 * Computation is continuous (recs_start): a background thread analyses
 * every project, one at a time, each step (recs_config.stale_ms). Each
 * pass over a project is a *generation*: its recommendations of every
 * kind, stored (rec_generation, rec_gen_item: id, savings, peak,
 * generated_at, status) and kept in memory, so that the API answers from
 * the last generation without reading the store. Each recommendation of
 * a generation is "new" (not in the project's previous generation),
 * "worsened" (its savings or its peak above the previous generation's by
 * more than RECS_WORSE_MARGIN) or "unchanged". A project asked for
 * before its first generation is analysed in the request. CPU is
 * bounded: one generation at a time (the thread's and the requests'),
 * a window of at most RECS_MAX_WINDOW_MS, and after a pass that took T
 * the thread waits at least T (never more than half a core).
 *
 * Lifecycle (recorded in rec_history with who and when): dismiss and
 * restore (recs_set_state), regenerate (the analysis again over the
 * generation's hot traces), refresh (the hot traces read again from the
 * store, then the analysis) and suppress/unsuppress a hot trace (an
 * accepted cost: left out of every later analysis until unsuppressed).
 *
 * Settings (recs_settings_*): the five values of recs_config, stored in
 * rec_settings, override the flags' defaults at runtime.
 *
 * State: DATA_DIR/recs.db, tables rec_state (the current state of each
 * id), rec_history (every change: who, when, what, from, to),
 * rec_generation and rec_gen_item (the last RECS_KEEP_GENERATIONS
 * generations of each project), rec_suppressed and rec_settings.
 *
 * Threading: every function may be called from any thread; the cache
 * and the settings are under a mutex, generations under another, the
 * database connection is serialised by SQLite.
 */
#ifndef EMBER_SERVER_RECOMMEND_H
#define EMBER_SERVER_RECOMMEND_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "hottraces.h"
#include "server/store/projects.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"

#define HOURS_PER_YEAR 8766.0

struct recs_config {
	double cost_per_core_hour; /* --cost-per-core-hour, default 0.04 */
	double cost_per_gpu_hour;  /* --cost-per-gpu-hour, default 2.50 */
	int64_t window_ms;         /* --recs-window, default 6 h */
	double min_share;          /* --recs-min-share percent / 100, default 0.005 */
	int64_t stale_ms;          /* --recs-step, default 60 s */
};

#define RECS_WORSE_MARGIN 0.25            /* "worsened": savings or peak up by more than 25 % */
#define RECS_MAX_WINDOW_MS (24 * 3600 * 1000LL) /* the analysed window's cap */
#define RECS_MIN_STEP_MS 1000
#define RECS_MAX_STEP_MS (24 * 3600 * 1000LL)
#define RECS_KEEP_GENERATIONS 200         /* per project, older ones are deleted */

/* A recommendation that a generation found new or worsened (and that is
 * not dismissed): what the listener (recs_set_listener) is told. */
struct recs_event {
	const char *project, *id, *kind; /* kind: "cpu" or "cuda" */
	const char *status;              /* "new" or "worsened" */
	const char *title, *application, *unit; /* unit: "cores", "gpus" or "threads" */
	double savings;                  /* in unit (GPU seconds per hour for cuda) */
	double annual_cost, peak;
};

void recs_config_default(struct recs_config *c);

struct recs;

/* Opens url (lib/metadb.h: an SQLite file, created when absent, or a
 * PostgreSQL database shared by every replica; password for PostgreSQL
 * when the URL has none) and creates the tables. On a shared database the
 * states, suppressed traces, settings and history are every replica's:
 * each replica generates from the shared store, the first to store a
 * generation's number keeps it and tells its listener (the others' of
 * the same number are not stored), and settings another replica changed
 * are read at the next pass (a step) and on every settings request.
 * Returns 0, or -1 with err set and nothing open. */
int recs_open(const char *url, const char *password, const struct recs_config *c, struct recs **out,
	      struct buf *err);
/* True when the last failed call could not reach the database (PostgreSQL
 * down: a caller answers 503; the next call reconnects). */
bool recs_unavailable(struct recs *r);
/* recs_open of dir/recs.db. */
int recs_open_dir(const char *dir, const struct recs_config *c, struct recs **out, struct buf *err);
void recs_close(struct recs *r);

/* Starts the background thread over every project of pj (a
 * generation each step); recs_close stops it. The first pass runs one
 * step after the start (a request before it is answered by a generation
 * of its own). Returns 0, or -1 with err set. */
int recs_start(struct recs *r, struct store *st, struct symbols *sym, struct projects *pj,
	       struct buf *err);
/* fn is called (on the generating thread, after the generation is
 * stored) for each recommendation it finds new or worsened. Set it
 * before recs_start. */
void recs_set_listener(struct recs *r, void (*fn)(void *ctx, const struct recs_event *ev),
		       void *ctx);

/* An analyzer beside the built-in one (the LLM mode: server/llm/llm_recs.h).
 * Called on the generating thread, gen_mu held, for at most
 * RECS_ANALYZER_MAX recommendations of a generation: those that are new or
 * worsened, those of a regenerate or refresh, and those the previous
 * generation has no "ok" answer for (an "unchanged" one keeps its
 * previous answer); never in a generation a request started (its answer
 * would wait for the model). It returns a new object, stored as the
 * recommendation's "llm" field beside the built-in analysis, which stays
 * the default and the fallback. Set it before recs_start. */
#define RECS_ANALYZER_MAX 8
typedef json_t *(*recs_analyzer_fn)(void *ctx, const char *project, const json_t *rec);
void recs_set_analyzer(struct recs *r, recs_analyzer_fn fn, void *ctx);

/* Appends {"recommendations":[...], ...} for kind "cpu", "cuda" or
 * "all" (sorted by peak, descending) to out. Returns 0, or -1 with err. */
int recs_query(struct recs *r, struct store *st, struct symbols *sym, const char *project,
	       const char *kind, int64_t now_ms, struct buf *out, struct buf *err);

/* Sets the state ("dismissed" or "active") of recommendation id (16
 * lower-case hex digits) of a project, recording who and when. Returns 0,
 * or -1 with a message for the client (a bad state or id) in err, or -2
 * (a database error) with err set. */
int recs_set_state(struct recs *r, const char *project, const char *id, const char *state,
		   const char *actor, int64_t now_ms, struct buf *err);

/* A new generation of a project now: with refresh the hot traces are
 * read again from the store, else the last generation's are analysed
 * again (read when there are none). Recorded in the history as
 * "regenerate" or "refresh" by actor. 0, or -1 with err. */
int recs_regenerate(struct recs *r, struct store *st, struct symbols *sym, const char *project,
		    bool refresh, const char *actor, int64_t now_ms, struct buf *err);
/* Suppresses (suppress) or unsuppresses hot trace trace_id (16 hex
 * digits) of a project, records it, and refreshes the project. A trace
 * can be suppressed only when the last generation has it. Returns 0, -1
 * with a message for the client (400), -3 when there is no such trace
 * (404), or -2 (a database error). */
int recs_suppress(struct recs *r, struct store *st, struct symbols *sym, const char *project,
		  const char *trace_id, bool suppress, const char *actor, int64_t now_ms,
		  struct buf *err);
/* {"suppressed":[{"trace_id","application","leaf","actor","at"}]} */
int recs_suppressed_json(struct recs *r, const char *project, struct buf *out, struct buf *err);
/* {"history":[{"at","actor","action","id","from","to"}]}, newest first,
 * at most limit (1..1000). */
int recs_history_json(struct recs *r, const char *project, int limit, struct buf *out,
		      struct buf *err);

/* {"cost_per_core_hour","cost_per_gpu_hour","window_ms","min_share",
 * "step_ms","defaults":{...the same...},"overridden":[keys]}. */
void recs_settings_json(struct recs *r, struct buf *out);
/* Sets the keys doc has (a number; null: back to the flag's default),
 * validated as a whole first; recorded in the history. Returns 0, -1
 * with a message for the client, or -2 (a database error). */
int recs_settings_put(struct recs *r, const json_t *doc, const char *actor, int64_t now_ms,
		      struct buf *err);
void recs_config_get(struct recs *r, struct recs_config *out);

/* The recommendations of one hot-trace result, appended to arr (pure: no
 * state, no cache; the tests call it). event_kind: SEK_ON_CPU,
 * SEK_OFF_CPU or SEK_CUDA. */
void recs_build(const struct ht_result *h, const char *project, const struct recs_config *c,
		json_t *arr);

#endif
