/* crashlog.c - see crashlog.h. */
#include "crashlog.h"

#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define NOTE_MAX (16u << 10)
#define BACKTRACE_MAX 48

/* What the signal handler needs, set once by crashlog_install before the
 * handler is installed and never changed after: a handler may touch only
 * static storage, and no lock. */
static char crash_path[4096];
static struct sigaction previous[NSIG];
static volatile sig_atomic_t crashing;
/* The main thread's alternate signal stack, so that a stack overflow can
 * still be reported. */
static char alt_stack[64 << 10];

static const int fatal_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };

static const char *signal_name(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS: return "SIGBUS";
	case SIGILL: return "SIGILL";
	case SIGFPE: return "SIGFPE";
	case SIGABRT: return "SIGABRT";
	default: return "signal";
	}
}

/* Async-signal-safe formatting into a fixed buffer. */
struct line {
	char b[512];
	size_t n;
};

static void put_s(struct line *l, const char *s)
{
	while (*s && l->n < sizeof(l->b) - 1)
		l->b[l->n++] = *s++;
}

static void put_u(struct line *l, unsigned long long v, unsigned base)
{
	char d[24];
	size_t k = 0;
	do {
		d[k++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v && k < sizeof(d));
	if (base == 16)
		put_s(l, "0x");
	while (k && l->n < sizeof(l->b) - 1)
		l->b[l->n++] = d[--k];
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return;
		}
		p += w;
		n -= (size_t)w;
	}
}

static void on_fatal(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	int saved_errno = errno;
	if (!crashing) {
		crashing = 1;
		int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0) {
			struct line l = { .n = 0 };
			char thread[17] = "";
			(void)prctl(PR_GET_NAME, thread, 0, 0, 0);
			thread[16] = '\0';
			struct timespec ts = { 0, 0 };
			(void)clock_gettime(CLOCK_REALTIME, &ts);
			put_s(&l, "signal ");
			put_u(&l, (unsigned)sig, 10);
			put_s(&l, " (");
			put_s(&l, signal_name(sig));
			put_s(&l, ")");
			if (si && si->si_code > 0 && sig != SIGABRT) {
				put_s(&l, " at address ");
				put_u(&l, (unsigned long long)(uintptr_t)si->si_addr, 16);
			} else if (si && si->si_code <= 0) {
				put_s(&l, " sent by pid ");
				put_u(&l, (unsigned)si->si_pid, 10);
			}
			put_s(&l, " in thread ");
			put_s(&l, thread);
			put_s(&l, " (tid ");
			put_u(&l, (unsigned long long)syscall(SYS_gettid), 10);
			put_s(&l, ") of pid ");
			put_u(&l, (unsigned)getpid(), 10);
			put_s(&l, " at unix time ");
			put_u(&l, (unsigned long long)ts.tv_sec, 10);
			put_s(&l, "\n");
			write_all(fd, l.b, l.n);
			void *frames[BACKTRACE_MAX];
			int n = backtrace(frames, BACKTRACE_MAX);
			if (n > 0)
				backtrace_symbols_fd(frames, n, fd);
			(void)fsync(fd);
			close(fd);
		}
	}
	/* The previous handler (the default: the process dies of the signal;
	 * under a sanitizer, its report) gets the signal: a fault happens
	 * again when this handler returns; a signal that was sent is sent
	 * again, and arrives once this handler has returned. */
	struct sigaction prev = previous[sig];
	if (prev.sa_handler == SIG_IGN)
		prev.sa_handler = SIG_DFL;
	sigaction(sig, &prev, NULL);
	if (!si || si->si_code <= 0 || sig == SIGABRT)
		raise(sig);
	errno = saved_errno;
}

/* The note with control characters shown as ' | ' (newlines) or '?'. */
static void one_line(char *s, size_t len, struct buf *out)
{
	while (len && (s[len - 1] == '\n' || s[len - 1] == ' '))
		len--;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			buf_puts(out, " | ");
		else
			buf_putc(out, c < 0x20 || c == 0x7f ? '?' : (char)c);
	}
}

int crashlog_report_previous(const char *dir)
{
	int found = 0;
	char path[4200], prev[4200];
	char *text;
	size_t len;
	snprintf(path, sizeof(path), "%s/%s", dir, CRASHLOG_FILE);
	int rc = read_file(path, NOTE_MAX, &text, &len);
	if (rc == 0) {
		struct buf msg = { 0 };
		one_line(text, len, &msg);
		log_warn("the previous run of the agent crashed: %s (the note is kept as %s/%s)",
			 msg.data ? msg.data : "(an empty note)", dir, CRASHLOG_PREV);
		buf_free(&msg);
		free(text);
		snprintf(prev, sizeof(prev), "%s/%s", dir, CRASHLOG_PREV);
		if (rename(path, prev) != 0) {
			log_warn("cannot set %s aside: %s; removing it", path, strerror(errno));
			(void)unlink(path);
		}
		found++;
	} else if (rc != -ENOENT) {
		log_warn("cannot read %s: %s", path, strerror(-rc));
		(void)unlink(path);
	}
	snprintf(path, sizeof(path), "%s/%s", dir, CRASHLOG_EXIT);
	rc = read_file(path, NOTE_MAX, &text, &len);
	if (rc == 0) {
		/* "SERVICE_RESULT=... EXIT_CODE=... EXIT_STATUS=..." from the
		 * unit's ExecStopPost; a clean stop says nothing. */
		if (!strstr(text, "SERVICE_RESULT=success")) {
			struct buf msg = { 0 };
			one_line(text, len, &msg);
			log_warn("the previous run of the agent ended abnormally, as systemd saw it: %s",
				 msg.data ? msg.data : "(an empty note)");
			buf_free(&msg);
			found++;
		}
		free(text);
	}
	if (rc != -ENOENT)
		(void)unlink(path);
	return found;
}

int crashlog_install(const char *dir, struct buf *err)
{
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		buf_printf(err, "cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	if ((size_t)snprintf(crash_path, sizeof(crash_path), "%s/%s", dir, CRASHLOG_FILE) >=
	    sizeof(crash_path)) {
		buf_printf(err, "%s: path too long", dir);
		crash_path[0] = '\0';
		return -1;
	}
	/* backtrace() loads libgcc on its first call: not in the handler. */
	void *warm[4];
	(void)backtrace(warm, 4);
	stack_t ss = { .ss_sp = alt_stack, .ss_size = sizeof(alt_stack), .ss_flags = 0 };
	if (sigaltstack(&ss, NULL) != 0)
		log_debug("no alternate signal stack: %s", strerror(errno));
	for (size_t i = 0; i < ARRAY_SIZE(fatal_signals); i++) {
		int sig = fatal_signals[i];
		struct sigaction sa = { 0 };
		sa.sa_sigaction = on_fatal;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		if (sigaction(sig, &sa, &previous[sig]) != 0) {
			buf_printf(err, "cannot handle %s: %s", signal_name(sig), strerror(errno));
			return -1;
		}
	}
	return 0;
}
