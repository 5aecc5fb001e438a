/* oidc_api.c - the two OIDC endpoints (routes in server/http/routes.c, both
 * public): GET /api/v1/oauth2/login starts a sign-in at the provider (302
 * there, with the flow cookie), GET /api/v1/oauth2/callback finishes it
 * (oidc.h checks everything), provisions the user on a first sign-in (by
 * email, with Default Project Viewer), audits auth.login (origin ui),
 * sets the session cookies as a local sign-in does, and sends the browser
 * to "/". Every refusal is a JSON {"error": ...} and, but for a malformed
 * request, an audit entry. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "auth_int.h"
#include "cookie.h"
#include "log.h"
#include "server/http/handlers.h"
#include "server/query/request.h"
#include "util.h"

/* Whether the caller is a browser navigating (it asks for HTML first). */
static bool wants_html(const struct http_req *req)
{
	const char *acc = http_header(req, "Accept");
	return acc && !strncmp(acc, "text/html", 9);
}

/* A refusal: JSON {"error": ...}, or for a browser's navigation a small
 * page saying the same, with a link to start again. */
static void refuse(const struct http_req *req, struct http_resp *resp, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void refuse(const struct http_req *req, struct http_resp *resp, int status, const char *fmt, ...)
{
	struct buf m = { 0 };
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&m, fmt, ap);
	va_end(ap);
	if (!wants_html(req)) {
		http_error(resp, status, "%s", m.data);
		buf_free(&m);
		return;
	}
	buf_reset(&resp->body);
	buf_puts(&resp->body, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Sign-in failed - "
			      "ember</title></head>\n<body style=\"font-family:sans-serif;max-width:40em;margin:4em auto\">"
			      "<h1>Sign-in failed</h1>\n<p id=\"error\">");
	for (const char *c = m.data; c && *c; c++) {
		switch (*c) {
		case '<': buf_puts(&resp->body, "&lt;"); break;
		case '>': buf_puts(&resp->body, "&gt;"); break;
		case '&': buf_puts(&resp->body, "&amp;"); break;
		case '"': buf_puts(&resp->body, "&quot;"); break;
		case '\'': buf_puts(&resp->body, "&#39;"); break;
		default: buf_putc(&resp->body, *c);
		}
	}
	buf_puts(&resp->body, "</p>\n<p><a href=\"/api/v1/oauth2/login\">Sign in again</a></p></body></html>\n");
	resp->status = status;
	resp->content_type = "text/html; charset=utf-8";
	buf_free(&m);
}

static struct auth *oidc_auth(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	if (!srv->auth || !srv->auth->oidc) {
		refuse(req, resp, 404, "OIDC sign-in is off (--auth %s)",
			   auth_mode_name(srv->auth ? auth_mode(srv->auth) : AUTH_NONE));
		return NULL;
	}
	return srv->auth;
}

/* The flow cookie: Lax whatever --cookie-same-site says (Strict would keep
 * it from the provider's redirect back, a cross-site navigation), None
 * when None was asked (then Secure). */
static void flow_cookie(struct auth *a, struct http_resp *resp, const char *value, long max_age)
{
	bool none = !strcmp(a->s.cookie_same_site, "None");
	struct cookie_attrs at = { .path = OIDC_FLOW_PATH, .max_age = max_age,
				   .same_site = none ? "None" : "Lax", .http_only = true,
				   .secure = a->s.cookie_secure };
	struct buf c = { 0 };
	if (cookie_set(&c, OIDC_FLOW_COOKIE, value, &at) < 0)
		log_error("auth: the OIDC flow cookie could not be written");
	else
		http_add_header(resp, "Set-Cookie", "%s", c.data);
	buf_free(&c);
}

static void redirect(struct http_resp *resp, const char *to)
{
	http_add_header(resp, "Location", "%s", to);
	buf_reset(&resp->body);
	resp->status = 302;
	resp->content_type = "text/plain; charset=utf-8";
	buf_printf(&resp->body, "Found: %s\n", to);
}

void handle_oauth2_login(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = oidc_auth(srv, req, resp);
	if (!a)
		return;
	struct buf loc = { 0 }, cookie = { 0 }, err = { 0 };
	if (oidc_begin(a->oidc, now_unix_ms() / 1000, &loc, &cookie, &err) < 0) {
		refuse(req, resp, 502, "%s", err.data);
	} else {
		flow_cookie(a, resp, cookie.data, OIDC_FLOW_TTL_S);
		redirect(resp, loc.data);
	}
	if (cookie.data)
		OPENSSL_cleanse(cookie.data, cookie.len);
	buf_free(&loc);
	buf_free(&cookie);
	buf_free(&err);
}

/* The address this request came to, as the browser named it. */
static bool same_origin(const struct http_req *req, const char *origin)
{
	const char *host = http_header(req, "X-Forwarded-Host");
	if (!host)
		host = http_header(req, "Host");
	const char *o = strstr(origin, "://");
	if (!host || !o)
		return true; /* nothing to compare */
	o += 3;
	size_t n = strlen(o);
	if (!strncasecmp(host, o, n) && !host[n])
		return true;
	/* The default port may be left out on either side. */
	const char *dp = !strncmp(origin, "https", 5) ? ":443" : ":80";
	size_t hn = strlen(host), dn = strlen(dp);
	return (n == hn + dn && !strncasecmp(o, host, hn) && !strcmp(o + hn, dp)) ||
	       (hn == n + dn && !strncasecmp(host, o, n) && !strcmp(host + n, dp));
}

void handle_oauth2_callback(struct server *srv, const struct http_req *req, struct http_resp *resp)
{
	struct auth *a = oidc_auth(srv, req, resp);
	if (!a)
		return;
	const char *error = http_query_arg(req, "error");
	const char *state = http_query_arg(req, "state"), *code = http_query_arg(req, "code");
	flow_cookie(a, resp, "", 0); /* a flow is used once, whatever happens */
	if (error) {
		const char *desc = http_query_arg(req, "error_description");
		struct buf m = { 0 };
		buf_printf(&m, "the identity provider refused the sign-in: %.64s%s%.256s", error,
			   desc ? ": " : "", desc ? desc : "");
		if (desc && strstr(desc, "redirect"))
			buf_printf(&m, " (Redirect URI mismatch? --oidc-redirect-uri is %.256s; register exactly "
				       "that at the provider)", a->oidc ? oidc_redirect_uri(a->oidc) : "");
		identity_audit(a->id, "anonymous", "ui", "auth.login", "oidc", "failed", m.data);
		refuse(req, resp, 401, "%s", m.data);
		buf_free(&m);
		return;
	}
	if (!state || !code) {
		refuse(req, resp, 400, "the callback needs ?state= and ?code= (or ?error=) from the identity provider");
		return;
	}
	const char *ch = http_header(req, "Cookie");
	char fc[600];
	if (!ch || cookie_get(ch, OIDC_FLOW_COOKIE, fc, sizeof(fc)) <= 0) {
		if (!same_origin(req, oidc_redirect_uri(a->oidc)))
			refuse(req, resp, 400, "Redirect URI mismatch: this callback reached %.200s but "
					      "--oidc-redirect-uri is on %.256s; the browser keeps the sign-in cookie for "
					      "the address the sign-in started on, so use one address for both",
				   http_header(req, "Host"), oidc_redirect_uri(a->oidc));
		else
			refuse(req, resp, 400, "invalid state: no sign-in is in progress in this browser (the "
					      "sign-in cookie is missing or older than %d s); start again at "
					      "/api/v1/oauth2/login", OIDC_FLOW_TTL_S);
		identity_audit(a->id, "anonymous", "ui", "auth.login", "oidc", "failed", "no sign-in cookie");
		return;
	}
	struct oidc_user ou;
	struct buf err = { 0 };
	int rc = oidc_finish(a->oidc, fc, state, code, now_unix_ms() / 1000, &ou, &err);
	OPENSSL_cleanse(fc, sizeof(fc));
	if (rc < 0) {
		identity_audit(a->id, "anonymous", "ui", "auth.login", "oidc", "failed", err.data);
		refuse(req, resp, rc == OIDC_EREQUEST ? 400 : rc == OIDC_EPROVIDER ? 502 : 401, "%s", err.data);
		buf_free(&err);
		return;
	}
	/* The user, made on the first sign-in (a concurrent first sign-in may
	 * make it first: then it is found). */
	struct user_info u;
	bool created = false;
	rc = identity_user_by_email(a->id, ou.email, &u, &err);
	if (rc == 1) {
		buf_reset(&err);
		rc = identity_user_create(a->id, ou.email, NULL, ou.given_name, ou.family_name, &u, &err);
		created = rc == 0;
		if (rc == -1) {
			struct buf why = { 0 };
			if (identity_user_by_email(a->id, ou.email, &u, &why) == 0) {
				rc = 0; /* made meanwhile */
			} else {
				identity_audit(a->id, "anonymous", "ui", "auth.login", ou.email, "failed", err.data);
				refuse(req, resp, 400, "the identity provider's user %s cannot be made here: %s",
				       ou.email, err.data ? err.data : "?");
				buf_free(&why);
				buf_free(&err);
				return;
			}
			buf_free(&why);
		}
	}
	if (rc == 0 && created)
		identity_audit(a->id, u.id, "ui", "user.create", u.id, "ok", "first OIDC sign-in");
	if (rc == 0)
		rc = auth_sign_in(a, &u, resp, &err);
	if (rc != 0) {
		log_error("auth: OIDC sign-in of %s failed: %s", ou.email, err.data ? err.data : "?");
		refuse(req, resp, 503, "the identity store failed: %s", err.data ? err.data : "?");
		buf_free(&err);
		return;
	}
	identity_audit(a->id, u.id, "ui", "auth.login", ou.email, "ok", "oidc");
	redirect(resp, "/");
	buf_free(&err);
}
