/* cel_sql_tool - TEST-ONLY: one CEL filter, both ways, for
 * tests/integration/test_clickhouse_celsql.py.
 *
 *   cel_sql_tool EXPR < label_sets.json
 *
 * label_sets.json: [{"id": N, "labels": [["key", "value"], ...]}, ...].
 * Prints {"sql": CONDITION, "ids": [...]}: the condition cel_sql makes
 * (server/query/cel_sql.h, over columns keys and values) and the ids of
 * the label sets cel_eval accepts (the reference the test compares
 * ClickHouse's answer with). Exit 0; 2 when EXPR does not compile
 * ({"error"}); 3 when it has no SQL form ({"error", "unsupported": true}).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/query/cel.h"
#include "server/query/cel_sql.h"

struct set {
	json_t *labels;
};

static const char *lookup(void *ctx, const char *name)
{
	struct set *s = ctx;
	size_t i;
	json_t *kv;
	json_array_foreach(s->labels, i, kv) {
		if (!strcmp(json_string_value(json_array_get(kv, 0)), name))
			return json_string_value(json_array_get(kv, 1));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cel_sql_tool EXPR < label_sets.json\n");
		return 1;
	}
	json_error_t jerr;
	json_t *rows = json_loadf(stdin, 0, &jerr);
	if (!rows || !json_is_array(rows)) {
		fprintf(stderr, "cel_sql_tool: stdin: %s\n", jerr.text);
		return 1;
	}
	struct buf err = { 0 }, sql = { 0 };
	struct cel_program *p = cel_compile(argv[1], &err);
	json_t *out = json_object();
	int rc = 0;
	if (!p) {
		json_object_set_new(out, "error", json_string(err.data ? err.data : "?"));
		rc = 2;
	} else if (cel_sql(p, "keys", "values", &sql, &err) != 0) {
		json_object_set_new(out, "error", json_string(err.data ? err.data : "?"));
		json_object_set_new(out, "unsupported", json_true());
		rc = 3;
	} else {
		json_object_set_new(out, "sql", json_stringn(sql.data, sql.len));
		json_t *ids = json_array();
		size_t i;
		json_t *row;
		json_array_foreach(rows, i, row) {
			struct set s = { .labels = json_object_get(row, "labels") };
			if (cel_eval(p, lookup, &s))
				json_array_append(ids, json_object_get(row, "id"));
		}
		if (cel_check(p, &err) != 0) {
			fprintf(stderr, "cel_sql_tool: %s\n", err.data);
			rc = 1;
		}
		json_object_set_new(out, "ids", ids);
	}
	char *text = json_dumps(out, JSON_COMPACT);
	puts(text);
	free(text);
	json_decref(out);
	json_decref(rows);
	cel_free(p);
	buf_free(&err);
	buf_free(&sql);
	return rc;
}
