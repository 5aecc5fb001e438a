/* cookie.h - reading a request's Cookie header and writing Set-Cookie.
 *
 * cookie_get finds name in a Cookie header ("a=1; b=2", RFC 6265 §4.2.1,
 * tolerant of missing spaces) and copies its value, with surrounding
 * double quotes removed, into out. The header is hostile: at most
 * COOKIE_MAX_HEADER bytes are looked at, a value that does not fit outsz
 * (with its NUL) is not returned, a name that appears twice gives the
 * first. Returns the value's length, or -1 when absent or too long.
 *
 * Pairs are split at ';', spaces and tabs around names and values are
 * skipped, names compare exactly ("xember_access" is not "ember_access"),
 * a pair without '=' is skipped. A header longer than COOKIE_MAX_HEADER
 * is read up to the limit, and the pair the limit cuts is absent.
 *
 * cookie_set appends one Set-Cookie value to out with the attributes of
 * struct cookie_attrs (Path, Max-Age, SameSite, HttpOnly, Secure):
 * "name=value; Path=/; Max-Age=300; SameSite=Lax; HttpOnly; Secure".
 * max_age 0 writes "Max-Age=0" (deletes it). Returns 0, or -1 with out
 * unchanged when: the name is not an RFC 6265 token, the value is not
 * cookie-octets (no space, '"', ',', ';', '\\' or control byte), name
 * and value together exceed COOKIE_MAX_PAIR (browsers drop such cookies),
 * max_age < 0, the path does not start with '/' or holds ';' or a control
 * byte, same_site is not one of the three, SameSite=None without Secure,
 * a "__Secure-" name without Secure, or a "__Host-" name without Secure
 * and Path=/ (browsers refuse all of these). a must not be NULL. */
#ifndef EMBER_SERVER_AUTH_COOKIE_H
#define EMBER_SERVER_AUTH_COOKIE_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

#define COOKIE_MAX_HEADER 8192
#define COOKIE_MAX_PAIR 4096

struct cookie_attrs {
	const char *path;     /* default "/" */
	long max_age;         /* seconds; 0 deletes */
	const char *same_site; /* "Strict", "Lax" or "None"; default "Lax" */
	bool http_only, secure;
};

int cookie_get(const char *header, const char *name, char *out, size_t outsz);
int cookie_set(struct buf *out, const char *name, const char *value, const struct cookie_attrs *a);

#endif
