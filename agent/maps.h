/* maps.h - parsing one line of /proc/PID/maps.
 *
 * "start-end perms offset major:minor inode   path". The text comes from
 * another process's view of the kernel and is treated as hostile: every
 * field is checked, and a line that does not parse is rejected whole.
 */
#ifndef EMBER_AGENT_MAPS_H
#define EMBER_AGENT_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct maps_line {
	uint64_t start, end, offset;
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	bool exec;
	const char *path; /* points into the line; not NUL-terminated */
	size_t path_len;  /* 0 for anonymous mappings; " (deleted)" removed */
	bool deleted;
};

/* Returns 0 or -1. */
int maps_parse_line(const char *line, size_t n, struct maps_line *out);

#endif
