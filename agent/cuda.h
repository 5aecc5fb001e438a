/* cuda.h - the agent's side of GPU profiling: the socket libembercuda.so
 * reports to, the launch stacks the marker uprobe recorded, and the join
 * of the two (lib/cuda_wire.h; docs/internals/gpu-agent.md).
 *
 * Listener. A SOCK_SEQPACKET Unix socket DIR/agent.sock (DIR made 0755,
 * the socket 0666: CUDA programs run as any user), non-blocking, served
 * from the agent's main loop: cuda_fd() becomes readable when a
 * connection or a message waits, and cuda_serve() takes them. At most
 * CUDA_MAX_CONNS connections; more are refused and counted. The sender's
 * pid comes from SO_PEERCRED, never from a message. Every datagram is
 * checked by cuda_wire_check(); refused ones are counted by reason. A
 * connection must start with HELLO.
 *
 * Launch stacks. cuda_add_stack() keeps the raw record of each marker hit
 * (bpf/cuda.bpf.c cuda_marker, kind ONCPU_KIND_CUDA_LAUNCH) under (pid,
 * stack_id), at most CUDA_MAX_STACKS records and CUDA_MAX_STACK_BYTES; the
 * oldest go first (counted). One process keeps at most
 * CUDA_MAX_STACKS_PER_PROC: past that its own oldest go, so a process that
 * calls the marker far too often cannot push the others' stacks out. A stack stays after it was used: the library
 * puts the time of unsampled launches under the last sampled stack_id of
 * the same thread and kernel, again and again.
 *
 * Join. Each AGG entry (and each SPAN entry, with its times) becomes a struct cuda_work, waiting (at most
 * CUDA_MAX_PENDING) until cuda_join() finds its stack: then the emit
 * callback gets the work and the stack record. stack_id 0 is emitted at
 * once without a stack; an unknown stack_id waits up to CUDA_HOLD_NS (the
 * uprobe's record may still be in the ring buffer), or up to
 * CUDA_RAW_HOLD_NS while the awaited callback (cuda_set_awaited) says its
 * stack is on its way (a raw launch stack the agent unwinds once the
 * tables are in), and is then emitted without a stack. No time is ever
 * dropped: a full pending queue emits the new entry at once, without a
 * stack.
 */
#ifndef EMBER_AGENT_CUDA_H
#define EMBER_AGENT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "cuda_wire_parse.h"

#define CUDA_MAX_CONNS 1024
#define CUDA_MAX_DEVICES 64                 /* per connection */
#define CUDA_MAX_STACKS 16384
#define CUDA_MAX_STACKS_PER_PROC 4096
#define CUDA_MAX_STACK_BYTES (32u << 20)
#define CUDA_MAX_PENDING 65536
#define CUDA_HOLD_NS 2000000000ull
/* The longest an entry waits for a stack that is on its way: more than
 * the collector's wait for a table (COLLECT_RAW_WAIT_NS, 5 s), after
 * which the stack comes in any case. */
#define CUDA_RAW_HOLD_NS 8000000000ull
/* Messages read from one connection per cuda_serve() (the rest wait). */
#define CUDA_SERVE_BATCH 256
/* AGG entries taken per second, from one connection and from all (token
 * buckets holding two seconds' worth): a library reports one entry per
 * (stack, thread, kernel, device, stream) per flush, far fewer; an AGG
 * over the budget is refused whole (reason "rate"), so a process that
 * floods the socket costs the agent a bounded amount of work and memory.
 * When the budget of all is spent, a connection sending no more than its
 * fair share (CUDA_MAX_ENTRIES_PER_SEC over the connections with a HELLO)
 * is still served: floods over many connections cannot shut a library
 * out, and the agent takes at most twice CUDA_MAX_ENTRIES_PER_SEC. */
#define CUDA_MAX_ENTRIES_PER_CONN_SEC 20000
#define CUDA_MAX_ENTRIES_PER_SEC 100000

/* One AGG entry, with what the agent knows of its process and device. */
struct cuda_work {
	int32_t pid;          /* SO_PEERCRED */
	uint64_t start_ticks; /* the process's start (/proc/PID/stat), 0 = unknown */
	uint64_t stack_id, total_ns, count;
	uint32_t tid, device, stream, context;
	uint16_t kind;        /* enum cuda_wire_kind */
	char *api;            /* NUL-terminated copies, owned by the work */
	char *name;
	char *stall;          /* a PC entry's stall reason (owned), NULL for an AGG entry */
	char *nvtx;           /* an AGG entry's checked NVTX path (owned, lib/cuda_wire.h), NULL: none */
	uint16_t nvtx_len;
	uint64_t cubin_id, pc_offset; /* a PC entry's instruction */
	/* A SPAN entry (one activity for the timeline, total_ns its length,
	 * count 1): its times, CLOCK_REALTIME ns. Its GPU time is in the AGG
	 * entries already: the emit callback keeps it as a span only. */
	bool span;
	uint64_t start_ns, end_ns;
	char gpu_name[64];    /* from the connection's DEVICE; "" = unknown */
	char gpu_uuid[48];    /* "GPU-xxxxxxxx-xxxx-..."; "" = unknown */
	uint64_t arrived_ns;
};

struct cuda_stats {
	uint64_t connections;            /* accepted */
	uint64_t connections_refused;    /* over CUDA_MAX_CONNS, or no peer pid */
	uint64_t connections_open;       /* gauge */
	uint64_t processes;              /* HELLOs accepted: processes injected */
	uint64_t messages;               /* accepted */
	uint64_t rejected[CWR_MAX];      /* refused, by reason (index 0 unused) */
	uint64_t stacks;                 /* launch stacks recorded */
	uint64_t stacks_evicted;         /* dropped, oldest first, for room */
	uint64_t stacks_malformed;       /* launch records too short to keep */
	uint64_t entries;                /* AGG entries received */
	uint64_t joined;                 /* emitted with their launch stack */
	uint64_t not_sampled;            /* emitted without one: stack_id 0 */
	uint64_t unknown_stack;          /* ... unknown stack after the hold */
	uint64_t pending_overflow;       /* ... the pending queue was full */
	uint64_t gpu_ns;                 /* GPU time emitted, all of it */
	uint64_t not_sampled_ns;         /* of which without a launch stack */
	/* The libraries' own counters (STATS): the latest of each connection,
	 * summed over every connection there was. */
	uint64_t lib_launches, lib_sampled, lib_records_dropped, lib_messages_dropped;
	uint64_t lib_pc_samples;         /* PC samples the libraries received */
	uint64_t lib_pc_refused;         /* processes whose CUPTI refused PC sampling (privileges) */
	uint64_t pc_entries;             /* PC entries received (of entries) */
	uint64_t spans;                  /* timeline spans emitted (not in entries) */
	uint64_t spans_joined;           /* ... of which with their launch stack */
};

struct cuda;

/* Called with the pid and start time (clock ticks) of a process whose
 * HELLO was accepted, so the agent reads its mappings (and finds its copy
 * of the library) at once. */
typedef void (*cuda_hello_fn)(void *ctx, int32_t pid, uint64_t start_ticks);
/* Receives one joined entry: rec is the launch stack's raw record (struct
 * oncpu_sample, size bytes) or NULL when there is none. */
typedef void (*cuda_emit_fn)(void *ctx, const struct cuda_work *w, const void *rec, size_t size);

/* Creates dir (0755) if missing, removes a stale socket (one nothing
 * listens on; a live one is left alone and is an error) and listens on
 * dir/agent.sock (0666). proc_root: "/proc" (or a test directory) for the
 * start times. Returns NULL with the reason in err. */
struct cuda *cuda_open(const char *dir, const char *proc_root, cuda_hello_fn hello,
		       cuda_emit_fn emit, void *ctx, struct buf *err);
/* Says whether the launch stack of (pid, stack_id) is on its way (called
 * with cuda_open's ctx for entries past CUDA_HOLD_NS without a stack). */
typedef bool (*cuda_awaited_fn)(void *ctx, int32_t pid, uint64_t stack_id);
/* Sets it (NULL: none; an entry waits CUDA_HOLD_NS at most). */
void cuda_set_awaited(struct cuda *c, cuda_awaited_fn awaited);
/* Closes every connection and the listener, removes the socket, frees
 * what is pending (NULL: no-op). */
void cuda_close(struct cuda *c);
/* Readable when cuda_serve() has work. */
int cuda_fd(const struct cuda *c);
/* The socket's path. */
const char *cuda_socket_path(const struct cuda *c);
/* Accepts connections and reads waiting messages (non-blocking). */
void cuda_serve(struct cuda *c, uint64_t now_ns);
/* The agent stops: refuses new connections and new messages (a library's
 * send fails from then on, so it keeps its GPU time for the next agent),
 * then reads every message already queued, on every connection, and
 * closes them. No datagram a library sent successfully is left unread.
 * cuda_serve takes nothing more; cuda_join and cuda_close follow. */
void cuda_stop(struct cuda *c, uint64_t now_ns);
/* Keeps a launch record (kind ONCPU_KIND_CUDA_LAUNCH) of size bytes. */
void cuda_add_stack(struct cuda *c, const void *rec, size_t size);
/* Emits what can be emitted (see above). */
void cuda_join(struct cuda *c, uint64_t now_ns);
/* Entries waiting for their stack. */
size_t cuda_pending(const struct cuda *c);
void cuda_get_stats(const struct cuda *c, struct cuda_stats *out);

/* Handles one datagram from connection slot (exposed for the fuzz target
 * and tests, which have no socket): as cuda_serve() does for a message
 * read from a connection of pid. */
void cuda_handle_message(struct cuda *c, int32_t pid, const void *msg, size_t len, uint64_t now_ns);

/* "GPU-" and the 16 bytes as 8-4-4-4-12 hex digits (NVML's form), or ""
 * when they are all zero. out: at least 41 bytes. */
void cuda_format_uuid(const uint8_t uuid[16], char *out);

#endif
