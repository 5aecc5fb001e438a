/* log.c - see log.h. */
#include "log.h"

#include <stdarg.h>
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
} log_cfg = { "ember", LOG_INFO, false };

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
