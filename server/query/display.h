/* display.h - what a stored frame looks like to a user: its function
 * names, symbolized at query time.
 *
 * A stored frame becomes one or more display frames (the chain of
 * functions inlined at its address, outermost first), each named by a
 * key: (frame type, display name, binary) interned across every part a
 * query reads, so the same function in two blocks is one key. Names are
 * demangled and glibc's internal aliases shown by their common names
 * unless raw; a native frame with no symbol is `<binary>+0x<offset>`.
 * Keys whose name matches a frame-mask pattern are marked masked; keys
 * matching the search pattern are marked matched. Patterns are matched
 * within the bounds of server/query/uregex.h: once one is reached, no key is
 * marked any more and display_check fails the query.
 *
 * Symbolization is cached per stored frame of the segment begun with
 * display_part(); the cache is rebuilt for each part.
 *
 * Ownership: the display owns its keys, strings and compiled patterns.
 * Threading: one query, one thread.
 */
#ifndef EMBER_SERVER_DISPLAY_H
#define EMBER_SERVER_DISPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "jsonw.h"
#include "server/store/store.h"
#include "strtab.h"
#include "server/symbols/symbols.h"

/* Pseudo frame types of output nodes that are not frames. */
#define DT_ROOT 254
#define DT_SYNTHETIC 253
#define DT_OTHER 252

#define DISPLAY_MAX_MASKS 64
#define DISPLAY_MAX_DEPTH 4096

struct dkey {
	uint8_t type;
	bool masked, matched;
	bool pending; /* unnamed while its symbols are on their way (display_pending) */
	bool unsymbolized; /* a frame without a symbol, named <binary>+0x<address> */
	bool absent;       /* a group-by node of samples without the attribute, "[no <name>]" */
	uint64_t address;  /* of an unsymbolized frame: its offset in the binary */
	uint32_t name, binary, file; /* display string ids; file 0 = unknown */
};

/* One display frame of a stored frame. */
struct drun {
	uint32_t key;
	uint32_t line; /* 0 = unknown */
};

struct display_opts {
	bool raw_names, verbose_names;
	const char *const *masks; /* regular expressions of frames to hide */
	size_t nmasks;
	const char *search;       /* regular expression marking keys matched, or NULL */
	uint64_t regex_budget_ms; /* time all matches may take; 0 = UREGEX_BUDGET_MS */
};

struct fetcher;
struct display;

/* Returns NULL with a message for the client in err (a bad pattern);
 * what_masks names the mask array in that message. fetch may be NULL. */
struct display *display_new(struct symbols *sym, struct fetcher *fetch,
			    const struct display_opts *o, const char *what_masks, struct buf *err);
void display_free(struct display *d);

uint32_t display_key(struct display *d, uint8_t type, const char *name, const char *binary,
		     const char *file);
/* Marks key as a frame without a symbol at address (display_key names it
 * "<binary>+0x<address>"): display_frame_json then says so in fields. */
void display_mark_unsymbolized(struct display *d, uint32_t key, uint64_t address);
/* Marks a synthetic key as the group of samples without its attribute:
 * display_frame_json then writes "absent":true. */
void display_mark_absent(struct display *d, uint32_t key);
const struct dkey *display_get(const struct display *d, uint32_t key);
/* Writes the fields of the frame of key into the object open in w: name
 * (what a user reads), frame_type, binary and file when known, line when
 * known and not 0, for a frame without a symbol "symbolized":false and
 * "address" (hex, "0x..."), and for a group-by node without its attribute
 * "absent":true, so clients never parse names. */
void display_frame_json(struct jsonw *w, const struct display *d, uint32_t key, uint32_t line);
const char *display_str(const struct display *d, uint32_t id);
size_t display_count(const struct display *d);
/* 0, or UREGEX_RC with the message for the client appended to err when
 * a pattern reached a bound (uregex.h): the query must answer 422.
 * err may be NULL (a check between parts). */
int display_check(const struct display *d, struct buf *err);
/* How many keys are frames without a name whose symbols are on their way:
 * an agent was told to upload them (symbols_expected) or a debuginfod
 * fetch is queued or running (fetcher_request). A later query will name
 * them ("symbols_pending" in the answers). */
size_t display_pending(const struct display *d);
/* Whether a search pattern was given (keys then carry `matched`). */
bool display_has_search(const struct display *d);
/* Whether mask patterns were given (else no key is masked). */
bool display_has_masks(const struct display *d);

/* Starts symbolizing the frames of segment p (valid until the next call). */
void display_part(struct display *d, const struct store_segment *p);
/* The display frames of stored frame `frame` of the current part. */
const struct drun *display_frame(struct display *d, uint32_t frame, uint32_t *n);
/* The unmasked display keys of stack node `stack`, outermost first, with
 * their lines (lines may be NULL). Returns the count written (at most
 * max; deeper stacks are cut at the leaf end). */
size_t display_stack(struct display *d, uint32_t stack, uint32_t *keys, uint32_t *lines,
		     size_t max);

/* The SPEC name of a frame type ("native", "kernel", "root", ...). */
const char *frame_type_name(uint8_t type);
/* The stored frame type (1..SFT_MAX) a name of frame_type_name stands
 * for ("cuda_kernel" -> SFT_CUDA_KERNEL), or -1 for any other name
 * ("root" and "synthetic" included: they are not stored frames). */
int frame_type_parse(const char *name);

#endif
