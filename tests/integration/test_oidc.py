"""--auth oidc against a real OpenID Connect provider on loopback
(tests/oidc_provider: zitadel/oidc's OP package, built with the Go
toolchain by `make build/oidc_provider`). A client that follows redirects
and keeps cookies, as a browser does, walks the authorization code flow:
/api/v1/oauth2/login -> the provider (which approves the test user at
once) -> /api/v1/oauth2/callback -> session cookies -> /api/v1/auth/me.
No token here is made by the test: every ID token is the provider's,
signed with its current key.

Covered: first sign-in provisions the user with Default Project Viewer, a
second finds the same user; a tampered or missing state is refused; the
provider's key rotation (a new kid, then another algorithm with the old
keys dropped) is followed by fetching its JWKS again, and only then; the
provider down at start does not stop the server and the sign-in works once
it is up; a provider refusal, a redirect URI mismatch and an issuer
mismatch are clear errors; local sign-in stays for holders of
auth:local:login only; the audit log has the sign-ins."""

from http.cookiejar import CookieJar
import json
import os
import select
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from harness import BUILD, ROOT, Server, free_port, http, json_call, wait_until

PROVIDER = os.path.join(BUILD, "oidc_provider")
ADMIN = "admin@example.com"
PASSWORD = "correct horse battery staple"
CLIENT_ID = "ember-test"
SECRET = "s3cret-for-the-test"
EMAIL = "oidc-user@example.test"


def provider_binary():
    """The provider, built when absent; the test skips only when the Go
    build is impossible here (no toolchain, no module proxy)."""
    if not os.path.exists(PROVIDER):
        r = subprocess.run(["make", "--no-print-directory", os.path.relpath(PROVIDER, ROOT)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not os.path.exists(PROVIDER):
            pytest.skip("the test OIDC provider (tests/oidc_provider, Go) could not be built: "
                        + (r.stdout + r.stderr)[-800:])
    return PROVIDER


class Provider:
    def __init__(self, redirect_uri, port=0, alg="RS256", *flags):
        self.proc = subprocess.Popen(
            [provider_binary(), "-port", str(port), "-client-id", CLIENT_ID, "-client-secret", SECRET,
             "-redirect-uri", redirect_uri, "-email", EMAIL, "-alg", alg, *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 20
        line = ""
        while time.time() < deadline and not line.startswith("ISSUER "):
            r, _, _ = select.select([self.proc.stdout], [], [], 1)
            if r:
                line = self.proc.stdout.readline()
                if not line:
                    break
        assert line.startswith("ISSUER "), f"the provider did not start: {line!r}"
        self.issuer = line.split()[1]

    def post(self, path, **q):
        st, body = http("POST", self.issuer + path + "?" + urllib.parse.urlencode(q), b"")
        assert st == 200, (path, st, body)
        return json.loads(body or b"null")

    def stats(self):
        st, body = http("GET", self.issuer + "/test/stats")
        assert st == 200
        return json.loads(body)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def oidc_server(tmp_path, port, issuer, *extra):
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    sec = tmp_path / "client-secret"
    sec.write_text(SECRET + "\n")
    return Server(tmp_path / "data", port, "--auth", "oidc", "--admin-email", ADMIN,
                  "--admin-password-file", str(pw), "--oidc-issuer", issuer,
                  "--oidc-client-id", CLIENT_ID, "--oidc-client-secret-file", str(sec),
                  "--oidc-redirect-uri", f"http://127.0.0.1:{port}/api/v1/oauth2/callback",
                  "--oidc-extra-params", "prompt=consent,access_type=offline", *extra).start()


@pytest.fixture
def env(tmp_path):
    port = free_port()
    prov = Provider(f"http://127.0.0.1:{port}/api/v1/oauth2/callback")
    srv = oidc_server(tmp_path, port, prov.issuer)
    yield prov, srv
    srv.stop()
    prov.stop()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


class Browser:
    """Cookies kept for every host (the jar), redirects followed or not."""

    def __init__(self):
        self.jar = CookieJar()
        cp = urllib.request.HTTPCookieProcessor(self.jar)
        self.follow = urllib.request.build_opener(cp)
        self.step_opener = urllib.request.build_opener(cp, NoRedirect)

    def cookie(self, name):
        return next((c.value for c in self.jar if c.name == name), None)

    def get(self, url, headers=None):
        """Follows redirects: (final URL, status, body)."""
        req = urllib.request.Request(url, headers=headers or {})
        try:
            with self.follow.open(req, timeout=30) as r:
                return r.geturl(), r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.geturl(), e.code, e.read()

    def step(self, url, headers=None):
        """One request: (status, Location resolved against url, body)."""
        req = urllib.request.Request(url, headers=headers or {})
        try:
            with self.step_opener.open(req, timeout=30) as r:
                return r.status, None, r.read()
        except urllib.error.HTTPError as e:
            loc = e.headers.get("Location")
            return e.code, urllib.parse.urljoin(url, loc) if loc else None, e.read()

    def to_callback(self, srv):
        """Walks login -> provider until the provider sends the browser
        back to ember's callback; returns that URL (not fetched)."""
        st, loc, body = self.step(srv.url + "/api/v1/oauth2/login")
        assert st == 302, (st, body)
        for _ in range(10):
            if loc.startswith(srv.url + "/api/v1/oauth2/callback"):
                return loc
            st, loc, body = self.step(loc)
            assert st in (302, 303), (st, body)
        raise AssertionError("the provider never sent the browser back")

    def api(self, srv, method, path, body=None):
        return json_call(self.follow, method, srv.url + path, body, self.cookie("ember_csrf"))


def sign_in(srv):
    b = Browser()
    url, st, body = b.get(srv.url + "/api/v1/oauth2/login")
    assert url.rstrip("/") == srv.url and st == 200, (url, st, body[:300])
    return b


def admin(srv):
    b = Browser()
    st, body = b.api(srv, "POST", "/api/v1/auth/login", {"email": ADMIN, "password": PASSWORD})
    assert st == 200, body
    return b


def test_first_sign_in_provisions_a_viewer_and_the_second_finds_them(env):
    prov, srv = env
    b = sign_in(srv)
    for c in ("ember_access", "ember_refresh", "ember_csrf"):
        assert b.cookie(c), f"no {c} cookie after the callback"
    assert b.cookie("ember_oidc") is None, "the flow cookie outlived its sign-in"
    st, me = b.api(srv, "GET", "/api/v1/auth/me")
    assert st == 200 and me["mode"] == "oidc" and me["kind"] == "user", me
    user = me["user"]
    assert user["email"] == EMAIL and user["given_name"] == "Ada" and user["family_name"] == "Lovelace"
    # A viewer: may read projects, may not manage users.
    st, _ = b.api(srv, "GET", "/public/api/v1/projects")
    assert st == 200
    st, body = b.api(srv, "GET", "/public/api/v1/users")
    assert st == 403, body

    a = admin(srv)  # local sign-in still works for System Admin (auth:local:login)
    st, roles = a.api(srv, "GET", "/public/api/v1/roles?user_id=" + user["id"])
    assert st == 200 and [r["name"] for r in roles["roles"]] == ["Default Project Viewer"], roles

    b2 = sign_in(srv)
    st, me2 = b2.api(srv, "GET", "/api/v1/auth/me")
    assert st == 200 and me2["user"]["id"] == user["id"]
    st, users = a.api(srv, "GET", "/public/api/v1/users?query=" + urllib.parse.quote(EMAIL))
    assert st == 200 and users["total"] == 1, users

    st, audit = a.api(srv, "GET", "/public/api/v1/audit?limit=1000")
    assert st == 200
    logins = [e for e in audit["entries"] if e["action"] == "auth.login" and e["outcome"] == "ok"
              and e["actor"] == user["id"]]
    assert len(logins) == 2 and all(e["origin"] == "ui" for e in logins), audit["entries"][:10]
    created = [e for e in audit["entries"] if e["action"] == "user.create" and e["target"] == user["id"]]
    assert len(created) == 1

    # The refresh cookie works for an OIDC session as for a local one.
    st, body = b.api(srv, "POST", "/api/v1/auth/refresh")
    assert st == 200 and body["user"]["id"] == user["id"], body


def test_the_authorization_request_carries_pkce_scopes_and_extra_params(env):
    prov, srv = env
    b = Browser()
    st, loc, _ = b.step(srv.url + "/api/v1/oauth2/login")
    assert st == 302 and loc.startswith(prov.issuer + "/authorize?")
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(loc).query)
    assert q["response_type"] == ["code"] and q["client_id"] == [CLIENT_ID]
    assert q["scope"] == ["openid email profile"]
    assert q["code_challenge_method"] == ["S256"] and len(q["code_challenge"][0]) == 43
    assert len(q["state"][0]) == 43 and len(q["nonce"][0]) == 43
    assert q["prompt"] == ["consent"] and q["access_type"] == ["offline"]
    assert q["redirect_uri"] == [srv.url + "/api/v1/oauth2/callback"]
    flow = next(c for c in b.jar if c.name == "ember_oidc")
    assert flow.path == "/api/v1/oauth2" and flow.has_nonstandard_attr("HttpOnly")
    assert 0 < flow.expires - time.time() <= 61
    # Each sign-in gets its own state.
    _, loc2, _ = Browser().step(srv.url + "/api/v1/oauth2/login")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(loc2).query)["state"] != q["state"]


def test_a_tampered_or_missing_state_is_refused(env):
    prov, srv = env
    b = Browser()
    cb = b.to_callback(srv)
    parts = urllib.parse.urlsplit(cb)
    q = dict(urllib.parse.parse_qsl(parts.query))
    bad = dict(q, state=q["state"][:-1] + ("A" if q["state"][-1] != "A" else "B"))
    st, _, body = b.step(parts._replace(query=urllib.parse.urlencode(bad)).geturl())
    assert st == 400 and "invalid state" in json.loads(body)["error"], body
    assert b.cookie("ember_access") is None
    # The flow is spent: the right state now finds no sign-in either.
    st, _, body = b.step(cb)
    assert st == 400 and "invalid state" in json.loads(body)["error"], body
    # Another browser (no flow cookie) with a genuine code and state.
    cb2 = Browser().to_callback(srv)
    st, _, body = Browser().step(cb2)
    assert st == 400 and "invalid state" in json.loads(body)["error"], body
    a = admin(srv)
    _, audit = a.api(srv, "GET", "/public/api/v1/audit?limit=1000")
    assert sum(e["action"] == "auth.login" and e["outcome"] == "failed" for e in audit["entries"]) >= 3


def test_client_secret_basic_or_post_as_the_provider_lists(env, tmp_path):
    prov, srv = env
    sign_in(srv)
    st = prov.stats()
    assert st["token_basic"] == 1 and st["token_post"] == 0, st
    port = free_port()
    prov2 = Provider(f"http://127.0.0.1:{port}/api/v1/oauth2/callback", 0, "ES256", "-post-only")
    (tmp_path / "post").mkdir()
    srv2 = oidc_server(tmp_path / "post", port, prov2.issuer)
    try:
        sign_in(srv2)
        st = prov2.stats()
        assert st["token_basic"] == 0 and st["token_post"] == 1, st
    finally:
        srv2.stop()
        prov2.stop()


def test_key_rotation_fetches_the_jwks_again(env):
    prov, srv = env
    sign_in(srv)
    after_first = prov.stats()["keys"]
    sign_in(srv)
    assert prov.stats()["keys"] == after_first, "the JWKS was fetched again without a new key"
    prov.post("/test/rotate", alg="ES256")
    b = sign_in(srv)
    assert prov.stats()["keys"] == after_first + 1
    prov.post("/test/rotate", alg="EdDSA", drop="1")
    b = sign_in(srv)
    assert prov.stats()["keys"] == after_first + 2
    st, me = b.api(srv, "GET", "/api/v1/auth/me")
    assert st == 200 and me["user"]["email"] == EMAIL


def test_provider_down_at_start_then_up(tmp_path):
    port, pport = free_port(), free_port()
    srv = oidc_server(tmp_path, port, f"http://127.0.0.1:{pport}")
    try:
        st, body = http("GET", srv.url + "/api/v1/oauth2/login")
        assert st == 502 and "OIDC provider unreachable" in json.loads(body)["error"], body
        prov = Provider(f"http://127.0.0.1:{port}/api/v1/oauth2/callback", port=pport)
        try:
            b = sign_in(srv)
            st, me = b.api(srv, "GET", "/api/v1/auth/me")
            assert st == 200 and me["user"]["email"] == EMAIL
        finally:
            prov.stop()
    finally:
        srv.stop()


def test_issuer_mismatch_is_refused(tmp_path):
    port = free_port()
    prov = Provider(f"http://127.0.0.1:{port}/api/v1/oauth2/callback")
    srv = oidc_server(tmp_path, port, prov.issuer + "/")
    try:
        st, body = http("GET", srv.url + "/api/v1/oauth2/login")
        err = json.loads(body)["error"]
        assert st == 502 and "OIDC provider unreachable" in err and "issuer" in err, body
    finally:
        srv.stop()
        prov.stop()


def test_provider_refusal_and_redirect_uri_mismatch(env):
    prov, srv = env
    prov.post("/test/deny")
    url, st, body = Browser().get(srv.url + "/api/v1/oauth2/login")
    err = json.loads(body)["error"]
    assert st == 401 and "access_denied" in err and "refused" in err, body
    # A callback that reaches the server under another name than the
    # registered redirect URI's loses the flow cookie: say so.
    st, body = http("GET", srv.url + "/api/v1/oauth2/callback?state=x&code=y",
                    headers={"Host": "ember.example.com"})
    assert st == 400 and "Redirect URI mismatch" in json.loads(body)["error"], body
    a = admin(srv)
    _, audit = a.api(srv, "GET", "/public/api/v1/audit?limit=100")
    assert any(e["action"] == "auth.login" and e["outcome"] == "failed" and "access_denied" in e["detail"]
               for e in audit["entries"]), audit["entries"][:5]


def test_local_sign_in_needs_auth_local_login_while_oidc_is_on(env):
    prov, srv = env
    a = admin(srv)
    st, body = a.api(srv, "POST", "/public/api/v1/users", {"email": "local@example.test",
                                                            "password": "a long enough password"})
    assert st == 201, body
    st, body = Browser().api(srv, "POST", "/api/v1/auth/login",
                             {"email": "local@example.test", "password": "a long enough password"})
    assert st == 403 and "auth:local:login" in body["error"], body


def test_bad_oidc_settings_stop_the_server(tmp_path):
    port = free_port()
    sec = tmp_path / "client-secret"
    sec.write_text(SECRET + "\n")
    srv = Server(tmp_path / "data", port, "--auth", "oidc", "--oidc-issuer", "http://idp.example.com",
                 "--oidc-client-id", "x", "--oidc-client-secret-file", str(sec),
                 "--oidc-redirect-uri", f"http://127.0.0.1:{port}/api/v1/oauth2/callback")
    srv.start(wait=False)
    wait_until(lambda: not srv.running(), 20, what="ember-server to refuse its settings")
    assert "--oidc-issuer: must be https://" in srv.output()


def test_a_browser_is_shown_an_error_page(env):
    prov, srv = env
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    st, body = http("GET", srv.url + "/api/v1/oauth2/callback?state=x&code=y", headers=html)
    page = body.decode()
    assert st == 400 and "<h1>Sign-in failed</h1>" in page and "invalid state" in page, page
    assert 'href="/api/v1/oauth2/login"' in page
    # What the query says is shown, never run.
    q = urllib.parse.urlencode({"error": "<script>alert(1)</script>", "error_description": "a&b"})
    st, body = http("GET", srv.url + "/api/v1/oauth2/callback?" + q, headers=html)
    page = body.decode()
    assert st == 401 and "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page, page
    assert "a&amp;b" in page
    # Without Accept: text/html, JSON as everywhere else.
    st, body = http("GET", srv.url + "/api/v1/oauth2/callback?state=x&code=y")
    assert st == 400 and "invalid state" in json.loads(body)["error"]


def test_an_email_ember_cannot_store_is_refused_clearly(env):
    prov, srv = env
    prov.post("/test/user", email="two words@example.test", given="Bad", family="Email")
    url, st, body = Browser().get(srv.url + "/api/v1/oauth2/login")
    err = json.loads(body)["error"]
    assert st == 400 and "cannot be made here" in err and "space" in err, body
    prov.post("/test/user", email="second@example.test", given="Grace", family="Hopper")
    b = sign_in(srv)
    st, me = b.api(srv, "GET", "/api/v1/auth/me")
    assert st == 200 and me["user"]["email"] == "second@example.test" and me["user"]["given_name"] == "Grace"
