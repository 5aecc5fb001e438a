/* mcp_tools.c - the MCP tools and resources (contract in mcp.h; the
 * catalogue for users in docs/mcp.md).
 *
 * Each tool reads its arguments (every refusal names the argument),
 * resolves the project and checks project:read in it, builds the REST
 * API's request body (docs/api.md), runs the query function the REST
 * handler runs, and answers with a compact text for the assistant's
 * context (bounded by max_chars) and the same data as structuredContent,
 * which its outputSchema describes.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/query/entities.h"
#include "server/query/events.h"
#include "server/query/flamegraph.h"
#include "server/query/functions.h"
#include "http.h"
#include "mcp.h"
#include "server/metrics/metrics.h"
#include "server/store/projects.h"
#include "server.h"
#include "server/auth/authz.h"
#include "util.h"

#define MAX_FILTER 4096
#define MAX_RANGE_MS (400LL * 86400000)
#define FG_MCP_MAX_NODES 20000

/* What the arguments of a tool share. */
enum {
	ARG_SCOPE = 1 << 0, /* project, filter, range, start, end */
	ARG_KIND = 1 << 1,  /* event_kind */
	ARG_CHARS = 1 << 2, /* max_chars */
};

struct call {
	struct server *srv;
	const struct principal *who;
	json_t *args; /* borrowed; an object */
	struct buf err;
	char project[37];
	char project_name[160];
	int64_t start_ms, end_ms;
	const char *filter; /* NULL: none */
	const char *kind;   /* event_kind */
	size_t max_chars;
	struct buf text;
	json_t *out; /* structuredContent */
};

static int fail(struct call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct call *c, const char *fmt, ...)
{
	buf_reset(&c->err);
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&c->err, fmt, ap);
	va_end(ap);
	return -1;
}

/* --- arguments -------------------------------------------------------- */

static int arg_str(struct call *c, const char *name, size_t max, const char *def,
		   const char **out)
{
	json_t *v = json_object_get(c->args, name);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_string(v))
		return fail(c, "%s: expected a string", name);
	if (json_string_length(v) > max)
		return fail(c, "%s: %zu bytes, at most %zu", name, json_string_length(v), max);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return fail(c, "%s: holds a NUL character", name);
	*out = json_string_value(v);
	return 0;
}

static int arg_uint(struct call *c, const char *name, uint64_t min, uint64_t max, uint64_t def,
		    uint64_t *out)
{
	json_t *v = json_object_get(c->args, name);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min ||
	    (uint64_t)json_integer_value(v) > max)
		return fail(c, "%s: expected an integer from %llu to %llu", name,
			    (unsigned long long)min, (unsigned long long)max);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int arg_num(struct call *c, const char *name, double min, double max, double def,
		   double *out)
{
	json_t *v = json_object_get(c->args, name);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_number(v) || !(json_number_value(v) >= min && json_number_value(v) <= max))
		return fail(c, "%s: expected a number from %g to %g", name, min, max);
	*out = json_number_value(v);
	return 0;
}

static int arg_enum(struct call *c, const char *name, const char *const *choices,
		    const char *def, const char **out)
{
	const char *s;
	if (arg_str(c, name, 64, def, &s) < 0)
		return -1;
	for (size_t i = 0; choices[i]; i++)
		if (s && strcmp(s, choices[i]) == 0) {
			*out = choices[i];
			return 0;
		}
	struct buf all = { 0 };
	for (size_t i = 0; choices[i]; i++)
		buf_printf(&all, "%s%s", i ? ", " : "", choices[i]);
	fail(c, "%s: expected one of %s, not \"%.64s\"", name, all.data, s ? s : "");
	buf_free(&all);
	return -1;
}

/* Unix ms, or an RFC 3339 time ("2026-12-06T06:00:00Z", offsets allowed). */
static int arg_time(struct call *c, const char *name, int64_t *out, bool *given)
{
	json_t *v = json_object_get(c->args, name);
	*given = v && !json_is_null(v);
	if (!*given)
		return 0;
	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0 || json_integer_value(v) > 32503680000000LL)
			return fail(c, "%s: Unix milliseconds out of range", name);
		*out = json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v) || json_string_length(v) > 40)
		return fail(c, "%s: expected Unix milliseconds or an RFC 3339 time "
			       "(2026-01-02T15:04:05Z)", name);
	const char *s = json_string_value(v);
	struct tm tm = { 0 };
	const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		p = strptime(s, "%Y-%m-%d %H:%M:%S", &tm);
	if (!p)
		return fail(c, "%s: \"%s\" is not an RFC 3339 time (2026-01-02T15:04:05Z)", name, s);
	int64_t ms = 0;
	if (*p == '.') {
		int64_t scale = 100;
		for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
			ms += (*p - '0') * scale;
	}
	int64_t off_s = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if ((*p == '+' || *p == '-') && p[1] >= '0' && p[1] <= '9' && p[2] >= '0' &&
		   p[2] <= '9' && p[3] == ':' && p[4] >= '0' && p[4] <= '9' && p[5] >= '0' &&
		   p[5] <= '9') {
		off_s = ((p[1] - '0') * 10 + (p[2] - '0')) * 3600 + ((p[4] - '0') * 10 + (p[5] - '0')) * 60;
		if (*p == '-')
			off_s = -off_s;
		p += 6;
	} else {
		return fail(c, "%s: \"%s\" needs a time zone (Z or +hh:mm)", name, s);
	}
	if (*p)
		return fail(c, "%s: \"%s\" is not an RFC 3339 time", name, s);
	time_t t = timegm(&tm);
	if (t < 0 || t > 32503680000)
		return fail(c, "%s: \"%s\" is before 1970 or after 2999", name, s);
	*out = ((int64_t)t - off_s) * 1000 + ms;
	return 0;
}

static void fmt_time(int64_t ms, char out[32])
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The window from range/start/end: end defaults to now (or start +
 * range), start to end - range; range to 1h. */
static int time_args(struct call *c, const char *range_name, const char *start_name,
		     const char *end_name, int64_t *start, int64_t *end)
{
	const char *range;
	if (arg_str(c, range_name, 32, "1h", &range) < 0)
		return -1;
	int64_t range_ms;
	if (parse_duration_ms(range, &range_ms) < 0 || range_ms <= 0 || range_ms > MAX_RANGE_MS)
		return fail(c, "%s: expected a duration such as \"15m\", \"1h\", \"7d\" (up to 400d), "
			       "not \"%s\"", range_name, range);
	bool has_start, has_end;
	if (arg_time(c, start_name, start, &has_start) < 0 ||
	    arg_time(c, end_name, end, &has_end) < 0)
		return -1;
	if (!has_end)
		*end = has_start ? *start + range_ms : now_unix_ms();
	if (!has_start)
		*start = *end - range_ms;
	if (*start >= *end)
		return fail(c, "%s: must be before %s", start_name, end_name);
	if (*end - *start > MAX_RANGE_MS)
		return fail(c, "%s, %s: at most 400 days apart", start_name, end_name);
	return 0;
}

static bool may_read(const char *id, void *who)
{
	return principal_can(who, "project:read", id);
}

static int project_arg(struct call *c)
{
	const char *p;
	if (arg_str(c, "project", 128, DEFAULT_PROJECT_NAME, &p) < 0)
		return -1;
	if (uuid_valid(p) && projects_exists(c->srv->projects, p)) {
		snprintf(c->project, sizeof(c->project), "%s", p);
		for (char *q = c->project; *q; q++)
			if (*q >= 'A' && *q <= 'F')
				*q = (char)(*q - 'A' + 'a');
	} else {
		struct buf err = { 0 };
		int rc = projects_by_name(c->srv->projects, p, false, c->project, &err);
		buf_free(&err);
		if (rc != PROJECTS_FOUND)
			return fail(c, "project: no project is named \"%s\" or has that id; "
				       "list_projects lists the projects you may read", p);
	}
	if (!principal_can(c->who, "project:read", c->project))
		return fail(c, "project: this credential may not read project \"%s\" (it lacks "
			       "project:read there); list_projects lists the projects it may read", p);
	snprintf(c->project_name, sizeof(c->project_name), "%s", p);
	return 0;
}

static const char *const event_kinds[] = { "on_cpu", "off_cpu", "cuda", "alloc", NULL };

static int common_args(struct call *c, unsigned common, const char *kind)
{
	c->kind = kind;
	c->max_chars = MCP_DEFAULT_CHARS;
	if (common & ARG_SCOPE) {
		if (project_arg(c) < 0 || arg_str(c, "filter", MAX_FILTER, NULL, &c->filter) < 0 ||
		    time_args(c, "range", "start", "end", &c->start_ms, &c->end_ms) < 0)
			return -1;
		if (c->filter && !*c->filter)
			c->filter = NULL;
	}
	if ((common & ARG_KIND) && arg_enum(c, "event_kind", event_kinds, kind, &c->kind) < 0)
		return -1;
	if (common & ARG_CHARS) {
		uint64_t n;
		if (arg_uint(c, "max_chars", 500, MCP_MAX_CHARS, MCP_DEFAULT_CHARS, &n) < 0)
			return -1;
		c->max_chars = (size_t)n;
	}
	return 0;
}

/* --- queries ---------------------------------------------------------- */

static json_t *filter_json(struct call *c, int64_t start, int64_t end, const char *filter)
{
	return json_pack("{s:I, s:I, s:s, s:s?}", "start_ts", (json_int_t)start, "end_ts",
			 (json_int_t)end, "event_kind", c->kind, "query", filter);
}

enum query { Q_FLAMEGRAPH, Q_TOP, Q_SANDWICH, Q_DIFF, Q_ENTITIES, Q_TIMESERIES, Q_EVENTS,
	     Q_METRICS, Q_METRIC_NAMES };

/* The REST API's names of arguments in its messages, and the tools'. */
static void rename_fields(struct buf *msg)
{
	static const char *const map[][2] = {
		{ "baseline.query", "baseline_filter" }, { "comparison.query", "filter" },
		{ "filter.query", "filter" },            { "filter.frame_mask", "frame_mask" },
	};
	if (!msg->data)
		return;
	for (size_t i = 0; i < ARRAY_SIZE(map); i++) {
		size_t n = strlen(map[i][0]);
		if (strncmp(msg->data, map[i][0], n) == 0) {
			struct buf b = { 0 };
			buf_printf(&b, "%s%s", map[i][1], msg->data + n);
			buf_free(msg);
			*msg = b;
			return;
		}
	}
}

/* Runs one REST query with body (stolen): its answer, or NULL with c->err. */
static json_t *query(struct call *c, enum query what, json_t *body)
{
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text) {
		fail(c, "cannot encode the query");
		return NULL;
	}
	size_t len = strlen(text);
	struct server *srv = c->srv;
	struct symbols *sym = symbols_for_query(srv->symbols, c->project);
	struct buf out = { 0 }, err = { 0 };
	int rc = -1;
	switch (what) {
	case Q_FLAMEGRAPH: {
		struct fg_request r;
		if ((rc = fg_request_parse(&r, text, len, &err)) < 0)
			break;
		memcpy(r.scope.project_id, c->project, 37);
		rc = flamegraph_query(srv->store, sym, srv->fetcher, &r, &out, &err);
		fg_request_free(&r);
		if (rc == 0)
			__atomic_add_fetch(&srv->counters.flamegraph_queries, 1, __ATOMIC_RELAXED);
		break;
	}
	case Q_TOP:
	case Q_SANDWICH:
	case Q_DIFF: {
		struct fn_request r;
		enum fn_query q = what == Q_TOP ? FN_TOP : what == Q_SANDWICH ? FN_SANDWICH : FN_DIFF;
		if ((rc = fn_request_parse(&r, q, text, len, &err)) < 0)
			break;
		fn_request_set_project(&r, c->project);
		rc = functions_query(srv->store, sym, srv->fetcher, &r, &out, &err);
		fn_request_free(&r);
		break;
	}
	case Q_ENTITIES:
	case Q_TIMESERIES: {
		struct ent_request r;
		if ((rc = ent_request_parse(&r, what == Q_ENTITIES ? ENT_TOP : ENT_TIMESERIES, text,
					    len, &err)) < 0)
			break;
		memcpy(r.scope.project_id, c->project, 37);
		rc = entities_query(srv->store, &r, &out, &err);
		ent_request_free(&r);
		break;
	}
	case Q_EVENTS: {
		struct ev_request r;
		if ((rc = ev_request_parse(&r, text, len, &err)) < 0)
			break;
		memcpy(r.scope.project_id, c->project, 37);
		rc = events_query(srv->store, sym, &r, &out, &err);
		ev_request_free(&r);
		break;
	}
	case Q_METRICS:
		rc = metrics_query(srv->metrics, c->project, text, len, &out, &err) ? -1 : 0;
		break;
	case Q_METRIC_NAMES:
		rc = metrics_names(srv->metrics, c->project, text, len, &out, &err) ? -1 : 0;
		break;
	}
	free(text);
	json_t *ans = NULL;
	if (rc < 0) {
		rename_fields(&err);
		fail(c, "%s", err.data ? err.data : "the query failed");
	} else {
		__atomic_add_fetch(&srv->counters.queries, 1, __ATOMIC_RELAXED);
		json_error_t jerr;
		ans = json_loadb(out.data ? out.data : "", out.len, 0, &jerr);
		if (!ans)
			fail(c, "the query's answer is not JSON: %s", jerr.text);
		else
			json_object_del(ans, "query_stats");
	}
	buf_free(&out);
	buf_free(&err);
	return ans;
}

/* The structured answer's common part, and the text's first line. */
static void begin(struct call *c, const char *what)
{
	char a[32], b[32];
	fmt_time(c->start_ms, a);
	fmt_time(c->end_ms, b);
	c->out = json_pack("{s:s, s:s, s:I, s:I, s:s, s:s?}", "project", c->project,
			   "project_name", c->project_name, "start_ts", (json_int_t)c->start_ms,
			   "end_ts", (json_int_t)c->end_ms, "event_kind", c->kind, "filter", c->filter);
	buf_printf(&c->text, "%s of project %s, %s to %s, %s", what, c->project_name, a, b, c->kind);
	if (c->filter)
		buf_printf(&c->text, ", filter %s", c->filter);
	buf_puts(&c->text, "\n");
}

static double num(json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

/* Appends a line unless the text would pass max_chars; false then. */
static bool line(struct call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool line(struct call *c, const char *fmt, ...)
{
	struct buf l = { 0 };
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&l, fmt, ap);
	va_end(ap);
	bool ok = c->text.len + l.len + 1 <= c->max_chars;
	/* One line is one line: a name from outside cannot start another. */
	if (l.data)
		str_make_printable(l.data, l.len);
	if (ok) {
		buf_append(&c->text, l.data, l.len);
		buf_putc(&c->text, '\n');
	}
	buf_free(&l);
	return ok;
}

/* --- trees (flamegraph, sandwich) -------------------------------------- */

struct tree {
	struct call *c;
	json_t *nodes;
	double total;
	double min_pct;
	unsigned max_depth;
	size_t shown, hidden;
	bool truncated;
	bool no_self; /* a callers tree: a caller's "self" would mean "called from nowhere" */
};

static void tree_add(struct tree *t, json_t *node, unsigned depth)
{
	double tot = num(node, "total"), self = num(node, "self");
	double tp = t->total > 0 ? tot * 100 / t->total : 0;
	double sp = t->total > 0 ? self * 100 / t->total : 0;
	json_t *n = json_pack("{s:i, s:s, s:s, s:f, s:f, s:f, s:f}", "depth", (int)depth, "name",
			      str(node, "name"), "frame_type", str(node, "frame_type"), "self", self,
			      "total", tot, "self_percent", round(sp * 100) / 100, "total_percent",
			      round(tp * 100) / 100);
	const char *bin = str(node, "binary");
	if (*bin)
		json_object_set_new(n, "binary", json_string(bin));
	json_t *file = json_object_get(node, "file");
	if (json_is_string(file)) {
		json_object_set(n, "file", file);
		json_t *ln = json_object_get(node, "line");
		if (json_is_integer(ln))
			json_object_set(n, "line", ln);
	}
	json_array_append_new(t->nodes, n);
	t->shown++;
}

#define TREE_CHAIN 64

/* One line of the text: node and the chain of single callees below it
 * that hold all its time ("a > b > c"), so deep stacks do not spend the
 * depth and the characters on frames that only pass the time on. depth is
 * the node's depth in the tree (structuredContent), level its line's. */
static void tree_node(struct tree *t, json_t *node, unsigned depth, unsigned level)
{
	json_t *chain[TREE_CHAIN];
	size_t n = 0;
	chain[n++] = node;
	for (json_t *cur = node; n < TREE_CHAIN;) {
		json_t *kids = json_object_get(cur, "children");
		json_t *only = json_array_size(kids) == 1 ? json_array_get(kids, 0) : NULL;
		if (!only || num(only, "total") != num(cur, "total"))
			break;
		chain[n++] = cur = only;
	}
	json_t *last = chain[n - 1];
	double tp = t->total > 0 ? num(last, "total") * 100 / t->total : 0;
	double sp = t->total > 0 ? num(last, "self") * 100 / t->total : 0;
	struct buf names = { 0 };
	for (size_t i = 0; i < n; i++)
		buf_printf(&names, "%s%s", i ? " > " : "", str(chain[i], "name"));
	const char *bin = str(last, "binary");
	char self_text[32] = "";
	if (!t->no_self)
		snprintf(self_text, sizeof(self_text), " (self %.1f%%)", sp);
	bool ok = !t->truncated && line(t->c, "%*s%.1f%%%s %s%s%s%s", (int)level, "", tp, self_text,
					names.data, *bin ? " [" : "", bin, *bin ? "]" : "");
	buf_free(&names);
	if (!ok) {
		t->truncated = true;
		t->hidden++;
		return;
	}
	for (size_t i = 0; i < n; i++)
		tree_add(t, chain[i], depth + (unsigned)i);
	size_t i;
	json_t *k;
	json_array_foreach(json_object_get(last, "children"), i, k) {
		double kt = num(k, "total");
		if (t->total <= 0 || kt * 100 / t->total < t->min_pct)
			continue;
		if (level + 1 > t->max_depth) {
			t->hidden++;
			continue;
		}
		tree_node(t, k, depth + (unsigned)n, level + 1);
	}
}

/* Renders root's subtree: nodes of at least min_pct of total. */
static json_t *tree_render(struct call *c, json_t *root, double total, double min_pct,
			   unsigned max_depth, bool no_self, bool *truncated)
{
	struct tree t = { c, json_array(), total, min_pct, max_depth, 0, 0, false, no_self };
	tree_node(&t, root, 0, 0);
	if (t.truncated || t.hidden) {
		*truncated = true;
		buf_printf(&c->text, "... %zu more nodes left out (max_chars, max_depth); raise "
				     "min_percent or narrow the filter to see deeper\n", t.hidden);
	}
	return t.nodes;
}

static int tree_args(struct call *c, double *min_pct, uint64_t *max_depth)
{
	if (arg_num(c, "min_percent", 0, 100, 1.0, min_pct) < 0 ||
	    arg_uint(c, "max_depth", 1, 200, 40, max_depth) < 0)
		return -1;
	return 0;
}

/* --- the tools ---------------------------------------------------------- */

static int t_list_projects(struct call *c)
{
	struct buf b = { 0 };
	struct jsonw w;
	jsonw_init(&w, &b);
	projects_list_json(c->srv->projects, may_read, (void *)c->who, &w);
	(void)jsonw_finish(&w); /* an array of flat objects: no misuse is possible */
	json_t *list = json_loadb(b.data ? b.data : "[]", b.len ? b.len : 2, 0, NULL);
	buf_free(&b);
	if (!list)
		return fail(c, "cannot list the projects");
	c->out = json_pack("{s:o}", "projects", list);
	size_t i;
	json_t *p;
	line(c, "%zu project(s) this credential may read (id, name):", json_array_size(list));
	json_array_foreach(list, i, p) line(c, "%s %s", str(p, "id"), str(p, "name"));
	return 0;
}

static const char *entity_name(const char *e)
{
	static const char *const plural[][2] = {
		{ "hosts", "host" },           { "processes", "process" },
		{ "containers", "container" }, { "pods", "pod" },
		{ "deployments", "deployment" }, { "executables", "executable" },
		{ "namespaces", "namespace" }, { "threads", "thread" },
		{ "clusters", "cluster" },     { "scripts", "script" },
		{ "shared_objects", "shared_object" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(plural); i++)
		if (strcmp(e, plural[i][0]) == 0)
			return plural[i][1];
	return e;
}

static const char *const cpu_modes[] = { "relative", "absolute", NULL };

static int t_top_entities(struct call *c)
{
	const char *entity, *mode;
	uint64_t limit;
	if (arg_str(c, "entity", 256, "executable", &entity) < 0 ||
	    arg_uint(c, "limit", 1, 200, 10, &limit) < 0 ||
	    arg_enum(c, "cpu_mode", cpu_modes, "relative", &mode) < 0)
		return -1;
	entity = entity_name(entity);
	json_t *ans = query(c, Q_ENTITIES,
			    json_pack("{s:o, s:s, s:I, s:s}", "filter",
				      filter_json(c, c->start_ms, c->end_ms, c->filter), "entity",
				      entity, "limit", (json_int_t)limit, "cpu_mode", mode));
	if (!ans)
		return -1;
	begin(c, "Top entities");
	json_object_update_missing(c->out, ans);
	json_object_set_new(c->out, "entity", json_string(entity));
	const char *unit = str(ans, "unit");
	line(c, "by %s (%s; percent %s, cores = busy on average): percent, cores, total, name",
	     entity, unit, str(ans, "cpu_mode"));
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(ans, "entities"), i, e)
		if (!line(c, "%.2f%% %.3f %.0f %s", num(e, "percent"), num(e, "cores"), num(e, "total"),
			  str(e, "name")))
			break;
	json_decref(ans);
	return 0;
}

static const char *const sorts[] = { "self", "total", NULL };

static int functions_tool(struct call *c, bool gpu)
{
	const char *sort, *search, *mode = "relative";
	uint64_t limit;
	if (arg_enum(c, "sort", sorts, "self", &sort) < 0 ||
	    arg_uint(c, "limit", 1, 500, 20, &limit) < 0 || arg_str(c, "search", 1024, NULL, &search) < 0 ||
	    (!gpu && arg_enum(c, "cpu_mode", cpu_modes, "relative", &mode) < 0))
		return -1;
	json_t *body = json_pack("{s:o, s:s, s:I, s:s, s:s?}", "filter",
				 filter_json(c, c->start_ms, c->end_ms, c->filter), "sort", sort,
				 "limit", (json_int_t)limit, "cpu_mode", mode, "search", search);
	if (gpu)
		json_object_set_new(body, "frame_types",
				    json_pack("[s,s,s,s]", "cuda_kernel", "cuda_memcpy", "cuda_memset",
					      "cuda_sync"));
	json_t *ans = query(c, Q_TOP, body);
	if (!ans)
		return -1;
	begin(c, gpu ? "Top GPU kernels" : "Top functions");
	json_object_update_missing(c->out, ans);
	json_t *fns = json_object_get(ans, "functions");
	if (json_array_size(fns) == 0)
		line(c, gpu ? "No GPU work (event_kind cuda) in this range and filter: the agent "
			      "records it for CUDA processes that load libembercuda.so "
			      "(docs/internals/gpu-agent.md)"
			    : "No samples in this range and filter.");
	else
		line(c, "unit %s, %s = %s busy on average; sorted by %s: self%%, total%%, self %s, "
			"name [binary] file",
		     str(ans, "unit"), str(ans, "cores_unit"), str(ans, "cores_unit"), sort,
		     str(ans, "cores_unit"));
	size_t i;
	json_t *f;
	json_array_foreach(fns, i, f) {
		const char *bin = str(f, "binary"), *file = str(f, "file");
		if (!line(c, "%.2f%% %.2f%% %.3f %s%s%s%s%s%s", num(f, "self_percent"),
			  num(f, "total_percent"), num(f, "self_cores"), str(f, "name"),
			  *bin ? " [" : "", bin, *bin ? "]" : "", *file ? " " : "", file)) {
			line(c, "... more functions left out by max_chars");
			break;
		}
	}
	json_decref(ans);
	return 0;
}

static int t_top_functions(struct call *c)
{
	return functions_tool(c, false);
}

static int t_gpu_kernels(struct call *c)
{
	c->kind = "cuda";
	return functions_tool(c, true);
}

static int flamegraph_tool(struct call *c)
{
	double min_pct;
	uint64_t max_depth;
	const char *search;
	if (tree_args(c, &min_pct, &max_depth) < 0 || arg_str(c, "search", 1024, NULL, &search) < 0)
		return -1;
	json_t *body = json_pack("{s:o, s:i, s:s?}", "filter",
				 filter_json(c, c->start_ms, c->end_ms, c->filter), "max_nodes",
				 FG_MCP_MAX_NODES, "search", search);
	json_t *group = json_object_get(c->args, "group_by");
	if (group && !json_is_null(group)) {
		if (!json_is_array(group) || json_array_size(group) > FG_MAX_SYNTHETIC) {
			json_decref(body);
			return fail(c, "group_by: expected a list of at most %d levels (host, executable, "
				       "container, pod, ...)", FG_MAX_SYNTHETIC);
		}
		json_object_set(body, "synthetic_frames", group);
	}
	json_t *ans = query(c, Q_FLAMEGRAPH, body);
	if (!ans)
		return -1;
	begin(c, "Flamegraph");
	json_t *root = json_object_get(ans, "root");
	double total = num(ans, "total");
	json_object_set_new(c->out, "unit", json_string(str(ans, "unit")));
	json_object_set_new(c->out, "total", json_real(total));
	json_object_set_new(c->out, "min_percent", json_real(min_pct));
	if (json_object_get(ans, "sample_rate_hz"))
		json_object_set(c->out, "sample_rate_hz", json_object_get(ans, "sample_rate_hz"));
	if (total <= 0) {
		line(c, "No samples in this range and filter.");
		json_object_set_new(c->out, "nodes", json_array());
		json_object_set_new(c->out, "truncated", json_false());
		json_decref(ans);
		return 0;
	}
	line(c, "total %.0f %s; nodes with at least %.2g%% of it, indented by depth: total%% "
		"(self%%) name [binary]; \"a > b\": a passes all its time to b, the numbers are b's",
	     total, str(ans, "unit"), min_pct);
	bool truncated = false;
	json_t *nodes = tree_render(c, root, total, min_pct, (unsigned)max_depth, false, &truncated);
	json_object_set_new(c->out, "nodes", nodes);
	json_object_set_new(c->out, "truncated", json_boolean(truncated));
	json_decref(ans);
	return 0;
}

static int t_flamegraph(struct call *c)
{
	return flamegraph_tool(c);
}

static int t_gpu_flamegraph(struct call *c)
{
	c->kind = "cuda";
	return flamegraph_tool(c);
}

static int t_sandwich(struct call *c)
{
	const char *fn, *bin;
	double min_pct;
	uint64_t max_depth;
	if (arg_str(c, "function", 4096, NULL, &fn) < 0 || arg_str(c, "binary", 4096, NULL, &bin) < 0 ||
	    tree_args(c, &min_pct, &max_depth) < 0)
		return -1;
	if (!fn)
		return fail(c, "function: required (a name as top_functions lists it)");
	json_t *ans = query(c, Q_SANDWICH,
			    json_pack("{s:o, s:s, s:s?, s:i}", "filter",
				      filter_json(c, c->start_ms, c->end_ms, c->filter), "function", fn,
				      "binary", bin, "max_nodes", 4000));
	if (!ans)
		return -1;
	begin(c, "Sandwich");
	json_t *f = json_object_get(ans, "function");
	json_object_set(c->out, "function", f ? f : json_null());
	json_object_set_new(c->out, "unit", json_string(str(ans, "unit")));
	double total = num(f, "total");
	if (total <= 0) {
		line(c, "Function \"%s\" has no samples in this range and filter; top_functions lists "
			"the names", fn);
		json_object_set_new(c->out, "callers", json_array());
		json_object_set_new(c->out, "callees", json_array());
		json_object_set_new(c->out, "truncated", json_false());
		json_decref(ans);
		return 0;
	}
	line(c, "%s: self %.2f%%, total %.2f%% of all; trees below: %% of this function's total",
	     fn, num(f, "self_percent"), num(f, "total_percent"));
	bool truncated = false;
	line(c, "Callers (the function at depth 0, each caller below what it calls; total%% only):");
	json_object_set_new(c->out, "callers",
			    tree_render(c, json_object_get(ans, "callers"), total, min_pct,
					(unsigned)max_depth, true, &truncated));
	line(c, "Callees (what it calls):");
	json_object_set_new(c->out, "callees",
			    tree_render(c, json_object_get(ans, "callees"), total, min_pct,
					(unsigned)max_depth, false, &truncated));
	json_object_set_new(c->out, "truncated", json_boolean(truncated));
	json_decref(ans);
	return 0;
}

static int t_diff(struct call *c)
{
	const char *bfilter, *sort;
	uint64_t limit;
	int64_t bs, be;
	bool has_bs, has_be;
	if (arg_str(c, "baseline_filter", MAX_FILTER, c->filter, &bfilter) < 0 ||
	    arg_enum(c, "sort", sorts, "self", &sort) < 0 ||
	    arg_uint(c, "limit", 1, 500, 20, &limit) < 0 ||
	    arg_time(c, "baseline_start", &bs, &has_bs) < 0 ||
	    arg_time(c, "baseline_end", &be, &has_be) < 0)
		return -1;
	if (bfilter && !*bfilter)
		bfilter = NULL;
	/* The baseline: the window just before the comparison, as long. */
	int64_t len = c->end_ms - c->start_ms;
	if (!has_be)
		be = has_bs ? bs + len : c->start_ms;
	if (!has_bs)
		bs = be - len;
	if (bs >= be)
		return fail(c, "baseline_start: must be before baseline_end");
	json_t *ans = query(c, Q_DIFF,
			    json_pack("{s:o, s:o, s:s, s:I}", "baseline", filter_json(c, bs, be, bfilter),
				      "comparison", filter_json(c, c->start_ms, c->end_ms, c->filter),
				      "sort", sort, "limit", (json_int_t)limit));
	if (!ans)
		return -1;
	begin(c, "Diff (comparison = start..end)");
	json_object_update_missing(c->out, ans);
	json_object_set_new(c->out, "baseline_start_ts", json_integer(bs));
	json_object_set_new(c->out, "baseline_end_ts", json_integer(be));
	char a[32], b[32];
	fmt_time(bs, a);
	fmt_time(be, b);
	line(c, "baseline %s to %s%s%s; change in %s (comparison - baseline), largest first:", a, b,
	     bfilter ? ", filter " : "", bfilter ? bfilter : "", str(ans, "cores_unit"));
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(ans, "functions"), i, f) {
		json_t *pct = json_object_get(f, "self_change_percent");
		char p[32] = "new";
		if (json_is_number(pct))
			snprintf(p, sizeof(p), "%+.1f%%", json_number_value(pct));
		if (!line(c, "%+.4f self (%s), %+.4f total %s [%s] %s", num(f, "self_cores_change"), p,
			  num(f, "total_cores_change"), str(f, "name"), str(f, "status"), str(f, "binary"))) {
			line(c, "... more functions left out by max_chars");
			break;
		}
	}
	json_decref(ans);
	return 0;
}

static int t_timeseries(struct call *c)
{
	const char *group;
	uint64_t buckets, limit;
	if (arg_str(c, "group_by", 256, NULL, &group) < 0 ||
	    arg_uint(c, "num_buckets", 2, 240, 30, &buckets) < 0 ||
	    arg_uint(c, "limit", 1, 50, 5, &limit) < 0)
		return -1;
	json_t *ans = query(c, Q_TIMESERIES,
			    json_pack("{s:o, s:s?, s:I, s:I}", "filter",
				      filter_json(c, c->start_ms, c->end_ms, c->filter), "group_by",
				      group ? entity_name(group) : NULL, "num_buckets",
				      (json_int_t)buckets, "limit", (json_int_t)limit));
	if (!ans)
		return -1;
	begin(c, "Time series");
	json_object_update_missing(c->out, ans);
	line(c, "%s per bucket of %.0f s from the start, per series (name, total in %s):",
	     str(ans, "unit"), num(ans, "bucket_ms") / 1000, str(ans, "value_unit"));
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(ans, "series"), i, s) {
		struct buf vals = { 0 };
		size_t j;
		json_t *v;
		json_array_foreach(json_object_get(s, "values"), j, v)
			buf_printf(&vals, "%s%.3g", j ? " " : "", json_number_value(v));
		bool ok = line(c, "%s (total %.0f): %s", str(s, "name"), num(s, "total"),
			       vals.data ? vals.data : "");
		buf_free(&vals);
		if (!ok)
			break;
	}
	json_decref(ans);
	return 0;
}

static int t_events(struct call *c)
{
	uint64_t limit, frames;
	if (arg_uint(c, "limit", 1, 100, 10, &limit) < 0 ||
	    arg_uint(c, "max_frames", 1, 200, 20, &frames) < 0)
		return -1;
	json_t *ans = query(c, Q_EVENTS,
			    json_pack("{s:o, s:I}", "filter",
				      filter_json(c, c->start_ms, c->end_ms, c->filter), "limit",
				      (json_int_t)limit));
	if (!ans)
		return -1;
	begin(c, "Events");
	json_t *events = json_object_get(ans, "events");
	/* Stacks keep their innermost max_frames frames. */
	size_t i;
	json_t *e;
	json_array_foreach(events, i, e) {
		json_t *stack = json_object_get(e, "stack");
		size_t n = json_array_size(stack);
		if (n > frames) {
			json_t *cut = json_array();
			for (size_t j = n - frames; j < n; j++)
				json_array_append(cut, json_array_get(stack, j));
			json_object_set_new(e, "stack", cut);
			json_object_set_new(e, "frames_left_out", json_integer((json_int_t)(n - frames)));
		}
	}
	json_object_update_missing(c->out, ans);
	line(c, "%zu event(s), newest first (unit %s); stacks innermost frame first:",
	     json_array_size(events), str(ans, "unit"));
	json_array_foreach(events, i, e) {
		char t[32];
		fmt_time((int64_t)num(e, "ts"), t);
		struct buf l = { 0 };
		const char *k;
		json_t *v;
		json_object_foreach(json_object_get(e, "labels"), k, v)
			if (json_is_string(v))
				buf_printf(&l, " %s=%s", k, json_string_value(v));
		bool ok = line(c, "%s value %.0f%s", t, num(e, "value"), l.data ? l.data : "");
		buf_free(&l);
		json_t *stack = json_object_get(e, "stack");
		for (size_t j = json_array_size(stack); ok && j-- > 0;)
			ok = line(c, "  %s", str(json_array_get(stack, j), "name"));
		if (!ok) {
			line(c, "... more left out by max_chars");
			break;
		}
	}
	json_decref(ans);
	return 0;
}

static int t_gpu_metrics(struct call *c)
{
	const char *metric, *group;
	uint64_t buckets;
	if (arg_str(c, "metric", 256, NULL, &metric) < 0 ||
	    arg_str(c, "group_by", 256, "gpu.index", &group) < 0 ||
	    arg_uint(c, "num_buckets", 1, 240, 30, &buckets) < 0)
		return -1;
	if (metric && strncmp(metric, "hw.gpu.", 7) != 0)
		return fail(c, "metric: \"%s\" is not a GPU metric (hw.gpu.*); call gpu_metrics without "
			       "metric for the list", metric);
	json_t *f = filter_json(c, c->start_ms, c->end_ms, c->filter);
	json_object_del(f, "event_kind");
	if (!metric) {
		json_t *ans = query(c, Q_METRIC_NAMES, json_pack("{s:o}", "filter", f));
		if (!ans)
			return -1;
		begin(c, "GPU metrics");
		json_t *list = json_array();
		size_t i;
		json_t *m;
		json_array_foreach(json_object_get(ans, "names"), i, m)
			if (strncmp(str(m, "name"), "hw.gpu.", 7) == 0)
				json_array_append(list, m);
		json_object_set_new(c->out, "metrics", list);
		if (json_array_size(list) == 0)
			line(c, "No GPU metrics in this range and filter (the agent collects them through "
				"NVML on hosts with NVIDIA GPUs).");
		else
			line(c, "GPU metrics with data (name, unit, series); pass one as metric:");
		json_array_foreach(list, i, m)
			if (!line(c, "%s %s %.0f", str(m, "name"), str(m, "unit"), num(m, "series")))
				break;
		json_decref(ans);
		return 0;
	}
	json_t *ans = query(c, Q_METRICS,
			    json_pack("{s:o, s:s, s:s, s:I}", "filter", f, "metric", metric,
				      "group_by", group, "num_buckets", (json_int_t)buckets));
	if (!ans)
		return -1;
	begin(c, "GPU metric");
	json_object_set_new(c->out, "metric", json_string(metric));
	json_object_set_new(c->out, "unit", json_string(str(ans, "unit")));
	json_t *series = json_array();
	line(c, "%s (%s) by %s: min, avg, max, last over %zu buckets", metric, str(ans, "unit"),
	     group, (size_t)buckets);
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(ans, "series"), i, s) {
		double mn = INFINITY, mx = -INFINITY, sum = 0, last = 0;
		size_t n = 0, j;
		json_t *p;
		json_array_foreach(json_object_get(s, "points"), j, p) {
			double v = json_number_value(json_array_get(p, 1));
			mn = fmin(mn, v);
			mx = fmax(mx, v);
			sum += v;
			last = v;
			n++;
		}
		if (n == 0)
			continue;
		json_array_append_new(series, json_pack("{s:s, s:f, s:f, s:f, s:f, s:O}", "group",
							str(s, "group"), "min", mn, "avg", sum / (double)n,
							"max", mx, "last", last, "points",
							json_object_get(s, "points")));
		line(c, "%s=%s: %.3g %.3g %.3g %.3g", group, str(s, "group"), mn, sum / (double)n, mx,
		     last);
	}
	json_object_set_new(c->out, "series", series);
	json_decref(ans);
	return 0;
}

/* --- the catalogue ------------------------------------------------------ */

#define S_SCOPE_OUT                                                                       \
	"\"project\":{\"type\":\"string\"},\"project_name\":{\"type\":\"string\"},"       \
	"\"start_ts\":{\"type\":\"integer\"},\"end_ts\":{\"type\":\"integer\"},"           \
	"\"event_kind\":{\"type\":\"string\"},\"filter\":{\"type\":[\"string\",\"null\"]}"
#define S_REQ_SCOPE "\"project\",\"start_ts\",\"end_ts\""
#define S_TREE_NODES                                                                       \
	"{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"depth\",\"name\","  \
	"\"self\",\"total\",\"self_percent\",\"total_percent\"],\"properties\":{\"depth\":"   \
	"{\"type\":\"integer\",\"minimum\":0},\"name\":{\"type\":\"string\"},\"frame_type\":"  \
	"{\"type\":\"string\"},\"binary\":{\"type\":\"string\"},\"file\":{\"type\":\"string\"}," \
	"\"line\":{\"type\":\"integer\"},\"self\":{\"type\":\"number\"},\"total\":{\"type\":"   \
	"\"number\"},\"self_percent\":{\"type\":\"number\"},\"total_percent\":{\"type\":"     \
	"\"number\"}}}}"
#define S_FUNCTIONS                                                                          \
	"{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"name\",\"self\","  \
	"\"total\",\"self_percent\",\"total_percent\",\"self_cores\",\"total_cores\"],"       \
	"\"properties\":{\"name\":{\"type\":\"string\"},\"frame_type\":{\"type\":\"string\"},"  \
	"\"self\":{\"type\":\"number\"},\"total\":{\"type\":\"number\"},\"self_percent\":"     \
	"{\"type\":\"number\"},\"total_percent\":{\"type\":\"number\"},\"self_cores\":"        \
	"{\"type\":\"number\"},\"total_cores\":{\"type\":\"number\"}}}}"

#define P_TREE                                                                            \
	"\"min_percent\":{\"type\":\"number\",\"minimum\":0,\"maximum\":100,\"default\":1,"   \
	"\"description\":\"leave out nodes below this share of the total\"},"                 \
	"\"max_depth\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":200,\"default\":40,"  \
	"\"description\":\"levels of the text tree (a chain a > b > c is one)\"}"
#define P_SEARCH                                                                          \
	"\"search\":{\"type\":\"string\",\"description\":\"PCRE2 regular expression over "    \
	"function names\"}"
#define P_LIMIT(def, max)                                                                 \
	"\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":" #max ",\"default\":" #def "}"
#define P_SORT "\"sort\":{\"type\":\"string\",\"enum\":[\"self\",\"total\"],\"default\":\"self\"}"
#define P_CPU_MODE                                                                        \
	"\"cpu_mode\":{\"type\":\"string\",\"enum\":[\"relative\",\"absolute\"],\"default\":"  \
	"\"relative\",\"description\":\"relative: share of all samples; absolute: share of "   \
	"the hosts' CPUs\"}"

struct tool {
	const char *name, *title, *description;
	unsigned common;
	const char *kind;      /* the default event_kind */
	const char *props;     /* the tool's own properties, JSON without braces */
	const char *required;  /* JSON array */
	const char *output;    /* JSON Schema of structuredContent */
	int (*run)(struct call *c);
};

static const struct tool tools[] = {
	{ "list_projects", "List projects",
	  "The projects this credential may read, with their ids and names. Start here: every "
	  "other tool takes project (a name or an id; default \"default\").",
	  0, "on_cpu", "", "[]",
	  "{\"type\":\"object\",\"required\":[\"projects\"],\"properties\":{\"projects\":{\"type\":"
	  "\"array\",\"items\":{\"type\":\"object\",\"required\":[\"id\",\"name\"],\"properties\":"
	  "{\"id\":{\"type\":\"string\"},\"name\":{\"type\":\"string\"}}}}}}",
	  t_list_projects },
	{ "top_entities", "Top entities",
	  "Which hosts, processes, containers, pods, deployments or executables use the most CPU "
	  "(or off-CPU time, GPU time, allocated bytes with event_kind), with cores and percent. "
	  "Use it first to find where the time goes, then narrow the other tools with a filter "
	  "such as process.executable.name == \"x\".",
	  ARG_SCOPE | ARG_KIND | ARG_CHARS, "on_cpu",
	  "\"entity\":{\"type\":\"string\",\"default\":\"executable\",\"description\":\"host, "
	  "process, container, pod, deployment, executable, namespace, thread, cluster, script, "
	  "shared_object (plurals too), or any attribute name\"}," P_LIMIT(10, 200) "," P_CPU_MODE,
	  "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"entity\",\"entities\"],"
	  "\"properties\":{" S_SCOPE_OUT ",\"entity\":{\"type\":\"string\"},\"unit\":{\"type\":"
	  "\"string\"},\"entities\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":"
	  "[\"name\",\"total\",\"percent\"],\"properties\":{\"name\":{\"type\":\"string\"},\"total\":"
	  "{\"type\":\"number\"},\"cores\":{\"type\":\"number\"},\"percent\":{\"type\":\"number\"}}}}}}",
	  t_top_entities },
	{ "top_functions", "Top functions",
	  "The functions with the most self (or total) time: where the CPU is spent. Each with "
	  "self and total percent, cores, binary and source file. Narrow with filter and search.",
	  ARG_SCOPE | ARG_KIND | ARG_CHARS, "on_cpu",
	  P_SORT "," P_LIMIT(20, 500) "," P_CPU_MODE "," P_SEARCH, "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"functions\"],\"properties\":{"
	  S_SCOPE_OUT ",\"unit\":{\"type\":\"string\"},\"functions\":" S_FUNCTIONS "}}",
	  t_top_functions },
	{ "flamegraph", "Flamegraph (hot paths)",
	  "The call tree of the hottest paths as indented text: one node per line with total% "
	  "and self% of all samples, nodes under min_percent left out, so that it fits a context "
	  "window. group_by adds levels above the stacks (host, executable, container, pod, ...).",
	  ARG_SCOPE | ARG_KIND | ARG_CHARS, "on_cpu",
	  P_TREE "," P_SEARCH ",\"group_by\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
	  "\"maxItems\":8,\"description\":\"levels above the stacks: deployment, container, host, "
	  "executable, thread, script, namespace, pod, cluster, process\"}",
	  "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"unit\",\"total\",\"nodes\","
	  "\"truncated\"],\"properties\":{" S_SCOPE_OUT ",\"unit\":{\"type\":\"string\"},\"total\":"
	  "{\"type\":\"number\"},\"nodes\":" S_TREE_NODES ",\"truncated\":{\"type\":\"boolean\"}}}",
	  t_flamegraph },
	{ "sandwich", "Callers and callees of a function",
	  "One function's callers (who calls it) and callees (what it calls) as two trees, in % "
	  "of the function's total. Name the function as top_functions lists it.",
	  ARG_SCOPE | ARG_KIND | ARG_CHARS, "on_cpu",
	  "\"function\":{\"type\":\"string\",\"description\":\"the function's name\"},"
	  "\"binary\":{\"type\":\"string\",\"description\":\"its binary, when the name is in "
	  "several\"}," P_TREE,
	  "[\"function\"]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"callers\",\"callees\"],"
	  "\"properties\":{" S_SCOPE_OUT ",\"function\":{\"type\":[\"object\",\"null\"]},"
	  "\"callers\":" S_TREE_NODES ",\"callees\":" S_TREE_NODES "}}",
	  t_sandwich },
	{ "diff", "Compare two time ranges",
	  "Function by function, what changed between a baseline and the comparison "
	  "(range/start/end and filter). The baseline defaults to the window just before the "
	  "comparison, as long; baseline_filter defaults to filter. Largest change in cores first.",
	  ARG_SCOPE | ARG_KIND | ARG_CHARS, "on_cpu",
	  "\"baseline_start\":{\"type\":[\"integer\",\"string\"],\"description\":\"Unix ms or "
	  "RFC 3339\"},\"baseline_end\":{\"type\":[\"integer\",\"string\"]},\"baseline_filter\":"
	  "{\"type\":\"string\"}," P_SORT "," P_LIMIT(20, 500),
	  "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"baseline_start_ts\","
	  "\"baseline_end_ts\",\"functions\"],\"properties\":{" S_SCOPE_OUT ",\"baseline_start_ts\":"
	  "{\"type\":\"integer\"},\"baseline_end_ts\":{\"type\":\"integer\"},\"functions\":{\"type\":"
	  "\"array\",\"items\":{\"type\":\"object\",\"required\":[\"name\",\"status\","
	  "\"self_cores_change\",\"total_cores_change\"],\"properties\":{\"name\":{\"type\":"
	  "\"string\"},\"status\":{\"type\":\"string\",\"enum\":[\"new\",\"removed\",\"changed\"]},"
	  "\"self_cores_change\":{\"type\":\"number\"},\"total_cores_change\":{\"type\":\"number\"}}}}}}",
	  t_diff },
	{ "timeseries", "CPU over time",
	  "Cores (threads waiting, GPUs busy, bytes with event_kind) per time bucket, per group "
	  "(group_by: host, executable, container, ... or any attribute): when did it start?",
	  ARG_SCOPE | ARG_KIND | ARG_CHARS, "on_cpu",
	  "\"group_by\":{\"type\":\"string\"},\"num_buckets\":{\"type\":\"integer\",\"minimum\":2,"
	  "\"maximum\":240,\"default\":30}," P_LIMIT(5, 50),
	  "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"bucket_ms\",\"series\"],"
	  "\"properties\":{" S_SCOPE_OUT ",\"bucket_ms\":{\"type\":\"number\"},\"unit\":{\"type\":"
	  "\"string\"},\"series\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":"
	  "[\"name\",\"total\",\"values\"],\"properties\":{\"name\":{\"type\":\"string\"},\"total\":"
	  "{\"type\":\"number\"},\"values\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}}}}}}",
	  t_timeseries },
	{ "events", "Raw events",
	  "The newest raw samples: time, value, labels and stack (innermost max_frames frames). "
	  "For a concrete example of a hot stack.",
	  ARG_SCOPE | ARG_KIND | ARG_CHARS, "on_cpu",
	  P_LIMIT(10, 100) ",\"max_frames\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":200,"
	  "\"default\":20}",
	  "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"events\"],\"properties\":{"
	  S_SCOPE_OUT ",\"events\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":"
	  "[\"ts\",\"value\",\"stack\"],\"properties\":{\"ts\":{\"type\":\"integer\"},\"value\":"
	  "{\"type\":\"number\"},\"labels\":{\"type\":\"object\"},\"stack\":{\"type\":\"array\"}}}}}}",
	  t_events },
	{ "gpu_kernels", "Top GPU kernels",
	  "The GPU work (CUDA kernels, memcpy, memset, sync) with the most GPU time, each with "
	  "its share and GPUs busy (event_kind cuda). Empty when no GPU data was recorded.",
	  ARG_SCOPE | ARG_CHARS, "cuda", P_SORT "," P_LIMIT(20, 500) "," P_SEARCH, "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"functions\"],\"properties\":{"
	  S_SCOPE_OUT ",\"unit\":{\"type\":\"string\"},\"functions\":" S_FUNCTIONS "}}",
	  t_gpu_kernels },
	{ "gpu_flamegraph", "GPU flamegraph",
	  "The flamegraph of GPU time (event_kind cuda): the CPU call paths that launch the GPU "
	  "work, the kernel at the leaf; as indented text like flamegraph.",
	  ARG_SCOPE | ARG_CHARS, "cuda",
	  P_TREE "," P_SEARCH ",\"group_by\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
	  "\"maxItems\":8}",
	  "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE ",\"unit\",\"total\",\"nodes\","
	  "\"truncated\"],\"properties\":{" S_SCOPE_OUT ",\"unit\":{\"type\":\"string\"},\"total\":"
	  "{\"type\":\"number\"},\"nodes\":" S_TREE_NODES ",\"truncated\":{\"type\":\"boolean\"}}}",
	  t_gpu_flamegraph },
	{ "gpu_metrics", "GPU metrics",
	  "NVML metrics of the GPUs (utilization, memory, power, temperature, clocks). Without "
	  "metric: the GPU metrics that have data; with metric (e.g. hw.gpu.utilization): min, "
	  "avg, max and last per GPU and the points.",
	  ARG_SCOPE | ARG_CHARS, "on_cpu",
	  "\"metric\":{\"type\":\"string\"},\"group_by\":{\"type\":\"string\",\"default\":"
	  "\"gpu.index\"},\"num_buckets\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":240,"
	  "\"default\":30}",
	  "[]",
	  "{\"type\":\"object\",\"required\":[" S_REQ_SCOPE "],\"properties\":{" S_SCOPE_OUT
	  ",\"metrics\":{\"type\":\"array\"},\"metric\":{\"type\":\"string\"},\"series\":{\"type\":"
	  "\"array\",\"items\":{\"type\":\"object\",\"required\":[\"group\",\"min\",\"avg\",\"max\","
	  "\"last\"]}}}}",
	  t_gpu_metrics },
};

#define P_SCOPE                                                                           \
	"\"project\":{\"type\":\"string\",\"description\":\"project name or id (default: "     \
	"default)\"},\"filter\":{\"type\":\"string\",\"description\":\"CEL over resource "    \
	"attributes, e.g. process.executable.name == \\\"app\\\" && host.name == \\\"n1\\\"\"},"  \
	"\"range\":{\"type\":\"string\",\"default\":\"1h\",\"description\":\"how far back from "   \
	"end: 15m, 1h, 7d\"},\"start\":{\"type\":[\"integer\",\"string\"],\"description\":"     \
	"\"Unix ms or RFC 3339 (2026-01-02T15:04:05Z); default end - range\"},\"end\":{\"type\":" \
	"[\"integer\",\"string\"],\"description\":\"Unix ms or RFC 3339; default now\"}"
#define P_KIND                                                                            \
	"\"event_kind\":{\"type\":\"string\",\"enum\":[\"on_cpu\",\"off_cpu\",\"cuda\","       \
	"\"alloc\"],\"default\":\"on_cpu\"}"
#define P_CHARS                                                                           \
	"\"max_chars\":{\"type\":\"integer\",\"minimum\":500,\"maximum\":100000,\"default\":"  \
	"8000,\"description\":\"bound on the text answer\"}"

/* Adds to props the properties of a static fragment of this file: the
 * members of an object without its braces ("name":{...},...). A fragment
 * that does not parse is a bug that every test catches. */
static void add_props(json_t *props, const char *members)
{
	if (!*members)
		return;
	struct buf b = { 0 };
	buf_printf(&b, "{%s}", members);
	json_t *o = json_loadb(b.data, b.len, 0, NULL);
	if (!o || json_object_update(props, o) < 0)
		abort();
	json_decref(o);
	buf_free(&b);
}

static json_t *input_schema(const struct tool *t)
{
	json_t *props = json_object();
	if (t->common & ARG_SCOPE)
		add_props(props, P_SCOPE);
	if (t->common & ARG_KIND)
		add_props(props, P_KIND);
	if (t->common & ARG_CHARS)
		add_props(props, P_CHARS);
	add_props(props, t->props);
	json_t *required = json_loads(t->required, 0, NULL);
	if (!required)
		abort(); /* a static array above is malformed: a bug caught by every test */
	return json_pack("{s:s, s:b, s:o, s:o}", "type", "object", "additionalProperties", 0,
			 "properties", props, "required", required);
}

json_t *mcp_tools_list(void)
{
	json_t *list = json_array();
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
		const struct tool *t = &tools[i];
		json_t *out = json_loads(t->output, 0, NULL);
		if (!out)
			abort(); /* as above */
		json_array_append_new(
			list, json_pack("{s:s, s:s, s:s, s:o, s:o, s:{s:b, s:b}}", "name", t->name,
					"title", t->title, "description", t->description, "inputSchema",
					input_schema(t), "outputSchema", out, "annotations",
					"readOnlyHint", 1, "openWorldHint", 0));
	}
	return list;
}

static json_t *tool_error(const char *msg)
{
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", msg,
			 "isError", 1);
}

int mcp_tool_call(struct server *srv, const struct principal *who, const char *name,
		  json_t *args, json_t **result, struct buf *err)
{
	const struct tool *t = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
		if (strcmp(tools[i].name, name) == 0)
			t = &tools[i];
	if (!t) {
		buf_printf(err, "Unknown tool: %.100s (tools/list lists them)", name);
		return -1;
	}
	json_t *empty = json_object();
	struct call c = { .srv = srv, .who = who, .args = args ? args : empty };
	/* Arguments the tool does not take are refused by name. */
	json_t *schema = input_schema(t);
	json_t *props = json_object_get(schema, "properties");
	const char *key;
	json_t *v;
	int rc = 0;
	json_object_foreach(c.args, key, v) {
		if (!json_object_get(props, key)) {
			struct buf all = { 0 };
			const char *k;
			json_t *p;
			json_object_foreach(props, k, p) buf_printf(&all, "%s%s", all.len ? ", " : "", k);
			rc = fail(&c, "%.64s: not an argument of %s (it takes: %s)", key, t->name,
				  all.data ? all.data : "none");
			buf_free(&all);
			break;
		}
	}
	json_decref(schema);
	if (rc == 0)
		rc = common_args(&c, t->common, t->kind);
	if (rc == 0)
		rc = t->run(&c);
	if (rc < 0) {
		*result = tool_error(c.err.data ? c.err.data : "error");
		json_decref(c.out);
	} else {
		*result = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text",
				    c.text.data ? c.text.data : "", "structuredContent",
				    c.out ? c.out : json_object(), "isError", 0);
		char *dump = *result ? json_dumps(*result, JSON_COMPACT) : NULL;
		size_t n = dump ? strlen(dump) : 0;
		free(dump);
		if (!*result || n > MCP_MAX_RESULT) {
			json_decref(*result);
			struct buf msg = { 0 };
			buf_printf(&msg, "the answer is %zu bytes, over %u: lower limit or max_frames, "
					 "raise min_percent, or narrow the filter or range", n, MCP_MAX_RESULT);
			*result = tool_error(msg.data);
			buf_free(&msg);
		}
	}
	buf_free(&c.text);
	buf_free(&c.err);
	json_decref(empty);
	return 0;
}

/* --- resources: the entity lists of each project ------------------------- */

static const char *const resource_entities[] = { "hosts", "processes", "containers", "pods",
						 "deployments", "executables", NULL };

#define RESOURCE_PREFIX "ember://projects/"
#define MAX_RESOURCE_PROJECTS 100

json_t *mcp_resources_list(struct server *srv, const struct principal *who)
{
	struct buf b = { 0 };
	struct jsonw w;
	jsonw_init(&w, &b);
	projects_list_json(srv->projects, may_read, (void *)who, &w);
	(void)jsonw_finish(&w); /* an array of flat objects: no misuse is possible */
	json_t *projects = json_loadb(b.data ? b.data : "[]", b.len ? b.len : 2, 0, NULL);
	buf_free(&b);
	json_t *list = json_array();
	size_t i;
	json_t *p;
	json_array_foreach(projects, i, p) {
		if (i >= MAX_RESOURCE_PROJECTS)
			break;
		for (size_t e = 0; resource_entities[e]; e++) {
			struct buf uri = { 0 }, nm = { 0 };
			buf_printf(&uri, RESOURCE_PREFIX "%s/%s", str(p, "name"), resource_entities[e]);
			buf_printf(&nm, "%s: %s", str(p, "name"), resource_entities[e]);
			json_array_append_new(
				list, json_pack("{s:s, s:s, s:s, s:s}", "uri", uri.data, "name", nm.data,
						"description",
						"the top entities by CPU over the last hour (JSON)",
						"mimeType", "application/json"));
			buf_free(&uri);
			buf_free(&nm);
		}
	}
	json_decref(projects);
	return list;
}

json_t *mcp_resource_templates(void)
{
	return json_pack("[{s:s, s:s, s:s, s:s}]", "uriTemplate",
			 RESOURCE_PREFIX "{project}/{entity}", "name", "entities",
			 "description",
			 "The top entities (hosts, processes, containers, pods, deployments, "
			 "executables, or any attribute) of a project by CPU over the last hour",
			 "mimeType", "application/json");
}

int mcp_resource_read(struct server *srv, const struct principal *who, const char *uri,
		      json_t **result, struct buf *err)
{
	size_t n = strlen(RESOURCE_PREFIX);
	const char *slash = strncmp(uri, RESOURCE_PREFIX, n) == 0 ? strchr(uri + n, '/') : NULL;
	if (!slash || slash == uri + n || !slash[1] || strchr(slash + 1, '/') ||
	    slash - (uri + n) > 128 || strlen(slash + 1) > 128) {
		buf_printf(err, "Resource not found: expected " RESOURCE_PREFIX "PROJECT/ENTITY");
		return -1;
	}
	json_t *args = json_pack("{s:s#, s:s, s:i}", "project", uri + n, (int)(slash - (uri + n)),
				 "entity", slash + 1, "limit", 50);
	json_t *res = NULL;
	struct buf e = { 0 };
	mcp_tool_call(srv, who, "top_entities", args, &res, &e);
	buf_free(&e);
	json_decref(args);
	if (json_is_true(json_object_get(res, "isError"))) {
		json_t *c0 = json_array_get(json_object_get(res, "content"), 0);
		buf_printf(err, "Resource not found: %s", str(c0, "text"));
		json_decref(res);
		return -1;
	}
	char *text = json_dumps(json_object_get(res, "structuredContent"), JSON_COMPACT);
	json_decref(res);
	*result = json_pack("{s:[{s:s, s:s, s:s}]}", "contents", "uri", uri, "mimeType",
			    "application/json", "text", text ? text : "{}");
	free(text);
	return 0;
}
