/* cuda_wire_launcher.c - TEST-ONLY: the "CUDA program" of
 * tests/integration/test_cuda_agent.py. It is linked against the test
 * stand-in for libembercuda.so (cuda_wire_client.c, built as
 * build/workloads/cuda_wire/libembercuda.so) and "launches" from distinct
 * call paths: main -> train_step -> launch_gemm / launch_softmax /
 * launch_copy / sync_stream, each calling the library's wire_launch with
 * its own correlation id, as the real library's launch callback would.
 *
 * Usage: cuda_wire_launcher SOCKET. Connects and says hello, prints
 * {"pid": N}, waits for a line on stdin (the test sends it once the agent
 * has put its uprobe on the library), launches, reports the GPU time and
 * the hostile messages, and exits.
 */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "cuda_wire.h"

int wire_connect(const char *path);
void wire_launch(uint64_t correlation_id, uint32_t kind);
int wire_report(uint64_t base);
void wire_close(void);

/* A function of its own name (the frame the test finds on the launch's
 * stack) that launches one activity. */
#define LAUNCHER(name, correlation_id, kind)             \
	__attribute__((noinline)) void name(void)        \
	{                                                \
		wire_launch(correlation_id, kind);       \
		asm volatile("" ::: "memory");           \
	}

LAUNCHER(launch_gemm, 1001, CUDA_WIRE_KIND_KERNEL)
LAUNCHER(launch_softmax, 1002, CUDA_WIRE_KIND_KERNEL)
LAUNCHER(launch_copy, 1003, CUDA_WIRE_KIND_MEMCPY)
LAUNCHER(sync_stream, 1004, CUDA_WIRE_KIND_SYNC)

__attribute__((noinline)) void train_step(void)
{
	launch_copy();
	launch_gemm();
	launch_softmax();
	sync_stream();
	asm volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cuda_wire_launcher SOCKET\n");
		return 2;
	}
	if (wire_connect(argv[1]) < 0)
		return 1;
	printf("{\"pid\": %d}\n", (int)getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	train_step();
	/* The launch stacks reach the agent through its ring buffer, the
	 * times through the socket: either may come first. */
	if (wire_report(1000) < 0)
		return 1;
	sleep(1); /* a program goes on after its first report */
	wire_close();
	return 0;
}
