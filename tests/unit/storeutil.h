/* storeutil.h - what the store's unit tests ask of a store: the sum of a
 * project's on-CPU values in a time range, read the way every query
 * reads (scan_open, per part the selected series' totals). */
#ifndef EMBER_TESTS_STOREUTIL_H
#define EMBER_TESTS_STOREUTIL_H

#include <stdint.h>
#include <string.h>

#include "buf.h"
#include "server/query/scan.h"
#include "server/store/store.h"

static inline uint64_t store_sum(struct store *s, const char *project, int64_t from, int64_t to)
{
	struct scope sc = { .kind = SEK_ON_CPU, .start_ms = from, .end_ms = to };
	strcpy(sc.project_id, project);
	struct buf err = { 0 };
	struct scan *scan = scan_open(s, &sc, &err);
	assert_non_null(scan);
	uint64_t t = 0;
	for (size_t i = 0; i < scan_parts(scan); i++) {
		const struct store_segment *p = scan_begin(scan, i);
		if (!p)
			continue;
		for (uint32_t j = 0; j < p->nseries; j++)
			if (scan_selected(scan, j))
				t += (uint64_t)scan_series_total(scan, j);
		scan_end(scan, i);
	}
	scan_close(scan);
	buf_free(&err);
	return t;
}

#endif
