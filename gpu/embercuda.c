/* embercuda.c - the CUPTI side of libembercuda.so (contract in
 * embercuda.h; design in docs/internals/gpu.md).
 *
 * Three kinds of threads run this code:
 *   - the program's own threads, inside CUPTI's API callbacks (on_api):
 *     no locks, no allocation; per-thread state in TLS; what they share is
 *     the correlation table (lock-free slots) and relaxed atomic counters;
 *   - whichever thread CUPTI hands finished activity buffers on
 *     (on_buffer_completed): takes g.lock to add to the aggregates;
 *   - the library's report thread (reporter): once a second flushes
 *     CUPTI, swaps the aggregates out under g.lock, and sends them.
 */
#include <stdio.h> /* __GLIBC__ */

#include "glibc_floor.h"
#include "embercuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h> /* gpu/cuda_min/cuda.h */
#include <cupti_result.h>
#include <cupti_version.h>
#include <cupti_callbacks.h>
#include <cupti_activity.h>
#include <cupti_pcsampling.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cuda_report.h"
#include "cuda_wire.h"
#include "nvtx_ranges.h"

#ifndef EMBERCUDA_VERSION
#define EMBERCUDA_VERSION "unknown"
#endif

const char ember_cuda_version[] = EMBERCUDA_VERSION;

#define MIN_CUPTI_API 13             /* CUDA 11.0: kernel records with graph ids */
#define REPORT_INTERVAL_NS 1000000000ull
#define CORR_SLOTS (1u << 18)        /* launches remembered until their records come */
#define LAST_SLOTS 256               /* per thread: last sampled id per kernel name */
#define MAX_CBID 4096                /* callback ids looked at, per domain */
#define AGG_CAPACITY 8192            /* keys per report */
#define SPANS_PER_REPORT 256         /* timeline spans per report (one a second) */
#define BUFFER_SIZE (256u * 1024u)   /* activity buffer handed to CUPTI */
#define MAX_BUFFERS 64               /* outstanding; beyond, CUPTI drops and counts */
#define MAX_ACTIVITY_NS (3600ull * 1000000000ull) /* longer is a broken timestamp */
#define DEFAULT_AGENT_RETRIES 10     /* failed connects in a row before going quiet */
#define MAX_CONNECTIONS 1000         /* connections in a process's life */
#define NVTX_SLOTS 4096              /* NVTX paths remembered, by their hash */

/* --- the marker --------------------------------------------------------- */

EMBERCUDA_EXPORT __attribute__((noinline, used)) void ember_cuda_launch_marker(uint64_t stack_id, uint32_t kind)
{
	/* Keeps the function, its arguments and every call to it. */
	__asm__ volatile("" : : "r"(stack_id), "r"(kind) : "memory");
}

/* Called through a hidden alias, so the call cannot be interposed by
 * another object defining the same name: the uprobe is on this copy. */
extern void marker_local(uint64_t stack_id, uint32_t kind)
	__attribute__((alias("ember_cuda_launch_marker"), visibility("hidden")));

/* --- settings ------------------------------------------------------------- */

struct sampling {
	int enabled;        /* 0: every launch gets a stack */
	uint32_t target;    /* launches per thread per window */
	uint64_t window_ns;
};

enum cls { CLS_NONE = 0, CLS_KERNEL, CLS_GRAPH, CLS_MEMCPY, CLS_MEMSET, CLS_SYNC, CLS_N };

struct config {
	int noop, quiet, print_stats, print_overhead;
	double stats_interval, overhead_interval;
	int profile_memory, profile_sync, collect_per_gpu;
	int enable_nvtx, enable_pc_sampling;
	int agent_retries;
	struct sampling sampling[CLS_N]; /* by enum cls */
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* --- CUPTI and driver entry points (dlsym) ---------------------------------- */

#define CUPTI_FUNCS(X)                                                                                        \
	X(cuptiGetVersion)                                                                                    \
	X(cuptiGetResultString)                                                                               \
	X(cuptiSubscribe)                                                                                     \
	X(cuptiUnsubscribe)                                                                                   \
	X(cuptiEnableCallback)                                                                                \
	X(cuptiGetCallbackName)                                                                               \
	X(cuptiActivityRegisterCallbacks)                                                                     \
	X(cuptiActivityEnable)                                                                                \
	X(cuptiActivityDisable)                                                                               \
	X(cuptiActivityFlushAll)                                                                              \
	X(cuptiActivityGetNextRecord)                                                                         \
	X(cuptiActivityGetNumDroppedRecords)                                                                  \
	X(cuptiGetTimestamp)

struct cupti_api {
#define X(name) __typeof__(name) *name;
	CUPTI_FUNCS(X)
#undef X
};

typedef CUresult (*cu_driver_get_version_fn)(int *);
typedef CUresult (*cu_device_get_name_fn)(char *, int, CUdevice);
typedef CUresult (*cu_device_get_uuid_fn)(CUuuid *, CUdevice);

/* --- shared state ------------------------------------------------------------ */

struct corr_slot {
	uint32_t corr;     /* 0: empty; written last (release), checked twice */
	uint32_t tid;
	uint32_t stack_id;
	uint16_t api;      /* domain << 12 | cbid */
	uint16_t kind;
	uint64_t nvtx;     /* the launch's own NVTX path, by its hash (nvtx_slot); 0: none */
};

/* An NVTX path (wire form, lib/cuda_wire.h) by its hash
 * (nvtx_ranges_hash): written by a launching thread the first time a
 * launch runs under it (and again only when another path took the slot),
 * read where the launch's activities are aggregated, so every launch --
 * sampled or not -- keeps the ranges it was launched under. A seqlock: seq
 * is odd while a writer holds the slot (taken with a compare-and-swap, so
 * two writers never share it); a reader that sees it change, or another
 * hash, goes without (counted in nvtx_lost). */
struct nvtx_slot {
	atomic_uint seq;
	uint16_t len;
	uint64_t hash;
	char path[CUDA_WIRE_NVTX_BYTES_MAX];
};

struct counters {
	atomic_uint_fast64_t launches, sampled, activities, bad_timestamps, unmatched, records_dropped,
		buffers_refused, messages_sent, messages_dropped, overhead_ns, connections,
		nvtx_lost; /* activities whose launch's NVTX path another path had displaced */
};

/* The library's one instance. Global because CUPTI's callbacks carry no
 * context the buffer callbacks could use, and the driver loads the library
 * once per process; every field's owner is noted. */
static struct {
	struct config cfg;          /* written once in InitializeInjection */
	struct cupti_api cupti;     /* same */
	void *cupti_handle;
	char cupti_path[256];
	uint32_t cupti_version;
	CUpti_SubscriberHandle subscriber;
	cu_driver_get_version_fn cu_driver_get_version;
	cu_device_get_name_fn cu_device_get_name;
	cu_device_get_uuid_fn cu_device_get_uuid;
	uint8_t cls[2][MAX_CBID];   /* [0] driver, [1] runtime; written at init */
	char *api_names[2][MAX_CBID];

	atomic_int active;          /* callbacks record; 0 once the library stepped aside or went quiet */
	struct corr_slot *corr;     /* CORR_SLOTS, lock-free */
	struct nvtx_slot *nvtx;     /* NVTX_SLOTS, seqlocked; NULL when EMBER_CUDA_ENABLE_NVTX is off */
	struct counters n;
	atomic_int buffers_out;

	pthread_mutex_t lock;       /* guards agg, spans, devices_seen, clock_offset */
	struct cuda_agg *agg, *agg_spare;
	struct cuda_spans *spans, *spans_spare;
	uint64_t devices_seen;      /* bit per device ordinal < 64 */
	int64_t clock_offset;       /* CLOCK_REALTIME - CUPTI timestamp, ns */

	/* report thread only */
	pthread_t thread;
	int thread_started;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond;
	int stop;
	int fd;
	int hello_sent;
	uint64_t devices_sent;
	int connect_failures;
	int gave_up;
	int ever_connected;         /* an agent took a connection once: never give up */
	uint64_t next_stats_ns, next_overhead_ns;
	pid_t pid;
} g = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.stop_lock = PTHREAD_MUTEX_INITIALIZER,
	.stop_cond = PTHREAD_COND_INITIALIZER,
	.fd = -1,
};

/* Per program thread, touched only by that thread (in callbacks). */
struct thread_state {
	uint32_t tid;
	int depth;              /* launch callbacks open on this thread (runtime wraps driver) */
	uint32_t outer_corr;    /* the open launch's id, stack id, API, kind and NVTX path hash */
	uint64_t outer_nvtx;
	uint32_t outer_stack;
	uint16_t outer_api;
	uint16_t outer_kind;
	/* take_sample's state per class: the budget, in ns of the window, and
	 * when it was last topped up (0: never); launches in this window and
	 * the last one; a random number generator (xorshift) */
	uint64_t credit_ns[CLS_N];
	uint64_t last_ns[CLS_N];
	uint64_t win_start[CLS_N];
	uint32_t win_count[CLS_N];
	uint32_t prev_count[CLS_N];
	uint64_t rng;
	struct {
		uint64_t hash;
		uint32_t stack_id;
	} last[LAST_SLOTS];
};

static __thread struct thread_state ts;

static uint64_t now_ns(clockid_t clk)
{
	struct timespec t;
	clock_gettime(clk, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	if (g.cfg.quiet)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ember-cuda[%d]: %s\n", (int)getpid(), line);
}

/* --- configuration ------------------------------------------------------------ */

static int env_bool(const char *name, int def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	if (!strcasecmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
		return 1;
	if (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
		return 0;
	return def;
}

static double env_double(const char *name, double def, double min, double max)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (errno || *end || d != d || d < min || d > max)
		return def;
	return d;
}

static void read_sampling(struct sampling *s, const char *prefix, uint32_t def_target)
{
	char name[96];
	snprintf(name, sizeof(name), "EMBER_CUDA_%s_SAMPLING_ENABLED", prefix);
	s->enabled = env_bool(name, 1);
	snprintf(name, sizeof(name), "EMBER_CUDA_%s_SAMPLING_TARGET", prefix);
	s->target = (uint32_t)env_double(name, def_target, 0, 1e6);
	snprintf(name, sizeof(name), "EMBER_CUDA_%s_SAMPLING_WINDOW_SIZE", prefix);
	s->window_ns = (uint64_t)(env_double(name, 1.0, 0.001, 3600.0) * 1e9);
}

static void read_config(struct config *c)
{
	c->noop = env_bool("EMBER_CUDA_NOOP", 0);
	c->quiet = env_bool("EMBER_CUDA_QUIET", 1);
	c->print_stats = env_bool("EMBER_CUDA_PRINT_STATS", 0);
	c->stats_interval = env_double("EMBER_CUDA_PRINT_STATS_INTERVAL", 5.0, 0.1, 86400.0);
	c->print_overhead = env_bool("EMBER_CUDA_PRINT_OVERHEAD", 0);
	c->overhead_interval = env_double("EMBER_CUDA_PRINT_OVERHEAD_INTERVAL", 5.0, 0.1, 86400.0);
	c->profile_memory = env_bool("EMBER_CUDA_PROFILE_MEMORY", 1);
	c->profile_sync = env_bool("EMBER_CUDA_PROFILE_SYNC", 1);
	c->collect_per_gpu = env_bool("EMBER_CUDA_COLLECT_PER_GPU", 1);
	c->enable_nvtx = env_bool("EMBER_CUDA_ENABLE_NVTX", 1);
	c->enable_pc_sampling = env_bool("EMBER_CUDA_ENABLE_PC_SAMPLING", 0);
	c->agent_retries = (int)env_double("EMBER_CUDA_INTERNAL_AGENT_RETRIES", DEFAULT_AGENT_RETRIES, 0, 1e6);
	read_sampling(&c->sampling[CLS_KERNEL], "STACK_TRACE", 50);
	read_sampling(&c->sampling[CLS_GRAPH], "GRAPH", 20);
	read_sampling(&c->sampling[CLS_MEMCPY], "MEMORY", 20);
	c->sampling[CLS_MEMSET] = c->sampling[CLS_MEMCPY];
	read_sampling(&c->sampling[CLS_SYNC], "SYNC", 20);
}

/* The agent's socket: EMBER_CUDA_AGENT_SOCKET, else agent.sock next to
 * this library (the agent's -cuda-profiler-dir). */
static int socket_path(char *out, size_t cap)
{
	const char *env = getenv("EMBER_CUDA_AGENT_SOCKET");
	if (env && *env) {
		if (strlen(env) >= cap)
			return -1;
		strcpy(out, env);
		return 0;
	}
	Dl_info info;
	if (!dladdr((void *)&InitializeInjection, &info) || !info.dli_fname)
		return -1;
	char dir[4096];
	if (strlen(info.dli_fname) >= sizeof(dir))
		return -1;
	strcpy(dir, info.dli_fname);
	int n = snprintf(out, cap, "%s/%s", dirname(dir), CUDA_WIRE_SOCKET_NAME);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* --- finding CUPTI --------------------------------------------------------------- */

static const char *const cupti_sonames[] = {
	"libcupti.so", "libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", "libcupti.so.11.7",
	"libcupti.so.11.6", "libcupti.so.11.5", "libcupti.so.11.4", "libcupti.so.11.2",
	"libcupti.so.11.1", "libcupti.so.11.0",
};

static void *try_open(const char *path, int flags)
{
	void *h = dlopen(path, flags);
	if (h) {
		snprintf(g.cupti_path, sizeof(g.cupti_path), "%s", path);
		Dl_info info;
		void *sym = dlsym(h, "cuptiGetVersion");
		if (sym && dladdr(sym, &info) && info.dli_fname)
			snprintf(g.cupti_path, sizeof(g.cupti_path), "%s", info.dli_fname);
	}
	return h;
}

/* The copy the program already loaded (PyTorch's, say) comes first: a
 * second, different CUPTI in one process does not work. */
static void *find_cupti(void)
{
	size_t n = sizeof(cupti_sonames) / sizeof(cupti_sonames[0]);
	for (size_t i = 0; i < n; i++) {
		void *h = try_open(cupti_sonames[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		if (h)
			return h;
	}
	for (size_t i = 0; i < n; i++) {
		void *h = try_open(cupti_sonames[i], RTLD_NOW | RTLD_LOCAL);
		if (h)
			return h;
	}
	const char *homes[] = { getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda" };
	for (size_t i = 0; i < sizeof(homes) / sizeof(homes[0]); i++) {
		if (!homes[i] || !*homes[i])
			continue;
		const char *subs[] = { "extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib" };
		for (size_t j = 0; j < sizeof(subs) / sizeof(subs[0]); j++) {
			char path[512];
			int len = snprintf(path, sizeof(path), "%s/%s/libcupti.so", homes[i], subs[j]);
			if (len < 0 || (size_t)len >= sizeof(path))
				continue;
			void *h = try_open(path, RTLD_NOW | RTLD_LOCAL);
			if (h)
				return h;
		}
	}
	return NULL;
}

static const char *result_string(CUptiResult r)
{
	const char *s = NULL;
	if (g.cupti.cuptiGetResultString && g.cupti.cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}

/* --- classifying the API calls by name ------------------------------------------- */

static int starts(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel"; the per-thread-stream
 * variants (_ptsz, _ptds) keep their suffix. */
static char *api_display_name(const char *name)
{
	size_t len = strnlen(name, CUDA_WIRE_API_MAX - 1);
	char *s = malloc(len + 1);
	if (!s)
		return NULL;
	memcpy(s, name, len);
	s[len] = 0;
	char *v = strrchr(s, '_');
	if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9' && v != s) {
		char *d = v + 2;
		while (*d >= '0' && *d <= '9')
			d++;
		if (!*d)
			*v = 0;
	}
	return s;
}

static enum cls classify(const char *name)
{
	char base[CUDA_WIRE_API_MAX];
	snprintf(base, sizeof(base), "%s", name);
	char *u = strchr(base, '_');
	if (u)
		*u = 0; /* cuStreamSynchronize_ptsz, cuMemcpyHtoD_v2 -> the bare name */
	if (starts(base, "cuGraphLaunch") || starts(base, "cudaGraphLaunch"))
		return CLS_GRAPH;
	if ((starts(base, "cuLaunch") || starts(base, "cudaLaunch")) && !strstr(base, "HostFunc"))
		return CLS_KERNEL;
	if (starts(base, "cuMemcpy") || starts(base, "cudaMemcpy"))
		return g.cfg.profile_memory ? CLS_MEMCPY : CLS_NONE;
	if (starts(base, "cuMemset") || starts(base, "cudaMemset"))
		return g.cfg.profile_memory ? CLS_MEMSET : CLS_NONE;
	static const char *const syncs[] = {
		"cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent",
		"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
		"cudaThreadSynchronize",
	};
	for (size_t i = 0; i < sizeof(syncs) / sizeof(syncs[0]); i++) {
		if (!strcmp(base, syncs[i]))
			return g.cfg.profile_sync ? CLS_SYNC : CLS_NONE;
	}
	return CLS_NONE;
}

static const uint16_t cls_kind[CLS_N] = {
	[CLS_KERNEL] = CUDA_WIRE_KIND_KERNEL, [CLS_GRAPH] = CUDA_WIRE_KIND_GRAPH,
	[CLS_MEMCPY] = CUDA_WIRE_KIND_MEMCPY, [CLS_MEMSET] = CUDA_WIRE_KIND_MEMSET,
	[CLS_SYNC] = CUDA_WIRE_KIND_SYNC,
};

static const char *api_name_of(uint16_t api)
{
	unsigned domain = api >> 12, cbid = api & 0xfff;
	if (domain > 1 || !g.api_names[domain][cbid])
		return "[unknown]";
	return g.api_names[domain][cbid];
}

/* Enables the callback of every launch, copy, set and sync API the running
 * CUPTI knows; returns how many. */
static int enable_callbacks(void)
{
	static const CUpti_CallbackDomain domains[2] = { CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API };
	int enabled = 0;
	for (int d = 0; d < 2; d++) {
		for (uint32_t cbid = 1; cbid < MAX_CBID; cbid++) {
			const char *name = NULL;
			if (g.cupti.cuptiGetCallbackName(domains[d], cbid, &name) != CUPTI_SUCCESS || !name)
				continue;
			enum cls c = classify(name);
			if (c == CLS_NONE)
				continue;
			g.api_names[d][cbid] = api_display_name(name);
			if (!g.api_names[d][cbid])
				continue;
			/* set before enabling: the callback may run at once */
			g.cls[d][cbid] = (uint8_t)c;
			if (g.cupti.cuptiEnableCallback(1, g.subscriber, domains[d], cbid) == CUPTI_SUCCESS)
				enabled++;
			else
				g.cls[d][cbid] = CLS_NONE;
		}
	}
	return enabled;
}

/* --- the correlation table ------------------------------------------------------------ */

static void corr_put(uint32_t corr, uint32_t tid, uint32_t stack_id, uint16_t api, uint16_t kind, uint64_t nvtx)
{
	struct corr_slot *s = &g.corr[corr & (CORR_SLOTS - 1)];
	__atomic_store_n(&s->corr, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&s->tid, tid, __ATOMIC_RELAXED);
	__atomic_store_n(&s->stack_id, stack_id, __ATOMIC_RELAXED);
	__atomic_store_n(&s->api, api, __ATOMIC_RELAXED);
	__atomic_store_n(&s->kind, kind, __ATOMIC_RELAXED);
	__atomic_store_n(&s->nvtx, nvtx, __ATOMIC_RELAXED);
	__atomic_store_n(&s->corr, corr, __ATOMIC_RELEASE);
}

static int corr_get(uint32_t corr, struct corr_slot *out)
{
	if (corr == 0)
		return 0;
	struct corr_slot *s = &g.corr[corr & (CORR_SLOTS - 1)];
	if (__atomic_load_n(&s->corr, __ATOMIC_ACQUIRE) != corr)
		return 0;
	out->tid = __atomic_load_n(&s->tid, __ATOMIC_RELAXED);
	out->stack_id = __atomic_load_n(&s->stack_id, __ATOMIC_RELAXED);
	out->api = __atomic_load_n(&s->api, __ATOMIC_RELAXED);
	out->kind = __atomic_load_n(&s->kind, __ATOMIC_RELAXED);
	out->nvtx = __atomic_load_n(&s->nvtx, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&s->corr, __ATOMIC_RELAXED) != corr)
		return 0;
	out->corr = corr;
	return 1;
}

/* --- the API callback (program threads) --------------------------------------------------- */

static uint32_t my_tid(void)
{
	if (!ts.tid)
		ts.tid = (uint32_t)syscall(SYS_gettid);
	return ts.tid;
}

/* 1 when this launch gets a stack: about `target` per window per thread
 * and class, drawn at random among its launches, so that every kernel name
 * a thread launches keeps getting fresh stacks in proportion to its
 * launches (unsampled launches inherit the last sampled stack of their
 * thread and name). Each launch is picked with the chance 2 x target / the
 * launches of the window before (or of this one so far, when more); a
 * token bucket caps it: `target` per window at most, one every
 * window / target, with a burst of a tenth of the target. Picking the
 * first launches of a window instead (a fixed window's count) lent a
 * process's first stacks -- taken before the agent had read its maps --
 * to its whole first second, and a launch that always comes second in a
 * step (the next token always taken by the first) never got a stack
 * again. */
static int take_sample(enum cls c, uint64_t now)
{
	const struct sampling *s = &g.cfg.sampling[c];
	if (!s->enabled)
		return 1;
	if (!s->target)
		return 0;
	unsigned b = c == CLS_MEMSET ? CLS_MEMCPY : c; /* copies and sets share the memory budget */
	if (now - ts.win_start[b] >= s->window_ns || now < ts.win_start[b]) {
		/* a window with no launch for a while counts as a quiet one */
		ts.prev_count[b] = now - ts.win_start[b] < 2 * s->window_ns ? ts.win_count[b] : 0;
		ts.win_start[b] = now;
		ts.win_count[b] = 0;
	}
	uint32_t seen = ++ts.win_count[b];
	uint32_t expect = ts.prev_count[b] > seen ? ts.prev_count[b] : seen;
	/* twice the chance the target needs: the bucket then binds, and the
	 * picks reach the target instead of falling short whenever two land
	 * within one token's time */
	uint64_t want = 2ull * s->target;
	if (expect > want) {
		if (!ts.rng)
			ts.rng = now ^ ((uint64_t)my_tid() << 32) ^ 0x9e3779b97f4a7c15ull;
		ts.rng ^= ts.rng << 13;
		ts.rng ^= ts.rng >> 7;
		ts.rng ^= ts.rng << 17;
		if (ts.rng % expect >= want)
			return 0;
	}
	uint64_t interval = s->window_ns / s->target;
	uint64_t cap = interval * (s->target >= 10 ? s->target / 10 : 1);
	if (!ts.last_ns[b] || now < ts.last_ns[b])
		ts.credit_ns[b] = cap;
	else
		ts.credit_ns[b] = ts.credit_ns[b] + (now - ts.last_ns[b]) > cap ? cap
										 : ts.credit_ns[b] + (now - ts.last_ns[b]);
	ts.last_ns[b] = now;
	if (ts.credit_ns[b] < interval)
		return 0;
	ts.credit_ns[b] -= interval;
	return 1;
}

/* Keeps the thread's NVTX path r, whose hash is hash, unless its slot
 * holds it already (a launch's usual case: one read). */
static void nvtx_put(uint64_t hash, const struct nvtx_ranges *r)
{
	struct nvtx_slot *s = &g.nvtx[hash % NVTX_SLOTS];
	unsigned seq = atomic_load_explicit(&s->seq, memory_order_acquire);
	if (!(seq & 1) && __atomic_load_n(&s->hash, __ATOMIC_RELAXED) == hash)
		return;
	if ((seq & 1) || !atomic_compare_exchange_strong_explicit(&s->seq, &seq, seq + 1, memory_order_acquire,
								  memory_order_relaxed))
		return; /* another thread is writing it: this launch may go without its path */
	atomic_thread_fence(memory_order_release);
	size_t len = 0;
	for (unsigned i = 0, n = nvtx_ranges_kept(r); i < n; i++) {
		s->path[len++] = (char)r->len[i];
		memcpy(s->path + len, r->name[i], r->len[i]);
		len += r->len[i];
	}
	__atomic_store_n(&s->hash, hash, __ATOMIC_RELAXED);
	s->len = (uint16_t)len;
	atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

/* Copies the NVTX path of hash into out; returns its length, 0 when none
 * (hash 0), or no longer there (another path took its slot: counted). */
static size_t nvtx_get(uint64_t hash, char *out)
{
	if (!g.nvtx || !hash)
		return 0;
	struct nvtx_slot *s = &g.nvtx[hash % NVTX_SLOTS];
	unsigned seq = atomic_load_explicit(&s->seq, memory_order_acquire);
	size_t len = s->len;
	if ((seq & 1) || __atomic_load_n(&s->hash, __ATOMIC_RELAXED) != hash || len > CUDA_WIRE_NVTX_BYTES_MAX) {
		atomic_fetch_add_explicit(&g.n.nvtx_lost, 1, memory_order_relaxed);
		return 0;
	}
	memcpy(out, s->path, len);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&s->seq, memory_order_relaxed) == seq)
		return len;
	atomic_fetch_add_explicit(&g.n.nvtx_lost, 1, memory_order_relaxed);
	return 0;
}

/* The outermost launch call of a thread, at its entry -- before CUPTI
 * can have a record of it, so its record always finds it in the table. */
static void on_launch_enter(int domain, CUpti_CallbackId cbid, enum cls c, const CUpti_CallbackData *cb)
{
	uint32_t corr = cb->correlationId;
	uint32_t tid = my_tid();
	uint16_t api = (uint16_t)(domain << 12 | (cbid & 0xfff));
	uint16_t kind = cls_kind[c];

	/* Unsampled launches inherit the last sampled stack of the same
	 * (thread, kernel) -- or, for copies, sets, syncs and graphs, of the
	 * same (thread, API). */
	uint64_t h;
	if ((c == CLS_KERNEL) && cb->symbolName)
		h = XXH3_64bits(cb->symbolName, strnlen(cb->symbolName, CUDA_WIRE_NAME_MAX));
	else
		h = XXH3_64bits(&api, sizeof(api)) ^ 0x9e3779b97f4a7c15ull;
	/* ... under the same NVTX ranges: a launch under other ranges never
	 * takes a stack (and its path) sampled under these */
	uint64_t nvtx_hash = g.nvtx ? nvtx_ranges_hash(ember_nvtx_ranges()) : 0;
	h ^= nvtx_hash * 0xff51afd7ed558ccdull;
	if (h == 0)
		h = 1;
	unsigned slot = (unsigned)(h & (LAST_SLOTS - 1));

	uint32_t stack_id = 0;
	int sampled = corr != 0 && take_sample(c, now_ns(CLOCK_MONOTONIC_COARSE));
	if (sampled) {
		stack_id = corr;
		ts.last[slot].hash = h;
		ts.last[slot].stack_id = corr;
	} else if (ts.last[slot].hash == h) {
		stack_id = ts.last[slot].stack_id;
	}
	/* the launch's own ranges, sampled or not: its time goes under
	 * them even without a stack (stack id 0) */
	if (nvtx_hash)
		nvtx_put(nvtx_hash, ember_nvtx_ranges());
	corr_put(corr, tid, stack_id, api, kind, nvtx_hash);
	ts.outer_corr = corr;
	ts.outer_nvtx = nvtx_hash;
	ts.outer_stack = stack_id;
	ts.outer_api = api;
	ts.outer_kind = kind;
	atomic_fetch_add_explicit(&g.n.launches, 1, memory_order_relaxed);
	if (sampled) {
		atomic_fetch_add_explicit(&g.n.sampled, 1, memory_order_relaxed);
		marker_local(corr, kind);
	}
}

static void on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData *rd);

static void CUPTIAPI on_api(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
	(void)userdata;
	if (!atomic_load_explicit(&g.active, memory_order_relaxed) || !data || cbid >= MAX_CBID)
		return;
	int d;
	if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
		on_resource(cbid, data);
		return;
	}
	if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
		d = 0;
	else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
		d = 1;
	else
		return;
	enum cls c = (enum cls)g.cls[d][cbid];
	if (c == CLS_NONE)
		return;
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	const CUpti_CallbackData *cb = data;
	if (cb->callbackSite == CUPTI_API_ENTER) {
		if (ts.depth++ == 0) {
			on_launch_enter(d, cbid, c, cb);
		} else if (cb->correlationId && cb->correlationId != ts.outer_corr) {
			/* A call nested in the launch (the driver's, inside the
			 * runtime's) with an id of its own: its records belong to
			 * the outer launch. */
			corr_put(cb->correlationId, my_tid(), ts.outer_stack, ts.outer_api, ts.outer_kind, ts.outer_nvtx);
		}
	} else if (ts.depth > 0) {
		ts.depth--;
	}
	atomic_fetch_add_explicit(&g.n.overhead_ns, now_ns(CLOCK_MONOTONIC) - t0, memory_order_relaxed);
}

/* --- PC sampling (EMBER_CUDA_ENABLE_PC_SAMPLING) --------------------------------------------
 *
 * CUPTI's PC Sampling API in continuous mode (kernels are not serialised):
 * enabled on each context at CONTEXT_CREATED, drained with
 * cuptiPCSamplingGetData by the report thread before each report and at
 * CONTEXT_DESTROY_STARTING (then disabled). Each PC record's (function,
 * cubin CRC, offset, stall reason, samples) goes into g.pcs; the report
 * splits each kernel's time over its name's samples (cuda_agg_apply_pcs).
 * Every PC sampling function is optional: without them, or when CUPTI
 * refuses (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling restricted to
 * admin users), the library says so once and profiles kernels without. */

#define PC_MAX_CTX 16           /* contexts sampled at once */
#define PC_MAX_PCS 2048         /* PC records per cuptiPCSamplingGetData */
#define PC_MAX_STALLS 64        /* stall reasons a device may name */
#define PC_MAX_NAMES 256        /* distinct stall reason names kept */
#define PC_TABLE 16384          /* (kernel, offset, reason) keys per report */
#define PC_DRAINS 64            /* GetData calls per context per report, at most */
#define PC_API_CORRELATION 22   /* CUPTI 12.4: CUpti_PCSamplingPCData gained correlationId */

#define PC_FUNCS(X)                                                                                    \
	X(cuptiPCSamplingEnable)                                                                       \
	X(cuptiPCSamplingDisable)                                                                      \
	X(cuptiPCSamplingSetConfigurationAttribute)                                                    \
	X(cuptiPCSamplingGetData)                                                                      \
	X(cuptiPCSamplingGetNumStallReasons)                                                           \
	X(cuptiPCSamplingGetStallReasons)

/* CUpti_PCSamplingPCData as CUPTI 12.4 and later lay it out. */
struct pc_data_v22 {
	CUpti_PCSamplingPCData base;
	uint32_t correlation_id;
	uint32_t pad;
};

struct pc_ctx {
	CUcontext ctx;
	CUpti_PCSamplingData out;   /* what GetData fills */
	CUpti_PCSamplingData conf;  /* the configured buffer CUPTI's threads write */
	unsigned char *out_pcs, *conf_pcs;
	CUpti_PCSamplingStallReason *out_stalls, *conf_stalls;
	size_t nstalls;
	uint32_t index[PC_MAX_STALLS];
	const char *name[PC_MAX_STALLS]; /* interned: one pointer per name */
};

static struct {
	int on;                     /* asked for and the API is there (init) */
	int state;                  /* enum cuda_wire_pc_state (lock) */
	int said;                   /* the refusal was said (lock) */
	size_t stride;              /* bytes of one CUpti_PCSamplingPCData (init) */
#define X(name) __typeof__(name) *name;
	PC_FUNCS(X)
#undef X
	pthread_mutex_t lock;       /* guards ctx, nctx, names, and the drains */
	struct pc_ctx *ctx[PC_MAX_CTX];
	unsigned nctx;
	__typeof__(cuptiGetCubinCrc) *cuptiGetCubinCrc; /* optional: without it, no cubins saved */
	char *names[PC_MAX_NAMES];  /* owned; live as long as the process (agg keys point at them) */
	unsigned nnames;
	struct cuda_pcs *pcs, *spare; /* under g.lock, swapped by the report */
	atomic_uint_fast64_t samples;
} pc = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Says it once even when quiet: the user asked for PC sampling. */
static void pc_refused(int state, const char *what, CUptiResult r)
{
	if (!pc.said) {
		pc.said = 1;
		if (state == CUDA_WIRE_PC_REFUSED)
			fprintf(stderr,
				"ember-cuda[%d]: PC sampling refused: %s (%s): profiling GPU counters is restricted to "
				"admin users on this host (NVreg_RestrictProfilingToAdminUsers=1); run as root, or load the "
				"nvidia module with NVreg_RestrictProfilingToAdminUsers=0; kernels are profiled without "
				"PC sampling\n",
				(int)getpid(), what, result_string(r));
		else
			fprintf(stderr, "ember-cuda[%d]: PC sampling unavailable: %s (%s); kernels are profiled without it\n",
				(int)getpid(), what, result_string(r));
	}
	if (pc.state != CUDA_WIRE_PC_ON)
		pc.state = state;
}

static const char *pc_intern(const char *name)
{
	size_t n = strnlen(name, CUDA_WIRE_STALL_MAX + 1);
	if (n == 0 || n > CUDA_WIRE_STALL_MAX)
		return NULL;
	for (unsigned i = 0; i < pc.nnames; i++)
		if (strcmp(pc.names[i], name) == 0)
			return pc.names[i];
	if (pc.nnames >= PC_MAX_NAMES)
		return NULL;
	char *c = strndup(name, n);
	if (c)
		pc.names[pc.nnames++] = c;
	return c;
}

static void pc_free_ctx(struct pc_ctx *c)
{
	free(c->out_pcs);
	free(c->conf_pcs);
	free(c->out_stalls);
	free(c->conf_stalls);
	free(c);
}

/* A PCSamplingData of PC_MAX_PCS records, each with room for every stall
 * reason. */
static int pc_buffer(CUpti_PCSamplingData *d, unsigned char **pcs, CUpti_PCSamplingStallReason **stalls,
		     size_t nstalls)
{
	*pcs = calloc(PC_MAX_PCS, pc.stride);
	*stalls = calloc((size_t)PC_MAX_PCS * nstalls, sizeof(**stalls));
	if (!*pcs || !*stalls)
		return -1;
	memset(d, 0, sizeof(*d));
	d->size = sizeof(*d);
	d->collectNumPcs = PC_MAX_PCS;
	d->pPcData = (CUpti_PCSamplingPCData *)(void *)*pcs;
	for (size_t i = 0; i < PC_MAX_PCS; i++) {
		CUpti_PCSamplingPCData *p = (CUpti_PCSamplingPCData *)(void *)(*pcs + i * pc.stride);
		p->size = pc.stride;
		p->stallReason = *stalls + i * nstalls;
	}
	return 0;
}

/* Called with pc.lock held. */
static void pc_enable(CUcontext ctx)
{
	if (pc.nctx >= PC_MAX_CTX)
		return;
	CUpti_PCSamplingEnableParams ep = { .size = sizeof(ep), .ctx = ctx };
	CUptiResult r = pc.cuptiPCSamplingEnable(&ep);
	if (r != CUPTI_SUCCESS) {
		pc_refused(r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ||
					   r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES
				   ? CUDA_WIRE_PC_REFUSED
				   : CUDA_WIRE_PC_UNAVAILABLE,
			   "cuptiPCSamplingEnable", r);
		return;
	}
	struct pc_ctx *c = calloc(1, sizeof(*c));
	size_t n = 0;
	const char *what = "out of memory";
	r = CUPTI_ERROR_OUT_OF_MEMORY;
	if (!c)
		goto fail;
	c->ctx = ctx;
	CUpti_PCSamplingGetNumStallReasonsParams np = { .size = sizeof(np), .ctx = ctx, .numStallReasons = &n };
	what = "cuptiPCSamplingGetNumStallReasons";
	if ((r = pc.cuptiPCSamplingGetNumStallReasons(&np)) != CUPTI_SUCCESS)
		goto fail;
	if (n == 0 || n > PC_MAX_STALLS) {
		r = CUPTI_ERROR_NOT_SUPPORTED;
		goto fail;
	}
	char *names[PC_MAX_STALLS];
	char store[PC_MAX_STALLS][CUPTI_STALL_REASON_STRING_SIZE];
	memset(store, 0, sizeof(store));
	for (size_t i = 0; i < n; i++)
		names[i] = store[i];
	CUpti_PCSamplingGetStallReasonsParams sp = {
		.size = sizeof(sp), .ctx = ctx, .numStallReasons = n, .stallReasonIndex = c->index, .stallReasons = names
	};
	what = "cuptiPCSamplingGetStallReasons";
	if ((r = pc.cuptiPCSamplingGetStallReasons(&sp)) != CUPTI_SUCCESS)
		goto fail;
	c->nstalls = n;
	for (size_t i = 0; i < n; i++) {
		store[i][CUPTI_STALL_REASON_STRING_SIZE - 1] = '\0';
		c->name[i] = pc_intern(store[i]);
	}
	what = "out of memory";
	r = CUPTI_ERROR_OUT_OF_MEMORY;
	if (pc_buffer(&c->out, &c->out_pcs, &c->out_stalls, n) < 0 ||
	    pc_buffer(&c->conf, &c->conf_pcs, &c->conf_stalls, n) < 0)
		goto fail;
	CUpti_PCSamplingConfigurationInfo info[4];
	memset(info, 0, sizeof(info));
	info[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
	info[0].attributeData.collectionModeData.collectionMode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
	info[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
	info[1].attributeData.stallReasonData.stallReasonCount = n;
	info[1].attributeData.stallReasonData.pStallReasonIndex = c->index;
	info[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
	info[2].attributeData.samplingDataBufferData.samplingDataBuffer = &c->conf;
	info[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
	info[3].attributeData.enableStartStopControlData.enableStartStopControl = 0;
	CUpti_PCSamplingConfigurationInfoParams cp = {
		.size = sizeof(cp), .ctx = ctx, .numAttributes = 4, .pPCSamplingConfigurationInfo = info
	};
	what = "cuptiPCSamplingSetConfigurationAttribute";
	if ((r = pc.cuptiPCSamplingSetConfigurationAttribute(&cp)) != CUPTI_SUCCESS)
		goto fail;
	pc.ctx[pc.nctx++] = c;
	pc.state = CUDA_WIRE_PC_ON;
	say("PC sampling on (context %p, %zu stall reasons)", (void *)ctx, n);
	return;
fail:
	pc_refused(r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ? CUDA_WIRE_PC_REFUSED : CUDA_WIRE_PC_UNAVAILABLE, what, r);
	if (c)
		pc_free_ctx(c);
	CUpti_PCSamplingDisableParams dp = { .size = sizeof(dp), .ctx = ctx };
	(void)pc.cuptiPCSamplingDisable(&dp);
}

/* The records in d (filled by CUPTI) into g.pcs. */
static void pc_take(const struct pc_ctx *c, const CUpti_PCSamplingData *d)
{
	size_t n = d->totalNumPcs < PC_MAX_PCS ? d->totalNumPcs : PC_MAX_PCS;
	uint64_t got = 0;
	pthread_mutex_lock(&g.lock);
	for (size_t i = 0; i < n; i++) {
		const CUpti_PCSamplingPCData *p =
			(const CUpti_PCSamplingPCData *)(const void *)((const unsigned char *)d->pPcData + i * pc.stride);
		if (!p->functionName || !p->stallReason)
			continue;
		size_t ns = p->stallReasonCount < c->nstalls ? p->stallReasonCount : c->nstalls;
		for (size_t j = 0; j < ns; j++) {
			const CUpti_PCSamplingStallReason *sr = &p->stallReason[j];
			const char *name = NULL;
			for (size_t k = 0; k < c->nstalls; k++)
				if (c->index[k] == sr->pcSamplingStallReasonIndex)
					name = c->name[k];
			if (!name || sr->samples == 0)
				continue;
			got += sr->samples;
			(void)cuda_pcs_add(pc.pcs, p->functionName, strnlen(p->functionName, CUDA_WIRE_NAME_MAX),
					   p->cubinCrc, p->pcOffset, name, sr->samples);
		}
	}
	pthread_mutex_unlock(&g.lock);
	atomic_fetch_add(&pc.samples, got);
}

/* Drains one context. Called with pc.lock held. */
static void pc_drain(struct pc_ctx *c)
{
	for (int i = 0; i < PC_DRAINS; i++) {
		c->out.totalNumPcs = 0;
		c->out.remainingNumPcs = 0;
		CUpti_PCSamplingGetDataParams gp = { .size = sizeof(gp), .ctx = c->ctx, .pcSamplingData = &c->out };
		if (pc.cuptiPCSamplingGetData(&gp) != CUPTI_SUCCESS)
			return;
		pc_take(c, &c->out);
		if (c->out.remainingNumPcs == 0)
			return;
	}
}

static void pc_drain_all(void)
{
	if (!pc.on)
		return;
	pthread_mutex_lock(&pc.lock);
	for (unsigned i = 0; i < pc.nctx; i++)
		pc_drain(pc.ctx[i]);
	pthread_mutex_unlock(&pc.lock);
}

/* The context goes: what CUPTI holds of it (GetData, then the configured
 * buffer that Disable flushes into), then the context's state. */
static void pc_context_destroyed(CUcontext ctx)
{
	pthread_mutex_lock(&pc.lock);
	for (unsigned i = 0; i < pc.nctx; i++) {
		struct pc_ctx *c = pc.ctx[i];
		if (c->ctx != ctx)
			continue;
		pc_drain(c);
		c->conf.totalNumPcs = 0;
		CUpti_PCSamplingDisableParams dp = { .size = sizeof(dp), .ctx = ctx };
		if (pc.cuptiPCSamplingDisable(&dp) == CUPTI_SUCCESS)
			pc_take(c, &c->conf);
		pc.ctx[i] = pc.ctx[--pc.nctx];
		pc_free_ctx(c);
		break;
	}
	pthread_mutex_unlock(&pc.lock);
}

/* --- cubins: the images PC samples point into ---------------------------------------------
 *
 * Each module the program loads (CUPTI's MODULE_LOADED resource callback
 * hands over its image) is written once to CUBIN_DIR next to the agent's
 * socket as <crc>.cubin, crc in 16 hex digits as cuptiGetCubinCrc
 * computes it: the cubinCrc that PC records carry. A file already there is
 * not written again (the cache by hash, shared by every process the agent
 * serves). The agent uploads a cubin to the server when a PC entry names
 * it, and the server names the instructions at query time
 * (docs/internals/gpu.md). Only where the agent made CUBIN_DIR. */
#define CUBIN_DIR "cubins"
#define CUBIN_MAX (256u << 20) /* bytes: larger images are not saved */

static void cubin_save(const void *image, size_t size)
{
	if (!pc.cuptiGetCubinCrc || !image || size < 64 || size > CUBIN_MAX)
		return;
	CUpti_GetCubinCrcParams cp = { .size = CUpti_GetCubinCrcParamsSize, .cubinSize = size, .cubin = image };
	if (pc.cuptiGetCubinCrc(&cp) != CUPTI_SUCCESS)
		return;
	char dir[sizeof(g.cfg.socket_path)], path[sizeof(dir) + 64], tmp[sizeof(path) + 32];
	memcpy(dir, g.cfg.socket_path, sizeof(dir));
	int n = snprintf(path, sizeof(path), "%s/" CUBIN_DIR "/%016llx.cubin", dirname(dir),
			 (unsigned long long)cp.cubinCrc);
	if (n < 0 || (size_t)n >= sizeof(path) || access(path, F_OK) == 0)
		return;
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return; /* no CUBIN_DIR (an older agent), or not ours to write */
	const char *p = image;
	size_t left = size;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p += w;
		left -= (size_t)w;
	}
	if (close(fd) < 0 || left > 0 || rename(tmp, path) < 0) {
		(void)unlink(tmp);
		return;
	}
	say("cubin %016llx (%zu bytes) saved for the agent", (unsigned long long)cp.cubinCrc, size);
}

static void on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData *rd)
{
	if (!pc.on || !rd)
		return;
	if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
		const CUpti_ModuleResourceData *m = rd->resourceDescriptor;
		if (m)
			cubin_save(m->pCubin, m->cubinSize);
	} else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
		pthread_mutex_lock(&pc.lock);
		pc_enable(rd->context);
		pthread_mutex_unlock(&pc.lock);
	} else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
		pc_context_destroyed(rd->context);
	}
}

/* At init: the API, the callbacks and the tables. */
static void pc_init(void)
{
#define X(name)                                                                                         \
	pc.name = (__typeof__(name) *)dlsym(g.cupti_handle, #name);                                     \
	if (!pc.name) {                                                                                 \
		pc_refused(CUDA_WIRE_PC_UNAVAILABLE, g.cupti_path[0] ? g.cupti_path : "libcupti",       \
			   CUPTI_ERROR_NOT_SUPPORTED);                                                  \
		return;                                                                                 \
	}
	PC_FUNCS(X)
#undef X
	pc.cuptiGetCubinCrc = (__typeof__(cuptiGetCubinCrc) *)dlsym(g.cupti_handle, "cuptiGetCubinCrc");
	if (pc.cuptiGetCubinCrc &&
	    g.cupti.cuptiEnableCallback(1, g.subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED) !=
		    CUPTI_SUCCESS)
		pc.cuptiGetCubinCrc = NULL; /* PC sampling without instruction names */
	pc.stride = g.cupti_version >= PC_API_CORRELATION ? sizeof(struct pc_data_v22) : sizeof(CUpti_PCSamplingPCData);
	pc.pcs = cuda_pcs_new(PC_TABLE);
	pc.spare = cuda_pcs_new(PC_TABLE);
	if (!pc.pcs || !pc.spare ||
	    g.cupti.cuptiEnableCallback(1, g.subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED) !=
		    CUPTI_SUCCESS ||
	    g.cupti.cuptiEnableCallback(1, g.subscriber, CUPTI_CB_DOMAIN_RESOURCE,
					CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) != CUPTI_SUCCESS) {
		pc_refused(CUDA_WIRE_PC_UNAVAILABLE, "the context callbacks", CUPTI_ERROR_UNKNOWN);
		return;
	}
	pc.on = 1;
}

/* --- activity buffers (CUPTI's thread) ------------------------------------------------------ */

static void CUPTIAPI on_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*max_records = 0;
	*buffer = NULL;
	*size = 0;
	if (atomic_fetch_add(&g.buffers_out, 1) >= MAX_BUFFERS) {
		atomic_fetch_sub(&g.buffers_out, 1);
		atomic_fetch_add_explicit(&g.n.buffers_refused, 1, memory_order_relaxed);
		return; /* CUPTI drops the records and counts them */
	}
	void *p = NULL;
	if (posix_memalign(&p, 8, BUFFER_SIZE) != 0) {
		atomic_fetch_sub(&g.buffers_out, 1);
		atomic_fetch_add_explicit(&g.n.buffers_refused, 1, memory_order_relaxed);
		return;
	}
	*buffer = p;
	*size = BUFFER_SIZE;
}

static const char *copy_kind_name(unsigned k)
{
	static const char *const names[] = {
		[CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN] = "memcpy", [CUPTI_ACTIVITY_MEMCPY_KIND_HTOD] = "HtoD",
		[CUPTI_ACTIVITY_MEMCPY_KIND_DTOH] = "DtoH",      [CUPTI_ACTIVITY_MEMCPY_KIND_HTOA] = "HtoA",
		[CUPTI_ACTIVITY_MEMCPY_KIND_ATOH] = "AtoH",      [CUPTI_ACTIVITY_MEMCPY_KIND_ATOA] = "AtoA",
		[CUPTI_ACTIVITY_MEMCPY_KIND_ATOD] = "AtoD",      [CUPTI_ACTIVITY_MEMCPY_KIND_DTOA] = "DtoA",
		[CUPTI_ACTIVITY_MEMCPY_KIND_DTOD] = "DtoD",      [CUPTI_ACTIVITY_MEMCPY_KIND_HTOH] = "HtoH",
		[CUPTI_ACTIVITY_MEMCPY_KIND_PTOP] = "PtoP",
	};
	return k < sizeof(names) / sizeof(names[0]) && names[k] ? names[k] : "memcpy";
}

static const char *sync_type_name(unsigned t)
{
	switch (t) {
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "EventSynchronize";
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "StreamWaitEvent";
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "StreamSynchronize";
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "ContextSynchronize";
	default: return "Synchronize";
	}
}

/* One activity: checked, joined with its launch, added. g.lock held. */
static void add_activity(uint16_t kind, uint64_t start, uint64_t end, uint32_t corr, uint32_t device,
			 uint32_t context, uint32_t stream, const char *name)
{
	if (start == 0 || end < start || end - start > MAX_ACTIVITY_NS) {
		atomic_fetch_add_explicit(&g.n.bad_timestamps, 1, memory_order_relaxed);
		return;
	}
	struct corr_slot launch = { 0 };
	const char *api = "[unknown]";
	if (corr_get(corr, &launch)) {
		api = api_name_of(launch.api);
		if (kind == CUDA_WIRE_KIND_SYNC)
			name = api;
	} else {
		atomic_fetch_add_explicit(&g.n.unmatched, 1, memory_order_relaxed);
	}
	/* sync records name no device: they count as device 0 but do not
	 * make the process a user of it */
	if (device < 64 && kind != CUDA_WIRE_KIND_SYNC)
		g.devices_seen |= 1ull << device;
	struct cuda_agg_key key = {
		.stack_id = launch.stack_id,
		.tid = launch.tid,
		.kind = kind,
		.device = g.cfg.collect_per_gpu ? device : 0,
		.stream = stream,
		.context = context,
		.api = api,
		.name = name,
		.name_len = strnlen(name, CUDA_WIRE_NAME_MAX),
	};
	char nvtx[CUDA_WIRE_NVTX_BYTES_MAX];
	key.nvtx_len = nvtx_get(launch.nvtx, nvtx);
	key.nvtx = key.nvtx_len ? nvtx : NULL;
	if (key.name_len == 0) {
		key.name = "[unnamed]";
		key.name_len = strlen(key.name);
	}
	if (cuda_agg_add(g.agg, &key, end - start) >= 0)
		atomic_fetch_add_explicit(&g.n.activities, 1, memory_order_relaxed);
	cuda_spans_add(g.spans, (uint64_t)((int64_t)start + g.clock_offset), (uint64_t)((int64_t)end + g.clock_offset),
		       &key);
}

static void add_record(const CUpti_Activity *rec)
{
	switch (rec->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		/* Kernel5 is the oldest layout with graph ids; newer ones only append. */
		const CUpti_ActivityKernel5 *k = (const void *)rec;
		add_activity(k->graphId ? CUDA_WIRE_KIND_GRAPH : CUDA_WIRE_KIND_KERNEL, k->start, k->end,
			     k->correlationId, k->deviceId, k->contextId, k->streamId,
			     k->name ? k->name : "[unknown kernel]");
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy4 *m = (const void *)rec;
		add_activity(CUDA_WIRE_KIND_MEMCPY, m->start, m->end, m->correlationId, m->deviceId, m->contextId,
			     m->streamId, copy_kind_name(m->copyKind));
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset3 *m = (const void *)rec;
		add_activity(CUDA_WIRE_KIND_MEMSET, m->start, m->end, m->correlationId, m->deviceId, m->contextId,
			     m->streamId, "memset");
		break;
	}
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
		const CUpti_ActivitySynchronization *s = (const void *)rec;
		add_activity(CUDA_WIRE_KIND_SYNC, s->start, s->end, s->correlationId, 0, s->contextId, s->streamId,
			     sync_type_name(s->type));
		break;
	}
	default:
		break;
	}
}

static void CUPTIAPI on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
					 size_t valid)
{
	(void)size;
	if (buffer && valid > 0 && atomic_load_explicit(&g.active, memory_order_relaxed)) {
		pthread_mutex_lock(&g.lock);
		CUpti_Activity *rec = NULL;
		/* a record is at least 8 bytes: bounds a misbehaving iterator */
		for (size_t i = 0; i <= valid / 8; i++) {
			if (g.cupti.cuptiActivityGetNextRecord(buffer, valid, &rec) != CUPTI_SUCCESS || !rec)
				break;
			add_record(rec);
		}
		pthread_mutex_unlock(&g.lock);
	}
	size_t dropped = 0;
	if (g.cupti.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
		atomic_fetch_add_explicit(&g.n.records_dropped, dropped, memory_order_relaxed);
	if (buffer) {
		free(buffer);
		atomic_fetch_sub(&g.buffers_out, 1);
	}
}

/* --- reporting (the library's thread) --------------------------------------------------------- */

static int64_t measure_clock_offset(void)
{
	int64_t offset = 0;
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < 5; i++) {
		uint64_t c = 0;
		uint64_t t1 = now_ns(CLOCK_REALTIME);
		if (g.cupti.cuptiGetTimestamp(&c) != CUPTI_SUCCESS)
			return 0;
		uint64_t t2 = now_ns(CLOCK_REALTIME);
		if (t2 - t1 < best) {
			best = t2 - t1;
			offset = (int64_t)(t1 + (t2 - t1) / 2) - (int64_t)c;
		}
	}
	return offset;
}

static void disconnect(void)
{
	if (g.fd >= 0)
		close(g.fd);
	g.fd = -1;
}

static int emit(const void *msg, size_t len, void *ctx)
{
	(void)ctx;
	if (g.fd < 0)
		return -1;
	ssize_t n = send(g.fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n == (ssize_t)len) {
		atomic_fetch_add_explicit(&g.n.messages_sent, 1, memory_order_relaxed);
		return 0;
	}
	/* Refused: the report stops here, and what it had not sent of its
	 * GPU time waits for the next one (report). */
	atomic_fetch_add_explicit(&g.n.messages_dropped, 1, memory_order_relaxed);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS))
		return -1; /* the agent is busy: the connection stays */
	disconnect();
	return -1;
}

static void try_connect(void)
{
	if (g.gave_up || atomic_load(&g.n.connections) >= MAX_CONNECTIONS)
		return;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		memcpy(sa.sun_path, g.cfg.socket_path, strlen(g.cfg.socket_path));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			g.fd = fd;
			g.hello_sent = 0;
			g.devices_sent = 0;
			g.connect_failures = 0;
			g.ever_connected = 1;
			atomic_fetch_add(&g.n.connections, 1);
			return;
		}
		close(fd);
	}
	/* Without an agent from the start: quiet after the retries. Once one
	 * was there, its absence is a restart (which may take longer than
	 * the retries: the agent loads its BPF programs first), so the
	 * library keeps trying, once a report, and keeps the time meanwhile. */
	if (++g.connect_failures >= g.cfg.agent_retries && !g.ever_connected) {
		g.gave_up = 1;
		atomic_store(&g.active, 0);
		say("no ember-agent at %s after %d tries; not profiling", g.cfg.socket_path, g.connect_failures);
	}
}

static void send_hello(void)
{
	struct cuda_wire_hello h = { 0 };
	h.pid = (uint32_t)getpid();
	h.cupti_version = g.cupti_version;
	int dv = 0;
	if (g.cu_driver_get_version && g.cu_driver_get_version(&dv) == CUDA_SUCCESS && dv > 0)
		h.driver_version = (uint32_t)dv;
	uint64_t c = 0;
	if (g.cupti.cuptiGetTimestamp(&c) == CUPTI_SUCCESS)
		h.cupti_ns = c;
	h.realtime_ns = now_ns(CLOCK_REALTIME);
	snprintf(h.lib_version, sizeof(h.lib_version), "%s", ember_cuda_version);
	unsigned char buf[sizeof(struct cuda_wire_hdr) + sizeof(h)];
	if (emit(buf, cuda_msg_single(buf, CUDA_WIRE_HELLO, &h, sizeof(h)), NULL) == 0)
		g.hello_sent = 1;
}

/* Returns 0 when every device seen went out on this connection. */
static int send_devices(uint64_t seen)
{
	for (unsigned i = 0; i < 64 && g.fd >= 0; i++) {
		if (!(seen & (1ull << i)) || (g.devices_sent & (1ull << i)))
			continue;
		struct cuda_wire_device d = { .index = i };
		if (!g.cu_device_get_name || g.cu_device_get_name(d.name, (int)sizeof(d.name) - 1, (CUdevice)i) != CUDA_SUCCESS)
			snprintf(d.name, sizeof(d.name), "CUDA device %u", i);
		d.name[sizeof(d.name) - 1] = 0;
		CUuuid u;
		if (g.cu_device_get_uuid && g.cu_device_get_uuid(&u, (CUdevice)i) == CUDA_SUCCESS)
			memcpy(d.uuid, u.bytes, sizeof(d.uuid));
		unsigned char buf[sizeof(struct cuda_wire_hdr) + sizeof(d)];
		if (emit(buf, cuda_msg_single(buf, CUDA_WIRE_DEVICE, &d, sizeof(d)), NULL) < 0)
			return -1;
		g.devices_sent |= 1ull << i;
	}
	return g.fd >= 0 ? 0 : -1;
}

static void fill_stats(struct cuda_wire_stats *s)
{
	s->launches = atomic_load(&g.n.launches);
	s->launches_sampled = atomic_load(&g.n.sampled);
	s->activities = atomic_load(&g.n.activities);
	s->records_dropped = atomic_load(&g.n.records_dropped);
	s->messages_dropped = atomic_load(&g.n.messages_dropped);
	s->overhead_ns = atomic_load(&g.n.overhead_ns);
	s->pc_samples = atomic_load(&pc.samples);
	pthread_mutex_lock(&pc.lock);
	s->pc_state = (uint32_t)pc.state;
	pthread_mutex_unlock(&pc.lock);
	s->reserved = 0;
}

static void print_stats(const char *when)
{
	if (g.cfg.quiet || !g.cfg.print_stats)
		return;
	fprintf(stderr,
		"ember-cuda[%d]: stats%s: launches=%llu sampled=%llu activities=%llu bad_timestamps=%llu "
		"unmatched=%llu records_dropped=%llu buffers_refused=%llu messages_sent=%llu "
		"messages_dropped=%llu connections=%llu nvtx_lost=%llu agent=%s\n",
		(int)getpid(), when, (unsigned long long)atomic_load(&g.n.launches),
		(unsigned long long)atomic_load(&g.n.sampled), (unsigned long long)atomic_load(&g.n.activities),
		(unsigned long long)atomic_load(&g.n.bad_timestamps), (unsigned long long)atomic_load(&g.n.unmatched),
		(unsigned long long)atomic_load(&g.n.records_dropped),
		(unsigned long long)atomic_load(&g.n.buffers_refused),
		(unsigned long long)atomic_load(&g.n.messages_sent),
		(unsigned long long)atomic_load(&g.n.messages_dropped),
		(unsigned long long)atomic_load(&g.n.connections), (unsigned long long)atomic_load(&g.n.nvtx_lost),
		g.fd >= 0 ? "connected" : (g.gave_up ? "gave up" : "not connected"));
}

static void print_overhead(void)
{
	if (g.cfg.quiet || !g.cfg.print_overhead)
		return;
	struct timespec cpu;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	unsigned long long launches = atomic_load(&g.n.launches);
	unsigned long long ns = atomic_load(&g.n.overhead_ns);
	fprintf(stderr, "ember-cuda[%d]: overhead: callbacks %llu ns in all, %llu ns per launch; process CPU %.3f s\n",
		(int)getpid(), ns, launches ? ns / launches : 0, cpu.tv_sec + cpu.tv_nsec / 1e9);
}

/* Sends one report on the connection (made first when there is none):
 * HELLO when the connection has not had it, the devices it has not had,
 * the AGG entries of agg from position *from on (*from is moved past what
 * went out), then the spans and STATS. Returns 0 when all of agg went
 * out, -1 when the connection is gone or refused a datagram. */
static int send_report(const struct cuda_agg *agg, unsigned *from, const struct cuda_spans *spans, uint64_t seen)
{
	if (g.fd < 0)
		try_connect();
	if (g.fd < 0)
		return -1;
	if (!g.hello_sent)
		send_hello();
	if (!g.hello_sent || send_devices(seen) < 0)
		return -1;
	if (cuda_agg_entries(agg) + (cuda_agg_overflowed(agg) ? 1 : 0) > 0 &&
	    cuda_agg_encode(agg, emit, NULL, *from, from) < 0)
		return -1;
	/* Spans are for a timeline of the last minutes: one that does not
	 * go out is not kept. */
	if (cuda_spans_count(spans) > 0 && cuda_spans_encode(spans, emit, NULL) < 0)
		return 0;
	struct cuda_wire_stats st;
	fill_stats(&st);
	unsigned char buf[sizeof(struct cuda_wire_hdr) + sizeof(st)];
	emit(buf, cuda_msg_single(buf, CUDA_WIRE_STATS, &st, sizeof(st)), NULL); /* cumulative: the next one says it */
	return 0;
}

/* One report: flush CUPTI, take the aggregates, send them. What did not
 * go out (no agent, an agent that went away, or a full queue) goes back
 * into the live table and goes with the next report: the GPU time of a
 * report is sent once, whole, or later. */
static void report(int final)
{
	if (g.pid != getpid())
		return; /* a forked child: the parent's state is not ours */
	g.cupti.cuptiActivityFlushAll(final ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
	pc_drain_all();
	int64_t offset = measure_clock_offset();

	pthread_mutex_lock(&g.lock);
	struct cuda_agg *agg = g.agg;
	struct cuda_spans *spans = g.spans;
	struct cuda_pcs *pcs = pc.pcs;
	struct cuda_agg *split = NULL, *out = agg;
	g.agg = g.agg_spare;
	g.spans = g.spans_spare;
	g.agg_spare = agg;
	g.spans_spare = spans;
	if (pcs) {
		pc.pcs = pc.spare;
		pc.spare = pcs;
	}
	uint64_t seen = g.devices_seen;
	if (offset)
		g.clock_offset = offset;
	pthread_mutex_unlock(&g.lock);
	if (pcs && cuda_pcs_entries(pcs) > 0) {
		/* Each kernel's time split over its samples; the samples of
		 * kernels without time in this report wait for the next. The
		 * split goes through the spare table, which becomes this
		 * report's. */
		split = cuda_agg_new(AGG_CAPACITY + PC_TABLE);
		if (split) {
			pthread_mutex_lock(&g.lock);
			(void)cuda_agg_apply_pcs(split, agg, pcs, pc.pcs);
			pthread_mutex_unlock(&g.lock);
			out = split;
		}
	}

	unsigned from = 0;
	if (!g.gave_up) {
		int had = g.fd >= 0;
		/* A connection found broken (the agent restarted since the
		 * last report) is made again at once, and the report goes on
		 * where it stopped. */
		if (send_report(out, &from, spans, seen) < 0 && had && g.fd < 0)
			(void)send_report(out, &from, spans, seen);
	}
	if (!g.gave_up) {
		pthread_mutex_lock(&g.lock);
		(void)cuda_agg_carry(g.agg, out, from); /* out of memory: as cuda_agg_add, not added */
		pthread_mutex_unlock(&g.lock);
	}
	cuda_agg_free(split);
	cuda_agg_reset(agg);
	cuda_spans_reset(spans);

	uint64_t now = now_ns(CLOCK_MONOTONIC);
	if (now >= g.next_stats_ns || final) {
		print_stats(final ? " at exit" : "");
		g.next_stats_ns = now + (uint64_t)(g.cfg.stats_interval * 1e9);
	}
	if (now >= g.next_overhead_ns || final) {
		print_overhead();
		g.next_overhead_ns = now + (uint64_t)(g.cfg.overhead_interval * 1e9);
	}
}

static void *reporter(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g.stop_lock);
	while (!g.stop) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += REPORT_INTERVAL_NS / 1000000000ull;
		pthread_cond_timedwait(&g.stop_cond, &g.stop_lock, &until);
		if (g.stop)
			break;
		pthread_mutex_unlock(&g.stop_lock);
		report(0);
		pthread_mutex_lock(&g.stop_lock);
	}
	pthread_mutex_unlock(&g.stop_lock);
	return NULL;
}

static void at_exit(void)
{
	if (g.pid != getpid() || !g.thread_started)
		return;
	pthread_mutex_lock(&g.stop_lock);
	g.stop = 1;
	pthread_cond_signal(&g.stop_cond);
	pthread_mutex_unlock(&g.stop_lock);
	pthread_join(g.thread, NULL);
	g.thread_started = 0;
	if (atomic_load(&g.active))
		report(1);
	else
		print_stats(" at exit");
	disconnect();
}

static void at_fork_child(void)
{
	/* The report thread and the socket stay with the parent; CUDA is not
	 * usable in a child forked after cuInit anyway. */
	atomic_store(&g.active, 0);
	if (g.fd >= 0)
		close(g.fd); /* the child's copy: the parent's connection stays */
	g.fd = -1;
	g.thread_started = 0;
	ts.tid = 0;
	ts.depth = 0;
}

/* --- InitializeInjection ------------------------------------------------------------------------ */

static void step_aside(void)
{
	atomic_store(&g.active, 0);
	if (g.subscriber && g.cupti.cuptiUnsubscribe)
		g.cupti.cuptiUnsubscribe(g.subscriber);
	g.subscriber = NULL;
}

static int initialized;

EMBERCUDA_EXPORT int InitializeInjection(void)
{
	if (__atomic_exchange_n(&initialized, 1, __ATOMIC_ACQ_REL))
		return 1;
	read_config(&g.cfg);
	if (g.cfg.noop)
		return 1;
	g.pid = getpid();
	if (socket_path(g.cfg.socket_path, sizeof(g.cfg.socket_path)) < 0) {
		say("the agent's socket path is too long; not profiling");
		return 1;
	}

	g.cupti_handle = find_cupti();
	if (!g.cupti_handle) {
		say("libcupti not found (neither loaded nor in the library path or CUDA_HOME); not profiling");
		return 1;
	}
#define X(name)                                                                        \
	g.cupti.name = (__typeof__(name) *)dlsym(g.cupti_handle, #name);               \
	if (!g.cupti.name) {                                                           \
		say("%s lacks %s; not profiling", g.cupti_path, #name);                \
		return 1;                                                              \
	}
	CUPTI_FUNCS(X)
#undef X
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (cuda) {
		g.cu_driver_get_version = (cu_driver_get_version_fn)dlsym(cuda, "cuDriverGetVersion");
		g.cu_device_get_name = (cu_device_get_name_fn)dlsym(cuda, "cuDeviceGetName");
		g.cu_device_get_uuid = (cu_device_get_uuid_fn)dlsym(cuda, "cuDeviceGetUuid");
	}

	CUptiResult r = g.cupti.cuptiGetVersion(&g.cupti_version);
	if (r != CUPTI_SUCCESS || g.cupti_version < MIN_CUPTI_API) {
		say("%s: CUPTI API version %u is older than %d (CUDA 11.0); not profiling", g.cupti_path,
		    g.cupti_version, MIN_CUPTI_API);
		return 1;
	}

	g.corr = calloc(CORR_SLOTS, sizeof(*g.corr));
	/* about 2 MB of address space; pages are touched only as paths come */
	if (g.cfg.enable_nvtx && !(g.nvtx = calloc(NVTX_SLOTS, sizeof(*g.nvtx)))) {
		say("out of memory; not profiling");
		return 1;
	}
	g.agg = cuda_agg_new(AGG_CAPACITY);
	g.agg_spare = cuda_agg_new(AGG_CAPACITY);
	g.spans = cuda_spans_new(SPANS_PER_REPORT);
	g.spans_spare = cuda_spans_new(SPANS_PER_REPORT);
	if (!g.corr || !g.agg || !g.agg_spare || !g.spans || !g.spans_spare) {
		say("out of memory; not profiling");
		return 1;
	}

	r = g.cupti.cuptiSubscribe(&g.subscriber, on_api, NULL);
	if (r != CUPTI_SUCCESS) {
		g.subscriber = NULL;
		if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
			say("CUPTI is already used by another profiler (Nsight, the PyTorch profiler, ...); not profiling");
		else
			say("cuptiSubscribe: %s; not profiling", result_string(r));
		return 1;
	}
	atomic_store(&g.active, 1);
	if (enable_callbacks() == 0) {
		say("%s offers none of the launch callbacks; not profiling", g.cupti_path);
		step_aside();
		return 1;
	}
	r = g.cupti.cuptiActivityRegisterCallbacks(on_buffer_requested, on_buffer_completed);
	if (r != CUPTI_SUCCESS) {
		say("cuptiActivityRegisterCallbacks: %s; not profiling", result_string(r));
		step_aside();
		return 1;
	}
	/* Enabled now, at start: enabling kernel records later makes CUPTI
	 * instrument code mid-run (multi-second stalls). */
	r = g.cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r != CUPTI_SUCCESS) {
		say("cuptiActivityEnable(CONCURRENT_KERNEL): %s; not profiling", result_string(r));
		step_aside();
		return 1;
	}
	if (g.cfg.profile_memory) {
		if ((r = g.cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY)) != CUPTI_SUCCESS)
			say("cuptiActivityEnable(MEMCPY): %s; copies are not profiled", result_string(r));
		if ((r = g.cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET)) != CUPTI_SUCCESS)
			say("cuptiActivityEnable(MEMSET): %s; sets are not profiled", result_string(r));
	}
	if (g.cfg.profile_sync && (r = g.cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) != CUPTI_SUCCESS)
		say("cuptiActivityEnable(SYNCHRONIZATION): %s; syncs are not profiled", result_string(r));
	if (g.cfg.enable_pc_sampling)
		pc_init();

	g.clock_offset = measure_clock_offset();
	g.next_stats_ns = now_ns(CLOCK_MONOTONIC) + (uint64_t)(g.cfg.stats_interval * 1e9);
	g.next_overhead_ns = now_ns(CLOCK_MONOTONIC) + (uint64_t)(g.cfg.overhead_interval * 1e9);
	pthread_atfork(NULL, NULL, at_fork_child);
	/* The report thread must not receive the program's signals. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&g.thread, NULL, reporter, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		say("cannot start the report thread: %s; not profiling", strerror(rc));
		step_aside();
		return 1;
	}
	g.thread_started = 1;
	atexit(at_exit);
	say("loaded libembercuda %s (CUPTI API %u from %s); reporting to %s", ember_cuda_version, g.cupti_version,
	    g.cupti_path, g.cfg.socket_path);
	return 1;
}
