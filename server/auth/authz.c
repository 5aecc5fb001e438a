/* authz.c - see authz.h. */
#include "authz.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cookie.h"
#include "jwt.h"
#include "log.h"
#include "password.h"
#include "perm.h"
#include "server/http/http.h"
#include "server/http/server.h"
#include "util.h"

#define MAX_SEEDED 1024
#define MAX_SEEDED_LEN 4096

#include "auth_int.h"

const struct principal principal_open = { .kind = PRINCIPAL_OPEN, .actor = "open", .origin = "api" };

/* The grants a pre-seeded ingest token holds, in every project. */
static const char *const seeded_patterns[] = { "ingest:**" };

static bool seeded_allow(const char *permission)
{
	for (size_t i = 0; i < ARRAY_SIZE(seeded_patterns); i++)
		if (perm_match(seeded_patterns[i], permission))
			return true;
	return false;
}

bool principal_can(const struct principal *p, const char *permission, const char *project)
{
	if (!p)
		return false;
	switch (p->kind) {
	case PRINCIPAL_OPEN:
		return true;
	case PRINCIPAL_ANONYMOUS:
		return false;
	case PRINCIPAL_SEEDED:
		return seeded_allow(permission);
	case PRINCIPAL_USER:
		return grants_allow(&p->grants, permission, project);
	case PRINCIPAL_TOKEN:
		return grants_allow(&p->scope, permission, project) &&
		       (p->owner_is_system || grants_allow(&p->grants, permission, project));
	}
	return false;
}

static bool grants_match_any(const struct grants *g, const char *permission)
{
	for (size_t i = 0; i < g->n; i++)
		if (perm_match(g->v[i].pattern, permission))
			return true;
	return false;
}

/* True when p holds permission in some project (the handler then checks
 * the project it reads from the body). */
static bool grants_any(const struct principal *p, const char *permission)
{
	if (p->kind == PRINCIPAL_USER)
		return grants_match_any(&p->grants, permission);
	if (p->kind == PRINCIPAL_TOKEN)
		return grants_match_any(&p->scope, permission) &&
		       (p->owner_is_system || grants_match_any(&p->grants, permission));
	return principal_can(p, permission, NULL);
}

bool principal_everywhere(const struct principal *p, const char *permission)
{
	return principal_can(p, permission, NULL);
}

void principal_free(struct principal *p)
{
	if (!p || p == &principal_open)
		return;
	grants_free(&p->grants);
	grants_free(&p->scope);
	free(p);
}

const char *auth_mode_name(enum auth_mode m)
{
	switch (m) {
	case AUTH_NONE: return "none";
	case AUTH_LOCAL: return "local";
	case AUTH_OIDC: return "oidc";
	case AUTH_BASIC: return "basic";
	}
	return "?";
}

int auth_mode_parse(const char *s, enum auth_mode *out)
{
	static const enum auth_mode all[] = { AUTH_NONE, AUTH_LOCAL, AUTH_OIDC, AUTH_BASIC };
	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		if (!strcmp(s, auth_mode_name(all[i]))) {
			*out = all[i];
			return 0;
		}
	return -1;
}

enum auth_mode auth_mode(const struct auth *a)
{
	return a ? a->s.mode : AUTH_NONE;
}

struct identity *auth_identity(struct auth *a)
{
	return a ? a->id : NULL;
}

/* --- opening ------------------------------------------------------------------ */

static int add_seeded(struct auth *a, const char *t, size_t n, struct buf *err)
{
	while (n && (*t == ' ' || *t == '\t')) {
		t++;
		n--;
	}
	while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\r'))
		n--;
	if (!n)
		return 0;
	if (n > MAX_SEEDED_LEN || a->nseeded == MAX_SEEDED) {
		buf_printf(err, "--ingest-tokens: at most %d tokens of at most %d bytes", MAX_SEEDED,
			   MAX_SEEDED_LEN);
		return -1;
	}
	a->seeded = xrealloc(a->seeded, (a->nseeded + 1) * sizeof(*a->seeded));
	a->seeded[a->nseeded++] = xstrndup(t, n);
	return 0;
}

static int load_seeded(struct auth *a, const char *spec, struct buf *err)
{
	if (!spec || !*spec)
		return 0;
	char *file = NULL;
	const char *list = spec;
	char sep = ',';
	if (spec[0] == '@') {
		size_t n;
		int rc = read_file(spec + 1, 1 << 20, &file, &n);
		if (rc < 0) {
			buf_printf(err, "--ingest-tokens: cannot read %s: %s", spec + 1, strerror(-rc));
			return -1;
		}
		list = file;
		sep = '\n';
	}
	for (const char *p = list; *p;) {
		const char *e = strchr(p, sep);
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (add_seeded(a, p, n, err) < 0) {
			free(file);
			return -1;
		}
		p += n + (e ? 1 : 0);
	}
	free(file);
	if (spec[0] == '@' && !a->nseeded) {
		buf_printf(err, "--ingest-tokens: %s holds no token", spec + 1);
		return -1;
	}
	return 0;
}

/* A secret from a file: its first line, without the line end. */
static int read_secret(const char *flag, const char *path, char **out, struct buf *err)
{
	char *data = NULL;
	size_t n = 0;
	int rc = read_file(path, 64 << 10, &data, &n);
	if (rc < 0) {
		buf_printf(err, "%s: cannot read %s: %s", flag, path, strerror(-rc));
		return -1;
	}
	data[strcspn(data, "\r\n")] = 0;
	if (!*data) {
		buf_printf(err, "%s: %s is empty", flag, path);
		free(data);
		return -1;
	}
	*out = data;
	return 0;
}

/* --auth oidc: the relying party's settings (no network: the provider is
 * asked at the first sign-in, so a provider that is down does not stop the
 * server). */
static int open_oidc(struct auth *a, struct buf *err)
{
	const struct auth_settings *s = &a->s;
	if (!s->oidc_issuer || !*s->oidc_issuer || !s->oidc_client_id || !*s->oidc_client_id ||
	    !s->oidc_client_secret_file || !*s->oidc_client_secret_file || !s->oidc_redirect_uri ||
	    !*s->oidc_redirect_uri) {
		buf_puts(err, "--auth oidc needs --oidc-issuer, --oidc-client-id, --oidc-client-secret-file "
			      "and --oidc-redirect-uri");
		return -1;
	}
	char *secret = NULL;
	if (read_secret("--oidc-client-secret-file", s->oidc_client_secret_file, &secret, err) < 0)
		return -1;
	struct oidc_config c = { .issuer = s->oidc_issuer, .client_id = s->oidc_client_id,
				 .client_secret = secret, .redirect_uri = s->oidc_redirect_uri,
				 .scopes = s->oidc_scopes, .extra_params = s->oidc_extra_params };
	int rc = oidc_new(&c, &a->oidc, err);
	OPENSSL_cleanse(secret, strlen(secret));
	free(secret);
	if (rc == 0)
		log_info("auth: OIDC sign-in at /api/v1/oauth2/login with %s (asked at the first sign-in), "
			 "callback %s", s->oidc_issuer, s->oidc_redirect_uri);
	return rc;
}

static int bootstrap_admin(struct auth *a, struct buf *err)
{
	const char *email = a->s.admin_email && *a->s.admin_email ? a->s.admin_email : "admin@localhost";
	char *password = NULL;
	bool fallback = false;
	if (a->s.admin_password_file && *a->s.admin_password_file) {
		if (read_secret("--admin-password-file", a->s.admin_password_file, &password, err) < 0)
			return -1;
	} else {
		password = xstrdup("admin");
		fallback = true;
	}
	struct user_info u;
	int rc = identity_user_by_email(a->id, email, &u, err);
	if (rc == 1) {
		rc = identity_user_create(a->id, email, password, "", "", &u, err);
		struct buf again = { 0 };
		bool raced = false;
		/* Replicas on one PostgreSQL starting together: another made the
		 * admin between the lookup and the insert (the unique email
		 * refused this one). Its user is the admin; the roles are set
		 * again, the same. */
		if (rc < 0 && identity_user_by_email(a->id, email, &u, &again) == 0) {
			buf_reset(err);
			raced = true;
			rc = identity_roles_set(a->id, u.id, (const char *[]){ "System Admin" }, 1, err);
			if (rc == 0)
				log_info("auth: the admin user %s (%s) was created by another server", email, u.id);
			else
				rc = -1;
		} else if (rc == 0) {
			const char *roles[] = { "System Admin" };
			rc = identity_roles_set(a->id, u.id, roles, 1, err);
		}
		if (rc == 0 && !raced) {
			identity_audit(a->id, "server", "cli", "user.create", u.id, "ok",
				       "the admin user, created at start");
			log_info("auth: created the admin user %s (%s)", email, u.id);
		}
		buf_free(&again);
	}
	if (rc == 0 && fallback) {
		struct user_info tmp;
		if (identity_login(a->id, email, "admin", &tmp, err) == 0)
			log_warn("auth: the admin user %s still has the default password \"admin\": "
				 "change it (ember identity user reset-password, or --admin-password-file)",
				 email);
	}
	if (rc == 0)
		snprintf(a->admin_id, sizeof(a->admin_id), "%s", u.id);
	free(password);
	return rc == 0 ? 0 : -1;
}

/* With the metadata on PostgreSQL every replica signs and checks session
 * tokens with one key pair, kept in the database: the first replica to
 * start stores the pair it generated, every other reads that one. */
static int shared_keys(struct auth *a, struct buf *err)
{
	char *npriv = NULL, *npub = NULL, *priv = NULL, *pub = NULL;
	int rc = jwt_keys_generate_pem(&npriv, &npub, err);
	if (!rc)
		rc = identity_jwt_keys(a->id, npriv, npub, &priv, &pub, err) < 0 ? -1 : 0;
	if (!rc)
		rc = jwt_keys_from_pem("the metadata database's jwt_keys", priv, pub, &a->keys, err);
	/* Private keys leave no copy in freed memory. */
	if (npriv)
		OPENSSL_cleanse(npriv, strlen(npriv));
	if (priv)
		OPENSSL_cleanse(priv, strlen(priv));
	free_all(npriv, npub, priv, pub);
	return rc;
}

int auth_open(const struct auth_settings *s, struct auth **out, struct buf *err)
{
	struct auth *a = xcalloc(1, sizeof(*a));
	a->s = *s;
	if (!a->s.access_ttl_s)
		a->s.access_ttl_s = 300;
	if (!a->s.refresh_ttl_s)
		a->s.refresh_ttl_s = 365 * 86400;
	if (!a->s.cookie_same_site || !*a->s.cookie_same_site)
		a->s.cookie_same_site = "Lax";
	snprintf(a->issuer, sizeof(a->issuer), "%s", s->issuer && *s->issuer ? s->issuer : "ember");
	a->s.issuer = a->issuer;
	bool shared = s->metadata_url && *s->metadata_url;
	if (load_seeded(a, s->ingest_tokens, err) < 0 ||
	    (shared ? identity_open_url(s->metadata_url, s->metadata_password, &a->id, err)
		    : identity_open(s->data_dir, &a->id, err)) < 0)
		goto fail;
	if (shared && (!s->jwt_private_key || !*s->jwt_private_key)) {
		if (shared_keys(a, err) < 0)
			goto fail;
		goto keys_done;
	}
	struct buf priv = { 0 }, pub = { 0 };
	if (s->jwt_private_key && *s->jwt_private_key)
		buf_puts(&priv, s->jwt_private_key);
	else
		buf_printf(&priv, "%s/jwt-private.pem", s->data_dir);
	if (s->jwt_public_key && *s->jwt_public_key)
		buf_puts(&pub, s->jwt_public_key);
	else
		buf_printf(&pub, "%s/jwt-public.pem", s->data_dir);
	int rc = jwt_keys_load(priv.data, pub.data, true, &a->keys, err);
	buf_free(&priv);
	buf_free(&pub);
	if (rc < 0)
		goto fail;
keys_done:
	if (s->mode == AUTH_BASIC) {
		if (!s->basic_user || !*s->basic_user || !s->basic_password_file || !*s->basic_password_file) {
			buf_puts(err, "--auth basic needs --basic-user and --basic-password-file");
			goto fail;
		}
		a->basic_user = xstrdup(s->basic_user);
		if (read_secret("--basic-password-file", s->basic_password_file, &a->basic_password, err) < 0)
			goto fail;
		log_warn("auth: --auth basic is deprecated (one static credential): use local or oidc");
	}
	if (s->mode == AUTH_OIDC && open_oidc(a, err) < 0)
		goto fail;
	if (bootstrap_admin(a, err) < 0)
		goto fail;
	*out = a;
	return 0;
fail:
	auth_close(a);
	return -1;
}

void auth_close(struct auth *a)
{
	if (!a)
		return;
	free_array(a->seeded, a->nseeded);
	free(a->basic_user);
	free_secret(a->basic_password);
	jwt_keys_free(a->keys);
	oidc_free(a->oidc);
	identity_close(a->id);
	free(a);
}

/* --- requests ------------------------------------------------------------------ */

static bool seeded_match(const struct auth *a, const char *t)
{
	size_t n = strlen(t);
	bool ok = false;
	for (size_t i = 0; i < a->nseeded; i++) {
		size_t wn = strlen(a->seeded[i]);
		ok |= wn == n && CRYPTO_memcmp(a->seeded[i], t, n) == 0;
	}
	return ok;
}

static void unauthorized(struct http_resp *resp, const char *fmt, const char *why)
{
	http_error(resp, 401, fmt, why);
}

static bool is_system(const char *owner)
{
	return !strcmp(owner, "system");
}

/* A bearer credential: 0 with p filled, -1 with resp set. */
static int bearer(struct auth *a, const char *t, struct principal *p, struct http_resp *resp)
{
	struct buf err = { 0 };
	int rc = -1;
	if (a->nseeded && seeded_match(a, t)) {
		p->kind = PRINCIPAL_SEEDED;
		snprintf(p->actor, sizeof(p->actor), "ingest-token");
		return 0;
	}
	if (!strncmp(t, "emb_", 4)) {
		struct token_info ti;
		int r = identity_token_check(a->id, t, now_unix_ms(), &ti, &p->scope, &err);
		if (r == 0) {
			p->kind = PRINCIPAL_TOKEN;
			memcpy(p->token_id, ti.id, sizeof(p->token_id));
			memcpy(p->user_id, ti.owner, sizeof(p->user_id));
			snprintf(p->actor, sizeof(p->actor), "token:%s", ti.id);
			p->owner_is_system = is_system(ti.owner);
			if (!p->owner_is_system &&
			    identity_user_grants(a->id, ti.owner, &p->grants, &err) < 0) {
				http_error(resp, 503, "the identity store failed: %s", err.data);
				buf_free(&err);
				return -1;
			}
			rc = 0;
		} else if (r < 0) {
			http_error(resp, 503, "the identity store failed: %s", err.data);
		} else {
			unauthorized(resp, "Invalid token: %s", err.data);
		}
	} else if (strlen(t) < JWT_MAX_LEN) {
		struct jwt_claims c;
		if (jwt_verify(a->keys, t, strlen(t), a->issuer, JWT_AUDIENCE, "access", now_unix_ms() / 1000,
			       &c, &err) == 0) {
			p->kind = PRINCIPAL_USER;
			snprintf(p->user_id, sizeof(p->user_id), "%.36s", c.sub);
			snprintf(p->actor, sizeof(p->actor), "%s", c.sub);
			buf_reset(&err);
			if (identity_user_grants(a->id, c.sub, &p->grants, &err) < 0)
				http_error(resp, 503, "the identity store failed: %s", err.data);
			else
				rc = 0;
		} else {
			unauthorized(resp, "Invalid token: %s", err.data);
		}
	} else {
		unauthorized(resp, "Invalid token: %s", "longer than any token this server issues");
	}
	buf_free(&err);
	return rc;
}

static int basic(struct auth *a, const char *b64, struct principal *p, struct http_resp *resp)
{
	size_t n = strlen(b64);
	if (!a->basic_user || n > 1024) {
		unauthorized(resp, "Invalid token: %s", "this server takes no basic credential");
		return -1;
	}
	unsigned char dec[800];
	int m = EVP_DecodeBlock(dec, (const unsigned char *)b64, (int)n);
	if (m < 0) {
		unauthorized(resp, "Invalid token: %s", "the basic credential is not base64");
		return -1;
	}
	while (n && b64[n - 1] == '=') { /* EVP_DecodeBlock counts padding as zeros */
		n--;
		m--;
	}
	dec[m < 0 ? 0 : m] = 0;
	char *colon = strchr((char *)dec, ':');
	bool ok = false;
	if (colon) {
		*colon = 0;
		const char *user = (char *)dec, *pw = colon + 1;
		size_t un = strlen(user), pn = strlen(pw);
		ok = un == strlen(a->basic_user) && pn == strlen(a->basic_password) &&
		     CRYPTO_memcmp(user, a->basic_user, un) == 0 &&
		     CRYPTO_memcmp(pw, a->basic_password, pn) == 0;
	}
	OPENSSL_cleanse(dec, sizeof(dec));
	if (!ok) {
		unauthorized(resp, "Invalid token: %s", "wrong basic user or password");
		return -1;
	}
	/* The one static credential is the service-to-service account: the
	 * admin's grants. */
	p->kind = PRINCIPAL_USER;
	snprintf(p->user_id, sizeof(p->user_id), "%s", a->admin_id);
	snprintf(p->actor, sizeof(p->actor), "basic:%.50s", a->basic_user);
	struct buf err = { 0 };
	int rc = identity_user_grants(a->id, a->admin_id, &p->grants, &err);
	if (rc < 0)
		http_error(resp, 503, "the identity store failed: %s", err.data);
	buf_free(&err);
	return rc < 0 ? -1 : 0;
}

static int from_cookie(struct auth *a, const struct http_req *req, const char *access,
		       struct principal *p, struct http_resp *resp)
{
	struct buf err = { 0 };
	struct jwt_claims c;
	if (jwt_verify(a->keys, access, strlen(access), a->issuer, JWT_AUDIENCE, "access",
		       now_unix_ms() / 1000, &c, &err) < 0) {
		unauthorized(resp, "Invalid token: %s (sign in again, or POST /api/v1/auth/refresh)",
			     err.data);
		buf_free(&err);
		return -1;
	}
	bool safe = !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD");
	if (!safe) {
		const char *ch = http_header(req, "Cookie");
		const char *hv = http_header(req, "X-Ember-CSRF");
		char want[128];
		if (!ch || cookie_get(ch, "ember_csrf", want, sizeof(want)) <= 0 || !hv ||
		    strlen(hv) != strlen(want) || CRYPTO_memcmp(hv, want, strlen(want)) != 0) {
			http_error(resp, 403, "a signed-in request that changes or queries data must send "
					      "the X-Ember-CSRF header (the ember_csrf cookie's value)");
			buf_free(&err);
			return -1;
		}
	}
	p->kind = PRINCIPAL_USER;
	p->origin = "ui";
	snprintf(p->user_id, sizeof(p->user_id), "%.36s", c.sub);
	snprintf(p->actor, sizeof(p->actor), "%s", c.sub);
	int rc = identity_user_grants(a->id, c.sub, &p->grants, &err);
	if (rc < 0)
		http_error(resp, 503, "the identity store failed: %s", err.data);
	buf_free(&err);
	return rc < 0 ? -1 : 0;
}

/* Finds the request's principal: 0, or -1 with resp set. */
static int identify(struct auth *a, const struct http_req *req, struct principal *p,
		    struct http_resp *resp)
{
	p->kind = a->s.mode == AUTH_NONE ? PRINCIPAL_OPEN : PRINCIPAL_ANONYMOUS;
	p->origin = "api";
	snprintf(p->actor, sizeof(p->actor), "anonymous");
	const char *h = http_header(req, "Authorization");
	if (h && *h) {
		if (strlen(h) > JWT_MAX_LEN + 16) {
			unauthorized(resp, "Invalid token: %s", "the Authorization header is too long");
			return -1;
		}
		if (!strncasecmp(h, "Bearer ", 7)) {
			const char *t = h + 7;
			while (*t == ' ')
				t++;
			if (!*t) /* "Bearer " with nothing: no credential */
				return 0;
			return bearer(a, t, p, resp);
		}
		if (!strncasecmp(h, "Basic ", 6) && a->s.mode == AUTH_BASIC)
			return basic(a, h + 6, p, resp);
		unauthorized(resp, "Invalid token: %s", "the Authorization header is neither Bearer nor Basic");
		return -1;
	}
	const char *ch = http_header(req, "Cookie");
	char access[JWT_MAX_LEN];
	if (ch && a->s.mode != AUTH_NONE && cookie_get(ch, "ember_access", access, sizeof(access)) > 0)
		return from_cookie(a, req, access, p, resp);
	return 0;
}

void auth_deny(struct server *srv, const struct principal *p, const char *permission,
	       const char *project, struct http_resp *resp)
{
	struct buf target = { 0 };
	buf_printf(&target, "%s%s%s", permission, project ? " in project " : "", project ? project : "");
	if (srv->auth)
		identity_audit(srv->auth->id, p ? p->actor : "anonymous", p ? p->origin : "api",
			       "permission.denied", target.data, "denied", "");
	if (p && p->kind == PRINCIPAL_ANONYMOUS)
		http_error(resp, 401, "this server needs a credential: sign in, or send "
				      "\"Authorization: Bearer TOKEN\" (a service token)");
	else
		http_error(resp, 403, "Insufficient permissions: %s", target.data);
	buf_free(&target);
}

/* Counts a refusal (ingest's also as ember_ingest_unauthorized_total). */
static void refused(struct server *srv, const struct route *r)
{
	__atomic_add_fetch(&srv->counters.auth_refused, 1, __ATOMIC_RELAXED);
	if (!strncmp(r->perm, "ingest:", 7))
		__atomic_add_fetch(&srv->counters.ingest_unauthorized, 1, __ATOMIC_RELAXED);
}

bool auth_request(struct server *srv, const struct route *r, const struct http_req *req,
		  struct http_resp *resp, struct principal **who)
{
	*who = NULL;
	struct auth *a = srv->auth;
	if (!a) { /* a server without an identity store (in-process tests) */
		*who = (struct principal *)&principal_open;
		return true;
	}
	struct principal *p = xcalloc(1, sizeof(*p));
	if (identify(a, req, p, resp) < 0) {
		refused(srv, r);
		principal_free(p);
		return false;
	}
	/* --auth none keeps today's open server, but ingest needs one of
	 * --ingest-tokens when they are set. */
	if (p->kind == PRINCIPAL_OPEN && a->nseeded && !strncmp(r->perm, "ingest:", 7)) {
		p->kind = PRINCIPAL_ANONYMOUS;
		refused(srv, r);
		http_error(resp, 401, "this server needs a bearer token (the agent's -auth-token; "
				      "--ingest-tokens)");
		principal_free(p);
		return false;
	}
	bool ok;
	const char *project = NULL;
	char lower[64];
	if (!strcmp(r->perm, AUTH_PUBLIC))
		ok = true;
	else if (!strcmp(r->perm, "server:metrics:read") && a->s.public_metrics)
		ok = true;
	else if (!strcmp(r->perm, AUTH_SIGNED_IN))
		ok = p->kind != PRINCIPAL_ANONYMOUS;
	else if (r->scope == ROUTE_PROJECT) {
		/* Project ids compare lower-cased, as the handlers read them. */
		snprintf(lower, sizeof(lower), "%s", req->nparams ? req->params[0] : "");
		for (char *c = lower; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		ok = principal_can(p, r->perm, project = lower);
	}
	else if (r->scope == ROUTE_BODY) /* the handler checks the project it reads */
		ok = p->kind != PRINCIPAL_ANONYMOUS && (p->kind == PRINCIPAL_OPEN || p->kind == PRINCIPAL_SEEDED ||
							grants_any(p, r->perm));
	else
		ok = principal_can(p, r->perm, NULL);
	if (!ok) {
		if (!strcmp(r->perm, AUTH_SIGNED_IN) && p->kind == PRINCIPAL_ANONYMOUS)
			http_error(resp, 401, "not signed in");
		else
			auth_deny(srv, p, r->perm, project, resp);
		refused(srv, r);
		principal_free(p);
		return false;
	}
	*who = p;
	return true;
}
