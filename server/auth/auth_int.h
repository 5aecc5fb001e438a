/* auth_int.h - what only server/auth/'s files share: the open auth
 * state (authz.c makes it, auth_api.c's handlers read it). */
#ifndef EMBER_SERVER_AUTH_INT_H
#define EMBER_SERVER_AUTH_INT_H

#include "authz.h"
#include "jwt.h"
#include "oidc.h"

struct http_resp;

#define JWT_AUDIENCE "ember"

struct auth {
	struct auth_settings s;
	struct identity *id;
	struct jwt_keys *keys;
	char **seeded; /* --ingest-tokens */
	size_t nseeded;
	char *basic_user, *basic_password;
	char issuer[256];
	char admin_id[IDENTITY_ID_LEN];
	unsigned logins_running; /* password checks in progress (atomic) */
	struct oidc *oidc; /* --auth oidc */
};

/* Password checks at once; more sign-ins are answered 503 (auth_api.c).
 * Sign-ins run on the HTTP threads (four): two at most, so two stay free
 * for everything else. */
#define AUTH_MAX_LOGINS 2

/* auth_api.c: a Set-Cookie on resp with the --cookie-* attributes. */
void auth_set_cookie(struct auth *a, struct http_resp *resp, const char *name, const char *value,
		     const char *path, long max_age, bool http_only);
/* auth_api.c: signs u in: a new refresh session, and the ember_access,
 * ember_refresh and ember_csrf cookies on resp (local and OIDC sign-in
 * alike). 0, or the identity store's -1/-2 with err set. */
int auth_sign_in(struct auth *a, const struct user_info *u, struct http_resp *resp, struct buf *err);

#endif
