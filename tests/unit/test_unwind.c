/* Unit tests: ember's native unwinder without BPF or a kernel hook.
 *
 * The unwinding step (bpf/unwind_step.h) is compiled here as ordinary C.
 * Real workloads built without frame pointers (build/workloads/unwind_*)
 * are started, stopped at arbitrary moments with ptrace, and their stacks
 * are unwound from their registers and memory (process_vm_readv), with the
 * tables built by the agent's own code (agent/unwind_table.c, files.c,
 * proc.c). Every stack must reach main (or the Go runtime's entry) and end
 * at the outermost frame. Also property tests of the table builder on
 * Debian's libc. Needs root (ptrace) and `make` to have built the
 * workloads. */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <linux/types.h>

#include "agent/files.h"
#include "agent/proc.h"
#include "agent/unwind_table.h"
#include "elfsyms.h"
#include "symfile.h"
#include "unwind_types.h"
#include "util.h"

/* --- the environment unwind_step.h expects, in user space ------------- */

static pid_t target;
static struct unwind_entry *entries;
static size_t nentries, capentries;
static struct unwind_file_info file_info[4096];
static struct rule_set rules;

static int read_u64(__u64 addr, __u64 *out)
{
	struct iovec local = { out, 8 }, remote = { (void *)(uintptr_t)addr, 8 };
	return process_vm_readv(target, &local, 1, &remote, 1, 0) == 8 ? 0 : 1;
}

static const struct unwind_entry *entry_at(__u32 i)
{
	return i < nentries ? &entries[i] : NULL;
}

static const struct unwind_rule *rule_at(__u32 i)
{
	return i < rules.count ? &rules.rules[i] : NULL;
}

static const struct unwind_file_info *file_at(__u32 i)
{
	return i < ARRAY_SIZE(file_info) ? &file_info[i] : NULL;
}

#define UW_INLINE static inline
#define UW_READ_U64(addr, out) read_u64((addr), (out))
#define UW_ENTRY(i) entry_at(i)
#define UW_RULE(i) rule_at(i)
#define UW_FILE(i) file_at(i)
#define UW_MAPPING_INDEX(p, pid, pc) ((void)(pid), uw_find_mapping((p), (pc)))
#define UW_RULE_ID(file, vaddr) uw_find_rule_id(file_at(file), (vaddr))
#include "unwind_step.h"

/* --- the agent's pieces, fed with tables built in memory --------------- */

struct symbols_of {
	struct buf data;
	struct symfile_view view;
	bool ok;
};
static struct symbols_of syms[4096];

static void on_new_file(void *ctx, uint32_t index, const struct agent_file *f, int fd)
{
	(void)ctx;
	(void)f;
	struct unwind_rows rows;
	struct buf err = { 0 };
	struct unwind_budget b = { 4u << 20, now_mono_ns() + 10000000000ull };
	if (index < ARRAY_SIZE(file_info) && unwind_table_build(fd, &rules, &b, &rows, &err) == 0) {
		xgrow((void **)&entries, &capentries, nentries + rows.count, sizeof(*entries));
		uint64_t base = rows.rows[0].vaddr;
		file_info[index] = (struct unwind_file_info){ base, (uint32_t)nentries, (uint32_t)rows.count };
		for (size_t i = 0; i < rows.count; i++)
			entries[nentries++] = (struct unwind_entry){ (uint32_t)(rows.rows[i].vaddr - base),
								     rows.rows[i].rule };
		unwind_rows_free(&rows);
	}
	const char *why;
	if (index < ARRAY_SIZE(syms) && elfsyms_extract(fd, fd, NULL, &syms[index].data, &why) >= 0 &&
	    symfile_parse(syms[index].data.data, syms[index].data.len, &syms[index].view, &why) == 0)
		syms[index].ok = true;
	buf_free(&err);
	close(fd);
}

static struct file_registry files;
static struct proc_table procs;

static void reset_env(void)
{
	free(entries);
	entries = NULL;
	nentries = capentries = 0;
	memset(file_info, 0, sizeof(file_info));
	for (size_t i = 0; i < ARRAY_SIZE(syms); i++)
		buf_free(&syms[i].data);
	memset(syms, 0, sizeof(syms));
	rule_set_free(&rules);
	rule_set_init(&rules, 16384);
	files_free(&files);
	proc_table_free(&procs);
	files_init(&files, "/proc", on_new_file, NULL);
	proc_table_init(&procs, &files, "/proc");
}

/* The function name at pc in the stopped process, or NULL. */
static const char *name_of(struct proc *p, uint64_t pc, bool exact)
{
	const struct mapping *m = proc_find_mapping(&procs, p, pc, 0);
	if (!m || m->file == FILE_NONE || !syms[m->file].ok)
		return NULL;
	uint64_t off = (exact ? pc : pc - 1) - m->start + m->offset;
	struct sym_frame f;
	return symfile_lookup(&syms[m->file].view, off, &f, 1) ? f.name : NULL;
}

struct result {
	int rc;
	int frames;
	int count_of_name; /* frames named `count_name` */
	bool reached;      /* a frame named `want` */
	bool in_go_runtime; /* the innermost frame is Go's runtime */
	char trace[2048];
};

static void unwind_once(struct proc *p, const char *want, const char *count_name, struct result *res)
{
	struct user_regs_struct regs;
	assert_int_equal(ptrace(PTRACE_GETREGS, target, NULL, &regs), 0);
	struct unwind_proc *up = calloc(1, sizeof(*up));
	up->nmaps = (uint32_t)MIN(p->nmaps, (size_t)UNWIND_MAX_MAPPINGS);
	for (uint32_t i = 0; i < up->nmaps; i++) {
		const struct mapping *m = &p->maps[i];
		up->maps[i].start = m->start;
		up->maps[i].end = m->end;
		up->maps[i].file = UNWIND_NO_FILE;
		uint64_t bias;
		if (m->file != FILE_NONE && files_mapping_bias(&files, m->file, m->start, m->offset, &bias) == 0) {
			up->maps[i].file = m->file;
			up->maps[i].bias = bias;
		}
	}
	struct unwind_regs r = { regs.rip, regs.rsp, regs.rbp, 1, 0 };
	memset(res, 0, sizeof(*res));
	size_t tl = 0;
	int rc = UW_CONTINUE;
	for (int i = 0; i < 600 && rc == UW_CONTINUE; i++) {
		const char *name = name_of(p, r.pc, r.exact);
		res->frames++;
		if (name && strcmp(name, want) == 0)
			res->reached = true;
		if (i == 0 && name && strncmp(name, "runtime.", 8) == 0)
			res->in_go_runtime = true;
		if (name && count_name && strcmp(name, count_name) == 0)
			res->count_of_name++;
		if (tl < sizeof(res->trace) - 80)
			tl += (size_t)snprintf(res->trace + tl, sizeof(res->trace) - tl, " %s",
					       name ? name : "?");
		rc = uw_step(up, (uint32_t)target, &r);
	}
	res->rc = rc;
	free(up);
}

/* CPU ticks of each thread of pid: tids[i], ticks[i]. Returns the count. */
static int thread_ticks(pid_t pid, pid_t *tids, unsigned long long *ticks, int max)
{
	char path[128];
	snprintf(path, sizeof(path), "ls /proc/%d/task", pid);
	FILE *f = popen(path, "r");
	int n = 0;
	char line[64];
	while (f && n < max && fgets(line, sizeof(line), f)) {
		pid_t tid = atoi(line);
		char stat[128], *text;
		size_t len;
		snprintf(stat, sizeof(stat), "/proc/%d/task/%d/stat", pid, tid);
		if (read_file(stat, 4096, &text, &len) < 0)
			continue;
		const char *rp = strrchr(text, ')');
		unsigned long long ut = 0, st = 0;
		if (rp && sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2) {
			tids[n] = tid;
			ticks[n++] = ut + st;
		}
		free(text);
	}
	if (f)
		pclose(f);
	return n;
}

/* The thread that used the most CPU over the next 100 ms: the busy one
 * (Go runs main.main on whichever thread its scheduler picks, and may move
 * it). */
static pid_t busiest_thread(pid_t pid)
{
	pid_t t0[64], t1[64];
	unsigned long long c0[64], c1[64];
	int n0 = thread_ticks(pid, t0, c0, 64);
	usleep(100000);
	int n1 = thread_ticks(pid, t1, c1, 64);
	pid_t best = pid;
	long long best_d = -1;
	for (int i = 0; i < n1; i++) {
		unsigned long long before = 0;
		for (int j = 0; j < n0; j++)
			if (t0[j] == t1[i])
				before = c0[j];
		long long d = (long long)(c1[i] - before);
		if (d > best_d) {
			best_d = d;
			best = t1[i];
		}
	}
	return best;
}

/* Runs argv, lets it work, stops it `snapshots` times at arbitrary points
 * and checks each stack. */
static void check_workload(char *const argv[], const char *want, const char *count_name,
			   int min_count)
{
	if (geteuid() != 0)
		fail_msg("ptrace of the workloads needs root");
	if (access(argv[0], X_OK) != 0)
		fail_msg("%s not built: run make first", argv[0]);
	reset_env();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 1);
		setenv("GOMAXPROCS", "1", 1); /* one thread runs Go code at a time */
		execv(argv[0], argv);
		_exit(127);
	}
	usleep(300000);
	int ok = 0, runtime_retries = 0;
	for (int shot = 0; shot < 8; shot++) {
		usleep((useconds_t)shot * 7000);
		target = busiest_thread(pid);
		assert_int_equal(ptrace(PTRACE_SEIZE, target, NULL, NULL), 0);
		assert_int_equal(ptrace(PTRACE_INTERRUPT, target, NULL, NULL), 0);
		int status;
		assert_int_equal(waitpid(target, &status, __WALL), target);
		struct proc *p = proc_table_get(&procs, pid, 0, 0, "w", 0);
		struct result res;
		unwind_once(p, want, count_name, &res);
		bool good = res.rc == UW_DONE && res.reached && res.count_of_name >= min_count;
		/* A stop inside Go's runtime may land on the system stack (g0:
		 * nanotime's vDSO call, the scheduler), whose frames end where
		 * the runtime switched stacks: documented in
		 * docs/internals/unwinding.md. Such a stop is taken again, a
		 * few times at most; every counted stack must still unwind. */
		if (!good && res.in_go_runtime && runtime_retries < 4) {
			runtime_retries++;
			assert_int_equal(ptrace(PTRACE_DETACH, target, NULL, NULL), 0);
			shot--;
			continue;
		}
		if (!good) {
			kill(pid, SIGKILL);
			fail_msg("%s: stack %d did not unwind to %s (rc %d, %d frames, %d x %s):%s",
				 argv[0], shot, want, res.rc, res.frames, res.count_of_name,
				 count_name ? count_name : "-", res.trace);
		}
		ok++;
		assert_int_equal(ptrace(PTRACE_DETACH, target, NULL, NULL), 0);
	}
	kill(pid, SIGKILL);
	/* Reap the traced thread and the process (the leader of a process
	 * whose traced thread was not waited for stays a zombie). */
	pid_t w;
	while ((w = waitpid(-1, NULL, __WALL)) > 0 || (w < 0 && errno == EINTR))
		;
	assert_int_equal(ok, 8);
}

static void test_c_without_frame_pointers(void **state)
{
	(void)state;
	char *argv[] = { "build/workloads/unwind_c", "chain", "30", NULL };
	check_workload(argv, "main", NULL, 0);
}

static void test_recursion_200_deep(void **state)
{
	(void)state;
	char *argv[] = { "build/workloads/unwind_c", "recurse", "200", "30", NULL };
	check_workload(argv, "main", "descend", 200);
}

static void test_cpp_inlining_exceptions(void **state)
{
	(void)state;
	char *argv[] = { "build/workloads/unwind_cpp", "30", NULL };
	check_workload(argv, "main", NULL, 0);
}

static void test_rust_release(void **state)
{
	(void)state;
	char *argv[] = { "build/workloads/unwind_rust", "30", NULL };
	check_workload(argv, "main", NULL, 0);
}

static void test_go(void **state)
{
	(void)state;
	char *argv[] = { "build/workloads/unwind_go", "30", NULL };
	check_workload(argv, "runtime.main", NULL, 0);
}

static void test_go_stripped(void **state)
{
	(void)state;
	/* No DWARF, no symbol table: unwound from .gopclntab's SP deltas. */
	char *argv[] = { "build/workloads/unwind_go_stripped", "30", NULL };
	check_workload(argv, "runtime.main", "main.hashRounds", 0);
}

static void test_through_libc_callbacks(void **state)
{
	(void)state;
	char *argv[] = { "build/workloads/unwind_lib", "30", NULL };
	check_workload(argv, "main", NULL, 0);
}

/* --- the table builder on Debian's libc -------------------------------- */

static const struct unwind_rule *rule_for(const struct unwind_rows *r, uint64_t vaddr)
{
	const struct unwind_row *best = NULL;
	for (size_t i = 0; i < r->count && r->rows[i].vaddr <= vaddr; i++)
		best = &r->rows[i];
	return best ? &rules.rules[best->rule] : NULL;
}

static uint64_t symbol(const char *path, const char *name)
{
	char cmd[512], line[256];
	snprintf(cmd, sizeof(cmd), "readelf -sW %s | awk '$8==\"%s\" || index($8, \"%s@\")==1 {print $2; exit}'",
		 path, name, name);
	FILE *f = popen(cmd, "r");
	uint64_t v = 0;
	if (f && fgets(line, sizeof(line), f))
		v = strtoull(line, NULL, 16);
	if (f)
		pclose(f);
	return v;
}

static void test_table_properties_libc(void **state)
{
	(void)state;
	const char *libc = "/lib/x86_64-linux-gnu/libc.so.6";
	rule_set_free(&rules);
	rule_set_init(&rules, 16384);
	int fd = open(libc, O_RDONLY);
	assert_true(fd >= 0);
	struct unwind_rows r;
	struct buf err = { 0 };
	struct unwind_budget b = { 4u << 20, now_mono_ns() + 10000000000ull };
	assert_int_equal(unwind_table_build(fd, &rules, &b, &r, &err), 0);
	assert_string_equal(r.source, ".eh_frame");
	assert_true(r.count > 10000);
	/* Sorted, unique addresses, and no two equal rules in a row. */
	for (size_t i = 1; i < r.count; i++) {
		assert_true(r.rows[i].vaddr > r.rows[i - 1].vaddr);
		assert_true(r.rows[i].rule != r.rows[i - 1].rule);
	}
	int kinds[8] = { 0 };
	for (size_t i = 0; i < r.count; i++)
		kinds[rules.rules[r.rows[i].rule].kind]++;
	assert_true(kinds[UW_CFA_SP] > 10000);
	assert_true(kinds[UW_PLT] >= 1);
	assert_true(kinds[UW_SIGNAL] == 1); /* __restore_rt */
	assert_true(kinds[UW_STOP] >= 1);   /* clone, clone3: the bottom of threads */
	/* At the first instruction of a function the CFA is SP + 8 and the
	 * return address at CFA - 8. */
	uint64_t write = symbol(libc, "write");
	assert_true(write != 0);
	const struct unwind_rule *w = rule_for(&r, write);
	assert_non_null(w);
	assert_int_equal(w->kind, UW_CFA_SP);
	assert_int_equal(w->cfa_off, 8);
	assert_int_equal(w->ra_off, -8);
	/* The signal trampoline: registers in the ucontext at SP. */
	for (size_t i = 0; i < r.count; i++)
		if (rules.rules[r.rows[i].rule].kind == UW_SIGNAL) {
			const struct unwind_rule *s = &rules.rules[r.rows[i].rule];
			assert_int_equal(s->cfa_off, 160); /* uc_mcontext.gregs[REG_RSP] */
			assert_int_equal(s->bp_off, 120);  /* REG_RBP */
			assert_int_equal(s->ra_off, 168);  /* REG_RIP */
		}
	/* A tiny budget is refused rather than half-built. */
	struct unwind_rows small;
	struct unwind_budget tiny = { 100, now_mono_ns() + 10000000000ull };
	buf_reset(&err);
	assert_int_equal(unwind_table_build(fd, &rules, &tiny, &small, &err), -1);
	assert_non_null(strstr(err.data, "rows"));
	assert_int_equal(small.count, 0);
	unwind_rows_free(&r);
	buf_free(&err);
	close(fd);
	/* Not ELF. */
	fd = open("/etc/hostname", O_RDONLY);
	buf_reset(&err);
	assert_int_equal(unwind_table_build(fd, &rules, &b, &r, &err), -1);
	close(fd);
	buf_free(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_properties_libc),
		cmocka_unit_test(test_c_without_frame_pointers),
		cmocka_unit_test(test_recursion_200_deep),
		cmocka_unit_test(test_cpp_inlining_exceptions),
		cmocka_unit_test(test_rust_release),
		cmocka_unit_test(test_go),
		cmocka_unit_test(test_go_stripped),
		cmocka_unit_test(test_through_libc_callbacks),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	reset_env();
	files_free(&files);
	proc_table_free(&procs);
	rule_set_free(&rules);
	return rc;
}
