/* wal.h - write-ahead log files: the store's durability before a block is
 * written.
 *
 * A log file (DATA/wal/<generation>.log) is a sequence of records:
 *
 *   u32 magic "EMBW" | u32 payload length | u64 XXH64(payload) | payload
 *
 * Appending writes a whole record; a failed write is cut back off the
 * file, so a log is always a sequence of whole records plus, after a
 * crash, possibly one torn record at the end (never acknowledged). Replay
 * truncates a torn tail, and skips (logs and counts) a record whose magic,
 * length or checksum is wrong, resynchronising on the next magic.
 *
 * The file grows ahead of its records, 4 MiB at a time, in written zeros
 * (docs/internals/store.md, "The log"): a sync of a record inside that
 * part writes only the record's pages, not the file's size and block
 * map, which saves a third of what a commit costs (bench/wal_bench.c).
 * Replay stops at zeros that run to the end; a record whose checksum
 * fails and whose last bytes and all after them are zeros is a write cut
 * short (never acknowledged) and truncated like a torn tail. A clean
 * close cuts the zeros off.
 *
 * The caller serialises appends and syncs on one file (store.c does it
 * under its commit lock).
 */
#ifndef EMBER_SERVER_WAL_H
#define EMBER_SERVER_WAL_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define WAL_MAX_RECORD ((64u << 20) + 256)

struct wal_file {
	int fd;
	uint64_t gen;
	uint64_t size;    /* bytes of whole records */
	uint64_t alloc;   /* bytes of the file: size, then zeros written ahead */
	char *path;
};

/* Replays (when it exists) and opens the log of generation gen in dir for
 * appending. fn gets each valid record's payload; it returns 0, or -1 when
 * the payload does not decode (logged and counted as skipped). */
typedef int (*wal_record_fn)(void *ctx, const uint8_t *payload, size_t len);
int wal_open(const char *dir, uint64_t gen, wal_record_fn fn, void *ctx, struct wal_file *out,
	     uint64_t *skipped, struct buf *err);
/* Appends one record of two pieces (head, body) at size, first writing
 * zeros ahead when the file is too short (a chunk, or only what the record
 * needs when the disk has no room for a chunk). On failure the file is cut
 * back to its previous size and -1 is returned with errno set. */
int wal_append(struct wal_file *w, const void *head, size_t hlen, const void *body, size_t blen);
/* Cuts the file back to size, zeros written ahead included (after a
 * failed sync). */
int wal_truncate(struct wal_file *w, uint64_t size);
void wal_close(struct wal_file *w);
/* Path of the log of generation gen in dir, into out. */
void wal_path(const char *dir, uint64_t gen, struct buf *out);

#endif
