/* auth_api.c - the identity endpoints (routes in server/http/routes.c):
 * sign-in (POST /api/v1/auth/login, refresh, logout; GET /api/v1/auth/me),
 * service tokens, users, roles and the audit log under /public/api/v1/.
 * The route table has already checked the permission each needs; these
 * handlers check the rest (a token's projects exist, a user revokes only
 * their own tokens unless they may manage users) and audit every change. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/rand.h>

#include "auth_int.h"
#include "cookie.h"
#include "log.h"
#include "perm.h"
#include "server/http/handlers.h"
#include "server/query/request.h"
#include "util.h"

#define MAX_LIST 256

/* --- helpers ------------------------------------------------------------------- */

static struct auth *auth_of(struct server *srv, struct http_resp *resp)
{
	if (!srv->auth)
		http_error(resp, 404, "this server keeps no users (no identity store)");
	return srv->auth;
}

static void store_error(struct http_resp *resp, int rc, const struct buf *err)
{
	if (rc == -1)
		http_error(resp, 400, "%s", err->data ? err->data : "invalid request");
	else {
		log_error("identity: %s", err->data ? err->data : "?");
		http_error(resp, 503, "the identity store failed: %s", err->data ? err->data : "?");
	}
}

/* A JSON array of at most max strings (absent or null: none); the
 * strings point into doc. */
static int string_list(const json_t *doc, const char *name, size_t max, const char ***out,
		       size_t *n, struct buf *err)
{
	*out = NULL;
	*n = 0;
	json_t *a = json_object_get(doc, name);
	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a) || json_array_size(a) > max) {
		buf_printf(err, "%s: expected an array of at most %zu strings", name, max);
		return -1;
	}
	*out = xcalloc(json_array_size(a) + 1, sizeof(char *));
	size_t i;
	json_t *v;
	json_array_foreach(a, i, v) {
		if (!json_is_string(v) || json_string_length(v) > 256) {
			buf_printf(err, "%s[%zu]: expected a string of at most 256 bytes", name, i);
			free(*out);
			*out = NULL;
			return -1;
		}
		(*out)[(*n)++] = json_string_value(v);
	}
	return 0;
}

static const char *actor(const struct http_req *req)
{
	return req->who ? req->who->actor : "anonymous";
}

static const char *origin(const struct http_req *req)
{
	return req->who && req->who->origin ? req->who->origin : "api";
}

static void audit(struct auth *a, const struct http_req *req, const char *action,
		  const char *target, const char *outcome, const char *detail)
{
	identity_audit(a->id, actor(req), origin(req), action, target, outcome, detail);
}

static json_t *user_json(const struct user_info *u)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "id", u->id, "email", u->email,
			 "given_name", u->given_name, "family_name", u->family_name, "created_at",
			 (json_int_t)u->created_ms, "updated_at", (json_int_t)u->updated_ms);
}

/* --- sessions ------------------------------------------------------------------- */

static int sign(struct auth *a, const char *typ, const char *sub, const char *jti, int64_t ttl,
		struct buf *out, struct buf *err)
{
	struct jwt_claims c = { 0 };
	snprintf(c.sub, sizeof(c.sub), "%s", sub);
	snprintf(c.jti, sizeof(c.jti), "%s", jti);
	snprintf(c.iss, sizeof(c.iss), "%s", a->issuer);
	snprintf(c.aud, sizeof(c.aud), "%s", JWT_AUDIENCE);
	snprintf(c.typ, sizeof(c.typ), "%s", typ);
	c.iat = now_unix_ms() / 1000;
	c.exp = c.iat + ttl;
	return jwt_sign(a->keys, &c, out, err);
}

void auth_set_cookie(struct auth *a, struct http_resp *resp, const char *name, const char *value,
		     const char *path, long max_age, bool http_only)
{
	struct cookie_attrs at = { .path = path, .max_age = max_age, .same_site = a->s.cookie_same_site,
				   .http_only = http_only, .secure = a->s.cookie_secure };
	struct buf c = { 0 };
	if (cookie_set(&c, name, value, &at) < 0)
		log_error("auth: cookie %s could not be written", name);
	else
		http_add_header(resp, "Set-Cookie", "%s", c.data);
	buf_free(&c);
}

static void clear_cookies(struct auth *a, struct http_resp *resp)
{
	auth_set_cookie(a, resp, "ember_access", "", "/", 0, true);
	auth_set_cookie(a, resp, "ember_refresh", "", "/api/v1/auth", 0, true);
	auth_set_cookie(a, resp, "ember_csrf", "", "/", 0, false);
}

/* Sets the cookies of user u: an access token (and with session, a
 * refresh token and a CSRF value); the access token also goes to access. */
static int set_tokens(struct auth *a, const struct user_info *u, const char *session,
		      struct http_resp *resp, struct buf *access, struct buf *err)
{
	struct buf refresh = { 0 };
	char jti[IDENTITY_ID_LEN];
	uuid_v4(jti);
	if (sign(a, "access", u->id, jti, a->s.access_ttl_s, access, err) < 0 ||
	    (session && sign(a, "refresh", u->id, session, a->s.refresh_ttl_s, &refresh, err) < 0)) {
		buf_free(&refresh);
		return -1;
	}
	auth_set_cookie(a, resp, "ember_access", access->data, "/", (long)a->s.access_ttl_s, true);
	if (session) {
		uint8_t raw[24];
		char csrf[49];
		if (RAND_bytes(raw, sizeof(raw)) != 1)
			abort(); /* no CSPRNG: nothing safe to hand out */
		hex_encode(raw, sizeof(raw), csrf);
		auth_set_cookie(a, resp, "ember_refresh", refresh.data, "/api/v1/auth", (long)a->s.refresh_ttl_s, true);
		auth_set_cookie(a, resp, "ember_csrf", csrf, "/", (long)a->s.refresh_ttl_s, false);
	}
	buf_free(&refresh);
	return 0;
}

/* Issues an access token for user (and with session, a refresh token and
 * a CSRF value): cookies on resp, the access token in the answer too. */
static int issue(struct auth *a, const struct user_info *u, const char *session,
		 struct http_resp *resp, struct buf *err)
{
	struct buf access = { 0 };
	if (set_tokens(a, u, session, resp, &access, err) < 0) {
		buf_free(&access);
		return -1;
	}
	json_t *o = json_pack("{s:o, s:s, s:I}", "user", user_json(u), "access_token", access.data,
			      "expires_in", (json_int_t)a->s.access_ttl_s);
	http_json_doc(resp, 200, o);
	buf_free(&access);
	return 0;
}

int auth_sign_in(struct auth *a, const struct user_info *u, struct http_resp *resp, struct buf *err)
{
	char session[IDENTITY_ID_LEN];
	int rc = identity_session_create(a->id, u->id, now_unix_ms() + a->s.refresh_ttl_s * 1000, session, err);
	if (rc < 0)
		return rc;
	struct buf access = { 0 };
	rc = set_tokens(a, u, session, resp, &access, err) < 0 ? -2 : 0;
	buf_free(&access);
	return rc;
}

void handle_auth_login(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	if (a->s.mode != AUTH_LOCAL && a->s.mode != AUTH_OIDC) {
		http_error(resp, 400, "this server signs no one in (--auth %s)", auth_mode_name(a->s.mode));
		return;
	}
	struct buf err = { 0 };
	char *email = NULL, *password = NULL;
	bool counted = false;
	json_t *doc = req_load(req->body, req->body_len, &err);
	if (!doc || req_string(doc, "email", IDENTITY_MAX_EMAIL, &email, &err) < 0 ||
	    req_string(doc, "password", 1024, &password, &err) < 0 || !email || !password) {
		http_error(resp, 400, "%s", err.len ? err.data : "expected {\"email\": ..., \"password\": ...}");
		goto out;
	}
	/* Each check costs a tenth of a second of CPU and 64 MiB: a bounded
	 * number at once, so a flood of sign-ins cannot take the machine. */
	if (__atomic_add_fetch(&a->logins_running, 1, __ATOMIC_ACQ_REL) > AUTH_MAX_LOGINS) {
		__atomic_sub_fetch(&a->logins_running, 1, __ATOMIC_ACQ_REL);
		http_error(resp, 503, "too many sign-ins at once; retry in a second");
		resp->retry_after = "1";
		goto out;
	}
	counted = true;
	struct user_info u;
	int rc = identity_login(a->id, email, password, &u, &err);
	if (rc < 0) {
		store_error(resp, rc, &err);
		goto out;
	}
	if (rc == 1) {
		identity_audit(a->id, "anonymous", "ui", "auth.login", email, "failed", "wrong email or password");
		http_error(resp, 401, "wrong email or password");
		goto out;
	}
	if (a->s.mode == AUTH_OIDC) {
		struct grants g = { 0 };
		bool may = identity_user_grants(a->id, u.id, &g, &err) == 0 &&
			   grants_allow(&g, "auth:local:login", NULL);
		grants_free(&g);
		if (!may) {
			identity_audit(a->id, u.id, "ui", "auth.login", email, "denied",
				       "auth:local:login is needed while OIDC is on");
			http_error(resp, 403, "Insufficient permissions: auth:local:login (sign in with the "
					      "identity provider)");
			goto out;
		}
	}
	char session[IDENTITY_ID_LEN];
	rc = identity_session_create(a->id, u.id, now_unix_ms() + a->s.refresh_ttl_s * 1000, session, &err);
	if (rc < 0 || issue(a, &u, session, resp, &err) < 0) {
		store_error(resp, rc < 0 ? rc : -2, &err);
		goto out;
	}
	identity_audit(a->id, u.id, "ui", "auth.login", email, "ok", "");
out:
	if (counted)
		__atomic_sub_fetch(&a->logins_running, 1, __ATOMIC_ACQ_REL);
	free_secret(password);
	free(email);
	json_decref(doc);
	buf_free(&err);
}

/* The refresh cookie's session and user: 0, or -1 with resp set. */
static int refresh_session(struct auth *a, const struct http_req *req, struct jwt_claims *c,
			   struct http_resp *resp)
{
	const char *ch = http_header(req, "Cookie");
	char tok[JWT_MAX_LEN];
	struct buf err = { 0 };
	if (!ch || cookie_get(ch, "ember_refresh", tok, sizeof(tok)) <= 0) {
		http_error(resp, 401, "not signed in");
		return -1;
	}
	if (jwt_verify(a->keys, tok, strlen(tok), a->issuer, JWT_AUDIENCE, "refresh", now_unix_ms() / 1000,
		       c, &err) < 0) {
		http_error(resp, 401, "Invalid token: %s", err.data);
		buf_free(&err);
		return -1;
	}
	char uid[IDENTITY_ID_LEN];
	int rc = identity_session_check(a->id, c->jti, now_unix_ms(), uid, &err);
	if (rc == 0 && strcmp(uid, c->sub) != 0) {
		rc = 1;
		buf_puts(&err, "the session is another user's");
	}
	if (rc) {
		if (rc < 0)
			store_error(resp, rc, &err);
		else
			http_error(resp, 401, "Invalid token: %s", err.data);
		buf_free(&err);
		return -1;
	}
	buf_free(&err);
	return 0;
}

void handle_auth_refresh(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct jwt_claims c;
	if (refresh_session(a, req, &c, resp) < 0)
		return;
	struct buf err = { 0 };
	struct user_info u;
	int rc = identity_user_get(a->id, c.sub, &u, &err);
	if (rc == 1) {
		http_error(resp, 401, "Invalid token: the user no longer exists");
	} else if (rc < 0 || issue(a, &u, NULL, resp, &err) < 0) {
		store_error(resp, rc < 0 ? rc : -2, &err);
	}
	buf_free(&err);
}

void handle_auth_logout(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct jwt_claims c;
	struct http_resp ignored = { 0 };
	if (refresh_session(a, req, &c, &ignored) == 0) {
		struct buf err = { 0 };
		if (identity_session_end(a->id, c.jti, &err) < 0)
			log_error("auth: the session %s was not ended: %s", c.jti, err.data);
		identity_audit(a->id, c.sub, "ui", "auth.logout", c.sub, "ok", "");
		buf_free(&err);
	}
	buf_free(&ignored.body);
	clear_cookies(a, resp);
	http_json_bool(resp, 200, "signed_out", true);
}

/* What a sign-in page needs before anyone signs in: the mode (an OIDC
 * button, a password form, or nothing to sign in to). Public. */
void handle_auth_config(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	(void)req;
	enum auth_mode m = auth_mode(srv->auth);
	http_json_doc(resp, 200, json_pack("{s:s, s:b, s:b}", "mode", auth_mode_name(m), "password",
					 m == AUTH_LOCAL || m == AUTH_OIDC, "oidc", m == AUTH_OIDC));
}

void handle_auth_me(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	const struct principal *p = req->who ? req->who : &principal_open;
	static const char *const kinds[] = { "open", "anonymous", "user", "token", "ingest-token" };
	json_t *perms = json_array();
	for (size_t i = 0; perm_catalogue[i]; i++)
		if (principal_can(p, perm_catalogue[i], NULL))
			json_array_append_new(perms, json_string(perm_catalogue[i]));
	json_t *o = json_pack("{s:s, s:s, s:o}", "mode", auth_mode_name(auth_mode(srv->auth)), "kind",
			      kinds[p->kind], "permissions", perms);
	struct buf err = { 0 };
	struct user_info u;
	if (srv->auth && p->user_id[0] && identity_user_get(srv->auth->id, p->user_id, &u, &err) == 0)
		json_object_set_new(o, "user", user_json(&u));
	else
		json_object_set_new(o, "user", json_null());
	buf_free(&err);
	http_json_doc(resp, 200, o);
}

/* --- service tokens ----------------------------------------------------------- */

/* The owner a new token of p gets: p's user, a token's owner, or "system"
 * (an open server). */
static const char *owner_of(const struct principal *p)
{
	if ((p->kind == PRINCIPAL_USER || p->kind == PRINCIPAL_TOKEN) && p->user_id[0] &&
	    !p->owner_is_system)
		return p->user_id;
	return "system";
}

/* Whether p manages every user's tokens, not only its own. */
static bool manages_all(const struct principal *p)
{
	return principal_can(p, "admin:user:update", NULL);
}

void handle_tokens_list(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct buf err = { 0 };
	json_t *arr;
	int rc = identity_tokens_json(a->id, manages_all(req->who) ? NULL : owner_of(req->who), &arr, &err);
	if (rc < 0)
		store_error(resp, rc, &err);
	else
		http_json_doc(resp, 200, json_pack("{s:o}", "tokens", arr));
	buf_free(&err);
}

/* What a token or a role is made of, from a request body: its name, its
 * permission patterns (under patterns_key) and the projects it is limited
 * to (project_ids, each an existing project). */
struct grant_req {
	json_t *doc;
	char *name;
	const char **patterns, **projects;
	size_t npatterns, nprojects;
};

static void grant_free(struct grant_req *g)
{
	free_all(g->name, g->patterns, g->projects);
	json_decref(g->doc);
}

/* Reads g from req's body: 0, or -1 with a 400 answered. */
static int grant_parse(struct server *srv, const struct http_req *req, const char *patterns_key,
		       struct grant_req *g, struct http_resp *resp)
{
	struct buf err = { 0 };
	memset(g, 0, sizeof(*g));
	g->doc = req_load(req->body, req->body_len, &err);
	if (!g->doc || req_string(g->doc, "name", IDENTITY_MAX_NAME, &g->name, &err) < 0 ||
	    string_list(g->doc, patterns_key, IDENTITY_MAX_PATTERNS, &g->patterns, &g->npatterns, &err) < 0 ||
	    string_list(g->doc, "project_ids", IDENTITY_MAX_PROJECTS, &g->projects, &g->nprojects, &err) < 0) {
		http_error(resp, 400, "%s", err.data);
		buf_free(&err);
		return -1;
	}
	buf_free(&err);
	for (size_t i = 0; i < g->nprojects; i++)
		if (!uuid_valid(g->projects[i]) || !projects_exists(srv->projects, g->projects[i])) {
			http_error(resp, 400, "project_ids[%zu]: no project with id %.64s", i, g->projects[i]);
			return -1;
		}
	return 0;
}

void handle_tokens_create(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	/* A token making tokens could hand out scopes beyond its own. */
	if (req->who && req->who->kind == PRINCIPAL_TOKEN) {
		audit(a, req, "token.create", "", "denied", "a service token cannot create tokens");
		http_error(resp, 403, "Insufficient permissions: a service token cannot create tokens "
				      "(sign in, or use ember identity on the server's host)");
		return;
	}
	struct buf err = { 0 };
	struct grant_req g;
	if (grant_parse(srv, req, "scopes", &g, resp) < 0)
		goto out;
	json_t *ev = json_object_get(g.doc, "expires_at");
	int64_t expires = 0;
	if (ev && !json_is_null(ev)) {
		if (!json_is_integer(ev) || json_integer_value(ev) <= 0) {
			http_error(resp, 400, "expires_at: expected Unix milliseconds or null (never)");
			goto out;
		}
		expires = json_integer_value(ev);
	}
	struct token_info t;
	char secret[IDENTITY_TOKEN_LEN];
	int rc = identity_token_create(a->id, owner_of(req->who), g.name ? g.name : "", g.patterns, g.npatterns,
				       g.projects, g.nprojects, expires, &t, secret, &err);
	if (rc < 0) {
		store_error(resp, rc, &err);
		goto out;
	}
	audit(a, req, "token.create", t.id, "ok", t.name);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:O, s:O, s:I, s:o}", "id", t.id, "token", secret,
			      "name", t.name, "owner", t.owner, "scopes", json_object_get(g.doc, "scopes"),
			      "project_ids",
			      json_object_get(g.doc, "project_ids") ? json_object_get(g.doc, "project_ids")
								    : json_array(),
			      "created_at", (json_int_t)t.created_ms, "expires_at",
			      expires ? json_integer(expires) : json_null());
	memset(secret, 0, sizeof(secret));
	http_json_doc(resp, 201, o);
out:
	grant_free(&g);
	buf_free(&err);
}

void handle_tokens_revoke(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	const char *tid = req->params[0];
	struct buf err = { 0 };
	json_t *mine = NULL;
	if (!manages_all(req->who)) {
		/* Only one's own tokens. */
		int rc = identity_tokens_json(a->id, owner_of(req->who), &mine, &err);
		if (rc < 0) {
			store_error(resp, rc, &err);
			goto out;
		}
		bool found = false;
		size_t i;
		json_t *v;
		json_array_foreach(mine, i, v)
			found |= !strcmp(json_string_value(json_object_get(v, "id")) ?: "", tid);
		if (!found) {
			audit(a, req, "token.revoke", tid, "denied", "not the caller's token");
			http_error(resp, 404, "no live token with id %.40s of yours", tid);
			goto out;
		}
	}
	int rc = identity_token_revoke(a->id, tid, &err);
	if (rc == 1) {
		http_error(resp, 404, "no live token with id %.40s", tid);
	} else if (rc < 0) {
		store_error(resp, rc, &err);
	} else {
		audit(a, req, "token.revoke", tid, "ok", "");
		http_json_bool(resp, 200, "revoked", true);
	}
out:
	json_decref(mine);
	buf_free(&err);
}

/* --- users and roles ------------------------------------------------------------ */

void handle_users_list(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	const char *q = http_query_arg(req, "query");
	const char *pg = http_query_arg(req, "page"), *ps = http_query_arg(req, "page_size");
	uint64_t page = 0, size = 50;
	if ((pg && (parse_u64(pg, &page) < 0 || page > 1000000)) ||
	    (ps && (parse_u64(ps, &size) < 0 || !size || size > 100))) {
		http_error(resp, 400, "page: 0 or more; page_size: 1 to 100");
		return;
	}
	struct buf err = { 0 };
	json_t *arr;
	size_t total = 0;
	int rc = identity_users_json(a->id, q, (unsigned)page, (unsigned)size, true, &arr, &total, &err);
	if (rc < 0)
		store_error(resp, rc, &err);
	else
		http_json_doc(resp, 200, json_pack("{s:o, s:I, s:I, s:I}", "users", arr, "total",
						 (json_int_t)total, "page", (json_int_t)page, "pages",
						 (json_int_t)((total + size - 1) / size)));
	buf_free(&err);
}

void handle_users_create(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct buf err = { 0 };
	char *email = NULL, *password = NULL, *given = NULL, *family = NULL;
	json_t *doc = req_load(req->body, req->body_len, &err);
	if (!doc || req_string(doc, "email", IDENTITY_MAX_EMAIL, &email, &err) < 0 ||
	    req_string(doc, "password", 1024, &password, &err) < 0 ||
	    req_string(doc, "given_name", IDENTITY_MAX_NAME, &given, &err) < 0 ||
	    req_string(doc, "family_name", IDENTITY_MAX_NAME, &family, &err) < 0) {
		http_error(resp, 400, "%s", err.data);
		goto out;
	}
	struct user_info u;
	int rc = identity_user_create(a->id, email, password, given, family, &u, &err);
	if (rc < 0) {
		store_error(resp, rc, &err);
		goto out;
	}
	audit(a, req, "user.create", u.id, "ok", u.email);
	http_json_doc(resp, 201, user_json(&u));
out:
	free_secret(password);
	free_all(email, given, family);
	json_decref(doc);
	buf_free(&err);
}

void handle_user_roles_set(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct buf err = { 0 };
	const char **names = NULL;
	size_t n = 0;
	json_t *doc = req_load(req->body, req->body_len, &err);
	if (!doc || string_list(doc, "roles", IDENTITY_MAX_PATTERNS, &names, &n, &err) < 0) {
		http_error(resp, 400, "%s", err.data);
		goto out;
	}
	int rc = identity_roles_set(a->id, req->params[0], names, n, &err);
	if (rc < 0) {
		audit(a, req, "role.assignment.set", req->params[0], "failed", err.data);
		store_error(resp, rc, &err);
		goto out;
	}
	struct buf list = { 0 };
	for (size_t i = 0; i < n; i++)
		buf_printf(&list, "%s%s", i ? ", " : "", names[i]);
	audit(a, req, "role.assignment.set", req->params[0], "ok", list.data ? list.data : "");
	buf_free(&list);
	json_t *roles;
	if (identity_roles_json(a->id, req->params[0], NULL, 0, &roles, &err) < 0)
		roles = json_array();
	http_json_doc(resp, 200, json_pack("{s:s, s:o}", "user_id", req->params[0], "roles", roles));
out:
	free(names);
	json_decref(doc);
	buf_free(&err);
}

void handle_roles_list(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct buf err = { 0 };
	json_t *arr;
	int rc = identity_roles_json(a->id, http_query_arg(req, "user_id"), NULL, 0, &arr, &err);
	if (rc < 0)
		store_error(resp, rc, &err);
	else
		http_json_doc(resp, 200, json_pack("{s:o}", "roles", arr));
	buf_free(&err);
}

static void role_put(struct server *srv, const struct http_req *req, struct http_resp *resp,
		     const char *role_id)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct buf err = { 0 };
	struct grant_req g;
	if (grant_parse(srv, req, "patterns", &g, resp) < 0)
		goto out;
	char id[IDENTITY_ID_LEN];
	int rc = identity_role_put(a->id, role_id, g.name, g.patterns, g.npatterns, g.projects, g.nprojects, id, &err);
	if (rc < 0) {
		store_error(resp, rc, &err);
		goto out;
	}
	audit(a, req, role_id ? "role.update" : "role.create", id, "ok", g.name ? g.name : "");
	json_t *arr;
	const char *names[] = { g.name };
	if (identity_roles_json(a->id, NULL, names, 1, &arr, &err) < 0)
		arr = json_array();
	json_t *one = json_array_get(arr, 0);
	http_json_doc(resp, role_id ? 200 : 201, one ? json_incref(one) : json_object());
	json_decref(arr);
out:
	grant_free(&g);
	buf_free(&err);
}

void handle_roles_create(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	role_put(srv, req, resp, NULL);
}

void handle_roles_update(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	role_put(srv, req, resp, req->params[0]);
}

void handle_roles_delete(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	struct buf err = { 0 };
	int rc = identity_role_delete(a->id, req->params[0], &err);
	if (rc < 0) {
		store_error(resp, rc, &err);
	} else {
		audit(a, req, "role.delete", req->params[0], "ok", "");
		http_json_bool(resp, 200, "deleted", true);
	}
	buf_free(&err);
}

void handle_audit_list(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = auth_of(srv, resp);
	if (!a)
		return;
	const char *b = http_query_arg(req, "before"), *l = http_query_arg(req, "limit");
	uint64_t before = 0, limit = 100;
	if ((b && parse_u64(b, &before) < 0) || (l && (parse_u64(l, &limit) < 0 || !limit || limit > 1000))) {
		http_error(resp, 400, "before: an entry id; limit: 1 to 1000");
		return;
	}
	struct buf err = { 0 };
	json_t *arr;
	int rc = identity_audit_json(a->id, (int64_t)MIN(before, (uint64_t)INT64_MAX), (unsigned)limit, &arr, &err);
	if (rc < 0)
		store_error(resp, rc, &err);
	else
		http_json_doc(resp, 200, json_pack("{s:o}", "entries", arr));
	buf_free(&err);
}
