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

void log_set_rate_limit(long long window_ms)
{
	log_cfg.window_ms = log_cfg.level >= LOG_DEBUG ? 0 : window_ms;
}

/* Whether a statement may be written now; *suppressed gets how many were
 * dropped since it last was. */
static bool rate_allows(const char *fmt, unsigned *suppressed)
{
	*suppressed = 0;
	if (log_cfg.window_ms <= 0)
		return true;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	long long now = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	struct rate_slot *r = &rate[((uintptr_t)fmt >> 3) % RATE_SLOTS];
	bool ok;
	pthread_mutex_lock(&rate_mu);
	if (r->fmt != fmt || now - r->window_start >= log_cfg.window_ms) {
		*suppressed = r->fmt == fmt ? r->suppressed : 0;
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
			r->suppressed = 0;
		}
	} else {
		r->suppressed++;
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

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (!log_enabled(level))
		return;
	unsigned suppressed;
	if (!rate_allows(fmt, &suppressed))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char when[96];
	snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ts.tv_nsec / 1000000));

	struct buf msg = { 0 };
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&msg, fmt, ap);
	va_end(ap);
	if (suppressed)
		buf_printf(&msg, " (%u more like this suppressed)", suppressed);

	struct buf line = { 0 };
	if (log_cfg.json) {
		buf_puts(&line, "{\"time\":");
		jsonw_str(&line, when);
		buf_puts(&line, ",\"level\":");
		jsonw_str(&line, level_names[level]);
		buf_puts(&line, ",\"program\":");
		jsonw_str(&line, log_cfg.program);
		buf_puts(&line, ",\"msg\":");
		jsonw_strn(&line, msg.data, msg.len);
		buf_puts(&line, "}\n");
	} else {
		buf_printf(&line, "%s %s %-5s %s\n", when, log_cfg.program, level_names[level],
			   msg.data);
	}
	ssize_t w = write(STDERR_FILENO, line.data, line.len);
	(void)w; /* nothing useful to do when stderr is gone */
	buf_free(&line);
	buf_free(&msg);
}
