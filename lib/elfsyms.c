/* elfsyms.c - see elfsyms.h. */
#include "elfsyms.h"

#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <string.h>

#include "symfile.h"
#include "util.h"

static void elf_lib_init(void)
{
	/* elf_version() only records the version the caller expects; calling
	 * it from several threads is harmless. */
	(void)elf_version(EV_CURRENT);
}

/* A segment whose end wraps around the address space is not one a loader
 * would map: a damaged or hostile file. */
static bool sane_segment(const GElf_Phdr *ph)
{
	return ph->p_offset + ph->p_filesz >= ph->p_offset && ph->p_vaddr + ph->p_filesz >= ph->p_vaddr;
}

/* Ranks aliases at the same address: a global name beats a weak one,
 * which beats a local one; names from .symtab beat .dynsym duplicates. */
static int symbol_rank(const GElf_Sym *sym, int from_symtab)
{
	int r = 0;
	switch (GELF_ST_BIND(sym->st_info)) {
	case STB_GLOBAL: r = 3; break;
	case STB_WEAK: r = 2; break;
	default: r = 1; break;
	}
	return r * 2 + from_symtab;
}

static int add_symbols(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, int from_symtab,
		       struct symfile_builder *b)
{
	if (sh->sh_entsize == 0)
		return 0;
	Elf_Data *data = elf_getdata(scn, NULL);
	if (!data)
		return -1;
	size_t count = sh->sh_size / sh->sh_entsize;
	if (count > SYMFILE_MAX_SYMBOLS)
		count = SYMFILE_MAX_SYMBOLS;
	for (size_t i = 0; i < count; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym))
			break;
		int type = GELF_ST_TYPE(sym.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
			continue;
		const char *name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || !*name)
			continue;
		if (symfile_builder_symbols(b) >= SYMFILE_MAX_SYMBOLS)
			return 0;
		symfile_add_symbol(b, name, sym.st_value, sym.st_size, symbol_rank(&sym, from_symtab));
	}
	return 0;
}

long elfsyms_extract(int fd, struct buf *out, const char **err)
{
	elf_lib_init();
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		*err = "not an ELF file";
		if (elf)
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
	for (size_t i = 0; i < phnum && i < SYMFILE_MAX_SEGMENTS; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph))
			continue;
		if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && sane_segment(&ph))
			symfile_add_segment(b, ph.p_offset, ph.p_vaddr, ph.p_filesz);
	}
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) {
			if (add_symbols(elf, scn, &sh, sh.sh_type == SHT_SYMTAB, b) < 0) {
				*err = "cannot read a symbol table";
				goto out;
			}
		}
	}
	size_t n = symfile_builder_symbols(b);
	if (symfile_finish(b, out) < 0) {
		*err = "symbol file limits exceeded";
		goto out;
	}
	rc = (long)n;
out:
	symfile_builder_free(b);
	elf_end(elf);
	return rc;
}

int elfsyms_exec_segments(int fd, struct elf_segment *out, int max)
{
	elf_lib_init();
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		if (elf)
			elf_end(elf);
		return -1;
	}
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
	elf_lib_init();
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		if (elf)
			elf_end(elf);
		return -1;
	}
	int found = 0;
	Elf_Scn *scn = NULL;
	while (!found && (scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		if (data)
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
