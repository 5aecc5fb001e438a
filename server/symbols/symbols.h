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
 * symbols uploaded later name old samples too. A symbol file can also be
 * found by GNU build ID (DATA_DIR/symbols/<build id>.bid names the file
 * id), so symbols uploaded from the unstripped build serve the stripped
 * binary that runs. Thread-safe.
 *
 * Trust: the files in DATA_DIR/symbols serve every project; only a
 * credential that may write symbols in every project (an admin, the CLI
 * with a symbols token, debuginfod) puts files there. An agent whose
 * token writes only some projects puts its uploads in each such project's
 * own store (symbols_scope: DATA_DIR/symbols/projects/<id>/symbols), which
 * that project's queries read together with the global one (the more
 * complete file wins; on a tie the project's own), so no credential can
 * change the names another project's users see.
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
/* Validates and stores a symbol file for a file id; with a GNU build ID
 * (build_id_len > 0), other files with that build ID (a stripped copy of
 * the same build) use it too when they have no symbol file of their own.
 * Returns 0 stored, 1 kept the stored file (at least as good), -1 invalid
 * input (err set), -2 storage failure. */
int symbols_put(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		int build_id_len, const void *data, size_t len, struct buf *err);
/* symbols_put without the publisher: a copy of what the shared store
 * holds (symshare.h). */
int symbols_put_local(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		      int build_id_len, const void *data, size_t len, struct buf *err);
/* How complete symbols of that quality are: the files' order (-1: none). */
int symbols_rank(int quality);
/* The frames at offset in the file, innermost first (at most max): from
 * the file id's symbol file, else from the build ID's. Returns how many; 0
 * when unknown. */
int symbols_lookup(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
		   int build_id_len, uint64_t offset, struct sym_frame *out, int max);
/* The quality of what symbols_lookup would use, or -1 when nothing. */
int symbols_quality_any(struct symbols *s, const struct file_id *id, const uint8_t *build_id,
			int build_id_len);
size_t symbols_count(struct symbols *s);

/* --- cubins: the SASS names of PC sampling's cuda_sass frames ------------
 * A cubin (a CUDA ELF image the agent found a program loading) is stored
 * as DATA_DIR/symbols[/projects/<id>]/cubins/<crc>.cubin, crc as CUPTI
 * computes it (16 hex digits), the name its PC samples carry. At query
 * time symbols_sass() names an instruction by its function and offset:
 * the cubin is disassembled once, on first use, by NVIDIA's nvdisasm
 * (symbols_set_nvdisasm, server flag -nvdisasm; sass.h), and its table
 * kept while the server runs (one that failed is tried again after a
 * minute). Without nvdisasm, or before the cubin is uploaded, frames keep
 * their cubin+offset name. */
#define SYMBOLS_MAX_CUBIN (256u << 20)
/* Path of nvdisasm for every store (set on the global one); NULL or "": none. */
void symbols_set_nvdisasm(struct symbols *s, const char *path);
/* Stores a cubin (a 64-bit CUDA ELF; else -1 with err). Returns 0 stored,
 * 1 already stored (a CRC names one image), -1 invalid, -2 storage failure. */
int symbols_put_cubin(struct symbols *s, uint64_t crc, const void *data, size_t len, struct buf *err);
int symbols_put_cubin_local(struct symbols *s, uint64_t crc, const void *data, size_t len, struct buf *err);
bool symbols_have_cubin(struct symbols *s, uint64_t crc);
/* The mnemonic of func's instruction at offset in cubin crc (the store's
 * own, else the global one's), valid until symbols_close; NULL when unknown. */
const char *symbols_sass(struct symbols *s, uint64_t crc, const char *func, uint64_t offset);

/* The store of project's own uploads (opened on first use; owned by s,
 * closed with it), which reads through to s; project NULL: s itself.
 * NULL with err set when its folder cannot be made. */
struct symbols *symbols_scope(struct symbols *s, const char *project, struct buf *err);
/* The store a query of project reads: its scope, or s (logged) when the
 * scope cannot be opened. */
struct symbols *symbols_for_query(struct symbols *s, const char *project);

/* --- the store replicas share (symshare.h) ------------------------------------
 * With a publisher set on the global store, symbols_put and
 * symbols_put_cubin (of any scope) hand what they are about to store to
 * it first: project is the scope's ("" for the global store), name the
 * file id's or the CRC's hex digits, rank symbols_rank of the file's
 * quality. It returns 0 stored (or already there at least as complete),
 * -1 with err set: the upload then fails with -2 (storage failure) and
 * nothing is stored here either. A file already here at least as complete
 * is not handed over (1, kept). */
enum symbols_kind { SYMBOLS_KIND_FILE = 0, SYMBOLS_KIND_CUBIN = 1 };
typedef int (*symbols_publish_fn)(void *ctx, const char *project, enum symbols_kind kind,
				  const char *name, const uint8_t *build_id, int build_id_len, int rank,
				  const void *data, size_t len, struct buf *err);
void symbols_set_publisher(struct symbols *s, symbols_publish_fn fn, void *ctx);

/* Uploads on their way: the server told an agent that it has no symbol
 * file for id (POST /ingest/v1/symbols/missing), so the agent will upload
 * one within moments. symbols_expect records that at now_ms;
 * symbols_expected says whether id still has no symbol file and was
 * expected within the last SYMBOLS_EXPECT_MS (an agent that never uploads
 * stops counting then). At most SYMBOLS_EXPECT_SLOTS are remembered (the
 * oldest give way): what "symbols_pending" counts in query answers. */
#define SYMBOLS_EXPECT_MS 60000
#define SYMBOLS_EXPECT_SLOTS 4096
void symbols_expect(struct symbols *s, const struct file_id *id, int64_t now_ms);
bool symbols_expected(struct symbols *s, const struct file_id *id, int64_t now_ms);

#endif
