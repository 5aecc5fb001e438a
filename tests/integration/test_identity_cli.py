"""`ember identity`, the admin CLI, on the data directory of a running
ember-server with --auth local: users it creates sign in through the API,
the roles it sets (atomically: an unknown role changes nothing; none
revokes all) take effect on the server's next request, a password reset
replaces the old password, lists page as documented, passwords come from a
pipe, and every action is in the server's audit log with origin "cli"."""

import os
import re
import subprocess

import pytest

from harness import BIN, DEFAULT_PROJECT, Server
from test_auth import Session

EMBER = os.path.join(BIN, "ember")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"
QUERY = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": "on_cpu"}}


@pytest.fixture
def local(tmp_path, metadata_flags):
    """--auth local, with the metadata in SQLite and, again, in PostgreSQL."""
    srv = Server(tmp_path / "data", None, "--auth", "local", *metadata_flags).start()
    srv.metadata = metadata_flags
    yield srv
    srv.stop()


def ember(server, *args, stdin=""):
    """Runs `ember identity ARGS` on the server's data directory, or on its
    --metadata database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    where = getattr(server, "metadata", None) or ["--data-dir", server.data_dir]
    return subprocess.run([EMBER, "identity", *args, *where],
                          input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60, env=env)


def fields(out):
    """The "key: value" lines of one record."""
    return dict(l.split(": ", 1) for l in out.splitlines() if ": " in l)


def create(server, email, password, *extra):
    r = ember(server, "user", "create", "--email", email, *extra, stdin=password + "\n")
    assert r.returncode == 0, r.stderr
    m = re.match(rf"User ({UUID})\n", r.stdout)
    assert m, r.stdout
    return m.group(1), r.stdout


def audit(server, session):
    st, body = session.call("GET", "/public/api/v1/audit?limit=1000")
    assert st == 200, body
    return body["entries"]


def test_a_user_created_and_made_admin_by_the_cli_signs_in(local):
    # Created while the server runs, the password from a pipe.
    uid, out = create(local, "dev@example.com", "dev's first password",
                      "--given-name", "Test", "--family-name", "User")
    f = fields(out)
    assert f["email"] == "dev@example.com" and f["given_name"] == "Test" and f["family_name"] == "User"
    assert re.fullmatch(TIME, f["created_at"]) and re.fullmatch(TIME, f["updated_at"]), out
    s = Session(local)
    st, body = s.login("dev@example.com", "dev's first password")
    assert st == 200 and body["user"]["id"] == uid, body
    # A new user is a Default Project Viewer: no audit log.
    assert s.call("GET", "/public/api/v1/audit")[0] == 403
    assert s.call("POST", f"/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json", QUERY)[0] == 200
    r = ember(local, "roles", "set", "--user-id", uid, "--admin")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"User {uid}\n") and fields(r.stdout)["roles"] == "System Admin", r.stdout
    # The server sees it on the next request (the same session).
    entries = audit(local, s)
    mine = [(e["action"], e["target"], e["outcome"]) for e in entries
            if e["origin"] == "cli" and e["actor"] == "cli"]
    assert ("user.create", uid, "ok") in mine, entries
    assert ("role.assignment.set", uid, "ok") in mine, entries
    detail = next(e["detail"] for e in entries
                  if e["actor"] == "cli" and e["action"] == "role.assignment.set")
    assert detail == "System Admin"


def test_roles_set_is_atomic_and_no_roles_revokes_all(local):
    uid, _ = create(local, "sam@example.com", "sam's password")
    r = ember(local, "roles", "set", "--user-id", uid, "--role", "System Viewer")
    assert r.returncode == 0 and fields(r.stdout)["roles"] == "System Viewer", (r.stdout, r.stderr)
    # One unknown name: an error, and the roles stay as they were.
    r = ember(local, "roles", "set", "--user-id", uid, "--admin", "--role", "Nonexistent Role")
    assert r.returncode == 1 and r.stderr.strip() == "Error: roles not found: Nonexistent Role", r.stderr
    assert r.stdout == ""
    r = ember(local, "roles", "list", "--user-id", uid)
    assert r.returncode == 0 and r.stdout.endswith("\n1 roles\n"), r.stdout
    assert fields(r.stdout)["name"] == "System Viewer"
    s = Session(local)
    assert s.login("sam@example.com", "sam's password")[0] == 200
    st, me = s.call("GET", "/api/v1/auth/me")
    assert st == 200 and "admin:user:read" in me["permissions"] and "admin:user:create" not in me["permissions"]
    path = f"/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json"
    assert s.call("POST", path, QUERY)[0] == 200
    # No roles at all: everything is revoked, on the server's next request.
    r = ember(local, "roles", "set", "--user-id", uid)
    assert r.returncode == 0 and fields(r.stdout)["roles"] == "(none)", r.stdout
    st, body = s.call("POST", path, QUERY)
    assert st == 403 and "error" in body, body
    r = ember(local, "roles", "list", "--user-id", uid)
    assert r.returncode == 0 and r.stdout == "0 roles\n", r.stdout
    # The refusal is audited too.
    r = ember(local, "user", "list", "--query", "nobody")
    assert r.returncode == 0
    admin = Session(local)
    assert admin.login("admin@localhost", "admin")[0] == 200
    failed = [e for e in audit(local, admin) if e["origin"] == "cli" and e["outcome"] == "failed"]
    assert [(e["action"], e["target"], e["detail"]) for e in failed] == \
        [("role.assignment.set", uid, "roles not found: Nonexistent Role")], failed


def test_reset_password(local):
    uid, _ = create(local, "lost@example.com", "old password")
    before = Session(local)
    assert before.login("lost@example.com", "old password")[0] == 200
    assert before.call("POST", "/api/v1/auth/refresh")[0] == 200
    # From a pipe: the first line only.
    r = ember(local, "user", "reset-password", "--user-id", uid, stdin="new password\nignored\n")
    assert r.returncode == 0 and r.stdout.startswith(f"User {uid}\n"), (r.stdout, r.stderr)
    # Whoever signed in with the old password cannot refresh any more.
    st, body = before.call("POST", "/api/v1/auth/refresh")
    assert st == 401, body
    s = Session(local)
    assert s.login("lost@example.com", "old password")[0] == 401
    assert s.login("lost@example.com", "new password\nignored")[0] == 401
    assert s.login("lost@example.com", "new password")[0] == 200
    # --password works too; an unknown user is an error.
    r = ember(local, "user", "reset-password", "--user-id", uid, "--password", "third one")
    assert r.returncode == 0, r.stderr
    assert s.login("lost@example.com", "new password")[0] == 401
    assert s.login("lost@example.com", "third one")[0] == 200
    r = ember(local, "user", "reset-password", "--user-id", "00000000-0000-0000-0000-00000000dead",
              "--password", "x")
    assert r.returncode == 1 and "no user with id" in r.stderr, r.stderr
    # An empty pipe sets nothing.
    r = ember(local, "user", "reset-password", "--user-id", uid, stdin="")
    assert r.returncode == 1 and r.stderr.startswith("Error: no password"), r.stderr
    assert s.login("lost@example.com", "third one")[0] == 200
    admin = Session(local)
    assert admin.login("admin@localhost", "admin")[0] == 200
    resets = [e for e in audit(local, admin) if e["origin"] == "cli" and e["action"] == "user.password.reset"]
    assert [(e["target"], e["outcome"]) for e in resets][::-1] == \
        [(uid, "ok"), (uid, "ok"), ("00000000-0000-0000-0000-00000000dead", "failed"), (uid, "failed")]
    assert resets[-1]["detail"] == "lost@example.com; 1 sessions ended", resets


def test_user_list_pages_and_query(local):
    ids = [create(local, f"listme{i}@example.com", f"password {i}")[0] for i in range(3)]
    create(local, "other@example.com", "password")
    r = ember(local, "user", "list", "--query", "listme", "--page-size", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "Page 0: 2 users (3 total, 2 pages)", r.stdout
    assert re.findall(rf"^User ({UUID})$", r.stdout, re.M) == ids[:2]
    r = ember(local, "user", "list", "--query", "listme", "--page-size", "2", "--page", "1",
              "--include-roles")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "Page 1: 1 users (3 total, 2 pages)", r.stdout
    assert re.findall(rf"^User ({UUID})$", r.stdout, re.M) == ids[2:]
    assert fields(r.stdout)["roles"] == "Default Project Viewer" and "email: listme2@example.com" in r.stdout
    # Without a query: every user (the admin the server made too).
    r = ember(local, "user", "list")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "Page 0: 5 users (5 total, 1 pages)", r.stdout
    assert "roles: " not in r.stdout
    r = ember(local, "user", "list", "--page-size", "101")
    assert r.returncode == 2 and "--page-size" in r.stderr


def test_roles_list(local):
    r = ember(local, "roles", "list", "--name", "System Admin", "--name", "System Viewer")
    assert r.returncode == 0, r.stderr
    admin, viewer = r.stdout.split("\n\n")
    assert admin == ("Role 00000000-0000-0000-0000-000000000001\nname: System Admin\n"
                     "is_locked: true\nusers: 1\nperms: **:*"), r.stdout
    assert viewer.endswith("name: System Viewer\nis_locked: true\nusers: 0\nperms: **:read\n2 roles\n")
    r = ember(local, "roles", "list")
    assert r.returncode == 0 and r.stdout.endswith("\n4 roles\n"), r.stdout


def test_a_missing_store_is_named_and_not_created(tmp_path):
    data = tmp_path / "nothing-here"
    data.mkdir()
    r = subprocess.run([EMBER, "identity", "user", "list", "--data-dir", str(data)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert r.returncode == 1 and f"{data}/identity.db does not exist" in r.stderr, r.stderr
    assert not os.listdir(data)
    # $EMBER_DATA_DIR names it when --data-dir does not.
    r = subprocess.run([EMBER, "identity", "roles", "list"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30,
                       env={**os.environ, "EMBER_DATA_DIR": str(data)})
    assert r.returncode == 1 and f"{data}/identity.db does not exist" in r.stderr, r.stderr
    r = subprocess.run([EMBER, "identity", "roles", "frobnicate"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_a_password_typed_at_a_terminal_is_not_shown(local):
    """On a terminal the password is asked for twice with echo off."""
    import pty
    import select
    import time

    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    p = subprocess.Popen([EMBER, "identity", "user", "create", "--email", "tty@example.com",
                          *(local.metadata or ["--data-dir", local.data_dir])], stdin=slave, stderr=slave,
                         stdout=subprocess.PIPE, text=True, env=env)
    os.close(slave)
    seen = b""

    def until(text):
        nonlocal seen
        deadline = time.time() + 30
        while text not in seen and time.time() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        assert text in seen, seen

    until(b"Password: ")
    os.write(master, b"typed in secret\n")
    until(b"Password again: ")
    os.write(master, b"typed in secret\n")
    out, _ = p.communicate(timeout=60)
    os.close(master)
    assert p.returncode == 0 and out.startswith("User "), out
    assert b"typed in secret" not in seen, seen
    assert Session(local).login("tty@example.com", "typed in secret")[0] == 200
