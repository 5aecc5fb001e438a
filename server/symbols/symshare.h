/* symshare.h - the symbols every replica reaches: with --metadata on
 * PostgreSQL, each symbol file and cubin a replica stores goes to the
 * table symbol_files there first (symbols_set_publisher: an upload is
 * acknowledged only once it is shared), and every replica copies into its
 * own store (DATA_DIR/symbols, then a cache) what the others stored, within
 * an interval. So a query on any replica names the frames whose symbols an
 * agent uploaded to another, and a replica that starts on an empty disk
 * fetches them all.
 *
 * Why PostgreSQL: the replicas already share it (projects, users, tokens,
 * batch claims), it keeps bytea values up to 1 GiB (a symbol file is at
 * most 512 MiB, a cubin 256 MiB), and a symbol file is written once and
 * read once per replica: no object store to run beside it.
 *
 * The table: (scope, kind, name) -> rank, build ID, data, seq. scope is
 * the project's id for a project's own uploads ("" for the global store),
 * kind a symbols_kind, name the file id's or the CRC's hex digits, rank how
 * complete the symbols are (symbols_rank): an upsert replaces a row only
 * with a higher rank, as the local store does. seq comes from a sequence,
 * taken again on each replacement: a replica asks for the rows past the
 * highest it has seen (less a margin for inserts that commit out of order)
 * every interval, and for all rows every SYMSHARE_FULL_SCANS intervals,
 * and fetches the data of those its store lacks or holds less complete.
 * What comes from the database is validated as an upload is
 * (symbols_put_local): a damaged row is logged and skipped.
 *
 * PostgreSQL down: uploads fail with 503 (the agent retries; nothing is
 * stored half), queries go on with the symbols each replica has, and the
 * copy resumes once the database is back.
 *
 * Threading: one thread copies (its own connection); the publisher runs on
 * the uploading threads, one at a time on a second connection.
 * Ownership: symshare_close stops the thread and takes the publisher off
 * the store, which must outlive it. */
#ifndef EMBER_SERVER_SYMSHARE_H
#define EMBER_SERVER_SYMSHARE_H

#include <stdint.h>

#include "buf.h"
#include "symbols.h"

#define SYMSHARE_FULL_SCANS 30
#define SYMSHARE_SEQ_MARGIN 256

struct symshare;

/* Opens url (PostgreSQL; its password, NULL: none) twice, creates the
 * table when absent, sets the publisher on s and starts copying every
 * interval_ms (the first copy at once). -1 with err set (SQLite: the
 * replicas of one data dir need no copy, and SQLite has no sequences). */
int symshare_open(const char *url, const char *password, struct symbols *s, int64_t interval_ms,
		  struct symshare **out, struct buf *err);
void symshare_close(struct symshare *sh); /* NULL: nothing */

#endif
