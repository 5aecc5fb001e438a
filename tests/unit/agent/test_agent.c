/* Unit tests: the agent's parsers, configuration, queue, batch builder and
 * the conversion of raw BPF samples into batch stacks. */
#include "testutil.h"
#include "otlpfixture.h"
#include "procfixture.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/types.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "agent/attrib.h"
#include "agent/batch.h"
#include "agent/collect.h"
#include "agent/config.h"
#include "agent/cudaship.h"
#include "agent/kallsyms.h"
#include "agent/kubelet.h"
#include "agent/maps.h"
#include "agent/memstats.h"
#include "agent/oncpu.h"
#include "agent/otlp_export.h"
#include "agent/proc.h"
#include "agent/python.h"
#include "agent/selfstats.h"
#include "agent/sendq.h"
#include "agent/symupload.h"
#include "oncpu_types.h"
#include "unwind_types.h"
#include "server/ingest/batch_decode.h"
#include "server/ingest/otlp.h"
#include "compress.h"
#include "otlp_profiles.pb-c.h"
#include "util.h"

/* Loads argv into *cfg and asserts that it succeeds, showing the error if not. */
static void load_ok(struct agent_config *cfg, int argc, char **argv, char **envp)
{
	struct buf err = { 0 };
	int rc = agent_config_load(cfg, argc, argv, envp, &err);
	if (rc != 0)
		fail_msg("agent_config_load returned %d: %s", rc, err.data ? err.data : "");
	buf_free(&err);
}

/* Loads the smallest valid command line: the defaults. */
static void load_defaults(struct agent_config *cfg, char **envp)
{
	char *argv[] = { "a", "-collection-agent=h:1", NULL };
	load_ok(cfg, 2, argv, envp);
}

/* An agent.conf in a fresh directory, and the -config= argument that
 * names it; rm_temp_dir(c.dir) removes it. */
struct conf_file {
	char *dir;
	char path[256];
	char arg[300];
};

static void conf_file_open(struct conf_file *c, const char *text)
{
	c->dir = make_temp_dir();
	snprintf(c->path, sizeof(c->path), "%s/agent.conf", c->dir);
	snprintf(c->arg, sizeof(c->arg), "-config=%s", c->path);
	write_text(c->path, text);
}

static void test_config_precedence(void **state)
{
	(void)state;
	struct conf_file cf;
	conf_file_open(&cf, "# comment\n"
			    "collection-agent file:1\n"
			    "project from-file\n"
			    "reporter-interval 10s   # trailing comment\n"
			    "on-cpu-sampling-rate=7\n"
			    "disable-tls\n");
	char *argv[] = { "ember-agent", cf.arg, "--project", "from-cli", "-v", NULL };
	char *envp[] = { "EMBER_PROJECT=from-env", "EMBER_REPORTER_INTERVAL=20s",
			 "EMBER_COLLECTION_AGENT=env:2", NULL };
	struct agent_config cfg;
	load_ok(&cfg, 5, argv, envp);
	assert_string_equal(cfg.project, "from-cli");         /* cli > env > file */
	assert_int_equal(cfg.reporter_interval_ms, 20000);    /* env > file */
	assert_string_equal(cfg.collection_agent, "env:2");
	assert_int_equal(cfg.on_cpu_hz, 7);                   /* file > default */
	assert_true(cfg.disable_tls);
	assert_true(cfg.verbose);
	agent_config_free(&cfg);
	rm_temp_dir(cf.dir);
}

static void expect_error(char **argv, int argc, char **envp, const char *needle)
{
	struct agent_config cfg;
	struct buf err = { 0 };
	assert_int_equal(agent_config_load(&cfg, argc, argv, envp, &err), -1);
	if (!strstr(err.data, needle))
		fail_msg("error \"%s\" does not mention \"%s\"", err.data, needle);
	agent_config_free(&cfg);
	buf_free(&err);
}

/* The smallest valid command line and flag (one argument) is refused with
 * an error that mentions needle. */
static void expect_flag_error(const char *flag, const char *needle)
{
	char *envp[] = { NULL };
	char *argv[] = { "a", "-collection-agent=h:1", (char *)flag, NULL };
	expect_error(argv, 3, envp, needle);
}

static void test_metrics_flags(void **state)
{
	(void)state;
	char *envp[] = { NULL };
	struct agent_config cfg;
	load_defaults(&cfg, envp);
	assert_int_equal(cfg.metrics_interval_ms, 30000);
	assert_true(cfg.host_metrics);
	assert_true(cfg.gpu_metrics);
	assert_string_equal(cfg.nvml_path, "");
	assert_false(cfg.nvml_auto_scan);
	agent_config_free(&cfg);
	char *e[] = { "EMBER_COLLECT_METRICS_INTERVAL=5s", "EMBER_ENABLE_GPU_METRICS=false",
		      "EMBER_NVML_PATH=/opt/nv/libnvidia-ml.so.1", NULL };
	char *s[] = { "a", "-collection-agent=h:1", "--enable-host-metrics=false", "-nvml-auto-scan", NULL };
	load_ok(&cfg, 4, s, e);
	assert_int_equal(cfg.metrics_interval_ms, 5000);
	assert_false(cfg.host_metrics);
	assert_false(cfg.gpu_metrics);
	assert_true(cfg.nvml_auto_scan);
	assert_string_equal(cfg.nvml_path, "/opt/nv/libnvidia-ml.so.1");
	agent_config_free(&cfg);
	expect_flag_error("-collect-metrics-interval=500ms", "-collect-metrics-interval");
	expect_flag_error("-collect-metrics-interval=2h", "-collect-metrics-interval");
	expect_flag_error("-enable-host-metrics=maybe", "-enable-host-metrics");
	expect_flag_error("-nvml-path=relative/libnvidia-ml.so", "-nvml-path");
	expect_flag_error("-enable-gpu-metrics=2", "-enable-gpu-metrics");
}

static void test_config_errors(void **state)
{
	(void)state;
	char *envp[] = { NULL };
	expect_flag_error("-on-cpu-sampling-rate=0", "-on-cpu-sampling-rate");
	char *a2[] = { "a", "-collection-agent=h:1", "-reporter-interval", "soon", NULL };
	expect_error(a2, 4, envp, "-reporter-interval");
	char *a3[] = { "a", "-bogus", NULL };
	expect_error(a3, 2, envp, "unknown flag -bogus");
	char *a4[] = { "a", NULL };
	expect_error(a4, 1, envp, "-collection-agent");
	char *a5[] = { "a", "-collection-agent=nohostport", NULL };
	expect_error(a5, 2, envp, "host:port");
	char *a6[] = { "a", "-collection-agent=h:1", "-insecure", "-disable-tls", NULL };
	expect_error(a6, 4, envp, "-insecure");
	expect_flag_error("-project", "missing value");
	char *e8[] = { "EMBER_ON_CPU_SAMPLING_RATE=fast", NULL };
	char *a8[] = { "a", "-collection-agent=h:1", NULL };
	expect_error(a8, 2, e8, "EMBER_ON_CPU_SAMPLING_RATE");
	expect_flag_error("-config=/nonexistent.conf", "cannot read");
	expect_flag_error("-disable-tls=perhaps", "true or false");
	expect_flag_error("-cluster-name=bad\nname", "-cluster-name");
	expect_flag_error("-tracers=python,cobol", "unknown tracer \"cobol\"");
	struct agent_config cfg;
	char *t1[] = { "a", "-collection-agent=h:1", "-tracers=none", NULL };
	load_ok(&cfg, 3, t1, envp);
	assert_false(cfg.trace_python);
	agent_config_free(&cfg);
	char *t2[] = { "a", "-collection-agent=h:1", "-tracers=nodejs,python", NULL };
	load_ok(&cfg, 3, t2, envp);
	assert_true(cfg.trace_python);
	agent_config_free(&cfg);
	load_defaults(&cfg, envp);
	assert_true(cfg.trace_python);
	agent_config_free(&cfg);
	char long_type[160];
	memset(long_type, 'x', sizeof(long_type) - 1);
	long_type[sizeof(long_type) - 1] = '\0';
	char *a12[] = { "a", "-collection-agent=h:1", "-host-type", long_type, NULL };
	expect_error(a12, 4, envp, "-host-type");
	char *e13[] = { "EMBER_MACHINE_ID=\x01", NULL };
	expect_error(a8, 2, e13, "-machine-id");
}

static const char kallsyms_text[] =
	"ffffffff81000000 T _stext\n"
	"ffffffff81000100 t leaf_fn\n"
	"ffffffff81000200 T outer_fn\n"
	"ffffffff81000300 D some_data\n"
	"garbage line without fields\n"
	"zzzzzzzzzzzzzzzz T bad_address\n"
	"ffffffffc0000000 t mod_fn\t[mymod]\n"
	"0000000000000000 T zero_is_hidden\n";

static void test_kallsyms(void **state)
{
	(void)state;
	struct kallsyms k = { 0 };
	assert_int_equal(kallsyms_parse(&k, kallsyms_text, sizeof(kallsyms_text) - 1), 4);
	const char *mod;
	assert_string_equal(kallsyms_lookup(&k, 0xffffffff81000150, &mod), "leaf_fn");
	assert_string_equal(mod, "");
	assert_string_equal(kallsyms_lookup(&k, 0xffffffff81000200, &mod), "outer_fn");
	assert_string_equal(kallsyms_lookup(&k, 0xffffffffc0000010, &mod), "mod_fn");
	assert_string_equal(mod, "mymod");
	assert_null(kallsyms_lookup(&k, 0x1000, &mod));
	/* Far above every symbol: unknown, not the last symbol. */
	assert_null(kallsyms_lookup(&k, 0xffffffffc8000000, &mod));
	kallsyms_free(&k);
}

static void test_maps_and_stat(void **state)
{
	(void)state;
	struct maps_line m;
	const char *l1 = "7f1c2a000000-7f1c2a1c5000 r-xp 00028000 fe:01 1835  /usr/lib/x86_64-linux-gnu/libc.so.6\n";
	assert_int_equal(maps_parse_line(l1, strlen(l1), &m), 0);
	assert_int_equal(m.start, 0x7f1c2a000000);
	assert_int_equal(m.end, 0x7f1c2a1c5000);
	assert_int_equal(m.offset, 0x28000);
	assert_true(m.exec);
	assert_int_equal(m.dev_major, 0xfe);
	assert_int_equal(m.inode, 1835);
	assert_int_equal(m.path_len, strlen("/usr/lib/x86_64-linux-gnu/libc.so.6"));
	const char *l2 = "00400000-00452000 r-xp 00000000 08:02 173521 /tmp/a b (deleted)";
	assert_int_equal(maps_parse_line(l2, strlen(l2), &m), 0);
	assert_true(m.deleted);
	assert_int_equal(m.path_len, strlen("/tmp/a b"));
	const char *l3 = "7ffd1b5f0000-7ffd1b5f2000 r-xp 00000000 00:00 0                          [vdso]";
	assert_int_equal(maps_parse_line(l3, strlen(l3), &m), 0);
	assert_int_equal(m.inode, 0);
	const char *bad[] = { "", "zzzz-1 r-xp 0 0:0 0", "2000-1000 r-xp 00000000 00:00 0",
			      "1000-2000 r-xp", "1000-2000 r-x 0 0:0 0", "11111111111111111-2 r-xp 0 0:0 0" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(maps_parse_line(bad[i], strlen(bad[i]), &m), -1);

	uint64_t st;
	const char *stat = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 100";
	assert_int_equal(proc_parse_stat_start(stat, strlen(stat), &st), 0);
	assert_int_equal(st, 987654);
	assert_int_equal(proc_parse_stat_start("4242 no paren", 13, &st), -1);
	assert_int_equal(proc_parse_stat_start("1 (x) S 1", 9, &st), -1);
}

static void test_cpu_list(void **state)
{
	(void)state;
	int ids[16];
	assert_int_equal(parse_cpu_list("0-3,8,10-11\n", ids, 16), 7);
	assert_int_equal(ids[4], 8);
	assert_int_equal(ids[6], 11);
	assert_int_equal(parse_cpu_list("0", ids, 16), 1);
	assert_int_equal(parse_cpu_list("3-1", ids, 16), -1);
	assert_int_equal(parse_cpu_list("0-100", ids, 16), -1);
	assert_int_equal(parse_cpu_list("x", ids, 16), -1);
}

static void test_sendq_drops_oldest(void **state)
{
	(void)state;
	struct sendq q;
	sendq_init(&q, 100);
	for (uint64_t i = 1; i <= 5; i++)
		sendq_push(&q, xstrdup("0123456789012345678901234567890123456789"), 40, i);
	/* 100 bytes hold two 40-byte batches: 1..3 were dropped. */
	assert_int_equal(q.count, 2);
	assert_int_equal(q.dropped_batches, 3);
	assert_int_equal(q.dropped_bytes, 120);
	struct sendq_item *it = sendq_pop(&q);
	assert_int_equal(it->seq, 4);
	/* Sending failed: it goes back first. */
	sendq_push_front(&q, it);
	assert_int_equal(q.head->seq, 4);
	sendq_push(&q, xstrdup("x"), 30, 6); /* evicts 4 */
	assert_int_equal(q.head->seq, 5);
	it = sendq_pop(&q);
	assert_int_equal(it->seq, 5);
	sendq_push(&q, xstrdup("y"), 60, 7); /* queue: 6 (30) + 7 (60) */
	/* Putting 5 back would exceed the budget: the oldest is dropped. */
	sendq_push_front(&q, it);
	assert_int_equal(q.count, 2);
	assert_int_equal(q.head->seq, 6);
	/* A batch larger than the budget is dropped at once. */
	sendq_push(&q, xstrdup("z"), 1000, 8);
	assert_int_equal(q.count, 2);
	assert_int_equal(q.bytes, 90);
	sendq_free(&q);
}

static void test_batch_roundtrip(void **state)
{
	(void)state;
	struct batch b;
	batch_init(&b);
	struct file_id fid;
	memset(fid.b, 7, sizeof(fid.b));
	const uint64_t segs[1][3] = { { 0x1000, 0x401000, 0x2000 } };
	uint32_t file = batch_file(&b, 3, &fid, "app", (const uint8_t *)"\x01\x02", 2, segs, 1);
	assert_int_equal(batch_file(&b, 3, &fid, "app", NULL, 0, NULL, 0), file);
	struct bframe f1 = { .type = FT_NATIVE, .file = file, .address = 0x1234 };
	struct bframe f2 = { .type = FT_KERNEL, .name = batch_string(&b, "schedule", 8),
			     .binary = batch_string(&b, "vmlinux", 7) };
	uint32_t i1 = batch_frame(&b, &f1), i2 = batch_frame(&b, &f2);
	assert_int_equal(batch_frame(&b, &f1), i1);
	uint32_t frames[] = { i1, i2 };
	uint32_t st = batch_stack(&b, frames, 2);
	assert_int_equal(batch_stack(&b, frames, 2), st);
	uint32_t kv[] = { batch_string(&b, "host.name", 9), batch_string(&b, "h1", 2) };
	uint32_t res = batch_resource(&b, kv, 2);
	batch_add(&b, st, res, EK_ON_CPU, 1);
	batch_add(&b, st, res, EK_ON_CPU, 2);
	assert_int_equal(batch_samples(&b), 1);

	struct batch_meta meta = { "inst", 9, "default", 1700000000000, 1700000005000, 19 };
	struct buf z = { 0 }, err = { 0 };
	assert_int_equal(batch_encode(&b, &meta, &z), 0);
	Ember__Ingest__V1__Batch *d = batch_decode(z.data, z.len, &err);
	if (!d)
		fail_msg("decode: %s", err.data);
	assert_int_equal(d->sequence, 9);
	assert_int_equal(d->n_samples, 1);
	assert_int_equal(d->samples[0]->value, 3);
	assert_int_equal(d->n_files, 1);
	assert_memory_equal(d->files[0]->file_id.data, fid.b, 16);
	assert_int_equal(d->files[0]->build_id.len, 2);
	assert_int_equal(d->files[0]->n_exec_segments, 3);
	assert_true(d->files[0]->exec_segments[1] == 0x401000);
	assert_int_equal(d->n_stacks, 1);
	assert_int_equal(d->stacks[0]->n_frames, 2);
	const Ember__Ingest__V1__Frame *k = d->frames[d->stacks[0]->frames[1]];
	assert_string_equal(d->strings[k->name], "schedule");
	batch_decode_free(d);

	/* Reset keeps nothing from the previous interval. */
	batch_reset(&b);
	assert_int_equal(batch_samples(&b), 0);
	assert_int_equal(b.nfiles, 0);
	assert_int_equal(batch_file(&b, 3, &fid, "app", NULL, 0, NULL, 0), 1);
	batch_free(&b);
	buf_free(&z);
	buf_free(&err);
}

/* --- collect: raw samples against a fake /proc ------------------------- */

struct new_files {
	int count;
	char name[64];
};

static void on_new_file(void *ctx, uint32_t index, const struct agent_file *f, int fd)
{
	struct new_files *nf = ctx;
	(void)index;
	nf->count++;
	snprintf(nf->name, sizeof(nf->name), "%s", f->name);
	close(fd);
}

/* A collector over the fake /proc under root, with its own file registry,
 * process table and batch; fixture_close frees them. */
struct collect_fixture {
	struct new_files nf;
	struct file_registry files;
	struct proc_table procs;
	struct batch b;
	struct collector c;
};

static void fixture_open(struct collect_fixture *f, const char *root, const struct kallsyms *k,
			 const struct vdso *v)
{
	memset(f, 0, sizeof(*f));
	files_init(&f->files, root, on_new_file, &f->nf);
	proc_table_init(&f->procs, &f->files, root);
	batch_init(&f->b);
	f->c = (struct collector){ .batch = &f->b, .procs = &f->procs, .files = &f->files,
				   .ksyms = k, .vdso = v, .host_name = "h", .host_arch = "amd64",
				   .ns_per_tick = 10000000 };
}

static void fixture_close(struct collect_fixture *f)
{
	collector_free(&f->c);
	batch_free(&f->b);
	proc_table_free(&f->procs);
	files_free(&f->files);
}

/* The kernel symbols of kallsyms_text and this process's vDSO. */
static void kernel_open(struct kallsyms *k, struct vdso *v)
{
	memset(k, 0, sizeof(*k));
	kallsyms_parse(k, kallsyms_text, sizeof(kallsyms_text) - 1);
	vdso_load(v);
}

static void kernel_close(struct kallsyms *k, struct vdso *v)
{
	vdso_free(v);
	kallsyms_free(k);
}

/* A fake /proc under root with process 4242 (started at tick 500,
 * executable "fake_app"): this test binary mapped at 0x400000 (file offset
 * 0x1000), anonymous code at 0x700000 and a vDSO. */
static void write_fake_app(const char *root)
{
	char exe[512];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	struct stat st;
	assert_int_equal(stat(exe, &st), 0);

	fake_proc(root, 4242, "worker", 'R', 500);
	fake_proc_link(root, 4242, "exe", "/opt/app/bin/fake_app");
	fake_proc_link(root, 4242, "root", "/");
	char maps[2048];
	snprintf(maps, sizeof(maps),
		 "00400000-00500000 r-xp 00001000 %02x:%02x %llu %s\n"
		 "00600000-00601000 rw-p 00000000 00:00 0\n"
		 "00700000-00710000 r-xp 00000000 00:00 0\n"
		 "7fff00000000-7fff00002000 r-xp 00000000 00:00 0 [vdso]\n",
		 major(st.st_dev), minor(st.st_dev), (unsigned long long)st.st_ino, exe);
	fake_proc_file(root, 4242, "maps", maps);
}

/* An on-CPU record of thread "worker-1" of write_fake_app's process,
 * without frames. */
static void worker_sample(struct oncpu_sample *s)
{
	memset(s, 0, sizeof(*s));
	s->kind = ONCPU_KIND_ON_CPU;
	s->value = 1;
	s->pid = 4242;
	s->tid = 4243;
	s->proc_start_ns = 500ull * 10000000ull;
	memcpy(s->comm, "worker-1", 9);
	s->unwind_mode = UWM_CFI;
}

static void test_collect(void **state)
{
	(void)state;
	char *root = make_temp_dir();
	char path[512];
	write_fake_app(root);

	struct kallsyms k;
	struct vdso v;
	kernel_open(&k, &v);
	struct collect_fixture f;
	fixture_open(&f, root, &k, &v);
	static const char *const host_kv[] = { "cluster.name", "c1", "host.type", "" };
	f.c.host_name = "testhost";
	f.c.host_kv = host_kv;
	f.c.nhost_kv = 4;
	struct collector *c = &f.c;
	struct batch *b = &f.b;

	struct oncpu_sample s;
	worker_sample(&s);
	/* Kernel frames first, then user frames, each innermost first. */
	s.kstack_len = 2;
	s.frames[0] = 0xffffffff81000110; /* leaf_fn */
	s.frames[1] = 0xffffffff81000201; /* returns into outer_fn */
	s.ustack_len = 4;
	s.frames[2] = 0x400100; /* leaf: exact address */
	s.frames[3] = 0x400201; /* return address: looked up at - 1 */
	s.frames[4] = 0x700010; /* anonymous executable memory */
	s.frames[5] = 0x900000; /* in no mapping: the stack broke here */
	size_t size = ONCPU_HDR_SIZE + 6 * sizeof(__u64);
	collect_sample(c, &s, size, 1000);
	collect_sample(c, &s, size, 2000);
	/* A truncated record is counted, not used. */
	collect_sample(c, &s, ONCPU_HDR_SIZE + 8, 3000);
	assert_int_equal(c->stats.samples, 2);
	assert_int_equal(c->stats.malformed, 1);
	assert_int_equal(c->stats.cfi_stacks, 2);
	assert_int_equal(c->stats.unknown_frames, 4); /* per sample: anonymous code, broken stack */
	assert_int_equal(f.nf.count, 1);
	assert_int_equal(batch_samples(b), 1);
	assert_int_equal(b->samples[0].value, 2);

	/* The stack, outermost first. */
	uint32_t st_idx = b->samples[0].stack;
	uint32_t *ids = b->stack_ids + b->stack_off[st_idx];
	size_t depth = b->stack_off[st_idx + 1] - b->stack_off[st_idx];
	assert_int_equal(depth, 6);
	assert_int_equal(b->frames[ids[0]].type, FT_ERROR);
	assert_string_equal(strtab_get(&b->strings, b->frames[ids[0]].name), "[unknown mapping]");
	assert_string_equal(strtab_get(&b->strings, b->frames[ids[1]].name), "[anonymous code]");
	assert_int_equal(b->frames[ids[2]].type, FT_NATIVE);
	assert_int_equal(b->frames[ids[2]].address, 0x400200 - 0x400000 + 0x1000);
	assert_int_equal(b->frames[ids[3]].address, 0x400100 - 0x400000 + 0x1000);
	assert_int_equal(b->frames[ids[2]].file, 1);
	assert_string_equal(strtab_get(&b->strings, b->frames[ids[4]].name), "outer_fn");
	assert_string_equal(strtab_get(&b->strings, b->frames[ids[5]].name), "leaf_fn");
	assert_string_equal(strtab_get(&b->strings, b->frames[ids[5]].binary), "vmlinux");

	/* A broken chain in the middle: the frames beyond it are dropped under
	 * one error frame, not shown as a ladder of garbage. */
	struct oncpu_sample s2 = s;
	s2.unwind_mode = UWM_KERNEL_FP;
	s2.kstack_len = 0;
	s2.ustack_len = 4;
	s2.frames[0] = 0x400100;
	s2.frames[1] = 0x900000;
	s2.frames[2] = 0x400201;
	s2.frames[3] = 0x900010;
	collect_sample(c, &s2, ONCPU_HDR_SIZE + 4 * sizeof(__u64), 2500);
	uint32_t st2 = b->samples[1].stack;
	uint32_t *ids2 = b->stack_ids + b->stack_off[st2];
	assert_int_equal(b->stack_off[st2 + 1] - b->stack_off[st2], 2);
	assert_string_equal(strtab_get(&b->strings, b->frames[ids2[0]].name), "[unknown mapping]");
	assert_int_equal(b->frames[ids2[1]].address, 0x1100);

	/* The BPF unwinder reports why it stopped: an error frame says so. */
	struct oncpu_sample s3 = s;
	s3.kstack_len = 0;
	s3.ustack_len = 1;
	s3.frames[0] = 0x400100;
	s3.unwind_error = UWE_TRUNCATED;
	collect_sample(c, &s3, ONCPU_HDR_SIZE + sizeof(__u64), 2600);
	uint32_t st3 = b->samples[2].stack;
	uint32_t *ids3 = b->stack_ids + b->stack_off[st3];
	assert_string_equal(strtab_get(&b->strings, b->frames[ids3[0]].name), "[truncated stack]");
	assert_int_equal(c->stats.truncated, 1);

	/* The resource names the executable and the thread. */
	uint32_t r = b->samples[0].resource;
	bool saw_exe = false, saw_thread = false, saw_cluster = false, saw_type = false;
	for (uint32_t i = b->res_off[r]; i < b->res_off[r + 1]; i += 2) {
		const char *key = strtab_get(&b->strings, b->res_ids[i]);
		const char *val = strtab_get(&b->strings, b->res_ids[i + 1]);
		/* Host attributes from flags: set ones only. */
		if (strcmp(key, "cluster.name") == 0) {
			assert_string_equal(val, "c1");
			saw_cluster = true;
		}
		saw_type |= strcmp(key, "host.type") == 0;
		if (strcmp(key, "process.executable.name") == 0) {
			assert_string_equal(val, "fake_app");
			saw_exe = true;
		}
		if (strcmp(key, "thread.name") == 0) {
			assert_string_equal(val, "worker-1");
			saw_thread = true;
		}
	}
	assert_true(saw_exe && saw_thread && saw_cluster && !saw_type);

	/* The pid is reused by another program: the entry is replaced. */
	snprintf(path, sizeof(path), "%s/4242/exe", root);
	unlink(path);
	assert_int_equal(symlink("/usr/bin/other", path), 0);
	s.proc_start_ns = 900ull * 10000000ull;
	struct proc *p = proc_table_get(&f.procs, 4242, 900, 0, "x", 5000);
	assert_string_equal(p->exe_name, "other");
	assert_int_equal(proc_table_count(&f.procs), 1);

	/* The process (its /proc start time is 500) execs a third program: a
	 * sample with a higher exec count has it read again at once, an
	 * older or equal one does not. */
	unlink(path);
	assert_int_equal(symlink("/usr/bin/third", path), 0);
	p = proc_table_get(&f.procs, 4242, 500, 0, "x", 5001);
	assert_string_equal(p->exe_name, "other");
	p = proc_table_get(&f.procs, 4242, 500, 3, "x", 5002);
	assert_string_equal(p->exe_name, "third");
	assert_int_equal(p->exec_id, 3);
	assert_int_equal(p->maps_read_ns, 5002);
	p = proc_table_get(&f.procs, 4242, 500, 2, "x", 5003);
	assert_int_equal(p->exec_id, 3);
	assert_int_equal(p->maps_read_ns, 5002);
	assert_int_equal(proc_table_count(&f.procs), 1);

	/* A live process whose last sample came after the sweep's clock was
	 * read (samples drained in between) is kept, not taken for idle. */
	proc_table_sweep(&f.procs, 5000, 1000000000ull);
	assert_int_equal(proc_table_count(&f.procs), 1);

	/* Exited processes are swept: one sampled since the previous sweep
	 * is not looked up in /proc yet, the next sweep finds it gone. */
	snprintf(path, sizeof(path), "rm -rf %s/4242", root);
	assert_int_equal(system(path), 0);
	proc_table_get(&f.procs, 4242, 500, 3, "x", 5500);
	proc_table_sweep(&f.procs, 6000, 1000000000ull);
	assert_int_equal(proc_table_count(&f.procs), 1);
	proc_table_sweep(&f.procs, 7000, 1000000000ull);
	assert_int_equal(proc_table_count(&f.procs), 0);

	fixture_close(&f);
	kernel_close(&k, &v);
	rm_temp_dir(root);
}


/* -enable-off-cpu and -off-cpu-sampling-rate: off by default; the flag, or
 * a non-zero rate set explicitly (command line, environment or config
 * file, even to the default value), turns it on. */
static void expect_off_cpu(int argc, char **argv, char **envp, bool want_on, uint64_t want_hz)
{
	struct agent_config cfg;
	struct buf err = { 0 };
	int rc = agent_config_load(&cfg, argc, argv, envp, &err);
	if (rc != 0)
		fail_msg("agent_config_load returned %d: %s", rc, err.data ? err.data : "");
	assert_int_equal(cfg.off_cpu, want_on);
	assert_int_equal(cfg.off_cpu_hz, want_hz);
	agent_config_free(&cfg);
	buf_free(&err);
}

/* Two collectors over the same samples, one caching repeats (its batch set
 * by collector_set_batch), one not: the batches and counters must be the
 * same, and repeats must have been found. */
static void assert_same_batches(const struct batch *a, const struct batch *b)
{
	assert_int_equal(a->nsamples, b->nsamples);
	assert_int_equal(a->total_value, b->total_value);
	for (size_t i = 0; i < a->nsamples; i++) {
		assert_int_equal(a->samples[i].stack, b->samples[i].stack);
		assert_int_equal(a->samples[i].resource, b->samples[i].resource);
		assert_int_equal(a->samples[i].kind, b->samples[i].kind);
		assert_int_equal(a->samples[i].value, b->samples[i].value);
	}
	assert_int_equal(a->nstacks, b->nstacks);
	assert_int_equal(a->nstack_ids, b->nstack_ids);
	assert_memory_equal(a->stack_ids, b->stack_ids, a->nstack_ids * sizeof(uint32_t));
	assert_int_equal(a->nframes, b->nframes);
	for (size_t i = 0; i < a->nframes; i++) {
		assert_int_equal(a->frames[i].type, b->frames[i].type);
		assert_int_equal(a->frames[i].address, b->frames[i].address);
		assert_int_equal(a->frames[i].name, b->frames[i].name);
	}
}

static void test_collect_repeats(void **state)
{
	(void)state;
	char *root = make_temp_dir();
	write_fake_app(root);
	struct kallsyms k;
	struct vdso v;
	kernel_open(&k, &v);
	struct collect_fixture cached, plain;
	fixture_open(&cached, root, &k, &v);
	fixture_open(&plain, root, &k, &v);
	collector_set_batch(&cached.c, &cached.b);

	/* Four raw samples: a good stack, the same with another thread name,
	 * a stack broken at an address in no mapping (never kept), and an
	 * off-CPU one; then the same stack after an exec. */
	struct oncpu_sample base;
	worker_sample(&base);
	base.unwind_error = UWE_TRUNCATED;
	base.kstack_len = 1;
	base.frames[0] = 0xffffffff81000110;
	base.ustack_len = 3;
	base.frames[1] = 0x400100;
	base.frames[2] = 0x400201;
	base.frames[3] = 0x700010;
	struct oncpu_sample raws[5];
	for (int i = 0; i < 5; i++)
		raws[i] = base;
	memcpy(raws[1].comm, "worker-2", 9);
	raws[2].frames[3] = 0x900000;
	raws[3].kind = ONCPU_KIND_OFF_CPU;
	raws[4].exec_id = 0; /* changed below, after the first round */
	size_t size = ONCPU_HDR_SIZE + 4 * sizeof(__u64);

	for (int round = 0; round < 6; round++) {
		for (int i = 0; i < 4; i++) {
			raws[3].value = 1000000ull * (uint64_t)(round + 1);
			/* A thread id or time of its own does not make a sample new. */
			raws[i].tid = 4243 + (uint32_t)round;
			raws[i].ktime_ns = 77 * (uint64_t)round;
			collect_sample(&cached.c, &raws[i], size, 1000 + (uint64_t)round);
			collect_sample(&plain.c, &raws[i], size, 1000 + (uint64_t)round);
		}
	}
	assert_same_batches(&cached.b, &plain.b);
	assert_memory_equal(&cached.c.stats, &plain.c.stats, sizeof(cached.c.stats));
	assert_int_equal(cached.b.nsamples, 4);
	assert_int_equal(cached.b.samples[3].value, 21000000); /* 1 + 2 + ... + 6 ms */
	/* Three kept stacks found 5 times each; the broken one never. */
	assert_int_equal(cached.c.samples.hits, 15);
	assert_int_equal(cached.c.samples.misses, 9);
	assert_int_equal(cached.c.stats.truncated, 18);

	/* A Python frame not named (no symbolizer here) is not kept: the
	 * next record may name it. */
	struct oncpu_sample py = base;
	py.ustack_len = 2;
	py.frames[1] = PY_FRAME_FLAG | 0x7f0000001000ull;
	py.frames[2] = 0x7f0000002000ull;
	for (int i = 0; i < 2; i++) {
		collect_sample(&cached.c, &py, ONCPU_HDR_SIZE + 3 * sizeof(__u64), 1500);
		collect_sample(&plain.c, &py, ONCPU_HDR_SIZE + 3 * sizeof(__u64), 1500);
	}
	assert_int_equal(cached.c.samples.hits, 15);
	assert_int_equal(cached.c.samples.misses, 11);
	assert_int_equal(cached.c.stats.python_unknown, 2);
	assert_same_batches(&cached.b, &plain.b);

	/* The process execs: the same raw frames are a new sample. */
	raws[4].exec_id = 1;
	collect_sample(&cached.c, &raws[4], size, 2000);
	collect_sample(&plain.c, &raws[4], size, 2000);
	assert_int_equal(cached.c.samples.hits, 15);
	assert_same_batches(&cached.b, &plain.b);

	/* A new batch starts with nothing kept: its rows are its own. */
	struct batch b2, p2;
	batch_init(&b2);
	batch_init(&p2);
	collector_set_batch(&cached.c, &b2);
	plain.c.batch = &p2;
	collect_sample(&cached.c, &raws[0], size, 3000);
	collect_sample(&plain.c, &raws[0], size, 3000);
	collect_sample(&cached.c, &raws[0], size, 3000);
	collect_sample(&plain.c, &raws[0], size, 3000);
	assert_same_batches(&b2, &p2);
	assert_int_equal(b2.nsamples, 1);
	assert_int_equal(b2.samples[0].value, 2);
	assert_int_equal(cached.c.samples.hits, 16);

	/* Kernel frames named in an earlier batch (one kallsyms lacks among
	 * them) are named, and counted, the same in the next one. */
	struct oncpu_sample unk = raws[0];
	unk.kstack_len = 2;
	unk.ustack_len = 0;
	unk.frames[1] = 0x1000;
	size_t usize = ONCPU_HDR_SIZE + 2 * sizeof(__u64);
	collect_sample(&cached.c, &unk, usize, 3000);
	collect_sample(&plain.c, &unk, usize, 3000);
	struct batch b3, p3;
	batch_init(&b3);
	batch_init(&p3);
	collector_set_batch(&cached.c, &b3);
	plain.c.batch = &p3;
	for (int i = 0; i < 2; i++) {
		collect_sample(&cached.c, i ? &raws[0] : &unk, i ? size : usize, 4000);
		collect_sample(&plain.c, i ? &raws[0] : &unk, i ? size : usize, 4000);
	}
	assert_same_batches(&b2, &p2);
	assert_same_batches(&b3, &p3);
	assert_int_equal(b3.nframes, p3.nframes);
	for (size_t i = 0; i < b3.nframes; i++)
		assert_int_equal(b3.frames[i].binary, p3.frames[i].binary);
	assert_memory_equal(&cached.c.stats, &plain.c.stats, sizeof(cached.c.stats));

	batch_free(&b3);
	batch_free(&p3);
	batch_free(&b2);
	batch_free(&p2);
	fixture_close(&cached);
	fixture_close(&plain);
	kernel_close(&k, &v);
	rm_temp_dir(root);
}

static void test_off_cpu_flags(void **state)
{
	(void)state;
	char *envp[] = { NULL };
	char *d[] = { "a", "-collection-agent=h:1", NULL };
	expect_off_cpu(2, d, envp, false, 19);
	char *a1[] = { "a", "-collection-agent=h:1", "-enable-off-cpu", NULL };
	expect_off_cpu(3, a1, envp, true, 19);
	char *a2[] = { "a", "-collection-agent=h:1", "--off-cpu-sampling-rate", "50", NULL };
	expect_off_cpu(4, a2, envp, true, 50);
	/* Explicit, even at the default value. */
	char *a3[] = { "a", "-collection-agent=h:1", "-off-cpu-sampling-rate=19", NULL };
	expect_off_cpu(3, a3, envp, true, 19);
	/* 0 alone: off, not an error. */
	char *a4[] = { "a", "-collection-agent=h:1", "-off-cpu-sampling-rate=0", NULL };
	expect_off_cpu(3, a4, envp, false, 0);
	/* -enable-off-cpu=false with a rate: the rate still enables it, as
	 * the reference's flags do. */
	char *a5[] = { "a", "-collection-agent=h:1", "-enable-off-cpu=false", "-off-cpu-sampling-rate=7", NULL };
	expect_off_cpu(4, a5, envp, true, 7);
	/* From the environment. */
	char *e1[] = { "EMBER_OFF_CPU_SAMPLING_RATE=33", NULL };
	expect_off_cpu(2, d, e1, true, 33);
	char *e2[] = { "EMBER_ENABLE_OFF_CPU=true", NULL };
	expect_off_cpu(2, d, e2, true, 19);
	/* From the config file; the command line still wins. */
	struct conf_file cf;
	conf_file_open(&cf, "off-cpu-sampling-rate 5\n");
	char *c1[] = { "a", "-collection-agent=h:1", cf.arg, NULL };
	expect_off_cpu(3, c1, envp, true, 5);
	char *c2[] = { "a", "-collection-agent=h:1", cf.arg, "-off-cpu-sampling-rate=0", NULL };
	expect_off_cpu(4, c2, envp, false, 0);
	write_text(cf.path, "enable-off-cpu\n");
	expect_off_cpu(3, c1, envp, true, 19);
	rm_temp_dir(cf.dir);

	/* Errors name the flag and what it expects. */
	char *b1[] = { "a", "-collection-agent=h:1", "-enable-off-cpu", "-off-cpu-sampling-rate=0", NULL };
	expect_error(b1, 4, envp, "-off-cpu-sampling-rate: 0 cannot be used with -enable-off-cpu");
	char *e3[] = { "EMBER_ENABLE_OFF_CPU=1", "EMBER_OFF_CPU_SAMPLING_RATE=0", NULL };
	expect_error(d, 2, e3, "cannot be used with -enable-off-cpu");
	expect_flag_error("-off-cpu-sampling-rate=1001", "-off-cpu-sampling-rate (command line): expected a whole number from 0 to 1000");
	expect_flag_error("-off-cpu-sampling-rate=fast", "-off-cpu-sampling-rate");
	expect_flag_error("-enable-off-cpu=maybe", "-enable-off-cpu");
	char *e4[] = { "EMBER_OFF_CPU_SAMPLING_RATE=-1", NULL };
	expect_error(d, 2, e4, "EMBER_OFF_CPU_SAMPLING_RATE");
	/* -help lists both, with their variables. */
	struct buf u = { 0 };
	agent_config_usage(&u);
	assert_non_null(strstr(u.data, "-enable-off-cpu"));
	assert_non_null(strstr(u.data, "EMBER_OFF_CPU_SAMPLING_RATE"));
	buf_free(&u);
}

/* Off-CPU records: their nanoseconds become the value of an off_cpu
 * sample, kept apart from on-CPU samples of the same stack; a record of
 * an unknown kind or with an impossible value is malformed. */
static void test_collect_off_cpu(void **state)
{
	(void)state;
	char *root = make_temp_dir();
	fake_proc(root, 77, "sleeper", 'S', 500);
	fake_proc_link(root, 77, "exe", "/opt/app/bin/sleeper");
	fake_proc_file(root, 77, "maps", "00700000-00710000 r-xp 00000000 00:00 0\n");

	struct kallsyms k;
	struct vdso v;
	kernel_open(&k, &v);
	struct collect_fixture f;
	fixture_open(&f, root, &k, &v);
	struct collector *c = &f.c;
	struct batch *b = &f.b;

	struct oncpu_sample s;
	memset(&s, 0, sizeof(s));
	s.pid = 77;
	s.tid = 78;
	s.proc_start_ns = 500ull * 10000000ull;
	memcpy(s.comm, "sleeper", 8);
	s.unwind_mode = UWM_CFI;
	s.kstack_len = 1;
	s.frames[0] = 0xffffffff81000110;
	s.ustack_len = 1;
	s.frames[1] = 0x700010;
	size_t size = ONCPU_HDR_SIZE + 2 * sizeof(__u64);
	s.kind = ONCPU_KIND_OFF_CPU;
	s.value = 30000000; /* 30 ms */
	collect_sample(c, &s, size, 1000);
	s.value = 52631578;
	collect_sample(c, &s, size, 1100);
	s.kind = ONCPU_KIND_ON_CPU;
	s.value = 1;
	collect_sample(c, &s, size, 1200);
	assert_int_equal(c->stats.samples, 1);
	assert_int_equal(c->stats.offcpu_samples, 2);
	assert_int_equal(c->stats.offcpu_ns, 30000000 + 52631578);
	assert_int_equal(batch_samples(b), 2);
	assert_int_equal(b->samples[0].kind, EK_OFF_CPU);
	assert_int_equal(b->samples[0].value, 30000000 + 52631578);
	assert_int_equal(b->samples[1].kind, EK_ON_CPU);
	assert_int_equal(b->samples[1].value, 1);
	assert_int_equal(b->samples[0].stack, b->samples[1].stack);

	/* Malformed: no kind, an unknown kind, an on-CPU record not worth one
	 * sample, an off-CPU record of 0 ns or of more than a day. */
	const struct { uint32_t kind; uint64_t value; } bad[] = {
		{ 0, 1 }, { 3, 1 }, { ONCPU_KIND_ON_CPU, 2 }, { ONCPU_KIND_OFF_CPU, 0 },
		{ ONCPU_KIND_OFF_CPU, OFFCPU_MAX_VALUE_NS + 1 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s.kind = bad[i].kind;
		s.value = bad[i].value;
		collect_sample(c, &s, size, 1300);
	}
	assert_int_equal(c->stats.malformed, 5);
	assert_int_equal(batch_samples(b), 2);
	s.kind = ONCPU_KIND_OFF_CPU;
	s.value = OFFCPU_MAX_VALUE_NS;
	collect_sample(c, &s, size, 1400);
	assert_int_equal(c->stats.offcpu_samples, 3);

	fixture_close(&f);
	kernel_close(&k, &v);
	rm_temp_dir(root);
}

/* Keeps the converted batches' samples: (kind, value) pairs. */
struct kinds_seen {
	int n;
	int kind[8];
	uint64_t value[8];
};

static int keep_kinds(void *ctx, const Ember__Ingest__V1__Batch *b)
{
	struct kinds_seen *k = ctx;
	for (size_t i = 0; i < b->n_samples && k->n < 8; i++) {
		k->kind[k->n] = b->samples[i]->kind;
		k->value[k->n++] = b->samples[i]->value;
	}
	return 0;
}

/* OTLP: a process's off-CPU samples go in a profile of their own, sample
 * type off_cpu/nanoseconds, which ember-server reads back as OFF_CPU with
 * the same nanoseconds. */
static void test_otlp_off_cpu(void **state)
{
	(void)state;
	struct batch b;
	batch_init(&b);
	struct bframe f = { .type = FT_KERNEL, .name = batch_string(&b, "schedule", 8),
			    .binary = batch_string(&b, "vmlinux", 7) };
	uint32_t fr = batch_frame(&b, &f);
	uint32_t st = batch_stack(&b, &fr, 1);
	uint32_t kv[] = { batch_string(&b, "process.pid", 11), batch_string(&b, "7", 1),
			  batch_string(&b, "thread.name", 11), batch_string(&b, "t1", 2) };
	uint32_t res = batch_resource(&b, kv, 4);
	uint32_t kv2[] = { kv[0], batch_string(&b, "8", 1), kv[2], kv[3] };
	uint32_t res2 = batch_resource(&b, kv2, 4);
	batch_add(&b, st, res2, EK_OFF_CPU, 5000);
	batch_add(&b, st, res, EK_ON_CPU, 3);
	batch_add(&b, st, res, EK_OFF_CPU, 123456789);
	Ember__Otlp__ExportProfilesServiceRequest *req = otlp_roundtrip(&b);
	struct buf err = { 0 };
	/* One ResourceProfiles per process, in the order of their resources:
	 * pid 7, then pid 8 (off-CPU only). */
	assert_int_equal(req->n_resource_profiles, 2);
	const char *const *strs = (const char *const *)req->dictionary->string_table;
	const Ember__Otlp__ScopeProfiles *sp8 = req->resource_profiles[1]->scope_profiles[0];
	assert_int_equal(sp8->n_profiles, 1);
	assert_string_equal(strs[sp8->profiles[0]->sample_type->type_strindex], "off_cpu");
	assert_int_equal(sp8->profiles[0]->n_samples, 1);
	assert_int_equal(sp8->profiles[0]->samples[0]->values[0], 5000);
	const Ember__Otlp__ScopeProfiles *sp = req->resource_profiles[0]->scope_profiles[0];
	assert_int_equal(sp->n_profiles, 2);
	assert_string_equal(strs[sp->profiles[0]->sample_type->type_strindex], "samples");
	assert_string_equal(strs[sp->profiles[0]->sample_type->unit_strindex], "count");
	assert_int_equal(sp->profiles[0]->samples[0]->values[0], 3);
	assert_string_equal(strs[sp->profiles[1]->sample_type->type_strindex], "off_cpu");
	assert_string_equal(strs[sp->profiles[1]->sample_type->unit_strindex], "nanoseconds");
	assert_int_equal(sp->profiles[1]->n_samples, 1);
	assert_int_equal(sp->profiles[1]->samples[0]->values[0], 123456789);

	struct kinds_seen seen = { 0 };
	struct otlp_result ores = { 0 };
	assert_int_equal(otlp_convert(req, "p", 1700000000000LL, keep_kinds, &seen, &ores, &err), 0);
	assert_int_equal(ores.rejected_profiles, 0);
	assert_int_equal(seen.n, 3);
	assert_int_equal(seen.kind[0], EMBER__INGEST__V1__EVENT_KIND__ON_CPU);
	assert_int_equal(seen.value[0], 3);
	assert_int_equal(seen.kind[1], EMBER__INGEST__V1__EVENT_KIND__OFF_CPU);
	assert_int_equal(seen.value[1], 123456789);
	assert_int_equal(seen.kind[2], EMBER__INGEST__V1__EVENT_KIND__OFF_CPU);
	assert_int_equal(seen.value[2], 5000);
	buf_free(&ores.message);
	ember__otlp__export_profiles_service_request__free_unpacked(req, NULL);
	batch_free(&b);
	buf_free(&err);
}


static void test_attrib_cgroup(void **state)
{
	(void)state;
	struct cgroup_info cg;
	const char *docker = "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n";
	attrib_parse_cgroup(docker, strlen(docker), &cg);
	assert_string_equal(cg.container_id, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	assert_string_equal(cg.pod_uid, "");
	const char *k8s = "12:pids:/kubepods/burstable/pod5e6c7d8a-1b2c-4d3e-8f40-123456789abc/"
			  "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\n"
			  "0::/\n";
	attrib_parse_cgroup(k8s, strlen(k8s), &cg);
	assert_string_equal(cg.container_id, "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210");
	assert_string_equal(cg.pod_uid, "5e6c7d8a-1b2c-4d3e-8f40-123456789abc");
	const char *systemd = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5e6c7d8a_1b2c_4d3e_8f40_123456789abc.slice/"
			      "cri-containerd-aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999.scope";
	attrib_parse_cgroup(systemd, strlen(systemd), &cg);
	assert_string_equal(cg.pod_uid, "5e6c7d8a-1b2c-4d3e-8f40-123456789abc");
	assert_string_equal(cg.container_id, "aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999");
	const char *slurm = "4:memory:/slurm/uid_1000/job_4242/step_0/task_0\n";
	attrib_parse_cgroup(slurm, strlen(slurm), &cg);
	assert_string_equal(cg.slurm_job, "4242");
	assert_string_equal(cg.container_id, "");
	/* Hostile: no colons, a job_ outside slurm, uppercase hex, huge ids. */
	const char *bad = "garbage\n1:cpu\n0::/job_7/DOCKER-0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF.scope/pod123\n";
	attrib_parse_cgroup(bad, strlen(bad), &cg);
	assert_string_equal(cg.slurm_job, "");
	assert_string_equal(cg.container_id, "");
	assert_string_equal(cg.pod_uid, "");
}

static void test_attrib_environ_and_deployment(void **state)
{
	(void)state;
	const char env[] = "PATH=/bin\0SLURM_JOB_ID=77\0SLURM_JOB_NAME=train-llm\0SLURM_JOB_USER=ada\0"
			   "EMBER_JOB_TAG=nightly\0HOSTNAME=web-7d9f8b6c5-x2x9k\0KUBERNETES_SERVICE_HOST=10.0.0.1\0NOEQUALS";
	struct env_info e;
	attrib_parse_environ(env, sizeof(env) - 1, "EMBER_JOB_TAG", &e);
	assert_string_equal(e.slurm_job_id, "77");
	assert_string_equal(e.slurm_job_name, "train-llm");
	assert_string_equal(e.slurm_job_user, "ada");
	assert_string_equal(e.job_tag, "nightly");
	assert_string_equal(e.hostname, "web-7d9f8b6c5-x2x9k");
	assert_true(e.k8s);
	char dep[64];
	assert_true(attrib_k8s_deployment("web-7d9f8b6c5-x2x9k", dep, sizeof(dep)));
	assert_string_equal(dep, "web");
	assert_true(attrib_k8s_deployment("payment-api-5b8c9d7f4-abcde", dep, sizeof(dep)));
	assert_string_equal(dep, "payment-api");
	assert_false(attrib_k8s_deployment("postgres-0", dep, sizeof(dep)));
	assert_false(attrib_k8s_deployment("x-12-abcde", dep, sizeof(dep)));
	assert_false(attrib_k8s_deployment("-abcdef-abcde", dep, sizeof(dep)));
}

static void write_bytes(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	fclose(f);
}

static const char *attr_of(const struct proc_attrs *a, const char *key)
{
	for (size_t i = 0; i < a->n; i++) {
		assert_non_null(a->key[i]);
		assert_non_null(a->value[i]);
		if (strcmp(a->key[i], key) == 0)
			return a->value[i];
	}
	return NULL;
}

/* Every value a process can leave absent, as attrib_read and
 * proc_exe_name meet it in a /proc-like root: a process gone before its
 * files are read, a zombie (empty files), empty and nameless variables,
 * an environment cut mid-variable (no NUL at the end), a job tag variable
 * not configured, an environment of 1 MiB. None may give a NULL or empty
 * value; every attribute present has both a key and a value. */
static void test_attrib_absent_values(void **state)
{
	(void)state;
	char *root = make_temp_dir();
	char path[512];
	/* pid 11: a zombie: every file there and empty. */
	snprintf(path, sizeof(path), "%s/11", root);
	assert_int_equal(mkdir(path, 0755), 0);
	static const char *const files[] = { "cgroup", "environ", "cmdline" };
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/11/%s", root, files[i]);
		write_text(path, "");
	}
	/* pid 12: empty values, a variable without a name, one without '=',
	 * the job tag cut short; a command line of just "python3". */
	snprintf(path, sizeof(path), "%s/12", root);
	assert_int_equal(mkdir(path, 0755), 0);
	static const char env12[] = "SLURM_JOB_ID=\0SLURM_JOB_NAME\0=orphan\0\0SLURM_JOB_USER=\0EMBER_JOB_TAG=";
	snprintf(path, sizeof(path), "%s/12/environ", root);
	write_bytes(path, env12, sizeof(env12) - 1);
	snprintf(path, sizeof(path), "%s/12/cmdline", root);
	write_bytes(path, "python3", 7);
	fake_proc_file(root, 12, "cgroup", "0::");
	/* pid 13: SLURM and the job tag first, then 1 MiB of variables, then
	 * a SLURM_JOB_ID the 64 KiB prefix does not reach. */
	snprintf(path, sizeof(path), "%s/13", root);
	assert_int_equal(mkdir(path, 0755), 0);
	size_t big = 1u << 20;
	char *env13 = xmalloc(big + 256);
	size_t n = 0;
	static const char head[] = "SLURM_JOB_ID=77\0SLURM_JOB_NAME=train\0SLURM_JOB_USER=ada\0EMBER_JOB_TAG=nightly\0";
	memcpy(env13, head, sizeof(head) - 1);
	n = sizeof(head) - 1;
	while (n < big) {
		memcpy(env13 + n, "FILLER=xxxxxxxxxxxxxxxxxxxxxxxx", 32);
		n += 32;
	}
	memcpy(env13 + n, "SLURM_JOB_ID=88", 16);
	n += 16;
	snprintf(path, sizeof(path), "%s/13/environ", root);
	write_bytes(path, env13, n);
	free(env13);

	struct attrib *a = attrib_new(root, "none", "EMBER_JOB_TAG");
	struct attrib *untagged = attrib_new(root, "none", NULL);
	struct proc_attrs pa = { 0 };
	/* gone (no directory at all), zombie, absent values */
	static const int empty_pids[] = { 10, 11, 12 };
	for (size_t i = 0; i < ARRAY_SIZE(empty_pids); i++) {
		attrib_read(a, empty_pids[i], &pa);
		assert_int_equal(pa.n, 0);
		proc_attrs_free(&pa);
		attrib_read(untagged, empty_pids[i], &pa);
		assert_int_equal(pa.n, 0);
		proc_attrs_free(&pa);
	}
	attrib_read(a, 13, &pa);
	assert_string_equal(attr_of(&pa, "slurm.job.id"), "77");
	assert_string_equal(attr_of(&pa, "slurm.job.name"), "train");
	assert_string_equal(attr_of(&pa, "slurm.job.user"), "ada");
	assert_string_equal(attr_of(&pa, "job.tag"), "nightly");
	proc_attrs_free(&pa);
	attrib_read(untagged, 13, &pa);
	assert_null(attr_of(&pa, "job.tag"));
	assert_string_equal(attr_of(&pa, "slurm.job.id"), "77");
	proc_attrs_free(&pa);
	attrib_free(untagged);
	attrib_free(a);

	/* The environment parser alone: no variable named for the tag. */
	struct env_info e;
	attrib_parse_environ(env12, sizeof(env12) - 1, NULL, &e);
	assert_string_equal(e.job_tag, "");
	assert_string_equal(e.slurm_job_id, "");
	attrib_parse_environ(NULL, 0, "EMBER_JOB_TAG", &e);
	assert_string_equal(e.slurm_job_name, "");
	struct cgroup_info cg;
	attrib_parse_cgroup(NULL, 0, &cg);
	assert_string_equal(cg.container_id, "");
	char script[64];
	assert_false(attrib_python_script("", 0, script, sizeof(script)));
	assert_false(attrib_python_script("python3\0-m", 10, script, sizeof(script)));
	assert_false(attrib_python_script("python3\0-W", 10, script, sizeof(script)));

	/* A process whose /proc entry is gone and whose sample carried no
	 * name: a name all the same. */
	char exe[64];
	proc_exe_name(root, 10, NULL, exe, sizeof(exe));
	assert_string_equal(exe, "[unknown]");
	proc_exe_name(root, 10, "", exe, sizeof(exe));
	assert_string_equal(exe, "[unknown]");
	proc_exe_name(root, 10, "worker", exe, sizeof(exe));
	assert_string_equal(exe, "worker");
	/* Control characters in an executable's or a thread's name (the
	 * server refuses a metrics batch that holds one): replaced. */
	proc_exe_name(root, 10, "tab\there\n", exe, sizeof(exe));
	assert_string_equal(exe, "tab?here?");
	snprintf(path, sizeof(path), "%s/20", root);
	assert_int_equal(mkdir(path, 0755), 0);
	fake_proc_link(root, 20, "exe", "/opt/new\nline\x7f (deleted)");
	proc_exe_name(root, 20, "x", exe, sizeof(exe));
	assert_string_equal(exe, "new?line?");
	rm_temp_dir(root);
}

/* The symbol uploader keeps where each file was mapped from (for its
 * debug file): paths of any length, none, or relative, are copied within
 * their bounds and freed with the job (ASan checks both), whether the
 * server is reachable or not. */
static void test_symupload_paths(void **state)
{
	(void)state;
	struct http_opts ho = { .host_port = "127.0.0.1:9", .disable_tls = 1, .timeout_ms = 200 };
	struct symupload_opts so = { .debug_dir = "/nonexistent/debug" };
	struct symupload *u = symupload_start(&ho, &so);
	assert_non_null(u);
	char long_path[5000];
	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[0] = '/';
	long_path[sizeof(long_path) - 1] = '\0';
	const char *paths[] = { "/usr/bin/true", NULL, "relative/true", "/", long_path };
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		int fd = open("/usr/bin/true", O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		struct file_id id;
		assert_int_equal(fileid_from_fd(fd, &id), 0);
		id.b[0] ^= (uint8_t)i;
		symupload_add(u, &id, "true", paths[i], fd);
	}
	usleep(100000);
	symupload_stop(u);
}

static void test_tags_flag(void **state)
{
	(void)state;
	struct agent_config cfg;
	char *argv[] = { "ember-agent", "-collection-agent=h:1", "-tags=region:us-east;prod;gpu_type:h100", NULL };
	load_ok(&cfg, 3, argv, NULL);
	assert_int_equal((int)cfg.ntag_kv, 6);
	assert_string_equal(cfg.tag_kv[0], "user.tag");
	assert_string_equal(cfg.tag_kv[1], "gpu_type:h100;prod;region:us-east");
	assert_string_equal(cfg.tag_kv[2], "user.tag.gpu_type");
	assert_string_equal(cfg.tag_kv[3], "h100");
	assert_string_equal(cfg.tag_kv[4], "user.tag.region");
	assert_string_equal(cfg.tag_kv[5], "us-east");
	agent_config_free(&cfg);
	char *bad[] = { "ember-agent", "-collection-agent=h:1", "-tags=:nokey", NULL };
	expect_error(bad, 3, NULL, "-tags");
}

static void test_pprof_and_pod_label_flags(void **state)
{
	(void)state;
	char *envp[] = { NULL };
	struct agent_config cfg;
	/* Defaults: both off, the kubelet's authenticated port. */
	load_defaults(&cfg, envp);
	assert_string_equal(cfg.pprof, "");
	assert_int_equal((int)cfg.npod_labels, 0);
	assert_string_equal(cfg.kubelet_url, "https://127.0.0.1:10250");
	assert_string_equal(cfg.kubelet_token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
	assert_false(cfg.kubelet_insecure);
	agent_config_free(&cfg);
	/* Values, from the command line and the environment; label names
	 * trimmed and deduplicated, in order. */
	char *e1[] = { "EMBER_PPROF=127.0.0.1:6060", "EMBER_KUBELET_URL=http://10.0.0.7:10255/", NULL };
	char *a1[] = { "a", "-collection-agent=h:1", "--k8s-pod-labels", " app, tier ,app,app.kubernetes.io/name,",
		       "-kubelet-insecure", NULL };
	load_ok(&cfg, 5, a1, e1);
	assert_string_equal(cfg.pprof, "127.0.0.1:6060");
	assert_string_equal(cfg.kubelet_url, "http://10.0.0.7:10255/");
	assert_true(cfg.kubelet_insecure);
	assert_int_equal((int)cfg.npod_labels, 3);
	assert_string_equal(cfg.pod_labels[0], "app");
	assert_string_equal(cfg.pod_labels[1], "tier");
	assert_string_equal(cfg.pod_labels[2], "app.kubernetes.io/name");
	agent_config_free(&cfg);
	const char *good_addr[] = { "-pprof=localhost:6060", "-pprof=:6060", "-pprof=[::1]:6060",
				    "-pprof=0.0.0.0:65535" };
	for (size_t i = 0; i < ARRAY_SIZE(good_addr); i++) {
		char *g[] = { "a", "-collection-agent=h:1", (char *)good_addr[i], NULL };
		load_ok(&cfg, 3, g, envp);
		agent_config_free(&cfg);
	}
	/* Bad values name the flag. */
	const char *bad_addr[] = { "-pprof=6060", "-pprof=nope", "-pprof=127.0.0.1:0",
				   "-pprof=127.0.0.1:65536", "-pprof=::1:6060", "-pprof=127.0.0.1:",
				   "-pprof=h/x:6060", "-pprof=[::1:6060", "-pprof=a b:1",
				   "-pprof=127.0.0.1:60x" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_addr); i++) {
		expect_flag_error(bad_addr[i], "-pprof: expected host:port");
	}
	const char *bad_labels[] = { "-k8s-pod-labels=app,bad label", "-k8s-pod-labels=-app",
				     "-k8s-pod-labels=a/b/c", "-k8s-pod-labels=/app",
				     "-k8s-pod-labels=Example.com/app", "-k8s-pod-labels=app!",
				     "-k8s-pod-labels=app\x01" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_labels); i++) {
		expect_flag_error(bad_labels[i], "-k8s-pod-labels: \"");
	}
	char many[256] = "-k8s-pod-labels=";
	for (int i = 0; i < KUBELET_MAX_LABELS + 1; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "l%d,", i);
	expect_flag_error(many, "-k8s-pod-labels: at most 16 labels");
	char long_name[96]; /* a name part of 64 characters */
	snprintf(long_name, sizeof(long_name), "-k8s-pod-labels=%0*d", 64, 0);
	expect_flag_error(long_name, "-k8s-pod-labels");
	const char *bad_urls[] = { "-kubelet-url=ftp://x:1", "-kubelet-url=127.0.0.1:10250",
				   "-kubelet-url=https://", "-kubelet-url=http:///pods",
				   "-kubelet-url=http://a b", "-kubelet-url=http://u@h:1",
				   "-kubelet-url=http://h:1/?x" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_urls); i++) {
		char *b[] = { "a", "-collection-agent=h:1", "-k8s-pod-labels=app", (char *)bad_urls[i], NULL };
		expect_error(b, 4, envp, "-kubelet-url: expected");
	}
	/* From a config file. */
	struct conf_file cf;
	conf_file_open(&cf, "k8s-pod-labels team,app\npprof 127.0.0.1:7070\n");
	char *c[] = { "a", "-collection-agent=h:1", cf.arg, NULL };
	load_ok(&cfg, 3, c, envp);
	assert_string_equal(cfg.pprof, "127.0.0.1:7070");
	assert_int_equal((int)cfg.npod_labels, 2);
	assert_string_equal(cfg.pod_labels[0], "team");
	agent_config_free(&cfg);
	rm_temp_dir(cf.dir);
}

static void test_kubelet_pods(void **state)
{
	(void)state;
	const char *labels[] = { "app", "tier", "app.kubernetes.io/name" };
	const char *list =
		"{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{},\"items\":["
		/* upper-case uid, every label */
		"{\"metadata\":{\"name\":\"web-7d9f8b6c5-x2x9k\",\"namespace\":\"shop\","
		"\"uid\":\"5E6C7D8A-1B2C-4D3E-8F40-123456789ABC\",\"labels\":{\"app\":\"web\","
		"\"tier\":\"front\",\"app.kubernetes.io/name\":\"checkout\",\"secret\":\"s3cr3t\"}},"
		"\"spec\":{\"containers\":[]},\"status\":{\"phase\":\"Running\"}},"
		/* no labels, no namespace */
		"{\"metadata\":{\"name\":\"db-0\",\"uid\":\"00000000-0000-4000-8000-000000000001\"}},"
		/* hostile values: not strings, control characters, too long, empty */
		"{\"metadata\":{\"name\":7,\"namespace\":\"a\\u0001b\",\"uid\":\"00000000-0000-4000-8000-000000000002\","
		"\"labels\":{\"app\":[\"x\"],\"tier\":\"\",\"app.kubernetes.io/name\":\""
		"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}},"
		/* no uid, a bad uid, not an object, labels not an object */
		"{\"metadata\":{\"name\":\"nouid\"}},"
		"{\"metadata\":{\"name\":\"baduid\",\"uid\":\"not-a-uuid\"}},"
		"42, null, \"pod\", {\"metadata\":[]},"
		"{\"metadata\":{\"uid\":\"00000000-0000-4000-8000-000000000003\",\"labels\":\"app=web\"}},"
		/* the same uid again: one is kept */
		"{\"metadata\":{\"name\":\"dup\",\"uid\":\"00000000-0000-4000-8000-000000000001\"}}"
		"]}";
	struct kube_pods pods;
	struct buf err = { 0 };
	assert_int_equal(kubelet_parse_pods(list, strlen(list), labels, 3, &pods, &err), 0);
	assert_int_equal((int)pods.n, 4);
	assert_false(pods.truncated);
	const struct kube_pod *p = kube_pods_find(&pods, "5e6c7d8a-1b2c-4d3e-8f40-123456789abc");
	assert_non_null(p);
	assert_string_equal(p->name, "web-7d9f8b6c5-x2x9k");
	assert_string_equal(p->ns, "shop");
	assert_string_equal(p->values[0], "web");
	assert_string_equal(p->values[1], "front");
	assert_string_equal(p->values[2], "checkout");
	assert_null(p->values[3]); /* "secret" was not asked for */
	p = kube_pods_find(&pods, "00000000-0000-4000-8000-000000000001");
	assert_non_null(p);
	assert_null(p->ns);
	assert_null(p->values[0]);
	p = kube_pods_find(&pods, "00000000-0000-4000-8000-000000000002");
	assert_non_null(p);
	assert_null(p->name);
	assert_string_equal(p->ns, "a?b");
	assert_null(p->values[0]);
	assert_null(p->values[1]);
	assert_int_equal((int)strlen(p->values[2]), KUBELET_VALUE_MAX);
	p = kube_pods_find(&pods, "00000000-0000-4000-8000-000000000003");
	assert_non_null(p);
	assert_null(p->values[0]);
	assert_null(kube_pods_find(&pods, "00000000-0000-4000-8000-000000000009"));
	assert_null(kube_pods_find(&pods, ""));
	kube_pods_free(&pods);

	/* Not a pod list. */
	const char *bad[] = { "", "not json", "[]", "{\"items\":{}}", "{\"items\":null}", "{\"items\":[" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		buf_reset(&err);
		assert_int_equal(kubelet_parse_pods(bad[i], strlen(bad[i]), labels, 3, &pods, &err), -1);
		assert_true(err.len > 0);
		assert_int_equal((int)pods.n, 0);
		kube_pods_free(&pods);
	}
	/* Nested deeper than jansson's limit: refused, no crash. */
	struct buf deep = { 0 };
	buf_puts(&deep, "{\"items\":[");
	for (int i = 0; i < 100000; i++)
		buf_putc(&deep, '[');
	assert_int_equal(kubelet_parse_pods(deep.data, deep.len, labels, 3, &pods, &err), -1);
	kube_pods_free(&pods);
	/* More pods than kept: the first KUBELET_MAX_PODS. */
	buf_reset(&deep);
	buf_puts(&deep, "{\"items\":[");
	for (int i = 0; i < KUBELET_MAX_PODS + 10; i++)
		buf_printf(&deep, "%s{\"metadata\":{\"uid\":\"00000000-0000-4000-8000-%012d\",\"labels\":{\"app\":\"a%d\"}}}",
			   i ? "," : "", i, i);
	buf_puts(&deep, "]}");
	assert_int_equal(kubelet_parse_pods(deep.data, deep.len, labels, 1, &pods, &err), 0);
	assert_true(pods.truncated);
	assert_int_equal((int)pods.n, KUBELET_MAX_PODS);
	p = kube_pods_find(&pods, "00000000-0000-4000-8000-000000000777");
	assert_non_null(p);
	assert_string_equal(p->values[0], "a777");
	assert_null(kube_pods_find(&pods, "00000000-0000-4000-8000-000000002050"));
	kube_pods_free(&pods);
	/* An answer past the size limit is refused before parsing. */
	assert_int_equal(kubelet_parse_pods(deep.data, (size_t)KUBELET_MAX_BODY + 1, labels, 1, &pods, &err), -1);
	assert_non_null(strstr(err.data, "more than"));
	buf_free(&deep);
	buf_free(&err);
	/* Label names. */
	assert_true(kubelet_label_name_valid("app", 3));
	assert_true(kubelet_label_name_valid("app.kubernetes.io/name", 22));
	assert_true(kubelet_label_name_valid("A_b-c.D", 7));
	assert_false(kubelet_label_name_valid("", 0));
	assert_false(kubelet_label_name_valid("app-", 4));
	assert_false(kubelet_label_name_valid("a/", 2));
	assert_false(kubelet_label_name_valid("UPPER.io/x", 10));
}

static void test_selfstats(void **state)
{
	(void)state;
	struct selfstats_values v;
	memset(&v, 0, sizeof(v));
	for (size_t i = 0; i < SS_COUNT; i++)
		v.v[i] = 1000 + i;
	v.v[SS_ENCODE_NS] = 1500000000ull; /* shown as seconds */
	v.time_unix_ms = 1700000000123;
	struct buf text = { 0 }, js = { 0 };
	selfstats_prometheus(&v, &text);
	selfstats_json(&v, &js);
	/* Every metric has a line with its value, under one HELP and TYPE per
	 * family. */
	for (size_t i = 0; i < SS_COUNT; i++) {
		const char *name = selfstats_name((enum selfstat)i);
		assert_non_null(name);
		char needle[200];
		snprintf(needle, sizeof(needle), "# TYPE ember_agent_%s %s\n", name,
			 strstr(name, "_total") ? "counter" : "gauge");
		assert_non_null(strstr(text.data, needle));
		snprintf(needle, sizeof(needle), "# HELP ember_agent_%s ", name);
		const char *h = strstr(text.data, needle);
		assert_non_null(h);
		assert_null(strstr(h + 1, needle)); /* once */
	}
	assert_null(selfstats_name(SS_COUNT));
	assert_non_null(strstr(text.data, "\nember_agent_samples_total 1000\n"));
	assert_non_null(strstr(text.data, "\nember_agent_encode_seconds_total 1.500000000\n"));
	assert_non_null(strstr(text.data, "\nember_agent_bpf_unwind_stopped_total{reason=\"no_fp\"} "));
	/* Every line is a comment or "name[{labels}] value". */
	size_t lines = 0;
	for (char *l = text.data; *l; l = strchr(l, '\n') + 1, lines++) {
		assert_non_null(strchr(l, '\n'));
		assert_true(l[0] == '#' || strncmp(l, "ember_agent_", 12) == 0);
	}
	assert_true(lines >= SS_COUNT);
	json_error_t jerr;
	json_t *doc = json_loads(js.data, 0, &jerr);
	assert_non_null(doc);
	assert_int_equal(json_integer_value(json_object_get(doc, "time_unix_ms")), 1700000000123);
	assert_int_equal(json_integer_value(json_object_get(doc, "samples_total")), 1000 + SS_SAMPLES);
	assert_true(json_real_value(json_object_get(doc, "encode_seconds_total")) == 1.5);
	json_t *stopped = json_object_get(doc, "bpf_unwind_stopped_total");
	assert_true(json_is_object(stopped));
	assert_int_equal(json_integer_value(json_object_get(stopped, "no_fp")), 1000 + SS_BPF_STOP_NO_FP);
	assert_int_equal(json_object_size(stopped), 5);
	json_decref(doc);
	buf_free(&text);
	buf_free(&js);

	char host[64];
	uint16_t port;
	assert_int_equal(selfstats_split_addr("[::1]:80", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 80);
	assert_int_equal(selfstats_split_addr(":9", host, sizeof(host), &port), 0);
	assert_string_equal(host, "");
	assert_int_equal(selfstats_split_addr("[]:9", host, sizeof(host), &port), -1);
	assert_int_equal(selfstats_split_addr("x:", host, sizeof(host), &port), -1);
	assert_int_equal(selfstats_split_addr("averyveryveryverylonghostname:1", host, 8, &port), -1);
}

static size_t to_buf(char *p, size_t size, size_t n, void *ud)
{
	buf_append(ud, p, size * n);
	return size * n;
}

static long http_get(const char *url, const char *method, struct buf *out)
{
	CURL *h = curl_easy_init();
	assert_non_null(h);
	buf_reset(out);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_buf);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	long status = 0;
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(h);
	return status;
}

/* The -pprof server: serves what was published, 404/405 as JSON, and a
 * port in use is reported as such. */
static void test_selfstats_server(void **state)
{
	(void)state;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 1), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	char addr[64], url[128];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));
	struct buf err = { 0 };
	assert_null(selfstats_start(addr, &err));
	assert_non_null(strstr(err.data, "-pprof: cannot listen on"));
	assert_non_null(strstr(err.data, "in use"));
	close(fd);
	buf_reset(&err);
	struct selfstats_server *srv = selfstats_start(addr, &err);
	assert_non_null(srv);
	struct selfstats_values v;
	memset(&v, 0, sizeof(v));
	v.v[SS_SAMPLES] = 4242;
	v.time_unix_ms = 1;
	selfstats_publish(srv, &v);
	struct buf body = { 0 };
	snprintf(url, sizeof(url), "http://%s/metrics", addr);
	assert_int_equal(http_get(url, "GET", &body), 200);
	assert_non_null(strstr(body.data, "\nember_agent_samples_total 4242\n"));
	v.v[SS_SAMPLES] = 4343;
	selfstats_publish(srv, &v);
	snprintf(url, sizeof(url), "http://%s/debug/stats", addr);
	assert_int_equal(http_get(url, "GET", &body), 200);
	assert_non_null(strstr(body.data, "\"samples_total\":4343,"));
	assert_int_equal(http_get(url, "DELETE", &body), 405);
	assert_non_null(strstr(body.data, "{\"error\":\"method DELETE not allowed"));
	snprintf(url, sizeof(url), "http://%s/debug/pprof/", addr);
	assert_int_equal(http_get(url, "GET", &body), 404);
	assert_non_null(strstr(body.data, "{\"error\":\"no such endpoint: /debug/pprof/"));
	selfstats_stop(srv);
	/* The port is free again once stopped. */
	srv = selfstats_start(addr, &err);
	assert_non_null(srv);
	selfstats_stop(srv);
	selfstats_stop(NULL);
	buf_free(&body);
	buf_free(&err);
}

/* A fake kubelet for test_kubelet_client: answers every request with
 * fake_status and fake_body, counting requests (read by the test after
 * the client's statistics say it has its answer). */
static unsigned fake_status = 200;
static const char *fake_body = "";
static int fake_requests;
static char fake_auth[64];

static enum MHD_Result fake_kubelet(void *cls, struct MHD_Connection *c, const char *url,
				    const char *method, const char *version, const char *upload,
				    size_t *upload_size, void **con_cls)
{
	(void)cls, (void)method, (void)version, (void)upload, (void)upload_size, (void)con_cls;
	__atomic_add_fetch(&fake_requests, 1, __ATOMIC_SEQ_CST);
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	snprintf(fake_auth, sizeof(fake_auth), "%s", auth ? auth : "");
	const char *body = strcmp(url, "/pods") == 0 ? fake_body : "{}";
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body,
								 MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret = MHD_queue_response(c, fake_status, r);
	MHD_destroy_response(r);
	return ret;
}

struct seen {
	char text[1024];
};

static void on_attr(void *ctx, const char *key, const char *value)
{
	struct seen *s = ctx;
	snprintf(s->text + strlen(s->text), sizeof(s->text) - strlen(s->text), "%s=%s;", key, value);
}

static struct kubelet *kubelet_for(struct MHD_Daemon *d, const char *token_file)
{
	char url[64];
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/", info->port);
	const char *labels[] = { "app", "team" };
	struct kubelet_opts o = { .url = url, .token_file = token_file, .labels = labels, .nlabels = 2 };
	struct kubelet *k = kubelet_start(&o);
	assert_non_null(k);
	/* The first list is read at start. */
	struct kubelet_stats st;
	for (int i = 0; i < 500; i++) {
		kubelet_get_stats(k, &st);
		if (st.fetches + st.errors)
			break;
		usleep(10000);
	}
	return k;
}

/* The kubelet client's thread, lookups and errors (under ASan). */
static void test_kubelet_client(void **state)
{
	(void)state;
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
						fake_kubelet, NULL, MHD_OPTION_END);
	assert_non_null(d);
	char *dir = make_temp_dir();
	char token[300];
	snprintf(token, sizeof(token), "%s/token", dir);
	write_text(token, "tok-abc\n");
	fake_body = "{\"items\":[{\"metadata\":{\"name\":\"web-7d9f8b6c5-x2x9k\",\"namespace\":\"shop\","
		    "\"uid\":\"5e6c7d8a-1b2c-4d3e-8f40-123456789abc\",\"labels\":{\"app\":\"web\",\"other\":\"x\"}}}]}";
	struct kubelet *k = kubelet_for(d, token);
	struct kubelet_stats st;
	kubelet_get_stats(k, &st);
	assert_int_equal((int)st.fetches, 1);
	assert_int_equal((int)st.errors, 0);
	assert_int_equal((int)st.pods, 1);
	assert_int_equal(__atomic_load_n(&fake_requests, __ATOMIC_SEQ_CST), 1);
	assert_string_equal(fake_auth, "Bearer tok-abc");
	struct seen s = { "" };
	/* Found whatever the case of the uid; only the labels asked for. */
	assert_true(kubelet_pod_attributes(k, "5E6C7D8A-1B2C-4D3E-8F40-123456789ABC", now_mono_ns(), on_attr, &s));
	assert_string_equal(s.text, "k8s.pod.label[app]=web;k8s.pod.name=web-7d9f8b6c5-x2x9k;k8s.namespace.name=shop;");
	s.text[0] = '\0';
	assert_false(kubelet_pod_attributes(k, "00000000-0000-4000-8000-000000000001", now_mono_ns(), on_attr, &s));
	assert_false(kubelet_pod_attributes(k, "short", now_mono_ns(), on_attr, &s));
	assert_string_equal(s.text, "");
	kubelet_stop(k); /* while a new read waits for its 5 s gap */
	/* Refused (no token file: no Authorization) and not a pod list: errors. */
	fake_status = 403;
	k = kubelet_for(d, "/nonexistent/token");
	kubelet_get_stats(k, &st);
	assert_int_equal((int)st.errors, 1);
	assert_int_equal((int)st.fetches, 0);
	assert_string_equal(fake_auth, "");
	assert_false(kubelet_pod_attributes(k, "5e6c7d8a-1b2c-4d3e-8f40-123456789abc", now_mono_ns(), on_attr, &s));
	kubelet_stop(k);
	fake_status = 200;
	fake_body = "{\"items\": 3}";
	k = kubelet_for(d, "");
	kubelet_get_stats(k, &st);
	assert_int_equal((int)st.errors, 1);
	kubelet_stop(k);
	kubelet_stop(NULL);
	MHD_stop_daemon(d);
	rm_temp_dir(dir);
}

/* Line tables and the line of every code unit, from CPython itself
 * (co_linetable and co_positions() of 3.11 for a function with a loop, a
 * branch and a try block; 0 = no line; then 3.9's and 3.10's tables). */
static void test_python_line(void **state)
{
	(void)state;
	static const uint8_t table[] = { 0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45, 0xdd, 0x0d, 0x12, 0x90, 0x31, 0x89, 0x58, 0x8c, 0x58, 0xf0, 0x00, 0x04, 0x05, 0x17, 0xf0, 0x00, 0x04, 0x05, 0x17, 0x88, 0x01, 0xd8, 0x0b, 0x0c, 0x88, 0x71, 0x89, 0x35, 0x90, 0x41, 0x8a, 0x3a, 0x88, 0x3a, 0xd8, 0x0c, 0x11, 0x90, 0x51, 0x98, 0x11, 0x91, 0x55, 0x89, 0x4e, 0x88, 0x45, 0x88, 0x45, 0xe0, 0x0c, 0x11, 0x90, 0x51, 0x89, 0x4a, 0x88, 0x45, 0x88, 0x45, 0xf0, 0x02, 0x03, 0x05, 0x0e, 0xd8, 0x0c, 0x0d, 0x90, 0x01, 0x89, 0x45, 0x88, 0x01, 0x88, 0x01, 0xf8, 0xdd, 0x0b, 0x1c, 0xf0, 0x00, 0x01, 0x05, 0x0e, 0xf0, 0x00, 0x01, 0x05, 0x0e, 0xf0, 0x00, 0x01, 0x05, 0x0e, 0xd8, 0x0c, 0x0d, 0x88, 0x01, 0x88, 0x01, 0x88, 0x01, 0xf0, 0x03, 0x01, 0x05, 0x0e, 0xf8, 0xf8, 0xf8, 0xe0, 0x0b, 0x10, 0x90, 0x31, 0x89, 0x39, 0xd0, 0x04, 0x14 };
	static const uint32_t lines[] = { 1, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 8, 9, 9, 9, 9, 9, 9, 0, 10, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 10, 0, 0, 0, 12, 12, 12, 12, 12 };
	for (uint32_t i = 0; i < ARRAY_SIZE(lines); i++)
		assert_int_equal(python_line(PY_LINES_LOCATIONS, table, sizeof(table), 1, i), lines[i]);
	/* Past the end, truncated or damaged tables: no line, no crash. */
	assert_int_equal(python_line(PY_LINES_LOCATIONS, table, sizeof(table), 1, 1000), 0);
	for (size_t n = 0; n < sizeof(table); n++)
		(void)python_line(PY_LINES_LOCATIONS, table, n, 1, (uint32_t)n);
	static const uint8_t bad[] = { 0x05, 0xf0, 0xff };
	assert_int_equal(python_line(PY_LINES_LOCATIONS, bad, sizeof(bad), 1, 0), 0);
	assert_int_equal(python_line(PY_LINES_LOCATIONS, bad + 1, 2, 1, 0), 0);
	assert_int_equal(python_line(99, table, sizeof(table), 1, 0), 0);

	/* The same function's tables in 3.9 (co_lnotab) and 3.10
	 * (co_linetable), with the lines dis.findlinestarts() and
	 * co_lines() give for each code unit (first line 2). */
	static const uint8_t lnotab[] = { 0x00, 0x01, 0x04, 0x01, 0x0c, 0x01, 0x0c, 0x01, 0x0e, 0x02,
					  0x0a, 0x01, 0x02, 0x01, 0x0c, 0x01, 0x0c, 0x01, 0x0a, 0x01 };
	static const uint32_t lnotab_lines[] = {
		3, 3, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 8, 8, 8, 8,
		8, 9, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 13, 13, 13, 13 };
	for (uint32_t i = 0; i < ARRAY_SIZE(lnotab_lines); i++)
		assert_int_equal(python_line(PY_LINES_LNOTAB, lnotab, sizeof(lnotab), 2, i), lnotab_lines[i]);
	static const uint8_t lt310[] = { 0x04, 0x01, 0x0c, 0x01, 0x0c, 0x01, 0x0e, 0x01, 0x0a, 0x02, 0x02, 0x01,
					 0x0a, 0x01, 0x08, 0x03, 0x0c, 0xfe, 0x06, 0x01, 0x08, 0x01, 0x02, 0xfe };
	static const uint32_t lt310_lines[] = {
		3, 3, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 8, 8, 8, 8,
		8, 9, 10, 10, 10, 10, 10, 13, 13, 13, 13, 11, 11, 11, 11, 11, 11, 12, 12, 12, 13, 13, 13, 13, 11 };
	for (uint32_t i = 0; i < ARRAY_SIZE(lt310_lines); i++)
		assert_int_equal(python_line(PY_LINES_310, lt310, sizeof(lt310), 2, i), lt310_lines[i]);
}

static void test_python_script(void **state)
{
	(void)state;
#define ARGV(s) s, sizeof(s) - 1
	static const struct {
		const char *argv;
		size_t len;
		const char *want; /* NULL: not a Python script */
	} cases[] = {
		{ ARGV("/usr/bin/python3\0-u\0/srv/app/train.py\0--lr\0"), "train.py" },
		{ ARGV("python3.11\0-X\0dev\0-W\0ignore\0serve.py"), "serve.py" },
		{ ARGV("python\0-Wignore\0-OO\0job.py"), "job.py" },
		{ ARGV("python3\0-m\0torch.distributed.run\0--nproc\0"), "torch.distributed.run" },
		{ ARGV("python3\0-uc\0print(1)"), "-c" },
		{ ARGV("python3\0-\0"), "-" },
		/* Not a Python interpreter, or no script (the interactive prompt). */
		{ ARGV("/usr/bin/perl\0x.py"), NULL },
		{ ARGV("python3\0-i"), NULL },
		{ ARGV("python3\0-m"), NULL },
		{ "", 0, NULL },
	};
#undef ARGV
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char out[129];
		bool found = attrib_python_script(cases[i].argv, cases[i].len, out, sizeof(out));
		if (found != (cases[i].want != NULL))
			fail_msg("case %zu: %s", i, found ? "a script" : "no script");
		if (found)
			assert_string_equal(out, cases[i].want);
	}
}

/* A compact ASCII str object laid out as 3.11 has it (PyASCIIObject is 48
 * bytes: length at 16, state at 32; the characters follow). */
static void fake_str(uint8_t *obj, const char *s)
{
	memset(obj, 0, 48);
	int64_t len = (int64_t)strlen(s);
	memcpy(obj + 16, &len, sizeof(len));
	uint32_t state = 1u << 2 | 1u << 5 | 1u << 6; /* kind 1, compact, ascii */
	memcpy(obj + 32, &state, sizeof(state));
	memcpy(obj + 48, s, (size_t)len + 1);
}

/* python_symbolize on this very process: fake 3.11 objects in memory, read
 * back through process_vm_readv as the agent reads a Python process. */
/* The agent places the CUDA library it carries: created with its
 * directories, readable and executable by all whatever the umask, left
 * alone when the same, replaced when different, refused over a file. */
static void test_cudaship_install(void **state)
{
	(void)state;
	char *d = make_temp_dir();
	char dir[512], path[600];
	snprintf(dir, sizeof(dir), "%s/var/lib/ember/profiler", d);
	snprintf(path, sizeof(path), "%s/libembercuda.so", dir);
	static unsigned char lib[200000];
	for (size_t i = 0; i < sizeof(lib); i++)
		lib[i] = (unsigned char)(i * 31 + 7);
	struct buf err = { 0 };
	mode_t old = umask(077);
	assert_int_equal(cudaship_install(dir, lib, sizeof(lib), &err), CUDASHIP_WRITTEN);
	umask(old);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0755);
	assert_int_equal((size_t)st.st_size, sizeof(lib));
	ino_t ino = st.st_ino;
	/* The same bytes: not written again (the inode stays). */
	assert_int_equal(cudaship_install(dir, lib, sizeof(lib), &err), CUDASHIP_SAME);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_ino == ino);
	/* One byte different: replaced by a new file. */
	lib[sizeof(lib) - 1] ^= 1;
	assert_int_equal(cudaship_install(dir, lib, sizeof(lib), &err), CUDASHIP_WRITTEN);
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_ino != ino);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	static unsigned char back[sizeof(lib) + 1];
	assert_int_equal(fread(back, 1, sizeof(back), f), sizeof(lib));
	fclose(f);
	assert_memory_equal(back, lib, sizeof(lib));
	/* No temporary file left behind. */
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 1", dir);
	assert_int_equal(system(cmd), 0);
	/* A file where the directory should be; an agent built without it. */
	char file_dir[600];
	snprintf(file_dir, sizeof(file_dir), "%s/libembercuda.so", dir);
	assert_int_equal(cudaship_install(file_dir, lib, sizeof(lib), &err), CUDASHIP_FAILED);
	assert_non_null(strstr(err.data, "not a directory"));
	buf_reset(&err);
	assert_int_equal(cudaship_install(dir, lib, 0, &err), CUDASHIP_FAILED);
	assert_non_null(strstr(err.data, "built without"));
	buf_free(&err);
	rm_temp_dir(d);
}

static void test_python_symbolize(void **state)
{
	(void)state;
	const struct py_layout *l = python_layout(EMBER_PY_VERSION(3, 11));
	assert_non_null(l);
	static uint8_t type[64], code[256], name[128], qual[128], file[128], table[64];
	fake_str(name, "work");
	fake_str(qual, "Worker.work");
	fake_str(file, "/srv/app/worker.py");
	/* A bytes object: ob_size at 16, data at 32. The location table of
	 * two lines: the first line, then +1 from code unit 1 on. */
	static const uint8_t lt[] = { 0x80, 0x00, 0xd8, 0x0c, 0x0d, 0x80, 0x45 };
	int64_t n = sizeof(lt);
	memcpy(table + 16, &n, sizeof(n));
	memcpy(table + 32, lt, sizeof(lt));
	uint64_t p;
	memset(code, 0, sizeof(code));
	p = (uint64_t)(uintptr_t)type;
	memcpy(code + 8, &p, 8);
	p = (uint64_t)(uintptr_t)file;
	memcpy(code + l->code_filename, &p, 8);
	p = (uint64_t)(uintptr_t)name;
	memcpy(code + l->code_name, &p, 8);
	uint64_t qp = (uint64_t)(uintptr_t)qual;
	memcpy(code + l->off.code_qualname, &qp, 8);
	p = (uint64_t)(uintptr_t)table;
	memcpy(code + l->code_linetable, &p, 8);
	int32_t first = 10;
	memcpy(code + l->code_firstlineno, &first, 4);

	struct python *py = python_new();
	struct py_file f = { .version = 0x030B02F0, .code_type = (uint64_t)(uintptr_t)type, .layout = *l };
	int32_t pid = (int32_t)getpid();
	python_set_process(py, pid, 1, 1, &f, 0);
	uint64_t slot = PY_FRAME_FLAG | 2ull << PY_FRAME_INSTR_SHIFT | (uint64_t)(uintptr_t)code;
	struct py_sym s;
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), 0);
	assert_string_equal(s.name, "Worker.work");
	assert_string_equal(s.file, "/srv/app/worker.py");
	assert_int_equal(s.line, 11);
	/* Cached: the same answer without reading again. */
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), 0);
	struct python_stats st;
	python_get_stats(py, &st);
	assert_int_equal(st.cache_hits, 1);
	/* The sample saw another qualname pointer: the object was reused. */
	assert_int_equal(python_symbolize(py, pid, slot, qp + 8, &s), -1);
	/* No longer a code object (freed since): a sample that saw the
	 * cached object's co_qualname keeps its names (a process shutting
	 * down frees its code objects after its last samples); one that saw
	 * another is stale. Not readable at all: unknown. */
	uint64_t other = (uint64_t)(uintptr_t)name;
	memcpy(code + 8, &other, 8);
	python_next_generation(py);
	assert_int_equal(python_symbolize(py, pid, slot, qp + 8, &s), -1);
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), 0);
	assert_string_equal(s.name, "Worker.work");
	memcpy(code + 8, &f.code_type, 8);
	assert_int_equal(python_symbolize(py, pid, PY_FRAME_FLAG | 16, qp, &s), -1);
	/* A new generation sees a changed object and reads it again. */
	fake_str(qual, "Worker.rest");
	python_next_generation(py);
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), 0);
	assert_string_equal(s.name, "Worker.work"); /* same pointers: not re-read */
	first = 20;
	memcpy(code + l->code_firstlineno, &first, 4);
	python_next_generation(py);
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), 0);
	assert_string_equal(s.name, "Worker.rest");
	assert_int_equal(s.line, 21);
	/* The process exits mid-read: the code object's header is read but
	 * its strings are not (here: no longer str objects). The entry stays
	 * unnamed; later samples of it, with the header unchanged, must not
	 * get a NULL name (the agent's collector passed it to strlen and died
	 * on it), and get the names once they can be read. */
	uint8_t qual_saved[sizeof(qual)], name_saved[sizeof(name)];
	memcpy(qual_saved, qual, sizeof(qual));
	memcpy(name_saved, name, sizeof(name));
	memset(qual + 32, 0, 4); /* state: not a compact string */
	memset(name + 32, 0, 4);
	first = 25;
	memcpy(code + l->code_firstlineno, &first, 4);
	python_next_generation(py);
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), -1);
	for (int round = 0; round < 2; round++) {
		s.name = NULL;
		int rc = python_symbolize(py, pid, slot, qp, &s);
		assert_true(rc == -1 || s.name != NULL);
		python_next_generation(py);
		s.name = NULL;
		rc = python_symbolize(py, pid, slot, qp, &s);
		assert_true(rc == -1 || s.name != NULL);
	}
	memcpy(qual, qual_saved, sizeof(qual));
	memcpy(name, name_saved, sizeof(name));
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), 0);
	assert_string_equal(s.name, "Worker.rest");
	assert_int_equal(s.line, 26);
	/* A hostile length: cut to the bound, no crash. */
	int64_t huge = INT64_MAX;
	memcpy(qual + 16, &huge, sizeof(huge));
	first = 30;
	memcpy(code + l->code_firstlineno, &first, 4);
	python_next_generation(py);
	(void)python_symbolize(py, pid, slot, qp, &s);
	/* The interpreter's own offset table (3.13, 3.14): applied when it is
	 * one (cookie, version, bounds, not free-threaded), ignored otherwise. */
	for (uint32_t minor = 13; minor <= 14; minor++) {
		uint8_t dbg[512] = "xdebugpy";
		uint32_t version = EMBER_PY_VERSION(3, minor) | 0xF0;
		uint64_t v = version, o;
		memcpy(dbg + 8, &v, 8);
		const struct py_layout *base = python_layout(version);
		assert_non_null(base);
		const struct py_debug_positions *d = &base->debug;
		assert_true(d->size > 0 && d->size <= sizeof(dbg));
		const uint16_t at[] = { d->interpreters_head, d->interp_next, d->threads_head,
					d->tstate_next, d->current_frame, d->thread_id,
					d->frame_previous, d->frame_executable, d->frame_instr_ptr,
					d->frame_owner, d->code_filename, d->code_name,
					d->code_qualname, d->code_linetable, d->code_firstlineno,
					d->code_adaptive };
		for (size_t i = 0; i < ARRAY_SIZE(at); i++) {
			o = 16 + 8 * i;
			memcpy(dbg + at[i], &o, 8);
		}
		struct py_layout copy = *base;
		assert_int_equal(python_apply_debug_offsets(dbg, d->size, version, &copy), 0);
		assert_int_equal(copy.off.runtime_interpreters_head, 16);
		assert_int_equal(copy.off.tstate_frame, 16 + 8 * 4);
		assert_int_equal(copy.off.frame_owner, 16 + 8 * 9);
		assert_int_equal(copy.off.code_adaptive, 16 + 8 * 15);
		assert_int_equal(copy.code_firstlineno, 16 + 8 * 14);
		assert_int_equal(copy.str_compact_data, base->str_compact_data); /* not in the table */
		copy = *base;
		assert_int_equal(python_apply_debug_offsets(dbg, d->size, EMBER_PY_VERSION(3, 12), &copy), -1);
		assert_int_equal(python_apply_debug_offsets(dbg, d->size - 1, version, &copy), -1);
		if (d->free_threaded) {
			o = 1; /* a build without the GIL: other object layouts */
			memcpy(dbg + d->free_threaded, &o, 8);
			assert_int_equal(python_apply_debug_offsets(dbg, d->size, version, &copy), -1);
			o = 0;
			memcpy(dbg + d->free_threaded, &o, 8);
		}
		o = 4096; /* a code field the symbolizer would not read */
		memcpy(dbg + d->code_name, &o, 8);
		assert_int_equal(python_apply_debug_offsets(dbg, d->size, version, &copy), -1);
		dbg[0] = 'X';
		assert_int_equal(python_apply_debug_offsets(dbg, d->size, version, &copy), -1);
		assert_memory_equal(&copy, base, sizeof(copy));
	}
	/* Debian's interpreter, found by its symbols; a free-threaded build
	 * (by its name: python3.13t) is refused. */
	int fd = open("/usr/bin/python3.11", O_RDONLY);
	assert_true(fd >= 0);
	struct py_file pf;
	assert_int_equal(python_inspect_file(fd, "python3.11", &pf), 0);
	assert_int_equal(pf.version & 0xffff0000u, EMBER_PY_VERSION(3, 11));
	assert_true(pf.runtime && pf.eval_lo < pf.eval_hi && pf.code_type);
	assert_int_equal(python_inspect_file(fd, "python3.13t", &pf), -1);
	assert_int_equal(python_inspect_file(fd, "libpython3.14t.so.1.0", &pf), -1);
	close(fd);
	/* Versions without a table have none to apply. */
	struct py_layout l12 = *python_layout(EMBER_PY_VERSION(3, 12));
	uint8_t none[512] = "xdebugpy";
	assert_int_equal(python_apply_debug_offsets(none, sizeof(none), EMBER_PY_VERSION(3, 12), &l12), -1);
	/* Another interpreter or process: forgotten. */
	python_set_process(py, pid, 0, 0, NULL, 0);
	assert_int_equal(python_symbolize(py, pid, slot, qp, &s), -1);
	python_free(py);
}

/* --- the memory budget of the big transient jobs (memstats.h) --------- */

struct budget_waiter {
	uint64_t want, got;
	int done;
};

static void *budget_wait_thread(void *arg)
{
	struct budget_waiter *w = arg;
	w->got = memstats_reserve(w->want);
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void test_memstats_budget(void **state)
{
	(void)state;
	assert_int_equal(memstats_reserved(), 0);
	assert_int_equal(memstats_reserve(0), 0); /* small files reserve nothing */
	/* A job larger than the budget is clamped to it and runs alone. */
	uint64_t big = memstats_reserve(MEMSTATS_BUDGET * 3);
	assert_int_equal(big, MEMSTATS_BUDGET);
	uint64_t waits = memstats_waits();
	struct budget_waiter w = { 10u << 20, 0, 0 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, budget_wait_thread, &w), 0);
	usleep(100 * 1000);
	assert_int_equal(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST), 0); /* waits its turn */
	memstats_release(big);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.got, 10u << 20);
	assert_int_equal(memstats_waits(), waits + 1);
	/* Two that fit together do not wait. */
	uint64_t second = memstats_reserve(MEMSTATS_BUDGET - (10u << 20));
	assert_int_equal(memstats_waits(), waits + 1);
	memstats_release(second);
	memstats_release(w.got);
	assert_int_equal(memstats_reserved(), 0);
	/* Gauges, and the process's own RSS and peak. */
	uint64_t g = memstats_get(MEM_SYMBOLS);
	memstats_add(MEM_SYMBOLS, 4096);
	assert_int_equal(memstats_get(MEM_SYMBOLS), g + 4096);
	memstats_add(MEM_SYMBOLS, -4096);
	assert_int_equal(memstats_get(MEM_SYMBOLS), g);
	uint64_t rss, peak;
	memstats_rss(&rss, &peak);
	assert_true(rss > 1024 * 1024 && peak >= rss);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_config_precedence),
	cmocka_unit_test(test_config_errors),
	cmocka_unit_test(test_metrics_flags),
	cmocka_unit_test(test_kallsyms),
	cmocka_unit_test(test_maps_and_stat),
	cmocka_unit_test(test_cpu_list),
	cmocka_unit_test(test_sendq_drops_oldest),
	cmocka_unit_test(test_batch_roundtrip),
	cmocka_unit_test(test_collect),
	cmocka_unit_test(test_collect_repeats),
	cmocka_unit_test(test_collect_off_cpu),
	cmocka_unit_test(test_otlp_off_cpu),
	cmocka_unit_test(test_off_cpu_flags),
	cmocka_unit_test(test_attrib_cgroup),
	cmocka_unit_test(test_attrib_environ_and_deployment),
	cmocka_unit_test(test_attrib_absent_values),
	cmocka_unit_test(test_symupload_paths),
	cmocka_unit_test(test_memstats_budget),
	cmocka_unit_test(test_tags_flag),
	cmocka_unit_test(test_pprof_and_pod_label_flags),
	cmocka_unit_test(test_kubelet_pods),
	cmocka_unit_test(test_kubelet_client),
	cmocka_unit_test(test_selfstats),
	cmocka_unit_test(test_selfstats_server),
	cmocka_unit_test(test_python_line),
	cmocka_unit_test(test_python_script),
	cmocka_unit_test(test_python_symbolize),
	cmocka_unit_test(test_cudaship_install))
