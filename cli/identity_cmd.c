/* identity_cmd.c - see identity_cmd.h. */
#include "cli/identity_cmd.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "metadb.h"
#include "server/auth/identity.h"
#include "server/auth/password.h"
#include "util.h"

#define ACTOR "cli"
#define ORIGIN "cli"
#define DEFAULT_PAGE_SIZE 20
#define MAX_PAGE_SIZE 100

static void wipe(char *s);

enum cmd { USER_CREATE, USER_LIST, USER_RESET_PASSWORD, ROLES_LIST, ROLES_SET };

#define F(c) (1u << (c))

struct opts {
	enum cmd cmd;
	const char *data_dir, *metadata, *metadata_password_file, *email, *password, *given, *family, *query, *user_id;
	bool include_roles, admin;
	uint64_t page, page_size;
	const char **names; /* roles list --name */
	size_t nnames;
	const char **roles; /* roles set --role */
	size_t nroles;
};

enum flag_kind { FLAG_VALUE, FLAG_BOOL, FLAG_LIST };

static const struct flag {
	const char *name;
	enum flag_kind kind;
	unsigned cmds; /* the commands that take it */
	size_t str;    /* a string flag: offsetof its member of struct opts (0: not one) */
} flags[] = {
	{ "data-dir", FLAG_VALUE, F(USER_CREATE) | F(USER_LIST) | F(USER_RESET_PASSWORD) | F(ROLES_LIST) | F(ROLES_SET),
	  offsetof(struct opts, data_dir) },
	{ "metadata", FLAG_VALUE, F(USER_CREATE) | F(USER_LIST) | F(USER_RESET_PASSWORD) | F(ROLES_LIST) | F(ROLES_SET),
	  offsetof(struct opts, metadata) },
	{ "metadata-password-file", FLAG_VALUE,
	  F(USER_CREATE) | F(USER_LIST) | F(USER_RESET_PASSWORD) | F(ROLES_LIST) | F(ROLES_SET),
	  offsetof(struct opts, metadata_password_file) },
	{ "email", FLAG_VALUE, F(USER_CREATE), offsetof(struct opts, email) },
	{ "password", FLAG_VALUE, F(USER_CREATE) | F(USER_RESET_PASSWORD), offsetof(struct opts, password) },
	{ "given-name", FLAG_VALUE, F(USER_CREATE), offsetof(struct opts, given) },
	{ "family-name", FLAG_VALUE, F(USER_CREATE), offsetof(struct opts, family) },
	{ "query", FLAG_VALUE, F(USER_LIST), offsetof(struct opts, query) },
	{ "include-roles", FLAG_BOOL, F(USER_LIST) },
	{ "page", FLAG_VALUE, F(USER_LIST) },
	{ "page-size", FLAG_VALUE, F(USER_LIST) },
	{ "user-id", FLAG_VALUE, F(USER_RESET_PASSWORD) | F(ROLES_LIST) | F(ROLES_SET),
	  offsetof(struct opts, user_id) },
	{ "name", FLAG_LIST, F(ROLES_LIST) },
	{ "admin", FLAG_BOOL, F(ROLES_SET) },
	{ "role", FLAG_LIST, F(ROLES_SET) },
};

void cmd_identity_usage(FILE *f)
{
	fputs("usage: ember identity user create --email EMAIL [--password PW] [--given-name N] [--family-name N]\n"
	      "       ember identity user list [--query TEXT] [--include-roles] [--page N] [--page-size N]\n"
	      "       ember identity user reset-password --user-id ID [--password PW]\n"
	      "       ember identity roles list [--user-id ID] [--name NAME ...]\n"
	      "       ember identity roles set --user-id ID [--admin] [--role NAME ...]\n"
	      "  manages the users and roles of an ember-server with --auth on this host, without\n"
	      "  signing in: it opens DIR/identity.db in the server's data directory (safe while the\n"
	      "  server runs; it sees each change on its next request). Every action is audited\n"
	      "  with origin=cli. A server with --metadata postgres://... is managed with the same\n"
	      "  --metadata URL (and --metadata-password-file FILE) instead of --data-dir.\n"
	      "  --data-dir DIR         the server's --data-dir (default $EMBER_DATA_DIR, else\n"
	      "                         $EMBER_SERVER_DATA_DIR, else ./data)\n"
	      "  --password PW          without it, read from stdin: a hidden prompt on a terminal,\n"
	      "                         else the first line (PW on a command line is visible to\n"
	      "                         other users of the host and kept in shell history)\n"
	      "  --query TEXT           users whose email contains TEXT\n"
	      "  --page N               0-based; --page-size N: 1 to 100 (default 20)\n"
	      "  --name NAME            roles list: only roles named exactly NAME (repeatable)\n"
	      "  --admin, --role NAME   roles set: the user's roles become exactly these (System\n"
	      "                         Admin, and each NAME, repeatable); none revokes all; an\n"
	      "                         unknown name changes nothing\n",
	      f);
}

static int usage_error(const char *fmt, const char *arg)
{
	fputs("ember identity: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\n", stderr);
	cmd_identity_usage(stderr);
	return 2;
}

/* --- arguments ------------------------------------------------------------ */

static int parse_cmd(const char *noun, const char *verb, enum cmd *out)
{
	static const struct {
		const char *noun, *verb;
		enum cmd cmd;
	} cmds[] = {
		{ "user", "create", USER_CREATE },	       { "user", "list", USER_LIST },
		{ "user", "reset-password", USER_RESET_PASSWORD }, { "roles", "list", ROLES_LIST },
		{ "roles", "set", ROLES_SET },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cmds); i++)
		if (!strcmp(noun, cmds[i].noun) && !strcmp(verb, cmds[i].verb)) {
			*out = cmds[i].cmd;
			return 0;
		}
	return -1;
}

static int parse_count(const char *flag, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	if (parse_u64(v, out) < 0 || *out < min || *out > max) {
		fprintf(stderr, "ember identity: --%s: expected a number from %llu to %llu, got \"%.64s\"\n",
			flag, (unsigned long long)min, (unsigned long long)max, v);
		return -1;
	}
	return 0;
}

/* parse_args: --help was asked for. */
#define HELP 3

/* Fills o from argv (the words after "identity"); 0, HELP, or 2 after
 * printing the mistake. The lists point into argv; o->names and o->roles are
 * allocated (free them). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	for (int i = 0; i < argc && i < 2; i++)
		if (!strcmp(argv[i], "help") || !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return HELP;
	if (argc < 2)
		return usage_error("%s", argc ? "missing the action (create, list, reset-password, set)"
					      : "missing the command (user or roles)");
	if (parse_cmd(argv[0], argv[1], &o->cmd) < 0) {
		fprintf(stderr, "ember identity: unknown command \"%.32s %.32s\"\n", argv[0], argv[1]);
		cmd_identity_usage(stderr);
		return 2;
	}
	o->names = xcalloc((size_t)argc, sizeof(*o->names));
	o->roles = xcalloc((size_t)argc, sizeof(*o->roles));
	o->page_size = DEFAULT_PAGE_SIZE;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-')
			return usage_error("unexpected argument \"%.64s\"", a);
		a += a[1] == '-' ? 2 : 1;
		char name[32];
		const char *eq = strchr(a, '=');
		size_t n = eq ? (size_t)(eq - a) : strlen(a);
		snprintf(name, sizeof(name), "%.*s", (int)MIN(n, sizeof(name) - 1), a);
		if (!strcmp(a, "help") || !strcmp(a, "h"))
			return HELP;
		const struct flag *f = NULL;
		for (size_t k = 0; k < ARRAY_SIZE(flags) && !f; k++)
			if (n == strlen(flags[k].name) && !strncmp(a, flags[k].name, n))
				f = &flags[k];
		if (!f || !(f->cmds & F(o->cmd)))
			return usage_error("%s: not a flag of this command", argv[i]);
		if (f->kind == FLAG_BOOL) {
			if (eq)
				return usage_error("%s takes no value", argv[i]);
			if (!strcmp(name, "include-roles"))
				o->include_roles = true;
			else
				o->admin = true;
			continue;
		}
		const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
		if (!v)
			return usage_error("%s: missing value", argv[i]);
		if (f->str)
			*(const char **)(void *)((char *)o + f->str) = v;
		else if (!strcmp(name, "name"))
			o->names[o->nnames++] = v;
		else if (!strcmp(name, "role"))
			o->roles[o->nroles++] = v;
		else if (!strcmp(name, "page")) {
			if (parse_count("page", v, 0, UINT32_MAX / MAX_PAGE_SIZE, &o->page) < 0)
				return 2;
		} else if (!strcmp(name, "page-size")) {
			if (parse_count("page-size", v, 1, MAX_PAGE_SIZE, &o->page_size) < 0)
				return 2;
		}
	}
	if (o->cmd == USER_CREATE && !o->email)
		return usage_error("%s", "user create needs --email");
	if ((o->cmd == USER_RESET_PASSWORD || o->cmd == ROLES_SET) && !o->user_id)
		return usage_error("%s", "this command needs --user-id");
	if (!o->data_dir) {
		const char *env = getenv("EMBER_DATA_DIR");
		if (!env || !*env)
			env = getenv("EMBER_SERVER_DATA_DIR");
		o->data_dir = env && *env ? env : "./data";
	}
	return 0;
}

/* --- passwords -------------------------------------------------------------- */

/* The terminal's settings while a hidden prompt has echo off, so that a
 * signal (Ctrl-C) puts them back before the process dies: a process-wide
 * copy because a signal handler can reach nothing else. Written only
 * before the handlers are installed. */
static struct termios saved_tty;

static void restore_tty(int sig)
{
	tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Reads one line of at most cap-2 bytes from stdin into line (no line
 * end); 0, or -1 with err set. */
static int read_line(char *line, size_t cap, struct buf *err)
{
	if (!fgets(line, (int)cap, stdin)) {
		buf_puts(err, ferror(stdin) ? "cannot read the password from standard input"
					    : "no password on standard input (give --password, or pipe it)");
		return -1;
	}
	size_t n = strlen(line);
	if (n && line[n - 1] == '\n')
		line[--n] = 0;
	else if (!feof(stdin)) {
		buf_printf(err, "the password is longer than %d bytes", PASSWORD_MAX_LEN);
		return -1;
	}
	if (n && line[n - 1] == '\r')
		line[--n] = 0;
	if (!n) {
		buf_puts(err, "the password is empty");
		return -1;
	}
	return 0;
}

/* One prompt with echo off; 0, or -1 with err set. */
static int prompt_hidden(const char *prompt, char *line, size_t cap, struct buf *err)
{
	struct termios quiet;
	if (tcgetattr(STDIN_FILENO, &saved_tty) < 0) {
		buf_printf(err, "cannot read the terminal's settings: %s", strerror(errno));
		return -1;
	}
	quiet = saved_tty;
	quiet.c_lflag &= ~(tcflag_t)ECHO;
	quiet.c_lflag |= ECHONL;
	struct sigaction sa = { .sa_handler = restore_tty }, old_int, old_term, old_hup;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGHUP, &sa, &old_hup);
	int rc = 0;
	/* Echo off before the prompt: what is typed after it is never shown
	 * (TCSAFLUSH drops only what was typed before). */
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) < 0) {
		buf_printf(err, "cannot turn the terminal's echo off: %s", strerror(errno));
		rc = -1;
	} else {
		fputs(prompt, stderr);
		fflush(stderr);
		rc = read_line(line, cap, err);
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tty);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGHUP, &old_hup, NULL);
	return rc;
}

/* The password from --password, else from stdin (a hidden prompt and its
 * confirmation on a terminal, else the first line). Returns a malloc'ed
 * string the caller wipes and frees, or NULL with err set. */
static char *get_password(const struct opts *o, struct buf *err)
{
	if (o->password) {
		if (!*o->password || strlen(o->password) > PASSWORD_MAX_LEN) {
			buf_printf(err, "--password: 1 to %d bytes", PASSWORD_MAX_LEN);
			return NULL;
		}
		return xstrdup(o->password);
	}
	const size_t cap = PASSWORD_MAX_LEN + 2;
	char *line = xcalloc(1, cap), *again = NULL;
	int rc;
	if (isatty(STDIN_FILENO)) {
		rc = prompt_hidden("Password: ", line, cap, err);
		if (!rc) {
			again = xcalloc(1, cap);
			rc = prompt_hidden("Password again: ", again, cap, err);
			if (!rc && strcmp(line, again)) {
				buf_puts(err, "the two passwords differ");
				rc = -1;
			}
		}
	} else {
		rc = read_line(line, cap, err);
	}
	if (again) {
		explicit_bzero(again, cap);
		free(again);
	}
	if (rc) {
		explicit_bzero(line, cap);
		free(line);
		return NULL;
	}
	return line;
}

static void wipe(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

/* --- output -------------------------------------------------------------------- */

void cli_format_time(int64_t ms, char out[40])
{
	time_t s = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
	int frac = (int)(ms - (int64_t)s * 1000);
	struct tm tm;
	char day[28];
	if (!gmtime_r(&s, &tm) || !strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(day, sizeof(day), "1970-01-01T00:00:00");
	snprintf(out, 40, "%s.%03u+00:00", day, (unsigned)frac % 1000u);
}

/* "key: value\n" with any control character of value shown as '?': names
 * come from whoever created them. */
static void field(const char *key, const char *value)
{
	char *v = xstrdup(value ? value : "");
	str_make_printable(v, strlen(v));
	printf("%s: %s\n", key, v);
	free(v);
}

static void print_user(const char *id, const char *email, const char *given, const char *family,
		       int64_t created, int64_t updated)
{
	char t[40];
	printf("User %s\n", id);
	field("email", email);
	field("given_name", given);
	field("family_name", family);
	cli_format_time(created, t);
	field("created_at", t);
	cli_format_time(updated, t);
	field("updated_at", t);
}

/* "roles: A, B" from a JSON array of names or of role objects. */
static void print_roles(const json_t *roles)
{
	struct buf line = { 0 };
	size_t i;
	json_t *r;
	json_array_foreach(roles, i, r) {
		const json_t *name = json_is_object(r) ? json_object_get(r, "name") : r;
		buf_printf(&line, "%s%s", line.len ? ", " : "",
			   json_is_string(name) ? json_string_value(name) : "?");
	}
	field("roles", line.len ? line.data : "(none)");
	buf_free(&line);
}

/* "p1, p2" of a JSON array of strings. */
static void print_list(const char *key, const json_t *arr)
{
	struct buf line = { 0 };
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v)
		if (json_is_string(v))
			buf_printf(&line, "%s%s", line.len ? ", " : "", json_string_value(v));
	field(key, line.len ? line.data : "");
	buf_free(&line);
}

/* A user of a JSON array (identity_users_json's). */
static void print_user_json(const json_t *u, const struct opts *o)
{
	print_user(json_string_value(json_object_get(u, "id")),
		   json_string_value(json_object_get(u, "email")),
		   json_string_value(json_object_get(u, "given_name")),
		   json_string_value(json_object_get(u, "family_name")),
		   json_integer_value(json_object_get(u, "created_at")),
		   json_integer_value(json_object_get(u, "updated_at")));
	if (o->include_roles)
		print_roles(json_object_get(u, "roles"));
}

/* A role of a JSON array (identity_roles_json's). */
static void print_role_json(const json_t *r, const struct opts *o)
{
	(void)o;
	printf("Role %s\n", json_string_value(json_object_get(r, "id")));
	field("name", json_string_value(json_object_get(r, "name")));
	field("is_locked", json_is_true(json_object_get(r, "is_locked")) ? "true" : "false");
	printf("users: %lld\n", (long long)json_integer_value(json_object_get(r, "users")));
	print_list("perms", json_object_get(r, "patterns"));
	/* A project-scoped role grants its patterns only in these. */
	if (json_array_size(json_object_get(r, "project_ids")))
		print_list("projects", json_object_get(r, "project_ids"));
}

/* --- commands ----------------------------------------------------------------------- */

static int failed(struct identity *id, const char *action, const char *target, const struct buf *err)
{
	const char *msg = err->len ? err->data : "failed";
	identity_audit(id, ACTOR, ORIGIN, action, target, "failed", msg);
	fprintf(stderr, "Error: %s\n", msg);
	return 1;
}

/* The user user_id into *u: 0, or a failure of action audited and said
 * (1, returned by the command). */
static int find_user(struct identity *id, const char *action, const char *user_id, struct user_info *u,
		     struct buf *err)
{
	int found = identity_user_get(id, user_id, u, err);
	if (found == 1)
		buf_printf(err, "no user with id %.40s", user_id);
	return found ? failed(id, action, user_id, err) : 0;
}

/* The end of a list command: rc is the listing's (< 0: failed, audited
 * and said, 1 returned); else the listing of what is audited and each
 * item of items printed with one, a blank line between. */
static int listed(struct identity *id, const char *action, const char *target, const char *what,
		  int rc, const json_t *items, const struct buf *err,
		  void (*one)(const json_t *, const struct opts *), const struct opts *o)
{
	if (rc < 0)
		return failed(id, action, target, err);
	identity_audit(id, ACTOR, ORIGIN, action, target, "ok", what);
	size_t i;
	json_t *item;
	json_array_foreach(items, i, item) {
		if (i)
			putchar('\n');
		one(item, o);
	}
	return 0;
}

/* What a command holds, freed by cmd_identity once it returns (so that a
 * command can return from anywhere): its error text, its audit detail,
 * the JSON it read and the password it was given. */
struct held {
	struct buf err, what;
	json_t *items;
	char *pw;
};

static int user_create(struct identity *id, const struct opts *o, struct held *h)
{
	struct user_info u;
	/* Before asking for a password that would be thrown away. */
	int had = identity_user_by_email(id, o->email, &u, &h->err);
	if (had == 0)
		buf_printf(&h->err, "a user with email %s exists (%s)", u.email, u.id);
	if (had <= 0 || !(h->pw = get_password(o, &h->err)) ||
	    identity_user_create(id, o->email, h->pw, o->given, o->family, &u, &h->err) < 0)
		return failed(id, "user.create", o->email, &h->err);
	identity_audit(id, ACTOR, ORIGIN, "user.create", u.id, "ok", u.email);
	print_user(u.id, u.email, u.given_name, u.family_name, u.created_ms, u.updated_ms);
	return 0;
}

static int user_reset_password(struct identity *id, const struct opts *o, struct held *h)
{
	struct user_info u;
	if (find_user(id, "user.password.reset", o->user_id, &u, &h->err))
		return 1;
	h->pw = get_password(o, &h->err);
	if (!h->pw || identity_user_set_password(id, u.id, h->pw, &h->err) < 0)
		return failed(id, "user.password.reset", u.id, &h->err);
	/* Whoever held the old password is signed out: no refresh works. */
	size_t ended = 0;
	if (identity_user_sessions_end(id, u.id, &ended, &h->err) < 0) {
		fprintf(stderr, "Error: the password was set, but the user's sessions were not ended: %s\n",
			h->err.data);
		buf_printf(&h->what, "%s; sessions not ended: %s", u.email, h->err.data);
		identity_audit(id, ACTOR, ORIGIN, "user.password.reset", u.id, "failed", h->what.data);
		return 1;
	}
	buf_printf(&h->what, "%s; %zu sessions ended", u.email, ended);
	identity_audit(id, ACTOR, ORIGIN, "user.password.reset", u.id, "ok", h->what.data);
	if (identity_user_get(id, u.id, &u, &h->err) == 0)
		print_user(u.id, u.email, u.given_name, u.family_name, u.created_ms, u.updated_ms);
	return 0;
}

static int user_list(struct identity *id, const struct opts *o, struct held *h)
{
	size_t total = 0;
	buf_printf(&h->what, "query \"%s\", page %llu, %llu a page", o->query ? o->query : "",
		   (unsigned long long)o->page, (unsigned long long)o->page_size);
	int rc = identity_users_json(id, o->query, (unsigned)o->page, (unsigned)o->page_size,
				     o->include_roles, &h->items, &total, &h->err);
	if (listed(id, "user.list", "", h->what.data, rc, h->items, &h->err, print_user_json, o))
		return 1;
	printf("Page %llu: %zu users (%zu total, %llu pages)\n", (unsigned long long)o->page,
	       json_array_size(h->items), total,
	       (unsigned long long)((total + o->page_size - 1) / o->page_size));
	return 0;
}

static int roles_list(struct identity *id, const struct opts *o, struct held *h)
{
	struct user_info u;
	if (o->user_id && find_user(id, "role.list", o->user_id, &u, &h->err))
		return 1;
	for (size_t i = 0; i < o->nnames; i++)
		buf_printf(&h->what, "%s%s", i ? ", " : "names ", o->names[i]);
	int rc = identity_roles_json(id, o->user_id, o->names, o->nnames, &h->items, &h->err);
	if (listed(id, "role.list", o->user_id ? o->user_id : "", h->what.len ? h->what.data : "", rc,
		   h->items, &h->err, print_role_json, o))
		return 1;
	printf("%zu roles\n", json_array_size(h->items));
	return 0;
}

static int roles_set(struct identity *id, const struct opts *o, struct held *h)
{
	/* --admin is System Admin first, then each --role as given. */
	const char **names = xcalloc(o->nroles + 1, sizeof(*names));
	size_t n = 0;
	if (o->admin)
		names[n++] = "System Admin";
	for (size_t i = 0; i < o->nroles; i++)
		names[n++] = o->roles[i];
	for (size_t i = 0; i < n; i++)
		buf_printf(&h->what, "%s%s", i ? ", " : "", names[i]);
	int rc = identity_roles_set(id, o->user_id, names, n, &h->err);
	free(names);
	if (rc < 0)
		return failed(id, "role.assignment.set", o->user_id, &h->err);
	identity_audit(id, ACTOR, ORIGIN, "role.assignment.set", o->user_id, "ok",
		       h->what.len ? h->what.data : "(none)");
	struct user_info u;
	if (identity_user_get(id, o->user_id, &u, &h->err) != 0 ||
	    identity_roles_json(id, o->user_id, NULL, 0, &h->items, &h->err) < 0) {
		fprintf(stderr, "Error: the roles were set, but reading them back failed: %s\n",
			h->err.len ? h->err.data : "the user is gone");
		return 1;
	}
	print_user(u.id, u.email, u.given_name, u.family_name, u.created_ms, u.updated_ms);
	print_roles(h->items);
	return 0;
}

int cmd_identity(int argc, char **argv)
{
	struct opts o = { 0 };
	int rc = parse_args(argc, argv, &o);
	if (rc == HELP) {
		cmd_identity_usage(stdout);
		rc = 0;
		goto out;
	}
	if (rc)
		goto out;
	struct buf path = { 0 }, err = { 0 };
	struct identity *id = NULL;
	bool pg = o.metadata && metadb_url_is_postgres(o.metadata);
	if (o.metadata && !pg && strcmp(o.metadata, "sqlite") != 0) {
		fprintf(stderr, "Error: --metadata: expected sqlite or postgres://USER@HOST:PORT/DB\n");
		rc = 2;
		goto out;
	}
	if (pg) {
		char *pw = NULL;
		if (o.metadata_password_file &&
		    metadb_read_password(o.metadata_password_file, &pw, &err) < 0) {
			fprintf(stderr, "Error: --metadata-password-file: %s\n", err.data);
			buf_free(&err);
			rc = 1;
			goto out;
		}
		rc = identity_open_url(o.metadata, pw, &id, &err);
		if (pw)
			wipe(pw);
		if (rc < 0) {
			/* The message names the database, never the URL (a password). */
			fprintf(stderr, "Error: cannot open the identity store: %s\n", err.data ? err.data : "");
			buf_free(&err);
			rc = 1;
			goto out;
		}
		goto opened;
	}
	/* Never create a store: a wrong --data-dir would otherwise make an
	 * empty one the server never reads. */
	buf_printf(&path, "%s/identity.db", o.data_dir);
	struct stat st;
	if (stat(path.data, &st) < 0) {
		if (errno == ENOENT)
			fprintf(stderr,
				"Error: %s does not exist: give the data directory of an ember-server "
				"started with --auth (its --data-dir) with --data-dir or $EMBER_DATA_DIR\n",
				path.data);
		else
			fprintf(stderr, "Error: %s: %s\n", path.data, strerror(errno));
		buf_free(&path);
		rc = 1;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "Error: %s is not a file\n", path.data);
		buf_free(&path);
		rc = 1;
		goto out;
	}
	buf_free(&path);
	if (identity_open(o.data_dir, &id, &err) < 0) {
		fprintf(stderr, "Error: cannot open the identity store in %s: %s\n", o.data_dir,
			err.data ? err.data : "");
		buf_free(&err);
		rc = 1;
		goto out;
	}
opened:
	buf_free(&err);
	static int (*const cmds[])(struct identity *, const struct opts *, struct held *) = {
		[USER_CREATE] = user_create,       [USER_LIST] = user_list,
		[USER_RESET_PASSWORD] = user_reset_password, [ROLES_LIST] = roles_list,
		[ROLES_SET] = roles_set,
	};
	struct held h = { 0 };
	rc = cmds[o.cmd](id, &o, &h);
	wipe(h.pw);
	json_decref(h.items);
	buf_free(&h.err);
	buf_free(&h.what);
	identity_close(id);
	if (fflush(stdout) != 0 && !rc) {
		fprintf(stderr, "ember identity: cannot write the output: %s\n", strerror(errno));
		rc = 1;
	}
out:
	free_all(o.names, o.roles);
	return rc;
}
