/* Fuzz target: what an OpenID Connect provider (or a browser) hands the
 * relying party (server/auth/oidc.h). The first byte picks:
 *   'J' the rest is a JWKS document (every key type, hostile members);
 *   'T' the rest is an ID token (header, base64url, kid, signature);
 *   'C' the rest is an ID token's claims, signed here with the Ed25519
 *       key the JWKS holds, so the claim checks see hostile JSON;
 *   'F' the rest is a flow cookie (and its state after a NUL).
 * The provider's address is a closed loopback port: a fetch again of the
 * keys (an unknown kid) fails at once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "fuzz_jws.h"
#include "server/auth/b64url.h"
#include "server/auth/oidc.h"
#include "util.h"

#define ISSUER "http://127.0.0.1:1"

static const char DISCOVERY[] =
	"{\"issuer\":\"" ISSUER "\",\"authorization_endpoint\":\"" ISSUER "/a\","
	"\"token_endpoint\":\"" ISSUER "/t\",\"jwks_uri\":\"" ISSUER "/k\"}";

/* Made once (a fuzz target's process runs one input after another). */
static struct oidc *rp;
static EVP_PKEY *ed;

static void setup(void)
{
	struct oidc_config c = { .issuer = ISSUER, .client_id = "c", .client_secret = "s",
				 .redirect_uri = "http://127.0.0.1:2/api/v1/oauth2/callback", .timeout_ms = 1000 };
	struct buf err = { 0 }, jwks = { 0 };
	if (oidc_new(&c, &rp, &err) < 0)
		abort();
	ed = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	uint8_t raw[32];
	size_t rl = sizeof(raw);
	if (!ed || EVP_PKEY_get_raw_public_key(ed, raw, &rl) != 1)
		abort();
	buf_puts(&jwks, "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"d\",\"x\":\"");
	b64url_encode(raw, rl, &jwks);
	buf_puts(&jwks, "\"}]}");
	if (oidc_load(rp, DISCOVERY, strlen(DISCOVERY), jwks.data, jwks.len, &err) < 0)
		abort();
	buf_free(&jwks);
	buf_free(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!rp)
		setup();
	if (size < 1)
		return 0;
	const char *s = (const char *)data + 1;
	size_t n = size - 1;
	struct buf err = { 0 }, t = { 0 };
	struct oidc_user u;
	switch (data[0]) {
	case 'J': {
		struct oidc_config c = { .issuer = ISSUER, .client_id = "c", .client_secret = "s",
					 .redirect_uri = "http://127.0.0.1:2/api/v1/oauth2/callback" };
		struct oidc *o;
		if (oidc_new(&c, &o, &err) == 0) {
			(void)oidc_load(o, DISCOVERY, strlen(DISCOVERY), s, n, &err);
			oidc_free(o);
		}
		break;
	}
	case 'T': {
		char *tok = xstrndup(s, n);
		(void)oidc_verify_id_token(rp, tok, strlen(tok), "n", 0, &u, &err);
		free(tok);
		break;
	}
	case 'C': {
		static const char hdr[] = "{\"alg\":\"EdDSA\",\"kid\":\"d\"}";
		b64url_encode((const uint8_t *)hdr, strlen(hdr), &t);
		buf_putc(&t, '.');
		b64url_encode((const uint8_t *)s, n, &t);
		fuzz_jws_sign(ed, &t);
		(void)oidc_verify_id_token(rp, t.data, t.len, "n", 1700000000, &u, &err);
		break;
	}
	case 'F': {
		size_t cl = strnlen(s, n);
		char *cookie = xstrndup(s, cl);
		char *st = cl < n ? xstrndup(s + cl + 1, n - cl - 1) : xstrdup("x");
		(void)oidc_finish(rp, cookie, st, "code", 1700000000, &u, &err);
		free(st);
		free(cookie);
		break;
	}
	}
	buf_free(&t);
	buf_free(&err);
	return 0;
}
