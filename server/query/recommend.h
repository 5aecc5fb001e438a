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
 * Computation is on demand: the answer for (project, kind) is cached and
 * computed again once older than recs_config.stale_ms (the step
 * interval). States are read from the database at each answer.
 *
 * State: DATA_DIR/recs.db, tables rec_state (the current state of each
 * id) and rec_history (every change: who, when, from, to).
 *
 * Threading: every function may be called from any thread; the cache is
 * under a mutex, the database connection is serialised by SQLite.
 */
#ifndef EMBER_SERVER_RECOMMEND_H
#define EMBER_SERVER_RECOMMEND_H

#include <jansson.h>
#include <stdint.h>

#include "buf.h"
#include "hottraces.h"
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

void recs_config_default(struct recs_config *c);

struct recs;

/* Opens (creates) dir/recs.db. Returns 0, or -1 with err set. */
int recs_open(const char *dir, const struct recs_config *c, struct recs **out, struct buf *err);
void recs_close(struct recs *r);

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

/* The recommendations of one hot-trace result, appended to arr (pure: no
 * state, no cache; the tests call it). event_kind: SEK_ON_CPU,
 * SEK_OFF_CPU or SEK_CUDA. */
void recs_build(const struct ht_result *h, const char *project, const struct recs_config *c,
		json_t *arr);

#endif
