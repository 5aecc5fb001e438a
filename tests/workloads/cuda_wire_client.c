/* cuda_wire_client.c - TEST-ONLY stand-in for libembercuda.so.
 *
 * NOT the product's library (that is gpu/, built as build/lib/
 * libembercuda.so). This file is built as
 * build/workloads/cuda_wire/libembercuda.so, only for
 * tests/integration/test_cuda_agent.py: it plays the library's part
 * towards ember-agent without CUDA, CUPTI or a GPU. It exports the same
 * marker function (lib/cuda_wire.h), which the agent finds by the file's
 * name and probes, and speaks the same wire to the agent's socket, with
 * GPU times the test knows in advance and hostile messages the agent must
 * refuse and count. The launcher (cuda_wire_launcher.c) calls it from
 * distinct call paths.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "cuda_wire.h"

#define EXPORT __attribute__((visibility("default")))

static int sock = -1;

/* The function the agent's uprobe sits on: never inlined, never folded. */
EXPORT __attribute__((noinline)) void ember_cuda_launch_marker(uint64_t stack_id, uint32_t kind)
{
	asm volatile("" : : "r"(stack_id), "r"(kind) : "memory");
}

/* What the real library does in a launch callback picked for a stack. */
EXPORT __attribute__((noinline)) void wire_launch(uint64_t correlation_id, uint32_t kind)
{
	ember_cuda_launch_marker(correlation_id, kind);
	asm volatile("" ::: "memory");
}

static int send_raw(const void *p, size_t n)
{
	if (send(sock, p, n, MSG_NOSIGNAL) != (ssize_t)n) {
		fprintf(stderr, "cuda_wire_client: send of %zu bytes: %s\n", n, strerror(errno));
		return -1;
	}
	return 0;
}

static size_t put_hdr(uint8_t *m, uint16_t type, uint32_t length, uint32_t count)
{
	struct cuda_wire_hdr h = { CUDA_WIRE_MAGIC, CUDA_WIRE_VERSION, type, length, count };
	memcpy(m, &h, sizeof(h));
	return sizeof(h);
}

/* Appends one AGG entry at off; returns the offset after its padding. */
static size_t put_agg(uint8_t *m, size_t off, uint64_t stack_id, uint64_t total_ns, uint16_t kind,
		      const char *api, const char *name)
{
	struct cuda_wire_agg a = {
		.stack_id = stack_id,
		.total_ns = total_ns,
		.count = total_ns / 1000000 + 1,
		.tid = (uint32_t)syscall(SYS_gettid),
		.kind = kind,
		.api_len = (uint16_t)strlen(api),
		.device = 0,
		.stream = 7,
		.context = 1,
		.name_len = (uint16_t)strlen(name),
	};
	memcpy(m + off, &a, sizeof(a));
	off += sizeof(a);
	memcpy(m + off, api, a.api_len);
	off += a.api_len;
	memcpy(m + off, name, a.name_len);
	off += a.name_len;
	while (off % 8)
		m[off++] = 0;
	return off;
}

static void finish_hdr(uint8_t *m, size_t len, uint32_t count)
{
	put_hdr(m, CUDA_WIRE_AGG, (uint32_t)len, count);
}

static int send_hello(void)
{
	uint8_t m[16 + sizeof(struct cuda_wire_hello)];
	struct cuda_wire_hello h = { .pid = (uint32_t)getpid(), .cupti_version = 0, .driver_version = 0 };
	snprintf(h.lib_version, sizeof(h.lib_version), "test-stand-in");
	put_hdr(m, CUDA_WIRE_HELLO, sizeof(m), 1);
	memcpy(m + 16, &h, sizeof(h));
	return send_raw(m, sizeof(m));
}

/* Connects and says hello, with one device. Returns 0 or -1. */
EXPORT int wire_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "cuda_wire_client: connect %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (send_hello() < 0)
		return -1;
	uint8_t m[16 + sizeof(struct cuda_wire_device)];
	struct cuda_wire_device d = { .index = 0 };
	for (int i = 0; i < 16; i++)
		d.uuid[i] = (uint8_t)(0x10 + i);
	snprintf(d.name, sizeof(d.name), "Ember Test GPU");
	put_hdr(m, CUDA_WIRE_DEVICE, sizeof(m), 1);
	memcpy(m + 16, &d, sizeof(d));
	return send_raw(m, sizeof(m));
}

/* The GPU time of the "run", under stack ids base + 1 .. base + 4 (the
 * launcher's correlation ids): gemm 700 ms (in two flushes), softmax
 * 300 ms, a host-to-device copy 50 ms, a stream sync 20 ms; a kernel never
 * sampled (stack id 0) 25 ms, and one whose stack id no marker call had
 * (base + 777) 10 ms. Between them, hostile messages, each carrying 5 s
 * more of gemm that must never be counted. Returns 0 or -1. */
EXPORT int wire_report(uint64_t base)
{
	static uint8_t m[CUDA_WIRE_MAX_MSG + 8192];
	const char *gemm = "_Z11gemm_kernelPfS_i", *softmax = "_Z14softmax_kernelPf";
	int rc = 0;

	/* First flush. */
	size_t off = 16;
	off = put_agg(m, off, base + 1, 400000000, CUDA_WIRE_KIND_KERNEL, "cudaLaunchKernel", gemm);
	off = put_agg(m, off, base + 2, 300000000, CUDA_WIRE_KIND_KERNEL, "cudaLaunchKernel", softmax);
	off = put_agg(m, off, 0, 25000000, CUDA_WIRE_KIND_KERNEL, "cuLaunchKernel", "_Z13unseen_kernelv");
	finish_hdr(m, off, 3);
	rc |= send_raw(m, off);

	/* Hostile: each is one AGG of 5 s of gemm, spoiled one way. */
	size_t good = put_agg(m, 16, base + 1, 5000000000ull, CUDA_WIRE_KIND_KERNEL, "cudaLaunchKernel", gemm);
	/* 1. truncated: the header promises more than was sent */
	finish_hdr(m, good, 1);
	rc |= send_raw(m, good - 8);
	/* 2. forged length: declared 8 bytes longer than the datagram */
	put_hdr(m, CUDA_WIRE_AGG, (uint32_t)good + 8, 1);
	rc |= send_raw(m, good);
	/* 3. oversized count */
	finish_hdr(m, good, 1000);
	rc |= send_raw(m, good);
	/* 4. bad magic */
	finish_hdr(m, good, 1);
	m[0] ^= 0xff;
	rc |= send_raw(m, good);
	m[0] ^= 0xff;
	/* 5. a name length past the datagram's end */
	struct cuda_wire_agg a;
	memcpy(&a, m + 16, sizeof(a));
	a.name_len = 900;
	memcpy(m + 16, &a, sizeof(a));
	rc |= send_raw(m, good);
	/* 6. a name length over CUDA_WIRE_NAME_MAX */
	a.name_len = CUDA_WIRE_NAME_MAX + 1;
	memcpy(m + 16, &a, sizeof(a));
	rc |= send_raw(m, good);
	good = put_agg(m, 16, base + 1, 5000000000ull, CUDA_WIRE_KIND_KERNEL, "cudaLaunchKernel", gemm);
	/* 7. padding not zero (the entry's strings are 36 bytes: 4 of padding) */
	m[good - 1] = 'x';
	rc |= send_raw(m, good);
	m[good - 1] = 0;
	/* 8. an unknown kind */
	memcpy(&a, m + 16, sizeof(a));
	a.kind = 9;
	memcpy(m + 16, &a, sizeof(a));
	rc |= send_raw(m, good);
	a.kind = CUDA_WIRE_KIND_KERNEL;
	memcpy(m + 16, &a, sizeof(a));
	/* 9. larger than any message may be */
	memset(m + good, 0, CUDA_WIRE_MAX_MSG + 4096 - good);
	finish_hdr(m, CUDA_WIRE_MAX_MSG + 4096, 1);
	rc |= send_raw(m, CUDA_WIRE_MAX_MSG + 4096);
	/* 10. shorter than a header */
	rc |= send_raw(m, 8);
	/* 11. a second HELLO */
	rc |= send_hello();

	/* Second flush: the rest of gemm, the copy, the sync, the orphan. */
	off = 16;
	off = put_agg(m, off, base + 1, 300000000, CUDA_WIRE_KIND_KERNEL, "cudaLaunchKernel", gemm);
	off = put_agg(m, off, base + 3, 50000000, CUDA_WIRE_KIND_MEMCPY, "cudaMemcpyAsync", "HtoD");
	off = put_agg(m, off, base + 4, 20000000, CUDA_WIRE_KIND_SYNC, "cudaStreamSynchronize",
		      "cudaStreamSynchronize");
	off = put_agg(m, off, base + 777, 10000000, CUDA_WIRE_KIND_KERNEL, "cudaLaunchKernel",
		      "_Z13orphan_kernelv");
	finish_hdr(m, off, 4);
	rc |= send_raw(m, off);

	uint8_t st[16 + sizeof(struct cuda_wire_stats)];
	struct cuda_wire_stats s = { .launches = 6, .launches_sampled = 4, .activities = 6 };
	put_hdr(st, CUDA_WIRE_STATS, sizeof(st), 1);
	memcpy(st + 16, &s, sizeof(s));
	rc |= send_raw(st, sizeof(st));
	return rc ? -1 : 0;
}

EXPORT void wire_close(void)
{
	if (sock >= 0)
		close(sock);
	sock = -1;
}
