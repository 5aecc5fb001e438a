"""Users, roles and service tokens against a real ember-server started
with --auth local: anonymous requests are refused, a user signs in and
gets session cookies (CSRF double submit), service tokens carry scopes and
projects and never outgrow their owner, revocation and expiry take effect
on the next request, one project's data is never visible or writable
through another project's token, and no token can change the function
names another project sees (the forged-symbols reproduction). Every
denial is in the audit log."""

import hashlib
from http.cookiejar import CookieJar
import json
import os
import struct
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import ADMIN, PASSWORD, require_root
from harness import (BUILD, DEFAULT_PROJECT, Agent, Server, find, http, json_call, run_threads,
                     wait_until, walk)

import test_otlp


@pytest.fixture
def local(tmp_path, metadata_flags):
    """--auth local (conftest.py's), with the metadata in SQLite and, again,
    in PostgreSQL."""
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    srv = Server(tmp_path / "data", None, "--auth", "local", "--admin-email", ADMIN,
                 "--admin-password-file", str(pw), *metadata_flags).start()
    yield srv
    srv.stop()


class Session:
    """A browser-like client: a cookie jar, and the CSRF header from it."""

    def __init__(self, server):
        self.server = server
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie(self, name):
        return next((c.value for c in self.jar if c.name == name), None)

    def call(self, method, path, body=None, csrf=True):
        return json_call(self.opener, method, self.server.url + path, body,
                         self.cookie("ember_csrf") if csrf else None)

    def login(self, email, password):
        return self.call("POST", "/api/v1/auth/login", {"email": email, "password": password})


def bearer(server, method, path, token, body=None, headers=None):
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    st, data = http(method, server.url + path, body, h)
    try:
        return st, json.loads(data)
    except ValueError:
        return st, data


def otlp(server, token, project, exe="app"):
    h = {"Content-Type": "application/x-protobuf"}
    if token:
        h["Authorization"] = "Bearer " + token
    return http("POST", f"{server.url}/v1development/profiles?project={project}",
                test_otlp.build_request(exe=exe).SerializeToString(), h)


def flamegraph(server, token, project, exe="app"):
    body = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": "on_cpu",
                       "query": f'process.executable.name == "{exe}"'}}
    return bearer(server, "POST", f"/public/api/v1/project/{project}/flamegraph/json", token, body)


def project_ids(server, token):
    st, body = bearer(server, "GET", "/public/api/v1/projects", token)
    assert st == 200, body
    return {p["name"]: p["id"] for p in body["projects"]}


def admin_with_projects(server, *names):
    """Signs the admin in and creates each project by sending a profile to
    it: (the admin's Session, its access token, project name -> id)."""
    s = Session(server)
    token = s.login(ADMIN, PASSWORD)[1]["access_token"]
    for name in names:
        st, body = otlp(server, token, name)
        assert st == 200, body
    return s, token, project_ids(server, token)


def test_anonymous_is_refused_and_a_user_signs_in(local):
    # Without a credential only the health check, the UI's files and the
    # sign-in endpoints answer.
    for method, path in (("GET", "/public/api/v1/projects"), ("GET", "/metrics"),
                         ("POST", f"/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json"),
                         ("GET", "/public/api/v1/service-tokens"), ("GET", "/public/api/v1/audit")):
        st, body = bearer(local, method, path, None, {} if method == "POST" else None)
        assert st == 401 and "error" in body, (path, st, body)
    assert http("GET", local.url + "/healthz")[0] == 200
    assert http("GET", local.url + "/")[0] == 200
    st, _ = otlp(local, None, "default")
    assert st == 401
    # A wrong password (or email) is one answer, audited.
    s = Session(local)
    assert s.login(ADMIN, "wrong")[0] == 401
    assert s.login("nobody@example.com", PASSWORD)[0] == 401
    st, body = s.login(ADMIN, PASSWORD)
    assert st == 200 and body["user"]["email"] == ADMIN, body
    assert s.cookie("ember_access") and s.cookie("ember_refresh") and s.cookie("ember_csrf")
    st, me = s.call("GET", "/api/v1/auth/me")
    assert st == 200 and me["user"]["email"] == ADMIN and "admin:audit:read" in me["permissions"]
    # A cookie-authenticated request that is not a GET must carry the CSRF
    # header (a cross-site form cannot).
    q = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": "on_cpu"}}
    path = f"/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json"
    st, body = s.call("POST", path, q, csrf=False)
    assert st == 403 and "X-Ember-CSRF" in body["error"], body
    assert s.call("POST", path, q)[0] == 200
    # The access token also works as a bearer token (API clients).
    st, _ = bearer(local, "GET", "/public/api/v1/projects", body_token := s.login(ADMIN, PASSWORD)[1]["access_token"])
    assert st == 200, body_token
    # A forged or tampered session token is refused.
    parts = body_token.split(".")
    forged = parts[0] + "." + parts[1][:-2] + ("AA" if parts[1][-2:] != "AA" else "BB") + "." + parts[2]
    st, body = bearer(local, "GET", "/public/api/v1/projects", forged)
    assert st == 401 and body["error"].startswith("Invalid token"), body
    # Refresh gives a new access cookie; logout ends the session: the
    # refresh cookie no longer works.
    assert s.call("POST", "/api/v1/auth/refresh")[0] == 200
    old_refresh = s.cookie("ember_refresh")
    assert s.call("POST", "/api/v1/auth/logout")[0] == 200
    assert s.cookie("ember_access") is None
    replay = http("POST", local.url + "/api/v1/auth/refresh", b"",
                  {"Cookie": "ember_refresh=" + old_refresh})
    assert replay[0] == 401, replay
    # Everything above is in the audit log.
    s2 = Session(local)
    s2.login(ADMIN, PASSWORD)
    st, audit = s2.call("GET", "/public/api/v1/audit?limit=200")
    assert st == 200
    actions = [(e["action"], e["outcome"]) for e in audit["entries"]]
    assert ("auth.login", "failed") in actions and ("auth.login", "ok") in actions
    assert ("auth.logout", "ok") in actions
    assert ("permission.denied", "denied") in actions


def test_tokens_roles_and_projects(local):
    # The admin creates two projects by sending to them.
    s, admin_token, ids = admin_with_projects(local, "alpha", "beta")
    alpha, beta = ids["alpha"], ids["beta"]

    # A token for alpha only: ingest and read there, nothing elsewhere.
    st, tok = s.call("POST", "/public/api/v1/service-tokens",
                     {"name": "alpha agent", "scopes": ["ingest:**", "project:read"],
                      "project_ids": [alpha]})
    assert st == 201 and tok["token"].startswith("emb_"), tok
    ta = tok["token"]
    assert otlp(local, ta, "alpha")[0] == 200
    st, body = otlp(local, ta, "beta")
    assert st == 403 and "Insufficient permissions" in json.loads(body)["error"], body
    st, body = otlp(local, ta, "gamma")  # may not create projects
    assert st == 403, body
    assert "gamma" not in project_ids(local, admin_token)
    st, fg = flamegraph(local, ta, alpha)
    assert st == 200 and fg["total"] == 2 * 100, fg
    st, body = flamegraph(local, ta, beta)
    assert st == 403 and body["error"] == f"Insufficient permissions: project:read in project {beta}"
    assert project_ids(local, ta) == {"alpha": alpha}
    assert bearer(local, "GET", "/public/api/v1/audit", ta)[0] == 403
    assert bearer(local, "GET", "/public/api/v1/service-tokens", ta)[0] == 403
    # A token cannot make tokens (it could hand out scopes beyond its own).
    st, maker = s.call("POST", "/public/api/v1/service-tokens",
                       {"name": "maker", "scopes": ["service:token:*"]})
    assert st == 201
    st, body = bearer(local, "POST", "/public/api/v1/service-tokens", maker["token"],
                      {"name": "escalated", "scopes": ["**:*"]})
    assert st == 403 and "cannot create tokens" in body["error"], body
    # The secret is shown once: the list has no secrets.
    st, lst = s.call("GET", "/public/api/v1/service-tokens")
    assert st == 200 and tok["id"] in [t["id"] for t in lst["tokens"]]
    assert all("token" not in t for t in lst["tokens"])
    # Revocation takes effect on the next request.
    assert s.call("DELETE", f"/public/api/v1/service-tokens/{tok['id']}")[0] == 200
    st, body = flamegraph(local, ta, alpha)
    assert st == 401 and "revoked" in body["error"], body
    # Expiry likewise.
    st, short = s.call("POST", "/public/api/v1/service-tokens",
                       {"name": "short", "scopes": ["project:read"],
                        "expires_at": int(time.time() * 1000) + 1500})
    assert st == 201
    assert flamegraph(local, short["token"], alpha)[0] == 200
    time.sleep(2)
    st, body = flamegraph(local, short["token"], alpha)
    assert st == 401 and "expired" in body["error"], body

    # A new user has the Default Project Viewer role only: reads the
    # default project, nothing else, and cannot make tokens or users.
    st, user = s.call("POST", "/public/api/v1/users", {"email": "viewer@example.com",
                                                        "password": "viewer password 1"})
    assert st == 201, user
    v = Session(local)
    assert v.login("viewer@example.com", "viewer password 1")[0] == 200
    q = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": "on_cpu"}}
    assert v.call("POST", f"/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json", q)[0] == 200
    assert v.call("POST", f"/public/api/v1/project/{alpha}/flamegraph/json", q)[0] == 403
    assert v.call("POST", "/public/api/v1/service-tokens", {"name": "x", "scopes": ["**:*"]})[0] == 403
    assert v.call("POST", "/public/api/v1/users", {"email": "x@example.com"})[0] == 403
    st, me = v.call("GET", "/api/v1/auth/me")
    assert me["permissions"] == [], me
    # A project-scoped custom role: read alpha (and make tokens).
    st, role = s.call("POST", "/public/api/v1/roles",
                      {"name": "Alpha Reader", "patterns": ["project:read", "service:token:*"],
                       "project_ids": [alpha]})
    assert st == 201 and role["project_ids"] == [alpha], role
    st, body = s.call("PUT", f"/public/api/v1/users/{user['id']}/roles",
                      {"roles": ["Default Project Viewer", "No Such Role"]})
    assert st == 400 and "roles not found: No Such Role" in body["error"], body
    st, body = s.call("PUT", f"/public/api/v1/users/{user['id']}/roles",
                      {"roles": ["Default Project Viewer", "Alpha Reader"]})
    assert st == 200 and sorted(r["name"] for r in body["roles"]) == ["Alpha Reader",
                                                                      "Default Project Viewer"]
    # Role changes apply to the next request.
    assert v.call("POST", f"/public/api/v1/project/{alpha}/flamegraph/json", q)[0] == 200
    assert v.call("POST", f"/public/api/v1/project/{beta}/flamegraph/json", q)[0] == 403
    # service:token:* in alpha does not grant making tokens (outside any project).
    assert v.call("POST", "/public/api/v1/service-tokens", {"name": "x", "scopes": ["**:*"]})[0] == 403
    # A token never outgrows its owner: the admin gives the viewer
    # unscoped token rights, the viewer makes a "**:*" token, which still
    # reads only what the viewer reads, and nothing once the role goes.
    st, role = s.call("POST", "/public/api/v1/roles", {"name": "Token Maker", "patterns": ["service:token:*"]})
    assert st == 201
    assert s.call("PUT", f"/public/api/v1/users/{user['id']}/roles",
                  {"roles": ["Alpha Reader", "Token Maker"]})[0] == 200
    st, big = v.call("POST", "/public/api/v1/service-tokens", {"name": "all", "scopes": ["**:*"]})
    assert st == 201, big
    assert flamegraph(local, big["token"], alpha)[0] == 200
    assert flamegraph(local, big["token"], beta)[0] == 403
    assert bearer(local, "GET", "/public/api/v1/audit", big["token"])[0] == 403
    assert s.call("PUT", f"/public/api/v1/users/{user['id']}/roles", {"roles": []})[0] == 200
    assert flamegraph(local, big["token"], alpha)[0] == 403
    # Built-in roles are locked.
    st, roles = s.call("GET", "/public/api/v1/roles")
    admin_role = next(r for r in roles["roles"] if r["name"] == "System Admin")
    assert admin_role["id"] == "00000000-0000-0000-0000-000000000001" and admin_role["is_locked"]
    assert s.call("DELETE", f"/public/api/v1/roles/{admin_role['id']}")[0] == 400


def forged_symfile():
    """A valid symbol file naming every address PWNED_BY_OTHER_TENANT, and
    claiming DWARF (lines and inlines) so it outranks ELF symbols."""
    strtab = b"\x00PWNED_BY_OTHER_TENANT\x00"
    return (b"EMSYM002" + struct.pack("<IIIIQIIQ", 1, 2, 1, len(strtab), 0, 3, 0, 0) +
            struct.pack("<QQQ", 0, 0, 0x10000000) +
            struct.pack("<II", 0, 1) + struct.pack("<II", 0x0fffffff, 0) +
            struct.pack("<IIII", 1, 0xffffffff, 0, 0) + strtab)


def file_id(path):
    """lib/fileid.c: SHA-256 of the first and last 4 KiB and the size."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(4096)
        f.seek(max(0, size - 4096))
        tail = f.read(4096)
    return hashlib.sha256(head + tail + size.to_bytes(8, "big")).hexdigest()[:32]


def test_no_token_changes_what_another_project_sees(local, tmp_path):
    """The forged-symbols reproduction: an agent token of one project PUTs
    a symbol file for another project's binary. It lands in its own
    project's symbols only; the victim's functions keep their names."""
    require_root()
    s = Session(local)
    admin_token = s.login(ADMIN, PASSWORD)[1]["access_token"]
    for name in ("victim", "attacker"):
        assert otlp(local, admin_token, name)[0] == 200
    ids = project_ids(local, admin_token)
    tokens = {}
    for name in ("victim", "attacker"):
        st, t = s.call("POST", "/public/api/v1/service-tokens",
                       {"name": name, "scopes": ["ingest:**", "project:read"], "project_ids": [ids[name]]})
        assert st == 201
        tokens[name] = t["token"]
    agent = Agent(local.url, "-project=victim", "-auth-token=" + tokens["victim"],
                  "-on-cpu-sampling-rate=97").start()
    try:
        exe = os.path.join(BUILD, "workloads", "cpu_split")
        subprocess.run([exe, "3"], check=True, stdout=subprocess.DEVNULL, timeout=60)

        def named():
            st, fg = flamegraph(local, tokens["victim"], ids["victim"], "cpu_split")
            return st == 200 and find(fg["root"], "hot_a") is not None and fg
        wait_until(named, 40, interval=1.0, what="cpu_split's symbols in the victim project")
    finally:
        agent.stop()
    fid = file_id(exe)
    forged = forged_symfile()
    put = f"/ingest/v1/symbols/{fid}?name=cpu_split"
    # Not for every project, not for the victim's.
    assert bearer(local, "PUT", put, tokens["attacker"], forged)[0] == 403
    assert bearer(local, "PUT", put + "&project=" + ids["victim"], tokens["attacker"], forged)[0] == 403
    assert bearer(local, "PUT", put + "&project=victim", tokens["attacker"], forged)[0] == 403
    # Its own project's: stored, and seen there only.
    st, body = bearer(local, "PUT", put + "&project=attacker", tokens["attacker"], forged)
    assert st == 201, body
    st, fg = flamegraph(local, tokens["victim"], ids["victim"], "cpu_split")
    names = {p[-1] for p, _ in walk(fg["root"])}
    assert "hot_a" in names and "PWNED_BY_OTHER_TENANT" not in names, sorted(names)[:20]
    # The refusals are audited with the token as actor.
    st, audit = s.call("GET", "/public/api/v1/audit?limit=200")
    denied = [e for e in audit["entries"] if e["action"] == "permission.denied"
              and e["target"].startswith("ingest:symbols:write")]
    assert len(denied) >= 2 and all(e["actor"].startswith("token:") for e in denied), denied
    # The forged file does name the victim's frames when a credential
    # trusted for every project uploads it (what the admin may do): the
    # scopes above, not the file, kept the victim's names.
    st, body = bearer(local, "PUT", put, admin_token, forged)
    assert st == 201, body
    st, fg = flamegraph(local, tokens["victim"], ids["victim"], "cpu_split")
    names = {p[-1] for p, _ in walk(fg["root"])}
    assert "PWNED_BY_OTHER_TENANT" in names and "hot_a" not in names, sorted(names)[:20]


def test_a_flood_of_sign_ins_is_bounded(local):
    """Each password check costs a tenth of a second of CPU: at most two
    run at once, the rest are answered 503 with Retry-After at once."""
    barrier = threading.Barrier(8)
    out = []

    def one():
        barrier.wait()
        st, body = http("POST", local.url + "/api/v1/auth/login",
                        {"email": ADMIN, "password": "wrong password"})
        out.append((st, body))
    run_threads(one, 8)
    statuses = sorted(st for st, _ in out)
    assert set(statuses) <= {401, 503} and 401 in statuses and 503 in statuses, out
    assert all(b"too many sign-ins" in b for st, b in out if st == 503)
    assert http("GET", local.url + "/healthz")[0] == 200


def test_basic_mode(tmp_path):
    """--auth basic (deprecated): one static credential with the admin's
    rights; anything else is refused; the server says it is deprecated."""
    pw = tmp_path / "basic-password"
    pw.write_text("s3cret basic\n")
    srv = Server(tmp_path / "data", None, "--auth", "basic", "--basic-user", "svc",
                 "--basic-password-file", str(pw)).start()
    try:
        import base64

        def call(user, password):
            cred = base64.b64encode(f"{user}:{password}".encode()).decode()
            st, body = http("GET", srv.url + "/public/api/v1/audit", None, {"Authorization": "Basic " + cred})
            return st, json.loads(body)
        st, body = call("svc", "s3cret basic")
        assert st == 200 and "entries" in body, body
        for user, password in (("svc", "wrong"), ("other", "s3cret basic"), ("svc", "s3cret basic\n")):
            st, body = call(user, password)
            assert st == 401 and body["error"].startswith("Invalid token"), (user, password, body)
        assert bearer(srv, "GET", "/public/api/v1/projects", None)[0] == 401
        # Local sign-in is not offered.
        st, body = bearer(srv, "POST", "/api/v1/auth/login", None, {"email": "a@b.c", "password": "x"})
        assert st == 400, body
        assert "deprecated" in srv.output()
    finally:
        srv.stop()
    # A basic mode without its credential does not start.
    bad = Server(tmp_path / "data2", None, "--auth", "basic")
    bad.start(wait=False)
    wait_until(lambda: not bad.running(), 10, what="the server to refuse --auth basic without a user")
    assert "--auth basic needs --basic-user and --basic-password-file" in bad.output()
