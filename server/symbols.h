/* symbols.h - the server's symbol store: one ember symbol file
 * (lib/symfile.h) per file id in DATA_DIR/symbols/<file id>.sym.
 *
 * Uploads are validated completely before they are written (to a
 * temporary name, fsynced, then renamed), so a stored file is always whole
 * and well-formed. A file's quality is what it was built from (ELF symbols
 * only, or DWARF lines and inlined functions: symfile flags); an upload
 * replaces the stored file only when it is of higher quality, so an
 * agent's automatic ELF-symbol upload never overwrites the DWARF a user
 * uploaded, and richer symbols always win. Files are mapped into memory on
 * first use and stay mapped (a replaced file's old mapping too) until
 * symbols_close(), so names returned by symbols_lookup() stay valid.
 * Frames are stored as (file, offset) and symbolized when queried, so
 * symbols uploaded later name old samples too. Thread-safe.
 */
#ifndef EMBER_SERVER_SYMBOLS_H
#define EMBER_SERVER_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "fileid.h"
#include "symfile.h"

#define SYMBOLS_MAX_UPLOAD (512u << 20)

struct symbols;

int symbols_open(const char *data_dir, struct symbols **out, struct buf *err);
void symbols_close(struct symbols *s);
/* The stored file's quality (symfile flags), or -1 when there is none. */
int symbols_quality(struct symbols *s, const struct file_id *id);
static inline bool symbols_have(struct symbols *s, const struct file_id *id)
{
	return symbols_quality(s, id) >= 0;
}
/* Validates and stores a symbol file. Returns 0 stored, 1 kept the stored
 * file (at least as good), -1 invalid input (err set), -2 storage failure. */
int symbols_put(struct symbols *s, const struct file_id *id, const void *data, size_t len,
		struct buf *err);
/* The frames at offset in the file, innermost first (at most max).
 * Returns how many; 0 when unknown. */
int symbols_lookup(struct symbols *s, const struct file_id *id, uint64_t offset,
		   struct sym_frame *out, int max);
size_t symbols_count(struct symbols *s);

#endif
