/* sendq.h - the agent's bounded queue of batches waiting to be sent.
 * Items are opaque (the reporter queues finished batches) with the size
 * they cost in memory. When adding one would exceed the byte budget, the
 * oldest are dropped first (and counted, and handed to the queue's destroy
 * function), so an unreachable server costs at most max_bytes of memory.
 * Not thread-safe: the reporter locks it.
 */
#ifndef EMBER_AGENT_SENDQ_H
#define EMBER_AGENT_SENDQ_H

#include <stddef.h>
#include <stdint.h>

struct sendq_item {
	void *data;
	size_t len;
	uint64_t seq;
	struct sendq_item *next;
};

struct sendq {
	struct sendq_item *head, *tail;
	size_t count;
	size_t bytes;
	size_t max_bytes;
	uint64_t dropped_batches;
	uint64_t dropped_bytes;
	/* Frees an item's data (when dropped or freed); NULL = free(). */
	void (*destroy)(void *ctx, void *data);
	void *destroy_ctx;
};

void sendq_init(struct sendq *q, size_t max_bytes);
/* Takes ownership of data, which costs len bytes. A batch larger than the
 * whole budget is dropped at once. */
void sendq_push(struct sendq *q, void *data, size_t len, uint64_t seq);
/* Puts back a batch taken with sendq_pop (it goes first again), unless
 * that would exceed the budget: then it is the oldest and is dropped. */
void sendq_push_front(struct sendq *q, struct sendq_item *it);
/* Removes and returns the oldest batch, or NULL. */
struct sendq_item *sendq_pop(struct sendq *q);
void sendq_item_free(struct sendq *q, struct sendq_item *it);
void sendq_free(struct sendq *q);

#endif
