/* maps.c - see maps.h. */
#include "maps.h"

#include <string.h>

static bool hexnum(const char **p, const char *end, uint64_t *out, char stop)
{
	uint64_t v = 0;
	int digits = 0;
	while (*p < end && **p != stop) {
		char c = **p;
		int d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return false;
		if (++digits > 16)
			return false;
		v = v << 4 | (uint64_t)d;
		(*p)++;
	}
	if (digits == 0 || *p >= end)
		return false;
	(*p)++; /* the stop character */
	*out = v;
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
