/* gopclntab.h - function names and ranges from a Go binary's .gopclntab.
 *
 * Go keeps its own symbol table (the pc-line table) even in binaries
 * stripped with -ldflags=-s, because the runtime needs it for stack traces;
 * so ember names Go frames without any upload. Formats of Go 1.18 and later
 * (magic 0xfffffff0 / 0xfffffff1) are read; every offset and count is
 * checked against the section size.
 */
#ifndef EMBER_GOPCLNTAB_H
#define EMBER_GOPCLNTAB_H

#include <stddef.h>
#include <stdint.h>

/* Calls fn for each function: [lo, hi) virtual addresses and its name (not
 * necessarily NUL-terminated beyond name_len). text_vaddr is the address
 * of the .text section, which function offsets are relative to when the
 * table does not say (recent Go linkers leave its textStart zero). Returns
 * the number of functions, or -1 when data is not a supported .gopclntab. */
typedef void (*gopclntab_fn)(void *ctx, uint64_t lo, uint64_t hi, const char *name,
			     size_t name_len);
long gopclntab_functions(const uint8_t *data, size_t len, uint64_t text_vaddr, gopclntab_fn fn,
			 void *ctx);

/* Calls fn for each address range of each function with the stack-pointer
 * delta Go's pcsp table records there: how many bytes the function has
 * pushed or allocated below the return address. name is the function's.
 * Returns the number of ranges, or -1 when data is not supported. */
typedef void (*gopclntab_sp_fn)(void *ctx, uint64_t lo, uint64_t hi, int32_t sp_delta,
				const char *name, size_t name_len);
long gopclntab_sp_deltas(const uint8_t *data, size_t len, uint64_t text_vaddr, gopclntab_sp_fn fn,
			 void *ctx);

#endif
