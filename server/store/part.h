/* part.h - one part of the profile store: a self-contained set of sample
 * rows with the dictionaries they reference.
 *
 * Every part owns its tables, so a part can be written, read, compacted
 * and deleted on its own (docs/internals/store.md):
 *
 *   lstr     label strings: attribute keys and values, project ids, agent
 *            instances, host names
 *   sstr     symbol strings: function names, binaries, file names
 *   files    executables and libraries (file id, build id, segments)
 *   frames   (type, file, address, name, binary), deduplicated
 *   nodes    the stack prefix tree: node = (parent node, frame); node 0 is
 *            the root and a stack is the id of its leaf node. A parent's id
 *            is always below its children's, so one pass in id order visits
 *            parents first.
 *   labels   label sets: sorted (key, value) lstr-id pairs
 *   series   (project, event kind, sample rate, label set): the unit rows
 *            are grouped, filtered and totalled by. Each series carries its
 *            total, time range and per-minute totals.
 *   hosts    host name -> logical CPU count (absolute CPU mode)
 *   agents   agent instance -> highest batch sequence stored (dedup)
 *
 * Rows are (time, stack, value) per series. A part being built (the head)
 * holds its rows in memory; a part read from a block file holds only the
 * location of each series' rows and decodes them when asked
 * (part_series_rows). Row times are multiples of the part's granularity.
 *
 * Ownership: a part owns every array below. Threading: a part is not
 * synchronised; the store serialises writers and readers around it.
 *
 * Private to the store: ingest writes a head through store.h's head
 * writer (struct store_head, implemented over a part at the end of
 * part.c), never through these calls.
 */
#ifndef EMBER_SERVER_PART_H
#define EMBER_SERVER_PART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "hmap.h"
#include "store.h"
#include "strtab.h"

/* Rows and minutes are the interface's struct store_row and store_minute
 * (store.h): readers get them as they lie in parts. */
struct part_series {
	uint32_t project; /* lstr id of the project's UUID */
	uint32_t labels;  /* label set id */
	uint8_t kind;     /* enum store_event_kind */
	uint16_t hz;      /* sample rate of its batches */
	int64_t min_ts, max_ts;
	uint64_t total, nrows;
	struct store_minute *minutes; /* sorted by minute */
	size_t nminutes, capminutes;
	/* rows in memory (a part being built) */
	struct store_row *rows;
	size_t caprows;
	/* rows in a block file: zstd frames, adjacent. The first holds the
	 * series' distinct stacks (nstacks of them), the second their totals;
	 * then one frame of rows per time slice the series has rows in
	 * (part.slices[slice0 ..]), which name stacks by their index in the
	 * first. A version 3 block has stacks and totals in one frame
	 * (sums_len 0). */
	uint64_t stacks_off, stacks_len, stacks_raw, stacks_sum;
	uint64_t sums_len, sums_raw, sums_sum; /* at stacks_off + stacks_len */
	uint64_t nstacks;
	uint32_t slice0, nslices;
	uint32_t rollup; /* a part being built: its rollup's index plus one (0: none yet) */
};

/* One time slice of a block's series (its rows) or of a rollup (its stack
 * totals): a zstd frame in the block file. A slice holds what lies in
 * [from_ms, from_ms + part.slice_ms), cut to its series' or its block's
 * time range; from_ms is a multiple of slice_ms. In a block written
 * before slices (version 3) each series has one slice, from its first
 * row to its last, and slice_ms is 0. */
struct part_slice {
	int64_t from_ms;
	uint64_t off, len, raw, sum; /* the frame: offset, length, raw length, XXH64 */
	uint64_t n;                  /* rows (series) or stacks (rollup) */
};

/* The stack totals of every series of one (project, event kind, rate)
 * together: what a query without a filter over a whole part reads
 * instead of its series. A block's are read from its file; a part being
 * built keeps its own as rows arrive (part_add_row), so that the live
 * hour's heads answer such a query with one sum per stack instead of one
 * per row. */
struct part_rollup {
	uint32_t project; /* lstr id */
	uint8_t kind;
	uint16_t hz;
	uint32_t *stacks; /* ascending in a block; in order of arrival in a part being built */
	uint64_t *sums;
	size_t n;
	/* a part being built: stacks/sums capacity, and by stack id its index
	 * in them plus one (0: not there yet) */
	size_t capstacks;
	uint32_t *pos;
	size_t cappos;
	/* the same by time slice (part.slices[slice0 ..]), read on demand */
	uint32_t slice0, nslices;
	/* while a block is written: dense sums by stack id */
	uint64_t *acc;
	size_t capacc;
};

struct part_stack_key {
	uint64_t hi;   /* the high half of the stack's 128-bit hash */
	uint32_t leaf;
};

struct part_host {
	uint32_t name; /* lstr id */
	uint32_t cpus;
};

struct part_agent {
	uint32_t instance; /* lstr id */
	uint64_t seq;
};

struct part {
	struct strtab lstr, sstr;
	struct store_file *files;
	size_t nfiles, capfiles;
	struct store_frame *frames;
	size_t nframes, capframes;
	uint32_t *node_parent, *node_frame;
	size_t nnodes, capnodes;
	uint32_t *label_kv, *label_off; /* set i = kv[off[i] .. off[i+1]) */
	size_t nlabel_kv, caplabel_kv, nlabels, caplabels;
	struct part_series *series;
	size_t nseries, capseries;
	struct part_host *hosts;
	size_t nhosts, caphosts;
	struct part_agent *agents;
	size_t nagents, capagents;
	struct part_rollup *rollups;
	size_t nrollups, caprollups;
	struct part_slice *slices; /* blocks: of every series, then of every rollup */
	size_t nslices, capslices;
	uint32_t slice_ms;         /* blocks: the slices' length; 0 = a slice spans its series */
	/* interning indexes (parts being built only) */
	struct part_stack_key *stack_keys;
	size_t nstack_keys, capstack_keys;
	uint64_t *frame_hi; /* per frame: the high half of its 128-bit content hash */
	size_t capframe_hi;
	struct hmap file_index, frame_index, node_index, stack_index, label_index, series_index,
		host_index,
		agent_index;
	/* Names the part's dictionaries (strings, files, frames, nodes, label
	 * sets): unique to each part_init() in the process, shared by a copy
	 * made with part_copy_dictionaries (whose ids are the source's), so a
	 * cache of ids keyed by it stays valid across such a copy. */
	uint64_t dict_id;
	int64_t min_ts, max_ts;     /* INT64_MAX / INT64_MIN when empty */
	uint32_t granularity_ms;    /* 1 for exact batch times */
	uint64_t rows, samples;     /* row count, sum of values */
};

void part_init(struct part *p, uint32_t granularity_ms);
void part_free(struct part *p);
/* Makes dst (just initialised, empty) start with src's dictionaries and
 * their indexes, under the same ids and dict_id; no series or rows. The
 * store's new head does this so what agents send again is found, not
 * added, and flushing keeps only what rows use (merge.h). */
void part_copy_dictionaries(struct part *dst, const struct part *src);
/* Bytes the dictionaries and their indexes use (part_memory less series,
 * rows, hosts and agents). */
size_t part_dict_memory(const struct part *p);

/* --- building ------------------------------------------------------------ */

uint32_t part_file(struct part *p, const struct store_file *f); /* f->name is an sstr id */
uint32_t part_frame(struct part *p, const struct store_frame *f);
uint32_t part_node(struct part *p, uint32_t parent, uint32_t frame);
/* The leaf node of a whole stack (frames outermost first): one hash
 * lookup when the stack was seen before, else a walk of part_node(). */
uint32_t part_stack_id(struct part *p, const uint32_t *frames, size_t n);
/* Whole stacks by a 128-bit hash (lo, hi) the caller computes from what
 * their frames are rather than from this part's ids (sessions.c), kept in
 * the same index as part_stack_id's hashes: the leaf noted for it, or
 * UINT32_MAX. */
uint32_t part_stack_by_hash(struct part *p, uint64_t lo, uint64_t hi);
void part_stack_note_hash(struct part *p, uint64_t lo, uint64_t hi, uint32_t leaf);
/* Renumbers the stack tree depth first: every node is followed by its
 * whole subtree, children in the order of their old ids. A query that
 * walks a part's nodes in id order then touches the tree it builds in
 * nearly the same order (docs/internals/store.md, "Node order"). The
 * whole-stack index follows; the node index (keyed by parent id) is
 * dropped and built again by the next part_node. Everything else that
 * holds node ids (rows, rollups, a caller's maps) is the caller's to
 * translate through the returned map, old id -> new id, nnodes entries,
 * which the caller frees. Node 0 stays the root. */
uint32_t *part_sort_nodes(struct part *p);
/* kv: sorted, duplicate-free key/value lstr-id pairs (2 * npairs ids). */
uint32_t part_labels(struct part *p, const uint32_t *kv, size_t npairs);
uint32_t part_series_id(struct part *p, uint32_t project, uint8_t kind, uint16_t hz,
			uint32_t labels);
/* Adds value to (series, ts rounded down to the granularity, stack). In
 * memory the row is appended; rows are merged when written out. */
void part_add_row(struct part *p, uint32_t series, int64_t ts_ms, uint32_t stack, uint64_t value);
/* part_add_row for the n rows of one batch (one time), faster: the
 * rollups' entries are fetched ahead. */
void part_add_rows(struct part *p, const uint32_t *series, int64_t ts_ms, const uint32_t *stacks,
		   const uint64_t *values, size_t n);
/* Adds value to a series' minute totals without a row (reading blocks). */
void part_add_minute(struct part_series *s, int64_t minute_ms, uint64_t value);
void part_note_host(struct part *p, uint32_t name, uint32_t cpus);
void part_note_agent(struct part *p, uint32_t instance, uint64_t seq);
/* Highest sequence stored for an agent instance, 0 when none. */
uint64_t part_agent_seq(const struct part *p, const char *instance);

/* The head writer of store.h over a part (part.c, "the head writer"): the
 * store hands one to index() and to a codec's replay; a test may make one
 * of a part of its own. */
struct store_head {
	struct part *part;
};

/* Sorts label pairs by key id and drops repeated keys (first wins).
 * Returns the number of pairs left. */
size_t part_canonical_labels(uint32_t *kv, size_t npairs);

/* --- reading ------------------------------------------------------------- */

/* Frames of stack node id, outermost first, into out (at most max).
 * Returns the depth (which may exceed max; only max are written). */
size_t part_stack(const struct part *p, uint32_t stack, uint32_t *out, size_t max);
/* The key/value lstr ids of a label set, as pairs. Returns the pair count. */
size_t part_label_pairs(const struct part *p, uint32_t labels, const uint32_t **kv);
/* Value of attribute key in label set labels, or NULL. */
const char *part_label_value(const struct part *p, uint32_t labels, const char *key);
/* The rollup of (project, kind, hz), created when absent (block writing). */
struct part_rollup *part_rollup_get(struct part *p, uint32_t project, uint8_t kind, uint16_t hz);
/* Bytes of memory the part's tables use. */
size_t part_memory(const struct part *p);

#endif
