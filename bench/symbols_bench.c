/* symbols_bench - what symbols cost: bytes of symbol storage per function,
 * and symbolization throughput (frames per second) with a cold cache (the
 * symbol file opened, mapped and validated on first use) and a warm one.
 *
 * For each ELF file given (default: Debian's libc, libstdc++, and libc's
 * detached debug info from libc6-dbg with the library's segments): build the
 * symbol file as the agent / `ember upload-symbols` would, store it in a
 * server symbol store, then look up random offsets inside its text.
 * usage: symbols_bench [FILE [DEBUG_FILE]] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "elfsyms.h"
#include "fileid.h"
#include "server/symbols/symbols.h"
#include "symfile.h"
#include "util.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	return bench_next(&rng);
}

static void bench(const char *label, const char *path, const char *debug, bool dwarf)
{
	int fd = open(path, O_RDONLY), dfd = debug ? open(debug, O_RDONLY) : fd;
	if (fd < 0 || dfd < 0) {
		printf("%-34s (missing)\n", label);
		return;
	}
	struct elfsyms_opts o = { .dwarf = dwarf };
	struct buf sf = { 0 }, err = { 0 };
	const char *why;
	uint64_t t0 = now_mono_ns();
	long n = elfsyms_extract(fd, dfd, &o, &sf, &why);
	double build_ms = (double)(now_mono_ns() - t0) / 1e6;
	struct symfile_view v;
	if (n < 0 || symfile_parse(sf.data, sf.len, &v, &why) < 0) {
		printf("%-34s failed: %s\n", label, why);
		return;
	}
	/* Functions: distinct names of outermost frames. */
	uint32_t funcs = 0;
	uint8_t *seen = calloc(v.strtab_len, 1);
	for (uint32_t i = 0; i < v.nchain; i++) {
		uint32_t parent, name;
		memcpy(&name, v.chains + (size_t)i * 16, 4);
		memcpy(&parent, v.chains + (size_t)i * 16 + 12, 4);
		if (parent == 0 && !seen[name]) {
			seen[name] = 1;
			funcs++;
		}
	}
	free(seen);
	char dir[] = "/tmp/ember-symbench-XXXXXX";
	if (!mkdtemp(dir))
		return;
	struct symbols *s;
	symbols_open(dir, &s, &err);
	struct file_id id;
	fileid_from_fd(fd, &id);
	symbols_put(s, &id, NULL, 0, sf.data, sf.len, &err);
	symbols_close(s);
	struct elf_segment seg[4];
	int ns = elfsyms_exec_segments(fd, seg, 4);
	/* Cold: a fresh store, the first lookup maps and validates the file. */
	symbols_open(dir, &s, &err);
	struct sym_frame f[SYMFILE_MAX_DEPTH];
	t0 = now_mono_ns();
	symbols_lookup(s, &id, NULL, 0, seg[0].offset + seg[0].size / 2, f, SYMFILE_MAX_DEPTH);
	double cold_us = (double)(now_mono_ns() - t0) / 1e3;
	/* Warm: random offsets across the text. */
	const int N = 2000000;
	long hits = 0, frames = 0;
	t0 = now_mono_ns();
	for (int i = 0; i < N; i++) {
		const struct elf_segment *sg = &seg[next() % (uint64_t)(ns > 0 ? ns : 1)];
		int k = symbols_lookup(s, &id, NULL, 0, sg->offset + next() % (sg->size ? sg->size : 1), f,
				       SYMFILE_MAX_DEPTH);
		hits += k > 0;
		frames += k;
	}
	double warm_ns = (double)(now_mono_ns() - t0) / N;
	symbols_close(s);
	if (bench_rm_rf(dir) < 0)
		return;
	printf("%-34s %7u functions %8u rows %8u frames %9zu bytes = %5.1f B/function; built in %6.1f ms; "
	       "first lookup (map+validate) %7.1f us; warm %4.0f ns/lookup = %.1f M frames/s (%.0f%% hits, %.2f frames/hit)\n",
	       label, funcs, v.nrow, v.nchain, sf.len, (double)sf.len / (funcs ? funcs : 1), build_ms,
	       cold_us, warm_ns, 1e3 / warm_ns, 100.0 * (double)hits / N,
	       hits ? (double)frames / (double)hits : 0.0);
	buf_free(&sf);
	buf_free(&err);
	if (dfd != fd)
		close(dfd);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc > 1) {
		bench(argv[1], argv[1], argc > 2 ? argv[2] : NULL, true);
		return 0;
	}
	const char *libc = "/lib/x86_64-linux-gnu/libc.so.6";
	uint8_t bid[ELF_BUILD_ID_MAX];
	char hex[2 * ELF_BUILD_ID_MAX + 1], dbg[512];
	int fd = open(libc, O_RDONLY);
	int bl = elfsyms_build_id(fd, bid);
	close(fd);
	hex_encode(bid, (size_t)(bl > 0 ? bl : 0), hex);
	snprintf(dbg, sizeof(dbg), "/usr/lib/debug/.build-id/%.2s/%s.debug", hex, hex + 2);
	bench("libc.so.6, ELF symbols", libc, NULL, false);
	bench("libc.so.6 + libc6-dbg DWARF", libc, dbg, true);
	bench("libstdc++.so.6, ELF symbols", "/lib/x86_64-linux-gnu/libstdc++.so.6", NULL, false);
	bench("symbols_cpp (test workload) DWARF", "build/workloads/symbols_cpp", NULL, true);
	bench("unwind_go_stripped, .gopclntab", "build/workloads/unwind_go_stripped", NULL, false);
	return 0;
}
