/* Unit tests: the authentication building blocks (server/auth/):
 * permission patterns, Ed25519 JWTs (round trip, every tampering and
 * every refused claim), key files, Argon2id passwords and cookies. */
#include "testutil.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#include "server/auth/cookie.h"
#include "server/auth/jwt.h"
#include "server/auth/password.h"
#include "server/auth/perm.h"
#include "util.h"

/* --- permission patterns ---------------------------------------------- */

static void test_perm_match_table(void **state)
{
	(void)state;
	static const struct {
		const char *pattern, *perm;
		bool want;
	} t[] = {
		/* The reference's examples. */
		{ "project:*", "project:create", true },
		{ "project:*", "project:read", true },
		{ "project:*", "project:delete", true },
		{ "project:*", "admin:user:read", false },
		{ "project:*", "project:x:read", false }, /* '*' is one level */
		{ "**:read", "project:read", true },
		{ "**:read", "admin:user:read", true },
		{ "**:read", "admin:audit:read", true },
		{ "**:read", "project:create", false },
		{ "**:read", "admin:user:read:x", false },
		{ "admin:**", "admin:user:create", true },
		{ "admin:**", "admin:role:assignment:set", true },
		{ "admin:**", "admin:audit:read", true },
		{ "admin:**", "project:read", false },
		{ "admin:**", "xadmin:user:read", false },
		{ "service:token:*", "service:token:create", true },
		{ "service:token:*", "service:token:revoke", true },
		{ "service:token:*", "service:tokens:read", false },
		{ "service:token:*", "service:token", false }, /* '*' needs its level */
		{ "**:**", "project:read", true },
		{ "**:**", "admin:role:assignment:set", true },
		{ "**:*", "project:read", true },
		{ "**:*", "admin:role:assignment:set", true },
		/* Literal patterns: equal, not a prefix. */
		{ "project:read", "project:read", true },
		{ "project:read", "project:readx", false },
		{ "project:rea", "project:read", false },
		{ "project:read", "project:read:x", false },
		/* '**' in the middle, and several. */
		{ "admin:**:read", "admin:user:read", true },
		{ "admin:**:read", "admin:a:b:c:read", true },
		{ "admin:**:read", "admin:read", false }, /* '**' is one or more */
		{ "**:user:**", "admin:user:read", true },
		{ "**:user:**", "user:read", false },
		{ "**:**:**", "a:b", false },
		{ "**:**:**", "a:b:c", true },
		{ "*:*", "a:b", true },
		{ "*:*", "a:b:c", false },
		{ "**:b:**:d", "a:b:c:d", true },
		{ "**:b:**:d", "a:b:c:e", false },
		{ "**:a", "a:a:a:a:a:a:a:a", true },
		{ "**:b", "a:a:a:a:a:a:a:a", false },
		/* Invalid on either side: nothing matches. */
		{ "**", "project:read", false },
		{ "project*", "project:read", false },
		{ "proj*:read", "project:read", false },
		{ "***:read", "project:read", false },
		{ "p*:read", "project:read", false }, /* two bytes ending in '*' are not "**" */
		{ "*p:read", "project:read", false },
		{ "Project:read", "Project:read", false },
		{ "project:read", "Project:read", false },
		{ "project::read", "project::read", false },
		{ "**:**", "project:*", false }, /* a permission has no wildcard */
		{ "**:**", "project", false },
		{ "**:**", "", false },
		{ "", "project:read", false },
		{ "**:**", "a:b:c:d:e:f:g:h:i", false }, /* nine levels */
		{ "**:**", "project:read ", false },
		{ "**:**", "project:r\xc3\xa9" "ad", false },
	};
	for (size_t i = 0; i < ARRAY_SIZE(t); i++) {
		bool got = perm_match(t[i].pattern, t[i].perm);
		if (got != t[i].want)
			fail_msg("perm_match(\"%s\", \"%s\") = %d, want %d", t[i].pattern, t[i].perm, got, t[i].want);
	}
	assert_false(perm_match(NULL, "project:read"));
	assert_false(perm_match("**:**", NULL));
	/* Eight levels is the most. */
	assert_true(perm_match("a:b:c:d:e:f:g:h", "a:b:c:d:e:f:g:h"));
	assert_true(perm_match("**:**", "a:b:c:d:e:f:g:h"));
	assert_false(perm_match("a:b:c:d:e:f:g:h:i", "a:b:c:d:e:f:g:h:i"));
	/* The length limit: 128 bytes pass, 129 do not. */
	char p[PERM_MAX_LEN + 2];
	memset(p, 'a', sizeof(p));
	p[0] = 'x';
	p[1] = ':';
	p[PERM_MAX_LEN] = '\0';
	assert_true(perm_match("x:*", p));
	assert_true(perm_match(p, p));
	p[PERM_MAX_LEN] = 'a';
	p[PERM_MAX_LEN + 1] = '\0';
	assert_false(perm_match("x:*", p));
	assert_false(perm_match(p, p));
}

static void expect_invalid(const char *pattern, const char *why)
{
	struct buf err = { 0 };
	if (perm_check_pattern(pattern, &err) != -1)
		fail_msg("pattern \"%s\" was accepted", pattern ? pattern : "(null)");
	if (!err.data || !strstr(err.data, why))
		fail_msg("pattern \"%s\": \"%s\" does not say \"%s\"", pattern ? pattern : "(null)",
			 err.data ? err.data : "", why);
	buf_free(&err);
}

static void test_perm_check_pattern(void **state)
{
	(void)state;
	const char *ok[] = { "project:*", "**:read", "admin:**", "service:token:*", "**:**", "**:*",
			     "project:read", "a_b-c:0", "*:*", "a:b:c:d:e:f:g:h" };
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		struct buf err = { 0 };
		assert_int_equal(perm_check_pattern(ok[i], &err), 0);
		assert_int_equal(err.len, 0);
	}
	expect_invalid(NULL, "missing");
	expect_invalid("", "empty");
	expect_invalid("project", "one level");
	expect_invalid("**", "one level");
	expect_invalid("project::read", "level 2 is empty");
	expect_invalid(":read", "level 1 is empty");
	expect_invalid("project:", "level 2 is empty");
	expect_invalid("project:rea*", "level 2: '*' and '**' stand for whole levels");
	expect_invalid("***:read", "level 1: '*' and '**'");
	expect_invalid("a:x*:b", "level 2: '*' and '**'");
	expect_invalid("a:*x", "level 2: '*' and '**'");
	expect_invalid("Project:read", "level 1: character 'P'");
	expect_invalid("project:read now", "level 2: byte 0x20");
	expect_invalid("project:\n", "byte 0x0a");
	expect_invalid("a:b:c:d:e:f:g:h:i", "more than 8 levels");
	char longp[PERM_MAX_LEN + 10];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[1] = ':';
	longp[sizeof(longp) - 1] = '\0';
	expect_invalid(longp, "longer than 128 bytes");
}

static void test_perm_catalogue(void **state)
{
	(void)state;
	static const char *want[] = {
		"service:token:create", "service:token:read", "service:token:revoke", "project:create",
		"project:read", "project:update", "project:delete", "admin:user:create", "admin:user:read",
		"admin:user:update", "admin:user:delete", "admin:role:create", "admin:role:read",
		"admin:role:update", "admin:role:delete", "admin:role:assignment:set", "admin:audit:read",
		"auth:local:login", "ingest:profile:write", "ingest:metrics:write", "ingest:symbols:write",
		"symbols:global:write", "server:metrics:read", "admin:settings:read", "admin:settings:update",
	};
	size_t n = 0;
	while (perm_catalogue[n])
		n++;
	assert_int_equal(n, ARRAY_SIZE(want));
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		assert_true(perm_known(want[i]));
		/* Each is a valid permission, and "**:**" grants it. */
		assert_true(perm_match("**:**", want[i]));
		assert_true(perm_match(want[i], want[i]));
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(perm_catalogue[i], perm_catalogue[j]);
	}
	assert_false(perm_known("project:*"));
	assert_false(perm_known("project:rea"));
	assert_false(perm_known(""));
	assert_false(perm_known(NULL));
	/* "**:read" grants exactly the catalogue's reads. */
	size_t reads = 0;
	for (size_t i = 0; perm_catalogue[i]; i++)
		reads += perm_match("**:read", perm_catalogue[i]);
	assert_int_equal(reads, 7);
}

/* --- JWT ------------------------------------------------------------------- */

struct keydir {
	char *dir;
	char priv[512], pub[512];
	struct jwt_keys *k;
};

static void keydir_make(struct keydir *d)
{
	d->dir = make_temp_dir();
	snprintf(d->priv, sizeof(d->priv), "%s/jwt.key", d->dir);
	snprintf(d->pub, sizeof(d->pub), "%s/jwt.pub", d->dir);
	struct buf err = { 0 };
	if (jwt_keys_load(d->priv, d->pub, true, &d->k, &err) != 0)
		fail_msg("jwt_keys_load: %s", err.data);
	buf_free(&err);
}

static void keydir_free(struct keydir *d)
{
	jwt_keys_free(d->k);
	rm_rf(d->dir);
	free(d->dir);
}

static const int64_t NOW = 1800000000;

static struct jwt_claims claims(void)
{
	struct jwt_claims c = { .iat = NOW - 10, .exp = NOW + 290 };
	strcpy(c.sub, "0b7c6d8e-1f2a-4b3c-8d4e-5f6a7b8c9d0e");
	strcpy(c.jti, "f0e1d2c3-b4a5-4968-8776-655443322110");
	strcpy(c.iss, "https://ember.example:8080");
	strcpy(c.aud, "ember");
	strcpy(c.typ, "access");
	return c;
}

static char *sign(const struct jwt_keys *k, const struct jwt_claims *c)
{
	struct buf out = { 0 }, err = { 0 };
	if (jwt_sign(k, c, &out, &err) != 0)
		fail_msg("jwt_sign: %s", err.data);
	buf_free(&err);
	return out.data;
}

/* jwt_verify against the defaults of claims(); 0 or -1, and the reason
 * must contain why when it fails. */
static int verify_at(const struct jwt_keys *k, const char *tok, size_t len, int64_t now, const char *why)
{
	struct jwt_claims c;
	memset(&c, 0x5a, sizeof(c));
	struct buf err = { 0 };
	int rc = jwt_verify(k, tok, len, "https://ember.example:8080", "ember", "access", now, &c, &err);
	if (rc == 0) {
		assert_int_equal(err.len, 0);
	} else {
		static const struct jwt_claims zero;
		assert_memory_equal(&c, &zero, sizeof(c)); /* left zeroed */
		if (!why || !err.data || !strstr(err.data, why))
			fail_msg("refused with \"%s\", want \"%s\"", err.data ? err.data : "", why ? why : "success");
	}
	buf_free(&err);
	return rc;
}

static int verify(const struct jwt_keys *k, const char *tok, const char *why)
{
	return verify_at(k, tok, strlen(tok), NOW, why);
}

static char *b64url(const void *p, size_t n)
{
	unsigned char *t = malloc(4 * ((n + 2) / 3) + 1);
	int m = EVP_EncodeBlock(t, p, (int)n);
	while (m > 0 && t[m - 1] == '=')
		m--;
	t[m] = '\0';
	for (int i = 0; i < m; i++)
		t[i] = t[i] == '+' ? '-' : t[i] == '/' ? '_' : t[i];
	return (char *)t;
}

/* A token of these encoded parts, signed with the private key in
 * priv_path (NULL: with a signature of 64 zero bytes). */
static char *forge_raw(const char *h, const char *p, const char *priv_path)
{
	struct buf t = { 0 };
	buf_printf(&t, "%s.%s", h, p);
	unsigned char sig[64] = { 0 };
	if (priv_path) {
		FILE *f = fopen(priv_path, "r");
		assert_non_null(f);
		EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
		fclose(f);
		assert_non_null(k);
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		size_t n = sizeof(sig);
		assert_int_equal(EVP_DigestSignInit(ctx, NULL, NULL, NULL, k), 1);
		assert_int_equal(EVP_DigestSign(ctx, sig, &n, (unsigned char *)t.data, t.len), 1);
		EVP_MD_CTX_free(ctx);
		EVP_PKEY_free(k);
	}
	char *s = b64url(sig, sizeof(sig));
	buf_printf(&t, ".%s", s);
	free(s);
	return t.data;
}

/* The same, of this header and these claims. */
static char *forge(const char *header, const char *claims_json, const char *priv_path)
{
	char *h = b64url(header, strlen(header)), *p = b64url(claims_json, strlen(claims_json));
	char *t = forge_raw(h, p, priv_path);
	free(h);
	free(p);
	return t;
}

static const char *HDR = "{\"alg\":\"EdDSA\",\"typ\":\"JWT\"}";
static const char *CLAIMS = "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\","
			    "\"typ\":\"access\",\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290}";

static void test_jwt_round_trip(void **state)
{
	(void)state;
	struct keydir d;
	keydir_make(&d);
	struct jwt_claims c0 = claims(), c;
	char *tok = sign(d.k, &c0);
	assert_int_equal(strncmp(tok, "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.", 37), 0);
	struct buf err = { 0 };
	assert_int_equal(jwt_verify(d.k, tok, strlen(tok), c0.iss, c0.aud, c0.typ, NOW, &c, &err), 0);
	assert_memory_equal(&c, &c0, sizeof(c));
	/* The length given is what counts: a token inside a longer string. */
	struct buf longer = { 0 };
	buf_printf(&longer, "%s; other=1", tok);
	assert_int_equal(verify_at(d.k, longer.data, strlen(tok), NOW, NULL), 0);
	buf_free(&longer);
	/* A forged token with the right key and our header and claims passes:
	 * the forging helper below is sound. */
	char *f = forge(HDR, CLAIMS, d.priv);
	assert_int_equal(verify(d.k, f, NULL), 0);
	free(f);
	/* Signing refuses incomplete claims. */
	struct jwt_claims bad = claims();
	bad.jti[0] = '\0';
	struct buf out = { 0 };
	assert_int_equal(jwt_sign(d.k, &bad, &out, &err), -1);
	assert_non_null(strstr(err.data, "jti"));
	buf_reset(&err);
	bad = claims();
	memset(bad.typ, 'a', sizeof(bad.typ)); /* not terminated */
	assert_int_equal(jwt_sign(d.k, &bad, &out, &err), -1);
	buf_reset(&err);
	bad = claims();
	bad.exp = bad.iat;
	assert_int_equal(jwt_sign(d.k, &bad, &out, &err), -1);
	assert_non_null(strstr(err.data, "exp"));
	buf_reset(&err);
	bad = claims();
	strcpy(bad.sub, "\xff\xfe");
	assert_int_equal(jwt_sign(d.k, &bad, &out, &err), -1);
	assert_non_null(strstr(err.data, "UTF-8"));
	assert_int_equal(out.len, 0);
	buf_free(&err);
	free(tok);
	keydir_free(&d);
}

static void test_jwt_tampering(void **state)
{
	(void)state;
	struct keydir d, other;
	keydir_make(&d);
	keydir_make(&other);
	struct jwt_claims c0 = claims();
	char *tok = sign(d.k, &c0);
	size_t n = strlen(tok);
	const char *d1 = strchr(tok, '.'), *d2 = strrchr(tok, '.');

	/* alg "none", with and without a signature. */
	char *t = forge("{\"alg\":\"none\",\"typ\":\"JWT\"}", CLAIMS, NULL);
	assert_int_equal(verify(d.k, t, "alg is not EdDSA"), -1);
	*strrchr(t, '.') = '\0';
	assert_int_equal(verify(d.k, t, "three"), -1);
	strcat(t, ".");
	assert_int_equal(verify(d.k, t, "alg is not EdDSA"), -1);
	free(t);
	/* Alg confusion: HS256 keyed with the public key's PEM. */
	{
		char *pem = NULL;
		size_t pemlen;
		assert_int_equal(read_file(d.pub, 4096, &pem, &pemlen), 0);
		char *h = b64url("{\"alg\":\"HS256\",\"typ\":\"JWT\"}", 27), *p = b64url(CLAIMS, strlen(CLAIMS));
		struct buf s = { 0 };
		buf_printf(&s, "%s.%s", h, p);
		unsigned char mac[32];
		unsigned int maclen = sizeof(mac);
		assert_non_null(HMAC(EVP_sha256(), pem, (int)pemlen, (unsigned char *)s.data, s.len, mac, &maclen));
		char *m = b64url(mac, maclen);
		buf_printf(&s, ".%s", m);
		assert_int_equal(verify(d.k, s.data, "alg is not EdDSA"), -1);
		free(m);
		free(h);
		free(p);
		free(pem);
		buf_free(&s);
	}
	/* Other headers, even when signed with the right key. */
	t = forge("{\"alg\":\"EdDSA\",\"typ\":\"JWT\",\"crit\":[\"exp\"]}", CLAIMS, d.priv);
	assert_int_equal(verify(d.k, t, "members other than"), -1);
	free(t);
	t = forge("{\"alg\":\"EdDSA\",\"typ\":\"JWT\",\"alg\":\"EdDSA\"}", CLAIMS, d.priv);
	assert_int_equal(verify(d.k, t, "header is not"), -1); /* duplicate member */
	free(t);
	t = forge("{\"alg\":\"EdDSA\"}", CLAIMS, d.priv);
	assert_int_equal(verify(d.k, t, "typ is not JWT"), -1);
	free(t);
	t = forge("{\"alg\":\"ES256\",\"typ\":\"JWT\"}", CLAIMS, d.priv);
	assert_int_equal(verify(d.k, t, "alg is not EdDSA"), -1);
	free(t);
	t = forge("[\"EdDSA\"]", CLAIMS, d.priv);
	assert_int_equal(verify(d.k, t, "header is not"), -1);
	free(t);
	/* Header edited to the same meaning in other bytes: the signature. */
	{
		char *h = b64url("{\"typ\":\"JWT\",\"alg\":\"EdDSA\"}", 27);
		struct buf s = { 0 };
		buf_printf(&s, "%s%s", h, d1);
		assert_int_equal(verify(d.k, s.data, "signature does not verify"), -1);
		free(h);
		buf_free(&s);
	}
	/* Claims edited: another subject, a later expiry. */
	{
		struct jwt_claims c1 = claims();
		strcpy(c1.sub, "admin");
		char *t1 = sign(d.k, &c1);
		struct buf s = { 0 };
		buf_append(&s, tok, (size_t)(d1 - tok));
		buf_append(&s, strchr(t1, '.'), (size_t)(strrchr(t1, '.') - strchr(t1, '.')));
		buf_puts(&s, d2);
		assert_int_equal(verify(d.k, s.data, "signature does not verify"), -1);
		free(t1);
		buf_free(&s);
	}
	/* Every single character of the token changed to another of the
	 * alphabet: always refused (canonical base64 included). */
	const char *alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	char *m = strdup(tok);
	for (size_t i = 0; i < n; i++) {
		if (tok[i] == '.')
			continue;
		for (const char *a = alpha; a < alpha + 64; a += 7) {
			if (*a == tok[i])
				continue;
			m[i] = *a;
			struct jwt_claims c;
			struct buf err = { 0 };
			if (jwt_verify(d.k, m, n, c0.iss, c0.aud, c0.typ, NOW, &c, &err) == 0)
				fail_msg("token with byte %zu changed to '%c' verified", i, *a);
			buf_free(&err);
		}
		m[i] = tok[i];
	}
	/* The last signature character with only its unused bits changed:
	 * same bytes, not the canonical encoding. */
	{
		const char *b = strchr(alpha, tok[n - 1]);
		m[n - 1] = alpha[(b - alpha) ^ 1]; /* 64 bytes = 86 chars: 4 unused bits */
		assert_int_equal(verify(d.k, m, "signature is not"), -1);
		m[n - 1] = tok[n - 1];
	}
	free(m);
	/* Signature of another key pair. */
	char *ot = sign(other.k, &c0);
	assert_int_equal(verify(d.k, ot, "signature does not verify"), -1);
	assert_int_equal(verify(other.k, ot, NULL), 0);
	free(ot);
	/* Signature cut, padded, empty, longer. */
	t = strndup(tok, n - 1);
	assert_int_equal(verify(d.k, t, "signature is not"), -1);
	free(t);
	struct buf s = { 0 };
	buf_printf(&s, "%s==", tok);
	assert_int_equal(verify(d.k, s.data, "signature is not"), -1);
	buf_reset(&s);
	buf_append(&s, tok, (size_t)(d2 - tok) + 1);
	assert_int_equal(verify(d.k, s.data, "signature is not"), -1);
	buf_reset(&s);
	buf_printf(&s, "%sAAAA", tok);
	assert_int_equal(verify(d.k, s.data, "signature is not"), -1);
	/* Two or four parts. */
	buf_reset(&s);
	buf_append(&s, tok, (size_t)(d2 - tok));
	assert_int_equal(verify(d.k, s.data, "three"), -1);
	buf_reset(&s);
	buf_printf(&s, "%s.", tok);
	assert_int_equal(verify(d.k, s.data, "three"), -1);
	buf_reset(&s);
	buf_printf(&s, "%s.%s", tok, d2 + 1);
	assert_int_equal(verify(d.k, s.data, "three"), -1);
	buf_reset(&s);
	buf_printf(&s, "..");
	assert_int_equal(verify(d.k, s.data, "header is not"), -1);
	/* Bad base64: padding, the standard alphabet, a space, a NUL. */
	buf_reset(&s);
	buf_printf(&s, "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9=%s", d1);
	assert_int_equal(verify(d.k, s.data, "header is not"), -1);
	buf_reset(&s);
	buf_printf(&s, "%s", tok);
	s.data[d1 - tok + 3] = '+';
	assert_int_equal(verify(d.k, s.data, "signature does not verify"), -1);
	s.data[d1 - tok + 3] = ' ';
	assert_int_equal(verify(d.k, s.data, "signature does not verify"), -1);
	s.data[d1 - tok + 3] = tok[d1 - tok + 3];
	assert_int_equal(verify(d.k, s.data, NULL), 0);
	/* Signed, but the claims' base64 is not: padded, not canonical. */
	{
		char *h = b64url(HDR, strlen(HDR)), *p = b64url(CLAIMS, strlen(CLAIMS));
		struct buf pp = { 0 };
		buf_printf(&pp, "%s=", p);
		char *f = forge_raw(h, pp.data, d.priv);
		assert_int_equal(verify(d.k, f, "claims are not"), -1);
		free(f);
		free(p);
		char odd[] = "{\"a\":1}"; /* 8 bytes: 11 chars, 2 unused bits */
		p = b64url(odd, strlen(odd));
		const char *b = strchr(alpha, p[strlen(p) - 1]);
		p[strlen(p) - 1] = alpha[(b - alpha) ^ 1];
		f = forge_raw(h, p, d.priv);
		assert_int_equal(verify(d.k, f, "claims are not"), -1);
		free(f);
		free(h);
		free(p);
		buf_free(&pp);
	}
	s.data[5] = '\0';
	assert_int_equal(verify_at(d.k, s.data, n, NOW, "header is not"), -1);
	/* Oversize, empty, NULL. */
	buf_reset(&s);
	buf_puts(&s, tok);
	while (s.len <= JWT_MAX_LEN)
		buf_putc(&s, 'A');
	assert_int_equal(verify(d.k, s.data, "longer than 4096"), -1);
	assert_int_equal(verify(d.k, "", "missing"), -1);
	assert_int_equal(verify_at(d.k, NULL, 0, NOW, "missing"), -1);
	buf_free(&s);
	free(tok);
	keydir_free(&d);
	keydir_free(&other);
}

static void test_jwt_claims_checked(void **state)
{
	(void)state;
	struct keydir d;
	keydir_make(&d);
	struct jwt_claims c = claims();
	char *t = sign(d.k, &c);
	/* Expired: at exp and after; fine a second before. */
	assert_int_equal(verify_at(d.k, t, strlen(t), c.exp - 1, NULL), 0);
	assert_int_equal(verify_at(d.k, t, strlen(t), c.exp, "expired"), -1);
	assert_int_equal(verify_at(d.k, t, strlen(t), c.exp + 3600, "expired"), -1);
	/* iat in the future: tolerated up to the leeway. */
	assert_int_equal(verify_at(d.k, t, strlen(t), c.iat - JWT_LEEWAY_S, NULL), 0);
	assert_int_equal(verify_at(d.k, t, strlen(t), c.iat - JWT_LEEWAY_S - 1, "issued in the future"), -1);
	free(t);
	/* Wrong audience, issuer, type. */
	struct jwt_claims w = claims();
	strcpy(w.aud, "grafana");
	t = sign(d.k, &w);
	assert_int_equal(verify(d.k, t, "wrong audience"), -1);
	free(t);
	w = claims();
	strcpy(w.iss, "https://ember.example:8081");
	t = sign(d.k, &w);
	assert_int_equal(verify(d.k, t, "wrong issuer"), -1);
	free(t);
	w = claims();
	strcpy(w.typ, "refresh");
	t = sign(d.k, &w);
	assert_int_equal(verify(d.k, t, "wrong type"), -1);
	struct jwt_claims got;
	struct buf err = { 0 };
	assert_int_equal(jwt_verify(d.k, t, strlen(t), w.iss, w.aud, "refresh", NOW, &got, &err), 0);
	assert_string_equal(got.typ, "refresh");
	free(t);
	/* Claims signed with the right key but malformed. */
	static const struct {
		const char *claims, *why;
	} bad[] = {
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"iat\":1799999990,\"exp\":1800000290}",
		  "claims lack" }, /* no jti */
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":[\"ember\"],\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290}",
		  "claims lack" }, /* aud as an array */
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290.5}",
		  "claims lack" }, /* exp not an integer */
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290}",
		  "claims lack" }, /* empty sub */
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u\\u0000x\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290}",
		  "claims are not" }, /* NUL inside */
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290,\"exp\":1900000000}",
		  "claims are not" }, /* duplicate */
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290,\"nbf\":1800000100}",
		  "not valid yet" },
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290,\"nbf\":\"now\"}",
		  "nbf" },
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1800000020,\"exp\":1800000010}",
		  "expires before" },
		{ "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"0123456789012345678901234567890123456789012345678901234567890123\","
		  "\"iat\":1799999990,\"exp\":1800000290}",
		  "claims lack" }, /* jti of 64 bytes does not fit */
		{ "[1,2]", "claims are not" },
		{ "{\"iss\":", "claims are not" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		t = forge(HDR, bad[i].claims, d.priv);
		verify(d.k, t, bad[i].why);
		assert_int_equal(verify(d.k, t, bad[i].why), -1);
		free(t);
	}
	/* Unknown claims are ignored; nbf in the past is fine. */
	t = forge(HDR,
		  "{\"iss\":\"https://ember.example:8080\",\"sub\":\"u1\",\"aud\":\"ember\",\"typ\":\"access\","
		  "\"jti\":\"t1\",\"iat\":1799999990,\"exp\":1800000290,\"nbf\":1799999990,\"x\":{}}",
		  d.priv);
	assert_int_equal(verify(d.k, t, NULL), 0);
	free(t);
	buf_free(&err);
	keydir_free(&d);
}

static void test_jwt_keys(void **state)
{
	(void)state;
	struct keydir d;
	keydir_make(&d);
	struct stat st;
	assert_int_equal(stat(d.priv, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(stat(d.pub, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	char *pem;
	size_t len;
	assert_int_equal(read_file(d.priv, 4096, &pem, &len), 0);
	assert_non_null(strstr(pem, "-----BEGIN PRIVATE KEY-----"));
	free(pem);
	assert_int_equal(read_file(d.pub, 4096, &pem, &len), 0);
	assert_non_null(strstr(pem, "-----BEGIN PUBLIC KEY-----"));
	free(pem);
	/* No temporary file left behind. */
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) = 2", d.dir);
	assert_int_equal(system(cmd), 0);
	/* A second load reads the same pair (no new one): a token of the
	 * first verifies with the second, both ways. */
	struct jwt_keys *k2;
	struct buf err = { 0 };
	assert_int_equal(jwt_keys_load(d.priv, d.pub, false, &k2, &err), 0);
	struct jwt_claims c = claims();
	char *t = sign(d.k, &c);
	assert_int_equal(verify(k2, t, NULL), 0);
	free(t);
	t = sign(k2, &c);
	assert_int_equal(verify(d.k, t, NULL), 0);
	free(t);
	jwt_keys_free(k2);
	assert_int_equal(jwt_keys_load(d.priv, d.pub, true, &k2, &err), 0);
	jwt_keys_free(k2);

	/* Keys made by openssl genpkey load too. */
	char p2[600], q2[600];
	snprintf(p2, sizeof(p2), "%s/o.key", d.dir);
	snprintf(q2, sizeof(q2), "%s/o.pub", d.dir);
	snprintf(cmd, sizeof(cmd), "openssl genpkey -algorithm ED25519 -out '%s' 2>/dev/null && openssl pkey -in '%s' -pubout -out '%s'",
		 p2, p2, q2);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(jwt_keys_load(p2, q2, false, &k2, &err), 0);
	jwt_keys_free(k2);

	/* One of the pair missing: an error naming it, nothing written. */
	struct jwt_keys *k3 = (struct jwt_keys *)&err;
	char missing[600];
	snprintf(missing, sizeof(missing), "%s/none.pub", d.dir);
	assert_int_equal(jwt_keys_load(d.priv, missing, true, &k3, &err), -1);
	assert_null(k3);
	assert_non_null(strstr(err.data, missing));
	assert_non_null(strstr(err.data, "does not"));
	assert_int_equal(access(missing, F_OK), -1);
	buf_reset(&err);
	snprintf(missing, sizeof(missing), "%s/none.key", d.dir);
	assert_int_equal(jwt_keys_load(missing, d.pub, true, &k3, &err), -1);
	assert_non_null(strstr(err.data, missing));
	assert_int_equal(access(missing, F_OK), -1);
	buf_reset(&err);
	/* Both missing, generation off. */
	char q3[600];
	snprintf(q3, sizeof(q3), "%s/none.pub", d.dir);
	assert_int_equal(jwt_keys_load(missing, q3, false, &k3, &err), -1);
	assert_non_null(strstr(err.data, "neither"));
	buf_reset(&err);
	/* The directory must exist. */
	char p4[600], q4[600];
	snprintf(p4, sizeof(p4), "%s/no/such/dir/jwt.key", d.dir);
	snprintf(q4, sizeof(q4), "%s/no/such/dir/jwt.pub", d.dir);
	assert_int_equal(jwt_keys_load(p4, q4, true, &k3, &err), -1);
	assert_non_null(strstr(err.data, "directory does not exist"));
	buf_reset(&err);
	/* A pair that does not belong together. */
	assert_int_equal(jwt_keys_load(d.priv, q2, false, &k3, &err), -1);
	assert_non_null(strstr(err.data, "is not the one of the private key"));
	buf_reset(&err);
	/* Not PEM, not Ed25519, swapped, encrypted. */
	char junk[600];
	snprintf(junk, sizeof(junk), "%s/junk", d.dir);
	write_text(junk, "hello\n");
	assert_int_equal(jwt_keys_load(junk, d.pub, false, &k3, &err), -1);
	assert_non_null(strstr(err.data, "holds no"));
	buf_reset(&err);
	assert_int_equal(jwt_keys_load(d.pub, d.priv, false, &k3, &err), -1);
	assert_non_null(strstr(err.data, "holds no"));
	buf_reset(&err);
	char ec[600];
	snprintf(ec, sizeof(ec), "%s/ec.key", d.dir);
	snprintf(cmd, sizeof(cmd),
		 "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '%s' 2>/dev/null", ec);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(jwt_keys_load(ec, d.pub, false, &k3, &err), -1);
	assert_non_null(strstr(err.data, "not an Ed25519 one"));
	buf_reset(&err);
	snprintf(cmd, sizeof(cmd),
		 "openssl pkey -in '%s' -aes256 -passout pass:secret -out '%s.enc' 2>/dev/null", d.priv, d.priv);
	assert_int_equal(system(cmd), 0);
	snprintf(ec, sizeof(ec), "%s.enc", d.priv);
	assert_int_equal(jwt_keys_load(ec, d.pub, false, &k3, &err), -1);
	assert_non_null(strstr(err.data, "holds no unencrypted"));
	buf_reset(&err);
	assert_int_equal(jwt_keys_load(NULL, d.pub, false, &k3, &err), -1);
	buf_free(&err);
	keydir_free(&d);
}

/* Threads share one loaded pair: signing and verifying at once all
 * succeed, and a token signed on one thread verifies on another. */
struct jwt_thread {
	const struct jwt_keys *k;
	const char *peer_token;
	int ok;
};

static void *jwt_thread_run(void *arg)
{
	struct jwt_thread *t = arg;
	struct jwt_claims c = claims(), back;
	for (int i = 0; i < 100; i++) {
		struct buf tok = { 0 }, err = { 0 };
		c.iat = NOW - i;
		if (jwt_sign(t->k, &c, &tok, &err) == 0 &&
		    jwt_verify(t->k, tok.data, tok.len, c.iss, c.aud, c.typ, NOW, &back, &err) == 0 &&
		    back.iat == c.iat &&
		    jwt_verify(t->k, t->peer_token, strlen(t->peer_token), c.iss, c.aud, c.typ, NOW, &back, &err) == 0)
			t->ok++;
		buf_free(&tok);
		buf_free(&err);
	}
	return NULL;
}

static void test_jwt_threads(void **state)
{
	(void)state;
	struct keydir d;
	keydir_make(&d);
	struct jwt_claims c = claims();
	char *peer = sign(d.k, &c);
	struct jwt_thread t[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		t[i] = (struct jwt_thread){ .k = d.k, .peer_token = peer };
		assert_int_equal(pthread_create(&th[i], NULL, jwt_thread_run, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(t[i].ok, 100);
	}
	free(peer);
	keydir_free(&d);
}

/* --- passwords ------------------------------------------------------------- */

static void test_password(void **state)
{
	(void)state;
	char h[PASSWORD_HASH_MAX], h2[PASSWORD_HASH_MAX];
	struct buf err = { 0 };
	assert_int_equal(password_hash("correct horse battery staple", h, &err), 0);
	assert_int_equal(strncmp(h, "$argon2id$v=19$m=65536,t=2,p=1$", 31), 0);
	assert_true(password_verify(h, "correct horse battery staple"));
	assert_false(password_verify(h, "correct horse battery stapl"));
	assert_false(password_verify(h, "Correct horse battery staple"));
	assert_false(password_verify(h, ""));
	assert_false(password_verify(h, NULL));
	/* Salted: the same password hashes differently, both verify. */
	assert_int_equal(password_hash("correct horse battery staple", h2, &err), 0);
	assert_string_not_equal(h, h2);
	assert_true(password_verify(h2, "correct horse battery staple"));
	/* Empty and too long. */
	assert_int_equal(password_hash("", h2, &err), -1);
	assert_non_null(strstr(err.data, "empty"));
	buf_reset(&err);
	char *lng = malloc(PASSWORD_MAX_LEN + 2);
	memset(lng, 'p', PASSWORD_MAX_LEN + 1);
	lng[PASSWORD_MAX_LEN + 1] = '\0';
	assert_int_equal(password_hash(lng, h2, &err), -1);
	assert_non_null(strstr(err.data, "longer than 1024"));
	assert_false(password_verify(h, lng));
	lng[PASSWORD_MAX_LEN] = '\0'; /* 1024 bytes: fine */
	assert_int_equal(password_hash(lng, h2, &err), 0);
	assert_true(password_verify(h2, lng));
	lng[PASSWORD_MAX_LEN - 1] = 'q';
	assert_false(password_verify(h2, lng));
	free(lng);
	/* Malformed hashes. */
	assert_false(password_verify("", "x"));
	assert_false(password_verify(NULL, "x"));
	assert_false(password_verify("$argon2id$v=19$m=65536,t=2,p=1$bad", "x"));
	assert_false(password_verify("$2y$10$abcdefghijklmnopqrstuuJ0W6ah3Q1fW0G6rJYq2Vx6JqLqG6Uxa", "x"));
	char edited[PASSWORD_HASH_MAX];
	strcpy(edited, h);
	edited[strlen(edited) - 2] ^= 1;
	assert_false(password_verify(edited, "correct horse battery staple"));
	char unterminated[PASSWORD_HASH_MAX + 8];
	memset(unterminated, 'a', sizeof(unterminated) - 1);
	memcpy(unterminated, h, strlen(h));
	unterminated[sizeof(unterminated) - 1] = '\0';
	assert_false(password_verify(unterminated, "correct horse battery staple"));
	/* The dummy hash: made once, valid, matches nothing we try. */
	const char *dh = password_dummy_hash();
	assert_non_null(dh);
	assert_ptr_equal(password_dummy_hash(), dh);
	assert_int_equal(strncmp(dh, "$argon2id$", 10), 0);
	assert_false(password_verify(dh, "correct horse battery staple"));
	assert_false(password_verify(dh, "password"));
	/* The same cost as a real one: the same parameters, up to the salt. */
	assert_int_equal(strncmp(dh, h, 31), 0);
	buf_free(&err);
}

/* --- cookies ----------------------------------------------------------------- */

static int get(const char *header, const char *name, char *out, size_t outsz)
{
	memset(out, 0x5a, outsz);
	return cookie_get(header, name, out, outsz);
}

/* cookie_get finds name in header: value, and its length returned. */
static void expect_cookie(const char *header, const char *name, const char *value)
{
	char v[64];
	int n = get(header, name, v, sizeof(v));
	v[sizeof(v) - 1] = '\0';
	if (n != (int)strlen(value) || strcmp(v, value) != 0)
		fail_msg("cookie %s in \"%.80s\": got %d \"%s\", want \"%s\"", name, header, n,
			 n >= 0 ? v : "", value);
}

/* cookie_get does not find name in header. */
static void expect_no_cookie(const char *header, const char *name)
{
	char v[64];
	int n = get(header, name, v, sizeof(v));
	if (n != -1)
		fail_msg("cookie %s in \"%.80s\": got %d, want none", name, header, n);
}

static void test_cookie_get(void **state)
{
	(void)state;
	char v[64];
	expect_cookie("ember_access=abc; ember_refresh=def", "ember_access", "abc");
	expect_cookie("ember_access=abc; ember_refresh=def", "ember_refresh", "def");
	/* No spaces, tabs, spaces around '='. */
	expect_cookie("a=1;ember_access=xyz;b=2", "ember_access", "xyz");
	expect_cookie("a=1;\t ember_access = xyz \t;b=2", "ember_access", "xyz");
	/* Quotes removed; a lone quote kept. */
	expect_cookie("ember_access=\"q.v\"", "ember_access", "q.v");
	expect_cookie("ember_access=\"", "ember_access", "\"");
	expect_cookie("ember_access=\"\"", "ember_access", "");
	/* Empty value. */
	expect_cookie("ember_access=; b=2", "ember_access", "");
	/* Duplicates: the first. */
	expect_cookie("ember_access=first; ember_access=second", "ember_access", "first");
	/* Names that contain or end with the name are other cookies. */
	expect_cookie("xember_access=evil; ember_access=good", "ember_access", "good");
	expect_no_cookie("xember_access=evil", "ember_access");
	expect_no_cookie("ember_access_x=evil", "ember_access");
	expect_no_cookie("ember_accessx=evil; a=ember_access=1", "ember_access");
	expect_no_cookie("a=1; b", "b"); /* no '=' */
	/* Absent, empty, NULL. */
	expect_no_cookie("a=1; b=2", "ember_access");
	expect_no_cookie("", "ember_access");
	assert_int_equal(cookie_get(NULL, "ember_access", v, sizeof(v)), -1);
	assert_int_equal(cookie_get("a=1", "", v, sizeof(v)), -1);
	assert_int_equal(cookie_get("a=1", "a", v, 0), -1);
	/* Too long for out: not returned, not truncated; exactly fitting is. */
	assert_int_equal(get("a=12345678", "a", v, 8), -1);
	assert_int_equal(get("a=1234567", "a", v, 8), 7);
	assert_string_equal(v, "1234567");
	assert_int_equal(get("a=12345678; a=1", "a", v, 8), -1); /* the first counts */
	/* The header limit: a pair whole before it is read, the one it cuts
	 * and anything after are not. */
	char *h = malloc(COOKIE_MAX_HEADER + 100);
	memset(h, 'x', COOKIE_MAX_HEADER + 99);
	h[COOKIE_MAX_HEADER + 99] = '\0';
	memcpy(h, "a=1; pad=", 9);
	expect_cookie(h, "a", "1");
	expect_no_cookie(h, "pad");
	memcpy(h + COOKIE_MAX_HEADER + 10, "; b=2", 5);
	expect_no_cookie(h, "b");
	memset(h, 'x', COOKIE_MAX_HEADER + 99);
	memcpy(h + COOKIE_MAX_HEADER - 10, "; c=1234", 8);
	expect_no_cookie(h, "c"); /* runs past the limit */
	memcpy(h + COOKIE_MAX_HEADER - 10, "; c=12;xx", 9);
	expect_cookie(h, "c", "12");
	free(h);
}

static void test_cookie_set(void **state)
{
	(void)state;
	struct buf b = { 0 };
	struct cookie_attrs a = { .max_age = 300, .http_only = true, .secure = true };
	assert_int_equal(cookie_set(&b, "ember_access", "eyJ.abc_-.x", &a), 0);
	assert_string_equal(b.data, "ember_access=eyJ.abc_-.x; Path=/; Max-Age=300; SameSite=Lax; HttpOnly; Secure");
	buf_reset(&b);
	struct cookie_attrs del = { .path = "/api/v1/auth", .same_site = "Strict" };
	assert_int_equal(cookie_set(&b, "ember_refresh", "", &del), 0);
	assert_string_equal(b.data, "ember_refresh=; Path=/api/v1/auth; Max-Age=0; SameSite=Strict");
	/* Appends. */
	assert_int_equal(cookie_set(&b, "x", "1", &a), 0);
	assert_non_null(strstr(b.data, "SameSite=Strictx=1; Path=/"));
	buf_reset(&b);
	struct cookie_attrs none = { .same_site = "None", .secure = true, .max_age = 1 };
	assert_int_equal(cookie_set(&b, "x", "1", &none), 0);
	assert_string_equal(b.data, "x=1; Path=/; Max-Age=1; SameSite=None; Secure");
	buf_reset(&b);
	/* Refused, with out unchanged. */
	const char *bad_values[] = { "a b", "a\"b", "a;b", "a,b", "a\\b", "a\nb", "\x7f", "\xc3\xa9" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_values); i++)
		assert_int_equal(cookie_set(&b, "x", bad_values[i], &a), -1);
	const char *bad_names[] = { "", "a b", "a=b", "a;b", "a:b", "a\"", "a\tb", "\xc3\xa9" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_names); i++)
		assert_int_equal(cookie_set(&b, bad_names[i], "1", &a), -1);
	assert_int_equal(cookie_set(&b, NULL, "1", &a), -1);
	assert_int_equal(cookie_set(&b, "x", NULL, &a), -1);
	assert_int_equal(cookie_set(&b, "x", "1", NULL), -1);
	struct cookie_attrs t = a;
	t.same_site = "lax";
	assert_int_equal(cookie_set(&b, "x", "1", &t), -1);
	t = a;
	t.path = "/a;Domain=evil.example";
	assert_int_equal(cookie_set(&b, "x", "1", &t), -1);
	t.path = "api";
	assert_int_equal(cookie_set(&b, "x", "1", &t), -1);
	t = a;
	t.max_age = -1;
	assert_int_equal(cookie_set(&b, "x", "1", &t), -1);
	t = none;
	t.secure = false;
	assert_int_equal(cookie_set(&b, "x", "1", &t), -1);
	t = a;
	t.secure = false;
	assert_int_equal(cookie_set(&b, "__Secure-x", "1", &t), -1);
	assert_int_equal(cookie_set(&b, "__Host-x", "1", &t), -1);
	t.secure = true;
	t.path = "/api";
	assert_int_equal(cookie_set(&b, "__Host-x", "1", &t), -1);
	t.path = NULL;
	char *big = malloc(COOKIE_MAX_PAIR + 1);
	memset(big, 'v', COOKIE_MAX_PAIR);
	big[COOKIE_MAX_PAIR] = '\0';
	assert_int_equal(cookie_set(&b, "x", big, &t), -1); /* 4097 bytes */
	assert_int_equal(b.len, 0);
	assert_int_equal(cookie_set(&b, "x", big + 1, &t), 0);
	free(big);
	assert_int_equal(cookie_set(&b, "__Host-x", "1", &t), 0);
	/* What cookie_set writes, cookie_get reads back. */
	buf_reset(&b);
	assert_int_equal(cookie_set(&b, "ember_access", "v.1-_~!", &a), 0);
	char v[32];
	assert_int_equal(cookie_get(b.data, "ember_access", v, sizeof(v)), 7);
	assert_string_equal(v, "v.1-_~!");
	buf_free(&b);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(test_perm_match_table),
	cmocka_unit_test(test_perm_check_pattern),
	cmocka_unit_test(test_perm_catalogue),
	cmocka_unit_test(test_jwt_round_trip),
	cmocka_unit_test(test_jwt_tampering),
	cmocka_unit_test(test_jwt_claims_checked),
	cmocka_unit_test(test_jwt_keys),
	cmocka_unit_test(test_jwt_threads),
	cmocka_unit_test(test_password),
	cmocka_unit_test(test_cookie_get),
	cmocka_unit_test(test_cookie_set))
