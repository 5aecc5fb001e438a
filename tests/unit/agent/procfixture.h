/* procfixture.h - a fake /proc for the agent's unit tests: one process
 * directory under a temporary root, its stat line, files and links. */
#ifndef EMBER_TEST_PROCFIXTURE_H
#define EMBER_TEST_PROCFIXTURE_H

#include "testutil.h"

#include <sys/stat.h>

/* Writes root/<pid>/<name> with text. */
static inline void fake_proc_file(const char *root, int pid, const char *name, const char *text)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%d/%s", root, pid, name);
	write_text(path, text);
}

/* Makes root/<pid>/<name> a symbolic link to target. */
static inline void fake_proc_link(const char *root, int pid, const char *name, const char *target)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%d/%s", root, pid, name);
	assert_int_equal(symlink(target, path), 0);
}

/* Makes root/<pid>/ with a stat line for a process named comm in state
 * (R, S, ...) that started start_ticks after boot. */
static inline void fake_proc(const char *root, int pid, const char *comm, char state,
			     unsigned long long start_ticks)
{
	char path[1024], stat_line[256];
	snprintf(path, sizeof(path), "%s/%d", root, pid);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(stat_line, sizeof(stat_line), "%d (%s) %c 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %llu 0 0\n",
		 pid, comm, state, start_ticks);
	fake_proc_file(root, pid, "stat", stat_line);
}

#endif
