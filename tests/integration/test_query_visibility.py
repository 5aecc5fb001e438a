"""Acknowledged samples stay visible to every query, whatever came after
them: a second producer speaking another protocol, restarts (SIGTERM and
SIGKILL), other projects. Both are reproductions of a defect in which the
plain flamegraph (the main view) lost stored samples that top functions,
time series and a grouped flamegraph still showed: a part that selected
nothing folded nothing, so the stack sums carried by the blocks of the
heads before it were dropped (tests/unit/store/test_store_model.c checks every
answer against a reference model over random interleavings)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import require_root
from harness import DEFAULT_PROJECT, ROOT, WORKLOADS, Server, http, wait_until

sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))
sys.path.insert(0, os.path.dirname(__file__))

import test_otlp  # noqa: E402


def project_id(srv, name):
    status, body = http("GET", srv.url + "/public/api/v1/projects")
    assert status == 200, body
    for p in json.loads(body)["projects"]:
        if p["name"] == name:
            return p["id"]
    raise AssertionError(f"no project {name}: {body!r}")


def answers(srv, project, query=None):
    """The total of each view that reads the samples: the plain and the
    grouped flamegraph, top functions' sum of self, the time series."""
    fg = srv.flamegraph(query=query, project=project)["total"]
    grouped = srv.flamegraph(query=query, project=project, synthetic=["executable"])["total"]
    body = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000,
                       "event_kind": "on_cpu", "query": query}, "limit": 1000}
    base = f"{srv.url}/public/api/v1/project/{project}"
    status, data = http("POST", base + "/top_functions", body)
    assert status == 200, data
    fns = sum(f["self"] for f in json.loads(data)["functions"])
    status, data = http("POST", base + "/timeseries", dict(body, num_buckets=10))
    assert status == 200, data
    ts = sum(s["total"] for s in json.loads(data)["series"])
    return {"flamegraph": fg, "grouped": grouped, "top_functions": fns, "timeseries": ts}


def otlp_request(exe, n):
    req = test_otlp.build_request(exe=exe)
    prof = req.resource_profiles[0].scope_profiles[0].profiles[0]
    del prof.samples[:]
    prof.samples.add(stack_index=1, values=[n])
    return req.SerializeToString()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_otlp_projects_across_restarts(tmp_path, sig):
    srv = Server(tmp_path / "data").start()
    try:
        for name in ("A", "B"):
            status, body = http("POST", srv.url + "/v1development/profiles?project=" + name,
                                otlp_request("exe_" + name, 5000),
                                {"Content-Type": "application/x-protobuf"})
            assert status == 200, body
            want = {k: 5000 for k in ("flamegraph", "grouped", "top_functions", "timeseries")}
            assert answers(srv, project_id(srv, name)) == want
            srv.restart(sig)
            for p in ("A", "B")[: ("A", "B").index(name) + 1]:
                pid = project_id(srv, p)
                assert answers(srv, pid) == want, p
                assert answers(srv, pid, f'process.executable.name == "exe_{p}"') == want, p
    finally:
        srv.stop()


def busy(tmp_path, name, seconds):
    """cpu_split under another executable name."""
    exe = tmp_path / name
    shutil.copy(os.path.join(WORKLOADS, "cpu_split"), exe)
    return subprocess.Popen([str(exe), str(seconds)], stdout=subprocess.DEVNULL)


def test_agent_protocols_one_after_the_other(tmp_path, agent_factory):
    """An ember-protocol agent, then an OTLP one: the first one's samples
    keep their totals in every view, before and after a restart."""
    require_root()
    srv = Server(tmp_path / "data").start()
    try:
        wl = busy(tmp_path, "wl_r", 12)
        a = agent_factory(srv.url, "-on-cpu-sampling-rate=99").start()
        wl.wait(timeout=60)
        time.sleep(2)
        a.stop(timeout=20)  # sends what is left
        query = 'process.executable.name == "wl_r"'
        first = answers(srv, DEFAULT_PROJECT, query)
        assert first["flamegraph"] > 300, first
        assert len(set(first.values())) == 1, first

        wl = busy(tmp_path, "wl_s", 15)
        b = agent_factory(srv.url, "-on-cpu-sampling-rate=99", "-ember-protocol=false").start()
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            assert answers(srv, DEFAULT_PROJECT, query) == first
            time.sleep(2)
        wl.wait(timeout=60)
        b.stop(timeout=20)
        wait_until(lambda: srv.flamegraph('process.executable.name == "wl_s"')["total"] > 300,
                   20, what="the OTLP agent's samples")
        assert answers(srv, DEFAULT_PROJECT, query) == first
        srv.restart()
        assert answers(srv, DEFAULT_PROJECT, query) == first
    finally:
        srv.stop()
