"""The query endpoints over a known data set: top functions (relative and
absolute CPU), sandwich, diff, top entities, label shares, time series,
raw events, the flamegraph's node limit and search -- each answer checked
against values computed here -- and a clear 4xx for wrong input."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from ember_batch import Batch, send_batch  # noqa: E402
from harness import (API, BLOCK_FLAGS, DEFAULT_PROJECT, Server, check_tree, find, http,  # noqa: E402
                     metric, wait_compacted, wait_until)
from harness import api_post as post  # noqa: E402

HOUR = 3600000
# Two hours ago, on the hour: minute-aligned ranges use per-minute totals.
T0 = (int(time.time() * 1000) // HOUR - 2) * HOUR
BATCHES = 6
HZ = 19

HOSTS = {
    "h1": dict(cpus=16, attrs={"process.executable.name": "api", "k8s.namespace.name": "prod",
                               "k8s.pod.name": "api-1", "thread.name": "worker"},
               stacks=[(["main", "serve", "parse"], 30), (["main", "serve", "compute"], 60),
                       (["main", "gc"], 10)]),
    "h2": dict(cpus=8, attrs={"process.executable.name": "api", "k8s.namespace.name": "prod",
                              "k8s.pod.name": "api-2", "thread.name": "worker"},
               stacks=[(["main", "serve", "parse"], 20),
                       (["main", "serve", "compress", ("deflate", "native", "libz.so.1")], 40)]),
    "h3": dict(cpus=4, attrs={"process.executable.name": "batch", "k8s.namespace.name": "dev",
                              "thread.name": "main"},
               stacks=[(["main", "work", "compute"], 50), (["main", "rec", "rec", "rec"], 10)]),
}
TOTAL = BATCHES * sum(v for h in HOSTS.values() for _, v in h["stacks"])
SECONDS = (BATCHES - 1) * 10 + 10  # rows reach one interval past the last


# Every query runs twice: over the in-memory head, and over compacted
# block files (flushed after a second, then compacted: the hour is over).
@pytest.fixture(scope="module", params=["memory", "blocks"])
def srv(tmp_path_factory, request):
    flags = BLOCK_FLAGS if request.param == "blocks" else ()
    s = Server(tmp_path_factory.mktemp("queries"), None, *flags).start()
    for host, spec in HOSTS.items():
        for i in range(BATCHES):
            b = Batch(agent_instance="agent-" + host, host_cpus=spec["cpus"], sample_rate_hz=HZ)
            attrs = dict(spec["attrs"], **{"host.name": host})
            for frames, value in spec["stacks"]:
                b.add(frames, attrs, value=value)
            start = T0 + i * 10000
            assert send_batch(s.url, b.encode(sequence=i + 1, start_ms=start,
                                              end_ms=start + 10000))["stored"]
    if request.param == "blocks":
        wait_compacted(s)
        assert metric(s, "ember_store_blocks") == 1
    yield s
    s.stop()


def ok(srv, what, body):
    status, ans = post(srv, what, body)
    assert status == 200, ans
    qs = ans["query_stats"] if "query_stats" in ans else ans["comparison_query_stats"]
    assert qs["time_ms"] >= 0 and qs["rows_read"] >= 0 and "bytes_read" in qs
    return ans


def flt(query=None, start=T0, end=T0 + HOUR):
    return {"start_ts": start, "end_ts": end, "event_kind": "on_cpu", "query": query}


def fn(ans, name):
    hits = [f for f in ans["functions"] if f["name"] == name]
    assert len(hits) == 1, (name, [f["name"] for f in ans["functions"]])
    return hits[0]


def cores(v):
    return v / HZ / SECONDS


def test_top_functions_relative_and_absolute(srv):
    ans = ok(srv, "top_functions", {"filter": flt(), "sort": "total", "limit": 50})
    assert ans["total"] == TOTAL and ans["sample_rate_hz"] == HZ
    assert ans["scope"]["seconds"] == SECONDS and ans["scope"]["host_cpus"] == 28
    assert ans["functions"][0]["name"] == "main"
    assert fn(ans, "main")["total"] == TOTAL and fn(ans, "main")["self"] == 0
    compute = fn(ans, "compute")
    assert compute["self"] == compute["total"] == BATCHES * 110
    assert compute["self_cores"] == pytest.approx(cores(BATCHES * 110), rel=1e-5)
    assert compute["self_percent"] == pytest.approx(50.0, rel=1e-5)
    # Recursion counts once per stack in total.
    assert fn(ans, "rec")["total"] == BATCHES * 10 and fn(ans, "rec")["self"] == BATCHES * 10
    assert fn(ans, "serve")["total"] == BATCHES * 150
    # Sorted by self by default.
    ans = ok(srv, "top_functions", {"filter": flt(), "limit": 2})
    assert [f["name"] for f in ans["functions"]] == ["compute", "parse"]
    assert ans["functions_total"] == 9
    # Absolute: cores over the CPUs of the hosts that sent samples.
    ans = ok(srv, "top_functions", {"filter": flt(), "cpu_mode": "absolute"})
    assert fn(ans, "compute")["self_percent"] == pytest.approx(cores(BATCHES * 110) / 28 * 100, rel=1e-5)
    # A filter narrows the functions; relative shares stay of everything.
    ans = ok(srv, "top_functions", {"filter": flt('host.name == "h1"')})
    assert ans["total"] == BATCHES * 100
    assert fn(ans, "compute")["self_percent"] == pytest.approx(60 / 220 * 100, rel=1e-5)
    # Search keeps matching names only.
    ans = ok(srv, "top_functions", {"filter": flt(), "search": "^(parse|gc)$"})
    assert sorted(f["name"] for f in ans["functions"]) == ["gc", "parse"]


def test_sandwich(srv):
    ans = ok(srv, "sandwich", {"filter": flt(), "function": "serve"})
    assert ans["function"]["total"] == BATCHES * 150 and ans["function"]["self"] == 0
    assert ans["function"]["frame_type"] == "native"
    callers, callees = ans["callers"], ans["callees"]
    check_tree(callers)
    check_tree(callees)
    assert callers["total"] == callees["total"] == BATCHES * 150
    assert [c["name"] for c in callers["children"]] == ["main"]
    assert find(callees, "compute")["total"] == BATCHES * 60
    assert find(callees, "parse")["total"] == BATCHES * 50
    assert find(callees, "deflate")["total"] == BATCHES * 40
    # Recursion: from the outermost call, the rest are callees.
    ans = ok(srv, "sandwich", {"filter": flt(), "function": "rec"})
    assert ans["function"]["total"] == BATCHES * 10
    assert find(ans["callees"], "rec")["children"][0]["name"] == "rec"


def test_diff(srv):
    ans = ok(srv, "diff", {"baseline": flt('host.name == "h1"'),
                           "comparison": flt('host.name == "h2"'), "sort": "total"})
    st = {f["name"]: f for f in ans["functions"]}
    assert st["gc"]["status"] == "removed" and st["compute"]["status"] == "removed"
    assert st["deflate"]["status"] == "new" and st["compress"]["status"] == "new"
    assert st["deflate"]["self_change_percent"] is None
    parse = st["parse"]
    assert parse["status"] == "changed"
    assert parse["baseline_total"] == BATCHES * 30 and parse["comparison_total"] == BATCHES * 20
    assert parse["total_cores_change"] == pytest.approx(cores(BATCHES * 20) - cores(BATCHES * 30), rel=1e-5)
    assert parse["total_change_percent"] == pytest.approx(-100 / 3, rel=1e-5)
    assert ans["functions_new"] == 2 and ans["functions_removed"] == 2
    assert "baseline_query_stats" in ans
    # Largest change in cores first.
    changes = [abs(f["total_cores_change"]) for f in ans["functions"]]
    assert changes == sorted(changes, reverse=True)


def test_top_entities(srv):
    ans = ok(srv, "top_entities", {"filter": flt(), "entity": "host"})
    assert [(e["name"], e["total"]) for e in ans["entities"]] == \
        [("h1", 600), ("h2", 360), ("h3", 360)]
    assert ans["entities"][0]["percent"] == pytest.approx(600 / TOTAL * 100, rel=1e-5)
    ans = ok(srv, "top_entities", {"filter": flt(), "entity": "host", "cpu_mode": "absolute"})
    h1 = ans["entities"][0]
    assert h1["cpus"] == 16 and h1["percent"] == pytest.approx(cores(600) / 16 * 100, rel=1e-5)
    ans = ok(srv, "top_entities", {"filter": flt(), "entity": "pod"})
    assert {e["name"]: e["total"] for e in ans["entities"]} == \
        {"api-1": 600, "api-2": 360, "[no pod]": 360}
    ans = ok(srv, "top_entities", {"filter": flt(), "entity": "k8s.namespace.name"})
    assert {e["name"]: e["total"] for e in ans["entities"]} == {"prod": 960, "dev": 360}
    ans = ok(srv, "top_entities", {"filter": flt(), "entity": "shared_object"})
    so = {e["name"]: (e["self"], e["total"]) for e in ans["entities"]}
    assert so["libz.so.1"] == (240, 240) and so["myapp"] == (TOTAL - 240, TOTAL)


def test_labels(srv):
    ans = ok(srv, "labels", {"filter": flt()})
    names = {n["name"]: n for n in ans["names"]}
    assert names["host.name"]["total"] == TOTAL and names["host.name"]["values"] == 3
    assert names["k8s.pod.name"]["percent"] == pytest.approx(960 / TOTAL * 100, rel=1e-5)
    ans = ok(srv, "labels", {"filter": flt('k8s.namespace.name in ["prod"]'), "name": "host"})
    assert ans["name"] == "host.name"
    assert [(v["value"], v["total"]) for v in ans["values"]] == [("h1", 600), ("h2", 360)]


def test_timeseries(srv):
    # Six 10-second buckets: each holds one batch per host.
    ans = ok(srv, "timeseries", {"filter": flt(end=T0 + 60000), "group_by": "host",
                                 "num_buckets": 6})
    series = {s["name"]: s for s in ans["series"]}
    assert series["h1"]["values"] == pytest.approx([100 / HZ / 10] * 6, rel=1e-5)
    assert series["h3"]["total"] == 360
    # An hour in minutes, from the per-minute totals.
    ans = ok(srv, "timeseries", {"filter": flt(), "num_buckets": 60})
    (s,) = ans["series"]
    assert s["name"] == "all" and s["total"] == TOTAL
    assert s["values"][0] == pytest.approx(TOTAL / HZ / 60, rel=1e-5) and s["values"][1] == 0
    # Buckets that are not whole minutes read rows: the same cores.
    ans = ok(srv, "timeseries", {"filter": flt(start=T0 + 5000, end=T0 + 65000),
                                 "group_by": "executable", "num_buckets": 4})
    series = {s["name"]: s for s in ans["series"]}
    # (the batches at T0 + 10 s ... T0 + 50 s: five of the six)
    assert series["api"]["total"] == 800 and series["batch"]["total"] == 300
    assert sum(series["api"]["values"]) == pytest.approx(800 / HZ / 15, rel=1e-5)
    # Groups beyond the limit are summed into [other].
    ans = ok(srv, "timeseries", {"filter": flt(), "group_by": "host", "limit": 1})
    assert [s["name"] for s in ans["series"]] == ["h1", "[other]"]
    assert ans["series"][1]["total"] == 720


def test_events(srv):
    ans = ok(srv, "events", {"filter": flt('host.name == "h3"'), "limit": 3})
    ev = ans["events"]
    assert len(ev) == 3 and [e["ts"] for e in ev] == sorted((e["ts"] for e in ev), reverse=True)
    assert ev[0]["ts"] == T0 + (BATCHES - 1) * 10000
    assert ev[0]["labels"]["host.name"] == "h3"
    assert [f["name"] for f in ev[0]["stack"]][:2] == ["main", "work"] or \
        [f["name"] for f in ev[0]["stack"]][:2] == ["main", "rec"]


def test_ranges_that_cut_series(srv):
    # One batch per host in [T0 + 10 s, T0 + 20 s): every series is cut by
    # the range, so rows are read; parts and groups with nothing in range
    # must add nothing.
    one = sum(v for h in HOSTS.values() for _, v in h["stacks"])
    tree = srv.flamegraph(start_ms=T0 + 10000, end_ms=T0 + 20000, synthetic=["host"])
    assert tree["total"] == one
    assert {c["name"]: c["total"] for c in tree["root"]["children"]} == {"h1": 100, "h2": 60, "h3": 60}
    tree = srv.flamegraph(start_ms=T0 + 10000, end_ms=T0 + 20000, query='host.name == "h2"')
    assert tree["total"] == 60
    ans = ok(srv, "top_functions", {"filter": flt(start=T0 + 10000, end=T0 + 30000)})
    assert ans["total"] == 2 * one and fn(ans, "compute")["self"] == 2 * 110
    assert srv.flamegraph(start_ms=T0 - 60000, end_ms=T0)["total"] == 0


def test_flamegraph_node_limit_and_search(srv):
    # The budget counts the [other] nodes too: root, main, serve, and an
    # [other] under each of main and serve.
    tree = srv.flamegraph(max_nodes=5)
    check_tree(tree["root"])
    assert tree["nodes"] > 5 and tree["nodes_written"] == 5
    root = tree["root"]
    assert root["total"] == TOTAL == sum(c["total"] for c in root["children"])
    main = root["children"][0]
    assert [c["name"] for c in main["children"]] == ["serve", "[other]"]
    assert main["children"][1]["total"] == TOTAL - BATCHES * 150
    assert [c["name"] for c in main["children"][0]["children"]] == ["[other]"]
    tree = srv.flamegraph(max_nodes=3)
    check_tree(tree["root"])
    assert tree["nodes_written"] == 3
    assert [c["name"] for c in tree["root"]["children"][0]["children"]] == ["[other]"]
    status, ans = post(srv, "flamegraph/json", {"filter": flt(), "max_nodes": 1})
    assert status == 400 and "max_nodes" in ans["error"], ans
    # A group-by level: the samples without the attribute say so in a field.
    status, tree = post(srv, "flamegraph/json", {"filter": flt(), "synthetic_frames": ["pod"]})
    assert status == 200, tree
    pods = {c["name"]: c for c in tree["root"]["children"]}
    assert pods["[no pod]"]["absent"] is True and pods["[no pod]"]["total"] == 360, pods.keys()
    assert "absent" not in pods["api-1"]
    tree = srv.flamegraph(search="^deflate$")
    assert tree["total"] == BATCHES * 40
    assert find(tree["root"], "deflate")["total"] == BATCHES * 40
    assert find(tree["root"], "gc") is None


@pytest.mark.parametrize("what", ["flamegraph/json", "top_functions", "sandwich", "diff",
                                  "top_entities", "labels", "timeseries", "events"])
def test_wrong_input_gets_4xx(srv, what):
    def body(f):
        b = {"filter": f, "function": "main", "entity": "host",
             "baseline": f, "comparison": f}
        return b
    status, ans = post(srv, what, body(flt('host.name == ')))
    assert status == 400 and "column" in ans["error"], ans
    status, ans = post(srv, what, body(flt(start=T0, end=T0)))
    assert status == 400 and "end_ts" in ans["error"], ans
    status, ans = post(srv, what, body(flt()), project="0f0f0f0f-0000-4000-8000-000000000000")
    assert status == 404 and "no project" in ans["error"]
    status, ans = post(srv, what, body(flt()), project="not-a-uuid")
    assert status == 400
    status, data = http("POST", srv.url + API.format(DEFAULT_PROJECT, what), b"{" * 10,
                        {"Content-Type": "application/json"})
    assert status == 400 and b"JSON" in data
    status, data = http("POST", srv.url + API.format(DEFAULT_PROJECT, what),
                        b" " * (2 * 1024 * 1024), {"Content-Type": "application/json"})
    assert status == 413


def test_late_data_for_a_closed_hour_waits_before_compaction(tmp_path):
    # Data for an hour that is over is flushed at once but compacted only
    # after --compact-delay, so a trickle of late batches does not rewrite
    # the hour's block again and again.
    for delay, compacted in (("1h", False), ("1s", True)):
        s = Server(tmp_path / delay, None, "--flush-after", "1s", "--compact-delay", delay).start()
        try:
            b = Batch(agent_instance="late", host_cpus=4)
            b.add(["main", "work"], {"host.name": "h1"}, value=7)
            assert send_batch(s.url, b.encode(sequence=1, start_ms=T0, end_ms=T0 + 5000))["stored"]
            wait_until(lambda: metric(s, "ember_store_unflushed_rows") == 0 and
                       metric(s, "ember_store_blocks") == 1, 30, what="the flush")
            if compacted:
                wait_until(lambda: metric(s, "ember_store_compactions_total") == 1, 30,
                           what="the compaction")
            else:
                time.sleep(3)
                assert metric(s, "ember_store_compactions_total") == 0
            assert s.flamegraph()["total"] == 7
        finally:
            s.stop()
