/* proc.c - see proc.h. */
#include "proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "maps.h"
#include "util.h"

#define MAPS_MAX_BYTES (16u << 20)
#define MAPS_MAX_ENTRIES 65536
/* A process's maps are read again when a sample has an address in none of
 * them, at most every MAPS_REFRESH_FIRST_NS at first, doubling each time up
 * to MAPS_REFRESH_NS: a starting process maps its libraries within
 * milliseconds, a JIT keeps mapping code forever. */
#define MAPS_REFRESH_FIRST_NS 10000000ull
#define MAPS_REFRESH_NS 1000000000ull

void proc_table_init(struct proc_table *t, struct file_registry *files, const char *proc_root)
{
	memset(t, 0, sizeof(*t));
	t->files = files;
	t->proc_root = proc_root;
	t->vdso_file = FILE_NONE;
}

void proc_table_free(struct proc_table *t)
{
	for (size_t i = 0; i < t->count; i++) {
		free(t->procs[i].maps);
		proc_attrs_free(&t->procs[i].attrs);
	}
	free(t->procs);
	free(t->free_slots);
	hmap_free(&t->index);
	memset(t, 0, sizeof(*t));
}

int proc_parse_stat_start(const char *text, size_t len, uint64_t *start_time)
{
	/* The comm field (2) may contain spaces and parentheses: fields after
	 * it are counted from the last ')'. */
	const char *rp = NULL;
	for (size_t i = 0; i < len; i++)
		if (text[i] == ')')
			rp = text + i;
	if (!rp)
		return -1;
	const char *p = rp + 1, *end = text + len;
	/* After ')' come fields 3.. ; field 22 is the 20th of them. */
	for (int field = 3; field < 22; field++) {
		while (p < end && *p == ' ')
			p++;
		while (p < end && *p != ' ')
			p++;
	}
	while (p < end && *p == ' ')
		p++;
	uint64_t v = 0;
	int digits = 0;
	while (p < end && *p >= '0' && *p <= '9' && digits < 20) {
		v = v * 10 + (uint64_t)(*p - '0');
		p++;
		digits++;
	}
	if (digits == 0)
		return -1;
	*start_time = v;
	return 0;
}

static int read_start_time(const struct proc_table *t, int32_t pid, uint64_t *st)
{
	char path[64], *text;
	size_t len;
	snprintf(path, sizeof(path), "%s/%d/stat", t->proc_root, pid);
	if (read_file(path, 4096, &text, &len) < 0)
		return -1;
	int rc = proc_parse_stat_start(text, len, st);
	free(text);
	return rc;
}

/* A file may be named with any byte but '/' and NUL, a thread with any
 * but NUL: control characters become '?' (str_make_printable; the server
 * refuses strings that hold them, a whole metrics batch at a time). */
void proc_exe_name(const char *proc_root, int32_t pid, const char *comm, char *out, size_t n)
{
	char path[64], target[4096];
	snprintf(path, sizeof(path), "%s/%d/exe", proc_root, pid);
	ssize_t len = readlink(path, target, sizeof(target) - 1);
	if (len > 0) {
		target[len] = '\0';
		static const char del[] = " (deleted)";
		size_t l = (size_t)len;
		if (l > sizeof(del) - 1 && strcmp(target + l - (sizeof(del) - 1), del) == 0)
			target[l - (sizeof(del) - 1)] = '\0';
		const char *base = strrchr(target, '/');
		base = base ? base + 1 : target;
		if (*base) {
			snprintf(out, n, "%.63s", base);
			str_make_printable(out, strlen(out));
			return;
		}
	}
	/* Kernel threads have no executable; exited processes no /proc. */
	snprintf(out, n, "%.63s", comm && *comm ? comm : "[unknown]");
	str_make_printable(out, strlen(out));
}

static void read_exe_name(const struct proc_table *t, struct proc *p, const char *comm)
{
	proc_exe_name(t->proc_root, p->pid, comm, p->exe_name, sizeof(p->exe_name));
}

static void read_maps(struct proc_table *t, struct proc *p, uint64_t now_ns)
{
	char path[64], *text;
	size_t len;
	p->maps_read_ns = now_ns;
	snprintf(path, sizeof(path), "%s/%d/maps", t->proc_root, p->pid);
	int rc = read_file(path, MAPS_MAX_BYTES, &text, &len);
	if (rc < 0) {
		if (rc != -ENOENT && rc != -ESRCH)
			log_debug("cannot read %s: %s", path, strerror(-rc));
		return;
	}
	p->nmaps = 0;
	const char *s = text, *end = text + len;
	while (s < end && p->nmaps < MAPS_MAX_ENTRIES) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *le = nl ? nl : end;
		struct maps_line ml;
		if (maps_parse_line(s, (size_t)(le - s), &ml) == 0 && ml.exec) {
			struct mapping m = { ml.start, ml.end, ml.offset, FILE_NONE, MAPPING_FILE };
			if (ml.path_len == 6 && memcmp(ml.path, "[vdso]", 6) == 0) {
				m.kind = MAPPING_VDSO;
				m.file = t->vdso_file;
			}
			else if (ml.inode == 0)
				m.kind = MAPPING_ANON;
			else
				m.file = files_get(t->files, p->pid, &ml);
			xgrow((void **)&p->maps, &p->capmaps, p->nmaps + 1, sizeof(*p->maps));
			p->maps[p->nmaps++] = m;
		}
		s = nl ? nl + 1 : end;
	}
	free(text);
	/* /proc/PID/maps is sorted by address already; the lookup relies on it. */
	if (t->on_maps)
		t->on_maps(t->hook_ctx, p);
}

static uint32_t alloc_slot(struct proc_table *t)
{
	if (t->nfree)
		return t->free_slots[--t->nfree];
	xgrow((void **)&t->procs, &t->cap, t->count + 1, sizeof(*t->procs));
	memset(&t->procs[t->count], 0, sizeof(*t->procs));
	return (uint32_t)t->count++;
}

static void release(struct proc_table *t, uint32_t idx)
{
	struct proc *p = &t->procs[idx];
	struct hmap_field_key k = HMAP_FIELD_KEY(t->procs, pid, &p->pid);
	hmap_remove(&t->index, hash_u64((uint64_t)p->pid), hmap_field_eq, &k);
	if (t->on_gone)
		t->on_gone(t->hook_ctx, p->pid);
	free(p->maps);
	proc_attrs_free(&p->attrs);
	memset(p, 0, sizeof(*p));
	xgrow((void **)&t->free_slots, &t->capfree, t->nfree + 1, sizeof(uint32_t));
	t->free_slots[t->nfree++] = idx;
}

/* Reads again what an exec changes: the executable's name, where the
 * process runs (a launcher may have moved itself into a container's cgroup
 * before the exec) and its mappings. */
static void reread(struct proc_table *t, struct proc *p, uint64_t now_ns)
{
	char comm[sizeof(p->exe_name)];
	memcpy(comm, p->exe_name, sizeof(comm));
	read_exe_name(t, p, comm);
	if (t->attrib) {
		proc_attrs_free(&p->attrs);
		attrib_read(t->attrib, p->pid, &p->attrs);
	}
	read_maps(t, p, now_ns);
}

struct proc *proc_table_get(struct proc_table *t, int32_t pid, uint64_t start_ticks,
			    uint64_t exec_id, const char *comm, uint64_t now_ns)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(t->procs, pid, &pid);
	uint32_t idx;
	if (hmap_find(&t->index, hash_u64((uint64_t)pid), hmap_field_eq, &k, &idx)) {
		struct proc *p = &t->procs[idx];
		if (!p->live || p->start_time == start_ticks) {
			p->last_sample_ns = now_ns;
			if (exec_id != PROC_EXEC_UNKNOWN && p->exec_id == PROC_EXEC_UNKNOWN) {
				/* Made without knowing its exec count: the
				 * first record that knows it tells it, and the
				 * unwinder learns it (its description must
				 * match the records' exec count). */
				p->exec_id = exec_id;
				if (p->live && t->on_maps)
					t->on_maps(t->hook_ctx, p);
			} else if (p->live && exec_id != PROC_EXEC_UNKNOWN && exec_id > p->exec_id) {
				p->exec_id = exec_id;
				p->refreshes = 0;
				reread(t, p, now_ns);
			}
			return p;
		}
		release(t, idx); /* the pid was reused */
	}
	idx = alloc_slot(t);
	struct proc *p = &t->procs[idx];
	p->pid = pid;
	p->exec_id = exec_id;
	p->last_sample_ns = now_ns;
	p->live = read_start_time(t, pid, &p->start_time) == 0;
	read_exe_name(t, p, comm);
	if (p->live) {
		read_maps(t, p, now_ns);
		if (t->attrib)
			attrib_read(t->attrib, pid, &p->attrs);
	}
	hmap_insert(&t->index, hash_u64((uint64_t)pid), idx);
	return p;
}

static const struct mapping *search(const struct proc *p, uint64_t addr)
{
	size_t lo = PARTITION_POINT(p->nmaps, i, p->maps[i].start <= addr);
	if (lo == 0 || addr >= p->maps[lo - 1].end)
		return NULL;
	return &p->maps[lo - 1];
}

const struct mapping *proc_find_mapping(struct proc_table *t, struct proc *p, uint64_t addr,
					uint64_t now_ns)
{
	const struct mapping *m = search(p, addr);
	if (m || !p->live || now_ns - p->maps_read_ns < MIN(MAPS_REFRESH_FIRST_NS << p->refreshes,
							    MAPS_REFRESH_NS))
		return m;
	if (p->refreshes < 7)
		p->refreshes++;
	/* New code was mapped, or the process exec'd another program (when
	 * the sample did not tell: OTLP-less paths, old kernels). */
	reread(t, p, now_ns);
	return search(p, addr);
}

void proc_table_sweep(struct proc_table *t, uint64_t now_ns, uint64_t idle_ns)
{
	for (size_t i = 0; i < t->count; i++) {
		struct proc *p = &t->procs[i];
		if (p->pid == 0)
			continue;
		/* A sample taken after now_ns (the caller read its clock before
		 * draining) is not idle: no unsigned wrap-around. */
		bool drop = now_ns > p->last_sample_ns && now_ns - p->last_sample_ns > idle_ns;
		if (!drop && p->last_sample_ns <= t->swept_ns) {
			uint64_t st;
			/* Gone, or the pid now belongs to another process. */
			drop = read_start_time(t, p->pid, &st) < 0 || (p->live && st != p->start_time);
		}
		if (drop)
			release(t, (uint32_t)i);
	}
	t->swept_ns = now_ns;
}

void proc_table_refresh(struct proc_table *t, int32_t pid, uint64_t start_ticks, uint64_t now_ns)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(t->procs, pid, &pid);
	uint32_t idx;
	bool known = hmap_find(&t->index, hash_u64((uint64_t)pid), hmap_field_eq, &k, &idx);
	struct proc *p = proc_table_get(t, pid, start_ticks, PROC_EXEC_UNKNOWN, "", now_ns);
	/* Made just now: read already. */
	if (known && p == &t->procs[idx] && p->live)
		read_maps(t, p, now_ns);
}

size_t proc_table_count(const struct proc_table *t)
{
	return t->index.count;
}

size_t proc_table_bytes(const struct proc_table *t)
{
	size_t n = t->cap * sizeof(*t->procs) + t->capfree * sizeof(*t->free_slots) +
		   hmap_bytes(&t->index);
	for (size_t i = 0; i < t->count; i++)
		if (t->procs[i].pid)
			n += t->procs[i].capmaps * sizeof(*t->procs[i].maps);
	return n;
}
