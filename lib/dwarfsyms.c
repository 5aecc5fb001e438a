/* dwarfsyms.c - see dwarfsyms.h. */
#include "dwarfsyms.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "hmap.h"
#include "util.h"

#define MAX_DEPTH 48 /* nesting of inlined functions and lexical blocks */

struct node {
	uint64_t lo, hi;
	const char *name;
	const char *call_file;
	uint32_t call_line;
	int depth;
	int parent; /* index of the enclosing node, or -1 */
};

struct qualified {
	Dwarf_Off origin; /* the DIE the name belongs to */
	char *name;
};

struct cu_state {
	struct node *nodes;
	size_t n, cap;
	Dwarf_Files *files;
	size_t nfiles;
	struct qualified *names; /* composed names, owned, freed with the CU */
	size_t nnames, capnames;
	struct hmap name_index;
};

static bool eq_origin(const void *ctx, uint32_t idx)
{
	const struct cu_state *st = ((const void *const *)ctx)[0];
	const Dwarf_Off *off = ((const void *const *)ctx)[1];
	return st->names[idx].origin == *off;
}

/* "ns::Class::name" for a function without a linkage name (static and
 * inline functions often have none), from the scopes that enclose its
 * declaration. */
static const char *qualified_name(struct cu_state *st, Dwarf_Die *origin, const char *name)
{
	Dwarf_Off off = dwarf_dieoffset(origin);
	const void *ctx[2] = { st, &off };
	uint32_t idx;
	uint64_t h = hash_u64(off);
	if (hmap_find(&st->name_index, h, eq_origin, ctx, &idx))
		return st->names[idx].name;
	struct buf b = { 0 };
	Dwarf_Die *scopes = NULL;
	int n = dwarf_getscopes_die(origin, &scopes);
	for (int i = n - 1; i >= 1; i--) {
		int tag = dwarf_tag(&scopes[i]);
		const char *sn = dwarf_diename(&scopes[i]);
		if (sn && (tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
			   tag == DW_TAG_structure_type || tag == DW_TAG_union_type))
			buf_printf(&b, "%s::", sn);
	}
	free(scopes);
	buf_puts(&b, name);
	xgrow((void **)&st->names, &st->capnames, st->nnames + 1, sizeof(*st->names));
	idx = (uint32_t)st->nnames++;
	st->names[idx] = (struct qualified){ off, buf_steal(&b, NULL) };
	hmap_insert(&st->name_index, h, idx);
	return st->names[idx].name;
}

static const char *die_name(struct cu_state *st, Dwarf_Die *die)
{
	Dwarf_Attribute a;
	/* The linkage (mangled) name when there is one, following abstract
	 * origins and specifications. */
	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a)) {
		const char *n = dwarf_formstring(&a);
		if (n)
			return n;
	}
	Dwarf_Die origin = *die, next;
	for (int i = 0; i < 8; i++) {
		if ((dwarf_attr(&origin, DW_AT_abstract_origin, &a) ||
		     dwarf_attr(&origin, DW_AT_specification, &a)) &&
		    dwarf_formref_die(&a, &next))
			origin = next;
		else
			break;
	}
	const char *name = dwarf_diename(&origin);
	if (!name)
		return NULL;
	return qualified_name(st, &origin, name);
}

static void free_cu(struct cu_state *st)
{
	for (size_t i = 0; i < st->nnames; i++)
		free(st->names[i].name);
	free(st->names);
	hmap_free(&st->name_index);
	free(st->nodes);
}

static void add_node(struct cu_state *st, Dwarf_Die *die, int depth, int parent)
{
	const char *name = die_name(st, die);
	if (!name)
		return;
	const char *call_file = NULL;
	Dwarf_Word call_line = 0, file_idx;
	Dwarf_Attribute a;
	if (dwarf_attr(die, DW_AT_call_file, &a) && dwarf_formudata(&a, &file_idx) == 0 &&
	    st->files && file_idx < st->nfiles)
		call_file = dwarf_filesrc(st->files, file_idx, NULL, NULL);
	if (dwarf_attr(die, DW_AT_call_line, &a))
		dwarf_formudata(&a, &call_line);
	Dwarf_Addr base, lo, hi;
	ptrdiff_t off = 0;
	while ((off = dwarf_ranges(die, off, &base, &lo, &hi)) > 0) {
		if (hi <= lo)
			continue;
		xgrow((void **)&st->nodes, &st->cap, st->n + 1, sizeof(*st->nodes));
		st->nodes[st->n++] = (struct node){ lo, hi, name, call_file, (uint32_t)call_line,
						    depth, parent };
	}
}

/* Walks the DIE tree: functions, the functions inlined into them, and the
 * lexical blocks that may hold inlined calls. */
static void walk(struct cu_state *st, Dwarf_Die *die, int depth, int parent)
{
	if (depth > MAX_DEPTH)
		return;
	Dwarf_Die child;
	if (dwarf_child(die, &child) != 0)
		return;
	do {
		int tag = dwarf_tag(&child);
		if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
			size_t before = st->n;
			int d = tag == DW_TAG_subprogram ? 0 : depth + 1;
			int p = tag == DW_TAG_subprogram ? -1 : parent;
			add_node(st, &child, d, p);
			/* Children are nested in this function's first range; with
			 * several ranges, nesting is by address below. */
			walk(st, &child, d, st->n > before ? (int)before : parent);
		} else if (tag == DW_TAG_lexical_block || tag == DW_TAG_namespace ||
			   tag == DW_TAG_class_type || tag == DW_TAG_structure_type) {
			walk(st, &child, depth, parent);
		}
	} while (dwarf_siblingof(&child, &child) == 0);
}

static int cmp_node(const void *a, const void *b)
{
	const struct node *x = a, *y = b;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->depth - y->depth; /* outer first */
}

static int cmp_order(const void *a, const void *b, void *ctx)
{
	const struct node *nodes = ctx;
	return cmp_node(&nodes[*(const size_t *)a], &nodes[*(const size_t *)b]);
}

struct line {
	uint64_t addr;
	const char *file;
	uint32_t line;
	bool end;
};

static int cmp_line(const void *a, const void *b)
{
	const struct line *x = a, *y = b;
	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	return (int)y->end - (int)x->end; /* an end_sequence first */
}

/* The chain for an address covered by the innermost node `in`. */
static uint32_t chain_for(struct symfile_builder *b, const struct node *nodes, int in,
			  const struct line *ln)
{
	int path[MAX_DEPTH + 2];
	int n = 0;
	for (int i = in; i >= 0 && n < MAX_DEPTH + 1; i = nodes[i].parent)
		path[n++] = i;
	/* path[0] innermost ... path[n-1] outermost. The outer frames' line is
	 * where the next inner function was called. */
	uint32_t parent = 0;
	for (int k = n - 1; k >= 0; k--) {
		const struct node *nd = &nodes[path[k]];
		const char *file = k == 0 ? ln->file : nodes[path[k - 1]].call_file;
		uint32_t line = k == 0 ? ln->line : nodes[path[k - 1]].call_line;
		parent = symfile_chain(b, nd->name, file, line, parent);
	}
	return parent;
}

static long do_cu(Dwarf_Die *cudie, struct symfile_builder *b)
{
	struct cu_state st = { 0 };
	Dwarf_Lines *lines;
	size_t nlines;
	if (dwarf_getsrclines(cudie, &lines, &nlines) != 0 || nlines == 0)
		return 0;
	if (dwarf_getsrcfiles(cudie, &st.files, &st.nfiles) != 0)
		st.files = NULL;
	walk(&st, cudie, 0, -1);
	if (!st.n) {
		free_cu(&st);
		return 0;
	}
	/* Parents were recorded as indexes before sorting: remember each
	 * node's parent by content, sort, then fix the indexes. */
	struct node *orig = xmalloc(st.n * sizeof(*orig));
	memcpy(orig, st.nodes, st.n * sizeof(*orig));
	size_t *order = xmalloc(st.n * sizeof(size_t));
	for (size_t i = 0; i < st.n; i++)
		order[i] = i;
	qsort_r(order, st.n, sizeof(size_t), cmp_order, orig);
	size_t *where = xmalloc(st.n * sizeof(size_t));
	for (size_t i = 0; i < st.n; i++)
		where[order[i]] = i;
	for (size_t i = 0; i < st.n; i++) {
		st.nodes[i] = orig[order[i]];
		if (st.nodes[i].parent >= 0)
			st.nodes[i].parent = (int)where[st.nodes[i].parent];
	}
	free_all(orig, order, where);

	struct line *ls = xmalloc(nlines * sizeof(*ls));
	size_t nl = 0;
	for (size_t i = 0; i < nlines; i++) {
		Dwarf_Line *l = dwarf_onesrcline(lines, i);
		Dwarf_Addr addr;
		int lineno = 0;
		bool end = false;
		if (!l || dwarf_lineaddr(l, &addr) != 0)
			continue;
		dwarf_lineno(l, &lineno);
		dwarf_lineendsequence(l, &end);
		ls[nl++] = (struct line){ addr, dwarf_linesrc(l, NULL, NULL), lineno > 0 ? (uint32_t)lineno : 0, end };
	}
	qsort(ls, nl, sizeof(*ls), cmp_line);

	/* Sweep addresses: the active nodes are those containing the
	 * address; the innermost is the deepest. */
	long added = 0;
	int active[MAX_DEPTH + 8];
	int nact = 0;
	size_t next = 0;
	for (size_t i = 0; i + 1 < nl; i++) {
		if (ls[i].end || ls[i + 1].addr <= ls[i].addr)
			continue;
		uint64_t a = ls[i].addr;
		int k = 0;
		for (int j = 0; j < nact; j++)
			if (st.nodes[active[j]].hi > a)
				active[k++] = active[j];
		nact = k;
		while (next < st.n && st.nodes[next].lo <= a) {
			if (st.nodes[next].hi > a && nact < MAX_DEPTH + 8)
				active[nact++] = (int)next;
			next++;
		}
		int in = -1;
		for (int j = 0; j < nact; j++)
			if (in < 0 || st.nodes[active[j]].depth >= st.nodes[in].depth)
				in = active[j];
		if (in < 0)
			continue;
		uint32_t c = chain_for(b, st.nodes, in, &ls[i]);
		symfile_add_range(b, a, ls[i + 1].addr, c, DWARFSYMS_RANK);
		added++;
	}
	free(ls);
	free_cu(&st);
	return added;
}

long dwarfsyms_add(Elf *elf, struct symfile_builder *b, uint64_t deadline_ns)
{
	Dwarf *dw = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
	if (!dw)
		return 0;
	long total = 0;
	Dwarf_CU *cu = NULL;
	Dwarf_Die cudie;
	uint8_t unit_type;
	while (dwarf_get_units(dw, cu, &cu, NULL, &unit_type, &cudie, NULL) == 0) {
		if (unit_type != DW_UT_compile && unit_type != DW_UT_partial)
			continue;
		total += do_cu(&cudie, b);
		if (now_mono_ns() > deadline_ns)
			break;
	}
	dwarf_end(dw);
	return total;
}
