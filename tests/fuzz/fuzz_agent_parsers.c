/* Fuzz target: the agent's parsers of kernel-provided text that another
 * process can influence: /proc/PID/maps lines, /proc/PID/stat, CPU lists
 * and kallsyms. The first byte selects the parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/kallsyms.h"
#include "agent/maps.h"
#include "agent/oncpu.h"
#include "agent/proc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536)
		return 0;
	const char *text = (const char *)data + 1;
	size_t n = size - 1;
	switch (data[0] % 4) {
	case 0: {
		struct maps_line m;
		if (maps_parse_line(text, n, &m) == 0 && m.path_len > n)
			abort();
		break;
	}
	case 1: {
		uint64_t st;
		proc_parse_stat_start(text, n, &st);
		break;
	}
	case 2: {
		char *s = malloc(n + 1);
		memcpy(s, text, n);
		s[n] = '\0';
		int ids[64];
		parse_cpu_list(s, ids, 64);
		free(s);
		break;
	}
	default: {
		struct kallsyms k = { 0 };
		kallsyms_parse(&k, text, n);
		const char *mod;
		kallsyms_lookup(&k, 0xffffffff81000000ull, &mod);
		kallsyms_free(&k);
		break;
	}
	}
	return 0;
}
