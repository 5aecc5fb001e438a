/* pcsplit_bench - the cost of PC sampling's split in libembercuda.so's
 * report thread (gpu/cuda_report.c: cuda_agg_apply_pcs), at the tables'
 * limits: KERNELS kernel entries (stacks x names) and SAMPLES (kernel,
 * offset, stall) keys spread over NAMES kernel names, then the encoding of
 * the result. Prints the best of 5 runs in ms.
 *
 *   build/bench/pcsplit_bench [KERNELS [SAMPLES [NAMES]]]   (8192 16384 64)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_report.h"

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int drop(const void *msg, size_t len, void *ctx)
{
	(void)msg;
	*(size_t *)ctx += len;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned kernels = argc > 1 ? (unsigned)atoi(argv[1]) : 8192;
	unsigned samples = argc > 2 ? (unsigned)atoi(argv[2]) : 16384;
	unsigned names = argc > 3 ? (unsigned)atoi(argv[3]) : 64;
	if (!kernels || !samples || !names)
		return 2;
	static const char *const stalls[] = { "smsp__pcsamp_warps_issue_stalled_long_scoreboard",
					      "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle",
					      "smsp__pcsamp_warps_issue_stalled_wait",
					      "smsp__pcsamp_warps_issue_stalled_selected" };
	double best = 1e30, best_enc = 1e30;
	size_t bytes = 0;
	unsigned out_entries = 0;
	for (int run = 0; run < 5; run++) {
		struct cuda_agg *agg = cuda_agg_new(kernels), *out = cuda_agg_new(kernels + samples);
		struct cuda_pcs *pcs = cuda_pcs_new(samples), *keep = cuda_pcs_new(samples);
		if (!agg || !out || !pcs || !keep)
			return 1;
		char name[64];
		for (unsigned i = 0; i < kernels; i++) {
			int n = snprintf(name, sizeof(name), "_Z6kernel%uPf", i % names);
			struct cuda_agg_key k = { .stack_id = 1 + i / names, .tid = 1, .kind = CUDA_WIRE_KIND_KERNEL,
						  .api = "cudaLaunchKernel", .name = name, .name_len = (size_t)n };
			cuda_agg_add(agg, &k, 1000003);
		}
		for (unsigned i = 0; i < samples; i++) {
			int n = snprintf(name, sizeof(name), "_Z6kernel%uPf", i % names);
			cuda_pcs_add(pcs, name, (size_t)n, 0xc0b1, 16 * (i / names / 4), stalls[i % 4], 1 + i % 7);
		}
		double t0 = now_ms();
		if (cuda_agg_apply_pcs(out, agg, pcs, keep) < 0)
			return 1;
		double t1 = now_ms();
		bytes = 0;
		cuda_agg_encode(out, drop, &bytes, 0, NULL);
		double t2 = now_ms();
		if (t1 - t0 < best)
			best = t1 - t0;
		if (t2 - t1 < best_enc)
			best_enc = t2 - t1;
		out_entries = cuda_agg_entries(out);
		cuda_agg_free(agg);
		cuda_agg_free(out);
		cuda_pcs_free(pcs);
		cuda_pcs_free(keep);
	}
	printf("kernels=%u samples=%u names=%u: apply %.2f ms, encode %.2f ms (%u entries, %zu bytes; best of 5)\n",
	       kernels, samples, names, best, best_enc, out_entries, bytes);
	return 0;
}
