/* cpulist.h - the kernel's CPU (and NUMA node) list format, "0-3,8,10-11"
 * (/sys/devices/system/cpu/online, /sys/devices/system/node/nodeN/cpulist,
 * Cpus_allowed_list in /proc/PID/status), read and written.
 *
 * Ids are bounded by CPULIST_MAX_ID (kernel text, or an agent's report,
 * is hostile: a larger id or a reversed range is malformed). A set is a
 * bitmap of CPULIST_MAX_ID bits the caller owns.
 */
#ifndef EMBER_CPULIST_H
#define EMBER_CPULIST_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"

#define CPULIST_MAX_ID 4096

struct cpuset {
	uint64_t bits[CPULIST_MAX_ID / 64];
};

/* Parses a CPU list such as "0-3,8,10-11" (ending at a NUL or a newline)
 * into ids (at most max). Returns the count, or -1 when malformed or
 * longer than max. */
int parse_cpu_list(const char *s, int *ids, int max);
/* The same into a set (cleared first). Returns the count of ids, or -1. */
int cpuset_parse(const char *s, struct cpuset *out);
bool cpuset_has(const struct cpuset *s, int id);
void cpuset_add(struct cpuset *s, int id);
/* Ids in both, and in a. */
int cpuset_common(const struct cpuset *a, const struct cpuset *b);
int cpuset_count(const struct cpuset *a);
/* Appends the set as a list ("0-3,8"); "" when empty. */
void cpuset_format(const struct cpuset *s, struct buf *out);

#endif
