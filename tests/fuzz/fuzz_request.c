/* Fuzz target: the flamegraph request parser (JSON body of the REST API). */
#include <stdint.h>

#include "server/query/flamegraph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fg_request r;
	struct buf err = { 0 };
	if (fg_request_parse(&r, (const char *)data, size, &err) == 0)
		fg_request_free(&r);
	buf_free(&err);
	return 0;
}
