/* metrics_bench - what host metrics cost the server: ingest, disk, queries.
 *
 * Synthesizes what a fleet's agents send with the default
 * -collect-metrics-interval (30 s): HOSTS hosts, each with 4 host series
 * (CPU user and system, memory used and available) and PROCS processes
 * with 6 series each (utime, stime, rss, read and write throughput, and a
 * cgroup working set), one batch per host per interval, as ember-agent
 * encodes them (agent/metricbatch.c: interned strings and label sets,
 * zstd). The server path is timed on one thread: decode and validate
 * (metrics_decode) plus store in one transaction (metrics_store_batch,
 * SQLite, synchronous=FULL). Then the queries a dashboard makes run over
 * the whole range: CPU by executable, RSS by host, a CEL-filtered one.
 *
 * Reported: points per second of one core (decode + store), bytes on the
 * wire and on disk per point, query times, peak memory.
 * Usage: metrics_bench [HOSTS] [MINUTES] [PROCS] [DIR]
 *        (defaults 100, 60, 256, /tmp/ember-metrics-bench)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "agent/metricbatch.h"
#include "server/metrics/metrics.h"
#include "util.h"

#define INTERVAL_MS 30000
#define START_MS 1796000000000LL

static const char *const exes[] = { "python3", "java", "nginx", "postgres", "envoy",
				    "node", "redis-server", "kubelet" };

static double elapsed_s(uint64_t t0)
{
	return (double)(now_mono_ns() - t0) / 1e9;
}

static uint64_t file_bytes(const char *dir, const char *name)
{
	char path[600];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* One host's batch for one interval. */
static void host_batch(struct metric_batch *b, int host, int procs, int64_t ts)
{
	char hn[32];
	snprintf(hn, sizeof(hn), "node-%03d", host);
	uint32_t hkv[] = { metric_batch_str(b, "host.name"), metric_batch_str(b, hn),
			   metric_batch_str(b, "cluster.name"), metric_batch_str(b, host % 2 ? "east" : "west") };
	uint32_t hs = metric_batch_labels(b, hkv, 4);
	double load = (double)((host * 7 + ts / INTERVAL_MS) % 16);
	metric_batch_add(b, "host.cpu.user", "cores", hs, ts, load * 0.7);
	metric_batch_add(b, "host.cpu.system", "cores", hs, ts, load * 0.3);
	metric_batch_add(b, "host.memory.used", "bytes", hs, ts, 3.2e10 + load * 1e8);
	metric_batch_add(b, "host.memory.available", "bytes", hs, ts, 3.2e10 - load * 1e8);
	for (int p = 0; p < procs; p++) {
		const char *exe = exes[p % ARRAY_SIZE(exes)];
		char pid[16], cg[96];
		snprintf(pid, sizeof(pid), "%d", 1000 + p);
		snprintf(cg, sizeof(cg), "/kubepods/pod-%d/%s", p / 4, exe);
		uint32_t kv[] = { hkv[0], hkv[1], hkv[2], hkv[3],
				  metric_batch_str(b, "process.executable.name"), metric_batch_str(b, exe),
				  metric_batch_str(b, "process.pid"), metric_batch_str(b, pid),
				  metric_batch_str(b, "container.name"), metric_batch_str(b, exe) };
		uint32_t ps = metric_batch_labels(b, kv, 10);
		double x = (double)((p * 13 + host + ts / INTERVAL_MS) % 100) / 100.0;
		metric_batch_add(b, "process.utime", "cores", ps, ts, x * 0.8);
		metric_batch_add(b, "process.stime", "cores", ps, ts, x * 0.2);
		metric_batch_add(b, "process.rss", "bytes", ps, ts, 1e8 + x * 1e9);
		metric_batch_add(b, "io.read_throughput", "bytes/s", ps, ts, x * 1e6);
		metric_batch_add(b, "io.write_throughput", "bytes/s", ps, ts, x * 4e5);
		uint32_t ckv[] = { hkv[0], hkv[1], metric_batch_str(b, "cgroup.path"), metric_batch_str(b, cg) };
		metric_batch_add(b, "process.wss", "bytes", metric_batch_labels(b, ckv, 4), ts, 5e8 + x * 1e8);
	}
}

static void query(struct metrics_store *m, const char *what, const char *body)
{
	struct buf out = { 0 }, err = { 0 };
	for (int rep = 0; rep < 2; rep++) {
		buf_reset(&out);
		uint64_t t0 = now_mono_ns();
		int rc = metrics_query(m, "00000000-0000-0000-0000-000000000000", body, strlen(body), &out, &err);
		double ms = elapsed_s(t0) * 1e3;
		if (rc != 0) {
			fprintf(stderr, "%s: %d %s\n", what, rc, err.data ? err.data : "");
			exit(1);
		}
		if (rep)
			printf("%8.1f ms again (%zu bytes of JSON)\n", ms, out.len);
		else
			printf("  %-34s %8.1f ms first, ", what, ms);
	}
	buf_free(&out);
	buf_free(&err);
}

int main(int argc, char **argv)
{
	int hosts = argc > 1 ? atoi(argv[1]) : 100;
	int minutes = argc > 2 ? atoi(argv[2]) : 60;
	int procs = argc > 3 ? atoi(argv[3]) : 256;
	const char *dir = argc > 4 ? argv[4] : "/tmp/ember-metrics-bench";
	if (hosts <= 0 || minutes <= 0 || procs < 0 || procs > 2000) {
		fprintf(stderr, "usage: metrics_bench [HOSTS] [MINUTES] [PROCS 0..2000] [DIR]\n");
		return 2;
	}
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", dir, dir);
	if (system(cmd) != 0)
		return 1;
	struct metrics_store *m;
	struct buf err = { 0 };
	/* EMBER_BENCH_METRICS_URL=postgres://...: the store on a shared
	 * PostgreSQL (an empty database) instead of DIR/metrics.db */
	const char *url = getenv("EMBER_BENCH_METRICS_URL");
	if ((url && *url ? metrics_open(url, NULL, 14LL * 86400000, &m, &err)
			 : metrics_open_dir(dir, 14LL * 86400000, &m, &err)) < 0) {
		fprintf(stderr, "%s\n", err.data);
		return 1;
	}
	int intervals = minutes * 60000 / INTERVAL_MS;
	uint64_t points = 0, wire = 0, batches = 0;
	double server_s = 0;
	uint64_t wall0 = now_mono_ns();
	for (int i = 0; i < intervals; i++) {
		int64_t ts = START_MS + (int64_t)i * INTERVAL_MS;
		for (int h = 0; h < hosts; h++) {
			struct metric_batch b;
			metric_batch_init(&b);
			host_batch(&b, h, procs, ts);
			struct metric_batch_meta meta = { "00000000-0000-4000-8000-0000000be7c4", (uint64_t)i + 1,
							  "default", ts - INTERVAL_MS, ts };
			struct buf z = { 0 };
			if (metric_batch_encode(&b, &meta, &z) < 0)
				return 1;
			points += b.npoints;
			wire += z.len;
			metric_batch_free(&b);
			uint64_t t0 = now_mono_ns();
			Ember__Ingest__V1__MetricsBatch *d = metrics_decode(z.data, z.len, &err);
			if (!d || metrics_store_batch(m, "00000000-0000-0000-0000-000000000000", d, ts, &err) < 0) {
				fprintf(stderr, "ingest: %s\n", err.data);
				return 1;
			}
			metrics_decode_free(d);
			server_s += elapsed_s(t0);
			buf_free(&z);
			batches++;
		}
	}
	double wall = elapsed_s(wall0);
	uint64_t db = file_bytes(dir, "metrics.db"), wal = file_bytes(dir, "metrics.db-wal");
	uint64_t disk = db + wal;
	printf("load: %d hosts x %d processes x %d intervals of 30 s = %llu points in %llu batches (%.0f points per batch)\n",
	       hosts, procs, intervals, (unsigned long long)points, (unsigned long long)batches,
	       (double)points / (double)batches);
	printf("ingest (decode + validate + store, one transaction per batch): %.1f s = %.0f points/s on one core "
	       "(%.2f ms per batch; %.1f s wall with generating)\n",
	       server_s, (double)points / server_s, server_s * 1e3 / (double)batches, wall);
	printf("wire: %.2f bytes per point (%.1f KiB per batch)\n", (double)wire / (double)points,
	       (double)wire / (double)batches / 1024);
	if (url && *url)
		printf("store: PostgreSQL (disk not measured here)\n");
	else
		printf("disk: %.1f MiB = %.1f bytes per point (metrics.db %.1f MiB + its WAL %.1f MiB)\n",
		       (double)disk / 1048576, (double)disk / (double)points, (double)db / 1048576,
		       (double)wal / 1048576);
	printf("a fleet of that size at 30 s: %.0f points/s, %.1f GiB per day\n",
	       (double)points / (minutes * 60.0), (double)disk / (minutes / 1440.0) / 1073741824.0);
	char body[600];
	long long end = START_MS + (long long)intervals * INTERVAL_MS;
	printf("queries over the whole range (%d min):\n", minutes);
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"metric\":\"host.cpu.user\",\"num_buckets\":60}",
		 START_MS, end);
	query(m, "host CPU, all hosts", body);
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"metric\":\"process.utime\","
		 "\"group_by\":\"process.executable.name\",\"num_buckets\":60}", START_MS, end);
	query(m, "process CPU by executable", body);
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"host.name == \\\"node-007\\\"\"},"
		 "\"metric\":\"process.rss\",\"group_by\":\"process.pid\",\"temporal\":\"max\",\"num_buckets\":60}", START_MS, end);
	query(m, "RSS by pid of one host (CEL)", body);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("peak memory: %.0f MiB\n", (double)ru.ru_maxrss / 1024);
	metrics_close(m);
	buf_free(&err);
	return 0;
}
