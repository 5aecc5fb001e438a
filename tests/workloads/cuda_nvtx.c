/* cuda_nvtx.c - a CUDA program that names its phases with NVTX ranges,
 * for the NVTX test of GPU profiling. Built against NVIDIA's real nvtx3
 * headers (header-only; fetched into build/nvtx by
 * scripts/install-test-nvtx.sh), so that its ranges reach the library
 * named by NVTX_INJECTION64_PATH through NVTX's own loader. Runs against
 * the project's fake driver (tests/fake_cuda/), never a real GPU.
 *
 *   cuda_nvtx EPOCHS STEPS
 *
 * main -> train: EPOCHS times, range "epoch" (nvtxRangePushA) around
 *   STEPS times, range "train_step" (nvtxRangePushEx, an ASCII message)
 *     around step_launch: cuLaunchKernel "k_big" on stream 1,
 *   then, in "epoch" only, eval_launch: cuLaunchKernel "k_big" once more
 *   (the same kernel, from the same thread, under other ranges).
 * Prints "done EPOCHS STEPS".
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <nvtx3/nvToolsExt.h>

static int (*cu_init)(unsigned);
static int (*cu_module_get_function)(void **, void *, const char *);
static int (*cu_launch_kernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			       void **, void **);
static void *k_big;
static int failures;

#define NOINLINE __attribute__((noinline))

NOINLINE static void step_launch(void)
{
	if (cu_launch_kernel(k_big, 1, 1, 1, 32, 1, 1, 0, (void *)(uintptr_t)1, NULL, NULL) != 0)
		failures++;
}

NOINLINE static void eval_launch(void)
{
	if (cu_launch_kernel(k_big, 1, 1, 1, 32, 1, 1, 0, (void *)(uintptr_t)1, NULL, NULL) != 0)
		failures++;
}

/* Spreads the epochs over seconds (0: as fast as it goes), as a training
 * loop does: the agent reads the process while it runs, as in production. */
static void pace(long e, long epochs, double seconds)
{
	if (seconds <= 0)
		return;
	double each = seconds / (double)epochs;
	struct timespec ts = { (time_t)each, (long)((each - (double)(time_t)each) * 1e9) };
	(void)e;
	nanosleep(&ts, NULL);
}

NOINLINE static void train(long epochs, long steps, double seconds)
{
	nvtxEventAttributes_t step = { 0 };
	step.version = NVTX_VERSION;
	step.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	step.messageType = NVTX_MESSAGE_TYPE_ASCII;
	step.message.ascii = "train_step";
	for (long e = 0; e < epochs; e++) {
		nvtxRangePushA("epoch");
		for (long s = 0; s < steps; s++) {
			nvtxRangePushEx(&step);
			step_launch();
			nvtxRangePop();
			eval_launch();
		}
		nvtxRangePop();
		pace(e, epochs, seconds);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: cuda_nvtx EPOCHS STEPS [SECONDS]\n");
		return 2;
	}
	long epochs = atol(argv[1]), steps = atol(argv[2]);
	double seconds = argc > 3 ? atof(argv[3]) : 0;
	if (epochs < 0 || steps < 0 || seconds < 0 || seconds > 600) {
		fprintf(stderr, "cuda_nvtx: bad arguments\n");
		return 2;
	}
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "cuda_nvtx: %s\n", dlerror());
		return 1;
	}
	*(void **)&cu_init = dlsym(h, "cuInit");
	*(void **)&cu_module_get_function = dlsym(h, "cuModuleGetFunction");
	*(void **)&cu_launch_kernel = dlsym(h, "cuLaunchKernel");
	if (!cu_init || !cu_module_get_function || !cu_launch_kernel || cu_init(0) != 0 ||
	    cu_module_get_function(&k_big, NULL, "k_big") != 0) {
		fprintf(stderr, "cuda_nvtx: no fake driver\n");
		return 1;
	}
	train(epochs, steps, seconds);
	if (failures) {
		fprintf(stderr, "cuda_nvtx: %d launches failed\n", failures);
		return 1;
	}
	printf("done %ld %ld\n", epochs, steps);
	return 0;
}
