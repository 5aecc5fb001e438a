/* auth_int.h - what only server/auth/'s files share: the open auth
 * state (authz.c makes it, auth_api.c's handlers read it). */
#ifndef EMBER_SERVER_AUTH_INT_H
#define EMBER_SERVER_AUTH_INT_H

#include "authz.h"
#include "jwt.h"

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
};

/* Password checks at once; more sign-ins are answered 503 (auth_api.c).
 * Sign-ins run on the HTTP threads (four): two at most, so two stay free
 * for everything else. */
#define AUTH_MAX_LOGINS 2

#endif
