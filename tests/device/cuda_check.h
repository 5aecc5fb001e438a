// cuda_check.h - the test programs' (cuda_split.cu, pc_deep.cu) check of
// a CUDA runtime call: on an error, print the call and the error, exit 1.
#ifndef EMBER_TESTS_DEVICE_CUDA_CHECK_H
#define EMBER_TESTS_DEVICE_CUDA_CHECK_H

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK(x)                                                                                  \
	do {                                                                                      \
		cudaError_t e_ = (x);                                                             \
		if (e_ != cudaSuccess) {                                                          \
			fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                   \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

#endif
