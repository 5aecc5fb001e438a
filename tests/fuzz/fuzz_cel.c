/* Fuzz target: the CEL filter compiler and evaluator. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/query/cel.h"

static const char *lookup(void *ctx, const char *name)
{
	(void)ctx;
	if (strcmp(name, "host.name") == 0)
		return "node-1";
	if (strcmp(name, "thread.name") == 0)
		return "gc-w\xc3\xb6rker\xff"; /* ends in a byte that is not UTF-8 */
	if (strcmp(name, "process.pid") == 0)
		return "4242"; /* for numeric comparisons */
	if (strcmp(name, "weight") == 0)
		return "-1.5e3";
	if (strcmp(name, "k8s.pod.label[app]") == 0)
		return "aaaaaaaaaaaaaaaaaaaaaaaaaaaa!"; /* for backtracking patterns */
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 8192)
		return 0;
	char *src = malloc(size + 1);
	memcpy(src, data, size);
	src[size] = '\0';
	struct buf err = { 0 };
	struct cel_program *p = cel_compile(src, &err);
	if (p) {
		bool first = cel_eval(p, lookup, NULL);
		/* Evaluation is deterministic, until a pattern reaches a bound:
		 * from then on every match reads as false (under a "!", true),
		 * and cel_check fails the query (cel.h). */
		if (cel_check(p, NULL) == 0 && cel_eval(p, lookup, NULL) != first)
			abort();
		cel_free(p);
	} else if (!err.data || !strstr(err.data, "query:")) {
		abort(); /* every failure explains itself */
	}
	buf_free(&err);
	free(src);
	return 0;
}
