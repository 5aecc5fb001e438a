/* cuda_report.c - aggregation, spans and wire encoding for libembercuda.so
 * (contract in cuda_report.h). */
#include "cuda_report.h"

#include <stdlib.h>
#include <string.h>

/* Inlined (no libxxhash.so at run time): the library is loaded into
 * programs in containers that may not have it. */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* --- the open-addressed tables (struct cuda_agg, struct cuda_pcs) --------
 *
 * Both are a struct table first (seen through a union with their typed
 * slots), whose slots begin with a struct slot_head: one sizing, one
 * reset and one free for both. */
struct slot_head {
	char *name; /* owned */
	unsigned used;
};

struct table {
	void *slots;      /* nslots (a power of two) slots, each starting with a struct slot_head */
	unsigned nslots;
	unsigned capacity; /* keys it takes */
	unsigned entries;
};

/* The typed view of a table's fields, first in each table's struct. */
#define TABLE_OF(entry_type)                          \
	union {                                       \
		struct table table;                   \
		struct {                              \
			entry_type *slots;            \
			unsigned nslots;              \
			unsigned capacity;            \
			unsigned entries;             \
		};                                    \
	}

/* The zeroed slots of an open-addressed table for capacity entries (1 to
 * max): a power of two at least twice capacity, at least 16, in *nslots;
 * NULL when capacity is out of range or memory is short. */
static void *slots_new(unsigned capacity, unsigned max, size_t slot_size, unsigned *nslots)
{
	if (capacity == 0 || capacity > max)
		return NULL;
	unsigned n = 16;
	while (n < capacity * 2)
		n <<= 1;
	*nslots = n;
	return calloc(n, slot_size);
}

/* A zeroed struct of `size` bytes that starts with a table of capacity
 * keys (1 to max) of slot_size bytes, or NULL. */
static void *table_new(size_t size, unsigned capacity, unsigned max, size_t slot_size)
{
	struct table *t = calloc(1, size);
	if (!t)
		return NULL;
	t->slots = slots_new(capacity, max, slot_size, &t->nslots);
	if (!t->slots) {
		free(t);
		return NULL;
	}
	t->capacity = capacity;
	return t;
}

/* Empties the table: its names freed, its slots zeroed. */
static void table_reset(struct table *t, size_t slot_size)
{
	for (unsigned i = 0; i < t->nslots; i++) {
		struct slot_head *h = (struct slot_head *)(void *)((char *)t->slots + (size_t)i * slot_size);
		if (h->used)
			free(h->name);
	}
	memset(t->slots, 0, (size_t)t->nslots * slot_size);
	t->entries = 0;
}

/* Frees what table_new made (NULL: nothing). */
static void table_free(struct table *t, size_t slot_size)
{
	if (!t)
		return;
	table_reset(t, slot_size);
	free(t->slots);
	free(t);
}

struct agg_entry {
	struct slot_head h;      /* first: the table's */
	struct cuda_agg_key key; /* key.name points at h.name, key.nvtx after it */
	uint64_t hash;
	uint64_t total_ns;
	uint64_t count;
};

struct cuda_agg {
	TABLE_OF(struct agg_entry); /* first: table_new's; capacity: keys before overflow */
	uint64_t overflowed;
	struct agg_entry other[CUDA_WIRE_KIND_MAX + 1]; /* overflow, per kind */
};

static uint64_t key_hash(const struct cuda_agg_key *k)
{
	struct {
		uint64_t stack_id;
		uint32_t tid, device, stream, context;
		uint64_t api;
		uint64_t stall, cubin_id, pc_offset;
		uint16_t kind;
	} fixed;
	memset(&fixed, 0, sizeof(fixed));
	fixed.stack_id = k->stack_id;
	fixed.tid = k->tid;
	fixed.device = k->device;
	fixed.stream = k->stream;
	fixed.context = k->context;
	fixed.api = (uint64_t)(uintptr_t)k->api;
	fixed.kind = k->kind;
	fixed.stall = (uint64_t)(uintptr_t)k->stall;
	fixed.cubin_id = k->stall ? k->cubin_id : 0;
	fixed.pc_offset = k->stall ? k->pc_offset : 0;
	uint64_t h = XXH3_64bits_withSeed(k->name, k->name_len, XXH3_64bits(&fixed, sizeof(fixed)));
	return k->nvtx_len ? XXH3_64bits_withSeed(k->nvtx, k->nvtx_len, h) : h;
}

static int key_equal(const struct agg_entry *e, const struct cuda_agg_key *k)
{
	return e->key.stack_id == k->stack_id && e->key.tid == k->tid && e->key.kind == k->kind &&
	       e->key.device == k->device && e->key.stream == k->stream && e->key.context == k->context &&
	       e->key.api == k->api && e->key.stall == k->stall &&
	       (!k->stall || (e->key.cubin_id == k->cubin_id && e->key.pc_offset == k->pc_offset)) &&
	       e->key.name_len == k->name_len && memcmp(e->h.name, k->name, k->name_len) == 0 &&
	       e->key.nvtx_len == k->nvtx_len && (!k->nvtx_len || memcmp(e->key.nvtx, k->nvtx, k->nvtx_len) == 0);
}

/* A copy of name's name_len bytes (not terminated), or NULL. */
static char *name_copy(const char *name, size_t name_len)
{
	char *c = malloc(name_len);
	if (c)
		memcpy(c, name, name_len);
	return c;
}

struct cuda_agg *cuda_agg_new(unsigned capacity)
{
	return table_new(sizeof(struct cuda_agg), capacity, 1u << 24, sizeof(struct agg_entry));
}

void cuda_agg_reset(struct cuda_agg *agg)
{
	if (!agg)
		return;
	table_reset(&agg->table, sizeof(*agg->slots));
	memset(agg->other, 0, sizeof(agg->other));
}

void cuda_agg_free(struct cuda_agg *agg)
{
	table_free(agg ? &agg->table : NULL, sizeof(struct agg_entry));
}

unsigned cuda_agg_entries(const struct cuda_agg *agg)
{
	return agg->entries;
}

uint64_t cuda_agg_overflowed(const struct cuda_agg *agg)
{
	return agg->overflowed;
}

static const char other_name[] = "[other]";

/* Full: the time still counts, under one entry per kind. */
static void add_other(struct cuda_agg *agg, const struct cuda_agg_key *key, uint64_t ns, uint64_t count)
{
	struct agg_entry *o = &agg->other[key->kind];
	if (!o->h.used) {
		o->h.used = 1;
		o->key = *key;
		o->key.stack_id = 0;
		o->key.tid = 0;
		o->key.device = key->device;
		o->key.stream = 0;
		o->key.context = 0;
		o->key.name = other_name;
		o->key.name_len = sizeof(other_name) - 1;
		o->key.stall = NULL; /* the detail is what overflows */
		o->key.stall_len = 0;
		o->key.cubin_id = o->key.pc_offset = 0;
		o->key.nvtx = NULL;
		o->key.nvtx_len = 0;
	}
	o->total_ns += ns;
	o->count += count;
	agg->overflowed += count;
}

/* Adds `count` activities of `ns` nanoseconds in all under key_in. */
static int add(struct cuda_agg *agg, const struct cuda_agg_key *key_in, uint64_t ns, uint64_t count)
{
	struct cuda_agg_key key = *key_in;
	if (key.kind < 1 || key.kind > CUDA_WIRE_KIND_MAX || !key.api || !key.name || key.name_len == 0)
		return -1;
	if (key.name_len > CUDA_WIRE_NAME_MAX)
		key.name_len = CUDA_WIRE_NAME_MAX;
	if (key.stall && (key.stall_len == 0 || key.stall_len > CUDA_WIRE_STALL_MAX ||
			  (key.kind != CUDA_WIRE_KIND_KERNEL && key.kind != CUDA_WIRE_KIND_GRAPH)))
		return -1;
	if (!key.stall) {
		key.stall_len = 0;
		key.cubin_id = key.pc_offset = 0;
	}
	if (key.nvtx_len > CUDA_WIRE_NVTX_BYTES_MAX || (key.nvtx_len && !key.nvtx))
		return -1;
	if (!key.nvtx)
		key.nvtx_len = 0;
	if (!key.nvtx_len)
		key.nvtx = NULL;
	uint64_t h = key_hash(&key);
	unsigned mask = agg->nslots - 1;
	for (unsigned i = (unsigned)h & mask, n = 0; n < agg->nslots; i = (i + 1) & mask, n++) {
		struct agg_entry *e = &agg->slots[i];
		if (!e->h.used) {
			if (agg->entries >= agg->capacity)
				break;
			e->h.name = malloc(key.name_len + key.nvtx_len);
			if (!e->h.name)
				return -1;
			memcpy(e->h.name, key.name, key.name_len);
			if (key.nvtx_len)
				memcpy(e->h.name + key.name_len, key.nvtx, key.nvtx_len);
			e->key = key;
			e->key.name = e->h.name;
			e->key.nvtx = key.nvtx_len ? e->h.name + key.name_len : NULL;
			e->hash = h;
			e->h.used = 1;
			e->total_ns = ns;
			e->count = count;
			agg->entries++;
			return 0;
		}
		if (e->hash == h && key_equal(e, &key)) {
			e->total_ns += ns;
			e->count += count;
			return 0;
		}
	}
	add_other(agg, &key, ns, count);
	return 1;
}

int cuda_agg_add(struct cuda_agg *agg, const struct cuda_agg_key *key, uint64_t ns)
{
	return add(agg, key, ns, 1);
}

/* Encoding positions: the AGG entries first (slot i at i, the overflow
 * entries at nslots + kind), then the PC entries (slot i at pc_base + i),
 * so that each type goes in as few messages as possible. */
static unsigned pc_base(const struct cuda_agg *agg)
{
	return agg->nslots + CUDA_WIRE_KIND_MAX + 1;
}

static unsigned slot_pos(const struct cuda_agg *agg, unsigned i)
{
	return agg->slots[i].key.stall ? pc_base(agg) + i : i;
}

int cuda_agg_carry(struct cuda_agg *dst, const struct cuda_agg *src, unsigned from)
{
	int rc = 0;
	for (unsigned i = 0; i < src->nslots; i++) {
		const struct agg_entry *e = &src->slots[i];
		if (e->h.used && slot_pos(src, i) >= from && add(dst, &e->key, e->total_ns, e->count) < 0)
			rc = -1;
	}
	for (unsigned k = 1; k <= CUDA_WIRE_KIND_MAX; k++) {
		const struct agg_entry *o = &src->other[k];
		if (o->h.used && src->nslots + k >= from)
			add_other(dst, &o->key, o->total_ns, o->count);
	}
	return rc;
}

/* --- spans -------------------------------------------------------------- */

struct span_entry {
	struct cuda_wire_span span;
	char *strings; /* owned: the api, name and NVTX path bytes, one after the other */
};

struct cuda_spans {
	struct span_entry *items;
	unsigned capacity, count;
	uint64_t refused;
};

struct cuda_spans *cuda_spans_new(unsigned capacity)
{
	if (capacity == 0 || capacity > (1u << 20))
		return NULL;
	struct cuda_spans *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->items = calloc(capacity, sizeof(*s->items));
	if (!s->items) {
		free(s);
		return NULL;
	}
	s->capacity = capacity;
	return s;
}

void cuda_spans_reset(struct cuda_spans *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < s->count; i++)
		free(s->items[i].strings);
	s->count = 0;
}

void cuda_spans_free(struct cuda_spans *s)
{
	if (!s)
		return;
	cuda_spans_reset(s);
	free(s->items);
	free(s);
}

int cuda_spans_add(struct cuda_spans *s, uint64_t start_ns, uint64_t end_ns, const struct cuda_agg_key *key)
{
	size_t api_len = key->api ? strnlen(key->api, CUDA_WIRE_API_MAX) : 0;
	size_t name_len = key->name_len > CUDA_WIRE_NAME_MAX ? CUDA_WIRE_NAME_MAX : key->name_len;
	size_t nvtx_len = key->nvtx ? key->nvtx_len : 0;
	if (name_len == 0 || !key->name || api_len == 0 || nvtx_len > CUDA_WIRE_NVTX_BYTES_MAX)
		return -1;
	if (s->count >= s->capacity) {
		s->refused++;
		return 1;
	}
	char *copy = malloc(api_len + name_len + nvtx_len);
	if (!copy)
		return -1;
	memcpy(copy, key->api, api_len);
	memcpy(copy + api_len, key->name, name_len);
	if (nvtx_len)
		memcpy(copy + api_len + name_len, key->nvtx, nvtx_len);
	struct span_entry *e = &s->items[s->count++];
	e->span = (struct cuda_wire_span){
		.start_ns = start_ns,
		.end_ns = end_ns,
		.stack_id = key->stack_id,
		.tid = key->tid,
		.kind = key->kind,
		.name_len = (uint16_t)name_len,
		.device = key->device,
		.stream = key->stream,
		.context = key->context,
		.api_len = (uint16_t)api_len,
		.nvtx_len = (uint16_t)nvtx_len,
	};
	e->strings = copy;
	return 0;
}

unsigned cuda_spans_count(const struct cuda_spans *s)
{
	return s->count;
}

uint64_t cuda_spans_refused(const struct cuda_spans *s)
{
	return s->refused;
}

/* --- encoding ------------------------------------------------------------ */

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

size_t cuda_msg_single(void *buf, enum cuda_wire_type type, const void *body, size_t body_len)
{
	struct cuda_wire_hdr h = {
		.magic = CUDA_WIRE_MAGIC,
		.version = CUDA_WIRE_VERSION,
		.type = (uint16_t)type,
		.length = (uint32_t)(sizeof(h) + body_len),
		.count = 1,
	};
	memcpy(buf, &h, sizeof(h));
	memcpy((char *)buf + sizeof(h), body, body_len);
	return sizeof(h) + body_len;
}

/* One datagram being filled. */
struct builder {
	unsigned char buf[CUDA_WIRE_MAX_MSG];
	size_t len;
	uint32_t count;
	uint16_t type;
	cuda_emit_fn emit;
	void *ctx;
	int sent;
	/* AGG positions (slot index; nslots + kind for the overflow
	 * entries): of the entry being added, of the last one in buf, and
	 * the first one not emitted yet. */
	unsigned pos, last, next;
};

static int builder_flush(struct builder *b)
{
	if (b->count == 0)
		return 0;
	struct cuda_wire_hdr h = {
		.magic = CUDA_WIRE_MAGIC,
		.version = CUDA_WIRE_VERSION,
		.type = b->type,
		.length = (uint32_t)b->len,
		.count = b->count,
	};
	memcpy(b->buf, &h, sizeof(h));
	int rc = b->emit(b->buf, b->len, b->ctx);
	b->len = sizeof(h);
	b->count = 0;
	if (rc < 0)
		return -1;
	b->sent++;
	b->next = b->last + 1;
	return 0;
}

/* Appends fixed part + up to four strings (l3, l4 may be 0), padded, to a
 * message of `type` (the message being filled is sent first when it is of
 * another type). */
static int builder_add(struct builder *b, uint16_t type, const void *fixed, size_t fixed_len, const char *s1,
		       size_t l1, const char *s2, size_t l2, const char *s3, size_t l3, const char *s4, size_t l4)
{
	if (b->type != type) {
		if (builder_flush(b) < 0)
			return -1;
		b->type = type;
	}
	size_t used = fixed_len + l1 + l2 + l3 + l4, need = pad8(used);
	if (b->len + need > sizeof(b->buf) && builder_flush(b) < 0)
		return -1;
	unsigned char *p = b->buf + b->len;
	memcpy(p, fixed, fixed_len);
	memcpy(p + fixed_len, s1, l1);
	memcpy(p + fixed_len + l1, s2, l2);
	if (l3)
		memcpy(p + fixed_len + l1 + l2, s3, l3);
	if (l4)
		memcpy(p + fixed_len + l1 + l2 + l3, s4, l4);
	memset(p + used, 0, need - used);
	b->len += need;
	b->count++;
	b->last = b->pos;
	return 0;
}

static int encode_agg_entry(struct builder *b, const struct agg_entry *e)
{
	size_t api_len = strnlen(e->key.api, CUDA_WIRE_API_MAX);
	if (api_len == 0)
		return 0;
	if (e->key.stall) {
		struct cuda_wire_pc w = {
			.stack_id = e->key.stack_id,
			.total_ns = e->total_ns,
			.count = e->count,
			.tid = e->key.tid,
			.kind = e->key.kind,
			.api_len = (uint16_t)api_len,
			.device = e->key.device,
			.stream = e->key.stream,
			.context = e->key.context,
			.name_len = (uint16_t)e->key.name_len,
			.stall_len = (uint16_t)e->key.stall_len,
			.cubin_id = e->key.cubin_id,
			.pc_offset = e->key.pc_offset,
			.nvtx_len = (uint16_t)e->key.nvtx_len,
		};
		return builder_add(b, CUDA_WIRE_PC, &w, sizeof(w), e->key.api, api_len, e->key.name,
				   e->key.name_len, e->key.stall, e->key.stall_len, e->key.nvtx, e->key.nvtx_len);
	}
	if (b->type != CUDA_WIRE_AGG) {
		if (builder_flush(b) < 0)
			return -1;
		b->type = CUDA_WIRE_AGG;
	}
	struct cuda_wire_agg w = {
		.stack_id = e->key.stack_id,
		.total_ns = e->total_ns,
		.count = e->count,
		.tid = e->key.tid,
		.kind = e->key.kind,
		.api_len = (uint16_t)api_len,
		.device = e->key.device,
		.stream = e->key.stream,
		.context = e->key.context,
		.name_len = (uint16_t)e->key.name_len,
		.nvtx_len = (uint16_t)e->key.nvtx_len,
	};
	return builder_add(b, CUDA_WIRE_AGG, &w, sizeof(w), e->key.api, api_len, e->key.name, e->key.name_len,
			   e->key.nvtx, e->key.nvtx_len, NULL, 0);
}

int cuda_agg_encode(const struct cuda_agg *agg, cuda_emit_fn emit, void *ctx, unsigned from, unsigned *next)
{
	struct builder *b = malloc(sizeof(*b));
	if (!b)
		return -1;
	b->len = sizeof(struct cuda_wire_hdr);
	b->count = 0;
	b->type = CUDA_WIRE_AGG;
	b->emit = emit;
	b->ctx = ctx;
	b->sent = 0;
	b->next = from;
	int rc = 0;
	for (unsigned i = from; rc == 0 && i < agg->nslots; i++) {
		b->pos = i;
		if (agg->slots[i].h.used && !agg->slots[i].key.stall)
			rc = encode_agg_entry(b, &agg->slots[i]);
	}
	for (unsigned k = 1; rc == 0 && k <= CUDA_WIRE_KIND_MAX; k++) {
		b->pos = agg->nslots + k;
		if (agg->other[k].h.used && b->pos >= from)
			rc = encode_agg_entry(b, &agg->other[k]);
	}
	for (unsigned i = 0; rc == 0 && i < agg->nslots; i++) {
		b->pos = pc_base(agg) + i;
		if (agg->slots[i].h.used && agg->slots[i].key.stall && b->pos >= from)
			rc = encode_agg_entry(b, &agg->slots[i]);
	}
	if (rc == 0)
		rc = builder_flush(b);
	if (rc == 0)
		b->next = pc_base(agg) + agg->nslots;
	if (next)
		*next = b->next;
	int sent = b->sent;
	free(b);
	return rc < 0 ? -1 : sent;
}

int cuda_spans_encode(const struct cuda_spans *s, cuda_emit_fn emit, void *ctx)
{
	struct builder *b = malloc(sizeof(*b));
	if (!b)
		return -1;
	b->len = sizeof(struct cuda_wire_hdr);
	b->count = 0;
	b->type = CUDA_WIRE_SPAN;
	b->emit = emit;
	b->ctx = ctx;
	b->sent = 0;
	int rc = 0;
	for (unsigned i = 0; rc == 0 && i < s->count; i++) {
		const struct span_entry *e = &s->items[i];
		rc = builder_add(b, CUDA_WIRE_SPAN, &e->span, sizeof(e->span), e->strings, e->span.api_len,
				 e->strings + e->span.api_len, e->span.name_len,
				 e->strings + e->span.api_len + e->span.name_len, e->span.nvtx_len, NULL, 0);
	}
	if (rc == 0)
		rc = builder_flush(b);
	int sent = b->sent;
	free(b);
	return rc < 0 ? -1 : sent;
}

/* --- PC samples -------------------------------------------------------------- */

struct pc_entry {
	struct slot_head h; /* first: the table's */
	size_t name_len;
	uint64_t name_hash, hash;
	uint64_t cubin_id, pc_offset;
	const char *stall;
	uint64_t samples;
	unsigned taken; /* its kernel had time in the report */
};

struct cuda_pcs {
	TABLE_OF(struct pc_entry); /* first: table_new's */
	uint64_t refused;
};

struct cuda_pcs *cuda_pcs_new(unsigned capacity)
{
	return table_new(sizeof(struct cuda_pcs), capacity, 1u << 20, sizeof(struct pc_entry));
}

void cuda_pcs_reset(struct cuda_pcs *pcs)
{
	if (pcs)
		table_reset(&pcs->table, sizeof(*pcs->slots));
}

void cuda_pcs_free(struct cuda_pcs *pcs)
{
	table_free(pcs ? &pcs->table : NULL, sizeof(struct pc_entry));
}

unsigned cuda_pcs_entries(const struct cuda_pcs *pcs)
{
	return pcs->entries;
}

uint64_t cuda_pcs_refused(const struct cuda_pcs *pcs)
{
	return pcs->refused;
}

int cuda_pcs_add(struct cuda_pcs *pcs, const char *name, size_t name_len, uint64_t cubin_id, uint64_t pc_offset,
		 const char *stall, uint64_t samples)
{
	if (!name || name_len == 0 || !stall || samples == 0)
		return -1;
	size_t stall_len = strnlen(stall, CUDA_WIRE_STALL_MAX + 1);
	if (stall_len == 0 || stall_len > CUDA_WIRE_STALL_MAX)
		return -1;
	if (name_len > CUDA_WIRE_NAME_MAX)
		name_len = CUDA_WIRE_NAME_MAX;
	uint64_t nh = XXH3_64bits(name, name_len);
	uint64_t fixed[3] = { cubin_id, pc_offset, (uint64_t)(uintptr_t)stall };
	uint64_t h = XXH3_64bits_withSeed(fixed, sizeof(fixed), nh);
	unsigned mask = pcs->nslots - 1;
	for (unsigned i = (unsigned)h & mask, n = 0; n < pcs->nslots; i = (i + 1) & mask, n++) {
		struct pc_entry *e = &pcs->slots[i];
		if (!e->h.used) {
			if (pcs->entries >= pcs->capacity)
				break;
			e->h.name = name_copy(name, name_len);
			if (!e->h.name)
				return -1;
			e->name_len = name_len;
			e->name_hash = nh;
			e->hash = h;
			e->cubin_id = cubin_id;
			e->pc_offset = pc_offset;
			e->stall = stall;
			e->samples = samples;
			e->h.used = 1;
			pcs->entries++;
			return 0;
		}
		if (e->hash == h && e->cubin_id == cubin_id && e->pc_offset == pc_offset && e->stall == stall &&
		    e->name_len == name_len && memcmp(e->h.name, name, name_len) == 0) {
			e->samples += samples;
			return 0;
		}
	}
	pcs->refused += samples;
	return 1;
}

struct split_rem {
	unsigned __int128 rem;
	size_t i;
};

static int cmp_rem(const void *a, const void *b)
{
	const struct split_rem *x = a, *y = b;
	if (x->rem != y->rem)
		return x->rem > y->rem ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

int cuda_split(uint64_t total, const uint64_t *weights, size_t n, uint64_t *parts)
{
	if (n == 0)
		return -1;
	unsigned __int128 sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += weights[i];
	if (sum == 0)
		return -1;
	uint64_t given = 0;
	for (size_t i = 0; i < n; i++) {
		parts[i] = (uint64_t)((unsigned __int128)total * weights[i] / sum);
		given += parts[i];
	}
	uint64_t left = total - given; /* < n */
	if (left == 0)
		return 0;
	/* One unit each to the largest remainders, the lower index first:
	 * sorted, O(n log n). */
	struct split_rem *r = malloc(n * sizeof(*r));
	if (!r)
		return -1;
	for (size_t i = 0; i < n; i++) {
		r[i].rem = (unsigned __int128)total * weights[i] % sum;
		r[i].i = i;
	}
	qsort(r, n, sizeof(*r), cmp_rem);
	for (size_t k = 0; k < left; k++)
		parts[r[k].i]++;
	free(r);
	return 0;
}

/* By name hash, then samples (most first), then offset: a name's entries
 * are together, its busiest first. */
static int cmp_pc_name(const void *a, const void *b)
{
	const struct pc_entry *x = *(const struct pc_entry *const *)a, *y = *(const struct pc_entry *const *)b;
	if (x->name_hash != y->name_hash)
		return x->name_hash < y->name_hash ? -1 : 1;
	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	if (x->pc_offset != y->pc_offset)
		return x->pc_offset < y->pc_offset ? -1 : 1;
	return x->stall < y->stall ? -1 : x->stall > y->stall;
}

/* The used entries of a cuda_pcs in cmp_pc_name's order, and for each
 * run of one name hash (at its first position): where it ends, its
 * samples, and whether every entry in it has the same name (two names
 * with one 64-bit hash: the run is walked entry by entry). */
struct pc_index {
	struct pc_entry **e;
	size_t n;
	size_t *run_end;
	uint64_t *run_sum;
	unsigned char *run_same, *run_taken;
};

/* The samples of one kernel entry's name, split over its time into dst:
 * one part for each of the name's CUDA_PC_PARTS_MAX busiest (offset,
 * stall) keys, and one for the rest of its samples, which stays on the
 * kernel. */
static int split_entry(struct cuda_agg *dst, const struct agg_entry *e, struct pc_index *x, uint64_t nh)
{
	size_t lo = 0, hi = x->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->e[mid]->name_hash < nh)
			lo = mid + 1;
		else
			hi = mid;
	}
	struct pc_entry *which[CUDA_PC_PARTS_MAX];
	uint64_t w[CUDA_PC_PARTS_MAX + 1], parts[CUDA_PC_PARTS_MAX + 1];
	size_t n = 0;
	uint64_t rest = 0;
	if (lo < x->n && x->e[lo]->name_hash == nh && x->run_same[lo]) {
		/* one name in the run: its first entries are the busiest */
		struct pc_entry *p = x->e[lo];
		if (p->name_len != e->key.name_len || memcmp(p->h.name, e->key.name, p->name_len) != 0)
			return add(dst, &e->key, e->total_ns, e->count) < 0 ? -1 : 0;
		uint64_t kept = 0;
		for (size_t j = lo; j < x->run_end[lo] && n < CUDA_PC_PARTS_MAX; j++) {
			which[n] = x->e[j];
			w[n++] = x->e[j]->samples;
			kept += x->e[j]->samples;
		}
		rest = x->run_sum[lo] - kept;
		if (!x->run_taken[lo]) {
			x->run_taken[lo] = 1;
			for (size_t j = lo; j < x->run_end[lo]; j++)
				x->e[j]->taken = 1;
		}
	} else {
		for (size_t j = lo; j < x->n && x->e[j]->name_hash == nh; j++) {
			struct pc_entry *p = x->e[j];
			if (p->name_len != e->key.name_len || memcmp(p->h.name, e->key.name, p->name_len) != 0)
				continue;
			p->taken = 1;
			if (n < CUDA_PC_PARTS_MAX) {
				which[n] = p;
				w[n++] = p->samples;
			} else {
				rest += p->samples;
			}
		}
	}
	if (n == 0)
		return add(dst, &e->key, e->total_ns, e->count) < 0 ? -1 : 0;
	w[n] = rest;
	if (cuda_split(e->total_ns, w, n + 1, parts) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		struct cuda_agg_key k = e->key;
		k.stall = which[i]->stall;
		k.stall_len = strnlen(k.stall, CUDA_WIRE_STALL_MAX);
		k.cubin_id = which[i]->cubin_id;
		k.pc_offset = which[i]->pc_offset;
		if (add(dst, &k, parts[i], which[i]->samples) < 0)
			rc = -1;
	}
	if (rest && add(dst, &e->key, parts[n], e->count) < 0)
		rc = -1;
	return rc;
}

static void pc_index_free(struct pc_index *x)
{
	free(x->e);
	free(x->run_end);
	free(x->run_sum);
	free(x->run_same);
	free(x->run_taken);
}

static int pc_index_build(struct pc_index *x, struct cuda_pcs *pcs)
{
	memset(x, 0, sizeof(*x));
	size_t cap = pcs->entries ? pcs->entries : 1;
	x->e = malloc(cap * sizeof(*x->e));
	x->run_end = malloc(cap * sizeof(*x->run_end));
	x->run_sum = malloc(cap * sizeof(*x->run_sum));
	x->run_same = malloc(cap);
	x->run_taken = calloc(cap, 1);
	if (!x->e || !x->run_end || !x->run_sum || !x->run_same || !x->run_taken) {
		pc_index_free(x);
		return -1;
	}
	for (unsigned i = 0; i < pcs->nslots; i++)
		if (pcs->slots[i].h.used)
			x->e[x->n++] = &pcs->slots[i];
	qsort(x->e, x->n, sizeof(*x->e), cmp_pc_name);
	for (size_t lo = 0, end; lo < x->n; lo = end) {
		uint64_t sum = 0;
		unsigned char same = 1;
		for (end = lo; end < x->n && x->e[end]->name_hash == x->e[lo]->name_hash; end++) {
			sum += x->e[end]->samples;
			same &= x->e[end]->name_len == x->e[lo]->name_len &&
				memcmp(x->e[end]->h.name, x->e[lo]->h.name, x->e[lo]->name_len) == 0;
		}
		x->run_end[lo] = end;
		x->run_sum[lo] = sum;
		x->run_same[lo] = same;
	}
	return 0;
}

int cuda_agg_apply_pcs(struct cuda_agg *dst, const struct cuda_agg *src, struct cuda_pcs *pcs, struct cuda_pcs *keep)
{
	int rc = 0;
	struct pc_index x;
	if (pc_index_build(&x, pcs) < 0)
		return -1;
	for (unsigned i = 0; i < src->nslots + CUDA_WIRE_KIND_MAX; i++) {
		const struct agg_entry *e = i < src->nslots ? &src->slots[i] : &src->other[i - src->nslots + 1];
		if (!e->h.used)
			continue;
		if (i < src->nslots && (e->key.kind == CUDA_WIRE_KIND_KERNEL || e->key.kind == CUDA_WIRE_KIND_GRAPH) &&
		    !e->key.stall && pcs->entries > 0) {
			if (split_entry(dst, e, &x, XXH3_64bits(e->key.name, e->key.name_len)) < 0)
				rc = -1;
		} else if (i < src->nslots) {
			if (add(dst, &e->key, e->total_ns, e->count) < 0)
				rc = -1;
		} else {
			add_other(dst, &e->key, e->total_ns, e->count);
		}
	}
	for (unsigned i = 0; keep && i < pcs->nslots; i++) {
		const struct pc_entry *p = &pcs->slots[i];
		if (p->h.used && !p->taken &&
		    cuda_pcs_add(keep, p->h.name, p->name_len, p->cubin_id, p->pc_offset, p->stall, p->samples) < 0)
			rc = -1;
	}
	pc_index_free(&x);
	cuda_pcs_reset(pcs);
	return rc;
}
