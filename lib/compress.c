/* compress.c - see compress.h. */
#include "compress.h"

#include <zstd.h>

int zstd_compress_buf(const void *in, size_t n, int level, struct buf *out)
{
	size_t bound = ZSTD_compressBound(n);
	buf_reserve(out, bound);
	size_t r = ZSTD_compress(out->data + out->len, bound, in, n, level);
	if (ZSTD_isError(r))
		return -1;
	out->len += r;
	out->data[out->len] = '\0';
	return 0;
}

int zstd_decompress_bounded(const void *in, size_t n, size_t max_out, struct buf *out)
{
	ZSTD_DStream *ds = ZSTD_createDStream();
	if (!ds)
		return -1;
	ZSTD_initDStream(ds);
	ZSTD_inBuffer ib = { in, n, 0 };
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
		size_t chunk = ZSTD_DStreamOutSize();
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
	ZSTD_freeDStream(ds);
	if (rc)
		out->len = start;
	if (out->data)
		out->data[out->len] = '\0';
	return rc;
}

/* One context per thread: creating one costs ~100 KiB of allocation, too
 * much to pay per chunk of a query; a thread-local one needs no lock. It
 * lives as long as the thread (the server's threads live as long as it). */
static __thread ZSTD_DCtx *tls_dctx;

int zstd_decompress_exact(const void *in, size_t n, void *out, size_t raw_len)
{
	if (!tls_dctx && !(tls_dctx = ZSTD_createDCtx()))
		return -1;
	unsigned long long claimed = ZSTD_getFrameContentSize(in, n);
	if (claimed != raw_len)
		return -1;
	size_t r = ZSTD_decompressDCtx(tls_dctx, out, raw_len, in, n);
	return ZSTD_isError(r) || r != raw_len ? -1 : 0;
}
