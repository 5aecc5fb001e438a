/* Unit tests: host and GPU metrics - the /proc parsers (fixture text), the
 * collector over a fake /proc, the agent's batch encoding and the server's
 * decoder, store (insert, query aggregation, retention, bounds). */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <sys/stat.h>
#include <time.h>

#include "agent/gpumetrics.h"
#include "agent/hostmetrics.h"
#include "agent/metricbatch.h"
#include "compress.h"
#include "metricsfixture.h"
#include "server/metrics/metrics.h"
#include "util.h"

static void test_parsers(void **state)
{
	(void)state;
	struct hm_cpu c;
	const char *stat = "cpu  100 5 50 1000 7 1 2 3 0 0\ncpu0 50 2 25 500 3 0 1 1 0 0\nintr 1\n";
	assert_int_equal(hm_parse_stat(stat, strlen(stat), &c), 0);
	/* user nice system idle iowait irq softirq steal, all of them */
	const struct hm_cpu want = { 100, 5, 50, 1000, 7, 1, 2, 3 };
	assert_memory_equal(&c, &want, sizeof(c));
	assert_int_equal(hm_parse_stat("cpu0 1 2 3 4\n", 13, &c), -1);
	assert_int_equal(hm_parse_stat("cpu  1 2\n", 9, &c), -1);

	struct hm_meminfo m;
	const char *mi = "MemTotal:       16000 kB\nMemFree:  1000 kB\nMemAvailable:   8000 kB\nBuffers: 10 kB\nCached: 20 kB\n";
	assert_int_equal(hm_parse_meminfo(mi, strlen(mi), &m), 0);
	assert_int_equal(m.total, 16000 * 1024);
	assert_int_equal(m.available, 8000 * 1024);
	const char *old = "MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 1 kB\nCached: 2 kB\n";
	assert_int_equal(hm_parse_meminfo(old, strlen(old), &m), 0);
	assert_int_equal(m.available, 13 * 1024);
	assert_int_equal(hm_parse_meminfo("MemFree: 1 kB\n", 14, &m), -1);
	assert_int_equal(hm_parse_meminfo("MemTotal: x kB\n", 15, &m), -1);

	/* A comm with spaces and parentheses; fields counted after the last ')'. */
	struct hm_pstat ps;
	const char *pst = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194304 100 0 0 0 "
			  "250 75 0 0 20 0 1 0 123456 1000000 51200 18446744073709551615 0 0";
	assert_int_equal(hm_parse_pid_stat(pst, strlen(pst), &ps), 0);
	assert_int_equal(ps.utime, 250);
	assert_int_equal(ps.stime, 75);
	assert_int_equal(ps.start_time, 123456);
	assert_int_equal(ps.rss_pages, 51200);
	assert_string_equal(ps.comm, "a) b (c)");
	assert_int_equal(hm_parse_pid_stat(pst, 40, &ps), -1); /* cut short */
	assert_int_equal(hm_parse_pid_stat("no parens", 9, &ps), -1);
	const char *huge = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 99999999999999999999999 1 0 0 20 0 1 0 5 1 7";
	assert_int_equal(hm_parse_pid_stat(huge, strlen(huge), &ps), 0);
	assert_true(ps.utime == UINT64_MAX); /* saturates */

	uint64_t rb, wb;
	const char *io = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
	assert_int_equal(hm_parse_pid_io(io, strlen(io), &rb, &wb), 0);
	assert_int_equal(rb, 4096);
	assert_int_equal(wb, 8192);
	assert_int_equal(hm_parse_pid_io("rchar: 10\n", 10, &rb, &wb), -1);

	char cg[256];
	const char *cgt = "12:cpu:/old\n0::/system.slice/docker-abc.scope\n";
	assert_int_equal(hm_parse_cgroup2_path(cgt, strlen(cgt), cg, sizeof(cg)), 0);
	assert_string_equal(cg, "/system.slice/docker-abc.scope");
	assert_int_equal(hm_parse_cgroup2_path("0::/a/../../etc\n", 16, cg, sizeof(cg)), -1);
	assert_int_equal(hm_parse_cgroup2_path("1:name=x:/a\n", 12, cg, sizeof(cg)), -1);
	assert_int_equal(hm_parse_cgroup2_path("0::/abcdef\n", 11, cg, 4), -1);

	uint64_t inact;
	const char *ms = "anon 100\nfile 200\ninactive_anon 5\ninactive_file 150\nactive_file 50\n";
	assert_int_equal(hm_parse_memory_stat(ms, strlen(ms), &inact), 0);
	assert_int_equal(inact, 150);
	assert_int_equal(hm_parse_memory_stat("anon 1\n", 7, &inact), -1);

	struct hm_disk d[4];
	const char *ds = "   8       0 sda 100 0 800 50 200 0 1600 70 0 100 120 0 0 0 0\n"
			 "   8       1 sda1 1 0 8 1 2 0 16 1 0 1 2\n"
			 " bad line\n"
			 "   7       0 loop0 1 0 2 3 4 0 5 6 0 1 1\n";
	assert_int_equal(hm_parse_diskstats(ds, strlen(ds), d, 4), 3);
	assert_string_equal(d[0].name, "sda");
	assert_int_equal(d[0].reads, 100);
	assert_int_equal(d[0].read_sectors, 800);
	assert_int_equal(d[0].read_ms, 50);
	assert_int_equal(d[0].writes, 200);
	assert_int_equal(d[0].write_sectors, 1600);
	assert_int_equal(d[0].write_ms, 70);
	assert_int_equal(hm_parse_diskstats(ds, strlen(ds), d, 1), 1); /* bounded */
}

static void put(const char *dir, const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	write_text(path, text);
}

/* Makes the directory dir/rel; its path into path (n bytes). */
static void sub_path(const char *dir, const char *rel, char *path, size_t n)
{
	snprintf(path, n, "%s/%s", dir, rel);
	assert_int_equal(mkdir(path, 0755), 0);
}

static void sub(const char *dir, const char *rel)
{
	char path[512];
	sub_path(dir, rel, path, sizeof(path));
}

/* The value of metric name in b for the series whose labels hold k1=v1
 * and k2=v2 (a NULL key: any); NAN when absent. */
static double value_of2(const struct metric_batch *b, const char *name, const char *k1,
			const char *v1, const char *k2, const char *v2)
{
	for (size_t i = 0; i < b->npoints; i++) {
		const struct mb_series *s = &b->series[b->point_series[i]];
		if (strcmp(strtab_get(&b->strings, s->name), name) != 0)
			continue;
		const uint32_t *kv = b->set_strings + b->set_offsets[s->labels];
		bool ok1 = !k1, ok2 = !k2;
		for (uint32_t k = 0; k + 1 < b->set_lengths[s->labels]; k += 2) {
			const char *key = strtab_get(&b->strings, kv[k]);
			const char *val = strtab_get(&b->strings, kv[k + 1]);
			ok1 = ok1 || (!strcmp(key, k1) && !strcmp(val, v1));
			ok2 = ok2 || (!strcmp(key, k2) && !strcmp(val, v2));
		}
		if (ok1 && ok2)
			return b->point_values[i];
	}
	return NAN;
}

static double value_of(const struct metric_batch *b, const char *name, const char *key,
		       const char *value)
{
	return value_of2(b, name, key, value, NULL, NULL);
}

static void fake_round(const char *proc, const char *cg, int r)
{
	char t[1024];
	snprintf(t, sizeof(t), "cpu  %d 0 %d %d 0 0 0 0 0 0\n", 100 + r * 150, 50 + r * 50, 1000 + r * 100);
	put(proc, "stat", t);
	put(proc, "meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n");
	snprintf(t, sizeof(t), "   8 0 sda %d 0 %d %d %d 0 %d %d 0 0 0\n   8 1 sda1 1 0 1 1 1 0 1 1 0 0 0\n",
		 10 + r * 10, 100 + r * 2048, 5 + r * 40, 20 + r * 4, 200 + r * 4096, 8 + r * 8);
	put(proc, "diskstats", t);
	/* pid 100: 1 core user + 0.25 system over one second at 100 ticks/s */
	snprintf(t, sizeof(t), "100 (worker) R 1 1 1 0 -1 0 0 0 0 0 %d %d 0 0 20 0 1 0 777 1 2560 0 0\n",
		 300 + r * 100, 40 + r * 25);
	put(proc, "100/stat", t);
	snprintf(t, sizeof(t), "read_bytes: %d\nwrite_bytes: %d\n", 1000 + r * 4096, r * 1048576);
	put(proc, "100/io", t);
	put(proc, "100/cgroup", "0::/app.slice\n");
	/* pid 200: idle; pid 300: a kernel thread (no memory) */
	put(proc, "200/stat", "200 (idle) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 888 1 100 0 0\n");
	put(proc, "200/io", "read_bytes: 0\nwrite_bytes: 0\n");
	put(proc, "200/cgroup", "0::/app.slice\n");
	put(proc, "300/stat", "300 (kworker/0:1) I 2 0 0 0 -1 0 0 0 0 0 0 9 0 0 20 0 1 0 5 0 0 0 0\n");
	put(cg, "app.slice/memory.current", "1000000\n");
	put(cg, "app.slice/memory.stat", "anon 1\ninactive_file 250000\n");
}

static void test_collector(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char proc[300], cg[300], blk[300];
	sub_path(dir, "proc", proc, sizeof(proc));
	sub_path(dir, "cg", cg, sizeof(cg));
	sub_path(dir, "block", blk, sizeof(blk));
	sub(proc, "100");
	sub(proc, "200");
	sub(proc, "300");
	sub(cg, "app.slice");
	sub(blk, "sda");
	const char *host_kv[] = { "cluster.name", "c1", "host.type", "" };
	struct hostmetrics_opts o = { .proc_root = proc, .cgroup_root = cg, .sys_block = blk,
				      .host_name = "h1", .host_arch = "amd64", .host_kv = host_kv,
				      .nhost_kv = 4, .ticks_per_s = 100, .page_size = 4096,
				      .max_procs = 1 };
	struct hostmetrics *h = hostmetrics_new(&o);
	struct metric_batch b;
	metric_batch_init(&b);
	fake_round(proc, cg, 0);
	hostmetrics_collect(h, &b, 1000, 1000000000ull);
	/* First reading: levels, no rates. */
	assert_true(isnan(value_of(&b, "process.utime", NULL, NULL)));
	assert_true(isnan(value_of(&b, "host.cpu.user", NULL, NULL)));
	assert_true(value_of(&b, "process.rss", "process.executable.name", "worker") == 2560.0 * 4096);
	assert_true(value_of(&b, "host.memory.used", NULL, NULL) == 600.0 * 1024);
	assert_true(value_of(&b, "process.wss", "cgroup.path", "/app.slice") == 750000.0);
	assert_int_equal(b.dropped_processes, 1); /* max_procs 1: "idle" dropped, the kworker not counted */
	metric_batch_free(&b);

	metric_batch_init(&b);
	fake_round(proc, cg, 1);
	hostmetrics_collect(h, &b, 2000, 2000000000ull);
	assert_true(fabs(value_of(&b, "process.utime", "process.pid", "100") - 1.0) < 1e-9);
	assert_true(fabs(value_of(&b, "process.stime", "process.pid", "100") - 0.25) < 1e-9);
	assert_true(fabs(value_of(&b, "io.write_throughput", "process.pid", "100") - 1048576.0) < 1e-6);
	assert_true(fabs(value_of(&b, "io.read_throughput", "process.pid", "100") - 4096.0) < 1e-6);
	assert_true(isnan(value_of(&b, "process.rss", "process.pid", "200"))); /* dropped */
	assert_true(fabs(value_of(&b, "host.cpu.user", NULL, NULL) - 1.5) < 1e-9);
	assert_true(fabs(value_of(&b, "host.cpu.idle", NULL, NULL) - 1.0) < 1e-9);
	assert_true(fabs(value_of(&b, "io.disk.write_throughput", "disk.device", "sda") - 4096.0 * 512) < 1e-6);
	assert_true(fabs(value_of(&b, "io.disk.read_latency", "disk.device", "sda") - 4.0) < 1e-9);
	assert_true(isnan(value_of(&b, "io.disk.read_latency", "disk.device", "sda1")));
	/* Every process series carries the host's attributes; empty ones are left out. */
	assert_true(!isnan(value_of(&b, "process.utime", "cluster.name", "c1")));
	assert_true(isnan(value_of(&b, "process.utime", "host.type", "")));
	assert_true(!isnan(value_of(&b, "process.utime", "host.name", "h1")));
	/* Label sets are interned: the worker's 5 metrics share one. */
	size_t sets = b.nsets;
	assert_true(sets < b.nseries);

	/* Encoded by the agent, decoded and stored by the server, queried. */
	struct buf z = { 0 }, err = { 0 }, out = { 0 };
	struct metric_batch_meta meta = { "inst", 7, "default", 1000, 2000 };
	/* Times must be real: move the points to now. */
	int64_t now = now_unix_ms();
	for (size_t i = 0; i < b.npoints; i++)
		b.point_ms[i] = now - 500;
	meta.start_unix_ms = now - 1000;
	meta.end_unix_ms = now;
	assert_int_equal(metric_batch_encode(&b, &meta, &z), 0);
	Ember__Ingest__V1__MetricsBatch *m = metrics_decode(z.data, z.len, &err);
	if (!m)
		fail_msg("decode: %s", err.data);
	assert_int_equal(m->n_point_series, b.npoints);
	assert_int_equal(m->n_label_set_lengths, sets);
	struct metrics_store *st;
	assert_int_equal(metrics_open_dir(dir, 3600000, &st, &err), 0);
	assert_int_equal(metrics_store_batch(st, "p1", m, now, &err), 0);
	char body[512];
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"process.executable.name == 'worker'\"},\"metric\":\"process.utime\",\"num_buckets\":1}",
		 (long long)(now - 1000), (long long)now);
	assert_int_equal(metrics_query(st, "p1", body, strlen(body), &out, &err), 0);
	json_t *doc = json_loads(out.data, 0, NULL);
	assert_non_null(doc);
	json_t *pt = json_array_get(json_object_get(json_array_get(json_object_get(doc, "series"), 0), "points"), 0);
	assert_true(fabs(json_number_value(json_array_get(pt, 1)) - 1.0) < 1e-6);
	json_decref(doc);
	metrics_close(st);
	metrics_decode_free(m);
	buf_free(&z);
	buf_free(&err);
	buf_free(&out);
	metric_batch_free(&b);
	hostmetrics_free(h);
	rm_temp_dir(dir);
}

/* A label with control characters (a process named "a\nb") is sent with
 * them replaced: the server refuses a batch holding one, which lost every
 * metric of the interval. */
static void test_metric_batch_control_characters(void **state)
{
	(void)state;
	struct metric_batch b;
	metric_batch_init(&b);
	uint32_t kv[4] = { metric_batch_str(&b, "process.executable.name"),
			   metric_batch_str(&b, "odd\nname\x7f\t"),
			   metric_batch_str(&b, "thread.name"), metric_batch_str(&b, "\x01") };
	uint32_t ls = metric_batch_labels(&b, kv, 4);
	int64_t now = now_unix_ms();
	assert_int_equal(metric_batch_add(&b, "process.rss", "bytes", ls, now - 1000, 42.0), 0);
	struct metric_batch_meta meta = { "inst", 1, "default", now - 2000, now };
	struct buf z = { 0 }, err = { 0 };
	assert_int_equal(metric_batch_encode(&b, &meta, &z), 0);
	Ember__Ingest__V1__MetricsBatch *m = metrics_decode(z.data, z.len, &err);
	assert_non_null(m);
	if (metrics_validate(m, &err) != 0)
		fail_msg("refused: %s", err.data);
	bool found = false;
	for (size_t i = 0; i < m->n_strings; i++)
		found |= strcmp(m->strings[i], "odd?name??") == 0;
	assert_true(found);
	metrics_decode_free(m);
	metric_batch_free(&b);
	buf_free(&z);
	buf_free(&err);
}

static void test_metric_batch_bounds(void **state)
{
	(void)state;
	struct metric_batch b;
	metric_batch_init(&b);
	uint32_t kv[2 * (MB_MAX_LABELS + 4)];
	for (size_t i = 0; i < ARRAY_SIZE(kv); i++) {
		char s[16];
		snprintf(s, sizeof(s), "%c%zu", i % 2 ? 'v' : 'k', i / 2);
		kv[i] = metric_batch_str(&b, s);
	}
	uint32_t ls = metric_batch_labels(&b, kv, ARRAY_SIZE(kv));
	assert_int_equal(b.set_lengths[ls], 2 * MB_MAX_LABELS);
	assert_int_equal(metric_batch_labels(&b, kv, ARRAY_SIZE(kv)), ls);
	assert_int_equal(metric_batch_add(&b, "m", "u", ls, 1, NAN), -1);
	assert_int_equal(metric_batch_add(&b, "m", "u", ls + 5, 1, 1.0), -1);
	assert_int_equal(b.refused, 2);
	for (int i = 0; i < MB_MAX_POINTS; i++)
		assert_int_equal(metric_batch_add(&b, "m", "u", ls, i, 1.0), 0);
	assert_int_equal(metric_batch_add(&b, "m", "u", ls, 1, 1.0), -1);
	assert_int_equal(b.nseries, 1);
	metric_batch_free(&b);
}

/* A batch of n series "cpu" with host.name = h<i>, points (ts, v). */
static Ember__Ingest__V1__MetricsBatch *make_batch(const char *const *hosts, size_t nh,
						   const int64_t *ts, const double *v,
						   const uint32_t *series, size_t np, struct buf *err)
{
	struct metric_batch b;
	metric_batch_init(&b);
	uint32_t sets[8];
	for (size_t i = 0; i < nh; i++) {
		uint32_t kv[4] = { metric_batch_str(&b, "host.name"), metric_batch_str(&b, hosts[i]),
				   metric_batch_str(&b, "role"), metric_batch_str(&b, i % 2 ? "odd" : "even") };
		sets[i] = metric_batch_labels(&b, kv, 4);
	}
	for (size_t i = 0; i < np; i++)
		assert_int_equal(metric_batch_add(&b, "cpu", "cores", sets[series[i]], ts[i], v[i]), 0);
	struct metric_batch_meta meta = { "inst", 1, "default", ts[0] - 1, ts[np - 1] };
	struct buf z = { 0 };
	assert_int_equal(metric_batch_encode(&b, &meta, &z), 0);
	Ember__Ingest__V1__MetricsBatch *m = metrics_decode(z.data, z.len, err);
	buf_free(&z);
	metric_batch_free(&b);
	return m;
}

static json_t *run_query(struct metrics_store *st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	json_t *doc = metrics_fixture_vquery(metrics_query, st, 0, fmt, ap);
	va_end(ap);
	return doc;
}

static double point(json_t *doc, size_t group, size_t i, int64_t *ts)
{
	json_t *p = json_array_get(json_object_get(json_array_get(json_object_get(doc, "series"), group), "points"), i);
	assert_non_null(p);
	if (ts)
		*ts = json_integer_value(json_array_get(p, 0));
	return json_number_value(json_array_get(p, 1));
}

static void test_store_queries(void **state)
{
	(void)state;
	struct metrics_fixture fx;
	struct metrics_store *st = metrics_fixture_open(&fx, 3600000);
	struct buf err = { 0 };
	int64_t t = now_unix_ms() - 60000;
	t -= t % 1000;
	const char *hosts[] = { "h0", "h1", "h2" };
	/* h0: 1, 3 in bucket 0, 5 in bucket 1; h1: 2 in bucket 0, 4 in bucket 1; h2: 10 in bucket 1 */
	int64_t ts[] = { t, t + 500, t + 1000, t + 100, t + 1100, t + 1200 };
	double v[] = { 1, 3, 5, 2, 4, 10 };
	uint32_t se[] = { 0, 0, 0, 1, 1, 2 };
	Ember__Ingest__V1__MetricsBatch *m = make_batch(hosts, 3, ts, v, se, 6, &err);
	assert_non_null(m);
	assert_int_equal(metrics_store_batch(st, "p", m, t, &err), 0);
	assert_int_equal(metrics_store_batch(st, "p", m, t, &err), 0); /* again: no duplicates */
	metrics_decode_free(m);
	struct metrics_stats ss;
	metrics_get_stats(st, &ss);
	assert_int_equal(ss.points, 12);
	assert_int_equal(ss.batches, 2);

	/* avg over time, sum over series */
	const char *q = "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":%s},\"metric\":\"cpu\","
			"\"group_by\":%s,\"temporal\":\"%s\",\"spatial\":\"%s\",\"num_buckets\":%d}";
	long long s0 = t, e0 = t + 2000;
	json_t *d = run_query(st, q, s0, e0, "null", "null", "avg", "sum", 2);
	int64_t pts;
	assert_true(point(d, 0, 0, &pts) == 2.0 + 2.0);
	assert_int_equal(pts, t);
	assert_true(point(d, 0, 1, &pts) == 5.0 + 4.0 + 10.0);
	assert_int_equal(pts, t + 1000);
	assert_int_equal(json_integer_value(json_object_get(d, "buckets_ms")), 1000);
	assert_string_equal(json_string_value(json_object_get(d, "unit")), "cores");
	json_decref(d);
	/* max over time, max over series */
	d = run_query(st, q, s0, e0, "null", "null", "max", "max", 2);
	assert_true(point(d, 0, 0, NULL) == 3.0);
	assert_true(point(d, 0, 1, NULL) == 10.0);
	json_decref(d);
	/* avg over series; one bucket */
	d = run_query(st, q, s0, e0, "null", "null", "avg", "avg", 1);
	assert_true(fabs(point(d, 0, 0, NULL) - (3.0 + 3.0 + 10.0) / 3) < 1e-5);
	json_decref(d);
	/* group by role; a CEL filter evaluated per series */
	d = run_query(st, q, s0, e0, "null", "\"role\"", "max", "sum", 1);
	json_t *series = json_object_get(d, "series");
	assert_int_equal(json_array_size(series), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(series, 0), "group")), "even");
	assert_true(point(d, 0, 0, NULL) == 5.0 + 10.0);
	assert_true(point(d, 1, 0, NULL) == 4.0);
	json_decref(d);
	d = run_query(st, q, s0, e0, "\"host.name.startsWith('h') && host.name != 'h2'\"", "null", "max", "sum", 1);
	assert_true(point(d, 0, 0, NULL) == 9.0);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "stats"), "series_matched")), 2);
	json_decref(d);
	/* percentiles: over the stored points of each group (nearest rank),
	 * not over its buckets */
	const char *qp = "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"metric\":\"cpu\",\"group_by\":%s,"
			 "\"num_buckets\":2,\"percentiles\":true}";
	d = run_query(st, qp, s0, e0, "\"host.name\"");
	json_t *p0 = json_object_get(json_array_get(json_object_get(d, "series"), 0), "percentiles");
	assert_true(json_number_value(json_object_get(p0, "p50")) == 3.0); /* h0: 1 3 5 */
	assert_true(json_number_value(json_object_get(p0, "p95")) == 5.0);
	assert_int_equal(json_integer_value(json_object_get(p0, "points")), 3);
	json_t *p1 = json_object_get(json_array_get(json_object_get(d, "series"), 1), "percentiles");
	assert_true(json_number_value(json_object_get(p1, "p50")) == 2.0); /* h1: 2 4 */
	assert_true(json_number_value(json_object_get(p1, "p99")) == 4.0);
	json_decref(d);
	d = run_query(st, qp, s0, e0, "null");
	p0 = json_object_get(json_array_get(json_object_get(d, "series"), 0), "percentiles");
	assert_true(json_number_value(json_object_get(p0, "p50")) == 3.0); /* 1 2 3 4 5 10 */
	assert_true(json_number_value(json_object_get(p0, "p95")) == 10.0);
	assert_true(json_number_value(json_object_get(p0, "p99")) == 10.0);
	json_decref(d);
	d = run_query(st, q, s0, e0, "null", "null", "avg", "sum", 2); /* not asked: none */
	assert_null(json_object_get(json_array_get(json_object_get(d, "series"), 0), "percentiles"));
	json_decref(d);
	double hundred[100];
	for (int i = 0; i < 100; i++)
		hundred[i] = i + 1;
	assert_true(metrics_percentile(hundred, 100, 50) == 50.0);
	assert_true(metrics_percentile(hundred, 100, 95) == 95.0);
	assert_true(metrics_percentile(hundred, 100, 99) == 99.0);
	assert_true(metrics_percentile(hundred, 1, 99) == 1.0);
	assert_true(metrics_percentile(hundred, 3, 50) == 2.0);

	/* a range holding nothing of a known metric: empty, not an error */
	d = run_query(st, q, s0 - 100000, s0 - 50000, "null", "null", "avg", "sum", 10);
	assert_int_equal(json_array_size(json_object_get(d, "series")), 0);
	json_decref(d);

	/* errors */
	struct buf out = { 0 };
	char body[512];
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"metric\":\"nope\"}", s0, e0);
	assert_int_equal(metrics_query(st, "p", body, strlen(body), &out, &err), 404);
	assert_non_null(strstr(err.data, "no metric named"));
	buf_reset(&err);
	assert_int_equal(metrics_query(st, "other", body, strlen(body), &out, &err), 404);
	buf_reset(&err);
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"host.name ==\"},\"metric\":\"cpu\"}", s0, e0);
	assert_int_equal(metrics_query(st, "p", body, strlen(body), &out, &err), 400);
	assert_non_null(strstr(err.data, "query"));
	buf_reset(&err);
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"metric\":\"cpu\"}", e0, s0);
	assert_int_equal(metrics_query(st, "p", body, strlen(body), &out, &err), 400);
	buf_reset(&err);
	/* A matches() pattern that reaches its match limit (a pattern may
	 * lower it, never raise it): 422 naming it, for both routes. */
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":"
		 "\"host.name.matches('(*LIMIT_MATCH=1)(*NO_START_OPT)^(h|[a-z0-9])+x') || true\"},\"metric\":\"cpu\"}", s0, e0);
	assert_int_equal(metrics_query(st, "p", body, strlen(body), &out, &err), 422);
	assert_non_null(strstr(err.data, "match limit"));
	buf_reset(&err);
	buf_reset(&out);
	assert_int_equal(metrics_names(st, "p", body, strlen(body), &out, &err), 422);
	assert_non_null(strstr(err.data, "LIMIT_MATCH=1"));
	buf_reset(&err);
	buf_reset(&out);

	/* names */
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld,\"query\":\"role == 'odd'\"}}", s0, e0);
	assert_int_equal(metrics_names(st, "p", body, strlen(body), &out, &err), 0);
	assert_string_equal(out.data, "{\"names\":[{\"name\":\"cpu\",\"unit\":\"cores\",\"series\":1}]}\n");
	buf_reset(&out);

	/* retention: everything is older than now + 2 h - 1 h */
	assert_int_equal(metrics_retention(st, now_unix_ms() + 7200000, &err), 0);
	metrics_get_stats(st, &ss);
	assert_int_equal(ss.retention_deleted, 6);
	snprintf(body, sizeof(body), "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld}}", s0, e0);
	assert_int_equal(metrics_names(st, "p", body, strlen(body), &out, &err), 0);
	assert_string_equal(out.data, "{\"names\":[]}\n");
	buf_free(&out);
	buf_free(&err);
	metrics_fixture_close(&fx);
}

/* A series' points of an hour are one chunk: points on both sides of an
 * hour boundary, later batches merging into a chunk (a point at a time
 * already stored replaces it), and a retention cutoff inside a chunk
 * (the points before it go, the rest stay). */
struct pts_seen {
	size_t n;
	int64_t ts[8];
	double v[8];
	char project[8], labels[256];
};

static void on_point(void *ctx, const char *project, const char *labels, int64_t ts, double v)
{
	struct pts_seen *s = ctx;
	if (s->n < 8) {
		s->ts[s->n] = ts;
		s->v[s->n] = v;
	}
	s->n++;
	snprintf(s->project, sizeof(s->project), "%s", project);
	snprintf(s->labels, sizeof(s->labels), "%s", labels);
}

static void test_store_chunks(void **state)
{
	(void)state;
	const int64_t day = 86400000;
	struct metrics_fixture fx;
	struct metrics_store *st = metrics_fixture_open(&fx, 10 * day);
	struct buf err = { 0 };
	const int64_t H = 1796000400000LL; /* on the hour */
	const char *hosts[] = { "h0" };
	uint32_t se[] = { 0, 0, 0, 0 };
	int64_t ts1[] = { H - 1000, H + 1000, H + 2000, H + 3600005 };
	double v1[] = { 1, 2, 3, 4 };
	Ember__Ingest__V1__MetricsBatch *m = make_batch(hosts, 1, ts1, v1, se, 4, &err);
	assert_non_null(m);
	assert_int_equal(metrics_store_batch(st, "p", m, H, &err), 0);
	metrics_decode_free(m);
	/* A later batch: H + 2000 again (replaced), H + 1500 between (merged). */
	int64_t ts2[] = { H + 1500, H + 2000 };
	double v2[] = { 5, 7 };
	m = make_batch(hosts, 1, ts2, v2, se, 2, &err);
	assert_non_null(m);
	assert_int_equal(metrics_store_batch(st, "p", m, H, &err), 0);
	metrics_decode_free(m);
	const char *q = "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"metric\":\"cpu\","
			"\"temporal\":\"max\",\"spatial\":\"sum\",\"num_buckets\":%d}";
	/* One bucket per 500 ms from H - 1000 to H + 2500: 1, -, -, 2, 5, 7, - */
	json_t *d = run_query(st, q, (long long)(H - 1000), (long long)(H + 2500), 7);
	int64_t t;
	double want[][2] = { { -1000, 1 }, { 1000, 2 }, { 1500, 5 }, { 2000, 7 } };
	for (size_t i = 0; i < 4; i++) {
		assert_true(point(d, 0, i, &t) == want[i][1]);
		assert_int_equal(t, H + (int64_t)want[i][0]);
	}
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "stats"), "points_read")), 4);
	json_decref(d);
	/* A range starting inside a chunk reads only its points. */
	d = run_query(st, q, (long long)(H + 1600), (long long)(H + 3600006), 1);
	assert_true(point(d, 0, 0, NULL) == 7);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "stats"), "points_read")), 2);
	json_decref(d);
	/* metrics_points: the points of a range, every project, in time order. */
	struct pts_seen got = { 0 };
	assert_int_equal(metrics_points(st, "cpu", H + 1000, H + 3600006, 100, on_point, &got, &err), 0);
	assert_int_equal(got.n, 4);
	int64_t want_ts[] = { H + 1000, H + 1500, H + 2000, H + 3600005 };
	double want_v[] = { 2, 5, 7, 4 };
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(got.ts[i], want_ts[i]);
		assert_true(got.v[i] == want_v[i]);
	}
	assert_string_equal(got.project, "p");
	assert_non_null(strstr(got.labels, "\"h0\""));
	memset(&got, 0, sizeof(got));
	assert_int_equal(metrics_points(st, "cpu", H + 1000, H + 3600006, 2, on_point, &got, &err), 0);
	assert_int_equal(got.n, 2); /* at most max_points */
	memset(&got, 0, sizeof(got));
	assert_int_equal(metrics_points(st, "hw.gpu.xid", H - 7200000, H + 7200000, 100, on_point, &got, &err), 0);
	assert_int_equal(got.n, 0);
	/* Retention with its cutoff at H + 1600: H - 1000, H + 1000 and H + 1500 go. */
	assert_int_equal(metrics_retention(st, H + 1600 + 10 * day, &err), 0);
	struct metrics_stats ss;
	metrics_get_stats(st, &ss);
	assert_int_equal(ss.retention_deleted, 3);
	d = run_query(st, q, (long long)(H - 3600000), (long long)(H + 7200000), 1);
	assert_true(point(d, 0, 0, NULL) == 7);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "stats"), "points_read")), 2);
	json_decref(d);
	buf_free(&err);
	metrics_fixture_close(&fx);
}

static void test_decoder_bounds(void **state)
{
	(void)state;
	struct buf err = { 0 }, z = { 0 };
	/* Not zstd; zstd of garbage. */
	assert_null(metrics_decode("abc", 3, &err));
	assert_non_null(strstr(err.data, "zstd"));
	buf_reset(&err);
	assert_int_equal(zstd_compress_buf("\xff\xff\xff", 3, 1, &z), 0);
	assert_null(metrics_decode(z.data, z.len, &err));
	buf_free(&z);
	buf_reset(&err);
	/* Hand-built messages against metrics_validate. */
	char *strs[] = { "", "m", "k", "v" };
	uint32_t lens[] = { 2 }, ids[] = { 2, 3 }, names[] = { 1 }, units[] = { 0 }, sets[] = { 0 };
	uint32_t ps[] = { 0 };
	int64_t pt[] = { now_unix_ms() };
	double pv[] = { 1.5 };
	Ember__Ingest__V1__MetricsBatch b = EMBER__INGEST__V1__METRICS_BATCH__INIT;
	b.project = "default";
	b.start_unix_ms = pt[0] - 1;
	b.end_unix_ms = pt[0];
	b.n_strings = 4;
	b.strings = strs;
	b.n_label_set_lengths = 1;
	b.label_set_lengths = lens;
	b.n_label_set_strings = 2;
	b.label_set_strings = ids;
	b.n_series_names = b.n_series_units = b.n_series_label_sets = 1;
	b.series_names = names;
	b.series_units = units;
	b.series_label_sets = sets;
	b.n_point_series = b.n_point_times_ms = b.n_point_values = 1;
	b.point_series = ps;
	b.point_times_ms = pt;
	b.point_values = pv;
	assert_int_equal(metrics_validate(&b, &err), 0);
	ids[0] = 9; /* string id out of range */
	assert_int_equal(metrics_validate(&b, &err), -1);
	ids[0] = 0; /* empty key */
	assert_int_equal(metrics_validate(&b, &err), -1);
	ids[0] = 2;
	lens[0] = 3; /* odd */
	assert_int_equal(metrics_validate(&b, &err), -1);
	lens[0] = 2;
	pv[0] = INFINITY;
	assert_int_equal(metrics_validate(&b, &err), -1);
	pv[0] = 1;
	pt[0] = 12;
	assert_int_equal(metrics_validate(&b, &err), -1);
	pt[0] = now_unix_ms();
	sets[0] = 1;
	assert_int_equal(metrics_validate(&b, &err), -1);
	sets[0] = 0;
	names[0] = 0; /* the empty name */
	assert_int_equal(metrics_validate(&b, &err), -1);
	names[0] = 1;
	b.n_point_values = 0; /* counts disagree */
	assert_int_equal(metrics_validate(&b, &err), -1);
	b.n_point_values = 1;
	char longs[MET_MAX_STRING + 2];
	memset(longs, 'x', sizeof(longs) - 1);
	longs[sizeof(longs) - 1] = '\0';
	strs[3] = longs;
	assert_int_equal(metrics_validate(&b, &err), -1);
	strs[3] = "v";
	strs[0] = "x"; /* strings[0] must be "" */
	assert_int_equal(metrics_validate(&b, &err), -1);
	strs[0] = "";
	b.project = "a b";
	assert_int_equal(metrics_validate(&b, &err), -1);
	b.project = "default";
	assert_int_equal(metrics_validate(&b, &err), 0);
	buf_free(&err);
}

static void test_nvml_missing(void **state)
{
	(void)state;
	struct buf why = { 0 };
	assert_null(gpumetrics_open("/nonexistent/libnvidia-ml.so", false, &why));
	assert_non_null(strstr(why.data, "/nonexistent/libnvidia-ml.so"));
	buf_reset(&why);
	/* A library that is not NVML is refused by its missing symbols. */
	assert_null(gpumetrics_open("libz.so.1", false, &why));
	assert_non_null(strstr(why.data, "not NVML"));
	buf_free(&why);
}

static size_t points_named(const struct metric_batch *b, const char *prefix)
{
	size_t n = 0;
	for (size_t i = 0; i < b->npoints; i++)
		n += !strncmp(strtab_get(&b->strings, b->series[b->point_series[i]].name), prefix,
			      strlen(prefix));
	return n;
}

/* The points of metric name whose labels include every pair of kv (NULL
 * ends it); their count in *n, the first one's value returned (NaN when
 * none). */
static double value_kv(const struct metric_batch *b, const char *name, size_t *n, const char *const *kv)
{
	double first = NAN;
	size_t found = 0;
	for (size_t i = 0; i < b->npoints; i++) {
		const struct mb_series *s = &b->series[b->point_series[i]];
		if (strcmp(strtab_get(&b->strings, s->name), name) != 0)
			continue;
		const uint32_t *lk = b->set_strings + b->set_offsets[s->labels];
		bool all = true;
		for (size_t w = 0; kv[w]; w += 2) {
			bool ok = false;
			for (uint32_t k = 0; k + 1 < b->set_lengths[s->labels]; k += 2)
				ok = ok || (!strcmp(strtab_get(&b->strings, lk[k]), kv[w]) &&
					    !strcmp(strtab_get(&b->strings, lk[k + 1]), kv[w + 1]));
			all = all && ok;
		}
		if (all && found++ == 0)
			first = b->point_values[i];
	}
	if (n)
		*n = found;
	return first;
}
#define VAL(b, name, ...) value_kv((b), (name), NULL, (const char *const[]){ __VA_ARGS__, NULL })

static bool near(double got, double want, double rel)
{
	return fabs(got - want) <= fabs(want) * rel;
}

/* The hw.gpu.xid points of a batch (the fake's XID 79 on GPU 0 and XID
 * 31 in GPU 1's MIG device mig1), checked: code, meaning, device and a
 * time since `since`. */
static size_t xid_points(const struct metric_batch *b, int64_t since)
{
	size_t n = points_named(b, "hw.gpu.xid");
	if (!n)
		return 0;
	for (size_t k = 0; k < b->npoints; k++)
		if (!strcmp(strtab_get(&b->strings, b->series[b->point_series[k]].name), "hw.gpu.xid"))
			assert_true(b->point_ms[k] >= since && b->point_ms[k] <= now_unix_ms());
	double x79 = VAL(b, "hw.gpu.xid", "gpu.index", "0", "gpu.uuid", "GPU-fake-0", "gpu.xid.code", "79",
			 "gpu.xid.meaning", "GPU has fallen off the bus");
	double x31 = VAL(b, "hw.gpu.xid", "gpu.index", "1/mig1", "gpu.uuid", "MIG-fake-1-1", "gpu.parent.uuid",
			 "GPU-fake-1", "gpu.xid.code", "31", "gpu.xid.meaning",
			 "GPU memory page fault (an illegal address in an application)");
	assert_int_equal((x79 == 1.0) + (x31 == 1.0), n); /* each point one of the two */
	return n;
}

/* The fake NVML, built beside this test. */
static void fake_nvml_path(char *lib, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", lib, size - 32);
	assert_true(n > 0);
	lib[n] = '\0';
	strcpy(strrchr(lib, '/') + 1, "libfake-nvml.so");
}

/* A collector of host h1 whose cgroup and block trees are dir (empty). */
static struct hostmetrics *host_h1(const char *dir)
{
	struct hostmetrics_opts o = { .proc_root = "/proc", .cgroup_root = dir, .sys_block = dir,
				      .host_name = "h1", .host_arch = "amd64" };
	return hostmetrics_new(&o);
}

/* gpumetrics against tests/unit/fake_nvml.c (built beside this test as
 * libfake-nvml.so, the scripted two H100s): every reading lands as the
 * metric key it is documented as (docs/internals/metrics.md), on the
 * right device, link and process; GPU 1's three MIG devices are devices
 * of their own with their parent's index and UUID; the memory share
 * leaves out the driver's reserve; NVLink throughput is the counters'
 * rate between two collections, GPM needs two samples; per-process SM
 * samples move forward between collections; what a device does not
 * support is left out; the XID 79 arrives as one hw.gpu.xid point with
 * its code and meaning, once; a failing nvmlInit_v2 is reported with
 * NVML's own words. */
static void test_nvml_fake(void **state)
{
	(void)state;
	char lib[4096];
	fake_nvml_path(lib, sizeof(lib));
	struct buf why = { 0 };
	setenv("FAKE_NVML_XID_AFTER_MS", "300", 1); /* after the first two collections */
	setenv("FAKE_NVML_ECC_AFTER_MS", "0", 1);
	struct gpumetrics *g = gpumetrics_open(lib, false, &why);
	assert_non_null(g);
	assert_int_equal(gpumetrics_devices(g), 5); /* two GPUs, three MIG devices */
	assert_string_equal(gpumetrics_library(g), lib);

	char *dir = make_temp_dir();
	struct hostmetrics *h = host_h1(dir);
	struct metric_batch b;
	metric_batch_init(&b);
	int64_t before = now_unix_ms();
	gpumetrics_collect(g, h, &b, 5000);
	const char *H100 = "NVIDIA H100 80GB HBM3";
	assert_true(VAL(&b, "hw.gpu.utilization", "gpu.uuid", "GPU-fake-0", "gpu.name", H100, "host.name", "h1") == 87.0);
	assert_true(isnan(VAL(&b, "hw.gpu.utilization", "gpu.index", "1"))); /* MIG mode: none */
	assert_true(VAL(&b, "hw.gpu.memory.utilization", "gpu.index", "0") == 25.0);
	assert_true(VAL(&b, "hw.gpu.memory.usage", "gpu.index", "0") == 20.0 * (1 << 30));
	assert_true(VAL(&b, "hw.gpu.memory.limit", "gpu.index", "0") == 80.0 * (1 << 30));
	assert_true(fabs(VAL(&b, "hw.gpu.power", "gpu.index", "0") - 512.345) < 1e-9);
	assert_true(VAL(&b, "hw.gpu.power", "gpu.index", "1") == 300.0);
	assert_true(VAL(&b, "hw.gpu.power.limit", "gpu.index", "0") == 700.0);
	assert_true(VAL(&b, "hw.gpu.temp", "gpu.index", "0") == 61.0);
	assert_true(VAL(&b, "hw.gpu.clock.sm", "gpu.index", "0") == 1980.0);
	assert_true(VAL(&b, "hw.gpu.clock.mem", "gpu.index", "0") == 2619.0);
	/* Clocks held back: the mask, and one 0/1 point per named reason. */
	assert_true(VAL(&b, "hw.gpu.clocks_throttle.reasons", "gpu.index", "0") == 36.0);
	assert_true(VAL(&b, "hw.gpu.clocks_throttle", "gpu.index", "0", "gpu.throttle_reason", "sw_power_cap") == 1.0);
	assert_true(VAL(&b, "hw.gpu.clocks_throttle", "gpu.index", "0", "gpu.throttle_reason", "sw_thermal_slowdown") == 1.0);
	assert_true(VAL(&b, "hw.gpu.clocks_throttle", "gpu.index", "0", "gpu.throttle_reason", "gpu_idle") == 0.0);
	assert_true(VAL(&b, "hw.gpu.clocks_throttle", "gpu.index", "1", "gpu.throttle_reason", "gpu_idle") == 1.0);
	size_t cnt;
	value_kv(&b, "hw.gpu.clocks_throttle", &cnt, (const char *const[]){ "gpu.index", "0", NULL });
	assert_int_equal(cnt, 9);
	assert_true(VAL(&b, "hw.gpu.pcie.tx", "gpu.index", "0") == 1000.0 * 1024);
	assert_true(VAL(&b, "hw.gpu.pcie.rx", "gpu.index", "0") == 2000.0 * 1024);
	/* NVLink errors per link now; throughput needs a second collection. */
	assert_true(VAL(&b, "hw.gpu.nvlink.errors", "gpu.index", "0", "gpu.nvlink.link", "0", "error.type", "replay") == 3.0);
	assert_true(VAL(&b, "hw.gpu.nvlink.errors", "gpu.index", "0", "gpu.nvlink.link", "1", "error.type", "replay") == 0.0);
	value_kv(&b, "hw.gpu.nvlink.errors", &cnt, (const char *const[]){ "gpu.index", "1", NULL });
	assert_int_equal(cnt, 8); /* two links, four counters */
	assert_true(isnan(VAL(&b, "hw.gpu.nvlink.tx", "gpu.index", "0")));
	/* ECC: the error the fake scripted at time 0. */
	assert_true(VAL(&b, "hw.gpu.ecc.errors", "gpu.index", "0", "error.type", "corrected", "gpu.ecc.counter", "volatile") == 1.0);
	assert_true(VAL(&b, "hw.gpu.ecc.errors", "gpu.index", "0", "error.type", "corrected", "gpu.ecc.counter", "aggregate") == 6.0);
	assert_true(VAL(&b, "hw.gpu.ecc.errors", "gpu.index", "0", "error.type", "uncorrected", "gpu.ecc.counter", "volatile") == 0.0);
	assert_true(VAL(&b, "hw.gpu.ecc.errors", "gpu.index", "1", "error.type", "corrected", "gpu.ecc.counter", "aggregate") == 0.0);
	assert_true(VAL(&b, "hw.gpu.retired_pages", "gpu.index", "0", "gpu.retirement.cause", "single_bit") == 2.0);
	assert_true(VAL(&b, "hw.gpu.retired_pages", "gpu.index", "0", "gpu.retirement.cause", "double_bit") == 0.0);
	assert_true(isnan(VAL(&b, "hw.gpu.retired_pages", "gpu.index", "1")));
	assert_true(VAL(&b, "hw.gpu.remapped_rows", "gpu.index", "0", "error.type", "corrected") == 1.0);
	assert_true(VAL(&b, "hw.gpu.remapped_rows", "gpu.index", "0", "error.type", "uncorrected") == 0.0);
	assert_true(VAL(&b, "hw.gpu.remapped_rows.pending", "gpu.index", "0") == 0.0);
	assert_true(VAL(&b, "hw.gpu.remapped_rows.failure", "gpu.index", "0") == 0.0);
	/* GPM: nothing until two samples. */
	assert_true(isnan(VAL(&b, "hw.gpu.sm.occupancy", "gpu.index", "0")));
	/* MIG devices: their own names, memory and parent. */
	assert_true(VAL(&b, "hw.gpu.memory.utilization", "gpu.index", "1/mig0", "gpu.uuid", "MIG-fake-1-0", "gpu.name",
			"NVIDIA H100 80GB HBM3 MIG 3g.40gb", "gpu.parent.index", "1", "gpu.parent.uuid", "GPU-fake-1") == 25.0);
	assert_true(VAL(&b, "hw.gpu.memory.limit", "gpu.index", "1/mig1", "gpu.name", "NVIDIA H100 80GB HBM3 MIG 2g.20gb") ==
		    20.0 * (1 << 30));
	assert_true(VAL(&b, "hw.gpu.memory.utilization", "gpu.index", "1/mig2", "gpu.uuid", "MIG-fake-1-2") == 10.0);
	assert_true(isnan(VAL(&b, "hw.gpu.memory.utilization", "gpu.index", "1/mig3")));
	assert_true(isnan(VAL(&b, "hw.gpu.power", "gpu.index", "1/mig0"))); /* a MIG device has no power of its own */
	/* GPUs carry no parent. */
	assert_true(isnan(VAL(&b, "hw.gpu.temp", "gpu.index", "0", "gpu.parent.index", "0")));
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	assert_true(VAL(&b, "hw.gpu.process.memory.utilization", "process.pid", pid, "gpu.index", "0") == 12.5);
	assert_true(VAL(&b, "hw.gpu.process.memory.usage", "process.pid", pid, "gpu.index", "0") == 10.0 * (1 << 30));
	assert_true(VAL(&b, "hw.gpu.process.utilization", "process.pid", pid, "gpu.uuid", "GPU-fake-0") == 77.0);
	/* The process's own attributes come with it (read from /proc). */
	assert_false(isnan(VAL(&b, "hw.gpu.process.utilization", "process.pid", pid, "process.executable.name", "test_metrics")));
	/* The XID 79 is not due yet (counted all the same, should a slow
	 * machine get past its time). */
	size_t xids = xid_points(&b, before);
	metric_batch_free(&b);

	/* A second collection: NVLink rates between the two (link L sends
	 * (L+1) GiB/s and receives half of it, to the other GPU); GPM from
	 * the two samples, none on GPU 1 (unsupported); the process's newer
	 * SM sample. */
	struct timespec ts20 = { 0, 20 * 1000000L };
	nanosleep(&ts20, NULL);
	metric_batch_init(&b);
	gpumetrics_collect(g, h, &b, 6000);
	assert_true(near(VAL(&b, "hw.gpu.nvlink.tx", "gpu.index", "0", "gpu.nvlink.link", "0", "gpu.nvlink.peer", "1"),
			 1024.0 * 1024 * 1024, 0.01));
	assert_true(near(VAL(&b, "hw.gpu.nvlink.rx", "gpu.index", "0", "gpu.nvlink.link", "1"), 1024.0 * 1024 * 1024, 0.01));
	assert_true(near(VAL(&b, "hw.gpu.nvlink.tx", "gpu.index", "1", "gpu.nvlink.link", "1", "gpu.nvlink.peer", "0"),
			 2048.0 * 1024 * 1024, 0.01));
	assert_true(VAL(&b, "hw.gpu.sm.occupancy", "gpu.index", "0") == 45.5);
	assert_true(VAL(&b, "hw.gpu.sm.efficiency", "gpu.index", "0") == 60.0);
	assert_true(VAL(&b, "hw.gpu.tensor_util", "gpu.index", "0") == 33.0);
	assert_true(VAL(&b, "hw.gpu.dram_bw_util", "gpu.index", "0") == 71.0);
	assert_true(isnan(VAL(&b, "hw.gpu.tensor_util", "gpu.index", "1")));
	assert_true(VAL(&b, "hw.gpu.process.utilization", "process.pid", pid) == 66.0);
	xids += xid_points(&b, before);
	metric_batch_free(&b);

	/* The XIDs: the event thread queued each when the fake sent it; each
	 * comes with one collection, at the time it arrived, once, on its
	 * device (the MIG device for the one NVML gave a GPU instance). */
	for (int i = 0; i < 200 && xids < 2; i++) {
		metric_batch_init(&b);
		gpumetrics_collect(g, h, &b, 7000 + i);
		xids += xid_points(&b, before);
		metric_batch_free(&b);
		nanosleep(&ts20, NULL);
	}
	assert_int_equal(xids, 2);
	metric_batch_init(&b);
	gpumetrics_collect(g, h, &b, 9000);
	assert_int_equal(points_named(&b, "hw.gpu.xid"), 0);
	metric_batch_free(&b);
	assert_string_equal(gpumetrics_xid_meaning(13), "graphics engine exception (often an out-of-range access in a kernel)");
	assert_null(gpumetrics_xid_meaning(99999));
	hostmetrics_free(h);
	gpumetrics_close(g);
	rm_temp_dir(dir);

	/* ECC scripted for later: no error yet. */
	setenv("FAKE_NVML_ECC_AFTER_MS", "600000", 1);
	setenv("FAKE_NVML_XID_AFTER_MS", "600000", 1);
	g = gpumetrics_open(lib, false, &why);
	assert_non_null(g);
	h = host_h1("/nonexistent"); /* no cgroup or block tree */
	metric_batch_init(&b);
	gpumetrics_collect(g, h, &b, 5000);
	assert_true(VAL(&b, "hw.gpu.ecc.errors", "gpu.index", "0", "error.type", "corrected", "gpu.ecc.counter", "volatile") == 0.0);
	metric_batch_free(&b);
	hostmetrics_free(h);
	/* Prompt, though the event thread waits for an XID. */
	int64_t t_close = now_unix_ms();
	gpumetrics_close(g);
	assert_true(now_unix_ms() - t_close < 2000);
	unsetenv("FAKE_NVML_ECC_AFTER_MS");
	unsetenv("FAKE_NVML_XID_AFTER_MS");

	buf_reset(&why);
	setenv("FAKE_NVML_INIT_FAIL", "1", 1);
	assert_null(gpumetrics_open(lib, false, &why));
	unsetenv("FAKE_NVML_INIT_FAIL");
	assert_non_null(strstr(why.data, "nvmlInit_v2 failed: Driver Not Loaded"));
	buf_free(&why);
}

/* Topology from the fake (FAKE_NVML_TOPOLOGY: three GPUs): each GPU's
 * NUMA node, near CPUs and NVLinks; each pair's path (NV2 between GPUs 0
 * and 1, the PCIe path for GPU 2 whose links are all down); the process
 * FAKE_NVML_FEEDER_PID names as GPU 2's, with the CPUs it may run on,
 * and the compute process of GPU 0; Cpus_allowed_list parsed from
 * /proc/PID/status text, refused when absent or malformed. */
static void test_nvml_topology(void **state)
{
	(void)state;
	struct cpuset cs;
	assert_int_equal(gpu_parse_cpus_allowed("Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1,5\nMems:\t1\n", &cs), 0);
	assert_int_equal(cpuset_count(&cs), 3);
	assert_true(cpuset_has(&cs, 5) && !cpuset_has(&cs, 2));
	assert_int_equal(gpu_parse_cpus_allowed("Cpus_allowed_list:\t0-1\n", &cs), -1); /* not at a line start */
	assert_int_equal(gpu_parse_cpus_allowed("x\nCpus_allowed_list:\t9-2\n", &cs), -1);
	assert_int_equal(gpu_parse_cpus_allowed("x\nCpus_allowed_list:\t\n", &cs), -1);

	char lib[4096];
	fake_nvml_path(lib, sizeof(lib));
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("FAKE_NVML_TOPOLOGY", "1", 1);
	setenv("FAKE_NVML_FEEDER_PID", pid, 1);
	setenv("FAKE_NVML_XID_AFTER_MS", "3600000", 1);
	struct buf why = { 0 };
	struct gpumetrics *g = gpumetrics_open(lib, false, &why);
	assert_non_null(g);
	assert_int_equal(gpumetrics_devices(g), 6); /* three GPUs, three MIG devices */
	char *dir = make_temp_dir();
	struct hostmetrics *h = host_h1(dir);
	struct metric_batch b;
	metric_batch_init(&b);
	gpumetrics_collect(g, h, &b, 5000);
	assert_true(VAL(&b, "hw.gpu.topology.device", "gpu.index", "0", "gpu.cpus", "0", "gpu.pci.bus_id",
			"00000000:18:00.0", "gpu.nvlink.links", "18", "gpu.nvlink.active", "2") == 0.0);
	assert_true(VAL(&b, "hw.gpu.topology.device", "gpu.index", "1", "gpu.cpus", "1") == 1.0);
	assert_true(VAL(&b, "hw.gpu.topology.device", "gpu.index", "2", "gpu.cpus", "1", "gpu.nvlink.links", "18",
			"gpu.nvlink.active", "0") == 1.0);
	size_t cnt;
	value_kv(&b, "hw.gpu.topology.device", &cnt, (const char *const[]){ "host.name", "h1", NULL });
	assert_int_equal(cnt, 3); /* GPUs only, not their MIG devices */
	assert_true(VAL(&b, "hw.gpu.topology.link", "gpu.index", "0", "gpu.peer.index", "1", "gpu.topology.path", "NV2",
			"gpu.topology.pcie", "SYS") == 2.0);
	assert_true(VAL(&b, "hw.gpu.topology.link", "gpu.index", "0", "gpu.peer.index", "2", "gpu.topology.path", "SYS") == 0.0);
	assert_true(VAL(&b, "hw.gpu.topology.link", "gpu.index", "1", "gpu.peer.index", "2", "gpu.topology.path", "NODE") == 0.0);
	value_kv(&b, "hw.gpu.topology.link", &cnt, (const char *const[]){ "host.name", "h1", NULL });
	assert_int_equal(cnt, 3); /* each pair once */
	struct cpuset mine;
	char *status = NULL;
	assert_int_equal(read_file("/proc/self/status", 1 << 16, &status, NULL), 0);
	assert_int_equal(gpu_parse_cpus_allowed(status, &mine), 0);
	free(status);
	struct buf list = { 0 };
	cpuset_format(&mine, &list);
	assert_true(VAL(&b, "hw.gpu.topology.process", "gpu.index", "2", "process.pid", pid, "process.cpus_allowed",
			list.data) == (double)cpuset_count(&mine));
	assert_false(isnan(VAL(&b, "hw.gpu.topology.process", "gpu.index", "0", "process.pid", pid)));
	buf_free(&list);
	metric_batch_free(&b);
	hostmetrics_free(h);
	gpumetrics_close(g);
	rm_temp_dir(dir);
	unsetenv("FAKE_NVML_TOPOLOGY");
	unsetenv("FAKE_NVML_FEEDER_PID");
	unsetenv("FAKE_NVML_XID_AFTER_MS");
	buf_free(&why);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_parsers),
	cmocka_unit_test(test_collector),
	cmocka_unit_test(test_metric_batch_bounds),
	cmocka_unit_test(test_metric_batch_control_characters),
	cmocka_unit_test(test_store_queries),
	cmocka_unit_test(test_store_chunks),
	cmocka_unit_test(test_decoder_bounds),
	cmocka_unit_test(test_nvml_missing),
	cmocka_unit_test(test_nvml_fake),
	cmocka_unit_test(test_nvml_topology))
