/* storefixture.h - a store of the test project for the query tests: one
 * opened without its maintenance thread (the tests flush and compact),
 * batches appended to it, and a "world" (store and symbols in a fresh
 * directory) as cmocka setup/teardown. Shared by server_fixture.h and
 * the tests that build their own batches (test_recs.c); the helpers are
 * marked unused so each may use part of it. */
#ifndef EMBER_TESTS_STOREFIXTURE_H
#define EMBER_TESTS_STOREFIXTURE_H

#include "testutil.h"

#include "agent/batch.h"
#include "buf.h"
#include "server/ingest/batch_decode.h"
#include "server/ingest/codecs.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"
#include "util.h"

/* The start of the tests' data: fixed, years ago (store_open's time window
 * is off). */
#define T0 1700000000000LL

/* The project every batch goes to (the default project). */
#define PROJECT "00000000-0000-0000-0000-000000000000"

/* A frame of a test stack, by its name: "k:name" a kernel frame of
 * vmlinux, "file:0x..." (with fid) a native frame at that offset of the
 * file libfoo.so whose id is fid, any other a native frame of exe. */
static __attribute__((unused)) uint32_t spec_frame(struct batch *b, const char *name, const char *exe,
						   const struct file_id *fid)
{
	struct bframe f = { .type = FT_NATIVE };
	if (fid && strncmp(name, "file:", 5) == 0) {
		f.file = batch_file(b, 0, fid, "libfoo.so", NULL, 0, NULL, 0);
		f.address = strtoull(name + 5, NULL, 16);
	} else if (strncmp(name, "k:", 2) == 0) {
		f.type = FT_KERNEL;
		f.name = batch_string(b, name + 2, strlen(name + 2));
		f.binary = batch_string(b, "vmlinux", 7);
	} else {
		f.name = batch_string(b, name, strlen(name));
		f.binary = batch_string(b, exe, strlen(exe));
	}
	return batch_frame(b, &f);
}

/* Encodes b as agent-1's batch seq of [start, start + 5 s) into out and
 * frees b. */
static __attribute__((unused)) void spec_batch_finish(struct batch *b, uint64_t seq, int64_t start,
						      struct buf *out)
{
	struct batch_meta meta = { "agent-1", seq, "default", start, start + 5000, 19 };
	assert_int_equal(batch_encode(b, &meta, out), 0);
	batch_free(b);
}

/* Decodes an encoded batch and appends it to the test project; fails the
 * test on any error. */
static __attribute__((unused)) void append(struct store *s, const struct buf *z)
{
	struct buf err = { 0 };
	Ember__Ingest__V1__Batch *b = batch_decode(z->data, z->len, &err);
	if (!b)
		fail_msg("decode: %s", err.data);
	int rc = batch_append(s, PROJECT, b, z->data, z->len, &err);
	if (rc != STORE_OK)
		fail_msg("append returned %d: %s", rc, err.data);
	batch_decode_free(b);
	buf_free(&err);
}

/* A store without its maintenance thread: the tests flush and compact. */
static __attribute__((unused)) int open_store(const char *dir, struct store **s, struct buf *err)
{
	struct store_config cfg;
	store_config_default(&cfg);
	ingest_codecs(&cfg);
	cfg.background = false;
	cfg.time_window = false; /* fixed times, years ago */
	return store_open(dir, &cfg, s, err);
}

/* open_store and symbols, in dir; close_store_dir closes both. */
static __attribute__((unused)) struct store *open_store_symbols(const char *dir, struct symbols **sym)
{
	struct store *s;
	struct buf err = { 0 };
	if (open_store(dir, &s, &err) != 0 || symbols_open(dir, sym, &err) != 0)
		fail_msg("open in %s: %s", dir, err.data ? err.data : "");
	buf_free(&err);
	return s;
}

/* Closes what a test opened in dir (its store and symbols), removes the
 * directory and frees its name. */
static __attribute__((unused)) void close_store_dir(char *dir, struct store *s, struct symbols *sym)
{
	store_close(s);
	symbols_close(sym);
	rm_temp_dir(dir);
}

/* The fixture of the query tests: a store and symbols in a fresh
 * directory, closed and removed after the test (cmocka setup/teardown). */
struct world {
	char *dir;
	struct store *s;
	struct symbols *sym;
};

static __attribute__((unused)) int world_setup(void **state)
{
	struct world *w = xcalloc(1, sizeof(*w));
	struct buf err = { 0 };
	w->dir = make_temp_dir();
	if (open_store(w->dir, &w->s, &err) < 0 || symbols_open(w->dir, &w->sym, &err) < 0) {
		print_error("fixture: %s\n", err.data ? err.data : "?");
		if (w->s)
			store_close(w->s);
		rm_rf(w->dir);
		free(w->dir);
		free(w);
		buf_free(&err);
		return -1;
	}
	buf_free(&err);
	*state = w;
	return 0;
}

/* Closes w's store and symbols and removes its directory. */
static __attribute__((unused)) void world_close(struct world *w)
{
	symbols_close(w->sym);
	store_close(w->s);
	rm_rf(w->dir);
	free(w->dir);
}

static __attribute__((unused)) int world_teardown(void **state)
{
	struct world *w = *state;
	world_close(w);
	free(w);
	return 0;
}

/* A test run in a world of its own. */
#define WORLD_TEST(f) cmocka_unit_test_setup_teardown(f, world_setup, world_teardown)

#endif
