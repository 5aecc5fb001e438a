/* attrib.c - see attrib.h. */
#include "attrib.h"

#include <ctype.h>
#include <fcntl.h>
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "containerd.h"
#include "hmap.h"
#include "log.h"
#include "util.h"

#define VALUE_MAX 128
#define API_MAX (1u << 20)
#define API_TIMEOUT_MS 300L
/* Containers remembered; when full, all are forgotten (and asked again,
 * once each, when seen again), so a host that runs many short-lived
 * containers does not grow the table without end. */
#define CONTAINERS_MAX 4096

void proc_attrs_free(struct proc_attrs *a)
{
	for (size_t i = 0; i < a->n; i++) {
		free(a->key[i]);
		free(a->value[i]);
	}
	a->n = 0;
}

static void put(struct proc_attrs *a, const char *key, const char *value)
{
	if (!value || !*value || a->n == ATTRIB_MAX)
		return;
	char v[VALUE_MAX + 1];
	size_t n = 0;
	for (const unsigned char *c = (const unsigned char *)value; *c && n < VALUE_MAX; c++)
		v[n++] = *c >= 0x20 && *c != 0x7f ? (char)*c : '?';
	v[n] = '\0';
	a->key[a->n] = xstrdup(key);
	a->value[a->n] = xstrdup(v);
	a->n++;
}

/* --- /proc/PID/cgroup --------------------------------------------------------- */

static bool all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	return true;
}

static void copy(char *dst, size_t cap, const char *s, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, s, n);
	dst[n] = '\0';
}

/* One path component c[0..n). */
static void component(const char *c, size_t n, bool in_slurm, struct cgroup_info *out)
{
	const char *s = c;
	size_t m = n;
	if (m > 6 && memcmp(s + m - 6, ".scope", 6) == 0)
		m -= 6;
	static const char *const prefixes[] = { "docker-", "cri-containerd-", "crio-", "libpod-",
						"containerd-", "nerdctl-" };
	for (size_t i = 0; i < ARRAY_SIZE(prefixes); i++) {
		size_t pl = strlen(prefixes[i]);
		if (m > pl && memcmp(s, prefixes[i], pl) == 0) {
			s += pl;
			m -= pl;
			break;
		}
	}
	if (m == 64 && all_hex(s, 64))
		copy(out->container_id, sizeof(out->container_id), s, 64);
	/* pod<uid> (cgroupfs) or kubepods-<qos>-pod<uid_with_underscores>.slice */
	const char *pod = NULL;
	for (size_t i = 0; i + 3 < n; i++)
		if (memcmp(c + i, "pod", 3) == 0 && (i == 0 || c[i - 1] == '-')) {
			pod = c + i + 3;
			break;
		}
	if (pod) {
		size_t pl = (size_t)(c + n - pod);
		if (pl > 6 && memcmp(pod + pl - 6, ".slice", 6) == 0)
			pl -= 6;
		if (pl == 36) {
			char uid[37];
			for (size_t i = 0; i < 36; i++)
				uid[i] = pod[i] == '_' ? '-' : pod[i];
			uid[36] = '\0';
			if (uuid_valid(uid))
				memcpy(out->pod_uid, uid, sizeof(uid));
		}
	}
	if (in_slurm && n > 4 && memcmp(c, "job_", 4) == 0) {
		size_t d = 4;
		while (d < n && isdigit((unsigned char)c[d]))
			d++;
		if (d == n && n - 4 < sizeof(out->slurm_job))
			copy(out->slurm_job, sizeof(out->slurm_job), c + 4, n - 4);
	}
}

void attrib_parse_cgroup(const char *text, size_t len, struct cgroup_info *out)
{
	memset(out, 0, sizeof(*out));
	const char *s = text, *end = text + len;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *le = nl ? nl : end;
		/* hierarchy:controllers:path */
		const char *c1 = memchr(s, ':', (size_t)(le - s));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
		if (c2) {
			bool in_slurm = false;
			for (const char *p = c2 + 1; p < le;) {
				const char *sl = memchr(p, '/', (size_t)(le - p));
				const char *ce = sl ? sl : le;
				if (ce > p) {
					if ((size_t)(ce - p) >= 5 && memcmp(p, "slurm", 5) == 0)
						in_slurm = true;
					component(p, (size_t)(ce - p), in_slurm, out);
				}
				p = sl ? sl + 1 : le;
			}
		}
		s = nl ? nl + 1 : end;
	}
}

/* --- /proc/PID/environ ----------------------------------------------------------- */

void attrib_parse_environ(const char *env, size_t len, const char *job_tag_var,
			  struct env_info *out)
{
	memset(out, 0, sizeof(*out));
	size_t jl = job_tag_var ? strlen(job_tag_var) : 0;
	const char *s = env, *end = env + len;
	while (s < end) {
		const char *z = memchr(s, '\0', (size_t)(end - s));
		const char *e = z ? z : end;
		const char *eq = memchr(s, '=', (size_t)(e - s));
		if (eq) {
			size_t kl = (size_t)(eq - s), vl = (size_t)(e - eq - 1);
			const char *v = eq + 1;
#define IS(name) (kl == sizeof(name) - 1 && memcmp(s, name, kl) == 0)
			if (IS("SLURM_JOB_ID"))
				copy(out->slurm_job_id, sizeof(out->slurm_job_id), v, vl);
			else if (IS("SLURM_JOB_NAME"))
				copy(out->slurm_job_name, sizeof(out->slurm_job_name), v, vl);
			else if (IS("SLURM_JOB_USER"))
				copy(out->slurm_job_user, sizeof(out->slurm_job_user), v, vl);
			else if (IS("HOSTNAME"))
				copy(out->hostname, sizeof(out->hostname), v, vl);
			else if (IS("KUBERNETES_SERVICE_HOST"))
				out->k8s = true;
			else if (jl && kl == jl && memcmp(s, job_tag_var, jl) == 0)
				copy(out->job_tag, sizeof(out->job_tag), v, vl);
#undef IS
		}
		s = z ? z + 1 : end;
	}
}

bool attrib_k8s_deployment(const char *pod, char *out, size_t n)
{
	/* <deployment>-<hash: 5..10 of [a-z0-9]>-<5 of [a-z0-9]> */
	const char *d2 = strrchr(pod, '-');
	if (!d2 || strlen(d2 + 1) != 5)
		return false;
	const char *d1 = d2;
	while (d1 > pod && d1[-1] != '-')
		d1--;
	if (d1 == pod)
		return false;
	size_t hl = (size_t)(d2 - d1);
	if (hl < 5 || hl > 10)
		return false;
	for (const char *c = d1; c < d2 + 6 && *c; c++)
		if (c != d2 && !(islower((unsigned char)*c) || isdigit((unsigned char)*c)))
			return false;
	size_t dl = (size_t)(d1 - 1 - pod);
	if (dl == 0 || dl >= n)
		return false;
	memcpy(out, pod, dl);
	out[dl] = '\0';
	return true;
}

/* --- the container runtime ----------------------------------------------------------- */

struct container {
	char id[65];
	char *name, *pod, *ns, *cname; /* NULL = unknown */
};

struct attrib {
	char *proc_root;
	char *socket; /* NULL: no runtime API */
	enum attrib_api api;
	char *job_tag_var;
	struct container *cs;
	size_t ncs, capcs;
	struct hmap index;
};

static bool eq_container(const void *ctx, uint32_t idx)
{
	const void *const *k = ctx;
	const struct attrib *a = k[0];
	return strcmp(a->cs[idx].id, (const char *)k[1]) == 0;
}

enum attrib_api attrib_runtime_api(const char *socket_path)
{
	const char *base = strrchr(socket_path, '/');
	base = base ? base + 1 : socket_path;
	if (strstr(base, "containerd"))
		return ATTRIB_API_CONTAINERD;
	return strstr(socket_path, "crio") ? ATTRIB_API_CRIO : ATTRIB_API_DOCKER;
}

struct attrib *attrib_new(const char *proc_root, const char *runtime_socket,
			  const char *job_tag_var)
{
	struct attrib *a = xcalloc(1, sizeof(*a));
	a->proc_root = xstrdup(proc_root);
	a->job_tag_var = xstrdup(job_tag_var ? job_tag_var : "");
	if (runtime_socket && strcmp(runtime_socket, "none") == 0) {
		return a;
	} else if (runtime_socket && *runtime_socket) {
		a->socket = xstrdup(runtime_socket);
	} else {
		static const char *const probe[] = { "/var/run/docker.sock",
						     "/run/containerd/containerd.sock",
						     "/var/run/containerd/containerd.sock",
						     "/run/podman/podman.sock", "/var/run/crio/crio.sock" };
		for (size_t i = 0; i < ARRAY_SIZE(probe) && !a->socket; i++)
			if (access(probe[i], W_OK) == 0)
				a->socket = xstrdup(probe[i]);
	}
	if (a->socket) {
		a->api = attrib_runtime_api(a->socket);
		static const char *const api_names[] = { "Docker", "CRI-O", "containerd" };
		log_info("container names from the %s API at %s", api_names[a->api], a->socket);
	}
	return a;
}

static void forget_containers(struct attrib *a)
{
	for (size_t i = 0; i < a->ncs; i++) {
		free(a->cs[i].name);
		free(a->cs[i].pod);
		free(a->cs[i].ns);
		free(a->cs[i].cname);
	}
	a->ncs = 0;
	hmap_clear(&a->index);
}

void attrib_free(struct attrib *a)
{
	if (!a)
		return;
	forget_containers(a);
	free(a->cs);
	hmap_free(&a->index);
	free(a->proc_root);
	free(a->socket);
	free(a->job_tag_var);
	free(a);
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct buf *b = ud;
	if (b->len + size * n > API_MAX)
		return 0;
	buf_append(b, p, size * n);
	return size * n;
}

static char *json_str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s && *s ? xstrdup(s) : NULL;
}

/* Asks the runtime about container c (once). */
static void resolve(struct attrib *a, struct container *c)
{
	if (a->api == ATTRIB_API_CONTAINERD) {
		struct ctr_names n;
		if (containerd_lookup(a->socket, c->id, API_TIMEOUT_MS, &n)) {
			/* The strings change owner. */
			c->name = n.name;
			c->pod = n.pod;
			c->ns = n.ns;
			c->cname = n.cname;
		} else {
			log_debug("container %.12s: the containerd at %s does not know it", c->id,
				  a->socket);
		}
		return;
	}
	CURL *h = curl_easy_init();
	if (!h)
		return;
	char url[160];
	snprintf(url, sizeof(url),
		 a->api == ATTRIB_API_CRIO ? "http://localhost/containers/%s"
					   : "http://localhost/containers/%s/json",
		 c->id);
	struct buf body = { 0 };
	curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, a->socket);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, API_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
	long status = 0;
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(h);
	json_t *doc = status == 200 ? json_loadb(body.data ? body.data : "", body.len, 0, NULL) : NULL;
	buf_free(&body);
	if (!doc) {
		log_debug("container %.12s: the runtime at %s does not know it (status %ld)", c->id,
			  a->socket, status);
		return;
	}
	json_t *labels;
	if (a->api == ATTRIB_API_CRIO) {
		c->name = json_str(doc, "name");
		labels = json_object_get(doc, "labels");
	} else {
		char *n = json_str(doc, "Name");
		if (n) {
			c->name = xstrdup(n[0] == '/' ? n + 1 : n);
			free(n);
		}
		labels = json_object_get(json_object_get(doc, "Config"), "Labels");
	}
	if (json_is_object(labels)) {
		c->pod = json_str(labels, "io.kubernetes.pod.name");
		c->ns = json_str(labels, "io.kubernetes.pod.namespace");
		c->cname = json_str(labels, "io.kubernetes.container.name");
	}
	json_decref(doc);
}

static struct container *container(struct attrib *a, const char *id)
{
	const void *k[2] = { a, id };
	uint64_t h = hash_bytes(id, strlen(id));
	uint32_t idx;
	if (hmap_find(&a->index, h, eq_container, k, &idx))
		return &a->cs[idx];
	if (a->ncs == CONTAINERS_MAX)
		forget_containers(a);
	xgrow((void **)&a->cs, &a->capcs, a->ncs + 1, sizeof(*a->cs));
	struct container *c = &a->cs[a->ncs];
	memset(c, 0, sizeof(*c));
	snprintf(c->id, sizeof(c->id), "%s", id);
	if (a->socket)
		resolve(a, c);
	hmap_insert(&a->index, h, (uint32_t)a->ncs);
	return &a->cs[a->ncs++];
}

/* The first n bytes (at most) of a /proc file; 0 on any failure. A
 * process with a larger environment still gets what its first 64 KiB say. */
static size_t read_prefix(const char *path, char *out, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t len = 0;
	while (len < n) {
		ssize_t r = read(fd, out + len, n - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	return len;
}

static const char *base_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

bool attrib_python_script(const char *cmdline, size_t len, char *out, size_t n)
{
	/* Copied so that every argument ends in a NUL, whatever was read. */
	char buf[4096];
	len = MIN(len, sizeof(buf) - 1);
	memcpy(buf, cmdline, len);
	buf[len] = '\0';
	const char *args[64];
	size_t na = 0;
	for (size_t i = 0; i < len && na < ARRAY_SIZE(args); i += strlen(buf + i) + 1)
		args[na++] = buf + i;
	if (na == 0 || strncmp(base_of(args[0]), "python", 6) != 0 || n == 0)
		return false;
	for (size_t i = 1; i < na; i++) {
		const char *a = args[i];
		if (a[0] != '-' || strcmp(a, "-") == 0) {
			snprintf(out, n, "%s", a[0] == '-' ? "-" : base_of(a));
			return out[0] != '\0';
		}
		if (strcmp(a, "--") == 0)
			continue;
		/* Options: letters that take no value may be grouped (-uB);
		 * -c and -m end the options, -W and -X take a value (joined or
		 * the next argument). */
		for (const char *o = a + 1; *o; o++) {
			if (*o == 'c') {
				snprintf(out, n, "-c");
				return true;
			}
			if (*o == 'm') {
				const char *mod = o[1] ? o + 1 : i + 1 < na ? args[i + 1] : "";
				snprintf(out, n, "%s", mod);
				return out[0] != '\0';
			}
			if (*o == 'W' || *o == 'X') {
				if (!o[1])
					i++;
				break;
			}
			if (*o == '-')
				break; /* --long-option */
		}
	}
	return false;
}

void attrib_read(struct attrib *a, int pid, struct proc_attrs *out)
{
	out->n = 0;
	char path[96];
	char *text = xmalloc(64 << 10);
	struct cgroup_info cg = { 0 };
	snprintf(path, sizeof(path), "%s/%d/cgroup", a->proc_root, pid);
	attrib_parse_cgroup(text, read_prefix(path, text, 16 << 10), &cg);
	struct env_info env = { 0 };
	snprintf(path, sizeof(path), "%s/%d/environ", a->proc_root, pid);
	attrib_parse_environ(text, read_prefix(path, text, 64 << 10), a->job_tag_var, &env);
	free(text);
	const struct container *c = cg.container_id[0] ? container(a, cg.container_id) : NULL;
	if (c) {
		put(out, "container.id", c->id);
		put(out, "container.name", c->name);
	}
	const char *pod = c && c->pod ? c->pod : env.k8s && c ? env.hostname : NULL;
	if (pod) {
		put(out, "k8s.pod.name", pod);
		char dep[VALUE_MAX + 1];
		if (attrib_k8s_deployment(pod, dep, sizeof(dep)))
			put(out, "k8s.deployment.name", dep);
	}
	if (c) {
		put(out, "k8s.namespace.name", c->ns);
		put(out, "k8s.container.name", c->cname);
	}
	put(out, "k8s.pod.uid", cg.pod_uid);
	put(out, "slurm.job.id", env.slurm_job_id[0] ? env.slurm_job_id : cg.slurm_job);
	put(out, "slurm.job.name", env.slurm_job_name);
	put(out, "slurm.job.user", env.slurm_job_user);
	put(out, "job.tag", env.job_tag);
	char cmdline[4096], script[VALUE_MAX + 1];
	snprintf(path, sizeof(path), "%s/%d/cmdline", a->proc_root, pid);
	size_t cl = read_prefix(path, cmdline, sizeof(cmdline));
	if (attrib_python_script(cmdline, cl, script, sizeof(script)))
		put(out, "script.name", script);
}
