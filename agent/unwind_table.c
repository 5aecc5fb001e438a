/* unwind_table.c - see unwind_table.h. */
#include "unwind_table.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gopclntab.h"
#include "memstats.h"
#include "util.h"

/* DWARF register numbers on x86-64. */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

void rule_set_init(struct rule_set *rs, size_t max)
{
	memset(rs, 0, sizeof(*rs));
	rs->max = max;
}

void rule_set_free(struct rule_set *rs)
{
	free(rs->rules);
	hmap_free(&rs->index);
	memset(rs, 0, sizeof(*rs));
}

struct rule_key {
	const struct rule_set *rs;
	const struct unwind_rule *r;
};

static bool eq_rule(const void *ctx, uint32_t idx)
{
	const struct rule_key *k = ctx;
	return memcmp(&k->rs->rules[idx], k->r, sizeof(*k->r)) == 0;
}

uint32_t rule_set_intern(struct rule_set *rs, const struct unwind_rule *r)
{
	uint64_t h = hash_bytes(r, sizeof(*r));
	struct rule_key k = { rs, r };
	uint32_t idx;
	if (hmap_find(&rs->index, h, eq_rule, &k, &idx))
		return idx;
	if (rs->count >= rs->max)
		return UINT32_MAX;
	xgrow((void **)&rs->rules, &rs->cap, rs->count + 1, sizeof(*rs->rules));
	idx = (uint32_t)rs->count++;
	rs->rules[idx] = *r;
	hmap_insert(&rs->index, h, idx);
	return idx;
}

void unwind_rows_free(struct unwind_rows *r)
{
	memstats_add(MEM_UNWIND_BUILD, -(int64_t)(r->cap * sizeof(*r->rows)));
	free(r->rows);
	memset(r, 0, sizeof(*r));
}

/* Rows come in address order (walk and the Go table sort them). */
static void push_row(struct unwind_rows *out, uint64_t vaddr, uint32_t rule)
{
	if (out->count && out->rows[out->count - 1].rule == rule)
		return; /* the previous row already covers it */
	if (!out->count)
		out->base = vaddr;
	if (vaddr < out->base || vaddr - out->base > UINT32_MAX) {
		out->too_wide = true;
		return;
	}
	uint32_t addr = (uint32_t)(vaddr - out->base);
	if (out->count && out->rows[out->count - 1].addr == addr) {
		out->rows[out->count - 1].rule = rule;
		return;
	}
	size_t cap = out->cap;
	xgrow((void **)&out->rows, &out->cap, out->count + 1, sizeof(*out->rows));
	if (out->cap != cap)
		memstats_add(MEM_UNWIND_BUILD, (int64_t)((out->cap - cap) * sizeof(*out->rows)));
	out->rows[out->count].addr = addr;
	out->rows[out->count].rule = rule;
	out->count++;
}

/* "register saved at CFA + n": libdw writes it as DW_OP_call_frame_cfa,
 * optionally followed by DW_OP_plus_uconst n (n may wrap negative). */
static bool cfa_offset_rule(const Dwarf_Op *ops, size_t n, int64_t *off)
{
	if (n == 1 && ops[0].atom == DW_OP_call_frame_cfa) {
		*off = 0;
		return true;
	}
	if (n == 2 && ops[0].atom == DW_OP_call_frame_cfa && ops[1].atom == DW_OP_plus_uconst) {
		*off = (int64_t)ops[1].number;
		return true;
	}
	return false;
}

/* "register saved at REG + n" (REG_RSP in a signal frame, REG_RBP in a
 * DRAP frame): DW_OP_call_frame_cfa (the implicit push libdw adds for
 * expression rules) then DW_OP_breg<reg> n. */
static bool reg_expr_rule(const Dwarf_Op *ops, size_t n, unsigned reg, int64_t *off)
{
	size_t i = (n >= 1 && ops[0].atom == DW_OP_call_frame_cfa) ? 1 : 0;
	if (n - i != 1)
		return false;
	if (ops[i].atom == DW_OP_breg0 + reg) {
		*off = (int64_t)ops[i].number;
		return true;
	}
	if (ops[i].atom == DW_OP_bregx && ops[i].number == reg) {
		*off = (int64_t)ops[i].number2;
		return true;
	}
	return false;
}

static bool fits16(int64_t v)
{
	return v >= INT16_MIN && v <= INT16_MAX;
}

/* The PLT expression GNU ld, gold, lld and mold emit for lazy binding:
 * breg7 OFF; breg16 0; lit15; and; litT; ge; lit3; shl; plus. */
static bool plt_rule(const Dwarf_Op *ops, size_t n, struct unwind_rule *r)
{
	if (n != 9 || ops[0].atom != DW_OP_breg7 || ops[1].atom != DW_OP_breg16 ||
	    ops[2].atom != DW_OP_lit15 || ops[3].atom != DW_OP_and || ops[4].atom < DW_OP_lit0 ||
	    ops[4].atom > DW_OP_lit31 || ops[5].atom != DW_OP_ge || ops[6].atom != DW_OP_lit3 ||
	    ops[7].atom != DW_OP_shl || ops[8].atom != DW_OP_plus)
		return false;
	r->kind = UW_PLT;
	r->cfa_off = (int32_t)ops[0].number;
	r->aux = (int16_t)(ops[4].atom - DW_OP_lit0);
	r->ra_off = -8;
	return true;
}

/* Turns libdw's frame state into a rule. */
static void frame_rule(Dwarf_Frame *fr, bool signal, struct unwind_rule *r)
{
	memset(r, 0, sizeof(*r));
	Dwarf_Op *cfa;
	size_t ncfa;
	if (dwarf_frame_cfa(fr, &cfa, &ncfa) != 0 || ncfa == 0)
		return; /* UW_INVALID */
	Dwarf_Op mem[3], *ops;
	size_t n;
	if (signal) {
		/* CFA = *(SP + off): the saved SP in the ucontext at SP. */
		int64_t sp_off, bp_off, ra_off;
		if (ncfa == 2 && cfa[1].atom == DW_OP_deref && reg_expr_rule(cfa, 1, REG_RSP, &sp_off) &&
		    dwarf_frame_register(fr, REG_RBP, mem, &ops, &n) == 0 && reg_expr_rule(ops, n, REG_RSP, &bp_off) &&
		    dwarf_frame_register(fr, REG_RA, mem, &ops, &n) == 0 && reg_expr_rule(ops, n, REG_RSP, &ra_off) &&
		    fits16(bp_off) && fits16(ra_off)) {
			r->kind = UW_SIGNAL;
			r->cfa_off = (int32_t)sp_off;
			r->bp_off = (int16_t)bp_off;
			r->ra_off = (int16_t)ra_off;
		}
		return;
	}
	if (dwarf_frame_register(fr, REG_RA, mem, &ops, &n) != 0)
		return;
	if (n == 0 && ops != NULL) {
		r->kind = UW_STOP; /* return address undefined: the outermost frame */
		return;
	}
	int64_t ra_off;
	if (!cfa_offset_rule(ops, n, &ra_off) || !fits16(ra_off))
		return;
	if (ncfa == 1 && (cfa[0].atom == DW_OP_bregx || cfa[0].atom == DW_OP_breg7 ||
			  cfa[0].atom == DW_OP_breg6)) {
		uint64_t reg = cfa[0].atom == DW_OP_bregx ? cfa[0].number
							   : (uint64_t)(cfa[0].atom - DW_OP_breg0);
		int64_t off = cfa[0].atom == DW_OP_bregx ? (int64_t)cfa[0].number2
							  : (int64_t)cfa[0].number;
		if ((reg != REG_RSP && reg != REG_RBP) || off < INT32_MIN || off > INT32_MAX)
			return;
		r->kind = reg == REG_RSP ? UW_CFA_SP : UW_CFA_BP;
		r->cfa_off = (int32_t)off;
	} else if (ncfa == 2 && cfa[1].atom == DW_OP_deref &&
		   (cfa[0].atom == DW_OP_breg6 || (cfa[0].atom == DW_OP_bregx && cfa[0].number == REG_RBP))) {
		/* GCC's realigned stack: the DRAP register saved below BP. */
		int64_t off = cfa[0].atom == DW_OP_bregx ? (int64_t)cfa[0].number2 : (int64_t)cfa[0].number;
		if (off < INT32_MIN || off > INT32_MAX)
			return;
		r->kind = UW_CFA_DEREF_BP;
		r->cfa_off = (int32_t)off;
	} else if (!plt_rule(cfa, ncfa, r)) {
		return;
	}
	r->ra_off = (int16_t)ra_off;
	int64_t bp_off;
	if (dwarf_frame_register(fr, REG_RBP, mem, &ops, &n) == 0) {
		if (cfa_offset_rule(ops, n, &bp_off) && fits16(bp_off)) {
			r->bp_saved = UW_BP_AT_CFA;
			r->bp_off = (int16_t)bp_off;
		} else if (reg_expr_rule(ops, n, REG_RBP, &bp_off) && fits16(bp_off)) {
			r->bp_saved = UW_BP_AT_BP;
			r->bp_off = (int16_t)bp_off;
		}
	}
}

/* The section called name, or NULL. */
static Elf_Scn *section_named(Elf *elf, const char *want, GElf_Shdr *sh)
{
	size_t shstrndx;
	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return NULL;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		if (!gelf_getshdr(scn, sh))
			continue;
		const char *name = elf_strptr(elf, shstrndx, sh->sh_name);
		if (name && strcmp(name, want) == 0)
			return scn;
	}
	return NULL;
}

/* FDE start addresses from .eh_frame_hdr's binary-search table. Only the
 * encodings every Linux linker writes are accepted (table: datarel|sdata4). */
static int fde_starts_from_hdr(Elf *elf, uint64_t **out, size_t *n)
{
	GElf_Shdr sh;
	Elf_Scn *scn = section_named(elf, ".eh_frame_hdr", &sh);
	if (!scn)
		return -1;
	Elf_Data *d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf || d->d_size < 12) /* SHT_NOBITS: a size, no bytes */
		return -1;
	const uint8_t *p = d->d_buf;
	if (p[0] != 1 || p[3] != 0x3b) /* version 1; DW_EH_PE_datarel|sdata4 */
		return -1;
	size_t pos = 4;
	/* eh_frame_ptr: 4 bytes for the sdata4/udata4 encodings used. */
	if ((p[1] & 0x0f) != 0x0b && (p[1] & 0x0f) != 0x03)
		return -1;
	pos += 4;
	if ((p[2] & 0x0f) != 0x03 && (p[2] & 0x0f) != 0x0b)
		return -1;
	uint32_t count;
	memcpy(&count, p + pos, 4);
	pos += 4;
	if ((uint64_t)count * 8 > d->d_size - pos)
		return -1;
	uint64_t *starts = xmalloc((count ? count : 1) * sizeof(uint64_t));
	for (uint32_t i = 0; i < count; i++) {
		int32_t loc;
		memcpy(&loc, p + pos + (size_t)i * 8, 4);
		starts[i] = sh.sh_addr + (uint64_t)(int64_t)loc;
	}
	*out = starts;
	*n = count;
	return 0;
}

/* FDE start addresses of .debug_frame (absolute, address-sized). */
static int fde_starts_from_debug_frame(Elf *elf, uint64_t **out, size_t *n)
{
	GElf_Shdr sh;
	Elf_Scn *scn = section_named(elf, ".debug_frame", &sh);
	if (!scn)
		return -1;
	if ((sh.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0)
		return -1;
	Elf_Data *d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf || !d->d_size) /* SHT_NOBITS: a size, no bytes */
		return -1;
	const unsigned char *ident = (const unsigned char *)elf_getident(elf, NULL);
	size_t cap = 0, cnt = 0;
	uint64_t *starts = NULL;
	Dwarf_Off off = 0, next;
	Dwarf_CFI_Entry e;
	while (dwarf_next_cfi(ident, d, false, off, &next, &e) == 0) {
		if (!dwarf_cfi_cie_p(&e) && e.fde.end - e.fde.start >= 16) {
			uint64_t loc;
			memcpy(&loc, e.fde.start, 8);
			xgrow((void **)&starts, &cap, cnt + 1, sizeof(uint64_t));
			starts[cnt++] = loc;
		}
		if (next <= off || next == (Dwarf_Off)-1)
			break;
		off = next;
	}
	*out = starts;
	*n = cnt;
	return cnt ? 0 : -1;
}

/* Where the CFI comes from: .eh_frame (a Dwarf_CFI of the ELF file) or
 * .debug_frame (one owned by a Dwarf handle). libdw caches every FDE it
 * looks up until the handle ends, which for a large library (a 550 MB one
 * has hundreds of thousands) is tens of MB held at once; walk() reopens
 * the handle every CFI_CHUNK functions so the cache stays small. */
struct cfi_src {
	Elf *elf;
	bool debug_frame;
	Dwarf *dw;
	Dwarf_CFI *cfi;
};

enum { CFI_CHUNK = 2048 };

static void cfi_close(struct cfi_src *s)
{
	if (s->debug_frame) {
		if (s->dw)
			dwarf_end(s->dw); /* owns its CFI */
	} else if (s->cfi) {
		dwarf_cfi_end(s->cfi);
	}
	s->dw = NULL;
	s->cfi = NULL;
}

static bool cfi_open(struct cfi_src *s)
{
	if (!s->debug_frame)
		return (s->cfi = dwarf_getcfi_elf(s->elf)) != NULL;
	s->dw = dwarf_begin_elf(s->elf, DWARF_C_READ, NULL);
	s->cfi = s->dw ? dwarf_getcfi(s->dw) : NULL;
	if (!s->cfi)
		cfi_close(s);
	return s->cfi != NULL;
}

/* The rows of every function in starts, reading the CFI from src (open on
 * entry, open or closed on return: the caller closes it). */
static int walk(struct cfi_src *src, uint64_t *starts, size_t nstarts, struct rule_set *rs,
		const struct unwind_budget *budget, struct unwind_rows *out, struct buf *err)
{
	struct unwind_rule invalid = { 0 };
	uint32_t invalid_id = rule_set_intern(rs, &invalid);
	qsort(starts, nstarts, sizeof(uint64_t), cmp_u64);
	for (size_t i = 0; i < nstarts; i++) {
		if (i && starts[i] == starts[i - 1])
			continue;
		if (i && i % CFI_CHUNK == 0) {
			cfi_close(src);
			if (!cfi_open(src)) {
				buf_puts(err, "the call-frame information could not be reopened");
				return -1;
			}
		}
		Dwarf_CFI *cfi = src->cfi;
		uint64_t addr = starts[i];
		uint64_t limit = i + 1 < nstarts ? starts[i + 1] : UINT64_MAX;
		while (addr < limit) {
			Dwarf_Frame *fr;
			if (dwarf_cfi_addrframe(cfi, addr, &fr) != 0)
				break;
			Dwarf_Addr s, e;
			bool signal = false;
			if (dwarf_frame_info(fr, &s, &e, &signal) < 0 || e <= addr) {
				free(fr);
				break;
			}
			struct unwind_rule r;
			frame_rule(fr, signal, &r);
			free(fr);
			uint32_t id = rule_set_intern(rs, &r);
			if (id == UINT32_MAX) {
				buf_puts(err, "the shared rule table is full");
				return -1;
			}
			push_row(out, addr, id);
			addr = e;
			if (out->count > budget->max_rows) {
				buf_printf(err, "more than %zu unwind rows", budget->max_rows);
				return -1;
			}
		}
		if (addr < limit)
			push_row(out, addr, invalid_id); /* the gap up to the next function */
		if ((i & 255) == 0 && now_mono_ns() > budget->deadline_ns) {
			buf_puts(err, "building the unwind table took too long");
			return -1;
		}
	}
	return 0;
}

/* Functions that are the bottom of a stack although their CFI does not say
 * so (the Go runtime's). Unwinding past them would read garbage. */
static const char *const stack_bottoms[] = {
	"runtime.goexit", "runtime.goexit.abi0", "runtime.mstart", "runtime.mstart.abi0",
	"runtime.rt0_go", "runtime.rt0_go.abi0",
};

/* Makes rule cover [lo, hi) in the sorted rows (a range before the first
 * row or more than 4 GiB past it is left as it is). */
static void override_range(struct unwind_rows *r, uint64_t lo, uint64_t hi, uint32_t rule)
{
	size_t n = r->count;
	if (lo < r->base || hi <= lo || hi - r->base > UINT32_MAX)
		return;
	uint32_t l = (uint32_t)(lo - r->base), h = (uint32_t)(hi - r->base);
	/* The rule in force at hi, to restore after the range. */
	uint32_t after = UINT32_MAX;
	for (size_t i = 0; i < n && r->rows[i].addr <= h; i++)
		after = r->rows[i].rule;
	struct unwind_row *rows = xmalloc((n + 2) * sizeof(*rows));
	size_t k = 0;
	for (size_t i = 0; i < n && r->rows[i].addr < l; i++)
		rows[k++] = r->rows[i];
	rows[k++] = (struct unwind_row){ l, rule };
	if (after != UINT32_MAX)
		rows[k++] = (struct unwind_row){ h, after };
	for (size_t i = 0; i < n; i++)
		if (r->rows[i].addr > h)
			rows[k++] = r->rows[i];
	free(r->rows);
	memstats_add(MEM_UNWIND_BUILD, ((int64_t)(n + 2) - (int64_t)r->cap) * (int64_t)sizeof(*rows));
	r->rows = rows;
	r->count = k;
	r->cap = n + 2;
}

static void mark_stack_bottoms(Elf *elf, struct rule_set *rs, struct unwind_rows *out)
{
	struct unwind_rule stop = { .kind = UW_STOP };
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || sh.sh_entsize == 0)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		size_t n = d && d->d_buf ? sh.sh_size / sh.sh_entsize : 0;
		for (size_t i = 0; i < n && i < (16u << 20); i++) {
			GElf_Sym sym;
			if (!gelf_getsym(d, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
			    sym.st_size == 0)
				continue;
			const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || strncmp(name, "runtime.", 8) != 0)
				continue;
			for (size_t j = 0; j < ARRAY_SIZE(stack_bottoms); j++)
				if (strcmp(name, stack_bottoms[j]) == 0) {
					uint32_t id = rule_set_intern(rs, &stop);
					if (id != UINT32_MAX)
						override_range(out, sym.st_value, sym.st_value + sym.st_size, id);
				}
		}
	}
}

struct go_rows {
	struct rule_set *rs;
	struct unwind_rows *out;
	uint64_t last_end;
	uint32_t invalid;
	bool full;
};

static void on_go_sp(void *ctx, uint64_t lo, uint64_t hi, int32_t sp_delta, const char *name,
		     size_t name_len)
{
	struct go_rows *g = ctx;
	struct unwind_rule r = { 0 };
	bool bottom = false;
	for (size_t i = 0; i < ARRAY_SIZE(stack_bottoms); i++)
		bottom |= strlen(stack_bottoms[i]) == name_len &&
			  memcmp(stack_bottoms[i], name, name_len) == 0;
	if (bottom) {
		r.kind = UW_STOP;
	} else {
		/* Go's frame: the return address at the entry SP, the caller's BP
		 * just below it once the frame is set up. */
		r.kind = UW_CFA_SP;
		r.cfa_off = sp_delta + 8;
		r.ra_off = -8;
		if (sp_delta > 0) {
			r.bp_saved = UW_BP_AT_CFA;
			r.bp_off = -16;
		}
	}
	uint32_t id = rule_set_intern(g->rs, &r);
	if (id == UINT32_MAX) {
		g->full = true;
		return;
	}
	if (g->last_end && lo > g->last_end)
		push_row(g->out, g->last_end, g->invalid);
	push_row(g->out, lo, id);
	g->last_end = hi;
}

/* Unwind rules from Go's own pc-to-SP-delta table: present even in Go
 * binaries stripped of DWARF. */
static int rows_from_gopclntab(Elf *elf, struct rule_set *rs, struct unwind_rows *out)
{
	size_t shstrndx;
	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return -1;
	uint64_t text = 0;
	Elf_Data *tab = NULL;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *name;
		if (!gelf_getshdr(scn, &sh) || !(name = elf_strptr(elf, shstrndx, sh.sh_name)))
			continue;
		if (strcmp(name, ".text") == 0)
			text = sh.sh_addr;
		else if (strcmp(name, ".gopclntab") == 0)
			tab = elf_getdata(scn, NULL);
	}
	if (!tab || !tab->d_buf)
		return -1;
	struct unwind_rule invalid = { 0 };
	struct go_rows g = { rs, out, 0, rule_set_intern(rs, &invalid), false };
	if (gopclntab_sp_deltas(tab->d_buf, tab->d_size, text, on_go_sp, &g) <= 0 || g.full)
		return -1;
	if (g.last_end)
		push_row(out, g.last_end, g.invalid);
	if (out->too_wide)
		return -1;
	/* Go's table lists functions in address order; make sure. */
	for (size_t i = 1; i < out->count; i++)
		if (out->rows[i].addr <= out->rows[i - 1].addr)
			return -1;
	return 0;
}

/* Whether the file is a Go program (whose stack bottoms mark_stack_bottoms
 * marks): only then is its symbol table read. */
static bool is_go(Elf *elf)
{
	GElf_Shdr sh;
	return section_named(elf, ".gopclntab", &sh) || section_named(elf, ".note.go.buildid", &sh);
}

static void starts_free(uint64_t *starts, size_t n)
{
	memstats_add(MEM_UNWIND_BUILD, -(int64_t)(n * sizeof(uint64_t)));
	free(starts);
}

int unwind_table_build(int fd, struct rule_set *rs, const struct unwind_budget *budget,
		       struct unwind_rows *out, struct buf *err)
{
	(void)elf_version(EV_CURRENT);
	memset(out, 0, sizeof(*out));
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || gelf_getclass(elf) != ELFCLASS64) {
		buf_puts(err, "not a 64-bit ELF file");
		if (elf)
			elf_end(elf);
		return -1;
	}
	bool go = is_go(elf);
	uint64_t *starts = NULL;
	size_t nstarts = 0;
	int rc = -1;
	struct cfi_src src = { .elf = elf };
	bool eh = fde_starts_from_hdr(elf, &starts, &nstarts) == 0 && cfi_open(&src);
	if (!eh) {
		free(starts);
		starts = NULL;
		nstarts = 0;
	}
	if (eh) {
		memstats_add(MEM_UNWIND_BUILD, (int64_t)(nstarts * sizeof(uint64_t)));
		out->source = ".eh_frame";
		rc = walk(&src, starts, nstarts, rs, budget, out, err);
	} else if (rows_from_gopclntab(elf, rs, out) == 0) {
		out->source = ".gopclntab";
		rc = 0;
	} else {
		unwind_rows_free(out);
		src.debug_frame = true;
		if (fde_starts_from_debug_frame(elf, &starts, &nstarts) == 0 && cfi_open(&src)) {
			memstats_add(MEM_UNWIND_BUILD, (int64_t)(nstarts * sizeof(uint64_t)));
			out->source = ".debug_frame";
			rc = walk(&src, starts, nstarts, rs, budget, out, err);
		} else {
			buf_puts(err, "no call-frame information (.eh_frame_hdr or .debug_frame)");
			memstats_add(MEM_UNWIND_BUILD, (int64_t)(nstarts * sizeof(uint64_t)));
		}
	}
	cfi_close(&src);
	starts_free(starts, nstarts);
	if (rc == 0 && out->too_wide) {
		buf_puts(err, "more than 4 GiB of code");
		rc = -1;
	}
	if (rc == 0 && go)
		mark_stack_bottoms(elf, rs, out);
	elf_end(elf);
	if (rc < 0)
		unwind_rows_free(out);
	return rc;
}
