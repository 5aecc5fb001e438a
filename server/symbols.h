/* symbols.h - the server's symbol store: one ember symbol file
 * (lib/symfile.h) per file id in DATA_DIR/symbols/<file id>.sym.
 *
 * Uploads are validated completely before they are written (to a
 * temporary name, fsynced, then renamed), so a stored file is always
 * whole and well-formed. Files are mapped into memory on first use and
 * stay mapped; names returned by symbols_lookup() stay valid until
 * symbols_close(). Frames are stored as (file, offset) and symbolized
 * when queried, so symbols uploaded later name old samples too.
 * Thread-safe.
 */
#ifndef EMBER_SERVER_SYMBOLS_H
#define EMBER_SERVER_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fileid.h"

#define SYMBOLS_MAX_UPLOAD (512u << 20)

struct symbols;

int symbols_open(const char *data_dir, struct symbols **out, struct buf *err);
void symbols_close(struct symbols *s);
bool symbols_have(struct symbols *s, const struct file_id *id);
/* Validates and stores a symbol file. Returns 0, or -1 with err set
 * (invalid input), or -2 (storage failure, err set). */
int symbols_put(struct symbols *s, const struct file_id *id, const void *data, size_t len,
		struct buf *err);
/* The function containing offset in the file, or NULL. */
const char *symbols_lookup(struct symbols *s, const struct file_id *id, uint64_t offset);
size_t symbols_count(struct symbols *s);

#endif
