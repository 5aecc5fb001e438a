/* export.h - a flamegraph's tree (server/query/tree.h) written in the formats
 * other tools read, for SPEC.md's export endpoint
 * (POST /public/api/v1/project/{project_id}/flamegraph/{format}):
 *
 * - pprof: a gzipped perftools.profiles.Profile (lib/proto/pprof_profile.proto),
 *   as `go tool pprof` reads it. One Function per distinct frame (its
 *   display name; system_name "<frame type>:<name>"; filename its source
 *   file), one Location per distinct (frame, line), one Mapping per
 *   binary, one Sample per node with self value: its stack, leaf first.
 *   Sample types by event kind: on_cpu samples/count and, with a known
 *   rate, cpu/nanoseconds (count x 1e9 / rate); off_cpu
 *   off_cpu/nanoseconds; cuda gpu/nanoseconds; alloc alloc_space/bytes.
 * - folded: Brendan Gregg's collapsed stacks, one line per node with self
 *   value, "outermost;...;leaf VALUE\n"; names escaped (export_folded_frame)
 *   so that no name can split a frame or a line.
 * - speedscope: speedscope's file format
 *   (https://www.speedscope.app/file-format-schema.json), one sampled
 *   profile: shared frames (one per distinct frame), samples as lists of
 *   frame indexes from the outermost frame, and their weights.
 *
 * The nodes written are those of the JSON flamegraph under the same
 * max_nodes (otree_visit), "[other]" nodes included, so every export is
 * bounded as the JSON is and its values sum to the same total. The root
 * is not a frame; a value on the root itself (a stack whose every frame
 * was masked) is a sample with no frames (pprof, speedscope) or the line
 * "[no frames] VALUE" (folded).
 */
#ifndef EMBER_SERVER_EXPORT_H
#define EMBER_SERVER_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "display.h"
#include "tree.h"

enum fg_format { FG_FORMAT_JSON, FG_FORMAT_PPROF, FG_FORMAT_FOLDED, FG_FORMAT_SPEEDSCOPE };

/* The format named in the path ("json", "pprof", "folded", "speedscope"),
 * or -1. */
int fg_format_parse(const char *name);
const char *fg_format_name(enum fg_format f);
const char *fg_format_content_type(enum fg_format f);
/* The file name suffix of a download: "json", "pb.gz", "folded.txt",
 * "speedscope.json". */
const char *fg_format_extension(enum fg_format f);

/* An export writes a stack per node with self value, so its size grows
 * with the nodes times their depth (a deep recursion: each level's stack
 * repeats every level above it), unlike the JSON's. Past this many bytes
 * (folded text, speedscope's samples, pprof's location ids) the export
 * is refused, asking for fewer nodes. */
#define EXPORT_MAX_BYTES (256u << 20)

struct export_info {
	uint8_t kind;          /* enum store_event_kind */
	uint16_t hz;           /* sample rate (on_cpu), 0 unknown */
	uint64_t total;
	int64_t start_ms, end_ms;
	const char *name;      /* the profile's name (speedscope) */
	size_t max_bytes;      /* 0: EXPORT_MAX_BYTES (tests ask less) */
};

/* Appends the tree, at most max_nodes nodes of it, in format f (not
 * FG_FORMAT_JSON) to out. Returns 0, or -1 with a message in err (the
 * export would pass max_bytes; compressing failed); out is then left as
 * it was. */
int export_tree(enum fg_format f, struct otree *t, const struct display *d, size_t max_nodes,
		const struct export_info *info, struct buf *out, struct buf *err);

/* Appends one frame name for a folded line: '\' as "\\", ';' as "\;",
 * newline and carriage return as "\n" and "\r", other control bytes as
 * "\xHH"; every other byte as is. */
void export_folded_frame(struct buf *out, const char *name);

#endif
