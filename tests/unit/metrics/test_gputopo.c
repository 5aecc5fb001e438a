/* test_gputopo.c - the GPU topology's findings (server/metrics/gputopo.h)
 * from points as the agent labels them, and the route's answer through a
 * metrics store: the latest collection per host only. */
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/metricbatch.h"
#include "jsonw.h"
#include "metricsfixture.h"
#include "server/metrics/gputopo.h"
#include "testutil.h"
#include "util.h"

/* A device point: index, NUMA node, near CPUs ("" none), links, up. */
static void dev(struct gputopo *t, const char *host, int64_t ts, const char *idx, double numa, const char *cpus,
		const char *links, const char *active)
{
	char l[512];
	snprintf(l, sizeof(l),
		 "{\"gpu.cpus\":\"%s\",\"gpu.index\":\"%s\",\"gpu.name\":\"H100\",\"gpu.nvlink.active\":\"%s\","
		 "\"gpu.nvlink.links\":\"%s\",\"gpu.uuid\":\"GPU-%s\",\"host.name\":\"%s\"}",
		 cpus, idx, active, links, idx, host);
	gputopo_add(t, "hw.gpu.topology.device", l, ts, numa);
}

static void pair(struct gputopo *t, const char *host, int64_t ts, const char *a, const char *b, const char *path,
		 const char *pcie, double nv)
{
	char l[512];
	snprintf(l, sizeof(l),
		 "{\"gpu.index\":\"%s\",\"gpu.peer.index\":\"%s\",\"gpu.topology.path\":\"%s\",\"gpu.topology.pcie\":\"%s\","
		 "\"host.name\":\"%s\"}",
		 a, b, path, pcie, host);
	gputopo_add(t, "hw.gpu.topology.link", l, ts, nv);
}

static void proc(struct gputopo *t, const char *host, int64_t ts, const char *gpu, const char *parent, int pid,
		 const char *cpus)
{
	char l[512];
	snprintf(l, sizeof(l),
		 "{\"gpu.index\":\"%s\",%s%s%s\"host.name\":\"%s\",\"process.cpus_allowed\":\"%s\","
		 "\"process.executable.name\":\"train\",\"process.pid\":\"%d\"}",
		 gpu, parent ? "\"gpu.parent.index\":\"" : "", parent ? parent : "", parent ? "\"," : "", host, cpus, pid);
	gputopo_add(t, "hw.gpu.topology.process", l, ts, 1);
}

static json_t *findings(const struct topo_host *h)
{
	struct buf out = { 0 };
	struct jsonw w;
	jsonw_init(&w, &out);
	gputopo_findings(h, &w);
	assert_int_equal(jsonw_finish(&w), 0);
	json_t *doc = json_loads(out.data, 0, NULL);
	assert_non_null(doc);
	buf_free(&out);
	return doc;
}

static const char *fs(json_t *doc, size_t i, const char *key)
{
	const char *s = json_string_value(json_object_get(json_array_get(doc, i), key));
	assert_non_null(s);
	return s;
}

/* The scripted host of the fake NVML: GPUs 0 (node 0, CPU 0) and 1, 2
 * (node 1, CPU 1); 0-1 over NV2; GPU 2 has 18 links, all down; a process
 * pinned to CPU 0 feeds GPU 2 (far), one on CPUs 0-1 feeds GPU 0 (near),
 * one on CPU 1 feeds GPU 1's MIG device (near its parent). */
static void scripted(struct gputopo *t, const char *host, int64_t ts)
{
	dev(t, host, ts, "0", 0, "0", "18", "2");
	dev(t, host, ts, "1", 1, "1", "18", "2");
	dev(t, host, ts, "2", 1, "1", "18", "0");
	pair(t, host, ts, "0", "1", "NV2", "SYS", 2);
	pair(t, host, ts, "0", "2", "SYS", "SYS", 0);
	pair(t, host, ts, "1", "2", "NODE", "NODE", 0);
	proc(t, host, ts, "2", NULL, 4242, "0");
	proc(t, host, ts, "0", NULL, 7, "0-1");
	proc(t, host, ts, "1/mig0", "1", 8, "1");
}

static void test_findings(void **state)
{
	(void)state;
	struct gputopo t;
	gputopo_init(&t);
	scripted(&t, "h1", 1000);
	assert_int_equal(t.nhosts, 1);
	const struct topo_host *h = t.hosts[0];
	assert_int_equal(h->ngpus, 3);
	assert_int_equal(h->nprocs, 3);
	json_t *f = findings(h);
	assert_int_equal(json_array_size(f), 3);
	/* The far-node feeder, with the CPUs it used and the numactl fix. */
	assert_string_equal(fs(f, 0, "kind"), "numa_placement");
	assert_string_equal(fs(f, 0, "title"), "train (pid 4242) feeds GPU 2 from the far NUMA node");
	assert_non_null(strstr(fs(f, 0, "detail"), "may run only on CPUs 0 (NUMA node 0)"));
	assert_non_null(strstr(fs(f, 0, "detail"), "GPU 2 is on NUMA node 1 (CPUs 1)"));
	assert_string_equal(fs(f, 0, "cpus_used"), "0");
	assert_non_null(strstr(fs(f, 0, "fix"), "numactl --cpunodebind=1 --membind=1"));
	/* The two pairs over PCIe although both GPUs have NVLink; not 0-1. */
	assert_string_equal(fs(f, 1, "kind"), "pcie_fallback");
	assert_string_equal(fs(f, 1, "title"), "GPU 0 and GPU 2 talk over PCIe (SYS) although both have NVLink");
	assert_non_null(strstr(fs(f, 1, "detail"), "GPU 2 0 of 18"));
	assert_non_null(strstr(fs(f, 1, "fix"), "nvidia-smi nvlink --status -i 2"));
	assert_string_equal(fs(f, 2, "title"), "GPU 1 and GPU 2 talk over PCIe (NODE) although both have NVLink");
	json_decref(f);
	gputopo_free(&t);

	/* A newer collection replaces the older one, whatever the order of
	 * the other points; an older one is ignored. The feeder moved near
	 * its GPU: no NUMA finding. */
	gputopo_init(&t);
	scripted(&t, "h1", 1000);
	dev(&t, "h1", 2000, "0", 0, "0", "0", "0");
	dev(&t, "h1", 2000, "2", 1, "1", "0", "0");
	pair(&t, "h1", 2000, "0", "2", "SYS", "SYS", 0);
	proc(&t, "h1", 2000, "2", NULL, 4242, "1");
	proc(&t, "h1", 500, "2", NULL, 99, "0");
	h = t.hosts[0];
	assert_int_equal(h->ts, 2000);
	assert_int_equal(h->ngpus, 2);
	assert_int_equal(h->nprocs, 1);
	f = findings(h);
	assert_int_equal(json_array_size(f), 0); /* no NVLink at all: PCIe is all there is */
	json_decref(f);
	gputopo_free(&t);

	/* Without NVML's affinity the node's CPUs from the host's list
	 * decide; hostile labels are unknowns, never findings. */
	gputopo_init(&t);
	dev(&t, "h2", 10, "0", 1, "", "0", "0");
	gputopo_add(&t, "hw.numa.node.cpus", "{\"host.name\":\"h2\",\"numa.node\":\"0\",\"numa.node.cpus\":\"0-3\"}", 10, 4);
	gputopo_add(&t, "hw.numa.node.cpus", "{\"host.name\":\"h2\",\"numa.node\":\"1\",\"numa.node.cpus\":\"4-7\"}", 10, 4);
	gputopo_add(&t, "hw.numa.node.cpus", "{\"host.name\":\"h2\",\"numa.node\":\"x\",\"numa.node.cpus\":\"4-7\"}", 10, 4);
	proc(&t, "h2", 10, "0", NULL, 1, "2-3");
	proc(&t, "h2", 10, "0", NULL, 2, "3-5");
	proc(&t, "h2", 10, "0", NULL, 3, "9-1");
	proc(&t, "h2", 10, "0", NULL, 4, "99999");
	proc(&t, "h2", 10, "7", NULL, 5, "0");
	gputopo_add(&t, "hw.gpu.topology.process", "not json", 10, 1);
	gputopo_add(&t, "hw.gpu.topology.device", "[1]", 10, 1);
	h = t.hosts[0];
	assert_int_equal(h->nnodes, 2);
	assert_int_equal(h->nprocs, 3); /* the two malformed CPU lists are left out */
	f = findings(h);
	assert_int_equal(json_array_size(f), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(f, 0), "pid")), 1);
	assert_non_null(strstr(fs(f, 0, "detail"), "on NUMA node 1 (CPUs 4-7)"));
	json_decref(f);
	gputopo_free(&t);
}

/* Points through a store and the route's function: hosts listed, the
 * first by name answered unless one is asked for, only the latest
 * collection, errors for a bad body or an unknown host. */
static void store_points(struct metrics_store *st, const char *host, int64_t ts, const char *feeder_cpus)
{
	struct metric_batch b;
	metric_batch_init(&b);
#define S(x) metric_batch_str(&b, x)
	uint32_t d0[] = { S("host.name"), S(host), S("gpu.index"), S("0"), S("gpu.cpus"), S("0"), S("gpu.nvlink.links"), S("4"),
			  S("gpu.nvlink.active"), S("0") };
	uint32_t d1[] = { S("host.name"), S(host), S("gpu.index"), S("1"), S("gpu.cpus"), S("1"), S("gpu.nvlink.links"), S("4"),
			  S("gpu.nvlink.active"), S("0") };
	uint32_t l01[] = { S("host.name"), S(host), S("gpu.index"), S("0"), S("gpu.peer.index"), S("1"),
			   S("gpu.topology.path"), S("SYS"), S("gpu.topology.pcie"), S("SYS") };
	uint32_t p[] = { S("host.name"), S(host), S("gpu.index"), S("1"), S("process.pid"), S("77"),
			 S("process.cpus_allowed"), S(feeder_cpus) };
#undef S
	assert_int_equal(metric_batch_add(&b, "hw.gpu.topology.device", "1", metric_batch_labels(&b, d0, 10), ts, 0), 0);
	assert_int_equal(metric_batch_add(&b, "hw.gpu.topology.device", "1", metric_batch_labels(&b, d1, 10), ts, 1), 0);
	assert_int_equal(metric_batch_add(&b, "hw.gpu.topology.link", "1", metric_batch_labels(&b, l01, 10), ts, 0), 0);
	assert_int_equal(metric_batch_add(&b, "hw.gpu.topology.process", "1", metric_batch_labels(&b, p, 8), ts, 1), 0);
	struct metric_batch_meta meta = { "inst", 1, "default", ts - 1, ts };
	struct buf z = { 0 }, err = { 0 };
	assert_int_equal(metric_batch_encode(&b, &meta, &z), 0);
	Ember__Ingest__V1__MetricsBatch *m = metrics_decode(z.data, z.len, &err);
	assert_non_null(m);
	assert_int_equal(metrics_store_batch(st, "p", m, ts, &err), 0);
	metrics_decode_free(m);
	buf_free(&z);
	buf_free(&err);
	metric_batch_free(&b);
}

static json_t *topo_query(struct metrics_store *st, int want, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	json_t *doc = metrics_fixture_vquery(gputopo_query, st, want, fmt, ap);
	va_end(ap);
	return doc;
}

static void test_query(void **state)
{
	(void)state;
	int64_t t = now_unix_ms() - 60000;
	struct metrics_fixture fx;
	struct metrics_store *st = metrics_fixture_open(&fx, 3600000);
	store_points(st, "hb", t, "0");        /* far */
	store_points(st, "hb", t + 1000, "1"); /* then near: the latest */
	store_points(st, "ha", t, "0");
	long long s0 = t - 1000, e0 = t + 5000;
	json_t *d = topo_query(st, 0, "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld}}", s0, e0);
	assert_int_equal(json_array_size(json_object_get(d, "hosts")), 2);
	assert_string_equal(json_string_value(json_object_get(d, "host")), "ha");
	json_t *f = json_object_get(d, "findings");
	assert_int_equal(json_array_size(f), 2); /* far feeder, PCIe pair */
	assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "kind")), "numa_placement");
	json_t *gpus = json_object_get(d, "gpus");
	assert_int_equal(json_array_size(gpus), 2);
	json_t *procs = json_object_get(json_array_get(gpus, 1), "processes");
	assert_int_equal(json_array_size(procs), 1);
	assert_false(json_boolean_value(json_object_get(json_array_get(procs, 0), "near")));
	assert_int_equal(json_array_size(json_object_get(d, "numa_nodes")), 2);
	json_decref(d);
	d = topo_query(st, 0, "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"host\":\"hb\"}", s0, e0);
	assert_int_equal(json_integer_value(json_object_get(d, "ts")), t + 1000);
	assert_int_equal(json_array_size(json_object_get(d, "findings")), 1); /* only the PCIe pair now */
	json_decref(d);
	/* The range decides what "latest" is. */
	d = topo_query(st, 0, "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"host\":\"hb\"}", s0, (long long)t + 1);
	assert_int_equal(json_array_size(json_object_get(d, "findings")), 2);
	json_decref(d);
	d = topo_query(st, 0, "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld}}", s0 - 100000, s0 - 50000);
	assert_int_equal(json_array_size(json_object_get(d, "hosts")), 0);
	assert_true(json_is_null(json_object_get(d, "host")));
	json_decref(d);
	d = topo_query(st, 404, "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"host\":\"nope\"}", s0, e0);
	assert_non_null(strstr(json_string_value(json_object_get(d, "error")), "nope"));
	json_decref(d);
	d = topo_query(st, 400, "{\"filter\":{\"start_ts\":%lld,\"end_ts\":%lld},\"host\":7}", s0, e0);
	json_decref(d);
	d = topo_query(st, 400, "{\"filter\":{\"start_ts\":%lld}}", s0);
	json_decref(d);
	d = topo_query(st, 400, "[");
	json_decref(d);
	metrics_fixture_close(&fx);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_findings),
	cmocka_unit_test(test_query))
