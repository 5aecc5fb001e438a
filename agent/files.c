/* files.c - see files.h. */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

struct key {
	const struct file_registry *r;
	uint64_t dev, ino;
};

static bool eq_key(const void *ctx, uint32_t idx)
{
	const struct key *k = ctx;
	return k->r->files[idx].dev == k->dev && k->r->files[idx].ino == k->ino;
}

void files_init(struct file_registry *r, const char *proc_root, new_file_fn fn, void *ctx)
{
	memset(r, 0, sizeof(*r));
	r->proc_root = proc_root;
	r->on_new = fn;
	r->on_new_ctx = ctx;
}

void files_free(struct file_registry *r)
{
	for (size_t i = 0; i < r->count; i++) {
		free(r->files[i].name);
		free(r->files[i].path);
	}
	free(r->files);
	hmap_free(&r->index);
	memset(r, 0, sizeof(*r));
}

static int open_mapping(const struct file_registry *r, int pid, const struct maps_line *m)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%d/map_files/%llx-%llx", r->proc_root, pid,
		 (unsigned long long)m->start, (unsigned long long)m->end);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	/* map_files needs CAP_SYS_ADMIN; fall back to the path as the
	 * process sees it, through its root directory. */
	if (m->path_len == 0 || m->path[0] != '/' || m->path_len > 4000)
		return -1;
	snprintf(path, sizeof(path), "%s/%d/root%.*s", r->proc_root, pid, (int)m->path_len,
		 m->path);
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* Reads what ember needs from the file (build ID, executable segments),
 * stores it and announces it. Takes ownership of fd. */
static uint32_t add(struct file_registry *r, struct agent_file *f, int fd)
{
	int bl = elfsyms_build_id(fd, f->build_id);
	f->build_id_len = bl > 0 ? bl : 0;
	struct elf_segment segs[FILE_MAX_SEGMENTS];
	int ns = elfsyms_exec_segments(fd, segs, FILE_MAX_SEGMENTS);
	for (int i = 0; i < ns; i++)
		f->segs[i] = (struct file_segment){ segs[i].offset, segs[i].vaddr, segs[i].size };
	f->nsegs = ns > 0 ? ns : 0;
	xgrow((void **)&r->files, &r->cap, r->count + 1, sizeof(*r->files));
	uint32_t idx = (uint32_t)r->count++;
	r->files[idx] = *f;
	if (r->on_new)
		r->on_new(r->on_new_ctx, idx, &r->files[idx], fd);
	else
		close(fd);
	return idx;
}

uint32_t files_get(struct file_registry *r, int pid, const struct maps_line *m)
{
	uint64_t dev = (uint64_t)m->dev_major << 32 | m->dev_minor;
	struct key k = { r, dev, m->inode };
	uint64_t h = hash_mix(hash_u64(dev), m->inode);
	uint32_t idx;
	if (hmap_find(&r->index, h, eq_key, &k, &idx))
		return idx;
	int fd = open_mapping(r, pid, m);
	if (fd < 0)
		return FILE_NONE;
	struct agent_file f = { 0 };
	int rc = fileid_from_fd(fd, &f.id);
	if (rc < 0) {
		log_debug("cannot identify %.*s of pid %d: %s", (int)m->path_len, m->path, pid,
			  strerror(-rc));
		close(fd);
		return FILE_NONE;
	}
	const char *base = m->path;
	for (size_t i = 0; i < m->path_len; i++)
		if (m->path[i] == '/')
			base = m->path + i + 1;
	size_t blen = (size_t)(m->path + m->path_len - base);
	f.name = blen ? xstrndup(base, MIN(blen, 255)) : xstrdup("[unknown]");
	if (m->path_len && m->path[0] == '/' && m->path_len < 4096)
		f.path = xstrndup(m->path, m->path_len);
	f.dev = dev;
	f.ino = m->inode;
	idx = add(r, &f, fd);
	hmap_insert(&r->index, h, idx);
	return idx;
}

uint32_t files_add_image(struct file_registry *r, const char *name, int fd)
{
	struct agent_file f = { 0 };
	if (fileid_from_fd(fd, &f.id) < 0) {
		close(fd);
		return FILE_NONE;
	}
	f.name = xstrdup(name);
	return add(r, &f, fd); /* not in the (device, inode) index */
}

int files_mapping_bias(const struct file_registry *r, uint32_t index, uint64_t start,
		       uint64_t offset, uint64_t *bias)
{
	if (index >= r->count)
		return -1;
	const struct agent_file *f = &r->files[index];
	for (int i = 0; i < f->nsegs; i++) {
		const struct file_segment *s = &f->segs[i];
		/* Mappings start on a page: the segment's first page may begin
		 * before its p_offset (e.g. 0x18000 for p_offset 0x182f0). */
		uint64_t first = s->offset & ~(uint64_t)0xfff;
		if (offset >= first && offset - first < MAX(s->size + (s->offset - first), (uint64_t)1)) {
			/* address a holds file offset offset + (a - start), which is
			 * vaddr s->vaddr + (that - s->offset). */
			*bias = start - offset + s->offset - s->vaddr;
			return 0;
		}
	}
	return -1;
}

size_t files_bytes(const struct file_registry *r)
{
	size_t n = r->cap * sizeof(*r->files) + hmap_bytes(&r->index);
	for (size_t i = 0; i < r->count; i++)
		n += (r->files[i].name ? strlen(r->files[i].name) + 1 : 0) +
		     (r->files[i].path ? strlen(r->files[i].path) + 1 : 0);
	return n;
}
