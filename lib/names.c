/* names.c - see names.h. */
#include "names.h"

#include <stdlib.h>
#include <string.h>

#include <libiberty/demangle.h>

bool is_libc(const char *binary)
{
	if (!binary)
		return false;
	const char *base = strrchr(binary, '/');
	base = base ? base + 1 : binary;
	return strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0;
}

static bool starts(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* glibc's internal and CPU-specific variants, by their common name. */
static void libc_common_name(const char *name, struct buf *out)
{
	const char *s = name;
	while (starts(s, "__GI_"))
		s += 5;
	if (starts(s, "__libc_"))
		s += 7;
	else if (starts(s, "__") && s[2] && s[2] != '_')
		s += 2;
	size_t n = strlen(s);
	static const char *const variants[] = { "_avx", "_evex", "_sse2", "_sse3", "_ssse3", "_sse4",
						"_erms", "_nocancel", "_unaligned" };
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		const char *v = strstr(s, variants[i]);
		if (v && v > s && (size_t)(v - s) < n)
			n = (size_t)(v - s);
	}
	if (n == 0) {
		buf_puts(out, name);
		return;
	}
	buf_append(out, s, n);
}

void display_name(const char *name, const char *binary, bool raw, bool verbose, struct buf *out)
{
	if (raw || !name[0]) {
		buf_puts(out, name);
		return;
	}
	if ((name[0] == '_' && (name[1] == 'Z' || name[1] == 'R')) || starts(name, "__Z")) {
		char *d = cplus_demangle(name, DMGL_AUTO | (verbose ? DMGL_PARAMS | DMGL_ANSI : 0));
		if (d) {
			buf_puts(out, d);
			free(d);
			return;
		}
	}
	if (is_libc(binary)) {
		libc_common_name(name, out);
		return;
	}
	buf_puts(out, name);
}
