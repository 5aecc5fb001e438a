/* clickhouse_bench - generated batches into the fleet store's ClickHouse
 * tables through the product's encoder and insert
 * (server/store/clickhouse/rowbinary.h): samples per second of ingest.
 *
 *   clickhouse_bench --clickhouse-url URL [--clickhouse-database ember]
 *                    [--project P] [--agent A] [--first-seq N]
 *                    [--batches N] [--rows M] [--seed S] [--timeout-ms T]
 *                    [--ts-base SECONDS] [--clickhouse-cluster NAME --retention-cutoff SECONDS]
 *
 * The generator is deterministic in (seed, agent, sequence): the same
 * flags make the same batches with the same ids, so a second run is all
 * duplicates (tests/integration/test_clickhouse_insert.py relies on it).
 * --retention-cutoff runs the retention (ch_retention) after the inserts,
 * on every server of --clickhouse-url, and prints dropped=N.
 * Prints one line of key=value; exits 0, 3 when ClickHouse was
 * unavailable (what ingest answers 503 for), 1 on another failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <getopt.h>
#include <time.h>

#include <curl/curl.h>

#include "server/store/clickhouse/rowbinary.h"
#include "server/store/clickhouse/schema.h"
#include "util.h"

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#define NFUNC 64

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "clickhouse-url", required_argument, NULL, 'u' },
		{ "clickhouse-database", required_argument, NULL, 'd' },
		{ "project", required_argument, NULL, 'p' },
		{ "agent", required_argument, NULL, 'a' },
		{ "first-seq", required_argument, NULL, 'f' },
		{ "batches", required_argument, NULL, 'b' },
		{ "rows", required_argument, NULL, 'r' },
		{ "seed", required_argument, NULL, 's' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "ts-base", required_argument, NULL, 'T' },
		{ "clickhouse-cluster", required_argument, NULL, 'c' },
		{ "retention-cutoff", required_argument, NULL, 'R' },
		{ 0 },
	};
	struct ch_conn_opts o = { .timeout_ms = 30000 };
	const char *project = "bench", *agent = "bench-agent";
	unsigned long long first = 1, batches = 10, rows = 10000, seed = 1;
	uint32_t base = 1796000000u;  /* 2026-11-30 */
	const char *cluster = NULL;
	long long cutoff = -1;
	int ch;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'u': o.urls = optarg; break;
		case 'd': o.database = optarg; break;
		case 'p': project = optarg; break;
		case 'a': agent = optarg; break;
		case 'f': first = strtoull(optarg, NULL, 10); break;
		case 'b': batches = strtoull(optarg, NULL, 10); break;
		case 'r': rows = strtoull(optarg, NULL, 10); break;
		case 's': seed = strtoull(optarg, NULL, 10); break;
		case 't': o.timeout_ms = strtol(optarg, NULL, 10); break;
		case 'T': base = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'c': cluster = optarg; break;
		case 'R': cutoff = strtoll(optarg, NULL, 10); break;
		default: return 2;
		}
	}
	if (!o.urls || rows == 0 || rows > CH_MAX_BATCH_ROWS) {
		fprintf(stderr, "usage: clickhouse_bench --clickhouse-url URL [--rows 1..%d] ...\n",
			CH_MAX_BATCH_ROWS);
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	struct buf err = { 0 };
	struct ch_conn *c = ch_conn_new(&o, &err);
	if (!c) {
		fprintf(stderr, "clickhouse_bench: %s\n", err.data);
		return 2;
	}
	unsigned long long inserted = 0, dups = 0, total_rows = 0, total_value = 0;
	uint64_t encode_ns = 0, t0 = now_mono_ns();
	int rc = 0;
	for (unsigned long long i = 0; i < batches && !rc; i++) {
		uint64_t seq = first + i;
		uint64_t r = seed * 1000003u + seq;
		struct ch_batch b;
		uint64_t e0 = now_mono_ns();
		ch_batch_init(&b, project, agent, seq);
		uint64_t fnames[NFUNC], frames[NFUNC];
		uint64_t bin = ch_batch_string(&b, "/usr/bin/bench", 14);
		for (int f = 0; f < NFUNC; f++) {
			char name[32];
			int n = snprintf(name, sizeof(name), "func_%d", f);
			fnames[f] = ch_batch_string(&b, name, (size_t)n);
			struct ch_frame fr = { .type = 1, .address = 0x1000u + 16u * (unsigned)f,
					       .function = fnames[f], .binary = bin };
			frames[f] = ch_batch_frame(&b, &fr);
		}
		uint64_t labels[3];
		for (int l = 0; l < 3; l++) {
			char host[16];
			snprintf(host, sizeof(host), "host-%d", l);
			const char *k[] = { "host.name", "service.name" }, *v[] = { host, "bench" };
			labels[l] = ch_batch_label_set(&b, k, v, 2);
		}
		uint64_t stacks[256];
		for (int s = 0; s < 256; s++) {
			uint64_t path[8];
			int depth = 3 + (int)(rng_next(&r) % 6);
			for (int d = 0; d < depth; d++)
				path[d] = frames[rng_next(&r) % NFUNC];
			stacks[s] = ch_batch_stack(&b, path, (size_t)depth);
		}
		for (unsigned long long k = 0; k < rows; k++) {
			struct ch_sample s = {
				.kind = "on_cpu", .ts = base + (uint32_t)(seq % 86400) ,
				.stack = stacks[rng_next(&r) % 256], .labels = labels[rng_next(&r) % 3],
				.hz = 19, .value = 1 + rng_next(&r) % 10,
			};
			total_value += s.value;
			if (ch_batch_sample(&b, &s) < 0) {
				rc = 1;
				break;
			}
		}
		total_rows += rows;
		encode_ns += now_mono_ns() - e0;
		enum ch_insert_result res;
		enum ch_rc irc = ch_insert_batch(c, &b, &res, &err);
		ch_batch_free(&b);
		if (irc == CH_UNAVAILABLE) {
			fprintf(stderr, "clickhouse_bench: unavailable: %s\n", err.data);
			rc = 3;
		} else if (irc != CH_OK) {
			fprintf(stderr, "clickhouse_bench: %s\n", err.data);
			rc = 1;
		} else if (res == CH_DUPLICATE) {
			dups++;
		} else {
			inserted++;
		}
	}
	double secs = (double)(now_mono_ns() - t0) / 1e9;
	int dropped = 0;
	if (!rc && cutoff >= 0) {
		enum ch_rc rrc = ch_retention(c, cluster, cutoff, &dropped, &err);
		if (rrc != CH_OK) {
			fprintf(stderr, "clickhouse_bench: retention: %s\n", err.data);
			rc = rrc == CH_UNAVAILABLE ? 3 : 1;
		}
		printf("dropped=%d ", dropped);
	}
	printf("batches=%llu inserted=%llu duplicate=%llu rows=%llu value=%llu seconds=%.3f "
	       "encode_seconds=%.3f rows_per_s=%.0f\n",
	       batches, inserted, dups, total_rows, total_value, secs, (double)encode_ns / 1e9,
	       secs > 0 ? (double)total_rows / secs : 0.0);
	ch_conn_free(c);
	buf_free(&err);
	curl_global_cleanup();
	return rc;
}
