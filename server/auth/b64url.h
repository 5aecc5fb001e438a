/* b64url.h - base64url (RFC 4648 §5), as JWS, JWKS and ember's tokens
 * write it: the URL alphabet ('-', '_'), no padding.
 *
 * b64url_encode appends the encoding of in[0..n) to out. b64url_decode
 * decodes s[0..n) into out (at most outsz bytes; -1 when more): with
 * B64URL_STRICT only the canonical form is accepted (no padding, the unused
 * low bits of the last character zero), so each byte string has exactly
 * one encoding and an edited character never decodes to the same bytes
 * (what a signature check wants); with B64URL_PADDED trailing '=' are
 * tolerated (some providers pad JWK members). Input longer than
 * B64URL_MAX_INPUT is refused. No state; thread-safe. */
#ifndef EMBER_SERVER_AUTH_B64URL_H
#define EMBER_SERVER_AUTH_B64URL_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define B64URL_MAX_INPUT (1u << 20)

enum b64url_mode { B64URL_STRICT, B64URL_PADDED };

void b64url_encode(const uint8_t *in, size_t n, struct buf *out);
int b64url_decode(const char *s, size_t n, enum b64url_mode mode, uint8_t *out, size_t outsz,
		  size_t *outlen);

#endif
