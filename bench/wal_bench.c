/* wal_bench - what one commit of the write-ahead log costs.
 *
 * A commit is what the store does for every batch it acknowledges
 * (server/store/store.c, store_append_entry): append one record to the log
 * (server/store/wal.c, wal_append) and fdatasync the file. The bench commits
 * COUNT records of BYTES each, as the store does, and reports CPU time
 * (user + system, which on a virtual machine includes the exits its disk
 * doorbell costs) and wall time per commit. For comparison it does the
 * same with a plain append to the end of a file (write + fdatasync), as
 * the log did before it wrote zeros ahead: each of those syncs also
 * writes the file's size and block map.
 *
 * Usage: wal_bench [COUNT [BYTES [DIR]]]   (defaults 3000, 12288, /tmp/ember-wal-bench)
 * DIR should be on the disk the server's data would be on.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "buf.h"
#include "server/store/wal.h"

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int no_records(void *ctx, const uint8_t *p, size_t len)
{
	(void)ctx;
	(void)p;
	(void)len;
	return 0;
}

static void report(const char *what, int count, double cpu, double wall)
{
	printf("%-44s %7.1f us CPU, %7.1f us wall per commit\n", what, cpu / count * 1e6,
	       wall / count * 1e6);
}

int main(int argc, char **argv)
{
	int count = argc > 1 ? atoi(argv[1]) : 3000;
	long bytes = argc > 2 ? atol(argv[2]) : 12288;
	const char *dir = argc > 3 ? argv[3] : "/tmp/ember-wal-bench";
	if (count <= 0 || bytes <= 0 || bytes > (16 << 20)) {
		fprintf(stderr, "usage: wal_bench [COUNT [BYTES (1..16 MiB) [DIR]]]\n");
		return 2;
	}
	bench_rm_rf(dir);
	if (mkdir(dir, 0755) < 0) {
		fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
		return 1;
	}
	char *rec = malloc((size_t)bytes);
	uint64_t rng = 1;
	for (long i = 0; i < bytes; i++)
		rec[i] = (char)bench_next(&rng);
	printf("%d commits of %ld bytes in %s\n", count, bytes, dir);

	/* The log as the store writes it. */
	struct wal_file w;
	struct buf err = { 0 };
	uint64_t skipped = 0;
	if (wal_open(dir, 1, no_records, NULL, &w, &skipped, &err) < 0) {
		fprintf(stderr, "%s\n", err.data);
		return 1;
	}
	double c0 = bench_cpu_s(), t0 = wall_s();
	for (int i = 0; i < count; i++)
		if (wal_append(&w, "", 0, rec, (size_t)bytes) < 0 || fdatasync(w.fd) < 0) {
			fprintf(stderr, "commit: %s\n", strerror(errno));
			return 1;
		}
	report("log (wal_append + fdatasync, zeros ahead)", count, bench_cpu_s() - c0,
	       wall_s() - t0);
	wal_close(&w);

	/* A plain append, for comparison. */
	char path[1100];
	snprintf(path, sizeof(path), "%s/append", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "open %s: %s\n", path, strerror(errno));
		return 1;
	}
	c0 = bench_cpu_s();
	t0 = wall_s();
	for (int i = 0; i < count; i++)
		if (write(fd, rec, (size_t)bytes) != bytes || fdatasync(fd) < 0) {
			fprintf(stderr, "append: %s\n", strerror(errno));
			return 1;
		}
	report("plain append (write + fdatasync)", count, bench_cpu_s() - c0, wall_s() - t0);
	close(fd);
	free(rec);
	buf_free(&err);
	bench_rm_rf(dir);
	return 0;
}
