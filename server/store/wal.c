/* wal.c - see wal.h. */
#include "wal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include "log.h"
#include "util.h"

#define WAL_MAGIC 0x57424d45u /* "EMBW" little-endian */
#define WAL_HDR 16
/* A log file grows by this much at a time, in zeros that the next sync
 * makes durable with the record that needed them (wal.h). */
#define WAL_CHUNK (4u << 20)

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* 1 when bytes [from, to) of the file are all zero, 0 when not, -1 on a
 * read error. */
static int all_zero(int fd, uint64_t from, uint64_t to)
{
	uint8_t chunk[65536];
	while (from < to) {
		size_t n = (size_t)MIN((uint64_t)sizeof(chunk), to - from);
		if (pread_exact(fd, chunk, n, from) < 0)
			return -1;
		for (size_t i = 0; i < n; i++)
			if (chunk[i])
				return 0;
		from += n;
	}
	return 1;
}

/* The offset just after the last byte of the file that is not zero (0 for
 * a file of zeros), or -1 on a read error: where the zeros written ahead
 * begin. */
static int64_t data_end(int fd, uint64_t size)
{
	uint8_t chunk[65536];
	while (size > 0) {
		size_t n = (size_t)MIN((uint64_t)sizeof(chunk), size);
		if (pread_exact(fd, chunk, n, size - n) < 0)
			return -1;
		for (size_t i = n; i-- > 0;)
			if (chunk[i])
				return (int64_t)(size - n + i + 1);
		size -= n;
	}
	return 0;
}

/* Finds the next offset > from holding the record magic, or size. */
static uint64_t resync(int fd, uint64_t from, uint64_t size)
{
	uint8_t chunk[65536];
	uint64_t off = from;
	while (off + 4 <= size) {
		size_t n = (size_t)MIN((uint64_t)sizeof(chunk), size - off);
		if (pread_exact(fd, chunk, n, off) < 0)
			return size;
		for (size_t i = 0; i + 4 <= n; i++)
			if (get32(chunk + i) == WAL_MAGIC)
				return off + i;
		off += n - 3;
	}
	return size;
}

/* A damaged record at off skipped, up to next (the next magic): logged as
 * "<what> at offset <off><why>", counted in *skipped. Returns next. */
static uint64_t skip_damage(const struct wal_file *w, uint64_t off, uint64_t next, const char *what,
			    const char *why, uint64_t *skipped)
{
	log_error("%s: %s at offset %llu%s; skipping %llu bytes", w->path, what,
		  (unsigned long long)off, why, (unsigned long long)(next - off));
	(*skipped)++;
	return next;
}

static int replay(struct wal_file *w, wal_record_fn fn, void *ctx, uint64_t *skipped,
		  struct buf *err)
{
	struct stat st;
	if (fstat(w->fd, &st) < 0) {
		buf_printf(err, "stat %s: %s", w->path, strerror(errno));
		return -1;
	}
	uint64_t size = (uint64_t)st.st_size, off = 0;
	/* Records end where the zeros written ahead (wal_append) begin, or
	 * within the last record when its own bytes end in zeros. */
	int64_t end = data_end(w->fd, size);
	if (end < 0) {
		buf_printf(err, "reading %s: %s", w->path, strerror(errno));
		return -1;
	}
	uint8_t *payload = NULL;
	size_t cap = 0;
	while (off < (uint64_t)end) {
		uint8_t hdr[WAL_HDR];
		if (off + WAL_HDR > size) {
			log_warn("%s: incomplete record header at offset %llu: truncating the unacknowledged tail",
				 w->path, (unsigned long long)off);
			break;
		}
		if (pread_exact(w->fd, hdr, WAL_HDR, off) < 0) {
			buf_printf(err, "reading %s: %s", w->path, strerror(errno));
			free(payload);
			return -1;
		}
		uint32_t len = get32(hdr + 4);
		if (get32(hdr) != WAL_MAGIC || len > WAL_MAX_RECORD) {
			off = skip_damage(w, off, resync(w->fd, off + 1, (uint64_t)end), "corrupt record",
					  " (bad header)", skipped);
			continue;
		}
		if (off + WAL_HDR + len > size) {
			/* Only the last record can be cut short: a length that
			 * runs over a later record is damage, skipped. (Truncating
			 * there would let the next append hide under it.) */
			uint64_t next = resync(w->fd, off + 1, (uint64_t)end);
			if (next < (uint64_t)end) {
				off = skip_damage(w, off, next, "corrupt record",
						  " (its length runs past the records after it)", skipped);
				continue;
			}
			log_warn("%s: record at offset %llu is cut short: truncating the unacknowledged tail",
				 w->path, (unsigned long long)off);
			break;
		}
		xgrow((void **)&payload, &cap, len ? len : 1, 1);
		if (pread_exact(w->fd, payload, len, off + WAL_HDR) < 0) {
			buf_printf(err, "reading %s: %s", w->path, strerror(errno));
			free(payload);
			return -1;
		}
		if (XXH64(payload, len, 0) != get64(hdr + 8)) {
			/* A record whose last bytes, and all after it, are still
			 * the zeros written ahead: a write cut short by a crash,
			 * never synced, so never acknowledged. */
			uint64_t rend = off + WAL_HDR + len;
			if (all_zero(w->fd, rend - MIN(len, 8u), size) == 1) {
				log_warn("%s: record at offset %llu was cut short: truncating the unacknowledged tail",
					 w->path, (unsigned long long)off);
				break;
			}
			off = skip_damage(w, off, resync(w->fd, off + 1, (uint64_t)end), "record",
					  " fails its checksum", skipped);
			continue;
		}
		if (fn(ctx, payload, len) < 0) {
			log_error("%s: record at offset %llu does not decode; skipped", w->path,
				  (unsigned long long)off);
			(*skipped)++;
		}
		off += WAL_HDR + len;
	}
	free(payload);
	if (off < size && ftruncate(w->fd, (off_t)off) < 0) {
		buf_printf(err, "truncating %s: %s", w->path, strerror(errno));
		return -1;
	}
	w->size = w->alloc = off;
	return 0;
}

void wal_path(const char *dir, uint64_t gen, struct buf *out)
{
	buf_reset(out);
	buf_printf(out, "%s/%016llu.log", dir, (unsigned long long)gen);
}

int wal_open(const char *dir, uint64_t gen, wal_record_fn fn, void *ctx, struct wal_file *out,
	     uint64_t *skipped, struct buf *err)
{
	struct buf path = { 0 };
	wal_path(dir, gen, &path);
	memset(out, 0, sizeof(*out));
	out->gen = gen;
	out->path = buf_steal(&path, NULL);
	out->fd = open(out->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (out->fd < 0) {
		buf_printf(err, "cannot open %s: %s", out->path, strerror(errno));
		wal_close(out);
		return -1;
	}
	if (replay(out, fn, ctx, skipped, err) < 0) {
		wal_close(out);
		return -1;
	}
	return 0;
}

int wal_truncate(struct wal_file *w, uint64_t size)
{
	if (ftruncate(w->fd, (off_t)size) < 0)
		return -1;
	w->size = w->alloc = size;
	return 0;
}

/* Writes zeros over [from, to). */
static int write_zeros(int fd, uint64_t from, uint64_t to)
{
	static const uint8_t zeros[65536]; /* read only */
	while (from < to) {
		size_t n = (size_t)MIN((uint64_t)sizeof(zeros), to - from);
		if (pwrite_exact(fd, zeros, n, from) < 0)
			return -1;
		from += n;
	}
	return 0;
}

/* Makes the file at least need bytes long in written zeros: a chunk at a
 * time, or, when the disk has no room for a chunk, just what is needed.
 * On failure the file is cut back and errno set. */
static int reserve(struct wal_file *w, uint64_t need)
{
	if (need <= w->alloc)
		return 0;
	uint64_t to = (need + WAL_CHUNK - 1) / WAL_CHUNK * WAL_CHUNK;
	int rc = write_zeros(w->fd, w->alloc, to);
	if (rc < 0 && (errno == ENOSPC || errno == EDQUOT)) {
		if (ftruncate(w->fd, (off_t)w->alloc) == 0) {
			to = need;
			rc = write_zeros(w->fd, w->alloc, to);
		}
	}
	if (rc < 0) {
		int e = errno;
		if (ftruncate(w->fd, (off_t)w->alloc) < 0)
			log_error("%s: cannot cut back a failed extension: %s", w->path,
				  strerror(errno));
		errno = e;
		return -1;
	}
	w->alloc = to;
	return 0;
}

int wal_append(struct wal_file *w, const void *head, size_t hlen, const void *body, size_t blen)
{
	size_t len = hlen + blen;
	if (len > WAL_MAX_RECORD) {
		errno = EFBIG;
		return -1;
	}
	uint8_t hdr[WAL_HDR];
	uint32_t magic = WAL_MAGIC, l32 = (uint32_t)len;
	memcpy(hdr, &magic, 4);
	memcpy(hdr + 4, &l32, 4);
	XXH64_state_t *st = XXH64_createState();
	XXH64_reset(st, 0);
	XXH64_update(st, head, hlen);
	XXH64_update(st, body, blen);
	uint64_t sum = XXH64_digest(st);
	XXH64_freeState(st);
	memcpy(hdr + 8, &sum, 8);
	struct iovec iov[3] = { { hdr, WAL_HDR }, { (void *)head, hlen }, { (void *)body, blen } };
	size_t total = WAL_HDR + len, done = 0;
	if (reserve(w, w->size + total) < 0)
		return -1;
	int e = 0;
	while (done < total) {
		/* Skip the iovecs already written. */
		struct iovec v[3];
		int nv = 0;
		size_t skip = done;
		for (int i = 0; i < 3; i++) {
			if (skip >= iov[i].iov_len) {
				skip -= iov[i].iov_len;
				continue;
			}
			v[nv].iov_base = (char *)iov[i].iov_base + skip;
			v[nv++].iov_len = iov[i].iov_len - skip;
			skip = 0;
		}
		ssize_t n = pwritev(w->fd, v, nv, (off_t)(w->size + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			e = n < 0 ? errno : EIO;
			break;
		}
		done += (size_t)n;
	}
	if (e) {
		if (wal_truncate(w, w->size) < 0)
			log_error("%s: cannot roll back a failed write: %s", w->path, strerror(errno));
		errno = e;
		return -1;
	}
	w->size += total;
	return 0;
}

void wal_close(struct wal_file *w)
{
	/* A clean close leaves only whole records (what replay would keep). */
	if (w->fd >= 0 && w->alloc > w->size && ftruncate(w->fd, (off_t)w->size) < 0)
		log_warn("%s: cannot cut off the zeros written ahead: %s", w->path, strerror(errno));
	if (w->fd >= 0)
		close(w->fd);
	free(w->path);
	w->fd = -1;
	w->path = NULL;
}
