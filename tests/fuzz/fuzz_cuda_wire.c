/* Fuzz target: what the agent does with the messages libembercuda.so
 * sends (lib/cuda_wire.h; agent/cuda_wire_parse.c, agent/cuda.c) and with
 * the launch records of the marker uprobe, then the samples it makes of
 * them (collect_cuda in agent/collect.c). Any process on the host can
 * write to the agent's socket, so every byte is hostile.
 *
 * The input is a run of items, each a 1-byte tag, a 2-byte little-endian
 * length and that many bytes: tag bit 7 clear, a datagram from process
 * (tag & 3) + 1; set, a launch record (struct oncpu_sample bytes, its
 * kind forced to ONCPU_KIND_CUDA_LAUNCH). Checked: nothing reads out of
 * bounds (ASan); every accepted AGG's and PC's entries read back within
 * the message; and no GPU time is lost or made up: after a final join past the
 * hold time, the time emitted equals the sum of the accepted entries'. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/types.h>

#include "agent/batch.h"
#include "agent/collect.h"
#include "agent/cuda.h"
#include "agent/cuda_wire_parse.h"
#include "agent/files.h"
#include "agent/kallsyms.h"
#include "agent/proc.h"
#include "agent/vdso.h"
#include "log.h"
#include "oncpu_types.h"

static char dir[] = "/tmp/ember-fuzz-cuda-XXXXXX";
static bool ready;
static struct kallsyms ksyms;
static struct vdso vdso;

struct run {
	struct collector *c;
	uint64_t emitted_ns;
	size_t emitted;
	size_t spans; /* timeline spans emitted (not in emitted) */
};

static void on_emit(void *ctx, const struct cuda_work *w, const void *rec, size_t size)
{
	struct run *r = ctx;
	if (strlen(w->api) < 1 || strlen(w->api) > CUDA_WIRE_API_MAX || strlen(w->name) < 1 ||
	    strlen(w->name) > CUDA_WIRE_NAME_MAX || w->kind < 1 || w->kind > CUDA_WIRE_KIND_MAX)
		abort();
	if (w->stall && (strlen(w->stall) < 1 || strlen(w->stall) > CUDA_WIRE_STALL_MAX))
		abort();
	if (w->span) {
		r->spans++;
	} else {
		r->emitted_ns += w->total_ns;
		r->emitted++;
	}
	collect_cuda(r->c, w, rec, size, 1000);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready) {
		if (!mkdtemp(dir))
			abort();
		vdso_load(&vdso);
		log_init("fuzz_cuda_wire", LOG_WARN, false); /* not a line per HELLO */
		ready = true;
	}
	struct file_registry files;
	files_init(&files, "/nonexistent-proc", NULL, NULL);
	struct proc_table procs;
	proc_table_init(&procs, &files, "/nonexistent-proc");
	struct batch b;
	batch_init(&b);
	struct collector c = { .batch = &b, .procs = &procs, .files = &files, .ksyms = &ksyms,
			       .vdso = &vdso, .host_name = "h", .host_arch = "amd64",
			       .ns_per_tick = 10000000 };
	struct run r = { .c = &c };
	struct buf err = { 0 };
	struct cuda *cu = cuda_open(dir, "/nonexistent-proc", NULL, on_emit, &r, &err);
	if (!cu)
		abort();
	uint64_t accepted_ns = 0;
	size_t accepted = 0, accepted_spans = 0;
	size_t off = 0;
	static uint8_t item[CUDA_WIRE_MAX_MSG];
	static struct oncpu_sample rec;
	while (off + 3 <= size) {
		uint8_t tag = data[off];
		size_t n = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
		off += 3;
		if (n > size - off)
			n = size - off;
		memcpy(item, data + off, n); /* aligned, and a copy ASan bounds */
		off += n;
		if (tag & 0x80) {
			size_t m = n < sizeof(rec) ? n : sizeof(rec);
			memset(&rec, 0, sizeof(rec));
			memcpy(&rec, item, m);
			if (m >= ONCPU_HDR_SIZE)
				rec.kind = ONCPU_KIND_CUDA_LAUNCH;
			cuda_add_stack(cu, &rec, m);
			continue;
		}
		uint16_t type;
		uint32_t count;
		struct cuda_stats before;
		cuda_get_stats(cu, &before);
		if (cuda_wire_check(item, n, &type, &count) == CWR_OK &&
		    (type == CUDA_WIRE_AGG || type == CUDA_WIRE_PC || type == CUDA_WIRE_SPAN)) {
			size_t o = 0, k = 0;
			uint64_t ns = 0;
			struct cuda_agg_view v;
			while (type == CUDA_WIRE_AGG  ? cuda_wire_next_agg(item, n, &o, &v)
			       : type == CUDA_WIRE_PC ? cuda_wire_next_pc(item, n, &o, &v)
						      : cuda_wire_next_span(item, n, &o, &v)) {
				if (v.api < (const char *)item || v.name + v.a.name_len > (const char *)item + n ||
				    (v.nvtx && v.nvtx + v.a.nvtx_len > (const char *)item + n))
					abort();
				if (type == CUDA_WIRE_SPAN) { /* a timeline span: its time is the AGG entries' */
					if (!v.span || v.end_ns < v.start_ns || v.a.total_ns != v.end_ns - v.start_ns)
						abort();
					k++;
					continue;
				}
				if (type == CUDA_WIRE_PC &&
				    (!v.stall || v.stall_len < 1 || v.stall + v.stall_len > (const char *)item + n ||
				     (v.a.kind != CUDA_WIRE_KIND_KERNEL && v.a.kind != CUDA_WIRE_KIND_GRAPH)))
					abort();
				ns += v.a.total_ns;
				k++;
			}
			if (k != count || o != n)
				abort();
			cuda_handle_message(cu, (tag & 3) + 1, item, n, 1000);
			struct cuda_stats after;
			cuda_get_stats(cu, &after);
			if (after.entries > before.entries) { /* taken, not refused for order */
				accepted_ns += ns;
				accepted += k;
			} else if (type == CUDA_WIRE_SPAN && after.messages > before.messages) {
				accepted_spans += k;
			}
		} else {
			cuda_handle_message(cu, (tag & 3) + 1, item, n, 1000);
		}
	}
	cuda_join(cu, 1000 + CUDA_HOLD_NS);
	if (cuda_pending(cu) != 0 || r.emitted != accepted || r.emitted_ns != accepted_ns ||
	    r.spans != accepted_spans)
		abort();
	struct cuda_stats st;
	cuda_get_stats(cu, &st);
	if (st.gpu_ns != accepted_ns || st.entries != accepted)
		abort();
	cuda_close(cu);
	buf_free(&err);
	batch_free(&b);
	proc_table_free(&procs);
	files_free(&files);
	return 0;
}
