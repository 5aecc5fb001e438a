/* gpumetrics_bench - what one GPU metrics collection costs the agent, and
 * what it reads, on a machine with NVIDIA GPUs.
 *
 * Opens NVML as ember-agent does (gpumetrics_open: -nvml-path, or the
 * loader then the usual driver directories), then collects every
 * INTERVAL_MS for COUNT intervals exactly as the agent's metrics thread
 * does (gpumetrics_collect into a metric batch, with the host collector
 * giving the process labels). Prints each point of every collection as
 * "ms name{labels} value" (so a run beside a GPU load can be compared
 * with nvidia-smi), then the cost of one collection (wall time, min /
 * median / max over the intervals) and of encoding the batch.
 * Exits 2 when NVML cannot be loaded (saying what was tried).
 * Usage: gpumetrics_bench [-q] [COUNT] [INTERVAL_MS] [NVML_PATH]
 *        (defaults 10, 1000, "" = search as the agent does; -q prints
 *        only the last collection's points and the summary)
 * Without a GPU, NVML_PATH=build/tests/libfake-nvml.so (the scripted two
 * H100s with MIG, NVLink, GPM and an XID of tests/unit/fake_nvml.c)
 * measures ember's own share of a collection: the fake answers at once,
 * so what remains is the calls, the labels and the batch.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/gpumetrics.h"
#include "agent/hostmetrics.h"
#include "agent/metricbatch.h"
#include "util.h"

#define MAX_COUNT 10000

static void print_points(const struct metric_batch *b)
{
	for (size_t i = 0; i < b->npoints; i++) {
		const struct mb_series *s = &b->series[b->point_series[i]];
		printf("%lld %s{", (long long)b->point_ms[i], strtab_get(&b->strings, s->name));
		const uint32_t *kv = b->set_strings + b->set_offsets[s->labels];
		for (uint32_t k = 0; k + 1 < b->set_lengths[s->labels]; k += 2)
			printf("%s%s=\"%s\"", k ? "," : "", strtab_get(&b->strings, kv[k]),
			       strtab_get(&b->strings, kv[k + 1]));
		printf("} %g %s\n", b->point_values[i], strtab_get(&b->strings, s->unit));
	}
}

int main(int argc, char **argv)
{
	bool quiet = argc > 1 && strcmp(argv[1], "-q") == 0;
	if (quiet) {
		argv++;
		argc--;
	}
	long count = argc > 1 ? strtol(argv[1], NULL, 10) : 10;
	long interval_ms = argc > 2 ? strtol(argv[2], NULL, 10) : 1000;
	const char *path = argc > 3 ? argv[3] : "";
	if (count < 1 || count > MAX_COUNT || interval_ms < 0 || interval_ms > 60000) {
		fprintf(stderr, "usage: gpumetrics_bench [COUNT 1..%d] [INTERVAL_MS 0..60000] [NVML_PATH]\n",
			MAX_COUNT);
		return 1;
	}
	struct buf why = { 0 };
	struct gpumetrics *g = gpumetrics_open(path, true, &why);
	if (!g) {
		fprintf(stderr, "NVML could not be loaded; tried %s\n", why.data ? why.data : "nothing");
		buf_free(&why);
		return 2;
	}
	buf_free(&why);
	printf("# NVML from %s, %u device(s)\n", gpumetrics_library(g), gpumetrics_devices(g));

	char host[256] = "localhost";
	(void)gethostname(host, sizeof(host) - 1);
	struct hostmetrics_opts ho = {
		.proc_root = "/proc", .cgroup_root = "/sys/fs/cgroup", .sys_block = "/sys/block",
		.host_name = host, .host_arch = hm_host_arch(),
	};
	struct hostmetrics *hm = hostmetrics_new(&ho);
	uint64_t *cost = xcalloc((size_t)count, sizeof(*cost));
	uint64_t enc_ns = 0, enc_bytes = 0, points = 0;
	for (long i = 0; i < count; i++) {
		if (i)
			usleep((useconds_t)interval_ms * 1000);
		struct metric_batch b;
		metric_batch_init(&b);
		int64_t ts = now_unix_ms();
		uint64_t t0 = now_mono_ns();
		gpumetrics_collect(g, hm, &b, ts);
		cost[i] = now_mono_ns() - t0;
		if (!quiet || i == count - 1)
			print_points(&b);
		struct metric_batch_meta meta = { .agent_instance = "bench", .project = "default",
						  .start_unix_ms = ts, .end_unix_ms = ts };
		struct buf enc = { 0 };
		t0 = now_mono_ns();
		if (metric_batch_encode(&b, &meta, &enc) == 0) {
			enc_ns += now_mono_ns() - t0;
			enc_bytes += enc.len;
		}
		points += b.npoints;
		buf_free(&enc);
		metric_batch_free(&b);
		fflush(stdout);
	}
	qsort(cost, (size_t)count, sizeof(*cost), cmp_u64);
	printf("# collections %ld, points %llu (%.1f per collection)\n", count,
	       (unsigned long long)points, (double)points / (double)count);
	printf("# one collection: min %.1f us, median %.1f us, max %.1f us (%u devices: %.1f us per device, median)\n",
	       (double)cost[0] / 1e3, (double)cost[count / 2] / 1e3, (double)cost[count - 1] / 1e3,
	       gpumetrics_devices(g), (double)cost[count / 2] / 1e3 / MAX(1u, gpumetrics_devices(g)));
	printf("# encoding: %.1f us and %.0f bytes per batch\n", (double)enc_ns / 1e3 / (double)count,
	       (double)enc_bytes / (double)count);
	free(cost);
	hostmetrics_free(hm);
	gpumetrics_close(g);
	return 0;
}
