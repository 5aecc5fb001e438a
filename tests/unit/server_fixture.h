/* server_fixture.h - what the server's unit tests share: batches built
 * from stack specs, and (storefixture.h) a store opened in a temporary
 * directory and a "world" (store, symbols) for the query tests. Each test file
 * uses part of it; the helpers are marked unused so each may. */
#ifndef EMBER_TESTS_SERVER_FIXTURE_H
#define EMBER_TESTS_SERVER_FIXTURE_H

#include "testutil.h"
#include "storeutil.h"
#include "storefixture.h"
#include "slicefixture.h"

#include <dirent.h>
#include <math.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <zstd.h>

#include "agent/batch.h"
#include "compress.h"
#include "server/ingest/codecs.h"
#include "server/ingest/batch_decode.h"
#include "server/query/display.h"
#include "server/query/entities.h"
#include "server/query/events.h"
#include "server/query/flamegraph.h"
#include "server/query/functions.h"
#include "server/http/http.h"
#include "server/http/mcp.h"
#include "server/store/merge.h"
#include "server/metrics/metrics.h"
#include "server/store/projects.h"
#include "server/http/server.h"
#include "server/auth/authz.h"
#include "server/store/part.h"
#include "server/query/scan.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"
#include "server/query/tree.h"
#include "server/query/uregex.h"
#include "server/store/wal.h"
#include "symfile.h"
#include "util.h"

/* Builds a batch: each stack is a list of names (outermost first);
 * "file:0x..." names a native frame of file id 0x11.. at that offset. */
struct spec {
	const char *frames[6];
	const char *exe;
	const char *thread;
	uint64_t value;
};

static __attribute__((unused)) void make_batch_kind(const struct spec *specs, size_t n, uint64_t seq, int64_t start,
			    enum event_kind kind, struct buf *out)
{
	struct batch b;
	batch_init(&b);
	struct file_id fid;
	memset(fid.b, 0x11, sizeof(fid.b));
	for (size_t i = 0; i < n; i++) {
		uint32_t ids[6];
		size_t depth = 0;
		for (; depth < 6 && specs[i].frames[depth]; depth++)
			ids[depth] = spec_frame(&b, specs[i].frames[depth], specs[i].exe, &fid);
		uint32_t kv[] = {
			batch_string(&b, "process.executable.name", 23),
			batch_string(&b, specs[i].exe, strlen(specs[i].exe)),
			batch_string(&b, "thread.name", 11),
			batch_string(&b, specs[i].thread, strlen(specs[i].thread)),
			batch_string(&b, "host.name", 9),
			batch_string(&b, "h1", 2),
		};
		batch_add(&b, batch_stack(&b, ids, depth), batch_resource(&b, kv, 6), kind,
			  specs[i].value);
	}
	spec_batch_finish(&b, seq, start, out);
}

static __attribute__((unused)) void make_batch(const struct spec *specs, size_t n, uint64_t seq, int64_t start,
		       struct buf *out)
{
	make_batch_kind(specs, n, seq, start, EK_ON_CPU, out);
}

static const struct spec sample_specs[] = {
	{ { "main", "run", "hot_a", NULL }, "app", "main", 60 },
	{ { "main", "run", "hot_b", NULL }, "app", "main", 30 },
	{ { "main", "run", "hot_b", "k:do_syscall_64", NULL }, "app", "main", 5 },
	{ { "main", "file:0x1010", NULL }, "app", "worker", 4 },
	{ { "main", "idle_loop", NULL }, "other", "main", 1 },
};


/* Sum of the on-CPU values of the test project in [from, to). */
static __attribute__((unused)) uint64_t total_range(struct store *s, int64_t from, int64_t to)
{
	return store_sum(s, PROJECT, from, to);
}

static __attribute__((unused)) uint64_t total(struct store *s)
{
	return total_range(s, 0, INT64_MAX / 2);
}

static __attribute__((unused)) off_t file_size(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

/* A store without its maintenance thread whose compacted rows keep their
 * times (compact_after 0: the default), and symbols, in dir. */
static __attribute__((unused)) struct store *open_test_store(const char *dir,
							     uint32_t compact_after,
							     struct symbols **sym)
{
	struct store *s;
	struct buf err = { 0 };
	struct store_config cfg;
	store_config_default(&cfg);
	ingest_codecs(&cfg);
	cfg.background = false;
	cfg.time_window = false;
	cfg.block_granularity_ms = 1; /* compacted rows keep their times, as memory does */
	if (compact_after)
		cfg.compact_after = compact_after;
	assert_int_equal(store_open(dir, &cfg, &s, &err), 0);
	assert_int_equal(symbols_open(dir, sym, &err), 0);
	buf_free(&err);
	return s;
}

/* Finds a child by name in the flamegraph JSON (via jansson). */
#include <jansson.h>

static __attribute__((unused)) json_t *child_named(json_t *node, const char *name)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(node, "children"), i, c)
	if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
		return c;
	return NULL;
}

static __attribute__((unused)) json_int_t total_of(json_t *n)
{
	return n ? json_integer_value(json_object_get(n, "total")) : -1;
}

/* The flamegraph answer to body; prune_at (0 = the default) as in
 * struct fg_request. */
static __attribute__((unused)) json_t *run_query_pruned(struct store *s, struct symbols *sym, const char *body,
				size_t prune_at)
{
	struct fg_request r;
	struct buf err = { 0 }, out = { 0 };
	if (fg_request_parse(&r, body, strlen(body), &err) < 0)
		fail_msg("parse: %s", err.data);
	strcpy(r.scope.project_id, PROJECT);
	r.prune_at = prune_at;
	if (flamegraph_query(s, sym, NULL, &r, &out, &err) < 0)
		fail_msg("query: %s", err.data);
	json_error_t je;
	json_t *doc = json_loads(out.data, 0, &je);
	if (!doc)
		fail_msg("answer is not JSON: %s", je.text);
	fg_request_free(&r);
	buf_free(&err);
	buf_free(&out);
	return doc;
}

static __attribute__((unused)) json_t *run_query(struct store *s, struct symbols *sym, const char *body)
{
	return run_query_pruned(s, sym, body, 0);
}

/* The flamegraph's root, as canonical JSON text. */
static __attribute__((unused)) char *fg_root(struct store *s, struct symbols *sym, const char *body)
{
	json_t *d = run_query(s, sym, body);
	char *text = json_dumps(json_object_get(d, "root"), JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(d);
	return text;
}

#endif
