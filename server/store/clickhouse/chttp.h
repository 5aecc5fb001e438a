/* chttp.h - ClickHouse's HTTP interface (libcurl) for the fleet store.
 *
 * One struct ch_conn names one or more servers (the comma-separated
 * --clickhouse-url: every shard's server when a cluster is named, so that
 * `ember-server migrate` can create the local tables on each without
 * ClickHouse's distributed DDL, which needs ZooKeeper), a database, and
 * optional credentials sent as HTTP basic auth (what ClickHouse 18.16
 * takes; never in the URL, where logs would keep them).
 *
 * Every call answers one of three codes so that the ingest path can map
 * them: CH_OK; CH_UNAVAILABLE when ClickHouse is down, slow or busy (no
 * connection, a timeout, HTTP 503, or one of ClickHouse's network,
 * timeout, memory and too-many-queries exceptions): the caller answers
 * 503 with Retry-After and the agent retries; CH_FAILED for anything else
 * (a rejected query, bad credentials, a certificate that does not verify),
 * which retrying will not fix.
 * Answers are capped at max_response bytes (a larger one is CH_FAILED).
 * ch_query_ext sends external tables with a query (see there).
 * A conn is used by one thread at a time (it owns one curl handle).
 */
#ifndef EMBER_STORE_CH_HTTP_H
#define EMBER_STORE_CH_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

enum ch_rc {
	CH_OK = 0,
	CH_UNAVAILABLE = -1,
	CH_FAILED = -2,
};

#define CH_MAX_SERVERS 64
#define CH_MAX_URL 512

struct ch_conn_opts {
	const char *urls;          /* "http://h1:8123[,http://h2:8123...]" */
	const char *database;      /* NULL: "ember" */
	const char *user;          /* NULL: ClickHouse's default user */
	const char *password_file; /* NULL: no password; else its first line */
	const char *ca_file;       /* https: the PEM CA bundle that signs the servers'
				    * certificates; NULL: the system's CAs */
	long timeout_ms;           /* whole request; 0: 30 s */
	size_t max_response;       /* 0: 16 MiB */
};

struct ch_conn;

/* NULL with a message in err for a bad URL list, database name, an
 * unreadable password file or CA file. With https URLs the servers'
 * certificates are verified (against ca_file, else the system's CAs) and
 * their names checked: there is no option to skip it. */
struct ch_conn *ch_conn_new(const struct ch_conn_opts *o, struct buf *err);
void ch_conn_free(struct ch_conn *c);
int ch_conn_servers(const struct ch_conn *c);
const char *ch_conn_database(const struct ch_conn *c);

/* Idle connections over one set of options (copied), for any number of
 * threads: ch_pool_get gives an idle one when max_response is 0 (the
 * default answer size: inserts, short queries), else a new one with that
 * cap (a view's large answers); ch_pool_put keeps it idle when keep is
 * set (a connection of the default size, its last call complete), else
 * frees it. NULL from ch_pool_get with a message when a new connection
 * cannot be made (ch_conn_new). */
struct ch_pool;
struct ch_pool *ch_pool_new(const struct ch_conn_opts *o);
void ch_pool_free(struct ch_pool *p);
struct ch_conn *ch_pool_get(struct ch_pool *p, size_t max_response, struct buf *err);
void ch_pool_put(struct ch_pool *p, struct ch_conn *c, bool keep);

/* Runs sql on server i (0 ≤ i < ch_conn_servers), with body (may be NULL)
 * as the request body after it (an INSERT's data; gzip-compressed on the
 * wire when gzip is set), database as the default database when use_db
 * is set. settings ("name=value&..." URL parameters, may be NULL) are
 * ClickHouse settings for this query. The answer's body is appended to out
 * (may be NULL); on an error, err gets ClickHouse's message. */
enum ch_rc ch_query(struct ch_conn *c, int server, const char *sql, const void *body, size_t len,
		    int gzip, int use_db, const char *settings, struct buf *out, struct buf *err);

/* An external table sent beside a query (ClickHouse's "external data": a
 * multipart/form-data body with one file part per table, its columns and
 * format as NAME_structure and NAME_format URL parameters). The query names
 * it as a table: `x IN name`, or `x GLOBAL IN name` over a Distributed
 * table, which ships it to the shards (ClickHouse 18.16 takes both). It is
 * data, never parsed as SQL. */
#define CH_MAX_EXT_TABLES 8
#define CH_MAX_EXT_STRUCTURE 256 /* bytes of structure */
#define CH_MAX_EXT_BYTES (256u << 20)
#define CH_MAX_EXT_QUERY 4096    /* bytes of sql: it goes in the URL */

struct ch_ext_table {
	const char *name;      /* letters, digits and _ (at most 64, not first a digit) */
	const char *structure; /* its columns: "h UInt64" */
	const char *format;    /* of data: "RowBinary", "TSV" (letters, digits and _) */
	const void *data;      /* may be NULL when len is 0: an empty table */
	size_t len;            /* at most CH_MAX_EXT_BYTES */
};

/* As ch_query without a body: sql (at most CH_MAX_EXT_QUERY bytes, sent in
 * the URL) with next (1 ≤ next ≤ CH_MAX_EXT_TABLES) external tables ext[]
 * as the request's body. A table that breaks the bounds above, or two of
 * one name, is CH_FAILED with nothing sent. */
enum ch_rc ch_query_ext(struct ch_conn *c, int server, const char *sql,
			const struct ch_ext_table *ext, size_t next, int use_db, const char *settings,
			struct buf *out, struct buf *err);

/* The classification of one answer (exposed for the unit test): curl's
 * result (0 = CURLE_OK), the HTTP status, and the body ClickHouse sent. */
enum ch_rc ch_classify(int curl_code, long http_status, const char *body);

/* gzip (RFC 1952) of in[0..n) appended to out; 0 or -1. */
int ch_gzip(const void *in, size_t n, struct buf *out);

#endif
