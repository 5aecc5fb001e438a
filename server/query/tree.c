/* tree.c - see tree.h. */
#include "tree.h"

#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "util.h"

void otree_init(struct otree *t, uint32_t root_key)
{
	memset(t, 0, sizeof(*t));
	xgrow((void **)&t->nodes, &t->cap, 1, sizeof(*t->nodes));
	t->nodes[0] = (struct tnode){ .key = root_key, .parent = UINT32_MAX };
	t->n = 1;
}

void otree_free(struct otree *t)
{
	free(t->nodes);
	hmap_free(&t->index);
	memset(t, 0, sizeof(*t));
}

struct node_key {
	const struct otree *t;
	uint32_t parent, key;
};

static bool eq_child(const void *ctx, uint32_t idx)
{
	const struct node_key *k = ctx;
	return k->t->nodes[idx].key == k->key && k->t->nodes[idx].parent == k->parent;
}

static uint32_t add_child(struct otree *t, uint32_t parent, uint32_t key)
{
	xgrow((void **)&t->nodes, &t->cap, t->n + 1, sizeof(*t->nodes));
	uint32_t idx = (uint32_t)t->n++;
	t->nodes[idx] = (struct tnode){ .key = key, .parent = parent,
					.next_sibling = t->nodes[parent].first_child };
	t->nodes[parent].first_child = idx + 1;
	return idx;
}

uint32_t otree_child(struct otree *t, uint32_t parent, uint32_t key)
{
	if (t->pruned && t->nodes[parent].key == t->other_key)
		return parent;
	if (!t->nodes[parent].indexed) {
		uint32_t seen = 0;
		for (uint32_t c = t->nodes[parent].first_child; c; c = t->nodes[c - 1].next_sibling) {
			if (t->nodes[c - 1].key == key)
				return c - 1;
			seen++;
		}
		if (t->nodes[parent].other)
			return t->nodes[parent].other - 1; /* pruned: the rest is [other] */
		if (seen < OTREE_LIST_MAX)
			return add_child(t, parent, key);
		/* Many children: index them all from now on. */
		for (uint32_t c = t->nodes[parent].first_child; c; c = t->nodes[c - 1].next_sibling)
			hmap_insert(&t->index, hash_u64((uint64_t)parent << 32 | t->nodes[c - 1].key),
				    c - 1);
		t->nodes[parent].indexed = 1;
	}
	uint64_t h = hash_u64((uint64_t)parent << 32 | key);
	struct node_key k = { t, parent, key };
	uint32_t idx;
	if (hmap_find(&t->index, h, eq_child, &k, &idx))
		return idx;
	if (t->nodes[parent].other)
		return t->nodes[parent].other - 1;
	idx = add_child(t, parent, key);
	hmap_insert(&t->index, h, idx);
	return idx;
}

struct sort_ctx {
	const struct otree *t;
	const struct display *d;
};

static int cmp_nodes(const void *a, const void *b, void *ctx)
{
	const struct sort_ctx *c = ctx;
	const struct tnode *x = &c->t->nodes[*(const uint32_t *)a];
	const struct tnode *y = &c->t->nodes[*(const uint32_t *)b];
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(display_str(c->d, display_get(c->d, x->key)->name),
		      display_str(c->d, display_get(c->d, y->key)->name));
}

static bool keep(struct otree *t, uint64_t total)
{
	if (total > t->min_total)
		return true;
	if (total == t->min_total && t->at_min_budget) {
		t->at_min_budget--;
		return true;
	}
	return false;
}

/* Every node's children sorted as written (total, largest first, then
 * name): node n's are kids[first[n] .. first[n + 1]). A node's "[other]"
 * (the sum of the children the node budget left out) is written where its
 * total sorts it among them, so every answer's children stay sorted. */
struct sorted_kids {
	uint32_t *first, *kids;
};

/* plan_write's marks. */
#define KEPT 1
#define HAS_OTHER 2

/* The total of n's children that are not written: their [other]. */
static uint64_t other_of(const struct otree *t, const uint32_t *kids, size_t nc)
{
	uint64_t other = 0;
	for (size_t i = 0; i < nc; i++)
		if (!(t->kept[kids[i]] & KEPT))
			other += t->nodes[kids[i]].total;
	return other;
}

/* The k-th largest (0-based) of v[0..n), reordering v: quickselect. */
static uint64_t kth_largest(uint64_t *v, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;
	while (lo < hi) {
		uint64_t a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi];
		uint64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
		size_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] > pivot)
				i++;
			while (v[j] < pivot)
				j--;
			if (i <= j) {
				uint64_t x = v[i];
				v[i] = v[j];
				v[j] = x;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return v[k];
	}
	return v[k];
}

/* A total's bucket, in decreasing order of totals: its bit length and the
 * 4 bits below its leading one (65 x 16 buckets, totals in a bucket
 * within 1/16 of each other). */
#define LIMIT_BUCKETS (65 * 16)

static unsigned limit_bucket(uint64_t v)
{
	if (v < 16)
		return (unsigned)v;
	unsigned bits = 64 - (unsigned)__builtin_clzll(v);
	return (bits - 4) * 16 + (unsigned)((v >> (bits - 5)) & 15);
}

/* Chooses the smallest total kept so that at most max_nodes are written:
 * the max_nodes-th largest total, found by counting totals per bucket and
 * selecting only among those of the bucket that holds it. */
static void node_limit(struct otree *t, size_t max_nodes)
{
	t->min_total = 0;
	t->at_min_budget = UINT64_MAX;
	if (t->n <= max_nodes || max_nodes == 0)
		return;
	size_t *count = xcalloc(LIMIT_BUCKETS, sizeof(size_t));
	for (size_t i = 0; i < t->n; i++)
		count[limit_bucket(t->nodes[i].total)]++;
	size_t above = 0; /* totals in buckets above b */
	unsigned b = LIMIT_BUCKETS;
	while (b-- > 0 && above + count[b] < max_nodes)
		above += count[b];
	uint64_t *v = xmalloc(count[b] * sizeof(uint64_t));
	size_t m = 0;
	for (size_t i = 0; i < t->n; i++)
		if (limit_bucket(t->nodes[i].total) == b)
			v[m++] = t->nodes[i].total;
	t->min_total = kth_largest(v, m, max_nodes - above - 1);
	for (size_t i = 0; i < m; i++)
		above += v[i] > t->min_total;
	t->at_min_budget = max_nodes - above;
	free_all(v, count);
}

uint32_t *otree_prune(struct otree *t, size_t keep_n, uint32_t other_key)
{
	size_t n = t->n;
	uint32_t *remap = xmalloc(n * sizeof(uint32_t));
	node_limit(t, keep_n);
	/* Parents come before children in the array: one pass decides. */
	struct tnode *nn = xmalloc((keep_n + n / 4 + 16) * sizeof(*nn));
	size_t cap = keep_n + n / 4 + 16, m = 0;
	uint32_t *other_of = xmalloc(n * sizeof(uint32_t)); /* new parent -> its [other] + 1 */
	for (size_t i = 0; i < n; i++) {
		const struct tnode *o = &t->nodes[i];
		other_of[i] = 0;
		if (i == 0) {
			nn[m] = *o;
			nn[m].other = 0;
			remap[0] = (uint32_t)m++;
			continue;
		}
		uint32_t np = remap[o->parent];
		bool parent_folded = nn[np].key == other_key && t->nodes[o->parent].key != other_key;
		bool kept = !parent_folded && o->key != other_key && keep(t, o->total);
		if (parent_folded || (nn[np].key == other_key)) {
			/* Inside a folded subtree: its [other] already counts it. */
			remap[i] = np;
			continue;
		}
		if (kept) {
			if (m == cap) {
				cap *= 2;
				nn = xrealloc(nn, cap * sizeof(*nn));
			}
			nn[m] = *o;
			nn[m].parent = np;
			nn[m].first_child = nn[m].next_sibling = 0;
			nn[m].indexed = 0;
			nn[m].other = 0;
			remap[i] = (uint32_t)m++;
			continue;
		}
		/* Folded: into its new parent's [other]. */
		if (!other_of[np]) {
			if (m == cap) {
				cap *= 2;
				nn = xrealloc(nn, cap * sizeof(*nn));
			}
			nn[m] = (struct tnode){ .key = other_key, .parent = np };
			nn[np].other = (uint32_t)m + 1;
			other_of[np] = (uint32_t)m++ + 1;
		}
		uint32_t on = other_of[np] - 1;
		nn[on].total += o->total;
		nn[on].self += o->total;
		remap[i] = on;
	}
	free(other_of);
	/* Child lists and the index again. */
	for (size_t i = 0; i < m; i++)
		nn[i].first_child = nn[i].next_sibling = 0, nn[i].indexed = 0;
	for (size_t i = m; i-- > 1;) {
		nn[i].next_sibling = nn[nn[i].parent].first_child;
		nn[nn[i].parent].first_child = (uint32_t)i + 1;
	}
	free(t->nodes);
	t->nodes = nn;
	t->n = m;
	t->cap = cap;
	hmap_free(&t->index);
	memset(&t->index, 0, sizeof(t->index));
	for (size_t i = 0; i < m; i++) {
		size_t kids = 0;
		for (uint32_t c = nn[i].first_child; c; c = nn[c - 1].next_sibling)
			kids++;
		if (kids > OTREE_LIST_MAX) {
			for (uint32_t c = nn[i].first_child; c; c = nn[c - 1].next_sibling)
				hmap_insert(&t->index, hash_u64((uint64_t)i << 32 | nn[c - 1].key), c - 1);
			nn[i].indexed = 1;
		}
	}
	t->other_key = other_key;
	t->pruned = true;
	return remap;
}

static void sort_kids(struct otree *t, const struct display *d, struct sorted_kids *sk)
{
	size_t n = t->n;
	sk->first = xcalloc(n + 1, sizeof(uint32_t));
	sk->kids = xmalloc((n ? n : 1) * sizeof(uint32_t));
	for (size_t i = 1; i < n; i++)
		sk->first[t->nodes[i].parent + 1]++;
	for (size_t i = 0; i < n; i++)
		sk->first[i + 1] += sk->first[i];
	uint32_t *fill = xmalloc((n ? n : 1) * sizeof(uint32_t));
	memcpy(fill, sk->first, n * sizeof(uint32_t));
	for (size_t i = 1; i < n; i++)
		sk->kids[fill[t->nodes[i].parent]++] = (uint32_t)i;
	free(fill);
	struct sort_ctx sc = { t, d };
	for (size_t i = 0; i < n; i++)
		if (sk->first[i + 1] - sk->first[i] > 1)
			qsort_r(sk->kids + sk->first[i], sk->first[i + 1] - sk->first[i], sizeof(uint32_t),
				cmp_nodes, &sc);
}

/* Walks node n (kept) as visit_node does, in the same order, so that
 * keep() decides ties at the smallest total kept the same way: marks its
 * kept children KEPT and n HAS_OTHER when it gets an "[other]" child.
 * Returns the nodes written below n, "[other]" nodes included. */
static size_t plan_node(struct otree *t, const struct sorted_kids *sk, uint32_t n, uint8_t *kept,
			int depth)
{
	size_t count = 0;
	bool other = false;
	kept[n] = KEPT;
	if (depth >= DISPLAY_MAX_DEPTH * 2)
		return 0; /* visit_node visits no children there */
	for (uint32_t i = sk->first[n]; i < sk->first[n + 1]; i++) {
		uint32_t c = sk->kids[i];
		const struct tnode *o = &t->nodes[c];
		if (!(t->pruned && o->key == t->other_key) && keep(t, o->total)) {
			count += 1 + plan_node(t, sk, c, kept, depth + 1);
		} else {
			kept[c] = 0;
			other |= o->total != 0;
		}
	}
	if (other) {
		kept[n] |= HAS_OTHER;
		count++;
	}
	return count;
}

/* Marks the nodes written when at most the k largest (by total) are kept;
 * returns how many nodes that writes, "[other]" nodes included. */
static size_t plan_write(struct otree *t, const struct sorted_kids *sk, size_t k, uint8_t *kept)
{
	node_limit(t, k);
	keep(t, t->nodes[0].total);
	return 1 + plan_node(t, sk, 0, kept, 0);
}

/* Sorts the children and marks the nodes written within max_nodes (the
 * caller frees *kept and sk's arrays). */
static uint8_t *plan(struct otree *t, const struct display *d, size_t max_nodes,
		     struct sorted_kids *sk_out)
{
	struct sorted_kids sk;
	sort_kids(t, d, &sk);
	uint8_t *kept = xcalloc(t->n, 1);
	size_t k = max_nodes && max_nodes < t->n ? max_nodes : t->n;
	if (plan_write(t, &sk, k, kept) > max_nodes && max_nodes) {
		/* The largest k whose answer fits, by bisection: one more kept
		 * node adds itself and at most one "[other]" and may take one
		 * away, so the size grows with k (ties at the smallest total can
		 * bend that; best is a k that was seen to fit, 1 always does). */
		size_t lo = 1, hi = k - 1, best = 1;
		while (lo <= hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (plan_write(t, &sk, mid, kept) <= max_nodes) {
				best = mid;
				lo = mid + 1;
			} else {
				hi = mid - 1;
			}
		}
		plan_write(t, &sk, best, kept);
	}
	*sk_out = sk;
	return kept;
}

/* Hands node n (kept) to the visitor, then its kept children and their
 * "[other]" where its total sorts it (after equal totals). */
static void visit_node(struct otree *t, uint32_t n, const struct otree_visitor *v, void *ctx,
		       int depth)
{
	const struct tnode *tn = &t->nodes[n];
	t->written++;
	v->enter(ctx, tn->key, tn->self, tn->total, tn->line);
	const struct sorted_kids *sk = t->sorted;
	size_t nc = sk->first[n + 1] - sk->first[n];
	/* Deeper than any stack can be: only a bug would get here. */
	if (nc && depth < DISPLAY_MAX_DEPTH * 2) {
		const uint32_t *kids = sk->kids + sk->first[n];
		uint64_t other = other_of(t, kids, nc);
		for (size_t i = 0; i <= nc; i++) {
			if (i < nc && !(t->kept[kids[i]] & KEPT))
				continue;
			if (other && (i == nc || t->nodes[kids[i]].total < other)) {
				t->written++;
				v->enter(ctx, OTREE_OTHER, other, other, 0);
				v->leave(ctx);
				other = 0;
			}
			if (i < nc)
				visit_node(t, kids[i], v, ctx, depth + 1);
		}
	}
	v->leave(ctx);
}

size_t otree_visit(struct otree *t, const struct display *d, size_t max_nodes,
		   const struct otree_visitor *v, void *ctx)
{
	struct sorted_kids sk;
	uint8_t *kept = plan(t, d, max_nodes, &sk);
	t->kept = kept;
	t->sorted = &sk;
	t->written = 0;
	visit_node(t, 0, v, ctx, 0);
	t->kept = NULL;
	t->sorted = NULL;
	free_all(kept, sk.first, sk.kids);
	return t->written;
}

/* otree_write's visitor: each node one JSON object, its children in its
 * "children" array. */
struct json_visit {
	struct jsonw *w;
	const struct display *d;
};

static void json_enter(void *ctx, uint32_t key, uint64_t self, uint64_t total, uint32_t line)
{
	struct json_visit *x = ctx;
	jsonw_begin_object(x->w);
	if (key == OTREE_OTHER) {
		jsonw_kv_str(x->w, "name", "[other]");
		jsonw_kv_str(x->w, "frame_type", "synthetic");
	} else {
		display_frame_json(x->w, x->d, key, line);
	}
	jsonw_kv_u64(x->w, "self", self);
	jsonw_kv_u64(x->w, "total", total);
	jsonw_key(x->w, "children");
	jsonw_begin_array(x->w);
}

static void json_leave(void *ctx)
{
	struct json_visit *x = ctx;
	jsonw_end_array(x->w);
	jsonw_end_object(x->w);
}

size_t otree_write(struct otree *t, const struct display *d, size_t max_nodes, struct jsonw *w)
{
	static const struct otree_visitor json = { json_enter, json_leave };
	struct json_visit x = { w, d };
	return otree_visit(t, d, max_nodes, &json, &x);
}
