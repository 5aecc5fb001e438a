/* fuzz_jws.h - what the token fuzz targets (fuzz_jwt.c, fuzz_oidc.c) share:
 * a JWS signature with an Ed25519 key over the header and payload built so
 * far, so a mutated payload still reaches the claim checks. */
#ifndef EMBER_FUZZ_JWS_H
#define EMBER_FUZZ_JWS_H

#include <stdint.h>
#include <stdlib.h>

#include <openssl/evp.h>

#include "buf.h"
#include "server/auth/b64url.h"

/* Appends "." and the base64url signature of t's bytes by key (Ed25519)
 * to t; aborts when OpenSSL cannot sign. */
static inline void fuzz_jws_sign(EVP_PKEY *key, struct buf *t)
{
	uint8_t sig[64];
	size_t n = sizeof(sig);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) != 1 ||
	    EVP_DigestSign(ctx, sig, &n, (const uint8_t *)t->data, t->len) != 1)
		abort();
	EVP_MD_CTX_free(ctx);
	buf_putc(t, '.');
	b64url_encode(sig, n, t);
}

#endif
