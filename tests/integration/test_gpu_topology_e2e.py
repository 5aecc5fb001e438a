"""GPU topology end to end: ember-agent with the fake NVML scripting a
topology (FAKE_NVML_TOPOLOGY: three H100s, GPU 0 on NUMA node 0 near CPU 0,
GPUs 1 and 2 on node 1 near CPU 1, NVLink between GPUs 0 and 1, GPU 2's
NVLinks all down; FAKE_NVML_FEEDER_PID: a real process, pinned here to CPU
0, as GPU 2's compute process) -> POST /ingest/v1/metrics -> metrics.db ->
POST .../gpu/topology: the GPUs, their nodes and near CPUs, each pair's
path (NV2, SYS, NODE), the processes feeding each GPU with the CPUs they
may run on, and the two findings the reference names: the process fed
from the far NUMA node and the GPU pairs over PCIe although both GPUs have
NVLink. Also the dashboard's percentiles over the stored points."""

import json
import os
import subprocess
import time

from conftest import require_root
from harness import BUILD, DEFAULT_PROJECT, http, wait_until

FAKE_NVML = os.path.join(BUILD, "tests", "libfake-nvml.so")


def api(server, path, body, want=200):
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/{path}", body,
                        {"Content-Type": "application/json"})
    assert status == want, f"{path}: {status} {data!r}"
    return json.loads(data)


def topology(server, start_ms, host=None, want=200):
    end = int(time.time() * 1000) + 5000
    return api(server, "gpu/topology", {"filter": {"start_ts": start_ms, "end_ts": end}, "host": host}, want)


def test_topology_and_findings_from_the_fake_nvml(server, agent_factory, monkeypatch):
    require_root()
    assert os.path.exists(FAKE_NVML), "make build/tests/libfake-nvml.so"
    # The feeder: may run only on CPU 0, the node away from GPU 2.
    feeder = subprocess.Popen(["sleep", "120"], preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    try:
        monkeypatch.setenv("FAKE_NVML_TOPOLOGY", "1")
        monkeypatch.setenv("FAKE_NVML_FEEDER_PID", str(feeder.pid))
        monkeypatch.setenv("FAKE_NVML_XID_AFTER_MS", "3600000")
        t0 = int(time.time() * 1000)
        agent = agent_factory(server.url, "-collect-metrics-interval=1s", f"-nvml-path={FAKE_NVML}",
                              "-on-cpu-sampling-rate=19").start()
        assert f"GPU metrics: NVML from {FAKE_NVML}, 6 device(s)" in agent.output(), agent.output()
        wait_until(lambda: len(topology(server, t0).get("findings") or []) >= 3, 30,
                   what="the topology and its findings at the server")
        t = topology(server, t0)
        assert len(t["hosts"]) == 1 and t["host"] == t["hosts"][0], t
        gpus = {g["index"]: g for g in t["gpus"]}
        assert sorted(gpus) == ["0", "1", "2"], t  # GPUs only, not GPU 1's MIG devices
        assert [gpus[i]["numa_node"] for i in "012"] == [0, 1, 1], gpus
        assert [gpus[i]["cpus"] for i in "012"] == ["0", "1", "1"], gpus
        assert gpus["0"]["pci_bus_id"] == "00000000:18:00.0"
        assert (gpus["2"]["nvlink_links"], gpus["2"]["nvlink_active"]) == (18, 0), gpus["2"]
        assert (gpus["0"]["nvlink_links"], gpus["0"]["nvlink_active"]) == (18, 2), gpus["0"]
        assert {n["id"]: n["cpus"] for n in t["numa_nodes"]} == {0: "0", 1: "1"}, t["numa_nodes"]
        links = {(k["a"], k["b"]): (k["path"], k["nvlinks"], k["pcie"]) for k in t["links"]}
        assert links == {("0", "1"): ("NV2", 2, "SYS"), ("0", "2"): ("SYS", 0, "SYS"),
                         ("1", "2"): ("NODE", 0, "NODE")}, links
        fed = {p["pid"]: p for p in gpus["2"]["processes"]}
        assert fed[feeder.pid]["cpus_allowed"] == "0" and fed[feeder.pid]["near"] is False, fed
        assert fed[feeder.pid]["name"] == "sleep" and fed[feeder.pid]["numa_nodes"] == "0", fed
        # The agent itself feeds GPU 0 and may run on its CPU: near.
        assert [p["near"] for p in gpus["0"]["processes"] if p["name"] == "ember-agent"] == [True], gpus["0"]

        numa = [f for f in t["findings"] if f["kind"] == "numa_placement"]
        assert len(numa) == 1, t["findings"]
        assert numa[0]["pid"] == feeder.pid and numa[0]["gpus"] == ["2"], numa
        assert numa[0]["title"] == f"sleep (pid {feeder.pid}) feeds GPU 2 from the far NUMA node", numa
        assert numa[0]["cpus_used"] == "0" and numa[0]["cpus_near"] == "1", numa
        assert "numactl --cpunodebind=1 --membind=1" in numa[0]["fix"], numa
        pcie = sorted((f["gpus"], f["path"]) for f in t["findings"] if f["kind"] == "pcie_fallback")
        assert pcie == [(["0", "2"], "SYS"), (["1", "2"], "NODE")], t["findings"]

        # Unpinned, the feeder is near again: the finding goes with the
        # next collection (the latest one per host is what is answered).
        os.sched_setaffinity(feeder.pid, {0, 1})
        wait_until(lambda: not [f for f in topology(server, t0)["findings"] if f["kind"] == "numa_placement"],
                   30, what="the NUMA finding gone once the feeder may run near GPU 2")
        assert "nope" in topology(server, t0, host="nope", want=404)["error"]

        # Percentiles over the stored points (GPU 0 draws 512.345 W each time).
        end = int(time.time() * 1000) + 5000
        m = api(server, "metrics", {"filter": {"start_ts": t0, "end_ts": end}, "metric": "hw.gpu.power",
                                    "group_by": "gpu.index", "spatial": "avg", "num_buckets": 10,
                                    "percentiles": True})
        pct = {s["group"]: s["percentiles"] for s in m["series"]}
        assert abs(pct["0"]["p50"] - 512.345) < 1e-3 and abs(pct["0"]["p99"] - 512.345) < 1e-3, pct
        assert pct["2"]["p95"] == 300.0 and pct["0"]["points"] >= 2, pct
    finally:
        feeder.kill()
        feeder.wait()
