/* projects.h - the project catalog, kept in the metadata database
 * (metadb.h): SQLite DATA_DIR/meta.db by default, or PostgreSQL
 * (--metadata postgres://...), shared by every replica.
 *
 * A project has a UUID and a unique name. The project "default" with the
 * all-zero UUID always exists; agents name their project with -project
 * and an unknown name is created on first use. Lookups are served from an
 * in-memory copy; a name or id the copy lacks is looked up in the
 * database (another replica may have created it), and the list is read
 * from the database each time, so replicas agree on the next request.
 * Projects are never deleted, so a cached project stays true. Creation
 * is race-free across replicas: the name is unique in the database and
 * the loser of a race reads the winner's id. Thread-safe.
 */
#ifndef EMBER_SERVER_PROJECTS_H
#define EMBER_SERVER_PROJECTS_H

#include <stdbool.h>

#include "buf.h"
#include "jsonw.h"

#define DEFAULT_PROJECT_ID "00000000-0000-0000-0000-000000000000"
#define DEFAULT_PROJECT_NAME "default"

struct projects;

/* Whether name may name a project: 1 to 128 bytes of valid UTF-8 (what
 * PostgreSQL's text holds; the same rule on SQLite). On failure -1 with
 * "project: ..." in err, for a 400. */
int projects_name_check(const char *name, struct buf *err);
/* DIR/meta.db. */
int projects_open(const char *dir, struct projects **out, struct buf *err);
/* A metadata URL (metadb_open: a path or postgres://...); password for
 * PostgreSQL when the URL has none (NULL: none). */
int projects_open_url(const char *url, const char *password, struct projects **out,
		      struct buf *err);
void projects_close(struct projects *p);
/* What projects_by_name returns. */
enum projects_rc {
	PROJECTS_FOUND = 0,   /* id set (the project existed or was created) */
	PROJECTS_ABSENT = 1,  /* no such project, and create was not set */
	PROJECTS_FAILED = -1, /* creating it failed (err set) */
};

/* The id of the project called name, created when create is set.
 * Returns an enum projects_rc. */
int projects_by_name(struct projects *p, const char *name, bool create, char id[37],
		     struct buf *err);
bool projects_exists(struct projects *p, const char *id);
/* Writes [{"id":..,"name":..,"created_ms":..}, ...] as one value at w's
 * position: the projects keep (NULL: all) says true for. */
void projects_list_json(struct projects *p, bool (*keep)(const char *id, void *ctx), void *ctx,
			struct jsonw *w);

#endif
