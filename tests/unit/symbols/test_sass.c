/* Unit tests: SASS mnemonics of a cubin's instructions (server/symbols/sass).
 *
 * tests/data/sass/ holds two cubins the project compiled from its own PTX
 * (pc_kernels.ptx: a memory-bound and a compute-bound kernel) with NVIDIA's
 * ptxas for sm_80 and sm_90, nvdisasm's output for each, and the expected
 * (function, offset, mnemonic) of every instruction, taken from that output
 * by an independent reader (a regular expression) -- never guessed. The
 * parser must give exactly those. The cubins are disassembled live too, by
 * $EMBER_NVDISASM or the test-only build/cudatools/nvidia/cu13/bin/nvdisasm
 * (scripts/install-test-cudatools.sh); a missing one fails the test.
 * The child process's limits:
 * a program that runs too long, writes too much, fails or is missing. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/symbols/sass.h"
#include "server/symbols/symbols.h"
#include "util.h"

#define DATA "tests/data/sass/"

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	struct buf b = { 0 };
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		buf_append(&b, chunk, n);
	fclose(f);
	*len = b.len;
	buf_append(&b, "", 1);
	return b.data;
}

/* Every row of the expected table found in t, and as many rows as t has. */
static void check_table(const struct sass_table *t, const char *tsv_path)
{
	FILE *f = fopen(tsv_path, "r");
	assert_non_null(f);
	char line[512];
	size_t rows = 0;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#')
			continue;
		char func[256], mn[64];
		unsigned long long off;
		assert_int_equal(sscanf(line, "%255s %llx %63s", func, &off, mn), 3);
		const char *got = sass_lookup(t, func, off);
		if (!got || strcmp(got, mn) != 0)
			fail_msg("%s +0x%llx: want %s, got %s", func, off, mn, got ? got : "(none)");
		rows++;
	}
	fclose(f);
	assert_true(rows > 90);
	assert_int_equal(t->ninsns, rows);
}

static void test_parse_nvdisasm_output(void **state)
{
	(void)state;
	static const char *const arch[] = { "sm80", "sm90" };
	for (int i = 0; i < 2; i++) {
		char path[256];
		snprintf(path, sizeof(path), DATA "pc_kernels_%s.nvdisasm.txt", arch[i]);
		size_t len;
		char *text = slurp(path, &len);
		struct sass_table t = { 0 };
		struct buf err = { 0 };
		assert_true(sass_parse(text, len, &t, &err) > 0);
		assert_int_equal(t.nfuncs, 2);
		snprintf(path, sizeof(path), DATA "pc_kernels_%s.mnemonics.tsv", arch[i]);
		check_table(&t, path);
		/* the global load of the memory-bound kernel, by name */
		assert_string_equal(sass_lookup(&t, "mem_bound", i == 0 ? 0x90 : 0xc0), "LDG.E");
		/* not an instruction's offset, not a function */
		assert_null(sass_lookup(&t, "mem_bound", 0x98));
		assert_null(sass_lookup(&t, "no_such_kernel", 0));
		sass_free(&t);
		buf_free(&err);
		free(text);
	}
}

static void test_parse_hostile(void **state)
{
	(void)state;
	struct sass_table t = { 0 };
	struct buf err = { 0 };
	/* instructions before any function, garbage, a predicate alone, an
	 * offset of 17 digits, a mnemonic too long, lower case: skipped */
	const char *text = "        /*0000*/  MOV R1 ;\n"
			   "//------ .text.k --------\n"
			   "        /*0010*/   @!P0 FFMA R0, R0, R5, R7 ;\n"
			   "        /*0020*/   @P1\n"
			   "        /*00000000000000030*/   MOV R1 ;\n"
			   "        /*0040*/   AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA R1 ;\n"
			   "        /*0050*/   mov R1 ;\n"
			   "        /*0060   MOV R1 ;\n"
			   "        /*0070*/   EXIT ;";
	assert_int_equal(sass_parse(text, strlen(text), &t, &err), 2);
	assert_string_equal(sass_lookup(&t, "k", 0x10), "FFMA");
	assert_string_equal(sass_lookup(&t, "k", 0x70), "EXIT");
	assert_null(sass_lookup(&t, "k", 0));
	sass_free(&t);
	/* a function name over the limit: refused */
	struct buf big = { 0 };
	buf_printf(&big, "//---- .text.");
	for (int i = 0; i < SASS_MAX_NAME + 1; i++)
		buf_append(&big, "x", 1);
	buf_printf(&big, " ----\n");
	assert_int_equal(sass_parse(big.data, big.len, &t, &err), -1);
	assert_non_null(strstr(err.data, "function name"));
	sass_free(&t);
	buf_free(&big);
	buf_free(&err);
}

static const char *nvdisasm_path(void)
{
	const char *p = getenv("EMBER_NVDISASM");
	if (p && *p)
		return p;
	p = "build/cudatools/nvidia/cu13/bin/nvdisasm";
	return access(p, X_OK) == 0 ? p : NULL;
}

static void test_disassemble_live(void **state)
{
	(void)state;
	const char *nv = nvdisasm_path();
	if (!nv)
		fail_msg("no nvdisasm: scripts/install-test-cudatools.sh puts one in build/cudatools "
			 "(make test runs it), or name one with EMBER_NVDISASM");
	static const char *const arch[] = { "sm80", "sm90" };
	for (int i = 0; i < 2; i++) {
		char cubin[256], tsv[256];
		snprintf(cubin, sizeof(cubin), DATA "pc_kernels_%s.cubin", arch[i]);
		snprintf(tsv, sizeof(tsv), DATA "pc_kernels_%s.mnemonics.tsv", arch[i]);
		struct sass_table t = { 0 };
		struct buf err = { 0 };
		long n = sass_disassemble(nv, cubin, 20000, 16u << 20, &t, &err);
		if (n < 0)
			fail_msg("%s", err.data);
		check_table(&t, tsv);
		sass_free(&t);
		buf_free(&err);
	}
}

static void test_child_limits(void **state)
{
	(void)state;
	char *dir = make_temp_dir();
	char slow[512], loud[512], bad[512];
	snprintf(slow, sizeof(slow), "%s/slow", dir);
	snprintf(loud, sizeof(loud), "%s/loud", dir);
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	write_text(slow, "#!/bin/sh\nexec sleep 10\n");
	write_text(loud, "#!/bin/sh\nexec yes '        /*0000*/ MOV R1 ;'\n");
	write_text(bad, "#!/bin/sh\necho '//---- .text.k ----'\nexit 3\n");
	assert_int_equal(chmod(slow, 0755), 0);
	assert_int_equal(chmod(loud, 0755), 0);
	assert_int_equal(chmod(bad, 0755), 0);
	struct sass_table t = { 0 };
	struct buf err = { 0 };
	uint64_t t0 = now_mono_ns();
	assert_int_equal(sass_disassemble(slow, "x.cubin", 200, 1 << 20, &t, &err), -1);
	assert_true(now_mono_ns() - t0 < 5000000000ull); /* killed, not waited for */
	assert_non_null(strstr(err.data, "ran past its time"));
	buf_reset(&err);
	assert_int_equal(sass_disassemble(loud, "x.cubin", 10000, 1 << 20, &t, &err), -1);
	assert_non_null(strstr(err.data, "more than its limit"));
	buf_reset(&err);
	assert_int_equal(sass_disassemble(bad, "x.cubin", 10000, 1 << 20, &t, &err), -1);
	assert_non_null(strstr(err.data, "exit status 3"));
	buf_reset(&err);
	assert_int_equal(sass_disassemble("/nonexistent/nvdisasm", "x.cubin", 1000, 1 << 20, &t, &err), -1);
	assert_non_null(strstr(err.data, "cannot run"));
	assert_int_equal(t.ninsns, 0);
	sass_free(&t);
	buf_free(&err);
	rm_temp_dir(dir);
}

/* The server's cubin store: hostile uploads refused, one image per CRC,
 * instructions named at lookup by nvdisasm (none without it), a project's
 * store reading through to the global one. */
static void test_cubin_store(void **state)
{
	(void)state;
	const char *nv = nvdisasm_path();
	if (!nv)
		fail_msg("no nvdisasm: scripts/install-test-cudatools.sh puts one in build/cudatools");
	char *dir = make_temp_dir();
	struct symbols *s = NULL;
	struct buf err = { 0 };
	assert_int_equal(symbols_open(dir, &s, &err), 0);
	size_t len = 0;
	char *cubin = slurp(DATA "pc_kernels_sm90.cubin", &len);
	/* not a cubin: short, not ELF, another machine */
	assert_int_equal(symbols_put_cubin(s, 1, cubin, 63, &err), -1);
	assert_non_null(strstr(err.data, "not a cubin"));
	assert_int_equal(symbols_put_cubin(s, 1, "not an ELF image at all, but long enough to be one: 0123456789abcdef", 68, &err), -1);
	char *other = malloc(len);
	memcpy(other, cubin, len);
	other[18] = 62; /* x86-64 */
	assert_int_equal(symbols_put_cubin(s, 1, other, len, &err), -1);
	free(other);
	/* stored once */
	assert_int_equal(symbols_put_cubin(s, 0xc0b1, cubin, len, &err), 0);
	assert_int_equal(symbols_put_cubin(s, 0xc0b1, cubin, len, &err), 1);
	/* no nvdisasm: no names */
	assert_null(symbols_sass(s, 0xc0b1, "mem_bound", 0xc0));
	symbols_set_nvdisasm(s, nv);
	assert_string_equal(symbols_sass(s, 0xc0b1, "mem_bound", 0xc0), "LDG.E");
	assert_string_equal(symbols_sass(s, 0xc0b1, "compute_bound", 0xa0), "ISETP.GE.U32.AND");
	assert_null(symbols_sass(s, 0xc0b1, "mem_bound", 0xc8));   /* not an instruction's offset */
	assert_null(symbols_sass(s, 0xc0b1, "no_such_kernel", 0xc0));
	assert_null(symbols_sass(s, 0xc0b2, "mem_bound", 0xc0));   /* no such cubin */
	/* a project's store: its own cubins, and the global ones */
	struct symbols *p = symbols_scope(s, "11111111-2222-3333-4444-555555555555", &err);
	assert_non_null(p);
	assert_string_equal(symbols_sass(p, 0xc0b1, "mem_bound", 0xf0), "STG.E");
	assert_int_equal(symbols_put_cubin(p, 0xc0b3, cubin, len, &err), 0);
	assert_string_equal(symbols_sass(p, 0xc0b3, "mem_bound", 0xe0), "FADD");
	assert_null(symbols_sass(s, 0xc0b3, "mem_bound", 0xe0)); /* not the other projects' */
	/* a cubin nvdisasm cannot read: no names, no crash */
	char *junk = malloc(len);
	memcpy(junk, cubin, 64);
	memset(junk + 64, 0xff, len - 64);
	assert_int_equal(symbols_put_cubin(s, 0xbad, junk, len, &err), 0);
	assert_null(symbols_sass(s, 0xbad, "mem_bound", 0xc0));
	free(junk);
	free(cubin);
	symbols_close(s);
	buf_free(&err);
	rm_rf(dir);
	free(dir);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_parse_nvdisasm_output),
	cmocka_unit_test(test_parse_hostile),
	cmocka_unit_test(test_disassemble_live),
	cmocka_unit_test(test_child_limits),
	cmocka_unit_test(test_cubin_store))
