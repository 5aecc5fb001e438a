/* identity.c - see identity.h. */
#include "identity.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "b64url.h"
#include "log.h"
#include "password.h"
#include "perm.h"
#include "metadb.h"
#include "util.h"

struct identity {
	pthread_mutex_t mu; /* one statement sequence at a time (transactions) */
	struct metadb *db;
	/* The audit log's own connection to the same file, committing without
	 * an fsync each (synchronous=NORMAL: in WAL mode durable at the next
	 * synced commit or checkpoint), so a flood of denied requests neither
	 * waits for the disk nor holds up the checks of others (mu). */
	pthread_mutex_t amu;
	struct metadb *adb;
	/* Refusals ("denied", "failed") are written at most AUDIT_REFUSALS_PER_S
	 * a second; the rest are counted and the next written one says how
	 * many were not (guarded by amu). */
	int64_t window_s;
	unsigned window_n;
	uint64_t suppressed;
	int64_t pruned_hour; /* the hour old entries were last deleted in */
};

#define AUDIT_REFUSALS_PER_S 20
/* Audit entries older than this are deleted (checked hourly). */
#define AUDIT_KEEP_MS (400LL * 86400000)

/* A token's last-used time is written at most this often (a write per
 * request would cost a synced transaction each). */
#define LAST_USED_EVERY_MS 60000

/* The tables, in metadb_exec_ddl's words ({int}, {serial}, {nocase}):
 * on SQLite exactly the text they were made with before metadb. */
static const char *const schema =
	"CREATE TABLE IF NOT EXISTS users ("
	" id TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE {nocase},"
	" given_name TEXT NOT NULL DEFAULT '', family_name TEXT NOT NULL DEFAULT '',"
	" password TEXT, created_ms {int} NOT NULL, updated_ms {int} NOT NULL);"
	"CREATE TABLE IF NOT EXISTS roles ("
	" id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, locked {int} NOT NULL,"
	" patterns TEXT NOT NULL, projects TEXT NOT NULL, created_ms {int} NOT NULL);"
	"CREATE TABLE IF NOT EXISTS user_roles ("
	" user_id TEXT NOT NULL, role_id TEXT NOT NULL, PRIMARY KEY (user_id, role_id));"
	"CREATE TABLE IF NOT EXISTS tokens ("
	" id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, owner TEXT NOT NULL, name TEXT NOT NULL,"
	" scopes TEXT NOT NULL, projects TEXT NOT NULL, created_ms {int} NOT NULL,"
	" expires_ms {int} NOT NULL, last_used_ms {int} NOT NULL DEFAULT 0, revoked_ms {int});"
	"CREATE TABLE IF NOT EXISTS sessions ("
	" id TEXT PRIMARY KEY, user_id TEXT NOT NULL, created_ms {int} NOT NULL,"
	" expires_ms {int} NOT NULL, ended_ms {int});"
	"CREATE TABLE IF NOT EXISTS audit ("
	" id {serial}, ts_ms {int} NOT NULL, actor TEXT NOT NULL,"
	" origin TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, outcome TEXT NOT NULL,"
	" detail TEXT NOT NULL);";

/* On PostgreSQL, beside: emails unique and looked up by lower() (it has
 * no NOCASE), and the session signing keys (every replica signs and
 * checks with the same pair; identity_jwt_keys). */
static const char *const schema_pg =
	"CREATE UNIQUE INDEX IF NOT EXISTS users_email_lower ON users (lower(email));"
	"CREATE TABLE IF NOT EXISTS jwt_keys ("
	" id {int} PRIMARY KEY, private_pem TEXT NOT NULL, public_pem TEXT NOT NULL,"
	" created_ms {int} NOT NULL);";

#define IDENTITY_SCHEMA_VERSION 1

struct builtin {
	const char *id, *name, *patterns, *projects;
};

static const struct builtin builtins[] = {
	{ ROLE_SYSTEM_ADMIN, "System Admin", "[\"**:*\"]", "[]" },
	{ ROLE_SYSTEM_EDITOR, "System Editor",
	  "[\"project:*\",\"service:token:*\",\"ingest:**\",\"symbols:**\",\"server:**\"]", "[]" },
	{ ROLE_SYSTEM_VIEWER, "System Viewer", "[\"**:read\"]", "[]" },
	{ ROLE_DEFAULT_PROJECT_VIEWER, "Default Project Viewer", "[\"project:read\"]",
	  "[\"00000000-0000-0000-0000-000000000000\"]" },
};

/* --- grants ------------------------------------------------------------ */

void grants_free(struct grants *g)
{
	for (size_t i = 0; i < g->n; i++) {
		free(g->v[i].pattern);
		for (size_t j = 0; j < g->v[i].nprojects; j++)
			free(g->v[i].projects[j]);
		free(g->v[i].projects);
	}
	free(g->v);
	g->v = NULL;
	g->n = 0;
}

bool grants_allow(const struct grants *g, const char *permission, const char *project)
{
	for (size_t i = 0; i < g->n; i++) {
		const struct grant *gr = &g->v[i];
		if (!perm_match(gr->pattern, permission))
			continue;
		if (!gr->nprojects)
			return true;
		if (!project)
			continue;
		for (size_t j = 0; j < gr->nprojects; j++)
			if (!strcmp(gr->projects[j], project))
				return true;
	}
	return false;
}

/* Adds one grant per pattern of the JSON array patterns, each for the
 * projects of the JSON array projects. Malformed stored text adds nothing. */
static void grants_add_json(struct grants *g, const char *patterns, const char *projects)
{
	json_t *pa = json_loads(patterns ? patterns : "[]", 0, NULL);
	json_t *pr = json_loads(projects ? projects : "[]", 0, NULL);
	if (json_is_array(pa) && json_is_array(pr)) {
		size_t i;
		json_t *v;
		json_array_foreach(pa, i, v) {
			if (!json_is_string(v))
				continue;
			g->v = xrealloc(g->v, (g->n + 1) * sizeof(*g->v));
			struct grant *gr = &g->v[g->n++];
			gr->pattern = xstrdup(json_string_value(v));
			gr->nprojects = 0;
			gr->projects = xcalloc(json_array_size(pr) + 1, sizeof(char *));
			size_t j;
			json_t *p;
			json_array_foreach(pr, j, p)
				if (json_is_string(p))
					gr->projects[gr->nprojects++] = xstrdup(json_string_value(p));
		}
	}
	json_decref(pa);
	json_decref(pr);
}

/* --- helpers -------------------------------------------------------------- */

static const char *col(struct metadb_stmt *st, int i)
{
	return metadb_text(st, i);
}

/* The length of s cut to at most max bytes, not within a UTF-8 character
 * (PostgreSQL refuses a text that is not UTF-8). */
static size_t utf8_cut(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n <= max)
		return n;
	n = max;
	while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
		n--;
	return n;
}

static void copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src ? src : "");
}

static int check_len(const char *what, const char *s, size_t max, bool required, struct buf *err)
{
	size_t n = s ? strlen(s) : 0;
	if (required && !n) {
		buf_printf(err, "%s is required", what);
		return -1;
	}
	if (n > max) {
		buf_printf(err, "%s longer than %zu bytes", what, max);
		return -1;
	}
	return 0;
}

/* A JSON array text of strings, each checked by check (NULL: none). */
static int list_json(const char *what, const char *const *v, size_t n, size_t max,
		     int (*check)(const char *, struct buf *), char **out, struct buf *err)
{
	if (n > max) {
		buf_printf(err, "more than %zu %s", max, what);
		return -1;
	}
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++) {
		if (check && check(v[i], err) < 0) {
			json_decref(a);
			return -1;
		}
		json_array_append_new(a, json_string(v[i]));
	}
	*out = json_dumps(a, JSON_COMPACT);
	json_decref(a);
	if (!*out) {
		buf_printf(err, "%s: not valid UTF-8", what);
		return -1;
	}
	return 0;
}

static int check_project(const char *p, struct buf *err)
{
	if (!uuid_valid(p)) {
		buf_printf(err, "project id \"%.64s\" is not a UUID", p);
		return -1;
	}
	return 0;
}

static void sha256_hex(const char *s, char out[65])
{
	uint8_t d[32];
	unsigned n = 0;
	EVP_Digest(s, strlen(s), d, &n, EVP_sha256(), NULL);
	hex_encode(d, sizeof(d), out);
}

static int begin(struct identity *id, struct buf *err)
{
	return metadb_begin(id->db, err) < 0 ? -2 : 0;
}

/* Ends the transaction begun under id->mu: commits it when rc is 0 (-2
 * when that fails), else rolls it back; unlocks. Returns rc. */
static int tx_end(struct identity *id, int rc, struct buf *err)
{
	if (!rc && metadb_commit(id->db, err) < 0)
		rc = -2;
	if (rc)
		metadb_rollback(id->db);
	pthread_mutex_unlock(&id->mu);
	return rc;
}

/* Prepares sql on db and binds its parameters in order as types says, a
 * letter each: 't' a const char * (NULL binds NULL), 'i' an int64_t.
 * With st, hands the statement over unrun (the caller steps and finalizes
 * it) and returns 0. Without, runs it once: 1 when it gave a row, 0 when
 * it ended (*changes, when not NULL, the rows it changed). -2 with err
 * set when it could not be prepared or failed. Called with db's lock held. */
static int run(struct metadb *db, struct metadb_stmt **st, long *changes, struct buf *err, const char *sql,
	       const char *types, ...)
{
	struct metadb_stmt *s;
	if (metadb_prepare(db, sql, &s, err) < 0)
		return -2;
	va_list ap;
	va_start(ap, types);
	for (int i = 0; types[i]; i++) {
		if (types[i] == 'i') {
			metadb_bind_int64(s, i + 1, va_arg(ap, int64_t));
		} else {
			const char *v = va_arg(ap, const char *);
			if (v)
				metadb_bind_text(s, i + 1, v);
			else
				metadb_bind_null(s, i + 1);
		}
	}
	va_end(ap);
	if (st) {
		*st = s;
		return 0;
	}
	int rc = metadb_step(s, err);
	if (rc < 0)
		rc = -2;
	else if (changes)
		*changes = metadb_changes(s);
	metadb_finalize(s);
	return rc;
}

/* One row of a statement as a JSON object (NULL: the row is left out). */
typedef json_t *(*row_json)(struct metadb_stmt *st, const void *ctx);

/* The rows of st (from run; NULL when it failed) as an array of row's
 * objects, then st finalized and mu, held by the caller, unlocked. 0 with
 * *out set, or -2 when st is NULL or a step failed (err says why). */
static int rows_json(pthread_mutex_t *mu, struct metadb_stmt *st, row_json row, const void *ctx,
		     json_t **out, struct buf *err)
{
	json_t *arr = st ? json_array() : NULL;
	int s = 0;
	while (st && (s = metadb_step(st, err)) == 1) {
		json_t *o = row(st, ctx);
		if (o)
			json_array_append_new(arr, o);
	}
	metadb_finalize(st);
	pthread_mutex_unlock(mu);
	if (!arr || s < 0) {
		json_decref(arr);
		return -2;
	}
	*out = arr;
	return 0;
}

/* Runs sql, an UPDATE whose ?1 is the time now and ?2 is key, under the
 * lock: the rows it changed, or -2 with err set. */
static long stamp(struct identity *id, const char *sql, const char *key, struct buf *err)
{
	pthread_mutex_lock(&id->mu);
	long n = 0;
	int rc = run(id->db, NULL, &n, err, sql, "it", now_unix_ms(), key);
	pthread_mutex_unlock(&id->mu);
	return rc < 0 ? rc : n;
}

/* --- open / close ---------------------------------------------------------- */

void identity_close(struct identity *id)
{
	if (!id)
		return;
	metadb_close(id->db);
	metadb_close(id->adb);
	pthread_mutex_destroy(&id->mu);
	pthread_mutex_destroy(&id->amu);
	free(id);
}

int identity_open(const char *data_dir, struct identity **out, struct buf *err)
{
	struct buf path = { 0 };
	buf_printf(&path, "%s/identity.db", data_dir);
	int rc = identity_open_url(path.data, NULL, out, err);
	buf_free(&path);
	return rc;
}

int identity_open_url(const char *url, const char *password, struct identity **out,
		      struct buf *err)
{
	struct identity *id = xcalloc(1, sizeof(*id));
	pthread_mutex_init(&id->mu, NULL);
	pthread_mutex_init(&id->amu, NULL);
	struct buf ddl = { 0 };
	int rc = metadb_open(url, password, &id->db, err);
	if (rc == 0) {
		buf_puts(&ddl, schema);
		if (metadb_dialect(id->db) == METADB_POSTGRES)
			buf_puts(&ddl, schema_pg);
		rc = metadb_migrate(id->db, "identity", IDENTITY_SCHEMA_VERSION, ddl.data, err);
	}
	buf_free(&ddl);
	if (rc == 0)
		rc = metadb_open(url, password, &id->adb, err);
	if (rc == 0 && metadb_dialect(id->adb) == METADB_SQLITE)
		rc = metadb_exec(id->adb, "PRAGMA synchronous=NORMAL", err);
	if (rc < 0) {
		identity_close(id);
		return -1;
	}
	for (size_t i = 0; i < ARRAY_SIZE(builtins); i++) {
		const struct builtin *b = &builtins[i];
		/* Written only when absent or changed (a new version's patterns):
		 * a start on a full disk writes nothing. */
		int same = run(id->db, NULL, NULL, err, "SELECT 1 FROM roles WHERE id = ? AND name = ? AND locked = 1"
						" AND patterns = ? AND projects = ?",
				   "tttt", b->id, b->name, b->patterns, b->projects);
		if (same == 0)
			same = run(id->db, NULL, NULL, err,
				   "INSERT INTO roles(id, name, locked, patterns, projects, created_ms)"
				   " VALUES (?, ?, 1, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
				   " name = excluded.name, locked = 1, patterns = excluded.patterns,"
				   " projects = excluded.projects",
				   "tttti", b->id, b->name, b->patterns, b->projects, now_unix_ms());
		/* Another replica starting at the same moment wrote it first (on
		 * PostgreSQL the name's unique index can refuse the second insert
		 * before the upsert's id check sees the first): what it wrote is
		 * the same row. */
		if (same < 0 && run(id->db, NULL, NULL, err, "SELECT 1 FROM roles WHERE id = ? AND name = ?"
				     " AND locked = 1 AND patterns = ? AND projects = ?",
				     "tttt", b->id, b->name, b->patterns, b->projects) == 1) {
			buf_reset(err);
			same = 1;
		}
		if (same < 0) {
			identity_close(id);
			return -1;
		}
	}
	*out = id;
	return 0;
}

/* --- session signing keys ------------------------------------------------------ */

int identity_jwt_keys(struct identity *id, const char *new_priv, const char *new_pub, char **priv,
		      char **pub, struct buf *err)
{
	*priv = *pub = NULL;
	if (metadb_dialect(id->db) != METADB_POSTGRES) {
		buf_puts(err, "the signing keys are kept in the store only on PostgreSQL");
		return -1;
	}
	pthread_mutex_lock(&id->mu);
	int rc = run(id->db, NULL, NULL, err, "INSERT INTO jwt_keys(id, private_pem, public_pem, created_ms)"
					" VALUES (1, ?, ?, ?) ON CONFLICT DO NOTHING",
		     "tti", new_priv, new_pub, now_unix_ms());
	struct metadb_stmt *st = NULL;
	if (!rc)
		rc = run(id->db, &st, NULL, err, "SELECT private_pem, public_pem FROM jwt_keys WHERE id = 1", "");
	if (!rc) {
		int s = metadb_step(st, err);
		if (s == 1) {
			*priv = xstrdup(col(st, 0));
			*pub = xstrdup(col(st, 1));
		} else {
			if (s == 0)
				buf_puts(err, "the signing keys were not stored");
			rc = -2;
		}
	}
	metadb_finalize(st);
	pthread_mutex_unlock(&id->mu);
	return rc;
}

/* --- users ------------------------------------------------------------------ */

static void user_row(struct metadb_stmt *st, struct user_info *u)
{
	copy(u->id, sizeof(u->id), col(st, 0));
	copy(u->email, sizeof(u->email), col(st, 1));
	copy(u->given_name, sizeof(u->given_name), col(st, 2));
	copy(u->family_name, sizeof(u->family_name), col(st, 3));
	u->created_ms = metadb_int64(st, 4);
	u->updated_ms = metadb_int64(st, 5);
}

#define USER_COLS "id, email, given_name, family_name, created_ms, updated_ms"

static int user_lookup(struct identity *id, const char *where, const char *arg,
		       struct user_info *out, char **password, struct buf *err)
{
	struct buf sql = { 0 };
	/* Emails match without regard to case: SQLite's column is NOCASE,
	 * PostgreSQL's index is on lower(email). */
	if (!strcmp(where, "email") && metadb_dialect(id->db) == METADB_POSTGRES)
		buf_puts(&sql, "SELECT " USER_COLS ", password FROM users WHERE lower(email) = lower(?)");
	else
		buf_printf(&sql, "SELECT " USER_COLS ", password FROM users WHERE %s = ?", where);
	struct metadb_stmt *st;
	int rc = metadb_prepare(id->db, sql.data, &st, err);
	buf_free(&sql);
	if (rc < 0)
		return -2;
	metadb_bind_text(st, 1, arg);
	rc = metadb_step(st, err);
	if (rc == 1) {
		user_row(st, out);
		if (password)
			*password = metadb_is_null(st, 6) ? NULL : xstrdup(col(st, 6));
		rc = 0;
	} else if (rc == 0) {
		rc = 1;
	} else {
		rc = -2;
	}
	metadb_finalize(st);
	return rc;
}

/* user_lookup under the lock. */
static int user_find(struct identity *id, const char *where, const char *arg, struct user_info *out,
		     struct buf *err)
{
	pthread_mutex_lock(&id->mu);
	int rc = user_lookup(id, where, arg, out, NULL, err);
	pthread_mutex_unlock(&id->mu);
	return rc;
}

int identity_user_get(struct identity *id, const char *user_id, struct user_info *out,
		      struct buf *err)
{
	return user_find(id, "id", user_id, out, err);
}

int identity_user_by_email(struct identity *id, const char *email, struct user_info *out,
			   struct buf *err)
{
	return user_find(id, "email", email, out, err);
}

static int valid_email(const char *email, struct buf *err)
{
	if (check_len("email", email, IDENTITY_MAX_EMAIL, true, err) < 0)
		return -1;
	const char *at = strchr(email, '@');
	if (!at || at == email || !at[1] || strchr(at + 1, '@')) {
		buf_printf(err, "email \"%.64s\" is not an address", email);
		return -1;
	}
	for (const char *p = email; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == 0x7f) {
			buf_puts(err, "email has a space or a control character");
			return -1;
		}
	return 0;
}

int identity_user_create(struct identity *id, const char *email, const char *password,
			 const char *given, const char *family, struct user_info *out,
			 struct buf *err)
{
	if (valid_email(email, err) < 0 || check_len("given name", given, IDENTITY_MAX_NAME, false, err) < 0 ||
	    check_len("family name", family, IDENTITY_MAX_NAME, false, err) < 0)
		return -1;
	char hash[PASSWORD_HASH_MAX] = "";
	if (password && password_hash(password, hash, err) < 0)
		return -1;
	struct user_info u = { 0 };
	uuid_v4(u.id);
	copy(u.email, sizeof(u.email), email);
	copy(u.given_name, sizeof(u.given_name), given);
	copy(u.family_name, sizeof(u.family_name), family);
	u.created_ms = u.updated_ms = now_unix_ms();
	pthread_mutex_lock(&id->mu);
	int rc = begin(id, err);
	if (!rc) {
		struct user_info had;
		rc = user_lookup(id, "email", email, &had, NULL, err);
		if (rc == 0) {
			buf_printf(err, "a user with email %s exists (%s)", had.email, had.id);
			rc = -1;
		} else if (rc == 1) {
			rc = 0;
		}
	}
	if (!rc)
		rc = run(id->db, NULL, NULL, err, "INSERT INTO users(" USER_COLS ", password) VALUES (?,?,?,?,?,?,?)",
			 "ttttiit", u.id, u.email, u.given_name, u.family_name, u.created_ms,
			 u.updated_ms, password ? hash : NULL);
	if (!rc)
		rc = run(id->db, NULL, NULL, err, "INSERT INTO user_roles(user_id, role_id) VALUES (?, ?)", "tt",
			 u.id, ROLE_DEFAULT_PROJECT_VIEWER);
	rc = tx_end(id, rc, err);
	if (!rc && out)
		*out = u;
	return rc;
}

int identity_user_set_password(struct identity *id, const char *user_id, const char *password,
			       struct buf *err)
{
	char hash[PASSWORD_HASH_MAX];
	if (password_hash(password, hash, err) < 0)
		return -1;
	pthread_mutex_lock(&id->mu);
	long n = 0;
	int rc = run(id->db, NULL, &n, err, "UPDATE users SET password = ?, updated_ms = ? WHERE id = ?", "tit",
		     hash, now_unix_ms(), user_id);
	if (!rc && !n) {
		buf_printf(err, "no user with id %.40s", user_id);
		rc = -1;
	}
	pthread_mutex_unlock(&id->mu);
	return rc;
}

int identity_login(struct identity *id, const char *email, const char *password,
		   struct user_info *out, struct buf *err)
{
	if (!email || !password || strlen(email) > IDENTITY_MAX_EMAIL ||
	    strlen(password) > PASSWORD_MAX_LEN) {
		password_verify(password_dummy_hash(), "x");
		return 1;
	}
	char *hash = NULL;
	pthread_mutex_lock(&id->mu);
	int rc = user_lookup(id, "email", email, out, &hash, err);
	pthread_mutex_unlock(&id->mu);
	if (rc < 0)
		return rc;
	/* The hash is verified unlocked: it takes a tenth of a second. */
	bool ok = password_verify(hash ? hash : password_dummy_hash(), password);
	free(hash);
	return rc == 0 && ok && hash ? 0 : 1;
}

int identity_users_json(struct identity *id, const char *query, unsigned page,
			unsigned page_size, bool with_roles, json_t **out, size_t *total,
			struct buf *err)
{
	if (page_size == 0 || page_size > 100) {
		buf_puts(err, "page size must be 1 to 100");
		return -1;
	}
	if (check_len("query", query, IDENTITY_MAX_EMAIL, false, err) < 0)
		return -1;
	struct buf like = { 0 };
	buf_putc(&like, '%');
	for (const char *p = query ? query : ""; *p; p++) {
		if (*p == '%' || *p == '_' || *p == '\\')
			buf_putc(&like, '\\');
		buf_putc(&like, *p);
	}
	buf_putc(&like, '%');
	pthread_mutex_lock(&id->mu);
	struct metadb_stmt *st = NULL, *rs = NULL;
	int rc = 0;
	json_t *arr = json_array();
	if (metadb_prepare(id->db, "SELECT count(*) FROM users WHERE lower(email) LIKE lower(?) ESCAPE '\\'", &st,
			  err) < 0) {
		rc = -2;
		goto out;
	}
	metadb_bind_text(st, 1, like.data);
	int s = metadb_step(st, err);
	if (s < 0) {
		rc = -2;
		goto out;
	}
	*total = s == 1 ? (size_t)metadb_int64(st, 0) : 0;
	metadb_finalize(st);
	st = NULL;
	if (metadb_prepare(id->db, "SELECT " USER_COLS " FROM users WHERE lower(email) LIKE lower(?) ESCAPE '\\'"
				  " ORDER BY created_ms, id LIMIT ? OFFSET ?",
			  &st, err) < 0 ||
	    metadb_prepare(id->db, "SELECT r.name FROM roles r JOIN user_roles ur ON ur.role_id = r.id"
				  " WHERE ur.user_id = ? ORDER BY r.name",
			  &rs, err) < 0) {
		rc = -2;
		goto out;
	}
	metadb_bind_text(st, 1, like.data);
	metadb_bind_int64(st, 2, page_size);
	metadb_bind_int64(st, 3, (int64_t)page * page_size);
	while ((s = metadb_step(st, err)) == 1) {
		struct user_info u;
		user_row(st, &u);
		json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "id", u.id, "email", u.email,
				      "given_name", u.given_name, "family_name", u.family_name,
				      "created_at", (json_int_t)u.created_ms, "updated_at",
				      (json_int_t)u.updated_ms);
		if (with_roles && o) {
			json_t *roles = json_array();
			metadb_reset(rs);
			metadb_bind_text(rs, 1, u.id);
			int r;
			while ((r = metadb_step(rs, err)) == 1)
				json_array_append_new(roles, json_string(col(rs, 0)));
			json_object_set_new(o, "roles", roles);
			if (r < 0)
				s = -1;
		}
		if (o)
			json_array_append_new(arr, o);
		if (s < 0)
			break;
	}
	if (s < 0)
		rc = -2;
out:
	metadb_finalize(st);
	metadb_finalize(rs);
	pthread_mutex_unlock(&id->mu);
	buf_free(&like);
	if (rc) {
		json_decref(arr);
		return rc;
	}
	*out = arr;
	return 0;
}

/* --- roles --------------------------------------------------------------------- */

int identity_roles_set(struct identity *id, const char *user_id, const char *const *names,
		       size_t n, struct buf *err)
{
	if (n > IDENTITY_MAX_PATTERNS) {
		buf_printf(err, "more than %d roles", IDENTITY_MAX_PATTERNS);
		return -1;
	}
	pthread_mutex_lock(&id->mu);
	int rc = begin(id, err);
	char(*ids)[IDENTITY_ID_LEN] = xcalloc(n + 1, sizeof(*ids));
	struct user_info u;
	if (!rc) {
		rc = user_lookup(id, "id", user_id, &u, NULL, err);
		if (rc == 1) {
			buf_printf(err, "no user with id %.40s", user_id);
			rc = -1;
		}
	}
	struct buf missing = { 0 };
	for (size_t i = 0; !rc && i < n; i++) {
		struct metadb_stmt *st;
		if (metadb_prepare(id->db, "SELECT id FROM roles WHERE name = ?", &st, err) < 0) {
			rc = -2;
			break;
		}
		metadb_bind_text(st, 1, names[i]);
		int s = metadb_step(st, err);
		if (s == 1)
			copy(ids[i], IDENTITY_ID_LEN, col(st, 0));
		else if (s == 0)
			buf_printf(&missing, "%s%s", missing.len ? ", " : "", names[i]);
		else
			rc = -2;
		metadb_finalize(st);
	}
	if (!rc && missing.len) {
		buf_printf(err, "roles not found: %s", missing.data);
		rc = -1;
	}
	buf_free(&missing);
	if (!rc)
		rc = run(id->db, NULL, NULL, err, "DELETE FROM user_roles WHERE user_id = ?", "t", user_id);
	for (size_t i = 0; !rc && i < n; i++)
		rc = run(id->db, NULL, NULL, err, "INSERT INTO user_roles(user_id, role_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
			 "tt", user_id, ids[i]);
	if (!rc)
		rc = run(id->db, NULL, NULL, err, "UPDATE users SET updated_ms = ? WHERE id = ?", "it",
			 now_unix_ms(), user_id);
	rc = tx_end(id, rc, err);
	free(ids);
	return rc;
}

static json_t *json_list(const char *text)
{
	json_t *a = json_loads(text, 0, NULL);
	if (!json_is_array(a)) {
		json_decref(a);
		a = json_array();
	}
	return a;
}

struct role_names {
	const char *const *names;
	size_t n;
};

static json_t *role_row(struct metadb_stmt *st, const void *ctx)
{
	const struct role_names *want = ctx;
	const char *name = col(st, 1);
	bool listed = !want->n;
	for (size_t i = 0; i < want->n && !listed; i++)
		listed = !strcmp(want->names[i], name);
	if (!listed)
		return NULL;
	return json_pack("{s:s, s:s, s:b, s:I, s:o, s:o}", "id", col(st, 0), "name", name, "is_locked",
			 metadb_int64(st, 2) != 0, "users", (json_int_t)metadb_int64(st, 5),
			 "patterns", json_list(col(st, 3)), "project_ids", json_list(col(st, 4)));
}

int identity_roles_json(struct identity *id, const char *user_id, const char *const *names,
			size_t nnames, json_t **out, struct buf *err)
{
	pthread_mutex_lock(&id->mu);
	struct metadb_stmt *st = NULL;
	const char *sql =
		user_id ? "SELECT r.id, r.name, r.locked, r.patterns, r.projects,"
			  " (SELECT count(*) FROM user_roles x WHERE x.role_id = r.id)"
			  " FROM roles r JOIN user_roles ur ON ur.role_id = r.id WHERE ur.user_id = ?"
			  " ORDER BY r.created_ms, r.id"
			: "SELECT r.id, r.name, r.locked, r.patterns, r.projects,"
			  " (SELECT count(*) FROM user_roles x WHERE x.role_id = r.id)"
			  " FROM roles r ORDER BY r.id";
	run(id->db, &st, NULL, err, sql, user_id ? "t" : "", user_id);
	struct role_names want = { names, nnames };
	return rows_json(&id->mu, st, role_row, &want, out, err);
}

int identity_role_put(struct identity *id, const char *role_id, const char *name,
		      const char *const *patterns, size_t npatterns, const char *const *projects,
		      size_t nprojects, char out_id[IDENTITY_ID_LEN], struct buf *err)
{
	if (check_len("role name", name, IDENTITY_MAX_NAME, true, err) < 0)
		return -1;
	if (!npatterns) {
		buf_puts(err, "a role needs at least one permission pattern");
		return -1;
	}
	char *pj = NULL, *prj = NULL;
	if (list_json("patterns", patterns, npatterns, IDENTITY_MAX_PATTERNS, perm_check_pattern, &pj,
		      err) < 0 ||
	    list_json("projects", projects, nprojects, IDENTITY_MAX_PROJECTS, check_project, &prj,
		      err) < 0) {
		free(pj);
		return -1;
	}
	char rid[IDENTITY_ID_LEN];
	if (role_id)
		copy(rid, sizeof(rid), role_id);
	else
		uuid_v4(rid);
	pthread_mutex_lock(&id->mu);
	int rc = begin(id, err);
	struct metadb_stmt *st = NULL;
	if (!rc && metadb_prepare(id->db, "SELECT locked, id FROM roles WHERE id = ? OR name = ?", &st,
				 err) < 0)
		rc = -2;
	if (!rc) {
		metadb_bind_text(st, 1, rid);
		metadb_bind_text(st, 2, name);
		bool found = false;
		int s;
		while (!rc && (s = metadb_step(st, err)) == 1) {
			bool same = !strcmp(col(st, 1), rid);
			found |= same;
			if (metadb_int64(st, 0) && same) {
				buf_printf(err, "role %s is built in and locked", rid);
				rc = -1;
			} else if (!same) {
				buf_printf(err, "a role named \"%s\" exists", name);
				rc = -1;
			}
		}
		metadb_finalize(st);
		st = NULL;
		if (!rc && s < 0)
			rc = -2;
		if (!rc && role_id && !found) {
			buf_printf(err, "no role with id %.40s", role_id);
			rc = -1;
		}
	}
	if (!rc)
		rc = run(id->db, NULL, NULL, err,
			 "INSERT INTO roles(id, name, locked, patterns, projects, created_ms)"
			 " VALUES (?, ?, 0, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
			 " name = excluded.name, patterns = excluded.patterns,"
			 " projects = excluded.projects",
			 "tttti", rid, name, pj, prj, now_unix_ms());
	rc = tx_end(id, rc, err);
	free_all(pj, prj);
	if (!rc && out_id)
		copy(out_id, IDENTITY_ID_LEN, rid);
	return rc;
}

int identity_role_delete(struct identity *id, const char *role_id, struct buf *err)
{
	pthread_mutex_lock(&id->mu);
	int rc = begin(id, err);
	struct metadb_stmt *st = NULL;
	if (!rc && metadb_prepare(id->db, "SELECT locked FROM roles WHERE id = ?", &st, err) < 0)
		rc = -2;
	if (!rc) {
		metadb_bind_text(st, 1, role_id);
		int s = metadb_step(st, err);
		if (s < 0) {
			rc = -2;
		} else if (s == 0) {
			buf_printf(err, "no role with id %.40s", role_id);
			rc = -1;
		} else if (metadb_int64(st, 0)) {
			buf_printf(err, "role %.40s is built in and locked", role_id);
			rc = -1;
		}
		metadb_finalize(st);
	}
	if (!rc)
		rc = run(id->db, NULL, NULL, err, "DELETE FROM user_roles WHERE role_id = ?1;", "t", role_id);
	if (!rc)
		rc = run(id->db, NULL, NULL, err, "DELETE FROM roles WHERE id = ?1", "t", role_id);
	rc = tx_end(id, rc, err);
	return rc;
}

static int user_grants_locked(struct identity *id, const char *user_id, struct grants *out,
			      struct buf *err)
{
	struct metadb_stmt *st;
	if (metadb_prepare(id->db, "SELECT r.patterns, r.projects FROM roles r JOIN user_roles ur"
				  " ON ur.role_id = r.id WHERE ur.user_id = ?",
			  &st, err) < 0)
		return -2;
	metadb_bind_text(st, 1, user_id);
	int s;
	while ((s = metadb_step(st, err)) == 1)
		grants_add_json(out, col(st, 0), col(st, 1));
	metadb_finalize(st);
	return s == 0 ? 0 : -2;
}

int identity_user_grants(struct identity *id, const char *user_id, struct grants *out,
			 struct buf *err)
{
	pthread_mutex_lock(&id->mu);
	int rc = user_grants_locked(id, user_id, out, err);
	pthread_mutex_unlock(&id->mu);
	return rc;
}

/* --- service tokens ------------------------------------------------------------- */

static void new_secret(char secret[IDENTITY_TOKEN_LEN])
{
	uint8_t raw[32];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		abort(); /* the CSPRNG failing is not recoverable: no weak token is issued */
	/* "emb_" and 256 bits as 43 base64url characters. */
	struct buf b = { 0 };
	buf_puts(&b, "emb_");
	b64url_encode(raw, sizeof(raw), &b);
	snprintf(secret, IDENTITY_TOKEN_LEN, "%s", b.data);
	buf_free(&b);
}

int identity_token_create(struct identity *id, const char *owner, const char *name,
			  const char *const *scopes, size_t nscopes, const char *const *projects,
			  size_t nprojects, int64_t expires_ms, struct token_info *out,
			  char secret[IDENTITY_TOKEN_LEN], struct buf *err)
{
	if (check_len("token name", name, IDENTITY_MAX_NAME, true, err) < 0)
		return -1;
	if (!nscopes) {
		buf_puts(err, "a token needs at least one scope (a permission pattern)");
		return -1;
	}
	if (expires_ms < 0 || (expires_ms && expires_ms <= now_unix_ms())) {
		buf_puts(err, "expires_at is in the past");
		return -1;
	}
	char *sj = NULL, *pj = NULL;
	if (list_json("scopes", scopes, nscopes, IDENTITY_MAX_PATTERNS, perm_check_pattern, &sj, err) < 0 ||
	    list_json("projects", projects, nprojects, IDENTITY_MAX_PROJECTS, check_project, &pj, err) < 0) {
		free(sj);
		return -1;
	}
	struct token_info t = { 0 };
	uuid_v4(t.id);
	copy(t.owner, sizeof(t.owner), owner);
	copy(t.name, sizeof(t.name), name);
	t.created_ms = now_unix_ms();
	t.expires_ms = expires_ms;
	new_secret(secret);
	char hash[65];
	sha256_hex(secret, hash);
	pthread_mutex_lock(&id->mu);
	int rc = run(id->db, NULL, NULL, err, "INSERT INTO tokens(id, hash, owner, name, scopes, projects,"
					" created_ms, expires_ms) VALUES (?,?,?,?,?,?,?,?)",
		     "ttttttii", t.id, hash, t.owner, t.name, sj, pj, t.created_ms, t.expires_ms);
	pthread_mutex_unlock(&id->mu);
	free_all(sj, pj);
	if (rc)
		secret[0] = 0;
	else if (out)
		*out = t;
	return rc;
}

int identity_token_check(struct identity *id, const char *secret, int64_t now_ms,
			 struct token_info *out, struct grants *scope, struct buf *err)
{
	if (!secret || strlen(secret) >= IDENTITY_TOKEN_LEN + 16) {
		buf_puts(err, "not a token this server issued");
		return 1;
	}
	char hash[65];
	sha256_hex(secret, hash);
	pthread_mutex_lock(&id->mu);
	struct metadb_stmt *st;
	int rc;
	if (metadb_prepare(id->db, "SELECT id, owner, name, scopes, projects, created_ms, expires_ms,"
				  " last_used_ms, revoked_ms FROM tokens WHERE hash = ?",
			  &st, err) < 0) {
		pthread_mutex_unlock(&id->mu);
		return -2;
	}
	metadb_bind_text(st, 1, hash);
	int s = metadb_step(st, err);
	if (s == 0) {
		buf_puts(err, "not a token this server issued");
		rc = 1;
	} else if (s != 1) {
		rc = -2;
	} else if (!metadb_is_null(st, 8)) {
		buf_puts(err, "the token was revoked");
		rc = 1;
	} else if (metadb_int64(st, 6) && metadb_int64(st, 6) <= now_ms) {
		buf_puts(err, "the token expired");
		rc = 1;
	} else {
		copy(out->id, sizeof(out->id), col(st, 0));
		copy(out->owner, sizeof(out->owner), col(st, 1));
		copy(out->name, sizeof(out->name), col(st, 2));
		out->created_ms = metadb_int64(st, 5);
		out->expires_ms = metadb_int64(st, 6);
		out->last_used_ms = metadb_int64(st, 7);
		grants_add_json(scope, col(st, 3), col(st, 4));
		rc = 0;
	}
	metadb_finalize(st);
	if (rc == 0 && now_ms - out->last_used_ms >= LAST_USED_EVERY_MS) {
		struct buf why = { 0 };
		if (run(id->db, NULL, NULL, &why, "UPDATE tokens SET last_used_ms = ? WHERE id = ?", "it", now_ms,
			out->id) < 0)
			log_warn("identity: the last use of token %s was not recorded: %s", out->id, why.data);
		buf_free(&why);
		out->last_used_ms = now_ms;
	}
	pthread_mutex_unlock(&id->mu);
	return rc;
}

int identity_token_revoke(struct identity *id, const char *token_id, struct buf *err)
{
	long n = stamp(id, "UPDATE tokens SET revoked_ms = ?1 WHERE id = ?2 AND revoked_ms IS NULL",
		       token_id, err);
	return n < 0 ? (int)n : n == 0 ? 1 : 0;
}

static json_t *token_row(struct metadb_stmt *st, const void *ctx)
{
	(void)ctx;
	int64_t exp = metadb_int64(st, 6), used = metadb_int64(st, 7);
	return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:I, s:o, s:o}", "id", col(st, 0), "owner",
			 col(st, 1), "name", col(st, 2), "type", "service", "scopes", json_list(col(st, 3)),
			 "project_ids", json_list(col(st, 4)), "created_at",
			 (json_int_t)metadb_int64(st, 5), "expires_at",
			 exp ? json_integer(exp) : json_null(), "last_used_at",
			 used ? json_integer(used) : json_null());
}

int identity_tokens_json(struct identity *id, const char *owner, json_t **out, struct buf *err)
{
	pthread_mutex_lock(&id->mu);
	struct metadb_stmt *st = NULL;
	const char *sql = owner ? "SELECT id, owner, name, scopes, projects, created_ms, expires_ms,"
				  " last_used_ms FROM tokens WHERE revoked_ms IS NULL AND owner = ?"
				  " ORDER BY created_ms, id"
				: "SELECT id, owner, name, scopes, projects, created_ms, expires_ms,"
				  " last_used_ms FROM tokens WHERE revoked_ms IS NULL ORDER BY created_ms, id";
	run(id->db, &st, NULL, err, sql, owner ? "t" : "", owner);
	return rows_json(&id->mu, st, token_row, NULL, out, err);
}

/* --- refresh sessions ------------------------------------------------------------ */

int identity_session_create(struct identity *id, const char *user_id, int64_t expires_ms,
			    char out_id[IDENTITY_ID_LEN], struct buf *err)
{
	uuid_v4(out_id);
	pthread_mutex_lock(&id->mu);
	int rc = run(id->db, NULL, NULL, err, "INSERT INTO sessions(id, user_id, created_ms, expires_ms)"
					" VALUES (?, ?, ?, ?)",
		     "ttii", out_id, user_id, now_unix_ms(), expires_ms);
	/* Ended and expired sessions are kept a day for the audit trail (a
	 * failure here only leaves them longer). */
	struct buf ignored = { 0 };
	if (!rc)
		run(id->db, NULL, NULL, &ignored, "DELETE FROM sessions WHERE expires_ms < ?1 OR ended_ms < ?1", "i",
		    now_unix_ms() - 86400000);
	buf_free(&ignored);
	pthread_mutex_unlock(&id->mu);
	return rc;
}

int identity_session_check(struct identity *id, const char *session_id, int64_t now_ms,
			   char user_id[IDENTITY_ID_LEN], struct buf *err)
{
	pthread_mutex_lock(&id->mu);
	struct metadb_stmt *st;
	int rc;
	if (metadb_prepare(id->db, "SELECT user_id, expires_ms, ended_ms FROM sessions WHERE id = ?",
			  &st, err) < 0) {
		pthread_mutex_unlock(&id->mu);
		return -2;
	}
	metadb_bind_text(st, 1, session_id);
	int s = metadb_step(st, err);
	if (s == 1 && metadb_is_null(st, 2) &&
	    metadb_int64(st, 1) > now_ms) {
		copy(user_id, IDENTITY_ID_LEN, col(st, 0));
		rc = 0;
	} else if (s == 1 || s == 0) {
		buf_puts(err, "the session ended");
		rc = 1;
	} else {
		rc = -2;
	}
	metadb_finalize(st);
	pthread_mutex_unlock(&id->mu);
	return rc;
}

int identity_session_end(struct identity *id, const char *session_id, struct buf *err)
{
	long n = stamp(id, "UPDATE sessions SET ended_ms = ?1 WHERE id = ?2 AND ended_ms IS NULL",
		       session_id, err);
	return n < 0 ? (int)n : 0;
}

int identity_user_sessions_end(struct identity *id, const char *user_id, size_t *ended,
			       struct buf *err)
{
	long n = stamp(id, "UPDATE sessions SET ended_ms = ?1 WHERE user_id = ?2 AND ended_ms IS NULL",
		       user_id, err);
	*ended = n > 0 ? (size_t)n : 0;
	return n < 0 ? (int)n : 0;
}

/* --- audit ------------------------------------------------------------------------- */

void identity_audit(struct identity *id, const char *actor, const char *origin,
		    const char *action, const char *target, const char *outcome, const char *detail)
{
	struct buf err = { 0 }, more = { 0 };
	int64_t now = now_unix_ms();
	pthread_mutex_lock(&id->amu);
	if (outcome && strcmp(outcome, "ok") != 0) {
		if (now / 1000 != id->window_s) {
			id->window_s = now / 1000;
			id->window_n = 0;
		}
		if (++id->window_n > AUDIT_REFUSALS_PER_S) {
			id->suppressed++;
			pthread_mutex_unlock(&id->amu);
			return;
		}
		if (id->suppressed) {
			buf_printf(&more, "%s%s%llu refusals before this one were not written one by one "
					  "(more than %d a second)", detail ? detail : "",
				   detail && *detail ? "; " : "", (unsigned long long)id->suppressed,
				   AUDIT_REFUSALS_PER_S);
			detail = more.data;
			id->suppressed = 0;
		}
	}
	struct metadb_stmt *st;
	if (metadb_prepare(id->adb, "INSERT INTO audit(ts_ms, actor, origin, action, target, outcome,"
				   " detail) VALUES (?,?,?,?,?,?,?)",
			  &st, &err) == 0) {
		metadb_bind_int64(st, 1, now);
		const char *v[] = { actor, origin, action, target, outcome, detail };
		for (int i = 0; i < 6; i++)
			metadb_bind_textn(st, i + 2, v[i] ? v[i] : "", utf8_cut(v[i] ? v[i] : "", 1024));
		if (metadb_step(st, &err) < 0 && metadb_unavailable(id->adb))
			buf_puts(&err, " (the database is out of reach)");
		metadb_finalize(st);
	}
	/* Old entries go once an hour (the first entry of each hour). */
	if (!err.len && now / 3600000 != id->pruned_hour) {
		struct buf why = { 0 };
		id->pruned_hour = now / 3600000;
		if (run(id->adb, NULL, NULL, &why, "DELETE FROM audit WHERE ts_ms < ?", "i",
			(int64_t)(now - AUDIT_KEEP_MS)) < 0)
			log_warn("identity: old audit entries were not pruned: %s", why.data);
		buf_free(&why);
	}
	pthread_mutex_unlock(&id->amu);
	if (err.len)
		log_error("identity: an audit entry (%s %s) was not written: %s", action, target, err.data);
	buf_free(&err);
	buf_free(&more);
}

static json_t *audit_row(struct metadb_stmt *st, const void *ctx)
{
	(void)ctx;
	return json_pack("{s:I, s:I, s:s, s:s, s:s, s:s, s:s, s:s}", "id",
			 (json_int_t)metadb_int64(st, 0), "time",
			 (json_int_t)metadb_int64(st, 1), "actor", col(st, 2), "origin",
			 col(st, 3), "action", col(st, 4), "target", col(st, 5), "outcome", col(st, 6),
			 "detail", col(st, 7));
}

int identity_audit_json(struct identity *id, int64_t before_id, unsigned limit, json_t **out,
			struct buf *err)
{
	if (!limit || limit > 1000) {
		buf_puts(err, "limit must be 1 to 1000");
		return -1;
	}
	pthread_mutex_lock(&id->amu);
	struct metadb_stmt *st = NULL;
	run(id->adb, &st, NULL, err, "SELECT id, ts_ms, actor, origin, action, target, outcome, detail"
				     " FROM audit WHERE (?1 = 0 OR id < ?1) ORDER BY id DESC LIMIT ?2",
	    "ii", before_id, (int64_t)limit);
	return rows_json(&id->amu, st, audit_row, NULL, out, err);
}
