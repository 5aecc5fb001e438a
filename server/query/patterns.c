/* patterns.c - see patterns.h. The table (patterns.json) is the
 * knowledge base; each entry is described for users in
 * docs/recommendations.md. */
#include "patterns.h"

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <string.h>

#include "display.h"
#include "log.h"
#include "scan.h"
#include "server/store/store.h"
#include "util.h"

/* The table is data: server/query/patterns.json, embedded at build time
 * (the assembler's .incbin, from the source tree's root where make runs;
 * the Makefile rebuilds this object when the file changes) and read once,
 * on first use, into the patterns below. */
__asm__(".section .rodata\n.balign 16\n.global ember_patterns_json\nember_patterns_json:\n"
	".incbin \"server/query/patterns.json\"\n.global ember_patterns_json_end\n"
	"ember_patterns_json_end:\n.byte 0\n.previous\n");
extern const char ember_patterns_json[], ember_patterns_json_end[];

/* The patterns and their compiled expressions, made once (pthread_once)
 * and only read afterwards, by every query thread; they live as long as
 * the process (the strings point into doc). */
enum { RE_ANCHOR, RE_CALLER, RE_EXCLUDE, RE_BINARY, RE_N };
static json_t *doc;
static struct pattern *table;
static size_t count;
static pcre2_code *(*compiled)[RE_N];
static int load_failed;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static pcre2_code *compile(const char *src)
{
	if (!src)
		return NULL;
	int ec;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &off, NULL);
	if (!re) {
		load_failed = 1;
		return NULL;
	}
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
	return re;
}

/* Bits 1 << v of the names in arr (a list of event kinds or of frame
 * types, as name_of names them); false at an unknown name. */
static bool name_bits(const json_t *arr, int max, const char *(*name_of)(uint8_t), unsigned *bits)
{
	*bits = 0;
	if (!arr)
		return true;
	if (!json_is_array(arr))
		return false;
	size_t i;
	json_t *v;
	json_array_foreach(arr, i, v) {
		int k = 1;
		while (k <= max && (!json_is_string(v) || strcmp(json_string_value(v), name_of((uint8_t)k))))
			k++;
		if (k > max)
			return false;
		*bits |= 1u << k;
	}
	return true;
}

static const char *str(const json_t *o, const char *key, bool required, bool *ok)
{
	const json_t *v = json_object_get(o, key);
	if ((!v && required) || (v && !json_is_string(v)))
		*ok = false;
	return json_string_value(v);
}

/* One entry of the table; false (with what set) when it is not a pattern. */
static bool read_pattern(const json_t *o, struct pattern *p, const char **what)
{
	static const char *const keys[] = { "id", "title", "category", "kinds", "anchor",
					     "anchor_types", "depth", "caller", "caller_types",
					     "exclude", "binary", "min_share", "removes",
					     "explanation", "actions" };
	bool ok = json_is_object(o);
	const char *key;
	const json_t *v;
	json_object_foreach((json_t *)o, key, v) {
		size_t k = 0;
		while (k < ARRAY_SIZE(keys) && strcmp(key, keys[k]))
			k++;
		if (k == ARRAY_SIZE(keys)) {
			*what = key;
			return false;
		}
	}
	*what = "a field";
	p->id = str(o, "id", true, &ok);
	p->title = str(o, "title", true, &ok);
	p->category = str(o, "category", true, &ok);
	p->anchor = str(o, "anchor", true, &ok);
	p->caller = str(o, "caller", false, &ok);
	p->exclude = str(o, "exclude", false, &ok);
	p->binary = str(o, "binary", false, &ok);
	p->explanation = str(o, "explanation", true, &ok);
	ok = ok && name_bits(json_object_get(o, "kinds"), SEK_ALLOC, event_kind_name, &p->kinds) && p->kinds &&
	     name_bits(json_object_get(o, "anchor_types"), SFT_MAX, frame_type_name, &p->anchor_types) &&
	     name_bits(json_object_get(o, "caller_types"), SFT_MAX, frame_type_name, &p->caller_types);
	json_int_t depth = json_integer_value(json_object_get(o, "depth"));
	p->depth = (unsigned)depth;
	p->min_share = json_number_value(json_object_get(o, "min_share"));
	p->removes = json_number_value(json_object_get(o, "removes"));
	ok = ok && depth >= 1 && depth <= 64 && p->min_share > 0 && p->min_share < 1 && p->removes > 0 &&
	     p->removes <= 1;
	const json_t *acts = json_object_get(o, "actions");
	ok = ok && json_is_array(acts) && json_array_size(acts) >= 1 &&
	     json_array_size(acts) <= PAT_MAX_ACTIONS;
	for (size_t i = 0; ok && i < json_array_size(acts); i++)
		ok = (p->actions[i] = json_string_value(json_array_get(acts, i))) != NULL;
	if (ok || !p->id)
		return ok;
	*what = p->id;
	return false;
}

static void load_all(void)
{
	json_error_t e;
	doc = json_loadb(ember_patterns_json, (size_t)(ember_patterns_json_end - ember_patterns_json),
			 JSON_REJECT_DUPLICATES, &e);
	if (!json_is_array(doc)) {
		log_error("patterns.json: %s (line %d)", doc ? "not an array" : e.text, e.line);
		load_failed = 1;
		return;
	}
	size_t n = json_array_size(doc);
	table = xcalloc(n ? n : 1, sizeof(*table));
	compiled = xcalloc(n ? n : 1, sizeof(*compiled));
	for (size_t i = 0; i < n; i++) {
		const char *what = NULL;
		if (!read_pattern(json_array_get(doc, i), &table[i], &what)) {
			log_error("patterns.json: entry %zu (%s) is not a pattern", i, what);
			load_failed = 1;
			count = 0;
			return;
		}
	}
	count = n;
	for (size_t i = 0; i < count; i++) {
		const struct pattern *p = &table[i];
		compiled[i][RE_ANCHOR] = compile(p->anchor);
		compiled[i][RE_CALLER] = compile(p->caller);
		compiled[i][RE_EXCLUDE] = compile(p->exclude);
		compiled[i][RE_BINARY] = compile(p->binary);
	}
}

const struct pattern *pat_table(size_t *n)
{
	pthread_once(&load_once, load_all);
	*n = count;
	return table;
}

int pat_selfcheck(void)
{
	pthread_once(&load_once, load_all);
	return load_failed ? -1 : 0;
}

static bool re_match(const pcre2_code *re, pcre2_match_data *md, const char *s)
{
	if (!re || !s)
		return false;
	return pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL) >= 0;
}

static bool type_ok(unsigned mask, uint8_t type)
{
	return !mask || (type < 32 && (mask & (1u << type)));
}

bool pat_match_one(const struct pattern *p, uint8_t kind, const struct ht_trace *t,
		   struct pat_match *m)
{
	pthread_once(&load_once, load_all);
	size_t i = (size_t)(p - table);
	if (!table || p < table || i >= count || !t->nframes || kind >= 32 || !(p->kinds & (1u << kind)))
		return false;
	pcre2_code *const *re = compiled[i];
	if (!re[RE_ANCHOR])
		return false;
	pcre2_match_data *md = pcre2_match_data_create(4, NULL);
	if (!md)
		return false;
	bool ok = false;
	if (re[RE_EXCLUDE])
		for (size_t f = 0; f < t->nframes; f++)
			if (re_match(re[RE_EXCLUDE], md, t->frames[f].name))
				goto out;
	size_t depth = p->depth ? p->depth : 1;
	/* The deepest anchor (nearest the leaf) within depth. */
	for (size_t k = 0; k < depth && k < t->nframes; k++) {
		size_t a = t->nframes - 1 - k;
		const struct ht_frame *f = &t->frames[a];
		if (!type_ok(p->anchor_types, f->type) || !re_match(re[RE_ANCHOR], md, f->name))
			continue;
		if (re[RE_BINARY] && !re_match(re[RE_BINARY], md, f->binary) &&
		    !re_match(re[RE_BINARY], md, f->file))
			continue;
		size_t caller = SIZE_MAX;
		if (re[RE_CALLER]) {
			for (size_t c = a; c-- > 0;)
				if (type_ok(p->caller_types, t->frames[c].type) &&
				    re_match(re[RE_CALLER], md, t->frames[c].name)) {
					caller = c;
					break;
				}
			if (caller == SIZE_MAX)
				continue;
		}
		m->p = p;
		m->anchor = a;
		m->caller = caller;
		ok = true;
		break;
	}
out:
	pcre2_match_data_free(md);
	return ok;
}

bool pat_match(uint8_t kind, const struct ht_trace *t, struct pat_match *m,
	       const struct pattern **alsov, size_t nalso, size_t *also)
{
	bool found = false;
	size_t n = 0, np;
	const struct pattern *all = pat_table(&np);
	for (size_t i = 0; i < np; i++) {
		struct pat_match x;
		if (!pat_match_one(&all[i], kind, t, &x))
			continue;
		if (!found) {
			*m = x;
			found = true;
		} else {
			if (n < nalso && alsov)
				alsov[n] = &all[i];
			n++;
		}
	}
	if (also)
		*also = n;
	return found;
}

const struct pattern *pat_find(const char *id)
{
	size_t n;
	const struct pattern *all = pat_table(&n);
	for (size_t i = 0; i < n; i++)
		if (strcmp(all[i].id, id) == 0)
			return &all[i];
	return NULL;
}
