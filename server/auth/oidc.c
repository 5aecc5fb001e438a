/* oidc.c - the OpenID Connect relying party (see oidc.h): libcurl for the
 * provider's endpoints, jansson for its JSON, OpenSSL for randomness,
 * hashes, the flow cookie's HMAC and the ID token's signature. */
#include "oidc.h"
#include "b64url.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "httpc.h"
#include "log.h"
#include "util.h"

#define MAX_URL 2048
#define MAX_EXTRA 32
#define MAX_SCOPES_LEN 1024
#define MAX_KID 128
#define SECRET_BYTES 32
#define B64_SECRET 43 /* 32 bytes in base64url */

enum key_type { KEY_RS256, KEY_ES256, KEY_EDDSA };
static const char *const key_alg[] = { "RS256", "ES256", "EdDSA" };

struct jwk {
	char kid[MAX_KID + 1];
	enum key_type type;
	EVP_PKEY *pkey;
};

struct oidc {
	char *issuer, *client_id, *client_secret, *redirect_uri, *redirect_origin, *scopes;
	char *extra_keys[MAX_EXTRA], *extra_values[MAX_EXTRA];
	size_t nextra;
	bool loopback; /* the issuer is http on a loopback address */
	long timeout_ms;
	/* Signs the flow cookies; made at start, never changes (a sign-in
	 * lasts OIDC_FLOW_TTL_S, so losing it on restart costs little). */
	uint8_t flow_key[32];

	pthread_mutex_t mu; /* guards the rest: handlers run on several threads */
	bool discovered;
	char *authorization_endpoint, *token_endpoint, *jwks_uri;
	bool secret_post;
	struct jwk *keys;
	size_t nkeys;
	uint64_t jwks_fetches;
	int64_t jwks_tat; /* refetch_allowed's theoretical arrival time (Unix s) */
};

/* --- small helpers ---------------------------------------------------------- */

/* Decodes base64url (padding tolerated, as some providers pad JWK
 * members) of at most max decoded bytes into a new allocation. 0 or -1. */
static int b64url_dec(const char *s, size_t n, size_t max, uint8_t **out, size_t *outlen)
{
	*out = xmalloc(max + 1);
	if (b64url_decode(s, n, B64URL_PADDED, *out, max, outlen) == 0)
		return 0;
	free(*out);
	*out = NULL;
	return -1;
}

static void random_b64(struct buf *out)
{
	uint8_t raw[SECRET_BYTES];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		abort(); /* no CSPRNG: nothing safe to hand out */
	b64url_encode(raw, sizeof(raw), out);
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x21 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

/* http or https URL of at most MAX_URL bytes: 1 http, 2 https, 0 neither. */
static int url_scheme(const char *u)
{
	if (!u || strlen(u) > MAX_URL || !printable(u))
		return 0;
	if (!strncmp(u, "https://", 8) && u[8] && u[8] != '/')
		return 2;
	if (!strncmp(u, "http://", 7) && u[7] && u[7] != '/')
		return 1;
	return 0;
}

/* Whether an http URL's host is a loopback address. */
static bool url_loopback(const char *u)
{
	const char *h = strstr(u, "://");
	if (!h)
		return false;
	h += 3;
	static const char *const lo[] = { "127.0.0.1", "localhost", "[::1]" };
	for (size_t i = 0; i < sizeof(lo) / sizeof(lo[0]); i++) {
		size_t n = strlen(lo[i]);
		if (!strncmp(h, lo[i], n) && (h[n] == ':' || h[n] == '/' || !h[n]))
			return true;
	}
	return false;
}

/* An endpoint the provider names: https, or http when the issuer is. */
static bool endpoint_ok(const struct oidc *o, const char *u)
{
	int s = url_scheme(u);
	return s == 2 || (s == 1 && o->loopback && url_loopback(u));
}

/* --- settings --------------------------------------------------------------- */

static int parse_extra(struct oidc *o, const char *s, struct buf *err)
{
	static const char *const reserved[] = { "response_type", "client_id", "redirect_uri", "scope",
						"state", "nonce", "code_challenge", "code_challenge_method" };
	if (!s || !*s)
		return 0;
	if (strlen(s) > 4096) {
		buf_puts(err, "--oidc-extra-params: longer than 4096 bytes");
		return -1;
	}
	char *copy = xstrdup(s), *save = NULL;
	int rc = 0;
	for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		while (*p == ' ')
			p++;
		char *eq = strchr(p, '=');
		if (!*p)
			continue;
		if (!eq || eq == p || o->nextra == MAX_EXTRA) {
			buf_printf(err, "--oidc-extra-params: \"%.64s\": expected key=value (at most %d)", p,
				   MAX_EXTRA);
			rc = -1;
			break;
		}
		*eq = 0;
		for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
			if (!strcmp(p, reserved[i])) {
				buf_printf(err, "--oidc-extra-params: %s is set by ember itself", p);
				rc = -1;
			}
		if (rc < 0)
			break;
		o->extra_keys[o->nextra] = xstrdup(p);
		o->extra_values[o->nextra++] = xstrdup(eq + 1);
	}
	free(copy);
	return rc;
}

int oidc_new(const struct oidc_config *c, struct oidc **out, struct buf *err)
{
	*out = NULL;
	int is = url_scheme(c->issuer);
	if (!is) {
		buf_puts(err, "--oidc-issuer: expected the provider's https:// URL (e.g. https://accounts.google.com)");
		return -1;
	}
	if (is == 1 && !url_loopback(c->issuer)) {
		buf_puts(err, "--oidc-issuer: must be https:// (http:// only for a provider on a loopback address)");
		return -1;
	}
	if (!c->client_id || !*c->client_id || strlen(c->client_id) > 512 || !printable(c->client_id)) {
		buf_puts(err, "--oidc-client-id: expected the client id the provider gave (at most 512 bytes)");
		return -1;
	}
	if (!c->client_secret || !*c->client_secret || strlen(c->client_secret) > 1024) {
		buf_puts(err, "--oidc-client-secret-file: expected a file whose first line is the client secret");
		return -1;
	}
	size_t cl = strlen(OIDC_CALLBACK_PATH);
	const char *ru = c->redirect_uri;
	if (!url_scheme(ru) || strlen(ru) < cl || strcmp(ru + strlen(ru) - cl, OIDC_CALLBACK_PATH)) {
		buf_puts(err, "--oidc-redirect-uri: expected this server's URL ending in " OIDC_CALLBACK_PATH
			      " (e.g. https://ember.example.com" OIDC_CALLBACK_PATH "), as registered at the provider");
		return -1;
	}
	const char *scopes = c->scopes && *c->scopes ? c->scopes : OIDC_DEFAULT_SCOPES;
	if (strlen(scopes) > MAX_SCOPES_LEN) {
		buf_puts(err, "--oidc-scopes: longer than 1024 bytes");
		return -1;
	}
	struct oidc *o = xcalloc(1, sizeof(*o));
	pthread_mutex_init(&o->mu, NULL);
	/* Scopes: "a b" or "a,b" -> "a b"; openid is required. */
	struct buf sc = { 0 };
	bool openid = false;
	char *copy = xstrdup(scopes), *save = NULL;
	for (char *p = strtok_r(copy, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
		if (!printable(p)) {
			buf_printf(err, "--oidc-scopes: \"%.64s\" is not a scope", p);
			free(copy);
			buf_free(&sc);
			oidc_free(o);
			return -1;
		}
		openid |= !strcmp(p, "openid");
		buf_printf(&sc, "%s%s", sc.len ? " " : "", p);
	}
	free(copy);
	if (!openid) {
		buf_puts(err, "--oidc-scopes: must hold openid (the default is \"" OIDC_DEFAULT_SCOPES "\")");
		buf_free(&sc);
		oidc_free(o);
		return -1;
	}
	o->scopes = sc.data;
	o->issuer = xstrdup(c->issuer);
	o->client_id = xstrdup(c->client_id);
	o->client_secret = xstrdup(c->client_secret);
	o->redirect_uri = xstrdup(ru);
	const char *h = strstr(ru, "://") + 3;
	o->redirect_origin = xstrndup(ru, (size_t)(h - ru) + strcspn(h, "/?#"));
	o->loopback = is == 1;
	o->timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : 10000;
	if (RAND_bytes(o->flow_key, sizeof(o->flow_key)) != 1)
		abort();
	if (parse_extra(o, c->extra_params, err) < 0) {
		oidc_free(o);
		return -1;
	}
	*out = o;
	return 0;
}

static void free_keys(struct jwk *k, size_t n)
{
	for (size_t i = 0; i < n; i++)
		EVP_PKEY_free(k[i].pkey);
	free(k);
}

void oidc_free(struct oidc *o)
{
	if (!o)
		return;
	free_secret(o->client_secret);
	free_all(o->issuer, o->client_id, o->redirect_uri, o->redirect_origin, o->scopes);
	for (size_t i = 0; i < o->nextra; i++) {
		free_all(o->extra_keys[i], o->extra_values[i]);
	}
	free_all(o->authorization_endpoint, o->token_endpoint, o->jwks_uri);
	free_keys(o->keys, o->nkeys);
	OPENSSL_cleanse(o->flow_key, sizeof(o->flow_key));
	pthread_mutex_destroy(&o->mu);
	free(o);
}

const char *oidc_redirect_uri(const struct oidc *o)
{
	return o->redirect_origin;
}

uint64_t oidc_jwks_fetches(struct oidc *o)
{
	pthread_mutex_lock(&o->mu);
	uint64_t n = o->jwks_fetches;
	pthread_mutex_unlock(&o->mu);
	return n;
}

/* --- HTTP ------------------------------------------------------------------- */

/* GET url, or POST form (with the client's credentials as HTTP Basic when
 * basic). The status, or -1 with err set; the body in resp. */
static long fetch(const struct oidc *o, const char *url, const char *form, bool basic,
		  struct buf *resp, struct buf *err)
{
	CURL *c = curl_easy_init();
	if (!c) {
		buf_puts(err, "libcurl could not start");
		return -1;
	}
	char ebuf[CURL_ERROR_SIZE] = "";
	struct http_sink s = { resp, OIDC_MAX_DOC, false };
	struct curl_slist *hdr = curl_slist_append(NULL, "Accept: application/json");
	char *user = NULL, *pass = NULL;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, o->timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, o->timeout_ms);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)OIDC_MAX_DOC);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "ember-server");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
	if (form) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, form);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(form));
	}
	if (basic) {
		/* RFC 6749 §2.3.1: both form-encoded, then Basic. */
		user = curl_easy_escape(c, o->client_id, 0);
		pass = curl_easy_escape(c, o->client_secret, 0);
		curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(c, CURLOPT_USERNAME, user);
		curl_easy_setopt(c, CURLOPT_PASSWORD, pass);
	}
	CURLcode rc = curl_easy_perform(c);
	long status = -1;
	if (s.over)
		buf_printf(err, "%s: the answer is larger than %d KiB", url, OIDC_MAX_DOC / 1024);
	else if (rc != CURLE_OK)
		buf_printf(err, "%s: %s", url, ebuf[0] ? ebuf : curl_easy_strerror(rc));
	else
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (pass) {
		OPENSSL_cleanse(pass, strlen(pass));
		curl_free(pass);
	}
	curl_free(user);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	return status;
}

static json_t *parse_json(const char *what, const char *data, size_t len, struct buf *err)
{
	json_error_t je;
	json_t *d = json_loadb(data ? data : "", len, JSON_REJECT_DUPLICATES, &je);
	if (!d || !json_is_object(d)) {
		buf_printf(err, "%s is not a JSON object%s%s", what, d ? "" : ": ", d ? "" : je.text);
		json_decref(d);
		return NULL;
	}
	return d;
}

/* --- keys ------------------------------------------------------------------- */

static BIGNUM *member_bn(json_t *k, const char *name, size_t max)
{
	const char *s = json_string_value(json_object_get(k, name));
	uint8_t *raw;
	size_t n;
	if (!s || b64url_dec(s, strlen(s), max, &raw, &n) < 0)
		return NULL;
	BIGNUM *b = n ? BN_bin2bn(raw, (int)n, NULL) : NULL;
	free(raw);
	return b;
}

static EVP_PKEY *from_params(const char *type, OSSL_PARAM_BLD *bld)
{
	EVP_PKEY *pk = NULL;
	OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
	if (!params || !ctx || EVP_PKEY_fromdata_init(ctx) <= 0 ||
	    EVP_PKEY_fromdata(ctx, &pk, EVP_PKEY_PUBLIC_KEY, params) <= 0)
		pk = NULL;
	EVP_PKEY_CTX_free(ctx);
	OSSL_PARAM_free(params);
	return pk;
}

/* One JWK as a key: 0, 1 when it is not a signing key ember can use. */
static int parse_jwk(json_t *k, struct jwk *out)
{
	const char *kty = json_string_value(json_object_get(k, "kty"));
	const char *use = json_string_value(json_object_get(k, "use"));
	const char *alg = json_string_value(json_object_get(k, "alg"));
	const char *kid = json_string_value(json_object_get(k, "kid"));
	const char *crv = json_string_value(json_object_get(k, "crv"));
	if (!kty || (use && strcmp(use, "sig")) || (kid && strlen(kid) > MAX_KID))
		return 1;
	memset(out, 0, sizeof(*out));
	snprintf(out->kid, sizeof(out->kid), "%s", kid ? kid : "");
	OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
	if (!bld)
		return 1;
	if (!strcmp(kty, "RSA")) {
		out->type = KEY_RS256;
		BIGNUM *n = member_bn(k, "n", 1024), *e = member_bn(k, "e", 8);
		if (n && e && BN_num_bits(n) >= 2048 && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) &&
		    OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e))
			out->pkey = from_params("RSA", bld);
		BN_free(n);
		BN_free(e);
	} else if (!strcmp(kty, "EC") && crv && !strcmp(crv, "P-256")) {
		out->type = KEY_ES256;
		const char *xs = json_string_value(json_object_get(k, "x"));
		const char *ys = json_string_value(json_object_get(k, "y"));
		uint8_t *x = NULL, *y = NULL, pt[65];
		size_t xn = 0, yn = 0;
		if (xs && ys && b64url_dec(xs, strlen(xs), 32, &x, &xn) == 0 &&
		    b64url_dec(ys, strlen(ys), 32, &y, &yn) == 0 && xn == 32 && yn == 32) {
			pt[0] = 4;
			memcpy(pt + 1, x, 32);
			memcpy(pt + 33, y, 32);
			if (OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) &&
			    OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pt, sizeof(pt)))
				out->pkey = from_params("EC", bld);
			if (out->pkey) { /* the point must be on the curve */
				EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, out->pkey, NULL);
				if (!ctx || EVP_PKEY_public_check(ctx) != 1) {
					EVP_PKEY_free(out->pkey);
					out->pkey = NULL;
				}
				EVP_PKEY_CTX_free(ctx);
			}
		}
		free_all(x, y);
	} else if (!strcmp(kty, "OKP") && crv && !strcmp(crv, "Ed25519")) {
		out->type = KEY_EDDSA;
		const char *xs = json_string_value(json_object_get(k, "x"));
		uint8_t *x = NULL;
		size_t xn = 0;
		if (xs && b64url_dec(xs, strlen(xs), 32, &x, &xn) == 0 && xn == 32)
			out->pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, x, 32);
		free(x);
	}
	OSSL_PARAM_BLD_free(bld);
	ERR_clear_error();
	if (!out->pkey)
		return 1;
	if (alg && strcmp(alg, key_alg[out->type])) { /* e.g. an RSA key for PS256 only */
		EVP_PKEY_free(out->pkey);
		out->pkey = NULL;
		return 1;
	}
	return 0;
}

/* Replaces the keys with those of a JWKS document. Called locked. */
static int load_jwks(struct oidc *o, const char *data, size_t len, struct buf *err)
{
	json_t *d = parse_json("the provider's JWKS", data, len, err);
	if (!d)
		return -1;
	json_t *arr = json_object_get(d, "keys");
	if (!json_is_array(arr) || json_array_size(arr) > OIDC_MAX_KEYS) {
		buf_printf(err, "the provider's JWKS holds no \"keys\" array of at most %d keys", OIDC_MAX_KEYS);
		json_decref(d);
		return -1;
	}
	struct jwk *keys = xcalloc(json_array_size(arr) + 1, sizeof(*keys));
	size_t n = 0, i;
	json_t *k;
	json_array_foreach(arr, i, k)
		if (json_is_object(k) && parse_jwk(k, &keys[n]) == 0)
			n++;
	json_decref(d);
	if (!n) {
		free(keys);
		buf_puts(err, "the provider's JWKS holds no RS256, ES256 or EdDSA signing key");
		return -1;
	}
	free_keys(o->keys, o->nkeys);
	o->keys = keys;
	o->nkeys = n;
	return 0;
}

/* Fetches the JWKS. Called locked. */
static int fetch_jwks(struct oidc *o, struct buf *err)
{
	struct buf body = { 0 };
	long st = fetch(o, o->jwks_uri, NULL, false, &body, err);
	int rc = -1;
	o->jwks_fetches++;
	if (st == 200)
		rc = load_jwks(o, body.data, body.len, err);
	else if (st > 0)
		buf_printf(err, "%s answered HTTP %ld", o->jwks_uri, st);
	buf_free(&body);
	return rc;
}

/* Whether an unknown kid may fetch the JWKS again at now (Unix seconds):
 * OIDC_JWKS_REFETCH_BURST fetches at once, then one each
 * OIDC_JWKS_REFETCH_S (a generic cell rate: jwks_tat moves on by the
 * period with each fetch), so tokens naming made-up kids cannot make the
 * server fetch on every request, while a rotation or two in a row still
 * find their new keys. Called locked. */
static bool refetch_allowed(struct oidc *o, int64_t now)
{
	const int64_t span = (int64_t)(OIDC_JWKS_REFETCH_BURST - 1) * OIDC_JWKS_REFETCH_S;
	if (o->jwks_tat - now > span + OIDC_JWKS_REFETCH_S)
		o->jwks_tat = now; /* the clock went back: start again */
	int64_t tat = o->jwks_tat > now ? o->jwks_tat : now;
	if (tat - now > span)
		return false;
	o->jwks_tat = tat + OIDC_JWKS_REFETCH_S;
	return true;
}

/* --- discovery ---------------------------------------------------------------- */

static int load_discovery(struct oidc *o, const char *data, size_t len, struct buf *err)
{
	json_t *d = parse_json("the provider's discovery document", data, len, err);
	if (!d)
		return -1;
	const char *iss = json_string_value(json_object_get(d, "issuer"));
	const char *az = json_string_value(json_object_get(d, "authorization_endpoint"));
	const char *tk = json_string_value(json_object_get(d, "token_endpoint"));
	const char *jw = json_string_value(json_object_get(d, "jwks_uri"));
	int rc = -1;
	if (!iss || strcmp(iss, o->issuer)) {
		buf_printf(err, "the discovery document names the issuer \"%.200s\", not --oidc-issuer %s",
			   iss ? iss : "(none)", o->issuer);
	} else if (!endpoint_ok(o, az) || !endpoint_ok(o, tk) || !endpoint_ok(o, jw)) {
		buf_puts(err, "the discovery document lacks an https authorization_endpoint, token_endpoint or jwks_uri");
	} else {
		free_all(o->authorization_endpoint, o->token_endpoint, o->jwks_uri);
		o->authorization_endpoint = xstrdup(az);
		o->token_endpoint = xstrdup(tk);
		o->jwks_uri = xstrdup(jw);
		/* client_secret_basic is the default (RFC 8414 §2); post only
		 * when the provider lists post and not basic. */
		json_t *m = json_object_get(d, "token_endpoint_auth_methods_supported");
		bool basic = !json_is_array(m), post = false;
		size_t i;
		json_t *v;
		json_array_foreach(m, i, v) {
			const char *s = json_string_value(v);
			basic |= s && !strcmp(s, "client_secret_basic");
			post |= s && !strcmp(s, "client_secret_post");
		}
		o->secret_post = post && !basic;
		rc = 0;
	}
	json_decref(d);
	return rc;
}

/* Discovery and the keys, once. Called locked. */
static int discover(struct oidc *o, struct buf *err)
{
	if (o->discovered)
		return 0;
	struct buf url = { 0 }, body = { 0 }, why = { 0 };
	size_t n = strlen(o->issuer);
	while (n && o->issuer[n - 1] == '/')
		n--;
	buf_printf(&url, "%.*s/.well-known/openid-configuration", (int)n, o->issuer);
	long st = fetch(o, url.data, NULL, false, &body, &why);
	int rc = -1;
	if (st == 200)
		rc = load_discovery(o, body.data, body.len, &why);
	else if (st > 0)
		buf_printf(&why, "%s answered HTTP %ld", url.data, st);
	if (rc == 0)
		rc = fetch_jwks(o, &why);
	if (rc < 0) {
		buf_printf(err, "OIDC provider unreachable: %s", why.data ? why.data : "?");
		log_warn("auth: %s (retried at the next sign-in)", err->data);
	} else {
		o->discovered = true;
		log_info("auth: OIDC provider %s discovered (%zu signing keys)", o->issuer, o->nkeys);
	}
	buf_free(&url);
	buf_free(&body);
	buf_free(&why);
	return rc;
}

int oidc_load(struct oidc *o, const char *discovery, size_t dlen, const char *jwks, size_t jlen,
	      struct buf *err)
{
	pthread_mutex_lock(&o->mu);
	int rc = load_discovery(o, discovery, dlen, err);
	if (rc == 0)
		rc = load_jwks(o, jwks, jlen, err);
	o->discovered = rc == 0;
	pthread_mutex_unlock(&o->mu);
	return rc;
}

/* --- the flow cookie ---------------------------------------------------------- */

/* "EXP.STATE.NONCE.VERIFIER.MAC" (MAC: HMAC-SHA256 of what precedes it). */
static void flow_mac(const struct oidc *o, const char *data, size_t len, struct buf *out)
{
	uint8_t mac[32];
	unsigned ml = sizeof(mac);
	if (!HMAC(EVP_sha256(), o->flow_key, sizeof(o->flow_key), (const uint8_t *)data, len, mac, &ml))
		abort(); /* SHA-256 is always there */
	b64url_encode(mac, ml, out);
}

struct flow {
	char state[B64_SECRET + 1], nonce[B64_SECRET + 1], verifier[B64_SECRET + 1];
};

static int flow_open(const struct oidc *o, const char *v, int64_t now, struct flow *f, struct buf *err)
{
	const char *dot = strrchr(v, '.');
	size_t n = strlen(v);
	if (!dot || n > 512) {
		buf_puts(err, "invalid state: the sign-in cookie is malformed");
		return -1;
	}
	struct buf mac = { 0 };
	flow_mac(o, v, (size_t)(dot - v), &mac);
	bool ok = strlen(dot + 1) == mac.len && CRYPTO_memcmp(dot + 1, mac.data, mac.len) == 0;
	buf_free(&mac);
	long long exp = 0;
	int used = 0;
	char s[B64_SECRET + 1], no[B64_SECRET + 1], ve[B64_SECRET + 1];
	if (!ok || sscanf(v, "%lld.%43[A-Za-z0-9_-].%43[A-Za-z0-9_-].%43[A-Za-z0-9_-].%n", &exp, s, no, ve,
			  &used) != 4 || v + used != dot + 1) {
		buf_puts(err, "invalid state: the sign-in cookie is not one this server made");
		return -1;
	}
	if (exp < now) {
		buf_printf(err, "invalid state: the sign-in took longer than %d s; start again", OIDC_FLOW_TTL_S);
		return -1;
	}
	memcpy(f->state, s, sizeof(s));
	memcpy(f->nonce, no, sizeof(no));
	memcpy(f->verifier, ve, sizeof(ve));
	return 0;
}

/* --- the flow ----------------------------------------------------------------- */

static void query_arg(CURL *c, struct buf *u, const char *k, const char *v)
{
	char *ek = curl_easy_escape(c, k, 0), *ev = curl_easy_escape(c, v, 0);
	buf_printf(u, "&%s=%s", ek ? ek : "", ev ? ev : "");
	curl_free(ek);
	curl_free(ev);
}

int oidc_begin(struct oidc *o, int64_t now, struct buf *location, struct buf *cookie, struct buf *err)
{
	pthread_mutex_lock(&o->mu);
	int rc = discover(o, err);
	char *authz = rc == 0 ? xstrdup(o->authorization_endpoint) : NULL;
	pthread_mutex_unlock(&o->mu);
	if (rc < 0)
		return OIDC_EPROVIDER;
	struct buf state = { 0 }, nonce = { 0 }, verifier = { 0 }, challenge = { 0 };
	random_b64(&state);
	random_b64(&nonce);
	random_b64(&verifier);
	uint8_t h[SHA256_DIGEST_LENGTH];
	SHA256((const uint8_t *)verifier.data, verifier.len, h);
	b64url_encode(h, sizeof(h), &challenge);
	CURL *c = curl_easy_init();
	if (!c)
		abort(); /* only out of memory */
	buf_printf(location, "%s%cresponse_type=code", authz, strchr(authz, '?') ? '&' : '?');
	query_arg(c, location, "client_id", o->client_id);
	query_arg(c, location, "redirect_uri", o->redirect_uri);
	query_arg(c, location, "scope", o->scopes);
	query_arg(c, location, "state", state.data);
	query_arg(c, location, "nonce", nonce.data);
	query_arg(c, location, "code_challenge", challenge.data);
	query_arg(c, location, "code_challenge_method", "S256");
	for (size_t i = 0; i < o->nextra; i++)
		query_arg(c, location, o->extra_keys[i], o->extra_values[i]);
	curl_easy_cleanup(c);
	size_t start = cookie->len;
	buf_printf(cookie, "%lld.%s.%s.%s", (long long)(now + OIDC_FLOW_TTL_S), state.data, nonce.data,
		   verifier.data);
	struct buf mac = { 0 };
	flow_mac(o, cookie->data + start, cookie->len - start, &mac);
	buf_printf(cookie, ".%s", mac.data);
	buf_free(&mac);
	OPENSSL_cleanse(verifier.data, verifier.len);
	buf_free(&state);
	buf_free(&nonce);
	buf_free(&verifier);
	buf_free(&challenge);
	free(authz);
	return 0;
}

/* The token endpoint's answer for code: the ID token in id_token. */
static int exchange(struct oidc *o, const char *code, const char *verifier, struct buf *id_token,
		    struct buf *err)
{
	pthread_mutex_lock(&o->mu);
	int rc = discover(o, err);
	char *tk = rc == 0 ? xstrdup(o->token_endpoint) : NULL;
	bool post = o->secret_post;
	pthread_mutex_unlock(&o->mu);
	if (rc < 0)
		return OIDC_EPROVIDER;
	CURL *c = curl_easy_init();
	if (!c)
		abort();
	struct buf form = { 0 }, body = { 0 };
	buf_puts(&form, "grant_type=authorization_code");
	query_arg(c, &form, "code", code);
	query_arg(c, &form, "redirect_uri", o->redirect_uri);
	query_arg(c, &form, "code_verifier", verifier);
	if (post) {
		query_arg(c, &form, "client_id", o->client_id);
		query_arg(c, &form, "client_secret", o->client_secret);
	}
	curl_easy_cleanup(c);
	long st = fetch(o, tk, form.data, !post, &body, err);
	OPENSSL_cleanse(form.data, form.len);
	buf_free(&form);
	rc = OIDC_EPROVIDER;
	json_t *d = NULL;
	if (st < 0) {
		struct buf m = { 0 };
		buf_printf(&m, "OIDC provider unreachable: %s", err->data);
		buf_reset(err);
		buf_puts(err, m.data);
		buf_free(&m);
	} else if (!(d = parse_json("the token endpoint's answer", body.data, body.len, err))) {
		buf_printf(err, " (HTTP %ld)", st);
	} else if (st != 200) {
		const char *e = json_string_value(json_object_get(d, "error"));
		const char *ed = json_string_value(json_object_get(d, "error_description"));
		buf_printf(err, "the provider refused the code (HTTP %ld): %.64s%s%.256s", st, e ? e : "?",
			   ed ? ": " : "", ed ? ed : "");
	} else {
		const char *t = json_string_value(json_object_get(d, "id_token"));
		if (!t || !*t || strlen(t) > OIDC_MAX_ID_TOKEN)
			buf_puts(err, "the token endpoint's answer holds no id_token (is openid among --oidc-scopes?)");
		else {
			buf_puts(id_token, t);
			rc = 0;
		}
	}
	json_decref(d);
	buf_free(&body);
	free(tk);
	return rc;
}

int oidc_finish(struct oidc *o, const char *flow_cookie, const char *state, const char *code,
		int64_t now, struct oidc_user *u, struct buf *err)
{
	struct flow f;
	if (!state || !code || !*code || strlen(code) > 4096) {
		buf_puts(err, "the callback needs state and code");
		return OIDC_EREQUEST;
	}
	if (flow_open(o, flow_cookie, now, &f, err) < 0)
		return OIDC_EREQUEST;
	if (strlen(state) != strlen(f.state) || CRYPTO_memcmp(state, f.state, strlen(f.state))) {
		buf_puts(err, "invalid state: the callback's state is not the one this browser's sign-in sent");
		return OIDC_EREQUEST;
	}
	struct buf tok = { 0 };
	int rc = exchange(o, code, f.verifier, &tok, err);
	if (rc == 0)
		rc = oidc_verify_id_token(o, tok.data, tok.len, f.nonce, now, u, err);
	OPENSSL_cleanse(&f, sizeof(f));
	buf_free(&tok);
	return rc;
}

/* --- the ID token ------------------------------------------------------------- */

/* A key for kid and type, with a reference the caller frees; NULL when
 * none. Called locked. kid NULL: the one key of that type, if only one. */
static EVP_PKEY *find_key(struct oidc *o, const char *kid, enum key_type type)
{
	EVP_PKEY *k = NULL;
	size_t found = 0;
	for (size_t i = 0; i < o->nkeys; i++) {
		if (o->keys[i].type != type || (kid && strcmp(o->keys[i].kid, kid)))
			continue;
		k = o->keys[i].pkey;
		found++;
	}
	if (found != 1 || !k)
		return NULL;
	EVP_PKEY_up_ref(k);
	return k;
}

static bool verify_sig(EVP_PKEY *k, enum key_type type, const uint8_t *data, size_t len,
		       const uint8_t *sig, size_t slen)
{
	uint8_t *der = NULL;
	int dlen = 0;
	if (type == KEY_ES256) { /* JWS: r || s; OpenSSL: DER */
		if (slen != 64)
			return false;
		ECDSA_SIG *es = ECDSA_SIG_new();
		BIGNUM *r = BN_bin2bn(sig, 32, NULL), *s = BN_bin2bn(sig + 32, 32, NULL);
		if (!es || !r || !s || !ECDSA_SIG_set0(es, r, s)) {
			BN_free(r);
			BN_free(s);
			ECDSA_SIG_free(es);
			return false;
		}
		dlen = i2d_ECDSA_SIG(es, &der);
		ECDSA_SIG_free(es);
		if (dlen <= 0)
			return false;
		sig = der;
		slen = (size_t)dlen;
	}
	EVP_MD_CTX *m = EVP_MD_CTX_new();
	bool ok = m && EVP_DigestVerifyInit(m, NULL, type == KEY_EDDSA ? NULL : EVP_sha256(), NULL, k) == 1 &&
		  EVP_DigestVerify(m, sig, slen, data, len) == 1;
	EVP_MD_CTX_free(m);
	OPENSSL_free(der);
	ERR_clear_error();
	return ok;
}

static bool num_claim(json_t *c, const char *name, int64_t *v)
{
	json_t *j = json_object_get(c, name);
	if (json_is_integer(j))
		*v = json_integer_value(j);
	else if (json_is_real(j) && json_real_value(j) > -9e18 && json_real_value(j) < 9e18)
		*v = (int64_t)json_real_value(j);
	else
		return false;
	return true;
}

/* Copies a string claim of at most outsz-1 bytes, cut at a UTF-8 boundary. */
static void copy_claim(char *out, size_t outsz, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n >= outsz) {
		n = outsz - 1;
		while (n && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(out, s ? s : "", n);
	out[n] = 0;
}

static int check_claims(struct oidc *o, json_t *c, const char *nonce, int64_t now, struct oidc_user *u,
			struct buf *err)
{
	const char *iss = json_string_value(json_object_get(c, "iss"));
	if (!iss || strcmp(iss, o->issuer)) {
		buf_printf(err, "the ID token's issuer \"%.200s\" is not %s", iss ? iss : "(none)", o->issuer);
		return -1;
	}
	json_t *aud = json_object_get(c, "aud");
	bool ours = false;
	if (json_is_string(aud))
		ours = !strcmp(json_string_value(aud), o->client_id);
	else if (json_is_array(aud) && json_array_size(aud) <= 64) {
		size_t i;
		json_t *v;
		json_array_foreach(aud, i, v)
			ours |= json_is_string(v) && !strcmp(json_string_value(v), o->client_id);
	}
	const char *azp = json_string_value(json_object_get(c, "azp"));
	if (!ours || (azp && strcmp(azp, o->client_id))) {
		buf_puts(err, "the ID token is not for this client (aud/azp is not --oidc-client-id)");
		return -1;
	}
	int64_t exp, t;
	if (!num_claim(c, "exp", &exp) || exp < now - OIDC_LEEWAY_S) {
		buf_puts(err, "the ID token has expired (or has no exp)");
		return -1;
	}
	if ((num_claim(c, "iat", &t) && t > now + OIDC_LEEWAY_S) ||
	    (num_claim(c, "nbf", &t) && t > now + OIDC_LEEWAY_S)) {
		buf_puts(err, "the ID token is issued in the future (is the clock right?)");
		return -1;
	}
	const char *tn = json_string_value(json_object_get(c, "nonce"));
	if (!tn || strlen(tn) != strlen(nonce) || CRYPTO_memcmp(tn, nonce, strlen(nonce))) {
		buf_puts(err, "the ID token's nonce is not this sign-in's (a replayed token?)");
		return -1;
	}
	const char *sub = json_string_value(json_object_get(c, "sub"));
	const char *email = json_string_value(json_object_get(c, "email"));
	if (!sub || !*sub || strlen(sub) >= sizeof(u->sub)) {
		buf_puts(err, "the ID token has no subject (sub)");
		return -1;
	}
	if (!email || !strchr(email, '@') || strlen(email) > IDENTITY_MAX_EMAIL) {
		buf_puts(err, "the ID token holds no email: add the email scope to --oidc-scopes, or let the "
			      "provider release it");
		return -1;
	}
	json_t *ev = json_object_get(c, "email_verified");
	if (json_is_false(ev) || (json_is_string(ev) && !strcmp(json_string_value(ev), "false"))) {
		buf_printf(err, "the provider says %.254s is not verified", email);
		return -1;
	}
	copy_claim(u->sub, sizeof(u->sub), sub);
	copy_claim(u->email, sizeof(u->email), email);
	copy_claim(u->given_name, sizeof(u->given_name), json_string_value(json_object_get(c, "given_name")));
	copy_claim(u->family_name, sizeof(u->family_name), json_string_value(json_object_get(c, "family_name")));
	return 0;
}

int oidc_verify_id_token(struct oidc *o, const char *token, size_t len, const char *nonce,
			 int64_t now, struct oidc_user *u, struct buf *err)
{
	memset(u, 0, sizeof(*u));
	const char *d1 = len <= OIDC_MAX_ID_TOKEN ? memchr(token, '.', len) : NULL;
	const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - token)) : NULL;
	if (!d2 || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - token))) {
		buf_puts(err, "the ID token is not a signed JWT (three parts)");
		return OIDC_ETOKEN;
	}
	uint8_t *hraw = NULL, *craw = NULL, *sig = NULL;
	size_t hn, cn, sn;
	json_t *h = NULL, *c = NULL;
	EVP_PKEY *k = NULL;
	int rc = OIDC_ETOKEN;
	if (b64url_dec(token, (size_t)(d1 - token), 4096, &hraw, &hn) < 0 ||
	    b64url_dec(d1 + 1, (size_t)(d2 - d1 - 1), OIDC_MAX_ID_TOKEN, &craw, &cn) < 0 ||
	    b64url_dec(d2 + 1, len - (size_t)(d2 + 1 - token), 1024, &sig, &sn) < 0) {
		buf_puts(err, "the ID token is not base64url");
		goto out;
	}
	if (!(h = parse_json("the ID token's header", (const char *)hraw, hn, err)))
		goto out;
	const char *alg = json_string_value(json_object_get(h, "alg"));
	const char *kid = json_string_value(json_object_get(h, "kid"));
	enum key_type type;
	if (alg && !strcmp(alg, "RS256"))
		type = KEY_RS256;
	else if (alg && !strcmp(alg, "ES256"))
		type = KEY_ES256;
	else if (alg && !strcmp(alg, "EdDSA"))
		type = KEY_EDDSA;
	else {
		buf_printf(err, "the ID token's alg \"%.16s\" is not RS256, ES256 or EdDSA", alg ? alg : "(none)");
		goto out;
	}
	if (json_object_get(h, "crit") || (kid && strlen(kid) > MAX_KID)) {
		buf_puts(err, "the ID token's header has crit or an overlong kid");
		goto out;
	}
	pthread_mutex_lock(&o->mu);
	k = find_key(o, kid, type);
	if (!k && kid && o->jwks_uri && refetch_allowed(o, now)) {
		/* A kid we have not seen: the provider rotated its keys. */
		struct buf why = { 0 };
		if (fetch_jwks(o, &why) == 0)
			k = find_key(o, kid, type);
		else
			log_warn("auth: the provider's JWKS could not be fetched again: %s", why.data);
		buf_free(&why);
	}
	pthread_mutex_unlock(&o->mu);
	if (!k) {
		buf_printf(err, "no %s key with kid \"%.128s\" in the provider's JWKS", alg, kid ? kid : "(none)");
		goto out;
	}
	if (!verify_sig(k, type, (const uint8_t *)token, (size_t)(d2 - token), sig, sn)) {
		buf_puts(err, "the ID token's signature is not valid");
		goto out;
	}
	if (!(c = parse_json("the ID token's claims", (const char *)craw, cn, err)) ||
	    check_claims(o, c, nonce, now, u, err) < 0)
		goto out;
	rc = 0;
out:
	if (rc)
		memset(u, 0, sizeof(*u));
	EVP_PKEY_free(k);
	json_decref(h);
	json_decref(c);
	free_all(hraw, craw, sig);
	return rc;
}
