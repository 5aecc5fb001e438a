/* nvtx_ranges.c - see nvtx_ranges.h. */
#include "nvtx_ranges.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static const char unnamed[] = "[unnamed]";

/* Claims the next slot; NULL past the kept depth (the push is counted). */
static char *open_slot(struct nvtx_ranges *r, int *before)
{
	*before = (int)(r->depth > INT32_MAX - 1 ? INT32_MAX - 1 : r->depth);
	if (r->depth < UINT32_MAX - 1)
		r->depth++;
	if (r->depth > NVTX_RANGES_DEPTH_MAX)
		return NULL;
	return r->name[r->depth - 1];
}

static void set_unnamed(struct nvtx_ranges *r)
{
	memcpy(r->name[r->depth - 1], unnamed, sizeof(unnamed) - 1);
	r->len[r->depth - 1] = sizeof(unnamed) - 1;
}

/* A push of the name given narrow or wide (the other NULL; both NULL:
 * unnamed), printable ASCII kept and the rest '?'. */
static int push(struct nvtx_ranges *r, const char *narrow, const wchar_t *wide)
{
	int before;
	char *out = open_slot(r, &before);
	if (!out)
		return before;
	size_t n = 0;
	for (; n < NVTX_RANGES_NAME_MAX; n++) {
		long c = narrow ? (unsigned char)narrow[n] : wide ? (long)wide[n] : 0;
		if (!c)
			break;
		out[n] = c >= 0x20 && c <= 0x7e ? (char)c : '?';
	}
	if (!n)
		set_unnamed(r);
	else
		r->len[r->depth - 1] = (uint8_t)n;
	return before;
}

int nvtx_ranges_push(struct nvtx_ranges *r, const char *name)
{
	return push(r, name, NULL);
}

int nvtx_ranges_push_wide(struct nvtx_ranges *r, const wchar_t *name)
{
	return push(r, NULL, name);
}

int nvtx_ranges_pop(struct nvtx_ranges *r)
{
	if (!r->depth)
		return -1;
	r->depth--;
	return (int)(r->depth > INT32_MAX ? INT32_MAX : r->depth);
}

unsigned nvtx_ranges_kept(const struct nvtx_ranges *r)
{
	return r->depth < NVTX_RANGES_DEPTH_MAX ? r->depth : NVTX_RANGES_DEPTH_MAX;
}

uint64_t nvtx_ranges_hash(const struct nvtx_ranges *r)
{
	unsigned k = nvtx_ranges_kept(r);
	if (!k)
		return 0;
	XXH3_state_t st;
	XXH3_64bits_reset(&st);
	for (unsigned i = 0; i < k; i++) {
		XXH3_64bits_update(&st, &r->len[i], 1);
		XXH3_64bits_update(&st, r->name[i], r->len[i]);
	}
	uint64_t h = XXH3_64bits_digest(&st);
	return h ? h : 1;
}
