/* sort.h - a radix sort for the store's hot paths.
 *
 * Writing a block sorts every series' rows by (time, stack) and its
 * distinct stacks; with qsort and a comparison callback that was a fifth
 * of the store thread's time in the hour bench. This sorts in linear time
 * (least significant byte first, 8 bits a pass; a pass whose byte is the
 * same in every value is skipped, so ids below 2^24 take at most three
 * passes), has no worst case an input can provoke, and is stable.
 * Short arrays are insertion-sorted.
 *
 * tmp: scratch of n values, owned by the caller.
 */
#ifndef EMBER_SORT_H
#define EMBER_SORT_H

#include <stddef.h>
#include <stdint.h>

/* Sorts v[0..n) by each value's high 32 bits, ascending, keeping the
 * order of values with equal high halves (the low half is a payload,
 * typically an index; ids alone are sorted as id << 32). */
void sort_u64_by_high(uint64_t *v, size_t n, uint64_t *tmp);

#endif
