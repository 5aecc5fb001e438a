/* sendq.c - see sendq.h. */
#include "sendq.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

void sendq_init(struct sendq *q, size_t max_bytes)
{
	memset(q, 0, sizeof(*q));
	q->max_bytes = max_bytes;
}

static void drop(struct sendq *q, struct sendq_item *it)
{
	q->dropped_batches++;
	q->dropped_bytes += it->len;
	sendq_item_free(q, it);
}

void sendq_push(struct sendq *q, void *data, size_t len, uint64_t seq)
{
	struct sendq_item *it = xcalloc(1, sizeof(*it));
	it->data = data;
	it->len = len;
	it->seq = seq;
	if (len > q->max_bytes) {
		drop(q, it);
		return;
	}
	while (q->head && q->bytes + len > q->max_bytes)
		drop(q, sendq_pop(q));
	if (q->tail)
		q->tail->next = it;
	else
		q->head = it;
	q->tail = it;
	q->count++;
	q->bytes += len;
}

void sendq_push_front(struct sendq *q, struct sendq_item *it)
{
	if (q->bytes + it->len > q->max_bytes) {
		drop(q, it);
		return;
	}
	it->next = q->head;
	q->head = it;
	if (!q->tail)
		q->tail = it;
	q->count++;
	q->bytes += it->len;
}

struct sendq_item *sendq_pop(struct sendq *q)
{
	struct sendq_item *it = q->head;
	if (!it)
		return NULL;
	q->head = it->next;
	if (!q->head)
		q->tail = NULL;
	it->next = NULL;
	q->count--;
	q->bytes -= it->len;
	return it;
}

void sendq_item_free(struct sendq *q, struct sendq_item *it)
{
	if (!it)
		return;
	if (q->destroy)
		q->destroy(q->destroy_ctx, it->data);
	else
		free(it->data);
	free(it);
}

void sendq_free(struct sendq *q)
{
	struct sendq_item *it;
	while ((it = sendq_pop(q)) != NULL)
		sendq_item_free(q, it);
}
