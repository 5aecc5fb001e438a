"""`ember-server migrate` (server/store/clickhouse/schema.c) against two
real ClickHouse 18.16 shards, and every statement it sends through a
current ClickHouse (PyPI's chdb, in-process)."""

import os
import subprocess
import sys

import pytest

from harness import BIN, ROOT

SERVER = os.path.join(BIN, "ember-server")


def migrate(*args):
    return subprocess.run([SERVER, "migrate", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def print_sql(*args):
    r = migrate("--print-sql", *args)
    assert r.returncode == 0, r.stderr
    stmts = [s for s in r.stdout.split(";\n") if s.strip()]
    assert stmts
    return stmts


def tables(srv, db):
    return srv.query(f"SELECT name, engine, create_table_query FROM system.tables "
                     f"WHERE database = '{db}' ORDER BY name")


def test_migrate_two_shards_idempotent(clickhouse_cluster, tmp_path):
    a, b = clickhouse_cluster.servers
    pw = tmp_path / "pw"
    pw.write_text(clickhouse_cluster.password + "\n")
    urls = f"{a.url},{b.url}"
    args = ["--clickhouse-url", urls, "--clickhouse-cluster", "ember_test",
            "--clickhouse-user", "ember", "--clickhouse-password-file", str(pw)]
    r = migrate(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("schema 0 -> 3") == 2, r.stdout
    names = {"samples", "stacks", "frames", "strings", "label_sets", "batches", "hosts", "files",
             "gpu_spans", "gpu_span_origins"}
    before = []
    for s in (a, b):
        t = tables(s, "ember")
        rows = [line.split("\t") for line in t.strip().split("\n")]
        got = {r[0]: r[1] for r in rows}
        for n in names:
            assert got[n + "_local"] in ("MergeTree", "ReplacingMergeTree"), got
            assert got[n] == "Distributed", got
        assert got["schema_version"] == "TinyLog"
        assert s.query("SELECT partition_key, sorting_key FROM system.tables "
                       "WHERE database = 'ember' AND name = 'samples_local'").strip() == \
            "toDate(ts)\tproject, kind, ts, stack, labels"
        before.append(t)
    # twice: nothing changes, not even the version table
    r = migrate(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("nothing to do") == 2, r.stdout
    for s, t in zip((a, b), before):
        assert tables(s, "ember") == t
        assert s.query("SELECT count(), max(version) FROM ember.schema_version").strip() == "1\t3"
    # a Distributed table reaches both shards
    a.query("INSERT INTO ember.strings_local VALUES (1, 'a')")
    b.query("INSERT INTO ember.strings_local VALUES (2, 'b')")
    assert b.query("SELECT count() FROM ember.strings").strip() == "2"


def test_migrate_failures_are_reported(clickhouse_cluster, tmp_path):
    a, _ = clickhouse_cluster.servers
    pw = tmp_path / "pw"
    pw.write_text("wrong\n")
    r = migrate("--clickhouse-url", a.url, "--clickhouse-user", "ember",
                "--clickhouse-password-file", str(pw), "--clickhouse-database", "other")
    assert r.returncode == 1 and "HTTP" in r.stderr, (r.stdout, r.stderr)
    r = migrate("--clickhouse-url", "http://127.0.0.1:1", "--clickhouse-database", "other")
    assert r.returncode == 1 and "127.0.0.1:1" in r.stderr
    r = migrate("--clickhouse-url", a.url, "--clickhouse-database", "x'; DROP")
    assert r.returncode == 2 and "letters, digits" in r.stderr
    r = migrate("--clickhouse-url", "ftp://x")
    assert r.returncode == 2
    # one server, no cluster: plain MergeTree tables under the plain names
    r = migrate("--clickhouse-url", a.url, "--clickhouse-database", "single")
    assert r.returncode == 0, r.stderr
    got = dict(line.split("\t")[:2] for line in tables(a, "single").strip().split("\n"))
    assert got["samples"] == "MergeTree" and got["stacks"] == "ReplacingMergeTree", got


# The external tables the fleet store sends beside its dictionary queries
# (chstore.c: EXT_IDS, EXT_NAMES), with a row each.
EXTERNAL = {"ember_ids": ("h UInt64", b"1\n"), "ember_names": ("name String", b"h\n")}


def external_of(stmt):
    return {k: v for k, v in EXTERNAL.items() if k in stmt} or None


def test_every_statement_runs_on_18_16(clickhouse_cluster):
    """Both ways: one server's plain tables, and the Distributed tables of
    two shards (where GLOBAL IN ships an external table to the shards)."""
    a, b = clickhouse_cluster.servers
    for stmt in print_sql("--clickhouse-database", "dialect"):
        a.query(stmt, external=external_of(stmt))
    assert migrate("--clickhouse-url", f"{a.url},{b.url}", "--clickhouse-cluster", "ember_test",
                   "--clickhouse-database", "dialect_sharded").returncode == 0
    n = 0
    for stmt in print_sql("--clickhouse-database", "dialect_sharded", "--clickhouse-cluster",
                          "ember_test"):
        if not stmt.startswith("CREATE") and not stmt.startswith("ALTER"):
            a.query(stmt, external=external_of(stmt))
            n += external_of(stmt) is not None
    assert n == 5, n


def test_every_statement_runs_on_current_clickhouse(tmp_path):
    """chdb (a current ClickHouse in-process): the whole schema without a
    cluster, then the local tables of the clustered one, and every other
    query text; a statement it refuses fails the test."""
    sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))
    try:
        from chdb import session
    except ImportError as e:
        pytest.fail(f"chdb missing (scripts/install-test-pydeps.sh installs it): {e}")
    s = session.Session(str(tmp_path / "chdb"))
    try:
        version = str(s.query("SELECT version()", "CSV")).strip().strip('"')
        assert int(version.split(".")[0]) >= 24, version
        # the external tables, as tables of the session's database
        s.query("CREATE TABLE ember_ids (h UInt64) ENGINE = Memory", "CSV")
        s.query("CREATE TABLE ember_names (name String) ENGINE = Memory", "CSV")
        for stmt in print_sql("--clickhouse-database", "plain"):
            s.query(stmt, "CSV")
        for stmt in print_sql("--clickhouse-database", "sharded", "--clickhouse-cluster", "x"):
            if stmt.startswith("CREATE") and "ENGINE = Distributed" not in stmt:
                s.query(stmt, "CSV")
        assert str(s.query("SELECT count() FROM system.tables WHERE database = 'plain'",
                           "CSV")).strip() == "11"
        # ch_schema_ttl's text (its bytes checked in test_clickhouse_rowbinary.c)
        s.query("ALTER TABLE sharded.samples_local MODIFY TTL ts + INTERVAL 14 DAY", "CSV")
    finally:
        s.close()


def test_migrate_upgrades_version_1(clickhouse_cluster):
    """A database at schema version 1 (before hosts, files and frames.file)
    gets exactly what versions 2 and 3 (the GPU span tables) added, on a
    shard pair with Distributed tables, and keeps its rows."""
    a, b = clickhouse_cluster.servers
    args = ["--clickhouse-url", f"{a.url},{b.url}", "--clickhouse-cluster", "ember_test",
            "--clickhouse-database", "upg"]
    assert migrate(*args).returncode == 0
    for s in (a, b):  # back to version 1
        for t in ("hosts", "files", "hosts_local", "files_local", "gpu_spans", "gpu_spans_local",
                  "gpu_span_origins", "gpu_span_origins_local"):
            s.query(f"DROP TABLE upg.{t}")
        for t in ("frames", "frames_local"):
            s.query(f"ALTER TABLE upg.{t} DROP COLUMN file")
        s.query("DROP TABLE upg.schema_version")
        s.query("CREATE TABLE upg.schema_version (version UInt32, applied DateTime) ENGINE = TinyLog")
        s.query("INSERT INTO upg.schema_version VALUES (1, now())")
    a.query("INSERT INTO upg.frames_local (hash, type) VALUES (7, 2)")
    r = migrate(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("schema 1 -> 3 (10 statements)") == 2, r.stdout
    for s in (a, b):
        names = {line.split("\t")[0] for line in tables(s, "upg").strip().split("\n")}
        assert {"hosts", "files", "hosts_local", "files_local", "gpu_spans", "gpu_spans_local",
                "gpu_span_origins", "gpu_span_origins_local"} <= names, names
        assert s.query("SELECT count() FROM system.columns WHERE database = 'upg' AND "
                       "table IN ('frames', 'frames_local') AND name = 'file'").strip() == "2"
    assert a.query("SELECT hash, type, file FROM upg.frames").strip() == "7\t2\t0"
    assert migrate(*args).stdout.count("nothing to do") == 2
