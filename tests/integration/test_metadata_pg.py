"""The metadata on a real PostgreSQL (--metadata postgres://...): lib/metadb's
unit tests against it; two ember-server replicas on one database that
share projects, users, tokens and sessions at once (a token made through
one authenticates on the other, a revocation or a role taken away through
one holds on the other at its next request, a session signed by one is
valid on the other); PostgreSQL restarted under a running server (a
clear 503 while it is down, everything back once it returns, nothing
acknowledged lost); and hostile names stored and read back byte for byte
on both backends. PostgreSQL is started by the tests (tests/lib/clickhouse.py),
never skipped."""

import json
import os
import subprocess
import time

import pytest

from conftest import pg_database
from harness import BUILD, Server, http, wait_until
from test_auth import ADMIN, PASSWORD, Session, bearer, flamegraph, otlp, project_ids


def test_metadb_unit_tests_on_postgres(postgres_server):
    binary = os.path.join(BUILD, "tests", "test_metadb")
    assert os.path.exists(binary), "make build/tests/test_metadb first"
    env = dict(os.environ, EMBER_TEST_PG_URL=pg_database(postgres_server))
    r = subprocess.run([binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    assert "PASSED" in r.stdout and "3 test(s)" in r.stdout, r.stdout


def replica(tmp_path, name, url, pwfile, wait=True):
    return Server(tmp_path / name, None, "--auth", "local", "--admin-email", ADMIN,
                  "--admin-password-file", str(pwfile), "--metadata", url).start(wait)


def test_two_replicas_share_the_metadata(postgres_server, tmp_path):
    url = pg_database(postgres_server)
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    # Started together on an empty database: the schema, the admin and the
    # key pair are made once (an advisory lock; the unique email; one
    # jwt_keys row), and both come up.
    a = replica(tmp_path, "a", url, pw, wait=False)
    b = replica(tmp_path, "b", url, pw, wait=False)
    try:
        wait_until(a.healthy, 20, what="replica a")
        wait_until(b.healthy, 20, what="replica b")
        # One admin, made by whichever started first; both sign it in.
        sa, sb = Session(a), Session(b)
        st, la = sa.login(ADMIN, PASSWORD)
        assert st == 200, la
        assert sb.login(ADMIN, PASSWORD)[0] == 200
        st, users = sa.call("GET", "/public/api/v1/users?include_roles=true")
        assert st == 200 and [u["email"] for u in users["users"]] == [ADMIN], users
        # A session signed by A is valid on B (one key pair, in the database).
        st, me = bearer(b, "GET", "/api/v1/auth/me", la["access_token"])
        assert st == 200 and me["user"]["email"] == ADMIN, me
        # A token made through A authenticates on B at once.
        st, tok = sa.call("POST", "/public/api/v1/service-tokens", {"name": "ci", "scopes": ["**:*"]})
        assert st == 201, tok
        assert otlp(b, tok["token"], "made-on-b")[0] == 200
        # The project B created is in A's list at once, with B's id.
        ids_b = project_ids(b, tok["token"])
        ids_a = project_ids(a, tok["token"])
        assert ids_a["made-on-b"] == ids_b["made-on-b"]
        # The same new name through both at once: one project.
        assert otlp(a, tok["token"], "both")[0] == 200
        assert otlp(b, tok["token"], "both")[0] == 200
        assert project_ids(a, tok["token"])["both"] == project_ids(b, tok["token"])["both"]
        st, fg = flamegraph(a, tok["token"], ids_b["made-on-b"])
        assert st == 200, fg
        # A user made on B signs in on A; its roles taken away on A hold on
        # B at B's next request (no cache: every check reads the database).
        st, user = sb.call("POST", "/public/api/v1/users",
                           {"email": "dev@example.com", "password": "dev password 12"})
        assert st == 201, user
        st, role = sa.call("POST", "/public/api/v1/roles",
                           {"name": "Reader 'quoted'", "patterns": ["project:read", "service:token:*"]})
        assert st == 201, role
        assert sa.call("PUT", f"/public/api/v1/users/{user['id']}/roles",
                       {"roles": ["Reader 'quoted'"]})[0] == 200
        dev = Session(a)
        st, dl = dev.login("dev@example.com", "dev password 12")
        assert st == 200, dl
        st, dtok = dev.call("POST", "/public/api/v1/service-tokens", {"name": "dev", "scopes": ["**:*"]})
        assert st == 201, dtok
        assert flamegraph(b, dtok["token"], ids_b["made-on-b"])[0] == 200
        assert sb.call("PUT", f"/public/api/v1/users/{user['id']}/roles", {"roles": []})[0] == 200
        st, body = flamegraph(a, dtok["token"], ids_b["made-on-b"])
        assert st == 403, body
        st, body = bearer(b, "GET", "/api/v1/auth/me", dl["access_token"])
        assert st == 200 and body["permissions"] == [], body
        # Revoked on B: refused on A at once.
        assert sb.call("DELETE", f"/public/api/v1/service-tokens/{tok['id']}")[0] in (200, 204)
        st, body = bearer(a, "GET", "/public/api/v1/projects", tok["token"])
        assert st == 401 and "revoked" in body["error"], body
        # A refresh session made on A refreshes on B.
        cross = Session(b)
        cross.jar, cross.opener = sa.jar, sa.opener
        st, body = cross.call("POST", "/api/v1/auth/refresh")
        assert st == 200, body
        # The audit log is one: A's refusal is in B's answer.
        st, audit = sb.call("GET", "/public/api/v1/audit?limit=1000")
        assert st == 200
        assert any(e["action"] == "token.revoke" for e in audit["entries"]), audit
        assert any(e["outcome"] == "denied" and e["actor"] == "token:" + dtok["id"]
                   and e["action"] == "permission.denied" for e in audit["entries"]), audit
        # Nothing of the metadata is in either data directory.
        for srv in (a, b):
            assert not os.path.exists(os.path.join(srv.data_dir, "identity.db"))
            assert not os.path.exists(os.path.join(srv.data_dir, "meta.db"))
            assert not os.path.exists(os.path.join(srv.data_dir, "jwt-private.pem"))
    finally:
        a.stop()
        b.stop()


def test_postgres_restarted_under_a_running_server(tmp_path):
    from clickhouse import Postgres
    pg = Postgres()
    pg.start()
    try:
        url = pg_database(pg)
        pw = tmp_path / "admin-password"
        pw.write_text(PASSWORD + "\n")
        srv = replica(tmp_path, "a", url, pw)
        try:
            s = Session(srv)
            assert s.login(ADMIN, PASSWORD)[0] == 200
            st, tok = s.call("POST", "/public/api/v1/service-tokens", {"name": "t", "scopes": ["**:*"]})
            assert st == 201, tok
            assert otlp(srv, tok["token"], "kept")[0] == 200
            kept = project_ids(srv, tok["token"])["kept"]
            pg.stop()
            # Down: a clear 503 with a JSON error, never a crash or a 401.
            for _ in range(3):
                st, body = bearer(srv, "GET", "/public/api/v1/service-tokens", tok["token"])
                assert st == 503, (st, body)
                assert "identity store" in body["error"], body
                assert "postgres" in body["error"], body
            st, body = otlp(srv, tok["token"], "kept")
            assert st == 503, (st, body)
            assert srv.running()
            pg.start()
            # Back: the next request works, on a new connection.
            st, body = bearer(srv, "GET", "/public/api/v1/service-tokens", tok["token"])
            assert st == 200, body
            assert [t["name"] for t in body["tokens"]] == ["t"]
            assert otlp(srv, tok["token"], "kept", exe="after")[0] == 200
            assert project_ids(srv, tok["token"])["kept"] == kept
            # Both acknowledged batches are there.
            for exe in ("app", "after"):
                st, fg = flamegraph(srv, tok["token"], kept, exe)
                assert st == 200 and fg["total"] == 100, (exe, fg)
            # The sign-in made before the outage still refreshes.
            assert s.call("POST", "/api/v1/auth/refresh")[0] == 200
        finally:
            srv.stop()
    finally:
        pg.cleanup()


HOSTILE = [
    "it's \"quoted\" ; DROP TABLE projects; --",
    "?1 $1 ? \\ %_ \\x00",
    "ünïcödé ✓ 名前",
    "x" * 128,  # the longest a project name may be
]


def test_hostile_names_round_trip(tmp_path, metadata_flags):
    srv = Server(tmp_path / "data", None, *metadata_flags).start()
    try:
        import urllib.parse
        for name in HOSTILE:
            q = urllib.parse.quote(name, safe="")
            st, body = otlp(srv, None, q)
            assert st == 200, (name[:40], body)
        st, body = http("GET", srv.url + "/public/api/v1/projects")
        names = [p["name"] for p in json.loads(body)["projects"]]
        for name in HOSTILE:
            assert names.count(name) == 1, (name[:40], names)
        st, body = otlp(srv, None, "x" * 129)
        assert st == 400 and "1 to 128 bytes" in body.decode(), body
        # A NUL inside a name: the HTTP layer hands over the text before it
        # (libmicrohttpd unescapes the query into a C string), the same on
        # both backends; no stored name holds a NUL.
        st, body = otlp(srv, None, "nul%00after")
        assert st == 200, (st, body)
        # Not UTF-8: PostgreSQL's text cannot hold it, so neither backend
        # takes it (the same answer on both).
        for bad in ("bad%FFutf8", "%C0%AF", "%ED%A0%80", "cut%E2%9C"):
            st, body = otlp(srv, None, bad)
            assert st == 400 and "not valid UTF-8" in body.decode(), (bad, st, body)
        st, body = http("GET", srv.url + "/public/api/v1/projects")
        names = [p["name"] for p in json.loads(body)["projects"]]
        assert "nul" in names and not any("\0" in n for n in names), names
        # Users and roles: quotes, SQL, UTF-8 and the longest names kept.
        given = "O'Brien \"the\" ; -- ✓" + "é" * 50
        st, user = bearer(srv, "POST", "/public/api/v1/users",
                          None, {"email": "o'brien@example.com", "given_name": given,
                                 "family_name": "x" * 128})
        assert st == 201, user
        st, body = bearer(srv, "GET", "/public/api/v1/users?query=o'brien", None)
        assert st == 200 and body["users"][0]["given_name"] == given, body
        assert body["users"][0]["family_name"] == "x" * 128
        st, body = bearer(srv, "GET", "/public/api/v1/users?query=O%27BRIEN", None)
        assert st == 200 and len(body["users"]) == 1, body
        st, body = bearer(srv, "POST", "/public/api/v1/users", None,
                          {"email": "O'BRIEN@example.com"})
        assert st in (400, 409) and "exists" in body["error"], body
        st, body = bearer(srv, "POST", "/public/api/v1/users", None,
                          {"email": "nul@example.com", "given_name": "a\u0000b"})
        assert st == 400, body
        st, role = bearer(srv, "POST", "/public/api/v1/roles", None,
                          {"name": "R 'x' \"y\" ✓", "patterns": ["project:read"]})
        assert st == 201, role
        st, body = bearer(srv, "GET", "/public/api/v1/roles", None)
        assert "R 'x' \"y\" ✓" in [r["name"] for r in body["roles"]]
    finally:
        srv.stop()
