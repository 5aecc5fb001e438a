/* slicefixture.h - the part behind the block slice tests, and behind
 * tests/data/block-v3.blk (the same part written by the block format
 * before slices, version 3), so that both can be checked against rows
 * computed here. Three series over 50 minutes from T_SLICE (an hour's
 * start): two on_cpu at 19 Hz on hosts "a" and "b", one off_cpu on "a";
 * 60 stacks of depth 1 to 4 over 12 frames; values by a fixed formula. */
#ifndef EMBER_TESTS_SLICEFIXTURE_H
#define EMBER_TESTS_SLICEFIXTURE_H

#include <stdio.h>
#include <string.h>

#include "server/store/part.h"
#include "server/store/store.h"

#define T_SLICE 1796353200000LL /* 2026-12-04T00:00:00Z */
#define SLICE_FIXTURE_ROWS 3000

static inline void slice_fixture(struct part *p)
{
	part_init(p, 1);
	uint32_t proj = strtab_intern(&p->lstr, "proj", 4);
	uint32_t key = strtab_intern(&p->lstr, "host.name", 9);
	uint32_t kv[2][2] = { { key, strtab_intern(&p->lstr, "a", 1) },
			      { key, strtab_intern(&p->lstr, "b", 1) } };
	uint32_t series[3] = {
		part_series_id(p, proj, SEK_ON_CPU, 19, part_labels(p, kv[0], 1)),
		part_series_id(p, proj, SEK_ON_CPU, 19, part_labels(p, kv[1], 1)),
		part_series_id(p, proj, SEK_OFF_CPU, 0, part_labels(p, kv[0], 1)),
	};
	uint32_t leaf[60];
	for (uint32_t i = 0; i < 60; i++) {
		uint32_t frames[4];
		size_t d = 1 + i % 4;
		for (size_t j = 0; j < d; j++) {
			char name[16];
			snprintf(name, sizeof(name), "f%u", (unsigned)((i * 7 + j * 5) % 12));
			struct store_frame f = { .type = SFT_NATIVE,
						 .name = strtab_intern(&p->sstr, name, strlen(name)) };
			frames[j] = part_frame(p, &f);
		}
		leaf[i] = part_stack_id(p, frames, d);
	}
	uint64_t x = 88172645463325252ull;
	for (int r = 0; r < SLICE_FIXTURE_ROWS; r++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int64_t ts = T_SLICE + (int64_t)(x % 3000000);
		uint32_t s = (uint32_t)(x >> 20) % 3;
		uint64_t v = s == 2 ? 1000 + (x >> 40) % 100000 : 1 + (x >> 40) % 3;
		part_add_row(p, series[s], ts, leaf[(x >> 32) % 60], v);
	}
}

#endif
