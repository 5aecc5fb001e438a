/* merge.h - writing parts into a new block: flushing the in-memory head
 * and compacting blocks are the same operation.
 *
 * The rows of every source that fall in [from_ms, to_ms) are re-interned
 * into a fresh part (only the strings, frames, stack nodes and label sets
 * they use), rounded down to the granularity, merged where (series, time,
 * stack) repeat and written one series at a time, so memory holds the new
 * dictionaries and one series' rows, never a whole block of rows. The
 * new part's stack tree is numbered depth first (part_sort_nodes): the
 * stacks are interned before any row is written, from the sources' rows
 * (in memory) or their series' distinct stacks (blocks).
 */
#ifndef EMBER_SERVER_MERGE_H
#define EMBER_SERVER_MERGE_H

#include <stdbool.h>
#include <stdint.h>

#include "block.h"
#include "buf.h"
#include "part.h"

struct merge_source {
	const struct part *p;
	struct block *blk; /* where p's rows are; NULL when they are in memory */
};

struct merge_target {
	int64_t from_ms, to_ms;   /* rows kept: from <= ts < to */
	uint32_t granularity_ms;
	struct block_meta meta;   /* lineage written into the footer */
	const char *tmp_path, *final_path;
	/* When set: receives the new part's node count of ids (the caller
	 * owns it), each new node's id in the dictionaries every source's
	 * nodes are named in as well: node j of source i is src_ids[i][j]
	 * there (j itself when src_ids is NULL or src_ids[i] is; 0 from
	 * nsrc_ids[i] on). A block numbers its nodes itself (depth first);
	 * this names them as the sealed head they came from did, and as every
	 * in-memory part with its dictionaries does (part.h dict_id). */
	uint32_t **out_ids;
	const uint32_t *const *src_ids;
	const size_t *nsrc_ids;
};

/* Writes the block. On success *out is the new part, loaded and ready to
 * query (its rows are in the file). A source chunk that cannot be read
 * (damaged) is logged and left out, and damaged[i] (when damaged is not
 * NULL) set for its source, so that the caller keeps that file aside
 * rather than deleting it. Returns 0, or -1 with err set when the block
 * could not be written. */
int merge_write(const struct merge_source *src, size_t nsrc, const struct merge_target *t,
		struct part *out, bool *damaged, struct buf *err);

/* Interns every stack node of src (with the frames, files and strings
 * they use) into dst's dictionaries and returns each one's id there (src's
 * node count of them; the caller owns the array). dst must be a part
 * being built (its indexes present); src's parents are below their
 * children, as in any part. */
uint32_t *merge_map_nodes(struct part *dst, const struct part *src);

#endif
