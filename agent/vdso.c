/* vdso.c - see vdso.h. */
#include "vdso.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "elfsyms.h"
#include "util.h"

/* The vDSO's size, from this process's own maps. */
static size_t vdso_size(uint64_t base)
{
	char *text;
	size_t len;
	if (read_file("/proc/self/maps", 4u << 20, &text, &len) < 0)
		return 0;
	size_t size = 0;
	char *save = NULL;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		unsigned long long s, e;
		if (strstr(l, "[vdso]") && sscanf(l, "%llx-%llx", &s, &e) == 2 && s == base) {
			size = (size_t)(e - s);
			break;
		}
	}
	free(text);
	return size;
}

int vdso_load(struct vdso *v)
{
	memset(v, 0, sizeof(*v));
	v->fd = -1;
	uint64_t base = getauxval(AT_SYSINFO_EHDR);
	if (!base)
		return -1;
	size_t size = vdso_size(base);
	if (size == 0 || size > (64u << 20))
		return -1;
	/* elfsyms reads from a descriptor: hand it a memfd copy. */
	int fd = memfd_create("ember-vdso", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, (const void *)(uintptr_t)base, size);
	const char *err = NULL;
	long n = -1;
	if (w == (ssize_t)size)
		n = elfsyms_extract(fd, fd, NULL, &v->image, &err);
	if (n < 0 || symfile_parse(v->image.data, v->image.len, &v->view, &err) < 0) {
		close(fd);
		buf_free(&v->image);
		return -1;
	}
	v->fd = fd;
	v->ok = 1;
	return 0;
}

const char *vdso_lookup(const struct vdso *v, uint64_t off)
{
	if (!v->ok)
		return NULL;
	/* The vDSO image is mapped from its start: mapping offset = file offset. */
	struct sym_frame f;
	return symfile_lookup(&v->view, off, &f, 1) ? f.name : NULL;
}

void vdso_free(struct vdso *v)
{
	if (v->fd >= 0)
		close(v->fd);
	buf_free(&v->image);
	memset(v, 0, sizeof(*v));
}
