"""The HTTP surface of ember-server without an agent: the ingest endpoint
fed with hand-built batches, the flamegraph endpoint, and a clear 4xx for
every kind of wrong input."""

import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from ember_batch import Batch, send_batch, zstd_compress  # noqa: E402
from harness import DEFAULT_PROJECT, Server, check_tree, find, http  # noqa: E402

FG = "/public/api/v1/project/{}/flamegraph/json"


def one_batch(seq, thread="main", value=10, instance="test-agent", project="default"):
    b = Batch(agent_instance=instance, project=project)
    attrs = {"process.executable.name": "myapp", "thread.name": thread, "host.name": "h1"}
    b.add(["main", "compute"], attrs, value=value * 6)
    b.add(["main", "parse"], attrs, value=value * 3)
    b.add(["main", "parse", ("read", "kernel")], attrs, value=value)
    return b.encode(sequence=seq)


def query(server, body, project=DEFAULT_PROJECT):
    return http("POST", server.url + FG.format(project), body,
                {"Content-Type": "application/json"})


def error_of(status_body):
    status, body = status_body
    return status, json.loads(body)["error"]


def test_ingest_and_query(server):
    ans = send_batch(server.url, one_batch(1))
    assert ans["stored"] is True and ans["samples"] == 100
    assert ans["project_id"] == DEFAULT_PROJECT
    # The same batch again (a retry) is recognised and not counted twice.
    ans = send_batch(server.url, one_batch(1))
    assert ans["duplicate"] is True and ans["stored"] is False
    tree = server.flamegraph(synthetic=["executable"])
    check_tree(tree["root"])
    assert tree["total"] == 100
    app = tree["root"]["children"][0]
    assert app["name"] == "myapp" and app["frame_type"] == "synthetic"
    main = find(tree["root"], "main")
    assert [c["name"] for c in main["children"]] == ["compute", "parse"]
    assert find(main, "read")["frame_type"] == "kernel"
    assert find(main, "parse")["self"] == 30 and find(main, "parse")["total"] == 40


def metric_value(server, name):
    st, body = http("GET", server.url + "/metrics")
    assert st == 200
    m = re.search(r"^%s (\d+)$" % re.escape(name), body.decode(), re.M)
    assert m, name
    return int(m.group(1))


def test_ingest_counters_count_each_kind_in_its_unit(server):
    """ember_ingest_samples_total counts on-CPU samples only; off-CPU and
    GPU nanoseconds and allocated bytes have counters of their own."""
    b = Batch(agent_instance="kinds", project="default")
    attrs = {"process.executable.name": "kinds", "host.name": "h1"}
    b.add(["main", "compute"], attrs, value=7)
    b.add(["main", "wait"], attrs, value=3_000_000_000, kind="off_cpu")
    b.add(["main", "kernel"], attrs, value=5_000_000, kind="cuda")
    b.add(["main", "malloc"], attrs, value=4096, kind="alloc")
    before = {n: metric_value(server, n) for n in (
        "ember_ingest_samples_total", "ember_ingest_off_cpu_nanoseconds_total",
        "ember_ingest_cuda_nanoseconds_total", "ember_ingest_alloc_bytes_total")}
    assert send_batch(server.url, b.encode(sequence=1))["stored"] is True
    assert metric_value(server, "ember_ingest_samples_total") - before["ember_ingest_samples_total"] == 7
    assert metric_value(server, "ember_ingest_off_cpu_nanoseconds_total") - \
        before["ember_ingest_off_cpu_nanoseconds_total"] == 3_000_000_000
    assert metric_value(server, "ember_ingest_cuda_nanoseconds_total") - \
        before["ember_ingest_cuda_nanoseconds_total"] == 5_000_000
    assert metric_value(server, "ember_ingest_alloc_bytes_total") - \
        before["ember_ingest_alloc_bytes_total"] == 4096


def test_projects_are_created_by_name(server):
    ans = send_batch(server.url, one_batch(1, project="team-a", instance="a2"))
    pid = ans["project_id"]
    assert pid != DEFAULT_PROJECT
    status, body = http("GET", server.url + "/public/api/v1/projects")
    names = {p["name"]: p["id"] for p in json.loads(body)["projects"]}
    assert names["team-a"] == pid and names["default"] == DEFAULT_PROJECT
    assert server.flamegraph(project=pid)["total"] == 100
    assert server.flamegraph()["total"] == 0


def test_bad_requests_get_clear_4xx(server):
    ok_filter = {"start_ts": 1, "end_ts": 2}
    st, msg = error_of(query(server, b"{not json"))
    assert st == 400 and "not valid JSON" in msg
    st, msg = error_of(query(server, {"filter": {"start_ts": 5, "end_ts": 1}}))
    assert st == 400 and "end_ts" in msg
    st, msg = error_of(query(server, {"filter": {**ok_filter, "query": 'host.name == '}}))
    assert st == 400 and "column" in msg
    st, msg = error_of(query(server, {"filter": {**ok_filter, "event_kind": "gpu"}}))
    assert st == 400 and "event_kind" in msg
    st, msg = error_of(query(server, {"filter": ok_filter, "synthetic_frames": ["x"]}))
    assert st == 400 and "synthetic_frames" in msg
    st, msg = error_of(query(server, {"filter": ok_filter},
                             project="123e4567-e89b-12d3-a456-426614174000"))
    assert st == 404 and "no project" in msg
    st, msg = error_of(query(server, {"filter": ok_filter}, project="not-a-uuid"))
    assert st == 400 and "UUID" in msg
    st, msg = error_of(query(server, b"x" * (2 << 20)))
    assert st == 413
    st, msg = error_of(http("GET", server.url + FG.format(DEFAULT_PROJECT)))
    assert st == 405
    st, msg = error_of(http("GET", server.url + "/public/api/v1/nothing-here"))
    assert st == 404
    # Ingest: not zstd, not a batch, a batch with an index out of range.
    st, msg = error_of(http("POST", server.url + "/ingest/v1/batch", b"hello",
                            {"Content-Encoding": "zstd"}))
    assert st == 400 and "zstd" in msg
    st, msg = error_of(http("POST", server.url + "/ingest/v1/batch", one_batch(1)))
    assert st == 415
    st, msg = error_of(http("POST", server.url + "/ingest/v1/batch",
                            zstd_compress(b"\x08\x01garbage"), {"Content-Encoding": "zstd"}))
    assert st == 400
    b = Batch()
    b.add(["main"], {"thread.name": "t"}, value=1)
    b.samples[0] = (7, 0, 1, 1)  # stack 7 does not exist
    st, msg = error_of(http("POST", server.url + "/ingest/v1/batch",
                            zstd_compress(b.encode(sequence=1)), {"Content-Encoding": "zstd"}))
    assert st == 400 and "samples[0]" in msg
    # A batch from a clock a year off is refused, not kept for ever.
    b = Batch()
    b.add(["main"], {"thread.name": "t"}, value=1)
    year_ago = int(time.time() * 1000) - 365 * 86400000
    st, msg = error_of(http("POST", server.url + "/ingest/v1/batch",
                            zstd_compress(b.encode(sequence=1, start_ms=year_ago,
                                                   end_ms=year_ago + 5000)),
                            {"Content-Encoding": "zstd"}))
    assert st == 422 and "clock" in msg
    st, msg = error_of(http("PUT", server.url + "/ingest/v1/symbols/zz", b"x"))
    assert st == 400
    st, msg = error_of(http("PUT", server.url + "/ingest/v1/symbols/" + "ab" * 16, b"junk"))
    assert st == 400 and "symbol file" in msg
    st, msg = error_of(http("POST", server.url + "/ingest/v1/symbols/missing", b"[]"))
    assert st == 400
    # None of this hurt the server.
    assert server.healthy()
    assert server.flamegraph()["total"] == 0


def test_health_metrics_openapi_ui(server):
    send_batch(server.url, one_batch(1))
    st, body = http("GET", server.url + "/metrics")
    assert st == 200
    text = body.decode()
    assert "ember_ingest_batches_total 1" in text
    assert "ember_store_rows_total 3" in text
    st, body = http("GET", server.url + "/public/api/v1/openapi.json")
    assert st == 200
    doc = json.loads(body)
    assert doc["openapi"].startswith("3.")
    assert "/public/api/v1/project/{project_id}/flamegraph/json" in doc["paths"]
    # Every public route of the server is described, with the method it takes.
    routes = os.path.join(os.path.dirname(__file__), "..", "..", "server", "http", "routes.c")
    with open(routes) as f:
        public = re.findall(r'\{ "(GET|POST|PUT)", "(/public/api/v1/[^"]+)"', f.read())
    assert len(public) >= 9
    for method, path in public:
        assert method.lower() in doc["paths"].get(path, {}), (method, path)
    # and every schema it refers to exists.
    refs = set(re.findall(r'"#/components/schemas/([A-Za-z]+)"', body.decode()))
    assert refs and refs <= set(doc["components"]["schemas"]), refs - set(doc["components"]["schemas"])
    st, body = http("GET", server.url + "/")
    assert st == 200 and b"<canvas" in body.lower() or b"flamegraph" in body.lower()


def test_symbols_missing_and_upload(server):
    fid = "cd" * 16
    st, body = http("POST", server.url + "/ingest/v1/symbols/missing",
                    {"file_ids": [fid, "ef" * 16]})
    assert st == 200 and sorted(json.loads(body)["missing"]) == sorted([fid, "ef" * 16])
    import struct
    strtab = b"\x00do_work\x00"
    # EMSYM002: one segment, rows [0x1000 -> frame 1, 0x1100 -> gap], one frame.
    symfile = (b"EMSYM002" + struct.pack("<IIIIQIIQ", 1, 2, 1, len(strtab), 0x1000, 0, 0, 0) +
               struct.pack("<QQQ", 0x1000, 0x1000, 0x1000) +
               struct.pack("<IIII", 0, 1, 0x100, 0) +
               struct.pack("<IIII", 1, 0xffffffff, 0, 0) + strtab)
    st, _ = http("PUT", server.url + "/ingest/v1/symbols/" + fid + "?name=libw.so", symfile)
    assert st == 201
    st, body = http("POST", server.url + "/ingest/v1/symbols/missing", {"file_ids": [fid]})
    assert json.loads(body)["missing"] == []
    # ...but missing for an asker that could send source lines.
    st, body = http("POST", server.url + "/ingest/v1/symbols/missing",
                    {"file_ids": [fid], "quality": 3})
    assert json.loads(body)["missing"] == [fid]
    # The same again is kept, not stored twice; an unknown project is refused.
    st, body = http("PUT", server.url + "/ingest/v1/symbols/" + fid, symfile)
    assert st == 200 and b"kept" in body
    st, _ = http("PUT", server.url + "/ingest/v1/symbols/" + fid +
                 "?project=123e4567-e89b-12d3-a456-426614174000", symfile)
    assert st == 404


def test_sigkill_during_ingest_loses_nothing_acknowledged(tmp_path):
    server = Server(tmp_path / "data").start()
    acked = {}
    stop = threading.Event()

    def sender():
        seq = 0
        while not stop.is_set():
            seq += 1
            try:
                ans = send_batch(server.url, one_batch(seq, thread=f"b{seq}", value=1),
                                 timeout=5)
                if ans.get("stored"):
                    acked[f"b{seq}"] = 10
            except OSError:
                return  # the server is gone

    t = threading.Thread(target=sender)
    t.start()
    time.sleep(1.5)
    server.stop(signal.SIGKILL)
    stop.set()
    t.join(10)
    assert len(acked) > 10
    server = Server(tmp_path / "data", port=server.port).start()
    tree = server.flamegraph(synthetic=["thread"])
    got = {c["name"]: c["total"] for c in tree["root"]["children"]}
    missing = [k for k in acked if got.get(k) != 10]
    assert not missing, f"acknowledged batches lost after SIGKILL: {missing[:10]}"
    server.stop()
