/* jwt.c - Ed25519 JSON Web Tokens (see jwt.h): OpenSSL for the keys, the
 * signatures and base64, jansson for the JSON. */
#include "jwt.h"
#include "b64url.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>

#include "util.h"

#define KEY_FILE_MAX (64 * 1024)
#define SIG_LEN 64

struct jwt_keys {
	EVP_PKEY *priv, *pub;
};

void jwt_keys_free(struct jwt_keys *k)
{
	if (!k)
		return;
	EVP_PKEY_free(k->priv);
	EVP_PKEY_free(k->pub);
	free(k);
}

/* The one header jwt_sign writes, and the only one jwt_verify takes. */
static const char HEADER_JSON[] = "{\"alg\":\"EdDSA\",\"typ\":\"JWT\"}";

/* OpenSSL's reason for the last failure on this thread (its error queue is
 * per thread), emptied so it cannot be blamed on a later call. */
static void ossl_reason(struct buf *err)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;
	buf_printf(err, " (%s)", r ? r : "no reason given");
	ERR_clear_error();
}

/* --- keys --------------------------------------------------------------- */

/* Never asks a terminal for a pass phrase: an encrypted key fails to load. */
static int no_passphrase(char *b, int size, int rw, void *u)
{
	(void)b, (void)size, (void)rw, (void)u;
	return -1;
}

static int parse_key(const char *path, const char *data, size_t len, bool private, EVP_PKEY **out,
		     struct buf *err);

/* 0 and the key, 1 when the file does not exist, -1 with err set. */
static int load_key(const char *path, bool private, EVP_PKEY **out, struct buf *err)
{
	char *data = NULL;
	size_t len = 0;
	int rc = read_file(path, KEY_FILE_MAX, &data, &len);
	if (rc == -ENOENT)
		return 1;
	if (rc < 0) {
		buf_printf(err, "cannot read %s key %s: %s", private ? "private" : "public", path,
			   rc == -EFBIG ? "larger than 64 KiB" : strerror(-rc));
		return -1;
	}
	rc = parse_key(path, data, len, private, out, err);
	free(data);
	return rc;
}

/* The key in the PEM text data (named path in messages): 0, or -1. */
static int parse_key(const char *path, const char *data, size_t len, bool private, EVP_PKEY **out,
		     struct buf *err)
{
	BIO *b = BIO_new_mem_buf(data, (int)len);
	EVP_PKEY *k = NULL;
	if (b)
		k = private ? PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL)
			    : PEM_read_bio_PUBKEY(b, NULL, no_passphrase, NULL);
	BIO_free(b);
	if (!k) {
		buf_printf(err, "%s holds no %s", path,
			   private ? "unencrypted PEM private key (\"PRIVATE KEY\")" : "PEM public key (\"PUBLIC KEY\")");
		ossl_reason(err);
		return -1;
	}
	if (EVP_PKEY_get_base_id(k) != EVP_PKEY_ED25519) {
		const char *type = OBJ_nid2sn(EVP_PKEY_get_base_id(k));
		buf_printf(err, "%s holds a %s key, not an Ed25519 one (openssl genpkey -algorithm ED25519)", path,
			   type ? type : "another kind of");
		EVP_PKEY_free(k);
		return -1;
	}
	*out = k;
	return 0;
}

/* Writes the PEM form of k to path atomically (a temporary file in the same
 * directory, mode 0600, synced, then renamed over path). 0 or -1. */
static int write_key(const char *path, EVP_PKEY *k, bool private, struct buf *err)
{
	BIO *mem = BIO_new(BIO_s_mem());
	int ok = mem && (private ? PEM_write_bio_PrivateKey(mem, k, NULL, NULL, 0, NULL, NULL)
				 : PEM_write_bio_PUBKEY(mem, k));
	if (!ok) {
		buf_printf(err, "cannot encode the new %s key", private ? "private" : "public");
		ossl_reason(err);
		BIO_free(mem);
		return -1;
	}
	char *pem;
	long pemlen = BIO_get_mem_data(mem, &pem);
	struct buf tmp = { 0 };
	buf_printf(&tmp, "%s.tmp-XXXXXX", path);
	int fd = mkostemp(tmp.data, O_CLOEXEC); /* mode 0600 */
	if (fd < 0) {
		int e = errno;
		buf_printf(err, "cannot create %s: %s", path,
			   e == ENOENT ? "its directory does not exist" : strerror(e));
		buf_free(&tmp);
		BIO_free(mem);
		return -1;
	}
	int rc = fchmod(fd, 0600);
	for (long off = 0; rc == 0 && off < pemlen;) {
		ssize_t w = write(fd, pem + off, (size_t)(pemlen - off));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			rc = -1;
		else
			off += w;
	}
	if (rc == 0)
		rc = fsync(fd);
	int e = errno;
	if (close(fd) < 0 && rc == 0) {
		rc = -1;
		e = errno;
	}
	if (rc == 0 && rename(tmp.data, path) < 0) {
		rc = -1;
		e = errno;
	}
	if (rc < 0) {
		buf_printf(err, "cannot write %s: %s", path, strerror(e));
		unlink(tmp.data);
	} else {
		/* The file is in place; a failed sync of its directory only
		 * leaves its name's durability across a crash in doubt, and a
		 * start after such a crash finds one file or none and says so. */
		(void)fsync_dir_of(path);
	}
	buf_free(&tmp);
	BIO_free(mem);
	return rc;
}

/* The pair as *out (0) when pub is priv's public key; else both freed and
 * -1, the caller saying why. */
static int keep_pair(EVP_PKEY *priv, EVP_PKEY *pub, struct jwt_keys **out)
{
	if (EVP_PKEY_eq(priv, pub) != 1) {
		ERR_clear_error();
		EVP_PKEY_free(priv);
		EVP_PKEY_free(pub);
		return -1;
	}
	struct jwt_keys *k = xcalloc(1, sizeof(*k));
	k->priv = priv;
	k->pub = pub;
	*out = k;
	return 0;
}

int jwt_keys_load(const char *private_pem, const char *public_pem, bool generate, struct jwt_keys **out,
		  struct buf *err)
{
	*out = NULL;
	if (!private_pem || !*private_pem || !public_pem || !*public_pem) {
		buf_puts(err, "the private and the public key file must both be named");
		return -1;
	}
	EVP_PKEY *priv = NULL, *pub = NULL;
	int rp = load_key(private_pem, true, &priv, err);
	if (rp < 0)
		return -1;
	int rq = load_key(public_pem, false, &pub, err);
	if (rq < 0) {
		EVP_PKEY_free(priv);
		return -1;
	}
	if (rp == 1 && rq == 1) {
		if (!generate) {
			buf_printf(err, "neither %s nor %s exists (make them with openssl genpkey -algorithm ED25519)",
				   private_pem, public_pem);
			return -1;
		}
		priv = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
		if (!priv) {
			buf_puts(err, "cannot generate an Ed25519 key pair");
			ossl_reason(err);
			return -1;
		}
		if (write_key(private_pem, priv, true, err) < 0) {
			EVP_PKEY_free(priv);
			return -1;
		}
		if (write_key(public_pem, priv, false, err) < 0) {
			/* Leave neither, so that the next start generates both
			 * again rather than finding only one. */
			unlink(private_pem);
			EVP_PKEY_free(priv);
			return -1;
		}
		EVP_PKEY_up_ref(priv);
		pub = priv;
	} else if (rp == 1 || rq == 1) {
		buf_printf(err,
			   "%s exists but %s does not: give both, or remove the other to have a new pair generated",
			   rp == 1 ? public_pem : private_pem, rp == 1 ? private_pem : public_pem);
		EVP_PKEY_free(priv);
		EVP_PKEY_free(pub);
		return -1;
	}
	if (keep_pair(priv, pub, out) < 0) {
		buf_printf(err, "the public key in %s is not the one of the private key in %s", public_pem,
			   private_pem);
		return -1;
	}
	return 0;
}

/* --- signing ------------------------------------------------------------ */

/* The length of a string claim held in an array of size n: 1 to n - 1
 * bytes, NUL-terminated. -1 otherwise. */
static int claim_len(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	return len == 0 || len == n ? -1 : (int)len;
}

int jwt_sign(const struct jwt_keys *k, const struct jwt_claims *c, struct buf *out, struct buf *err)
{
	struct {
		const char *name, *v;
		size_t n;
	} str[] = {
		{ "sub", c->sub, sizeof(c->sub) }, { "jti", c->jti, sizeof(c->jti) }, { "iss", c->iss, sizeof(c->iss) },
		{ "aud", c->aud, sizeof(c->aud) }, { "typ", c->typ, sizeof(c->typ) },
	};
	for (size_t i = 0; i < ARRAY_SIZE(str); i++)
		if (claim_len(str[i].v, str[i].n) < 0) {
			buf_printf(err, "token claim %s is empty or not terminated", str[i].name);
			return -1;
		}
	if (c->exp <= c->iat) {
		buf_puts(err, "token claims: exp must be after iat");
		return -1;
	}
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I}", "iss", c->iss, "sub", c->sub, "aud", c->aud, "typ",
			      c->typ, "jti", c->jti, "iat", (json_int_t)c->iat, "exp", (json_int_t)c->exp);
	if (!j) {
		buf_puts(err, "token claims are not valid UTF-8");
		return -1;
	}
	char *claims = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!claims) {
		buf_puts(err, "cannot encode the token's claims");
		return -1;
	}
	struct buf t = { 0 };
	b64url_encode((const uint8_t *)HEADER_JSON, sizeof(HEADER_JSON) - 1, &t);
	buf_putc(&t, '.');
	b64url_encode((const uint8_t *)claims, strlen(claims), &t);
	free(claims);
	uint8_t sig[SIG_LEN];
	size_t siglen = sizeof(sig);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, k->priv) == 1 &&
		 EVP_DigestSign(ctx, sig, &siglen, (const unsigned char *)t.data, t.len) == 1 && siglen == SIG_LEN;
	EVP_MD_CTX_free(ctx);
	if (!ok) {
		buf_puts(err, "cannot sign the token");
		ossl_reason(err);
		buf_free(&t);
		return -1;
	}
	buf_putc(&t, '.');
	b64url_encode(sig, siglen, &t);
	if (t.len > JWT_MAX_LEN) {
		buf_printf(err, "token would be longer than %d bytes", JWT_MAX_LEN);
		buf_free(&t);
		return -1;
	}
	buf_append(out, t.data, t.len);
	buf_free(&t);
	return 0;
}

/* --- verifying ---------------------------------------------------------- */

/* Decodes a part holding a JSON object; NULL when it does not. */
static json_t *decode_json(const char *s, size_t n)
{
	uint8_t raw[JWT_MAX_LEN];
	size_t len;
	if (b64url_decode(s, n, B64URL_STRICT, raw, sizeof(raw), &len) < 0)
		return NULL;
	json_error_t je;
	json_t *j = json_loadb((const char *)raw, len, JSON_REJECT_DUPLICATES, &je);
	if (j && !json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* Copies the string member key of o into dst[n]: 0, or -1 when it is
 * absent, not a string, empty, or does not fit. */
static int get_str(json_t *o, const char *key, char *dst, size_t n)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v))
		return -1;
	size_t len = json_string_length(v);
	const char *s = json_string_value(v);
	if (len == 0 || len >= n || strlen(s) != len)
		return -1;
	memcpy(dst, s, len + 1);
	return 0;
}

static int get_int(json_t *o, const char *key, int64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v))
		return -1;
	*out = (int64_t)json_integer_value(v);
	return 0;
}

static int fail(struct jwt_claims *c, struct buf *err, const char *why)
{
	memset(c, 0, sizeof(*c));
	buf_printf(err, "token: %s", why);
	return -1;
}

int jwt_verify(const struct jwt_keys *k, const char *token, size_t len, const char *iss, const char *aud,
	       const char *typ, int64_t now, struct jwt_claims *c, struct buf *err)
{
	memset(c, 0, sizeof(*c));
	if (!token || len == 0)
		return fail(c, err, "missing");
	if (len > JWT_MAX_LEN)
		return fail(c, err, "longer than 4096 bytes");
	if (!iss || !aud || !typ)
		return fail(c, err, "no issuer, audience or type to check against");
	const char *d1 = memchr(token, '.', len);
	const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - token)) : NULL;
	if (!d2 || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - token)))
		return fail(c, err, "not three dot-separated parts");
	const char *p0 = token, *p1 = d1 + 1, *p2 = d2 + 1;
	size_t n0 = (size_t)(d1 - p0), n1 = (size_t)(d2 - p1), n2 = len - (size_t)(p2 - token);

	/* The header first: the algorithm is fixed, whatever the token says. */
	json_t *h = decode_json(p0, n0);
	if (!h)
		return fail(c, err, "header is not base64url of a JSON object");
	const char *alg = json_string_value(json_object_get(h, "alg"));
	const char *htyp = json_string_value(json_object_get(h, "typ"));
	const char *hwhy = NULL;
	if (!alg || strcmp(alg, "EdDSA") != 0)
		hwhy = "alg is not EdDSA";
	else if (!htyp || strcmp(htyp, "JWT") != 0)
		hwhy = "header typ is not JWT";
	else if (json_object_size(h) != 2)
		hwhy = "header has members other than alg and typ";
	json_decref(h);
	if (hwhy)
		return fail(c, err, hwhy);

	uint8_t sig[SIG_LEN + 3];
	size_t siglen;
	if (b64url_decode(p2, n2, B64URL_STRICT, sig, sizeof(sig), &siglen) < 0 || siglen != SIG_LEN)
		return fail(c, err, "signature is not 64 bytes of base64url");
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k->pub) == 1 &&
		 EVP_DigestVerify(ctx, sig, SIG_LEN, (const unsigned char *)token, (size_t)(d2 - token)) == 1;
	EVP_MD_CTX_free(ctx);
	ERR_clear_error();
	if (!ok)
		return fail(c, err, "signature does not verify");

	/* Signed by us: now the claims. */
	json_t *j = decode_json(p1, n1);
	if (!j)
		return fail(c, err, "claims are not base64url of a JSON object");
	struct jwt_claims t = { 0 };
	int64_t nbf = INT64_MIN;
	const char *why = NULL;
	if (get_str(j, "sub", t.sub, sizeof(t.sub)) < 0 || get_str(j, "jti", t.jti, sizeof(t.jti)) < 0 ||
	    get_str(j, "iss", t.iss, sizeof(t.iss)) < 0 || get_str(j, "aud", t.aud, sizeof(t.aud)) < 0 ||
	    get_str(j, "typ", t.typ, sizeof(t.typ)) < 0 || get_int(j, "iat", &t.iat) < 0 ||
	    get_int(j, "exp", &t.exp) < 0)
		why = "claims lack sub, jti, iss, aud, typ, iat or exp, or one is malformed";
	else if (json_object_get(j, "nbf") && get_int(j, "nbf", &nbf) < 0)
		why = "claim nbf is not an integer";
	json_decref(j);
	if (why)
		return fail(c, err, why);
	int64_t late = now > INT64_MAX - JWT_LEEWAY_S ? INT64_MAX : now + JWT_LEEWAY_S;
	if (strcmp(t.iss, iss) != 0)
		return fail(c, err, "wrong issuer");
	if (strcmp(t.aud, aud) != 0)
		return fail(c, err, "wrong audience");
	if (strcmp(t.typ, typ) != 0)
		return fail(c, err, "wrong type");
	if (t.exp <= now)
		return fail(c, err, "expired");
	if (t.iat > late)
		return fail(c, err, "issued in the future");
	if (nbf > late)
		return fail(c, err, "not valid yet");
	if (t.exp <= t.iat)
		return fail(c, err, "expires before it was issued");
	*c = t;
	return 0;
}

static char *pem_of(EVP_PKEY *k, bool private)
{
	BIO *mem = BIO_new(BIO_s_mem());
	int ok = mem && (private ? PEM_write_bio_PrivateKey(mem, k, NULL, NULL, 0, NULL, NULL)
				 : PEM_write_bio_PUBKEY(mem, k));
	char *out = NULL;
	if (ok) {
		char *pem;
		long n = BIO_get_mem_data(mem, &pem);
		out = xmalloc((size_t)n + 1);
		memcpy(out, pem, (size_t)n);
		out[n] = 0;
	}
	BIO_free(mem);
	return out;
}

int jwt_keys_generate_pem(char **priv, char **pub, struct buf *err)
{
	*priv = *pub = NULL;
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	if (k) {
		*priv = pem_of(k, true);
		*pub = pem_of(k, false);
	}
	EVP_PKEY_free(k);
	if (!*priv || !*pub) {
		free_all(*priv, *pub);
		*priv = *pub = NULL;
		buf_puts(err, "cannot generate an Ed25519 key pair");
		ossl_reason(err);
		return -1;
	}
	return 0;
}

int jwt_keys_from_pem(const char *what, const char *private_pem, const char *public_pem,
		      struct jwt_keys **out, struct buf *err)
{
	*out = NULL;
	EVP_PKEY *priv = NULL, *pub = NULL;
	if (parse_key(what, private_pem, strlen(private_pem), true, &priv, err) < 0)
		return -1;
	if (parse_key(what, public_pem, strlen(public_pem), false, &pub, err) < 0) {
		EVP_PKEY_free(priv);
		return -1;
	}
	if (keep_pair(priv, pub, out) < 0) {
		buf_printf(err, "%s: the public key is not the one of the private key", what);
		return -1;
	}
	return 0;
}
