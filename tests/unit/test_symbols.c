/* Unit tests: lib/symfile, lib/elfsyms, lib/fileid, lib/compress and the
 * server's symbol store. */
#include "testutil.h"

#include <fcntl.h>

#include "compress.h"
#include "elfsyms.h"
#include "fileid.h"
#include "server/symbols.h"
#include "symfile.h"
#include "util.h"

static void build_sample(struct buf *out)
{
	struct symfile_builder *b = symfile_builder_new();
	/* text mapped from file offset 0x1000 at vaddr 0x401000 */
	symfile_add_segment(b, 0x1000, 0x401000, 0x3000);
	symfile_add_symbol(b, "gamma", 0x403000, 0x100, 1);
	symfile_add_symbol(b, "alpha", 0x401000, 0x80, 1);
	symfile_add_symbol(b, "alias_local", 0x401000, 0x80, 0); /* loses to alpha */
	symfile_add_symbol(b, "beta", 0x401100, 0, 1);            /* size 0: up to gamma */
	assert_int_equal(symfile_finish(b, out), 0);
	symfile_builder_free(b);
}

static void test_symfile_roundtrip(void **state)
{
	(void)state;
	struct buf data = { 0 };
	build_sample(&data);
	struct symfile_view v;
	const char *err = NULL;
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	assert_int_equal(symfile_symbol_count(&v), 3);
	uint64_t off;
	assert_string_equal(symfile_lookup(&v, 0x1000, &off), "alpha");
	assert_int_equal(off, 0);
	assert_string_equal(symfile_lookup(&v, 0x107f, NULL), "alpha");
	assert_null(symfile_lookup(&v, 0x1080, NULL)); /* gap after alpha */
	assert_string_equal(symfile_lookup(&v, 0x1100, NULL), "beta");
	assert_string_equal(symfile_lookup(&v, 0x2fff, NULL), "beta");
	assert_string_equal(symfile_lookup(&v, 0x3000, NULL), "gamma");
	assert_null(symfile_lookup(&v, 0x3100, NULL));
	assert_null(symfile_lookup(&v, 0x500, NULL)); /* outside any segment */
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
	/* A name offset past the string table. */
	struct buf bad = { 0 };
	buf_append(&bad, data.data, data.len);
	size_t sym0 = 32 + 24;
	bad.data[sym0 + 12] = (char)0xff;
	bad.data[sym0 + 13] = (char)0xff;
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	assert_non_null(strstr(err, "string table"));
	/* Unsorted symbols. */
	memcpy(bad.data, data.data, data.len);
	memset(bad.data + sym0, 0xff, 8);
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	/* Bad magic. */
	memcpy(bad.data, data.data, data.len);
	bad.data[0] = 'X';
	assert_int_equal(symfile_parse(bad.data, bad.len, &v, &err), -1);
	buf_free(&bad);
	buf_free(&data);
}

/* A function of this test binary, found again through its ELF symbols. */
__attribute__((noinline)) int ember_test_marker_function(int x)
{
	return x * 3 + 1;
}

static void test_elfsyms_on_self(void **state)
{
	(void)state;
	int fd = open("/proc/self/exe", O_RDONLY);
	assert_true(fd >= 0);
	struct buf data = { 0 };
	const char *err = NULL;
	long n = elfsyms_extract(fd, &data, &err);
	assert_true(n > 10);
	struct symfile_view v;
	assert_int_equal(symfile_parse(data.data, data.len, &v, &err), 0);
	/* The marker's file offset: its address minus where the text of this
	 * executable is mapped, plus that mapping's file offset. */
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[512];
	uintptr_t addr = (uintptr_t)ember_test_marker_function;
	uint64_t file_off = 0;
	bool found = false;
	while (fgets(line, sizeof(line), maps)) {
		unsigned long long s, e, off;
		char perms[8];
		if (sscanf(line, "%llx-%llx %7s %llx", &s, &e, perms, &off) == 4 && addr >= s &&
		    addr < e) {
			file_off = addr - s + off;
			found = true;
		}
	}
	fclose(maps);
	assert_true(found);
	assert_string_equal(symfile_lookup(&v, file_off + 2, NULL), "ember_test_marker_function");
	uint8_t bid[ELF_BUILD_ID_MAX];
	assert_true(elfsyms_build_id(fd, bid) >= 0);
	close(fd);
	buf_free(&data);
	assert_int_equal(ember_test_marker_function(1), 4);
}

static void test_elfsyms_not_elf(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char path[256];
	snprintf(path, sizeof(path), "%s/x", dir);
	write_text(path, "#!/bin/sh\necho not an elf\n");
	int fd = open(path, O_RDONLY);
	struct buf data = { 0 };
	const char *err = NULL;
	assert_int_equal(elfsyms_extract(fd, &data, &err), -1);
	assert_non_null(err);
	uint8_t bid[ELF_BUILD_ID_MAX];
	assert_int_equal(elfsyms_build_id(fd, bid), -1);
	close(fd);
	rm_rf(dir);
	free(dir);
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
	/* The definition: SHA-256(head 4 KiB || tail 4 KiB || be64 length)[:16].
	 * For "hello" head == tail == the whole file. Value from
	 * `printf 'hellohello\0\0\0\0\0\0\0\5' | sha256sum`. */
	assert_string_equal(hex, "b2c90e0c61910efa8c079b70039694de");
	assert_int_equal(fileid_from_path("/nonexistent/file", &ia), -ENOENT);
	rm_rf(dir);
	free(dir);
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
	/* One byte less than needed: refused as too large, nothing kept. */
	buf_reset(&out);
	assert_int_equal(zstd_decompress_bounded(z.data, z.len, in.len - 1, &out), -2);
	assert_int_equal(out.len, 0);
	/* Truncated and garbage input. */
	assert_int_equal(zstd_decompress_bounded(z.data, z.len / 2, in.len, &out), -1);
	assert_int_equal(zstd_decompress_bounded("garbage!", 8, 100, &out), -1);
	assert_int_equal(zstd_decompress_bounded("", 0, 100, &out), -1);
	buf_free(&in);
	buf_free(&z);
	buf_free(&out);
}

static void test_symbol_store(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	struct symbols *s;
	struct buf err = { 0 }, data = { 0 };
	assert_int_equal(symbols_open(dir, &s, &err), 0);
	struct file_id id;
	memset(id.b, 0xab, sizeof(id.b));
	assert_false(symbols_have(s, &id));
	assert_null(symbols_lookup(s, &id, 0x1000));
	/* Garbage is refused and nothing is stored. */
	assert_int_equal(symbols_put(s, &id, "nonsense", 8, &err), -1);
	assert_false(symbols_have(s, &id));
	build_sample(&data);
	buf_reset(&err);
	assert_int_equal(symbols_put(s, &id, data.data, data.len, &err), 0);
	assert_true(symbols_have(s, &id));
	assert_string_equal(symbols_lookup(s, &id, 0x1010), "alpha");
	symbols_close(s);
	/* Reopened, the file is still known and used. */
	assert_int_equal(symbols_open(dir, &s, &err), 0);
	assert_true(symbols_have(s, &id));
	assert_int_equal(symbols_count(s), 1);
	assert_string_equal(symbols_lookup(s, &id, 0x3010), "gamma");
	symbols_close(s);
	buf_free(&data);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_symfile_roundtrip),
		cmocka_unit_test(test_symfile_rejects_damage),
		cmocka_unit_test(test_elfsyms_on_self),
		cmocka_unit_test(test_elfsyms_not_elf),
		cmocka_unit_test(test_fileid),
		cmocka_unit_test(test_compress),
		cmocka_unit_test(test_symbol_store),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
