/* Fuzz target: the write-ahead log's replay (server/store/wal.c) over any file,
 * as a crash, a damaged disk or zeros written ahead leave one.
 *
 * Input: the log file's bytes. Replay must leave the file as the whole
 * records it kept (size == file length, never longer than the input), and
 * a record appended after it must come back, last, at the next replay,
 * after the same records in the same order (a chained hash of the
 * payloads replay hands on compares the two replays). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "buf.h"
#include "server/store/wal.h"

/* The directory every input's log file is written to: made once by
 * mkdtemp (libFuzzer calls the target once per input), on tmpfs since this
 * target tests parsing, not the disk; removed at exit. */
static char dir[] = "/dev/shm/ember-fuzz-wal-XXXXXX";

#define MARK "#ember-fuzz-wal"

/* The records a replay handed on: how many, and a hash chained over
 * their payloads in order. */
struct seen {
	size_t n;
	uint64_t chain;
};

static int on_record(void *ctx, const uint8_t *p, size_t len)
{
	struct seen *s = ctx;
	s->n++;
	s->chain = XXH64(p, len, s->chain);
	return 0;
}

static void remove_dir(void)
{
	struct buf path = { 0 };
	wal_path(dir, 1, &path);
	unlink(path.data);
	rmdir(dir);
	buf_free(&path);
}

static void put(const char *path, const uint8_t *data, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	close(fd);
}

static uint64_t file_len(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		abort();
	return (uint64_t)st.st_size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		if (!mkdtemp(dir))
			abort();
		atexit(remove_dir);
		ready = 1;
	}
	struct buf path = { 0 }, err = { 0 };
	wal_path(dir, 1, &path);
	put(path.data, data, size);

	struct wal_file w;
	struct seen a = { 0 };
	uint64_t skipped = 0;
	if (wal_open(dir, 1, on_record, &a, &w, &skipped, &err) < 0)
		abort(); /* only a failing disk may refuse a file */
	if (w.size != file_len(path.data) || w.size > size)
		abort();
	/* Appending after replay, then replaying again: the same records,
	 * then the new one, last. */
	const char rec[] = MARK;
	if (wal_append(&w, rec, sizeof(rec) - 1, "", 0) < 0)
		abort();
	wal_close(&w);
	struct seen b = { 0 };
	skipped = 0;
	if (wal_open(dir, 1, on_record, &b, &w, &skipped, &err) < 0)
		abort();
	wal_close(&w);
	if (b.n != a.n + 1 || b.chain != XXH64(rec, sizeof(rec) - 1, a.chain))
		abort();
	buf_free(&path);
	buf_free(&err);
	return 0;
}
