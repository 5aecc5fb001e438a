// cuda_split.cu - a real CUDA program for tests/device/cuda_lib.sh (GPU
// machines only; built there with nvcc).
//
//   cuda_split split N   N steps of main -> train_step -> launch_k70 and
//                        launch_k30: kernels that spin ~700 us and ~300 us
//                        on the GPU's globaltimer; each kernel's time is
//                        also measured with CUDA events (the reference the
//                        library's totals are compared with). Prints JSON.
//   cuda_split empty N   N launches of an empty kernel, each timed on the
//                        CPU around cudaLaunchKernel; prints the median and
//                        99th percentile in ns as JSON.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.h"

__device__ unsigned long long globaltimer()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void k70(unsigned long long ns)
{
	unsigned long long end = globaltimer() + ns;
	while (globaltimer() < end) {
	}
}

__global__ void k30(unsigned long long ns)
{
	unsigned long long end = globaltimer() + ns;
	while (globaltimer() < end) {
	}
}

__global__ void empty() {}

static cudaEvent_t ev[4];
static double k70_ms, k30_ms;

__attribute__((noinline)) static void launch_k70()
{
	CHECK(cudaEventRecord(ev[0]));
	k70<<<1, 1>>>(700000ull);
	CHECK(cudaEventRecord(ev[1]));
}

__attribute__((noinline)) static void launch_k30()
{
	CHECK(cudaEventRecord(ev[2]));
	k30<<<1, 1>>>(300000ull);
	CHECK(cudaEventRecord(ev[3]));
}

__attribute__((noinline)) static void train_step()
{
	launch_k70();
	launch_k30();
	CHECK(cudaEventSynchronize(ev[3]));
	float a, b;
	CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
	CHECK(cudaEventElapsedTime(&b, ev[2], ev[3]));
	k70_ms += a;
	k30_ms += b;
}

static long long now_ns()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000ll + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cuda_split split|empty N\n");
		return 2;
	}
	long n = atol(argv[2]);
	CHECK(cudaFree(0)); // initializes CUDA (and the injection library)
	for (auto &e : ev)
		CHECK(cudaEventCreate(&e));
	if (!strcmp(argv[1], "split")) {
		for (long i = 0; i < n; i++)
			train_step();
		CHECK(cudaDeviceSynchronize());
		printf("{\"steps\": %ld, \"k70_ms\": %.3f, \"k30_ms\": %.3f}\n", n, k70_ms, k30_ms);
		return 0;
	}
	std::vector<long long> d;
	d.reserve(n);
	for (long i = 0; i < n; i++) {
		long long t0 = now_ns();
		empty<<<1, 1>>>();
		d.push_back(now_ns() - t0);
		if (i % 1000 == 999)
			CHECK(cudaDeviceSynchronize());
	}
	CHECK(cudaGetLastError());
	CHECK(cudaDeviceSynchronize());
	std::sort(d.begin(), d.end());
	printf("{\"launches\": %ld, \"median_ns\": %lld, \"p99_ns\": %lld}\n", n, d[d.size() / 2],
	       d[d.size() * 99 / 100]);
	return 0;
}
