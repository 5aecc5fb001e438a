/* sass.c - see sass.h. */
#include "sass.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

extern char **environ;

void sass_free(struct sass_table *t)
{
	if (!t)
		return;
	free_array(t->funcs, t->nfuncs);
	free(t->insns);
	memset(t, 0, sizeof(*t));
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A mnemonic's characters: opcode and modifiers. */
static bool is_mn(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
}

/* "//---- .text.NAME ----": the function's name, or NULL. */
static const char *section_name(const char *line, size_t len, size_t *name_len)
{
	static const char mark[] = " .text.";
	if (len < 2 || line[0] != '/' || line[1] != '/')
		return NULL;
	const char *p = memmem(line, len, mark, sizeof(mark) - 1);
	if (!p)
		return NULL;
	p += sizeof(mark) - 1;
	const char *end = line + len;
	size_t n = 0;
	while (p + n < end && p[n] != ' ' && p[n] != '\t')
		n++;
	*name_len = n;
	return n ? p : NULL;
}

/* An instruction line: fills offset and mnemonic; false otherwise. */
static bool insn_line(const char *line, size_t len, uint64_t *offset, char *mn)
{
	const char *p = line, *end = line + len;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (end - p < 5 || p[0] != '/' || p[1] != '*')
		return false;
	p += 2;
	uint64_t off = 0;
	int digits = 0;
	while (p < end && is_hex(*p)) {
		if (++digits > 16)
			return false;
		char c = *p++;
		off = off * 16 + (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	if (!digits || end - p < 2 || p[0] != '*' || p[1] != '/')
		return false;
	p += 2;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	if (p < end && *p == '@') { /* the predicate: @P0, @!P1, @!PT, @UP0 */
		while (p < end && *p != ' ' && *p != '\t')
			p++;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
	}
	size_t n = 0;
	while (p + n < end && is_mn(p[n]))
		n++;
	if (n == 0 || n > SASS_MAX_MNEMONIC || (p + n < end && p[n] != ' ' && p[n] != ';' && p[n] != '\t'))
		return false;
	memcpy(mn, p, n);
	mn[n] = '\0';
	*offset = off;
	return true;
}

static const struct sass_table *sort_table; /* qsort's context: the table being sorted (one thread) */

static int cmp_insn(const void *a, const void *b)
{
	const struct sass_insn *x = a, *y = b;
	int c = x->func == y->func ? 0 : strcmp(sort_table->funcs[x->func], sort_table->funcs[y->func]);
	if (c)
		return c;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

long sass_parse(const char *text, size_t len, struct sass_table *t, struct buf *err)
{
	const char *p = text, *end = text + len;
	long func = -1;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
		size_t name_len;
		const char *name = section_name(p, ll, &name_len);
		uint64_t off;
		char mn[SASS_MAX_MNEMONIC + 1];
		if (name) {
			if (name_len > SASS_MAX_NAME || t->nfuncs >= SASS_MAX_FUNCS) {
				buf_printf(err, "nvdisasm output: a function name over %d bytes or over %d functions",
					   SASS_MAX_NAME, SASS_MAX_FUNCS);
				return -1;
			}
			xgrow((void **)&t->funcs, &t->capfuncs, t->nfuncs + 1, sizeof(*t->funcs));
			t->funcs[t->nfuncs] = xstrndup(name, name_len);
			func = (long)t->nfuncs++;
		} else if (func >= 0 && insn_line(p, ll, &off, mn)) {
			if (t->ninsns >= SASS_MAX_INSNS) {
				buf_printf(err, "nvdisasm output: over %u instructions", SASS_MAX_INSNS);
				return -1;
			}
			xgrow((void **)&t->insns, &t->capinsns, t->ninsns + 1, sizeof(*t->insns));
			struct sass_insn *in = &t->insns[t->ninsns++];
			in->offset = off;
			in->func = (uint32_t)func;
			memcpy(in->mnemonic, mn, sizeof(in->mnemonic));
		}
		p += ll + (nl ? 1 : 0);
	}
	sort_table = t;
	qsort(t->insns, t->ninsns, sizeof(*t->insns), cmp_insn);
	sort_table = NULL;
	return (long)t->ninsns;
}

const char *sass_lookup(const struct sass_table *t, const char *func, uint64_t offset)
{
	size_t lo = 0, hi = t->ninsns;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct sass_insn *in = &t->insns[mid];
		int c = strcmp(t->funcs[in->func], func);
		if (c == 0)
			c = in->offset < offset ? -1 : in->offset > offset;
		if (c == 0)
			return in->mnemonic;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

long sass_disassemble(const char *nvdisasm, const char *cubin, unsigned timeout_ms, size_t max_out,
		      struct sass_table *t, struct buf *err)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0) {
		buf_printf(err, "pipe: %s", strerror(errno));
		return -1;
	}
	posix_spawn_file_actions_t fa;
	if (posix_spawn_file_actions_init(&fa) != 0) {
		close(fds[0]);
		close(fds[1]);
		buf_printf(err, "posix_spawn_file_actions_init failed");
		return -1;
	}
	int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	if (rc == 0)
		rc = posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	if (rc == 0)
		rc = posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid = -1;
	char *argv[] = { (char *)nvdisasm, (char *)"-c", (char *)cubin, NULL };
	if (rc == 0)
		rc = posix_spawn(&pid, nvdisasm, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (rc != 0) {
		close(fds[0]);
		buf_printf(err, "cannot run %s: %s", nvdisasm, strerror(rc));
		return -1;
	}
	struct buf out = { 0 };
	uint64_t deadline = now_mono_ns() + (uint64_t)timeout_ms * 1000000ull;
	const char *why = NULL;
	char chunk[65536];
	for (;;) {
		uint64_t now = now_mono_ns();
		if (now >= deadline) {
			why = "ran past its time";
			break;
		}
		struct pollfd pfd = { .fd = fds[0], .events = POLLIN };
		int n = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
		ssize_t got = n > 0 ? read(fds[0], chunk, sizeof(chunk)) : 0;
		if ((n < 0 || got < 0) && errno == EINTR)
			continue;
		if (n < 0 || got < 0) {
			why = n < 0 ? "poll failed" : "read failed";
			break;
		}
		if (n == 0)
			continue; /* the time left is checked again */
		if (got == 0)
			break; /* the end of its output */
		if (out.len + (size_t)got > max_out) {
			why = "wrote more than its limit";
			break;
		}
		buf_append(&out, chunk, (size_t)got);
	}
	close(fds[0]);
	if (why)
		kill(pid, SIGKILL);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
	}
	long r = -1;
	if (why)
		buf_printf(err, "%s %s: %s", nvdisasm, cubin, why);
	else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		buf_printf(err, "%s %s: exit status %d", nvdisasm, cubin,
			   WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	else
		r = sass_parse(out.data ? out.data : "", out.len, t, err);
	buf_free(&out);
	return r;
}
