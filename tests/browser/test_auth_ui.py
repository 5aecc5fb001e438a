"""Browser tests of sign-in and the Account page: a real ember-server with
--auth local (an admin bootstrapped from a password file), driven in
headless Chromium. The page shows the sign-in page, the server's message
for a wrong password, the flame graph once signed in; a service token made
on the Account page is shown once and works as a bearer token until it is
revoked there; a user made there gets a role; the audit log lists all of
it; an expired access cookie is renewed silently, a lost session brings
the sign-in page back; tabs the user may not use are hidden (and the API
refuses them); signing out returns to the sign-in page. With --auth none
no sign-in page ever shows."""

import json
import os
import shutil
import tempfile
import time
import urllib.request

import pytest

from cdp import CDPError
from conftest import PROJECT, no_errors, open_ui, shot, start_server, wait_state  # noqa: F401
from harness import json_call
from harness import Server, http  # (tests/lib)

ADMIN = "admin@example.com"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def local_server(request):
    data_dir = tempfile.mkdtemp(prefix="ember-browser-auth-")
    request.addfinalizer(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    pw = os.path.join(data_dir, "admin-password")
    with open(pw, "w") as f:
        f.write(PASSWORD + "\n")
    srv = Server(os.path.join(data_dir, "data"), None, "--auth", "local", "--admin-email", ADMIN,
                 "--admin-password-file", pw)
    request.addfinalizer(srv.stop)
    srv.start()
    srv.base = srv.url
    return srv


def bearer_get(server, path, token):
    st, data = http("GET", server.url + path, None, {"Authorization": "Bearer " + token})
    return st, json.loads(data or b"null")


def api_login(server, email, password):
    """A cookie session outside the browser: (opener, csrf value)."""
    jar = urllib.request.HTTPCookieProcessor()
    opener = urllib.request.build_opener(jar)
    req = urllib.request.Request(server.url + "/api/v1/auth/login", method="POST",
                                 data=json.dumps({"email": email, "password": password}).encode())
    with opener.open(req, timeout=30) as r:
        assert r.status == 200
    csrf = next(c.value for c in jar.cookiejar if c.name == "ember_csrf")
    return opener, csrf


def api_call(opener, csrf, server, method, path, body=None):
    return json_call(opener, method, server.url + path, body, csrf)


def js(s):
    return json.dumps(s)


def set_value(page, selector, value):
    page.evaluate(f"""(() => {{ const e = document.querySelector({js(selector)});
        e.value = {js(value)}; e.dispatchEvent(new Event('input', {{bubbles: true}})); }})()""")


def click(page, selector):
    page.evaluate(f"document.querySelector({js(selector)}).click()")


def visible(page, selector):
    return page.evaluate(f"""(() => {{ const e = document.querySelector({js(selector)});
        return !!e && !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length); }})()""")


def sign_in(page, email, password):
    set_value(page, "#login-email", email)
    set_value(page, "#login-password", password)
    page.evaluate("document.getElementById('login-form').requestSubmit()")


def wait_login(page, timeout=15):
    # (signing out loads the page again)
    wait_through_reload(page, "document.body.dataset.state === 'login' && !document.getElementById('login').hidden",
                        timeout=timeout)
    assert visible(page, "#login-form")
    assert not visible(page, "header.topbar"), "the sign-in page hides the rest of the page"


def open_tab(page, tab):
    click(page, f".acc-tabs button[data-tab={js(tab)}]")
    page.wait_for(f"!!document.querySelector('.acc-body[data-tab={tab}]') && "
                  "document.body.dataset.state !== 'loading'")
    assert page.evaluate("document.body.dataset.state") == "ready", page.evaluate(
        "document.querySelector('.acc-body').innerText")


def wait_through_reload(page, expression, timeout=20):
    """wait_for across the page's own location.reload(): the document may
    be between two pages while it is polled."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if page.evaluate(f"!!document.body && !!({expression})"):
                return
        except CDPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {expression!r}")
        page.pump(0.05)


def tabs(page):
    return page.evaluate("[...document.querySelectorAll('.acc-tabs button')].map((b) => b.dataset.tab)")


def test_sign_in_tokens_users_audit_sign_out(page, local_server):
    base = local_server.base
    page.navigate(base + "/")
    wait_login(page)
    shot(page, "auth-login")

    # A wrong password: the server's message, and still the sign-in page.
    sign_in(page, ADMIN, "not the password")
    page.wait_for("!document.getElementById('login-error').hidden")
    assert page.evaluate("document.getElementById('login-error').textContent") == "wrong email or password"
    assert page.evaluate("document.body.dataset.state") == "login"
    shot(page, "auth-login-error")

    # The right one: the flame graph view, as without sign-in (the server
    # holds nothing: its empty state), and the user menu names the user.
    sign_in(page, ADMIN, PASSWORD)
    wait_state(page, "empty")
    assert page.evaluate("document.getElementById('login').hidden")
    assert visible(page, "#view-flamegraph")
    assert page.evaluate("document.getElementById('user-email').textContent") == ADMIN
    # The flame graph's POST passed the server's CSRF check with the cookie session.
    assert "401" not in page.evaluate("document.getElementById('message').innerText")
    assert "403" not in page.evaluate("document.getElementById('message').innerText")

    # The user menu leads to the Account page; an admin sees every tab.
    click(page, "#user-button")
    assert visible(page, "#user-popover")
    assert "Signed in as " + ADMIN in page.evaluate("document.getElementById('user-popover').innerText")
    click(page, "#account-link")
    page.wait_for("!document.getElementById('view-account').hidden && document.body.dataset.state === 'ready'")
    assert tabs(page) == ["profile", "tokens", "users", "roles", "audit"]
    assert page.evaluate("document.querySelector('.acc-email').textContent") == ADMIN
    shot(page, "auth-profile")
    assert not visible(page, "#controls"), "the Account page has no time range or query"

    # --- a service token, read only, shown once ---
    open_tab(page, "tokens")
    click(page, "#token-new")
    set_value(page, "#token-form input[name=name]", "browser read token")
    click(page, "#token-form input[name=preset][value=read]")
    shot(page, "auth-token-form", full_page=True)
    page.evaluate("document.getElementById('token-form').requestSubmit()")
    page.wait_for("!!document.getElementById('token-secret')")
    secret = page.evaluate("document.getElementById('token-secret').value")
    assert secret and len(secret) >= 20
    assert "shown only once" in page.evaluate("document.querySelector('.acc-secret-box').innerText")
    assert visible(page, "#token-copy")
    page.wait_for("!!document.querySelector('#tokens-table tbody tr')")
    row = page.evaluate("[...document.querySelectorAll('#tokens-table tbody tr')].map((r) => r.innerText)")
    assert len(row) == 1 and "browser read token" in row[0] and "**:read" in row[0] and "All projects" in row[0]
    shot(page, "auth-token-created", full_page=True)

    st, body = bearer_get(local_server, "/public/api/v1/projects", secret)
    assert st == 200 and any(p["id"] == PROJECT for p in body["projects"])

    # Once: after Done, and on the page loaded again, the secret is nowhere.
    click(page, "#token-done")
    assert not page.evaluate(f"document.body.innerHTML.includes({js(secret)})")
    page.reload()
    page.wait_for("!!document.querySelector('#tokens-table tbody tr') && document.body.dataset.state === 'ready'")
    assert not page.evaluate(f"document.body.innerHTML.includes({js(secret)})")

    # Revoke, confirmed in the dialog: the next request with it is refused.
    click(page, "#tokens-table .token-revoke")
    page.wait_for("!!document.querySelector('dialog.acc-confirm[open]')")
    click(page, "dialog.acc-confirm button[data-confirm=yes]")
    page.wait_for("!!document.querySelector('.acc-body[data-tab=tokens] .acc-empty')")
    st, _ = bearer_get(local_server, "/public/api/v1/projects", secret)
    assert st == 401

    # --- a user, and a role for it ---
    open_tab(page, "users")
    click(page, "#user-new")
    set_value(page, "#user-form input[name=email]", "viewer@example.com")
    set_value(page, "#user-form input[name=password]", "viewer password 1")
    set_value(page, "#user-form input[name=given_name]", "Vera")
    page.evaluate("document.getElementById('user-form').requestSubmit()")
    page.wait_for("!!document.querySelector('#users-table tr[data-email=\"viewer@example.com\"]')")
    click(page, "#users-table tr[data-email='viewer@example.com'] .user-edit-roles")
    page.wait_for("!!document.getElementById('roles-form')")
    page.evaluate("""document.querySelectorAll('#roles-form input[name=role]').forEach((i) => {
        i.checked = i.value === 'System Viewer'; })""")
    shot(page, "auth-user-roles", full_page=True)
    page.evaluate("document.getElementById('roles-form').requestSubmit()")
    page.wait_for("""!document.getElementById('roles-form') && document.querySelector(
        '#users-table tr[data-email="viewer@example.com"] .user-roles').innerText.trim() === 'System Viewer'""")
    opener, csrf = api_login(local_server, "viewer@example.com", "viewer password 1")
    st, me = api_call(opener, csrf, local_server, "GET", "/api/v1/auth/me")
    assert st == 200 and "admin:audit:read" in me["permissions"]
    assert "admin:user:create" not in me["permissions"]

    # --- the roles, built-in ones locked ---
    open_tab(page, "roles")
    locked = page.evaluate("""[...document.querySelectorAll('#roles-table tbody tr')]
        .filter((r) => r.querySelector('.lock')).map((r) => r.dataset.name)""")
    assert set(locked) >= {"System Admin", "System Editor", "System Viewer", "Default Project Viewer"}
    assert not page.evaluate("document.querySelector('#roles-table tr[data-name=\"System Admin\"] button')")

    # A custom role bound to the default project: patterns and Project Access.
    click(page, "#role-new")
    set_value(page, "#role-form input[name=name]", "Default readers")
    set_value(page, "#role-form textarea[name=patterns]", "project:read\nservice:token:read")
    page.evaluate(f"document.querySelector('#role-form input[name=projects][value=\"{PROJECT}\"]').checked = true")
    shot(page, "auth-role-form", full_page=True)
    page.evaluate("document.getElementById('role-form').requestSubmit()")
    page.wait_for("!document.getElementById('role-form') && "
                  "!!document.querySelector('#roles-table tr[data-name=\"Default readers\"]')")
    row = page.evaluate("document.querySelector('#roles-table tr[data-name=\"Default readers\"]').innerText")
    assert "project:read" in row and "service:token:read" in row and "default" in row
    st, roles = api_call(opener, csrf, local_server, "GET", "/public/api/v1/roles")
    assert st == 200
    made = next(r for r in roles["roles"] if r["name"] == "Default readers")
    assert made["patterns"] == ["project:read", "service:token:read"] and made["project_ids"] == [PROJECT]
    assert not made["is_locked"]

    # --- the audit log, newest first ---
    open_tab(page, "audit")
    entries = page.evaluate("""[...document.querySelectorAll('#audit-table tbody tr')].map((r) =>
        ({id: Number(r.dataset.id), action: r.dataset.action, text: r.innerText}))""")
    actions = [e["action"] for e in entries]
    for a in ("auth.login", "token.create", "token.revoke", "user.create", "role.assignment.set", "role.create"):
        assert a in actions, (a, actions)
    ids = [e["id"] for e in entries]
    assert ids == sorted(ids, reverse=True)
    assert any("failed" in e["text"] for e in entries if e["action"] == "auth.login")
    shot(page, "auth-audit", full_page=True)

    # --- sign out: the sign-in page, and the cookies no longer work ---
    click(page, "#user-button")
    click(page, "#sign-out")
    wait_login(page)
    st = page.evaluate("fetch('/api/v1/auth/me').then((r) => r.status)")
    assert st == 401
    no_errors(page, allow=[lambda e: "401" in str(e)])


def test_refresh_and_lost_session(page, local_server):
    """An expired access cookie is renewed from the refresh cookie without
    the user noticing; without a refresh cookie the sign-in page shows
    and, once signed in, the page loads again where it was."""
    base = local_server.base
    page.navigate(base + "/")
    wait_login(page)
    sign_in(page, ADMIN, PASSWORD)
    wait_state(page, "empty")

    page.send("Network.deleteCookies", name="ember_access", url=base + "/")
    assert "ember_access" not in str(page.send("Network.getCookies", urls=[base + "/"]))
    page.evaluate("document.querySelector('a[data-view=functions]').click()")
    page.wait_for("document.body.dataset.state !== 'loading'")
    assert page.evaluate("document.body.dataset.state") in ("empty", "ready")
    assert page.evaluate("document.getElementById('login').hidden")
    cookies = page.send("Network.getCookies", urls=[base + "/"])["cookies"]
    assert any(c["name"] == "ember_access" for c in cookies), "the refresh set a new access cookie"

    # The whole session gone (access and refresh): the next request shows
    # the sign-in page; signing in loads the same view again.
    for name, path in (("ember_access", "/"), ("ember_refresh", "/api/v1/auth")):
        page.send("Network.deleteCookies", name=name, url=base + path)
    page.evaluate("document.querySelector('a[data-view=entities]').click()")
    wait_login(page)
    sign_in(page, ADMIN, PASSWORD)
    wait_through_reload(page, "document.body.dataset.state !== 'loading' && document.body.dataset.state !== 'login'"
                        " && !document.getElementById('view-entities').hidden")
    assert "view=entities" in page.evaluate("location.search")


def test_tabs_follow_permissions(page, local_server):
    """A user with only the default project's viewer role sees the Profile
    tab alone; the API refuses the others all the same."""
    opener, csrf = api_login(local_server, ADMIN, PASSWORD)
    st, _ = api_call(opener, csrf, local_server, "POST", "/public/api/v1/users",
                     {"email": "plain@example.com", "password": "plain password 1"})
    assert st == 201
    base = local_server.base
    page.navigate(base + "/")
    # Another test's session may still be there: start signed out.
    page.send("Network.clearBrowserCookies")
    page.navigate(base + "/?view=account&tab=users")
    wait_login(page)
    sign_in(page, "plain@example.com", "plain password 1")
    page.wait_for("!document.getElementById('view-account').hidden && document.body.dataset.state === 'ready'")
    assert tabs(page) == ["profile"]
    assert page.evaluate("document.querySelector('.acc-body').dataset.tab") == "profile"
    st = page.evaluate("""fetch('/public/api/v1/users').then((r) => r.status)""")
    assert st == 403
    st = page.evaluate("""fetch('/public/api/v1/service-tokens', {method: 'POST',
        headers: {'Content-Type': 'application/json', 'X-Ember-CSRF': document.cookie.match(/ember_csrf=([^;]+)/)[1]},
        body: JSON.stringify({name: 'x', scopes: ['**:read']})}).then((r) => r.status)""")
    assert st == 403
    # No CSRF header: refused before the permission is even looked at.
    st = page.evaluate("""fetch('/public/api/v1/project/' + %s + '/labels', {method: 'POST',
        headers: {'Content-Type': 'application/json'}, body: '{}'}).then((r) => r.status)""" % js(PROJECT))
    assert st == 403


def test_open_server_shows_no_sign_in(page, empty_server):
    """--auth none: the page loads as ever, with no sign-in page; the user
    menu says the server is open and leads to the Account page."""
    open_ui(page, empty_server.base, state="empty")
    assert page.evaluate("document.getElementById('login').hidden")
    assert page.evaluate("document.getElementById('user-email').textContent") == "Open access"
    assert page.evaluate("document.getElementById('sign-out').hidden")
    click(page, "#user-button")
    click(page, "#account-link")
    page.wait_for("!document.getElementById('view-account').hidden && document.body.dataset.state === 'ready'")
    assert tabs(page) == ["profile", "tokens", "users", "roles", "audit"]
    assert "--auth none" in page.evaluate("document.querySelector('.acc-body').innerText")
    no_errors(page)


def test_audit_load_more(page, local_server):
    """More entries than one page: Load more asks for the ones before the
    last shown, until the first entry of all (the admin's creation)."""
    admin_op, admin_csrf = api_login(local_server, ADMIN, PASSWORD)
    for i in range(60):  # each token made is an audit entry
        st, _ = api_call(admin_op, admin_csrf, local_server, "POST", "/public/api/v1/service-tokens",
                         {"name": f"load-more-{i}", "scopes": ["project:read"]})
        assert st == 201
    page.navigate(local_server.base + "/")
    page.send("Network.clearBrowserCookies")
    page.navigate(local_server.base + "/?view=account&tab=audit")
    wait_login(page)
    sign_in(page, ADMIN, PASSWORD)
    page.wait_for("!document.getElementById('view-account').hidden && document.body.dataset.state === 'ready'")
    rows = "[...document.querySelectorAll('#audit-table tbody tr')].map((r) => Number(r.dataset.id))"
    first = page.evaluate(rows)
    assert len(first) == 50
    assert visible(page, "#audit-more")
    shown = first
    for _ in range(20):
        if not visible(page, "#audit-more"):
            break
        click(page, "#audit-more")
        page.wait_for(f"{rows}.length > {len(shown)} || document.getElementById('audit-more').hidden")
        page.wait_for("document.body.dataset.state === 'ready'")
        shown = page.evaluate(rows)
    assert len(shown) > 50 and not visible(page, "#audit-more")
    assert shown == sorted(set(shown), reverse=True), "newest first, none twice"
    assert shown[-1] == 1, "down to the first entry"
    made = page.evaluate("""[...document.querySelectorAll('#audit-table tbody tr')]
        .filter((r) => r.innerText.includes('load-more-')).length""")
    assert made == 60
