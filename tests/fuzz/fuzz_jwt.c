/* Fuzz target: ember's JWTs (server/auth/jwt.c), with one Ed25519 pair
 * generated at start. The first byte picks what the rest is:
 *   'S': claims (fields split at NUL bytes: sub, jti, iss, aud, typ, then
 *        iat and exp from the bytes after); when jwt_sign accepts them the
 *        token must verify to the same claims, and with any one byte
 *        changed (position and value from the input) must not;
 *   'F': a header and claims JSON split at the first NUL, encoded and
 *        signed with the pair's private key, so the header and claim
 *        checks behind the signature are reached;
 *   else: the bytes are the token itself.
 * Whatever jwt_verify refuses must come with a reason and zeroed claims. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "fuzz_jws.h"
#include "server/auth/b64url.h"
#include "server/auth/jwt.h"

#define ISS "https://ember.example"
#define AUD "ember"
#define TYP "access"
#define NOW 1800000000

/* Made once for the whole run (keys are read-only once loaded). */
static struct jwt_keys *keys;
static EVP_PKEY *priv;

static void setup(void)
{
	char dir[] = "/tmp/ember-fuzz-jwt-XXXXXX";
	if (!mkdtemp(dir))
		abort();
	char p[64], q[64];
	snprintf(p, sizeof(p), "%s/k", dir);
	snprintf(q, sizeof(q), "%s/p", dir);
	struct buf err = { 0 };
	if (jwt_keys_load(p, q, true, &keys, &err) < 0)
		abort();
	FILE *f = fopen(p, "r");
	if (!f || !(priv = PEM_read_PrivateKey(f, NULL, NULL, NULL)))
		abort();
	fclose(f);
	unlink(p);
	unlink(q);
	rmdir(dir);
	buf_free(&err);
}

static void check(const char *tok, size_t len, struct jwt_claims *c, int want)
{
	struct buf err = { 0 };
	static const struct jwt_claims zero;
	int rc = jwt_verify(keys, tok, len, ISS, AUD, TYP, NOW, c, &err);
	if (want != 2 && rc != want)
		abort();
	if (rc < 0 && (err.len == 0 || memcmp(c, &zero, sizeof(*c)) != 0))
		abort();
	/* Accepted: exactly the claims asked for, and a live token. */
	if (rc == 0 && (err.len != 0 || !c->sub[0] || !c->jti[0] || strcmp(c->iss, ISS) != 0 ||
			strcmp(c->aud, AUD) != 0 || strcmp(c->typ, TYP) != 0 || c->exp <= NOW ||
			c->iat > NOW + JWT_LEEWAY_S || c->exp <= c->iat))
		abort();
	buf_free(&err);
}

static void sign_mode(const uint8_t *d, size_t n)
{
	struct jwt_claims c = { 0 }, back;
	char *fields[5] = { c.sub, c.jti, c.iss, c.aud, c.typ };
	size_t sizes[5] = { sizeof(c.sub), sizeof(c.jti), sizeof(c.iss), sizeof(c.aud), sizeof(c.typ) };
	size_t off = 0;
	for (int f = 0; f < 5; f++) {
		const uint8_t *z = memchr(d + off, 0, n - off);
		size_t len = z ? (size_t)(z - (d + off)) : n - off;
		memcpy(fields[f], d + off, len < sizes[f] ? len : sizes[f]); /* may be unterminated */
		off += len + (z ? 1 : 0);
	}
	uint8_t rest[18] = { 0 };
	memcpy(rest, d + off, n - off < sizeof(rest) ? n - off : sizeof(rest));
	c.iat = NOW - (int64_t)(rest[0] | rest[1] << 8);
	c.exp = NOW + (int64_t)(rest[2] | rest[3] << 8) - 1000;
	struct buf tok = { 0 }, err = { 0 };
	if (jwt_sign(keys, &c, &tok, &err) < 0) {
		if (err.len == 0 || tok.len != 0)
			abort();
		buf_free(&err);
		return;
	}
	struct buf e2 = { 0 };
	int rc = jwt_verify(keys, tok.data, tok.len, c.iss, c.aud, c.typ, NOW, &back, &e2);
	if (c.exp > NOW && c.iat <= NOW + JWT_LEEWAY_S) {
		if (rc != 0 || memcmp(&back, &c, sizeof(c)) != 0)
			abort(); /* the round trip */
	} else if (rc == 0) {
		abort();
	}
	/* One byte changed: refused. */
	size_t pos = (size_t)(rest[4] | rest[5] << 8) % tok.len;
	uint8_t x = rest[6] ? rest[6] : 1;
	tok.data[pos] ^= x;
	check(tok.data, tok.len, &back, -1);
	buf_free(&e2);
	buf_free(&tok);
}

static void forge_mode(const uint8_t *d, size_t n)
{
	const uint8_t *z = memchr(d, 0, n);
	size_t hn = z ? (size_t)(z - d) : n;
	struct buf t = { 0 };
	b64url_encode(d, hn, &t);
	buf_putc(&t, '.');
	if (z)
		b64url_encode(z + 1, n - hn - 1, &t);
	fuzz_jws_sign(priv, &t);
	struct jwt_claims c;
	check(t.data, t.len, &c, 2);
	buf_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!keys)
		setup();
	if (size > 2 * JWT_MAX_LEN)
		return 0;
	if (size > 0 && data[0] == 'S') {
		sign_mode(data + 1, size - 1);
	} else if (size > 0 && data[0] == 'F') {
		forge_mode(data + 1, size - 1);
	} else {
		struct jwt_claims c;
		check((const char *)data, size, &c, -1);
	}
	return 0;
}
