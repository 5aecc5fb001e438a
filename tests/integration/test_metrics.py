"""Host and GPU metrics end to end: the agent's collector (/proc) ->
POST /ingest/v1/metrics -> metrics.db -> the query API.

A workload of known shape (one core busy, 200 MiB touched, 4 MiB/s
written and fsync'd) must come back as utime+stime of about one core, an
RSS of about 200 MiB and a write throughput of about 4 MiB/s. Without
host metrics no host series is stored; an NVML that cannot be loaded is
logged and the agent keeps profiling; bad batches and bad queries are
4xx with a message."""

import json
import math
import os
import subprocess
import time

from conftest import require_root
from harness import DEFAULT_PROJECT, WORKLOADS, free_port, http, wait_until

from ember_batch import zstd_compress  # noqa: E402
from metrics_batch import encode_raw as metrics_batch  # noqa: E402  (tests/lib)

MiB = 1 << 20


def query(server, metric, start_ms, end_ms, q=None, group_by=None, temporal="avg",
          spatial="sum", buckets=1, project=DEFAULT_PROJECT):
    body = {"filter": {"start_ts": start_ms, "end_ts": end_ms, "query": q}, "metric": metric,
            "group_by": group_by, "temporal": temporal, "spatial": spatial,
            "num_buckets": buckets}
    status, data = http("POST", f"{server.url}/public/api/v1/project/{project}/metrics", body,
                        {"Content-Type": "application/json"})
    assert status == 200, f"metrics query failed with {status}: {data!r}"
    return json.loads(data)


def names(server, start_ms, end_ms, q=None):
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/metrics/names",
                        {"filter": {"start_ts": start_ms, "end_ts": end_ms, "query": q}},
                        {"Content-Type": "application/json"})
    assert status == 200, data
    return {n["name"]: n for n in json.loads(data)["names"]}


def only_value(answer):
    """The single bucket's value of the single group."""
    assert len(answer["series"]) == 1, answer
    pts = answer["series"][0]["points"]
    assert len(pts) == 1, answer
    return pts[0][1]


def test_process_metrics_of_a_known_workload(server, agent_factory, tmp_path):
    require_root()
    agent = agent_factory(server.url, "-collect-metrics-interval=1s",
                          "-nvml-path=/nonexistent/libnvidia-ml.so").start()
    out = tmp_path / "written.bin"
    t0 = int(time.time() * 1000)
    work = subprocess.run([os.path.join(WORKLOADS, "metrics_load"), "12", "200", "4", str(out)],
                          stdout=subprocess.PIPE, check=True, timeout=60)
    t1 = int(time.time() * 1000)
    report = json.loads(work.stdout)
    pid, written = report["pid"], report["written"]
    assert written >= 40 * MiB, report
    sel = f'process.executable.name == "metrics_load" && process.pid == "{pid}"'
    # The middle of the run: the first interval has no rates yet.
    lo, hi = t0 + 3000, t1 - 1000
    wait_until(lambda: query(server, "process.utime", lo, t1 + 5000, q=sel)["series"], 15,
               what="process.utime of the workload")
    time.sleep(2)  # the last interval's batch
    utime = only_value(query(server, "process.utime", lo, hi, q=sel))
    stime = only_value(query(server, "process.stime", lo, hi, q=sel))
    assert 0.75 <= utime + stime <= 1.1, (utime, stime)
    rss = only_value(query(server, "process.rss", lo, hi, q=sel, temporal="max"))
    assert 200 * MiB <= rss <= 215 * MiB, rss / MiB
    wt = only_value(query(server, "io.write_throughput", lo, hi, q=sel))
    assert 3.0 * MiB <= wt <= 5.0 * MiB, wt / MiB
    # Per-second buckets: the write rate over the run adds up to what was written.
    a = query(server, "io.write_throughput", t0, t1 + 3000, q=sel, buckets=(t1 + 3000 - t0) // 1000)
    per_bucket = a["series"][0]["points"]
    step_s = a["buckets_ms"] / 1000
    total = sum(v for _, v in per_bucket) * step_s
    assert 0.7 * written <= total <= 1.2 * written, (total, written)
    # Grouping: by pid, the workload is one group among the host's processes.
    g = query(server, "process.rss", lo, hi, group_by="process.pid", temporal="max")
    groups = {s["group"]: s for s in g["series"]}
    assert str(pid) in groups and len(groups) > 1, list(groups)
    # Host series and their attributes; the agent's own process.
    n = names(server, t0, t1 + 5000)
    for metric in ("host.cpu.user", "host.cpu.idle", "host.memory.used", "process.utime",
                   "process.stime", "process.rss", "io.read_throughput", "io.write_throughput"):
        assert metric in n, (metric, sorted(n))
    assert n["process.utime"]["unit"] == "cores" and n["process.rss"]["unit"] == "bytes"
    cores = os.cpu_count()
    busy = query(server, "host.cpu.user", lo, hi)
    idle = query(server, "host.cpu.idle", lo, hi)
    assert 0.7 <= only_value(busy) <= cores + 0.1, busy
    assert only_value(idle) <= cores - 0.5, idle
    status, body = http("GET", server.url + "/metrics")
    line = [l for l in body.decode().splitlines() if l.startswith("ember_metrics_points_total ")]
    assert line and int(line[0].split()[1]) > 100, line
    assert "GPU metrics off" in agent.output() and "/nonexistent/libnvidia-ml.so" in agent.output()


def test_without_host_metrics_and_without_nvml(server, agent_factory, tmp_path):
    """-enable-host-metrics=false: no series at all (NVML cannot load
    either); the agent says why and keeps profiling."""
    require_root()
    t0 = int(time.time() * 1000)
    agent = agent_factory(server.url, "-collect-metrics-interval=1s", "-enable-host-metrics=false",
                          "-nvml-path=/nonexistent/libnvidia-ml.so", "-on-cpu-sampling-rate=97").start()
    subprocess.run([os.path.join(WORKLOADS, "metrics_load"), "3", "1", "0", str(tmp_path / "x")],
                   stdout=subprocess.PIPE, check=True, timeout=60)
    wait_until(lambda: server.flamegraph()["total"] > 0, 20, what="samples")
    time.sleep(2)
    assert agent.running()
    out = agent.output()
    assert "GPU metrics off: NVML could not be loaded; tried /nonexistent/libnvidia-ml.so" in out, out
    assert "host metrics disabled" in out, out
    assert names(server, t0 - 60000, int(time.time() * 1000) + 5000) == {}
    q = query_status(server, {"filter": {"start_ts": t0, "end_ts": t0 + 60000},
                              "metric": "host.cpu.user"})
    assert q[0] == 404 and "no metric named" in q[1]["error"], q


def server_metric(server, name):
    status, body = http("GET", server.url + "/metrics", timeout=5)
    assert status == 200, body
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing from the server's /metrics")


def test_otlp_mode_still_sends_metrics(server, agent_factory):
    require_root()
    t0 = int(time.time() * 1000)
    port = free_port()
    agent_factory(server.url, "-collect-metrics-interval=1s", "-ember-protocol=false",
                  "-enable-gpu-metrics=false", f"-pprof=127.0.0.1:{port}").start()
    wait_until(lambda: "process.rss" in names(server, t0 - 1000, int(time.time() * 1000) + 5000),
               20, what="metrics in OTLP mode")

    # The agent's own stats count the collections and what was sent, and
    # the server stored every batch the agent counts as sent.
    def agent_stat(name):
        status, body = http("GET", f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert status == 200, body
        for line in body.decode().splitlines():
            if line.startswith(f"ember_agent_{name} "):
                return float(line.split()[1])
        raise AssertionError(f"ember_agent_{name} missing")

    wait_until(lambda: agent_stat("metrics_batches_sent_total") >= 2, 20, what="two batches sent")
    assert agent_stat("metrics_collections_total") >= agent_stat("metrics_batches_sent_total")
    assert agent_stat("metrics_points_total") > 0
    assert agent_stat("metrics_bytes_sent_total") > 0
    assert 0 < agent_stat("metrics_last_collect_ns") < 5e9
    assert agent_stat("metrics_batches_rejected_total") == 0
    sent = agent_stat("metrics_batches_sent_total")
    stored = server_metric(server, "ember_metrics_batches_total")
    assert stored >= sent, (stored, sent)


def query_status(server, body, project=DEFAULT_PROJECT, path="metrics"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, resp = http("POST", f"{server.url}/public/api/v1/project/{project}/{path}", data,
                        {"Content-Type": "application/json"})
    try:
        return status, json.loads(resp)
    except ValueError:
        return status, {"raw": resp}


def post_batch(server, raw, compress=True):
    return http("POST", server.url + "/ingest/v1/metrics", zstd_compress(raw) if compress else raw,
                {"Content-Type": "application/x-protobuf",
                 "Content-Encoding": "zstd" if compress else "identity"})


def test_ingest_and_query_by_hand_and_bad_requests(server):
    now = int(time.time() * 1000)
    strings = ["", "test.metric", "cores", "host.name", "a", "b", "process.pid", "1", "2"]
    good = metrics_batch(strings, [4, 4], [3, 4, 6, 7, 3, 5, 6, 8], [1, 1], [2, 2], [0, 1],
                         [0, 1, 0, 1], [now - 500, now - 500, now - 200, now - 200],
                         [1.0, 3.0, 2.0, 5.0])
    status, body = post_batch(server, good)
    assert status == 200, body
    assert json.loads(body)["points"] == 4
    # Again: stored once per (series, time).
    assert post_batch(server, good)[0] == 200
    a = query(server, "test.metric", now - 1000, now, group_by="host.name", temporal="max")
    assert {s["group"]: s["points"][0][1] for s in a["series"]} == {"a": 2.0, "b": 5.0}, a
    a = query(server, "test.metric", now - 1000, now, spatial="sum")
    assert math.isclose(only_value(a), 1.5 + 4.0), a
    a = query(server, "test.metric", now - 1000, now, spatial="max", temporal="max")
    assert only_value(a) == 5.0
    a = query(server, "test.metric", now - 1000, now, spatial="avg")
    assert math.isclose(only_value(a), (1.5 + 4.0) / 2), a
    a = query(server, "test.metric", now - 1000, now, q='host.name == "b"')
    assert math.isclose(only_value(a), 4.0), a
    assert a["unit"] == "cores" and a["stats"]["series_matched"] == 1
    # Bad batches: 400 with a message, nothing stored.
    bad = [
        metrics_batch(strings, [4], [3, 4, 6, 7], [1], [2], [0], [0], [now], [float("nan")]),
        metrics_batch(strings, [4], [3, 4, 6, 99], [1], [2], [0], [0], [now], [1.0]),
        metrics_batch(strings, [3], [3, 4, 6], [1], [2], [0], [0], [now], [1.0]),
        metrics_batch(strings, [4], [3, 4, 6, 7], [1], [2], [5], [0], [now], [1.0]),
        metrics_batch(strings, [4], [3, 4, 6, 7], [1], [2], [0], [0], [5], [1.0]),
        metrics_batch(["", "x" * 5000], [0], [], [1], [0], [0], [0], [now], [1.0]),
        metrics_batch(strings, [0], [], [1], [2], [0], [0], [now], [1.0], project="no/slash"),
        b"\xff\xff\xff not protobuf",
    ]
    for raw in bad:
        status, body = post_batch(server, raw)
        assert status == 400, (status, body)
        assert json.loads(body)["error"], body
    status, body = post_batch(server, good, compress=False)
    assert status == 415, body
    status, body = http("GET", server.url + "/metrics")
    assert "ember_metrics_rejected_total 8" in body.decode()
    # Bad queries.
    ok = {"filter": {"start_ts": now - 1000, "end_ts": now}, "metric": "test.metric"}
    cases = [
        ({**ok, "filter": {"start_ts": now, "end_ts": now - 1000}}, 400, "start_ts"),
        ({**ok, "filter": {"end_ts": now}}, 400, "start_ts"),
        ({**ok, "metric": None}, 400, "metric"),
        ({**ok, "metric": "no.such.metric"}, 404, "no metric named"),
        ({**ok, "filter": {**ok["filter"], "query": "host.name =="}}, 400, "query"),
        ({**ok, "temporal": "sum"}, 400, "temporal"),
        ({**ok, "spatial": "median"}, 400, "spatial"),
        ({**ok, "num_buckets": 0}, 400, "num_buckets"),
        ({**ok, "num_buckets": 10**6}, 400, "num_buckets"),
        (b"{not json", 400, "JSON"),
    ]
    for body, want, needle in cases:
        status, doc = query_status(server, body)
        assert status == want and needle in doc.get("error", ""), (body, status, doc)
    status, doc = query_status(server, ok, project="11111111-1111-4111-8111-111111111111")
    assert status == 404, doc
    status, doc = query_status(server, {"filter": {"start_ts": 5}}, path="metrics/names")
    assert status == 400 and "end_ts" in doc["error"], doc
