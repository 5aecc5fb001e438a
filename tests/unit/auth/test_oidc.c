/* Unit tests: the OIDC relying party's checks (server/auth/oidc.h) without
 * a provider: settings refused at start, the discovery document's issuer,
 * ID tokens in each accepted algorithm and every refused one (alg none,
 * alg confusion, wrong key, a key of another type, tampered claims,
 * issuer, audience, azp, expiry, nonce, email), and the flow cookie
 * (tampered, expired, another state). The tokens here are signed by the
 * test with keys it publishes in the JWKS it loads: the real provider's
 * tokens are in tests/integration/test_oidc.py. */
#include "testutil.h"

#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rsa.h>

#include "server/auth/b64url.h"
#include "server/auth/oidc.h"
#include "util.h"

#define ISSUER "http://127.0.0.1:1"
#define CLIENT "ember-unit"
#define NONCE "n-0123456789"

static void b64_bn(const BIGNUM *b, int pad, struct buf *out)
{
	uint8_t raw[1024];
	int n = pad ? BN_bn2binpad(b, raw, pad) : BN_bn2bin(b, raw);
	assert_true(n > 0);
	b64url_encode(raw, (size_t)n, out);
}

struct keys {
	EVP_PKEY *rsa, *ec, *ed, *rsa_other;
};

static EVP_PKEY *gen(const char *type)
{
	EVP_PKEY *k = NULL;
	if (!strcmp(type, "RSA"))
		k = EVP_RSA_gen(2048);
	else if (!strcmp(type, "EC"))
		k = EVP_EC_gen("P-256");
	else
		k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	assert_non_null(k);
	return k;
}

/* The JWKS of k's public keys: kids "r", "e", "d". */
static char *jwks(const struct keys *k)
{
	struct buf n = { 0 }, e = { 0 }, x = { 0 }, y = { 0 }, d = { 0 };
	BIGNUM *bn = NULL, *be = NULL, *bx = NULL, *by = NULL;
	assert_int_equal(EVP_PKEY_get_bn_param(k->rsa, OSSL_PKEY_PARAM_RSA_N, &bn), 1);
	assert_int_equal(EVP_PKEY_get_bn_param(k->rsa, OSSL_PKEY_PARAM_RSA_E, &be), 1);
	assert_int_equal(EVP_PKEY_get_bn_param(k->ec, OSSL_PKEY_PARAM_EC_PUB_X, &bx), 1);
	assert_int_equal(EVP_PKEY_get_bn_param(k->ec, OSSL_PKEY_PARAM_EC_PUB_Y, &by), 1);
	b64_bn(bn, 0, &n);
	b64_bn(be, 0, &e);
	b64_bn(bx, 32, &x);
	b64_bn(by, 32, &y);
	uint8_t raw[32];
	size_t rl = sizeof(raw);
	assert_int_equal(EVP_PKEY_get_raw_public_key(k->ed, raw, &rl), 1);
	b64url_encode(raw, rl, &d);
	char *s = NULL;
	assert_true(asprintf(&s,
			     "{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r\",\"use\":\"sig\",\"alg\":\"RS256\",\"n\":\"%s\",\"e\":\"%s\"},"
			     "{\"kty\":\"EC\",\"kid\":\"e\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"},"
			     "{\"kty\":\"OKP\",\"kid\":\"d\",\"crv\":\"Ed25519\",\"x\":\"%s\"},"
			     "{\"kty\":\"RSA\",\"kid\":\"enc\",\"use\":\"enc\",\"n\":\"%s\",\"e\":\"%s\"},"
			     /* unusable ones (an empty modulus leaked once: fuzz_oidc) */
			     "{\"kty\":\"RSA\",\"kid\":\"empty\",\"n\":\"\",\"e\":\"AQAB\"},"
			     "{\"kty\":\"EC\",\"kid\":\"off\",\"crv\":\"P-256\",\"x\":\"%s\",\"y\":\"%s\"}]}",
			     n.data, e.data, x.data, y.data, d.data, n.data, e.data, y.data, x.data) > 0);
	BN_free(bn);
	BN_free(be);
	BN_free(bx);
	BN_free(by);
	buf_free(&n);
	buf_free(&e);
	buf_free(&x);
	buf_free(&y);
	buf_free(&d);
	return s;
}

static const char DISCOVERY[] =
	"{\"issuer\":\"" ISSUER "\",\"authorization_endpoint\":\"" ISSUER "/authorize\","
	"\"token_endpoint\":\"" ISSUER "/oauth/token\",\"jwks_uri\":\"" ISSUER "/keys\"}";

static struct oidc *rp(void)
{
	struct oidc_config c = { .issuer = ISSUER, .client_id = CLIENT, .client_secret = "s",
				 .redirect_uri = "http://127.0.0.1:2/api/v1/oauth2/callback",
				 .extra_params = "prompt=consent,access_type=offline", .timeout_ms = 2000 };
	struct oidc *o = NULL;
	struct buf err = { 0 };
	assert_int_equal(oidc_new(&c, &o, &err), 0);
	buf_free(&err);
	return o;
}

/* header.claims.signature with alg signed by k (NULL: no signature). */
static char *token(const char *alg, const char *kid, EVP_PKEY *k, json_t *claims)
{
	struct buf t = { 0 };
	char hdr[128];
	snprintf(hdr, sizeof(hdr), "{\"alg\":\"%s\",\"kid\":\"%s\",\"typ\":\"JWT\"}", alg, kid);
	b64url_encode((const uint8_t *)hdr, strlen(hdr), &t);
	buf_putc(&t, '.');
	char *c = json_dumps(claims, JSON_COMPACT);
	b64url_encode((const uint8_t *)c, strlen(c), &t);
	free(c);
	size_t signed_len = t.len;
	buf_putc(&t, '.');
	if (k) {
		uint8_t sig[512];
		size_t sl = sizeof(sig);
		EVP_MD_CTX *m = EVP_MD_CTX_new();
		bool ed = EVP_PKEY_get_base_id(k) == EVP_PKEY_ED25519;
		assert_int_equal(EVP_DigestSignInit(m, NULL, ed ? NULL : EVP_sha256(), NULL, k), 1);
		assert_int_equal(EVP_DigestSign(m, sig, &sl, (const uint8_t *)t.data, signed_len), 1);
		EVP_MD_CTX_free(m);
		if (EVP_PKEY_get_base_id(k) == EVP_PKEY_EC) { /* DER -> r || s */
			const uint8_t *p = sig;
			ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)sl);
			assert_non_null(es);
			uint8_t rs[64];
			BN_bn2binpad(ECDSA_SIG_get0_r(es), rs, 32);
			BN_bn2binpad(ECDSA_SIG_get0_s(es), rs + 32, 32);
			ECDSA_SIG_free(es);
			memcpy(sig, rs, 64);
			sl = 64;
		}
		b64url_encode(sig, sl, &t);
	}
	return t.data;
}

static json_t *claims(int64_t now)
{
	return json_pack("{s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:b, s:s, s:s}", "iss", ISSUER, "sub", "u-1",
			 "aud", CLIENT, "iat", (json_int_t)now, "exp", (json_int_t)(now + 300), "nonce", NONCE,
			 "email", "a@example.test", "email_verified", 1, "given_name", "Ada", "family_name",
			 "Lovelace");
}

struct fix {
	struct keys k;
	struct oidc *o;
	int64_t now;
};

static int setup(void **state)
{
	struct fix *f = xcalloc(1, sizeof(*f));
	f->k.rsa = gen("RSA");
	f->k.ec = gen("EC");
	f->k.ed = gen("ED");
	f->k.rsa_other = gen("RSA");
	f->o = rp();
	f->now = (int64_t)time(NULL);
	char *j = jwks(&f->k);
	struct buf err = { 0 };
	assert_int_equal(oidc_load(f->o, DISCOVERY, strlen(DISCOVERY), j, strlen(j), &err), 0);
	buf_free(&err);
	free(j);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	oidc_free(f->o);
	EVP_PKEY_free(f->k.rsa);
	EVP_PKEY_free(f->k.ec);
	EVP_PKEY_free(f->k.ed);
	EVP_PKEY_free(f->k.rsa_other);
	free(f);
	return 0;
}

/* Verifies t: 0 or the error code, with the reason in why. */
static int verify(struct fix *f, char *t, struct buf *why)
{
	struct oidc_user u;
	buf_reset(why);
	int rc = oidc_verify_id_token(f->o, t, strlen(t), NONCE, f->now, &u, why);
	if (rc == 0) {
		assert_string_equal(u.email, "a@example.test");
		assert_string_equal(u.given_name, "Ada");
		assert_string_equal(u.sub, "u-1");
	}
	free(t);
	return rc;
}

static void test_id_token_algorithms(void **state)
{
	struct fix *f = *state;
	struct buf why = { 0 };
	json_t *c = claims(f->now);
	assert_int_equal(verify(f, token("RS256", "r", f->k.rsa, c), &why), 0);
	assert_int_equal(verify(f, token("ES256", "e", f->k.ec, c), &why), 0);
	assert_int_equal(verify(f, token("EdDSA", "d", f->k.ed, c), &why), 0);
	/* The "enc" key is not a signing key. */
	assert_int_equal(verify(f, token("RS256", "enc", f->k.rsa, c), &why), OIDC_ETOKEN);
	json_decref(c);
	buf_free(&why);
}

static void test_id_token_tampering(void **state)
{
	struct fix *f = *state;
	struct buf why = { 0 };
	json_t *c = claims(f->now);
	/* alg none, with and without a signature part. */
	assert_int_equal(verify(f, token("none", "r", NULL, c), &why), OIDC_ETOKEN);
	assert_non_null(strstr(why.data, "alg"));
	/* Alg confusion: HS256 keyed with the RSA public key's bytes. */
	{
		struct buf t = { 0 };
		char *u = token("HS256", "r", NULL, c);
		buf_puts(&t, u);
		free(u);
		uint8_t mac[32];
		unsigned ml = sizeof(mac);
		char *pem = jwks(&f->k);
		HMAC(EVP_sha256(), pem, (int)strlen(pem), (const uint8_t *)t.data, t.len - 1, mac, &ml);
		free(pem);
		b64url_encode(mac, ml, &t);
		assert_int_equal(verify(f, t.data, &why), OIDC_ETOKEN);
		assert_non_null(strstr(why.data, "HS256"));
	}
	/* The key of another type under the alg's kid; another RSA key. */
	assert_int_equal(verify(f, token("RS256", "e", f->k.rsa, c), &why), OIDC_ETOKEN);
	assert_int_equal(verify(f, token("ES256", "r", f->k.ec, c), &why), OIDC_ETOKEN);
	assert_int_equal(verify(f, token("RS256", "r", f->k.rsa_other, c), &why), OIDC_ETOKEN);
	assert_non_null(strstr(why.data, "signature"));
	/* A claim changed after signing. */
	{
		char *t = token("RS256", "r", f->k.rsa, c);
		json_t *c2 = claims(f->now);
		json_object_set_new(c2, "email", json_string("admin@example.test"));
		char *t2 = token("RS256", "r", f->k.rsa, c2);
		json_decref(c2);
		/* t2's claims with t's signature. */
		char *d1 = strchr(t, '.'), *s1 = strrchr(t, '.');
		char *e1 = strchr(t2, '.'), *s2 = strrchr(t2, '.');
		struct buf m = { 0 };
		buf_append(&m, t, (size_t)(d1 - t));
		buf_append(&m, e1, (size_t)(s2 - e1));
		buf_puts(&m, s1);
		free(t);
		free(t2);
		assert_int_equal(verify(f, m.data, &why), OIDC_ETOKEN);
		assert_non_null(strstr(why.data, "signature"));
	}
	/* Not three parts; not base64url; crit. */
	assert_int_equal(verify(f, xstrdup("a.b"), &why), OIDC_ETOKEN);
	assert_int_equal(verify(f, xstrdup("a.b.c.d"), &why), OIDC_ETOKEN);
	assert_int_equal(verify(f, xstrdup("!!.b.c"), &why), OIDC_ETOKEN);
	json_decref(c);
	buf_free(&why);
}

static void test_id_token_claims(void **state)
{
	struct fix *f = *state;
	struct buf why = { 0 };
	static const struct {
		const char *name;
		const char *json; /* replaces the claim; "null" deletes it */
		const char *reason;
	} t[] = {
		{ "iss", "\"http://127.0.0.1:9\"", "issuer" },
		{ "iss", "null", "issuer" },
		{ "aud", "\"someone-else\"", "not for this client" },
		{ "aud", "[\"someone-else\"]", "not for this client" },
		{ "azp", "\"someone-else\"", "not for this client" },
		{ "exp", "1000", "expired" },
		{ "exp", "null", "expired" },
		{ "iat", "4102444800", "future" },
		{ "nonce", "\"n-other\"", "nonce" },
		{ "nonce", "null", "nonce" },
		{ "sub", "\"\"", "subject" },
		{ "email", "null", "email" },
		{ "email", "\"no-at-sign\"", "email" },
		{ "email_verified", "false", "not verified" },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		json_t *c = claims(f->now);
		json_t *v = json_loads(t[i].json, JSON_DECODE_ANY, NULL);
		if (json_is_null(v))
			json_object_del(c, t[i].name);
		else
			json_object_set(c, t[i].name, v);
		json_decref(v);
		int rc = verify(f, token("RS256", "r", f->k.rsa, c), &why);
		json_decref(c);
		if (rc != OIDC_ETOKEN || !strstr(why.data, t[i].reason))
			fail_msg("%s=%s: rc %d, %s", t[i].name, t[i].json, rc, why.data ? why.data : "");
	}
	/* The largest exp is far off, not an overflow (UBSan would stop here). */
	json_t *big = claims(f->now);
	json_object_set_new(big, "exp", json_integer(INT64_MAX));
	assert_int_equal(verify(f, token("RS256", "r", f->k.rsa, big), &why), 0);
	json_decref(big);
	/* An audience list holding ours, with azp ours: accepted. */
	json_t *c = claims(f->now);
	json_object_set_new(c, "aud", json_pack("[s,s]", "other", CLIENT));
	json_object_set_new(c, "azp", json_string(CLIENT));
	assert_int_equal(verify(f, token("RS256", "r", f->k.rsa, c), &why), 0);
	json_decref(c);
	buf_free(&why);
}

/* An unknown kid makes the RP fetch the JWKS again (here: nothing
 * listens there, so it stays unknown and the token is refused); a known
 * kid fetches nothing. Unknown kids fetch OIDC_JWKS_REFETCH_BURST times
 * at once, then once each OIDC_JWKS_REFETCH_S: a flood of tokens naming
 * made-up kids is refused without more fetches; a period later, one
 * fetch again. */
static void test_unknown_kid_fetches_again(void **state)
{
	struct fix *f = *state;
	struct buf why = { 0 };
	json_t *c = claims(f->now);
	uint64_t before = oidc_jwks_fetches(f->o);
	assert_int_equal(verify(f, token("RS256", "rotated", f->k.rsa_other, c), &why), OIDC_ETOKEN);
	assert_int_equal(oidc_jwks_fetches(f->o), before + 1);
	assert_non_null(strstr(why.data, "rotated"));
	assert_int_equal(verify(f, token("RS256", "r", f->k.rsa, c), &why), 0);
	assert_int_equal(oidc_jwks_fetches(f->o), before + 1);
	for (int i = 0; i < 20; i++) {
		char kid[32];
		snprintf(kid, sizeof(kid), "made-up-%d", i);
		assert_int_equal(verify(f, token("RS256", kid, f->k.rsa_other, c), &why), OIDC_ETOKEN);
		assert_non_null(strstr(why.data, kid));
	}
	assert_int_equal(oidc_jwks_fetches(f->o), before + OIDC_JWKS_REFETCH_BURST);
	/* Meanwhile the known key still verifies. */
	assert_int_equal(verify(f, token("RS256", "r", f->k.rsa, c), &why), 0);
	int64_t now = f->now;
	f->now = now + OIDC_JWKS_REFETCH_S - 1;
	assert_int_equal(verify(f, token("RS256", "late", f->k.rsa_other, c), &why), OIDC_ETOKEN);
	assert_int_equal(oidc_jwks_fetches(f->o), before + OIDC_JWKS_REFETCH_BURST);
	f->now = now + OIDC_JWKS_REFETCH_S;
	assert_int_equal(verify(f, token("RS256", "later", f->k.rsa_other, c), &why), OIDC_ETOKEN);
	assert_int_equal(verify(f, token("RS256", "later2", f->k.rsa_other, c), &why), OIDC_ETOKEN);
	assert_int_equal(oidc_jwks_fetches(f->o), before + OIDC_JWKS_REFETCH_BURST + 1);
	f->now = now;
	json_decref(c);
	buf_free(&why);
}

static void test_flow_cookie(void **state)
{
	struct fix *f = *state;
	struct buf loc = { 0 }, cookie = { 0 }, err = { 0 };
	assert_int_equal(oidc_begin(f->o, f->now, &loc, &cookie, &err), 0);
	assert_true(!strncmp(loc.data, ISSUER "/authorize?response_type=code&client_id=" CLIENT, 55));
	assert_non_null(strstr(loc.data, "&code_challenge_method=S256"));
	assert_non_null(strstr(loc.data, "&prompt=consent&access_type=offline"));
	assert_non_null(strstr(loc.data, "&scope=openid%20email%20profile"));
	const char *sp = strstr(loc.data, "&state=") + 7;
	char st[64];
	snprintf(st, sizeof(st), "%.*s", (int)strcspn(sp, "&"), sp);
	struct oidc_user u;
	/* The right state gets as far as the token endpoint (nobody there). */
	buf_reset(&err);
	assert_int_equal(oidc_finish(f->o, cookie.data, st, "code", f->now, &u, &err), OIDC_EPROVIDER);
	assert_non_null(strstr(err.data, "unreachable"));
	/* Another state; too late; a tampered cookie; no cookie. */
	buf_reset(&err);
	assert_int_equal(oidc_finish(f->o, cookie.data, "x", "code", f->now, &u, &err), OIDC_EREQUEST);
	assert_non_null(strstr(err.data, "invalid state"));
	buf_reset(&err);
	assert_int_equal(oidc_finish(f->o, cookie.data, st, "code", f->now + OIDC_FLOW_TTL_S + 1, &u, &err),
			 OIDC_EREQUEST);
	char *bad = xstrdup(cookie.data);
	bad[3] = bad[3] == '1' ? '2' : '1'; /* the expiry, pushed */
	buf_reset(&err);
	assert_int_equal(oidc_finish(f->o, bad, st, "code", f->now, &u, &err), OIDC_EREQUEST);
	assert_non_null(strstr(err.data, "not one this server made"));
	free(bad);
	buf_reset(&err);
	assert_int_equal(oidc_finish(f->o, "", st, "code", f->now, &u, &err), OIDC_EREQUEST);
	buf_free(&loc);
	buf_free(&cookie);
	buf_free(&err);
}

static void test_settings_and_discovery(void **state)
{
	(void)state;
	static const struct {
		struct oidc_config c;
		const char *why;
	} t[] = {
		{ { .issuer = "http://idp.example.com", .client_id = "c", .client_secret = "s",
		    .redirect_uri = "https://e/api/v1/oauth2/callback" }, "must be https" },
		{ { .issuer = "ftp://idp", .client_id = "c", .client_secret = "s",
		    .redirect_uri = "https://e/api/v1/oauth2/callback" }, "--oidc-issuer" },
		{ { .issuer = "https://idp", .client_id = "", .client_secret = "s",
		    .redirect_uri = "https://e/api/v1/oauth2/callback" }, "--oidc-client-id" },
		{ { .issuer = "https://idp", .client_id = "c", .client_secret = "s",
		    .redirect_uri = "https://e/callback" }, "--oidc-redirect-uri" },
		{ { .issuer = "https://idp", .client_id = "c", .client_secret = "s",
		    .redirect_uri = "https://e/api/v1/oauth2/callback", .scopes = "email profile" }, "openid" },
		{ { .issuer = "https://idp", .client_id = "c", .client_secret = "s",
		    .redirect_uri = "https://e/api/v1/oauth2/callback", .extra_params = "state=x" },
		  "set by ember" },
		{ { .issuer = "https://idp", .client_id = "c", .client_secret = "s",
		    .redirect_uri = "https://e/api/v1/oauth2/callback", .extra_params = "novalue" },
		  "key=value" },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct oidc *o = NULL;
		struct buf err = { 0 };
		assert_int_equal(oidc_new(&t[i].c, &o, &err), -1);
		assert_null(o);
		if (!strstr(err.data, t[i].why))
			fail_msg("case %zu: %s", i, err.data);
		buf_free(&err);
	}
	/* A discovery document for another issuer, or with an http endpoint
	 * for an https issuer, is refused. */
	struct oidc *o = rp();
	struct buf err = { 0 };
	const char other[] = "{\"issuer\":\"http://127.0.0.1:1/\",\"authorization_endpoint\":\"http://127.0.0.1:1/a\","
			     "\"token_endpoint\":\"http://127.0.0.1:1/t\",\"jwks_uri\":\"http://127.0.0.1:1/k\"}";
	assert_int_equal(oidc_load(o, other, strlen(other), "{}", 2, &err), -1);
	assert_non_null(strstr(err.data, "issuer"));
	oidc_free(o);
	struct oidc_config hc = { .issuer = "https://idp.example", .client_id = "c", .client_secret = "s",
				  .redirect_uri = "https://e/api/v1/oauth2/callback" };
	assert_int_equal(oidc_new(&hc, &o, &err), 0);
	const char plain[] = "{\"issuer\":\"https://idp.example\",\"authorization_endpoint\":\"http://idp.example/a\","
			     "\"token_endpoint\":\"https://idp.example/t\",\"jwks_uri\":\"https://idp.example/k\"}";
	buf_reset(&err);
	assert_int_equal(oidc_load(o, plain, strlen(plain), "{}", 2, &err), -1);
	assert_non_null(strstr(err.data, "https"));
	oidc_free(o);
	buf_free(&err);
}

UNIT_TEST_MAIN(
	cmocka_unit_test_setup_teardown(test_id_token_algorithms, setup, teardown),
	cmocka_unit_test_setup_teardown(test_id_token_tampering, setup, teardown),
	cmocka_unit_test_setup_teardown(test_id_token_claims, setup, teardown),
	cmocka_unit_test_setup_teardown(test_unknown_kid_fetches_again, setup, teardown),
	cmocka_unit_test_setup_teardown(test_flow_cookie, setup, teardown),
	cmocka_unit_test(test_settings_and_discovery))
