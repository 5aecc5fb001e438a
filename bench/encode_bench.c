/* encode_bench - what the agent's reporter spends per sample encoding an
 * interval's batch, with ember's session protocol (agent/session.c) and
 * with OTLP Profiles (agent/otlp_export.c), on the same batches, without
 * the network; and the bytes each encoding makes.
 *
 * The load is shaped like a real host's: PROCS processes (a quarter of them
 * Python, whose middle frames are interpreted ones), 4 threads each, a pool
 * of DISTINCT stacks that are paths in one call tree (6 to 25 frames, a
 * skewed choice of 4 callees at every level, so stacks share their
 * callers as real ones do; 0 to 4 kernel frames at the leaf), a leaf
 * instruction that is one of 4 for a quarter of the samples, and 0.5 % of
 * the pool (at least one path) replaced by new paths every batch (new
 * code paths keep arriving, so
 * every batch defines a few frames and nodes). SAMPLES samples per batch
 * drawn with a skew, BATCHES batches, one session across all of them as
 * the reporter keeps one. Each batch is encoded by both encoders; only the
 * encoding is timed (thread CPU time), not building the batch. Before each
 * encoding the bench walks 64 MiB elsewhere, as the reporter finds its
 * tables and code after an interval of other work: out of the caches
 * (EMBER_BENCH_HOT=1 skips that, for the figure with everything cached).
 *
 * usage: encode_bench [BATCHES [SAMPLES [DISTINCT [PROCS]]]]
 *        (defaults 300, 1000, 300, 8)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/batch.h"
#include "agent/otlp_export.h"
#include "agent/session.h"
#include "bench/benchutil.h"
#include "util.h"

#define NFILES 20
#define BRANCH 4

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next_rand(void)
{
	return bench_next(&rng);
}

/* One stack of the pool: a path in the call tree. */
struct path {
	uint32_t proc, thread, depth, kernel;
	uint64_t h[48]; /* each level's node hash, outermost first */
};

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static void new_path(struct path *p, long procs)
{
	p->proc = (uint32_t)(next_rand() % (uint64_t)procs);
	p->thread = (uint32_t)(next_rand() % 4);
	p->depth = 6 + (uint32_t)(next_rand() % 20);
	p->kernel = (uint32_t)(next_rand() % 5);
	uint64_t h = mix(p->proc + 1);
	for (uint32_t i = 0; i < p->depth + p->kernel; i++) {
		double u = (double)(next_rand() >> 11) / (double)(1ull << 53);
		h = mix(h * 31 + (uint64_t)(u * u * BRANCH) + 1);
		p->h[i] = h;
	}
}

/* Adds one sample of path p (leaf variant v) to b, as the collector
 * would: frames, stack, the thread's resource, the row. */
static void add_sample(struct batch *b, const struct path *p, uint32_t v)
{
	static const uint64_t seg[1][3] = { { 0x1000, 0x1000, 0x400000 } };
	uint32_t frames[48];
	uint32_t n = p->depth + p->kernel;
	bool python = p->proc % 4 == 3;
	char name[64], bin[64];
	for (uint32_t i = 0; i < n; i++) {
		uint64_t h = p->h[i];
		struct bframe f = { 0 };
		if (i >= p->depth) {
			f.type = FT_KERNEL;
			snprintf(name, sizeof(name), "kernel_fn_%llu", (unsigned long long)(h % 2000));
			f.name = batch_string(b, name, strlen(name));
			f.binary = batch_string(b, "vmlinux", 7);
		} else if (python && i >= 3 && i + 3 < p->depth) {
			f.type = FT_CPYTHON;
			snprintf(name, sizeof(name), "module_%llu.func_%llu", (unsigned long long)(h % 50),
				 (unsigned long long)(h >> 20) % 5000);
			snprintf(bin, sizeof(bin), "/app/module_%llu.py", (unsigned long long)(h % 50));
			f.name = batch_string(b, name, strlen(name));
			f.binary = batch_string(b, bin, strlen(bin));
			f.address = (h >> 40) % 800;
		} else {
			uint32_t fi = (uint32_t)(h % NFILES);
			struct file_id id;
			memset(&id, 0, sizeof(id));
			memcpy(id.b, &(uint64_t){ mix(fi + 100) }, sizeof(uint64_t));
			uint8_t build_id[20];
			memset(build_id, (int)fi + 1, sizeof(build_id));
			snprintf(bin, sizeof(bin), "/usr/lib/x86_64-linux-gnu/libbench%u.so", fi);
			f.type = FT_NATIVE;
			f.file = batch_file(b, fi, &id, bin, build_id, sizeof(build_id), seg, 1);
			f.address = 0x1000 + (h >> 24) % 0x3ff000;
			if (i + 1 == p->depth)
				f.address += 4 * v; /* the leaf instruction */
		}
		frames[i] = batch_frame(b, &f);
	}
	uint32_t st = batch_stack(b, frames, n);
	char pid[16], comm[16], exe[32];
	snprintf(pid, sizeof(pid), "%u", 4000 + p->proc);
	snprintf(comm, sizeof(comm), "worker-%u", p->thread);
	snprintf(exe, sizeof(exe), python ? "python3.11" : "server-%u", p->proc);
	const char *kv[] = { "host.name", "bench-host", "host.arch", "amd64",
			     "process.executable.name", exe, "process.pid", pid,
			     "thread.name", comm, "container.name", "bench-container" };
	uint32_t ids[ARRAY_SIZE(kv)];
	for (size_t i = 0; i < ARRAY_SIZE(kv); i++)
		ids[i] = batch_string(b, kv[i], strlen(kv[i]));
	uint32_t res = batch_resource(b, ids, ARRAY_SIZE(kv));
	batch_add(b, st, res, EK_ON_CPU, 1);
}

int main(int argc, char **argv)
{
	long batches, per_batch, distinct, procs;
	if (bench_load_args(argc, argv, "encode_bench", (const long[]){ 300, 1000, 300, 8 }, 1000,
			    &batches, &per_batch, &distinct, &procs) < 0)
		return 2;
	struct path *pool = xcalloc((size_t)distinct, sizeof(*pool));
	for (long i = 0; i < distinct; i++)
		new_path(&pool[i], procs);
	const char *hot = getenv("EMBER_BENCH_HOT");
	size_t evict_len = hot && *hot == '1' ? 0 : 64u << 20;
	volatile unsigned char *evict = evict_len ? xcalloc(evict_len, 1) : NULL;
	struct session sess;
	session_init(&sess);
	double cpu[2] = { 0, 0 };
	uint64_t bytes[2] = { 0, 0 }, rows = 0, samples = 0, frames_defined = 0, nodes_defined = 0;
	struct batch_meta meta = { .agent_instance = "encode-bench", .project = "bench",
				   .sample_rate_hz = 97, .host_cpus = 16 };
	/* The first batch (the session's dictionary) is encoded but not
	 * counted: the figure is the steady state. */
	for (long bi = 0; bi <= batches; bi++) {
		struct batch b;
		batch_init(&b);
		for (long i = 0; i < per_batch; i++) {
			double u = (double)(next_rand() >> 11) / (double)(1ull << 53);
			const struct path *p = &pool[(long)(u * u * (double)distinct)];
			uint32_t v = next_rand() % 4 == 0 ? (uint32_t)(next_rand() % 4) : 0;
			add_sample(&b, p, v);
		}
		for (long i = 0; i < (distinct + 199) / 200; i++)
			new_path(&pool[next_rand() % (uint64_t)distinct], procs);
		batch_freeze(&b);
		meta.sequence = (uint64_t)bi;
		meta.start_unix_ms = 1700000000000 + bi * 5000;
		meta.end_unix_ms = meta.start_unix_ms + 5000;
		size_t f0 = sess.sent_frames, n0 = sess.sent_nodes;
		for (int k = 0; k < 2; k++) {
			struct buf out = { 0 };
			if (evict) /* a loop, not memset: a large memset's stores bypass the caches */
				for (size_t i = 0; i < evict_len; i += 64)
					evict[i] = (unsigned char)(evict[i] + 1);
			uint64_t t0 = now_thread_cpu_ns();
			int rc = k == 0 ? session_encode(&sess, &b, &meta, &out) : otlp_encode(&b, &meta, &out);
			uint64_t t1 = now_thread_cpu_ns();
			if (rc < 0) {
				fprintf(stderr, "%s encoding failed\n", k == 0 ? "session" : "OTLP");
				return 1;
			}
			if (bi > 0) {
				cpu[k] += (double)(t1 - t0) / 1e9;
				bytes[k] += out.len;
			}
			buf_free(&out);
		}
		if (bi > 0) {
			rows += b.nsamples;
			samples += (uint64_t)per_batch;
			frames_defined += sess.sent_frames - f0;
			nodes_defined += sess.sent_nodes - n0;
		}
		batch_free(&b);
	}
	printf("encode: %ld batches x %ld samples, %s (%.0f rows per batch; the session defined %.1f "
	       "frames and %.1f stack nodes per batch)\n",
	       batches, per_batch, evict ? "caches evicted before each encoding" : "caches hot", (double)rows / (double)batches,
	       (double)frames_defined / (double)batches, (double)nodes_defined / (double)batches);
	for (int k = 0; k < 2; k++)
		printf("%-16s %7.0f ns per sample (CPU), %6.2f bytes per sample\n",
		       k == 0 ? "ember session:" : "OTLP Profiles:", cpu[k] * 1e9 / (double)samples,
		       (double)bytes[k] / (double)samples);
	printf("OTLP / ember: %.2fx the CPU, %.2fx the bytes\n", cpu[1] / cpu[0],
	       (double)bytes[1] / (double)bytes[0]);
	printf("session dictionary: %zu frames, %zu stack nodes, %zu bytes\n", sess.dict.nframes,
	       sess.nnodes, session_memory(&sess));
	session_free(&sess);
	free(pool);
	free((void *)evict);
	return 0;
}
