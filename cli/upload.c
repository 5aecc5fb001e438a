/* upload.c - `ember upload-symbols`: symbols for a private build.
 *
 *   ember upload-symbols [-p PROJECT_ID] [-e URL] [--no-dwarf] EXECUTABLE [DEBUG_OBJECT]
 *
 * The file id (what the agent reports for frames in this file) comes from
 * EXECUTABLE, usually the stripped binary that runs in production. The
 * symbols come from DEBUG_OBJECT (the unstripped build, or a split debug
 * file), else from EXECUTABLE itself when it has DWARF, else from the
 * debug file its .gnu_debuglink or build ID names (next to it, in .debug/,
 * or under /usr/lib/debug). DWARF (source lines, inlined functions) is
 * included unless --no-dwarf. The server keeps the upload unless it
 * already has symbols at least as complete. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "compress.h"
#include "elfsyms.h"
#include "fileid.h"
#include "symfile.h"
#include "util.h"

/* Looks for the debug file of exe: .gnu_debuglink, then the build ID. */
static int find_debug_file(int fd, const char *exe, char *found, size_t n)
{
	char link[256];
	char *copy = xstrdup(exe);
	const char *dir = dirname(copy);
	int dfd = -1;
	if (elfsyms_debuglink(fd, link, sizeof(link)) == 0) {
		const char *fmt[] = { "%s/%s", "%s/.debug/%s", "/usr/lib/debug%s/%s" };
		for (size_t i = 0; i < ARRAY_SIZE(fmt) && dfd < 0; i++) {
			snprintf(found, n, fmt[i], dir, link);
			dfd = open(found, O_RDONLY | O_CLOEXEC);
		}
	}
	uint8_t bid[ELF_BUILD_ID_MAX];
	int bl = elfsyms_build_id(fd, bid);
	if (dfd < 0 && bl > 1) {
		char hex[2 * ELF_BUILD_ID_MAX + 1];
		hex_encode(bid, (size_t)bl, hex);
		snprintf(found, n, "/usr/lib/debug/.build-id/%.2s/%s.debug", hex, hex + 2);
		dfd = open(found, O_RDONLY | O_CLOEXEC);
	}
	free(copy);
	return dfd;
}

int cmd_upload_symbols(const struct cli_opts *o)
{
	if (o->nargs < 1) {
		fprintf(stderr, "usage: ember upload-symbols [-p PROJECT_ID] [-e URL] [--no-dwarf] EXECUTABLE [DEBUG_OBJECT]\n");
		return 2;
	}
	if (o->project && !uuid_valid(o->project)) {
		fprintf(stderr, "ember: --project-id: expected a UUID, got \"%s\"\n", o->project);
		return 2;
	}
	const char *exe = o->args[0];
	int fd = open(exe, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "ember: cannot open %s: %s\n", exe, strerror(errno));
		return 1;
	}
	struct file_id id;
	int rc = fileid_from_fd(fd, &id);
	if (rc < 0) {
		fprintf(stderr, "ember: cannot read %s: %s\n", exe, strerror(-rc));
		close(fd);
		return 1;
	}
	char found[4200] = "";
	const char *source = exe;
	int dfd = fd;
	if (o->nargs > 1) {
		source = o->args[1];
		dfd = open(source, O_RDONLY | O_CLOEXEC);
		if (dfd < 0) {
			fprintf(stderr, "ember: cannot open %s: %s\n", source, strerror(errno));
			close(fd);
			return 1;
		}
	} else if (!elfsyms_has_dwarf(fd) && !o->no_dwarf) {
		int f = find_debug_file(fd, exe, found, sizeof(found));
		if (f >= 0) {
			dfd = f;
			source = found;
		} else {
			fprintf(stderr, "ember: %s has no DWARF and no debug file was found: uploading its ELF symbols only\n",
				exe);
		}
	}
	struct elfsyms_opts eo = { .dwarf = !o->no_dwarf };
	struct buf sym = { 0 }, z = { 0 }, resp = { 0 }, path = { 0 };
	const char *why = NULL;
	long n = elfsyms_extract(fd, dfd, &eo, &sym, &why);
	int ret = 1;
	if (n < 0) {
		fprintf(stderr, "ember: cannot read symbols from %s: %s\n", source, why);
		goto out;
	}
	struct symfile_view v;
	if (symfile_parse(sym.data, sym.len, &v, &why) < 0 || zstd_compress_buf(sym.data, sym.len, 9, &z) < 0) {
		fprintf(stderr, "ember: building the symbol file failed: %s\n", why ? why : "compression");
		goto out;
	}
	char hex[FILE_ID_HEX_LEN + 1];
	fileid_hex(&id, hex);
	char *copy = xstrdup(exe);
	buf_printf(&path, "/ingest/v1/symbols/%s?name=", hex);
	for (const char *c = basename(copy); *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		    *c == '.' || *c == '-' || *c == '_' || *c == '+')
			buf_putc(&path, *c);
		else
			buf_printf(&path, "%%%02X", (unsigned char)*c);
	}
	free(copy);
	if (o->project)
		buf_printf(&path, "&project=%s", o->project);
	uint8_t bid[ELF_BUILD_ID_MAX];
	int bl = elfsyms_build_id(fd, bid);
	if (bl > 0) {
		char bhex[2 * ELF_BUILD_ID_MAX + 1];
		hex_encode(bid, (size_t)bl, bhex);
		buf_printf(&path, "&build_id=%s", bhex);
	}
	if (cli_request(o, "PUT", path.data, "application/x-ember-symfile", "zstd", z.data, z.len,
			&resp) < 0)
		goto out;
	bool kept = resp.data && strstr(resp.data, "\"kept\"");
	printf("%s symbols of %s (file id %s) from %s: %u address ranges, %u frames, %s, %zu bytes%s\n",
	       kept ? "the server already had" : "uploaded", exe, hex, source, v.nrow, v.nchain,
	       (v.flags & SYMFILE_HAS_LINES) ? "with source lines and inlined functions"
					     : "ELF symbols only",
	       z.len, kept ? " (kept its own: at least as complete)" : "");
	ret = 0;
out:
	if (dfd != fd)
		close(dfd);
	close(fd);
	buf_free(&sym);
	buf_free(&z);
	buf_free(&resp);
	buf_free(&path);
	return ret;
}
