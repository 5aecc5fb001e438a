/* Fuzz target: symbol files as the server receives them, validated then
 * looked up at many offsets, following every inline chain. */
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
		struct sym_frame f[SYMFILE_MAX_DEPTH];
		int n = symfile_lookup(&v, off, f, SYMFILE_MAX_DEPTH);
		for (int i = 0; i < n; i++) {
			(void)strlen(f[i].name);
			if (f[i].file)
				(void)strlen(f[i].file);
		}
	}
	return 0;
}
