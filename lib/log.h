/* log.h - leveled logging to stderr, as text or one JSON object per line.
 *
 * The log configuration is process-wide state set once by main() before
 * any thread starts (the only writers are log_init/log_set_rate_limit);
 * every message is written with a single write(2) so lines from different
 * threads never interleave.
 *
 * Rate limiting (log_set_rate_limit): each log statement (told apart by
 * its format string) is written at most LOG_RATE_BURST times per window;
 * further ones are dropped and counted, and the next one written says how
 * many were suppressed. A statement that stops repeating is not left
 * silent: once its window has ended, the next line of any statement (or
 * log_flush_suppressed) first writes `N more like "FORMAT" suppressed`;
 * so does a statement whose slot another one takes. Debug logging turns
 * it off.
 */
#ifndef EMBER_LOG_H
#define EMBER_LOG_H

#include <stdarg.h>
#include <stdbool.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

#define LOG_RATE_BURST 3

void log_init(const char *program, enum log_level level, bool json);
/* window_ms 0 (the default) writes everything. */
void log_set_rate_limit(long long window_ms);
bool log_enabled(enum log_level level);
/* Writes the counts of every statement with suppressed lines not yet
 * reported (e.g. before exiting). */
void log_flush_suppressed(void);
/* Lines suppressed since the process started. */
unsigned long long log_suppressed_total(void);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line another library formats (libmicrohttpd's external logger): fmt
 * with ap after "prefix: ", its trailing newlines dropped; rate limited as
 * one statement per prefix. */
void log_vlibrary(enum log_level level, const char *prefix, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                   \
	do {                                             \
		if (log_enabled(LOG_DEBUG))              \
			log_msg(LOG_DEBUG, __VA_ARGS__); \
	} while (0)

#endif
