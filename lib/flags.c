/* flags.c - see flags.h. */
#include "flags.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const struct flag_def *find_flag(const struct flag_set *fs, const char *name, size_t n)
{
	for (size_t i = 0; i < fs->count; i++)
		if (strlen(fs->defs[i].name) == n && strncmp(fs->defs[i].name, name, n) == 0)
			return &fs->defs[i];
	return NULL;
}

static int set_flag(void *cfg, const struct flag_def *f, const char *value, const char *source,
		    struct buf *err)
{
	char *base = (char *)cfg + f->offset;
	switch (f->kind) {
	case FLAG_STRING: {
		char **dst = (char **)base;
		if (strlen(value) > 4096) {
			buf_printf(err, "-%s (%s): value longer than 4096 bytes", f->name, source);
			return -1;
		}
		free(*dst);
		*dst = xstrdup(value);
		return 0;
	}
	case FLAG_BOOL:
		if (parse_bool(value, (bool *)base) < 0) {
			buf_printf(err, "-%s (%s): expected true or false, got \"%s\"", f->name,
				   source, value);
			return -1;
		}
		return 0;
	case FLAG_UINT: {
		uint64_t v;
		if (parse_u64(value, &v) < 0 || v < f->min || v > f->max) {
			buf_printf(err, "-%s (%s): expected a whole number from %llu to %llu, got \"%s\"",
				   f->name, source, (unsigned long long)f->min,
				   (unsigned long long)f->max, value);
			return -1;
		}
		*(uint64_t *)base = v;
		return 0;
	}
	case FLAG_DURATION: {
		int64_t ms;
		if (parse_duration_ms(value, &ms) < 0 || ms < (int64_t)f->min ||
		    ms > (int64_t)f->max) {
			buf_printf(err,
				   "-%s (%s): expected a duration from %llums to %llums such as 5s or 1m30s, got \"%s\"",
				   f->name, source, (unsigned long long)f->min,
				   (unsigned long long)f->max, value);
			return -1;
		}
		*(int64_t *)base = ms;
		return 0;
	}
	}
	return -1;
}

static void env_name(const struct flag_set *fs, const char *flag, char *out, size_t n)
{
	size_t j = (size_t)snprintf(out, n, "%s", fs->env_prefix);
	for (size_t i = 0; flag[i] && j + 1 < n; i++)
		out[j++] = flag[i] == '-' ? '_' : (char)toupper((unsigned char)flag[i]);
	out[j] = '\0';
}

static const char *getenv_from(char **envp, const char *name)
{
	size_t n = strlen(name);
	for (char **e = envp; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static int load_file(const struct flag_set *fs, void *cfg, const char *path, struct buf *err)
{
	char *text;
	size_t len;
	int rc = read_file(path, 1 << 20, &text, &len);
	if (rc < 0) {
		buf_printf(err, "-%s: cannot read %s: %s", fs->config_flag, path, strerror(-rc));
		return -1;
	}
	int lineno = 0;
	char *p = text;
	while (p && *p) {
		char *line = p;
		char *nl = strchr(p, '\n');
		if (nl) {
			*nl = '\0';
			p = nl + 1;
		} else {
			p = NULL;
		}
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		while (isspace((unsigned char)*line))
			line++;
		size_t l = strlen(line);
		while (l && isspace((unsigned char)line[l - 1]))
			line[--l] = '\0';
		if (!*line)
			continue;
		char *name = line;
		while (*name == '-')
			name++;
		size_t nl_len = strcspn(name, " \t=");
		char *value = name + nl_len;
		while (*value == ' ' || *value == '\t' || *value == '=')
			value++;
		const struct flag_def *f = find_flag(fs, name, nl_len);
		if (!f || (fs->config_flag && strcmp(f->name, fs->config_flag) == 0)) {
			buf_printf(err, "-%s: %s line %d: unknown setting \"%.*s\"", fs->config_flag,
				   path, lineno, (int)nl_len, name);
			free(text);
			return -1;
		}
		if (!*value && f->kind == FLAG_BOOL)
			value = "true";
		char source[64];
		snprintf(source, sizeof(source), "config line %d", lineno);
		if (set_flag(cfg, f, value, source, err) < 0) {
			free(text);
			return -1;
		}
	}
	free(text);
	return 0;
}

/* Parses argv[i]; applies it when apply is set, or when it is the config
 * flag. Returns the argv entries consumed (1 or 2) or -1. */
static int parse_arg(const struct flag_set *fs, void *cfg, int argc, char **argv, int i,
		     bool apply, struct buf *err)
{
	const char *a = argv[i];
	if (a[0] != '-' || a[1] == '\0') {
		buf_printf(err, "unexpected argument \"%s\" (flags start with -)", a);
		return -1;
	}
	const char *name = a + 1 + (a[1] == '-');
	size_t nl = strcspn(name, "=");
	const struct flag_def *f = find_flag(fs, name, nl);
	if (!f && nl == 1 && name[0] == 'h')
		f = find_flag(fs, "help", 4);
	if (!f) {
		buf_printf(err, "unknown flag -%.*s (run with -help for the list)", (int)nl, name);
		return -1;
	}
	const char *value;
	int used = 1;
	if (name[nl] == '=') {
		value = name + nl + 1;
	} else if (f->kind == FLAG_BOOL) {
		bool tmp;
		if (i + 1 < argc && parse_bool(argv[i + 1], &tmp) == 0) {
			value = argv[i + 1];
			used = 2;
		} else {
			value = "true";
		}
	} else {
		if (i + 1 >= argc) {
			buf_printf(err, "-%s: missing value", f->name);
			return -1;
		}
		value = argv[i + 1];
		used = 2;
	}
	bool is_config = fs->config_flag && strcmp(f->name, fs->config_flag) == 0;
	if ((apply || is_config) && set_flag(cfg, f, value, "command line", err) < 0)
		return -1;
	return used;
}

/* Every argument of the command line through parse_arg (apply: see
 * there). Returns 0 or -1. */
static int parse_args(const struct flag_set *fs, void *cfg, int argc, char **argv, bool apply,
		      struct buf *err)
{
	for (int i = 1; i < argc;) {
		int used = parse_arg(fs, cfg, argc, argv, i, apply, err);
		if (used < 0)
			return -1;
		i += used;
	}
	return 0;
}

/* Applies def's environment variable when it is set. Returns 0 or -1. */
static int apply_env(const struct flag_set *fs, void *cfg, const struct flag_def *def, char **envp,
		     struct buf *err)
{
	char name[96];
	env_name(fs, def->name, name, sizeof(name));
	const char *v = getenv_from(envp, name);
	return v && set_flag(cfg, def, v, name, err) < 0 ? -1 : 0;
}

int flags_load(const struct flag_set *fs, void *cfg, int argc, char **argv, char **envp,
	       struct buf *err)
{
	for (size_t i = 0; i < fs->count; i++)
		if (set_flag(cfg, &fs->defs[i], fs->defs[i].def, "default", err) < 0)
			return -1;

	if (fs->config_flag) {
		/* Where is the config file? The command line beats the environment. */
		const struct flag_def *cf = find_flag(fs, fs->config_flag, strlen(fs->config_flag));
		if (apply_env(fs, cfg, cf, envp, err) < 0 || parse_args(fs, cfg, argc, argv, false, err) < 0)
			return -1;
		const char *path = *(char **)((char *)cfg + cf->offset);
		if (path && *path && load_file(fs, cfg, path, err) < 0)
			return -1;
	}
	for (size_t i = 0; i < fs->count; i++)
		if (apply_env(fs, cfg, &fs->defs[i], envp, err) < 0)
			return -1;
	return parse_args(fs, cfg, argc, argv, true, err);
}

void flags_free(const struct flag_set *fs, void *cfg)
{
	for (size_t i = 0; i < fs->count; i++)
		if (fs->defs[i].kind == FLAG_STRING) {
			char **p = (char **)((char *)cfg + fs->defs[i].offset);
			free(*p);
			*p = NULL;
		}
}

void flags_usage(const struct flag_set *fs, const char *synopsis, struct buf *out)
{
	buf_printf(out, "usage: %s %s\n\n", fs->program, synopsis);
	for (size_t i = 0; i < fs->count; i++) {
		char env[96];
		env_name(fs, fs->defs[i].name, env, sizeof(env));
		buf_printf(out, "  -%-24s %s\n  %-25s default \"%s\", env %s\n", fs->defs[i].name,
			   fs->defs[i].help, "", fs->defs[i].def, env);
	}
}
