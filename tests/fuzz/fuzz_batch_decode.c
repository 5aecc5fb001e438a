/* Fuzz target: the server's batch decoder and validator, and the store
 * indexing what it accepts. Input: a zstd-compressed protobuf, or raw
 * protobuf bytes when the first byte is 'R' (so mutations reach the
 * protobuf parser and validator without first having to form zstd). */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compress.h"
#include "fuzz_check.h"
#include "server/ingest/codecs.h"
#include "server/ingest/batch_decode.h"
#include "server/query/flamegraph.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"

/* The store and symbol store live across inputs (libFuzzer calls this
 * function once per input; opening a store per input would be slow). */
/* On tmpfs: fsync costs nothing there, and this target tests decoding
 * and indexing, not the disk. */
static char dir[] = "/dev/shm/ember-fuzz-store-XXXXXX";
static struct store *store;
static struct symbols *symbols;

static int open_store(struct buf *err)
{
	struct store_config cfg;
	store_config_default(&cfg);
	ingest_codecs(&cfg);
	cfg.background = false;
	cfg.time_window = false; /* fixed times, years ago */
	return store_open(dir, &cfg, &store, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!store) {
		struct buf err = { 0 };
		if (!mkdtemp(dir) || open_store(&err) < 0 ||
		    symbols_open(dir, &symbols, &err) < 0)
			abort();
		buf_free(&err);
	}
	struct buf z = { 0 }, err = { 0 };
	const void *body;
	size_t len;
	fuzz_body(data, size, &z, &body, &len);
	Ember__Ingest__V1__Batch *b = batch_decode(body, len, &err);
	if (b) {
		/* Accepted batches must index, flush to a block, compact and
		 * query without harm. Keep the store small: start over now and
		 * then. */
		static int n;
		if (++n % 16 == 0) {
			if (store_flush(store, &err) < 0 || store_compact(store, true, &err) < 0) {
				fprintf(stderr, "maintenance failed: %s\n", err.data);
				abort();
			}
		}
		if (n % 64 == 0) {
			store_close(store);
			char cmd[256];
			snprintf(cmd, sizeof(cmd), "rm -rf '%s/blocks' '%s/wal'", dir, dir);
			if (system(cmd) != 0 || open_store(&err) < 0)
				abort();
		}
		int rc = batch_append(store, "00000000-0000-0000-0000-000000000000", b, body, len, &err);
		if (rc < 0 && rc != STORE_BUSY)
			abort();
		struct fg_request r;
		const char *q = "{\"filter\":{\"start_ts\":0,\"end_ts\":32503680000000},"
				"\"synthetic_frames\":[\"executable\",\"thread\"]}";
		if (fg_request_parse(&r, q, strlen(q), &err) == 0) {
			strcpy(r.scope.project_id, "00000000-0000-0000-0000-000000000000");
			struct buf out = { 0 };
			flamegraph_query(store, symbols, NULL, &r, &out, &err);
			buf_free(&out);
			fg_request_free(&r);
		}
		batch_decode_free(b);
	}
	buf_free(&z);
	buf_free(&err);
	return 0;
}
