"""GPU metrics end to end: ember-agent with the fake NVML
(build/tests/libfake-nvml.so, tests/unit/fake_nvml.c: two H100s, one in MIG
mode with three MIG devices, NVLink between them, an ECC error and an XID
79 at scripted times) -> POST /ingest/v1/metrics -> metrics.db -> the
metrics API. Every documented hw.gpu.* key arrives with its unit, the MIG
devices are devices of their own (index, UUID, name, parent), each XID (79
on GPU 0, 31 in a MIG device) is one event with its code and meaning at
the time it happened, on its device, and the ECC counter steps from 0 to 1
when the fake says so."""

import json
import os

import pytest

from conftest import require_root
from harness import BUILD, DEFAULT_PROJECT, http, wait_until

FAKE_NVML = os.path.join(BUILD, "tests", "libfake-nvml.so")
ECC_AFTER_MS = 2000
XID_AFTER_MS = 3000
GiB = 1 << 30

# Every key docs/internals/metrics.md documents for NVIDIA GPUs, and its unit.
KEYS = {
    "hw.gpu.utilization": "%",
    "hw.gpu.memory.utilization": "%",
    "hw.gpu.memory.usage": "bytes",
    "hw.gpu.memory.limit": "bytes",
    "hw.gpu.power": "W",
    "hw.gpu.power.limit": "W",
    "hw.gpu.temp": "Cel",
    "hw.gpu.clock.sm": "MHz",
    "hw.gpu.clock.mem": "MHz",
    "hw.gpu.clocks_throttle": "1",
    "hw.gpu.clocks_throttle.reasons": "1",
    "hw.gpu.pcie.tx": "bytes/s",
    "hw.gpu.pcie.rx": "bytes/s",
    "hw.gpu.nvlink.tx": "bytes/s",
    "hw.gpu.nvlink.rx": "bytes/s",
    "hw.gpu.nvlink.errors": "1",
    "hw.gpu.ecc.errors": "1",
    "hw.gpu.retired_pages": "1",
    "hw.gpu.remapped_rows": "1",
    "hw.gpu.remapped_rows.pending": "1",
    "hw.gpu.remapped_rows.failure": "1",
    "hw.gpu.sm.efficiency": "%",
    "hw.gpu.sm.occupancy": "%",
    "hw.gpu.tensor_util": "%",
    "hw.gpu.dram_bw_util": "%",
    "hw.gpu.process.utilization": "%",
    "hw.gpu.process.memory.utilization": "%",
    "hw.gpu.process.memory.usage": "bytes",
    "hw.gpu.xid": "1",
}


def query(server, metric, start_ms, end_ms, q=None, group_by=None, temporal="avg", spatial="sum", buckets=1):
    body = {"filter": {"start_ts": start_ms, "end_ts": end_ms, "query": q}, "metric": metric,
            "group_by": group_by, "temporal": temporal, "spatial": spatial, "num_buckets": buckets}
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/metrics", body,
                        {"Content-Type": "application/json"})
    assert status == 200, f"{metric}: {status} {data!r}"
    return json.loads(data)


def names(server, start_ms, end_ms):
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/metrics/names",
                        {"filter": {"start_ts": start_ms, "end_ts": end_ms}}, {"Content-Type": "application/json"})
    assert status == 200, data
    return {n["name"]: n for n in json.loads(data)["names"]}


def groups(answer):
    """{group: the single bucket's value}."""
    return {s["group"]: s["points"][0][1] for s in answer["series"]}


def test_every_gpu_key_mig_devices_and_the_xid_event(server, agent_factory, monkeypatch):
    require_root()
    assert os.path.exists(FAKE_NVML), "make build/tests/libfake-nvml.so"
    monkeypatch.setenv("FAKE_NVML_ECC_AFTER_MS", str(ECC_AFTER_MS))
    monkeypatch.setenv("FAKE_NVML_XID_AFTER_MS", str(XID_AFTER_MS))
    import time
    t0 = int(time.time() * 1000)
    agent = agent_factory(server.url, "-collect-metrics-interval=1s", f"-nvml-path={FAKE_NVML}",
                          "-on-cpu-sampling-rate=19").start()
    assert f"GPU metrics: NVML from {FAKE_NVML}, 5 device(s)" in agent.output(), agent.output()
    end = lambda: int(time.time() * 1000) + 5000  # noqa: E731
    # Every key, once NVLink and GPM have had two collections and the XID came.
    wait_until(lambda: set(KEYS) <= set(names(server, t0, end())), 30,
               what="every hw.gpu.* key at the server")
    n = names(server, t0, end())
    for key, unit in KEYS.items():
        assert n[key]["unit"] == unit, (key, n[key])
    t1 = end()

    # Values of GPU 0 and the MIG devices as devices.
    mem = groups(query(server, "hw.gpu.memory.utilization", t0, t1, group_by="gpu.index"))
    assert mem == {"0": 25.0, "1": 3.75, "1/mig0": 25.0, "1/mig1": 25.0, "1/mig2": 10.0}, mem
    mig = groups(query(server, "hw.gpu.memory.limit", t0, t1, q='gpu.parent.uuid == "GPU-fake-1"',
                       group_by="gpu.uuid"))
    # (The API answers six significant digits.)
    assert mig == pytest.approx({"MIG-fake-1-0": 40.0 * GiB, "MIG-fake-1-1": 20.0 * GiB, "MIG-fake-1-2": 10.0 * GiB},
                                rel=1e-5), mig
    mig_names = groups(query(server, "hw.gpu.memory.usage", t0, t1, q='gpu.parent.index == "1"', group_by="gpu.name"))
    assert set(mig_names) == {f"NVIDIA H100 80GB HBM3 MIG {p}" for p in ("3g.40gb", "2g.20gb", "1g.10gb")}, mig_names
    util = groups(query(server, "hw.gpu.utilization", t0, t1, group_by="gpu.index"))
    assert util == {"0": 87.0}, util  # a GPU in MIG mode and MIG devices have none
    assert groups(query(server, "hw.gpu.power.limit", t0, t1, group_by="gpu.index")) == {"0": 700.0, "1": 700.0}
    thr = groups(query(server, "hw.gpu.clocks_throttle", t0, t1, q='gpu.index == "0"', group_by="gpu.throttle_reason"))
    assert thr["sw_power_cap"] == 1.0 and thr["sw_thermal_slowdown"] == 1.0 and thr["gpu_idle"] == 0.0, thr
    assert len(thr) == 9, thr
    # NVLink between the two GPUs: link L carries (L+1) GiB/s out.
    tx = query(server, "hw.gpu.nvlink.tx", t0, t1, q='gpu.index == "0" && gpu.nvlink.peer == "1"',
               group_by="gpu.nvlink.link")
    tx = groups(tx)
    assert set(tx) == {"0", "1"}, tx
    assert abs(tx["0"] - GiB) < 0.01 * GiB and abs(tx["1"] - 2 * GiB) < 0.01 * GiB, tx
    errs = groups(query(server, "hw.gpu.nvlink.errors", t0, t1, q='error.type == "replay"', group_by="gpu.nvlink.link",
                        temporal="max"))
    assert errs == {"0": 3.0, "1": 0.0}, errs
    assert groups(query(server, "hw.gpu.sm.occupancy", t0, t1, group_by="gpu.index")) == {"0": 45.5}
    assert groups(query(server, "hw.gpu.dram_bw_util", t0, t1, group_by="gpu.index")) == {"0": 71.0}
    # The agent itself is the fake's compute process.
    procs = groups(query(server, "hw.gpu.process.memory.usage", t0, t1, group_by="process.executable.name",
                         temporal="max"))
    assert procs.get("ember-agent") == pytest.approx(10.0 * GiB, rel=1e-5), procs

    # The ECC error: 0 before its time, 1 after.
    ecc = query(server, "hw.gpu.ecc.errors", t0, t1,
                q='gpu.index == "0" && error.type == "corrected" && gpu.ecc.counter == "volatile"',
                temporal="max", buckets=max(1, (t1 - t0) // 500))
    vals = [v for _, v in ecc["series"][0]["points"]]
    assert vals[0] == 0.0 and vals[-1] == 1.0 and sorted(vals) == vals, vals

    # The XIDs: each one event with its code and meaning at the time the
    # fake sent it, on its device: 79 on GPU 0, 31 in MIG device 1/mig1.
    xid = query(server, "hw.gpu.xid", t0, t1, group_by="gpu.xid.code", buckets=(t1 - t0) // 100, temporal="max")
    assert sorted(s["group"] for s in xid["series"]) == ["31", "79"], xid
    for s in xid["series"]:
        pts = s["points"]
        assert len(pts) == 1 and pts[0][1] == 1.0, pts
        assert t0 + XID_AFTER_MS - 100 <= pts[0][0] <= t0 + XID_AFTER_MS + 15000, (pts, t0)
    meaning = groups(query(server, "hw.gpu.xid", t0, t1, group_by="gpu.xid.meaning", temporal="max"))
    assert meaning == {"GPU has fallen off the bus": 1.0,
                       "GPU memory page fault (an illegal address in an application)": 1.0}, meaning
    dev = groups(query(server, "hw.gpu.xid", t0, t1, group_by="gpu.index", temporal="max", spatial="sum"))
    assert dev == {"0": 1.0, "1/mig1": 1.0}, dev
    on_mig = groups(query(server, "hw.gpu.xid", t0, t1, q='gpu.parent.uuid == "GPU-fake-1"', group_by="gpu.uuid",
                          temporal="max"))
    assert on_mig == {"MIG-fake-1-1": 1.0}, on_mig

if __name__ == "__main__":
    pytest.main([__file__, "-v"])
