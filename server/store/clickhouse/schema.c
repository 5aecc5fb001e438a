/* schema.c - the fleet store's DDL and migrate: see schema.h. */
#include "schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct table {
	int since; /* the schema version that added it */
	const char *name;
	const char *columns;
	const char *engine;   /* everything after ENGINE = */
	const char *shard_by; /* the Distributed sharding key */
};

/* Each table with the version that added it: a migrate from version N
 * creates the tables added after N (a later version's ALTER TABLE ...
 * ADD COLUMN statements would go beside them, in 18.16's dialect). */
static const struct table tables[] = {
	{ 1, "samples",
	  "project String, kind String, ts DateTime, stack UInt64, labels UInt64, hz UInt32, "
	  "value UInt64, batch UInt64",
	  "MergeTree() PARTITION BY toDate(ts) ORDER BY (project, kind, ts, stack, labels) "
	  "SETTINGS index_granularity = 8192",
	  "batch" },
	{ 1, "stacks", "hash UInt64, frames Array(UInt64)", "ReplacingMergeTree() ORDER BY hash", "hash" },
	{ 1, "frames",
	  "hash UInt64, type UInt8, address UInt64, function UInt64, binary UInt64, build_id UInt64, "
	  "file UInt64",
	  "ReplacingMergeTree() ORDER BY hash", "hash" },
	{ 1, "strings", "hash UInt64, value String", "ReplacingMergeTree() ORDER BY hash", "hash" },
	{ 1, "label_sets", "hash UInt64, keys Array(String), values Array(String)",
	  "ReplacingMergeTree() ORDER BY hash", "hash" },
	{ 1, "batches",
	  "batch UInt64, project String, agent String, sequence UInt64, rows UInt64, "
	  "ts_min DateTime, ts_max DateTime, inserted DateTime",
	  "ReplacingMergeTree() PARTITION BY toYYYYMM(inserted) ORDER BY batch", "batch" },
	/* Version 2: each host's logical CPUs (absolute CPU mode), the most
	 * seen kept when parts merge. */
	{ 2, "hosts", "name String, cpus UInt32, seen DateTime",
	  "ReplacingMergeTree(cpus) ORDER BY name", "cityHash64(name)" },
	/* Version 2: executables and libraries (file id, name, build id,
	 * executable segments as offset/vaddr/size triples), which frames name
	 * by hash (frames.file, below), as the embedded store's frames do. */
	{ 2, "files", "hash UInt64, id String, name String, build_id String, segs Array(UInt64)",
	  "ReplacingMergeTree() ORDER BY hash", "hash" },
	/* Version 3: the GPU timeline's spans (chspans.h), partitioned by the
	 * hour (Unix seconds / 3600) the server stored them in, so that
	 * retention drops whole hours. */
	{ 3, "gpu_spans",
	  "project String, hour UInt32, start_ns Int64, end_ns Int64, device UInt32, stream UInt32, "
	  "kind UInt8, origin UInt64",
	  "MergeTree() PARTITION BY hour ORDER BY (project, end_ns) SETTINGS index_granularity = 8192",
	  "rand()" },
	{ 3, "gpu_span_origins", "hour UInt32, hash UInt64, data String",
	  "ReplacingMergeTree() PARTITION BY hour ORDER BY hash", "hash" },
};

/* Columns added to a table that existed before: a migrate from a version
 * below `since` (that already has the table) adds them. 18.16 has no ADD
 * COLUMN IF NOT EXISTS: the version row, written after the statements,
 * is what keeps them from running twice. */
static const struct column_add {
	int since;
	const char *table, *column;
} column_adds[] = {
	{ 2, "frames", "file UInt64" },
};

static bool clustered(const struct ch_schema *s)
{
	return s->cluster && *s->cluster;
}

static void stmt_end(struct buf *out, int *n)
{
	buf_putc(out, '\0');
	(*n)++;
}

int ch_schema_statements(const struct ch_schema *s, int from, struct buf *out)
{
	int n = 0;
	if (from >= CH_SCHEMA_VERSION)
		return 0;
	if (from <= 0) {
		buf_printf(out, "CREATE DATABASE IF NOT EXISTS %s", s->database);
		stmt_end(out, &n);
	}
	const size_t nt = sizeof(tables) / sizeof(tables[0]);
	for (size_t i = 0; i < nt; i++) {
		if (tables[i].since <= from)
			continue;
		buf_printf(out, "CREATE TABLE IF NOT EXISTS %s.%s%s (%s) ENGINE = %s", s->database,
			   tables[i].name, clustered(s) ? "_local" : "", tables[i].columns, tables[i].engine);
		stmt_end(out, &n);
	}
	/* columns of tables the server has (from >= 1) */
	for (size_t i = 0; from >= 1 && i < sizeof(column_adds) / sizeof(column_adds[0]); i++) {
		if (column_adds[i].since <= from)
			continue;
		buf_printf(out, "ALTER TABLE %s.%s%s ADD COLUMN %s", s->database, column_adds[i].table,
			   clustered(s) ? "_local" : "", column_adds[i].column);
		stmt_end(out, &n);
		if (clustered(s)) {
			buf_printf(out, "ALTER TABLE %s.%s ADD COLUMN %s", s->database,
				   column_adds[i].table, column_adds[i].column);
			stmt_end(out, &n);
		}
	}
	if (clustered(s)) {
		for (size_t i = 0; i < nt; i++) {
			if (tables[i].since <= from)
				continue;
			buf_printf(out,
				   "CREATE TABLE IF NOT EXISTS %s.%s AS %s.%s_local "
				   "ENGINE = Distributed(%s, %s, %s_local, %s)",
				   s->database, tables[i].name, s->database, tables[i].name, s->cluster,
				   s->database, tables[i].name, tables[i].shard_by);
			stmt_end(out, &n);
		}
	}
	return n;
}

static const char *samples_table(const struct ch_schema *s)
{
	return clustered(s) ? "samples_local" : "samples";
}

int ch_schema_query_texts(const struct ch_schema *s, struct buf *out)
{
	int n = 0;
	const char *d = s->database;
	buf_printf(out, "CREATE TABLE IF NOT EXISTS %s.schema_version (version UInt32, applied DateTime) "
			"ENGINE = TinyLog", d);
	stmt_end(out, &n);
	buf_printf(out, "SELECT max(version) FROM %s.schema_version", d);
	stmt_end(out, &n);
	buf_printf(out, "INSERT INTO %s.schema_version (version, applied) VALUES (%d, now())", d,
		   CH_SCHEMA_VERSION);
	stmt_end(out, &n);
	buf_puts(out, "SELECT version()");
	stmt_end(out, &n);
	buf_printf(out, "SELECT batch FROM %s.batches WHERE batch IN (1, 2)", d);
	stmt_end(out, &n);
	buf_printf(out,
		   "SELECT DISTINCT batch FROM %s.samples WHERE (project = 'p' AND ts >= toDateTime(0) "
		   "AND ts <= toDateTime(1) AND batch = 1) OR (project = 'q' AND ts >= toDateTime(0) "
		   "AND ts <= toDateTime(1) AND batch = 2)", d);
	stmt_end(out, &n);
	buf_printf(out,
		   "SELECT partition, sum(rows) FROM system.parts WHERE database = '%s' AND "
		   "table = '%s' AND active GROUP BY partition ORDER BY partition", d, samples_table(s));
	stmt_end(out, &n);
	ch_schema_drop_partition(s, "2026-01-02", out);
	stmt_end(out, &n);
	/* the GPU spans' (chspans.c) */
	const char *local = clustered(s) ? "_local" : "";
	buf_printf(out, "SELECT DISTINCT table, partition FROM system.parts WHERE database = '%s' AND "
			"table IN ('gpu_spans%s', 'gpu_span_origins%s') AND active", d, local, local);
	stmt_end(out, &n);
	buf_printf(out, "ALTER TABLE %s.gpu_spans%s DROP PARTITION 491234", d, local);
	stmt_end(out, &n);
	buf_printf(out, "SELECT start_ns, end_ns, device, stream, kind, origin FROM %s.gpu_spans WHERE "
			"project = 'p' AND hour >= 491233 AND end_ns > 0 AND start_ns < 9000000000000000000 "
			"AND end_ns >= 1 ORDER BY end_ns DESC, start_ns DESC LIMIT 200001", d);
	stmt_end(out, &n);
	buf_printf(out, "SELECT hash, any(data) FROM %s.gpu_span_origins WHERE hour >= 491232 AND "
			"hash IN (1, 18446744073709551615) GROUP BY hash", d);
	stmt_end(out, &n);
	return n;
}

int ch_schema_drop_partition(const struct ch_schema *s, const char *day, struct buf *out)
{
	int y, m, dd;
	char tail;
	if (strlen(day) != 10 || sscanf(day, "%4d-%2d-%2d%c", &y, &m, &dd, &tail) != 3 ||
	    day[4] != '-' || day[7] != '-' || m < 1 || m > 12 || dd < 1 || dd > 31)
		return -1;
	buf_printf(out, "ALTER TABLE %s.%s DROP PARTITION '%04d-%02d-%02d'", s->database,
		   samples_table(s), y, m, dd);
	return 0;
}

void ch_schema_ttl(const struct ch_schema *s, int days, struct buf *out)
{
	buf_printf(out, "ALTER TABLE %s.%s MODIFY TTL ts + INTERVAL %d DAY", s->database,
		   samples_table(s), days);
}

bool ch_version_has_ttl(const char *version)
{
	char *end;
	long major = strtol(version, &end, 10);
	long minor = *end == '.' ? strtol(end + 1, NULL, 10) : 0;
	return major > 19 || (major == 19 && minor >= 6);
}

static enum ch_rc run(struct ch_conn *c, int i, const char *sql, struct buf *out, struct buf *err)
{
	enum ch_rc rc = ch_query(c, i, sql, NULL, 0, 0, 0, NULL, out, err);
	if (rc != CH_OK)
		buf_printf(err, " (in: %.200s)", sql);
	return rc;
}

enum ch_rc ch_migrate(struct ch_conn *c, const char *cluster, struct buf *log, struct buf *err)
{
	struct ch_schema s = { .database = ch_conn_database(c), .cluster = cluster };
	enum ch_rc rc = CH_OK;
	for (int i = 0; i < ch_conn_servers(c) && rc == CH_OK; i++) {
		struct buf sql = { 0 }, ans = { 0 }, stmts = { 0 };
		buf_printf(&sql, "CREATE DATABASE IF NOT EXISTS %s", s.database);
		rc = run(c, i, sql.data, NULL, err);
		if (rc == CH_OK) {
			buf_reset(&sql);
			buf_printf(&sql, "CREATE TABLE IF NOT EXISTS %s.schema_version (version UInt32, "
					 "applied DateTime) ENGINE = TinyLog", s.database);
			rc = run(c, i, sql.data, NULL, err);
		}
		if (rc == CH_OK) {
			buf_reset(&sql);
			buf_printf(&sql, "SELECT max(version) FROM %s.schema_version", s.database);
			rc = run(c, i, sql.data, &ans, err);
		}
		int from = ans.data ? atoi(ans.data) : 0;
		if (rc == CH_OK && from > CH_SCHEMA_VERSION) {
			buf_printf(err, "server %d: schema version %d is newer than this ember-server's %d",
				   i + 1, from, CH_SCHEMA_VERSION);
			rc = CH_FAILED;
		}
		if (rc == CH_OK && from < CH_SCHEMA_VERSION) {
			int n = ch_schema_statements(&s, from, &stmts);
			const char *p = stmts.data;
			for (int k = 0; k < n && rc == CH_OK; k++, p += strlen(p) + 1)
				rc = run(c, i, p, NULL, err);
			if (rc == CH_OK) {
				buf_reset(&sql);
				buf_printf(&sql, "INSERT INTO %s.schema_version (version, applied) VALUES (%d, now())",
					   s.database, CH_SCHEMA_VERSION);
				rc = run(c, i, sql.data, NULL, err);
			}
			if (rc == CH_OK && log)
				buf_printf(log, "server %d: schema %d -> %d (%d statements)\n", i + 1, from,
					   CH_SCHEMA_VERSION, n);
		} else if (rc == CH_OK && log) {
			buf_printf(log, "server %d: schema at version %d, nothing to do\n", i + 1, from);
		}
		buf_free(&sql);
		buf_free(&ans);
		buf_free(&stmts);
	}
	return rc;
}

enum ch_rc ch_retention(struct ch_conn *c, const char *cluster, int64_t cutoff_s, int *dropped,
			struct buf *err)
{
	struct ch_schema s = { .database = ch_conn_database(c), .cluster = cluster };
	/* the first day that stays: the one cutoff_s falls in (a day that
	 * began before cutoff_s but ends after it is not wholly before it) */
	if (cutoff_s < 0)
		cutoff_s = 0;
	time_t keep = (time_t)(cutoff_s / 86400 * 86400);
	struct tm tm;
	char keep_day[16];
	gmtime_r(&keep, &tm);
	strftime(keep_day, sizeof(keep_day), "%Y-%m-%d", &tm);
	enum ch_rc rc = CH_OK;
	for (int i = 0; i < ch_conn_servers(c) && rc == CH_OK; i++) {
		struct buf sql = { 0 }, ans = { 0 };
		buf_printf(&sql,
			   "SELECT DISTINCT partition FROM system.parts WHERE database = '%s' AND "
			   "table = '%s' AND active ORDER BY partition", s.database, samples_table(&s));
		rc = run(c, i, sql.data, &ans, err);
		for (char *line = ans.data, *next; rc == CH_OK && line && *line; line = next) {
			next = strchr(line, '\n');
			if (next)
				*next++ = 0;
			/* partitions print as YYYY-MM-DD; anything else is not ours to drop */
			if (strlen(line) != 10 || strcmp(line, keep_day) >= 0)
				continue;
			buf_reset(&sql);
			if (ch_schema_drop_partition(&s, line, &sql) < 0)
				continue;
			rc = run(c, i, sql.data, NULL, err);
			if (rc == CH_OK)
				(*dropped)++;
		}
		buf_free(&sql);
		buf_free(&ans);
	}
	return rc;
}
