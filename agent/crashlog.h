/* crashlog.h - why the previous run of the agent ended, told by the next.
 *
 * The agent must never die on what a process does; if it does, its
 * systemd unit (deploy/systemd/ember-agent.service) starts it again, and
 * the new run logs why the last one ended, from two notes left in the
 * state directory (-state-dir, default /run/ember):
 *   - agent.crash: written by the agent itself from a handler of the fatal
 *     signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT): the signal, the
 *     faulting address, the thread, and a backtrace. The handler then
 *     hands the signal to the previous handler (the default action: the
 *     process dies of it and systemd sees the signal; under
 *     AddressSanitizer, ASan's report);
 *   - agent.exit: written by the unit's ExecStopPost= from systemd's
 *     SERVICE_RESULT, EXIT_CODE and EXIT_STATUS, so that an end the agent
 *     cannot see (SIGKILL, the OOM killer, a watchdog) is told too.
 * Each note is logged once by the next start (crashlog_report_previous)
 * and then set aside (agent.crash.prev) or removed (agent.exit).
 *
 * The handler's paths live in static storage: a signal handler can reach
 * nothing else (see crashlog.c). One agent per process, installed once.
 */
#ifndef EMBER_AGENT_CRASHLOG_H
#define EMBER_AGENT_CRASHLOG_H

#include "buf.h"

#define CRASHLOG_FILE "agent.crash"
#define CRASHLOG_PREV "agent.crash.prev"
#define CRASHLOG_EXIT "agent.exit"

/* Logs (warning level) what the notes in dir say about how the previous
 * run ended, then sets them aside. Returns how many notes it found. */
int crashlog_report_previous(const char *dir);

/* Creates dir (mode 0700) when missing and installs the handler of the
 * fatal signals, which writes dir/agent.crash. Returns 0, or -1 with a
 * message in err (the agent goes on without it). */
int crashlog_install(const char *dir, struct buf *err);

#endif
