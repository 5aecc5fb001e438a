"""The fleet store's test servers (tests/lib/clickhouse.py): two real
clickhouse-server shards of cluster `ember_test`, a real PostgreSQL."""


def test_two_shards_form_the_cluster(clickhouse_cluster):
    a, b = clickhouse_cluster.servers
    assert a.query("SELECT version()").startswith("18.16")
    for s in (a, b):
        rows = s.query("SELECT shard_num, port FROM system.clusters WHERE cluster = 'ember_test' "
                       "ORDER BY shard_num").split("\n")
        assert rows[:2] == [f"1\t{a.tcp}", f"2\t{b.tcp}"], rows
    # a Distributed table over the cluster reaches both shards' local tables
    for i, s in enumerate((a, b)):
        s.query("CREATE TABLE default.probe (n UInt32) ENGINE = Log")
        s.query(f"INSERT INTO default.probe VALUES ({i + 1})")
    a.query("CREATE TABLE default.probe_all AS default.probe "
            "ENGINE = Distributed(ember_test, default, probe)")
    assert a.query("SELECT sum(n), count() FROM default.probe_all").strip() == "3\t2"
    # the password user works (the migrate test logs in as it)
    assert a.query("SELECT 1", user="ember", password="ember-test-pw").strip() == "1"
    print(f"clickhouse: 2 shards started in {clickhouse_cluster.start_seconds:.2f} s "
          f"({a.start_seconds:.2f} + {b.start_seconds:.2f})")


def test_postgres_runs(postgres_server):
    assert postgres_server.psql("SHOW server_version").startswith("15")
    postgres_server.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
    assert postgres_server.psql("SELECT sum(x) FROM t").strip() == "7"
    print(f"postgres: initdb {postgres_server.initdb_seconds:.2f} s, "
          f"start {postgres_server.start_seconds:.2f} s")
