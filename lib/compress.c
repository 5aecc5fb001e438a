/* compress.c - see compress.h. */
#include "compress.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "util.h"

/* One context per thread for each direction: creating one costs ~100 KiB
 * (decompression) to over a megabyte (compression) of allocation, too much
 * to pay per batch or per chunk of a query; a thread-local one needs no
 * lock. It lives as long as the thread: a key's destructor frees it when
 * the thread ends (a query's helper threads, e.g. a diff's comparison
 * side, end with their request). */
static __thread ZSTD_DCtx *tls_dctx;
static __thread ZSTD_CCtx *tls_cctx;
static pthread_key_t dctx_key, cctx_key;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void free_dctx(void *dctx)
{
	ZSTD_freeDCtx(dctx);
}

static void free_cctx(void *cctx)
{
	ZSTD_freeCCtx(cctx);
}

static void make_keys(void)
{
	if (pthread_key_create(&dctx_key, free_dctx) != 0 ||
	    pthread_key_create(&cctx_key, free_cctx) != 0)
		abort();
}

static ZSTD_DCtx *thread_dctx(void)
{
	if (!tls_dctx && (tls_dctx = ZSTD_createDCtx())) {
		pthread_once(&keys_once, make_keys);
		pthread_setspecific(dctx_key, tls_dctx);
	}
	return tls_dctx;
}

static ZSTD_CCtx *thread_cctx(void)
{
	if (!tls_cctx && (tls_cctx = ZSTD_createCCtx())) {
		pthread_once(&keys_once, make_keys);
		pthread_setspecific(cctx_key, tls_cctx);
	}
	return tls_cctx;
}

int zstd_compress_buf(const void *in, size_t n, int level, struct buf *out)
{
	ZSTD_CCtx *cc = thread_cctx();
	if (!cc)
		return -1;
	size_t bound = ZSTD_compressBound(n);
	buf_reserve(out, bound);
	size_t r = ZSTD_compressCCtx(cc, out->data + out->len, bound, in, n, level);
	if (ZSTD_isError(r))
		return -1;
	out->len += r;
	out->data[out->len] = '\0';
	return 0;
}

int zstd_stream_begin(int level)
{
	ZSTD_CCtx *cc = thread_cctx();
	if (!cc || ZSTD_isError(ZSTD_CCtx_reset(cc, ZSTD_reset_session_and_parameters)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level)))
		return -1;
	return 0;
}

static int stream_run(const void *in, size_t n, ZSTD_EndDirective mode, struct buf *out)
{
	ZSTD_CCtx *cc = thread_cctx();
	if (!cc)
		return -1;
	ZSTD_inBuffer ib = { in, n, 0 };
	for (;;) {
		size_t room = ZSTD_CStreamOutSize();
		buf_reserve(out, room);
		ZSTD_outBuffer ob = { out->data + out->len, room, 0 };
		size_t r = ZSTD_compressStream2(cc, &ob, &ib, mode);
		if (ZSTD_isError(r))
			return -1;
		out->len += ob.pos;
		out->data[out->len] = '\0';
		if (mode == ZSTD_e_end ? r == 0 : ib.pos == ib.size)
			return 0;
	}
}

int zstd_stream_write(const void *in, size_t n, struct buf *out)
{
	return n ? stream_run(in, n, ZSTD_e_continue, out) : 0;
}

int zstd_stream_end(struct buf *out)
{
	return stream_run(NULL, 0, ZSTD_e_end, out);
}

int zstd_decompress_bounded(const void *in, size_t n, size_t max_out, struct buf *out)
{
	ZSTD_DCtx *ds = thread_dctx();
	if (!ds)
		return -1;
	ZSTD_DCtx_reset(ds, ZSTD_reset_session_only);
	ZSTD_inBuffer ib = { in, n, 0 };
	/* The first frame's stated size, when it states one within the
	 * bound and one the body could hold, sizes the first step (one pass
	 * into one allocation); the steps after it, if the size lied or more
	 * frames follow, are the stream's own. */
	unsigned long long stated = ZSTD_getFrameContentSize(in, n);
	size_t first = stated < max_out && zstd_can_expand(n, stated) ? (size_t)stated + 1 : 0;
	size_t start = out->len;
	size_t ret = 0;
	int rc = 0;
	for (;;) {
		size_t produced = out->len - start;
		if (produced > max_out) {
			rc = -2;
			break;
		}
		/* Offer at most one byte beyond the limit: producing it proves
		 * the output is too large without decoding the rest. */
		size_t chunk = first ? first : ZSTD_DStreamOutSize();
		first = 0;
		size_t room = max_out - produced + 1;
		if (chunk > room)
			chunk = room;
		buf_reserve(out, chunk);
		ZSTD_outBuffer ob = { out->data + out->len, chunk, 0 };
		size_t in_before = ib.pos;
		ret = ZSTD_decompressStream(ds, &ob, &ib);
		if (ZSTD_isError(ret)) {
			rc = -1;
			break;
		}
		out->len += ob.pos;
		if (ib.pos == ib.size && ob.pos < ob.size)
			break; /* input consumed and the decoder has nothing more */
		if (ob.pos == 0 && ib.pos == in_before) {
			rc = -1; /* no progress: malformed */
			break;
		}
	}
	if (rc == 0 && ret != 0)
		rc = -1; /* the last frame is truncated */
	if (rc == 0 && out->len - start > max_out)
		rc = -2;
	if (rc)
		out->len = start;
	if (out->data)
		out->data[out->len] = '\0';
	return rc;
}

int zstd_decompress_to_fd(const void *in, size_t n, size_t max_out, int fd, size_t *out_len)
{
	*out_len = 0;
	ZSTD_DCtx *ds = thread_dctx();
	if (!ds)
		return -1;
	ZSTD_DCtx_reset(ds, ZSTD_reset_session_only);
	size_t cap = ZSTD_DStreamOutSize();
	uint8_t *chunk = malloc(cap);
	if (!chunk)
		return -1;
	ZSTD_inBuffer ib = { in, n, 0 };
	size_t produced = 0, ret = 0;
	int rc = 0;
	for (;;) {
		ZSTD_outBuffer ob = { chunk, cap, 0 };
		size_t in_before = ib.pos;
		ret = ZSTD_decompressStream(ds, &ob, &ib);
		if (ZSTD_isError(ret)) {
			rc = -1;
			break;
		}
		if (ob.pos > max_out - produced) {
			rc = -2;
			break;
		}
		if (ob.pos && write_exact(fd, chunk, ob.pos) < 0) {
			rc = -3;
			break;
		}
		produced += ob.pos;
		if (ib.pos == ib.size && ob.pos < ob.size)
			break;
		if (ob.pos == 0 && ib.pos == in_before) {
			rc = -1;
			break;
		}
	}
	if (rc == 0 && ret != 0)
		rc = -1;
	free(chunk);
	*out_len = produced;
	return rc;
}

int zstd_decompress_exact(const void *in, size_t n, void *out, size_t raw_len)
{
	ZSTD_DCtx *dc = thread_dctx();
	if (!dc)
		return -1;
	unsigned long long claimed = ZSTD_getFrameContentSize(in, n);
	if (claimed != raw_len)
		return -1;
	size_t r = ZSTD_decompressDCtx(dc, out, raw_len, in, n);
	return ZSTD_isError(r) || r != raw_len ? -1 : 0;
}

int gzip_decompress_bounded(const void *in, size_t n, size_t max_out, struct buf *out)
{
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, 15 + 32) != Z_OK) /* gzip or zlib header */
		return -1;
	zs.next_in = (Bytef *)(uintptr_t)in;
	size_t left = n, produced = 0;
	int rc = -1;
	for (;;) {
		uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
		zs.avail_in = chunk;
		size_t room = 256u << 10;
		buf_reserve(out, room);
		zs.next_out = (Bytef *)out->data + out->len;
		zs.avail_out = (uInt)room;
		int zr = inflate(&zs, Z_NO_FLUSH);
		size_t got = room - zs.avail_out;
		left -= chunk - zs.avail_in;
		out->len += got;
		produced += got;
		if (produced > max_out) {
			rc = -2;
			break;
		}
		if (zr == Z_STREAM_END) {
			rc = left == 0 ? 0 : -1;
			break;
		}
		if (zr != Z_OK && !(zr == Z_BUF_ERROR && got > 0))
			break;
		if (got == 0 && zs.avail_in == 0 && left == 0)
			break; /* truncated */
	}
	inflateEnd(&zs);
	return rc;
}

int gzip_compress_buf(const void *in, size_t n, int level, struct buf *out)
{
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	size_t bound = deflateBound(&zs, (uLong)n);
	buf_reserve(out, bound);
	zs.next_in = (Bytef *)(uintptr_t)in;
	zs.avail_in = (uInt)n;
	zs.next_out = (Bytef *)out->data + out->len;
	zs.avail_out = (uInt)bound;
	int zr = deflate(&zs, Z_FINISH);
	if (zr == Z_STREAM_END)
		out->len += bound - zs.avail_out;
	deflateEnd(&zs);
	return zr == Z_STREAM_END ? 0 : -1;
}
