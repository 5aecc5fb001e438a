/* identity_cmd.h - `ember identity`: the administrator's way in when no one can
 * sign in (a lost admin password, a user without the roles they need, a
 * misconfigured sign-in), run on the server's host without credentials.
 *
 *   ember identity user create --email E [--password P] [--given-name N] [--family-name N]
 *   ember identity user list [--query Q] [--include-roles] [--page N] [--page-size N]
 *   ember identity user reset-password --user-id ID [--password P]
 *   ember identity roles list [--user-id ID] [--name NAME ...]
 *   ember identity roles set --user-id ID [--admin] [--role NAME ...]
 *   (each also takes --data-dir DIR)
 *
 * It opens the identity store of the server's data directory itself
 * (DIR/identity.db, server/auth/identity.h): --data-dir, else
 * $EMBER_DATA_DIR, else $EMBER_SERVER_DATA_DIR (the server's own variable),
 * else ./data (the server's default). It never creates a store: a missing
 * DIR/identity.db is an error that says so. SQLite's locking and WAL make
 * this safe beside a running server, which sees each change on its next
 * request. Reaching the file is the credential: whoever may read and
 * write the server's data directory may administer its users.
 *
 * A password reset also ends the user's refresh sessions (whoever signed
 * in with the old password is out once their access token expires).
 *
 * Without --password the password is read from standard input: a prompt
 * with echo off (and a confirmation) on a terminal, else the first line of
 * the pipe. Every action, refused ones included, is written to the audit
 * log with actor "cli" and origin "cli".
 *
 * Output: "User <id>" / "Role <id>" records of "key: value" lines (times
 * in RFC 3339 UTC, milliseconds, "+00:00"), a blank line between records,
 * and a footer for lists ("Page 0: 1 users (1 total, 1 pages)", "N roles").
 * Exit status: 0 done, 1 refused or failed ("Error: ..." on stderr, nothing
 * changed), 2 a usage mistake. */
#ifndef EMBER_CLI_IDENTITY_H
#define EMBER_CLI_IDENTITY_H

#include <stdint.h>
#include <stdio.h>

/* Runs `ember identity ARGS...` (argv[0] is the first word after
 * "identity"); returns the exit status. */
int cmd_identity(int argc, char **argv);

/* Writes ms (Unix milliseconds) as RFC 3339 UTC with milliseconds and a
 * "+00:00" offset ("2026-08-24T15:23:05.433+00:00") into out. */
void cli_format_time(int64_t ms, char out[40]);

/* Prints the usage of `ember identity` to f. */
void cmd_identity_usage(FILE *f);

#endif
