/* events.h - raw events: the newest sample rows of a scope, each with its
 * time, value, labels and symbolized stack (outermost frame first). Rows
 * are what the store keeps: samples of one stack and label set that fell
 * into the same interval are one event with their summed value.
 */
#ifndef EMBER_SERVER_EVENTS_H
#define EMBER_SERVER_EVENTS_H

#include <stdint.h>

#include "buf.h"
#include "scan.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"

#define EVENTS_DEFAULT_LIMIT 100
#define EVENTS_MAX_LIMIT 10000

struct ev_request {
	struct scope scope;
	uint32_t limit;
	bool raw_names;
};

int ev_request_parse(struct ev_request *r, const char *body, size_t len, struct buf *err);
void ev_request_free(struct ev_request *r);

struct fetcher;
int events_query(struct store *st, struct symbols *sym, const struct ev_request *r,
		 struct buf *out, struct buf *err);

#endif
