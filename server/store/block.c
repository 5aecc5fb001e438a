/* block.c - see block.h; the byte layout is in docs/internals/store.md. */
#include "block_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "compress.h"
#include "util.h"

/* --- opening -------------------------------------------------------------- */

int block_open(const char *path, struct block **out, struct buf *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		buf_printf(err, "%s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	uint8_t head[HEADER_LEN], trail[TRAILER_LEN];
	uint8_t *footer = NULL;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < HEADER_LEN + TRAILER_LEN ||
	    pread_exact(fd, head, HEADER_LEN, 0) < 0 ||
	    pread_exact(fd, trail, TRAILER_LEN, (uint64_t)st.st_size - TRAILER_LEN) < 0) {
		buf_printf(err, "%s: too short or unreadable", path);
		goto fail;
	}
	uint32_t version;
	memcpy(&version, head + 8, 4);
	if (memcmp(head, BLOCK_MAGIC, 8) != 0 ||
	    (version != BLOCK_VERSION && version != BLOCK_VERSION_UNSLICED) ||
	    memcmp(trail + 16, BLOCK_END, 8) != 0) {
		buf_printf(err, "%s: not an ember block (bad magic or version)", path);
		goto fail;
	}
	uint64_t flen, fsum;
	memcpy(&flen, trail, 8);
	memcpy(&fsum, trail + 8, 8);
	uint64_t size = (uint64_t)st.st_size;
	if (flen == 0 || flen > MAX_FOOTER || flen > size - HEADER_LEN - TRAILER_LEN) {
		buf_printf(err, "%s: bad footer length", path);
		goto fail;
	}
	uint64_t foff = size - TRAILER_LEN - flen;
	footer = xmalloc(flen);
	if (pread_exact(fd, footer, flen, foff) < 0 || !SUM_OK(XXH64(footer, flen, 0), fsum)) {
		buf_printf(err, "%s: footer checksum mismatch", path);
		goto fail;
	}
	struct block *b = xcalloc(1, sizeof(*b));
	b->fd = fd;
	b->version = version;
	struct cursor c = { footer, footer + flen, false };
	uint32_t nsec = get_u32(&c);
	for (uint32_t i = 0; i < nsec && !c.bad; i++) {
		uint32_t id = get_u32(&c);
		struct section_ref r = { get_u64(&c), get_u64(&c), get_u64(&c), get_u64(&c) };
		if (id == 0 || id >= SEC_COUNT || r.off < HEADER_LEN || r.off > foff ||
		    r.len > foff - r.off || r.raw > BLOCK_MAX_SECTION || !zstd_can_expand(r.len, r.raw)) {
			c.bad = true;
			break;
		}
		b->sec[id] = r;
	}
	struct block_info *in = &b->info;
	in->partition_ms = (int64_t)get_u64(&c);
	in->min_ts = (int64_t)get_u64(&c);
	in->max_ts = (int64_t)get_u64(&c);
	in->granularity_ms = get_u32(&c);
	in->slice_ms = version == BLOCK_VERSION_UNSLICED ? 0 : get_u32(&c);
	in->level = get_u32(&c);
	in->rows = get_u64(&c);
	in->samples = get_u64(&c);
	in->nseries = get_u64(&c);
	in->file_bytes = size;
	in->gen = get_u64(&c);
	in->wal_lo = get_u64(&c);
	in->wal_hi = get_u64(&c);
	uint64_t nsrc = get_u32(&c);
	if (nsrc > cursor_left(&c) / 8)
		c.bad = true;
	else if (nsrc) {
		in->sources = xmalloc(nsrc * sizeof(uint64_t));
		for (uint64_t i = 0; i < nsrc; i++)
			in->sources[in->nsources++] = get_u64(&c);
	}
	uint64_t nag = c.bad ? 0 : varint_get_max(&c, cursor_left(&c) / 2);
	if (nag)
		in->agents = xcalloc(nag, sizeof(*in->agents));
	for (uint64_t i = 0; i < nag && !c.bad; i++) {
		uint64_t len = varint_get_max(&c, 256);
		if (c.bad || len > cursor_left(&c)) {
			c.bad = true;
			break;
		}
		in->agents[in->nagents].instance = xstrndup((const char *)c.p, len);
		c.p += len;
		in->agents[in->nagents++].seq = varint_get(&c);
	}
	if (cursor_left(&c) != 0)
		c.bad = true;
	for (int i = 1; i < SEC_COUNT && !c.bad; i++)
		if (!b->sec[i].len)
			c.bad = true;
	/* Times are Unix milliseconds before the year 30000: arithmetic on
	 * them cannot overflow. */
	const int64_t max_ts = (int64_t)1 << 50;
	if (in->rows && (in->min_ts < 0 || in->max_ts < in->min_ts || in->max_ts > max_ts))
		c.bad = true;
	if (!in->rows)
		in->min_ts = in->max_ts = 0;
	if (in->partition_ms < -max_ts || in->partition_ms > max_ts ||
	    in->granularity_ms > 86400000 || in->slice_ms > 86400000 ||
	    (version != BLOCK_VERSION_UNSLICED && in->slice_ms == 0))
		c.bad = true;
	if (c.bad || in->granularity_ms == 0) {
		buf_printf(err, "%s: malformed footer", path);
		b->fd = -1;
		block_close(b);
		goto fail;
	}
	free(footer);
	b->path = xstrdup(path);
	*out = b;
	return 0;
fail:
	free(footer);
	close(fd);
	return -1;
}

void block_close(struct block *b)
{
	if (!b)
		return;
	if (b->fd >= 0)
		close(b->fd);
	for (size_t i = 0; i < b->info.nagents; i++)
		free(b->info.agents[i].instance);
	free_all(b->info.agents, b->info.sources, b->path, b);
}

const struct block_info *block_info(const struct block *b)
{
	return &b->info;
}

const char *block_path(const struct block *b)
{
	return b->path;
}
