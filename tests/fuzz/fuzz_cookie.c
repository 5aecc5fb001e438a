/* Fuzz target: the Cookie header reader and the Set-Cookie writer
 * (server/auth/cookie.c). Input: one byte for the output's size, a name,
 * a NUL byte, then the header (also used as a value to write). Checks:
 * what cookie_get returns fits, is NUL-terminated at the length it says
 * and is part of the header; whatever cookie_set accepts, cookie_get
 * reads back from it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/auth/cookie.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 2 * COOKIE_MAX_HEADER)
		return 0;
	size_t outsz = data[0];
	char *in = malloc(size + 1);
	memcpy(in, data + 1, size - 1);
	in[size - 1] = in[size] = '\0';
	const char *name = in, *header = in + strlen(in) + 1;
	if (header > in + size - 1)
		header = in + size - 1;
	char *out = malloc(outsz ? outsz : 1);
	int n = cookie_get(header, name, out, outsz);
	if (n >= 0) {
		if ((size_t)n >= outsz || strlen(out) != (size_t)n || !memmem(header, strnlen(header, COOKIE_MAX_HEADER), out, (size_t)n))
			abort();
		if (cookie_get(header, name, out, (size_t)n) != -1)
			abort(); /* one byte short: not returned */
	}
	/* The round trip. */
	struct buf b = { 0 };
	struct cookie_attrs a = { .max_age = (long)outsz, .http_only = outsz & 1, .secure = outsz & 2,
				  .same_site = (outsz & 4) ? "Strict" : NULL };
	if (cookie_set(&b, name, header, &a) == 0) {
		size_t vlen = strlen(header);
		char *back = malloc(vlen + 1);
		if (b.len == 0 || cookie_get(b.data, name, back, vlen + 1) != (int)vlen || memcmp(back, header, vlen) != 0)
			abort();
		free(back);
	} else if (b.len != 0) {
		abort(); /* a refusal writes nothing */
	}
	buf_free(&b);
	free(out);
	free(in);
	return 0;
}
