/* fileid.c - see fileid.h. */
#include "fileid.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "util.h"

static int pread_full(int fd, uint8_t *p, size_t n, off_t off, size_t *got)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(fd, p + done, n - done, off + (off_t)done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	*got = done;
	return 0;
}

int fileid_from_fd(int fd, struct file_id *out)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	uint64_t size = (uint64_t)st.st_size;
	uint8_t head[4096], tail[4096];
	size_t nhead = 0, ntail = 0;
	int rc = pread_full(fd, head, sizeof(head), 0, &nhead);
	if (rc)
		return rc;
	off_t toff = size > sizeof(tail) ? (off_t)(size - sizeof(tail)) : 0;
	rc = pread_full(fd, tail, sizeof(tail), toff, &ntail);
	if (rc)
		return rc;
	uint8_t be[8];
	for (int i = 0; i < 8; i++)
		be[i] = (uint8_t)(size >> (56 - 8 * i));

	uint8_t digest[EVP_MAX_MD_SIZE];
	unsigned int dlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
		 EVP_DigestUpdate(ctx, head, nhead) && EVP_DigestUpdate(ctx, tail, ntail) &&
		 EVP_DigestUpdate(ctx, be, sizeof(be)) && EVP_DigestFinal_ex(ctx, digest, &dlen);
	EVP_MD_CTX_free(ctx);
	if (!ok || dlen < FILE_ID_LEN)
		return -EIO;
	memcpy(out->b, digest, FILE_ID_LEN);
	return 0;
}

int fileid_from_path(const char *path, struct file_id *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fileid_from_fd(fd, out);
	close(fd);
	return rc;
}

void fileid_hex(const struct file_id *id, char *out)
{
	hex_encode(id->b, FILE_ID_LEN, out);
}

int fileid_parse_hex(const char *s, struct file_id *out)
{
	return hex_decode(s, strlen(s), out->b, FILE_ID_LEN);
}

bool fileid_equal(const struct file_id *a, const struct file_id *b)
{
	return memcmp(a->b, b->b, FILE_ID_LEN) == 0;
}
