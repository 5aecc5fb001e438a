/* authz_bench - what the route check (auth/authz.h) costs a request, by
 * credential: none (--auth none), a service token (SHA-256, one indexed
 * SELECT of the token, one of its owner's roles, the grants parsed), a
 * session's access token (Ed25519 verification, the user's roles), and a
 * refusal (403, which also writes an audit row: a synced SQLite commit).
 *
 * usage: authz_bench [ITERATIONS]   (default 20000; refusals 1/20 of it)
 * Prints µs per check, wall and CPU, one line per credential. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "server/auth/auth_int.h"
#include "server/http/handlers.h"
#include "server/http/http.h"
#include "server/http/server.h"
#include "util.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const struct route *route_named(const char *pattern)
{
	for (unsigned i = 0; i < server_route_count; i++)
		if (!strcmp(server_routes[i].pattern, pattern))
			return &server_routes[i];
	return NULL;
}

static void run(struct server *srv, const char *what, const struct route *r, const char *authz,
		long n, bool want_ok)
{
	const char *headers[] = { "Authorization", authz, NULL, NULL };
	struct http_req req = { .method = r->method, .path = r->pattern, .headers = authz ? headers : NULL,
				.nparams = 1 };
	req.params[0] = "00000000-0000-0000-0000-000000000000";
	double w0 = now_s(), c0 = bench_cpu_s();
	for (long i = 0; i < n; i++) {
		struct http_resp resp = { .status = 200 };
		struct principal *who = NULL;
		bool ok = auth_request(srv, r, &req, &resp, &who);
		if (ok != want_ok) {
			fprintf(stderr, "authz_bench: %s: unexpected %s\n", what, ok ? "allow" : resp.body.data);
			exit(1);
		}
		principal_free(who);
		buf_free(&resp.body);
	}
	double w = now_s() - w0, c = bench_cpu_s() - c0;
	printf("%-34s %8.2f µs wall %8.2f µs CPU per check (%ld)\n", what, w * 1e6 / (double)n,
	       c * 1e6 / (double)n, n);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	if (n <= 0) {
		fprintf(stderr, "usage: authz_bench [ITERATIONS]\n");
		return 2;
	}
	char tmpl[] = "/tmp/ember-authz-bench-XXXXXX";
	char *dir = mkdtemp(tmpl);
	if (!dir)
		return 1;
	struct buf err = { 0 };
	struct server open_srv = { 0 }, srv = { 0 };
	struct auth_settings s = { .mode = AUTH_NONE, .data_dir = dir };
	if (auth_open(&s, &open_srv.auth, &err) < 0) {
		fprintf(stderr, "authz_bench: %s\n", err.data);
		return 1;
	}
	auth_close(open_srv.auth);
	s.mode = AUTH_LOCAL;
	if (auth_open(&s, &srv.auth, &err) < 0 || auth_open(&(struct auth_settings){ .mode = AUTH_NONE, .data_dir = dir },
							    &open_srv.auth, &err) < 0) {
		fprintf(stderr, "authz_bench: %s\n", err.data);
		return 1;
	}
	struct auth *a = srv.auth;
	const struct route *fg = route_named("/public/api/v1/project/{project_id}/flamegraph/json");
	const struct route *audit = route_named("/public/api/v1/audit");
	struct token_info t;
	char secret[IDENTITY_TOKEN_LEN], tok[128], jwt[4200];
	const char *scopes[] = { "project:read", "ingest:**" };
	if (identity_token_create(a->id, a->admin_id, "bench", scopes, 2, NULL, 0, 0, &t, secret, &err) < 0)
		return 1;
	snprintf(tok, sizeof(tok), "Bearer %s", secret);
	struct jwt_claims c = { 0 };
	snprintf(c.sub, sizeof(c.sub), "%s", a->admin_id);
	snprintf(c.jti, sizeof(c.jti), "bench");
	snprintf(c.iss, sizeof(c.iss), "%s", a->issuer);
	snprintf(c.aud, sizeof(c.aud), "%s", JWT_AUDIENCE);
	snprintf(c.typ, sizeof(c.typ), "access");
	c.iat = now_unix_ms() / 1000;
	c.exp = c.iat + 3600;
	struct buf j = { 0 };
	if (jwt_sign(a->keys, &c, &j, &err) < 0)
		return 1;
	snprintf(jwt, sizeof(jwt), "Bearer %s", j.data);
	run(&open_srv, "--auth none", fg, NULL, n, true);
	run(&srv, "service token, project:read", fg, tok, n, true);
	run(&srv, "session access token (admin)", fg, jwt, n, true);
	run(&srv, "refused (403, audited)", audit, tok, n / 20 ? n / 20 : 1, false);
	buf_free(&j);
	buf_free(&err);
	auth_close(srv.auth);
	auth_close(open_srv.auth);
	bench_rm_rf(dir);
	return 0;
}
