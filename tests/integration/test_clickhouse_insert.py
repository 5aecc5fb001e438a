"""The fleet store's insert (server/store/clickhouse/rowbinary.c) into two
real ClickHouse 18.16 shards, through build/bench/clickhouse_bench (the
product's encoder and insert, deterministic batches): rows read back with
SELECT, retried batches counted once, a shard down or a server that never
answers reported as unavailable (ingest's 503), and nothing lost once the
shard is back."""

import os
import socket
import subprocess

import pytest

from conftest import MuteListener
from harness import BUILD, BIN

BENCH = os.path.join(BUILD, "bench", "clickhouse_bench")


def run_bench(url, *args, db="ember"):
    r = subprocess.run([BENCH, "--clickhouse-url", url, "--clickhouse-database", db, *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    out = dict(kv.split("=") for kv in r.stdout.split()) if r.stdout.strip() else {}
    return r.returncode, out, r.stderr


@pytest.fixture(scope="module")
def migrated(clickhouse_cluster):
    a, b = clickhouse_cluster.servers
    r = subprocess.run([os.path.join(BIN, "ember-server"), "migrate", "--clickhouse-url",
                        f"{a.url},{b.url}", "--clickhouse-cluster", "ember_test"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return clickhouse_cluster


def one(srv, sql):
    return srv.query(sql).strip()


def test_rows_read_back_on_both_shards(migrated):
    a, b = migrated.servers
    rc, out, err = run_bench(a.url, "--project", "rb", "--agent", "ag1", "--batches", "16",
                             "--rows", "2000")
    assert rc == 0, err
    assert out["inserted"] == "16" and out["duplicate"] == "0"
    assert one(a, "SELECT count(), sum(value) FROM ember.samples WHERE project = 'rb'") == \
        f"32000\t{out['value']}"
    # sharded by batch: each shard holds whole batches, both hold some
    per = [int(one(s, "SELECT count() FROM ember.samples_local WHERE project = 'rb'")) for s in (a, b)]
    assert sum(per) == 32000 and all(n > 0 and n % 2000 == 0 for n in per), per
    assert one(a, "SELECT uniqExact(batch) FROM ember.batches WHERE project = 'rb'") == "16"
    # every sample's stack, frames, strings and label set are there
    assert one(a, "SELECT count() FROM ember.samples WHERE project = 'rb' AND stack GLOBAL NOT IN "
                  "(SELECT hash FROM ember.stacks)") == "0"
    assert one(a, "SELECT count() FROM ember.samples WHERE project = 'rb' AND labels GLOBAL NOT IN "
                  "(SELECT hash FROM ember.label_sets)") == "0"
    assert one(a, "SELECT count() FROM (SELECT arrayJoin(frames) AS f FROM ember.stacks) "
                  "WHERE f GLOBAL NOT IN (SELECT hash FROM ember.frames)") == "0"
    assert one(a, "SELECT groupUniqArray(values[indexOf(keys, 'host.name')]) FROM ember.label_sets "
                  "WHERE hash GLOBAL IN (SELECT labels FROM ember.samples WHERE project = 'rb')") \
        .count("host-") == 3
    names = one(a, "SELECT count() FROM ember.strings WHERE value LIKE 'func_%'")
    assert int(names) >= 64


def test_a_retried_batch_counts_once(migrated):
    a, b = migrated.servers
    args = ["--project", "dup", "--agent", "ag2", "--batches", "8", "--rows", "1000"]
    rc, first, err = run_bench(a.url, *args)
    assert rc == 0 and first["inserted"] == "8", err
    rc, again, err = run_bench(a.url, *args)
    assert rc == 0 and again["inserted"] == "0" and again["duplicate"] == "8", (again, err)
    assert one(a, "SELECT count(), sum(value) FROM ember.samples WHERE project = 'dup'") == \
        f"8000\t{first['value']}"
    # the answer lost after the samples went in but before the batch was
    # recorded: the batches rows gone, the retry finds the samples
    for s in (a, b):
        s.query("TRUNCATE TABLE ember.batches_local")
    rc, third, err = run_bench(a.url, *args)
    assert rc == 0 and third["duplicate"] == "8", (third, err)
    assert one(a, "SELECT count() FROM ember.samples WHERE project = 'dup'") == "8000"
    assert one(a, "SELECT count() FROM ember.batches WHERE project = 'dup'") == "8"


def test_a_shard_down_is_unavailable_and_nothing_is_lost(migrated):
    a, b = migrated.servers
    b.stop()
    try:
        rc, out, err = run_bench(a.url, "--project", "down", "--agent", "ag3", "--batches", "6",
                                 "--rows", "500", "--timeout-ms", "5000")
        assert rc == 3 and "unavailable" in err, (rc, out, err)
    finally:
        b.start()
    # the agent retries the same batches once the shard is back
    rc, out, err = run_bench(a.url, "--project", "down", "--agent", "ag3", "--batches", "6",
                             "--rows", "500")
    assert rc == 0, err
    assert int(out["inserted"]) + int(out["duplicate"]) == 6
    assert one(a, "SELECT count(), sum(value) FROM ember.samples WHERE project = 'down'") == \
        f"3000\t{out['value']}"


def test_a_server_that_never_answers_is_unavailable():
    """A listener that accepts and stays silent: the insert times out and
    says unavailable (503 + Retry-After), not failed."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    mute = MuteListener(srv)
    try:
        port = srv.getsockname()[1]
        rc, out, err = run_bench(f"http://127.0.0.1:{port}", "--batches", "1", "--rows", "10",
                                 "--timeout-ms", "700")
        assert rc == 3 and "unavailable" in err and "timed out" in err, (rc, err)
    finally:
        mute.close()


def test_a_rejected_query_is_not_unavailable(migrated):
    a, _ = migrated.servers
    rc, out, err = run_bench(a.url, "--batches", "1", "--rows", "10", db="no_such_db")
    assert rc == 1 and "unavailable" not in err, (rc, err)


def test_retention_drops_whole_days_on_every_shard(migrated):
    """ch_retention (18.16 has no TTL): the day partitions wholly before
    the cutoff go on both shards; the day the cutoff falls in stays."""
    a, b = migrated.servers
    day1, day2 = 20780 * 86400, 20781 * 86400
    for base, first in ((day1, 1), (day2, 101)):
        rc, out, err = run_bench(a.url, "--project", "ret", "--agent", "ag5", "--batches", "8",
                                 "--rows", "100", "--ts-base", str(base), "--first-seq", str(first))
        assert rc == 0, err
    days = "SELECT toDate(ts), count() FROM ember.samples WHERE project = 'ret' GROUP BY toDate(ts) ORDER BY 1"
    assert one(a, days) == "2026-11-23\t800\n2026-11-24\t800"
    both = f"{a.url},{b.url}"
    # a cutoff inside day2 keeps day2 (not wholly before it)
    rc, out, err = run_bench(both, "--batches", "0", "--clickhouse-cluster", "ember_test",
                             "--retention-cutoff", str(day2 + 3600))
    assert rc == 0 and out["dropped"] == "2", (out, err)  # day1 on each shard
    assert one(a, days) == "2026-11-24\t800"
    assert one(a, "SELECT count() FROM ember.samples WHERE project = 'rb'") == "32000"
    rc, out, err = run_bench(both, "--batches", "0", "--clickhouse-cluster", "ember_test",
                             "--retention-cutoff", str(day2 + 3600))
    assert rc == 0 and out["dropped"] == "0", (out, err)
