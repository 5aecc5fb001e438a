/* cookie.h - reading a request's Cookie header and writing Set-Cookie.
 *
 * cookie_get finds name in a Cookie header ("a=1; b=2", RFC 6265 §4.2.1,
 * tolerant of missing spaces) and copies its value, with surrounding
 * double quotes removed, into out. The header is hostile: at most
 * COOKIE_MAX_HEADER bytes are looked at, a value that does not fit outsz
 * (with its NUL) is not returned, a name that appears twice gives the
 * first. Returns the value's length, or -1 when absent or too long.
 *
 * cookie_set appends one Set-Cookie value to out with the attributes of
 * struct cookie_attrs (Path, Max-Age, SameSite, HttpOnly, Secure);
 * max_age 0 writes "Max-Age=0" (deletes it). Name and value must be
 * cookie-octets (checked: -1 otherwise). */
#ifndef EMBER_SERVER_AUTH_COOKIE_H
#define EMBER_SERVER_AUTH_COOKIE_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

#define COOKIE_MAX_HEADER 8192

struct cookie_attrs {
	const char *path;     /* default "/" */
	long max_age;         /* seconds; 0 deletes */
	const char *same_site; /* "Strict", "Lax" or "None"; default "Lax" */
	bool http_only, secure;
};

int cookie_get(const char *header, const char *name, char *out, size_t outsz);
int cookie_set(struct buf *out, const char *name, const char *value, const struct cookie_attrs *a);

#endif
