/* patterns.h - the built-in analyzer's knowledge base: known performance
 * patterns, each a rule over one hot trace (server/query/hottraces.h), with
 * what it means, how to fix it and what fixing it typically saves.
 * docs/recommendations.md lists every pattern.
 *
 * A rule looks at the frames near the leaf of the trace (where its time
 * is spent: the "anchor" must be within `depth` frames of the leaf),
 * optionally at a caller above the anchor, at frame types and binaries,
 * and at the event kind. A pattern speaks for an application when the
 * traces it claims there hold its min_share of the project's time
 * together (recommend.c).
 * The patterns are tried in table order, most specific first; a trace
 * is claimed by the first that matches (so no time is counted by two
 * patterns), and the others that also match are named as alternatives.
 *
 * Savings: the trace's measured cores (or GPUs, or waiting threads) times
 * the fraction of that time the pattern's fix typically removes
 * (pattern.removes, stated per pattern in the docs).
 *
 * The table is data, server/query/patterns.json (embedded in the binary,
 * every field checked when it is read: the same names as struct pattern;
 * "kinds" and "*_types" as lists of event kind and frame type names). It
 * is read and its regular expressions (PCRE2) compiled once, on first
 * use, and only read after that, so any thread may call pat_match.
 */
#ifndef EMBER_SERVER_PATTERNS_H
#define EMBER_SERVER_PATTERNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hottraces.h"

#define PAT_MAX_ACTIONS 4

struct pattern {
	const char *id;        /* stable, e.g. "regex-compile" */
	const char *title;
	const char *category;  /* "allocation", "compression", "cuda", ... */
	unsigned kinds;        /* bits 1 << SEK_x it applies to */
	/* The rule. */
	const char *anchor;    /* PCRE2 on a frame's name */
	unsigned anchor_types; /* bits 1 << SFT_x the anchor may have; 0 = any */
	unsigned depth;        /* the anchor is within this many frames of the leaf (1 = the leaf) */
	const char *caller;    /* PCRE2: a frame above the anchor must match; NULL = none needed */
	unsigned caller_types; /* bits 1 << SFT_x for the caller; 0 = any */
	const char *exclude;   /* PCRE2: no frame of the trace may match; NULL = none */
	const char *binary;    /* PCRE2 on the anchor's binary or source file; NULL = any */
	double min_share;      /* of the project's time the traces it claims in an application
				* must hold together for it to speak (server/query/recommend.c) */
	/* What it says. */
	double removes;        /* fraction of the trace's time its fix typically removes */
	const char *explanation;
	const char *actions[PAT_MAX_ACTIONS]; /* ranked; NULL-terminated when fewer */
};

/* The table, in order (read on first use); *n its length (0 when
 * patterns.json could not be read: pat_selfcheck says so). */
const struct pattern *pat_table(size_t *n);

struct pat_match {
	const struct pattern *p;
	size_t anchor;         /* index of the frame that matched */
	size_t caller;         /* index of the caller that matched, or SIZE_MAX */
};

/* Whether pattern p matches trace t of event kind kind; fills m. */
bool pat_match_one(const struct pattern *p, uint8_t kind, const struct ht_trace *t,
		   struct pat_match *m);
/* The first pattern of the table matching t (the one that claims it);
 * false when none does. Also counts the others that match in *also (may
 * be NULL) and writes up to nalso of them into alsov. */
bool pat_match(uint8_t kind, const struct ht_trace *t, struct pat_match *m,
	       const struct pattern **alsov, size_t nalso, size_t *also);
/* The pattern of an id, or NULL. */
const struct pattern *pat_find(const char *id);
/* 0 when every pattern's expressions compile (a test checks it). */
int pat_selfcheck(void);

#endif
