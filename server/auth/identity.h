/* identity.h - users, roles, service tokens, refresh sessions and the
 * audit log, kept in the metadata database (metadb.h): SQLite
 * DATA_DIR/identity.db by default, or PostgreSQL (--metadata
 * postgres://...), which any number of replicas share. Nothing is cached
 * in the process: every check reads the database, so a change made
 * through one replica holds on every other at its next request.
 *
 * The model is the reference's RBAC: a user holds roles; a role holds
 * permission patterns (perm.h) and, when project-scoped, the projects it
 * applies to (no projects: every project). Four built-in roles are created
 * and kept locked: System Admin (the fixed id
 * 00000000-0000-0000-0000-000000000001, "**:*"), System Editor, System
 * Viewer ("**:read") and Default Project Viewer ("project:read" in the
 * default project), which every new user gets.
 *
 * Service tokens are random ("emb_" and 43 base64url characters, 256 bits)
 * and shown once: only their SHA-256 is stored. A token holds scopes
 * (patterns) and optionally projects; it grants a permission in a project
 * only where its scopes and projects allow it AND its owner holds that
 * permission there now, so a token never outlives or outgrows its owner's
 * roles. Revocation and expiry take effect on the next request: every
 * check reads the store (one indexed SELECT, see docs/performance.md).
 *
 * Several processes may open the same database (servers, and `ember
 * identity`): SQLite's locking and WAL or PostgreSQL's transactions keep
 * them consistent, and a server sees a change on its next request.
 *
 * Errors: -1 with a message in err (a caller's mistake: "unknown role",
 * "email already in use" ...), -2 for a storage failure (the database
 * out of reach included: callers answer 503). Every function is
 * thread-safe (one serialised connection). Every text from a caller is
 * length-checked (IDENTITY_MAX_*). Times are Unix milliseconds. */
#ifndef EMBER_SERVER_AUTH_IDENTITY_H
#define EMBER_SERVER_AUTH_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"

#define IDENTITY_ID_LEN 37 /* a UUID and its NUL */
#define IDENTITY_MAX_EMAIL 254
#define IDENTITY_MAX_NAME 128
#define IDENTITY_MAX_PATTERNS 64
#define IDENTITY_MAX_PROJECTS 256
#define IDENTITY_TOKEN_LEN 48 /* "emb_" + 43 + NUL */

#define ROLE_SYSTEM_ADMIN "00000000-0000-0000-0000-000000000001"
#define ROLE_SYSTEM_EDITOR "00000000-0000-0000-0000-000000000002"
#define ROLE_SYSTEM_VIEWER "00000000-0000-0000-0000-000000000003"
#define ROLE_DEFAULT_PROJECT_VIEWER "00000000-0000-0000-0000-000000000004"

struct identity;

/* What a principal holds: patterns, each for a set of projects (none:
 * every project). Owned by whoever filled it; grants_free releases. */
struct grant {
	char *pattern;
	char **projects;
	size_t nprojects;
};
struct grants {
	struct grant *v;
	size_t n;
};
void grants_free(struct grants *g);
/* True when g grants permission in project (NULL: a permission outside
 * any project, which only grants without a project list give). */
bool grants_allow(const struct grants *g, const char *permission, const char *project);

/* DATA_DIR/identity.db. */
int identity_open(const char *data_dir, struct identity **out, struct buf *err);
/* A metadata URL (metadb.h: a path, or postgres://... shared by every
 * replica); password for PostgreSQL when the URL has none (NULL: none). */
int identity_open_url(const char *url, const char *password, struct identity **out,
		      struct buf *err);
/* The session signing key pair kept in the store (PostgreSQL: one pair
 * for every replica): the stored pair, or, when there is none, the pair
 * given (new_priv/new_pub, PEM) stored and returned; whichever replica
 * stores first wins and every other reads its pair. *priv and *pub are
 * the caller's to free. */
int identity_jwt_keys(struct identity *id, const char *new_priv, const char *new_pub, char **priv,
		      char **pub, struct buf *err);
void identity_close(struct identity *id);

/* --- users ------------------------------------------------------------ */
struct user_info {
	char id[IDENTITY_ID_LEN];
	char email[IDENTITY_MAX_EMAIL + 1];
	char given_name[IDENTITY_MAX_NAME + 1], family_name[IDENTITY_MAX_NAME + 1];
	int64_t created_ms, updated_ms;
};
/* Creates a user (password may be NULL: an OIDC user, or one who cannot
 * log in locally yet) with the Default Project Viewer role. */
int identity_user_create(struct identity *id, const char *email, const char *password,
			 const char *given, const char *family, struct user_info *out,
			 struct buf *err);
/* 0 found, 1 absent. */
int identity_user_get(struct identity *id, const char *user_id, struct user_info *out,
		      struct buf *err);
int identity_user_by_email(struct identity *id, const char *email, struct user_info *out,
			   struct buf *err);
int identity_user_set_password(struct identity *id, const char *user_id, const char *password,
			       struct buf *err);
/* Checks a local login; 0 with *out on success, 1 wrong email or
 * password (the same time either way). */
int identity_login(struct identity *id, const char *email, const char *password,
		   struct user_info *out, struct buf *err);
/* The users matching query (substring of the email, NULL: all), page
 * (0-based) of page_size, as a JSON array of user objects (with "roles":
 * [names] when with_roles); *total gets the count of all matches. */
int identity_users_json(struct identity *id, const char *query, unsigned page,
			unsigned page_size, bool with_roles, json_t **out, size_t *total,
			struct buf *err);

/* --- roles ------------------------------------------------------------ */
/* Replaces the user's roles with the named ones, atomically: an unknown
 * name -> -1 "roles not found: a, b", nothing changed. n 0 revokes all. */
int identity_roles_set(struct identity *id, const char *user_id, const char *const *names,
		       size_t n, struct buf *err);
/* Roles as a JSON array [{"id","name","is_locked","users","patterns":[..],
 * "project_ids":[..]}], optionally only the user's / only these names. */
int identity_roles_json(struct identity *id, const char *user_id, const char *const *names,
			size_t nnames, json_t **out, struct buf *err);
/* Creates (role_id NULL) or updates a custom role; locked ones refuse. */
int identity_role_put(struct identity *id, const char *role_id, const char *name,
		      const char *const *patterns, size_t npatterns, const char *const *projects,
		      size_t nprojects, char out_id[IDENTITY_ID_LEN], struct buf *err);
int identity_role_delete(struct identity *id, const char *role_id, struct buf *err);
/* The grants of a user's roles now. */
int identity_user_grants(struct identity *id, const char *user_id, struct grants *out,
			 struct buf *err);

/* --- service tokens --------------------------------------------------- */
struct token_info {
	char id[IDENTITY_ID_LEN];
	char owner[IDENTITY_ID_LEN]; /* the creating user */
	char name[IDENTITY_MAX_NAME + 1];
	int64_t created_ms, expires_ms, last_used_ms; /* expires 0: never */
};
/* Creates a token for owner with scopes (patterns) and projects (none:
 * every project the owner may use); the secret goes to secret, once. */
int identity_token_create(struct identity *id, const char *owner, const char *name,
			  const char *const *scopes, size_t nscopes, const char *const *projects,
			  size_t nprojects, int64_t expires_ms, struct token_info *out,
			  char secret[IDENTITY_TOKEN_LEN], struct buf *err);
/* Resolves a presented secret: 0 with *out and the token's own grants in
 * *scope (and the last-used time updated), 1 unknown, revoked or expired
 * (the reason in err). */
int identity_token_check(struct identity *id, const char *secret, int64_t now_ms,
			 struct token_info *out, struct grants *scope, struct buf *err);
/* Revokes; 1 when there is no such live token. */
int identity_token_revoke(struct identity *id, const char *token_id, struct buf *err);
/* Tokens (owner's only, or all when owner is NULL) as a JSON array. */
int identity_tokens_json(struct identity *id, const char *owner, json_t **out, struct buf *err);

/* --- refresh sessions ------------------------------------------------- */
/* A login's refresh session: its id becomes the refresh JWT's jti. */
int identity_session_create(struct identity *id, const char *user_id, int64_t expires_ms,
			    char out_id[IDENTITY_ID_LEN], struct buf *err);
/* 0 live (user_id filled), 1 unknown, ended or expired. */
int identity_session_check(struct identity *id, const char *session_id, int64_t now_ms,
			   char user_id[IDENTITY_ID_LEN], struct buf *err);
int identity_session_end(struct identity *id, const char *session_id, struct buf *err);
/* Ends every live session of a user (a password reset: no refresh token
 * issued before it works after it); *ended gets how many. */
int identity_user_sessions_end(struct identity *id, const char *user_id, size_t *ended,
			       struct buf *err);

/* --- audit ------------------------------------------------------------ */
/* Appends one entry: actor (a user id, "token:<id>", "anonymous" or
 * "cli"), origin ("ui", "api", "cli"), action ("auth.login",
 * "permission.denied", "token.create" ...), target, outcome ("ok",
 * "denied", "failed") and a detail. Never fails the caller: a storage
 * error is logged. */
void identity_audit(struct identity *id, const char *actor, const char *origin,
		    const char *action, const char *target, const char *outcome, const char *detail);
/* Entries newest first, at most limit, older than before_id (0: newest),
 * as a JSON array. */
int identity_audit_json(struct identity *id, int64_t before_id, unsigned limit, json_t **out,
			struct buf *err);

#endif
