/* Fuzz target: block files as the store reads them from disk -- footer,
 * sections, series chunks (stack totals and rows by time slice), rollup
 * slices -- at every level a damaged or hostile file can reach. The fuzz build skips the checksum
 * comparisons (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) so that
 * mutations get past them to the parsers behind. Seeds: real blocks. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/store/block.h"
#include "server/store/part.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* On tmpfs: block_open reads a file. */
	static char path[64];
	if (!path[0])
		snprintf(path, sizeof(path), "/dev/shm/ember-fuzz-block-%d.blk", (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	close(fd);
	struct buf err = { 0 }, scratch = { 0 };
	struct block *b;
	if (block_open(path, &b, &err) == 0) {
		struct part p;
		if (block_load(b, &p, &err) == 0) {
			uint64_t bytes = 0, rows_read = 0;
			for (size_t i = 0; i < p.nseries; i++) {
				const struct store_row *rows;
				long n = block_rows(b, &p, &p.series[i], INT64_MIN, &scratch, &rows, &bytes, &err);
				for (long j = 0; j < n; j++)
					if (rows[j].stack >= p.nnodes)
						abort(); /* the reader promised ids within the table */
				const uint32_t *stacks;
				const uint64_t *sums;
				const struct part_series *s = &p.series[i];
				n = block_sums(b, &p, s, s->min_ts + 1, s->max_ts, &scratch, &stacks, &sums,
					       &rows_read, &bytes, &err);
				for (long j = 0; j < n; j++)
					if (stacks[j] >= p.nnodes)
						abort();
				uint32_t frames[64];
				for (long j = 0; j < n; j++)
					part_stack(&p, stacks[j], frames, 64);
			}
			struct buf acc = { 0 };
			struct block_read_stats st = { 0 };
			for (size_t i = 0; i < p.nrollups; i++) {
				const uint32_t *stacks;
				const uint64_t *sums;
				/* A range that cuts the first and last slices. */
				long n = block_rollup_sums(b, &p, &p.rollups[i], p.min_ts + 1, p.max_ts,
							   &scratch, &acc, &stacks, &sums, &st, &err);
				for (long j = 0; j < n; j++)
					if (stacks[j] >= p.nnodes || (j && stacks[j] <= stacks[j - 1]))
						abort();
			}
			buf_free(&acc);
			part_free(&p);
		}
		block_close(b);
	}
	buf_free(&err);
	buf_free(&scratch);
	return 0;
}
