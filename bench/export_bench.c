/* export_bench - what a flamegraph export costs (server/query/export.h) beside
 * the JSON answer of the same tree (otree_write): time and output bytes
 * for each format, at the default node limit (8 192) and for the whole
 * tree. The tree is built as a query builds it (otree_child) from random
 * stacks of depth 8 to 40 over a vocabulary of C++-like names, so it has
 * the shape of a large flamegraph: a wide middle, a long tail of small
 * nodes.
 * usage: export_bench [NODES (default 500000)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/benchutil.h"
#include "server/query/display.h"
#include "server/query/export.h"
#include "server/query/tree.h"
#include "util.h"

static uint64_t rng = 88172645463325252ull;

static double now_s(void)
{
	return (double)now_mono_ns() / 1e9;
}

static void run(struct otree *t, struct display *d, const char *label, size_t max_nodes)
{
	static const char *const names[] = { "json", "pprof", "folded", "speedscope" };
	for (int f = FG_FORMAT_JSON; f <= FG_FORMAT_SPEEDSCOPE; f++) {
		struct buf out = { 0 }, err = { 0 };
		struct export_info info = { .kind = 1, .hz = 19, .total = t->nodes[0].total,
					    .start_ms = 1000, .end_ms = 61000, .name = "bench" };
		int reps = max_nodes ? 20 : 3;
		double best = 1e9;
		size_t bytes = 0;
		for (int r = 0; r < reps; r++) {
			buf_reset(&out);
			double t0 = now_s();
			if (f == FG_FORMAT_JSON) {
				struct jsonw w;
				jsonw_init(&w, &out);
				otree_write(t, d, max_nodes, &w);
				if (jsonw_finish(&w)) {
					fprintf(stderr, "export_bench: %s\n", w.misuse);
					exit(1);
				}
			} else if (export_tree((enum fg_format)f, t, d, max_nodes, &info, &out, &err) < 0) {
				fprintf(stderr, "export_bench: %s\n", err.data);
				exit(1);
			}
			double dt = now_s() - t0;
			best = dt < best ? dt : best;
			bytes = out.len;
		}
		printf("%-14s %-11s %9.2f ms %11zu bytes\n", label, names[f], best * 1e3, bytes);
		buf_free(&out);
		buf_free(&err);
	}
}

int main(int argc, char **argv)
{
	size_t want = argc > 1 ? strtoul(argv[1], NULL, 10) : 500000;
	struct buf err = { 0 };
	struct display_opts dopts = { 0 };
	struct display *d = display_new(NULL, NULL, &dopts, "masks", &err);
	if (!d) {
		fprintf(stderr, "export_bench: %s\n", err.data);
		return 1;
	}
	/* 20 000 function names, in 8 binaries. */
	enum { NFUNC = 20000 };
	uint32_t *keys = xmalloc(NFUNC * sizeof(uint32_t));
	for (int i = 0; i < NFUNC; i++) {
		char name[128], bin[32];
		snprintf(name, sizeof(name), "ns%d::Class%d::method_%d(std::vector<int> const&)", i % 37,
			 i % 501, i);
		snprintf(bin, sizeof(bin), "/usr/lib/lib%d.so", i % 8);
		keys[i] = display_key(d, (uint8_t)(1 + i % 3), name, bin, i % 2 ? "src/file.cc" : NULL);
	}
	struct otree t;
	otree_init(&t, display_key(d, DT_ROOT, "root", "", NULL));
	double t0 = now_s();
	uint64_t samples = 0;
	while (t.n < want) {
		/* A stack: a few hot prefixes shared by many, then a random tail. */
		int depth = 8 + (int)(bench_next(&rng) % 33);
		uint32_t path[64], n = 0;
		uint64_t v = 1 + bench_next(&rng) % 50;
		for (int i = 0; i < depth; i++) {
			uint64_t r = bench_next(&rng);
			uint32_t f = i < 4 ? (uint32_t)(r % (4 + (uint64_t)i * 4)) : (uint32_t)(r % NFUNC);
			n = otree_child(&t, n, keys[f]);
			otree_vote(&t, n, (uint32_t)(1 + r % 500), v);
			path[i] = n;
		}
		t.nodes[0].total += v;
		for (int i = 0; i < depth; i++)
			t.nodes[path[i]].total += v;
		t.nodes[path[depth - 1]].self += v;
		samples += v;
	}
	printf("tree: %zu nodes, %llu samples, built in %.0f ms\n", t.n, (unsigned long long)samples,
	       (now_s() - t0) * 1e3);
	run(&t, d, "8192 nodes", 8192);
	run(&t, d, "whole tree", 0);
	otree_free(&t);
	free(keys);
	display_free(d);
	buf_free(&err);
	return 0;
}
