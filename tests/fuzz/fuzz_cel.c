/* Fuzz target: the CEL filter compiler and evaluator. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/cel.h"

static const char *lookup(void *ctx, const char *name)
{
	(void)ctx;
	return strcmp(name, "host.name") == 0 ? "node-1" : NULL;
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
		cel_eval(p, lookup, NULL);
		cel_free(p);
	} else if (!err.data || !strstr(err.data, "query:")) {
		abort(); /* every failure explains itself */
	}
	buf_free(&err);
	free(src);
	return 0;
}
