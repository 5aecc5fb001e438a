/* cudaship.c - see cudaship.h. */
#include "cudaship.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* mkdir -p with mode 0755; an existing directory is fine. */
static int make_dirs(const char *dir, struct buf *err)
{
	char path[PATH_MAX];
	size_t n = strlen(dir);
	if (n == 0 || n >= sizeof(path)) {
		buf_printf(err, "%s: not a usable directory path", dir);
		return -1;
	}
	memcpy(path, dir, n + 1);
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			buf_printf(err, "cannot create %s: %s", path, strerror(errno));
			return -1;
		}
		*p = c;
		if (!c)
			break;
	}
	struct stat st;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		buf_printf(err, "%s: not a directory", dir);
		return -1;
	}
	return 0;
}

/* Whether path is a regular file holding exactly the len bytes at lib. */
static bool same_file(const char *path, const void *lib, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	struct stat st;
	bool same = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size == len &&
		    (st.st_mode & 0777) == 0755;
	unsigned char chunk[65536];
	for (size_t off = 0; same && off < len;) {
		size_t want = MIN(sizeof(chunk), len - off);
		ssize_t got = pread(fd, chunk, want, (off_t)off);
		same = got == (ssize_t)want && memcmp(chunk, (const unsigned char *)lib + off, want) == 0;
		off += want;
	}
	close(fd);
	return same;
}

enum cudaship_result cudaship_install(const char *dir, const void *lib, size_t len, struct buf *err)
{
	if (len == 0) {
		buf_printf(err, "this ember-agent was built without libembercuda.so");
		return CUDASHIP_FAILED;
	}
	if (make_dirs(dir, err) < 0)
		return CUDASHIP_FAILED;
	char path[PATH_MAX], tmp[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, CUDASHIP_NAME) >= sizeof(path) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s/.%s.%ld", dir, CUDASHIP_NAME, (long)getpid()) >=
		    sizeof(tmp)) {
		buf_printf(err, "%s: path too long", dir);
		return CUDASHIP_FAILED;
	}
	if (same_file(path, lib, len))
		return CUDASHIP_SAME;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0755);
	if (fd < 0) {
		buf_printf(err, "cannot create %s: %s", tmp, strerror(errno));
		return CUDASHIP_FAILED;
	}
	const unsigned char *p = lib;
	size_t left = len;
	while (left) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			buf_printf(err, "cannot write %s: %s", tmp, w < 0 ? strerror(errno) : "short write");
			close(fd);
			unlink(tmp);
			return CUDASHIP_FAILED;
		}
		p += w;
		left -= (size_t)w;
	}
	/* The umask may have taken bits away: every user's CUDA programs
	 * must be able to load it. */
	if (fchmod(fd, 0755) < 0 || fsync(fd) < 0 || close(fd) < 0) {
		buf_printf(err, "cannot finish %s: %s", tmp, strerror(errno));
		unlink(tmp);
		return CUDASHIP_FAILED;
	}
	if (rename(tmp, path) < 0) {
		buf_printf(err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
		unlink(tmp);
		return CUDASHIP_FAILED;
	}
	return CUDASHIP_WRITTEN;
}
