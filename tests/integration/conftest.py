"""Fixtures for the integration tests: real ember-server and ember-agent
binaries from build/bin, each test with its own data directory and port."""

import os
import sys

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
