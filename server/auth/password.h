/* password.h - password hashes: Argon2id through libsodium's
 * crypto_pwhash_str (the encoded form carries its salt and parameters, so
 * a stored hash stays verifiable after the defaults change).
 *
 * Cost: OPSLIMIT_INTERACTIVE / MEMLIMIT_INTERACTIVE (64 MiB, about 0.1 s on
 * one core), the level libsodium advises for logins. Passwords are 1 to
 * PASSWORD_MAX_LEN bytes. password_verify takes the same time whether the
 * user exists or not when given password_dummy_hash() for a missing user,
 * so a login does not tell which emails exist.
 *
 * Contract: thread-safe; sodium_init is called once inside (idempotent). */
#ifndef EMBER_SERVER_AUTH_PASSWORD_H
#define EMBER_SERVER_AUTH_PASSWORD_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

#define PASSWORD_MAX_LEN 1024
#define PASSWORD_HASH_MAX 128 /* crypto_pwhash_STRBYTES */

/* 0 with the encoded hash in out; -1 with err set (empty or too long). */
int password_hash(const char *pw, char out[PASSWORD_HASH_MAX], struct buf *err);
/* True when pw matches hash; false for any malformed hash, a hash that
 * is not Argon2id, or a pw that is empty or too long. */
bool password_verify(const char *hash, const char *pw);
/* A valid hash of a random password, made once (the first call takes a
 * hash's time): verify against it when the user is unknown. NULL only
 * when libsodium cannot start or hash (password_verify(NULL, pw) is
 * false). */
const char *password_dummy_hash(void);

#endif
