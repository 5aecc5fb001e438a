/* cel.h - the filter language of queries: a subset of CEL (cel.dev) over
 * OpenTelemetry resource attributes.
 *
 *   expr     := or
 *   or       := and ("||" and)*
 *   and      := unary ("&&" unary)*
 *   unary    := "!" unary | primary
 *   primary  := "(" expr ")" | "true" | "false" | operand ("==" | "!=") operand
 *   operand  := attribute | string
 *   attribute:= ident ("." ident)* ("[" string "]")?     e.g. host.name, k8s.pod.label["app"]
 *   string   := "..." or '...' with \\ \" \' \n \t escapes
 *
 * An attribute a sample does not carry compares as the empty string, so
 * `k8s.namespace.name != "staging"` holds for processes outside
 * Kubernetes. A program is compiled once per query and evaluated once per
 * label set, never per sample. Errors name the 1-based column.
 */
#ifndef EMBER_SERVER_CEL_H
#define EMBER_SERVER_CEL_H

#include <stdbool.h>

#include "buf.h"

#define CEL_MAX_SOURCE 4096
#define CEL_MAX_DEPTH 64

struct cel_program;

/* Returns the value of attribute name (e.g. "host.name" or
 * "k8s.pod.label[app]") for the label set in ctx, or NULL. */
typedef const char *(*cel_lookup_fn)(void *ctx, const char *name);

struct cel_program *cel_compile(const char *src, struct buf *err);
bool cel_eval(const struct cel_program *p, cel_lookup_fn lookup, void *ctx);
void cel_free(struct cel_program *p);

#endif
