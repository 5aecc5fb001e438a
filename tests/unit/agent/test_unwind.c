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

#include <bpf/bpf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <linux/types.h>

#include "agent/collect.h"
#include "agent/cuda.h"
#include "agent/files.h"
#include "agent/proc.h"
#include "agent/rawstack.h"
#include "agent/unwind_mem.h"
#include "agent/memstats.h"
#include "agent/unwind_table.h"
#include "agent/unwind.h"
#include "cuda_wire.h"
#include "elfsyms.h"
#include "python_types.h"
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

/* Lays a table out the way agent/unwind.c does: in pages of
 * UNWIND_PAGE_ROWS entries, with a directory when it has more than one
 * row page. The pages of each table are handed out in reverse order, so
 * nothing may assume a table's pages are adjacent or ascending. Row pages
 * for which leave_out() says true are left out (a table loaded in part). */
static void lay_out(struct unwind_file_info *fi, const struct unwind_rows *rows,
		    bool (*leave_out)(uint32_t page))
{
	uint32_t nrp = (uint32_t)((rows->count + UNWIND_PAGE_ROWS - 1) / UNWIND_PAGE_ROWS);
	uint32_t ndir = nrp > 1 ? (nrp + UNWIND_PAGE_ROWS - 1) / UNWIND_PAGE_ROWS : 0;
	uint32_t first = (uint32_t)(nentries / UNWIND_PAGE_ROWS), n = nrp + ndir;
	nentries = (size_t)(first + n) * UNWIND_PAGE_ROWS;
	xgrow((void **)&entries, &capentries, nentries, sizeof(*entries));
	memset(entries + (size_t)first * UNWIND_PAGE_ROWS, 0xee, (size_t)n * UNWIND_PAGE_ROWS * sizeof(*entries));
	uint64_t base = unwind_row_vaddr(rows, 0);
	memset(fi, 0, sizeof(*fi));
	fi->base = base;
	fi->count = (uint32_t)rows->count;
	/* page k of this table (directory first) is global page first + n - 1 - k */
	for (uint32_t d = 0; d < ndir; d++)
		fi->dir[d] = first + n - 1 - d;
	for (uint32_t p = 0; p < nrp; p++) {
		uint32_t phys = first + n - 1 - (ndir + p);
		if (ndir == 0)
			fi->dir[0] = phys;
		if (ndir) {
			struct unwind_entry *de = &entries[(size_t)fi->dir[p / UNWIND_PAGE_ROWS] * UNWIND_PAGE_ROWS +
							   p % UNWIND_PAGE_ROWS];
			de->addr = (uint32_t)(unwind_row_vaddr(rows, (size_t)p * UNWIND_PAGE_ROWS) - base);
			de->rule = leave_out && leave_out(p) ? UNWIND_PAGE_NONE : phys;
		}
		for (size_t i = (size_t)p * UNWIND_PAGE_ROWS; i < rows->count && i < (size_t)(p + 1) * UNWIND_PAGE_ROWS; i++)
			entries[(size_t)phys * UNWIND_PAGE_ROWS + i % UNWIND_PAGE_ROWS] =
				(struct unwind_entry){ (uint32_t)(unwind_row_vaddr(rows, i) - base), rows->rows[i].rule };
	}
}

/* The unwinder of test_rawstack_stopped_workload, which the files the
 * agent's registry meets are registered with too; NULL elsewhere. */
static struct unwind *raw_unwinder;

static void on_new_file(void *ctx, uint32_t index, const struct agent_file *f, int fd)
{
	(void)ctx;
	if (raw_unwinder) {
		int fd2 = dup(fd);
		assert_true(fd2 >= 0);
		unwind_add_file(raw_unwinder, index, &f->id, f->name, fd2, true);
	}
	struct unwind_rows rows;
	struct buf err = { 0 };
	struct unwind_budget b = { 4u << 20, now_mono_ns() + 10000000000ull };
	if (index < ARRAY_SIZE(file_info) && unwind_table_build(fd, &rules, &b, &rows, &err) == 0) {
		lay_out(&file_info[index], &rows, NULL);
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
	for (size_t i = 0; i < r->count && unwind_row_vaddr(r, i) <= vaddr; i++)
		best = &r->rows[i];
	return best ? &rules.rules[best->rule] : NULL;
}

static uint64_t symbol(const char *path, const char *name)
{
	char cmd[512], line[256];
	snprintf(cmd, sizeof(cmd), "readelf -sW %s | awk '$8==\"%s\" || index($8, \"%s@\")==1 {print $2; exit}'",
		 path, name, name);
	return command_line(cmd, line, sizeof(line)) ? strtoull(line, NULL, 16) : 0;
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
	/* Rows are 8 bytes, and what a build holds is in the agent's memory
	 * gauge (memstats.h) exactly while the rows are: the FDE list is given
	 * back when the build returns, the rows at unwind_rows_free. */
	assert_int_equal(sizeof(struct unwind_row), 8);
	uint64_t g0 = memstats_get(MEM_UNWIND_BUILD);
	assert_int_equal(unwind_table_build(fd, &rules, &b, &r, &err), 0);
	assert_int_equal(memstats_get(MEM_UNWIND_BUILD) - g0, r.cap * sizeof(struct unwind_row));
	assert_string_equal(r.source, ".eh_frame");
	assert_true(r.count > 10000);
	/* Sorted, unique addresses, and no two equal rules in a row. */
	for (size_t i = 1; i < r.count; i++) {
		assert_true(unwind_row_vaddr(&r, i) > unwind_row_vaddr(&r, i - 1));
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
	assert_int_equal(memstats_get(MEM_UNWIND_BUILD), g0);
	buf_free(&err);
	close(fd);
	/* Not ELF. */
	fd = open("/etc/hostname", O_RDONLY);
	buf_reset(&err);
	assert_int_equal(unwind_table_build(fd, &rules, &b, &r, &err), -1);
	close(fd);
	buf_free(&err);
}


/* --- the table's memory: pages, slots, victims (agent/unwind_mem.c) ---- */

#define Q 1000 /* quarantine, in the tests' own clock */

static void test_mem_alloc_free_reuse(void **state)
{
	(void)state;
	struct unwind_mem m;
	um_init(&m, 16, 4, Q);
	uint32_t a = um_slot_alloc(&m, 0), b = um_slot_alloc(&m, 0);
	assert_int_not_equal(a, UM_NONE);
	assert_int_not_equal(b, UM_NONE);
	uint32_t pa[16], pb[16];
	assert_int_equal(um_take(&m, a, 10, 0, pa), 10);
	assert_int_equal(um_take(&m, b, 10, 0, pb), 6); /* only 6 left */
	assert_int_equal(m.pages_used, 16);
	for (int i = 0; i < 10; i++)
		for (int j = 0; j < 6; j++)
			assert_int_not_equal(pa[i], pb[j]);
	/* Given back: quarantined, then free again. */
	um_release(&m, a, 100);
	assert_int_equal(m.pages_used, 6);
	assert_int_equal(um_free_now(&m, 100 + Q - 1), 0);
	assert_int_equal(um_pending(&m), 10);
	assert_int_equal(um_next_free_at(&m), 100 + Q);
	assert_int_equal(um_take(&m, b, 4, 100 + Q - 1, NULL), 0);
	assert_int_equal(um_free_now(&m, 100 + Q), 10);
	assert_int_equal(um_take(&m, b, 4, 100 + Q, NULL), 4);
	/* The pages b got back are a's old ones. */
	for (uint32_t i = 6; i < 10; i++) {
		bool was_a = false;
		for (int k = 0; k < 10; k++)
			was_a |= m.slots[b].pages[i] == pa[k];
		assert_true(was_a);
	}
	/* Slots: all taken, then one back after its quarantine, with a new
	 * generation. */
	assert_int_not_equal(um_slot_alloc(&m, 0), UM_NONE);
	assert_int_not_equal(um_slot_alloc(&m, 0), UM_NONE);
	assert_int_equal(um_slot_alloc(&m, 0), UM_NONE);
	uint32_t gen = m.slots[a].gen;
	um_slot_free(&m, a, 5000);
	assert_null(um_slot(&m, a));
	assert_int_equal(um_slot_alloc(&m, 5000 + Q - 1), UM_NONE);
	assert_int_equal(um_slot_alloc(&m, 5000 + Q), a);
	assert_int_equal(m.slots[a].gen, gen + 1);
	um_destroy(&m);
}

static void test_mem_victims_lru(void **state)
{
	(void)state;
	struct unwind_mem m;
	um_init(&m, 40, 8, Q);
	uint32_t s[5];
	for (int i = 0; i < 5; i++) {
		s[i] = um_slot_alloc(&m, 0);
		assert_int_equal(um_take(&m, s[i], 8, 0, NULL), 8);
	}
	/* s0, s1, s2 mapped, sampled at 300, 100, 200; s3 mapped by nobody
	 * since 500; s4 being written. */
	uint64_t seen[3] = { 300, 100, 200 };
	for (int i = 0; i < 3; i++) {
		um_ref(&m, s[i]);
		m.slots[s[i]].last_seen = m.slots[s[i]].last_sampled = seen[i];
	}
	um_ref(&m, s[3]);
	um_unref(&m, s[3], 500);
	assert_int_equal(m.slots[s[3]].unref_since, 500);
	m.slots[s[4]].loading = true;
	uint32_t v[8];
	/* Enough free: no victim. */
	assert_int_equal(um_victims(&m, UM_NONE, 0, UINT64_MAX, v, 8), 0);
	/* 20 pages: the unmapped table first, then the least recently
	 * sampled: s3 (8), s1 (16), s2 (24). */
	assert_int_equal(um_victims(&m, UM_NONE, 20, UINT64_MAX, v, 8), 3);
	assert_int_equal(v[0], s[3]);
	assert_int_equal(v[1], s[1]);
	assert_int_equal(v[2], s[2]);
	/* Not the table that asks. */
	assert_int_equal(um_victims(&m, s[3], 20, UINT64_MAX, v, 8), 3);
	assert_int_equal(v[0], s[1]);
	assert_int_equal(v[1], s[2]);
	assert_int_equal(v[2], s[0]);
	/* Protection of tables sampled at or after 200: s3, then s1 only. */
	assert_int_equal(um_victims(&m, UM_NONE, 100, 200, v, 8), 2);
	assert_int_equal(v[0], s[3]);
	assert_int_equal(v[1], s[1]);
	/* More than there is: every candidate (never the one being written),
	 * and the caller refuses or loads in part. */
	assert_int_equal(um_victims(&m, UM_NONE, 100, UINT64_MAX, v, 8), 4);
	for (int i = 0; i < 4; i++)
		assert_int_not_equal(v[i], s[4]);
	um_destroy(&m);
}

/* Many cycles of tables of random sizes coming and going: whenever as many
 * pages as a table needs are free, it gets them all (no fragmentation),
 * no page is held twice, and the count of pages always adds up. */
static void test_mem_no_fragmentation(void **state)
{
	(void)state;
	enum { NP = 256, NS = 64 };
	struct unwind_mem m;
	um_init(&m, NP, NS, Q);
	uint32_t live[NS];
	size_t nlive = 0;
	uint64_t now = 0, seed = 12345;
	uint32_t owner[NP];
	for (int cycle = 0; cycle < 20000; cycle++) {
		now += 97;
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t r = (uint32_t)(seed >> 33);
		if (nlive && (r % 3 == 0 || nlive == NS)) {
			size_t i = r / 3 % nlive;
			um_slot_free(&m, live[i], now);
			live[i] = live[--nlive];
		} else {
			uint32_t need = 1 + r / 7 % 48;
			uint32_t free_now = um_free_now(&m, now);
			uint32_t s = um_slot_alloc(&m, now);
			if (s == UM_NONE)
				continue;
			uint32_t got = um_take(&m, s, need, now, NULL);
			assert_int_equal(got, MIN(need, free_now));
			if (got == 0) {
				um_slot_free(&m, s, now);
				continue;
			}
			live[nlive++] = s;
		}
		uint32_t held = 0;
		for (uint32_t p = 0; p < NP; p++)
			owner[p] = UM_NONE;
		for (size_t i = 0; i < nlive; i++) {
			const struct um_slot *sl = um_slot(&m, live[i]);
			assert_non_null(sl);
			for (uint32_t k = 0; k < sl->npages; k++) {
				assert_true(sl->pages[k] < NP);
				assert_int_equal(owner[sl->pages[k]], UM_NONE);
				owner[sl->pages[k]] = live[i];
			}
			held += sl->npages;
		}
		assert_int_equal(held, m.pages_used);
		assert_int_equal(held + m.nfree + um_pending(&m), NP);
	}
	/* Everything back: the whole table in one piece again. */
	while (nlive)
		um_slot_free(&m, live[--nlive], now);
	uint32_t s = um_slot_alloc(&m, now + Q);
	assert_int_equal(um_take(&m, s, NP, now + Q, NULL), NP);
	um_destroy(&m);
}

/* --- the unwinder with real BPF maps (as root, no program) -------------- */

struct e2e {
	struct unwind_map_fds fds;
	struct unwind *u;
};

static void e2e_open(struct e2e *e, uint32_t pages)
{
	LIBBPF_OPTS(bpf_map_create_opts, noprealloc, .map_flags = BPF_F_NO_PREALLOC);
	LIBBPF_OPTS(bpf_map_create_opts, mmapable, .map_flags = BPF_F_MMAPABLE);
	memset(e, 0, sizeof(*e));
	e->fds.rules_cap = 16384;
	e->fds.entries_cap = pages * UNWIND_PAGE_ROWS;
	e->fds.files_cap = 64;
	e->fds.rules = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_rules", 4, sizeof(struct unwind_rule), 16384, NULL);
	e->fds.entries = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_entries", 4, sizeof(struct unwind_entry),
					e->fds.entries_cap, &mmapable);
	e->fds.files = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_files", 4, sizeof(struct unwind_file_info), 64, NULL);
	e->fds.procs = bpf_map_create(BPF_MAP_TYPE_HASH, "t_procs", 4, sizeof(struct unwind_proc), 64, &noprealloc);
	e->fds.seen = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_seen", 4, 8, 64, NULL);
	e->fds.wanted = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, "t_wanted", 8, 8, 4096, NULL);
	assert_true(e->fds.rules >= 0 && e->fds.entries >= 0 && e->fds.files >= 0 &&
		    e->fds.procs >= 0 && e->fds.seen >= 0 && e->fds.wanted >= 0);
	struct buf err = { 0 };
	e->u = unwind_start(&e->fds, &err);
	assert_non_null(e->u);
	buf_free(&err);
}

static void e2e_close(struct e2e *e)
{
	unwind_stop(e->u);
	close(e->fds.rules);
	close(e->fds.entries);
	close(e->fds.files);
	close(e->fds.procs);
	close(e->fds.seen);
	close(e->fds.wanted);
}

static struct unwind_stats e2e_stats(struct e2e *e)
{
	struct unwind_stats st;
	unwind_get_stats(e->u, &st);
	return st;
}

/* Waits (up to 20 s) until *field reaches want. */
#define E2E_WAIT(e, field, want)                                                    \
	do {                                                                        \
		for (int w_ = 0; w_ < 2000 && e2e_stats(e).field < (want); w_++)    \
			usleep(10000);                                              \
		assert_true(e2e_stats(e).field >= (want));                          \
	} while (0)

struct lib {
	const char *path;
	struct file_id id;
	struct unwind_rows rows; /* built here, with the test's own rules */
	uint32_t pages;          /* what its table takes: row pages and directory */
};

static void lib_open(struct lib *l, const char *path)
{
	l->path = path;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(fileid_from_fd(fd, &l->id), 0);
	struct buf err = { 0 };
	struct unwind_budget b = { 4u << 20, now_mono_ns() + 10000000000ull };
	assert_int_equal(unwind_table_build(fd, &rules, &b, &l->rows, &err), 0);
	buf_free(&err);
	close(fd);
	uint32_t nrp = (uint32_t)((l->rows.count + UNWIND_PAGE_ROWS - 1) / UNWIND_PAGE_ROWS);
	l->pages = nrp + (nrp > 1 ? (nrp + UNWIND_PAGE_ROWS - 1) / UNWIND_PAGE_ROWS : 0);
}

/* Fresh rules, then libc's and libstdc++'s tables built with them;
 * libs_free gives the rows back. */
static void libs_open(struct lib *libc, struct lib *cxx)
{
	rule_set_free(&rules);
	rule_set_init(&rules, 16384);
	lib_open(libc, "/lib/x86_64-linux-gnu/libc.so.6");
	lib_open(cxx, "/lib/x86_64-linux-gnu/libstdc++.so.6");
}

static void libs_free(struct lib *libc, struct lib *cxx)
{
	unwind_rows_free(&libc->rows);
	unwind_rows_free(&cxx->rows);
}

static void lib_register(struct e2e *e, uint32_t index, const struct lib *l)
{
	int fd = open(l->path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	unwind_add_file(e->u, index, &l->id, l->path, fd, true);
}

/* A process (a made-up pid) mapping the file of registry index at one
 * address, bias 0. */
static void map_proc(struct e2e *e, uint32_t pid, uint32_t index)
{
	struct unwind_mapping m = { .start = 0x10000000, .end = 0x7f0000000000, .bias = 0, .file = index };
	assert_int_equal(unwind_set_process(e->u, pid, 1, 1, &m, 1), 0);
}

static uint32_t slot_of_pid(struct e2e *e, uint32_t pid)
{
	struct unwind_proc *p = xcalloc(1, sizeof(*p));
	assert_int_equal(bpf_map_lookup_elem(e->fds.procs, &pid, p), 0);
	uint32_t s = p->maps[0].file;
	free(p);
	return s;
}

/* Reads the BPF maps back into the globals uw_find_rule_id reads. */
static struct unwind_file_info e2e_load(struct e2e *e, uint32_t slot)
{
	nentries = e->fds.entries_cap;
	xgrow((void **)&entries, &capentries, nentries, sizeof(*entries));
	for (uint32_t i = 0; i < nentries; i++)
		assert_int_equal(bpf_map_lookup_elem(e->fds.entries, &i, &entries[i]), 0);
	struct unwind_file_info fi;
	assert_int_equal(bpf_map_lookup_elem(e->fds.files, &slot, &fi), 0);
	return fi;
}

/* How many of the library's rows the table in BPF answers with an equal
 * rule (compared by content: the unwinder numbers its rules itself), how
 * many with "page not loaded"; a wrong rule fails at once. */
static void check_rows(struct e2e *e, const struct unwind_file_info *fi, const struct lib *l,
		       size_t *right, size_t *missing)
{
	*right = *missing = 0;
	for (size_t i = 0; i < l->rows.count; i++) {
		int id = uw_find_rule_id(fi, unwind_row_vaddr(&l->rows, i));
		if (id <= -2) {
			assert_int_equal(-2 - id, (int)(i / UNWIND_PAGE_ROWS));
			(*missing)++;
			continue;
		}
		assert_true(id >= 0);
		struct unwind_rule got;
		uint32_t key = (uint32_t)id;
		assert_int_equal(bpf_map_lookup_elem(e->fds.rules, &key, &got), 0);
		assert_memory_equal(&got, &rules.rules[l->rows.rows[i].rule], sizeof(got));
		(*right)++;
	}
	assert_int_equal(uw_find_rule_id(fi, unwind_row_vaddr(&l->rows, 0) - 1), -1);
}

static void set_seen(struct e2e *e, uint32_t slot, uint64_t t)
{
	assert_int_equal(bpf_map_update_elem(e->fds.seen, &slot, &t, BPF_ANY), 0);
}

/* Registers l as file index and maps it alone in process pid; returns its
 * table's slot once loaded. */
static uint32_t load_lib(struct e2e *e, uint32_t index, const struct lib *l, uint32_t pid)
{
	lib_register(e, index, l);
	map_proc(e, pid, index);
	E2E_WAIT(e, files_loaded, 1);
	return slot_of_pid(e, pid);
}

/* Load, evict the least recently sampled table for a new one, reload it
 * when it is sampled again, give back a table no process maps, and load a
 * file given back again (opened anew through /proc/self/map_files). */
static void test_unwind_evict_reload_reclaim(void **state)
{
	(void)state;
	struct lib libc, cxx;
	libs_open(&libc, &cxx);
	struct e2e e;
	e2e_open(&e, libc.pages + cxx.pages - 4); /* not both */
	size_t right, missing;

	uint32_t s_libc = load_lib(&e, 0, &libc, 1000);
	struct unwind_file_info fi = e2e_load(&e, s_libc);
	check_rows(&e, &fi, &libc, &right, &missing);
	assert_int_equal(right, libc.rows.count);
	assert_int_equal(e2e_stats(&e).entries_used, (uint64_t)libc.pages * UNWIND_PAGE_ROWS);

	/* libstdc++ does not fit beside it: libc, sampled least recently,
	 * makes room and is taken out of BPF's sight. */
	lib_register(&e, 1, &cxx);
	map_proc(&e, 1001, 1);
	E2E_WAIT(&e, files_loaded, 2);
	assert_int_equal(e2e_stats(&e).files_evicted, 1);
	uint32_t s_cxx = slot_of_pid(&e, 1001);
	assert_int_not_equal(s_cxx, s_libc);
	fi = e2e_load(&e, s_libc);
	assert_int_equal(fi.count, 0);
	fi = e2e_load(&e, s_cxx);
	check_rows(&e, &fi, &cxx, &right, &missing);
	assert_int_equal(right, cxx.rows.count);

	/* A sample in libc: reloaded at the next tick, in place of libstdc++. */
	set_seen(&e, s_libc, now_mono_ns());
	unwind_tick(e.u, now_mono_ns()); /* not within 2 s of its last load */
	usleep(100000);
	assert_int_equal(e2e_stats(&e).files_reloaded, 0);
	unwind_tick(e.u, now_mono_ns() + 3000000000ull);
	E2E_WAIT(&e, files_reloaded, 1);
	assert_int_equal(e2e_stats(&e).files_evicted, 2);
	fi = e2e_load(&e, s_libc);
	check_rows(&e, &fi, &libc, &right, &missing);
	assert_int_equal(right, libc.rows.count);
	assert_int_equal(e2e_load(&e, s_cxx).count, 0);

	/* The process of libstdc++ exits: its table goes back after
	 * UNWIND_KEEP_NS, and its slot with it. */
	unwind_remove_process(e.u, 1001);
	unwind_tick(e.u, now_mono_ns());
	assert_int_equal(e2e_stats(&e).files_reclaimed, 0); /* kept a while */
	unwind_tick(e.u, now_mono_ns() + UNWIND_KEEP_NS + 1000000000ull);
	assert_int_equal(e2e_stats(&e).files_reclaimed, 0); /* it had no rows */
	assert_int_equal(e2e_stats(&e).entries_used, (uint64_t)libc.pages * UNWIND_PAGE_ROWS);
	unwind_remove_process(e.u, 1000);
	unwind_tick(e.u, now_mono_ns() + UNWIND_KEEP_NS + 1000000000ull);
	assert_int_equal(e2e_stats(&e).files_reclaimed, 1);
	assert_int_equal(e2e_stats(&e).entries_used, 0);
	assert_int_equal(e2e_stats(&e).tables, 0);
	assert_int_equal(e2e_load(&e, s_libc).count, 0);

	/* This very process maps libc: a new table, from the file opened
	 * again through /proc/self/map_files. */
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[512];
	struct unwind_mapping m = { .file = 0 };
	while (maps && fgets(line, sizeof(line), maps)) {
		unsigned long long lo, hi, off;
		char perms[8];
		if (sscanf(line, "%llx-%llx %7s %llx", &lo, &hi, perms, &off) == 4 && perms[2] == 'x' &&
		    strstr(line, "/libc.so.6")) {
			m.start = lo;
			m.end = hi;
			break;
		}
	}
	if (maps)
		fclose(maps);
	assert_true(m.start != 0);
	usleep(60000); /* the slots' quarantine */
	assert_int_equal(unwind_set_process(e.u, (uint32_t)getpid(), 1, 1, &m, 1), 0);
	E2E_WAIT(&e, files_loaded, 3);
	fi = e2e_load(&e, slot_of_pid(&e, (uint32_t)getpid()));
	check_rows(&e, &fi, &libc, &right, &missing);
	assert_int_equal(right, libc.rows.count);
	unwind_remove_process(e.u, (uint32_t)getpid());
	e2e_close(&e);
	libs_free(&libc, &cxx);
}

/* A file larger than the room left beside tables sampled now is loaded in
 * part, then gets the pages samples wanted; with no room at all it is
 * refused (and frames in it are unwound by frame pointer). */
static void test_unwind_partial_and_refused(void **state)
{
	(void)state;
	struct lib libc, cxx;
	libs_open(&libc, &cxx);
	assert_true(cxx.pages > 12);
	struct e2e e;
	e2e_open(&e, libc.pages + 6);
	uint32_t s_libc = load_lib(&e, 0, &libc, 1000);
	set_seen(&e, s_libc, now_mono_ns()); /* libc runs now */
	lib_register(&e, 1, &cxx);
	map_proc(&e, 1001, 1);
	E2E_WAIT(&e, files_partial, 1);
	assert_int_equal(e2e_stats(&e).files_evicted, 0);
	uint32_t s_cxx = slot_of_pid(&e, 1001);
	struct unwind_file_info fi = e2e_load(&e, s_cxx);
	size_t right, missing;
	check_rows(&e, &fi, &cxx, &right, &missing);
	assert_int_equal(right, 5 * UNWIND_PAGE_ROWS); /* 6 pages: the directory and 5 row pages */
	assert_int_equal(right + missing, cxx.rows.count);
	/* Samples fell in row page 9, not loaded: it is loaded next. */
	uint32_t last = (uint32_t)((cxx.rows.count - 1) / UNWIND_PAGE_ROWS);
	assert_true(uw_find_rule_id(&fi, unwind_row_vaddr(&cxx.rows, (size_t)last * UNWIND_PAGE_ROWS)) <= -2);
	uint64_t key = (uint64_t)s_cxx << 32 | last, now = now_mono_ns();
	assert_int_equal(bpf_map_update_elem(e.fds.wanted, &key, &now, BPF_ANY), 0);
	usleep(10000);
	unwind_tick(e.u, now_mono_ns() + 3000000000ull);
	E2E_WAIT(&e, files_partial, 2);
	fi = e2e_load(&e, s_cxx);
	assert_true(uw_find_rule_id(&fi, unwind_row_vaddr(&cxx.rows, (size_t)last * UNWIND_PAGE_ROWS)) >= 0);
	check_rows(&e, &fi, &cxx, &right, &missing);
	assert_int_equal(right, 5 * UNWIND_PAGE_ROWS - (cxx.rows.count % UNWIND_PAGE_ROWS ? UNWIND_PAGE_ROWS - cxx.rows.count % UNWIND_PAGE_ROWS : 0));
	/* libc was never touched. */
	fi = e2e_load(&e, s_libc);
	check_rows(&e, &fi, &libc, &right, &missing);
	assert_int_equal(right, libc.rows.count);
	e2e_close(&e);

	/* One page free beside libc: not even a directory and a row page. */
	e2e_open(&e, libc.pages + 1);
	set_seen(&e, load_lib(&e, 0, &libc, 1000), now_mono_ns());
	lib_register(&e, 1, &cxx);
	map_proc(&e, 1001, 1);
	E2E_WAIT(&e, files_refused, 1);
	fi = e2e_load(&e, slot_of_pid(&e, 1001));
	assert_int_equal(fi.count, 0);
	assert_int_equal(fi.pending, 0); /* BPF stops waiting for it */
	assert_int_equal(e2e_stats(&e).files_evicted, 0);
	e2e_close(&e);
	libs_free(&libc, &cxx);
}


/* The tick keeps 1/16 of the array free: a table no process maps goes at
 * once, not after UNWIND_KEEP_NS, when the free pages fall below that;
 * a mapped one stays. */
static void test_unwind_headroom(void **state)
{
	(void)state;
	struct lib libc, cxx;
	libs_open(&libc, &cxx);
	struct e2e e;
	e2e_open(&e, libc.pages + cxx.pages + 1); /* 1 page free, < 1/16 */
	lib_register(&e, 0, &libc);
	map_proc(&e, 1000, 0);
	lib_register(&e, 1, &cxx);
	map_proc(&e, 1001, 1);
	E2E_WAIT(&e, files_loaded, 2);
	unwind_tick(e.u, now_mono_ns());
	assert_int_equal(e2e_stats(&e).files_reclaimed, 0); /* both mapped */
	unwind_remove_process(e.u, 1001);
	unwind_tick(e.u, now_mono_ns());
	assert_int_equal(e2e_stats(&e).files_reclaimed, 1);
	assert_int_equal(e2e_stats(&e).entries_used, (uint64_t)libc.pages * UNWIND_PAGE_ROWS);
	assert_int_equal(e2e_stats(&e).tables, 1);
	e2e_close(&e);
	libs_free(&libc, &cxx);
}

/* How many of the file slots BPF is told are being built; fails on a
 * slot that says both pending and published. */
static uint32_t pending_slots(struct e2e *e)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < e->fds.files_cap; s++) {
		struct unwind_file_info fi;
		assert_int_equal(bpf_map_lookup_elem(e->fds.files, &s, &fi), 0);
		assert_false(fi.pending && fi.count);
		n += fi.pending != 0;
	}
	return n;
}

/* While a file's first table is queued or being built BPF is told so
 * (unwind_file_info.pending: a walk that breaks there sends its raw stack
 * whatever the process's age); the mark ends when the table is published
 * and when none can be built. */
static void test_unwind_pending_mark(void **state)
{
	(void)state;
	struct lib libc, cxx;
	libs_open(&libc, &cxx);
	struct e2e e;
	e2e_open(&e, libc.pages + cxx.pages + 16);
	char path[] = "/tmp/ember-test-nocfi-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "not an ELF file\n", 16), 16);
	struct file_id id;
	assert_int_equal(fileid_from_fd(fd, &id), 0);
	unlink(path);
	/* libstdc++ first: the builder is busy with it while libc waits. */
	lib_register(&e, 0, &cxx);
	lib_register(&e, 1, &libc);
	unwind_add_file(e.u, 2, &id, "nocfi", fd, false);
	assert_true(pending_slots(&e) >= 2);
	E2E_WAIT(&e, files_loaded, 2);
	E2E_WAIT(&e, files_failed, 1);
	assert_int_equal(pending_slots(&e), 0);
	e2e_close(&e);
	libs_free(&libc, &cxx);
}

/* The paged layout itself: every row of libc found through the directory
 * in pages laid out backwards; a row page left out answers "not loaded". */
static bool skip_odd(uint32_t page)
{
	return page % 2 == 1;
}

static void test_paged_lookup_libc(void **state)
{
	(void)state;
	rule_set_free(&rules);
	rule_set_init(&rules, 16384);
	int fd = open("/lib/x86_64-linux-gnu/libc.so.6", O_RDONLY);
	assert_true(fd >= 0);
	struct unwind_rows r;
	struct buf err = { 0 };
	struct unwind_budget b = { 4u << 20, now_mono_ns() + 10000000000ull };
	assert_int_equal(unwind_table_build(fd, &rules, &b, &r, &err), 0);
	close(fd);
	buf_free(&err);
	assert_true(r.count > 2 * UNWIND_PAGE_ROWS);
	for (int pass = 0; pass < 2; pass++) {
		struct unwind_file_info fi;
		lay_out(&fi, &r, pass ? skip_odd : NULL);
		for (size_t i = 0; i < r.count; i++) {
			uint32_t page = (uint32_t)(i / UNWIND_PAGE_ROWS);
			int want = pass && page % 2 ? -2 - (int)page : (int)r.rows[i].rule;
			assert_int_equal(uw_find_rule_id(&fi, unwind_row_vaddr(&r, i)), want);
			/* one byte before the next row: still this row */
			if (i + 1 < r.count && unwind_row_vaddr(&r, i + 1) - 1 > unwind_row_vaddr(&r, i))
				assert_int_equal(uw_find_rule_id(&fi, unwind_row_vaddr(&r, i + 1) - 1), want);
		}
		assert_int_equal(uw_find_rule_id(&fi, unwind_row_vaddr(&r, 0) - 1), -1);
		fi.count = 0;
		assert_int_equal(uw_find_rule_id(&fi, unwind_row_vaddr(&r, 0)), -1);
	}
	/* A table of one page has no directory. */
	struct unwind_rows one = r;
	one.count = 100;
	struct unwind_file_info fi;
	lay_out(&fi, &one, NULL);
	for (size_t i = 0; i < one.count; i++)
		assert_int_equal(uw_find_rule_id(&fi, unwind_row_vaddr(&r, i)), (int)r.rows[i].rule);
	unwind_rows_free(&r);
}

/* --- raw stacks (agent/rawstack.c): a stopped process's stack, copied --- */

/* Copies the stopped target's stack from SP up, as the BPF program does:
 * 16 KiB, or a quarter, or a sixteenth when that much is not mapped. */
/* The process's initial stack pointer (field 28 of /proc/PID/stat, the
 * kernel's mm->start_stack), or 0. */
static uint64_t start_stack(pid_t pid)
{
	char path[64], text[4096];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t len = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[len] = 0;
	const char *s = strrchr(text, ')'); /* the name may hold spaces */
	if (!s)
		return 0;
	/* After the name: field 3 (state) onwards; startstack is field 28. */
	unsigned long long v = 0;
	for (int field = 3; field <= 28 && s; field++) {
		s = strchr(s + 1, ' ');
		if (s && field == 28)
			v = strtoull(s + 1, NULL, 10);
	}
	return v;
}

/* The stack bytes the BPF program would send: from SP up to the initial
 * stack pointer when that is nearer than ONCPU_RAW_STACK_MAX, else that
 * many, or a quarter, or a sixteenth when that much is not mapped. A copy
 * of a fixed 16/4/1 KiB falls short of main's callers when the stack's top
 * is 1-4 KiB above SP (the size of the environment decides), and the walk
 * fails to read them. */
static void copy_stack(struct oncpu_raw_stack *raw, const struct user_regs_struct *regs)
{
	memset(raw, 0, sizeof(*raw));
	raw->pc = regs->rip;
	raw->sp = regs->rsp;
	raw->bp = regs->rbp;
	raw->exact = 1;
	uint64_t top = start_stack(target) + 8;
	uint32_t n = ONCPU_RAW_STACK_MAX;
	if (top > regs->rsp && top - regs->rsp < n)
		n = (uint32_t)(top - regs->rsp);
	for (int i = 0; i < 3 && n; i++, n >>= 2) {
		struct iovec local = { raw->bytes, n }, remote = { (void *)(uintptr_t)regs->rsp, n };
		if (process_vm_readv(target, &local, 1, &remote, 1, 0) == (ssize_t)n) {
			raw->len = n;
			return;
		}
	}
	fail_msg("cannot read the stack of %d", target);
}

/* --- raw CUDA launch stacks: unwound by the collector, then joined ------ */

/* What cuda_join emitted: GPU nanoseconds with and without a stack, and
 * the user frames of the last stack. */
struct joined {
	uint64_t with_ns, without_ns;
	int32_t ustack_len;
	uint16_t flags;
};

/* The launch stacks the collector hands on (collector.cuda_stack): into
 * the join's table, and the last one kept to be looked at; what the join
 * emitted. */
struct launch_seen {
	struct cuda *cuda;
	struct collector *collector;
	int n;
	struct oncpu_sample last;
	size_t last_size;
	struct joined j;
};

/* collector.tables_published of a test where no table is published. */
static uint64_t no_tables(void *ctx)
{
	(void)ctx;
	return 0;
}

static void on_launch_stack(void *ctx, const void *rec, size_t size)
{
	struct launch_seen *ls = ctx;
	assert_true(size >= ONCPU_HDR_SIZE && size <= sizeof(ls->last));
	memcpy(&ls->last, rec, size);
	ls->last_size = size;
	ls->n++;
	cuda_add_stack(ls->cuda, rec, size);
}

static bool on_awaited(void *ctx, int32_t pid, uint64_t stack_id)
{
	const struct launch_seen *ls = ctx;
	return collector_cuda_raw_waiting(ls->collector, pid, stack_id);
}

static void on_joined(void *ctx, const struct cuda_work *w, const void *rec, size_t size)
{
	struct launch_seen *ls = ctx;
	struct joined *j = &ls->j;
	if (!rec) {
		j->without_ns += w->total_ns;
		return;
	}
	const struct oncpu_sample *s = rec;
	assert_true(size >= ONCPU_HDR_SIZE);
	j->with_ns += w->total_ns;
	j->ustack_len = s->ustack_len;
	j->flags = (uint16_t)s->flags;
}

/* One datagram of the library's wire: a HELLO, or an AGG of one kernel's
 * time under stack_id. Returns its length. */
static size_t wire_msg(uint8_t *b, uint16_t type, uint64_t stack_id, uint64_t ns)
{
	size_t len = sizeof(struct cuda_wire_hdr);
	if (type == CUDA_WIRE_HELLO) {
		struct cuda_wire_hello h = { .pid = 1, .cupti_version = 18 };
		snprintf(h.lib_version, sizeof(h.lib_version), "0.1.0");
		memcpy(b + len, &h, sizeof(h));
		len += sizeof(h);
	} else {
		struct cuda_wire_agg a = { .stack_id = stack_id, .total_ns = ns, .count = 1, .tid = 1,
					   .kind = CUDA_WIRE_KIND_KERNEL, .api_len = 14, .name_len = 1 };
		memcpy(b + len, &a, sizeof(a));
		len += sizeof(a);
		memcpy(b + len, "cuLaunchKernelk", 15);
		len += 15;
		while (len % 8)
			b[len++] = 0;
	}
	struct cuda_wire_hdr h = { CUDA_WIRE_MAGIC, CUDA_WIRE_VERSION, type, (uint32_t)len, 1 };
	memcpy(b, &h, sizeof(h));
	return len;
}

/* The stack of a workload without frame pointers, stopped, copied and
 * unwound by the agent's raw-stack walker over tables the unwinder wrote
 * into real BPF maps: it reaches main and ends at the outermost frame;
 * with its binary's table not published the walk waits for it (or, when
 * final, follows frame pointers and breaks); a copy too short ends it as
 * unreadable; another exec of the process is not described. */
static void test_rawstack_stopped_workload(void **state)
{
	(void)state;
	if (geteuid() != 0)
		fail_msg("ptrace and BPF maps need root");
	char *argv[] = { "build/workloads/unwind_c", "chain", "30", NULL };
	if (access(argv[0], X_OK) != 0)
		fail_msg("%s not built: run make first", argv[0]);
	struct e2e e;
	e2e_open(&e, 256);
	raw_unwinder = e.u;
	reset_env();
	struct rawstack rs;
	rawstack_open(&rs, &e.fds);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execv(argv[0], argv);
		_exit(127);
	}
	usleep(300000);
	target = pid;
	struct proc *p = proc_table_get(&procs, pid, 0, 0, "w", 0);
	assert_true(p->live && p->nmaps > 0);
	struct unwind_mapping maps[UNWIND_MAX_MAPPINGS];
	size_t n = MIN(p->nmaps, (size_t)UNWIND_MAX_MAPPINGS);
	uint32_t bin = UNWIND_NO_FILE;
	for (size_t i = 0; i < n; i++) {
		const struct mapping *m = &p->maps[i];
		uint64_t bias;
		maps[i] = (struct unwind_mapping){ .start = m->start, .end = m->end, .file = UNWIND_NO_FILE };
		if (m->file != FILE_NONE && files_mapping_bias(&files, m->file, m->start, m->offset, &bias) == 0) {
			maps[i].file = m->file;
			maps[i].bias = bias;
			if (strcmp(files_at(&files, m->file)->name, "unwind_c") == 0)
				bin = m->file;
		}
	}
	assert_true(bin != UNWIND_NO_FILE);
	assert_int_equal(unwind_set_process(e.u, (uint32_t)pid, 7, 1, maps, n), 0);
	for (int i = 0; i < 2000 && e2e_stats(&e).files_loaded + e2e_stats(&e).files_failed < files.count; i++)
		usleep(10000);
	assert_true(e2e_stats(&e).files_loaded >= 2); /* unwind_c and libc at least */
	/* The binary's table slot, from the description the unwinder wrote. */
	struct unwind_proc *up = xcalloc(1, sizeof(*up));
	assert_int_equal(bpf_map_lookup_elem(e.fds.procs, &(uint32_t){ (uint32_t)pid }, up), 0);
	uint32_t slot = UNWIND_NO_FILE;
	for (uint32_t i = 0; i < up->nmaps && i < n; i++)
		if (maps[i].file == bin) {
			slot = up->maps[i].file;
			break;
		}
	free(up);
	assert_true(slot != UNWIND_NO_FILE);

	struct oncpu_raw_stack *raw = xmalloc(sizeof(*raw));
	__u64 out[ONCPU_MAX_UFRAMES];
	for (int shot = 0; shot < 6; shot++) {
		usleep((useconds_t)shot * 7000);
		assert_int_equal(ptrace(PTRACE_SEIZE, pid, NULL, NULL), 0);
		assert_int_equal(ptrace(PTRACE_INTERRUPT, pid, NULL, NULL), 0);
		int status;
		assert_int_equal(waitpid(pid, &status, __WALL), pid);
		struct user_regs_struct regs;
		assert_int_equal(ptrace(PTRACE_GETREGS, pid, NULL, &regs), 0);
		copy_stack(raw, &regs);
		uint32_t nf = 0;
		uint16_t err = 0;
		uint64_t stuck = 0;
		assert_int_equal(rawstack_unwind(&rs, (uint32_t)pid, 7, 1, raw, false, out, NULL, ONCPU_MAX_UFRAMES,
						 &nf, &err, &stuck), RAWSTACK_UNWOUND);
		assert_int_equal(err, UWE_NONE);
		bool reached = false;
		for (uint32_t i = 0; i < nf; i++) {
			const char *name = name_of(p, out[i], i == 0);
			reached |= name && strcmp(name, "main") == 0;
		}
		assert_true(reached);
		assert_true(nf >= 3);
		/* Another exec (or a process not described): nothing to walk. */
		assert_int_equal(rawstack_unwind(&rs, (uint32_t)pid, 7, 2, raw, false, out, NULL, ONCPU_MAX_UFRAMES,
						 &nf, &err, &stuck), RAWSTACK_NO_PROCESS);
		/* Only the bytes copied are read: none, unreadable at once. */
		uint32_t len = raw->len;
		raw->len = 0;
		assert_int_equal(rawstack_unwind(&rs, (uint32_t)pid, 7, 1, raw, false, out, NULL, ONCPU_MAX_UFRAMES,
						 &nf, &err, &stuck), RAWSTACK_UNWOUND);
		assert_int_equal(err, UWE_READ);
		raw->len = len;
		/* The binary's table taken out of sight (as while it is built):
		 * the walk stops in it, unless final. */
		struct unwind_file_info fi, none = { 0 };
		assert_int_equal(bpf_map_lookup_elem(e.fds.files, &slot, &fi), 0);
		assert_int_equal(bpf_map_update_elem(e.fds.files, &slot, &none, BPF_ANY), 0);
		enum rawstack_result r = rawstack_unwind(&rs, (uint32_t)pid, 7, 1, raw, false, out,
							 NULL, ONCPU_MAX_UFRAMES, &nf, &err, &stuck);
		assert_int_equal(r, RAWSTACK_NO_TABLE);
		const struct mapping *m = proc_find_mapping(&procs, p, stuck, 0);
		assert_true(m && m->file == bin);
		/* final: frame pointers there, as the BPF program does */
		assert_int_equal(rawstack_unwind(&rs, (uint32_t)pid, 7, 1, raw, true, out, NULL, ONCPU_MAX_UFRAMES,
						 &nf, &err, &stuck), RAWSTACK_UNWOUND);
		assert_int_equal(bpf_map_update_elem(e.fds.files, &slot, &fi, BPF_ANY), 0);
		assert_int_equal(ptrace(PTRACE_DETACH, pid, NULL, NULL), 0);
	}
	/* A CUDA launch record of the process with its raw stack (as
	 * cuda_marker sends one for a process not described yet), while the
	 * binary's table is out of sight: the collector keeps it, and the
	 * GPU time of its stack id waits for it past CUDA_HOLD_NS; once the
	 * table is in, it is unwound through main and joined with that time. */
	{
		char *dir = make_temp_dir();
		struct {
			struct launch_seen ls;
		} seen = { 0 };
		struct buf err = { 0 };
		struct cuda *cu = cuda_open(dir, dir, NULL, on_joined, &seen, &err);
		assert_non_null(cu);
		cuda_set_awaited(cu, on_awaited);
		struct collector *c = xcalloc(1, sizeof(*c));
		c->procs = &procs;
		c->files = &files;
		c->ns_per_tick = 1;
		c->rawstack = &rs;
		c->cuda_stack = on_launch_stack;
		c->hook_ctx = &seen.ls;
		seen.ls.cuda = cu;
		seen.ls.collector = c;
		/* Described with the process's real start time, which the
		 * collector reads the process with. */
		struct proc *live = proc_table_get(&procs, pid, 0, 0, "w", 0);
		uint64_t start = live->start_time;
		assert_int_equal(unwind_set_process(e.u, (uint32_t)pid, start, 0, maps, n), 0);
		struct oncpu_raw_sample *rec = xcalloc(1, sizeof(*rec));
		rec->s.kind = ONCPU_KIND_CUDA_LAUNCH;
		rec->s.value = 99;
		rec->s.arg = CUDA_WIRE_KIND_KERNEL;
		rec->s.pid = (uint32_t)pid;
		rec->s.tid = (uint32_t)pid;
		rec->s.proc_start_ns = start;
		rec->s.flags = ONCPU_F_RAW_STACK;
		rec->s.unwind_mode = UWM_KERNEL_FP;
		rec->s.ustack_len = 1;
		rec->s.frames[0] = raw->pc;
		memcpy(&rec->raw, raw, sizeof(*raw));
		struct unwind_file_info fi, none = { 0 };
		assert_int_equal(bpf_map_lookup_elem(e.fds.files, &slot, &fi), 0);
		assert_int_equal(bpf_map_update_elem(e.fds.files, &slot, &none, BPF_ANY), 0);
		const uint64_t t0 = now_mono_ns();
		collect_cuda_raw(c, rec, sizeof(*rec), t0);
		assert_int_equal(c->stats.cuda_raw_stacks, 1);
		assert_int_equal(c->stats.raw_stacks, 0);
		assert_int_equal(c->ncuda_pending, 1);
		assert_int_equal(seen.ls.n, 0);
		assert_true(collector_cuda_raw_waiting(c, pid, 99));
		assert_false(collector_cuda_raw_waiting(c, pid, 98));
		assert_false(collector_cuda_raw_waiting(c, pid + 1, 99));
		/* Its GPU time comes, and waits past the hold. */
		uint8_t msg[256];
		size_t len = wire_msg(msg, CUDA_WIRE_HELLO, 0, 0);
		cuda_handle_message(cu, pid, msg, len, t0);
		len = wire_msg(msg, CUDA_WIRE_AGG, 99, 700000);
		cuda_handle_message(cu, pid, msg, len, t0);
		cuda_join(cu, t0 + CUDA_HOLD_NS);
		assert_int_equal(cuda_pending(cu), 1);
		assert_int_equal(seen.ls.j.with_ns + seen.ls.j.without_ns, 0);
		/* A record of a size other than a raw one is refused. */
		collect_cuda_raw(c, rec, sizeof(*rec) - 1, t0);
		assert_int_equal(c->stats.malformed, 1);
		/* The table is in: unwound at the next retry, then joined. */
		assert_int_equal(bpf_map_update_elem(e.fds.files, &slot, &fi, BPF_ANY), 0);
		collector_retry_raw(c, t0 + 20000000, false);
		assert_int_equal(c->ncuda_pending, 0);
		assert_int_equal(c->stats.cuda_raw_unwound_late, 1);
		assert_int_equal(seen.ls.n, 1);
		assert_int_equal(seen.ls.last.flags, ONCPU_F_UNWOUND_RAW);
		assert_int_equal(seen.ls.last.unwind_mode, UWM_CFI);
		assert_int_equal(seen.ls.last.unwind_error, UWE_NONE);
		assert_int_equal(seen.ls.last.value, 99);
		bool reached = false;
		live = proc_table_get(&procs, pid, start, 0, "w", 0);
		for (int32_t i = 0; i < seen.ls.last.ustack_len; i++) {
			const char *name = name_of(live, seen.ls.last.frames[i], i == 0);
			reached |= name && strcmp(name, "main") == 0;
		}
		assert_true(reached);
		cuda_join(cu, t0 + CUDA_HOLD_NS + 1);
		assert_int_equal(seen.ls.j.with_ns, 700000);
		assert_int_equal(seen.ls.j.without_ns, 0);
		assert_int_equal(seen.ls.j.ustack_len, seen.ls.last.ustack_len);
		/* A launch in a Python process: the record carries the thread's
		 * Python frames (two invocations' runs, each ended by
		 * ONCPU_RAW_PY_END) after its frame-pointer walk; with the
		 * process's interpreter loop at the stack's second frame
		 * (py_procs), the first run takes that frame's place. */
		__u64 native[ONCPU_MAX_UFRAMES];
		int32_t nn = seen.ls.last.ustack_len;
		assert_true(nn >= 3);
		memcpy(native, seen.ls.last.frames, (size_t)nn * sizeof(__u64));
		int py_fd = bpf_map_create(BPF_MAP_TYPE_HASH, "py_procs", 4, sizeof(struct py_proc), 16, NULL);
		assert_true(py_fd > 0);
		struct py_proc pyp = { .start_ticks = start, .exec_id = 0, .eval_lo = native[1],
				       .eval_hi = native[1] + 1 };
		assert_int_equal(bpf_map_update_elem(py_fd, &(uint32_t){ (uint32_t)pid }, &pyp, BPF_ANY), 0);
		c->py_procs_fd = py_fd;
		const __u64 chain[6] = { PY_FRAME_FLAG | 0x1000, 0x2000, PY_FRAME_FLAG | 7ull << PY_FRAME_INSTR_SHIFT | 0x3000,
					 0x4000 | ONCPU_RAW_PY_END, PY_FRAME_FLAG | 0x5000, 0x6000 | ONCPU_RAW_PY_END };
		rec->s.flags = ONCPU_F_RAW_STACK | ONCPU_F_RAW_PYTHON;
		rec->s.value = 100;
		rec->s.raw_py = 6;
		memcpy(rec->s.frames + 1, chain, sizeof(chain));
		collect_cuda_raw(c, rec, sizeof(*rec), t0);
		assert_int_equal(c->stats.cuda_raw_unwound, 1);
		assert_int_equal(seen.ls.n, 2);
		assert_int_equal(seen.ls.last.value, 100);
		assert_int_equal(seen.ls.last.ustack_len, nn - 1 + 4);
		assert_true(seen.ls.last.frames[0] == native[0]);
		assert_true(seen.ls.last.frames[1] == chain[0] && seen.ls.last.frames[2] == chain[1]);
		assert_true(seen.ls.last.frames[3] == chain[2] && seen.ls.last.frames[4] == 0x4000);
		for (int32_t i = 2; i < nn; i++)
			assert_true(seen.ls.last.frames[i + 3] == native[i]);
		/* 3.12+ (PY_F_ENTRY_ON_STACK): each run is followed by its
		 * marker's address, and takes the place of the native frame
		 * whose stack [SP, CFA) holds it: here the third frame's; the
		 * second run's marker lies in no frame, so it stays out. */
		__u64 cfa[ONCPU_MAX_UFRAMES], pcs[ONCPU_MAX_UFRAMES];
		uint32_t nf = 0;
		uint16_t uerr = 0;
		uint64_t ustuck = 0;
		assert_int_equal(rawstack_unwind(&rs, (uint32_t)pid, start, 0, &rec->raw, false, pcs, cfa,
						 ONCPU_MAX_UFRAMES, &nf, &uerr, &ustuck), RAWSTACK_UNWOUND);
		assert_int_equal((int32_t)nf, nn);
		assert_true(cfa[0] > rec->raw.sp && cfa[1] > cfa[0] && cfa[2] > cfa[1]);
		pyp.off.flags = PY_F_ENTRY_ON_STACK;
		pyp.eval_lo = pyp.eval_hi = 0;
		assert_int_equal(bpf_map_update_elem(py_fd, &(uint32_t){ (uint32_t)pid }, &pyp, BPF_ANY), 0);
		const __u64 marked[8] = { PY_FRAME_FLAG | 0x1000, 0x2000, PY_FRAME_FLAG | 0x3000, 0x4000,
					  cfa[1], ONCPU_RAW_PY_MARKER, PY_FRAME_FLAG | 0x5000, 0x6000 };
		rec->s.raw_py = 8;
		memcpy(rec->s.frames + 1, marked, sizeof(marked));
		collect_cuda_raw(c, rec, sizeof(*rec), t0);
		assert_int_equal(seen.ls.n, 3);
		assert_int_equal(seen.ls.last.ustack_len, nn - 1 + 4);
		assert_true(seen.ls.last.frames[0] == native[0] && seen.ls.last.frames[1] == native[1]);
		assert_true(seen.ls.last.frames[2] == marked[0] && seen.ls.last.frames[5] == 0x4000);
		for (int32_t i = 3; i < nn; i++)
			assert_true(seen.ls.last.frames[i + 3] == native[i]);
		/* A marker at the top of a frame's stack belongs to its caller. */
		rec->s.frames[5] = cfa[2];
		collect_cuda_raw(c, rec, sizeof(*rec), t0);
		assert_true(seen.ls.last.frames[2] == native[2] && seen.ls.last.frames[3] == marked[0]);
		/* More Python slots than a record holds: malformed. */
		rec->s.raw_py = ONCPU_RAW_PY_SLOTS + 2;
		collect_cuda_raw(c, rec, sizeof(*rec), t0);
		assert_int_equal(c->stats.malformed, 2);
		rec->s.raw_py = 8;
		pyp.off.flags = 0;
		pyp.eval_lo = native[1];
		pyp.eval_hi = native[1] + 1;
		/* Another exec of the process (or none described): left out. */
		pyp.exec_id = 5;
		assert_int_equal(bpf_map_update_elem(py_fd, &(uint32_t){ (uint32_t)pid }, &pyp, BPF_ANY), 0);
		collect_cuda_raw(c, rec, sizeof(*rec), t0);
		assert_int_equal(seen.ls.last.ustack_len, nn);
		assert_true(memcmp(seen.ls.last.frames, native, (size_t)nn * sizeof(__u64)) == 0);
		close(py_fd);
		c->py_procs_fd = 0;
		rec->s.flags = ONCPU_F_RAW_STACK;
		rec->s.ustack_len = 1;
		rec->s.frames[0] = raw->pc;
		/* At most COLLECT_CUDA_RAW_MAX_BYTES wait: the next is unwound
		 * at once with the tables there are (frame pointers where one
		 * is missing) and counted. */
		assert_int_equal(bpf_map_update_elem(e.fds.files, &slot, &none, BPF_ANY), 0);
		size_t each = ONCPU_HDR_SIZE + sizeof(__u64) + offsetof(struct oncpu_raw_stack, bytes) + raw->len;
		size_t fit = COLLECT_CUDA_RAW_MAX_BYTES / each;
		size_t before = seen.ls.n;
		for (uint64_t id = 1; id <= fit + 1; id++) {
			rec->s.value = 1000 + id;
			collect_cuda_raw(c, rec, sizeof(*rec), t0);
		}
		assert_int_equal(c->ncuda_pending, fit);
		assert_int_equal(c->npending, fit);
		assert_int_equal(c->stats.cuda_raw_expired, 1);
		assert_int_equal(seen.ls.n, before + 1);
		assert_int_equal(c->pending_bytes, fit * each);
		assert_int_equal(c->cuda_pending_bytes, fit * each);
		/* No table came and no wait ended: no retry walks them. */
		c->tables_published = no_tables;
		collector_retry_raw(c, t0 + 20000000, false);
		collector_retry_raw(c, t0 + 40000000, false);
		assert_int_equal(c->npending, fit);
		/* Waited COLLECT_RAW_WAIT_NS: all unwound with what there is. */
		collector_retry_raw(c, t0 + COLLECT_RAW_WAIT_NS, false);
		assert_int_equal(c->ncuda_pending, 0);
		assert_int_equal(c->npending, 0);
		assert_int_equal(c->pending_bytes, 0);
		assert_int_equal(c->stats.cuda_raw_expired, 1 + fit);
		assert_int_equal(seen.ls.n, before + 1 + fit);
		assert_int_equal(bpf_map_update_elem(e.fds.files, &slot, &fi, BPF_ANY), 0);
		collector_free(c);
		free(c);
		free(rec);
		cuda_close(cu);
		buf_free(&err);
		rm_rf(dir);
		free(dir);
	}
	/* The rows came from row pages mapped a moment, none alone. */
	assert_true(rs.page_maps > 0);
	assert_int_equal(rs.single_reads, 0);
	free(raw);
	kill(pid, SIGKILL);
	pid_t w;
	while ((w = waitpid(-1, NULL, __WALL)) > 0 || (w < 0 && errno == EINTR))
		;
	rawstack_close(&rs);
	raw_unwinder = NULL;
	e2e_close(&e);
	reset_env();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_properties_libc),
		cmocka_unit_test(test_paged_lookup_libc),
		cmocka_unit_test(test_mem_alloc_free_reuse),
		cmocka_unit_test(test_mem_victims_lru),
		cmocka_unit_test(test_mem_no_fragmentation),
		cmocka_unit_test(test_unwind_evict_reload_reclaim),
		cmocka_unit_test(test_unwind_partial_and_refused),
		cmocka_unit_test(test_unwind_headroom),
		cmocka_unit_test(test_unwind_pending_mark),
		cmocka_unit_test(test_rawstack_stopped_workload),
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
