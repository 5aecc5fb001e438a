/* collect_bench - what the agent spends per sample turning a raw BPF
 * sample into its batch (agent/collect.c: the process, every frame to
 * (file, offset) or a kernel symbol, the stack, the thread's resource),
 * without BPF, the network or a real workload, so the figure is
 * repeatable.
 *
 * The load: PROCS processes (a fake /proc with the bench's own binary
 * mapped executable), 8 threads each, DISTINCT raw stacks (0 to 5 kernel
 * frames from a 2 000-symbol kallsyms, 8 to 32 user frames), drawn with a
 * skew (a few stacks take most samples, as a real profile does), SAMPLES
 * samples per batch (about a 16-core host at 19 Hz for 5 s is 1 520; the
 * protocol bench's 2 CPUs at 97 Hz about 1 000), BATCHES batches, each a
 * fresh batch as the agent makes every interval.
 *
 * usage: collect_bench [BATCHES [SAMPLES [DISTINCT [PROCS]]]]
 *        (defaults 300, 1000, 400, 4)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <linux/types.h>

#include "agent/batch.h"
#include "bench/benchutil.h"
#include "agent/collect.h"
#include "agent/files.h"
#include "agent/kallsyms.h"
#include "agent/proc.h"
#include "agent/vdso.h"
#include "oncpu_types.h"
#include "unwind_types.h"
#include "util.h"

#define KSYMS 2000
#define KBASE 0xffffffff81000000ull
#define UBASE 0x400000ull
#define USIZE 0x100000ull

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
	return bench_next(&rng);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

static void on_new_file(void *ctx, uint32_t index, const struct agent_file *f, int fd)
{
	(void)ctx;
	(void)index;
	(void)f;
	close(fd);
}

/* One raw sample as BPF writes it, and its size. */
struct raw {
	struct oncpu_sample s;
	size_t size;
};

int main(int argc, char **argv)
{
	long batches, per_batch, distinct, procs_n;
	if (bench_load_args(argc, argv, "collect_bench", (const long[]){ 300, 1000, 400, 4 }, 64,
			    &batches, &per_batch, &distinct, &procs_n) < 0)
		return 2;
	char root[] = "/tmp/ember-collect-bench-XXXXXX";
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	char exe[1024];
	ssize_t el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	struct stat st;
	if (el <= 0 || (exe[el] = '\0', stat(exe, &st) < 0)) {
		perror("/proc/self/exe");
		return 1;
	}
	char path[1200], maps[2048];
	for (long p = 0; p < procs_n; p++) {
		int pid = 5000 + (int)p;
		snprintf(path, sizeof(path), "%s/%d", root, pid);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/%d/stat", root, pid);
		/* Started at clock tick 100, as the samples below say. */
		write_file(path, "1 (bench) R 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n");
		snprintf(path, sizeof(path), "%s/%d/exe", root, pid);
		if (symlink(exe, path) < 0)
			perror(path);
		snprintf(path, sizeof(path), "%s/%d/root", root, pid);
		if (symlink("/", path) < 0)
			perror(path);
		snprintf(maps, sizeof(maps), "%08llx-%08llx r-xp 00001000 %02x:%02x %llu %s\n",
			 UBASE, UBASE + USIZE, major(st.st_dev), minor(st.st_dev),
			 (unsigned long long)st.st_ino, exe);
		snprintf(path, sizeof(path), "%s/%d/maps", root, pid);
		write_file(path, maps);
	}
	struct buf ktext = { 0 };
	for (int i = 0; i < KSYMS; i++)
		buf_printf(&ktext, "%016llx T kernel_fn_%d\n", KBASE + (unsigned long long)i * 0x100, i);
	struct kallsyms k = { 0 };
	kallsyms_parse(&k, ktext.data, ktext.len);
	struct vdso v;
	vdso_load(&v);
	struct file_registry files;
	files_init(&files, root, on_new_file, NULL);
	struct proc_table procs;
	proc_table_init(&procs, &files, root);

	/* The distinct raw stacks. */
	struct raw *raws = xcalloc((size_t)distinct, sizeof(*raws));
	for (long d = 0; d < distinct; d++) {
		struct oncpu_sample *s = &raws[d].s;
		s->kind = ONCPU_KIND_ON_CPU;
		s->value = 1;
		s->pid = 5000 + (uint32_t)(d % procs_n);
		s->tid = s->pid + 1 + (uint32_t)(next_rand() % 8);
		s->proc_start_ns = 100ull * 10000000ull;
		snprintf((char *)s->comm, sizeof(s->comm), "worker-%u", s->tid - s->pid);
		s->unwind_mode = UWM_CFI;
		s->kstack_len = (int32_t)(next_rand() % 6);
		s->ustack_len = (int32_t)(8 + next_rand() % 25);
		size_t n = 0;
		for (int i = 0; i < s->kstack_len; i++)
			s->frames[n++] = KBASE + (next_rand() % KSYMS) * 0x100 + 0x10;
		for (int i = 0; i < s->ustack_len; i++)
			s->frames[n++] = UBASE + 0x100 + next_rand() % (USIZE - 0x200);
		raws[d].size = ONCPU_HDR_SIZE + n * sizeof(__u64);
	}

	struct collector c = { .procs = &procs, .files = &files, .ksyms = &k, .vdso = &v,
			       .host_name = "bench-host", .host_arch = "amd64", .ns_per_tick = 10000000 };
	uint64_t now_ns = 1000000000ull, stacks = 0;
	/* A first batch reads the processes and the file: not counted. */
	for (int pass = 0; pass < 2; pass++) {
		long nb = pass ? batches : 1;
		struct timespec t0, t1;
		double c0 = bench_cpu_s();
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (long b = 0; b < nb; b++) {
			struct batch *bt = xmalloc(sizeof(*bt));
			batch_init(bt);
			collector_set_batch(&c, bt);
			for (long i = 0; i < per_batch; i++) {
				/* Skewed: the square of a uniform draw favours low indexes. */
				double u = (double)(next_rand() >> 11) / (double)(1ull << 53);
				const struct raw *r = &raws[(long)(u * u * (double)distinct)];
				collect_sample(&c, &r->s, r->size, now_ns);
				now_ns += 1000000;
			}
			if (pass)
				stacks += bt->nstacks;
			batch_freeze(bt);
			batch_free(bt);
			free(bt);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		double cpu = bench_cpu_s() - c0;
		if (pass)
			printf("collect: %ld batches x %ld samples (%ld distinct raw stacks, %ld processes, "
			       "%.0f stacks per batch): %.0f ns per sample (CPU), %.0f ns wall\n",
			       batches, per_batch, distinct, procs_n, (double)stacks / (double)batches,
			       cpu * 1e9 / (double)(batches * per_batch),
			       wall * 1e9 / (double)(batches * per_batch));
	}
	uint64_t looked = c.samples.hits + c.samples.misses;
	printf("frames %llu, of which unknown %llu; repeats found in the batch's sample cache: "
	       "%.1f %% of samples\n",
	       (unsigned long long)c.stats.frames, (unsigned long long)c.stats.unknown_frames,
	       looked ? 100.0 * (double)c.samples.hits / (double)looked : 0.0);
	collector_free(&c);
	proc_table_free(&procs);
	files_free(&files);
	vdso_free(&v);
	kallsyms_free(&k);
	buf_free(&ktext);
	free(raws);
	if (bench_rm_rf(root) < 0) /* the mkdtemp directory made above */
		fprintf(stderr, "cannot remove %s\n", root);
	return 0;
}
