/* util.h - small helpers shared by every ember binary.
 *
 * Allocation: the x* functions never return NULL. Running out of memory
 * in ember is treated like git and redis treat it: the process reports it
 * and aborts, because every caller would otherwise need a recovery path
 * it cannot meaningfully take. Bounding *how much* we allocate from
 * untrusted input is the caller's job and is done before allocating.
 */
#ifndef EMBER_UTIL_H
#define EMBER_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <pthread.h>
#include <time.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* A binary search over n entries for which pred (an expression of the
 * index named i) holds on a first run and then never again, as "entry i
 * starts at or below x" does on entries sorted by their start: the number
 * of entries it holds for (0 to n; the last is that minus 1). pred is
 * evaluated about log2(n) times. */
#define PARTITION_POINT(n, i, pred)                       \
	({                                                \
		size_t pp_lo_ = 0, pp_hi_ = (n);          \
		while (pp_lo_ < pp_hi_) {                 \
			size_t i = pp_lo_ + (pp_hi_ - pp_lo_) / 2; \
			if (pred)                         \
				pp_lo_ = i + 1;           \
			else                              \
				pp_hi_ = i;               \
		}                                         \
		pp_lo_;                                   \
	})

/* a / b and a rounded down to a multiple of b, toward minus infinity
 * (times before 1970 included); b > 0. */
static inline int64_t floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b < 0);
}

static inline int64_t floor_to(int64_t a, int64_t b)
{
	return floor_div(a, b) * b;
}

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
/* free_all(a, b, ...): frees each of the pointers given, in order (any
 * may be NULL). The arguments are all read before the first is freed, so
 * an owner may come last after its members: free_all(s->a, s->b, s). */
void free_each(void *const *p, size_t n);
/* Frees the n pointers of array v, then v itself (v may be NULL when n is 0). */
void free_array(void *v, size_t n);
/* Overwrites a secret string (a password, a key) with zeros, then frees it;
 * NULL is nothing. */
void free_secret(char *s);
#define free_all(...)                                                              \
	free_each((void *const[]){ __VA_ARGS__ },                                  \
		  sizeof((void *const[]){ __VA_ARGS__ }) / sizeof(void *))
/* Grows *p (an array of elem-sized items with capacity *cap) so that it
 * holds at least need items. Doubles the capacity. */
void xgrow(void **p, size_t *cap, size_t need, size_t elem);
/* The same for two parallel arrays sharing the capacity *cap: *p of elem
 * bytes an item and *q of qelem bytes. */
void xgrow2(void **p, void **q, size_t *cap, size_t need, size_t elem, size_t qelem);
/* Tables that grow large for hours (a server session's entries): one
 * of n items of elem bytes grows to new_n items. From 1 MiB on a table
 * is mapped on its own and grows by mremap, which moves its pages
 * instead of copying them into fresh ones (a copy faults in every page
 * again: in the store bench, page faults were a fifth of the ingest
 * threads' time, most of them such copies). Below that it is malloc'ed.
 * Free it with table_free and the same n. */
void *table_grow(void *p, size_t n, size_t new_n, size_t elem);
/* The same, with items n..new_n zero. A mapped table's new pages are
 * the kernel's zeros, faulted in for writing as the table grows (see
 * prefault_write): such tables are read before they are written. */
void *table_grow_zero(void *p, size_t n, size_t new_n, size_t elem);
void table_free(void *p, size_t n, size_t elem);
/* Faults in the whole pages of [p, p + len) for writing, now, without
 * changing their bytes (MADV_POPULATE_WRITE). For memory that will be
 * read before it is written (hash slots, marks checked then set): a page
 * first read is mapped to the kernel's shared zero page, and the write
 * after it must copy it and flush that mapping from every core running
 * the process (an interrupt to each), which cost the store bench's ingest
 * threads about a seventh of their time. Best effort: on a kernel without
 * it, or short of memory, the pages are faulted in on use as before. */
void prefault_write(void *p, size_t len);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Wall-clock time in Unix milliseconds / monotonic nanoseconds. */
int64_t now_unix_ms(void);
uint64_t now_mono_ns(void);
/* CPU time the calling thread has used, in nanoseconds. */
uint64_t now_thread_cpu_ns(void);

/* Timed waits of a thread that sleeps between rounds and is woken to stop:
 * cond_init_monotonic initialises c so that pthread_cond_timedwait reads
 * its deadline on CLOCK_MONOTONIC (the wall clock may jump); deadline_in_ms
 * sets ts to that clock's now plus ms; timespec_add_ns moves ts on by ns,
 * tv_nsec kept below one second. */
void cond_init_monotonic(pthread_cond_t *c);
void deadline_in_ms(struct timespec *ts, uint64_t ms);
void timespec_add_ns(struct timespec *ts, uint64_t ns);
/* Stops such a thread: sets *stopping with mu held, wakes every waiter of
 * cond and joins the thread (which returns once it sees *stopping). */
void thread_stop_join(pthread_t thread, pthread_mutex_t *mu, pthread_cond_t *cond, bool *stopping);

/* qsort's comparisons of two uint64_t, of two uint32_t, ascending. */
int cmp_u64(const void *a, const void *b);
int cmp_u32(const void *a, const void *b);

/* Lower-case hex of n bytes into out (2n+1 bytes, NUL-terminated). */
void hex_encode(const uint8_t *in, size_t n, char *out);
/* Parses s[0..n) (1 to 16 hex digits, nothing else) as a number.
 * Returns 0 or -1. */
int parse_hex_u64(const char *s, size_t n, uint64_t *out);
/* Parses exactly 2n hex digits into out. Returns 0 or -1. */
int hex_decode(const char *in, size_t inlen, uint8_t *out, size_t n);

/* Reads a whole file of at most max bytes. Returns 0 and a malloc'ed,
 * NUL-terminated buffer, or -errno (-EFBIG when larger than max). */
int read_file(const char *path, size_t max, char **out, size_t *len);
/* Writes all n bytes to fd (retrying short writes and EINTR): 0, or -1
 * with errno set (EIO when write wrote nothing). */
int write_exact(int fd, const void *p, size_t n);
/* fsync of the directory holding path (its entry's creation or removal
 * made durable): 0, or -1 with errno set. */
int fsync_dir_of(const char *path);
/* Reads exactly n bytes at offset off: 0, or -1 with errno set (EIO when
 * the file ends first). */
int pread_exact(int fd, void *p, size_t n, uint64_t off);
/* Writes all n bytes at offset off (retrying short writes and EINTR): 0,
 * or -1 with errno set (EIO when pwrite wrote nothing). */
int pwrite_exact(int fd, const void *p, size_t n, uint64_t off);
/* A file with no name in directory dir, open for reading and writing, gone
 * when closed (O_TMPFILE; on a file system without it, a file created and
 * unlinked at once). Returns the descriptor, or -1 with errno set. */
int unnamed_file(const char *dir);

/* Parses a Go-style duration ("250ms", "5s", "1m", "2m30s", "1h", "14d"):
 * returns 0 and milliseconds, or -1. */
int parse_duration_ms(const char *s, int64_t *out_ms);

/* Strict unsigned / signed / boolean parsing of a whole string. */
int parse_u64(const char *s, uint64_t *out);
int parse_bool(const char *s, bool *out);

/* Fills buf with a random RFC 4122 version 4 UUID string (37 bytes). */
void uuid_v4(char out[37]);
/* True when s is a canonical lower- or upper-case UUID. */
bool uuid_valid(const char *s);

/* True when s[0..n) has no ASCII control character (below 0x20, or 0x7f):
 * what a name or value from outside may hold before ember logs or stores it. */
static inline bool str_printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* Replaces each control character of s[0..n) (what str_printable refuses)
 * with '?', in place: a name from outside made fit to send. */
static inline void str_make_printable(char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!str_printable(s + i, 1))
			s[i] = '?';
}

/* Asks for the cache line holding p ahead of its use; never faults. */
static inline void prefetch(const void *p)
{
	__builtin_prefetch(p);
}

/* qsort that accepts an empty (possibly NULL) array. */
static inline void xqsort(void *base, size_t n, size_t size,
			  int (*cmp)(const void *, const void *))
{
	if (n > 1)
		qsort(base, n, size, cmp);
}

#endif
