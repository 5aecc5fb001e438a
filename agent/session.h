/* session.h - the agent's half of protocol version 2 (docs/protocol.md §2):
 * a session in which every string, file, frame, stack node and resource is
 * sent once and then named by its session id. Stacks are paths in a tree
 * of nodes (a frame under a parent node), so a new stack costs only the
 * frames it does not share with stacks sent before.
 *
 * The session keeps, as a dictionary, everything it has sent so far,
 * numbered in the order it was sent. session_encode() translates one
 * interval's batch (batch.h, with its own per-batch numbering) into session
 * ids, appends the entries the session has not sent yet as the batch's
 * definitions, and encodes the result as a zstd-compressed
 * ember.ingest.v1.SessionBatch. The caller sends encoded batches in the
 * order they were encoded; when one is lost (dropped, refused) or the
 * server answers 409, it calls session_reset() and encodes again: a new
 * session starts from empty tables and redefines what it references.
 *
 * Translating is cheap for what an earlier batch already carried: every
 * stack and resource placed is remembered by a 128-bit hash of its
 * content (its frames' types, files, addresses and names), so a known
 * stack costs a hash and one probe, and its frames and strings are not
 * looked up; only new stacks are placed node by node.
 *
 * Memory: the dictionary grows with the distinct stacks a host produces
 * (13 to 27 bytes a node); session_memory() reports it and the reporter
 * starts a new session past its limit. The memos (21 to 43 bytes a stack)
 * are a cache of at most 8 MiB each besides. Not thread-safe: the
 * reporter thread owns it.
 */
#ifndef EMBER_AGENT_SESSION_H
#define EMBER_AGENT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "buf.h"

struct memo_slot;

struct session {
	char id[37];        /* UUID; a new one after every reset */
	/* Strings, files, frames and resources sent in this session, by
	 * session id (its stacks are unused: the nodes below replace them). */
	struct batch dict;
	/* Stack nodes: node i is frame node_frame[i] under node
	 * node_parent[i] - 1 (0: outermost). */
	uint32_t *node_parent, *node_frame;
	size_t nnodes, capnodes;
	/* Index of the nodes by (parent, frame): session.c, node_slots. */
	uint32_t *node_slots;
	size_t node_mask; /* slots - 1; 0 while there are none */
	/* Stacks placed (to their leaf nodes) and resources (to their ids),
	 * by a hash of their content: session.c, memo_slot. A cache, bounded
	 * apart from the dictionary (max_slots) and emptied at the bound. */
	struct session_memo {
		struct memo_slot *slots;
		size_t n, mask, max_slots;
		uint64_t flushes; /* times emptied at the bound */
	} stack_memo, res_memo;
	/* Table sizes the server has been sent (the next batch's bases). */
	size_t sent_strings, sent_files, sent_frames, sent_nodes, sent_res;
	uint64_t batches;   /* batches encoded in this session */
	uint64_t resets;    /* sessions started after the first */
};

/* The most stack nodes a session holds (far beyond what its memory limit
 * lets it reach: 8 bytes of arrays per node alone make 128 MiB). */
#define SESSION_MAX_NODES ((1u << 24) - 1)

/* The most slots a memo has: 16 bytes each, 8 MiB, 393 216 entries at
 * its load of 3/4. A batch that would pass that empties it first; the
 * stacks it lacks are placed node by node. */
#define SESSION_MEMO_MAX_SLOTS ((size_t)1 << 19)

void session_init(struct session *s);
void session_free(struct session *s);
/* Forgets everything sent: a new id and empty tables. */
void session_reset(struct session *s);
/* Appends the encoding of b as the session's next batch to out and records
 * its definitions as sent. Returns 0, or -1 (out unchanged in length
 * meaning, session unchanged) when encoding fails. */
int session_encode(struct session *s, const struct batch *b, const struct batch_meta *meta,
		   struct buf *out);
/* Bytes the session's dictionary holds. */
size_t session_memory(const struct session *s);
/* Whether b's stacks, at most one new node per frame, stay within
 * SESSION_MAX_NODES: when not, the caller starts a new session first
 * (session_encode refuses a batch that does not fit). */
bool session_fits(const struct session *s, const struct batch *b);

#endif
