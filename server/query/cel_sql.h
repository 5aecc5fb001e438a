/* cel_sql.h - a compiled CEL filter (cel.h) as a ClickHouse SQL condition
 * over the fleet store's label_sets table (server/store/clickhouse/schema.h:
 * keys Array(String), values Array(String)), for pushing filters down:
 *   SELECT hash FROM label_sets WHERE <condition>
 * holds for exactly the label sets cel_eval accepts (the reference model;
 * tests/integration/test_clickhouse_celsql.py compares the two on a real
 * server).
 *
 * Forms: an attribute reads as values[indexOf(keys, 'name')] (the empty
 * string when the set lacks it, as in cel_eval); ==, != and `in` compare
 * bytes; <, <=, >, >= and numeric == / != read both sides as numbers
 * with cel.c's spelling of a number (a regular expression) and are false
 * when either is not one; startsWith, endsWith, contains; matches through
 * ClickHouse's RE2, with the pattern inside (?-s: ) so that "." stops at
 * a newline as in PCRE2 (and so that ClickHouse 18.16's search for a
 * required substring, which ignores a leading (?i), does not look at it). Every string literal is written by
 * ch_sql_string (any byte escaped that could end or bend it).
 *
 * PCRE2 features RE2 lacks (lookaround, backreferences, atomic groups,
 * possessive quantifiers, recursion, \K, callouts, named backreference
 * syntax) make the compile fail with CEL_SQL_UNSUPPORTED and a message
 * naming the construct: the caller answers 422 rather than filtering
 * differently from the embedded store.
 */
#ifndef EMBER_SERVER_CEL_SQL_H
#define EMBER_SERVER_CEL_SQL_H

#include "buf.h"
#include "cel.h"

#define CEL_SQL_UNSUPPORTED (-2)

/* Appends the condition for p to out, naming the table's columns
 * keys_col and values_col (identifiers the caller controls). Returns 0,
 * or CEL_SQL_UNSUPPORTED with a message in err (out then holds nothing
 * of it). */
int cel_sql(const struct cel_program *p, const char *keys_col, const char *values_col,
	    struct buf *out, struct buf *err);

#endif
