/* symupload.h - the thread that uploads the ELF symbols of every
 * executable and library the agent sees, once per file.
 *
 * For each new file the agent hands over an open descriptor. The thread
 * asks the server which file ids it lacks at the quality the agent can
 * provide (POST /ingest/v1/symbols/missing; with -dwarf, a file the server
 * knows only by ELF symbols counts as lacking) and uploads a symbol file
 * (symfile.h, zstd-compressed) for each (PUT /ingest/v1/symbols/{file id}).
 * A file the server already has costs one id in one request. With -dwarf,
 * a file larger than max_input, or whose symbol file would exceed
 * max_symbfile, is uploaded with its ELF symbols only. While the server is unreachable the files wait
 * (the queue is bounded: 4096 files) and are asked about again after an
 * exponential backoff of 1 s to 30 s; an upload the server fails is tried
 * at most three times.
 * The symbols come from a local debug file of the same build when there is
 * one (elfsyms_open_debug_file: by build ID under -debug-file-dir, else by
 * .gnu_debuglink, its CRC or build ID checked), else from the file itself;
 * with -dwarf the debug file's DWARF too.
 * Memory: the symbol file is compressed as it is encoded (only its
 * compressed bytes are held; memstats' MEM_SYMBOLS counts them and the
 * builder's), and a file of MEMSTATS_SMALL_FILE or more first reserves a
 * fifth of its size from the agent's memory budget, shared with the
 * unwinder's table builds (memstats.h).
 */
#ifndef EMBER_AGENT_SYMUPLOAD_H
#define EMBER_AGENT_SYMUPLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "fileid.h"
#include "httpc.h"

struct symupload_stats {
	uint64_t queued, checked, uploaded, present, failed, skipped;
	uint64_t uploaded_bytes;
};

struct symupload;

struct symupload_opts {
	bool dwarf;             /* -dwarf: upload source lines and inlined functions */
	uint64_t max_input;     /* EMBER_MAX_INPUT_FILE_SIZE: no DWARF for larger files */
	uint64_t max_symbfile;  /* EMBER_MAX_SYMBFILE_SIZE: larger symbol files lose their DWARF */
	const char *debug_dir;  /* -debug-file-dir: root of local debug files (copied); NULL/"" = none */
	/* -project: sent with each request (?project=), so a server whose
	 * token for this agent writes only some projects keeps the symbols
	 * for this one (copied); NULL/"" = none */
	const char *project;
};

struct symupload *symupload_start(const struct http_opts *opts, const struct symupload_opts *so);
/* Takes ownership of fd. path is where the file lives as the process
 * that mapped it sees it (absolute; NULL = unknown): its .gnu_debuglink
 * is looked up beside it. */
void symupload_add(struct symupload *u, const struct file_id *id, const char *name,
		   const char *path, int fd);
/* Takes ownership of fd: a cubin (libembercuda.so saved it from a program
 * that loaded it; CUPTI's CRC names it) that PC samples point into, sent
 * as it is to PUT /ingest/v1/cubins/{crc} for the server to name their
 * instructions (no "missing" question: the server keeps one per CRC). */
void symupload_add_cubin(struct symupload *u, uint64_t crc, int fd);
void symupload_get_stats(struct symupload *u, struct symupload_stats *out);
void symupload_stop(struct symupload *u);

#endif
