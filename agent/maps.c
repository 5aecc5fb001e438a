/* maps.c - see maps.h. */
#include "maps.h"

#include <string.h>

#include "util.h"

/* Parses hex digits up to the stop character and steps past it. */
static bool hexnum(const char **p, const char *end, uint64_t *out, char stop)
{
	const char *s = memchr(*p, stop, (size_t)(end - *p));
	if (!s || parse_hex_u64(*p, (size_t)(s - *p), out) < 0)
		return false;
	*p = s + 1;
	return true;
}

int maps_parse_line(const char *line, size_t n, struct maps_line *out)
{
	const char *p = line, *end = line + n;
	memset(out, 0, sizeof(*out));
	uint64_t maj, min;
	if (!hexnum(&p, end, &out->start, '-') || !hexnum(&p, end, &out->end, ' '))
		return -1;
	if (out->end <= out->start)
		return -1;
	if (end - p < 5 || p[4] != ' ')
		return -1;
	out->exec = p[2] == 'x';
	p += 5;
	if (!hexnum(&p, end, &out->offset, ' ') || !hexnum(&p, end, &maj, ':') ||
	    !hexnum(&p, end, &min, ' '))
		return -1;
	if (maj > UINT32_MAX || min > UINT32_MAX)
		return -1;
	out->dev_major = (uint32_t)maj;
	out->dev_minor = (uint32_t)min;
	uint64_t inode = 0;
	int digits = 0;
	while (p < end && *p >= '0' && *p <= '9') {
		if (++digits > 20)
			return -1;
		inode = inode * 10 + (uint64_t)(*p - '0');
		p++;
	}
	if (digits == 0)
		return -1;
	out->inode = inode;
	while (p < end && *p == ' ')
		p++;
	size_t plen = (size_t)(end - p);
	while (plen && (p[plen - 1] == '\n' || p[plen - 1] == '\0'))
		plen--;
	static const char del[] = " (deleted)";
	if (plen >= sizeof(del) - 1 && memcmp(p + plen - (sizeof(del) - 1), del, sizeof(del) - 1) == 0) {
		plen -= sizeof(del) - 1;
		out->deleted = true;
	}
	out->path = p;
	out->path_len = plen;
	return 0;
}
