/* flags.h - command-line flags, environment variables and config files
 * for every ember binary, from one table per program.
 *
 * A flag takes one or two dashes and "=value" or a separate value;
 * boolean flags alone mean true. Each flag has an environment variable
 * <env_prefix><NAME> (dashes become underscores, upper case). Precedence:
 * command line > environment > config file ("name value" per line, '#'
 * starts a comment). Values are checked against the flag's kind and range
 * and a bad one yields a message that names the flag and what it expects.
 */
#ifndef EMBER_FLAGS_H
#define EMBER_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

enum flag_kind {
	FLAG_STRING,   /* char *, owned by the config struct */
	FLAG_BOOL,     /* bool */
	FLAG_UINT,     /* uint64_t within [min, max] */
	FLAG_DURATION, /* int64_t milliseconds within [min, max] */
};

struct flag_def {
	const char *name;
	enum flag_kind kind;
	const char *def;
	size_t offset; /* of the field in the program's config struct */
	uint64_t min, max;
	const char *help;
};

/* The rows every ember daemon shares, word for word, for a config struct
 * T with fields log_rate_limit_ms, verbose and json_log (FLAG_DEFS_LOG),
 * help and version (FLAG_DEFS_HELP_VERSION), and the config file's path
 * in field (FLAG_DEF_CONFIG). Each program places them in its table where
 * its -help lists them. */
#define FLAG_DEFS_LOG(T)                                                                      \
	{ "log-rate-limit-interval", FLAG_DURATION, "1m", offsetof(T, log_rate_limit_ms), 0,  \
	  86400000,                                                                           \
	  "window in which one log statement is written at most 3 times (0: everything; -v: off)" }, \
	{ "v", FLAG_BOOL, "false", offsetof(T, verbose), 0, 0, "verbose (debug) logging" },   \
	{ "json-log", FLAG_BOOL, "false", offsetof(T, json_log), 0, 0, "log one JSON object per line" }
#define FLAG_DEF_CONFIG(T, field)                                    \
	{ "config", FLAG_STRING, "", offsetof(T, field), 0, 0,       \
	  "file of 'name value' lines with lower-precedence settings" }
#define FLAG_DEFS_HELP_VERSION(T)                                                        \
	{ "help", FLAG_BOOL, "false", offsetof(T, help), 0, 0, "print this help and exit" }, \
	{ "version", FLAG_BOOL, "false", offsetof(T, version), 0, 0,                     \
	  "print the version and the binary's build ID and exit" }

struct flag_set {
	const char *program;     /* "ember-agent" */
	const char *env_prefix;  /* "EMBER_" */
	const struct flag_def *defs;
	size_t count;
	const char *config_flag; /* name of the flag naming the config file, or NULL */
};

/* Fills cfg from defaults, the config file, envp and argv[1..]. Returns 0,
 * or -1 with a message in err. */
int flags_load(const struct flag_set *fs, void *cfg, int argc, char **argv, char **envp,
	       struct buf *err);
void flags_free(const struct flag_set *fs, void *cfg);
void flags_usage(const struct flag_set *fs, const char *synopsis, struct buf *out);

#endif
