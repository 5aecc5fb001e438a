/* block_int.h - what only block.c, block_read.c and block_write.c share:
 * the file's constants, section numbers and the open block's struct.
 * The byte layout is in docs/internals/store.md. */
#ifndef EMBER_BLOCK_INT_H
#define EMBER_BLOCK_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "block.h"
#include "varint.h"

#define BLOCK_MAGIC "EMBRBLK1"
#define BLOCK_END "EMBREND1"
#define BLOCK_VERSION 4
#define BLOCK_VERSION_UNSLICED 3 /* still read: one rows frame per series */

/* Fuzz builds let damaged checksums through so that mutations reach the
 * parsers behind them (tests/fuzz/fuzz_block.c); every other build checks. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define SUM_OK(computed, stored) ((void)(computed), (void)(stored), true)
#else
#define SUM_OK(computed, stored) ((computed) == (stored))
#endif
#define HEADER_LEN 16
#define TRAILER_LEN 24
#define MAX_FOOTER (16u << 20)
#define ZLEVEL 3

enum section {
	SEC_LSTR = 1, SEC_SSTR, SEC_FILES, SEC_FRAMES, SEC_NODES, SEC_LABELS, SEC_SERIES,
	SEC_MINUTES, SEC_HOSTS, SEC_ROLLUPS, SEC_COUNT
};

struct section_ref {
	uint64_t off, len, raw, sum;
};

struct block {
	int fd;
	uint32_t version;
	char *path;
	struct block_info info;
	struct section_ref sec[SEC_COUNT];
};


static inline uint64_t get_u64(struct cursor *c)
{
	uint64_t v = 0;
	cursor_bytes(c, &v, 8);
	return v;
}

static inline uint32_t get_u32(struct cursor *c)
{
	uint32_t v = 0;
	cursor_bytes(c, &v, 4);
	return v;
}

/* Appends one row slice to p's slice list (block_read.c). */
void block_push_slice(struct part *p, const struct part_slice *sl);

#endif
