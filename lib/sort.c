/* sort.c - see sort.h. */
#include "sort.h"

#include <string.h>

#define SORT_SMALL 48

void sort_u64_by_high(uint64_t *v, size_t n, uint64_t *tmp)
{
	if (n < SORT_SMALL) {
		for (size_t i = 1; i < n; i++) {
			uint64_t x = v[i];
			size_t j = i;
			for (; j > 0 && v[j - 1] >> 32 > x >> 32; j--)
				v[j] = v[j - 1];
			v[j] = x;
		}
		return;
	}
	uint64_t *src = v, *dst = tmp;
	for (unsigned shift = 32; shift < 64; shift += 8) {
		size_t count[256] = { 0 };
		for (size_t i = 0; i < n; i++)
			count[src[i] >> shift & 0xff]++;
		if (count[src[0] >> shift & 0xff] == n)
			continue;
		size_t at = 0;
		for (size_t b = 0; b < 256; b++) {
			size_t c = count[b];
			count[b] = at;
			at += c;
		}
		for (size_t i = 0; i < n; i++)
			dst[count[src[i] >> shift & 0xff]++] = src[i];
		uint64_t *t = src;
		src = dst;
		dst = t;
	}
	if (src != v)
		memcpy(v, src, n * sizeof(*v));
}
