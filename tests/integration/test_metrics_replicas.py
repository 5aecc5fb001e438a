"""Host and GPU metrics shared by replicas: with --metadata postgres://...
the metric store is the shared PostgreSQL (server/metrics/metrics.h), so a
query replica answers for metrics an ingest replica stored. Compared with
an embedded server (SQLite metrics.db) given the same batches: every
query, names and percentiles alike; batches of one series sent to two
replicas at the same moment all kept; a batch sent again stored once;
the by-hand query and bad-request test of test_metrics.py on PostgreSQL."""

import json
import threading
import time

from conftest import pg_database
from harness import DEFAULT_PROJECT, Server, http
from metrics_batch import MetricsBatch, post

import test_metrics

HOSTS = 4


def host_batch(h, now, seconds=60, offset=0):
    """Host h's CPU and GPU series: a point a second for `seconds`."""
    b = MetricsBatch(agent_instance=f"00000000-0000-4000-8000-00000000000{h}")
    for pid in (1, 2):
        b.add("process.cpu.utilization", "cores", {"host.name": f"h{h}", "process.pid": str(pid)},
              [(now - (seconds - i) * 1000 + offset, (h + 1) * 0.1 * pid + i % 7 * 0.01)
               for i in range(seconds)])
    b.add("hw.gpu.utilization", "%", {"host.name": f"h{h}", "gpu.index": "0"},
          [(now - (seconds - i) * 1000 + offset, (h * 13 + i * 3) % 100) for i in range(seconds)])
    return b


def answer(server, path, body):
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/{path}", body,
                        {"Content-Type": "application/json"})
    assert status == 200, (status, data)
    doc = json.loads(data)
    doc.get("stats", {}).pop("elapsed_ms", None)
    return doc


def test_replicas_share_metrics_on_postgres(postgres_server, tmp_path):
    url = pg_database(postgres_server)
    emb = Server(tmp_path / "emb").start()
    a = Server(tmp_path / "a", None, "--metadata", url).start()
    b = Server(tmp_path / "b", None, "--metadata", url).start()
    try:
        now = int(time.time()) * 1000
        for h in range(HOSTS):
            batch = host_batch(h, now)
            assert post((a if h % 2 else b).url, batch)["points"] == 180
            assert post(emb.url, batch)["points"] == 180
        # the same batch again, through the other replica: stored once
        assert post(a.url, host_batch(0, now))["points"] == 180
        # one series' points of one hour from two replicas at the same
        # moment (interleaved times): every point kept
        results = []
        together = threading.Barrier(2)

        def send(server, offset):
            together.wait()
            results.append(post(server.url, host_batch(9, now, 40, offset))["points"])
        threads = [threading.Thread(target=send, args=(s, o)) for s, o in ((a, 0), (b, 500))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [120, 120]
        for s in (emb,):
            post(s.url, host_batch(9, now, 40, 0))
            post(s.url, host_batch(9, now, 40, 500))
        rng = {"start_ts": now - 120_000, "end_ts": now + 1000}
        queries = [
            ("metrics", {"filter": rng, "metric": "process.cpu.utilization", "num_buckets": 12}),
            ("metrics", {"filter": rng, "metric": "process.cpu.utilization", "group_by": "host.name",
                         "temporal": "max", "spatial": "avg", "num_buckets": 6}),
            ("metrics", {"filter": dict(rng, query='host.name in ["h1", "h9"]'),
                         "metric": "process.cpu.utilization", "percentiles": True}),
            ("metrics", {"filter": rng, "metric": "hw.gpu.utilization", "group_by": "host.name",
                         "spatial": "max", "num_buckets": 3, "percentiles": True}),
            ("metrics/names", {"filter": rng}),
            ("metrics/names", {"filter": dict(rng, query='host.name == "h2"')}),
        ]
        for path, body in queries:
            want = answer(emb, path, body)
            assert answer(a, path, body) == want, (path, body)
            assert answer(b, path, body) == want, (path, body)
        # the interleaved points all there: 2 x 40 points of each of h9's series
        got = answer(b, "metrics", {"filter": dict(rng, query='host.name == "h9"'),
                                    "metric": "hw.gpu.utilization"})
        assert got["stats"]["points_read"] == 80, got
    finally:
        for s in (emb, a, b):
            s.stop()


def test_by_hand_and_bad_requests_on_postgres(postgres_server, tmp_path):
    srv = Server(tmp_path / "pg", None, "--metadata", pg_database(postgres_server)).start()
    try:
        test_metrics.test_ingest_and_query_by_hand_and_bad_requests(srv)
    finally:
        srv.stop()
