/* perm.h - permissions and the patterns that grant them.
 *
 * A permission names one thing a request does: "resource:sub:action"
 * ("project:read", "admin:user:create", "ingest:profile:write"), 2 to
 * PERM_MAX_LEVELS colon-separated levels of [a-z0-9_-]. A role or a
 * service token holds patterns, not permissions: a pattern is 2 to
 * PERM_MAX_LEVELS levels, each of the same alphabet or a whole "*"
 * (exactly one level) or "**" (one or more levels; "a*" is invalid):
 * "project:*" grants "project:read" and "project:create"; "**:read" grants
 * "project:read" and "admin:user:read"; "**:*" and "**:**" grant all.
 *
 * perm_catalogue lists every permission ember checks (the route table
 * names one per route; tests check that each route's is in it): the
 * reference's eighteen (service:token:{create,read,revoke},
 * project:{create,read,update,delete}, admin:user:{create,read,update,
 * delete}, admin:role:{create,read,update,delete}, admin:role:assignment:set,
 * admin:audit:read, auth:local:login) and ember's own:
 * ingest:profile:write (samples: v1/v2 batches, OTLP), ingest:metrics:write,
 * ingest:symbols:write (symbols an agent uploads for its projects),
 * symbols:global:write (symbols that serve every project: the CLI with an
 * admin or symbols token), server:metrics:read (GET /metrics).
 *
 * Contract: pure functions over NUL-terminated strings, no allocation, no
 * state. A pattern or permission longer than PERM_MAX_LEN or with more than
 * PERM_MAX_LEVELS levels, an empty level, or a character outside the
 * alphabet is invalid: it matches nothing and perm_check_pattern says why.
 * Matching is linear in the input with a bounded backtrack (at most
 * PERM_MAX_LEVELS levels on each side). */
#ifndef EMBER_SERVER_AUTH_PERM_H
#define EMBER_SERVER_AUTH_PERM_H

#include <stdbool.h>

#include "buf.h"

#define PERM_MAX_LEN 128
#define PERM_MAX_LEVELS 8

/* True when pattern grants permission (both valid). */
bool perm_match(const char *pattern, const char *permission);
/* 0 for a valid pattern; -1 with the reason appended to err (when err is
 * not NULL). */
int perm_check_pattern(const char *pattern, struct buf *err);
/* True when permission is one perm_catalogue lists. */
bool perm_known(const char *permission);

/* Every permission ember checks, NULL-terminated. */
extern const char *const perm_catalogue[];

#endif
