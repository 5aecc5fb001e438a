/* compress.h - zstd (and gzip, for OTLP) compression with hard output
 * bounds.
 *
 * Decompression never produces more than the caller's limit, whatever the
 * frame header claims, so a small hostile body cannot make the server
 * allocate gigabytes.
 */
#ifndef EMBER_COMPRESS_H
#define EMBER_COMPRESS_H

#include <stddef.h>

#include "buf.h"

/* Appends the zstd frame of in[0..n) to out. Returns 0 or -1. */
int zstd_compress_buf(const void *in, size_t n, int level, struct buf *out);

/* One zstd frame made of pieces written one after another (the thread's
 * compression context, so one stream per thread at a time): the input is
 * never held whole. zstd_stream_begin, then zstd_stream_write for each
 * piece, then zstd_stream_end; each appends what it compressed to out.
 * Each returns 0 or -1. */
int zstd_stream_begin(int level);
int zstd_stream_write(const void *in, size_t n, struct buf *out);
int zstd_stream_end(struct buf *out);
/* Appends the decompressed bytes of one or more zstd frames to out.
 * Returns 0, -1 for malformed input, or -2 when the output would exceed
 * max_out bytes. */
int zstd_decompress_bounded(const void *in, size_t n, size_t max_out, struct buf *out);

/* As zstd_decompress_bounded, but writes the output to fd (a small
 * buffer at a time, so a large output never sits in memory) and sets
 * *out_len. Returns 0, -1 malformed, -2 over max_out, -3 write error
 * (errno set). */
int zstd_decompress_to_fd(const void *in, size_t n, size_t max_out, int fd, size_t *out_len);

/* Decompresses one zstd frame whose decompressed size the caller knows
 * (from a checksummed index) into out[0..raw_len). Returns 0, or -1 when
 * the frame is malformed or does not hold exactly raw_len bytes. Uses one
 * decompression context per thread, kept for the thread's life. */
int zstd_decompress_exact(const void *in, size_t n, void *out, size_t raw_len);

/* Whether a zstd frame of len bytes can decompress to raw bytes at all: no
 * zstd block expands more than 32768 times (an RLE block: a 3-byte header
 * and one byte standing for 128 KiB). Readers check an index's stated sizes
 * with it before they allocate for them, so a damaged index cannot make
 * them reserve a gigabyte for a few kilobytes of frame. */
static inline int zstd_can_expand(unsigned long long len, unsigned long long raw)
{
	return raw / 32768ull + (raw % 32768ull != 0) <= len; /* no overflow for any len */
}

/* Appends the decompressed bytes of a gzip (or zlib) stream to out, as
 * zstd_decompress_bounded: 0, -1 malformed or truncated, -2 over max_out. */
int gzip_decompress_bounded(const void *in, size_t n, size_t max_out, struct buf *out);
/* Appends the gzip encoding of in[0..n) to out. Returns 0 or -1. */
int gzip_compress_buf(const void *in, size_t n, int level, struct buf *out);

#endif
