/* metadb_pg.c - metadb.h on PostgreSQL through libpq.
 *
 * A statement keeps its text and its parameters; its first step runs it
 * (PQexecParams: parameters sent apart from the text, never quoted into
 * it) and later steps walk the result's rows. Results come as text; a
 * BYTEA column is unescaped when read as a blob. A connection found broken
 * is reset before the next statement, and a statement that failed because
 * the connection broke is sent once more on a new connection when no
 * transaction was open (what was open is gone with the connection: the
 * caller's transaction fails and it answers 503). */
#include "metadb_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "util.h"

#define PG_INT8OID 20
#define PG_BYTEAOID 17
#define PG_FLOAT8OID 701
#define PG_MAX_PARAMS 64

struct pg_stmt {
	char *sql;
	int n;
	char *val[PG_MAX_PARAMS];
	int len[PG_MAX_PARAMS], fmt[PG_MAX_PARAMS];
	unsigned type[PG_MAX_PARAMS];
	bool bad_index;
	PGresult *res;
	int row; /* the current row; -1 before the first step */
	unsigned char *blob; /* the last unescaped BYTEA (PQfreemem) */
};

static void quiet(void *arg, const char *message)
{
	/* CREATE TABLE IF NOT EXISTS and the like send notices: not errors,
	 * and not for the server's log. */
	(void)arg;
	(void)message;
}

static void message(struct metadb *db, const char *what, struct buf *err)
{
	const char *m = what ? what : PQerrorMessage(db->conn);
	size_t n = strlen(m);
	while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
		n--;
	buf_printf(err, "%s: %.*s", db->name, (int)n, m);
}

/* Whether the connection is usable, resetting a broken one first. */
static bool ready(struct metadb *db)
{
	if (PQstatus(db->conn) == CONNECTION_OK)
		return true;
	if (db->in_tx)
		return false; /* the transaction died with the connection */
	PQreset(db->conn);
	return PQstatus(db->conn) == CONNECTION_OK;
}

static int unreachable(struct metadb *db, struct buf *err)
{
	db->unavailable = true;
	message(db, NULL, err);
	return -1;
}

static int pg_open(struct metadb *db, const char *url, const char *password, struct buf *err)
{
	const char *keys[5] = { "dbname", "connect_timeout", "application_name", NULL, NULL };
	const char *vals[5] = { url, "5", "ember", NULL, NULL };
	if (password && *password) {
		keys[3] = "password";
		vals[3] = password;
	}
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c) {
		buf_puts(err, "postgres: out of memory");
		return -1;
	}
	db->conn = c;
	PQsetNoticeProcessor(c, quiet, NULL);
	/* The name never holds the URL: it may carry a password. */
	snprintf(db->name, sizeof(db->name), "postgres %s@%s:%s/%s", PQuser(c) ? PQuser(c) : "?",
		 PQhost(c) ? PQhost(c) : "?", PQport(c) ? PQport(c) : "?", PQdb(c) ? PQdb(c) : "?");
	if (PQstatus(c) != CONNECTION_OK)
		return unreachable(db, err);
	return 0;
}

static void pg_close(struct metadb *db)
{
	PQfinish(db->conn);
	db->conn = NULL;
}

static bool broken(struct metadb *db)
{
	return PQstatus(db->conn) != CONNECTION_OK;
}

/* After a command failed on attempt (0 or 1): 0 to send it again (the
 * connection broke on the first attempt, outside a transaction: ready()
 * reconnects), else -1 with err set. */
static int failed(struct metadb *db, int attempt, struct buf *err)
{
	if (broken(db)) {
		if (attempt == 0 && !db->in_tx)
			return 0;
		return unreachable(db, err);
	}
	db->unavailable = false;
	message(db, NULL, err);
	return -1;
}

static int pg_exec(struct metadb *db, const char *sql, struct buf *err)
{
	for (int attempt = 0;; attempt++) {
		if (!ready(db))
			return unreachable(db, err);
		PGresult *r = PQexec(db->conn, sql);
		ExecStatusType s = PQresultStatus(r);
		if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) {
			PQclear(r);
			return 0;
		}
		PQclear(r);
		if (failed(db, attempt, err) < 0)
			return -1;
	}
}

static int pg_prepare(struct metadb_stmt *st, const char *sql, int nparams, struct buf *err)
{
	if (nparams > PG_MAX_PARAMS) {
		buf_printf(err, "%s: more than %d parameters", st->db->name, PG_MAX_PARAMS);
		return -1;
	}
	struct pg_stmt *p = xcalloc(1, sizeof(*p));
	p->sql = xstrdup(sql);
	p->n = nparams;
	p->row = -1;
	st->impl = p;
	return 0;
}

static void clear_result(struct pg_stmt *p)
{
	PQclear(p->res);
	p->res = NULL;
	p->row = -1;
	if (p->blob)
		PQfreemem(p->blob);
	p->blob = NULL;
}

static void pg_bind(struct metadb_stmt *st, int i, enum metadb_type t, const void *v, size_t n,
		    int64_t iv)
{
	struct pg_stmt *p = st->impl;
	if (i < 1 || i > p->n) {
		p->bad_index = true;
		return;
	}
	i--;
	free(p->val[i]);
	p->val[i] = NULL;
	p->len[i] = 0;
	p->fmt[i] = 0;
	p->type[i] = 0;
	switch (t) {
	case MT_NULL:
		break;
	case MT_TEXT:
		p->val[i] = xmalloc(n + 1);
		memcpy(p->val[i], v, n);
		p->val[i][n] = 0;
		p->len[i] = (int)n;
		break;
	case MT_INT:
		p->val[i] = xmalloc(24);
		snprintf(p->val[i], 24, "%lld", (long long)iv);
		p->type[i] = PG_INT8OID;
		break;
	case MT_BLOB:
		p->val[i] = xmalloc(n + 1);
		if (n)
			memcpy(p->val[i], v, n);
		p->len[i] = (int)n;
		p->fmt[i] = 1;
		p->type[i] = PG_BYTEAOID;
		break;
	case MT_REAL:
		p->val[i] = xmalloc(32);
		snprintf(p->val[i], 32, "%.17g", *(const double *)v);
		p->type[i] = PG_FLOAT8OID;
		break;
	}
}

static int pg_step(struct metadb_stmt *st, struct buf *err)
{
	struct pg_stmt *p = st->impl;
	struct metadb *db = st->db;
	if (p->res) {
		if (++p->row < PQntuples(p->res))
			return 1;
		return 0;
	}
	if (p->bad_index) {
		buf_printf(err, "%s: a parameter bound beyond the statement's %d", db->name, p->n);
		return -1;
	}
	for (int attempt = 0;; attempt++) {
		if (!ready(db))
			return unreachable(db, err);
		PGresult *r = PQexecParams(db->conn, p->sql, p->n, p->type,
					   (const char *const *)p->val, p->len, p->fmt, 0);
		ExecStatusType s = PQresultStatus(r);
		if (s == PGRES_TUPLES_OK) {
			p->res = r;
			p->row = 0;
			st->changes = 0;
			return PQntuples(r) > 0 ? 1 : 0;
		}
		if (s == PGRES_COMMAND_OK) {
			const char *n = PQcmdTuples(r);
			st->changes = n && *n ? atol(n) : 0;
			p->res = r; /* no rows: later steps say done */
			p->row = 0;
			return 0;
		}
		PQclear(r);
		if (failed(db, attempt, err) < 0)
			return -1;
	}
}

static void pg_reset(struct metadb_stmt *st)
{
	clear_result(st->impl);
}

static void pg_finalize(struct metadb_stmt *st)
{
	struct pg_stmt *p = st->impl;
	clear_result(p);
	for (int i = 0; i < p->n; i++)
		free(p->val[i]);
	free_all(p->sql, p);
}

static bool in_row(struct pg_stmt *p, int col)
{
	return p->res && p->row >= 0 && p->row < PQntuples(p->res) && col >= 0 &&
	       col < PQnfields(p->res);
}

static int pg_columns(struct metadb_stmt *st)
{
	struct pg_stmt *p = st->impl;
	return p->res ? PQnfields(p->res) : 0;
}

static bool pg_is_null(struct metadb_stmt *st, int col)
{
	struct pg_stmt *p = st->impl;
	return !in_row(p, col) || PQgetisnull(p->res, p->row, col);
}

static const char *pg_text(struct metadb_stmt *st, int col)
{
	struct pg_stmt *p = st->impl;
	return in_row(p, col) ? PQgetvalue(p->res, p->row, col) : "";
}

static bool is_bytea(struct pg_stmt *p, int col)
{
	return PQftype(p->res, col) == PG_BYTEAOID;
}

static const void *pg_blob(struct metadb_stmt *st, int col)
{
	struct pg_stmt *p = st->impl;
	if (!in_row(p, col))
		return NULL;
	if (!is_bytea(p, col))
		return PQgetvalue(p->res, p->row, col);
	if (p->blob)
		PQfreemem(p->blob);
	size_t n = 0;
	p->blob = PQunescapeBytea((const unsigned char *)PQgetvalue(p->res, p->row, col), &n);
	return p->blob;
}

static size_t pg_bytes(struct metadb_stmt *st, int col)
{
	struct pg_stmt *p = st->impl;
	if (!in_row(p, col))
		return 0;
	if (!is_bytea(p, col))
		return (size_t)PQgetlength(p->res, p->row, col);
	/* The unescaped length: "\x" and two hex digits a byte. */
	size_t n = (size_t)PQgetlength(p->res, p->row, col);
	return n >= 2 ? (n - 2) / 2 : 0;
}

static int64_t pgm_int64(struct metadb_stmt *st, int col)
{
	struct pg_stmt *p = st->impl;
	if (!in_row(p, col) || PQgetisnull(p->res, p->row, col))
		return 0;
	return strtoll(PQgetvalue(p->res, p->row, col), NULL, 10);
}

static double pgm_real(struct metadb_stmt *st, int col)
{
	struct pg_stmt *p = st->impl;
	if (!in_row(p, col) || PQgetisnull(p->res, p->row, col))
		return 0;
	return strtod(PQgetvalue(p->res, p->row, col), NULL);
}

const struct metadb_ops metadb_pg_ops = {
	.open = pg_open,
	.close = pg_close,
	.exec = pg_exec,
	.prepare = pg_prepare,
	.bind = pg_bind,
	.step = pg_step,
	.reset = pg_reset,
	.finalize = pg_finalize,
	.columns = pg_columns,
	.is_null = pg_is_null,
	.text = pg_text,
	.bytes = pg_bytes,
	.int64 = pgm_int64,
	.real = pgm_real,
	.blob = pg_blob,
};
