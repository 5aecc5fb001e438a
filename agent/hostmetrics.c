/* hostmetrics.c - see hostmetrics.h. */
#include "hostmetrics.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "hmap.h"
#include "proc.h"
#include "util.h"

/* --- parsers ---------------------------------------------------------------- */

/* Skips spaces, reads a decimal number of at most 20 digits (saturating
 * at UINT64_MAX); -1 when there is none. */
static int take_u64(const char **pp, const char *end, uint64_t *out)
{
	const char *p = *pp;
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	uint64_t v = 0;
	int digits = 0;
	while (p < end && *p >= '0' && *p <= '9') {
		uint64_t d = (uint64_t)(*p - '0');
		v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
		p++;
		digits++;
	}
	*pp = p;
	if (!digits)
		return -1;
	*out = v;
	return 0;
}

static const char *line_end(const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	return nl ? nl : end;
}

int hm_parse_stat(const char *text, size_t len, struct hm_cpu *out)
{
	const char *end = text + len;
	for (const char *p = text; p < end;) {
		const char *e = line_end(p, end);
		if (e - p > 4 && memcmp(p, "cpu ", 4) == 0) {
			const char *q = p + 4;
			uint64_t v[8];
			for (int i = 0; i < 8; i++)
				if (take_u64(&q, e, &v[i]) < 0) {
					if (i < 4)
						return -1;
					v[i] = 0; /* old kernels: fewer columns */
				}
			*out = (struct hm_cpu){ v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] };
			return 0;
		}
		p = e + 1;
	}
	return -1;
}

int hm_parse_meminfo(const char *text, size_t len, struct hm_meminfo *out)
{
	static const struct {
		const char *key;
		size_t off;
	} keys[] = {
		{ "MemTotal:", offsetof(struct hm_meminfo, total) },
		{ "MemFree:", offsetof(struct hm_meminfo, free) },
		{ "MemAvailable:", offsetof(struct hm_meminfo, available) },
		{ "Buffers:", offsetof(struct hm_meminfo, buffers) },
		{ "Cached:", offsetof(struct hm_meminfo, cached) },
	};
	memset(out, 0, sizeof(*out));
	bool total = false, avail = false;
	const char *end = text + len;
	for (const char *p = text; p < end;) {
		const char *e = line_end(p, end);
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
			size_t kl = strlen(keys[i].key);
			if ((size_t)(e - p) > kl && memcmp(p, keys[i].key, kl) == 0) {
				const char *q = p + kl;
				uint64_t kib;
				if (take_u64(&q, e, &kib) < 0)
					return -1;
				uint64_t *dst = (uint64_t *)((char *)out + keys[i].off);
				*dst = kib > UINT64_MAX / 1024 ? UINT64_MAX : kib * 1024;
				total |= i == 0;
				avail |= i == 2;
			}
		}
		p = e + 1;
	}
	if (!total)
		return -1;
	if (!avail) /* before Linux 3.14 */
		out->available = out->free + out->buffers + out->cached;
	return 0;
}

int hm_parse_pid_stat(const char *text, size_t len, struct hm_pstat *out)
{
	const char *lp = memchr(text, '(', len), *rp = NULL;
	for (size_t i = 0; i < len; i++)
		if (text[i] == ')')
			rp = text + i;
	if (!lp || !rp || rp < lp)
		return -1;
	memset(out, 0, sizeof(*out));
	size_t cl = MIN((size_t)(rp - lp - 1), sizeof(out->comm) - 1);
	memcpy(out->comm, lp + 1, cl);
	for (size_t i = 0; i < cl; i++)
		if ((unsigned char)out->comm[i] < 0x20 || out->comm[i] == 0x7f)
			out->comm[i] = '?';
	const char *p = rp + 1, *end = text + len;
	/* Fields from 3 on follow the ')'; 3 (state) is a letter. */
	for (int field = 3; field <= 24; field++) {
		while (p < end && *p == ' ')
			p++;
		if (p == end)
			return -1;
		uint64_t v = 0;
		if (field == 14 || field == 15 || field == 22 || field == 24) {
			if (take_u64(&p, end, &v) < 0)
				return -1;
			if (field == 14)
				out->utime = v;
			else if (field == 15)
				out->stime = v;
			else if (field == 22)
				out->start_time = v;
			else
				out->rss_pages = v;
		}
		while (p < end && *p != ' ')
			p++;
	}
	return 0;
}

int hm_parse_pid_io(const char *text, size_t len, uint64_t *read_bytes, uint64_t *write_bytes)
{
	bool r = false, w = false;
	const char *end = text + len;
	for (const char *p = text; p < end;) {
		const char *e = line_end(p, end);
		const char *q;
		if (e - p > 11 && memcmp(p, "read_bytes:", 11) == 0) {
			q = p + 11;
			r = take_u64(&q, e, read_bytes) == 0;
		} else if (e - p > 12 && memcmp(p, "write_bytes:", 12) == 0) {
			q = p + 12;
			w = take_u64(&q, e, write_bytes) == 0;
		}
		p = e + 1;
	}
	return r && w ? 0 : -1;
}

int hm_parse_cgroup2_path(const char *text, size_t len, char *out, size_t n)
{
	const char *end = text + len;
	for (const char *p = text; p < end;) {
		const char *e = line_end(p, end);
		if (e - p >= 4 && memcmp(p, "0::/", 4) == 0) {
			const char *s = p + 3;
			size_t l = (size_t)(e - s);
			if (l >= n || l > 1024)
				return -1;
			if (!str_printable(s, l))
				return -1;
			if (memmem(s, l, "/..", 3) || memmem(s, l, "../", 3))
				return -1;
			memcpy(out, s, l);
			out[l] = '\0';
			return 0;
		}
		p = e + 1;
	}
	return -1;
}

int hm_parse_memory_stat(const char *text, size_t len, uint64_t *inactive_file)
{
	const char *end = text + len;
	for (const char *p = text; p < end;) {
		const char *e = line_end(p, end);
		if (e - p > 14 && memcmp(p, "inactive_file ", 14) == 0) {
			const char *q = p + 14;
			return take_u64(&q, e, inactive_file);
		}
		p = e + 1;
	}
	return -1;
}

size_t hm_parse_diskstats(const char *text, size_t len, struct hm_disk *out, size_t max)
{
	size_t n = 0;
	const char *end = text + len;
	for (const char *p = text; p < end && n < max;) {
		const char *e = line_end(p, end);
		const char *q = p;
		uint64_t major, minor, v[7];
		if (take_u64(&q, e, &major) == 0 && take_u64(&q, e, &minor) == 0) {
			while (q < e && *q == ' ')
				q++;
			const char *name = q;
			while (q < e && *q != ' ')
				q++;
			size_t nl = (size_t)(q - name);
			bool ok = nl > 0 && nl < sizeof(out->name);
			for (int i = 0; i < 7 && ok; i++)
				ok = take_u64(&q, e, &v[i]) == 0;
			for (size_t i = 0; i < nl && ok; i++)
				ok = isalnum((unsigned char)name[i]) || name[i] == '-' || name[i] == '_' ||
				     name[i] == '.' || name[i] == '!';
			if (ok) {
				struct hm_disk *d = &out[n++];
				memcpy(d->name, name, nl);
				d->name[nl] = '\0';
				/* reads, merged, sectors, ms, writes, merged, sectors, ms */
				d->reads = v[0];
				d->read_sectors = v[2];
				d->read_ms = v[3];
				d->writes = v[4];
				d->write_sectors = v[6];
				uint64_t wms;
				d->write_ms = take_u64(&q, e, &wms) == 0 ? wms : 0;
			}
		}
		p = e + 1;
	}
	return n;
}

/* --- the collector ------------------------------------------------------------ */

/* What the collector remembers of a process between collections. */
struct hm_proc {
	int32_t pid;
	uint64_t start_time;
	uint64_t utime, stime;      /* at the last reading */
	uint64_t read_ns;           /* when (monotonic) */
	uint64_t rbytes, wbytes;    /* /proc/PID/io at io_ns */
	uint64_t io_ns;             /* 0 = not read in the last collection */
	uint64_t gen;               /* the collection that last saw it */
	bool named;                 /* exe and attrs read */
	bool cgroup_read;
	char exe[64];
	char cgroup[256];           /* cgroup v2 path, "" = unknown */
	struct proc_attrs attrs;
};

struct hm_cand {
	uint32_t slot;
	uint64_t cpu;  /* ticks over the interval; 0 when new */
	uint64_t rss;
	bool rated;    /* cpu is a delta */
	struct hm_pstat st;
};

struct hostmetrics {
	struct hostmetrics_opts o;
	struct hm_proc *procs;
	size_t nprocs, cap;
	uint32_t *free_slots;
	size_t nfree, capfree;
	struct hmap index;
	uint64_t gen;
	struct hm_cpu cpu;
	uint64_t cpu_ns;            /* 0 = no host reading yet */
	struct hm_disk disks[HM_MAX_DISKS];
	size_t ndisks;
	uint64_t disks_ns;
	struct hm_cand *cands;
	size_t capcands;
	struct hostmetrics_stats stats;
};

/* Reads a small file into buf (cap bytes, NUL-terminated). Returns the
 * length, or -1 (absent, vanished, unreadable). */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = 0;
	while (n + 1 < cap) {
		ssize_t r = read(fd, buf + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			close(fd);
			return -1;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	return (ssize_t)n;
}

struct hostmetrics *hostmetrics_new(const struct hostmetrics_opts *opts)
{
	struct hostmetrics *h = xcalloc(1, sizeof(*h));
	h->o = *opts;
	if (!h->o.max_procs)
		h->o.max_procs = HM_DEFAULT_PROCS;
	if (h->o.ticks_per_s <= 0)
		h->o.ticks_per_s = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
	if (h->o.page_size <= 0)
		h->o.page_size = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
	return h;
}

static void forget(struct hostmetrics *h, uint32_t slot);

void hostmetrics_free(struct hostmetrics *h)
{
	if (!h)
		return;
	for (size_t i = 0; i < h->nprocs; i++)
		proc_attrs_free(&h->procs[i].attrs);
	free(h->procs);
	free(h->free_slots);
	free(h->cands);
	hmap_free(&h->index);
	free(h);
}

static struct hm_proc *lookup(struct hostmetrics *h, int32_t pid, uint32_t *slot)
{
	struct hmap_field_key k = HMAP_FIELD_KEY(h->procs, pid, &pid);
	return hmap_find(&h->index, hash_u64((uint64_t)pid), hmap_field_eq, &k, slot) ? &h->procs[*slot]
									       : NULL;
}

static uint32_t add_proc(struct hostmetrics *h, int32_t pid)
{
	uint32_t slot;
	if (h->nfree) {
		slot = h->free_slots[--h->nfree];
	} else {
		xgrow((void **)&h->procs, &h->cap, h->nprocs + 1, sizeof(*h->procs));
		slot = (uint32_t)h->nprocs++;
	}
	memset(&h->procs[slot], 0, sizeof(h->procs[slot]));
	h->procs[slot].pid = pid;
	hmap_insert(&h->index, hash_u64((uint64_t)pid), slot);
	return slot;
}

static void forget(struct hostmetrics *h, uint32_t slot)
{
	struct hm_proc *p = &h->procs[slot];
	struct hmap_field_key k = HMAP_FIELD_KEY(h->procs, pid, &p->pid);
	hmap_remove(&h->index, hash_u64((uint64_t)p->pid), hmap_field_eq, &k);
	proc_attrs_free(&p->attrs);
	memset(p, 0, sizeof(*p));
	xgrow((void **)&h->free_slots, &h->capfree, h->nfree + 1, sizeof(*h->free_slots));
	h->free_slots[h->nfree++] = slot;
}

/* Host attributes: host.name, host.arch and the non-empty host_kv. */
static size_t host_kv(struct hostmetrics *h, struct metric_batch *b, uint32_t *kv, size_t max)
{
	size_t n = 0;
	const char *fixed[] = { "host.name", h->o.host_name, "host.arch", h->o.host_arch };
	for (size_t i = 0; i + 1 < ARRAY_SIZE(fixed) && n + 2 <= max; i += 2)
		if (fixed[i + 1] && *fixed[i + 1]) {
			kv[n++] = metric_batch_str(b, fixed[i]);
			kv[n++] = metric_batch_str(b, fixed[i + 1]);
		}
	for (size_t i = 0; i + 1 < h->o.nhost_kv && n + 2 <= max; i += 2)
		if (h->o.host_kv[i + 1] && *h->o.host_kv[i + 1]) {
			kv[n++] = metric_batch_str(b, h->o.host_kv[i]);
			kv[n++] = metric_batch_str(b, h->o.host_kv[i + 1]);
		}
	return n;
}

uint32_t hostmetrics_host_labels(struct hostmetrics *h, struct metric_batch *b,
				 const char *const *extra_kv, size_t nextra)
{
	uint32_t kv[2 * MB_MAX_LABELS];
	size_t n = host_kv(h, b, kv, ARRAY_SIZE(kv));
	for (size_t i = 0; i + 1 < nextra && n + 2 <= ARRAY_SIZE(kv); i += 2) {
		kv[n++] = metric_batch_str(b, extra_kv[i]);
		kv[n++] = metric_batch_str(b, extra_kv[i + 1]);
	}
	return metric_batch_labels(b, kv, n);
}

static void name_proc(struct hostmetrics *h, struct hm_proc *p, const char *comm)
{
	if (p->named)
		return;
	p->named = true;
	proc_exe_name(h->o.proc_root, p->pid, comm, p->exe, sizeof(p->exe));
	if (h->o.attrib)
		attrib_read(h->o.attrib, p->pid, &p->attrs);
}

struct label_kv {
	struct metric_batch *b;
	uint32_t *kv;
	size_t n;
};

static void add_label(void *ctx, const char *key, const char *value)
{
	struct label_kv *l = ctx;
	l->kv[l->n++] = metric_batch_str(l->b, key);
	l->kv[l->n++] = metric_batch_str(l->b, value);
}

/* A process's series carry what its samples carry: its attributes, and
 * what its pod's entry in the kubelet's list adds (names, labels). */
static uint32_t proc_labels(struct hostmetrics *h, struct metric_batch *b, const struct hm_proc *p,
			    bool with_process, const char *cgroup)
{
	uint32_t kv[2 * MB_MAX_LABELS];
	size_t n = host_kv(h, b, kv, ARRAY_SIZE(kv) - 2 * (ATTRIB_MAX + KUBELET_MAX_ATTRS + 2));
	if (with_process) {
		char pid[16];
		snprintf(pid, sizeof(pid), "%d", p->pid);
		kv[n++] = metric_batch_str(b, "process.executable.name");
		kv[n++] = metric_batch_str(b, p->exe);
		kv[n++] = metric_batch_str(b, "process.pid");
		kv[n++] = metric_batch_str(b, pid);
	} else {
		kv[n++] = metric_batch_str(b, "cgroup.path");
		kv[n++] = metric_batch_str(b, cgroup);
	}
	for (size_t i = 0; i < p->attrs.n && i < ATTRIB_MAX; i++) {
		kv[n++] = metric_batch_str(b, p->attrs.key[i]);
		kv[n++] = metric_batch_str(b, p->attrs.value[i]);
	}
	struct label_kv l = { b, kv, n };
	(void)kubelet_process_attributes(h->o.kubelet, &p->attrs, now_mono_ns(), add_label, &l);
	return metric_batch_labels(b, kv, l.n);
}

uint32_t hostmetrics_process_labels(struct hostmetrics *h, struct metric_batch *b, int32_t pid)
{
	if (pid <= 0) /* NVML may not know a process's pid (another pid namespace) */
		return hostmetrics_host_labels(h, b, NULL, 0);
	uint32_t slot;
	struct hm_proc *p = lookup(h, pid, &slot);
	if (!p) {
		char path[96], text[2048];
		struct hm_pstat st;
		snprintf(path, sizeof(path), "%s/%d/stat", h->o.proc_root, pid);
		ssize_t n = read_small(path, text, sizeof(text));
		if (n < 0 || hm_parse_pid_stat(text, (size_t)n, &st) < 0)
			memset(&st, 0, sizeof(st));
		slot = add_proc(h, pid);
		p = &h->procs[slot];
		p->start_time = st.start_time;
		p->gen = h->gen; /* forgotten at the next collection unless listed */
		name_proc(h, p, st.comm);
	} else {
		name_proc(h, p, NULL);
	}
	return proc_labels(h, b, p, true, NULL);
}

static double per_s(uint64_t delta, uint64_t dt_ns)
{
	return (double)delta * 1e9 / (double)dt_ns;
}

static void collect_host(struct hostmetrics *h, struct metric_batch *b, int64_t ts, uint64_t now_ns)
{
	char text[16384];
	ssize_t n;
	char path[300];
	uint32_t host = hostmetrics_host_labels(h, b, NULL, 0);
	snprintf(path, sizeof(path), "%s/stat", h->o.proc_root);
	struct hm_cpu c;
	if ((n = read_small(path, text, sizeof(text))) >= 0 && hm_parse_stat(text, (size_t)n, &c) == 0) {
		if (h->cpu_ns && now_ns > h->cpu_ns) {
			double k = 1e9 / (double)(now_ns - h->cpu_ns) / (double)h->o.ticks_per_s;
#define D(f) ((c.f >= h->cpu.f ? c.f - h->cpu.f : 0))
			metric_batch_add(b, "host.cpu.user", "cores", host, ts, (double)(D(user) + D(nice)) * k);
			metric_batch_add(b, "host.cpu.system", "cores", host, ts,
					 (double)(D(system) + D(irq) + D(softirq)) * k);
			metric_batch_add(b, "host.cpu.idle", "cores", host, ts, (double)D(idle) * k);
			metric_batch_add(b, "host.cpu.iowait", "cores", host, ts, (double)D(iowait) * k);
			metric_batch_add(b, "host.cpu.steal", "cores", host, ts, (double)D(steal) * k);
#undef D
		}
		h->cpu = c;
		h->cpu_ns = now_ns;
	}
	snprintf(path, sizeof(path), "%s/meminfo", h->o.proc_root);
	struct hm_meminfo m;
	if ((n = read_small(path, text, sizeof(text))) >= 0 && hm_parse_meminfo(text, (size_t)n, &m) == 0) {
		metric_batch_add(b, "host.memory.total", "bytes", host, ts, (double)m.total);
		metric_batch_add(b, "host.memory.available", "bytes", host, ts, (double)m.available);
		metric_batch_add(b, "host.memory.used", "bytes", host, ts,
				 (double)(m.total > m.available ? m.total - m.available : 0));
	}
	/* Disks: whole devices only (those /sys/block lists), not partitions. */
	static char dtext[65536]; /* only the metrics thread collects; too large for its stack */
	snprintf(path, sizeof(path), "%s/diskstats", h->o.proc_root);
	struct hm_disk d[HM_MAX_DISKS];
	size_t nd = 0;
	if ((n = read_small(path, dtext, sizeof(dtext))) >= 0) {
		struct hm_disk all[HM_MAX_DISKS * 4];
		size_t na = hm_parse_diskstats(dtext, (size_t)n, all, ARRAY_SIZE(all));
		for (size_t i = 0; i < na && nd < HM_MAX_DISKS; i++) {
			struct stat sb;
			snprintf(path, sizeof(path), "%.200s/%.31s", h->o.sys_block, all[i].name);
			if (strncmp(all[i].name, "loop", 4) == 0 || strncmp(all[i].name, "ram", 3) == 0 ||
			    stat(path, &sb) != 0)
				continue;
			d[nd++] = all[i];
		}
	}
	for (size_t i = 0; i < nd && h->disks_ns && now_ns > h->disks_ns; i++) {
		const struct hm_disk *prev = NULL;
		for (size_t k = 0; k < h->ndisks && !prev; k++)
			if (strcmp(h->disks[k].name, d[i].name) == 0)
				prev = &h->disks[k];
		if (!prev || d[i].reads < prev->reads || d[i].writes < prev->writes ||
		    d[i].read_sectors < prev->read_sectors || d[i].write_sectors < prev->write_sectors ||
		    d[i].read_ms < prev->read_ms || d[i].write_ms < prev->write_ms)
			continue;
		const char *extra[] = { "disk.device", d[i].name };
		uint32_t ls = hostmetrics_host_labels(h, b, extra, 2);
		uint64_t dt = now_ns - h->disks_ns;
		uint64_t r = d[i].reads - prev->reads, w = d[i].writes - prev->writes;
		metric_batch_add(b, "io.disk.read_throughput", "bytes/s", ls, ts,
				 per_s((d[i].read_sectors - prev->read_sectors) * 512, dt));
		metric_batch_add(b, "io.disk.write_throughput", "bytes/s", ls, ts,
				 per_s((d[i].write_sectors - prev->write_sectors) * 512, dt));
		metric_batch_add(b, "io.disk.read_latency", "ms", ls, ts,
				 r ? (double)(d[i].read_ms - prev->read_ms) / (double)r : 0.0);
		metric_batch_add(b, "io.disk.write_latency", "ms", ls, ts,
				 w ? (double)(d[i].write_ms - prev->write_ms) / (double)w : 0.0);
	}
	memcpy(h->disks, d, nd * sizeof(*d));
	h->ndisks = nd;
	h->disks_ns = now_ns;
}

static int cmp_cand(const void *a, const void *b)
{
	const struct hm_cand *x = a, *y = b;
	if (x->cpu != y->cpu)
		return x->cpu > y->cpu ? -1 : 1;
	if (x->rss != y->rss)
		return x->rss > y->rss ? -1 : 1;
	return 0;
}

/* process.wss of the kept processes' cgroups, each cgroup once. */
static void collect_cgroups(struct hostmetrics *h, struct metric_batch *b, int64_t ts, size_t nkeep)
{
	const char *seen[HM_MAX_CGROUPS];
	size_t nseen = 0;
	char path[1400], text[8192];
	for (size_t i = 0; i < nkeep && nseen < HM_MAX_CGROUPS; i++) {
		struct hm_proc *p = &h->procs[h->cands[i].slot];
		if (!p->cgroup_read) {
			p->cgroup_read = true;
			snprintf(path, sizeof(path), "%s/%d/cgroup", h->o.proc_root, p->pid);
			ssize_t n = read_small(path, text, sizeof(text));
			if (n < 0 || hm_parse_cgroup2_path(text, (size_t)n, p->cgroup, sizeof(p->cgroup)) < 0)
				p->cgroup[0] = '\0';
		}
		if (!p->cgroup[0] || strcmp(p->cgroup, "/") == 0)
			continue;
		bool dup = false;
		for (size_t k = 0; k < nseen && !dup; k++)
			dup = strcmp(seen[k], p->cgroup) == 0;
		if (dup)
			continue;
		seen[nseen++] = p->cgroup;
		uint64_t current, inactive;
		snprintf(path, sizeof(path), "%s%s/memory.current", h->o.cgroup_root, p->cgroup);
		ssize_t n = read_small(path, text, sizeof(text));
		const char *q = text;
		if (n < 0 || take_u64(&q, text + n, &current) < 0)
			continue;
		snprintf(path, sizeof(path), "%s%s/memory.stat", h->o.cgroup_root, p->cgroup);
		n = read_small(path, text, sizeof(text));
		if (n < 0 || hm_parse_memory_stat(text, (size_t)n, &inactive) < 0)
			inactive = 0;
		metric_batch_add(b, "process.wss", "bytes", proc_labels(h, b, p, false, p->cgroup), ts,
				 (double)(current > inactive ? current - inactive : 0));
	}
}

void hostmetrics_collect(struct hostmetrics *h, struct metric_batch *b, int64_t ts, uint64_t now_ns)
{
	uint64_t t0 = now_mono_ns();
	h->gen++;
	h->stats.collections++;
	collect_host(h, b, ts, now_ns);

	/* Every process's /proc/PID/stat. */
	size_t ncands = 0;
	DIR *dir = opendir(h->o.proc_root);
	struct dirent *de;
	char path[300], text[2048];
	while (dir && (de = readdir(dir)) != NULL && ncands < HM_MAX_SCAN) {
		uint64_t pid;
		if (de->d_name[0] < '1' || de->d_name[0] > '9' || parse_u64(de->d_name, &pid) < 0 ||
		    pid > INT32_MAX)
			continue;
		snprintf(path, sizeof(path), "%s/%s/stat", h->o.proc_root, de->d_name);
		ssize_t n = read_small(path, text, sizeof(text));
		struct hm_pstat st;
		if (n < 0 || hm_parse_pid_stat(text, (size_t)n, &st) < 0) {
			h->stats.processes_vanished++;
			continue;
		}
		if (st.rss_pages == 0)
			continue; /* kernel threads and zombies: no memory, no /proc/PID/io worth reading */
		uint32_t slot;
		struct hm_proc *p = lookup(h, (int32_t)pid, &slot);
		if (p && p->start_time != st.start_time) {
			forget(h, slot); /* the pid was reused */
			p = NULL;
		}
		if (!p) {
			slot = add_proc(h, (int32_t)pid);
			p = &h->procs[slot];
			p->start_time = st.start_time;
		}
		xgrow((void **)&h->cands, &h->capcands, ncands + 1, sizeof(*h->cands));
		struct hm_cand *c = &h->cands[ncands++];
		c->slot = slot;
		c->st = st;
		c->rss = st.rss_pages;
		c->rated = p->read_ns && now_ns > p->read_ns && st.utime >= p->utime && st.stime >= p->stime;
		c->cpu = c->rated ? (st.utime - p->utime) + (st.stime - p->stime) : 0;
		p->gen = h->gen;
	}
	if (dir)
		closedir(dir);
	/* Forget the processes that are gone. */
	for (size_t i = 0; i < h->nprocs; i++)
		if (h->procs[i].pid && h->procs[i].gen != h->gen)
			forget(h, (uint32_t)i);

	xqsort(h->cands, ncands, sizeof(*h->cands), cmp_cand);
	size_t nkeep = MIN(ncands, h->o.max_procs);
	h->stats.processes_seen = ncands;
	h->stats.processes_dropped = ncands - nkeep;
	b->dropped_processes += ncands - nkeep;
	for (size_t i = 0; i < nkeep; i++) {
		struct hm_cand *c = &h->cands[i];
		struct hm_proc *p = &h->procs[c->slot];
		name_proc(h, p, c->st.comm);
		uint32_t ls = proc_labels(h, b, p, true, NULL);
		if (c->rated) {
			uint64_t dt = now_ns - p->read_ns;
			double k = 1e9 / (double)dt / (double)h->o.ticks_per_s;
			metric_batch_add(b, "process.utime", "cores", ls, ts, (double)(c->st.utime - p->utime) * k);
			metric_batch_add(b, "process.stime", "cores", ls, ts, (double)(c->st.stime - p->stime) * k);
		}
		metric_batch_add(b, "process.rss", "bytes", ls, ts,
				 (double)c->st.rss_pages * (double)h->o.page_size);
		uint64_t rb, wb;
		snprintf(path, sizeof(path), "%s/%d/io", h->o.proc_root, p->pid);
		ssize_t n = read_small(path, text, sizeof(text));
		if (n >= 0 && hm_parse_pid_io(text, (size_t)n, &rb, &wb) == 0) {
			if (p->io_ns && now_ns > p->io_ns && rb >= p->rbytes && wb >= p->wbytes) {
				metric_batch_add(b, "io.read_throughput", "bytes/s", ls, ts,
						 per_s(rb - p->rbytes, now_ns - p->io_ns));
				metric_batch_add(b, "io.write_throughput", "bytes/s", ls, ts,
						 per_s(wb - p->wbytes, now_ns - p->io_ns));
			}
			p->rbytes = rb;
			p->wbytes = wb;
			p->io_ns = now_ns;
		} else {
			p->io_ns = 0;
		}
	}
	/* A process not kept this time has no io reading to rate against next time. */
	for (size_t i = nkeep; i < ncands; i++)
		h->procs[h->cands[i].slot].io_ns = 0;
	collect_cgroups(h, b, ts, nkeep);
	for (size_t i = 0; i < ncands; i++) {
		struct hm_proc *p = &h->procs[h->cands[i].slot];
		p->utime = h->cands[i].st.utime;
		p->stime = h->cands[i].st.stime;
		p->read_ns = now_ns;
	}
	h->stats.last_ns = now_mono_ns() - t0;
}

void hostmetrics_get_stats(const struct hostmetrics *h, struct hostmetrics_stats *out)
{
	*out = h->stats;
}

const char *hm_host_arch(void)
{
	struct utsname u;
	if (uname(&u) != 0)
		return "unknown";
	if (strcmp(u.machine, "x86_64") == 0)
		return "amd64";
	if (strcmp(u.machine, "aarch64") == 0)
		return "arm64";
	/* Static so the name outlives the call; written once, at start. */
	static char machine[sizeof(u.machine)];
	snprintf(machine, sizeof(machine), "%s", u.machine);
	return machine;
}
