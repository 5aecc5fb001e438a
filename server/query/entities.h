/* entities.h - the queries by label: top entities (hosts, namespaces,
 * deployments, pods, containers, executables, threads, shared objects),
 * label names and values with their share (what the filter UI offers),
 * and time series of cores per group.
 *
 * These read series totals (and per-minute totals for time series) where
 * a series lies wholly inside the range, and rows only where it does not:
 * their cost grows with series, not samples. Shared objects are the one
 * entity read from stacks: self is what stacks ending in a binary hold,
 * total what stacks passing through it hold.
 */
#ifndef EMBER_SERVER_ENTITIES_H
#define EMBER_SERVER_ENTITIES_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "scan.h"
#include "server/store/store.h"

enum ent_query { ENT_TOP, ENT_LABELS, ENT_TIMESERIES };

#define ENT_MAX_LIMIT 100000
#define ENT_MAX_BUCKETS 1440

struct ent_request {
	enum ent_query what;
	struct scope scope;
	char *attribute;      /* top/timeseries: the attribute grouped by; labels: NULL = names */
	bool shared_objects;  /* top: group by the binaries of the stacks */
	bool absolute;
	uint32_t limit;
	uint32_t num_buckets;
};

/* Parses a request body (docs/api.md). Returns 0, or -1 with a message
 * for the client in err. The project id is set by the caller. */
int ent_request_parse(struct ent_request *r, enum ent_query what, const char *body, size_t len,
		      struct buf *err);
void ent_request_free(struct ent_request *r);

/* Runs the query, appending the JSON answer to out. 0, or -1 (err set). */
int entities_query(struct store *st, const struct ent_request *r, struct buf *out,
		   struct buf *err);

#endif
