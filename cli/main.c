/* main.c - ember, the command-line tool: queries an ember-server.
 *
 *   ember flamegraph [--endpoint URL] [--project-id ID] [--query CEL]
 *                    [--since DURATION] [--group-by LEVEL] [--depth N] [--min-percent P]
 *   ember top        (same flags)  functions by self time
 *   ember projects   [--endpoint URL]
 *   ember version
 *
 * The endpoint defaults to $EMBER_ENDPOINT or http://127.0.0.1:8080. Symbol
 * upload and administration commands come with their own features. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "util.h"

#define EMBER_VERSION "0.1.0"
#define DEFAULT_PROJECT "00000000-0000-0000-0000-000000000000"
#define MAX_RESPONSE (256u << 20)

struct opts {
	const char *endpoint;
	const char *project;
	const char *query;
	const char *group_by;
	int64_t since_ms;
	long depth;
	double min_percent;
};

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	struct buf *b = ud;
	if (b->len + size * n > MAX_RESPONSE)
		return 0;
	buf_append(b, p, size * n);
	return size * n;
}

/* Returns the parsed JSON answer or NULL after printing why. */
static json_t *request(const struct opts *o, const char *method, const char *path,
		       const char *body)
{
	CURL *c = curl_easy_init();
	if (!c) {
		fprintf(stderr, "ember: cannot initialise libcurl\n");
		return NULL;
	}
	struct buf url = { 0 }, resp = { 0 };
	buf_printf(&url, "%s%s", o->endpoint, path);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	curl_easy_setopt(c, CURLOPT_URL, url.data);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	json_t *doc = NULL;
	if (rc != CURLE_OK) {
		fprintf(stderr, "ember: %s: %s\n", url.data, curl_easy_strerror(rc));
	} else {
		json_error_t je;
		doc = json_loadb(resp.data ? resp.data : "", resp.len, 0, &je);
		if (status != 200) {
			json_t *e = doc ? json_object_get(doc, "error") : NULL;
			fprintf(stderr, "ember: the server answered %ld: %s\n", status,
				json_is_string(e) ? json_string_value(e) : (resp.data ? resp.data : ""));
			json_decref(doc);
			doc = NULL;
		} else if (!doc) {
			fprintf(stderr, "ember: the answer is not JSON: %s\n", je.text);
		}
	}
	buf_free(&url);
	buf_free(&resp);
	return doc;
}

static json_t *flamegraph(const struct opts *o)
{
	int64_t now = now_unix_ms();
	json_t *filter = json_pack("{s:I, s:I, s:s, s:{s:[]}}", "start_ts", (json_int_t)(now - o->since_ms),
				   "end_ts", (json_int_t)(now + 1), "event_kind", "on_cpu", "frame_mask",
				   "patterns");
	json_object_set_new(filter, "query", o->query ? json_string(o->query) : json_null());
	json_t *syn = json_array();
	if (o->group_by)
		json_array_append_new(syn, json_string(o->group_by));
	json_t *req = json_pack("{s:o, s:o}", "filter", filter, "synthetic_frames", syn);
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	struct buf path = { 0 };
	buf_printf(&path, "/public/api/v1/project/%s/flamegraph/json", o->project);
	json_t *doc = request(o, "POST", path.data, body);
	free(body);
	buf_free(&path);
	return doc;
}

static void print_tree(json_t *n, double total, int depth, const struct opts *o)
{
	double t = (double)json_integer_value(json_object_get(n, "total"));
	if (total > 0 && 100.0 * t / total < o->min_percent)
		return;
	const char *name = json_string_value(json_object_get(n, "name"));
	const char *type = json_string_value(json_object_get(n, "frame_type"));
	const char *bin = json_string_value(json_object_get(n, "binary"));
	printf("%6.2f%% %8lld  %*s%s", total > 0 ? 100.0 * t / total : 0.0, (long long)t, 2 * depth,
	       "", name ? name : "?");
	if (bin && *bin && type && strcmp(type, "synthetic") != 0)
		printf("  [%s]", bin);
	putchar('\n');
	if (depth >= o->depth)
		return;
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(n, "children"), i, c)
	print_tree(c, total, depth + 1, o);
}

struct fn {
	const char *name, *binary;
	long long self, total;
};

/* Accumulates self time per function, and total once per stack path. */
static void collect(json_t *n, struct fn **fns, size_t *nf, size_t *cap, const char **path,
		    int depth)
{
	const char *name = json_string_value(json_object_get(n, "name"));
	const char *type = json_string_value(json_object_get(n, "frame_type"));
	long long self = json_integer_value(json_object_get(n, "self"));
	long long total = json_integer_value(json_object_get(n, "total"));
	bool real = type && strcmp(type, "root") != 0 && strcmp(type, "synthetic") != 0;
	bool recursive = false;
	for (int i = 0; i < depth && real; i++)
		recursive |= path[i] == name || (path[i] && name && strcmp(path[i], name) == 0);
	if (real) {
		size_t k;
		for (k = 0; k < *nf && strcmp((*fns)[k].name, name) != 0; k++)
			;
		if (k == *nf) {
			xgrow((void **)fns, cap, *nf + 1, sizeof(**fns));
			(*fns)[k] = (struct fn){ name, json_string_value(json_object_get(n, "binary")), 0, 0 };
			(*nf)++;
		}
		(*fns)[k].self += self;
		if (!recursive)
			(*fns)[k].total += total;
	}
	if (depth >= 4096)
		return;
	path[depth] = real ? name : NULL;
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(n, "children"), i, c)
	collect(c, fns, nf, cap, path, depth + 1);
}

static int cmp_self(const void *a, const void *b)
{
	const struct fn *x = a, *y = b;
	return x->self < y->self ? 1 : x->self > y->self ? -1 : strcmp(x->name, y->name);
}

static int usage(void)
{
	fputs("usage: ember flamegraph|top|projects|version [flags]\n"
	      "  --endpoint URL      ember-server (default $EMBER_ENDPOINT or http://127.0.0.1:8080)\n"
	      "  --project-id ID     project UUID (default the default project)\n"
	      "  --query CEL         filter, e.g. 'process.executable.name == \"python3\"'\n"
	      "  --since DURATION    time range ending now (default 15m)\n"
	      "  --group-by LEVEL    executable, host, thread, process, container, deployment\n"
	      "  --depth N           flamegraph: levels to print (default 12)\n"
	      "  --min-percent P     flamegraph: hide frames below P%% of the total (default 1)\n",
	      stderr);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	const char *cmd = argv[1];
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
		printf("ember %s\n", EMBER_VERSION);
		return 0;
	}
	const char *env = getenv("EMBER_ENDPOINT");
	struct opts o = { env && *env ? env : "http://127.0.0.1:8080", DEFAULT_PROJECT, NULL, NULL,
			  15 * 60000, 12, 1.0 };
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (a[0] == '-' && a[1] == '-')
			a++;
		if (!v) {
			fprintf(stderr, "ember: %s: missing value\n", argv[i]);
			return 2;
		}
		if (strcmp(a, "-endpoint") == 0 || strcmp(a, "-e") == 0)
			o.endpoint = v;
		else if (strcmp(a, "-project-id") == 0 || strcmp(a, "-p") == 0)
			o.project = v;
		else if (strcmp(a, "-query") == 0)
			o.query = v;
		else if (strcmp(a, "-group-by") == 0)
			o.group_by = v;
		else if (strcmp(a, "-since") == 0) {
			if (parse_duration_ms(v, &o.since_ms) < 0 || o.since_ms <= 0) {
				fprintf(stderr, "ember: --since: expected a duration such as 15m, got \"%s\"\n", v);
				return 2;
			}
		} else if (strcmp(a, "-depth") == 0) {
			o.depth = strtol(v, NULL, 10);
		} else if (strcmp(a, "-min-percent") == 0) {
			o.min_percent = strtod(v, NULL);
		} else {
			fprintf(stderr, "ember: unknown flag %s\n", argv[i]);
			return usage();
		}
		i++;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = 1;
	if (strcmp(cmd, "projects") == 0) {
		json_t *doc = request(&o, "GET", "/public/api/v1/projects", NULL);
		size_t i;
		json_t *p;
		json_array_foreach(json_object_get(doc, "projects"), i, p)
		printf("%s  %s\n", json_string_value(json_object_get(p, "id")),
		       json_string_value(json_object_get(p, "name")));
		rc = doc ? 0 : 1;
		json_decref(doc);
	} else if (strcmp(cmd, "flamegraph") == 0 || strcmp(cmd, "top") == 0) {
		json_t *doc = flamegraph(&o);
		if (doc) {
			json_t *root = json_object_get(doc, "root");
			double total = (double)json_integer_value(json_object_get(doc, "total"));
			double hz = (double)json_integer_value(json_object_get(doc, "sample_rate_hz"));
			printf("%.0f samples at %.0f Hz over %llds: %.2f cores on average\n", total, hz,
			       (long long)(o.since_ms / 1000),
			       hz > 0 ? total / hz / ((double)o.since_ms / 1000.0) : 0.0);
			if (strcmp(cmd, "flamegraph") == 0) {
				print_tree(root, total, 0, &o);
			} else {
				struct fn *fns = NULL;
				size_t nf = 0, cap = 0;
				const char **path = xcalloc(4097, sizeof(char *));
				collect(root, &fns, &nf, &cap, path, 0);
				if (nf)
					qsort(fns, nf, sizeof(*fns), cmp_self);
				printf("%8s %8s %8s  %s\n", "self%", "total%", "self", "function");
				for (size_t k = 0; k < nf && k < 30; k++)
					printf("%7.2f%% %7.2f%% %8lld  %s%s%s%s\n",
					       total > 0 ? 100.0 * fns[k].self / total : 0.0,
					       total > 0 ? 100.0 * fns[k].total / total : 0.0, fns[k].self,
					       fns[k].name, fns[k].binary ? "  [" : "",
					       fns[k].binary ? fns[k].binary : "", fns[k].binary ? "]" : "");
				free(fns);
				free(path);
			}
			rc = 0;
			json_decref(doc);
		}
	} else {
		rc = usage();
	}
	curl_global_cleanup();
	return rc;
}
