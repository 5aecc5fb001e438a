/* log.c - see log.h. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "jsonw.h"

/* Process-wide logging configuration: written once by log_init() before
 * threads start, read by every thread afterwards. */
static struct {
	const char *program;
	enum log_level level;
	bool json;
	long long window_ms;
} log_cfg = { "ember", LOG_INFO, false, 0 };

/* Per-statement counts for rate limiting; shared by every thread, so
 * guarded by rate_mu. Direct-mapped by the format string's address: two
 * statements in one slot simply share (and reset) it. */
#define RATE_SLOTS 256
static struct rate_slot {
	const char *fmt;
	long long window_start;
	unsigned written, suppressed;
} rate[RATE_SLOTS];
static pthread_mutex_t rate_mu = PTHREAD_MUTEX_INITIALIZER;
/* Every line suppressed since the start, and those not yet reported in a
 * line (both under rate_mu), and when slots were last swept for counts to
 * report (monotonic ms). */
static unsigned long long suppressed_total, suppressed_pending;
static long long last_sweep;

static void write_line(enum log_level level, const char *text, size_t len);

void log_set_rate_limit(long long window_ms)
{
	log_cfg.window_ms = log_cfg.level >= LOG_DEBUG ? 0 : window_ms;
}

/* Writes the count of slot r's suppressed lines and clears it (rate_mu
 * held): the statement's format stands for its lines. */
static void report_slot(struct rate_slot *r)
{
	struct buf msg = { 0 };
	buf_printf(&msg, "%u more like \"", r->suppressed);
	buf_puts(&msg, r->fmt);
	buf_puts(&msg, "\" suppressed (log rate limit)");
	write_line(LOG_WARN, msg.data, msg.len);
	buf_free(&msg);
	suppressed_pending -= r->suppressed;
	r->suppressed = 0;
}

/* Reports the counts of statements whose window has ended (all when
 * all), but except_fmt's: a statement that stops repeating still has its suppressed lines
 * told. rate_mu held. */
static void sweep(long long now, bool all, const char *except_fmt)
{
	last_sweep = now;
	for (size_t i = 0; i < RATE_SLOTS && suppressed_pending; i++)
		if (rate[i].suppressed && rate[i].fmt != except_fmt &&
		    (all || now - rate[i].window_start >= log_cfg.window_ms))
			report_slot(&rate[i]);
}

static long long mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void log_flush_suppressed(void)
{
	pthread_mutex_lock(&rate_mu);
	if (suppressed_pending)
		sweep(mono_ms(), true, NULL);
	pthread_mutex_unlock(&rate_mu);
}

unsigned long long log_suppressed_total(void)
{
	pthread_mutex_lock(&rate_mu);
	unsigned long long n = suppressed_total;
	pthread_mutex_unlock(&rate_mu);
	return n;
}

/* Whether a statement may be written now; *suppressed gets how many were
 * dropped since it last was. */
static bool rate_allows(const char *fmt, unsigned *suppressed)
{
	*suppressed = 0;
	if (log_cfg.window_ms <= 0)
		return true;
	long long now = mono_ms();
	struct rate_slot *r = &rate[((uintptr_t)fmt >> 3) % RATE_SLOTS];
	bool ok;
	pthread_mutex_lock(&rate_mu);
	/* The statement being written reports its own count in its line. */
	if (suppressed_pending && now - last_sweep >= log_cfg.window_ms)
		sweep(now, false, fmt);
	if (r->fmt != fmt || now - r->window_start >= log_cfg.window_ms) {
		*suppressed = r->fmt == fmt ? r->suppressed : 0;
		/* Another statement takes the slot: its count is reported as
		 * suppressed now rather than lost. */
		if (r->fmt != fmt && r->suppressed)
			report_slot(r);
		else
			suppressed_pending -= r->suppressed;
		r->fmt = fmt;
		r->window_start = now;
		r->written = 0;
		r->suppressed = 0;
	}
	ok = r->written < LOG_RATE_BURST;
	if (ok) {
		r->written++;
		if (!*suppressed) {
			*suppressed = r->suppressed;
			suppressed_pending -= r->suppressed;
			r->suppressed = 0;
		}
	} else {
		r->suppressed++;
		suppressed_total++;
		suppressed_pending++;
	}
	pthread_mutex_unlock(&rate_mu);
	return ok;
}

static const char *level_names[] = { "error", "warn", "info", "debug" };

void log_init(const char *program, enum log_level level, bool json)
{
	log_cfg.program = program;
	log_cfg.level = level;
	log_cfg.json = json;
}

bool log_enabled(enum log_level level)
{
	return level <= log_cfg.level;
}

/* log_msg and log_vlibrary: fmt with ap (after "prefix: " when prefix is
 * not NULL, then without trailing newlines), rate limited by key. */
static void vlog(enum log_level level, const char *key, const char *prefix, const char *fmt, va_list ap)
{
	if (!log_enabled(level))
		return;
	unsigned suppressed;
	if (!rate_allows(key, &suppressed))
		return;
	struct buf msg = { 0 };
	if (prefix)
		buf_printf(&msg, "%s: ", prefix);
	buf_vprintf(&msg, fmt, ap);
	while (prefix && msg.len && msg.data[msg.len - 1] == '\n')
		msg.data[--msg.len] = '\0';
	if (suppressed)
		buf_printf(&msg, " (%u more like this suppressed)", suppressed);
	write_line(level, msg.data ? msg.data : "", msg.len);
	buf_free(&msg);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(level, fmt, NULL, fmt, ap);
	va_end(ap);
}

void log_vlibrary(enum log_level level, const char *prefix, const char *fmt, va_list ap)
{
	vlog(level, prefix, prefix, fmt, ap);
}

static void write_line(enum log_level level, const char *text, size_t len)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char when[96];
	snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));

	struct buf line = { 0 };
	if (log_cfg.json) {
		struct jsonw w;
		jsonw_init(&w, &line);
		jsonw_begin_object(&w);
		jsonw_kv_str(&w, "time", when);
		jsonw_kv_str(&w, "level", level_names[level]);
		jsonw_kv_str(&w, "program", log_cfg.program);
		jsonw_key(&w, "msg");
		jsonw_strn(&w, text, len);
		jsonw_end_object(&w);
		(void)jsonw_finish(&w); /* one flat object: no misuse is possible */
		buf_putc(&line, '\n');
	} else {
		buf_printf(&line, "%s %s %-5s %.*s\n", when, log_cfg.program, level_names[level],
			   (int)len, text);
	}
	ssize_t w = write(STDERR_FILENO, line.data, line.len);
	(void)w; /* nothing useful to do when stderr is gone */
	buf_free(&line);
}
