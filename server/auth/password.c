/* password.c - Argon2id password hashes through libsodium (see password.h). */
#include "password.h"

#include <pthread.h>
#include <string.h>

#include <sodium.h>

_Static_assert(PASSWORD_HASH_MAX == crypto_pwhash_STRBYTES, "PASSWORD_HASH_MAX is libsodium's string size");

/* Process-wide, written once under pthread_once and read-only after:
 * whether libsodium started, and the hash a login for an unknown user is
 * checked against (the same cost as a real one). */
static pthread_once_t init_once = PTHREAD_ONCE_INIT, dummy_once = PTHREAD_ONCE_INIT;
static bool sodium_ok;
static char dummy[PASSWORD_HASH_MAX];
static bool dummy_ok;

static void init(void)
{
	sodium_ok = sodium_init() >= 0;
}

static bool ready(void)
{
	return pthread_once(&init_once, init) == 0 && sodium_ok;
}

static int hash(const char *pw, size_t len, char out[PASSWORD_HASH_MAX])
{
	return crypto_pwhash_str_alg(out, pw, len, crypto_pwhash_OPSLIMIT_INTERACTIVE,
				     crypto_pwhash_MEMLIMIT_INTERACTIVE, crypto_pwhash_ALG_ARGON2ID13);
}

int password_hash(const char *pw, char out[PASSWORD_HASH_MAX], struct buf *err)
{
	size_t len = pw ? strnlen(pw, PASSWORD_MAX_LEN + 1) : 0;
	if (len == 0) {
		buf_puts(err, "password is empty");
		return -1;
	}
	if (len > PASSWORD_MAX_LEN) {
		buf_printf(err, "password is longer than %d bytes", PASSWORD_MAX_LEN);
		return -1;
	}
	if (!ready()) {
		buf_puts(err, "libsodium did not start");
		return -1;
	}
	if (hash(pw, len, out) != 0) {
		buf_puts(err, "cannot hash the password (out of memory?)");
		return -1;
	}
	return 0;
}

bool password_verify(const char *hash_str, const char *pw)
{
	if (!hash_str || !pw || !ready())
		return false;
	size_t hlen = strnlen(hash_str, PASSWORD_HASH_MAX);
	size_t len = strnlen(pw, PASSWORD_MAX_LEN + 1);
	/* Only Argon2id hashes: a stored hash of another kind is malformed. */
	if (hlen == PASSWORD_HASH_MAX || len == 0 || len > PASSWORD_MAX_LEN ||
	    strncmp(hash_str, crypto_pwhash_argon2id_STRPREFIX, strlen(crypto_pwhash_argon2id_STRPREFIX)) != 0)
		return false;
	return crypto_pwhash_str_verify(hash_str, pw, len) == 0;
}

static void make_dummy(void)
{
	unsigned char rnd[24];
	char pw[2 * sizeof(rnd) + 1];
	randombytes_buf(rnd, sizeof(rnd));
	sodium_bin2hex(pw, sizeof(pw), rnd, sizeof(rnd));
	dummy_ok = hash(pw, strlen(pw), dummy) == 0;
	sodium_memzero(pw, sizeof(pw));
}

const char *password_dummy_hash(void)
{
	if (!ready() || pthread_once(&dummy_once, make_dummy) != 0 || !dummy_ok)
		return NULL;
	return dummy;
}
