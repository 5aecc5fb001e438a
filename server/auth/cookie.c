/* cookie.c - the Cookie request header and Set-Cookie values (see cookie.h). */
#include "cookie.h"

#include <string.h>

static bool is_ows(char c)
{
	return c == ' ' || c == '\t';
}

int cookie_get(const char *header, const char *name, char *out, size_t outsz)
{
	if (!header || !name || !*name || !out || outsz == 0)
		return -1;
	size_t namelen = strlen(name);
	size_t len = strnlen(header, COOKIE_MAX_HEADER + 1);
	/* Past the limit the header is cut; a pair the cut falls in is not
	 * whole, and is treated as absent. */
	bool cut = len > COOKIE_MAX_HEADER;
	if (cut)
		len = COOKIE_MAX_HEADER;
	const char *p = header, *end = header + len;
	while (p < end) {
		const char *semi = memchr(p, ';', (size_t)(end - p));
		const char *pe = semi ? semi : end;
		if (!semi && cut)
			return -1;
		while (p < pe && is_ows(*p))
			p++;
		const char *eq = memchr(p, '=', (size_t)(pe - p));
		if (eq) {
			const char *ne = eq;
			while (ne > p && is_ows(ne[-1]))
				ne--;
			if ((size_t)(ne - p) == namelen && memcmp(p, name, namelen) == 0) {
				const char *v = eq + 1, *ve = pe;
				while (v < ve && is_ows(*v))
					v++;
				while (ve > v && is_ows(ve[-1]))
					ve--;
				if (ve - v >= 2 && *v == '"' && ve[-1] == '"') {
					v++;
					ve--;
				}
				size_t n = (size_t)(ve - v);
				if (n + 1 > outsz)
					return -1;
				memcpy(out, v, n);
				out[n] = '\0';
				return (int)n;
			}
		}
		p = semi ? semi + 1 : end;
	}
	return -1;
}

/* RFC 6265 §4.1.1: a token (RFC 2616) for names. */
static bool is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c <= 0x20 || c >= 0x7f || strchr("()<>@,;:\\\"/[]?={}", c))
			return false;
	}
	return true;
}

/* cookie-octet: %x21 / %x23-2B / %x2D-3A / %x3C-5B / %x5D-7E. */
static bool is_octets(const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x21 || c > 0x7e || c == '"' || c == ',' || c == ';' || c == '\\')
			return false;
	}
	return true;
}

/* path-value: any CHAR except CTLs or ";". */
static bool is_path(const char *s)
{
	if (*s != '/')
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c >= 0x7f || c == ';')
			return false;
	}
	return true;
}

int cookie_set(struct buf *out, const char *name, const char *value, const struct cookie_attrs *a)
{
	if (!out || !name || !value || !a || !is_token(name) || !is_octets(value) ||
	    strlen(name) + strlen(value) > COOKIE_MAX_PAIR || a->max_age < 0)
		return -1;
	const char *path = a->path ? a->path : "/";
	const char *ss = a->same_site ? a->same_site : "Lax";
	if (!is_path(path) || (strcmp(ss, "Strict") != 0 && strcmp(ss, "Lax") != 0 && strcmp(ss, "None") != 0))
		return -1;
	/* Browsers drop SameSite=None without Secure, and the prefixes'
	 * promises (RFC 6265bis §4.1.3). */
	if (strcmp(ss, "None") == 0 && !a->secure)
		return -1;
	if (strncmp(name, "__Secure-", 9) == 0 && !a->secure)
		return -1;
	if (strncmp(name, "__Host-", 7) == 0 && (!a->secure || strcmp(path, "/") != 0))
		return -1;
	buf_printf(out, "%s=%s; Path=%s; Max-Age=%ld; SameSite=%s%s%s", name, value, path, a->max_age, ss,
		   a->http_only ? "; HttpOnly" : "", a->secure ? "; Secure" : "");
	return 0;
}
