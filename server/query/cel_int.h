/* cel_int.h - the compiled form of a CEL program (cel.h), shared by
 * cel.c (parser and evaluator) and cel_sql.c (the same program as SQL for
 * the fleet store). Private to server/query/. */
#ifndef EMBER_SERVER_CEL_INT_H
#define EMBER_SERVER_CEL_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "cel.h"

struct uregex;
struct uregex_matcher;

enum node_kind {
	N_TRUE,
	N_FALSE,
	N_NOT,
	N_AND,
	N_OR,
	N_EQ,
	N_NE,
	N_LT,       /* numeric: a < b, false when either side is not a number */
	N_LE,
	N_GT,
	N_GE,
	N_NUM_EQ,   /* == with a number literal on one side: numeric */
	N_NUM_NE,   /* != likewise: false when a side is not a number */
	N_ATTR,
	N_STR,
	N_NUM,      /* a number literal; text holds its spelling */
	N_IN,       /* value of a is one of items[0..nitems) (sorted) */
	N_MATCHES,  /* re finds a match in the value of a */
	N_STARTS,   /* the value of a starts with the value of b */
	N_ENDS,     /* ... ends with ... */
	N_CONTAINS, /* ... contains ... */
};

struct node {
	enum node_kind kind;
	int a, b;   /* children (indexes), -1 when unused */
	char *text; /* attribute name or string value */
	double num; /* N_NUM, and N_STR when isnum: the literal's value */
	bool isnum; /* N_NUM, or an N_STR literal that spells a number */
	char **items;
	size_t nitems;
	struct uregex *re; /* N_MATCHES; text holds the pattern */
};

struct cel_program {
	struct node *nodes;
	size_t count, cap;
	int root;
	size_t nregex;
	/* Bounds every regex of the program (uregex.h); written by cel_eval
	 * through the const program: one evaluating thread at a time. */
	struct uregex_matcher *rm;
};

#endif
