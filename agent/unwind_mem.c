/* unwind_mem.c - see unwind_mem.h. */
#include "unwind_mem.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static void fifo_push(struct um_fifo *f, uint32_t id, uint64_t at)
{
	if (f->len == f->cap) {
		size_t ncap = f->cap ? f->cap * 2 : 64;
		struct um_freed *q = xmalloc(ncap * sizeof(*q));
		for (size_t i = 0; i < f->len; i++)
			q[i] = f->q[(f->head + i) % f->cap];
		free(f->q);
		f->q = q;
		f->head = 0;
		f->cap = ncap;
	}
	f->q[(f->head + f->len) % f->cap] = (struct um_freed){ id, at };
	f->len++;
}

/* Moves the entries of f whose quarantine is over to out. */
static void fifo_drain(struct um_fifo *f, uint64_t now, uint64_t quarantine_ns, uint32_t *out,
		       size_t *nout)
{
	while (f->len && now >= f->q[f->head].at && now - f->q[f->head].at >= quarantine_ns) {
		out[(*nout)++] = f->q[f->head].id;
		f->head = (f->head + 1) % f->cap;
		f->len--;
	}
}

void um_init(struct unwind_mem *m, uint32_t npages, uint32_t nslots, uint64_t quarantine_ns)
{
	memset(m, 0, sizeof(*m));
	m->npages = npages;
	m->nslots = nslots;
	m->quarantine_ns = quarantine_ns;
	m->free_pages = xmalloc((npages ? npages : 1) * sizeof(uint32_t));
	/* Handed out lowest first (a stack: the last pushed goes first). */
	for (uint32_t i = 0; i < npages; i++)
		m->free_pages[m->nfree++] = npages - 1 - i;
	m->slots = xcalloc(nslots ? nslots : 1, sizeof(*m->slots));
	m->free_slots = xmalloc((nslots ? nslots : 1) * sizeof(uint32_t));
	for (uint32_t i = 0; i < nslots; i++)
		m->free_slots[m->nfree_slots++] = nslots - 1 - i;
}

void um_destroy(struct unwind_mem *m)
{
	for (uint32_t i = 0; i < m->nslots; i++)
		free(m->slots[i].pages);
	free(m->slots);
	free(m->free_pages);
	free(m->free_slots);
	free(m->pending.q);
	free(m->pending_slots.q);
	memset(m, 0, sizeof(*m));
}

uint32_t um_slot_alloc(struct unwind_mem *m, uint64_t now)
{
	fifo_drain(&m->pending_slots, now, m->quarantine_ns, m->free_slots, &m->nfree_slots);
	if (!m->nfree_slots)
		return UM_NONE;
	uint32_t s = m->free_slots[--m->nfree_slots];
	struct um_slot *sl = &m->slots[s];
	uint32_t gen = sl->gen;
	uint32_t *pages = sl->pages;
	uint32_t cap = sl->cappages;
	memset(sl, 0, sizeof(*sl));
	sl->used = true;
	sl->gen = gen;
	sl->pages = pages;
	sl->cappages = cap;
	sl->last_seen = now;
	sl->unref_since = now;
	return s;
}

void um_slot_free(struct unwind_mem *m, uint32_t s, uint64_t now)
{
	struct um_slot *sl = um_slot(m, s);
	if (!sl)
		return;
	um_release(m, s, now);
	sl->used = false;
	sl->loading = false;
	sl->refs = 0;
	sl->gen++;
	fifo_push(&m->pending_slots, s, now);
}

void um_ref(struct unwind_mem *m, uint32_t s)
{
	struct um_slot *sl = um_slot(m, s);
	if (sl)
		sl->refs++;
}

void um_unref(struct unwind_mem *m, uint32_t s, uint64_t now)
{
	struct um_slot *sl = um_slot(m, s);
	if (sl && sl->refs && --sl->refs == 0)
		sl->unref_since = now;
}

uint32_t um_free_now(struct unwind_mem *m, uint64_t now)
{
	fifo_drain(&m->pending, now, m->quarantine_ns, m->free_pages, &m->nfree);
	return (uint32_t)m->nfree;
}

uint32_t um_pending(const struct unwind_mem *m)
{
	return (uint32_t)m->pending.len;
}

uint64_t um_next_free_at(const struct unwind_mem *m)
{
	return m->pending.len ? m->pending.q[m->pending.head].at + m->quarantine_ns : 0;
}

uint32_t um_take(struct unwind_mem *m, uint32_t s, uint32_t n, uint64_t now, uint32_t *out)
{
	struct um_slot *sl = um_slot(m, s);
	if (!sl)
		return 0;
	um_free_now(m, now);
	uint32_t got = (uint32_t)MIN((size_t)n, m->nfree);
	if (!got)
		return 0;
	size_t cap = sl->cappages;
	xgrow((void **)&sl->pages, &cap, (size_t)sl->npages + got, sizeof(uint32_t));
	sl->cappages = (uint32_t)cap;
	for (uint32_t i = 0; i < got; i++) {
		uint32_t p = m->free_pages[--m->nfree];
		sl->pages[sl->npages++] = p;
		if (out)
			out[i] = p;
	}
	m->pages_used += got;
	return got;
}

void um_release(struct unwind_mem *m, uint32_t s, uint64_t now)
{
	struct um_slot *sl = um_slot(m, s);
	if (!sl)
		return;
	for (uint32_t i = 0; i < sl->npages; i++)
		fifo_push(&m->pending, sl->pages[i], now);
	m->pages_used -= sl->npages;
	sl->npages = 0;
}

struct cand {
	uint32_t slot;
	bool referenced;
	uint64_t key;
};

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->referenced != y->referenced)
		return x->referenced ? 1 : -1;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

size_t um_victims(struct unwind_mem *m, uint32_t except, uint32_t need, uint64_t protect_after,
		  uint32_t *out, size_t max)
{
	uint64_t have = (uint64_t)m->nfree + m->pending.len;
	if (have >= need)
		return 0;
	struct cand *c = xmalloc((m->nslots ? m->nslots : 1) * sizeof(*c));
	size_t n = 0;
	for (uint32_t i = 0; i < m->nslots; i++) {
		const struct um_slot *sl = &m->slots[i];
		if (!sl->used || sl->loading || !sl->npages || i == except)
			continue;
		bool ref = sl->refs > 0;
		if (ref && sl->last_sampled && sl->last_sampled >= protect_after)
			continue;
		c[n++] = (struct cand){ i, ref,
			ref ? sl->last_seen : MAX(sl->last_seen, sl->unref_since) };
	}
	qsort(c, n, sizeof(*c), cmp_cand);
	size_t k = 0;
	for (size_t i = 0; i < n && k < max && have < need; i++) {
		out[k++] = c[i].slot;
		have += m->slots[c[i].slot].npages;
	}
	free(c);
	return k;
}
