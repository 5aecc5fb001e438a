/* elfsyms.c - see elfsyms.h. */
#include "elfsyms.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dwarfsyms.h"
#include "gopclntab.h"
#include "symfile.h"
#include "util.h"

#define MAX_SYMBOLS (16u << 20)
#define RANK_GOPCLNTAB 5

static void elf_lib_init(void)
{
	/* elf_version() only records the version the caller expects; calling
	 * it from several threads is harmless. */
	(void)elf_version(EV_CURRENT);
}

static Elf *open_elf(int fd)
{
	elf_lib_init();
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (elf && elf_kind(elf) != ELF_K_ELF) {
		elf_end(elf);
		return NULL;
	}
	return elf;
}

/* A segment whose end wraps around the address space is not one a loader
 * would map: a damaged or hostile file. */
static bool sane_segment(const GElf_Phdr *ph)
{
	return ph->p_offset + ph->p_filesz >= ph->p_offset && ph->p_vaddr + ph->p_filesz >= ph->p_vaddr;
}

struct sym {
	uint64_t addr, size;
	uint32_t chain;
	int rank;
};

/* Symbols are read this many at a time through a mapping of their own,
 * dropped after each: the symbol and string tables of a large library
 * (librustc_driver: 24 MB) are then never resident at once, only the names
 * interned in the builder. */
#define SYM_CHUNK 32768

/* Ranks aliases at the same address: a global name beats a weak one,
 * which beats a local one; names from .symtab beat .dynsym duplicates. */
static int symbol_rank(const GElf_Sym *sym, int from_symtab)
{
	int r;
	switch (GELF_ST_BIND(sym->st_info)) {
	case STB_GLOBAL: r = 3; break;
	case STB_WEAK: r = 2; break;
	default: r = 1; break;
	}
	return 10 + r * 2 + from_symtab;
}

/* The function symbols [first, first + SYM_CHUNK) of the symbol table in
 * section scn_index of the file fd, their names interned in b. Returns how
 * many symbols the table has (0 when none can be read). */
static size_t collect_chunk(int fd, size_t scn_index, size_t first, struct symfile_builder *b,
			    struct sym **syms, size_t *n, size_t *cap)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return 0;
	size_t count = 0;
	Elf_Scn *scn = elf_getscn(elf, scn_index);
	GElf_Shdr sh;
	Elf_Data *data;
	if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_entsize == 0 ||
	    !(data = elf_getdata(scn, NULL)) || !data->d_buf) /* SHT_NOBITS: a size, no bytes */
		goto out;
	int from_symtab = sh.sh_type == SHT_SYMTAB;
	count = MIN(sh.sh_size / sh.sh_entsize, (size_t)MAX_SYMBOLS);
	for (size_t i = first; i < count && i < first + SYM_CHUNK && *n < MAX_SYMBOLS; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym)) {
			count = i; /* no more */
			break;
		}
		int type = GELF_ST_TYPE(sym.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
			continue;
		const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
		if (!name || !*name)
			continue;
		xgrow((void **)syms, cap, *n + 1, sizeof(**syms));
		(*syms)[(*n)++] = (struct sym){ sym.st_value, sym.st_size, symfile_chain(b, name, NULL, 0, 0),
						symbol_rank(&sym, from_symtab) };
	}
out:
	elf_end(elf);
	return count;
}

static int cmp_sym(const void *a, const void *b)
{
	const struct sym *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

struct go_ctx {
	struct symfile_builder *b;
	char name[4097];
};

static void on_go_func(void *ctx, uint64_t lo, uint64_t hi, const char *name, size_t len)
{
	struct go_ctx *g = ctx;
	memcpy(g->name, name, len);
	g->name[len] = '\0';
	symfile_add_range(g->b, lo, hi, symfile_chain(g->b, g->name, NULL, 0, 0), RANK_GOPCLNTAB);
}

/* The functions of the ELF file fd (open as elf) into b. */
static void add_elf_symbols(int fd, Elf *elf, struct symfile_builder *b)
{
	struct sym *syms = NULL;
	size_t n = 0, cap = 0;
	size_t shstrndx = 0;
	bool have_shstr = elf_getshdrstrndx(elf, &shstrndx) == 0;
	uint64_t text_vaddr = 0;
	Elf_Scn *scn = NULL;
	while (have_shstr && (scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *name;
		if (gelf_getshdr(scn, &sh) && (name = elf_strptr(elf, shstrndx, sh.sh_name)) &&
		    strcmp(name, ".text") == 0)
			text_vaddr = sh.sh_addr;
	}
	scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) {
			size_t idx = elf_ndxscn(scn);
			for (size_t first = 0;; first += SYM_CHUNK)
				if (collect_chunk(fd, idx, first, b, &syms, &n, &cap) <= first + SYM_CHUNK)
					break;
		} else if (have_shstr && sh.sh_type == SHT_PROGBITS) {
			const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
			Elf_Data *d;
			if (name && strcmp(name, ".gopclntab") == 0 && (d = elf_getdata(scn, NULL)) &&
			    d->d_buf) {
				struct go_ctx *g = xmalloc(sizeof(*g));
				g->b = b;
				gopclntab_functions(d->d_buf, d->d_size, text_vaddr, on_go_func, g);
				free(g);
			}
		}
	}
	if (n > 1)
		qsort(syms, n, sizeof(*syms), cmp_sym);
	for (size_t i = 0; i < n; i++) {
		uint64_t hi = syms[i].addr + syms[i].size;
		if (syms[i].size == 0 || hi < syms[i].addr) {
			/* No size: up to the next symbol at a higher address. */
			size_t j = i + 1;
			while (j < n && syms[j].addr == syms[i].addr)
				j++;
			if (j == n)
				continue;
			hi = syms[j].addr;
		}
		symfile_add_range(b, syms[i].addr, hi, syms[i].chain, syms[i].rank);
	}
	free(syms);
}

long elfsyms_extract_to(int fd, int debug_fd, const struct elfsyms_opts *o, symfile_sink sink,
			void *ctx, size_t *len, const char **err)
{
	Elf *elf = open_elf(fd);
	if (!elf) {
		*err = "not an ELF file";
		return -1;
	}
	Elf *dbg = debug_fd == fd ? elf : open_elf(debug_fd);
	if (!dbg) {
		*err = "the debug file is not an ELF file";
		elf_end(elf);
		return -1;
	}
	struct symfile_builder *b = symfile_builder_new();
	long rc = -1;
	size_t phnum;
	if (elf_getphdrnum(elf, &phnum) != 0) {
		*err = "cannot read program headers";
		goto out;
	}
	if (o && o->nsegments > 0) {
		for (int i = 0; i < o->nsegments && i < SYMFILE_MAX_SEGMENTS; i++)
			symfile_add_segment(b, o->segments[i].offset, o->segments[i].vaddr,
					    o->segments[i].size);
	} else {
		for (size_t i = 0; i < phnum && i < SYMFILE_MAX_SEGMENTS; i++) {
			GElf_Phdr ph;
			if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
			    sane_segment(&ph))
				symfile_add_segment(b, ph.p_offset, ph.p_vaddr, ph.p_filesz);
		}
	}
	add_elf_symbols(debug_fd, dbg, b);
	if (dbg != elf)
		add_elf_symbols(fd, elf, b); /* names the debug file may lack (.dynsym) */
	struct stat st;
	if (o && o->dwarf && fstat(debug_fd, &st) == 0 &&
	    (o->max_input == 0 || (uint64_t)st.st_size <= o->max_input)) {
		long d = dwarfsyms_add(dbg, b, o->deadline_ns ? o->deadline_ns : UINT64_MAX);
		if (d > 0)
			symfile_set_flags(b, SYMFILE_HAS_LINES | SYMFILE_HAS_INLINES);
	}
	size_t n = symfile_builder_ranges(b);
	if (o && o->on_bytes)
		o->on_bytes(o->on_bytes_ctx, symfile_builder_bytes(b));
	if (symfile_finish_to(b, sink, ctx, len) < 0) {
		*err = "symbol file limits exceeded";
		goto out;
	}
	rc = (long)n;
out:
	symfile_builder_free(b);
	if (dbg != elf)
		elf_end(dbg);
	elf_end(elf);
	return rc;
}

static int buf_sink(void *ctx, const void *data, size_t n)
{
	buf_append(ctx, data, n);
	return 0;
}

long elfsyms_extract(int fd, int debug_fd, const struct elfsyms_opts *o, struct buf *out,
		     const char **err)
{
	size_t start = out->len, len = 0;
	long n = elfsyms_extract_to(fd, debug_fd, o, buf_sink, out, &len, err);
	if (n < 0) {
		out->len = start; /* a sink may have written part of it */
		if (out->data)
			out->data[start] = '\0';
	}
	return n;
}

int elfsyms_exec_segments(int fd, struct elf_segment *out, int max)
{
	Elf *elf = open_elf(fd);
	if (!elf)
		return -1;
	size_t phnum;
	int n = 0;
	if (elf_getphdrnum(elf, &phnum) == 0) {
		for (size_t i = 0; i < phnum && i < 256 && n < max; i++) {
			GElf_Phdr ph;
			if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
			    sane_segment(&ph))
				out[n++] = (struct elf_segment){ ph.p_offset, ph.p_vaddr, ph.p_filesz };
		}
	}
	elf_end(elf);
	return n;
}

static int note_build_id(Elf_Data *data, uint8_t *id)
{
	size_t off = 0, name_off, desc_off;
	GElf_Nhdr nh;
	while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
		    memcmp((const char *)data->d_buf + name_off, "GNU", 4) == 0) {
			size_t n = nh.n_descsz;
			if (n == 0 || n > ELF_BUILD_ID_MAX)
				return 0;
			memcpy(id, (const char *)data->d_buf + desc_off, n);
			return (int)n;
		}
	}
	return 0;
}

int elfsyms_build_id(int fd, uint8_t *id)
{
	Elf *elf = open_elf(fd);
	if (!elf)
		return -1;
	int found = 0;
	Elf_Scn *scn = NULL;
	while (!found && (scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		if (data && data->d_buf)
			found = note_build_id(data, id);
	}
	if (!found) {
		/* Stripped of section headers: look at PT_NOTE segments. */
		size_t phnum;
		if (elf_getphdrnum(elf, &phnum) == 0) {
			for (size_t i = 0; !found && i < phnum && i < 256; i++) {
				GElf_Phdr ph;
				if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_NOTE)
					continue;
				Elf_Data *data = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset,
								      ph.p_filesz, ELF_T_NHDR);
				if (data)
					found = note_build_id(data, id);
			}
		}
	}
	elf_end(elf);
	return found;
}

static Elf_Scn *section_named(Elf *elf, const char *want)
{
	size_t shstrndx;
	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return NULL;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *name;
		if (gelf_getshdr(scn, &sh) && (name = elf_strptr(elf, shstrndx, sh.sh_name)) &&
		    strcmp(name, want) == 0)
			return scn;
	}
	return NULL;
}

/* The .gnu_debuglink name and, when crc is set, its CRC (stored after the
 * name's NUL, 4-byte aligned, in the file's byte order; a section too short
 * to hold it is refused then). Returns 0 or -1. */
static int debuglink_read(int fd, char *name, size_t n, uint32_t *crc)
{
	Elf *elf = open_elf(fd);
	if (!elf)
		return -1;
	int rc = -1;
	Elf_Scn *scn = section_named(elf, ".gnu_debuglink");
	Elf_Data *d = scn ? elf_getdata(scn, NULL) : NULL;
	const char *ident = elf_getident(elf, NULL);
	if (d && d->d_buf && ident) {
		size_t l = strnlen(d->d_buf, d->d_size);
		size_t at = (l + 4) & ~(size_t)3;
		bool fits = crc ? at + 4 <= d->d_size : d->d_size > 4 && l < d->d_size;
		if (l > 0 && l < n && fits && !memchr(d->d_buf, '/', l)) {
			if (crc) {
				const uint8_t *c = (const uint8_t *)d->d_buf + at;
				*crc = ident[EI_DATA] == ELFDATA2MSB
					       ? (uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 |
							 (uint32_t)c[2] << 8 | c[3]
					       : (uint32_t)c[3] << 24 | (uint32_t)c[2] << 16 |
							 (uint32_t)c[1] << 8 | c[0];
			}
			memcpy(name, d->d_buf, l);
			name[l] = '\0';
			rc = 0;
		}
	}
	elf_end(elf);
	return rc;
}

int elfsyms_debuglink(int fd, char *name, size_t n)
{
	return debuglink_read(fd, name, n, NULL);
}

/* The CRC-32 of the whole file (what .gnu_debuglink records), or -1. */
static int64_t file_crc(int fd)
{
	uLong crc = crc32(0L, Z_NULL, 0);
	uint8_t b[1 << 16];
	off_t off = 0;
	for (;;) {
		ssize_t r = pread(fd, b, sizeof(b), off);
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		crc = crc32(crc, b, (uInt)r);
		off += r;
	}
	return (int64_t)(uint32_t)crc;
}

/* Opens a candidate debug file when it is an ELF file other than fd's
 * (nothing else is checked here). */
static int open_candidate(const char *path, const struct stat *self)
{
	int cfd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (cfd < 0)
		return -1;
	struct stat st;
	if (fstat(cfd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (st.st_dev == self->st_dev && st.st_ino == self->st_ino)) {
		close(cfd);
		return -1;
	}
	return cfd;
}

int elfsyms_open_debug_file(int fd, const char *path, const char *debug_root, char *found,
			    size_t n)
{
	struct stat self;
	if (fstat(fd, &self) != 0 || !debug_root)
		return -1;
	uint8_t bid[ELF_BUILD_ID_MAX], cbid[ELF_BUILD_ID_MAX];
	int bl = elfsyms_build_id(fd, bid);
	char cand[4400];
	if (bl >= 2) {
		char hex[2 * ELF_BUILD_ID_MAX + 1];
		hex_encode(bid, (size_t)bl, hex);
		snprintf(cand, sizeof(cand), "%s/.build-id/%.2s/%s.debug", debug_root, hex, hex + 2);
		int cfd = open_candidate(cand, &self);
		if (cfd >= 0) {
			if (elfsyms_build_id(cfd, cbid) == bl && memcmp(bid, cbid, (size_t)bl) == 0) {
				snprintf(found, n, "%s", cand);
				return cfd;
			}
			close(cfd);
		}
	}
	char link[256];
	uint32_t crc;
	if (debuglink_read(fd, link, sizeof(link), &crc) < 0)
		return -1;
	/* Next to the file, in .debug/ beside it, under the root by the
	 * file's directory: what gdb looks at. */
	char dir[4096] = "";
	const char *slash = path && path[0] == '/' ? strrchr(path, '/') : NULL;
	if (slash && (size_t)(slash - path) < sizeof(dir)) {
		memcpy(dir, path, (size_t)(slash - path));
		dir[slash - path] = '\0';
	}
	for (int i = 0; i < 3; i++) {
		if (!slash)
			i = 2; /* no directory known: only under the root */
		if (i == 0)
			snprintf(cand, sizeof(cand), "%s/%s", dir, link);
		else if (i == 1)
			snprintf(cand, sizeof(cand), "%s/.debug/%s", dir, link);
		else
			snprintf(cand, sizeof(cand), "%s%s/%s", debug_root, dir, link);
		int cfd = open_candidate(cand, &self);
		if (cfd < 0)
			continue;
		/* The same build: the build IDs agree where both have one,
		 * else the CRC the link recorded. */
		int cl = bl > 0 ? elfsyms_build_id(cfd, cbid) : 0;
		bool ok = cl > 0 ? cl == bl && memcmp(bid, cbid, (size_t)bl) == 0 : file_crc(cfd) == (int64_t)crc;
		if (ok) {
			snprintf(found, n, "%s", cand);
			return cfd;
		}
		close(cfd);
	}
	return -1;
}

bool elfsyms_has_dwarf(int fd)
{
	Elf *elf = open_elf(fd);
	if (!elf)
		return false;
	Elf_Scn *scn = section_named(elf, ".debug_info");
	GElf_Shdr sh;
	bool has = scn && gelf_getshdr(scn, &sh) && sh.sh_type != SHT_NOBITS && sh.sh_size > 0;
	elf_end(elf);
	return has;
}

static void lookup_in(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct elf_symbol_query *q,
		      size_t n)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	if (!data || !data->d_buf || !sh->sh_entsize)
		return;
	size_t count = MIN(sh->sh_size / sh->sh_entsize, (size_t)MAX_SYMBOLS);
	for (size_t i = 0; i < count; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF || !sym.st_value)
			continue;
		const char *name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name)
			continue;
		for (size_t k = 0; k < n; k++)
			if (!q[k].found && strcmp(name, q[k].name) == 0) {
				q[k].value = sym.st_value;
				q[k].size = sym.st_size;
				q[k].found = true;
			}
	}
}

int elfsyms_lookup(int fd, struct elf_symbol_query *q, size_t n)
{
	Elf *elf = open_elf(fd);
	if (!elf)
		return -1;
	for (size_t k = 0; k < n; k++)
		q[k].found = false;
	/* .symtab first: it has the local symbols (e.g. a function's .cold
	 * part) and the same values for the exported ones. */
	for (int pass = 0; pass < 2; pass++) {
		Elf_Scn *scn = NULL;
		while ((scn = elf_nextscn(elf, scn)) != NULL) {
			GElf_Shdr sh;
			if (gelf_getshdr(scn, &sh) && sh.sh_type == (pass == 0 ? SHT_SYMTAB : SHT_DYNSYM))
				lookup_in(elf, scn, &sh, q, n);
		}
	}
	elf_end(elf);
	int found = 0;
	for (size_t k = 0; k < n; k++)
		found += q[k].found;
	return found;
}

int elfsyms_read_vaddr(int fd, uint64_t vaddr, void *out, size_t len)
{
	Elf *elf = open_elf(fd);
	if (!elf)
		return -1;
	size_t nph = 0;
	int rc = -1;
	if (elf_getphdrnum(elf, &nph) == 0) {
		for (size_t i = 0; i < nph && i < 256; i++) {
			GElf_Phdr ph;
			if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !sane_segment(&ph))
				continue;
			if (vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr <= ph.p_filesz &&
			    len <= ph.p_filesz - (vaddr - ph.p_vaddr)) {
				off_t at = (off_t)(ph.p_offset + (vaddr - ph.p_vaddr));
				rc = pread(fd, out, len, at) == (ssize_t)len ? 0 : -1;
				break;
			}
		}
	}
	elf_end(elf);
	return rc;
}
