/* projects.c - see projects.h. */
#include "projects.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "jsonw.h"
#include "log.h"
#include "metadb.h"
#include "util.h"

struct project {
	char id[37];
	char *name;
	int64_t created_ms;
};

struct projects {
	pthread_mutex_t mu; /* the cache and the connection */
	struct metadb *db;
	struct project *list;
	size_t count, cap;
};

static const char *const schema_sql =
	"CREATE TABLE IF NOT EXISTS projects ("
	" id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_ms {int} NOT NULL)";

static struct project *cached_by(struct projects *p, const char *id, const char *name)
{
	for (size_t i = 0; i < p->count; i++)
		if ((id && !strcmp(p->list[i].id, id)) || (name && !strcmp(p->list[i].name, name)))
			return &p->list[i];
	return NULL;
}

static void add_cached(struct projects *p, const char *id, const char *name, int64_t created)
{
	if (cached_by(p, id, NULL))
		return;
	xgrow((void **)&p->list, &p->cap, p->count + 1, sizeof(*p->list));
	struct project *pr = &p->list[p->count++];
	snprintf(pr->id, sizeof(pr->id), "%s", id);
	pr->name = xstrdup(name);
	pr->created_ms = created;
}

static int by_creation(const void *a, const void *b)
{
	const struct project *x = a, *y = b;
	if (x->created_ms != y->created_ms)
		return x->created_ms < y->created_ms ? -1 : 1;
	return strcmp(x->id, y->id);
}

static int insert(struct projects *p, const char *id, const char *name, int64_t created,
		  struct buf *err)
{
	struct metadb_stmt *st;
	if (metadb_prepare(p->db, "INSERT INTO projects(id, name, created_ms) VALUES (?, ?, ?)"
				  " ON CONFLICT DO NOTHING", &st, err) < 0)
		return -1;
	metadb_bind_text(st, 1, id);
	metadb_bind_text(st, 2, name);
	metadb_bind_int64(st, 3, created);
	int rc = metadb_step(st, err);
	metadb_finalize(st);
	return rc < 0 ? -1 : 0;
}

/* Reads the rows where column = value (column NULL: all) into the cache,
 * keeping the cache's order (the database's by creation). */
static int load(struct projects *p, const char *column, const char *value, struct buf *err)
{
	struct buf sql = { 0 };
	buf_puts(&sql, "SELECT id, name, created_ms FROM projects");
	if (column)
		buf_printf(&sql, " WHERE %s = ?", column);
	buf_puts(&sql, " ORDER BY created_ms, id");
	struct metadb_stmt *st;
	int rc = metadb_prepare(p->db, sql.data, &st, err);
	buf_free(&sql);
	if (rc < 0)
		return -1;
	if (column)
		metadb_bind_text(st, 1, value);
	while ((rc = metadb_step(st, err)) == 1) {
		const char *id = metadb_text(st, 0);
		if (uuid_valid(id))
			add_cached(p, id, metadb_text(st, 1), metadb_int64(st, 2));
	}
	metadb_finalize(st);
	qsort(p->list, p->count, sizeof(*p->list), by_creation);
	return rc < 0 ? -1 : 0;
}

/* Whether s holds only well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF: RFC 3629). */
static bool utf8_ok(const unsigned char *s)
{
	while (*s) {
		unsigned c = *s, n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2
					  : (c & 0xF8) == 0xF0 ? 3 : 4;
		if (n == 4 || (n == 1 && c < 0xC2) || (n == 3 && c > 0xF4))
			return false;
		for (unsigned i = 1; i <= n; i++)
			if ((s[i] & 0xC0) != 0x80)
				return false;
		if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
		    (c == 0xF4 && s[1] > 0x8F))
			return false;
		s += n + 1;
	}
	return true;
}

int projects_name_check(const char *name, struct buf *err)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > 128) {
		buf_puts(err, "project: expected a name of 1 to 128 bytes");
		return -1;
	}
	if (!utf8_ok((const unsigned char *)name)) {
		buf_puts(err, "project: the name is not valid UTF-8");
		return -1;
	}
	return 0;
}

int projects_open_url(const char *url, const char *password, struct projects **out,
		      struct buf *err)
{
	struct projects *p = xcalloc(1, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	if (metadb_open(url, password, &p->db, err) < 0 ||
	    metadb_migrate(p->db, "projects", 1, schema_sql, err) < 0 ||
	    insert(p, DEFAULT_PROJECT_ID, DEFAULT_PROJECT_NAME, now_unix_ms(), err) < 0 ||
	    load(p, NULL, NULL, err) < 0) {
		projects_close(p);
		return -1;
	}
	*out = p;
	return 0;
}

int projects_open(const char *dir, struct projects **out, struct buf *err)
{
	struct buf path = { 0 };
	buf_printf(&path, "%s/meta.db", dir);
	int rc = projects_open_url(path.data, NULL, out, err);
	buf_free(&path);
	return rc;
}

void projects_close(struct projects *p)
{
	if (!p)
		return;
	metadb_close(p->db);
	for (size_t i = 0; i < p->count; i++)
		free(p->list[i].name);
	free(p->list);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int projects_by_name(struct projects *p, const char *name, bool create, char id[37],
		     struct buf *err)
{
	pthread_mutex_lock(&p->mu);
	struct project *pr = cached_by(p, NULL, name);
	/* Another replica may have made it. */
	int rc = pr ? 0 : load(p, "name", name, err);
	if (!rc && !pr)
		pr = cached_by(p, NULL, name);
	if (!rc && !pr && create) {
		char nid[37];
		uuid_v4(nid);
		/* A replica that inserts the same name at the same time wins or
		 * loses on the unique name; either way the row read back is the
		 * one every replica uses. */
		rc = insert(p, nid, name, now_unix_ms(), err);
		if (!rc)
			rc = load(p, "name", name, err);
		if (!rc && (pr = cached_by(p, NULL, name)) && !strcmp(pr->id, nid))
			log_info("created project \"%s\" (%s)", name, nid);
	}
	if (!rc && pr)
		memcpy(id, pr->id, 37);
	pthread_mutex_unlock(&p->mu);
	return rc < 0 ? PROJECTS_FAILED : pr ? PROJECTS_FOUND : PROJECTS_ABSENT;
}

bool projects_exists(struct projects *p, const char *id)
{
	if (!id || !uuid_valid(id))
		return false;
	char low[37];
	for (int i = 0; i < 37; i++)
		low[i] = (char)tolower((unsigned char)id[i]);
	pthread_mutex_lock(&p->mu);
	bool found = cached_by(p, low, NULL) != NULL;
	if (!found) {
		struct buf err = { 0 };
		if (load(p, "id", low, &err) < 0)
			log_warn("projects: cannot look up %s: %s", low, err.data);
		found = cached_by(p, low, NULL) != NULL;
		buf_free(&err);
	}
	pthread_mutex_unlock(&p->mu);
	return found;
}

void projects_list_json(struct projects *p, bool (*keep)(const char *id, void *ctx), void *ctx,
			struct jsonw *w)
{
	pthread_mutex_lock(&p->mu);
	/* On PostgreSQL, projects other replicas created since; on a failure
	 * the list is the ones known here. An SQLite file has one server (the
	 * data dir's lock), whose cache holds every project. */
	struct buf err = { 0 };
	if (metadb_dialect(p->db) == METADB_POSTGRES && load(p, NULL, NULL, &err) < 0)
		log_warn("projects: cannot read the list: %s", err.data);
	buf_free(&err);
	jsonw_begin_array(w);
	for (size_t i = 0; i < p->count; i++) {
		if (keep && !keep(p->list[i].id, ctx))
			continue;
		jsonw_begin_object(w);
		jsonw_kv_str(w, "id", p->list[i].id);
		jsonw_kv_str(w, "name", p->list[i].name);
		jsonw_kv_i64(w, "created_ms", p->list[i].created_ms);
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	pthread_mutex_unlock(&p->mu);
}
