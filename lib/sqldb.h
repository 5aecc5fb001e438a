/* sqldb.h - the few SQLite calls every ember database makes, with errors
 * as messages.
 *
 * ember keeps host metrics (metrics.db) and recommendation states
 * (recs.db) in SQLite, and its metadata (meta.db, identity.db) there by
 * default through metadb.h, which opens SQLite files with sqldb_open. Each database is opened the same way: created
 * when absent, serialised connections (SQLITE_OPEN_FULLMUTEX), a 10 s
 * busy timeout, write-ahead logging and synchronous=FULL, so a committed
 * transaction survives a crash and readers never block the writer.
 *
 * Errors: each function returns 0, or -1 with "<file>: <SQLite message>"
 * appended to err. Ownership: the caller closes the connection
 * (sqlite3_close) and finalizes statements, also after a failed open.
 */
#ifndef EMBER_SERVER_SQLDB_H
#define EMBER_SERVER_SQLDB_H

#include <sqlite3.h>

#include "buf.h"

int sqldb_open(const char *path, sqlite3 **db, struct buf *err);
int sqldb_exec(sqlite3 *db, const char *sql, struct buf *err);
int sqldb_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, struct buf *err);
/* Appends "<file>: <the connection's last error>" to err; returns -1. */
int sqldb_error(sqlite3 *db, struct buf *err);

#endif
