/* cel.h - the filter language of queries: a subset of CEL (cel.dev) over
 * OpenTelemetry resource attributes.
 *
 *   expr     := or
 *   or       := and ("||" and)*
 *   and      := unary ("&&" unary)*
 *   unary    := "!" unary | primary
 *   primary  := "(" expr ")" | "true" | "false"
 *             | operand ("==" | "!=") operand
 *             | operand ("<" | "<=" | ">" | ">=") operand    numeric
 *             | operand "in" list
 *             | func "(" operand "," arg ")"          e.g. startsWith(host.name, "node-")
 *             | operand "." func "(" arg ")"          e.g. host.name.startsWith("node-")
 *   func     := "matches" | "startsWith" | "endsWith" | "contains"
 *   arg      := operand, except for matches: string (a regular expression)
 *   list     := "[" (string ("," string)* ","?)? "]"  at most CEL_MAX_LIST strings
 *   operand  := attribute | string | number
 *   number   := "-"? digits ("." digits)? ([eE] [+-]? digits)?
 *   attribute:= ident ("." ident)* ("[" string "]")?     e.g. host.name, k8s.pod.label["app"]
 *   string   := "..." or '...' with \\ \" \' \n \t \r escapes
 *
 * An attribute a sample does not carry reads as the empty string, so
 * `k8s.namespace.name != "staging"` holds for processes outside
 * Kubernetes, and any operand may be an attribute or a string on either
 * side. In a dotted name, a last segment that is followed by "(" is a
 * method call, not part of the attribute: host.name.matches("x") calls
 * matches on host.name. `x in [...]` holds when x equals one of the
 * strings (an empty list holds for nothing).
 *
 * Numbers: attribute values are strings, so <, <=, >, >= (and == or !=
 * with a number literal on either side) compare numerically: both sides
 * are read as numbers (doubles; an attribute value must be spelled as a
 * number literal, whole, with an optional "+" or "-"), and the comparison
 * is false, whatever the operator, when either side is not a number at
 * run time (text, or an attribute the label set lacks). A type error known
 * at compile time fails the compile: a string literal that is not a
 * number, an attribute that always holds text (host.name,
 * process.executable.name, thread.name, ...: string_attrs in cel.c), or a
 * number where a string is expected (a function's argument, before "in").
 * == and != between two strings or attributes still compare bytes.
 *
 * matches(s, re) holds when the regular expression re (PCRE2 syntax, UTF-8)
 * finds a match anywhere in s; anchor it with ^ and $ to match all of s.
 * re must be a string literal: it is compiled with the program, and a bad
 * one fails the compile with a message naming the column of the literal.
 * Matches run within the bounds of server/query/uregex.h (match and heap limits
 * per match, a time budget per program): a match that reaches one reads
 * as false, as does every later one, and cel_check then reports it (the
 * query answers 422). startsWith, endsWith and contains compare bytes.
 *
 * A program is compiled once per query and evaluated once per label set,
 * never per sample; cel_eval does not allocate, and it reuses one match
 * block per program, so one program must not be evaluated by two threads
 * at once. Errors name the 1-based column ("query: column N: ...").
 */
#ifndef EMBER_SERVER_CEL_H
#define EMBER_SERVER_CEL_H

#include <stdbool.h>

#include "buf.h"

#define CEL_MAX_SOURCE 4096
#define CEL_MAX_DEPTH 64   /* nested parentheses and "!" */
#define CEL_MAX_LIST 1024  /* strings in one "in" list */
#define CEL_MAX_REGEX 32   /* matches() calls in one program */

struct cel_program;

/* Returns the value of attribute name (e.g. "host.name" or
 * "k8s.pod.label[app]") for the label set in ctx, or NULL. */
typedef const char *(*cel_lookup_fn)(void *ctx, const char *name);

struct cel_program *cel_compile(const char *src, struct buf *err);
bool cel_eval(const struct cel_program *p, cel_lookup_fn lookup, void *ctx);
/* 0, or UREGEX_RC with the message appended to err (may be NULL) when a
 * matches() pattern reached a bound: the results since are not to be
 * trusted. */
int cel_check(const struct cel_program *p, struct buf *err);
void cel_free(struct cel_program *p);

#endif
