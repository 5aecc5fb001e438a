/* cuda.c - see cuda.h. */
#include "cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <linux/types.h>

#include "hmap.h"
#include "log.h"
#include "oncpu_types.h"
#include "proc.h"
#include "util.h"

struct conn {
	int fd;               /* -1: a slot without socket (cuda_handle_message) or free */
	bool used, hello;
	int32_t pid;
	uint64_t start_ticks;
	struct cuda_wire_device *devs; /* at most CUDA_MAX_DEVICES */
	size_t ndevs, capdevs;
	struct cuda_wire_stats lib; /* the latest STATS */
	double tokens;        /* AGG entries it may still send (CUDA_MAX_ENTRIES_PER_CONN_SEC) */
	uint64_t tokens_ns;   /* when they were counted */
	/* AGG entries it sent (taken or not) in the current second, from
	 * win_ns, and in the one before: its demand, for the fair share. */
	uint64_t win_ns;
	double win_cur, win_prev;
};

#define NO_SLOT UINT32_MAX

struct stack_rec {
	int32_t pid;
	uint64_t stack_id;
	void *rec; /* NULL: free slot */
	uint32_t size;
	uint32_t older, newer; /* all records, by arrival (NO_SLOT: none) */
	uint32_t pid_newer;    /* the same process's next record, by arrival */
};

/* One process's records, oldest first (linked by pid_newer). */
struct pid_queue {
	int32_t pid;
	uint32_t oldest, newest, count;
};

struct cuda {
	int listen_fd, epoll_fd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	const char *proc_root;
	cuda_hello_fn hello;
	cuda_emit_fn emit;
	cuda_awaited_fn awaited; /* NULL: none */
	void *ctx;
	struct conn *conns; /* CUDA_MAX_CONNS slots */
	size_t nconns;
	/* Launch stacks: CUDA_MAX_STACKS slots, free ones in free_slots;
	 * the records in one list by arrival (oldest, newest) and in one
	 * list per process (queues, indexed by pid in queue_index). */
	struct stack_rec *stacks;
	uint32_t *free_slots;
	size_t nfree, nstacks, stack_bytes;
	uint32_t oldest, newest;
	struct hmap index;
	struct pid_queue *queues;
	size_t nqueues, capqueues;
	struct hmap queue_index;
	/* AGG entries waiting for their stack, in arrival order. */
	struct cuda_work *pending;
	size_t npending, cappending;
	uint8_t *msg; /* receive buffer: CUDA_WIRE_MAX_MSG + 1 bytes */
	struct cuda_wire_stats closed_lib; /* the last STATS of closed connections, summed */
	uint64_t closed_pc_refused;        /* closed connections whose PC sampling was refused */
	double tokens;      /* AGG entries all connections may still send (< 0: lent, see handle) */
	uint64_t tokens_ns;
	bool tokens_set;
	size_t nhello;      /* connections that sent their HELLO */
	struct cuda_stats stats;
};

struct stack_key {
	const struct cuda *c;
	int32_t pid;
	uint64_t stack_id;
};

static bool eq_stack(const void *ctx, uint32_t idx)
{
	const struct stack_key *k = ctx;
	const struct stack_rec *r = &k->c->stacks[idx];
	return r->pid == k->pid && r->stack_id == k->stack_id;
}

static uint64_t stack_hash(int32_t pid, uint64_t stack_id)
{
	return hash_mix(hash_u64(stack_id), (uint32_t)pid);
}

void cuda_format_uuid(const uint8_t u[16], char *out)
{
	bool zero = true;
	for (int i = 0; i < 16; i++)
		zero &= u[i] == 0;
	if (zero) {
		out[0] = '\0';
		return;
	}
	sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
		u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
		u[15]);
}

struct cuda *cuda_open(const char *dir, const char *proc_root, cuda_hello_fn hello,
		       cuda_emit_fn emit, void *ctx, struct buf *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, CUDA_WIRE_SOCKET_NAME);
	if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) {
		buf_printf(err, "-cuda-profiler-dir: %s/%s is too long for a socket path", dir,
			   CUDA_WIRE_SOCKET_NAME);
		return NULL;
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		buf_printf(err, "-cuda-profiler-dir: cannot create %s: %s", dir, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (lstat(sa.sun_path, &st) == 0) {
		/* A socket left by an agent that did not stop cleanly;
		 * anything else is not ours to remove. */
		if (!S_ISSOCK(st.st_mode)) {
			buf_printf(err, "-cuda-profiler-dir: %s exists and is not a socket", sa.sun_path);
			return NULL;
		}
		/* One that answers belongs to a running agent (started with
		 * another -lock-file): it is left to it. */
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			buf_printf(err, "another process (an ember-agent?) listens on %s", sa.sun_path);
			return NULL;
		}
		if (probe >= 0)
			close(probe);
		if (unlink(sa.sun_path) < 0) {
			buf_printf(err, "cannot remove the stale socket %s: %s", sa.sun_path, strerror(errno));
			return NULL;
		}
	}
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		buf_printf(err, "cannot create a Unix socket: %s", strerror(errno));
		return NULL;
	}
	/* 0666: unprivileged CUDA programs connect. The umask would take
	 * the write bits away at bind, so the mode is set after it. */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(sa.sun_path, 0666) < 0 ||
	    listen(fd, 128) < 0) {
		buf_printf(err, "cannot listen on %s: %s", sa.sun_path, strerror(errno));
		close(fd);
		unlink(sa.sun_path);
		return NULL;
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 0 };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		buf_printf(err, "epoll: %s", strerror(errno));
		if (ep >= 0)
			close(ep);
		close(fd);
		unlink(sa.sun_path);
		return NULL;
	}
	struct cuda *c = xcalloc(1, sizeof(*c));
	c->listen_fd = fd;
	c->epoll_fd = ep;
	snprintf(c->path, sizeof(c->path), "%s", sa.sun_path);
	c->proc_root = proc_root;
	c->hello = hello;
	c->emit = emit;
	c->ctx = ctx;
	c->conns = xcalloc(CUDA_MAX_CONNS, sizeof(*c->conns));
	for (size_t i = 0; i < CUDA_MAX_CONNS; i++)
		c->conns[i].fd = -1;
	c->stacks = xcalloc(CUDA_MAX_STACKS, sizeof(*c->stacks));
	c->free_slots = xmalloc(CUDA_MAX_STACKS * sizeof(*c->free_slots));
	for (size_t i = 0; i < CUDA_MAX_STACKS; i++)
		c->free_slots[i] = (uint32_t)(CUDA_MAX_STACKS - 1 - i);
	c->nfree = CUDA_MAX_STACKS;
	c->oldest = c->newest = NO_SLOT;
	c->msg = xmalloc(CUDA_WIRE_MAX_MSG + 1);
	return c;
}

static void free_work(struct cuda_work *w)
{
	free_all(w->api, w->name, w->stall, w->nvtx);
}

static void close_conn(struct cuda *c, struct conn *k)
{
	c->closed_lib.launches += k->lib.launches;
	c->closed_lib.launches_sampled += k->lib.launches_sampled;
	c->closed_lib.records_dropped += k->lib.records_dropped;
	c->closed_lib.messages_dropped += k->lib.messages_dropped;
	c->closed_lib.pc_samples += k->lib.pc_samples;
	c->closed_pc_refused += k->lib.pc_state == CUDA_WIRE_PC_REFUSED;
	if (k->hello)
		c->nhello--;
	if (k->fd >= 0) {
		(void)epoll_ctl(c->epoll_fd, EPOLL_CTL_DEL, k->fd, NULL);
		close(k->fd);
	}
	free(k->devs);
	memset(k, 0, sizeof(*k));
	k->fd = -1;
	c->nconns--;
}

void cuda_close(struct cuda *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < CUDA_MAX_CONNS; i++)
		if (c->conns[i].used)
			close_conn(c, &c->conns[i]);
	if (c->listen_fd >= 0) {
		close(c->listen_fd);
		unlink(c->path);
	}
	if (c->epoll_fd >= 0)
		close(c->epoll_fd);
	for (size_t i = 0; i < CUDA_MAX_STACKS; i++)
		free(c->stacks[i].rec);
	for (size_t i = 0; i < c->npending; i++)
		free_work(&c->pending[i]);
	free(c->pending);
	hmap_free(&c->index);
	hmap_free(&c->queue_index);
	free(c->queues);
	free(c->free_slots);
	free(c->stacks);
	free(c->conns);
	free(c->msg);
	free(c);
}

int cuda_fd(const struct cuda *c)
{
	return c->epoll_fd;
}

const char *cuda_socket_path(const struct cuda *c)
{
	return c->path;
}

size_t cuda_pending(const struct cuda *c)
{
	return c->npending;
}

void cuda_get_stats(const struct cuda *c, struct cuda_stats *out)
{
	*out = c->stats;
	out->connections_open = c->nconns;
	out->lib_launches = c->closed_lib.launches;
	out->lib_sampled = c->closed_lib.launches_sampled;
	out->lib_records_dropped = c->closed_lib.records_dropped;
	out->lib_messages_dropped = c->closed_lib.messages_dropped;
	out->lib_pc_samples = c->closed_lib.pc_samples;
	out->lib_pc_refused = c->closed_pc_refused;
	for (size_t i = 0; i < CUDA_MAX_CONNS; i++) {
		const struct conn *k = &c->conns[i];
		if (!k->used)
			continue;
		out->lib_launches += k->lib.launches;
		out->lib_sampled += k->lib.launches_sampled;
		out->lib_records_dropped += k->lib.records_dropped;
		out->lib_messages_dropped += k->lib.messages_dropped;
		out->lib_pc_samples += k->lib.pc_samples;
		out->lib_pc_refused += k->lib.pc_state == CUDA_WIRE_PC_REFUSED;
	}
}

/* --- launch stacks ------------------------------------------------------ */

struct queue_key {
	const struct cuda *c;
	int32_t pid;
};

static bool eq_queue(const void *ctx, uint32_t idx)
{
	const struct queue_key *k = ctx;
	return k->c->queues[idx].pid == k->pid;
}

static struct pid_queue *find_queue(struct cuda *c, int32_t pid)
{
	struct queue_key k = { c, pid };
	uint32_t idx;
	return hmap_find(&c->queue_index, hash_u64((uint32_t)pid), eq_queue, &k, &idx) ? &c->queues[idx]
														 : NULL;
}

/* Drops the oldest record of process queue q (the oldest of all when q
 * holds it). */
static void evict_first(struct cuda *c, struct pid_queue *q)
{
	uint32_t slot = q->oldest;
	struct stack_rec *r = &c->stacks[slot];
	struct stack_key k = { c, r->pid, r->stack_id };
	hmap_remove(&c->index, stack_hash(r->pid, r->stack_id), eq_stack, &k);
	if (r->older != NO_SLOT)
		c->stacks[r->older].newer = r->newer;
	else
		c->oldest = r->newer;
	if (r->newer != NO_SLOT)
		c->stacks[r->newer].older = r->older;
	else
		c->newest = r->older;
	q->oldest = r->pid_newer;
	if (--q->count == 0) {
		/* The queue goes; the last one takes its place. */
		struct queue_key qk = { c, q->pid };
		hmap_remove(&c->queue_index, hash_u64((uint32_t)q->pid), eq_queue, &qk);
		struct pid_queue *last = &c->queues[c->nqueues - 1];
		if (last != q) {
			struct queue_key lk = { c, last->pid };
			hmap_remove(&c->queue_index, hash_u64((uint32_t)last->pid), eq_queue, &lk);
			*q = *last;
			hmap_insert(&c->queue_index, hash_u64((uint32_t)q->pid), (uint32_t)(q - c->queues));
		}
		c->nqueues--;
	}
	c->stack_bytes -= r->size;
	free(r->rec);
	memset(r, 0, sizeof(*r));
	c->free_slots[c->nfree++] = slot;
	c->nstacks--;
	c->stats.stacks_evicted++;
}

void cuda_add_stack(struct cuda *c, const void *rec, size_t size)
{
	const struct oncpu_sample *s = rec;
	if (size < ONCPU_HDR_SIZE || size > sizeof(struct oncpu_sample) ||
	    s->kind != ONCPU_KIND_CUDA_LAUNCH || s->value == 0) {
		c->stats.stacks_malformed++;
		return;
	}
	int32_t pid = (int32_t)s->pid;
	uint64_t id = s->value, h = stack_hash(pid, id);
	struct stack_key k = { c, pid, id };
	uint32_t idx;
	c->stats.stacks++;
	if (hmap_find(&c->index, h, eq_stack, &k, &idx)) {
		/* The same launch seen twice (two probes on one file): the
		 * latest record wins, in the first one's place. */
		struct stack_rec *r = &c->stacks[idx];
		c->stack_bytes -= r->size;
		free(r->rec);
		r->rec = xmalloc(size);
		memcpy(r->rec, rec, size);
		r->size = (uint32_t)size;
		c->stack_bytes += size;
		return;
	}
	/* A process over its share makes room from its own records; then
	 * the oldest of all go. */
	struct pid_queue *q = find_queue(c, pid);
	if (q && q->count >= CUDA_MAX_STACKS_PER_PROC)
		evict_first(c, q);
	while (c->nstacks && (!c->nfree || c->stack_bytes + size > CUDA_MAX_STACK_BYTES))
		evict_first(c, find_queue(c, c->stacks[c->oldest].pid));
	q = find_queue(c, pid); /* evictions move queues */
	if (!q) {
		xgrow((void **)&c->queues, &c->capqueues, c->nqueues + 1, sizeof(*c->queues));
		q = &c->queues[c->nqueues];
		*q = (struct pid_queue){ .pid = pid, .oldest = NO_SLOT, .newest = NO_SLOT };
		hmap_insert(&c->queue_index, hash_u64((uint32_t)pid), (uint32_t)c->nqueues++);
	}
	uint32_t slot = c->free_slots[--c->nfree];
	struct stack_rec *r = &c->stacks[slot];
	*r = (struct stack_rec){ .pid = pid, .stack_id = id, .rec = xmalloc(size),
				 .size = (uint32_t)size, .older = c->newest, .newer = NO_SLOT,
				 .pid_newer = NO_SLOT };
	memcpy(r->rec, rec, size);
	if (c->newest != NO_SLOT)
		c->stacks[c->newest].newer = slot;
	else
		c->oldest = slot;
	c->newest = slot;
	if (q->newest != NO_SLOT)
		c->stacks[q->newest].pid_newer = slot;
	else
		q->oldest = slot;
	q->newest = slot;
	q->count++;
	c->stack_bytes += size;
	c->nstacks++;
	hmap_insert(&c->index, h, slot);
}

static const struct stack_rec *find_stack(const struct cuda *c, int32_t pid, uint64_t stack_id)
{
	struct stack_key k = { c, pid, stack_id };
	uint32_t idx;
	if (!hmap_find(&c->index, stack_hash(pid, stack_id), eq_stack, &k, &idx))
		return NULL;
	return &c->stacks[idx];
}

/* --- the join ----------------------------------------------------------- */

static void emit(struct cuda *c, const struct cuda_work *w, const struct stack_rec *r)
{
	if (w->span) {
		/* a timeline span: its time is in the AGG entries already */
		c->stats.spans++;
		c->stats.spans_joined += r != NULL;
	} else {
		c->stats.gpu_ns += w->total_ns;
		if (r)
			c->stats.joined++;
		else
			c->stats.not_sampled_ns += w->total_ns;
	}
	c->emit(c->ctx, w, r ? r->rec : NULL, r ? r->size : 0);
}

void cuda_set_awaited(struct cuda *c, cuda_awaited_fn awaited)
{
	c->awaited = awaited;
}

/* Whether w, without its stack, waits on: CUDA_HOLD_NS, or up to
 * CUDA_RAW_HOLD_NS while its stack is on its way. */
static bool hold(struct cuda *c, const struct cuda_work *w, uint64_t now_ns)
{
	uint64_t age = now_ns - w->arrived_ns;
	if (age < CUDA_HOLD_NS)
		return true;
	return age < CUDA_RAW_HOLD_NS && c->awaited && c->awaited(c->ctx, w->pid, w->stack_id);
}

void cuda_join(struct cuda *c, uint64_t now_ns)
{
	size_t keep = 0;
	for (size_t i = 0; i < c->npending; i++) {
		struct cuda_work *w = &c->pending[i];
		const struct stack_rec *r = find_stack(c, w->pid, w->stack_id);
		if (!r && hold(c, w, now_ns)) {
			c->pending[keep++] = *w;
			continue;
		}
		if (!r && !w->span)
			c->stats.unknown_stack++;
		emit(c, w, r);
		free_work(w);
	}
	c->npending = keep;
}

static const struct cuda_wire_device *find_device(const struct conn *k, uint32_t index)
{
	for (size_t i = 0; i < k->ndevs; i++)
		if (k->devs[i].index == index)
			return &k->devs[i];
	return NULL;
}

static void add_work(struct cuda *c, const struct conn *k, const struct cuda_agg_view *v,
		     uint64_t now_ns)
{
	struct cuda_work w = {
		.pid = k->pid,
		.start_ticks = k->start_ticks,
		.stack_id = v->a.stack_id,
		.total_ns = v->a.total_ns,
		.count = v->a.count,
		.tid = v->a.tid,
		.device = v->a.device,
		.stream = v->a.stream,
		.context = v->a.context,
		.kind = v->a.kind,
		.api = xstrndup(v->api, v->a.api_len),
		.name = xstrndup(v->name, v->a.name_len),
		.stall = v->stall ? xstrndup(v->stall, v->stall_len) : NULL,
		.nvtx = v->nvtx ? xstrndup(v->nvtx, v->a.nvtx_len) /* no NUL in a checked path */ : NULL,
		.nvtx_len = v->nvtx ? v->a.nvtx_len : 0,
		.cubin_id = v->cubin_id,
		.pc_offset = v->pc_offset,
		.arrived_ns = now_ns,
		.span = v->span,
		.start_ns = v->start_ns,
		.end_ns = v->end_ns,
	};
	if (w.stall)
		c->stats.pc_entries++;
	const struct cuda_wire_device *d = find_device(k, w.device);
	if (d) {
		snprintf(w.gpu_name, sizeof(w.gpu_name), "%s", d->name);
		cuda_format_uuid(d->uuid, w.gpu_uuid);
	}
	if (!w.span)
		c->stats.entries++;
	if (w.stack_id == 0) {
		c->stats.not_sampled += !w.span;
		emit(c, &w, NULL);
		free_work(&w);
		return;
	}
	const struct stack_rec *r = find_stack(c, w.pid, w.stack_id);
	if (r || c->npending >= CUDA_MAX_PENDING) {
		if (!r && !w.span)
			c->stats.pending_overflow++;
		emit(c, &w, r);
		free_work(&w);
		return;
	}
	xgrow((void **)&c->pending, &c->cappending, c->npending + 1, sizeof(*c->pending));
	c->pending[c->npending++] = w;
}

/* The start time (clock ticks since boot) of pid, 0 when unreadable. */
static uint64_t start_ticks(const char *proc_root, int32_t pid)
{
	char path[64], text[1024];
	snprintf(path, sizeof(path), "%s/%d/stat", proc_root, pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	uint64_t t = 0;
	if (n <= 0 || proc_parse_stat_start(text, (size_t)n, &t) < 0)
		return 0;
	return t;
}

/* Refills a bucket of rate tokens a second (two seconds' worth at most)
 * to now, and takes n from it if it holds them. */
static bool take_tokens(double *tokens, uint64_t *at, uint64_t now_ns, double rate, uint32_t n)
{
	if (now_ns > *at) {
		*tokens += (double)(now_ns - *at) * rate / 1e9;
		if (*tokens > 2 * rate)
			*tokens = 2 * rate;
	}
	*at = MAX(*at, now_ns);
	if (*tokens < n)
		return false;
	*tokens -= n;
	return true;
}

/* Adds n entries to what k sent and returns its rate: entries in the last
 * second (the previous second's count weighed by how much of it the last
 * second still covers). */
static double sent_rate(struct conn *k, uint64_t now_ns, uint32_t n)
{
	const uint64_t sec = 1000000000ull;
	if (now_ns >= k->win_ns + sec) {
		k->win_prev = now_ns >= k->win_ns + 2 * sec ? 0 : k->win_cur;
		k->win_cur = 0;
		k->win_ns = now_ns - (now_ns - k->win_ns) % sec;
	}
	k->win_cur += n;
	double into = now_ns > k->win_ns ? (double)(now_ns - k->win_ns) / (double)sec : 0;
	return k->win_prev * (1.0 - into) + k->win_cur;
}

static void handle(struct cuda *c, struct conn *k, const void *msg, size_t len, uint64_t now_ns)
{
	uint16_t type = 0;
	uint32_t count = 0;
	enum cuda_wire_reject why = cuda_wire_check(msg, len, &type, &count);
	if (why == CWR_OK && (type == CUDA_WIRE_HELLO) == k->hello)
		why = CWR_ORDER; /* HELLO first, and once */
	if (why == CWR_OK && (type == CUDA_WIRE_AGG || type == CUDA_WIRE_PC || type == CUDA_WIRE_SPAN)) {
		if (!c->tokens_set) {
			c->tokens = 2.0 * CUDA_MAX_ENTRIES_PER_SEC;
			c->tokens_ns = now_ns;
			c->tokens_set = true;
		}
		/* The connection's budget, then everyone's. When everyone's
		 * is spent, a connection that sends no more than its fair
		 * share of it (the budget over the connections with a HELLO,
		 * counting all it sent in the last second, refused or not) is
		 * still served, on credit (everyone's goes below zero), so that
		 * many flooding connections cannot shut a library out; what
		 * such connections take together is itself within the budget.
		 * The others are refused and get their tokens back. */
		double rate = sent_rate(k, now_ns, count);
		if (!take_tokens(&k->tokens, &k->tokens_ns, now_ns, CUDA_MAX_ENTRIES_PER_CONN_SEC, count))
			why = CWR_RATE;
		else if (!take_tokens(&c->tokens, &c->tokens_ns, now_ns, CUDA_MAX_ENTRIES_PER_SEC, count)) {
			if (rate <= (double)CUDA_MAX_ENTRIES_PER_SEC / (double)MAX(c->nhello, 1)) {
				c->tokens -= count;
			} else {
				k->tokens += count;
				why = CWR_RATE;
			}
		}
	}
	if (why != CWR_OK) {
		c->stats.rejected[why]++;
		log_debug("CUDA: pid %d: message refused (%s)", k->pid, cuda_wire_reject_name(why));
		return;
	}
	c->stats.messages++;
	switch (type) {
	case CUDA_WIRE_HELLO: {
		struct cuda_wire_hello h;
		cuda_wire_hello(msg, &h);
		k->hello = true;
		c->nhello++;
		k->start_ticks = start_ticks(c->proc_root, k->pid);
		c->stats.processes++;
		log_info("CUDA: pid %d injected (libembercuda %s, CUPTI %u, driver %u)", k->pid,
			 h.lib_version, h.cupti_version, h.driver_version);
		if (c->hello)
			c->hello(c->ctx, k->pid, k->start_ticks);
		break;
	}
	case CUDA_WIRE_DEVICE: {
		struct cuda_wire_device d;
		cuda_wire_device(msg, &d);
		struct cuda_wire_device *old = (struct cuda_wire_device *)find_device(k, d.index);
		if (old)
			*old = d;
		else if (k->ndevs < CUDA_MAX_DEVICES) {
			xgrow((void **)&k->devs, &k->capdevs, k->ndevs + 1, sizeof(*k->devs));
			k->devs[k->ndevs++] = d;
		}
		break;
	}
	case CUDA_WIRE_AGG: {
		size_t off = 0;
		struct cuda_agg_view v;
		while (cuda_wire_next_agg(msg, len, &off, &v))
			add_work(c, k, &v, now_ns);
		break;
	}
	case CUDA_WIRE_PC: {
		size_t off = 0;
		struct cuda_agg_view v;
		while (cuda_wire_next_pc(msg, len, &off, &v))
			add_work(c, k, &v, now_ns);
		break;
	}
	case CUDA_WIRE_STATS:
		cuda_wire_stats(msg, &k->lib);
		break;
	case CUDA_WIRE_SPAN: {
		size_t off = 0;
		struct cuda_agg_view v;
		while (cuda_wire_next_span(msg, len, &off, &v))
			add_work(c, k, &v, now_ns);
		break;
	}
	}
}

static struct conn *new_conn(struct cuda *c, int fd, int32_t pid)
{
	for (size_t i = 0; i < CUDA_MAX_CONNS; i++) {
		struct conn *k = &c->conns[i];
		if (k->used)
			continue;
		memset(k, 0, sizeof(*k));
		k->used = true;
		k->fd = fd;
		k->pid = pid;
		k->tokens = 2.0 * CUDA_MAX_ENTRIES_PER_CONN_SEC;
		c->nconns++;
		return k;
	}
	return NULL;
}

void cuda_handle_message(struct cuda *c, int32_t pid, const void *msg, size_t len, uint64_t now_ns)
{
	struct conn *k = NULL;
	for (size_t i = 0; i < CUDA_MAX_CONNS && !k; i++)
		if (c->conns[i].used && c->conns[i].fd < 0 && c->conns[i].pid == pid)
			k = &c->conns[i];
	if (!k)
		k = new_conn(c, -1, pid);
	if (k)
		handle(c, k, msg, len, now_ns);
}

static void accept_all(struct cuda *c)
{
	for (;;) {
		int fd = accept4(c->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED)
				log_warn("CUDA: accept on %s: %s", c->path, strerror(errno));
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;
		}
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		if (c->nconns >= CUDA_MAX_CONNS ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.pid <= 0) {
			c->stats.connections_refused++;
			close(fd);
			continue;
		}
		struct conn *k = new_conn(c, fd, cred.pid);
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)(k - c->conns) + 1 };
		if (epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			log_warn("CUDA: epoll: %s", strerror(errno));
			close_conn(c, k);
			c->stats.connections_refused++;
			continue;
		}
		c->stats.connections++;
	}
}

/* Reads up to CUDA_SERVE_BATCH messages; returns how many it read (the
 * connection may have been closed meanwhile). */
static int read_conn(struct cuda *c, struct conn *k, uint64_t now_ns)
{
	int i = 0;
	while (i < CUDA_SERVE_BATCH) {
		/* MSG_TRUNC: the datagram's real length, so one longer than
		 * the buffer is seen as such, not read as a shorter one. */
		ssize_t n = recv(k->fd, c->msg, CUDA_WIRE_MAX_MSG + 1, MSG_TRUNC | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				close_conn(c, k);
			return i;
		}
		if (n == 0) { /* the process closed it, or exited (or cuda_stop) */
			close_conn(c, k);
			return i;
		}
		i++;
		if ((size_t)n > CUDA_WIRE_MAX_MSG) {
			c->stats.rejected[CWR_OVERSIZE]++;
			continue;
		}
		handle(c, k, c->msg, (size_t)n, now_ns);
	}
	return i;
}

void cuda_stop(struct cuda *c, uint64_t now_ns)
{
	/* Connects are refused from here on; the connections the kernel
	 * already made (not accepted yet) are taken. */
	if (c->listen_fd >= 0 && shutdown(c->listen_fd, SHUT_RD) < 0)
		log_warn("CUDA: shutdown of %s: %s", c->path, strerror(errno));
	accept_all(c);
	/* No datagram enters a connection's queue after its SHUT_RD (the
	 * sender gets EPIPE and keeps its time for the next agent); every one
	 * before it is read, then recv says the end (0) and the connection
	 * closes. So this ends, having read all there was. */
	for (size_t i = 0; i < CUDA_MAX_CONNS; i++) {
		struct conn *k = &c->conns[i];
		if (!k->used || k->fd < 0)
			continue;
		if (shutdown(k->fd, SHUT_RD) < 0) {
			close_conn(c, k);
			continue;
		}
		while (k->used && k->fd >= 0)
			if (read_conn(c, k, now_ns) == 0 && k->used)
				close_conn(c, k); /* EAGAIN after SHUT_RD: nothing more can come */
	}
}

void cuda_serve(struct cuda *c, uint64_t now_ns)
{
	struct epoll_event evs[64];
	int n = epoll_wait(c->epoll_fd, evs, ARRAY_SIZE(evs), 0);
	for (int i = 0; i < n; i++) {
		uint32_t slot = evs[i].data.u32;
		if (slot == 0) {
			accept_all(c);
			continue;
		}
		struct conn *k = &c->conns[slot - 1];
		if (!k->used || k->fd < 0)
			continue;
		read_conn(c, k, now_ns);
	}
}
