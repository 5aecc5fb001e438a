/* query.c - `ember flamegraph`, `ember top` and `ember projects`: the
 * server's answers as text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* The flamegraph request body for o's filter and grouping (owned by the
 * caller). */
static char *flamegraph_body(const struct cli_opts *o)
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
	return body;
}

static json_t *flamegraph(const struct cli_opts *o)
{
	char *body = flamegraph_body(o);
	if (!body)
		return NULL;
	struct buf path = { 0 };
	buf_printf(&path, "/public/api/v1/project/%s/flamegraph/json", o->project);
	json_t *doc = cli_request_json(o, "POST", path.data, body);
	free(body);
	buf_free(&path);
	return doc;
}

static void print_tree(json_t *n, double total, int depth, const struct cli_opts *o)
{
	double t = (double)json_integer_value(json_object_get(n, "total"));
	if (total > 0 && 100.0 * t / total < o->min_percent)
		return;
	const char *name = json_string_value(json_object_get(n, "name"));
	const char *type = json_string_value(json_object_get(n, "frame_type"));
	const char *bin = json_string_value(json_object_get(n, "binary"));
	const char *file = json_string_value(json_object_get(n, "file"));
	json_int_t line = json_integer_value(json_object_get(n, "line"));
	printf("%6.2f%% %8lld  %*s%s", total > 0 ? 100.0 * t / total : 0.0, (long long)t, 2 * depth,
	       "", name ? name : "?");
	if (bin && *bin && type && strcmp(type, "synthetic") != 0)
		printf("  [%s]", bin);
	if (file) {
		const char *base = strrchr(file, '/');
		printf("  %s:%lld", base ? base + 1 : file, (long long)line);
	}
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
		recursive |= path[i] && name && strcmp(path[i], name) == 0;
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

static int cmp_node_total(const void *a, const void *b)
{
	json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "total"));
	json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "total"));
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The functions under node by self time, at most limit of them, as
 * percentages of total. */
static void print_top(json_t *node, double total, size_t limit)
{
	struct fn *fns = NULL;
	size_t nf = 0, cap = 0;
	const char **path = xcalloc(4097, sizeof(char *));
	collect(node, &fns, &nf, &cap, path, 0);
	if (nf)
		qsort(fns, nf, sizeof(*fns), cmp_self);
	printf("%8s %8s %8s  %s\n", "self%", "total%", "self", "function");
	for (size_t k = 0; k < nf && k < limit; k++)
		printf("%7.2f%% %7.2f%% %8lld  %s%s%s%s\n",
		       total > 0 ? 100.0 * (double)fns[k].self / total : 0.0,
		       total > 0 ? 100.0 * (double)fns[k].total / total : 0.0, fns[k].self,
		       fns[k].name, fns[k].binary ? "  [" : "", fns[k].binary ? fns[k].binary : "",
		       fns[k].binary ? "]" : "");
	free_all(fns, path);
}

int cmd_flamegraph(const struct cli_opts *o, bool top)
{
	json_t *doc = flamegraph(o);
	if (!doc)
		return 1;
	json_t *root = json_object_get(doc, "root");
	double total = (double)json_integer_value(json_object_get(doc, "total"));
	double hz = (double)json_integer_value(json_object_get(doc, "sample_rate_hz"));
	printf("%.0f samples at %.0f Hz over %llds: %.2f cores on average\n", total, hz,
	       (long long)(o->since_ms / 1000),
	       hz > 0 ? total / hz / ((double)o->since_ms / 1000.0) : 0.0);
	json_int_t pending = json_integer_value(json_object_get(doc, "symbols_pending"));
	if (pending > 0)
		fprintf(stderr, "ember: the names of %lld frame%s are on their way (symbols being "
				"uploaded or fetched): ask again in a few seconds\n",
			(long long)pending, pending == 1 ? "" : "s");
	if (!top) {
		print_tree(root, total, 0, o);
	} else if (!o->group_by) {
		print_top(root, total, 30);
	} else {
		/* --group-by: the groups (the synthetic frames under the root),
		 * largest first, each with its own top functions. */
		json_t *children = json_object_get(root, "children");
		size_t ng = json_array_size(children);
		json_t **groups = xcalloc(ng ? ng : 1, sizeof(*groups));
		for (size_t i = 0; i < ng; i++)
			groups[i] = json_array_get(children, i);
		if (ng)
			qsort(groups, ng, sizeof(*groups), cmp_node_total);
		size_t shown = 0;
		for (size_t i = 0; i < ng; i++) {
			json_t *g = groups[i];
			const char *type = json_string_value(json_object_get(g, "frame_type"));
			if (!type || strcmp(type, "synthetic") != 0)
				continue; /* not a group: no such attribute */
			if (shown++ == 20) {
				printf("\n(%zu more groups)\n", ng - i);
				break;
			}
			double gt = (double)json_integer_value(json_object_get(g, "total"));
			const char *name = json_string_value(json_object_get(g, "name"));
			printf("\n%s %s: %.2f%% %.0f\n", o->group_by, name ? name : "?",
			       total > 0 ? 100.0 * gt / total : 0.0, gt);
			print_top(g, total, 10);
		}
		free(groups);
	}
	json_decref(doc);
	return 0;
}

int cmd_flamegraph_export(const struct cli_opts *o)
{
	static const char *const formats[] = { "json", "pprof", "folded", "speedscope" };
	const char *format = o->format ? o->format : "json";
	bool known = false;
	for (size_t i = 0; i < ARRAY_SIZE(formats); i++)
		known |= strcmp(format, formats[i]) == 0;
	if (!known) {
		fprintf(stderr, "ember: --format: expected json, pprof, folded or speedscope, got \"%s\"\n",
			format);
		return 2;
	}
	const char *file = o->output ? o->output : "-";
	bool to_stdout = strcmp(file, "-") == 0;
	if (to_stdout && strcmp(format, "pprof") == 0 && isatty(STDOUT_FILENO)) {
		fputs("ember: --format pprof is gzipped protobuf: name a file with -o FILE\n", stderr);
		return 2;
	}
	char *body = flamegraph_body(o);
	if (!body) {
		fputs("ember: out of memory\n", stderr);
		return 1;
	}
	struct buf path = { 0 }, resp = { 0 };
	buf_printf(&path, "/public/api/v1/project/%s/flamegraph/%s", o->project, format);
	int rc = cli_request(o, "POST", path.data, "application/json", NULL, body, strlen(body), &resp);
	free(body);
	buf_free(&path);
	if (rc < 0) {
		buf_free(&resp);
		return 1;
	}
	FILE *f = to_stdout ? stdout : fopen(file, "wb");
	if (!f) {
		fprintf(stderr, "ember: -o %s: %s\n", file, strerror(errno));
		buf_free(&resp);
		return 1;
	}
	bool ok = (resp.len == 0 || fwrite(resp.data, 1, resp.len, f) == resp.len);
	ok &= to_stdout ? fflush(f) == 0 : fclose(f) == 0;
	if (!ok) {
		fprintf(stderr, "ember: writing %s failed: %s\n", to_stdout ? "the output" : file,
			strerror(errno));
		buf_free(&resp);
		return 1;
	}
	if (!to_stdout)
		fprintf(stderr, "ember: wrote %zu bytes of %s to %s\n", resp.len, format, file);
	buf_free(&resp);
	return 0;
}

int cmd_projects(const struct cli_opts *o)
{
	json_t *doc = cli_request_json(o, "GET", "/public/api/v1/projects", NULL);
	if (!doc)
		return 1;
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(doc, "projects"), i, p)
	printf("%s  %s\n", json_string_value(json_object_get(p, "id")),
	       json_string_value(json_object_get(p, "name")));
	json_decref(doc);
	return 0;
}
