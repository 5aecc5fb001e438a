/* names.h - how a function name is shown.
 *
 * Symbol files keep names as compilers wrote them. For display ember
 * demangles C++ and Rust (legacy and v0) names with libiberty's demangler
 * (without parameter lists, unless verbose), and shows glibc's internal
 * aliases by their common names: __GI___libc_write as write,
 * __memcpy_avx_unaligned_erms as memcpy, __read_nocancel as read. With
 * raw set the name is returned unchanged.
 */
#ifndef EMBER_NAMES_H
#define EMBER_NAMES_H

#include <stdbool.h>

#include "buf.h"

/* Appends the display form of name (of a function in binary, which may be
 * NULL) to out. */
void display_name(const char *name, const char *binary, bool raw, bool verbose, struct buf *out);

/* True when binary is the GNU C library (libc.so.6, libc-2.31.so, ...). */
bool is_libc(const char *binary);

#endif
