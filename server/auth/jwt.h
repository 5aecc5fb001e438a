/* jwt.h - the session tokens ember issues: JSON Web Tokens signed with
 * Ed25519 (JWS alg "EdDSA", RFC 8037), compact serialisation.
 *
 * Keys are PEM files: a PKCS#8 "PRIVATE KEY" and an SPKI "PUBLIC KEY" (as
 * `openssl genpkey -algorithm ED25519` writes them). jwt_keys_load reads
 * both; when both files are absent and generate is set it creates a new
 * pair and writes them with mode 0600 (the private key never readable by
 * others), so a first start needs nothing by hand.
 *
 * jwt_verify accepts only what jwt_sign makes: header {"alg":"EdDSA",
 * "typ":"JWT"} (any other alg, "none" included, is refused before the
 * signature is looked at), a valid Ed25519 signature by the loaded public
 * key over the first two parts, and claims with iss and aud equal to the
 * expected ones, nbf/iat not in the future by more than JWT_LEEWAY_S, exp
 * in the future, typ (an ember claim: "access" or "refresh") equal to the
 * expected one. Every length is bounded (JWT_MAX_LEN); a token that fails
 * any check gives -1 with the reason in err and leaves *c zeroed.
 *
 * Ownership: jwt_keys_free frees what jwt_keys_load made; jwt_sign appends
 * the token to out. Thread-safe: a loaded jwt_keys is read-only. */
#ifndef EMBER_SERVER_AUTH_JWT_H
#define EMBER_SERVER_AUTH_JWT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define JWT_MAX_LEN 4096
#define JWT_LEEWAY_S 30

struct jwt_keys;

struct jwt_claims {
	char sub[64];  /* the user's id */
	char jti[64];  /* this token's id (a refresh token's row in the store) */
	char iss[256];
	char aud[64];
	char typ[16];  /* "access" or "refresh" */
	int64_t iat, exp; /* Unix seconds */
};

int jwt_keys_load(const char *private_pem, const char *public_pem, bool generate,
		  struct jwt_keys **out, struct buf *err);
void jwt_keys_free(struct jwt_keys *k);
/* A new pair as PEM texts (*private_pem, *public_pem: the caller frees),
 * for a store that keeps them (identity_jwt_keys). */
int jwt_keys_generate_pem(char **private_pem, char **public_pem, struct buf *err);
/* A pair from PEM texts, checked as jwt_keys_load checks files (what
 * names them in messages). */
int jwt_keys_from_pem(const char *what, const char *private_pem, const char *public_pem,
		      struct jwt_keys **out, struct buf *err);

/* Signs c (every string claim set, exp > iat). 0, or -1 with err set. */
int jwt_sign(const struct jwt_keys *k, const struct jwt_claims *c, struct buf *out, struct buf *err);
/* 0 with *c filled when token is valid for (iss, aud, typ) at now. */
int jwt_verify(const struct jwt_keys *k, const char *token, size_t len, const char *iss,
	       const char *aud, const char *typ, int64_t now, struct jwt_claims *c, struct buf *err);

#endif
