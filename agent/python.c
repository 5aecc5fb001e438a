/* python.c - see python.h. */
#include "python.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "elfsyms.h"
#include "python_layouts.h"
#include "hmap.h"
#include "util.h"

#define MAX_STRING 1024          /* characters of a name or file name kept */
#define MAX_LINETABLE (256 << 10) /* bytes of a location table read */
#define MAX_CODES_PER_PROCESS 16384
#define CODE_HEADER 160          /* bytes of a code object read: up to co_linetable */
#define DBG_SIZE 512             /* most bytes of a _Py_DebugOffsets table read */

const struct py_layout *python_layout(uint32_t version)
{
	return py_layout_find(version);
}

bool python_file_name(const char *name)
{
	return strncmp(name, "python3", 7) == 0 || strncmp(name, "libpython3", 10) == 0;
}

/* 3.8-3.10 have no Py_Version: the minor version from "python3.X" or
 * "libpython3.X...", as 0x030X0000, or 0. */
static uint32_t version_from_name(const char *name)
{
	const char *p = strstr(name, "python3.");
	if (!p)
		return 0;
	p += 8;
	unsigned minor = 0;
	int digits = 0;
	for (; *p >= '0' && *p <= '9' && digits < 3; p++, digits++)
		minor = minor * 10 + (unsigned)(*p - '0');
	return digits && minor < 100 ? EMBER_PY_VERSION(3, minor) : 0;
}

/* "python3.13t", "libpython3.14t.so.1.0": a free-threaded build (no GIL),
 * whose objects have another layout. */
static bool free_threaded_name(const char *name)
{
	const char *p = strstr(name, "python3.");
	if (!p)
		return false;
	for (p += 8; *p >= '0' && *p <= '9'; p++)
		;
	return *p == 't';
}

int python_inspect_file(int fd, const char *name, struct py_file *out)
{
	struct elf_symbol_query q[] = {
		{ .name = "_PyRuntime" }, { .name = "_PyEval_EvalFrameDefault" },
		{ .name = "Py_Version" }, { .name = "_PyEval_EvalFrameDefault.cold" },
		{ .name = "PyCode_Type" },
	};
	memset(out, 0, sizeof(*out));
	if (free_threaded_name(name))
		return -1;
	if (elfsyms_lookup(fd, q, ARRAY_SIZE(q)) < 2 || !q[0].found || !q[1].found)
		return -1;
	uint32_t version = 0;
	if (q[2].found) {
		if (elfsyms_read_vaddr(fd, q[2].value, &version, sizeof(version)) < 0)
			return -1;
	} else {
		version = version_from_name(name);
	}
	const struct py_layout *l = python_layout(version);
	if (!l)
		return -1;
	out->version = version;
	out->layout = *l;
	uint8_t dbg[DBG_SIZE];
	if (l->debug.size) {
		/* A table that is not what ember expects (a free-threaded
		 * build among them) is no interpreter ember can walk. */
		if (elfsyms_read_vaddr(fd, q[0].value, dbg, l->debug.size) < 0 ||
		    python_apply_debug_offsets(dbg, l->debug.size, version, &out->layout) < 0)
			return -1;
		out->debug_offsets = true;
	}
	out->runtime = q[0].value;
	out->eval_lo = q[1].value;
	out->eval_hi = q[1].value + MAX(q[1].size, (uint64_t)1);
	if (q[3].found) {
		out->cold_lo = q[3].value;
		out->cold_hi = q[3].value + MAX(q[3].size, (uint64_t)1);
	}
	out->code_type = q[4].found ? q[4].value : 0;
	return 0;
}

/* Which member of struct py_layout each debug-table position sets. */
#define DBG(pos, field) { offsetof(struct py_debug_positions, pos), offsetof(struct py_layout, field) }
static const struct {
	size_t pos;   /* offsetof in struct py_debug_positions */
	size_t field; /* offsetof in struct py_layout of the uint16_t it sets */
} dbg_fields[] = {
	DBG(interpreters_head, off.runtime_interpreters_head),
	DBG(interp_next, off.interp_next),
	DBG(threads_head, off.interp_threads_head),
	DBG(tstate_next, off.tstate_next),
	DBG(current_frame, off.tstate_frame),
	DBG(thread_id, off.tstate_thread_id),
	DBG(frame_previous, off.frame_previous),
	DBG(frame_executable, off.frame_code),
	DBG(frame_instr_ptr, off.frame_instr),
	DBG(frame_owner, off.frame_owner),
	DBG(code_filename, code_filename),
	DBG(code_name, code_name),
	DBG(code_qualname, off.code_qualname),
	DBG(code_linetable, code_linetable),
	DBG(code_firstlineno, code_firstlineno),
	DBG(code_adaptive, off.code_adaptive),
};
#undef DBG

static uint64_t dbg_u64(const uint8_t *d, uint16_t at)
{
	uint64_t v;
	memcpy(&v, d + at, sizeof(v));
	return v;
}

int python_apply_debug_offsets(const void *table, size_t n, uint32_t version, struct py_layout *l)
{
	const uint8_t *d = table;
	const struct py_debug_positions *pos = &l->debug;
	if (!pos->size || pos->size > DBG_SIZE || n < pos->size || memcmp(d, "xdebugpy", 8) != 0)
		return -1;
	if ((dbg_u64(d, 8) & 0xffff0000u) != (version & 0xffff0000u))
		return -1;
	if (pos->free_threaded && dbg_u64(d, pos->free_threaded) != 0)
		return -1; /* no GIL: another object layout (python.h) */
	struct py_layout out = *l;
	for (size_t i = 0; i < ARRAY_SIZE(dbg_fields); i++) {
		uint16_t at;
		memcpy(&at, (const uint8_t *)pos + dbg_fields[i].pos, sizeof(at));
		if (at + 8u > pos->size)
			return -1;
		uint64_t v = dbg_u64(d, at);
		if (v >= PY_NO_FIELD)
			return -1;
		uint16_t o = (uint16_t)v;
		memcpy((uint8_t *)&out + dbg_fields[i].field, &o, sizeof(o));
	}
	/* The symbolizer reads a code object's first CODE_HEADER bytes. */
	uint16_t code[] = { out.code_filename, out.code_name, out.off.code_qualname,
			    out.code_linetable, out.code_firstlineno };
	for (size_t i = 0; i < ARRAY_SIZE(code); i++)
		if (code[i] > CODE_HEADER - 8)
			return -1;
	*l = out;
	return 0;
}

void python_describe(const struct py_file *f, uint64_t bias, uint64_t start_ticks,
		     uint64_t exec_id, struct py_proc *out)
{
	memset(out, 0, sizeof(*out));
	out->start_ticks = start_ticks;
	out->exec_id = exec_id;
	out->runtime = f->runtime + bias;
	out->eval_lo = f->eval_lo + bias;
	out->eval_hi = f->eval_hi + bias;
	if (f->cold_lo) {
		out->cold_lo = f->cold_lo + bias;
		out->cold_hi = f->cold_hi + bias;
	}
	out->off = f->layout.off;
}

/* Location tables (3.11+): entries of one byte, bit 7 set, code in bits
 * 3..6, length - 1 in bits 0..2 (code units), then the code's operands:
 * 15 no location; 14 long form (signed line delta, end line delta, column,
 * end column as varints); 13 no column (signed line delta); 10..12 one
 * line form (line delta code - 10, two column bytes); 0..9 short form (one
 * column byte). Varints are 6 bits a byte, bit 6 = more follows. */
static bool varint(const uint8_t **p, const uint8_t *end, uint32_t *out)
{
	uint32_t v = 0;
	for (int shift = 0; *p < end && shift < 32; shift += 6) {
		uint8_t b = *(*p)++;
		v |= (uint32_t)(b & 63) << shift;
		if (!(b & 64)) {
			*out = v;
			return true;
		}
	}
	return false;
}

/* co_lnotab (3.8, 3.9): pairs of (bytes, signed line) increments; the line
 * of byte offset `at` is the one after the last pair starting at or before
 * it. */
static uint32_t lnotab_line(const uint8_t *t, size_t len, uint32_t firstlineno, uint64_t at)
{
	int64_t line = firstlineno;
	uint64_t addr = 0;
	for (size_t i = 0; i + 1 < len; i += 2) {
		addr += t[i];
		if (addr > at)
			break;
		line += (int8_t)t[i + 1];
	}
	return line > 0 && line <= UINT32_MAX ? (uint32_t)line : 0;
}

/* co_linetable (3.10): pairs of (bytes, signed line delta) ranges, -128 =
 * no line for the range. */
static uint32_t linetable310_line(const uint8_t *t, size_t len, uint32_t firstlineno, uint64_t at)
{
	int64_t line = firstlineno;
	uint64_t start = 0;
	for (size_t i = 0; i + 1 < len; i += 2) {
		uint64_t end = start + t[i];
		int8_t d = (int8_t)t[i + 1];
		bool none = d == -128;
		if (!none)
			line += d;
		if (at >= start && at < end)
			return none || line <= 0 || line > UINT32_MAX ? 0 : (uint32_t)line;
		start = end;
	}
	return 0;
}

static uint32_t locations_line(const uint8_t *table, size_t len, uint32_t firstlineno,
			       uint32_t instr);

uint32_t python_line(int format, const uint8_t *table, size_t len, uint32_t firstlineno,
		     uint32_t instr)
{
	/* The walker sends code units (2 bytes); the older tables count bytes. */
	switch (format) {
	case PY_LINES_LNOTAB:
		return lnotab_line(table, len, firstlineno, (uint64_t)instr * 2);
	case PY_LINES_310:
		return linetable310_line(table, len, firstlineno, (uint64_t)instr * 2);
	case PY_LINES_LOCATIONS:
		return locations_line(table, len, firstlineno, instr);
	default:
		return 0;
	}
}

static uint32_t locations_line(const uint8_t *table, size_t len, uint32_t firstlineno,
			       uint32_t instr)
{
	const uint8_t *p = table, *end = table + len;
	int64_t line = firstlineno;
	uint64_t at = 0;
	while (p < end) {
		uint8_t b = *p++;
		if (!(b & 0x80))
			return 0; /* not at an entry's first byte: damaged */
		uint32_t code = (b >> 3) & 15, n = (b & 7) + 1, v = 0;
		bool none = false;
		switch (code) {
		case 15:
			none = true;
			break;
		case 14:
		case 13:
			if (!varint(&p, end, &v))
				return 0;
			line += (v & 1) ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
			if (code == 14) {
				for (int k = 0; k < 3; k++)
					if (!varint(&p, end, &v))
						return 0;
			}
			break;
		case 12:
		case 11:
		case 10:
			line += code - 10;
			p += 2;
			break;
		default:
			p += 1;
			break;
		}
		if (instr < at + n)
			return none || line <= 0 || line > UINT32_MAX ? 0 : (uint32_t)line;
		at += n;
	}
	return 0;
}

struct code_entry {
	uint64_t addr;
	uint32_t gen;
	uint64_t fp[5]; /* co_filename, co_name, co_qualname, co_linetable, co_firstlineno */
	char *name, *file;
	uint8_t *table;
	size_t ntable;
	uint32_t firstlineno;
};

struct pyproc {
	int32_t pid; /* 0 = free slot */
	struct py_layout l; /* the interpreter's (a copy: py_file arrays move) */
	uint64_t code_type; /* &PyCode_Type in the process, 0 = unknown */
	uint64_t start_ticks, exec_id; /* which process, which program */
	struct code_entry *codes;
	size_t ncodes, capcodes;
	struct hmap index;
};

struct python {
	struct pyproc *procs;
	size_t nprocs, cap;
	uint32_t *free_slots;
	size_t nfree, capfree;
	struct hmap index;
	uint32_t gen;
	struct python_stats stats;
};

struct python *python_new(void)
{
	struct python *py = xcalloc(1, sizeof(*py));
	py->gen = 1;
	return py;
}

static void clear_codes(struct pyproc *p)
{
	for (size_t i = 0; i < p->ncodes; i++) {
		free(p->codes[i].name);
		free(p->codes[i].file);
		free(p->codes[i].table);
	}
	p->ncodes = 0;
	hmap_clear(&p->index);
}

static void proc_release(struct pyproc *p)
{
	clear_codes(p);
	free(p->codes);
	hmap_free(&p->index);
	memset(p, 0, sizeof(*p));
}

void python_free(struct python *py)
{
	if (!py)
		return;
	for (size_t i = 0; i < py->nprocs; i++)
		if (py->procs[i].pid)
			proc_release(&py->procs[i]);
	free(py->procs);
	free(py->free_slots);
	hmap_free(&py->index);
	free(py);
}

static struct pyproc *find_proc(struct python *py, int32_t pid)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(py->procs, pid, &pid);
	uint32_t idx;
	return hmap_find(&py->index, hash_u64((uint64_t)pid), hmap_field_eq, &k, &idx) ? &py->procs[idx] : NULL;
}

void python_set_process(struct python *py, int32_t pid, uint64_t start_ticks, uint64_t exec_id,
			const struct py_file *f, uint64_t bias)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(py->procs, pid, &pid);
	uint32_t idx;
	uint64_t h = hash_u64((uint64_t)pid);
	const struct py_layout *l = f ? &f->layout : NULL;
	uint64_t code_type = f && f->code_type ? f->code_type + bias : 0;
	if (hmap_find(&py->index, h, hmap_field_eq, &k, &idx)) {
		struct pyproc *old = &py->procs[idx];
		if (l && memcmp(&old->l, l, sizeof(*l)) == 0 && old->code_type == code_type &&
		    old->start_ticks == start_ticks && old->exec_id == exec_id)
			return; /* the same program, the same interpreter: the cache stands */
		hmap_remove(&py->index, h, hmap_field_eq, &k);
		proc_release(&py->procs[idx]);
		xgrow((void **)&py->free_slots, &py->capfree, py->nfree + 1, sizeof(uint32_t));
		py->free_slots[py->nfree++] = idx;
		py->stats.processes--;
	}
	if (!l || !l->version || pid <= 0)
		return;
	if (py->nfree) {
		idx = py->free_slots[--py->nfree];
	} else {
		xgrow((void **)&py->procs, &py->cap, py->nprocs + 1, sizeof(*py->procs));
		idx = (uint32_t)py->nprocs++;
	}
	struct pyproc *p = &py->procs[idx];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->l = *l;
	p->code_type = code_type;
	p->start_ticks = start_ticks;
	p->exec_id = exec_id;
	hmap_insert(&py->index, h, idx);
	py->stats.processes++;
}

void python_next_generation(struct python *py)
{
	if (++py->gen == 0)
		py->gen = 1;
}

static int rd(int32_t pid, uint64_t addr, void *out, size_t n)
{
	struct iovec l = { out, n }, r = { (void *)(uintptr_t)addr, n };
	return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)n ? 0 : -1;
}

static uint64_t u64_at(const uint8_t *b, uint16_t off)
{
	uint64_t v;
	memcpy(&v, b + off, sizeof(v));
	return v;
}

static void put_utf8(char *out, size_t *n, uint32_t c)
{
	if (c < 0x80) {
		out[(*n)++] = (char)c;
	} else if (c < 0x800) {
		out[(*n)++] = (char)(0xc0 | c >> 6);
		out[(*n)++] = (char)(0x80 | (c & 63));
	} else if (c >= 0xd800 && c < 0xe000) {
		out[(*n)++] = '?'; /* a lone surrogate: not valid UTF-8 */
	} else if (c < 0x10000) {
		out[(*n)++] = (char)(0xe0 | c >> 12);
		out[(*n)++] = (char)(0x80 | ((c >> 6) & 63));
		out[(*n)++] = (char)(0x80 | (c & 63));
	} else if (c < 0x110000) {
		out[(*n)++] = (char)(0xf0 | c >> 18);
		out[(*n)++] = (char)(0x80 | ((c >> 12) & 63));
		out[(*n)++] = (char)(0x80 | ((c >> 6) & 63));
		out[(*n)++] = (char)(0x80 | (c & 63));
	} else {
		out[(*n)++] = '?';
	}
}

/* A str object of the process as UTF-8 (compact strings only), or NULL. */
static char *read_str(int32_t pid, const struct py_layout *l, uint64_t addr)
{
	uint8_t hdr[80];
	if (!addr || l->str_compact_data > sizeof(hdr) || rd(pid, addr, hdr, l->str_compact_data) < 0)
		return NULL;
	int64_t length = (int64_t)u64_at(hdr, l->str_length);
	uint32_t state;
	memcpy(&state, hdr + l->str_state, sizeof(state));
	uint32_t kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
	if (!compact || (kind != 1 && kind != 2 && kind != 4) || length < 0)
		return NULL;
	size_t n = (size_t)MIN(length, (int64_t)MAX_STRING);
	uint8_t *raw = xmalloc(n * kind + 1);
	uint64_t data = addr + (ascii ? l->str_ascii_data : l->str_compact_data);
	if (n && rd(pid, data, raw, n * kind) < 0) {
		free(raw);
		return NULL;
	}
	char *out = xmalloc(n * 4 + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t c;
		if (kind == 1)
			c = raw[i];
		else if (kind == 2)
			c = (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8;
		else
			memcpy(&c, raw + 4 * i, 4);
		put_utf8(out, &o, c ? c : '?');
	}
	out[o] = '\0';
	free(raw);
	return out;
}

enum code_read {
	CODE_OK = 0,
	CODE_UNREADABLE = -1, /* the memory cannot be read (the process may be gone) */
	CODE_NOT_CODE = -2,   /* not a code object (any more) */
};

/* The code object's header, checked to be a code object; fp gets the
 * fields that tell one code object from another. */
static enum code_read read_code(int32_t pid, const struct pyproc *p, uint64_t addr, uint64_t fp[5])
{
	const struct py_layout *l = &p->l;
	uint8_t hdr[CODE_HEADER];
	if (rd(pid, addr, hdr, sizeof(hdr)) < 0)
		return CODE_UNREADABLE;
	if (p->code_type && u64_at(hdr, 8) != p->code_type)
		return CODE_NOT_CODE; /* ob_type: not (or no longer) a code object */
	int32_t first;
	memcpy(&first, hdr + l->code_firstlineno, sizeof(first));
	fp[0] = u64_at(hdr, l->code_filename);
	fp[1] = u64_at(hdr, l->code_name);
	fp[2] = u64_at(hdr, l->off.code_qualname);
	fp[3] = u64_at(hdr, l->code_linetable);
	fp[4] = (uint64_t)(uint32_t)first;
	return CODE_OK;
}

static int fill_entry(int32_t pid, const struct pyproc *p, struct code_entry *e)
{
	const struct py_layout *l = &p->l;
	e->name = read_str(pid, l, e->fp[2]);
	if (!e->name)
		e->name = read_str(pid, l, e->fp[1]);
	e->file = read_str(pid, l, e->fp[0]);
	e->firstlineno = (uint32_t)e->fp[4];
	if (!e->name)
		return -1;
	uint8_t hdr[64];
	if (e->fp[3] && l->bytes_data <= sizeof(hdr) && rd(pid, e->fp[3], hdr, l->bytes_data) == 0) {
		int64_t size = (int64_t)u64_at(hdr, l->bytes_size);
		if (size > 0 && size <= MAX_LINETABLE) {
			e->table = xmalloc((size_t)size);
			if (rd(pid, e->fp[3] + l->bytes_data, e->table, (size_t)size) == 0) {
				e->ntable = (size_t)size;
			} else {
				free(e->table);
				e->table = NULL;
			}
		}
	}
	return 0;
}

int python_symbolize(struct python *py, int32_t pid, uint64_t slot, uint64_t qualname,
		     struct py_sym *out)
{
	struct pyproc *p = find_proc(py, pid);
	if (!p)
		return -1;
	uint64_t addr = slot & PY_FRAME_ADDR_MASK;
	uint32_t instr = (uint32_t)((slot >> PY_FRAME_INSTR_SHIFT) & PY_FRAME_INSTR_MAX);
	struct hmap_field_key k = HMAP_FIELD_KEY(p->codes, addr, &addr);
	uint64_t h = hash_u64(addr);
	uint32_t idx;
	struct code_entry *e = NULL;
	if (hmap_find(&p->index, h, hmap_field_eq, &k, &idx)) {
		e = &p->codes[idx];
		if (e->gen != py->gen || e->fp[2] != qualname || !e->name) {
			/* Once per generation: is it still the same code object? */
			uint64_t fp[5];
			py->stats.revalidated++;
			enum code_read rc = read_code(pid, p, addr, fp);
			if (rc == CODE_NOT_CODE && e->fp[2] != qualname) {
				py->stats.stale++;
				return -1; /* freed, and something else lives there */
			}
			if (rc != CODE_OK) {
				/* Unreadable now (most often: the process has
				 * exited since the sample), or no longer a code
				 * object while the sample saw the cached one's
				 * co_qualname (a process frees its code objects as
				 * it shuts down, after its last samples were taken
				 * and before the agent drains them): nothing says
				 * the object the sample saw changed, so the cached
				 * names stand. */
				memcpy(fp, e->fp, sizeof(fp));
			}
			if (memcmp(fp, e->fp, sizeof(fp)) != 0) {
				free(e->name);
				free(e->file);
				free(e->table);
				memset(e, 0, sizeof(*e));
				e->addr = addr;
				memcpy(e->fp, fp, sizeof(fp));
				if (fill_entry(pid, p, e) < 0) {
					py->stats.read_errors++;
					return -1;
				}
			}
			e->gen = py->gen;
			if (e->fp[2] != qualname) {
				/* The sampled code object is gone. */
				py->stats.stale++;
				return -1;
			}
			/* An entry whose strings could not be read (the process
			 * was exiting mid-read) stays in the index with no name:
			 * read them again now, never hand out a NULL name. */
			if (!e->name) {
				free(e->file);
				free(e->table);
				e->file = NULL;
				e->table = NULL;
				e->ntable = 0;
				if (fill_entry(pid, p, e) < 0) {
					py->stats.read_errors++;
					return -1;
				}
			}
		} else {
			py->stats.cache_hits++;
		}
	} else {
		uint64_t fp[5];
		if (read_code(pid, p, addr, fp) != CODE_OK) {
			py->stats.read_errors++;
			return -1;
		}
		if (fp[2] != qualname) {
			py->stats.stale++;
			return -1;
		}
		if (p->ncodes >= MAX_CODES_PER_PROCESS)
			clear_codes(p);
		xgrow((void **)&p->codes, &p->capcodes, p->ncodes + 1, sizeof(*p->codes));
		e = &p->codes[p->ncodes];
		memset(e, 0, sizeof(*e));
		e->addr = addr;
		e->gen = py->gen;
		memcpy(e->fp, fp, sizeof(fp));
		if (fill_entry(pid, p, e) < 0) {
			free(e->name);
			free(e->file);
			free(e->table);
			py->stats.read_errors++;
			return -1;
		}
		hmap_insert(&p->index, h, (uint32_t)p->ncodes++);
	}
	py->stats.symbolized++;
	out->name = e->name;
	out->file = e->file ? e->file : "";
	out->line = e->table ? python_line(p->l.lines, e->table, e->ntable, e->firstlineno, instr) : 0;
	return 0;
}

void python_get_stats(const struct python *py, struct python_stats *out)
{
	*out = py->stats;
}

size_t python_bytes(const struct python *py)
{
	if (!py)
		return 0;
	size_t n = sizeof(*py) + py->cap * sizeof(*py->procs) + py->capfree * sizeof(*py->free_slots) +
		   hmap_bytes(&py->index);
	for (size_t i = 0; i < py->nprocs; i++) {
		const struct pyproc *p = &py->procs[i];
		if (!p->pid)
			continue;
		n += p->capcodes * sizeof(*p->codes) + hmap_bytes(&p->index);
		for (size_t c = 0; c < p->ncodes; c++)
			n += (p->codes[c].name ? strlen(p->codes[c].name) + 1 : 0) +
			     (p->codes[c].file ? strlen(p->codes[c].file) + 1 : 0) + p->codes[c].ntable;
	}
	return n;
}
