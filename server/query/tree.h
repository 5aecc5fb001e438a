/* tree.h - the trees queries answer with (flamegraphs, the callers and
 * callees of a sandwich view): nodes named by display keys
 * (server/query/display.h) with self and total values, written as the JSON of
 * SPEC.md's flamegraph answer.
 *
 * Children are written sorted by total, largest first (then by name).
 * When a tree has more nodes than asked, the smallest are folded into
 * one "[other]" node per parent, within the number asked: a parent's
 * total is never below a child's, so the nodes kept hang together from
 * the root, and every total stays exact.
 *
 * Ownership: the tree owns its nodes. Node 0 is the root.
 */
#ifndef EMBER_SERVER_TREE_H
#define EMBER_SERVER_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "display.h"
#include "hmap.h"
#include "jsonw.h"

struct tnode {
	uint32_t key;
	uint32_t parent;                    /* UINT32_MAX for the root */
	uint32_t first_child, next_sibling; /* node index + 1, 0 = none */
	uint64_t self, total;
	uint32_t line;  /* the line most of the value is at (majority vote) */
	uint32_t other : 31; /* its "[other]" child + 1 once children were pruned */
	uint32_t indexed : 1; /* its children are in the hash index (many children) */
	uint64_t votes;
};

/* A node's children are found by walking its child list while it has at
 * most this many; beyond, by a hash index of (parent, key). */
#define OTREE_LIST_MAX 16

struct sorted_kids;

struct otree {
	struct tnode *nodes;
	size_t n, cap;
	uint32_t other_key; /* nodes with this key swallow their descendants */
	bool pruned;
	struct hmap index; /* children of nodes with many */
	/* writing */
	uint64_t min_total, at_min_budget;
	uint8_t *kept; /* per node while writing: KEPT, HAS_OTHER (tree.c) */
	const struct sorted_kids *sorted; /* while writing: children in order (tree.c) */
	size_t written;
};

void otree_init(struct otree *t, uint32_t root_key);
void otree_free(struct otree *t);
/* The child of parent with display key `key`, created when new. */
uint32_t otree_child(struct otree *t, uint32_t parent, uint32_t key);
/* Weighted majority vote for the node's line: after all votes, the line
 * holding more than half of the node's value whenever one does
 * (Boyer-Moore, weighted; inline: once per node mapped by a query). */
static inline void otree_vote(struct otree *t, uint32_t node, uint32_t line, uint64_t w)
{
	struct tnode *n = &t->nodes[node];
	if (!line)
		return;
	if (n->line == line) {
		n->votes += w;
	} else if (n->votes >= w) {
		n->votes -= w;
	} else {
		n->line = line;
		n->votes = w - n->votes;
	}
}
/* Bounds the memory of a tree being built: keeps the `keep` nodes with
 * the largest totals (a connected tree from the root) and folds every
 * other node into one node named by other_key per parent. From then on,
 * a child not found under a parent with an "[other]" child is that
 * "[other]", and a child asked of an "[other]" is itself, so later values
 * of folded paths flow into it: every total stays exact; only which nodes
 * are shown may differ from building everything. Returns remap (owned by
 * the caller, old node count entries): each old node's new id, for folded
 * nodes the "[other]" that took them. */
uint32_t *otree_prune(struct otree *t, size_t keep, uint32_t other_key);
/* Writes the tree from the root, as one JSON value at w's position: at most max_nodes nodes (0: all), the
 * "[other]" nodes included (max_nodes >= 2 whenever the root has
 * children). The nodes kept are those with the largest totals, as many as
 * fit once every parent that lost children has one "[other]" child with
 * their total, so every parent's total is its self plus its children's.
 * Returns the number of nodes written, "[other]" nodes included. */
size_t otree_write(struct otree *t, const struct display *d, size_t max_nodes, struct jsonw *w);

/* The nodes otree_write writes, in the same order and with the same
 * values, handed to a visitor instead (server/query/export.h writes them in
 * other formats): enter for each node, then its children, then leave.
 * An "[other]" node made while writing (the children left out, summed)
 * has key OTREE_OTHER and line 0. Returns the number of nodes visited. */
#define OTREE_OTHER UINT32_MAX
struct otree_visitor {
	void (*enter)(void *ctx, uint32_t key, uint64_t self, uint64_t total, uint32_t line);
	void (*leave)(void *ctx);
};
size_t otree_visit(struct otree *t, const struct display *d, size_t max_nodes,
		   const struct otree_visitor *v, void *ctx);

#endif
