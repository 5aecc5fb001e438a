#!/usr/bin/env python3
"""The fleet store beside the embedded store on the same data: the store
bench's generator (bench/store_bench.c: HOSTS hosts x 16 cores x 19 Hz for
SECONDS, one batch per host per 5 s) into the embedded store, and the same
batches into two ClickHouse shards (Debian's clickhouse-server, started
here on loopback as tests/lib/clickhouse.py starts them, behind Distributed
tables after `ember-server migrate`). Each run prints the store bench's
report: ingest samples/s per core of ember's CPU, bytes on disk per sample
(ClickHouse: its parts after OPTIMIZE FINAL), the queries' times over the
hour. ClickHouse runs on the same cores as the bench: its own CPU is not
in ember's per-core figure, but it slows the run.

    bench/clickhouse_compare.py [HOSTS] [SECONDS]     (defaults 100, 3600: 109 M samples)
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from clickhouse import ClickHouseCluster  # noqa: E402

BUILD = os.environ.get("EMBER_BUILD", os.path.join(ROOT, "build"))


def run(env_extra, hosts, seconds, name):
    env = dict(os.environ, **env_extra)
    t0 = time.monotonic()
    print(f"== {name}: store_bench {hosts} {seconds}", flush=True)
    r = subprocess.run([os.path.join(BUILD, "bench", "store_bench"), str(hosts), str(seconds),
                        f"/tmp/ember-chcompare-{name}"], env=env)
    print(f"== {name}: {time.monotonic() - t0:.0f} s wall, exit {r.returncode}", flush=True)
    return r.returncode


def main():
    hosts = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 3600
    rc = run({}, hosts, seconds, "embedded")
    cl = ClickHouseCluster()
    try:
        cl.start()
        urls = ",".join(s.url for s in cl.servers)
        m = subprocess.run([os.path.join(BUILD, "bin", "ember-server"), "migrate", "--clickhouse-url",
                            urls, "--clickhouse-database", "bench", "--clickhouse-cluster", "ember_test"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if m.returncode != 0:
            print(m.stdout)
            return 1
        rc |= run({"EMBER_BENCH_CLICKHOUSE": urls, "EMBER_BENCH_CLICKHOUSE_DATABASE": "bench",
                   "EMBER_BENCH_CLICKHOUSE_CLUSTER": "ember_test"}, hosts, seconds, "clickhouse")
    finally:
        cl.cleanup()
    return rc


if __name__ == "__main__":
    sys.exit(main())
