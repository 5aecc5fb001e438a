/* strtab.c - see strtab.h. */
#include "strtab.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static bool eq_key(const void *ctx, uint32_t idx)
{
	const struct strtab *t = ((const struct hmap_span_key *)ctx)->owner;
	const char *run = t->bytes.data ? t->bytes.data + t->offsets[idx] : NULL; /* only "" so far: none */
	return hmap_span_is(ctx, run, t->lengths[idx], 1);
}

void strtab_init(struct strtab *t)
{
	memset(t, 0, sizeof(*t));
	strtab_intern(t, "", 0);
}

void strtab_free(struct strtab *t)
{
	buf_free(&t->bytes);
	free_all(t->offsets, t->lengths);
	hmap_free(&t->index);
	memset(t, 0, sizeof(*t));
}

void strtab_copy(struct strtab *dst, const struct strtab *src)
{
	memset(dst, 0, sizeof(*dst));
	buf_append(&dst->bytes, src->bytes.data, src->bytes.len);
	dst->count = dst->cap = src->count;
	dst->offsets = xmalloc((src->count + 1) * sizeof(uint32_t));
	dst->lengths = xmalloc((src->count + 1) * sizeof(uint32_t));
	memcpy(dst->offsets, src->offsets, src->count * sizeof(uint32_t));
	memcpy(dst->lengths, src->lengths, src->count * sizeof(uint32_t));
	hmap_copy(&dst->index, &src->index);
}

void strtab_reset(struct strtab *t)
{
	buf_reset(&t->bytes);
	hmap_clear(&t->index);
	t->count = 0;
	strtab_intern(t, "", 0);
}

uint32_t strtab_lookup(const struct strtab *t, const char *s, size_t n)
{
	struct hmap_span_key k = { t, s, n };
	uint32_t idx;
	if (hmap_find(&t->index, hash_bytes(s, n), eq_key, &k, &idx))
		return idx;
	return UINT32_MAX;
}

uint32_t strtab_intern(struct strtab *t, const char *s, size_t n)
{
	uint64_t h = hash_bytes(s, n);
	struct hmap_span_key k = { t, s, n };
	uint32_t idx;
	if (hmap_find(&t->index, h, eq_key, &k, &idx))
		return idx;
	if (t->count >= UINT32_MAX - 1 || t->bytes.len + n + 1 > UINT32_MAX) {
		/* 4 GiB of distinct strings: callers bound their inputs far below
		 * this, so reaching it is a bug, not an input error. */
		abort();
	}
	xgrow2((void **)&t->offsets, (void **)&t->lengths, &t->cap, t->count + 1, sizeof(uint32_t),
	       sizeof(uint32_t));
	idx = (uint32_t)t->count++;
	t->offsets[idx] = (uint32_t)t->bytes.len;
	t->lengths[idx] = (uint32_t)n;
	buf_append(&t->bytes, s, n);
	buf_putc(&t->bytes, '\0');
	hmap_insert(&t->index, h, idx);
	return idx;
}

uint32_t strtab_intern_cstr(struct strtab *t, const char *s)
{
	return strtab_intern(t, s, strlen(s));
}

const char *strtab_get(const struct strtab *t, uint32_t id)
{
	if (id >= t->count)
		return "";
	return t->bytes.data + t->offsets[id];
}

uint32_t strtab_len(const struct strtab *t, uint32_t id)
{
	return id < t->count ? t->lengths[id] : 0;
}
