/* displayfixture.h - for the tests that build trees by hand (otree, exports):
 * a display with no frame masks and no search, whose keys they name frames
 * with. */
#ifndef EMBER_TESTS_DISPLAYFIXTURE_H
#define EMBER_TESTS_DISPLAYFIXTURE_H

#include "testutil.h"

#include "buf.h"
#include "server/query/display.h"

/* A display with default options; the caller frees it (display_free). */
static inline struct display *bare_display(void)
{
	struct buf err = { 0 };
	struct display_opts dopts = { 0 };
	struct display *d = display_new(NULL, NULL, &dopts, "masks", &err);
	if (!d)
		fail_msg("display_new: %s", err.data ? err.data : "");
	buf_free(&err);
	return d;
}

#endif
