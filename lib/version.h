/* version.h - what `-version` prints for every ember binary: the release
 * (VERSION in the Makefile), the source it was built from (git describe
 * at build time, "unknown" outside a git checkout) and the GNU build ID of
 * the running binary, read from /proc/self/exe's note, so that a binary
 * can be matched with its debug file and with what a profile names. */
#ifndef EMBER_VERSION_H
#define EMBER_VERSION_H

#include <stdio.h>

/* The release, e.g. "0.1.0". */
const char *ember_version(void);

/* Prints "<program> <release> (<git describe>) build-id <hex>\n" to f; the
 * build ID reads "none" when the binary has none and "unknown" when it
 * cannot be read. */
void version_print(FILE *f, const char *program);

#endif
