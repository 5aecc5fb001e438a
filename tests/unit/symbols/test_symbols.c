/* Unit tests: the symbol-file format (lib/symfile), extraction from ELF
 * symbols, DWARF and .gopclntab (lib/elfsyms, dwarfsyms, gopclntab), display
 * names (lib/names), file ids, zstd, and the server's symbol store. */
#include "testutil.h"

#include <fcntl.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "compress.h"
#include "elfsyms.h"
#include "fileid.h"
#include "gopclntab.h"
#include "names.h"
#include "server/symbols/symbols.h"
#include "symfile.h"
#include "util.h"

static void build_sample(struct buf *out)
{
	struct symfile_builder *b = symfile_builder_new();
	/* text mapped from file offset 0x1000 at vaddr 0x401000 */
	symfile_add_segment(b, 0x1000, 0x401000, 0x3000);
	uint32_t alpha = symfile_chain(b, "alpha", NULL, 0, 0);
	uint32_t alias = symfile_chain(b, "alias_local", NULL, 0, 0);
	uint32_t beta = symfile_chain(b, "beta", NULL, 0, 0);
	uint32_t gamma = symfile_chain(b, "gamma", NULL, 0, 0);
	symfile_add_range(b, 0x403000, 0x403100, gamma, 1);
	symfile_add_range(b, 0x401000, 0x401080, alpha, 2);
	symfile_add_range(b, 0x401000, 0x401080, alias, 1); /* loses to alpha */
	symfile_add_range(b, 0x401100, 0x403000, beta, 1);
	/* DWARF (higher rank): inside beta, an inlined helper with lines. */
	uint32_t outer = symfile_chain(b, "beta", "beta.c", 40, 0);
	uint32_t inner = symfile_chain(b, "helper", "helper.h", 7, outer);
	symfile_add_range(b, 0x401200, 0x401210, inner, 100);
	symfile_set_flags(b, SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	assert_int_equal(symfile_finish(b, out), 0);
	symfile_builder_free(b);
}

static const char *name_at(const struct symfile_view *v, uint64_t off)
{
	struct sym_frame f[8];
	return symfile_lookup(v, off, f, 8) ? f[0].name : NULL;
}

static void test_symfile_roundtrip(void **state)
{
	(void)state;
	struct buf data = { 0 };
	build_sample(&data);
	struct symfile_view v;
	const char *err = NULL;
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	assert_int_equal(v.flags, SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	assert_string_equal(name_at(&v, 0x1000), "alpha");
	assert_string_equal(name_at(&v, 0x107f), "alpha");
	assert_null(name_at(&v, 0x1080)); /* gap after alpha */
	assert_string_equal(name_at(&v, 0x1100), "beta");
	assert_string_equal(name_at(&v, 0x2fff), "beta");
	assert_string_equal(name_at(&v, 0x3000), "gamma");
	assert_null(name_at(&v, 0x3100));
	assert_null(name_at(&v, 0x500)); /* outside any segment */
	/* The inline chain, innermost first, with files and lines. */
	struct sym_frame f[8];
	assert_int_equal(symfile_lookup(&v, 0x1205, f, 8), 2);
	assert_string_equal(f[0].name, "helper");
	assert_string_equal(f[0].file, "helper.h");
	assert_int_equal(f[0].line, 7);
	assert_string_equal(f[1].name, "beta");
	assert_string_equal(f[1].file, "beta.c");
	assert_int_equal(f[1].line, 40);
	/* beta continues after the inlined piece */
	assert_int_equal(symfile_lookup(&v, 0x1210, f, 8), 1);
	assert_string_equal(f[0].name, "beta");
	assert_null(f[0].file);
	/* max limits the frames returned */
	assert_int_equal(symfile_lookup(&v, 0x1205, f, 1), 1);
	buf_free(&data);
}

static void test_symfile_rejects_damage(void **state)
{
	(void)state;
	struct buf data = { 0 };
	build_sample(&data);
	struct symfile_view v;
	const char *err = NULL;
	/* Every truncation is rejected. */
	for (size_t n = 0; n < data.len; n++)
		assert_int_equal(symfile_parse(data.data, n, &v, &err), -1);
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	size_t rows = 48 + 24 * v.nseg;
	size_t chains = rows + 8 * v.nrow;
	struct buf bad = { 0 };
	buf_append(&bad, data.data, data.len);
	/* A row pointing past the frames. */
	bad.data[rows + 4] = (char)0xff;
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	/* Unsorted rows. */
	memcpy(bad.data, data.data, data.len);
	memset(bad.data + rows, 0xff, 4);
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	assert_non_null(strstr(err, "sorted"));
	/* A frame whose caller comes after it (a cycle would follow). */
	memcpy(bad.data, data.data, data.len);
	bad.data[chains + 12] = 9;
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	assert_non_null(strstr(err, "caller"));
	/* A name past the strings. */
	memcpy(bad.data, data.data, data.len);
	memset(bad.data + chains, 0xee, 4);
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	/* The older format is refused, not misread. */
	memcpy(bad.data, data.data, data.len);
	memcpy(bad.data, "EMSYM001", 8);
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	buf_free(&bad);
	buf_free(&data);
}

/* A function of this test binary, found again through its ELF symbols. */
__attribute__((noinline)) int ember_test_marker_function(int x)
{
	return x * 3 + 1;
}

static uint64_t self_offset(uintptr_t addr)
{
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[512];
	uint64_t off = 0;
	while (fgets(line, sizeof(line), maps)) {
		unsigned long long s, e, o;
		char perms[8];
		if (sscanf(line, "%llx-%llx %7s %llx", &s, &e, perms, &o) == 4 && addr >= s && addr < e)
			off = addr - s + o;
	}
	fclose(maps);
	return off;
}

static void test_elfsyms_on_self(void **state)
{
	(void)state;
	int fd = open("/proc/self/exe", O_RDONLY);
	assert_true(fd >= 0);
	struct buf data = { 0 };
	const char *err = NULL;
	long n = elfsyms_extract(fd, fd, NULL, &data, &err);
	assert_true(n > 10);
	struct symfile_view v;
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	assert_int_equal(v.flags, 0); /* ELF symbols only */
	uint64_t off = self_offset((uintptr_t)ember_test_marker_function);
	assert_true(off != 0);
	assert_string_equal(name_at(&v, off + 2), "ember_test_marker_function");
	uint8_t bid[ELF_BUILD_ID_MAX];
	assert_true(elfsyms_build_id(fd, bid) >= 0);
	close(fd);
	buf_free(&data);
	assert_int_equal(ember_test_marker_function(1), 4);
}

/* The address of a symbol in an ELF file, from readelf. */
static uint64_t symbol_addr(const char *path, const char *name, uint64_t *size)
{
	char cmd[512], line[256];
	snprintf(cmd, sizeof(cmd), "readelf -sW %s | awk '$8==\"%s\"{print $2, $3; exit}'", path, name);
	uint64_t v = 0;
	unsigned long long sz = 0;
	char hex[64] = "";
	if (command_line(cmd, line, sizeof(line)) && sscanf(line, "%63s %llu", hex, &sz) == 2)
		v = strtoull(hex, NULL, 16);
	*size = sz;
	return v;
}

static void test_dwarf_inlines_and_lines(void **state)
{
	(void)state;
	const char *path = "build/workloads/symbols_cpp";
	const char *fn = "_ZN4work13process_batchERKSt6vectorImSaImEEm";
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		fail_msg("%s not built: run make first", path);
	assert_true(elfsyms_has_dwarf(fd));
	uint64_t size;
	uint64_t addr = symbol_addr(path, fn, &size);
	assert_true(addr && size);
	struct elfsyms_opts o = { .dwarf = true };
	struct buf data = { 0 };
	const char *err = NULL;
	assert_true(elfsyms_extract(fd, fd, &o, &data, &err) > 0);
	struct symfile_view v;
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	assert_int_equal(v.flags, SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	/* Somewhere in process_batch the inlined mix_word sits inside the
	 * inlined checksum, inside process_batch, each with file and line.
	 * (vaddr = file offset in this non-PIE-offset layout: first segment
	 * maps offset 0 at vaddr 0.) */
	struct elf_segment segs[4];
	int ns = elfsyms_exec_segments(fd, segs, 4);
	assert_true(ns > 0);
	bool seen = false;
	for (uint64_t a = addr; a < addr + size && !seen; a++) {
		uint64_t off = a - segs[0].vaddr + segs[0].offset;
		struct sym_frame f[8];
		int n = symfile_lookup(&v, off, f, 8);
		if (n == 3 && strstr(f[0].name, "mix_word") && strstr(f[1].name, "checksum") &&
		    strcmp(f[2].name, fn) == 0) {
			seen = true;
			for (int i = 0; i < 3; i++) {
				assert_non_null(f[i].file);
				assert_non_null(strstr(f[i].file, "symbols_cpp.cpp"));
				assert_true(f[i].line > 0);
			}
		}
	}
	assert_true(seen);
	/* Without DWARF: only the ELF symbols, and no lines. */
	buf_reset(&data);
	assert_true(elfsyms_extract(fd, fd, NULL, &data, &err) > 0);
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	assert_int_equal(v.flags, 0);
	close(fd);
	buf_free(&data);
}

/* Extracts fd's symbols with the DWARF of its debug file dfd into data:
 * the symbol file parses (into v) and has line tables. */
static void extract_with_debug_file(int fd, int dfd, struct buf *data, struct symfile_view *v)
{
	assert_true(elfsyms_has_dwarf(dfd));
	struct elfsyms_opts o = { .dwarf = true };
	const char *err = NULL;
	assert_true(elfsyms_extract(fd, dfd, &o, data, &err) > 0);
	assert_int_equal(symfile_parse(data->data, data->len, v, &err), 0);
	assert_true(v->flags & SYMFILE_HAS_LINES);
}

static void test_separate_debug_file(void **state)
{
	(void)state;
	/* Identity from the stripped file, symbols from the unstripped one,
	 * found through .gnu_debuglink. */
	char *dir = make_temp_dir();
	char cmd[2048], exe[256], dbg[256];
	snprintf(dbg, sizeof(dbg), "%s/symbols_cpp.debug", dir);
	snprintf(exe, sizeof(exe), "%s/symbols_cpp", dir);
	snprintf(cmd, sizeof(cmd),
		 "objcopy --only-keep-debug build/workloads/symbols_cpp %s && "
		 "objcopy --strip-all --add-gnu-debuglink=%s build/workloads/symbols_cpp %s", dbg, dbg, exe);
	assert_int_equal(system(cmd), 0);
	int fd = open(exe, O_RDONLY), dfd = open(dbg, O_RDONLY);
	assert_true(fd >= 0 && dfd >= 0);
	char link[256];
	assert_int_equal(elfsyms_debuglink(fd, link, sizeof(link)), 0);
	assert_string_equal(link, "symbols_cpp.debug");
	assert_false(elfsyms_has_dwarf(fd));
	struct buf data = { 0 };
	struct symfile_view v;
	extract_with_debug_file(fd, dfd, &data, &v);
	/* The segments are the stripped executable's: the debug file's own
	 * program headers carry no file offsets. */
	struct elf_segment segs[4];
	assert_true(elfsyms_exec_segments(fd, segs, 4) > 0);
	uint64_t size, addr = symbol_addr("build/workloads/symbols_cpp", "main", &size);
	struct sym_frame f[8];
	assert_true(symfile_lookup(&v, addr - segs[0].vaddr + segs[0].offset, f, 8) >= 1);
	assert_string_equal(f[symfile_lookup(&v, addr - segs[0].vaddr + segs[0].offset, f, 8) - 1].name, "main");
	close(fd);
	close(dfd);
	buf_free(&data);
	rm_temp_dir(dir);
}

/* elfsyms_open_debug_file finds a debug file for fd: the one at want
 * when want is not NULL. */
static void expect_debug_file(int fd, const char *exe, const char *root, const char *want)
{
	char found[4400];
	int dfd = elfsyms_open_debug_file(fd, exe, root, found, sizeof(found));
	if (dfd < 0)
		fail_msg("no debug file for %s (want %s)", exe, want ? want : "any");
	if (want)
		assert_string_equal(found, want);
	close(dfd);
}

/* Local debug files, found as gdb finds them: by build ID under a root,
 * then by .gnu_debuglink beside the file, in .debug/ beside it and under
 * the root by directory; another build's file under the right name is
 * refused (build ID, else the link's CRC). */
static void test_local_debug_file(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char cmd[4096], exe[256], found[4400];
	snprintf(exe, sizeof(exe), "%s/bin/wl", dir);
	/* wl: stripped, linked to wl.debug; nobuild: the same without a
	 * build ID (so only the CRC can tell). */
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; mkdir -p bin root; "
		 "objcopy --only-keep-debug %s/build/workloads/symbols_cpp wl.debug; "
		 "objcopy --strip-all --add-gnu-debuglink=wl.debug %s/build/workloads/symbols_cpp bin/wl; "
		 "objcopy --remove-section=.note.gnu.build-id %s/build/workloads/symbols_cpp nobuild.full; "
		 "objcopy --only-keep-debug nobuild.full nobuild.debug 2>/dev/null; "
		 "objcopy --strip-all --add-gnu-debuglink=nobuild.debug nobuild.full bin/nobuild; "
		 "id=$(readelf -n bin/wl | sed -n 's/.*Build ID: //p'); "
		 "mkdir -p root/.build-id/$(echo $id | cut -c1-2); "
		 "echo $id > build-id",
		 dir, getenv("PWD"), getenv("PWD"), getenv("PWD"));
	assert_int_equal(system(cmd), 0);
	char root[512], path[1200];
	snprintf(root, sizeof(root), "%s/root", dir);
	int fd = open(exe, O_RDONLY);
	assert_true(fd >= 0);
	/* Nothing there yet. */
	assert_int_equal(elfsyms_open_debug_file(fd, exe, root, found, sizeof(found)), -1);
	/* By build ID. */
	char id[200] = "";
	snprintf(path, sizeof(path), "%s/build-id", dir);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(id, sizeof(id), f));
	fclose(f);
	id[strcspn(id, "\n")] = '\0';
	assert_true(strlen(id) > 8);
	char byid[1024];
	snprintf(byid, sizeof(byid), "%s/.build-id/%.2s/%s.debug", root, id, id + 2);
	snprintf(cmd, sizeof(cmd), "cp %s/wl.debug %s", dir, byid);
	assert_int_equal(system(cmd), 0);
	int dfd = elfsyms_open_debug_file(fd, exe, root, found, sizeof(found));
	assert_true(dfd >= 0);
	assert_string_equal(found, byid);
	struct buf data = { 0 };
	struct symfile_view v;
	extract_with_debug_file(fd, dfd, &data, &v);
	buf_free(&data);
	close(dfd);
	/* Another build's file under the build ID's name: refused. */
	snprintf(cmd, sizeof(cmd), "cp %s/nobuild.debug %s", dir, byid);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(elfsyms_open_debug_file(fd, exe, root, found, sizeof(found)), -1);
	unlink(byid);
	/* By .gnu_debuglink: under the root by directory, in .debug/, beside
	 * the file (in the order gdb tries the last three: beside first). */
	snprintf(path, sizeof(path), "%s%s/bin", root, dir);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s %s/bin/.debug && cp %s/wl.debug %s/ && cp %s/wl.debug %s/bin/.debug/",
		 path, dir, dir, path, dir, dir);
	assert_int_equal(system(cmd), 0);
	char want[1024];
	snprintf(want, sizeof(want), "%s/bin/.debug/wl.debug", dir);
	expect_debug_file(fd, exe, root, want);
	unlink(want);
	snprintf(want, sizeof(want), "%s%s/bin/wl.debug", root, dir);
	expect_debug_file(fd, exe, root, want);
	snprintf(cmd, sizeof(cmd), "cp %s/wl.debug %s/bin/", dir, dir);
	assert_int_equal(system(cmd), 0);
	snprintf(want, sizeof(want), "%s/bin/wl.debug", dir);
	expect_debug_file(fd, exe, root, want);
	unlink(want);
	/* No directory known: only the root's. */
	assert_int_equal(elfsyms_open_debug_file(fd, NULL, root, found, sizeof(found)), -1);
	close(fd);
	/* Without build IDs the CRC decides: the right file, then a wrong one
	 * under its name. */
	snprintf(exe, sizeof(exe), "%s/bin/nobuild", dir);
	fd = open(exe, O_RDONLY);
	assert_true(fd >= 0);
	uint8_t bid[ELF_BUILD_ID_MAX];
	assert_int_equal(elfsyms_build_id(fd, bid), 0);
	snprintf(cmd, sizeof(cmd), "cp %s/nobuild.debug %s/bin/", dir, dir);
	assert_int_equal(system(cmd), 0);
	expect_debug_file(fd, exe, root, NULL);
	snprintf(cmd, sizeof(cmd), "printf x >> %s/bin/nobuild.debug", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(elfsyms_open_debug_file(fd, exe, root, found, sizeof(found)), -1);
	close(fd);
	rm_temp_dir(dir);
}

struct go_seen {
	uint64_t lo;
	int count;
};

static void on_go(void *ctx, uint64_t lo, uint64_t hi, const char *name, size_t len)
{
	struct go_seen *g = ctx;
	(void)hi;
	g->count++;
	if (len == strlen("main.hashBlock") && memcmp(name, "main.hashBlock", len) == 0)
		g->lo = lo;
}

static void test_gopclntab_stripped_go(void **state)
{
	(void)state;
	const char *path = "build/workloads/unwind_go_stripped";
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		fail_msg("%s not built: run make first", path);
	/* No symbol table at all: only .gopclntab names the functions. */
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "readelf -S %s | grep -q '\\.symtab'", path);
	assert_int_not_equal(system(cmd), 0);
	struct buf data = { 0 };
	const char *err = NULL;
	assert_true(elfsyms_extract(fd, fd, NULL, &data, &err) > 1000);
	struct symfile_view v;
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	/* Find main.hashBlock's address through the table itself, then look
	 * it up through the symbol file by file offset. */
	/* The section's bytes, read with libelf. */
	struct buf tab = { 0 };
	(void)elf_version(EV_CURRENT);
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	size_t shstrndx;
	assert_int_equal(elf_getshdrstrndx(elf, &shstrndx), 0);
	for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
		GElf_Shdr sh;
		gelf_getshdr(scn, &sh);
		if (strcmp(elf_strptr(elf, shstrndx, sh.sh_name), ".gopclntab") == 0) {
			Elf_Data *d = elf_getdata(scn, NULL);
			buf_append(&tab, d->d_buf, d->d_size);
		}
	}
	elf_end(elf);
	assert_true(tab.len > 0);
	struct go_seen g = { 0, 0 };
	assert_true(gopclntab_functions((const uint8_t *)tab.data, tab.len, 0x401000, on_go, &g) > 1000);
	assert_true(g.lo != 0);
	struct elf_segment segs[4];
	assert_true(elfsyms_exec_segments(fd, segs, 4) > 0);
	const char *found = name_at(&v, g.lo + 8 - segs[0].vaddr + segs[0].offset);
	assert_non_null(found);
	assert_string_equal(found, "main.hashBlock");
	/* Garbage is refused. */
	assert_int_equal(gopclntab_functions((const uint8_t *)"\xf1\xff\xff\xff\0\0\1\x08", 8, 0, on_go, &g), -1);
	buf_free(&tab);
	buf_free(&data);
	close(fd);
}

static void check_name(const char *raw, const char *binary, const char *want)
{
	struct buf b = { 0 };
	display_name(raw, binary, false, false, &b);
	if (strcmp(b.data, want) != 0)
		fail_msg("display_name(%s) = %s, want %s", raw, b.data, want);
	buf_reset(&b);
	display_name(raw, binary, true, false, &b);
	assert_string_equal(b.data, raw); /* raw names stay as they are */
	buf_free(&b);
}

static void test_display_names(void **state)
{
	(void)state;
#define APP "app"
#define LIBC "libc.so.6"
	static const struct {
		const char *raw, *binary, *want;
	} names[] = {
		{ "_ZN9SortStage7processERSt6vectorImSaImEE", APP, "SortStage::process" },
		{ "_ZN11unwind_rust9mix_block17h1c0fac3cfcb01fe5E", APP, "unwind_rust::mix_block" },
		{ "_RNvNtCsjrHSEGnQ3l9_3std2rt19lang_start_internal", APP, "std::rt::lang_start_internal" },
		{ "__GI___libc_write", LIBC, "write" },
		{ "__memcpy_avx_unaligned_erms", LIBC, "memcpy" },
		{ "__read_nocancel", LIBC, "read" },
		{ "__libc_start_main", LIBC, "start_main" },
		{ "main", APP, "main" },
		{ "__GI___libc_write", "libfoo.so", "__GI___libc_write" }, /* only glibc */
		{ "_Znot_really_mangled", APP, "_Znot_really_mangled" },
	};
#undef APP
#undef LIBC
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		check_name(names[i].raw, names[i].binary, names[i].want);
	struct buf b = { 0 };
	display_name("_ZN9SortStage7processERSt6vectorImSaImEE", "app", false, true, &b);
	assert_string_equal(b.data, "SortStage::process(std::vector<unsigned long, std::allocator<unsigned long> >&)");
	buf_free(&b);
	assert_true(is_libc("/lib/x86_64-linux-gnu/libc.so.6"));
	assert_true(is_libc("libc-2.31.so"));
	assert_false(is_libc("libcrypto.so.3"));
}

static void test_fileid(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char a[256], b[256];
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(b, sizeof(b), "%s/b", dir);
	write_text(a, "hello");
	write_text(b, "hellp");
	struct file_id ia, ib, ia2;
	assert_int_equal(fileid_from_path(a, &ia), 0);
	assert_int_equal(fileid_from_path(b, &ib), 0);
	assert_int_equal(fileid_from_path(a, &ia2), 0);
	assert_true(fileid_equal(&ia, &ia2));
	assert_false(fileid_equal(&ia, &ib));
	char hex[FILE_ID_HEX_LEN + 1];
	fileid_hex(&ia, hex);
	struct file_id back;
	assert_int_equal(fileid_parse_hex(hex, &back), 0);
	assert_true(fileid_equal(&ia, &back));
	/* SHA-256(head 4 KiB || tail 4 KiB || be64 length)[:16]; for "hello"
	 * head == tail == the file: printf 'hellohello\0\0\0\0\0\0\0\5' | sha256sum */
	assert_string_equal(hex, "b2c90e0c61910efa8c079b70039694de");
	assert_int_equal(fileid_from_path("/nonexistent/file", &ia), -ENOENT);
	rm_temp_dir(dir);
}

static void test_compress(void **state)
{
	(void)state;
	struct buf in = { 0 }, z = { 0 }, out = { 0 };
	for (int i = 0; i < 100000; i++)
		buf_printf(&in, "%d,", i % 97);
	assert_int_equal(zstd_compress_buf(in.data, in.len, 3, &z), 0);
	assert_true(z.len < in.len / 4);
	assert_int_equal(zstd_decompress_bounded(z.data, z.len, in.len, &out), 0);
	assert_int_equal(out.len, in.len);
	assert_memory_equal(out.data, in.data, in.len);
	buf_reset(&out);
	assert_int_equal(zstd_decompress_bounded(z.data, z.len, in.len - 1, &out), -2);
	assert_int_equal(out.len, 0);
	assert_int_equal(zstd_decompress_bounded(z.data, z.len / 2, in.len, &out), -1);
	assert_int_equal(zstd_decompress_bounded("garbage!", 8, 100, &out), -1);
	assert_int_equal(zstd_decompress_bounded("", 0, 100, &out), -1);
	/* The same into a file, a chunk at a time: whole, over the bound,
	 * truncated, garbage. */
	FILE *f = tmpfile();
	assert_non_null(f);
	size_t n = 1;
	assert_int_equal(zstd_decompress_to_fd(z.data, z.len, in.len, fileno(f), &n), 0);
	assert_int_equal(n, in.len);
	char *back = malloc(in.len);
	assert_int_equal(pread(fileno(f), back, in.len, 0), (ssize_t)in.len);
	assert_memory_equal(back, in.data, in.len);
	free(back);
	assert_int_equal(zstd_decompress_to_fd(z.data, z.len, in.len - 1, fileno(f), &n), -2);
	assert_true(n <= in.len - 1);
	assert_int_equal(zstd_decompress_to_fd(z.data, z.len / 2, in.len, fileno(f), &n), -1);
	assert_int_equal(zstd_decompress_to_fd("garbage!", 8, 100, fileno(f), &n), -1);
	fclose(f);
	buf_free(&in);
	buf_free(&z);
	buf_free(&out);
}

static int zstd_sink(void *ctx, const void *data, size_t n)
{
	return zstd_stream_write(data, n, ctx);
}

/* A library of 40 000 one-instruction functions, hidden (so in .symtab
 * only, not .dynsym): more symbols than one chunk (elfsyms.c reads SYM_CHUNK = 32 768 at a time). Extracted whole and
 * streamed through zstd piece by piece (what the agent uploads), the two
 * symbol files are the same bytes, and names on both sides of the chunk
 * boundary are found. */
static void test_elfsyms_chunks_and_stream(void **state)
{
	(void)state;
	char dir[] = "/tmp/ember-test-chunks-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char src[128], lib[128], cmd[512];
	snprintf(src, sizeof(src), "%s/many.s", dir);
	snprintf(lib, sizeof(lib), "%s/libmany.so", dir);
	FILE *f = fopen(src, "w");
	assert_non_null(f);
	fputs(".text\n", f);
	for (int i = 0; i < 40000; i++)
		fprintf(f, ".globl many_f%d\n.hidden many_f%d\n.type many_f%d,@function\nmany_f%d:\n\tret\n"
			   ".size many_f%d,1\n", i, i, i, i, i);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "gcc -shared -nostdlib -o %s %s", lib, src);
	assert_int_equal(system(cmd), 0);
	int fd = open(lib, O_RDONLY);
	assert_true(fd >= 0);

	struct buf whole = { 0 }, z = { 0 }, back = { 0 };
	const char *err = NULL;
	long n = elfsyms_extract(fd, fd, NULL, &whole, &err);
	assert_true(n >= 40000);
	assert_int_equal(zstd_stream_begin(3), 0);
	size_t len = 0;
	assert_int_equal(elfsyms_extract_to(fd, fd, NULL, zstd_sink, &z, &len, &err), n);
	assert_int_equal(zstd_stream_end(&z), 0);
	assert_int_equal(len, whole.len);
	assert_true(z.len < whole.len);
	assert_int_equal(zstd_decompress_bounded(z.data, z.len, whole.len, &back), 0);
	assert_int_equal(back.len, whole.len);
	assert_memory_equal(back.data, whole.data, whole.len);

	struct symfile_view v;
	assert_int_equal(symfile_parse(whole.data, whole.len, &v, &err), 0);
	const int probe[] = { 0, 1, 32767, 32768, 32769, 39999 };
	struct elf_symbol_query q[6];
	char names[6][32];
	for (int i = 0; i < 6; i++) {
		snprintf(names[i], sizeof(names[i]), "many_f%d", probe[i]);
		q[i] = (struct elf_symbol_query){ .name = names[i] };
	}
	assert_int_equal(elfsyms_lookup(fd, q, 6), 6);
	struct elf_segment seg[4];
	assert_true(elfsyms_exec_segments(fd, seg, 4) >= 1);
	for (int i = 0; i < 6; i++) {
		uint64_t off = q[i].value - seg[0].vaddr + seg[0].offset;
		assert_string_equal(name_at(&v, off), names[i]);
	}
	close(fd);
	buf_free(&whole);
	buf_free(&z);
	buf_free(&back);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* The zstd stream: pieces of any size make one frame of their concatenation. */
static void test_compress_stream(void **state)
{
	(void)state;
	struct buf in = { 0 }, z = { 0 }, out = { 0 };
	for (int i = 0; i < 300000; i++)
		buf_printf(&in, "%d;", i % 1013);
	assert_int_equal(zstd_stream_begin(3), 0);
	for (size_t at = 0, step = 1; at < in.len; at += step, step = step * 3 + 1)
		assert_int_equal(zstd_stream_write(in.data + at, MIN(step, in.len - at), &z), 0);
	assert_int_equal(zstd_stream_end(&z), 0);
	assert_true(z.len < in.len / 4);
	assert_int_equal(zstd_decompress_bounded(z.data, z.len, in.len, &out), 0);
	assert_int_equal(out.len, in.len);
	assert_memory_equal(out.data, in.data, in.len);
	/* A second stream on the same thread starts afresh. */
	buf_reset(&z);
	buf_reset(&out);
	assert_int_equal(zstd_stream_begin(3), 0);
	assert_int_equal(zstd_stream_write("abc", 3, &z), 0);
	assert_int_equal(zstd_stream_end(&z), 0);
	assert_int_equal(zstd_decompress_bounded(z.data, z.len, 3, &out), 0);
	assert_int_equal(out.len, 3);
	assert_memory_equal(out.data, "abc", 3);
	buf_free(&in);
	buf_free(&z);
	buf_free(&out);
}

static void symbols_only(struct buf *out, const char *name)
{
	struct symfile_builder *b = symfile_builder_new();
	symfile_add_segment(b, 0x1000, 0x401000, 0x3000);
	symfile_add_range(b, 0x401000, 0x401080, symfile_chain(b, name, NULL, 0, 0), 1);
	assert_int_equal(symfile_finish(b, out), 0);
	symfile_builder_free(b);
}

static void test_symbol_store(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct symbols *s;
	struct buf err = { 0 }, rich = { 0 }, poor = { 0 };
	assert_int_equal(symbols_open(dir, &s, &err), 0);
	struct file_id id;
	memset(id.b, 0xab, sizeof(id.b));
	struct sym_frame f[8];
	assert_int_equal(symbols_quality(s, &id), -1);
	assert_int_equal(symbols_lookup(s, &id, NULL, 0, 0x1000, f, 8), 0);
	/* Garbage is refused and nothing is stored. */
	assert_int_equal(symbols_put(s, &id, NULL, 0, "nonsense", 8, &err), -1);
	assert_false(symbols_have(s, &id));
	/* ELF symbols first (as an agent uploads them). */
	symbols_only(&poor, "alpha_from_agent");
	assert_int_equal(symbols_put(s, &id, NULL, 0, poor.data, poor.len, &err), 0);
	assert_int_equal(symbols_quality(s, &id), 0);
	assert_int_equal(symbols_lookup(s, &id, NULL, 0, 0x1010, f, 8), 1);
	assert_string_equal(f[0].name, "alpha_from_agent");
	/* DWARF replaces them (as `ember upload-symbols` does)... */
	build_sample(&rich);
	assert_int_equal(symbols_put(s, &id, NULL, 0, rich.data, rich.len, &err), 0);
	assert_int_equal(symbols_quality(s, &id), SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	assert_int_equal(symbols_lookup(s, &id, NULL, 0, 0x1205, f, 8), 2);
	assert_string_equal(f[0].name, "helper");
	/* ...and an agent's later ELF-symbol upload does not undo that. */
	assert_int_equal(symbols_put(s, &id, NULL, 0, poor.data, poor.len, &err), 1);
	assert_int_equal(symbols_quality(s, &id), SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	/* A stripped copy of the same build (another file id, same build ID)
	 * finds the symbols through the build ID once they were stored with it. */
	struct file_id copy;
	memset(copy.b, 0xcd, sizeof(copy.b));
	const uint8_t bid[4] = { 0xde, 0xad, 0xbe, 0xef };
	assert_int_equal(symbols_lookup(s, &copy, bid, 4, 0x1205, f, 8), 0);
	assert_int_equal(symbols_put(s, &id, bid, 4, rich.data, rich.len, &err), 1);
	assert_int_equal(symbols_lookup(s, &copy, bid, 4, 0x1205, f, 8), 2);
	assert_int_equal(symbols_quality_any(s, &copy, bid, 4), SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	assert_int_equal(symbols_quality_any(s, &copy, NULL, 0), -1);
	symbols_close(s);
	/* Reopened, the stored file is still known and used. */
	assert_int_equal(symbols_open(dir, &s, &err), 0);
	assert_true(symbols_have(s, &id));
	assert_int_equal(symbols_count(s), 1);
	assert_int_equal(symbols_lookup(s, &id, NULL, 0, 0x3010, f, 8), 1);
	assert_string_equal(f[0].name, "gamma");
	assert_int_equal(symbols_lookup(s, &copy, bid, 4, 0x1205, f, 8), 2); /* the build ID, too */
	symbols_close(s);
	buf_free(&rich);
	buf_free(&poor);
	buf_free(&err);
	rm_temp_dir(dir);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_symfile_roundtrip),
	cmocka_unit_test(test_symfile_rejects_damage),
	cmocka_unit_test(test_elfsyms_on_self),
	cmocka_unit_test(test_dwarf_inlines_and_lines),
	cmocka_unit_test(test_separate_debug_file),
	cmocka_unit_test(test_local_debug_file),
	cmocka_unit_test(test_gopclntab_stripped_go),
	cmocka_unit_test(test_display_names),
	cmocka_unit_test(test_fileid),
	cmocka_unit_test(test_compress),
	cmocka_unit_test(test_compress_stream),
	cmocka_unit_test(test_elfsyms_chunks_and_stream),
	cmocka_unit_test(test_symbol_store))
