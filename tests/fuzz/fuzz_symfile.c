/* Fuzz target: symbol files as the server receives them, validated then
 * looked up at many offsets. */
#include <stdint.h>
#include <string.h>

#include "symfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct symfile_view v;
	const char *err;
	if (symfile_parse(data, size, &v, &err) < 0)
		return 0;
	for (uint64_t off = 0; off < 0x10000; off += 0x101) {
		const char *name = symfile_lookup(&v, off, NULL);
		if (name)
			(void)strlen(name);
	}
	return 0;
}
