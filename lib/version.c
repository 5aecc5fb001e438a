/* version.c - see version.h. */
#include "version.h"

#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "elfsyms.h"
#include "version_gen.h" /* EMBER_RELEASE, EMBER_SOURCE: written by the Makefile */

const char *ember_version(void)
{
	return EMBER_RELEASE;
}

void version_print(FILE *f, const char *program)
{
	uint8_t id[ELF_BUILD_ID_MAX];
	int n = -1;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = elfsyms_build_id(fd, id);
		close(fd);
	}
	fprintf(f, "%s %s (%s) build-id ", program, EMBER_RELEASE, EMBER_SOURCE);
	if (n < 0)
		fputs("unknown", f);
	else if (n == 0)
		fputs("none", f);
	for (int i = 0; i < n && i < ELF_BUILD_ID_MAX; i++)
		fprintf(f, "%02x", id[i]);
	fputc('\n', f);
}
