// pc_deep.cu - a real CUDA program for tests/device/gpu_deep.sh (GPU
// machines only; built there with nvcc): two kernels whose warps stall for
// different reasons, for the PC-sampling check.
//
//   pc_deep N   N steps of main -> step -> launch_mem and launch_compute:
//               mem_bound chases a random permutation through 64 MiB (each
//               load depends on the last: warps wait on global memory, a
//               "long scoreboard" stall) and compute_bound runs a chain of
//               dependent FMAs in registers (no memory at all). Each
//               kernel's time is measured with CUDA events; prints JSON
//               with the medians in ms.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.h"

#define N_ELEMS (1u << 24) /* 64 MiB of indices: more than any L2 */
#define HOPS 64
#define FMAS 4096

__global__ void mem_bound(const unsigned *__restrict__ next, float *out)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	unsigned j = i;
	float acc = 0;
	for (int h = 0; h < HOPS; h++) {
		j = next[j];
		acc += (float)(j & 7);
	}
	out[i] = acc;
}

__global__ void compute_bound(float *out)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	float a = i * 1e-7f, b = 1.0001f, c = 0.9999f;
	for (int k = 0; k < FMAS; k++) {
		a = fmaf(a, b, c);
		b = fmaf(b, c, a);
		c = fmaf(c, a, b);
	}
	out[i] = a + b + c;
}

static cudaEvent_t ev[4];

__attribute__((noinline)) static float launch_mem(const unsigned *next, float *out)
{
	float ms = 0;
	CHECK(cudaEventRecord(ev[0]));
	mem_bound<<<N_ELEMS / 256 / 64, 256>>>(next, out);
	CHECK(cudaEventRecord(ev[1]));
	CHECK(cudaEventSynchronize(ev[1]));
	CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
	return ms;
}

__attribute__((noinline)) static float launch_compute(float *out)
{
	float ms = 0;
	CHECK(cudaEventRecord(ev[2]));
	compute_bound<<<264, 256>>>(out);
	CHECK(cudaEventRecord(ev[3]));
	CHECK(cudaEventSynchronize(ev[3]));
	CHECK(cudaEventElapsedTime(&ms, ev[2], ev[3]));
	return ms;
}

__attribute__((noinline)) static void step(const unsigned *next, float *out, std::vector<float> &m,
					   std::vector<float> &c)
{
	m.push_back(launch_mem(next, out));
	c.push_back(launch_compute(out));
}

static float median(std::vector<float> v)
{
	std::sort(v.begin(), v.end());
	return v.empty() ? 0 : v[v.size() / 2];
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 300;
	/* one random cycle through every element (Sattolo's shuffle) */
	std::vector<unsigned> perm(N_ELEMS);
	for (unsigned i = 0; i < N_ELEMS; i++)
		perm[i] = i;
	srand(7);
	for (unsigned i = N_ELEMS - 1; i > 0; i--) {
		unsigned j = (unsigned)(((unsigned long long)rand() * RAND_MAX + rand()) % i);
		std::swap(perm[i], perm[j]);
	}
	std::vector<unsigned> next(N_ELEMS);
	for (unsigned i = 0; i < N_ELEMS; i++)
		next[perm[i]] = perm[(i + 1) % N_ELEMS];
	unsigned *d_next;
	float *d_out;
	CHECK(cudaMalloc(&d_next, N_ELEMS * sizeof(unsigned)));
	CHECK(cudaMalloc(&d_out, N_ELEMS * sizeof(float)));
	CHECK(cudaMemcpy(d_next, next.data(), N_ELEMS * sizeof(unsigned), cudaMemcpyHostToDevice));
	for (int i = 0; i < 4; i++)
		CHECK(cudaEventCreate(&ev[i]));
	std::vector<float> m, c;
	for (int s = 0; s < steps; s++)
		step(d_next, d_out, m, c);
	CHECK(cudaDeviceSynchronize());
	printf("{\"steps\": %d, \"mem_ms_median\": %.4f, \"compute_ms_median\": %.4f}\n", steps, median(m),
	       median(c));
	return 0;
}
