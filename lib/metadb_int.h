/* metadb_int.h - what metadb.c shares with its two backends
 * (metadb_sqlite.c, metadb_pg.c); not for other modules. */
#ifndef EMBER_LIB_METADB_INT_H
#define EMBER_LIB_METADB_INT_H

#include "metadb.h"

enum metadb_type { MT_NULL, MT_TEXT, MT_INT, MT_BLOB, MT_REAL }; /* MT_REAL: p points to the double */

struct metadb_ops {
	int (*open)(struct metadb *db, const char *url, const char *password, struct buf *err);
	void (*close)(struct metadb *db);
	int (*exec)(struct metadb *db, const char *sql, struct buf *err);
	/* sql already in the backend's placeholder form; nparams its count. */
	int (*prepare)(struct metadb_stmt *st, const char *sql, int nparams, struct buf *err);
	void (*bind)(struct metadb_stmt *st, int i, enum metadb_type t, const void *p, size_t n,
		     int64_t v);
	int (*step)(struct metadb_stmt *st, struct buf *err);
	void (*reset)(struct metadb_stmt *st);
	void (*finalize)(struct metadb_stmt *st);
	int (*columns)(struct metadb_stmt *st);
	bool (*is_null)(struct metadb_stmt *st, int col);
	const char *(*text)(struct metadb_stmt *st, int col);
	size_t (*bytes)(struct metadb_stmt *st, int col);
	int64_t (*int64)(struct metadb_stmt *st, int col);
	double (*real)(struct metadb_stmt *st, int col);
	const void *(*blob)(struct metadb_stmt *st, int col);
};

struct metadb {
	const struct metadb_ops *ops;
	enum metadb_dialect dialect;
	char name[160];
	bool unavailable; /* the last failure was the database out of reach */
	bool in_tx;       /* between metadb_begin and commit/rollback */
	void *conn;       /* sqlite3 * or PGconn * */
};

struct metadb_stmt {
	struct metadb *db;
	long changes;
	void *impl; /* the backend's */
};

extern const struct metadb_ops metadb_sqlite_ops, metadb_pg_ops;

#endif
