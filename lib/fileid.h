/* fileid.h - the identity of an executable or library file.
 *
 * A file id is the first 16 bytes of SHA-256 over the file's first 4 KiB,
 * its last 4 KiB and its length as a big-endian 64-bit number. The same
 * definition is used by the OpenTelemetry eBPF profiler (its "htlhash"),
 * so symbols uploaded for one producer serve the other. Computing it reads
 * at most 8 KiB whatever the file size.
 */
#ifndef EMBER_FILEID_H
#define EMBER_FILEID_H

#include <stdbool.h>
#include <stdint.h>

#define FILE_ID_LEN 16
#define FILE_ID_HEX_LEN (2 * FILE_ID_LEN)

struct file_id {
	uint8_t b[FILE_ID_LEN];
};

/* Returns 0 or -errno. */
int fileid_from_fd(int fd, struct file_id *out);
int fileid_from_path(const char *path, struct file_id *out);
/* out must hold FILE_ID_HEX_LEN + 1 bytes. */
void fileid_hex(const struct file_id *id, char *out);
int fileid_parse_hex(const char *s, struct file_id *out);
bool fileid_equal(const struct file_id *a, const struct file_id *b);

#endif
