/* metadb_sqlite.c - metadb.h on SQLite (through sqldb.h's way of opening). */
#include "metadb_int.h"

#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "sqldb.h"

static int fail(struct metadb *db, struct buf *err)
{
	db->unavailable = false; /* a local file is always within reach */
	buf_printf(err, "%s: %s", db->name, sqlite3_errmsg(db->conn));
	return -1;
}

static int s_open(struct metadb *db, const char *path, const char *password, struct buf *err)
{
	(void)password;
	const char *slash = strrchr(path, '/');
	snprintf(db->name, sizeof(db->name), "%s", slash ? slash + 1 : path);
	sqlite3 *c = NULL;
	int rc = sqldb_open(path, &c, err);
	db->conn = c;
	return rc;
}

static void s_close(struct metadb *db)
{
	sqlite3_close(db->conn);
	db->conn = NULL;
}

static int s_exec(struct metadb *db, const char *sql, struct buf *err)
{
	char *msg = NULL;
	if (sqlite3_exec(db->conn, sql, NULL, NULL, &msg) != SQLITE_OK) {
		buf_printf(err, "%s: %s", db->name, msg ? msg : "error");
		sqlite3_free(msg);
		db->unavailable = false;
		return -1;
	}
	return 0;
}

static int s_prepare(struct metadb_stmt *st, const char *sql, int nparams, struct buf *err)
{
	(void)nparams;
	sqlite3_stmt *s = NULL;
	if (sqlite3_prepare_v2(st->db->conn, sql, -1, &s, NULL) != SQLITE_OK)
		return fail(st->db, err);
	st->impl = s;
	return 0;
}

static void s_bind(struct metadb_stmt *st, int i, enum metadb_type t, const void *p, size_t n,
		   int64_t v)
{
	sqlite3_stmt *s = st->impl;
	switch (t) {
	case MT_NULL:
		sqlite3_bind_null(s, i);
		break;
	case MT_TEXT:
		sqlite3_bind_text64(s, i, p, n, SQLITE_TRANSIENT, SQLITE_UTF8);
		break;
	case MT_INT:
		sqlite3_bind_int64(s, i, v);
		break;
	case MT_BLOB:
		sqlite3_bind_blob64(s, i, n ? p : "", n, SQLITE_TRANSIENT);
		break;
	case MT_REAL:
		sqlite3_bind_double(s, i, *(const double *)p);
		break;
	}
}

static int s_step(struct metadb_stmt *st, struct buf *err)
{
	int rc = sqlite3_step(st->impl);
	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE) {
		st->changes = (long)sqlite3_changes(st->db->conn);
		return 0;
	}
	return fail(st->db, err);
}

static void s_reset(struct metadb_stmt *st)
{
	sqlite3_reset(st->impl);
}

static void s_finalize(struct metadb_stmt *st)
{
	sqlite3_finalize(st->impl);
}

static int s_columns(struct metadb_stmt *st)
{
	return sqlite3_column_count(st->impl);
}

static bool s_is_null(struct metadb_stmt *st, int col)
{
	return sqlite3_column_type(st->impl, col) == SQLITE_NULL;
}

static const char *s_text(struct metadb_stmt *st, int col)
{
	return (const char *)sqlite3_column_text(st->impl, col);
}

static size_t s_bytes(struct metadb_stmt *st, int col)
{
	return (size_t)sqlite3_column_bytes(st->impl, col);
}

static int64_t s_int64(struct metadb_stmt *st, int col)
{
	return sqlite3_column_int64(st->impl, col);
}

static double s_real(struct metadb_stmt *st, int col)
{
	return sqlite3_column_double(st->impl, col);
}

static const void *s_blob(struct metadb_stmt *st, int col)
{
	return sqlite3_column_blob(st->impl, col);
}

const struct metadb_ops metadb_sqlite_ops = {
	.open = s_open,
	.close = s_close,
	.exec = s_exec,
	.prepare = s_prepare,
	.bind = s_bind,
	.step = s_step,
	.reset = s_reset,
	.finalize = s_finalize,
	.columns = s_columns,
	.is_null = s_is_null,
	.text = s_text,
	.bytes = s_bytes,
	.int64 = s_int64,
	.real = s_real,
	.blob = s_blob,
};
