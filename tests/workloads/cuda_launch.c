/* cuda_launch.c - a CUDA program with a known split of GPU time, for the
 * GPU profiling tests. It runs against the project's fake driver
 * (tests/fake_cuda/, found through LD_LIBRARY_PATH), never a real GPU.
 *
 *   cuda_launch STEPS [THREADS [SECONDS]]
 *
 * Each of THREADS threads (default 1) runs STEPS training steps, spread
 * evenly over SECONDS (default 0: as fast as it can). One step, from
 * main -> train_step:
 *   launch_big    cuLaunchKernel "k_big" on stream 1
 *   launch_small  cudaLaunchKernel "k_small" on stream 2 (a runtime launch
 *                 that nests the driver's)
 *   copy_inputs   cuMemcpyHtoDAsync of 4096 bytes on stream 1
 *   zero_grads    cuMemsetD8Async of 1024 bytes on stream 1
 *   wait_step     cuStreamSynchronize(stream 1)
 * and, when CUDA_LAUNCH_GRAPH is set,
 *   replay_graph  cuGraphLaunch of a graph of "g_a" and "g_b" on stream 3
 *                 (made with the fake driver's fakecuda_graph)
 * With FAKE_CUDA_KERNEL_NS="k_big=700000,k_small=300000" the kernels'
 * GPU time splits 70/30. CUDA_LAUNCH_KERNELS="BIG,SMALL" names the two
 * kernels otherwise (the functions of a test cubin: FAKE_CUDA_CUBIN). Prints "done STEPS THREADS" at the end.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
	unsigned x, y, z;
} dim3;

static int (*cu_init)(unsigned);
static int (*cu_module_get_function)(void **, void *, const char *);
static int (*cu_launch_kernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			       void **, void **);
static int (*cuda_launch_kernel)(const void *, dim3, dim3, void **, size_t, void *);
static void (*cuda_register_function)(void **, const char *, char *, const char *, int, void *, void *, void *,
				      void *, int *);
static int (*cu_memcpy_htod_async)(unsigned long long, const void *, size_t, void *);
static int (*cu_memset_d8_async)(unsigned long long, unsigned char, size_t, void *);
static int (*cu_stream_synchronize)(void *);
static int (*cu_graph_launch)(void *, void *);
static void *(*fakecuda_graph)(const char *);
static void *graph; /* NULL: no graph launches */

static void *k_big;
static void k_small_stub(void) {} /* the host-side handle of k_small, as nvcc makes one */

static long steps;
static double seconds;
static int failures;

#define STREAM(n) ((void *)(uintptr_t)(n))
#define NOINLINE __attribute__((noinline))

NOINLINE static void launch_big(void)
{
	if (cu_launch_kernel(k_big, 1, 1, 1, 32, 1, 1, 0, STREAM(1), NULL, NULL) != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
}

NOINLINE static void launch_small(void)
{
	dim3 g = { 1, 1, 1 }, b = { 32, 1, 1 };
	if (cuda_launch_kernel((const void *)k_small_stub, g, b, NULL, 0, STREAM(2)) != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
}

NOINLINE static void copy_inputs(void)
{
	static char host[4096];
	if (cu_memcpy_htod_async(0x1000, host, sizeof(host), STREAM(1)) != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
}

NOINLINE static void zero_grads(void)
{
	if (cu_memset_d8_async(0x2000, 0, 1024, STREAM(1)) != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
}

NOINLINE static void wait_step(void)
{
	if (cu_stream_synchronize(STREAM(1)) != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
}

NOINLINE static void replay_graph(void)
{
	if (cu_graph_launch(graph, STREAM(3)) != 0)
		__atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
}

NOINLINE static void train_step(void)
{
	launch_big();
	launch_small();
	copy_inputs();
	zero_grads();
	wait_step();
	if (graph)
		replay_graph();
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void *train(void *arg)
{
	(void)arg;
	uint64_t t0 = now_ns();
	for (long i = 0; i < steps; i++) {
		if (seconds > 0) {
			uint64_t due = t0 + (uint64_t)(seconds * 1e9 * (double)i / (double)steps);
			uint64_t now = now_ns();
			if (due > now) {
				struct timespec d = { .tv_sec = (time_t)((due - now) / 1000000000ull),
						      .tv_nsec = (long)((due - now) % 1000000000ull) };
				nanosleep(&d, NULL);
			}
		}
		train_step();
	}
	return NULL;
}

#define SYM(var, name)                                                               \
	do {                                                                         \
		*(void **)&var = dlsym(h, name);                                     \
		if (!var) {                                                          \
			fprintf(stderr, "cuda_launch: libcuda.so.1 lacks %s\n", name); \
			return 1;                                                    \
		}                                                                    \
	} while (0)

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cuda_launch STEPS [THREADS [SECONDS]]\n");
		return 2;
	}
	steps = atol(argv[1]);
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	seconds = argc > 3 ? atof(argv[3]) : 0;
	if (steps < 0 || threads < 1 || threads > 256 || seconds < 0) {
		fprintf(stderr, "cuda_launch: bad arguments\n");
		return 2;
	}
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "cuda_launch: %s\n", dlerror());
		return 1;
	}
	SYM(cu_init, "cuInit");
	SYM(cu_module_get_function, "cuModuleGetFunction");
	SYM(cu_launch_kernel, "cuLaunchKernel");
	SYM(cuda_launch_kernel, "cudaLaunchKernel");
	SYM(cuda_register_function, "__cudaRegisterFunction");
	SYM(cu_memcpy_htod_async, "cuMemcpyHtoDAsync_v2");
	SYM(cu_memset_d8_async, "cuMemsetD8Async");
	SYM(cu_stream_synchronize, "cuStreamSynchronize");
	static char names[256] = "k_big,k_small";
	const char *want = getenv("CUDA_LAUNCH_KERNELS");
	if (want && strchr(want, ',') && strlen(want) < sizeof(names))
		strcpy(names, want);
	char *small_name = strchr(names, ',');
	*small_name++ = '\0';
	if (cu_init(0) != 0 || cu_module_get_function(&k_big, NULL, names) != 0) {
		fprintf(stderr, "cuda_launch: cuInit failed\n");
		return 1;
	}
	if (getenv("CUDA_LAUNCH_GRAPH")) {
		SYM(cu_graph_launch, "cuGraphLaunch");
		SYM(fakecuda_graph, "fakecuda_graph");
		graph = fakecuda_graph("g_a,g_b");
		if (!graph) {
			fprintf(stderr, "cuda_launch: no graph\n");
			return 1;
		}
	}
	cuda_register_function(NULL, (const char *)k_small_stub, small_name, small_name, -1, NULL, NULL, NULL, NULL,
			       NULL);

	pthread_t tids[256];
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&tids[i], NULL, train, NULL) != 0) {
			fprintf(stderr, "cuda_launch: pthread_create failed\n");
			return 1;
		}
	}
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	if (failures) {
		fprintf(stderr, "cuda_launch: %d calls failed\n", failures);
		return 1;
	}
	printf("done %ld %d\n", steps, threads);
	return 0;
}
