/* files.h - the agent's registry of executable files it has seen mapped.
 *
 * Keyed by (device, inode) as /proc/PID/maps reports them, so a library
 * mapped by a thousand processes is opened, hashed and announced once.
 * On first sight the file is opened through /proc/PID/map_files (which
 * works across mount namespaces and for deleted files), its identity and
 * GNU build ID are computed, and the new_file callback receives an open
 * descriptor for the symbol uploader.
 */
#ifndef EMBER_AGENT_FILES_H
#define EMBER_AGENT_FILES_H

#include <stdint.h>

#include "elfsyms.h"
#include "fileid.h"
#include "hmap.h"
#include "maps.h"

#define FILE_NONE UINT32_MAX

#define FILE_MAX_SEGMENTS 4

/* An executable PT_LOAD segment: file offset -> ELF virtual address. */
struct file_segment {
	uint64_t offset, vaddr, size;
};

struct agent_file {
	struct file_id id;
	char *name; /* base name */
	char *path; /* the path the first process that mapped it saw (where its
		       debug file may lie), or NULL (images) */
	uint64_t dev, ino;
	uint8_t build_id[ELF_BUILD_ID_MAX];
	int build_id_len;
	struct file_segment segs[FILE_MAX_SEGMENTS];
	int nsegs;
};

/* Receives ownership of fd. */
typedef void (*new_file_fn)(void *ctx, uint32_t index, const struct agent_file *f, int fd);

struct file_registry {
	struct agent_file *files;
	size_t count, cap;
	struct hmap index;
	const char *proc_root; /* "/proc", or a test directory */
	new_file_fn on_new;
	void *on_new_ctx;
};

void files_init(struct file_registry *r, const char *proc_root, new_file_fn fn, void *ctx);
void files_free(struct file_registry *r);
/* Bytes the registry holds (entries, names, index): memory accounting. */
size_t files_bytes(const struct file_registry *r);
/* Returns the index of the file behind mapping m of process pid, or
 * FILE_NONE when it cannot be opened. */
uint32_t files_get(struct file_registry *r, int pid, const struct maps_line *m);
/* Registers a file that exists only in memory (the vDSO image), given an
 * open descriptor to a copy of it (which the registry then owns or hands
 * to new_file). Returns its index or FILE_NONE. */
uint32_t files_add_image(struct file_registry *r, const char *name, int fd);
/* The bias of a mapping of file index that starts at start with file
 * offset offset: its addresses minus the bias are the file's ELF virtual
 * addresses. Returns 0, or -1 when no executable segment holds offset. */
int files_mapping_bias(const struct file_registry *r, uint32_t index, uint64_t start,
		       uint64_t offset, uint64_t *bias);
static inline const struct agent_file *files_at(const struct file_registry *r, uint32_t i)
{
	return &r->files[i];
}

#endif
