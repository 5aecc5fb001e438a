/* kubelet.c - see kubelet.h. */
#include "kubelet.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define REFRESH_NS (30ull * 1000000000ull)   /* a list older than this is read again */
#define MISS_GAP_NS (5ull * 1000000000ull)   /* reads for unknown uids: at most this often */
#define FAIL_GAP_NS (30ull * 1000000000ull)  /* after a failed read */
#define CONNECT_TIMEOUT_MS 3000L
#define TIMEOUT_MS 10000L
#define TOKEN_MAX (16u << 10)
#define MISSED_SLOTS 64
#define SA_CA_FILE "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

/* --- the pod list ------------------------------------------------------------------ */

bool kubelet_label_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > KUBELET_LABEL_NAME_MAX)
		return false;
	const char *slash = memchr(name, '/', len);
	const char *n = slash ? slash + 1 : name;
	size_t nl = len - (size_t)(n - name);
	if (slash && (slash == name || (size_t)(slash - name) > 253 ||
		      memchr(n, '/', nl)))
		return false;
	if (nl == 0 || nl > 63 || !isalnum((unsigned char)n[0]) || !isalnum((unsigned char)n[nl - 1]))
		return false;
	for (size_t i = 0; i < nl; i++)
		if (!isalnum((unsigned char)n[i]) && n[i] != '-' && n[i] != '_' && n[i] != '.')
			return false;
	for (const char *p = name; slash && p < slash; p++)
		if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-' || *p == '.'))
			return false;
	return true;
}

/* A copy of s cut to max bytes with control characters replaced, or NULL
 * when s is not a non-empty string. */
static char *clean(const json_t *v, size_t max)
{
	const char *s = json_string_value(v);
	if (!s || !*s)
		return NULL;
	size_t n = 0, len = MIN(strlen(s), max);
	char *out = xmalloc(len + 1);
	for (const unsigned char *c = (const unsigned char *)s; n < len; c++)
		out[n++] = *c >= 0x20 && *c != 0x7f ? (char)*c : '?';
	out[n] = '\0';
	return out;
}

static void pod_free(struct kube_pod *p)
{
	free(p->name);
	free(p->ns);
	for (size_t i = 0; i < KUBELET_MAX_LABELS; i++)
		free(p->values[i]);
}

static int cmp_pod(const void *a, const void *b)
{
	return strcmp(((const struct kube_pod *)a)->uid, ((const struct kube_pod *)b)->uid);
}

int kubelet_parse_pods(const char *body, size_t len, const char *const *labels, size_t nlabels,
		       struct kube_pods *out, struct buf *err)
{
	memset(out, 0, sizeof(*out));
	if (nlabels > KUBELET_MAX_LABELS)
		nlabels = KUBELET_MAX_LABELS;
	if (len > KUBELET_MAX_BODY) {
		buf_printf(err, "pod list of %zu bytes, more than %u", len, KUBELET_MAX_BODY);
		return -1;
	}
	json_error_t jerr;
	json_t *doc = json_loadb(body ? body : "", len, 0, &jerr);
	if (!doc) {
		buf_printf(err, "pod list is not JSON: line %d: %.120s", jerr.line, jerr.text);
		return -1;
	}
	json_t *items = json_object_get(doc, "items");
	if (!json_is_array(items)) {
		buf_puts(err, "pod list has no \"items\" array");
		json_decref(doc);
		return -1;
	}
	size_t count = json_array_size(items);
	if (count > KUBELET_MAX_PODS) {
		out->truncated = true;
		count = KUBELET_MAX_PODS;
	}
	out->pods = xcalloc(count ? count : 1, sizeof(*out->pods));
	for (size_t i = 0; i < count; i++) {
		json_t *meta = json_object_get(json_array_get(items, i), "metadata");
		const char *uid = json_string_value(json_object_get(meta, "uid"));
		if (!uid || !uuid_valid(uid))
			continue;
		struct kube_pod *p = &out->pods[out->n];
		for (size_t k = 0; k < 36; k++)
			p->uid[k] = (char)tolower((unsigned char)uid[k]);
		p->uid[36] = '\0';
		p->name = clean(json_object_get(meta, "name"), KUBELET_VALUE_MAX);
		p->ns = clean(json_object_get(meta, "namespace"), KUBELET_VALUE_MAX);
		json_t *lab = json_object_get(meta, "labels");
		for (size_t k = 0; k < nlabels && json_is_object(lab); k++)
			p->values[k] = clean(json_object_get(lab, labels[k]), KUBELET_VALUE_MAX);
		out->n++;
	}
	json_decref(doc);
	xqsort(out->pods, out->n, sizeof(*out->pods), cmp_pod);
	/* The same uid twice: the first (in uid order, stable enough) wins. */
	size_t w = 0;
	for (size_t r = 0; r < out->n; r++) {
		if (w && strcmp(out->pods[w - 1].uid, out->pods[r].uid) == 0) {
			pod_free(&out->pods[r]);
			continue;
		}
		out->pods[w++] = out->pods[r];
	}
	out->n = w;
	return 0;
}

const struct kube_pod *kube_pods_find(const struct kube_pods *p, const char *uid)
{
	size_t lo = 0, hi = p->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(p->pods[mid].uid, uid);
		if (c == 0)
			return &p->pods[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

void kube_pods_free(struct kube_pods *p)
{
	for (size_t i = 0; i < p->n; i++)
		pod_free(&p->pods[i]);
	free(p->pods);
	memset(p, 0, sizeof(*p));
}

/* --- the thread --------------------------------------------------------------------- */

struct kubelet {
	char *url; /* <base>/pods */
	char *token_file;
	bool insecure;
	char *labels[KUBELET_MAX_LABELS];
	char *keys[KUBELET_MAX_LABELS]; /* "k8s.pod.label[NAME]" */
	size_t nlabels;
	pthread_t thread;
	bool started;
	/* Everything below is shared by the thread and the main loop, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t cond; /* want or stop changed */
	bool want, stop;
	struct kube_pods pods;
	uint64_t tried_ns;   /* when the latest read ended; 0 = none yet */
	uint64_t next_ns;    /* no read before this */
	struct kubelet_stats stats;
	/* The last uids a lookup missed (round robin): each asks for one
	 * early read only. */
	char missed[MISSED_SLOTS][37];
	size_t next_missed;
};

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct buf *b = ud;
	if (b->len + size * n > KUBELET_MAX_BODY)
		return 0; /* aborts the transfer */
	buf_append(b, p, size * n);
	return size * n;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	struct kubelet *k = ud;
	return __atomic_load_n(&k->stop, __ATOMIC_RELAXED) ? 1 : 0; /* non-zero aborts */
}

/* The bearer token, or NULL when the file is absent or empty. */
static char *read_token(const char *path)
{
	char *data = NULL;
	size_t len = 0;
	if (!*path || read_file(path, TOKEN_MAX, &data, &len) < 0)
		return NULL;
	while (len && isspace((unsigned char)data[len - 1]))
		data[--len] = '\0';
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)data[i] <= 0x20 || data[i] == 0x7f) {
			log_warn("-kubelet-token-file %s: not a token (control characters or spaces); sending none",
				 path);
			len = 0;
			break;
		}
	if (!len) {
		free(data);
		return NULL;
	}
	return data;
}

/* Reads and parses the pod list; 0, or -1 with the reason in err. */
static int fetch(struct kubelet *k, struct kube_pods *out, struct buf *err)
{
	CURL *h = curl_easy_init();
	if (!h) {
		buf_puts(err, "cannot create a libcurl handle");
		return -1;
	}
	struct buf body = { 0 }, auth = { 0 };
	struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/json");
	char *token = read_token(k->token_file);
	if (token) {
		buf_printf(&auth, "Authorization: Bearer %s", token);
		hdrs = curl_slist_append(hdrs, auth.data);
		free(token);
	}
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_URL, k->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, k);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "ember-agent");
	if (access(SA_CA_FILE, R_OK) == 0)
		curl_easy_setopt(h, CURLOPT_CAINFO, SA_CA_FILE);
	if (k->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	if (rc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdrs);
	buf_free(&auth);
	int ret = -1;
	if (rc == CURLE_WRITE_ERROR) {
		buf_printf(err, "GET %s: the answer is larger than %u bytes", k->url, KUBELET_MAX_BODY);
	} else if (rc != CURLE_OK) {
		buf_printf(err, "GET %s: %s%s", k->url, errbuf[0] ? errbuf : curl_easy_strerror(rc),
			   rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE
				   ? " (the kubelet's certificate is often self-signed: -kubelet-insecure, or the read-only port -kubelet-url=http://127.0.0.1:10255)"
				   : "");
	} else if (status != 200) {
		buf_printf(err, "GET %s: status %ld%s", k->url, status,
			   status == 401 || status == 403
				   ? " (the agent's service account needs get on nodes/proxy, and -kubelet-token-file its token)"
				   : "");
	} else {
		struct buf perr = { 0 };
		ret = kubelet_parse_pods(body.data, body.len, (const char *const *)k->labels, k->nlabels,
					 out, &perr);
		if (ret < 0)
			buf_printf(err, "GET %s: %s", k->url, perr.data);
		buf_free(&perr);
	}
	buf_free(&body);
	return ret;
}

static void *run(void *arg)
{
	struct kubelet *k = arg;
	pthread_mutex_lock(&k->mu);
	while (!k->stop) {
		if (!k->want) {
			pthread_cond_wait(&k->cond, &k->mu);
			continue;
		}
		uint64_t now = now_mono_ns();
		if (now < k->next_ns) {
			uint64_t at = k->next_ns;
			struct timespec ts = { .tv_sec = (time_t)(at / 1000000000ull),
					       .tv_nsec = (long)(at % 1000000000ull) };
			pthread_cond_timedwait(&k->cond, &k->mu, &ts);
			continue;
		}
		k->want = false;
		pthread_mutex_unlock(&k->mu);

		struct kube_pods fresh;
		struct buf err = { 0 };
		int rc = fetch(k, &fresh, &err);
		if (rc < 0 && !__atomic_load_n(&k->stop, __ATOMIC_RELAXED))
			log_warn("kubelet pod list (-k8s-pod-labels): %s; next try in 30 s at the earliest", err.data);
		else if (rc == 0 && fresh.truncated)
			log_warn("kubelet pod list: more than %d pods; the rest have no labels",
				 KUBELET_MAX_PODS);
		buf_free(&err);
		struct kube_pods old = { 0 };

		pthread_mutex_lock(&k->mu);
		now = now_mono_ns();
		k->tried_ns = now;
		if (rc == 0) {
			old = k->pods;
			k->pods = fresh;
			k->next_ns = now + MISS_GAP_NS;
			k->stats.fetches++;
			k->stats.pods = fresh.n;
			log_debug("kubelet pod list: %zu pods", fresh.n);
		} else {
			k->next_ns = now + FAIL_GAP_NS;
			k->stats.errors++;
		}
		pthread_mutex_unlock(&k->mu);
		kube_pods_free(&old);
		pthread_mutex_lock(&k->mu);
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

struct kubelet *kubelet_start(const struct kubelet_opts *o)
{
	struct kubelet *k = xcalloc(1, sizeof(*k));
	size_t ul = strlen(o->url);
	while (ul && o->url[ul - 1] == '/')
		ul--;
	struct buf url = { 0 };
	buf_printf(&url, "%.*s/pods", (int)ul, o->url);
	k->url = buf_steal(&url, NULL);
	k->token_file = xstrdup(o->token_file ? o->token_file : "");
	k->insecure = o->insecure;
	for (size_t i = 0; i < o->nlabels && i < KUBELET_MAX_LABELS; i++) {
		k->labels[i] = xstrdup(o->labels[i]);
		struct buf key = { 0 };
		buf_printf(&key, "k8s.pod.label[%s]", o->labels[i]);
		k->keys[i] = buf_steal(&key, NULL);
		k->nlabels++;
	}
	pthread_mutex_init(&k->mu, NULL);
	cond_init_monotonic(&k->cond);
	k->want = true; /* the first list at once */
	int rc = pthread_create(&k->thread, NULL, run, k);
	if (rc != 0) {
		log_error("cannot start the kubelet thread: %s", strerror(rc));
		kubelet_stop(k);
		return NULL;
	}
	k->started = true;
	pthread_setname_np(k->thread, "ember-kubelet");
	struct buf names = { 0 };
	for (size_t i = 0; i < k->nlabels; i++)
		buf_printf(&names, "%s%s", i ? "," : "", k->labels[i]);
	log_info("Kubernetes pod labels %s from %s", names.data ? names.data : "", k->url);
	buf_free(&names);
	return k;
}

void kubelet_stop(struct kubelet *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->mu);
	__atomic_store_n(&k->stop, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&k->cond);
	pthread_mutex_unlock(&k->mu);
	if (k->started)
		pthread_join(k->thread, NULL);
	kube_pods_free(&k->pods);
	pthread_cond_destroy(&k->cond);
	pthread_mutex_destroy(&k->mu);
	for (size_t i = 0; i < k->nlabels; i++) {
		free(k->labels[i]);
		free(k->keys[i]);
	}
	free(k->url);
	free(k->token_file);
	free(k);
}

/* Asks the thread for a new list (mu held). */
static void ask(struct kubelet *k)
{
	if (!k->want) {
		k->want = true;
		pthread_cond_signal(&k->cond);
	}
}

bool kubelet_pod_attributes(struct kubelet *k, const char *uid, uint64_t now_ns,
			    kubelet_attr_fn fn, void *ctx)
{
	char key[37];
	size_t n = strlen(uid);
	if (n != 36)
		return false;
	for (size_t i = 0; i < 36; i++)
		key[i] = (char)tolower((unsigned char)uid[i]);
	key[36] = '\0';
	pthread_mutex_lock(&k->mu);
	if (k->tried_ns && now_ns - k->tried_ns >= REFRESH_NS)
		ask(k); /* the list is old, or the last read failed */
	const struct kube_pod *p = kube_pods_find(&k->pods, key);
	if (p) {
		for (size_t i = 0; i < k->nlabels; i++)
			if (p->values[i])
				fn(ctx, k->keys[i], p->values[i]);
		if (p->name)
			fn(ctx, "k8s.pod.name", p->name);
		if (p->ns)
			fn(ctx, "k8s.namespace.name", p->ns);
	} else {
		/* One early read per unknown uid; one still missing after
		 * it waits for the periodic refresh. */
		size_t i = 0;
		while (i < MISSED_SLOTS && strcmp(k->missed[i], key) != 0)
			i++;
		if (i == MISSED_SLOTS) {
			memcpy(k->missed[k->next_missed++ % MISSED_SLOTS], key, sizeof(key));
			ask(k);
		}
	}
	pthread_mutex_unlock(&k->mu);
	return p != NULL;
}

/* Passes on what the process's own attributes lack. */
struct proc_pod {
	const struct proc_attrs *attrs;
	kubelet_attr_fn fn;
	void *ctx;
};

static void add_missing(void *ctx, const char *key, const char *value)
{
	struct proc_pod *pp = ctx;
	for (size_t i = 0; i < pp->attrs->n; i++)
		if (strcmp(pp->attrs->key[i], key) == 0)
			return;
	pp->fn(pp->ctx, key, value);
	char dep[KUBELET_VALUE_MAX + 1];
	if (strcmp(key, "k8s.pod.name") == 0 && attrib_k8s_deployment(value, dep, sizeof(dep)))
		add_missing(ctx, "k8s.deployment.name", dep);
}

bool kubelet_process_attributes(struct kubelet *k, const struct proc_attrs *attrs,
				uint64_t now_ns, kubelet_attr_fn fn, void *ctx)
{
	if (!k)
		return true;
	for (size_t i = 0; i < attrs->n; i++)
		if (strcmp(attrs->key[i], "k8s.pod.uid") == 0) {
			struct proc_pod pp = { attrs, fn, ctx };
			return kubelet_pod_attributes(k, attrs->value[i], now_ns, add_missing, &pp);
		}
	return true;
}

void kubelet_get_stats(struct kubelet *k, struct kubelet_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!k)
		return;
	pthread_mutex_lock(&k->mu);
	*out = k->stats;
	pthread_mutex_unlock(&k->mu);
}
