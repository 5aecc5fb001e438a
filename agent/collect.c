/* collect.c - see collect.h. */
#include "collect.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <linux/types.h>

#include "cuda.h"
#include "oncpu_types.h"
#include "log.h"
#include "python.h"
#include "python_types.h"
#include "rawstack.h"
#include "unwind_types.h"
#include "util.h"

#define MAX_STACK (ONCPU_MAX_FRAMES + 4)

static uint32_t str(struct collector *c, const char *s)
{
	return batch_string(c->batch, s, strlen(s));
}

static uint32_t error_frame(struct collector *c, const char *what)
{
	struct bframe f = { .type = FT_ERROR, .name = str(c, what) };
	return batch_frame(c->batch, &f);
}

/* The frame for a user address, or UINT32_MAX when it lies in no
 * executable mapping. */
static uint32_t user_frame(struct collector *c, struct proc *p, uint64_t addr, uint64_t now_ns)
{
	const struct mapping *m = proc_find_mapping(c->procs, p, addr, now_ns);
	struct bframe f = { .type = FT_NATIVE };
	if (!m)
		return UINT32_MAX;
	switch (m->kind) {
	case MAPPING_VDSO: {
		uint64_t off = addr - m->start;
		const char *name = vdso_lookup(c->vdso, off);
		f.binary = str(c, "[vdso]");
		if (name)
			f.name = str(c, name);
		else
			f.address = off;
		break;
	}
	case MAPPING_ANON:
		f.binary = str(c, "[anon]");
		f.name = str(c, "[anonymous code]");
		c->stats.unknown_frames++;
		break;
	default:
		if (m->file == FILE_NONE) {
			f.binary = str(c, "[unreadable]");
			f.name = str(c, "[unreadable file]");
			c->stats.unknown_frames++;
		} else {
			const struct agent_file *af = files_at(c->files, m->file);
			uint64_t segs[FILE_MAX_SEGMENTS][3];
			for (int i = 0; i < af->nsegs; i++) {
				segs[i][0] = af->segs[i].offset;
				segs[i][1] = af->segs[i].vaddr;
				segs[i][2] = af->segs[i].size;
			}
			f.file = batch_file(c->batch, m->file, &af->id, af->name, af->build_id,
					    af->build_id_len, (const uint64_t(*)[3])segs, af->nsegs);
			f.address = addr - m->start + m->offset;
		}
		break;
	}
	return batch_frame(c->batch, &f);
}

/* A Python frame of the walker (python_types.h): its qualified name, with
 * the source file as the binary and the line as the address. */
static uint32_t python_frame(struct collector *c, const struct proc *p, uint64_t slot,
			     uint64_t qualname)
{
	size_t cs = (size_t)(hash_mix(hash_mix(hash_u64(slot), qualname), (uint32_t)p->pid) &
			     (ARRAY_SIZE(c->pyframe_cache) - 1));
	if (c->batch_gen && c->pyframe_cache[cs].gen == c->batch_gen &&
	    c->pyframe_cache[cs].slot == slot && c->pyframe_cache[cs].qualname == qualname &&
	    c->pyframe_cache[cs].pid == p->pid) {
		c->stats.python_frames++;
		return c->pyframe_cache[cs].frame;
	}
	struct bframe f = { .type = FT_CPYTHON };
	struct py_sym ps;
	if (!c->python || python_symbolize(c->python, p->pid, slot, qualname, &ps) < 0) {
		f.name = str(c, "[unknown Python frame]");
		c->stats.python_unknown++;
		return batch_frame(c->batch, &f);
	}
	f.name = str(c, ps.name);
	f.binary = str(c, ps.file);
	f.address = ps.line;
	c->stats.python_frames++;
	uint32_t frame = batch_frame(c->batch, &f);
	c->pyframe_cache[cs].gen = c->batch_gen;
	c->pyframe_cache[cs].slot = slot;
	c->pyframe_cache[cs].qualname = qualname;
	c->pyframe_cache[cs].pid = p->pid;
	c->pyframe_cache[cs].frame = frame;
	return frame;
}

void collector_set_batch(struct collector *c, struct batch *b)
{
	c->batch = b;
	sample_cache_clear(&c->samples);
	if (++c->batch_gen == 0) { /* wrapped: no entry may look current */
		memset(c->res_cache, 0, sizeof(c->res_cache));
		memset(c->kframe_cache, 0, sizeof(c->kframe_cache));
		memset(c->pyframe_cache, 0, sizeof(c->pyframe_cache));
		c->batch_gen = 1;
	}
}

static void drop_pending(struct collector *c, struct raw_pending *w);

void collector_free(struct collector *c)
{
	sample_cache_free(&c->samples);
	for (size_t i = 0; i < c->npending; i++)
		drop_pending(c, &c->pending[i]);
	free(c->pending);
	c->pending = NULL;
	c->npending = c->cappending = 0;
}

static uint32_t kernel_frame_named(struct collector *c, uint64_t addr, const char *name,
				   const char *module);

static uint32_t kernel_frame(struct collector *c, uint64_t addr)
{
	size_t slot = (size_t)(hash_u64(addr) & (ARRAY_SIZE(c->kframe_cache) - 1));
	struct kframe_memo *e = &c->kframe_cache[slot];
	if (c->batch_gen && e->gen == c->batch_gen && e->addr == addr) {
		c->stats.unknown_frames += e->unknown;
		return e->frame;
	}
	const char *module = NULL, *name;
	if (e->gen && e->addr == addr) { /* named in an earlier batch */
		name = e->name;
		module = e->module;
	} else {
		name = kallsyms_lookup(c->ksyms, addr, &module);
	}
	uint64_t unknown = c->stats.unknown_frames;
	uint32_t f = kernel_frame_named(c, addr, name, module);
	e->gen = c->batch_gen;
	e->addr = addr;
	e->frame = f;
	e->name = name;
	e->module = module;
	/* An address kallsyms does not know counts as unknown each time. */
	e->unknown = c->stats.unknown_frames != unknown;
	return f;
}

static uint32_t kernel_frame_named(struct collector *c, uint64_t addr, const char *name,
				   const char *module)
{
	struct bframe f = { .type = FT_KERNEL };
	if (name) {
		f.name = str(c, name);
		f.binary = str(c, module && *module ? module : "vmlinux");
	} else {
		f.binary = str(c, "vmlinux");
		f.address = addr;
		c->stats.unknown_frames++;
	}
	return batch_frame(c->batch, &f);
}

/* A stack unwound by the agent from its raw copy, in the interpreter loop
 * but without the Python frames BPF could not read when it took it
 * (ONCPU_F_PY_MISSING): said, rather than its C frames shown as if they
 * were the whole stack. */
#define PY_MISSING_FRAME "[Python frames not unwound]"

static const char *const unwind_errors[UWE_MAX] = {
	[UWE_NONE] = NULL,
	[UWE_NO_MAPPING] = "[unknown mapping]",
	[UWE_READ] = "[unwinding stopped: stack unreadable]",
	[UWE_NO_PROGRESS] = "[unwinding stopped: stack pointer did not move]",
	[UWE_TRUNCATED] = "[truncated stack]",
	[UWE_NO_FP] = "[unwinding stopped: no unwind information and no frame pointer]",
};

/* Adds what the kubelet says about a process's pod to its resource. */
struct pod_kv {
	struct collector *c;
	uint32_t *kv;
	size_t nkv;
};

static void add_pod_kv(void *ctx, const char *key, const char *value)
{
	struct pod_kv *pk = ctx;
	pk->kv[pk->nkv++] = str(pk->c, key);
	pk->kv[pk->nkv++] = str(pk->c, value);
}

/* The resource of a sample of process p (pid) in thread comm (NULL: no
 * thread.name), with extra (key, value) string pairs (n strings) after
 * the process's own; *cacheable: false while the pod's labels are still
 * to come. */
static uint32_t process_resource(struct collector *c, uint32_t pid_, struct proc *p,
				 const char *comm, const char *const *extra, size_t nextra,
				 uint64_t now_ns, bool *cacheable)
{
	char pid[16];
	snprintf(pid, sizeof(pid), "%u", pid_);
	uint32_t kv[2 * (5 + ATTRIB_MAX + KUBELET_MAX_ATTRS + COLLECT_MAX_EXTRA_KV) + COLLECT_MAX_HOST_KV] = {
		str(c, "host.name"), str(c, c->host_name),
		str(c, "host.arch"), str(c, c->host_arch),
		str(c, "process.executable.name"), str(c, p->exe_name),
		str(c, "process.pid"), str(c, pid),
	};
	size_t nkv = 8;
	if (comm) {
		kv[nkv++] = str(c, "thread.name");
		kv[nkv++] = str(c, comm);
	}
	for (size_t i = 0; i + 1 < c->nhost_kv; i += 2)
		if (c->host_kv[i + 1] && *c->host_kv[i + 1]) {
			kv[nkv++] = str(c, c->host_kv[i]);
			kv[nkv++] = str(c, c->host_kv[i + 1]);
		}
	for (size_t i = 0; i < p->attrs.n; i++) {
		kv[nkv++] = str(c, p->attrs.key[i]);
		kv[nkv++] = str(c, p->attrs.value[i]);
	}
	for (size_t i = 0; i + 1 < nextra && i + 1 < 2 * COLLECT_MAX_EXTRA_KV; i += 2) {
		kv[nkv++] = str(c, extra[i]);
		kv[nkv++] = str(c, extra[i + 1]);
	}
	struct pod_kv pk = { c, kv, nkv };
	*cacheable = kubelet_process_attributes(c->kubelet, &p->attrs, now_ns, add_pod_kv, &pk);
	return batch_resource(c->batch, kv, pk.nkv);
}

/* The words that decide what a raw sample becomes in the batch: its
 * process (pid, start, exec), kind, unwinding outcome, thread name and
 * raw frames. Not its time, CPU, thread id or value. */
#define RAW_KEY_WORDS 7

static size_t raw_key(const struct oncpu_sample *s, const char *comm, uint32_t nframes,
		      uint64_t *key)
{
	key[0] = s->proc_start_ns;
	key[1] = s->exec_id;
	key[2] = (uint64_t)s->pid << 32 | s->kind;
	key[3] = (uint64_t)(uint32_t)s->kstack_len << 32 | (uint32_t)s->ustack_len;
	/* ONCPU_F_PY_MISSING adds an error frame: part of what resolves. */
	key[4] = (uint64_t)(s->flags & ONCPU_F_PY_MISSING) << 32 | (uint64_t)s->unwind_mode << 16 | s->unwind_error;
	memset(&key[5], 0, 2 * sizeof(uint64_t));
	memcpy(&key[5], comm, strlen(comm));
	memcpy(&key[RAW_KEY_WORDS], s->frames, nframes * sizeof(uint64_t));
	return RAW_KEY_WORDS + nframes;
}

/* Resolves the sample's stack and thread into the batch and adds it;
 * returns the row, and whether a repeat of the raw sample in this batch
 * may reuse it (*reusable): not when the stack broke at an address in no
 * mapping (the maps are read again for it) or a Python frame could not be
 * named yet, nor when the pod's labels are still to come. */
static uint32_t resolve_sample(struct collector *c, const struct oncpu_sample *s, struct proc *p,
			       const char *comm, uint8_t kind, uint32_t nk, uint32_t nu, uint64_t now_ns,
			       bool *reusable)
{
	const __u64 *kframes = s->frames, *uframes = s->frames + nk;

	uint32_t stack[MAX_STACK];
	size_t n = 0;
	const char *why = s->unwind_error < UWE_MAX ? unwind_errors[s->unwind_error] : "[unwinding stopped]";
	if (s->ustack_len < 0)
		why = "[user stack unreadable]";
	else if (s->unwind_mode == UWM_KERNEL_FP && nu == ONCPU_MAX_KFRAMES)
		why = unwind_errors[UWE_TRUNCATED];
	else if (!why && (s->flags & ONCPU_F_PY_MISSING))
		why = PY_MISSING_FRAME;
	/* Resolve innermost first. An address in no executable mapping means
	 * the stack broke there (a frame-pointer chain through code without
	 * frame pointers): the frames beyond it are not trustworthy and are
	 * replaced by one error frame. The batch wants the outermost first. */
	uint32_t user[ONCPU_MAX_UFRAMES];
	uint32_t nres = 0;
	bool broken = false, last_native = false;
	uint64_t python_unknown = c->stats.python_unknown;
	uint64_t last = 0; /* the outermost native address looked up */
	for (uint32_t i = 0; i < nu; i++) {
		uint64_t a = uframes[i];
		last_native = !(a & PY_FRAME_FLAG);
		if (!last_native) {
			/* Two slots: the frame, then its co_qualname pointer. */
			user[nres++] = python_frame(c, p, a, i + 1 < nu ? uframes[++i] : 0);
			continue;
		}
		last = i == 0 ? a : a - 1;
		uint32_t f = user_frame(c, p, last, now_ns);
		if (f == UINT32_MAX) {
			why = unwind_errors[UWE_NO_MAPPING];
			broken = true;
			break;
		}
		user[nres++] = f;
	}
	if (c->want_table && s->unwind_mode == UWM_CFI && !broken && last_native &&
	    (s->unwind_error == UWE_NO_FP || s->unwind_error == UWE_READ)) {
		const struct mapping *m = proc_find_mapping(c->procs, p, last, now_ns);
		if (m && m->kind == MAPPING_FILE && m->file != FILE_NONE)
			c->want_table(c->hook_ctx, m->file);
	}
	if (why) {
		c->stats.unknown_frames++;
		if (why == unwind_errors[UWE_TRUNCATED])
			c->stats.truncated++;
		stack[n++] = error_frame(c, why);
	}
	for (uint32_t i = nres; i-- > 0;)
		stack[n++] = user[i];
	if (s->kstack_len < 0)
		stack[n++] = error_frame(c, "[kernel stack unreadable]");
	for (uint32_t i = nk; i-- > 0;) {
		uint64_t a = kframes[i];
		stack[n++] = kernel_frame(c, i == 0 ? a : a - 1);
	}
	*reusable = !broken && c->stats.python_unknown == python_unknown;
	uint32_t st = batch_stack(c->batch, stack, n);
	size_t slot = (size_t)(hash_mix(hash_u64(s->pid), hash_bytes(comm, strlen(comm))) &
			       (ARRAY_SIZE(c->res_cache) - 1));
	if (c->batch_gen && c->res_cache[slot].gen == c->batch_gen && c->res_cache[slot].pid == s->pid &&
	    strcmp(c->res_cache[slot].comm, comm) == 0) {
		return batch_add(c->batch, st, c->res_cache[slot].res, kind, s->value);
	}
	bool cacheable;
	uint32_t res = process_resource(c, s->pid, p, comm, NULL, 0, now_ns, &cacheable);
	if (!cacheable) {
		*reusable = false;
		return batch_add(c->batch, st, res, kind, s->value);
	}
	c->res_cache[slot].gen = c->batch_gen;
	c->res_cache[slot].pid = s->pid;
	memcpy(c->res_cache[slot].comm, comm, strlen(comm) + 1);
	c->res_cache[slot].res = res;
	return batch_add(c->batch, st, res, kind, s->value);
}

static void collect_raw(struct collector *c, const struct oncpu_raw_sample *r, size_t size,
			uint64_t now_ns);

void collect_sample(struct collector *c, const void *data, size_t size, uint64_t now_ns)
{
	const struct oncpu_sample *s = data;
	if (size < ONCPU_HDR_SIZE) {
		c->stats.malformed++;
		return;
	}
	if (s->flags & ONCPU_F_RAW_STACK) {
		collect_raw(c, data, size, now_ns);
		return;
	}
	uint32_t nk = s->kstack_len > 0 ? (uint32_t)s->kstack_len : 0;
	uint32_t nu = s->ustack_len > 0 ? (uint32_t)s->ustack_len : 0;
	if (nk > ONCPU_MAX_KFRAMES || nu > ONCPU_MAX_UFRAMES ||
	    size < ONCPU_HDR_SIZE + (size_t)(nu + nk) * sizeof(__u64)) {
		c->stats.malformed++;
		return;
	}
	uint8_t kind;
	if (s->kind == ONCPU_KIND_ON_CPU && s->value == 1) {
		kind = EK_ON_CPU;
	} else if (s->kind == ONCPU_KIND_OFF_CPU && s->value > 0 && s->value <= OFFCPU_MAX_VALUE_NS) {
		kind = EK_OFF_CPU;
	} else {
		c->stats.malformed++;
		return;
	}
	char comm[ONCPU_COMM_LEN + 1];
	memcpy(comm, s->comm, ONCPU_COMM_LEN);
	comm[ONCPU_COMM_LEN] = '\0';

	struct proc *p = proc_table_get(c->procs, (int32_t)s->pid,
					s->proc_start_ns / c->ns_per_tick, s->exec_id, comm, now_ns);
	if (s->unwind_mode == UWM_CFI)
		c->stats.cfi_stacks++;
	else if (s->unwind_mode == UWM_KERNEL_FP)
		c->stats.fp_stacks++;
	c->stats.frames += nu + nk;
	if (kind == EK_ON_CPU) {
		c->stats.samples++;
	} else {
		c->stats.offcpu_samples++;
		c->stats.offcpu_ns += s->value;
	}

	/* A repeat of a raw sample already in this batch goes to its row. */
	uint64_t key[RAW_KEY_WORDS + ONCPU_MAX_FRAMES];
	size_t nkey = 0;
	uint64_t hash = 0;
	if (c->batch_gen) {
		nkey = raw_key(s, comm, nk + nu, key);
		hash = hash_bytes(key, nkey * sizeof(uint64_t));
		const struct sample_cache_value *v = sample_cache_find(&c->samples, key, nkey, hash);
		if (v) {
			c->stats.unknown_frames += v->unknown_frames;
			c->stats.python_frames += v->python_frames;
			c->stats.truncated += v->truncated;
			batch_add_to_row(c->batch, v->row, s->value);
			return;
		}
	}
	struct collector_stats before = c->stats;
	bool reusable;
	uint32_t row = resolve_sample(c, s, p, comm, kind, nk, nu, now_ns, &reusable);
	if (c->batch_gen && reusable) {
		struct sample_cache_value v = {
			.row = row,
			.unknown_frames = (uint16_t)(c->stats.unknown_frames - before.unknown_frames),
			.python_frames = (uint16_t)(c->stats.python_frames - before.python_frames),
			.truncated = (uint8_t)(c->stats.truncated - before.truncated),
		};
		sample_cache_put(&c->samples, key, nkey, hash, &v);
	}
}

/* --- GPU time (cuda.h) --------------------------------------------------- */

/* Whether a frame's file is the CUDA machinery the launch went through
 * (libembercuda.so, libcupti*, libcuda.so*, libcudart*): such frames at
 * the top of a launch stack are left out, the cuda_launch frame stands
 * for them. */
static bool cuda_machinery(const char *name)
{
	return strncmp(name, "libembercuda.so", 15) == 0 || strncmp(name, "libcupti", 8) == 0 ||
	       strncmp(name, "libcuda", 7) == 0;
}

static uint8_t cuda_leaf_type(uint16_t kind)
{
	switch (kind) {
	case CUDA_WIRE_KIND_MEMCPY:
		return FT_CUDA_MEMCPY;
	case CUDA_WIRE_KIND_MEMSET:
		return FT_CUDA_MEMSET;
	case CUDA_WIRE_KIND_SYNC:
		return FT_CUDA_SYNC;
	default: /* KERNEL, GRAPH */
		return FT_CUDA_KERNEL;
	}
}

void collect_cuda_prepare(struct collector *c, const void *rec, size_t size, uint64_t now_ns)
{
	const struct oncpu_sample *s = rec;
	if (size < ONCPU_HDR_SIZE || s->kstack_len < 0 || s->ustack_len < 0 ||
	    s->kstack_len > ONCPU_MAX_KFRAMES || s->ustack_len > ONCPU_MAX_UFRAMES ||
	    size < ONCPU_HDR_SIZE + (size_t)(s->kstack_len + s->ustack_len) * sizeof(__u64))
		return;
	char comm[ONCPU_COMM_LEN + 1];
	memcpy(comm, s->comm, ONCPU_COMM_LEN);
	comm[ONCPU_COMM_LEN] = '\0';
	struct proc *p = proc_table_get(c->procs, (int32_t)s->pid, s->proc_start_ns / c->ns_per_tick,
					s->exec_id, comm, now_ns);
	const __u64 *uframes = s->frames + s->kstack_len;
	struct py_sym ps;
	bool last_native = false;
	uint64_t last = 0;
	for (int32_t i = 0; i < s->ustack_len; i++) {
		last_native = !(uframes[i] & PY_FRAME_FLAG);
		if (last_native) {
			last = i == 0 ? uframes[i] : uframes[i] - 1;
			continue;
		}
		if (c->python && i + 1 < s->ustack_len)
			(void)python_symbolize(c->python, (int32_t)s->pid, uframes[i], uframes[i + 1], &ps);
		i++;
	}
	/* Stopped for want of a file's table (maybe still to be built): that
	 * table next, as for CPU samples, so the next launch stacks are whole. */
	if (c->want_table && s->unwind_mode == UWM_CFI && last_native &&
	    (s->unwind_error == UWE_NO_FP || s->unwind_error == UWE_READ)) {
		const struct mapping *m = proc_find_mapping(c->procs, p, last, now_ns);
		if (m && m->kind == MAPPING_FILE && m->file != FILE_NONE)
			c->want_table(c->hook_ctx, m->file);
	}
}

void collect_cuda(struct collector *c, const struct cuda_work *w, const void *rec, size_t size,
		  uint64_t now_ns)
{
	const struct oncpu_sample *s = rec;
	if (s && (size < ONCPU_HDR_SIZE || s->kstack_len < 0 || s->ustack_len < 0 ||
		  s->kstack_len > ONCPU_MAX_KFRAMES || s->ustack_len > ONCPU_MAX_UFRAMES ||
		  size < ONCPU_HDR_SIZE + (size_t)(s->kstack_len + s->ustack_len) * sizeof(__u64))) {
		c->stats.malformed++;
		s = NULL;
	}
	char comm[ONCPU_COMM_LEN + 1] = "";
	struct proc *p;
	if (s) {
		memcpy(comm, s->comm, ONCPU_COMM_LEN);
		comm[ONCPU_COMM_LEN] = '\0';
		p = proc_table_get(c->procs, (int32_t)s->pid, s->proc_start_ns / c->ns_per_tick,
				   s->exec_id, comm, now_ns);
	} else {
		p = proc_table_get(c->procs, w->pid, w->start_ticks, PROC_EXEC_UNKNOWN, "", now_ns);
	}
	uint32_t stack[MAX_STACK + 4 + CUDA_WIRE_NVTX_DEPTH_MAX];
	size_t n = 0;
	if (s) {
		const __u64 *uframes = s->frames + s->kstack_len;
		uint32_t nu = (uint32_t)s->ustack_len;
		uint32_t user[ONCPU_MAX_UFRAMES];
		uint32_t nres = 0;
		const char *why = s->unwind_error && s->unwind_error < UWE_MAX ? unwind_errors[s->unwind_error] : NULL;
		bool top = true; /* still among the library frames at the top */
		for (uint32_t i = 0; i < nu; i++) {
			uint64_t a = uframes[i];
			if (a & PY_FRAME_FLAG) {
				top = false;
				user[nres++] = python_frame(c, p, a, i + 1 < nu ? uframes[++i] : 0);
				continue;
			}
			uint64_t at = i == 0 ? a : a - 1;
			const struct mapping *m = proc_find_mapping(c->procs, p, at, now_ns);
			const char *file = m && m->kind == MAPPING_FILE && m->file != FILE_NONE
						   ? files_at(c->files, m->file)->name : NULL;
			if (top && file && cuda_machinery(file))
				continue;
			top = false;
			uint32_t f = user_frame(c, p, at, now_ns);
			if (f == UINT32_MAX) {
				why = unwind_errors[UWE_NO_MAPPING];
				break;
			}
			user[nres++] = f;
		}
		/* Nothing left but the CUDA machinery, with no error said (the
		 * kernel's frame-pointer walk of a process not described yet
		 * stops there quietly): say that the stack is missing rather
		 * than show the launch at the root. */
		if (!why && nres == 0)
			why = "[launch stack not unwound]";
		if (!why && (s->flags & ONCPU_F_PY_MISSING))
			why = PY_MISSING_FRAME;
		if (why) {
			c->stats.unknown_frames++;
			stack[n++] = error_frame(c, why);
		}
		for (uint32_t i = nres; i-- > 0;)
			stack[n++] = user[i];
	} else {
		stack[n++] = error_frame(c, "[launch not sampled]");
	}
	/* The NVTX ranges open at the launch, outermost first. */
	const char *rname;
	size_t rlen, roff = 0;
	for (unsigned d = 0; d < CUDA_WIRE_NVTX_DEPTH_MAX && cuda_wire_nvtx_next(w->nvtx, w->nvtx_len, &roff, &rname, &rlen); d++) {
		char name[CUDA_WIRE_NVTX_NAME_MAX + 1];
		memcpy(name, rname, rlen);
		name[rlen] = '\0';
		struct bframe range = { .type = FT_NVTX, .name = str(c, name) };
		stack[n++] = batch_frame(c->batch, &range);
	}
	struct bframe launch = { .type = FT_CUDA_LAUNCH, .name = str(c, w->api) };
	stack[n++] = batch_frame(c->batch, &launch);
	struct bframe leaf = { .type = cuda_leaf_type(w->kind), .name = str(c, w->name) };
	stack[n++] = batch_frame(c->batch, &leaf);
	if (w->stall) {
		/* PC sampling: the instruction (its cubin, its function and
		 * its offset in the function, named at query time:
		 * "cubin:<crc>+0x<offset>" until then), then the stall
		 * reason. */
		char cubin[32];
		snprintf(cubin, sizeof(cubin), "cubin:%016llx", (unsigned long long)w->cubin_id);
		struct bframe sass = { .type = FT_CUDA_SASS, .name = str(c, w->name), .binary = str(c, cubin),
				       .address = w->pc_offset };
		stack[n++] = batch_frame(c->batch, &sass);
		struct bframe stall = { .type = FT_CUDA_STALL, .name = str(c, w->stall) };
		stack[n++] = batch_frame(c->batch, &stall);
	}
	uint32_t st = batch_stack(c->batch, stack, n);

	char dev[16], stream[16], ctx[16];
	snprintf(dev, sizeof(dev), "%u", w->device);
	snprintf(stream, sizeof(stream), "%u", w->stream);
	snprintf(ctx, sizeof(ctx), "%u", w->context);
	const char *extra[2 * COLLECT_MAX_EXTRA_KV];
	size_t ne = 0;
	extra[ne++] = "gpu.device.index";
	extra[ne++] = dev;
	if (*w->gpu_uuid) {
		extra[ne++] = "gpu.device.uuid";
		extra[ne++] = w->gpu_uuid;
	}
	if (*w->gpu_name) {
		extra[ne++] = "gpu.name";
		extra[ne++] = w->gpu_name;
	}
	extra[ne++] = "cuda.stream.id";
	extra[ne++] = stream;
	extra[ne++] = "cuda.context.id";
	extra[ne++] = ctx;
	bool cacheable;
	uint32_t res = process_resource(c, (uint32_t)w->pid, p,
					*comm ? comm : NULL, extra, ne, now_ns, &cacheable);
	if (w->span) {
		struct bspan sp = { .stack = st, .resource = res, .kind = (uint8_t)w->kind,
				    .device = w->device, .stream = w->stream,
				    .start_ns = w->start_ns, .end_ns = w->end_ns };
		if (!batch_add_span(c->batch, &sp))
			c->stats.cuda_spans_dropped++;
		return;
	}
	batch_add(c->batch, st, res, EK_CUDA, w->total_ns);
	c->stats.cuda_samples++;
	c->stats.cuda_ns += w->total_ns;
}

/* --- raw stacks: samples of processes the unwinder did not know yet ---- */

/* Frame slots a raw record uses: kernel frames, the frame-pointer walk,
 * the Python slots after it (validated by collect_raw). */
static uint32_t used_slots(const struct oncpu_sample *s)
{
	uint32_t nk = s->kstack_len > 0 ? (uint32_t)s->kstack_len : 0;
	uint32_t nu = s->ustack_len > 0 ? (uint32_t)s->ustack_len : 0;
	return nk + nu + ((s->flags & ONCPU_F_RAW_PYTHON) ? s->raw_py : 0);
}

static bool is_launch(const struct oncpu_sample *s)
{
	return s->kind == ONCPU_KIND_CUDA_LAUNCH;
}

/* Counts what became of a raw record in its kind's counter. */
#define RAW_COUNT(c, s, field) ((void)(is_launch(s) ? (c)->stats.cuda_##field++ : (c)->stats.field++))

/* Adds an unwound (or as-sent) record: a sample to the batch, a launch
 * record to cuda_stack. */
static void deliver(struct collector *c, struct oncpu_sample *s, size_t size, uint64_t now_ns)
{
	if (s->kind != ONCPU_KIND_CUDA_LAUNCH) {
		collect_sample(c, s, size, now_ns);
		return;
	}
	if (c->cuda_stack)
		c->cuda_stack(c->hook_ctx, s, size);
}

/* Adds the record with the frame-pointer walk it carries. */
static void collect_as_sent(struct collector *c, const struct oncpu_sample *r, uint64_t now_ns)
{
	struct oncpu_sample s;
	uint32_t nk = r->kstack_len > 0 ? (uint32_t)r->kstack_len : 0;
	uint32_t nu = r->ustack_len > 0 ? (uint32_t)r->ustack_len : 0;
	size_t n = ONCPU_HDR_SIZE + (size_t)(nk + nu) * sizeof(__u64);
	memcpy(&s, r, n);
	s.flags = 0;
	s.raw_py = 0;
	deliver(c, &s, n, now_ns);
}

/* Appends the Python frames of chain[g..] up to the end of an invocation's
 * run (ONCPU_RAW_PY_END, or the marker pair that follows it; *g is left
 * after it) to out; returns the frames written, or -1 when they do not
 * fit in max. */
static int put_run(const __u64 *chain, uint32_t np, uint32_t *g, __u64 *out, uint32_t *o, uint32_t max)
{
	int emitted = 0;
	for (; *g + 1 < np; *g += 2) {
		if (chain[*g + 1] & ONCPU_RAW_PY_MARKER) {
			*g += 2;
			break;
		}
		if (!(chain[*g] & PY_FRAME_FLAG))
			continue;
		if (*o + 2 > max)
			return -1;
		out[(*o)++] = chain[*g];
		out[(*o)++] = chain[*g + 1] & ~ONCPU_RAW_PY_END;
		emitted++;
		if (chain[*g + 1] & ONCPU_RAW_PY_END) {
			*g += 2;
			break;
		}
	}
	return emitted;
}

/* The address of the next marker at or after chain[g] (3.12+), 0 if none. */
static uint64_t next_marker(const __u64 *chain, uint32_t np, uint32_t g)
{
	for (; g + 1 < np; g += 2)
		if (chain[g + 1] & ONCPU_RAW_PY_MARKER)
			return chain[g];
	return 0;
}

/* Puts the Python frames of a raw record (ONCPU_F_RAW_PYTHON: the thread's
 * frames when the sample was taken, after its frame-pointer walk) in place
 * of the interpreter invocations among the n native frames[] (innermost
 * first) as the BPF walker does: up to 3.11, each frame in the
 * interpreter loop's code takes the next run; 3.12+, the frame whose stack
 * [SP, CFA) holds the next marker (cfa[i]: frame i's CFA, 0 when unknown;
 * frame i's SP is sp0, then cfa[i - 1]). An invocation with no frames of
 * its own keeps its native frame. At most max slots. Returns the new
 * count, n when the process's interpreter is not described; *trunc when
 * frames did not fit; *missing when the stack runs the interpreter loop
 * but the record brought no Python frame for it (BPF knew neither the
 * process nor its executable when it took the sample, py_exes). */
static uint32_t splice_python(struct collector *c, const struct oncpu_sample *r, uint64_t ticks,
			      __u64 *frames, const __u64 *cfa, uint64_t sp0, uint32_t n, uint32_t max,
			      bool *trunc, bool *missing)
{
	struct py_proc py;
	uint32_t pid = r->pid;
	*trunc = *missing = false;
	if (c->py_procs_fd <= 0 || bpf_map_lookup_elem(c->py_procs_fd, &pid, &py) != 0 ||
	    py.start_ticks != ticks || (py.exec_id != r->exec_id && py.exec_id != UNWIND_EXEC_ANY))
		return n;
	uint32_t nk = r->kstack_len > 0 ? (uint32_t)r->kstack_len : 0;
	uint32_t nu = r->ustack_len > 0 ? (uint32_t)r->ustack_len : 0;
	const __u64 *chain = r->frames + nk + nu;
	uint32_t np = (r->flags & ONCPU_F_RAW_PYTHON) ? r->raw_py & ~1u : 0;
	bool on_stack = py.off.flags & PY_F_ENTRY_ON_STACK, in_loop = false;
	__u64 out[ONCPU_MAX_UFRAMES];
	uint32_t o = 0, g = 0, spliced = 0;
	uint64_t marker = on_stack ? next_marker(chain, np, 0) : 0;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t pc = frames[i], sp = i == 0 ? sp0 : cfa[i - 1];
		bool loop = (pc >= py.eval_lo && pc < py.eval_hi) || (pc >= py.cold_lo && pc < py.cold_hi);
		bool here = on_stack ? marker && cfa[i] && marker >= sp && marker < cfa[i] : loop && g < np;
		in_loop |= loop;
		if (here) {
			uint32_t o0 = o;
			int emitted = put_run(chain, np, &g, out, &o, max);
			if (on_stack)
				marker = next_marker(chain, np, g);
			if (emitted < 0) {
				*trunc = true;
				o = o0;
				break;
			}
			spliced += (uint32_t)emitted;
			if (emitted > 0)
				continue; /* the invocation's own frame gives way to them */
		}
		if (o >= max) {
			*trunc = true;
			break;
		}
		out[o++] = pc;
	}
	memcpy(frames, out, o * sizeof(__u64));
	*missing = in_loop && !spliced && !*trunc;
	return o;
}

/* Unwinds the raw stack into *s (a record without the raw part, of
 * *size bytes): RAWSTACK_UNWOUND, else RAWSTACK_NO_TABLE (a table is
 * missing and !final; *stuck set) or RAWSTACK_NO_PROCESS (the process has
 * no description). A walk that reached an address in no mapping of a live
 * process reads its maps again (rate-limited, proc.h) and, when they have
 * it now (a library mapped since), walks once more. */
static enum rawstack_result unwind_raw(struct collector *c, const struct oncpu_sample *r,
				       const struct oncpu_raw_stack *raw, bool final, uint64_t now_ns,
				       struct oncpu_sample *s, size_t *size, uint64_t *stuck)
{
	uint32_t nk = r->kstack_len > 0 ? (uint32_t)r->kstack_len : 0;
	uint32_t n = 0;
	uint16_t err = UWE_NONE;
	uint64_t ticks = r->proc_start_ns / c->ns_per_tick;
	uint32_t max = MIN((uint32_t)ONCPU_MAX_UFRAMES, (uint32_t)ONCPU_MAX_FRAMES - nk);
	__u64 cfa[ONCPU_MAX_UFRAMES];
	enum rawstack_result res;
	for (int attempt = 0;; attempt++) {
		res = rawstack_unwind(c->rawstack, r->pid, ticks, r->exec_id, raw, final,
				      s->frames + nk, cfa, max, &n, &err, stuck);
		if (res != RAWSTACK_UNWOUND || err != UWE_NO_MAPPING || attempt > 0)
			break;
		char comm[ONCPU_COMM_LEN + 1];
		memcpy(comm, r->comm, ONCPU_COMM_LEN);
		comm[ONCPU_COMM_LEN] = '\0';
		struct proc *p = proc_table_get(c->procs, (int32_t)r->pid, ticks, r->exec_id, comm,
						now_ns);
		if (!p->live || !proc_find_mapping(c->procs, p, *stuck, now_ns))
			break;
	}
	if (res != RAWSTACK_UNWOUND)
		return res;
	bool trunc, missing;
	n = splice_python(c, r, ticks, s->frames + nk, cfa, raw->sp, n, max, &trunc, &missing);
	if (trunc)
		err = UWE_TRUNCATED;
	memcpy(s, r, ONCPU_HDR_SIZE);
	memcpy(s->frames, r->frames, nk * sizeof(__u64));
	s->flags = ONCPU_F_UNWOUND_RAW | (missing ? ONCPU_F_PY_MISSING : 0);
	s->raw_py = 0;
	s->unwind_mode = UWM_CFI;
	s->unwind_error = err;
	s->ustack_len = (__s32)n;
	*size = ONCPU_HDR_SIZE + (size_t)(nk + n) * sizeof(__u64);
	return res;
}

/* Unwinds the raw sample and adds it to the batch; see unwind_raw. */
static enum rawstack_result collect_unwound(struct collector *c, const struct oncpu_sample *r,
					    const struct oncpu_raw_stack *raw, bool final,
					    uint64_t now_ns, uint64_t *stuck)
{
	struct oncpu_sample s;
	size_t size = 0;
	enum rawstack_result res = unwind_raw(c, r, raw, final, now_ns, &s, &size, stuck);
	if (res == RAWSTACK_UNWOUND)
		deliver(c, &s, size, now_ns);
	return res;
}

/* Keeps a copy of the record, in the sizes it uses, until its table comes
 * (collector_retry_raw); false when its kind's budget is spent. */
static bool keep_raw(struct collector *c, const struct oncpu_raw_sample *r, uint64_t now_ns)
{
	size_t ns = ONCPU_HDR_SIZE + (size_t)used_slots(&r->s) * sizeof(__u64);
	size_t nr = offsetof(struct oncpu_raw_stack, bytes) + r->raw.len;
	bool launch = is_launch(&r->s);
	size_t used = launch ? c->cuda_pending_bytes : c->pending_bytes - c->cuda_pending_bytes;
	if (used + ns + nr > (launch ? COLLECT_CUDA_RAW_MAX_BYTES : COLLECT_RAW_MAX_BYTES))
		return false;
	struct raw_pending w = { xmalloc(ns), xmalloc(nr), ns + nr, now_ns + COLLECT_RAW_WAIT_NS };
	memcpy(w.s, &r->s, ns);
	memcpy(w.raw, &r->raw, nr);
	xgrow((void **)&c->pending, &c->cappending, c->npending + 1, sizeof(*c->pending));
	c->pending[c->npending++] = w;
	c->pending_bytes += w.bytes;
	if (launch) {
		c->ncuda_pending++;
		c->cuda_pending_bytes += w.bytes;
	}
	return true;
}

static void drop_pending(struct collector *c, struct raw_pending *w)
{
	c->pending_bytes -= w->bytes;
	if (is_launch(w->s)) {
		c->ncuda_pending--;
		c->cuda_pending_bytes -= w->bytes;
	}
	free(w->s);
	free(w->raw);
}

static void collect_raw(struct collector *c, const struct oncpu_raw_sample *r, size_t size,
			uint64_t now_ns)
{
	uint32_t nk = r->s.kstack_len > 0 ? (uint32_t)r->s.kstack_len : 0;
	uint32_t nu = r->s.ustack_len > 0 ? (uint32_t)r->s.ustack_len : 0;
	uint32_t npy = (r->s.flags & ONCPU_F_RAW_PYTHON) ? r->s.raw_py : 0;
	if (size != sizeof(*r) || r->raw.len > ONCPU_RAW_STACK_MAX || nk > ONCPU_MAX_KFRAMES ||
	    nu > ONCPU_MAX_UFRAMES || npy > ONCPU_RAW_PY_SLOTS || nk + nu + npy > ONCPU_MAX_FRAMES) {
		c->stats.malformed++;
		return;
	}
	RAW_COUNT(c, &r->s, raw_stacks);
	if (!c->rawstack || r->raw.len == 0) {
		RAW_COUNT(c, &r->s, raw_fallback);
		collect_as_sent(c, &r->s, now_ns);
		return;
	}
	/* Read the process now, while it may still run: its maps go to the
	 * unwinder (unwind_procs), which the walk reads. */
	char comm[ONCPU_COMM_LEN + 1];
	memcpy(comm, r->s.comm, ONCPU_COMM_LEN);
	comm[ONCPU_COMM_LEN] = '\0';
	struct proc *p = proc_table_get(c->procs, (int32_t)r->s.pid, r->s.proc_start_ns / c->ns_per_tick,
					r->s.exec_id, comm, now_ns);
	uint64_t stuck = 0;
	switch (collect_unwound(c, &r->s, &r->raw, false, now_ns, &stuck)) {
	case RAWSTACK_UNWOUND:
		RAW_COUNT(c, &r->s, raw_unwound);
		return;
	case RAWSTACK_NO_PROCESS:
		RAW_COUNT(c, &r->s, raw_fallback);
		collect_as_sent(c, &r->s, now_ns);
		return;
	case RAWSTACK_NO_TABLE:
		break;
	}
	/* The file's table is not loaded yet: build it next, and wait. */
	const struct mapping *m = proc_find_mapping(c->procs, p, stuck, now_ns);
	if (c->want_table && m && m->kind == MAPPING_FILE && m->file != FILE_NONE)
		c->want_table(c->hook_ctx, m->file);
	if (!keep_raw(c, r, now_ns)) {
		RAW_COUNT(c, &r->s, raw_expired);
		collect_unwound(c, &r->s, &r->raw, true, now_ns, &stuck);
	}
}

void collect_cuda_raw(struct collector *c, const void *rec, size_t size, uint64_t now_ns)
{
	const struct oncpu_raw_sample *r = rec;
	if (size != sizeof(*r) || !(r->s.flags & ONCPU_F_RAW_STACK) || !is_launch(&r->s) ||
	    r->s.value == 0) {
		c->stats.malformed++;
		return;
	}
	collect_raw(c, r, size, now_ns);
}

bool collector_cuda_raw_waiting(const struct collector *c, int32_t pid, uint64_t stack_id)
{
	for (size_t i = 0; c->ncuda_pending && i < c->npending; i++) {
		const struct oncpu_sample *s = c->pending[i].s;
		if (is_launch(s) && s->pid == (uint32_t)pid && s->value == stack_id)
			return true;
	}
	return false;
}

void collector_retry_raw(struct collector *c, uint64_t now_ns, bool all)
{
	if (c->npending == 0 || (!all && now_ns - c->retried_ns < 10000000ull))
		return;
	/* Nothing to gain from another walk until a table comes in, or the
	 * oldest wait ends (they end in the order they began). */
	uint64_t tables = c->tables_published ? c->tables_published(c->hook_ctx) : 0;
	if (!all && c->tables_published && tables == c->retried_tables &&
	    now_ns < c->pending[0].deadline_ns)
		return;
	c->retried_ns = now_ns;
	c->retried_tables = tables;
	size_t kept = 0;
	for (size_t i = 0; i < c->npending; i++) {
		struct raw_pending *w = &c->pending[i];
		uint64_t stuck = 0;
		switch (collect_unwound(c, w->s, w->raw, false, now_ns, &stuck)) {
		case RAWSTACK_UNWOUND:
			RAW_COUNT(c, w->s, raw_unwound_late);
			break;
		case RAWSTACK_NO_PROCESS:
			RAW_COUNT(c, w->s, raw_fallback);
			collect_as_sent(c, w->s, now_ns);
			break;
		case RAWSTACK_NO_TABLE:
			if (!all && now_ns < w->deadline_ns) {
				c->pending[kept++] = *w;
				continue;
			}
			/* Waited long enough: frame pointers where a table
			 * is missing, as the BPF program does. */
			RAW_COUNT(c, w->s, raw_expired);
			if (log_enabled(LOG_DEBUG)) {
				struct proc *p = proc_table_get(c->procs, (int32_t)w->s->pid,
								w->s->proc_start_ns / c->ns_per_tick,
								w->s->exec_id, "", now_ns);
				const struct mapping *m = proc_find_mapping(c->procs, p, stuck, now_ns);
				log_debug("raw stack of pid %u (%s): no table for %#llx (%s) after %llu ms",
					  w->s->pid, p->exe_name, (unsigned long long)stuck,
					  m && m->file != FILE_NONE ? files_at(c->files, m->file)->name : "?",
					  (unsigned long long)(COLLECT_RAW_WAIT_NS / 1000000));
			}
			collect_unwound(c, w->s, w->raw, true, now_ns, &stuck);
			break;
		}
		drop_pending(c, w);
	}
	c->npending = kept;
}
