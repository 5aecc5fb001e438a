/* pidlock.h - one process at a time: an exclusive flock(2) on a file that
 * names the holder's pid, so that a second ember-server on the same data
 * directory, or a second ember-agent on the same host, refuses to start
 * and can say who holds it.
 *
 * The lock belongs to the open file description: it is held until the
 * descriptor is closed or the process exits (a crash releases it; a
 * stale file left behind takes nothing to clear). The pid written is a
 * hint for messages, never trusted for anything else.
 */
#ifndef EMBER_PIDLOCK_H
#define EMBER_PIDLOCK_H

#include "buf.h"

/* What pidlock_take returns instead of a descriptor. */
enum {
	PIDLOCK_FAILED = -1, /* with a message in err */
	PIDLOCK_HELD = -2,   /* another process holds it */
};

/* Opens (creating, 0644) path, takes the lock without waiting and writes
 * this process's pid into it. Returns the descriptor (close-on-exec; keep
 * it open while the lock is needed). When another process holds it:
 * PIDLOCK_HELD, with *holder its pid as the file names it (0 when
 * unreadable). Other failures: PIDLOCK_FAILED with a message in err. */
int pidlock_take(const char *path, long *holder, struct buf *err);
/* Closes fd (may be -1): the lock is released. */
void pidlock_release(int fd);

#endif
