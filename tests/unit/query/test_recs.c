/* Unit tests of the recommendations: every pattern of the knowledge base
 * (server/query/patterns.c) on a synthetic hot trace that must trigger it and a
 * near miss that must not; hot traces read from a store (grouping by
 * application, the share threshold, cores and the series); the
 * recommendations built from them (savings, cost, ranking); the state
 * database (dismiss, restore, history, refusals). */
#include "testutil.h"
#include "storefixture.h"

#include <math.h>
#include <sqlite3.h>

#include "agent/batch.h"
#include "server/ingest/codecs.h"
#include "server/ingest/batch_decode.h"
#include "server/query/hottraces.h"
#include "server/query/patterns.h"
#include "server/query/recommend.h"
#include "server/store/projects.h"
#include "server/store/store.h"
#include "server/symbols/symbols.h"
#include "util.h"

/* --- synthetic traces ------------------------------------------------------ */

/* Frames outermost first, separated by ';'. A prefix names the type:
 * k: kernel, py: cpython (name@file), go: go, cl: cuda_launch,
 * ck: cuda_kernel, cm: cuda_memcpy, cz: cuda_memset, cs: cuda_sync,
 * st: cuda_stall, jvm: jvm; none: native. "name@binary" sets the binary
 * (a cpython frame's file). */
static void make_trace(const char *spec, double share, struct ht_trace *t)
{
	memset(t, 0, sizeof(*t));
	char *copy = xstrdup(spec), *save = NULL;
	size_t cap = 0;
	for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
		static const struct {
			const char *prefix;
			uint8_t type;
		} pre[] = { { "k:", SFT_KERNEL },        { "py:", SFT_CPYTHON },     { "go:", SFT_GO },
			    { "cl:", SFT_CUDA_LAUNCH },  { "ck:", SFT_CUDA_KERNEL }, { "cm:", SFT_CUDA_MEMCPY },
			    { "cz:", SFT_CUDA_MEMSET },  { "cs:", SFT_CUDA_SYNC },   { "st:", SFT_CUDA_STALL },
			    { "jvm:", SFT_JVM } };
		uint8_t type = SFT_NATIVE;
		for (size_t i = 0; i < ARRAY_SIZE(pre); i++)
			if (strncmp(tok, pre[i].prefix, strlen(pre[i].prefix)) == 0) {
				type = pre[i].type;
				tok += strlen(pre[i].prefix);
				break;
			}
		/* The binary follows the last '@' (C++ names hold none). */
		char *at = strrchr(tok, '@');
		const char *bin = type == SFT_KERNEL ? "vmlinux" : "app";
		if (at) {
			*at = 0;
			bin = at + 1;
		}
		xgrow((void **)&t->frames, &cap, t->nframes + 1, sizeof(*t->frames));
		struct ht_frame *f = &t->frames[t->nframes++];
		memset(f, 0, sizeof(*f));
		f->type = type;
		f->name = xstrdup(tok);
		f->binary = xstrdup(type == SFT_CPYTHON && strrchr(bin, '/') ? strrchr(bin, '/') + 1 : bin);
		f->file = type == SFT_CPYTHON ? xstrdup(bin) : NULL;
		f->line = type == SFT_CPYTHON ? 7 : 0;
	}
	free(copy);
	t->share = share;
	t->cores = share * 8;
	t->seconds = t->cores * 3600;
}

static void free_trace(struct ht_trace *t)
{
	for (size_t i = 0; i < t->nframes; i++) {
		free(t->frames[i].name);
		free(t->frames[i].binary);
		free(t->frames[i].file);
	}
	free(t->frames);
}

struct pcase {
	const char *id;
	uint8_t kind;
	const char *hit;  /* must be claimed by the pattern */
	const char *miss; /* must not match it */
};

static const struct pcase cases[] = {
	{ "cuda-sync-htod-copy", SEK_CUDA, "main;train;cl:cudaMemcpy;cm:HtoD",
	  "main;train;cl:cudaMemcpyAsync;cm:HtoD" },
	{ "cuda-pageable-copy", SEK_CUDA, "main;train;cl:cudaMemcpyAsync;cm:HtoD",
	  "main;train;cl:cudaMemcpyAsync;cm:DtoD" },
	{ "cuda-dtoh-in-loop", SEK_CUDA, "main;step;cl:cuMemcpyDtoH;cm:DtoH", "main;step;cl:cuMemcpyDtoD;cm:DtoD" },
	{ "cuda-host-sync", SEK_CUDA, "main;step;cl:cudaStreamSynchronize;cs:StreamSynchronize",
	  "main;step;cl:cudaLaunchKernel;ck:gemm_kernel" },
	{ "cuda-layout-conversion", SEK_CUDA,
	  "main;conv;cl:cudaLaunchKernel;ck:void cudnn::ops::nchwToNhwcKernel<float>(...)",
	  "main;conv;cl:cudaLaunchKernel;ck:sm90_xmma_gemm_f16f16_f16f32" },
	{ "cuda-memset", SEK_CUDA, "main;zeros;cl:cudaMemsetAsync;cz:memset", "main;zeros;cl:cudaLaunchKernel;ck:fill_kernel" },
	{ "cuda-memory-bound", SEK_CUDA, "main;cl:cudaLaunchKernel;ck:elementwise_add;st:long_scoreboard",
	  "main;cl:cudaLaunchKernel;ck:elementwise_add;st:math_pipe_throttle" },
	{ "cuda-launch-bound", SEK_ON_CPU,
	  "main;forward;cudaLaunchKernel@libcudart.so.12;cuLaunchKernel@libcuda.so.1;k:__x64_sys_ioctl",
	  "main;forward;cudaMalloc@libcudart.so.12;k:__x64_sys_ioctl" },
	{ "regex-compile", SEK_ON_CPU,
	  "main;handle;pcre2_compile_8@libpcre2-8.so.0;compile_regex@libpcre2-8.so.0;malloc@libc.so.6",
	  "main;handle;pcre2_match_8@libpcre2-8.so.0;match@libpcre2-8.so.0" },
	{ "python-regex-compile", SEK_ON_CPU,
	  "py:<module>@/srv/app.py;py:handle@/srv/app.py;py:compile@/usr/lib/python3.11/re/__init__.py;"
	  "py:_compile@/usr/lib/python3.11/re/__init__.py;py:_parse@/usr/lib/python3.11/re/_parser.py",
	  "py:<module>@/srv/app.py;py:compile@/srv/mylang/compiler.py" },
	{ "regex-match", SEK_ON_CPU, "main;grep;regexec@libc.so.6;re_search_internal@libc.so.6",
	  "main;grep;regcomp@libc.so.6;re_compile_internal@libc.so.6;parse_reg_exp@libc.so.6" },
	{ "zlib-high-level", SEK_ON_CPU, "main;save;compress2@libz.so.1;deflate@libz.so.1;deflate_slow@libz.so.1;longest_match@libz.so.1",
	  "main;save;compress2@libz.so.1;deflate@libz.so.1;deflate_fast@libz.so.1;longest_match@libz.so.1" },
	{ "zlib-deflate", SEK_ON_CPU, "main;save;deflate@libz.so.1;deflate_fast@libz.so.1;fill_window@libz.so.1",
	  "main;save;deflate@libz.so.1;deflate_slow@libz.so.1" },
	{ "zlib-inflate", SEK_ON_CPU, "main;load;uncompress@libz.so.1;inflate@libz.so.1;inflate_fast@libz.so.1",
	  "main;load;ZSTD_decompress@libzstd.so.1;ZSTD_decompressBlock_internal@libzstd.so.1" },
	{ "go-flate", SEK_ON_CPU, "go:main.main;go:compress/gzip.(*Writer).Write;go:compress/flate.(*compressor).deflate;go:compress/flate.(*compressor).findMatch",
	  "go:main.main;go:github.com/klauspost/compress/zstd.(*Encoder).Write" },
	{ "crc-software", SEK_ON_CPU, "main;store;crc32_z@libz.so.1", "main;store;crc32_pclmul@libz.so.1" },
	{ "hash-generic", SEK_ON_CPU, "main;sign;SHA256_Update@libcrypto.so.3;sha256_block_data_order@libcrypto.so.3",
	  "main;sign;SHA256_Update@libcrypto.so.3;sha256_block_data_order_shaext@libcrypto.so.3" },
	{ "json-serialization", SEK_ON_CPU, "go:main.handler;go:encoding/json.Marshal;go:encoding/json.(*encodeState).reflectValue;go:strconv.AppendFloat",
	  "go:main.handler;go:encoding/xml.Marshal;go:strconv.AppendFloat" },
	{ "protobuf-serialization", SEK_ON_CPU,
	  "main;send;google::protobuf::MessageLite::SerializeToString@libprotobuf.so;google::protobuf::internal::WireFormatLite::WriteString@libprotobuf.so",
	  "main;send;flatbuffers::FlatBufferBuilder::CreateString" },
	{ "python-object-churn", SEK_ON_CPU,
	  "py:<module>@/srv/app.py;py:build@/srv/app.py;PyList_Append@libpython3.11.so;_PyObject_Malloc@libpython3.11.so",
	  "main;build;_PyObject_Malloc@libpython3.11.so" },
	{ "python-numeric-loop", SEK_ON_CPU,
	  "py:<module>@/srv/app.py;py:norm@/srv/app.py;_PyEval_EvalFrameDefault@libpython3.11.so;PyNumber_Multiply@libpython3.11.so;float_mul@libpython3.11.so",
	  "py:<module>@/srv/app.py;py:norm@/srv/app.py;cblas_ddot@libopenblas.so" },
	/* The float objects a numeric loop makes and frees: the loop, not churn. */
	{ "python-numeric-loop", SEK_ON_CPU,
	  "py:<module>@/srv/app.py;py:sum_squares@/srv/app.py;PyFloat_FromDouble@libpython3.11.so;_Py_NewReference@libpython3.11.so",
	  "py:<module>@/srv/app.py;py:build@/srv/app.py;PyList_Append@libpython3.11.so;_PyObject_Malloc@libpython3.11.so" },
	{ "python-gc", SEK_ON_CPU, "py:<module>@/srv/app.py;py:load@/srv/app.py;_PyObject_GC_Link@libpython3.11.so;gc_collect_main@libpython3.11.so;deduce_unreachable@libpython3.11.so;visit_reachable@libpython3.11.so",
	  "main;collect@libmylib.so" },
	{ "go-gc", SEK_ON_CPU, "go:runtime.gcBgMarkWorker;go:runtime.gcDrain;go:runtime.scanobject",
	  "go:main.main;go:main.scan" },
	{ "go-alloc", SEK_ON_CPU, "go:main.main;go:main.parse;go:runtime.growslice;go:runtime.mallocgc",
	  "go:main.main;go:main.parse;go:strings.Index" },
	{ "jvm-gc", SEK_ON_CPU, "GCTaskThread::run@libjvm.so;G1ParScanThreadState::trim_queue@libjvm.so;G1ParScanThreadState::do_copy_to_survivor_space@libjvm.so",
	  "jvm:com.example.Main.run;jvm:java.util.HashMap.get" },
	{ "lock-contention", SEK_ON_CPU, "worker;update;pthread_mutex_lock@libc.so.6;__lll_lock_wait@libc.so.6;k:__x64_sys_futex;k:futex_wait",
	  "worker;update;atomic_add" },
	{ "lock-wait", SEK_OFF_CPU, "worker;update;pthread_mutex_lock@libc.so.6;__lll_lock_wait@libc.so.6;k:futex_wait;k:schedule",
	  "worker;wait_job;pthread_cond_wait@libc.so.6;k:futex_wait;k:schedule" },
	{ "small-io-syscalls", SEK_ON_CPU, "main;log_line;__GI___libc_write@libc.so.6;k:entry_SYSCALL_64;k:do_syscall_64;k:ksys_write;k:vfs_write;k:ext4_buffered_write_iter",
	  "main;log_line;fwrite@libc.so.6;_IO_new_file_xsputn@libc.so.6" },
	{ "kernel-network", SEK_ON_CPU, "main;send_msg;__send@libc.so.6;k:__x64_sys_sendto;k:__sys_sendto;k:tcp_sendmsg;k:tcp_sendmsg_locked;k:tcp_push;k:__tcp_transmit_skb;k:ip_finish_output2",
	  "main;send_msg;k:__x64_sys_getpid" },
	{ "page-faults", SEK_ON_CPU, "main;fill;memset@libc.so.6;k:asm_exc_page_fault;k:exc_page_fault;k:do_user_addr_fault;k:handle_mm_fault;k:clear_page_erms",
	  "main;fill;memset@libc.so.6" },
	{ "mmap-churn", SEK_ON_CPU, "main;handle;free@libc.so.6;munmap@libc.so.6;k:__x64_sys_munmap;k:__vm_munmap;k:unmap_region;k:zap_pte_range",
	  "main;handle;k:__x64_sys_getrandom" },
	{ "spin-yield", SEK_ON_CPU, "worker;wait_slot;sched_yield@libc.so.6;k:__x64_sys_sched_yield;k:do_sched_yield",
	  "worker;wait_slot;spin_pause" },
	{ "timer-churn", SEK_ON_CPU, "poller;loop;usleep@libc.so.6;clock_nanosleep@libc.so.6;k:__x64_sys_clock_nanosleep;k:hrtimer_nanosleep",
	  "poller;loop;check_ready" },
	{ "busy-poll", SEK_ON_CPU, "loop;run;epoll_wait@libc.so.6;k:__x64_sys_epoll_wait;k:do_epoll_wait;k:ep_poll",
	  "loop;run;handle_event" },
	{ "vdso-time", SEK_ON_CPU, "main;tick;clock_gettime@libc.so.6;__vdso_clock_gettime@linux-vdso.so.1",
	  "main;tick;compute" },
	{ "exceptions", SEK_ON_CPU, "main;parse;__cxa_throw@libstdc++.so.6;_Unwind_RaiseException@libgcc_s.so.1;_Unwind_Find_FDE@libgcc_s.so.1",
	  "main;parse;std::stoi" },
	{ "dynamic-symbol-lookup", SEK_ON_CPU, "main;call_plugin;dlsym@libc.so.6;_dl_sym@libc.so.6;_dl_lookup_symbol_x@ld-linux-x86-64.so.2;do_lookup_x@ld-linux-x86-64.so.2",
	  "main;call_plugin;plugin_run@plugin.so" },
	{ "logging-format", SEK_ON_CPU, "main;handle;log_msg;vsnprintf@libc.so.6;__vsnprintf_internal@libc.so.6;__printf_buffer@libc.so.6",
	  "main;handle;log_msg;memchr@libc.so.6" },
	{ "go-scheduler", SEK_ON_CPU, "go:runtime.mcall;go:runtime.park_m;go:runtime.schedule;go:runtime.findRunnable;go:runtime.stealWork",
	  "go:main.worker;go:main.process" },
	{ "python-interpreter", SEK_ON_CPU, "py:<module>@/srv/app.py;py:main@/srv/app.py;py:score@/srv/app.py",
	  "py:<module>@/srv/app.py;py:main@/srv/app.py;cblas_ddot@libopenblas.so" },
	{ "malloc-free", SEK_ON_CPU, "main;parse;new_node;malloc@libc.so.6;_int_malloc@libc.so.6",
	  "main;parse;new_node;arena_push" },
	{ "memcpy", SEK_ON_CPU, "main;copy_rows;__memmove_avx_unaligned_erms@libc.so.6",
	  "main;copy_rows;__memchr_avx2@libc.so.6" },
};

static void test_patterns_compile(void **state)
{
	(void)state;
	assert_int_equal(pat_selfcheck(), 0);
	/* At least 25 patterns, ids unique, each explained with actions. */
	size_t n;
	const struct pattern *all = pat_table(&n);
	assert_true(n >= 25);
	for (size_t i = 0; i < n; i++) {
		assert_non_null(all[i].explanation);
		assert_non_null(all[i].actions[0]);
		assert_true(all[i].removes > 0 && all[i].removes <= 1);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(all[i].id, all[j].id);
	}
}

/* Every pattern has a case; each case's hit is claimed by its pattern and
 * its miss is not matched by it. */
static void test_patterns_each(void **state)
{
	(void)state;
	size_t n;
	const struct pattern *all = pat_table(&n);
	for (size_t i = 0; i < n; i++) {
		bool have = false;
		for (size_t c = 0; c < ARRAY_SIZE(cases); c++)
			have |= strcmp(cases[c].id, all[i].id) == 0;
		if (!have)
			fail_msg("pattern %s has no test case", all[i].id);
	}
	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		const struct pattern *p = pat_find(cases[c].id);
		if (!p)
			fail_msg("no pattern %s", cases[c].id);
		struct ht_trace t;
		struct pat_match m;
		make_trace(cases[c].hit, 0.2, &t);
		if (!pat_match(cases[c].kind, &t, &m, NULL, 0, NULL) || m.p != p)
			fail_msg("%s: its trace was claimed by %s", cases[c].id,
				 pat_match(cases[c].kind, &t, &m, NULL, 0, NULL) ? m.p->id : "nothing");
		/* The anchor is a frame of the trace. */
		assert_true(m.anchor < t.nframes);
		free_trace(&t);
		make_trace(cases[c].miss, 0.2, &t);
		if (pat_match_one(p, cases[c].kind, &t, &m))
			fail_msg("%s: matched its near miss %s", cases[c].id, cases[c].miss);
		free_trace(&t);
		/* The same trace under an event kind the pattern does not
		 * cover: no match. */
		uint8_t other = cases[c].kind == SEK_CUDA ? SEK_ON_CPU : SEK_CUDA;
		make_trace(cases[c].hit, 0.2, &t);
		if (pat_match_one(p, other, &t, &m))
			fail_msg("%s: matched under another event kind", cases[c].id);
		free_trace(&t);
	}
}

/* A trace two patterns match is claimed by the first (more specific) and
 * names the other. */
static void test_patterns_claim_once(void **state)
{
	(void)state;
	struct ht_trace t;
	make_trace("main;handle;pcre2_compile_8@libpcre2-8.so.0;malloc@libc.so.6;_int_malloc@libc.so.6", 0.3, &t);
	struct pat_match m;
	const struct pattern *also[4];
	size_t nalso = 0;
	assert_true(pat_match(SEK_ON_CPU, &t, &m, also, 4, &nalso));
	assert_string_equal(m.p->id, "regex-compile");
	assert_true(nalso >= 1);
	bool malloc_named = false;
	for (size_t i = 0; i < nalso && i < 4; i++)
		malloc_named |= strcmp(also[i]->id, "malloc-free") == 0;
	assert_true(malloc_named);
	free_trace(&t);
}

/* A pattern speaks when the traces it claims in an application hold its
 * minimum share together: regex-match (1 %) on one trace of 0.8 % is
 * silent, on two of 0.6 % it speaks, for both. */
static void test_min_share_summed(void **state)
{
	(void)state;
	struct recs_config c;
	recs_config_default(&c);
	for (int two = 0; two < 2; two++) {
		struct ht_app app = { .name = xstrdup("grep"), .source = "executable" };
		app.ntraces = two ? 2 : 1;
		app.traces = xcalloc(2, sizeof(*app.traces));
		make_trace("main;grep;regexec@libc.so.6;re_search_internal@libc.so.6", two ? 0.006 : 0.008, &app.traces[0]);
		make_trace("main;scan;regexec@libc.so.6;re_search_internal@libc.so.6", 0.006, &app.traces[1]);
		app.traces[1].id = 1;
		app.share = two ? 0.012 : 0.008;
		struct ht_result r = { .kind = SEK_ON_CPU, .apps = xcalloc(1, sizeof(struct ht_app)), .napps = 1,
				       .window_seconds = 3600, .bucket_seconds = 900 };
		r.apps[0] = app;
		if (!two)
			free_trace(&r.apps[0].traces[1]);
		json_t *arr = json_array();
		recs_build(&r, PROJECT, &c, arr);
		json_t *rec = json_array_get(arr, 0);
		json_t *actions = json_object_get(rec, "actions");
		json_t *hot = json_object_get(json_object_get(rec, "technical"), "hot_traces");
		if (two) {
			assert_int_equal(json_array_size(actions), 1);
			assert_string_equal(json_string_value(json_object_get(json_array_get(actions, 0), "pattern")), "regex-match");
			assert_int_equal(json_integer_value(json_object_get(json_array_get(actions, 0), "hot_traces")), 2);
			assert_int_equal(json_array_size(json_object_get(rec, "evidence")), 2);
		} else {
			assert_int_equal(json_array_size(actions), 0);
			assert_true(json_is_null(json_object_get(json_array_get(hot, 0), "pattern")));
			assert_int_equal(json_array_size(json_object_get(rec, "evidence")), 0);
			assert_int_equal(json_array_size(json_object_get(json_object_get(rec, "technical"), "lower_priority")), 1);
		}
		json_decref(arr);
		r.apps[0].ntraces = two ? 2 : 1;
		ht_result_free(&r);
	}
}

/* A trace without frames (a stack whose frames were all unknown) is
 * listed, claimed by nothing, and named nowhere as a leaf. */
static void test_empty_trace(void **state)
{
	(void)state;
	struct recs_config c;
	recs_config_default(&c);
	struct ht_result r = { .kind = SEK_ON_CPU, .apps = xcalloc(1, sizeof(struct ht_app)), .napps = 1,
			       .window_seconds = 60, .bucket_seconds = 900 };
	r.apps[0].name = xstrdup("x");
	r.apps[0].source = "executable";
	r.apps[0].traces = xcalloc(1, sizeof(struct ht_trace));
	r.apps[0].traces[0].frames = xcalloc(1, sizeof(struct ht_frame));
	r.apps[0].traces[0].share = 0.5;
	r.apps[0].ntraces = 1;
	json_t *arr = json_array();
	recs_build(&r, PROJECT, &c, arr);
	json_t *rec = json_array_get(arr, 0);
	assert_int_equal(json_array_size(json_object_get(rec, "actions")), 0);
	assert_non_null(strstr(json_string_value(json_object_get(rec, "title")), "Hot code path in x"));
	json_decref(arr);
	ht_result_free(&r);
}

/* The application of a label set. */
static void test_app_of(void **state)
{
	(void)state;
	char buf[64];
	const char *src;
	assert_string_equal(ht_app_of("web", "c", "exe", "s.py", buf, sizeof(buf), &src), "web");
	assert_string_equal(src, "deployment");
	assert_string_equal(ht_app_of("", "c", "exe", "s.py", buf, sizeof(buf), &src), "c");
	assert_string_equal(src, "container");
	assert_string_equal(ht_app_of(NULL, NULL, "python3.11", "train.py", buf, sizeof(buf), &src),
			    "train.py (python3.11)");
	assert_string_equal(src, "script");
	assert_string_equal(ht_app_of(NULL, NULL, "exe", NULL, buf, sizeof(buf), &src), "exe");
	assert_string_equal(src, "executable");
	assert_string_equal(ht_app_of(NULL, NULL, NULL, "", buf, sizeof(buf), &src), "[unknown]");
	/* A script name too long for the buffer: the executable. */
	char longname[200];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	assert_string_equal(ht_app_of(NULL, NULL, "exe", longname, buf, sizeof(buf), &src), "exe");
	assert_string_equal(src, "executable");
}

/* --- hot traces from a store ------------------------------------------------ */

struct sspec {
	const char *frames[8];
	const char *exe, *deployment, *container;
	uint64_t value;
};

static void make_batch(const struct sspec *specs, size_t n, uint64_t seq, int64_t start,
		       enum event_kind kind, struct buf *out)
{
	struct batch b;
	batch_init(&b);
	for (size_t i = 0; i < n; i++) {
		uint32_t ids[8];
		size_t depth = 0;
		for (; depth < 8 && specs[i].frames[depth]; depth++)
			ids[depth] = spec_frame(&b, specs[i].frames[depth], specs[i].exe, NULL);
		uint32_t kv[10];
		size_t nkv = 0;
		kv[nkv++] = batch_string(&b, "process.executable.name", 23);
		kv[nkv++] = batch_string(&b, specs[i].exe, strlen(specs[i].exe));
		kv[nkv++] = batch_string(&b, "host.name", 9);
		kv[nkv++] = batch_string(&b, "h1", 2);
		if (specs[i].deployment) {
			kv[nkv++] = batch_string(&b, "k8s.deployment.name", 19);
			kv[nkv++] = batch_string(&b, specs[i].deployment, strlen(specs[i].deployment));
		}
		if (specs[i].container) {
			kv[nkv++] = batch_string(&b, "container.name", 14);
			kv[nkv++] = batch_string(&b, specs[i].container, strlen(specs[i].container));
		}
		batch_add(&b, batch_stack(&b, ids, depth), batch_resource(&b, kv, nkv), kind, specs[i].value);
	}
	spec_batch_finish(&b, seq, start, out);
}

/* 1000 samples: a web deployment compiling regexes (600) and formatting
 * (100), a batch container compressing at level 9 (290), and a rare trace
 * (4: 0.4 %, below the 0.5 % threshold). */
static const struct sspec shop[] = {
	{ { "main", "handle", "pcre2_compile_8", "compile_branch", NULL }, "web", "web-dep", "web-c", 600 },
	{ { "main", "handle", "render", "vsnprintf", "__printf_buffer", NULL }, "web", "web-dep", "web-c", 100 },
	{ { "main", "save", "deflate", "deflate_slow", "longest_match", NULL }, "batch", NULL, "batch-c", 290 },
	{ { "main", "rare", NULL }, "web", "web-dep", "web-c", 4 },
	{ { "main", "misc", NULL }, "tool", NULL, NULL, 6 },
};

/* The recommendations' database in the world's directory, opened beside
 * the recs that write it. */
static sqlite3 *open_recs_db(struct world *w)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/recs.db", w->dir);
	sqlite3 *db;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	return db;
}

/* Appends the shop's samples as batch seq, starting at start_ms. */
static void append_shop_at(struct world *w, uint64_t seq, int64_t start_ms)
{
	struct buf z = { 0 };
	make_batch(shop, ARRAY_SIZE(shop), seq, start_ms, EK_ON_CPU, &z);
	append(w->s, &z);
	buf_free(&z);
}

/* Appends the shop's samples a minute before now. */
static void append_shop(struct world *w, int64_t now)
{
	append_shop_at(w, 1, now - 60000);
}

/* The project's on-CPU hot traces up to end_ms, with the default window
 * and share. */
static void hottraces_until(struct world *w, int64_t end_ms, struct ht_result *r)
{
	struct ht_params p = { .project_id = PROJECT, .kind = SEK_ON_CPU, .end_ms = end_ms,
			       .window_ms = HT_DEFAULT_WINDOW_MS, .min_share = HT_DEFAULT_MIN_SHARE };
	struct buf err = { 0 };
	if (hottraces_compute(w->s, w->sym, &p, r, &err) != 0)
		fail_msg("hottraces_compute: %s", err.data ? err.data : "");
	buf_free(&err);
}

static void test_hottraces_store(void **state)
{
	struct world *w = *state;
	append_shop_at(w, 1, T0);
	struct ht_result r;
	hottraces_until(w, T0 + 3600000, &r);
	assert_true(fabs(r.total_seconds - 1000.0 / 19) < 1e-6);
	/* web-dep (deployment), batch-c (container), tool (executable). */
	assert_int_equal(r.napps, 3);
	assert_string_equal(r.apps[0].name, "web-dep");
	assert_string_equal(r.apps[0].source, "deployment");
	assert_int_equal(r.apps[0].ntraces, 2); /* "rare" is below 0.5 % */
	assert_true(fabs(r.apps[0].traces[0].share - 0.6) < 1e-9);
	assert_string_equal(r.apps[0].traces[0].frames[2].name, "pcre2_compile_8");
	assert_string_equal(r.apps[1].name, "batch-c");
	assert_string_equal(r.apps[1].source, "container");
	assert_string_equal(r.apps[2].name, "tool");
	assert_string_equal(r.apps[2].source, "executable");
	/* The average is over the window from its first bucket with data:
	 * the data is 5 h into the 6 h window of 24 buckets of 15 min, so 4
	 * buckets; never above the peak. */
	assert_true(fabs(r.window_seconds - 4 * 900.0) < 1e-6);
	assert_true(fabs(r.apps[0].cores - 700.0 / 19 / 3600) < 1e-9);
	assert_true(r.apps[0].cores <= r.apps[0].peak + 1e-12);
	/* The series holds the 600 samples at 19 Hz in one bucket. */
	double sum = 0;
	for (size_t b = 0; b < HT_BUCKETS; b++)
		sum += r.apps[0].traces[0].series[b] * r.bucket_seconds;
	assert_true(fabs(sum - 600.0 / 19) < 1e-6);
	assert_true(r.apps[0].peak > r.apps[1].peak);
	/* Entities: the host, deployment, container and executable. */
	bool host = false;
	for (size_t e = 0; e < r.apps[0].nentities; e++)
		host |= strcmp(r.apps[0].entities[e].type, "host") == 0 &&
			strcmp(r.apps[0].entities[e].value, "h1") == 0;
	assert_true(host);

	/* The recommendations: one per application, ranked actions. */
	struct recs_config c;
	recs_config_default(&c);
	json_t *arr = json_array();
	recs_build(&r, PROJECT, &c, arr);
	assert_int_equal(json_array_size(arr), 3);
	json_t *web = json_array_get(arr, 0);
	assert_string_equal(json_string_value(json_object_get(web, "application")), "web-dep");
	assert_string_equal(json_string_value(json_object_get(web, "kind")), "cpu");
	json_t *actions = json_object_get(web, "actions");
	assert_int_equal(json_array_size(actions), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(actions, 0), "pattern")), "regex-compile");
	assert_string_equal(json_string_value(json_object_get(json_array_get(actions, 1), "pattern")), "logging-format");
	/* Savings: the trace's cores times the fraction the fix removes. */
	double cores = r.apps[0].traces[0].cores;
	double saved = json_real_value(json_object_get(json_object_get(json_array_get(actions, 0), "savings"), "cores"));
	assert_true(fabs(saved - cores * pat_find("regex-compile")->removes) <= 1e-5 * saved);
	double cost = json_real_value(json_object_get(json_object_get(json_array_get(actions, 0), "savings"), "annual_cost"));
	assert_true(fabs(cost - saved * HOURS_PER_YEAR * 0.04) < 0.01);
	assert_non_null(strstr(json_string_value(json_object_get(web, "title")), "Regular expression"));
	json_t *batch = json_array_get(arr, 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(batch, "actions"), 0), "pattern")),
			    "zlib-high-level");
	/* No known pattern: a recommendation of low confidence, no actions. */
	json_t *tool = json_array_get(arr, 2);
	assert_int_equal(json_array_size(json_object_get(tool, "actions")), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(tool, "technical"), "confidence")), "low");
	/* Ids are stable across runs. */
	json_t *arr2 = json_array();
	recs_build(&r, PROJECT, &c, arr2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(arr2, 0), "id")),
			    json_string_value(json_object_get(web, "id")));
	json_decref(arr2);
	json_decref(arr);
	ht_result_free(&r);

	/* A window that ends before the data: nothing. */
	hottraces_until(w, T0 - 1, &r);
	assert_int_equal(r.napps, 0);
	ht_result_free(&r);
}

/* Several batches, a minute apart: every one counts. */
static void test_hottraces_batches(void **state)
{
	struct world *w = *state;
	for (int i = 0; i < 3; i++)
		append_shop_at(w, (uint64_t)i + 1, T0 + i * 60000);
	struct ht_result r;
	hottraces_until(w, T0 + 3600000, &r);
	assert_true(fabs(r.total_seconds - 3000.0 / 19) < 1e-6);
	assert_int_equal(r.napps, 3);
	assert_true(fabs(r.apps[0].traces[0].seconds - 1800.0 / 19) < 1e-6);
	ht_result_free(&r);
}

/* Recommendations with the default configuration in the world's
 * directory, over the shop's samples a minute before now. */
static struct recs *open_shop_recs(struct world *w, int64_t now)
{
	append_shop(w, now);
	struct recs_config c;
	recs_config_default(&c);
	struct recs *r;
	struct buf err = { 0 };
	if (recs_open_dir(w->dir, &c, &r, &err) != 0)
		fail_msg("recs_open: %s", err.data ? err.data : "");
	buf_free(&err);
	return r;
}

/* recs_query answers kinds, sorted by peak; states persist with history. */
static void test_recs_state(void **state)
{
	struct world *w = *state;
	struct buf err = { 0 }, out = { 0 };
	int64_t now = now_unix_ms();
	struct recs *r = open_shop_recs(w, now);
	assert_int_equal(recs_query(r, w->s, w->sym, PROJECT, "bogus", now, &out, &err), -1);
	buf_reset(&err);
	assert_int_equal(recs_query(r, w->s, w->sym, PROJECT, "cuda", now, &out, &err), 0);
	json_t *d = json_loads(out.data, 0, NULL);
	assert_int_equal(json_array_size(json_object_get(d, "recommendations")), 0);
	json_decref(d);
	buf_reset(&out);
	assert_int_equal(recs_query(r, w->s, w->sym, PROJECT, "all", now, &out, &err), 0);
	d = json_loads(out.data, 0, NULL);
	json_t *list = json_object_get(d, "recommendations");
	assert_int_equal(json_array_size(list), 3);
	for (size_t i = 1; i < json_array_size(list); i++)
		assert_true(json_real_value(json_object_get(json_array_get(list, i - 1), "peak")) >=
			    json_real_value(json_object_get(json_array_get(list, i), "peak")));
	char id[17];
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(json_array_get(list, 0), "id")));
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "state")), "active");
	json_decref(d);
	/* Refusals. */
	assert_int_equal(recs_set_state(r, PROJECT, id, "gone", "u", now, &err), -1);
	buf_reset(&err);
	assert_int_equal(recs_set_state(r, PROJECT, "XYZ", "dismissed", "u", now, &err), -1);
	buf_reset(&err);
	/* Dismiss, then restore: the answer shows it, history has both. */
	assert_int_equal(recs_set_state(r, PROJECT, id, "dismissed", "user-1", now, &err), 0);
	buf_reset(&out);
	assert_int_equal(recs_query(r, w->s, w->sym, PROJECT, "cpu", now + 1, &out, &err), 0);
	d = json_loads(out.data, 0, NULL);
	list = json_object_get(d, "recommendations");
	bool dismissed = false;
	for (size_t i = 0; i < json_array_size(list); i++)
		if (strcmp(json_string_value(json_object_get(json_array_get(list, i), "id")), id) == 0)
			dismissed = strcmp(json_string_value(json_object_get(json_array_get(list, i), "state")), "dismissed") == 0;
	assert_true(dismissed);
	json_decref(d);
	assert_int_equal(recs_set_state(r, PROJECT, id, "active", "user-1", now + 2, &err), 0);
	recs_close(r);
	/* Reopened: the state and the history survived. */
	sqlite3 *db = open_recs_db(w);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT group_concat(from_state || '>' || to_state, ',') FROM rec_history WHERE id = ?1", -1, &q, NULL), SQLITE_OK);
	sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(q, 0), "active>dismissed,dismissed>active");
	sqlite3_finalize(q);
	sqlite3_close(db);
	buf_free(&out);
	buf_free(&err);
}


/* --- generations, lifecycle and settings --------------------------------------- */

struct heard {
	size_t n, nnew, nworse;
	char worse_id[17];
};

static void listen_ev(void *ctx, const struct recs_event *ev)
{
	struct heard *h = ctx;
	h->n++;
	if (strcmp(ev->status, "new") == 0)
		h->nnew++;
	if (strcmp(ev->status, "worsened") == 0) {
		h->nworse++;
		snprintf(h->worse_id, sizeof(h->worse_id), "%s", ev->id);
	}
}

/* The answer of recs_query(all) as a document. */
static json_t *answer(struct recs *r, struct world *w, int64_t now)
{
	struct buf out = { 0 }, err = { 0 };
	if (recs_query(r, w->s, w->sym, PROJECT, "all", now, &out, &err) < 0)
		fail_msg("query: %s", err.data);
	json_t *d = json_loads(out.data, 0, NULL);
	assert_non_null(d);
	buf_free(&out);
	buf_free(&err);
	return d;
}

static const json_t *rec_of(const json_t *d, const char *app)
{
	const json_t *list = json_object_get(d, "recommendations");
	for (size_t i = 0; i < json_array_size(list); i++)
		if (strcmp(json_string_value(json_object_get(json_array_get(list, i), "application")), app) == 0)
			return json_array_get(list, i);
	return NULL;
}

static const json_t *hot_traces_of(const json_t *d, const char *app)
{
	return json_object_get(json_object_get(rec_of(d, app), "technical"), "hot_traces");
}

/* The history, newest first, at most limit entries. */
static json_t *history_of(struct recs *r, int limit)
{
	struct buf out = { 0 }, err = { 0 };
	if (recs_history_json(r, PROJECT, limit, &out, &err) != 0)
		fail_msg("history: %s", err.data ? err.data : "");
	json_t *d = json_loads(out.data, 0, NULL);
	assert_non_null(d);
	buf_free(&out);
	buf_free(&err);
	return d;
}

/* The string key of history entry i. */
static const char *history_str(const json_t *d, size_t i, const char *key)
{
	return json_string_value(json_object_get(json_array_get(json_object_get(d, "history"), i), key));
}

static const char *status_of_app(const json_t *d, const char *app)
{
	const json_t *r = rec_of(d, app);
	return r ? json_string_value(json_object_get(r, "status")) : "absent";
}

/* Runs one generation (refresh: the hot traces read again) at ms and
 * answers the list as it stands then. */
static json_t *regenerate(struct recs *r, struct world *w, bool refresh, int64_t ms)
{
	struct buf err = { 0 };
	assert_int_equal(recs_regenerate(r, w->s, w->sym, PROJECT, refresh, "u1", ms, &err), 0);
	buf_free(&err);
	return answer(r, w, ms);
}

/* Adds the samples of specs as batch seq at ts. */
static void add_batch(struct world *w, const struct sspec *specs, size_t n, uint64_t seq, int64_t ts)
{
	struct buf z = { 0 };
	make_batch(specs, n, seq, ts, EK_ON_CPU, &z);
	append(w->s, &z);
	buf_free(&z);
}

/* Each generation marks its recommendations new, worsened or unchanged
 * against the previous one; regenerate analyses the same hot traces
 * again, refresh reads them again; the listener hears new and worse. */
static void test_recs_generations(void **state)
{
	struct world *w = *state;
	struct buf err = { 0 };
	int64_t now = now_unix_ms();
	struct recs *r = open_shop_recs(w, now);
	struct heard h = { 0 };
	recs_set_listener(r, listen_ev, &h);
	json_t *d = answer(r, w, now);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "generation"), "seq")), 1);
	assert_string_equal(json_string_value(json_object_get(json_object_get(d, "generation"), "trigger")), "request");
	assert_string_equal(status_of_app(d, "web-dep"), "new");
	assert_int_equal(json_integer_value(json_object_get(rec_of(d, "web-dep"), "generated_at")), now);
	assert_int_equal(h.nnew, 3);
	json_decref(d);
	/* The same data: unchanged, nothing heard. */
	d = regenerate(r, w, false, now + 1000);
	assert_string_equal(status_of_app(d, "web-dep"), "unchanged");
	assert_string_equal(status_of_app(d, "batch-c"), "unchanged");
	json_decref(d);
	assert_int_equal(h.n, 3);
	/* The regex trace doubles: regenerate does not read it, refresh does. */
	static const struct sspec more[] = {
		{ { "main", "handle", "pcre2_compile_8", "compile_branch", NULL }, "web", "web-dep", "web-c", 1200 },
	};
	add_batch(w, more, ARRAY_SIZE(more), 2, now - 30000);
	d = regenerate(r, w, false, now + 2000);
	assert_string_equal(status_of_app(d, "web-dep"), "unchanged");
	json_decref(d);
	d = regenerate(r, w, true, now + 3000);
	assert_string_equal(status_of_app(d, "web-dep"), "worsened");
	assert_int_equal(h.nworse, 1);
	assert_string_equal(h.worse_id, json_string_value(json_object_get(rec_of(d, "web-dep"), "id")));
	assert_non_null(json_object_get(rec_of(d, "web-dep"), "previous"));
	json_decref(d);
	/* A dismissed recommendation that worsens is not heard. */
	assert_int_equal(recs_set_state(r, PROJECT, h.worse_id, "dismissed", "u1", now + 3500, &err), 0);
	add_batch(w, more, ARRAY_SIZE(more), 3, now - 20000);
	add_batch(w, more, ARRAY_SIZE(more), 4, now - 10000);
	d = regenerate(r, w, true, now + 4000);
	assert_string_equal(status_of_app(d, "web-dep"), "worsened");
	json_decref(d);
	assert_int_equal(h.nworse, 1);
	/* Each generation is stored; the history names who did what. */
	d = history_of(r, 100);
	assert_int_equal(json_array_size(json_object_get(d, "history")), 5);
	assert_string_equal(history_str(d, 0, "action"), "refresh");
	assert_string_equal(history_str(d, 0, "actor"), "u1");
	assert_string_equal(history_str(d, 1, "action"), "state");
	assert_string_equal(history_str(d, 4, "action"), "regenerate");
	json_decref(d);
	recs_close(r);
	sqlite3 *db = open_recs_db(w);
	sqlite3_stmt *q;
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*), max(seq) FROM rec_generation", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(q, 0), 5);
	assert_int_equal(sqlite3_column_int(q, 1), 5);
	sqlite3_finalize(q);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT group_concat(status, ',') FROM (SELECT status FROM rec_gen_item "
						"WHERE seq >= 3 AND kind = 'cpu' AND savings > 1e-3 AND peak > 0 ORDER BY seq, id)", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_non_null(strstr((const char *)sqlite3_column_text(q, 0), "worsened"));
	sqlite3_finalize(q);
	sqlite3_close(db);
	buf_free(&err);
}

/* A suppressed hot trace leaves every later analysis until unsuppressed. */
static void test_recs_suppress(void **state)
{
	struct world *w = *state;
	struct buf err = { 0 }, out = { 0 };
	int64_t now = now_unix_ms();
	struct recs *r = open_shop_recs(w, now);
	json_t *d = answer(r, w, now);
	const json_t *traces = hot_traces_of(d, "web-dep");
	assert_int_equal(json_array_size(traces), 2);
	char tid[17];
	snprintf(tid, sizeof(tid), "%s", json_string_value(json_object_get(json_array_get(traces, 0), "id")));
	assert_string_equal(json_string_value(json_object_get(json_array_get(traces, 0), "pattern")), "regex-compile");
	json_decref(d);
	assert_int_equal(recs_suppress(r, w->s, w->sym, PROJECT, "XYZ", true, "u2", now, &err), -1);
	buf_reset(&err);
	assert_int_equal(recs_suppress(r, w->s, w->sym, PROJECT, "00000000000000aa", true, "u2", now, &err), -3);
	buf_reset(&err);
	assert_int_equal(recs_suppress(r, w->s, w->sym, PROJECT, tid, false, "u2", now, &err), -3);
	buf_reset(&err);
	assert_int_equal(recs_suppress(r, w->s, w->sym, PROJECT, tid, true, "u2", now + 1, &err), 0);
	d = answer(r, w, now + 1);
	traces = hot_traces_of(d, "web-dep");
	assert_int_equal(json_array_size(traces), 1);
	assert_string_not_equal(json_string_value(json_object_get(json_array_get(traces, 0), "id")), tid);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "generation"), "suppressed_traces")), 1);
	json_decref(d);
	/* Still out after a refresh, and listed with who suppressed it. */
	assert_int_equal(recs_regenerate(r, w->s, w->sym, PROJECT, true, "u2", now + 2, &err), 0);
	d = answer(r, w, now + 2);
	traces = hot_traces_of(d, "web-dep");
	assert_int_equal(json_array_size(traces), 1);
	json_decref(d);
	assert_int_equal(recs_suppressed_json(r, PROJECT, &out, &err), 0);
	d = json_loads(out.data, 0, NULL);
	const json_t *s0 = json_array_get(json_object_get(d, "suppressed"), 0);
	assert_string_equal(json_string_value(json_object_get(s0, "trace_id")), tid);
	assert_string_equal(json_string_value(json_object_get(s0, "application")), "web-dep");
	assert_string_equal(json_string_value(json_object_get(s0, "leaf")), "compile_branch");
	assert_string_equal(json_string_value(json_object_get(s0, "actor")), "u2");
	json_decref(d);
	/* Back. */
	assert_int_equal(recs_suppress(r, w->s, w->sym, PROJECT, tid, false, "u3", now + 3, &err), 0);
	d = answer(r, w, now + 3);
	traces = hot_traces_of(d, "web-dep");
	assert_int_equal(json_array_size(traces), 2);
	json_decref(d);
	d = history_of(r, 2);
	assert_string_equal(history_str(d, 0, "action"), "unsuppress");
	assert_string_equal(history_str(d, 0, "actor"), "u3");
	json_decref(d);
	recs_close(r);
	buf_free(&out);
	buf_free(&err);
}

/* Settings override the flags, persist, and go back with null. */
static void test_recs_settings(void **state)
{
	struct world *w = *state;
	struct buf err = { 0 }, out = { 0 };
	struct recs_config c;
	recs_config_default(&c);
	struct recs *r;
	assert_int_equal(recs_open_dir(w->dir, &c, &r, &err), 0);
	json_t *bad[] = { json_pack("{s:f}", "window_ms", 1.0), json_pack("{s:s}", "step_ms", "1m"),
			  json_pack("{s:f}", "nope", 1.0), json_pack("{s:f}", "min_share", 2.0),
			  json_pack("{s:f, s:f}", "cost_per_core_hour", 1.0, "cost_per_gpu_hour", -1.0), json_array() };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(recs_settings_put(r, bad[i], "admin", 1, &err), -1);
		assert_true(err.len > 0);
		buf_reset(&err);
		json_decref(bad[i]);
	}
	struct recs_config got;
	recs_config_get(r, &got);
	assert_true(got.cost_per_core_hour == 0.04); /* nothing of a refused document applied */
	json_t *ok = json_pack("{s:f, s:I, s:f}", "cost_per_core_hour", 1.5, "window_ms", (json_int_t)3600000,
			       "min_share", 0.01);
	assert_int_equal(recs_settings_put(r, ok, "admin", 1, &err), 0);
	json_decref(ok);
	recs_close(r);
	/* Reopened with other flags: the stored values win. */
	c.stale_ms = 5000;
	assert_int_equal(recs_open_dir(w->dir, &c, &r, &err), 0);
	recs_config_get(r, &got);
	assert_true(got.cost_per_core_hour == 1.5);
	assert_int_equal(got.window_ms, 3600000);
	assert_true(got.min_share == 0.01);
	assert_int_equal(got.stale_ms, 5000);
	recs_settings_json(r, &out);
	json_t *d = json_loads(out.data, 0, NULL);
	assert_int_equal(json_array_size(json_object_get(d, "overridden")), 3);
	assert_true(json_number_value(json_object_get(json_object_get(d, "defaults"), "cost_per_core_hour")) == 0.04);
	json_decref(d);
	ok = json_pack("{s:n}", "cost_per_core_hour");
	assert_int_equal(recs_settings_put(r, ok, "admin", 2, &err), 0);
	json_decref(ok);
	recs_config_get(r, &got);
	assert_true(got.cost_per_core_hour == 0.04);
	recs_close(r);
	buf_free(&out);
	buf_free(&err);
}

/* The background thread makes generations without a request. */
static void test_recs_thread(void **state)
{
	struct world *w = *state;
	struct buf err = { 0 };
	int64_t now = now_unix_ms();
	append_shop(w, now);
	struct projects *pj;
	assert_int_equal(projects_open(w->dir, &pj, &err), 0);
	struct recs_config c;
	recs_config_default(&c);
	c.stale_ms = 1000;
	struct recs *r;
	assert_int_equal(recs_open_dir(w->dir, &c, &r, &err), 0);
	struct heard h = { 0 };
	recs_set_listener(r, listen_ev, &h);
	assert_int_equal(recs_start(r, w->s, w->sym, pj, &err), 0);
	sqlite3 *db = open_recs_db(w);
	sqlite3_busy_timeout(db, 5000);
	int n = 0;
	for (int i = 0; i < 100 && n < 2; i++) {
		usleep(100000);
		sqlite3_stmt *q;
		assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM rec_generation WHERE trigger = 'schedule'",
						    -1, &q, NULL), SQLITE_OK);
		if (sqlite3_step(q) == SQLITE_ROW)
			n = sqlite3_column_int(q, 0);
		sqlite3_finalize(q);
	}
	sqlite3_close(db);
	assert_true(n >= 2);
	assert_int_equal(h.nnew, 3); /* the first generation's; the next ones unchanged */
	recs_close(r);
	projects_close(pj);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_patterns_compile),
	cmocka_unit_test(test_patterns_each),
	cmocka_unit_test(test_patterns_claim_once),
	cmocka_unit_test(test_app_of),
	cmocka_unit_test(test_min_share_summed),
	cmocka_unit_test(test_empty_trace),
	WORLD_TEST(test_hottraces_store),
	WORLD_TEST(test_hottraces_batches),
	WORLD_TEST(test_recs_state),
	WORLD_TEST(test_recs_generations),
	WORLD_TEST(test_recs_suppress),
	WORLD_TEST(test_recs_settings),
	WORLD_TEST(test_recs_thread))
