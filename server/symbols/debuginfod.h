/* debuginfod.h - global symbolization: symbols for files nobody uploaded,
 * fetched by GNU build ID from debuginfod servers (elfutils'
 * libdebuginfod), the way distributions publish the debug info of their
 * packages.
 *
 * When a query meets a native frame whose file has no symbol file with
 * source lines and whose build ID is known, it asks the fetcher; a thread
 * downloads the debug file (cached under DATA_DIR/debuginfod-cache), builds
 * a symbol file from its DWARF and ELF symbols with the executable's
 * segments the agent reported, and stores it like an upload. Queries never
 * wait for the network: the names appear in the next query. A build ID
 * that could not be fetched is asked again after ten minutes.
 */
#ifndef EMBER_SERVER_DEBUGINFOD_H
#define EMBER_SERVER_DEBUGINFOD_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "fileid.h"
#include "server/store/store.h"
#include "symbols.h"

struct fetcher_stats {
	uint64_t requested, fetched, failed;
};

struct fetcher;

/* urls: space-separated debuginfod server URLs. Returns NULL with err set
 * on failure. */
struct fetcher *fetcher_start(struct symbols *sym, const char *urls, const char *data_dir,
			      struct buf *err);
void fetcher_stop(struct fetcher *f);
/* Asks for the symbols of file (non-blocking; repeated asks are cheap).
 * Returns whether its fetch is queued or in flight (the names are on their
 * way: "symbols_pending" in query answers); false without a fetcher, a
 * build ID, or once fetched or failed. */
bool fetcher_request(struct fetcher *f, const struct store_file *file);
void fetcher_get_stats(struct fetcher *f, struct fetcher_stats *out);

#endif
