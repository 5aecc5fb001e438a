/* gputopo.c - see gputopo.h. */
#include "gputopo.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "server/query/request.h"
#include "server/query/scan.h"
#include "util.h"

void gputopo_init(struct gputopo *t)
{
	memset(t, 0, sizeof(*t));
}

void gputopo_free(struct gputopo *t)
{
	for (size_t i = 0; i < t->nhosts; i++) {
		free_all(t->hosts[i]->procs, t->hosts[i]);
	}
	free(t->hosts);
	memset(t, 0, sizeof(*t));
}

/* A label's string value, or "" (absent, or not a string). */
static const char *lab(const json_t *doc, const char *key)
{
	const json_t *v = json_object_get(doc, key);
	return v && json_is_string(v) ? json_string_value(v) : "";
}

/* A label holding a decimal number (a count, a pid); -1 when it is not one. */
static long lab_num(const json_t *doc, const char *key)
{
	const char *s = lab(doc, key);
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	return *s && !*end && !errno && v >= 0 ? v : -1;
}

static void copy(char *dst, size_t n, const char *src)
{
	snprintf(dst, n, "%s", src);
}

static struct topo_host *host_of(struct gputopo *t, const char *name, bool create)
{
	for (size_t i = 0; i < t->nhosts; i++)
		if (strcmp(t->hosts[i]->name, name) == 0)
			return t->hosts[i];
	if (!create)
		return NULL;
	if (t->nhosts >= TOPO_MAX_HOSTS) {
		t->left_out++;
		return NULL;
	}
	struct topo_host *h = xcalloc(1, sizeof(*h));
	copy(h->name, sizeof(h->name), name);
	h->ts = INT64_MIN;
	h->procs = xcalloc(TOPO_MAX_PROCS, sizeof(*h->procs));
	t->hosts = xrealloc(t->hosts, (t->nhosts + 1) * sizeof(*t->hosts));
	t->hosts[t->nhosts++] = h;
	return h;
}

/* A newer collection: what the host held is forgotten. */
static void host_restart(struct topo_host *h, int64_t ts)
{
	h->ts = ts;
	h->ngpus = h->nlinks = h->nprocs = h->nnodes = 0;
	h->left_out = 0;
}

static void add_device(struct topo_host *h, const json_t *l, double v)
{
	if (h->ngpus >= TOPO_MAX_GPUS) {
		h->left_out++;
		return;
	}
	struct topo_gpu *g = &h->gpus[h->ngpus++];
	memset(g, 0, sizeof(*g));
	copy(g->index, sizeof(g->index), lab(l, "gpu.index"));
	copy(g->uuid, sizeof(g->uuid), lab(l, "gpu.uuid"));
	copy(g->name, sizeof(g->name), lab(l, "gpu.name"));
	copy(g->bus, sizeof(g->bus), lab(l, "gpu.pci.bus_id"));
	g->numa = isfinite(v) && v >= 0 && v < CPULIST_MAX_ID ? (int)v : -1;
	g->has_cpus = cpuset_parse(lab(l, "gpu.cpus"), &g->cpus) > 0;
	long n = lab_num(l, "gpu.nvlink.links"), a = lab_num(l, "gpu.nvlink.active");
	g->nvl_links = n > 0 && n < 1000 ? (unsigned)n : 0;
	g->nvl_active = a > 0 && a <= (long)g->nvl_links ? (unsigned)a : 0;
}

static void add_link(struct topo_host *h, const json_t *l, double v)
{
	if (h->nlinks >= TOPO_MAX_PAIRS) {
		h->left_out++;
		return;
	}
	struct topo_link *k = &h->links[h->nlinks++];
	copy(k->a, sizeof(k->a), lab(l, "gpu.index"));
	copy(k->b, sizeof(k->b), lab(l, "gpu.peer.index"));
	copy(k->path, sizeof(k->path), lab(l, "gpu.topology.path"));
	copy(k->pcie, sizeof(k->pcie), lab(l, "gpu.topology.pcie"));
	k->nvlinks = isfinite(v) && v > 0 && v < 1000 ? (unsigned)v : 0;
}

static void add_proc(struct topo_host *h, const json_t *l)
{
	if (h->nprocs >= TOPO_MAX_PROCS) {
		h->left_out++;
		return;
	}
	struct topo_proc *p = &h->procs[h->nprocs];
	if (cpuset_parse(lab(l, "process.cpus_allowed"), &p->cpus) <= 0)
		return; /* unknown CPUs: nothing to say about it */
	/* A MIG device's process feeds its GPU. */
	const char *parent = lab(l, "gpu.parent.index");
	copy(p->gpu, sizeof(p->gpu), *parent ? parent : lab(l, "gpu.index"));
	p->pid = lab_num(l, "process.pid");
	copy(p->name, sizeof(p->name), lab(l, "process.executable.name"));
	h->nprocs++;
}

static void add_node(struct topo_host *h, const json_t *l)
{
	long id = lab_num(l, "numa.node");
	if (id < 0 || id >= CPULIST_MAX_ID)
		return;
	if (h->nnodes >= TOPO_MAX_NODES) {
		h->left_out++;
		return;
	}
	struct topo_node *n = &h->nodes[h->nnodes];
	if (cpuset_parse(lab(l, "numa.node.cpus"), &n->cpus) < 0)
		return;
	n->id = (int)id;
	h->nnodes++;
}

void gputopo_add(struct gputopo *t, const char *metric, const char *labels, int64_t ts, double value)
{
	json_t *l = json_loads(labels, 0, NULL);
	if (!l || !json_is_object(l)) {
		json_decref(l);
		return;
	}
	bool device = strcmp(metric, "hw.gpu.topology.device") == 0;
	struct topo_host *h = host_of(t, lab(l, "host.name"), device);
	if (h && device && ts > h->ts)
		host_restart(h, ts);
	if (h && ts == h->ts) {
		if (device)
			add_device(h, l, value);
		else if (strcmp(metric, "hw.gpu.topology.link") == 0)
			add_link(h, l, value);
		else if (strcmp(metric, "hw.gpu.topology.process") == 0)
			add_proc(h, l);
		else if (strcmp(metric, "hw.numa.node.cpus") == 0)
			add_node(h, l);
	}
	json_decref(l);
}

/* --- findings -------------------------------------------------------------- */

static const struct topo_gpu *gpu_by_index(const struct topo_host *h, const char *index)
{
	for (size_t i = 0; i < h->ngpus; i++)
		if (strcmp(h->gpus[i].index, index) == 0)
			return &h->gpus[i];
	return NULL;
}

/* The CPUs of NUMA node id: NVML's affinity of a GPU on it, else the
 * host's node list. false when unknown. */
static bool node_cpus(const struct topo_host *h, int id, struct cpuset *out)
{
	for (size_t i = 0; i < h->ngpus; i++)
		if (h->gpus[i].numa == id && h->gpus[i].has_cpus) {
			*out = h->gpus[i].cpus;
			return true;
		}
	for (size_t i = 0; i < h->nnodes; i++)
		if (h->nodes[i].id == id) {
			*out = h->nodes[i].cpus;
			return true;
		}
	return false;
}

/* Every NUMA node id the host knows of (GPUs' and the node list's), once,
 * ascending; returns how many. */
static size_t node_ids(const struct topo_host *h, int *ids, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < h->ngpus + h->nnodes; i++) {
		int id = i < h->ngpus ? h->gpus[i].numa : h->nodes[i - h->ngpus].id;
		bool seen = id < 0;
		for (size_t k = 0; k < n && !seen; k++)
			seen = ids[k] == id;
		if (!seen && n < max)
			ids[n++] = id;
	}
	for (size_t i = 1; i < n; i++) /* few: insertion sort */
		for (size_t k = i; k > 0 && ids[k - 1] > ids[k]; k--) {
			int x = ids[k];
			ids[k] = ids[k - 1];
			ids[k - 1] = x;
		}
	return n;
}

/* The nodes whose CPUs meet set, as "0,1" into out; "" when none is known. */
static void nodes_of(const struct topo_host *h, const struct cpuset *set, struct buf *out)
{
	int ids[TOPO_MAX_GPUS + TOPO_MAX_NODES];
	size_t n = node_ids(h, ids, ARRAY_SIZE(ids));
	bool first = true;
	for (size_t i = 0; i < n; i++) {
		struct cpuset c;
		if (node_cpus(h, ids[i], &c) && cpuset_common(&c, set)) {
			buf_printf(out, "%s%d", first ? "" : ",", ids[i]);
			first = false;
		}
	}
}

/* The CPUs near GPU g: its affinity, else its node's. */
static bool gpu_cpus(const struct topo_host *h, const struct topo_gpu *g, struct cpuset *out)
{
	if (g->has_cpus) {
		*out = g->cpus;
		return true;
	}
	return g->numa >= 0 && node_cpus(h, g->numa, out);
}

static void numa_findings(const struct topo_host *h, struct jsonw *w)
{
	for (size_t i = 0; i < h->nprocs; i++) {
		const struct topo_proc *p = &h->procs[i];
		const struct topo_gpu *g = gpu_by_index(h, p->gpu);
		struct cpuset near;
		if (!g || !gpu_cpus(h, g, &near) || cpuset_common(&near, &p->cpus))
			continue;
		struct buf used = { 0 }, nodes = { 0 }, gc = { 0 }, t = { 0 };
		cpuset_format(&p->cpus, &used);
		cpuset_format(&near, &gc);
		nodes_of(h, &p->cpus, &nodes);
		const char *name = *p->name ? p->name : "a process";
		jsonw_begin_object(w);
		jsonw_kv_str(w, "kind", "numa_placement");
		jsonw_kv_str(w, "severity", "warning");
		buf_printf(&t, "%s (pid %ld) feeds GPU %s from the far NUMA node", name, p->pid, g->index);
		jsonw_kv_str(w, "title", t.data);
		buf_reset(&t);
		buf_printf(&t, "GPU %s is on NUMA node %d (CPUs %s); %s may run only on CPUs %s", g->index, g->numa,
			   gc.data ? gc.data : "", name, used.data ? used.data : "");
		if (nodes.len)
			buf_printf(&t, " (NUMA node %s)", nodes.data);
		buf_puts(&t, ": every copy to and from the GPU crosses the inter-socket link.");
		jsonw_kv_str(w, "detail", t.data);
		buf_reset(&t);
		if (g->numa >= 0)
			buf_printf(&t, "numactl --cpunodebind=%d --membind=%d <command>, or taskset -a -p -c %s %ld for the running process",
				   g->numa, g->numa, gc.data ? gc.data : "", p->pid);
		else
			buf_printf(&t, "taskset -a -p -c %s %ld", gc.data ? gc.data : "", p->pid);
		jsonw_kv_str(w, "fix", t.data);
		jsonw_key(w, "gpus");
		jsonw_begin_array(w);
		jsonw_str(w, g->index);
		jsonw_end_array(w);
		jsonw_kv_i64(w, "pid", p->pid);
		jsonw_kv_str(w, "process", p->name);
		jsonw_kv_str(w, "cpus_used", used.data ? used.data : "");
		jsonw_kv_str(w, "cpus_near", gc.data ? gc.data : "");
		jsonw_kv_i64(w, "gpu_numa_node", g->numa);
		jsonw_end_object(w);
		buf_free(&used);
		buf_free(&nodes);
		buf_free(&gc);
		buf_free(&t);
	}
}

static void pcie_findings(const struct topo_host *h, struct jsonw *w)
{
	for (size_t i = 0; i < h->nlinks; i++) {
		const struct topo_link *k = &h->links[i];
		const struct topo_gpu *a = gpu_by_index(h, k->a), *b = gpu_by_index(h, k->b);
		if (k->nvlinks || !a || !b || !a->nvl_links || !b->nvl_links)
			continue;
		const char *via = *k->pcie ? k->pcie : "PCIe";
		struct buf t = { 0 };
		jsonw_begin_object(w);
		jsonw_kv_str(w, "kind", "pcie_fallback");
		jsonw_kv_str(w, "severity", "warning");
		buf_printf(&t, "GPU %s and GPU %s talk over PCIe (%s) although both have NVLink", a->index, b->index, via);
		jsonw_kv_str(w, "title", t.data);
		buf_reset(&t);
		buf_printf(&t, "no NVLink joins them; GPU %s has %u of %u links up, GPU %s %u of %u.", a->index,
			   a->nvl_active, a->nvl_links, b->index, b->nvl_active, b->nvl_links);
		jsonw_kv_str(w, "detail", t.data);
		buf_reset(&t);
		buf_printf(&t, "check the links with nvidia-smi nvlink --status -i %s and nvidia-smi topo -m; a link down "
			       "needs the node drained and the link reseated (or the bridge/switch path checked)",
			   a->nvl_active <= b->nvl_active ? a->index : b->index);
		jsonw_kv_str(w, "fix", t.data);
		jsonw_key(w, "gpus");
		jsonw_begin_array(w);
		jsonw_str(w, a->index);
		jsonw_str(w, b->index);
		jsonw_end_array(w);
		jsonw_kv_str(w, "path", via);
		jsonw_end_object(w);
		buf_free(&t);
	}
}

void gputopo_findings(const struct topo_host *h, struct jsonw *w)
{
	jsonw_begin_array(w);
	numa_findings(h, w);
	pcie_findings(h, w);
	jsonw_end_array(w);
}

/* --- the answer ------------------------------------------------------------ */

static void kv_cpus(struct jsonw *w, const char *key, const struct cpuset *s)
{
	struct buf t = { 0 };
	cpuset_format(s, &t);
	jsonw_kv_str(w, key, t.data ? t.data : "");
	buf_free(&t);
}

static void write_host(const struct topo_host *h, struct jsonw *w)
{
	jsonw_kv_str(w, "host", h->name);
	jsonw_kv_i64(w, "ts", h->ts);
	int ids[TOPO_MAX_GPUS + TOPO_MAX_NODES];
	size_t nids = node_ids(h, ids, ARRAY_SIZE(ids));
	jsonw_key(w, "numa_nodes");
	jsonw_begin_array(w);
	for (size_t i = 0; i < nids; i++) {
		struct cpuset c;
		jsonw_begin_object(w);
		jsonw_kv_i64(w, "id", ids[i]);
		if (node_cpus(h, ids[i], &c))
			kv_cpus(w, "cpus", &c);
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	jsonw_key(w, "gpus");
	jsonw_begin_array(w);
	for (size_t i = 0; i < h->ngpus; i++) {
		const struct topo_gpu *g = &h->gpus[i];
		jsonw_begin_object(w);
		jsonw_kv_str(w, "index", g->index);
		jsonw_kv_str(w, "uuid", g->uuid);
		jsonw_kv_str(w, "name", g->name);
		jsonw_kv_str(w, "pci_bus_id", g->bus);
		jsonw_key(w, "numa_node");
		if (g->numa >= 0)
			jsonw_i64(w, g->numa);
		else
			jsonw_null(w);
		struct cpuset c;
		bool known = gpu_cpus(h, g, &c);
		if (known)
			kv_cpus(w, "cpus", &c);
		jsonw_kv_u64(w, "nvlink_links", g->nvl_links);
		jsonw_kv_u64(w, "nvlink_active", g->nvl_active);
		jsonw_key(w, "processes");
		jsonw_begin_array(w);
		for (size_t k = 0; k < h->nprocs; k++) {
			const struct topo_proc *p = &h->procs[k];
			if (strcmp(p->gpu, g->index) != 0)
				continue;
			struct buf nodes = { 0 };
			nodes_of(h, &p->cpus, &nodes);
			jsonw_begin_object(w);
			jsonw_kv_i64(w, "pid", p->pid);
			jsonw_kv_str(w, "name", p->name);
			kv_cpus(w, "cpus_allowed", &p->cpus);
			jsonw_kv_str(w, "numa_nodes", nodes.data ? nodes.data : "");
			/* Unknown near CPUs: nothing says it is far. */
			jsonw_kv_bool(w, "near", !known || cpuset_common(&p->cpus, &c) > 0);
			jsonw_end_object(w);
			buf_free(&nodes);
		}
		jsonw_end_array(w);
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	jsonw_key(w, "links");
	jsonw_begin_array(w);
	for (size_t i = 0; i < h->nlinks; i++) {
		const struct topo_link *k = &h->links[i];
		jsonw_begin_object(w);
		jsonw_kv_str(w, "a", k->a);
		jsonw_kv_str(w, "b", k->b);
		jsonw_kv_str(w, "path", k->path);
		jsonw_kv_u64(w, "nvlinks", k->nvlinks);
		jsonw_kv_str(w, "pcie", k->pcie);
		jsonw_end_object(w);
	}
	jsonw_end_array(w);
	jsonw_key(w, "findings");
	gputopo_findings(h, w);
	jsonw_kv_u64(w, "left_out", h->left_out);
}

struct feed {
	struct gputopo *t;
	const char *metric;
};

static void feed_point(void *ctx, const char *project, const char *labels, int64_t ts, double value)
{
	(void)project;
	struct feed *f = ctx;
	gputopo_add(f->t, f->metric, labels, ts, value);
}

static int cmp_host(const void *a, const void *b)
{
	return strcmp((*(struct topo_host *const *)a)->name, (*(struct topo_host *const *)b)->name);
}

int gputopo_query(struct metrics_store *m, const char *project, const char *body, size_t len, struct buf *out,
		  struct buf *err)
{
	json_t *doc = req_load(body, len, err);
	if (!doc)
		return 400;
	struct scope sc;
	char *want = NULL;
	if (scope_parse(json_object_get(doc, "filter"), "filter", &sc, err) < 0) {
		json_decref(doc);
		return 400;
	}
	int status = req_string(doc, "host", 255, &want, err) < 0 ? 400 : 0;
	json_decref(doc);
	struct gputopo t;
	gputopo_init(&t);
	/* The device points first: they fix each host's latest collection. */
	static const char *const METRICS[] = { "hw.gpu.topology.device", "hw.gpu.topology.link",
					       "hw.gpu.topology.process", "hw.numa.node.cpus" };
	for (size_t i = 0; status == 0 && i < ARRAY_SIZE(METRICS); i++) {
		struct feed f = { &t, METRICS[i] };
		if (metrics_latest(m, project, METRICS[i], sc.start_ms, sc.end_ms, TOPO_MAX_SERIES, feed_point, &f, err) < 0)
			status = 400;
	}
	const struct topo_host *h = NULL;
	if (status == 0) {
		xqsort(t.hosts, t.nhosts, sizeof(*t.hosts), cmp_host);
		if (want && *want) {
			h = host_of(&t, want, false);
			if (!h) {
				buf_printf(err, "no GPU topology from host \"%s\" in the range", want);
				status = 404;
			}
		} else if (t.nhosts) {
			h = t.hosts[0];
		}
	}
	if (status == 0) {
		struct jsonw w;
		jsonw_init(&w, out);
		jsonw_begin_object(&w);
		jsonw_key(&w, "hosts");
		jsonw_begin_array(&w);
		for (size_t i = 0; i < t.nhosts; i++)
			jsonw_str(&w, t.hosts[i]->name);
		jsonw_end_array(&w);
		jsonw_kv_u64(&w, "hosts_left_out", t.left_out);
		if (h) {
			write_host(h, &w);
		} else {
			jsonw_key(&w, "host");
			jsonw_null(&w);
		}
		jsonw_end_object(&w);
		if (jsonw_finish_answer(&w, err))
			status = 500;
		else
			buf_putc(out, '\n');
	}
	gputopo_free(&t);
	free(want);
	scope_free(&sc);
	return status;
}
