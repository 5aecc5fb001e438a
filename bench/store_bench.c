/* store_bench - what ingest and the flamegraph query cost on this machine.
 *
 * Builds synthetic agent batches shaped like a fleet (hosts x processes x
 * threads, a pool of distinct stacks 8 to 40 frames deep drawn from a
 * vocabulary of function names), then measures, with the real code:
 *   encode   agent batch building + protobuf + zstd, per sample
 *   decode   server zstd + protobuf + validation, per batch
 *   append   store_append (write-ahead log + fdatasync + indexing), per batch
 *   query    flamegraph over everything, with a CEL filter, with grouping
 * usage: store_bench [HOSTS] [BATCHES_PER_HOST] [DISTINCT_STACKS] [DIR]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "agent/batch.h"
#include "server/batch_decode.h"
#include "server/flamegraph.h"
#include "server/store.h"
#include "server/symbols.h"
#include "util.h"

#define SAMPLES_PER_BATCH (19 * 16 * 5) /* 19 Hz x 16 cores x 5 s */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

struct stack {
	uint16_t depth;
	uint16_t names[40];
};

static double ms_since(uint64_t t0)
{
	return (double)(now_mono_ns() - t0) / 1e6;
}

static double query_ms(struct store *st, struct symbols *sym, const char *body, uint64_t *total,
		       size_t *nodes)
{
	struct fg_request r;
	struct buf err = { 0 }, out = { 0 };
	if (fg_request_parse(&r, body, strlen(body), &err) < 0) {
		fprintf(stderr, "bad request: %s\n", err.data);
		exit(1);
	}
	strcpy(r.scope.project_id, "00000000-0000-0000-0000-000000000000");
	uint64_t t0 = now_mono_ns();
	if (flamegraph_query(st, sym, NULL, &r, &out, &err) < 0) {
		fprintf(stderr, "query failed: %s\n", err.data);
		exit(1);
	}
	double ms = ms_since(t0);
	const char *t = strstr(out.data, "\"total\":");
	*total = t ? strtoull(t + 8, NULL, 10) : 0;
	const char *n = strstr(out.data, "\"nodes\":");
	*nodes = n ? strtoull(n + 8, NULL, 10) : 0;
	fg_request_free(&r);
	buf_free(&out);
	buf_free(&err);
	return ms;
}

int main(int argc, char **argv)
{
	int hosts = argc > 1 ? atoi(argv[1]) : 20;
	int per_host = argc > 2 ? atoi(argv[2]) : 12;
	int nstacks = argc > 3 ? atoi(argv[3]) : 20000;
	const char *dir = argc > 4 ? argv[4] : "/tmp/ember-store-bench";
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		return 1;

	struct stack *stacks = xcalloc((size_t)nstacks, sizeof(*stacks));
	for (int i = 0; i < nstacks; i++) {
		stacks[i].depth = (uint16_t)(8 + next() % 33);
		/* Shared prefixes, as real stacks have: the first frames come
		 * from a small set, deeper ones from the whole vocabulary. */
		for (int d = 0; d < stacks[i].depth; d++)
			stacks[i].names[d] = (uint16_t)(d < 4 ? next() % (4 + d * 4) : next() % 5000);
	}

	struct store *st;
	struct symbols *sym;
	struct buf err = { 0 };
	struct store_config cfg;
	store_config_default(&cfg);
	if (store_open(dir, &cfg, &st, &err) < 0 || symbols_open(dir, &sym, &err) < 0) {
		fprintf(stderr, "%s\n", err.data);
		return 1;
	}
	double enc_ms = 0, dec_ms = 0, app_ms = 0;
	uint64_t samples = 0, bytes = 0, batches = 0;
	int64_t t = 1700000000000LL;
	struct batch b;
	batch_init(&b);
	char name[64];
	for (int round = 0; round < per_host; round++) {
		for (int h = 0; h < hosts; h++) {
			uint64_t t0 = now_mono_ns();
			batch_reset(&b);
			snprintf(name, sizeof(name), "host-%03d", h);
			uint32_t host = batch_string(&b, name, strlen(name));
			for (int s = 0; s < SAMPLES_PER_BATCH; s++) {
				/* Skewed: a few stacks are hot. */
				uint64_t r = next();
				int si = (int)((r % 4 == 0 ? r % (uint64_t)nstacks : r % 64) % (uint64_t)nstacks);
				uint32_t ids[40];
				for (int d = 0; d < stacks[si].depth; d++) {
					snprintf(name, sizeof(name), "fn_%u", stacks[si].names[d]);
					struct bframe f = { .type = FT_NATIVE,
							    .name = batch_string(&b, name, strlen(name)),
							    .binary = batch_string(&b, "app", 3) };
					ids[d] = batch_frame(&b, &f);
				}
				int proc = (int)(r >> 32) % 8;
				snprintf(name, sizeof(name), "svc-%d", proc);
				char tname[32];
				snprintf(tname, sizeof(tname), "worker-%d", (int)(r >> 40) % 4);
				uint32_t kv[] = {
					batch_string(&b, "host.name", 9), host,
					batch_string(&b, "process.executable.name", 23),
					batch_string(&b, name, strlen(name)),
					batch_string(&b, "thread.name", 11),
					batch_string(&b, tname, strlen(tname)),
				};
				batch_add(&b, batch_stack(&b, ids, stacks[si].depth),
					  batch_resource(&b, kv, 6), EK_ON_CPU, 1);
			}
			struct batch_meta meta = { name, (uint64_t)round + 1, "default", t, t + 5000, 19 };
			char inst[32];
			snprintf(inst, sizeof(inst), "agent-%d", h);
			meta.agent_instance = inst;
			struct buf z = { 0 };
			batch_encode(&b, &meta, &z);
			enc_ms += ms_since(t0);
			t0 = now_mono_ns();
			Ember__Ingest__V1__Batch *d = batch_decode(z.data, z.len, &err);
			dec_ms += ms_since(t0);
			if (!d) {
				fprintf(stderr, "decode: %s\n", err.data);
				return 1;
			}
			t0 = now_mono_ns();
			if (store_append(st, "00000000-0000-0000-0000-000000000000", d, z.data, z.len,
					 &err) != 0) {
				fprintf(stderr, "append: %s\n", err.data);
				return 1;
			}
			app_ms += ms_since(t0);
			batch_decode_free(d);
			samples += SAMPLES_PER_BATCH;
			bytes += z.len;
			batches++;
			buf_free(&z);
		}
		t += 5000;
	}
	batch_free(&b);
	struct store_stats ss;
	store_get_stats(st, &ss);
	printf("data: %d hosts x %d batches = %llu batches, %llu samples, %d distinct stacks in the pool\n",
	       hosts, per_host, (unsigned long long)batches, (unsigned long long)samples, nstacks);
	printf("store: %llu rows\n", (unsigned long long)ss.rows);
	printf("wire: %.1f bytes per sample (zstd protobuf, %.0f KiB per batch)\n",
	       (double)bytes / (double)samples, (double)bytes / (double)batches / 1024.0);
	printf("encode (agent):  %.3f us per sample\n", enc_ms * 1000.0 / (double)samples);
	printf("decode (server): %.3f ms per batch, %.0f samples/s\n", dec_ms / (double)batches,
	       (double)samples / (dec_ms / 1000.0));
	printf("append (durable, fdatasync per batch): %.3f ms per batch, %.0f samples/s\n",
	       app_ms / (double)batches, (double)samples / (app_ms / 1000.0));
	uint64_t total;
	size_t nodes;
	const char *all = "{\"filter\":{\"start_ts\":0,\"end_ts\":4102444800000}}";
	const char *filt = "{\"filter\":{\"start_ts\":0,\"end_ts\":4102444800000,\"query\":\"host.name == \\\"host-003\\\" || process.executable.name == \\\"svc-1\\\"\"}}";
	const char *grp = "{\"filter\":{\"start_ts\":0,\"end_ts\":4102444800000},\"synthetic_frames\":[\"host\",\"executable\"]}";
	for (int rep = 0; rep < 2; rep++) {
		double q1 = query_ms(st, sym, all, &total, &nodes);
		printf("query, everything:        %8.1f ms  (%llu samples, %zu nodes)%s\n", q1,
		       (unsigned long long)total, nodes, rep ? "" : " [first run]");
	}
	double q2 = query_ms(st, sym, filt, &total, &nodes);
	printf("query, CEL filter:        %8.1f ms  (%llu samples, %zu nodes)\n", q2,
	       (unsigned long long)total, nodes);
	double q3 = query_ms(st, sym, grp, &total, &nodes);
	printf("query, host+exe groups:   %8.1f ms  (%llu samples, %zu nodes)\n", q3,
	       (unsigned long long)total, nodes);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("peak RSS: %.1f MiB\n", (double)ru.ru_maxrss / 1024.0);
	uint64_t t0 = now_mono_ns();
	store_close(st);
	if (store_open(dir, &cfg, &st, &err) < 0)
		return 1;
	printf("reopen (log replay): %.1f ms for %.1f MiB of log\n", ms_since(t0),
	       (double)ss.wal_bytes / 1048576.0);
	store_close(st);
	symbols_close(sym);
	free(stacks);
	buf_free(&err);
	return 0;
}
