/* test_authz - the route table against every kind of credential.
 *
 * For each route of server/http/routes.c and each credential (none, an expired
 * session, a revoked service token, a token of another project, a user
 * whose roles lack the permission, a user whose roles hold it), the route
 * check (auth_request, what http.c runs on the headers) must allow or
 * refuse with the status the table below expects. The expectation is
 * written per class of route (public, signed-in, in a project, from the
 * body, outside any project), not computed by the code under test; every
 * route must name a permission the catalogue knows. */
#include "testutil.h"

#include <jansson.h>

#include "server/auth/auth_int.h"
#include "server/auth/perm.h"
#include "server/http/handlers.h"
#include "server/http/http.h"
#include "server/http/server.h"
#include "util.h"

#define PROJECT_X "11111111-1111-4111-8111-111111111111"
#define PROJECT_Y "22222222-2222-4222-8222-222222222222"

enum cred { NONE, EXPIRED, REVOKED, WRONG_PROJECT, INSUFFICIENT, RIGHT, NCRED };
static const char *const cred_name[] = { "no credential", "expired session", "revoked token",
					 "another project's token", "insufficient role", "right role" };

enum klass { PUBLIC, SIGNED_IN, IN_PROJECT, FROM_BODY, GLOBAL, NKLASS };

/* 0: allowed at the route check; else the status of the refusal. */
static const int expect[NKLASS][NCRED] = {
	/*              none expired revoked wrong-project insufficient right */
	[PUBLIC] = { 0, 401, 401, 0, 0, 0 },
	[SIGNED_IN] = { 401, 401, 401, 0, 0, 0 },
	[IN_PROJECT] = { 401, 401, 401, 403, 403, 0 },
	/* the handler checks the body's project (tests/integration/test_auth.py) */
	[FROM_BODY] = { 401, 401, 401, 0, 403, 0 },
	[GLOBAL] = { 401, 401, 401, 403, 403, 0 },
};

static enum klass klass_of(const struct route *r)
{
	if (!strcmp(r->perm, AUTH_PUBLIC))
		return PUBLIC;
	if (!strcmp(r->perm, AUTH_SIGNED_IN))
		return SIGNED_IN;
	if (r->scope == ROUTE_PROJECT)
		return IN_PROJECT;
	if (r->scope == ROUTE_BODY)
		return FROM_BODY;
	return GLOBAL;
}

struct world {
	char *dir;
	struct server srv;
	char header[NCRED][4200];
};

static void sign(struct auth *a, const char *sub, int64_t iat, int64_t exp, char *out, size_t n)
{
	struct jwt_claims c = { 0 };
	snprintf(c.sub, sizeof(c.sub), "%s", sub);
	snprintf(c.jti, sizeof(c.jti), "t");
	snprintf(c.iss, sizeof(c.iss), "%s", a->issuer);
	snprintf(c.aud, sizeof(c.aud), "%s", JWT_AUDIENCE);
	snprintf(c.typ, sizeof(c.typ), "access");
	c.iat = iat;
	c.exp = exp;
	struct buf t = { 0 }, err = { 0 };
	assert_int_equal(jwt_sign(a->keys, &c, &t, &err), 0);
	snprintf(out, n, "Bearer %s", t.data);
	buf_free(&t);
	buf_free(&err);
}

static void setup_world(struct world *w, enum auth_mode mode)
{
	memset(w, 0, sizeof(*w));
	w->dir = make_temp_dir();
	char pw[512];
	snprintf(pw, sizeof(pw), "%s/pw", w->dir);
	write_text(pw, "a long admin password\n");
	struct auth_settings s = { .mode = mode, .data_dir = w->dir, .admin_email = "admin@example.com",
				   .admin_password_file = pw };
	struct buf err = { 0 };
	assert_int_equal(auth_open(&s, &w->srv.auth, &err), 0);
	struct auth *a = w->srv.auth;
	struct identity *id = a->id;
	int64_t now = now_unix_ms() / 1000;
	/* expired: the admin's session token, an hour old */
	sign(a, a->admin_id, now - 3600, now - 3000, w->header[EXPIRED], sizeof(w->header[EXPIRED]));
	/* revoked: an admin-owned token with every scope, revoked */
	struct token_info t;
	char secret[IDENTITY_TOKEN_LEN];
	const char *all[] = { "**:*" };
	assert_int_equal(identity_token_create(id, a->admin_id, "revoked", all, 1, NULL, 0, 0, &t, secret, &err), 0);
	assert_int_equal(identity_token_revoke(id, t.id, &err), 0);
	snprintf(w->header[REVOKED], sizeof(w->header[REVOKED]), "Bearer %s", secret);
	/* another project's: every scope, in project Y only */
	const char *y[] = { PROJECT_Y };
	assert_int_equal(identity_token_create(id, a->admin_id, "y", all, 1, y, 1, 0, &t, secret, &err), 0);
	snprintf(w->header[WRONG_PROJECT], sizeof(w->header[WRONG_PROJECT]), "Bearer %s", secret);
	/* insufficient: a new user (Default Project Viewer only) */
	struct user_info u;
	assert_int_equal(identity_user_create(id, "viewer@example.com", NULL, "", "", &u, &err), 0);
	sign(a, u.id, now, now + 300, w->header[INSUFFICIENT], sizeof(w->header[INSUFFICIENT]));
	/* right: the admin */
	sign(a, a->admin_id, now, now + 300, w->header[RIGHT], sizeof(w->header[RIGHT]));
	buf_free(&err);
}

static void teardown_world(struct world *w)
{
	auth_close(w->srv.auth);
	rm_rf(w->dir);
	free(w->dir);
}

/* The route check's answer: 0 allowed, else the refusal's status. */
static int check(struct world *w, const struct route *r, const char *authz)
{
	const char *headers[] = { "Authorization", authz, NULL, NULL };
	struct http_req req = { .method = r->method, .path = r->pattern, .headers = authz ? headers : NULL };
	if (strstr(r->pattern, "{")) {
		req.params[0] = strstr(r->pattern, "{project_id}") ? PROJECT_X : "0123";
		req.nparams = 1;
	}
	struct http_resp resp = { .status = 200 };
	struct principal *who = NULL;
	bool ok = auth_request(&w->srv, r, &req, &resp, &who);
	int status = ok ? 0 : resp.status;
	if (ok)
		assert_non_null(who);
	else
		assert_true(resp.body.len && strstr(resp.body.data, "\"error\""));
	principal_free(who);
	buf_free(&resp.body);
	return status;
}

static void every_route_names_a_known_permission(void **state)
{
	(void)state;
	for (unsigned i = 0; i < server_route_count; i++) {
		const struct route *r = &server_routes[i];
		assert_non_null(r->perm);
		if (strcmp(r->perm, AUTH_PUBLIC) && strcmp(r->perm, AUTH_SIGNED_IN) && !perm_known(r->perm))
			fail_msg("route %s %s needs \"%s\", which the catalogue does not list", r->method,
				 r->pattern, r->perm);
		if (r->scope == ROUTE_PROJECT && !strstr(r->pattern, "{project_id}"))
			fail_msg("route %s %s is checked in a project but has no {project_id}", r->method,
				 r->pattern);
	}
	/* Only the sign-in endpoints (local and OIDC), the health check and the
	 * UI's files are public. */
	unsigned pub = 0;
	for (unsigned i = 0; i < server_route_count; i++)
		if (!strcmp(server_routes[i].perm, AUTH_PUBLIC)) {
			const char *p = server_routes[i].pattern;
			assert_true(!strcmp(p, "/healthz") || !strcmp(p, "*") || !strncmp(p, "/api/v1/auth/", 13) ||
				    !strncmp(p, "/api/v1/oauth2/", 15));
			pub++;
		}
	assert_true(pub >= 3);
}

static void route_by_credential_matrix(void **state)
{
	(void)state;
	struct world w;
	setup_world(&w, AUTH_LOCAL);
	unsigned checked = 0, seen[NKLASS] = { 0 };
	for (unsigned i = 0; i < server_route_count; i++) {
		const struct route *r = &server_routes[i];
		enum klass k = klass_of(r);
		seen[k]++;
		for (int c = 0; c < NCRED; c++) {
			int got = check(&w, r, c == NONE ? NULL : w.header[c]);
			if (got != expect[k][c])
				fail_msg("%s %s (%s) with %s: %d, expected %d", r->method, r->pattern, r->perm,
					 cred_name[c], got, expect[k][c]);
			checked++;
		}
	}
	for (int k = 0; k < NKLASS; k++)
		assert_true(seen[k] > 0);
	assert_int_equal(checked, server_route_count * NCRED);
	/* The insufficient user reads the default project (its one role). */
	struct route fg = server_routes[0];
	for (unsigned i = 0; i < server_route_count; i++)
		if (strstr(server_routes[i].pattern, "/flamegraph/json"))
			fg = server_routes[i];
	const char *headers[] = { "Authorization", w.header[INSUFFICIENT], NULL, NULL };
	struct http_req req = { .method = "POST", .path = fg.pattern, .headers = headers, .nparams = 1 };
	req.params[0] = "00000000-0000-0000-0000-000000000000";
	struct http_resp resp = { .status = 200 };
	struct principal *who = NULL;
	assert_true(auth_request(&w.srv, &fg, &req, &resp, &who));
	principal_free(who);
	buf_free(&resp.body);
	teardown_world(&w);
}

/* --auth none: anyone may do everything, as before; a presented credential
 * that is not valid is still refused. */
static void open_server(void **state)
{
	(void)state;
	struct world w;
	setup_world(&w, AUTH_NONE);
	for (unsigned i = 0; i < server_route_count; i++) {
		assert_int_equal(check(&w, &server_routes[i], NULL), 0);
		assert_int_equal(check(&w, &server_routes[i], w.header[REVOKED]), 401);
	}
	teardown_world(&w);
}

/* Denials are audited with the actor and the permission. */
static void denials_are_audited(void **state)
{
	(void)state;
	struct world w;
	setup_world(&w, AUTH_LOCAL);
	const struct route *audit = NULL;
	for (unsigned i = 0; i < server_route_count; i++)
		if (!strcmp(server_routes[i].pattern, "/public/api/v1/audit"))
			audit = &server_routes[i];
	assert_non_null(audit);
	assert_int_equal(check(&w, audit, w.header[INSUFFICIENT]), 403);
	json_t *arr;
	struct buf err = { 0 };
	assert_int_equal(identity_audit_json(w.srv.auth->id, 0, 10, &arr, &err), 0);
	json_t *e = json_array_get(arr, 0);
	assert_string_equal(json_string_value(json_object_get(e, "action")), "permission.denied");
	assert_string_equal(json_string_value(json_object_get(e, "target")), "admin:audit:read");
	assert_string_equal(json_string_value(json_object_get(e, "outcome")), "denied");
	json_decref(arr);
	/* A flood of refusals writes at most 20 rows a second; the next row
	 * written says how many were not. */
	for (int i = 0; i < 500; i++)
		assert_int_equal(check(&w, audit, w.header[INSUFFICIENT]), 403);
	assert_int_equal(identity_audit_json(w.srv.auth->id, 0, 1000, &arr, &err), 0);
	size_t rows = json_array_size(arr);
	assert_true(rows >= 2 && rows <= 2 * 20 + 1);
	json_decref(arr);
	usleep(1100 * 1000);
	assert_int_equal(check(&w, audit, w.header[INSUFFICIENT]), 403);
	assert_int_equal(identity_audit_json(w.srv.auth->id, 0, 1, &arr, &err), 0);
	const char *detail = json_string_value(json_object_get(json_array_get(arr, 0), "detail"));
	assert_non_null(strstr(detail, "refusals before this one were not written"));
	json_decref(arr);
	buf_free(&err);
	teardown_world(&w);
}

UNIT_TEST_MAIN(
	cmocka_unit_test(every_route_names_a_known_permission),
	cmocka_unit_test(route_by_credential_matrix),
	cmocka_unit_test(open_server),
	cmocka_unit_test(denials_are_audited))
