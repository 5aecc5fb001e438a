/* sqldb.c - see sqldb.h. */
#include "sqldb.h"

#include <string.h>

/* The database's file name without its directory, for messages. */
static const char *db_name(sqlite3 *db)
{
	const char *path = db ? sqlite3_db_filename(db, "main") : NULL;
	if (!path || !*path)
		return "sqlite";
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

int sqldb_error(sqlite3 *db, struct buf *err)
{
	buf_printf(err, "%s: %s", db_name(db), db ? sqlite3_errmsg(db) : "out of memory");
	return -1;
}

int sqldb_open(const char *path, sqlite3 **db, struct buf *err)
{
	if (sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
			    NULL) != SQLITE_OK) {
		buf_printf(err, "cannot open %s: %s", path, *db ? sqlite3_errmsg(*db) : "out of memory");
		return -1;
	}
	sqlite3_busy_timeout(*db, 10000);
	return sqldb_exec(*db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL", err);
}

int sqldb_exec(sqlite3 *db, const char *sql, struct buf *err)
{
	char *msg = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		buf_printf(err, "%s: %s", db_name(db), msg ? msg : "error");
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

int sqldb_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, struct buf *err)
{
	if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
		return sqldb_error(db, err);
	return 0;
}
