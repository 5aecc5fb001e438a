/* projects.c - see projects.h. */
#include "projects.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "jsonw.h"
#include "log.h"
#include "sqldb.h"
#include "util.h"

struct project {
	char id[37];
	char *name;
	int64_t created_ms;
};

struct projects {
	pthread_mutex_t mu;
	sqlite3 *db;
	struct project *list;
	size_t count, cap;
};

static void add_cached(struct projects *p, const char *id, const char *name, int64_t created)
{
	xgrow((void **)&p->list, &p->cap, p->count + 1, sizeof(*p->list));
	struct project *pr = &p->list[p->count++];
	snprintf(pr->id, sizeof(pr->id), "%s", id);
	pr->name = xstrdup(name);
	pr->created_ms = created;
}

static int insert(struct projects *p, const char *id, const char *name, int64_t created,
		  struct buf *err)
{
	sqlite3_stmt *st;
	if (sqldb_prepare(p->db, "INSERT OR IGNORE INTO projects(id, name, created_ms) VALUES (?, ?, ?)",
			  &st, err) < 0)
		return -1;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, created);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return sqldb_error(p->db, err);
	return 0;
}

int projects_open(const char *dir, struct projects **out, struct buf *err)
{
	struct projects *p = xcalloc(1, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
	struct buf path = { 0 };
	buf_printf(&path, "%s/meta.db", dir);
	int rc = sqldb_open(path.data, &p->db, err);
	buf_free(&path);
	if (rc < 0 || sqldb_exec(p->db, "CREATE TABLE IF NOT EXISTS projects ("
			" id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_ms INTEGER NOT NULL)",
		 err) < 0 ||
	    insert(p, DEFAULT_PROJECT_ID, DEFAULT_PROJECT_NAME, now_unix_ms(), err) < 0) {
		projects_close(p);
		return -1;
	}
	sqlite3_stmt *st;
	if (sqldb_prepare(p->db, "SELECT id, name, created_ms FROM projects ORDER BY created_ms", &st,
			  err) < 0) {
		projects_close(p);
		return -1;
	}
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(st, 0);
		const char *name = (const char *)sqlite3_column_text(st, 1);
		if (id && name && uuid_valid(id))
			add_cached(p, id, name, sqlite3_column_int64(st, 2));
	}
	sqlite3_finalize(st);
	*out = p;
	return 0;
}

void projects_close(struct projects *p)
{
	if (!p)
		return;
	if (p->db)
		sqlite3_close(p->db);
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
	for (size_t i = 0; i < p->count; i++)
		if (strcmp(p->list[i].name, name) == 0) {
			memcpy(id, p->list[i].id, 37);
			pthread_mutex_unlock(&p->mu);
			return PROJECTS_FOUND;
		}
	if (!create) {
		pthread_mutex_unlock(&p->mu);
		return PROJECTS_ABSENT;
	}
	char nid[37];
	uuid_v4(nid);
	int64_t now = now_unix_ms();
	if (insert(p, nid, name, now, err) < 0) {
		pthread_mutex_unlock(&p->mu);
		return PROJECTS_FAILED;
	}
	add_cached(p, nid, name, now);
	log_info("created project \"%s\" (%s)", name, nid);
	memcpy(id, nid, 37);
	pthread_mutex_unlock(&p->mu);
	return PROJECTS_FOUND;
}

bool projects_exists(struct projects *p, const char *id)
{
	pthread_mutex_lock(&p->mu);
	bool found = false;
	for (size_t i = 0; i < p->count && !found; i++)
		found = strcasecmp(p->list[i].id, id) == 0;
	pthread_mutex_unlock(&p->mu);
	return found;
}

void projects_list_json(struct projects *p, bool (*keep)(const char *id, void *ctx), void *ctx,
			struct jsonw *w)
{
	pthread_mutex_lock(&p->mu);
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
