/* auth_bench - what authentication costs a request: perm_match (ns per
 * call, and per decision: a role of ten patterns checked against one of
 * the catalogue's permissions, stopping at the first grant, as a route
 * check does), jwt_verify and jwt_sign (µs per token, an access token's
 * claims), and password_verify / password_hash (ms, Argon2id at the
 * interactive limits: what a login costs). The thread's CPU time, so that
 * other work on a shared host does not count.
 *
 * usage: auth_bench [ROUNDS] (default 200000 decision rounds; the token
 *        loops run ROUNDS / 10 times, the password ones 20 times) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "bench/benchutil.h"
#include "server/auth/jwt.h"
#include "server/auth/password.h"
#include "server/auth/perm.h"
#include "util.h"

/* A role with what an editor-like role holds: literals, one-level and
 * many-level wildcards, and several that match nothing in the catalogue,
 * so a denied decision tries all ten. */
static const char *const role[] = {
	"project:*",	   "service:token:*",	   "admin:user:read",	  "admin:role:read", "admin:audit:read",
	"ingest:**",	   "symbols:global:write", "**:nothing:**",	  "cluster:*:read",  "auth:local:login",
};

static volatile long sink;

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 200000;
	if (rounds < 10) {
		fprintf(stderr, "usage: auth_bench [ROUNDS]\n");
		return 1;
	}
	size_t ncat = 0;
	while (perm_catalogue[ncat])
		ncat++;
	const size_t nrole = sizeof(role) / sizeof(role[0]);

	/* perm_match: every pattern of the role against every permission. */
	long calls = 0, granted = 0;
	uint64_t t0 = now_thread_cpu_ns();
	for (long r = 0; r < rounds / (long)ncat + 1; r++)
		for (size_t i = 0; i < ncat; i++)
			for (size_t j = 0; j < nrole; j++) {
				granted += perm_match(role[j], perm_catalogue[i]);
				calls++;
			}
	double match_ns = (double)(now_thread_cpu_ns() - t0) / (double)calls;
	sink = granted;
	/* A decision: the role against one permission, first grant wins. */
	long decisions = 0, allowed = 0;
	t0 = now_thread_cpu_ns();
	for (long r = 0; r < rounds / (long)ncat + 1; r++)
		for (size_t i = 0; i < ncat; i++) {
			bool ok = false;
			for (size_t j = 0; j < nrole && !ok; j++)
				ok = perm_match(role[j], perm_catalogue[i]);
			allowed += ok;
			decisions++;
		}
	double decision_ns = (double)(now_thread_cpu_ns() - t0) / (double)decisions;
	printf("perm_match: %.0f ns per call (%zu patterns x %zu permissions); %.0f ns per decision "
	       "(a ten-pattern role, %ld of %zu permissions granted)\n",
	       match_ns, nrole, ncat, decision_ns, allowed / (decisions / (long)ncat), ncat);

	/* Tokens. */
	char dir[] = "/tmp/ember-authbench-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char priv[64], pub[64];
	snprintf(priv, sizeof(priv), "%s/jwt.key", dir);
	snprintf(pub, sizeof(pub), "%s/jwt.pub", dir);
	struct jwt_keys *k;
	struct buf err = { 0 }, tok = { 0 };
	if (jwt_keys_load(priv, pub, true, &k, &err) < 0) {
		fprintf(stderr, "%s\n", err.data);
		return 1;
	}
	FILE *pf = fopen(pub, "r");
	EVP_PKEY *raw_pub = pf ? PEM_read_PUBKEY(pf, NULL, NULL, NULL) : NULL;
	if (pf)
		fclose(pf);
	if (!raw_pub)
		return 1;
	bench_rm_rf(dir);
	struct jwt_claims c = { .iat = 1800000000, .exp = 1800000300 }, back;
	strcpy(c.sub, "0b7c6d8e-1f2a-4b3c-8d4e-5f6a7b8c9d0e");
	strcpy(c.jti, "f0e1d2c3-b4a5-4968-8776-655443322110");
	strcpy(c.iss, "https://ember.example.com:8080");
	strcpy(c.aud, "ember");
	strcpy(c.typ, "access");
	long ntok = rounds / 10;
	t0 = now_thread_cpu_ns();
	for (long i = 0; i < ntok; i++) {
		buf_reset(&tok);
		if (jwt_sign(k, &c, &tok, &err) < 0)
			return 1;
	}
	double sign_us = (double)(now_thread_cpu_ns() - t0) / 1e3 / (double)ntok;
	t0 = now_thread_cpu_ns();
	for (long i = 0; i < ntok; i++)
		if (jwt_verify(k, tok.data, tok.len, c.iss, c.aud, c.typ, c.iat + 10, &back, &err) < 0) {
			fprintf(stderr, "%s\n", err.data);
			return 1;
		}
	double verify_us = (double)(now_thread_cpu_ns() - t0) / 1e3 / (double)ntok;
	/* OpenSSL's part alone: the same signature checked over the same
	 * bytes, a fresh context each time as jwt_verify does. */
	size_t signed_len = (size_t)(strrchr(tok.data, '.') - tok.data);
	uint8_t sig[64];
	{
		/* the signature's bytes, from base64url */
		const char *s64 = tok.data + signed_len + 1;
		char std[90];
		size_t n = strlen(s64);
		for (size_t i = 0; i < n; i++)
			std[i] = s64[i] == '-' ? '+' : s64[i] == '_' ? '/' : s64[i];
		std[n] = std[n + 1] = '=';
		uint8_t dec[70];
		if (n != 86 || EVP_DecodeBlock(dec, (unsigned char *)std, 88) != 66)
			return 1;
		memcpy(sig, dec, 64);
	}
	t0 = now_thread_cpu_ns();
	for (long i = 0; i < ntok; i++) {
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, raw_pub) != 1 ||
		    EVP_DigestVerify(ctx, sig, 64, (unsigned char *)tok.data, signed_len) != 1)
			return 1;
		EVP_MD_CTX_free(ctx);
	}
	double raw_us = (double)(now_thread_cpu_ns() - t0) / 1e3 / (double)ntok;
	EVP_PKEY_free(raw_pub);
	/* A refused one: a bad signature (the check a forged token reaches). */
	tok.data[tok.len - 2] = tok.data[tok.len - 2] == 'A' ? 'B' : 'A';
	t0 = now_thread_cpu_ns();
	for (long i = 0; i < ntok; i++) {
		buf_reset(&err);
		if (jwt_verify(k, tok.data, tok.len, c.iss, c.aud, c.typ, c.iat + 10, &back, &err) == 0)
			return 1;
	}
	double refuse_us = (double)(now_thread_cpu_ns() - t0) / 1e3 / (double)ntok;
	printf("jwt: %.1f us per jwt_sign, %.1f us per jwt_verify (a %zu-byte access token; OpenSSL's Ed25519 "
	       "check alone %.1f us), %.1f us to refuse a bad signature\n",
	       sign_us, verify_us, tok.len, raw_us, refuse_us);
	jwt_keys_free(k);

	/* Passwords. */
	char h[PASSWORD_HASH_MAX];
	const int npw = 20;
	t0 = now_thread_cpu_ns();
	for (int i = 0; i < npw; i++)
		if (password_hash("correct horse battery staple", h, &err) < 0)
			return 1;
	double hash_ms = (double)(now_thread_cpu_ns() - t0) / 1e6 / npw;
	t0 = now_thread_cpu_ns();
	for (int i = 0; i < npw; i++)
		sink += password_verify(h, "correct horse battery staple");
	double verify_ms = (double)(now_thread_cpu_ns() - t0) / 1e6 / npw;
	const char *dummy = password_dummy_hash();
	t0 = now_thread_cpu_ns();
	for (int i = 0; i < npw; i++)
		sink += password_verify(dummy, "correct horse battery staple");
	double dummy_ms = (double)(now_thread_cpu_ns() - t0) / 1e6 / npw;
	printf("password: %.1f ms per password_hash, %.1f ms per password_verify, %.1f ms against the dummy hash "
	       "(Argon2id, 64 MiB, t=2)\n",
	       hash_ms, verify_ms, dummy_ms);
	buf_free(&tok);
	buf_free(&err);
	return 0;
}
