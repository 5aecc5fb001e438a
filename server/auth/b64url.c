/* b64url.c - see b64url.h. OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock do
 * the work; this maps the alphabet and the padding. */
#include "b64url.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "util.h"

void b64url_encode(const uint8_t *in, size_t n, struct buf *out)
{
	size_t cap = 4 * ((n + 2) / 3) + 1;
	unsigned char *t = xmalloc(cap);
	int m = EVP_EncodeBlock(t, in, (int)n);
	while (m > 0 && t[m - 1] == '=')
		m--;
	for (int i = 0; i < m; i++)
		t[i] = t[i] == '+' ? '-' : t[i] == '/' ? '_' : t[i];
	buf_append(out, t, (size_t)m);
	free(t);
}

int b64url_decode(const char *s, size_t n, enum b64url_mode mode, uint8_t *out, size_t outsz,
		  size_t *outlen)
{
	if (mode == B64URL_PADDED)
		while (n && s[n - 1] == '=')
			n--;
	if (n % 4 == 1 || n > B64URL_MAX_INPUT || (n / 4) * 3 > outsz + 3)
		return -1;
	size_t pad = (4 - n % 4) % 4, padded = n + pad;
	unsigned char *std = xmalloc(padded + 1), *dec = xmalloc(padded / 4 * 3 + 1);
	int rc = -1;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
			std[i] = c;
		else if (c == '-')
			std[i] = '+';
		else if (c == '_')
			std[i] = '/';
		else
			goto out;
	}
	for (size_t i = n; i < padded; i++)
		std[i] = '=';
	int m = padded ? EVP_DecodeBlock(dec, std, (int)padded) : 0;
	if (m < 0 || (size_t)m < pad)
		goto out;
	size_t len = (size_t)m - pad;
	if (len > outsz)
		goto out;
	if (mode == B64URL_STRICT && len) {
		/* Canonical: encoding the bytes again gives the same characters. */
		unsigned char *again = xmalloc(padded + 1);
		int k = EVP_EncodeBlock(again, dec, (int)len);
		bool same = k == (int)padded && memcmp(again, std, n) == 0;
		free(again);
		if (!same)
			goto out;
	}
	memcpy(out, dec, len);
	*outlen = len;
	rc = 0;
out:
	free_all(std, dec);
	return rc;
}
