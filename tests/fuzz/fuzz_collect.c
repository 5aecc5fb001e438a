/* Fuzz target: the agent's reading of ring-buffer records
 * (agent/collect.c), which carry what a sampled process's stack held, and
 * its cache of repeats (agent/samplecache.c). The input is a run of
 * records, each a 2-byte little-endian length and that many bytes of
 * struct oncpu_sample (header, then frames; a short one is malformed).
 * Records whose pid field is even are given pid 4242, a process of a fake
 * /proc that maps this binary, so frames resolve. Two collectors read
 * every record, one caching repeats and one not: their batches and
 * counters must come out the same. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/types.h>

#include "agent/batch.h"
#include "agent/collect.h"
#include "agent/files.h"
#include "agent/kallsyms.h"
#include "agent/proc.h"
#include "agent/vdso.h"
#include "oncpu_types.h"

/* Made once for the whole run (setup): the fake /proc, the kernel symbols
 * and the vDSO every input's collectors read. */
static char root[] = "/tmp/ember-fuzz-collect-XXXXXX"; /* mkdtemp template */
static bool ready;
static struct kallsyms ksyms;
static struct vdso vdso;

static const char kallsyms_text[] = "ffffffff81000000 T _stext\n"
				    "ffffffff81000100 T leaf_fn\n"
				    "ffffffff81000200 T outer_fn\n"
				    "ffffffff81000300 t mod_fn\t[somemod]\n";

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		abort();
}

static void remove_root(void)
{
	static const char *const names[] = { "4242/stat", "4242/exe", "4242/root", "4242/maps",
					     "4242", "" };
	char path[1200];
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", root, names[i]);
		(void)remove(path);
	}
}

static void setup(void)
{
	if (!mkdtemp(root))
		abort();
	atexit(remove_root);
	char exe[1024], path[1200], maps[2048];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	struct stat st;
	if (n <= 0 || (exe[n] = '\0', stat(exe, &st) < 0))
		abort();
	snprintf(path, sizeof(path), "%s/4242", root);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/4242/stat", root);
	write_file(path, "4242 (app) R 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0\n");
	snprintf(path, sizeof(path), "%s/4242/exe", root);
	if (symlink(exe, path) < 0)
		abort();
	snprintf(path, sizeof(path), "%s/4242/root", root);
	if (symlink("/", path) < 0)
		abort();
	snprintf(maps, sizeof(maps),
		 "00400000-00500000 r-xp 00001000 %02x:%02x %llu %s\n"
		 "00700000-00710000 r-xp 00000000 00:00 0\n"
		 "7fff00000000-7fff00002000 r-xp 00000000 00:00 0 [vdso]\n",
		 major(st.st_dev), minor(st.st_dev), (unsigned long long)st.st_ino, exe);
	snprintf(path, sizeof(path), "%s/4242/maps", root);
	write_file(path, maps);
	kallsyms_parse(&ksyms, kallsyms_text, sizeof(kallsyms_text) - 1);
	vdso_load(&vdso);
}

static void on_new_file(void *ctx, uint32_t index, const struct agent_file *f, int fd)
{
	(void)ctx;
	(void)index;
	(void)f;
	close(fd);
}

struct side {
	struct file_registry files;
	struct proc_table procs;
	struct batch b;
	struct collector c;
};

static void side_open(struct side *s, bool cache)
{
	files_init(&s->files, root, on_new_file, NULL);
	proc_table_init(&s->procs, &s->files, root);
	batch_init(&s->b);
	s->c = (struct collector){ .batch = &s->b, .procs = &s->procs, .files = &s->files,
				   .ksyms = &ksyms, .vdso = &vdso, .host_name = "h",
				   .host_arch = "amd64", .ns_per_tick = 10000000 };
	if (cache)
		collector_set_batch(&s->c, &s->b);
}

static void side_close(struct side *s)
{
	collector_free(&s->c);
	batch_free(&s->b);
	proc_table_free(&s->procs);
	files_free(&s->files);
}

static bool same(const void *a, const void *b, size_t n)
{
	return n == 0 || memcmp(a, b, n) == 0;
}

static void check_same(const struct side *x, const struct side *y)
{
	const struct batch *a = &x->b, *b = &y->b;
	if (memcmp(&x->c.stats, &y->c.stats, sizeof(x->c.stats)) != 0 ||
	    a->nsamples != b->nsamples || a->total_value != b->total_value ||
	    a->nstack_ids != b->nstack_ids || a->nframes != b->nframes ||
	    !same(a->samples, b->samples, a->nsamples * sizeof(*a->samples)) ||
	    !same(a->stack_ids, b->stack_ids, a->nstack_ids * sizeof(uint32_t)))
		abort();
	uint64_t sum = 0;
	for (size_t i = 0; i < a->nsamples; i++)
		sum += a->samples[i].value;
	if (sum != a->total_value)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready) {
		setup();
		ready = true;
	}
	if (size > 65536)
		return 0;
	struct side cached, plain;
	side_open(&cached, true);
	side_open(&plain, false);
	__u64 rec[sizeof(struct oncpu_sample) / sizeof(__u64) + 1];
	uint64_t now = 1000000000ull;
	while (size >= 2) {
		size_t len = (size_t)data[0] | (size_t)data[1] << 8;
		data += 2;
		size -= 2;
		len = len < size ? len : size;
		len = len < sizeof(struct oncpu_sample) ? len : sizeof(struct oncpu_sample);
		memset(rec, 0, sizeof(rec));
		memcpy(rec, data, len);
		data += len;
		size -= len;
		struct oncpu_sample *s = (struct oncpu_sample *)rec;
		if (!(s->pid & 1)) {
			s->pid = 4242;
			s->proc_start_ns = 500ull * 10000000ull;
		}
		collect_sample(&cached.c, rec, len, now);
		collect_sample(&plain.c, rec, len, now);
		now += 1000000;
	}
	check_same(&cached, &plain);
	side_close(&cached);
	side_close(&plain);
	return 0;
}
