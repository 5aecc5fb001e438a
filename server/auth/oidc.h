/* oidc.h - the relying party of --auth oidc: sign-in at an OpenID Connect
 * provider with the authorization code flow, PKCE (S256), state and nonce.
 *
 * Discovery: ISSUER/.well-known/openid-configuration is fetched on first
 * use (not at start: a provider that is down does not stop the server; each
 * sign-in retries until it answers, "OIDC provider unreachable: ..."), and
 * kept. Its "issuer" must equal --oidc-issuer exactly. The provider's keys
 * (jwks_uri) are fetched with it and fetched again when an ID token names a
 * key id that is not among them (the provider rotated its keys): at most
 * OIDC_JWKS_REFETCH_BURST times at once, then once each
 * OIDC_JWKS_REFETCH_S seconds; beyond that an unknown key id is refused
 * without a fetch. Every
 * answer is bounded (OIDC_MAX_DOC bytes, OIDC_MAX_KEYS keys), every request
 * times out (timeout_ms), redirects are not followed, and only http(s) is
 * spoken; the issuer and the endpoints must be https unless the issuer is a
 * loopback address (a test or a provider on the same host).
 *
 * oidc_begin makes a sign-in: random state, nonce and PKCE verifier (32
 * bytes each), the authorization URL (response_type=code, client_id,
 * redirect_uri, scope, state, nonce, code_challenge, S256, then the
 * extra parameters) and the flow cookie's value, which carries the three
 * secrets and an expiry, signed with HMAC-SHA256 under a key made at
 * start (a sign-in in flight when the server restarts must start again).
 * The cookie lives OIDC_FLOW_TTL_S seconds (the reference's cookieTtlSec).
 *
 * oidc_finish checks the flow cookie (signature, expiry) and that the
 * callback's state equals the cookie's, exchanges the code at the token
 * endpoint with the verifier (client_secret_basic, or client_secret_post
 * when the provider lists only that), and verifies the ID token:
 * alg RS256, ES256 or EdDSA only ("none" and HMAC algs refused), the
 * signature by the JWKS key of its kid whose type matches the alg, iss
 * equal to the issuer, aud holding the client id (and azp, when present,
 * equal to it), exp not past, iat/nbf not in the future (OIDC_LEEWAY_S
 * leeway), nonce equal to the cookie's, sub and email present, and
 * email_verified not false.
 *
 * Errors: OIDC_EREQUEST (the caller's: bad or missing state, an expired
 * flow: HTTP 400), OIDC_EPROVIDER (the provider unreachable or answering
 * badly: 502), OIDC_ETOKEN (an ID token refused: 401); err says which.
 *
 * Thread-safe: the discovery document and the keys are behind a mutex; a
 * fetch holds it (one fetch at a time, each bounded by timeout_ms).
 * Ownership: oidc_free frees what oidc_new made; strings passed in are
 * copied. */
#ifndef EMBER_SERVER_AUTH_OIDC_H
#define EMBER_SERVER_AUTH_OIDC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "identity.h"

#define OIDC_FLOW_COOKIE "ember_oidc"
#define OIDC_FLOW_PATH "/api/v1/oauth2"
#define OIDC_FLOW_TTL_S 60
#define OIDC_CALLBACK_PATH "/api/v1/oauth2/callback"
#define OIDC_MAX_DOC (256 * 1024)
#define OIDC_MAX_KEYS 64
#define OIDC_MAX_ID_TOKEN (16 * 1024)
#define OIDC_LEEWAY_S 60
#define OIDC_JWKS_REFETCH_S 20
#define OIDC_JWKS_REFETCH_BURST 3
#define OIDC_DEFAULT_SCOPES "openid email profile"

enum { OIDC_EREQUEST = -1, OIDC_EPROVIDER = -2, OIDC_ETOKEN = -3 };

struct oidc_config {
	const char *issuer;        /* --oidc-issuer */
	const char *client_id;     /* --oidc-client-id */
	const char *client_secret; /* the first line of --oidc-client-secret-file */
	const char *redirect_uri;  /* --oidc-redirect-uri: ends in OIDC_CALLBACK_PATH */
	const char *scopes;        /* --oidc-scopes, space or comma separated; must hold openid */
	const char *extra_params;  /* --oidc-extra-params "k=v,k=v" */
	long timeout_ms;           /* each request to the provider; 0: 10 s */
};

/* Who the provider says signed in. */
struct oidc_user {
	char sub[256];
	char email[IDENTITY_MAX_EMAIL + 1];
	char given_name[IDENTITY_MAX_NAME + 1], family_name[IDENTITY_MAX_NAME + 1];
};

struct oidc;

/* Checks the settings (no network). 0, or -1 with err naming the flag. */
int oidc_new(const struct oidc_config *c, struct oidc **out, struct buf *err);
void oidc_free(struct oidc *o);

/* The redirect URI's scheme://host[:port], for error messages. */
const char *oidc_redirect_uri(const struct oidc *o);

/* A new sign-in at now (Unix seconds): the URL to send the browser to in
 * location, the flow cookie's value in cookie. 0 or OIDC_EPROVIDER. */
int oidc_begin(struct oidc *o, int64_t now, struct buf *location, struct buf *cookie,
	       struct buf *err);

/* The callback: flow_cookie (the cookie's value), state and code (the
 * query's). 0 with *u filled, or one of the OIDC_E* codes. */
int oidc_finish(struct oidc *o, const char *flow_cookie, const char *state, const char *code,
		int64_t now, struct oidc_user *u, struct buf *err);

/* --- for tests (tests/unit/auth/test_oidc.c, the fuzz target) --------------- */
/* Takes a discovery document and a JWKS as if fetched (no network). */
int oidc_load(struct oidc *o, const char *discovery, size_t dlen, const char *jwks, size_t jlen,
	      struct buf *err);
/* Verifies an ID token (see above) for nonce at now. */
int oidc_verify_id_token(struct oidc *o, const char *token, size_t len, const char *nonce,
			 int64_t now, struct oidc_user *u, struct buf *err);
/* How many times the JWKS has been fetched. */
uint64_t oidc_jwks_fetches(struct oidc *o);

#endif
