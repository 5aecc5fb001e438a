/* authz.h - who a request comes from, and whether it may do what its
 * route does.
 *
 * Every route in the route table (server/http/routes.c) names the permission it
 * needs (perm.h) and where the permission applies: in the project of the
 * path's {project_id} (ROUTE_PROJECT), outside any project (ROUTE_GLOBAL),
 * or in a project the handler learns from the body (ROUTE_BODY: ingest,
 * which checks with principal_can once it knows the project). Two names are
 * not permissions: AUTH_PUBLIC (no credential needed: health, the UI's
 * files, login) and AUTH_SIGNED_IN (any valid credential: "who am I").
 *
 * auth_request runs on a request's headers, before its body is read
 * (http.c), and finds the principal:
 * - "Authorization: Bearer emb_..." a service token (identity.h), or one
 *   of --ingest-tokens (pre-seeded: ingest scopes in every project);
 * - "Authorization: Basic ..." the one --basic-user credential (--auth basic);
 * - the ember_access cookie: an access JWT (jwt.h) of a signed-in user;
 *   state-changing requests so authenticated must also carry the
 *   X-Ember-CSRF header equal to the ember_csrf cookie (double submit);
 * - nothing: anonymous.
 * A presented credential that is not valid is refused (401 "Invalid token:
 * ...") even where anonymous would pass. With --auth none anonymous may do
 * everything (today's open server) except ingest while --ingest-tokens is
 * set; with local, oidc or basic anonymous may only use AUTH_PUBLIC
 * routes. A principal without the permission gets 403 "Insufficient
 * permissions: <permission> [in project <id>]", audited as
 * permission.denied. Both answers are JSON {"error": ...}.
 *
 * Ownership: auth_request allocates the principal; principal_free frees it
 * (http.c does, when the request ends). principal_can on NULL is false. */
#ifndef EMBER_SERVER_AUTH_AUTHZ_H
#define EMBER_SERVER_AUTH_AUTHZ_H

#include <stdbool.h>
#include <stdint.h>

#include "identity.h"

#define AUTH_PUBLIC "public"
#define AUTH_SIGNED_IN "signed-in"

enum route_scope { ROUTE_GLOBAL, ROUTE_PROJECT, ROUTE_BODY };

enum auth_mode { AUTH_NONE, AUTH_LOCAL, AUTH_OIDC, AUTH_BASIC };

enum principal_kind {
	PRINCIPAL_OPEN,      /* --auth none, or an in-process caller: everything */
	PRINCIPAL_ANONYMOUS, /* no credential */
	PRINCIPAL_USER,      /* a signed-in user (cookie) or --basic-user */
	PRINCIPAL_TOKEN,     /* a service token */
	PRINCIPAL_SEEDED,    /* one of --ingest-tokens */
};

struct principal {
	enum principal_kind kind;
	char user_id[IDENTITY_ID_LEN];  /* the user, or a token's owner */
	char token_id[IDENTITY_ID_LEN]; /* PRINCIPAL_TOKEN */
	char actor[64];                 /* for the audit log */
	const char *origin;             /* "ui" (cookie) or "api" */
	bool owner_is_system;           /* a token made by the CLI or an open server */
	struct grants grants;           /* the user's (or the token owner's) */
	struct grants scope;            /* a token's own scopes and projects */
};

/* An in-process caller's principal (tests, the server's own requests). */
extern const struct principal principal_open;

bool principal_can(const struct principal *p, const char *permission, const char *project);
/* True when p may use permission in every project (its grants carry no
 * project list): what creating a project on first use needs. */
bool principal_everywhere(const struct principal *p, const char *permission);
void principal_free(struct principal *p);

struct auth_settings {
	enum auth_mode mode;
	const char *data_dir;
	/* The metadata database (metadb.h): NULL or "" for DATA_DIR/identity.db,
	 * else a postgres://... URL (with metadata_password when its URL has
	 * none), where the session signing keys are kept too unless
	 * jwt_private_key names files. */
	const char *metadata_url, *metadata_password;
	const char *issuer;        /* JWT iss; default "ember" */
	const char *jwt_private_key, *jwt_public_key; /* PEM paths; default DATA_DIR/jwt-*.pem */
	const char *admin_email, *admin_password_file;
	const char *basic_user, *basic_password_file;
	const char *ingest_tokens; /* "a,b" or "@FILE" */
	const char *cookie_same_site; /* "Strict", "Lax" (default) or "None" */
	bool cookie_secure;        /* Secure cookies (set with TLS) */
	bool public_metrics;       /* GET /metrics without a credential */
	int64_t access_ttl_s;      /* default 300 */
	int64_t refresh_ttl_s;     /* default one year */
	/* --auth oidc (oidc.h): --oidc-issuer, --oidc-client-id,
	 * --oidc-client-secret-file, --oidc-redirect-uri, --oidc-scopes,
	 * --oidc-extra-params. */
	const char *oidc_issuer, *oidc_client_id, *oidc_client_secret_file, *oidc_redirect_uri;
	const char *oidc_scopes, *oidc_extra_params;
};

struct auth;
struct route;
struct http_req;
struct http_resp;
struct server;

/* Opens the identity store, loads (or makes) the signing keys, seeds the
 * ingest tokens and bootstraps the admin user (idempotent: an existing
 * admin keeps its password; a missing one is created with the password
 * file's, or "admin" with a warning repeated at every start). */
int auth_open(const struct auth_settings *s, struct auth **out, struct buf *err);
void auth_close(struct auth *a);
enum auth_mode auth_mode(const struct auth *a);
struct identity *auth_identity(struct auth *a);
const char *auth_mode_name(enum auth_mode m);
int auth_mode_parse(const char *s, enum auth_mode *out);

/* The http.c hook: fills *who, or answers resp (401/403) and returns false. */
bool auth_request(struct server *srv, const struct route *r, const struct http_req *req,
		  struct http_resp *resp, struct principal **who);

/* Audits a denial and answers 403 for permission in project (NULL: none). */
void auth_deny(struct server *srv, const struct principal *p, const char *permission,
	       const char *project, struct http_resp *resp);

#endif
