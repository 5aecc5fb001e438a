/* vdso.h - names for frames in the vDSO.
 *
 * The vDSO is an ELF image the kernel maps into every process; it is the
 * same image in all processes on a host, so the agent reads the symbols
 * of its own copy once and resolves every process's vDSO frames by their
 * offset into the mapping.
 */
#ifndef EMBER_AGENT_VDSO_H
#define EMBER_AGENT_VDSO_H

#include <stdint.h>

#include "buf.h"
#include "symfile.h"

struct vdso {
	struct buf image; /* the symbol file built from the vDSO */
	struct symfile_view view;
	int ok;
	int fd; /* a memfd holding a copy of the vDSO image, or -1 */
};

/* Reads the agent's own vDSO. Returns 0, or -1 when there is none. The
 * image stays available as v->fd (for the unwinder's table) until
 * vdso_free or until the caller takes it (sets v->fd to -1). */
int vdso_load(struct vdso *v);
/* The function at offset off of the vDSO mapping, or NULL. */
const char *vdso_lookup(const struct vdso *v, uint64_t off);
void vdso_free(struct vdso *v);

#endif
