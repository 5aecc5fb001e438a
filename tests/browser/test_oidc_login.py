"""Signing in with OIDC in headless Chromium: the UI served by an
ember-server with --auth oidc, a real OpenID Connect provider on loopback
(tests/oidc_provider, see tests/integration/test_oidc.py), and a real
click on the sign-in link. The browser follows the provider's redirects
and keeps the cookies itself; the test only reads where it ended up.

The link is the sign-in page's own "Sign in with your identity provider",
shown because GET /api/v1/auth/config says the server runs with oidc."""

import os
import sys

import pytest

from conftest import shot

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from test_oidc import EMAIL, Provider, oidc_server  # noqa: E402  (the provider and the server)
from harness import free_port  # noqa: E402  (tests/lib)


@pytest.fixture(scope="module")
def oidc_env(tmp_path_factory):
    port = free_port()
    prov = Provider(f"http://127.0.0.1:{port}/api/v1/oauth2/callback")
    srv = oidc_server(tmp_path_factory.mktemp("oidc"), port, prov.issuer)
    yield prov, srv
    srv.stop()
    prov.stop()


def test_click_through_the_oidc_sign_in(oidc_env, page):
    prov, srv = oidc_env
    page.navigate(srv.url + "/")
    # The sign-in page offers the provider (and the password form).
    page.wait_for("!document.getElementById('login').hidden && "
                  "!document.getElementById('login-oidc').hidden", timeout=20)
    assert page.evaluate("!document.getElementById('login-form').hidden")
    shot(page, "oidc-sign-in-page")
    me = page.evaluate("fetch('/api/v1/auth/me').then(r => r.status)")
    assert me == 401, "signed in before signing in"
    r = page.evaluate("(() => { const b = document.getElementById('login-oidc').getBoundingClientRect();"
                      " return [b.x + b.width / 2, b.y + b.height / 2]; })()")
    page.events.clear()
    page.click(*r)
    # login -> provider /authorize -> /login -> /authorize/callback -> callback -> "/"
    page.wait_for(f"location.href === '{srv.url}/' && document.readyState === 'complete'", timeout=30)
    cookies = page.evaluate("document.cookie")
    assert "ember_csrf=" in cookies and "ember_access" not in cookies, cookies  # HttpOnly
    user = page.evaluate("fetch('/api/v1/auth/me').then(r => r.json())")
    assert user["mode"] == "oidc" and user["user"]["email"] == EMAIL, user
    assert prov.stats()["token"] >= 1
    shot(page, "oidc-signed-in")
