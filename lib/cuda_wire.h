/* cuda_wire.h - the messages libembercuda.so (gpu/) sends to ember-agent.
 *
 * A CUDA program started with CUDA_INJECTION64_PATH pointing at
 * libembercuda.so records its GPU work through CUPTI and ships it to the
 * agent on the same host over a Unix SOCK_SEQPACKET socket the agent owns:
 * by default "agent.sock" in the directory the library was loaded from
 * (the agent's -cuda-profiler-dir), or the path in EMBER_CUDA_AGENT_SOCKET.
 * One datagram is one message of at most CUDA_WIRE_MAX_MSG bytes.
 *
 * The sender is another process: the agent treats every byte as hostile.
 * It learns the sender's pid from the socket (SO_PEERCRED), never from a
 * message; it checks magic, version, type, the declared length against the
 * datagram's, the count against what fits, every name length, and drops
 * (and counts) a message that fails any check.
 *
 * Stacks. At a launch picked for a stack (a per-thread rate limit), the
 * library calls the exported, never-inlined
 *     void ember_cuda_launch_marker(uint64_t stack_id, uint32_t kind);
 * on the launching thread, inside the API's callback. ember-agent puts a
 * uprobe on that function in every loaded copy of the library and records
 * the thread's stack there (native, kernel and Python frames), keyed by
 * (pid, stack_id). stack_id is the CUPTI correlation id of that launch
 * (never 0). Aggregates then name the stack_id their time belongs to; the
 * agent emits CPU frames -> cuda_launch frame (api) -> kernel frame (name).
 *
 * Layout: little-endian, the structs below with no padding holes (each is
 * a multiple of 8 bytes). A message is a cuda_wire_hdr followed by `count`
 * entries of the type's struct; entries of types with strings (AGG, SPAN, PC)
 * are followed by their strings' bytes (no NUL), then zero padding up to
 * the next multiple of 8.
 */
#ifndef EMBER_CUDA_WIRE_H
#define EMBER_CUDA_WIRE_H

#include <stdint.h>

#define CUDA_WIRE_MAGIC 0x55434d45u /* "EMCU" in memory order */
#define CUDA_WIRE_VERSION 2          /* 2: PC entries carry an NVTX path */
#define CUDA_WIRE_MAX_MSG 65536     /* bytes in one datagram, header included */
#define CUDA_WIRE_NAME_MAX 1024     /* bytes of a kernel name; longer ones are cut */
#define CUDA_WIRE_API_MAX 64        /* bytes of an API name */
#define CUDA_WIRE_STALL_MAX 128     /* bytes of a stall reason's name (CUPTI_STALL_REASON_STRING_SIZE) */
#define CUDA_WIRE_NVTX_DEPTH_MAX 8    /* NVTX ranges kept per launch, outermost first */
#define CUDA_WIRE_NVTX_NAME_MAX 64    /* bytes of an NVTX range's name; longer ones are cut */
#define CUDA_WIRE_SOCKET_NAME "agent.sock"
#define CUDA_WIRE_MARKER "ember_cuda_launch_marker"

enum cuda_wire_type {
	CUDA_WIRE_HELLO = 1,  /* first message on a connection: one cuda_wire_hello */
	CUDA_WIRE_DEVICE = 2, /* one cuda_wire_device per CUDA device the process uses */
	CUDA_WIRE_AGG = 3,    /* count cuda_wire_agg: GPU time since the last flush */
	CUDA_WIRE_SPAN = 4,   /* count cuda_wire_span: single activities, for a timeline */
	CUDA_WIRE_STATS = 5,  /* one cuda_wire_stats: the library's counters (cumulative) */
	CUDA_WIRE_PC = 6,     /* count cuda_wire_pc: a kernel's GPU time split by PC samples */
	CUDA_WIRE_TYPE_MAX = 6,
};

/* What kind of GPU work; decides the leaf frame's type. */
enum cuda_wire_kind {
	CUDA_WIRE_KIND_KERNEL = 1, /* cuda_kernel */
	CUDA_WIRE_KIND_MEMCPY = 2, /* cuda_memcpy */
	CUDA_WIRE_KIND_MEMSET = 3, /* cuda_memset */
	CUDA_WIRE_KIND_SYNC = 4,   /* cuda_sync */
	CUDA_WIRE_KIND_GRAPH = 5,  /* a kernel run from a CUDA graph: cuda_kernel */
	CUDA_WIRE_KIND_MAX = 5,
};

struct cuda_wire_hdr {
	uint32_t magic;   /* CUDA_WIRE_MAGIC */
	uint16_t version; /* CUDA_WIRE_VERSION */
	uint16_t type;    /* enum cuda_wire_type */
	uint32_t length;  /* bytes of the whole message, header included */
	uint32_t count;   /* entries after the header (1 for HELLO, DEVICE, STATS) */
};

struct cuda_wire_hello {
	uint32_t pid;            /* as the process sees itself (informational) */
	uint32_t cupti_version;  /* cuptiGetVersion */
	uint32_t driver_version; /* cuDriverGetVersion, 0 when unknown */
	uint32_t flags;          /* reserved, 0 */
	/* one reading of both clocks, taken together: span times are already
	 * converted to CLOCK_REALTIME by the library; the agent may use this
	 * pair to check them */
	uint64_t cupti_ns;
	uint64_t realtime_ns;
	char lib_version[32];    /* NUL-padded */
};

struct cuda_wire_device {
	uint32_t index;       /* CUDA device ordinal */
	uint32_t reserved;
	uint8_t uuid[16];     /* raw bytes; all zero when unknown */
	char name[64];        /* NUL-padded, e.g. "NVIDIA H100 80GB HBM3" */
};

/* Time of GPU work since the last flush, pre-aggregated by
 * (stack_id, tid, kind, device, stream, context, api, name, NVTX path). stack_id 0:
 * no sampled launch of this (thread, name) yet; the agent puts such time
 * under a "[launch not sampled]" frame. Followed by api_len bytes of the
 * launching API's name ("cudaLaunchKernel", "cuMemcpyHtoDAsync", ...) and
 * name_len bytes of the kernel's name as CUPTI gives it (mangled; the agent
 * demangles), or for copies/sets/syncs a short description ("HtoD",
 * "DtoH", "memset", "cudaStreamSynchronize"). */
struct cuda_wire_agg {
	uint64_t stack_id;
	uint64_t total_ns;   /* sum of end - start of the activities */
	uint64_t count;      /* activities summed */
	uint32_t tid;        /* launching thread (as the process sees it) */
	uint16_t kind;       /* enum cuda_wire_kind */
	uint16_t api_len;    /* 1..CUDA_WIRE_API_MAX */
	uint32_t device;
	uint32_t stream;
	uint32_t context;
	uint16_t name_len;   /* 1..CUDA_WIRE_NAME_MAX */
	uint16_t nvtx_len;   /* 0..CUDA_WIRE_NVTX_BYTES_MAX: bytes of the NVTX path after the name */
};

/* The NVTX path of an AGG entry (EMBER_CUDA_ENABLE_NVTX): the NVTX ranges
 * open on the launching thread at its sampled launch, outermost first, at
 * most CUDA_WIRE_NVTX_DEPTH_MAX of them, each as one byte of length
 * (1..CUDA_WIRE_NVTX_NAME_MAX) then that many printable ASCII bytes. It
 * follows the entry's name (before the padding); nvtx_len 0: none. The
 * library's "last sampled stack" of a (thread, kernel) is per NVTX path,
 * so an entry's stack_id and path always belong together. The agent puts
 * one nvtx frame per range between the CPU stack and the cuda_launch
 * frame. */
#define CUDA_WIRE_NVTX_BYTES_MAX (CUDA_WIRE_NVTX_DEPTH_MAX * (1 + CUDA_WIRE_NVTX_NAME_MAX))

/* A part of a kernel's GPU time (an AGG entry of kind KERNEL or GRAPH)
 * that PC sampling (EMBER_CUDA_ENABLE_PC_SAMPLING) attributed to one
 * instruction and one warp stall reason: the library splits each kernel
 * entry's total_ns over the PC samples it holds for that kernel's name, in
 * proportion to their counts, exactly (the parts sum to the entry's
 * total). The agent puts it under the kernel frame as a cuda_sass frame
 * (cubin_id, pc_offset) and a cuda_stall frame (the reason as CUPTI names
 * it, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"). The fields up
 * to name_len are an AGG entry's; count is the PC samples of that
 * (offset, reason). Its launch is named as its kernel's AGG entry's is
 * (stack_id, tid, api, NVTX path), so the agent puts the parts under the
 * same CPU stack, NVTX ranges, cuda_launch and kernel frames as the rest
 * of the kernel's time (one kernel frame). Followed by api_len bytes of
 * the API, name_len of the kernel's name, stall_len of the reason,
 * nvtx_len of the NVTX path (as an AGG entry's), then padding. */
struct cuda_wire_pc {
	uint64_t stack_id;
	uint64_t total_ns;   /* this part of the kernel's time */
	uint64_t count;      /* PC samples of this (offset, reason), >= 1 */
	uint32_t tid;
	uint16_t kind;       /* CUDA_WIRE_KIND_KERNEL or _GRAPH */
	uint16_t api_len;    /* 1..CUDA_WIRE_API_MAX */
	uint32_t device;
	uint32_t stream;
	uint32_t context;
	uint16_t name_len;   /* 1..CUDA_WIRE_NAME_MAX */
	uint16_t stall_len;  /* 1..CUDA_WIRE_STALL_MAX */
	uint64_t cubin_id;   /* CUPTI's cubin CRC */
	uint64_t pc_offset;  /* the instruction's offset in the function */
	uint16_t nvtx_len;   /* 0..CUDA_WIRE_NVTX_BYTES_MAX */
	uint16_t reserved16; /* 0 */
	uint32_t reserved;   /* 0 */
};

/* What became of PC sampling in the process (cuda_wire_stats.pc_state). */
enum cuda_wire_pc_state {
	CUDA_WIRE_PC_OFF = 0,         /* not asked for */
	CUDA_WIRE_PC_ON = 1,          /* enabled on at least one context */
	CUDA_WIRE_PC_REFUSED = 2,     /* CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (admin-only profiling) */
	CUDA_WIRE_PC_UNAVAILABLE = 3, /* no PC sampling API, or it failed otherwise */
	CUDA_WIRE_PC_STATE_MAX = 3,
};

/* One activity with its times (CLOCK_REALTIME ns), at most a bounded
 * number per second (the first 256 records of each report), for the
 * per-device, per-stream timeline. Its launch is named as an AGG entry's
 * is (stack_id, tid, api, NVTX path: the agent resolves the stack the same
 * way), so the timeline's bar and the flamegraph's time share one stack.
 * Followed by api_len bytes of the API, name_len of the name, nvtx_len of
 * the NVTX path (as an AGG entry's), then padding. */
struct cuda_wire_span {
	uint64_t start_ns;
	uint64_t end_ns;
	uint64_t stack_id;   /* 0: no sampled launch of this (thread, name, path) yet */
	uint32_t tid;
	uint16_t kind;
	uint16_t name_len;   /* 1..CUDA_WIRE_NAME_MAX */
	uint32_t device;
	uint32_t stream;
	uint32_t context;
	uint16_t api_len;    /* 1..CUDA_WIRE_API_MAX */
	uint16_t nvtx_len;   /* 0..CUDA_WIRE_NVTX_BYTES_MAX */
};

/* Cumulative counters of the library, sent with each flush. */
struct cuda_wire_stats {
	uint64_t launches;          /* launch callbacks seen */
	uint64_t launches_sampled;  /* of which the marker was called for */
	uint64_t activities;        /* activity records aggregated */
	uint64_t records_dropped;   /* CUPTI's dropped-record count, summed */
	uint64_t messages_dropped;  /* sends the socket refused (agent busy or gone); an AGG's time is sent later */
	uint64_t overhead_ns;       /* time spent in the library's callbacks */
	uint64_t pc_samples;        /* PC samples received from CUPTI */
	uint32_t pc_state;          /* enum cuda_wire_pc_state */
	uint32_t reserved;          /* 0 */
};

_Static_assert(sizeof(struct cuda_wire_hdr) == 16, "wire header is 16 bytes");
_Static_assert(sizeof(struct cuda_wire_hello) == 64, "hello is 64 bytes");
_Static_assert(sizeof(struct cuda_wire_device) == 88, "device is 88 bytes");
_Static_assert(sizeof(struct cuda_wire_agg) == 48, "agg is 48 bytes");
_Static_assert(sizeof(struct cuda_wire_span) == 48, "span is 48 bytes");
_Static_assert(sizeof(struct cuda_wire_stats) == 64, "stats is 64 bytes");
_Static_assert(sizeof(struct cuda_wire_pc) == 72, "pc is 72 bytes");

#endif
