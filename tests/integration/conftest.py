"""Fixtures for the integration tests: real ember-server and ember-agent
binaries from build/bin, each test with its own data directory and port."""

import os
import sys
import threading
from http.server import BaseHTTPRequestHandler

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from harness import Agent, Server  # noqa: E402

# The first admin of a server started with --auth local (the `local` fixture).
ADMIN = "admin@example.com"
PASSWORD = "correct horse battery staple"


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path / "data").start()
    yield srv
    srv.stop()


@pytest.fixture
def local(tmp_path):
    """A server with --auth local whose admin is ADMIN with PASSWORD."""
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    srv = Server(tmp_path / "data", None, "--auth", "local", "--admin-email", ADMIN,
                 "--admin-password-file", str(pw)).start()
    yield srv
    srv.stop()


@pytest.fixture
def agent_factory():
    started = []

    def make(server_url, *flags):
        a = Agent(server_url, *flags)
        started.append(a)
        return a

    yield make
    for a in started:
        a.stop(timeout=20)


def require_root():
    if os.geteuid() != 0:
        pytest.fail("this test loads BPF programs and must run as root (CI runs as root)")


@pytest.fixture(scope="module")
def clickhouse_cluster():
    """Two real clickhouse-server shards (cluster `ember_test`) on loopback,
    shared by one test module (tests/lib/clickhouse.py)."""
    from clickhouse import ClickHouseCluster
    cl = ClickHouseCluster()
    try:
        cl.start()
        yield cl
    finally:
        cl.cleanup()


def pg_database(pg):
    """A fresh, empty database on pg for one test: its --metadata URL."""
    import uuid
    name = "ember_" + uuid.uuid4().hex[:12]
    pg.psql(f"CREATE DATABASE {name}")
    return f"postgres://postgres@127.0.0.1:{pg.port}/{name}"


@pytest.fixture(params=["sqlite", "postgres"])
def metadata_flags(request):
    """The ember-server flags for each metadata backend: none (SQLite in
    the data dir), or --metadata with a fresh database on the module's
    real PostgreSQL (never skipped: PostgreSQL is a test dependency)."""
    if request.param == "sqlite":
        return []
    pg = request.getfixturevalue("postgres_server")
    return ["--metadata", pg_database(pg)]


@pytest.fixture(scope="module")
def postgres_server():
    """A real PostgreSQL (initdb in a tmp dir, pg_ctl on a free port)."""
    from clickhouse import Postgres
    pg = Postgres()
    try:
        pg.start()
        yield pg
    finally:
        pg.cleanup()


class MuteListener:
    """A hung server: accepts every connection on the listening socket
    sock and never answers; the connections (accepted) stay open until
    close(), which closes them and sock."""

    def __init__(self, sock):
        self.sock = sock
        self.accepted = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:  # the timeout too
                pass

    def close(self):
        self._stop.set()
        self._thread.join(5)
        for c in self.accepted:
            c.close()
        self.sock.close()


class StubHandler(BaseHTTPRequestHandler):
    """The handler of the tests' stand-in servers (a container runtime, an
    MCP server, a webhook): reply() sends one answer; nothing is logged."""

    def reply(self, status, body=b"", content_type="application/json", headers=()):
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass
