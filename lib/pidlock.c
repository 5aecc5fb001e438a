/* pidlock.c - see pidlock.h. */
#include "pidlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int pidlock_take(const char *path, long *holder, struct buf *err)
{
	if (holder)
		*holder = 0;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		buf_printf(err, "cannot open the lock file %s: %s", path, strerror(errno));
		return PIDLOCK_FAILED;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		if (e == EWOULDBLOCK) {
			char text[32];
			ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
			if (holder && n > 0) {
				text[n] = 0;
				char *end;
				long pid = strtol(text, &end, 10);
				*holder = pid > 0 && (*end == '\n' || *end == 0) ? pid : 0;
			}
			close(fd);
			return PIDLOCK_HELD;
		}
		buf_printf(err, "cannot lock %s: %s", path, strerror(e));
		close(fd);
		return PIDLOCK_FAILED;
	}
	char text[32];
	int n = snprintf(text, sizeof(text), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, text, (size_t)n, 0) != n) {
		buf_printf(err, "cannot write the lock file %s: %s", path, strerror(errno));
		close(fd);
		return PIDLOCK_FAILED;
	}
	return fd;
}

void pidlock_release(int fd)
{
	if (fd >= 0)
		close(fd);
}
